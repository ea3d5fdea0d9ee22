//! The PrivCount traffic models (Jansen, Traudt and Hopper, "Privacy-Preserving Dynamic
//! Learning of Tor Network Traffic", CCS 2018) and a sampler for them.
//!
//! The models are hidden Markov models in the JSON that PrivCount and its modified tor
//! exchange (`{"stream_model": {...}}` or `{"packet_model": {...}}`): `state_space`,
//! `observation_space`, `start_probability`, `transition_probability` (state to state) and
//! `emission_probability` (state to observation). A walk starts in a state drawn from the start
//! probabilities; each state emits an observation drawn from its emission probabilities, then
//! the walk moves on by its transition probabilities, until a state emits `F` (the end).
//! An emission other than `F` carries `[probability, mu, sigma, lambda]`: the delay from that
//! observation to the next one, in microseconds, is log-normal(mu, sigma) when sigma > 0 and
//! otherwise exponential with rate lambda per microsecond. (tor's `tmodel.c` records each
//! observation with the time until the next one, and scores delays with the log-normal when
//! sigma > 0, else the exponential; tgen, which replays the models, waits the drawn delay
//! after each observation.)
//!
//! - The stream model describes the streams of one exit circuit: `$` is a new stream, `F`
//!   the circuit's end.
//! - The packet model describes one stream: `+` is a packet from the client towards the
//!   server, `-` one from the server towards the client, `F` the stream's end. tor counted a
//!   packet for every 1434 payload bytes ([`PACKET_PAYLOAD_BYTES`]), the last of a burst
//!   possibly shorter.
//!
//! Loading turns every row into a cumulative table, so drawing a state or an observation is a
//! short scan of a few numbers and never allocates.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Payload bytes of one packet observation: tor's `TMODEL_PACKET_BYTE_COUNT`, what the
/// measuring exits counted as one packet.
pub const PACKET_PAYLOAD_BYTES: u64 = 1434;

/// Rows whose probabilities sum this far from 1 are refused: PrivCount writes normalised
/// rows, and a row that is far off was edited by hand or cut short.
const SUM_TOLERANCE: f64 = 1e-3;

/// Packets walked for one stream before the walk is cut: 4 GiB of downloads (the largest
/// transfer the model's request can ask for), which no well-formed model comes near but
/// which keeps a model whose end cannot be reached from walking forever.
pub const MAX_PACKETS_PER_STREAM: u64 = (u32::MAX as u64) / PACKET_PAYLOAD_BYTES + 1;

/// Which of the two models a file must hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum ModelKind {
    /// Streams on a circuit (`stream_model`, observations `$` and `F`).
    Stream,
    /// Packets on a stream (`packet_model`, observations `+`, `-` and `F`).
    Packet,
}

impl ModelKind {
    /// The key the model sits under in the file.
    pub fn key(self) -> &'static str {
        match self {
            ModelKind::Stream => "stream_model",
            ModelKind::Packet => "packet_model",
        }
    }

    fn observations(self) -> &'static [&'static str] {
        match self {
            ModelKind::Stream => &["$", "F"],
            ModelKind::Packet => &["+", "-", "F"],
        }
    }
}

/// What a state emits.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub enum Observation {
    /// `$`: a new stream.
    Stream,
    /// `+`: a packet from the client towards the server.
    ToServer,
    /// `-`: a packet from the server towards the client.
    ToClient,
    /// `F`: the walk ends.
    End,
}

/// The delay from an observation to the next, in microseconds.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub enum Delay {
    /// The delay's natural logarithm (of microseconds) is normally distributed.
    LogNormal {
        /// Mean of the logarithm.
        mu: f64,
        /// Standard deviation of the logarithm; above 0 (a model's 0 means exponential).
        sigma: f64,
    },
    /// Exponentially distributed delay, the model's choice when sigma is 0.
    Exponential {
        /// Rate parameter lambda, per microsecond (the mean delay is `1 / rate` microseconds).
        rate: f64,
    },
    /// `F` ends the walk: nothing follows.
    None,
}

impl Delay {
    /// Draws a delay in microseconds from `u1`, `u2` uniform in [0, 1).
    pub fn sample_us(&self, u1: f64, u2: f64) -> f64 {
        match *self {
            Delay::LogNormal { mu, sigma } => (mu + sigma * standard_normal(u1, u2)).exp(),
            // 1 - u is in (0, 1], so the logarithm is finite.
            Delay::Exponential { rate } => -(1.0 - u1).ln() / rate,
            Delay::None => 0.0,
        }
    }

    /// The probability that a delay is at most `us` microseconds (for tests that compare what
    /// the sampler draws with the model).
    pub fn cdf(&self, us: f64) -> f64 {
        if us <= 0.0 {
            return 0.0;
        }
        match *self {
            Delay::LogNormal { mu, sigma } => {
                0.5 * erfc(-(us.ln() - mu) / (sigma * std::f64::consts::SQRT_2))
            }
            Delay::Exponential { rate } => 1.0 - (-rate * us).exp(),
            Delay::None => 1.0,
        }
    }
}

/// A standard normal draw from two uniforms (Box–Muller), so that the sampler needs nothing
/// beyond the host's uniform RNG stream.
fn standard_normal(u1: f64, u2: f64) -> f64 {
    // 1 - u1 is in (0, 1]: the logarithm is finite.
    (-2.0 * (1.0 - u1).ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

/// The complementary error function (Numerical Recipes' Chebyshev fit, relative error below
/// 1.2e-7), for the log-normal's distribution function.
pub fn erfc(x: f64) -> f64 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let r = t
        * (-z * z - 1.265_512_23
            + t * (1.000_023_68
                + t * (0.374_091_96
                    + t * (0.096_784_18
                        + t * (-0.186_288_06
                            + t * (0.278_868_07
                                + t * (-1.135_203_98
                                    + t * (1.488_515_87
                                        + t * (-0.822_152_23 + t * 0.170_872_77)))))))))
            .exp();
    if x >= 0.0 {
        r
    } else {
        2.0 - r
    }
}

/// One possible emission of a state: what, with what cumulative probability, and the delay.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Emission {
    /// What the state emits with this entry.
    pub observation: Observation,
    /// The row's probabilities summed up to and including this one, divided by the row total.
    pub cumulative: f64,
    /// How long after this observation the next one comes.
    pub delay: Delay,
}

/// A loaded, checked hidden Markov model with cumulative tables.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MarkovModel {
    /// Whether this is a stream model or a packet model, i.e. which observations it may emit.
    pub kind: ModelKind,
    /// State names, in the file's `state_space` order.
    pub states: Vec<String>,
    /// Cumulative start probabilities, one per state.
    start: Vec<f64>,
    /// Every state's transitions, `(next state, cumulative probability)`, concatenated;
    /// state `i` owns `transitions[transition_at[i]..transition_at[i + 1]]`. A state without
    /// transitions ends the walk after its emission.
    transitions: Vec<(u32, f64)>,
    transition_at: Vec<u32>,
    /// Every state's emissions, concatenated likewise.
    emissions: Vec<Emission>,
    emission_at: Vec<u32>,
}

// Every probability and parameter is finite (checked at load), so equality is an equivalence.
impl Eq for MarkovModel {}

/// Picks from a cumulative table with `u` uniform in [0, 1): the first entry whose cumulative
/// value exceeds `u`, or the last (rounding can leave the last just below 1).
fn pick<T>(rows: &[T], u: f64, cumulative: impl Fn(&T) -> f64) -> usize {
    rows.iter()
        .position(|r| u < cumulative(r))
        .unwrap_or(rows.len().saturating_sub(1))
}

impl MarkovModel {
    /// Parses and checks a model file's text. Errors name the JSON field at fault, e.g.
    /// `stream_model.emission_probability.s1Dwell.$: ...`.
    pub fn parse(text: &str, kind: ModelKind) -> Result<MarkovModel, String> {
        let root: Value = serde_json::from_str(text).map_err(|e| format!("not valid JSON: {e}"))?;
        let Some(obj) = root.as_object() else {
            return Err(format!(
                "expected a JSON object with the key \"{}\"",
                kind.key()
            ));
        };
        let Some(model) = obj.get(kind.key()) else {
            // The tmodel-ccs2018 release's `best.fit.json` is a 15 x 15 table keyed "0".."14":
            // the comparison of its models, easily taken for one.
            let hint = if obj.contains_key("0") && obj.contains_key("1") {
                " (this looks like the release's best.fit.json, a table comparing the 15 \
                 models learned, not a model: use privcount-2018-stream or \
                 privcount-2018-packet)"
            } else {
                ""
            };
            let keys: Vec<&str> = obj.keys().map(|k| k.as_str()).take(5).collect();
            return Err(format!(
                "expected the key \"{}\" (a {} model), found {}{hint}",
                kind.key(),
                match kind {
                    ModelKind::Stream => "stream",
                    ModelKind::Packet => "packet",
                },
                if keys.is_empty() {
                    "no keys".to_string()
                } else {
                    format!("keys {}", keys.join(", "))
                }
            ));
        };
        Self::from_value(model, kind)
    }

    fn from_value(model: &Value, kind: ModelKind) -> Result<MarkovModel, String> {
        let root = kind.key();
        let model = model
            .as_object()
            .ok_or_else(|| format!("{root}: expected an object"))?;
        let field = |name: &str| {
            model
                .get(name)
                .ok_or_else(|| format!("{root}.{name}: missing"))
        };
        let states: Vec<String> = field("state_space")?
            .as_array()
            .ok_or_else(|| format!("{root}.state_space: expected a list of state names"))?
            .iter()
            .map(|s| s.as_str().map(str::to_string))
            .collect::<Option<_>>()
            .ok_or_else(|| format!("{root}.state_space: expected a list of state names"))?;
        if states.is_empty() {
            return Err(format!("{root}.state_space: no states"));
        }
        if states.len() > 10_000 {
            return Err(format!(
                "{root}.state_space: {} states, at most 10000",
                states.len()
            ));
        }
        for (i, s) in states.iter().enumerate() {
            if states[..i].contains(s) {
                return Err(format!("{root}.state_space: state {s:?} appears twice"));
            }
        }
        let index = |path: &str, name: &str| {
            states
                .iter()
                .position(|s| s == name)
                .map(|i| i as u32)
                .ok_or_else(|| format!("{path}: no state named {name:?} in state_space"))
        };
        let allowed = kind.observations();
        let observations = field("observation_space")?
            .as_array()
            .ok_or_else(|| format!("{root}.observation_space: expected a list"))?;
        for o in observations {
            match o.as_str() {
                Some(o) if allowed.contains(&o) => {}
                _ => {
                    return Err(format!(
                        "{root}.observation_space: {o} is not an observation of a {} model \
                         (expected {})",
                        kind.key(),
                        allowed.join(", ")
                    ))
                }
            }
        }

        let probability = |path: &str, v: &Value| -> Result<f64, String> {
            match v.as_f64() {
                Some(p) if (0.0..=1.0).contains(&p) => Ok(p),
                _ => Err(format!(
                    "{path}: expected a probability from 0 to 1, found {v}"
                )),
            }
        };
        let object = |path: &str, v: &Value| -> Result<Map<String, Value>, String> {
            v.as_object()
                .cloned()
                .ok_or_else(|| format!("{path}: expected an object"))
        };
        let cumulate = |path: &str, values: &mut [f64]| -> Result<(), String> {
            let total: f64 = values.iter().sum();
            if (total - 1.0).abs() > SUM_TOLERANCE {
                return Err(format!(
                    "{path}: the probabilities sum to {total}, expected 1"
                ));
            }
            let mut acc = 0.0;
            for v in values.iter_mut() {
                acc += *v / total;
                *v = acc;
            }
            Ok(())
        };

        // Start probabilities: states left out start with probability 0.
        let path = format!("{root}.start_probability");
        let mut start = vec![0.0; states.len()];
        for (name, p) in object(&path, field("start_probability")?)? {
            let p_path = format!("{path}.{name}");
            start[index(&p_path, &name)? as usize] = probability(&p_path, &p)?;
        }
        cumulate(&path, &mut start)?;

        // Transitions: a state without a row (or with an empty one) ends the walk.
        let path = format!("{root}.transition_probability");
        let rows = object(&path, field("transition_probability")?)?;
        for name in rows.keys() {
            index(&format!("{path}.{name}"), name)?;
        }
        let mut transitions = Vec::new();
        let mut transition_at = vec![0u32];
        for state in &states {
            let row_path = format!("{path}.{state}");
            if let Some(row) = rows.get(state) {
                let mut next = Vec::new();
                let mut p = Vec::new();
                for (to, v) in object(&row_path, row)? {
                    let to_path = format!("{row_path}.{to}");
                    next.push(index(&to_path, &to)?);
                    p.push(probability(&to_path, &v)?);
                }
                if !p.is_empty() {
                    cumulate(&row_path, &mut p)?;
                }
                transitions.extend(next.into_iter().zip(p));
            }
            transition_at.push(transitions.len() as u32);
        }

        // Emissions: every state must emit something.
        let path = format!("{root}.emission_probability");
        let rows = object(&path, field("emission_probability")?)?;
        for name in rows.keys() {
            index(&format!("{path}.{name}"), name)?;
        }
        let mut emissions = Vec::new();
        let mut emission_at = vec![0u32];
        for state in &states {
            let row_path = format!("{path}.{state}");
            let row = rows
                .get(state)
                .ok_or_else(|| format!("{row_path}: missing (every state emits something)"))?;
            let mut row_emissions = Vec::new();
            let mut p = Vec::new();
            for (obs, params) in object(&row_path, row)? {
                let obs_path = format!("{row_path}.{obs}");
                if !allowed.contains(&obs.as_str()) {
                    return Err(format!(
                        "{obs_path}: {obs:?} is not an observation of a {} model (expected {})",
                        kind.key(),
                        allowed.join(", ")
                    ));
                }
                let list = params
                    .as_array()
                    .ok_or_else(|| format!("{obs_path}: expected a list of numbers"))?;
                let numbers: Vec<f64> = list
                    .iter()
                    .map(|v| v.as_f64().filter(|x| x.is_finite()))
                    .collect::<Option<_>>()
                    .ok_or_else(|| format!("{obs_path}: expected a list of numbers"))?;
                let observation = match obs.as_str() {
                    "$" => Observation::Stream,
                    "+" => Observation::ToServer,
                    "-" => Observation::ToClient,
                    _ => Observation::End,
                };
                let delay = if observation == Observation::End {
                    if numbers.len() != 1 {
                        return Err(format!(
                            "{obs_path}: expected [probability] for the end, found {} numbers",
                            numbers.len()
                        ));
                    }
                    Delay::None
                } else {
                    let [_, mu, sigma, lambda] = numbers[..] else {
                        return Err(format!(
                            "{obs_path}: expected [probability, lognormal mu, lognormal sigma, \
                             exponential lambda], found {} numbers",
                            numbers.len()
                        ));
                    };
                    if sigma < 0.0 || lambda < 0.0 {
                        return Err(format!("{obs_path}: sigma and lambda must not be negative"));
                    }
                    if sigma > 0.0 {
                        if sigma > 20.0 || mu.abs() > 50.0 {
                            return Err(format!(
                                "{obs_path}: lognormal mu {mu} and sigma {sigma} are outside \
                                 |mu| <= 50, sigma <= 20 (delays in microseconds)"
                            ));
                        }
                        Delay::LogNormal { mu, sigma }
                    } else if lambda > 0.0 {
                        Delay::Exponential { rate: lambda }
                    } else if numbers[0] > 0.0 {
                        return Err(format!(
                            "{obs_path}: neither sigma nor lambda is positive, so no delay \
                             can be drawn"
                        ));
                    } else {
                        // Never emitted: any delay will do.
                        Delay::Exponential { rate: 1.0 }
                    }
                };
                p.push(probability(&format!("{obs_path}[0]"), &list[0])?);
                row_emissions.push(Emission {
                    observation,
                    cumulative: 0.0,
                    delay,
                });
            }
            if p.is_empty() {
                return Err(format!("{row_path}: no emissions"));
            }
            cumulate(&row_path, &mut p)?;
            for (e, c) in row_emissions.iter_mut().zip(p) {
                e.cumulative = c;
            }
            emissions.extend(row_emissions);
            emission_at.push(emissions.len() as u32);
        }
        Ok(MarkovModel {
            kind,
            states,
            start,
            transitions,
            transition_at,
            emissions,
            emission_at,
        })
    }

    /// Draws the first state.
    pub fn first_state(&self, u: f64) -> u32 {
        pick(&self.start, u, |c| *c) as u32
    }

    /// Draws what `state` emits.
    pub fn emit(&self, state: u32, u: f64) -> &Emission {
        let s = state as usize;
        let row = &self.emissions[self.emission_at[s] as usize..self.emission_at[s + 1] as usize];
        &row[pick(row, u, |e| e.cumulative)]
    }

    /// Draws the state after `state`; `None` when it has no transitions (the walk ends).
    pub fn next_state(&self, state: u32, u: f64) -> Option<u32> {
        let s = state as usize;
        let row =
            &self.transitions[self.transition_at[s] as usize..self.transition_at[s + 1] as usize];
        if row.is_empty() {
            return None;
        }
        Some(row[pick(row, u, |t| t.1)].0)
    }

    /// The states' emission rows, for tests that compute the model's distributions apart
    /// from the sampler.
    pub fn emissions_of(&self, state: u32) -> &[Emission] {
        let s = state as usize;
        &self.emissions[self.emission_at[s] as usize..self.emission_at[s + 1] as usize]
    }

    /// `(next state, probability)` of each transition of `state` (probabilities, not the
    /// cumulative values the sampler uses).
    pub fn transitions_of(&self, state: u32) -> impl Iterator<Item = (u32, f64)> + '_ {
        let s = state as usize;
        let row =
            &self.transitions[self.transition_at[s] as usize..self.transition_at[s + 1] as usize];
        row.iter()
            .enumerate()
            .map(|(i, &(to, c))| (to, c - if i == 0 { 0.0 } else { row[i - 1].1 }))
    }

    /// Start probability of each state.
    pub fn start_probabilities(&self) -> Vec<f64> {
        self.start
            .iter()
            .enumerate()
            .map(|(i, &c)| c - if i == 0 { 0.0 } else { self.start[i - 1] })
            .collect()
    }
}

/// What one step of a stream-model walk did.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum SessionStep {
    /// The state emitted `$`: a stream starts now, the next observation comes `delay_us`
    /// microseconds later in state `next` (`None`: the state has no transitions, the walk
    /// ends).
    Stream {
        /// Microseconds from this stream's start to the next observation.
        delay_us: f64,
        /// The state index of the next observation; `None` when the walk ends here.
        next: Option<u32>,
    },
    /// The state emitted `F`: the circuit is over.
    End,
}

/// Takes one step of a stream-model walk in `state`, drawing up to four uniforms from
/// `uniform` in a fixed order (emission, the delay's two, transition).
pub fn session_step(
    model: &MarkovModel,
    state: u32,
    mut uniform: impl FnMut() -> f64,
) -> SessionStep {
    let emission = model.emit(state, uniform());
    if emission.observation != Observation::Stream {
        return SessionStep::End;
    }
    let (u1, u2) = (uniform(), uniform());
    let delay_us = emission.delay.sample_us(u1, u2);
    SessionStep::Stream {
        delay_us,
        next: model.next_state(state, uniform()),
    }
}

/// Packets of one stream drawn from a packet model.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StreamPackets {
    /// `+` packets (client to server).
    pub to_server: u64,
    /// `-` packets (server to client).
    pub to_client: u64,
}

/// Walks the packet model once: the packets of one stream in each direction. Each step draws
/// two uniforms from `uniform`; the walk stops at `F`, at a state without transitions, or
/// after [`MAX_PACKETS_PER_STREAM`] packets.
pub fn walk_packets(model: &MarkovModel, mut uniform: impl FnMut() -> f64) -> StreamPackets {
    let mut out = StreamPackets::default();
    let mut state = model.first_state(uniform());
    loop {
        match model.emit(state, uniform()).observation {
            Observation::ToServer => out.to_server += 1,
            Observation::ToClient => out.to_client += 1,
            Observation::End => return out,
            // A stream model given as a packet model is refused at load; a `$` here counts
            // for nothing.
            Observation::Stream => {}
        }
        if out.to_server + out.to_client >= MAX_PACKETS_PER_STREAM {
            return out;
        }
        match model.next_state(state, uniform()) {
            Some(s) => state = s,
            None => return out,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STREAM_INITIAL: &str =
        include_str!("../../../data/workload/privcount-2018-stream-model-initial.json");
    const PACKET_INITIAL: &str =
        include_str!("../../../data/workload/privcount-2018-packet-model-initial.json");

    #[test]
    fn the_shipped_initial_models_load() {
        let s = MarkovModel::parse(STREAM_INITIAL, ModelKind::Stream).unwrap();
        assert_eq!(s.states, ["s0Active", "s1Dwell", "s2End"]);
        assert_eq!(s.emit(0, 0.5).delay, Delay::Exponential { rate: 0.00015 });
        assert_eq!(s.emit(2, 0.5).observation, Observation::End);
        let p = MarkovModel::parse(PACKET_INITIAL, ModelKind::Packet).unwrap();
        assert_eq!(p.states.len(), 27);
        // A stream model is not a packet model.
        assert!(MarkovModel::parse(STREAM_INITIAL, ModelKind::Packet)
            .unwrap_err()
            .contains("packet_model"));
    }

    #[test]
    fn broken_models_are_refused_with_the_field() {
        let cases = [
            ("[]", "expected a JSON object"),
            ("{\"0\": {}, \"1\": {}}", "best.fit.json"),
            (
                &STREAM_INITIAL.replace("\"s2End\": 0.0", "\"s2End\": 0.5"),
                "stream_model.start_probability: the probabilities sum to 1.5",
            ),
            (
                &STREAM_INITIAL.replace("\"s1Dwell\": 0.165", "\"s9\": 0.165"),
                "stream_model.transition_probability.s0Active.s9: no state named \"s9\"",
            ),
            (
                &STREAM_INITIAL.replace("1.36,", "-1.36,"),
                "stream_model.emission_probability.s1Dwell.$: sigma and lambda",
            ),
            (
                &STREAM_INITIAL.replace("0.00015", "0.0"),
                "stream_model.emission_probability.s0Active.$: neither sigma nor lambda",
            ),
            (
                &STREAM_INITIAL.replace("\"F\": [\n                    1.0\n", "\"X\": [1.0"),
                "emission_probability.s2End.X",
            ),
        ];
        for (text, expected) in cases {
            let e = MarkovModel::parse(text, ModelKind::Stream).unwrap_err();
            assert!(e.contains(expected), "{e:?} lacks {expected:?}");
        }
    }

    #[test]
    fn delays_follow_their_distributions() {
        let ln = Delay::LogNormal {
            mu: 2.0,
            sigma: 0.5,
        };
        // The median of a log-normal is e^mu.
        assert!((ln.cdf(2f64.exp()) - 0.5).abs() < 1e-6);
        let ex = Delay::Exponential { rate: 0.5 };
        assert!((ex.cdf(2.0) - (1.0 - (-1f64).exp())).abs() < 1e-12);
        assert!((erfc(0.0) - 1.0).abs() < 1e-7 && (erfc(1.0) - 0.157_299_2).abs() < 1e-6);
    }
}
