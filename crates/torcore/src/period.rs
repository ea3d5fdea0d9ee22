//! Tor's parameters as the network of a given consensus ran them.
//!
//! [`TorParams::default`](crate::TorParams) holds today's live values, which is right for a
//! network of today. A network generated from an older consensus must run as tor ran then,
//! or a comparison with what the live network measured in that period compares two different
//! Tors: in 2019 circuits were paced by fixed SENDME windows, not by congestion control, and
//! clients learned build timeouts with other constants.
//!
//! Two sources settle each value, in this order, as they did for every tor of the time:
//! 1. the consensus's `params` line (tor reads each value there, clamped to its range);
//! 2. where the line is silent, tor's code default in the release the network ran then
//!    ([`TorEra`]), taken from tor's source at the release's tag.
//!
//! [`period_settings`] turns a consensus's `params` and `valid-after` into the `tor:` keys of
//! a scenario, each with where it came from, so a generated scenario says why it runs the
//! parameters it does. Parameters that tor of the period did not have (congestion control
//! before 0.4.7) and parameters the model does not have are not written.

use std::collections::BTreeMap;
use std::fmt;

use crate::params::{format_real, TorParams};

/// The tor releases whose code defaults apply where a consensus's `params` line is silent.
///
/// The boundaries are the dates the releases became stable, so that a consensus is read by
/// the code most of its relays and clients ran.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TorEra {
    /// Tor 0.4.5 and earlier (consensuses valid before 2021-06-14, when 0.4.6.5 became
    /// stable); the defaults below are 0.4.2.5's, unchanged through 0.4.5 for every
    /// parameter here. No congestion control; circuit build timeouts with 3 histogram modes,
    /// a 95% close quantile and a 1.5 s floor.
    Tor045,
    /// Tor 0.4.6 and later: build timeouts with 10 modes, a 99% close quantile and a 10 ms
    /// floor; from 0.4.7 (stable 2022-04-27) congestion control, used when the consensus
    /// sets `cc_alg=2`, with 0.4.7.13's defaults for what the consensus leaves out.
    Tor046,
}

impl TorEra {
    /// The era of a consensus valid after `valid_after` (`YYYY-MM-DD HH:MM:SS`, as the
    /// document writes it). A consensus without the line (one built from a relay list) is
    /// today's network.
    pub fn of(valid_after: Option<&str>) -> TorEra {
        match valid_after {
            // ISO dates order as text.
            Some(t) if t.get(..10).is_some_and(|d| d < "2021-06-14") => TorEra::Tor045,
            _ => TorEra::Tor046,
        }
    }

    /// The release whose code defaults fill in what a consensus leaves out (for
    /// [`TorEra::Tor045`], its defaults held through 0.4.5 for every parameter here).
    pub fn release(self) -> &'static str {
        match self {
            TorEra::Tor045 => "tor 0.4.2.5",
            TorEra::Tor046 => "tor 0.4.7.13",
        }
    }
}

/// A value as a scenario writes it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum SettingValue {
    /// An integer (cells, milliseconds, a count).
    Whole(u64),
    /// A real number (seconds, a fraction).
    Real(f64),
    /// `true` or `false`.
    Flag(bool),
    /// One of a fixed set of words, such as `kist` for `scheduler`.
    Word(&'static str),
}

impl fmt::Display for SettingValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            SettingValue::Whole(v) => write!(f, "{v}"),
            SettingValue::Real(v) => write!(f, "{}", format_real(v)),
            SettingValue::Flag(v) => write!(f, "{v}"),
            SettingValue::Word(w) => f.write_str(w),
        }
    }
}

/// One key of a scenario's `tor:` section, as the period of a consensus sets it.
#[derive(Clone, Debug, PartialEq)]
pub struct PeriodSetting {
    /// The `tor:` key (a [`TorParams`] field).
    pub key: &'static str,
    /// The value the key takes in that period.
    pub value: SettingValue,
    /// Where the value comes from, for the scenario's comment: the consensus parameter, or
    /// the code default of the era's release.
    pub source: String,
}

/// How a consensus parameter maps onto a model parameter.
struct Mapping {
    /// The consensus parameter's name.
    param: &'static str,
    /// The `tor:` key.
    key: &'static str,
    /// Tor's code default in each era (`None`: tor of that era had no such parameter).
    default_045: Option<i64>,
    default_046: i64,
    /// The consensus's integer as the model's value (milliseconds to seconds, percent to a
    /// flag…).
    convert: fn(i64) -> SettingValue,
}

/// tor's `KIST_SCHED_RUN_INTERVAL_DEFAULT` (scheduler.h), 10 ms from 0.3.2 through 0.4.7: the
/// interval where the consensus sets none, and the one KISTLite runs at when it sets 0.
const KIST_SCHED_RUN_INTERVAL_DEFAULT: i64 = 10;

fn whole(v: i64) -> SettingValue {
    SettingValue::Whole(v.max(0) as u64)
}

fn msec_to_s(v: i64) -> SettingValue {
    SettingValue::Real(v as f64 / 1000.0)
}

fn percent_to_fraction(v: i64) -> SettingValue {
    SettingValue::Real(v as f64 / 100.0)
}

fn flag(v: i64) -> SettingValue {
    SettingValue::Flag(v != 0)
}

/// Parameters every era has. Code defaults from tor's source at the era's tag:
/// `KIST_SCHED_RUN_INTERVAL_DEFAULT` (scheduler.h), `RELAY_CIRC_CELL_QUEUE_SIZE_DEFAULT`
/// (relay.c, 50 × 1000), `CMUX_PRIORITY_HALFLIFE_MSEC_DEFAULT` (circuitmux_ewma.c),
/// `DFLT_N_PRIMARY_GUARDS_TO_USE` (entrynodes.h), `CIRCWINDOW_START` (or.h), the
/// `CBT_DEFAULT_*` values (circuitstats.h) and `CONNTIMEOUT_RELAYS_DFLT` (channelpadding.c,
/// an hour since channel padding came in 0.3.1).
const COMMON: &[Mapping] = &[
    Mapping {
        param: "circ_max_cell_queue_size",
        key: "max_circuit_queue_cells",
        default_045: Some(50_000),
        default_046: 50_000,
        convert: whole,
    },
    Mapping {
        param: "CircuitPriorityHalflifeMsec",
        key: "circuit_priority_halflife_s",
        default_045: Some(30_000),
        default_046: 30_000,
        convert: msec_to_s,
    },
    Mapping {
        param: "guard-n-primary-guards-to-use",
        key: "num_primary_guards",
        default_045: Some(1),
        default_046: 1,
        convert: whole,
    },
    Mapping {
        param: "cbtquantile",
        key: "cbt_quantile",
        default_045: Some(80),
        default_046: 80,
        convert: percent_to_fraction,
    },
    Mapping {
        param: "cbtclosequantile",
        key: "cbt_close_quantile",
        default_045: Some(95),
        default_046: 99,
        convert: percent_to_fraction,
    },
    Mapping {
        param: "cbtnummodes",
        key: "cbt_num_xm_modes",
        default_045: Some(3),
        default_046: 10,
        convert: whole,
    },
    Mapping {
        param: "cbtmintimeout",
        key: "cbt_min_timeout_ms",
        default_045: Some(1500),
        default_046: 10,
        convert: whole,
    },
    Mapping {
        param: "cbtinitialtimeout",
        key: "cbt_initial_timeout_s",
        default_045: Some(60_000),
        default_046: 60_000,
        convert: msec_to_s,
    },
    Mapping {
        param: "cbtmincircs",
        key: "cbt_min_circuits_to_observe",
        default_045: Some(100),
        default_046: 100,
        convert: whole,
    },
    Mapping {
        param: "nf_conntimeout_relays",
        key: "relay_channel_idle_timeout_s",
        default_045: Some(3600),
        default_046: 3600,
        convert: whole,
    },
];

/// SENDME windows, used where the period had no congestion control.
const SENDME: &[Mapping] = &[Mapping {
    param: "circwindow",
    key: "circuit_window",
    default_045: Some(1000),
    default_046: 1000,
    convert: whole,
}];

/// Congestion control (proposal 324), used where the consensus sets `cc_alg=2`. Code
/// defaults are tor 0.4.7.13's (congestion_control_common.c, congestion_control_vegas.c,
/// congestion_control_flow.c), where a TLS record holds 31 cells and an outbuf 62.
const VEGAS: &[Mapping] = &[
    Mapping {
        param: "cc_sendme_inc",
        key: "cc_sendme_inc",
        default_045: None,
        default_046: 31,
        convert: whole,
    },
    Mapping {
        param: "cc_cwnd_init",
        key: "cc_cwnd_init",
        default_045: None,
        default_046: 124,
        convert: whole,
    },
    Mapping {
        param: "cc_cwnd_min",
        key: "cc_cwnd_min",
        default_045: None,
        default_046: 62,
        convert: whole,
    },
    Mapping {
        param: "cc_cwnd_max",
        key: "cc_cwnd_max",
        default_045: None,
        default_046: i32::MAX as i64,
        convert: whole,
    },
    Mapping {
        param: "cc_cwnd_inc",
        key: "cc_cwnd_inc",
        default_045: None,
        default_046: 31,
        convert: whole,
    },
    Mapping {
        param: "cc_cwnd_inc_rate",
        key: "cc_cwnd_inc_rate",
        default_045: None,
        default_046: 1,
        convert: whole,
    },
    Mapping {
        param: "cc_cwnd_inc_pct_ss",
        key: "cc_cwnd_inc_pct_ss",
        default_045: None,
        default_046: 100,
        convert: whole,
    },
    Mapping {
        param: "cc_sscap_exit",
        key: "cc_ss_max",
        default_045: None,
        default_046: 500,
        convert: whole,
    },
    Mapping {
        param: "cc_sscap_onion",
        key: "cc_sscap_onion",
        default_045: None,
        default_046: 600,
        convert: whole,
    },
    Mapping {
        param: "cc_ss_max",
        key: "cc_ss_cwnd_max",
        default_045: None,
        default_046: 5000,
        convert: whole,
    },
    Mapping {
        param: "cc_ewma_cwnd_pct",
        key: "cc_ewma_cwnd_pct",
        default_045: None,
        default_046: 50,
        convert: whole,
    },
    Mapping {
        param: "cc_ewma_max",
        key: "cc_ewma_max",
        default_045: None,
        default_046: 10,
        convert: whole,
    },
    Mapping {
        param: "cc_ewma_ss",
        key: "cc_ewma_ss",
        default_045: None,
        default_046: 2,
        convert: whole,
    },
    Mapping {
        param: "cc_rtt_reset_pct",
        key: "cc_rtt_reset_pct",
        default_045: None,
        default_046: 100,
        convert: whole,
    },
    Mapping {
        param: "cc_cwnd_full_gap",
        key: "cc_cwnd_full_gap",
        default_045: None,
        default_046: 1,
        convert: whole,
    },
    Mapping {
        param: "cc_cwnd_full_minpct",
        key: "cc_cwnd_full_minpct",
        default_045: None,
        default_046: 75,
        convert: whole,
    },
    Mapping {
        param: "cc_cwnd_full_per_cwnd",
        key: "cc_cwnd_full_per_cwnd",
        default_045: None,
        default_046: 1,
        convert: flag,
    },
    Mapping {
        param: "cc_vegas_alpha_exit",
        key: "vegas_alpha",
        default_045: None,
        default_046: 124,
        convert: whole,
    },
    Mapping {
        param: "cc_vegas_beta_exit",
        key: "vegas_beta",
        default_045: None,
        default_046: 248,
        convert: whole,
    },
    Mapping {
        param: "cc_vegas_gamma_exit",
        key: "vegas_gamma",
        default_045: None,
        default_046: 186,
        convert: whole,
    },
    Mapping {
        param: "cc_vegas_delta_exit",
        key: "vegas_delta",
        default_045: None,
        default_046: 372,
        convert: whole,
    },
    Mapping {
        param: "cc_vegas_alpha_onion",
        key: "vegas_alpha_onion",
        default_045: None,
        default_046: 186,
        convert: whole,
    },
    Mapping {
        param: "cc_vegas_beta_onion",
        key: "vegas_beta_onion",
        default_045: None,
        default_046: 434,
        convert: whole,
    },
    Mapping {
        param: "cc_vegas_gamma_onion",
        key: "vegas_gamma_onion",
        default_045: None,
        default_046: 310,
        convert: whole,
    },
    Mapping {
        param: "cc_vegas_delta_onion",
        key: "vegas_delta_onion",
        default_045: None,
        default_046: 558,
        convert: whole,
    },
    Mapping {
        param: "cc_xoff_exit",
        key: "xoff_threshold_cells",
        default_045: None,
        default_046: 500,
        convert: whole,
    },
];

/// The `tor:` settings of the period of a consensus with `params` and `valid_after`.
///
/// Consensus values outside the model's range for a key are clamped to it, as tor clamps a
/// consensus parameter to its own range, and the source says so. Keys come in a fixed order
/// (scheduling, flow control, clients), so the same consensus always gives the same text.
pub fn period_settings(
    params: &BTreeMap<String, i64>,
    valid_after: Option<&str>,
) -> Vec<PeriodSetting> {
    let era = TorEra::of(valid_after);
    let mut out = Vec::new();

    // The scheduler: KISTSchedRunInterval=0 tells tor not to use KIST, and tor then takes
    // the next scheduler in its list, KISTLite, at the code's interval.
    let interval = params.get("KISTSchedRunInterval").copied();
    out.push(PeriodSetting {
        key: "scheduler",
        value: SettingValue::Word(if interval == Some(0) {
            "kist_lite"
        } else {
            "kist"
        }),
        source: if interval == Some(0) {
            "KISTSchedRunInterval=0 disables KIST; tor falls back to KISTLite".into()
        } else {
            "tor's first scheduler choice on Linux".into()
        },
    });
    out.push(match interval {
        Some(v) if v > 0 => {
            from_consensus("kist_run_interval_ms", "KISTSchedRunInterval", v, whole)
        }
        _ => PeriodSetting {
            key: "kist_run_interval_ms",
            value: whole(KIST_SCHED_RUN_INTERVAL_DEFAULT),
            source: format!(
                "not in params: {}'s KIST_SCHED_RUN_INTERVAL_DEFAULT",
                era.release()
            ),
        },
    });

    // Flow control: tor before 0.4.7 had none but SENDME windows, and 0.4.7's own default
    // (`CC_ALG_DFLT`) is SENDME too; only `cc_alg=2` turns Vegas on.
    let vegas = params.get("cc_alg") == Some(&2);
    out.push(PeriodSetting {
        key: "flow_control",
        value: SettingValue::Word(if vegas { "vegas" } else { "sendme" }),
        source: match params.get("cc_alg") {
            Some(2) => "cc_alg=2".into(),
            Some(v) => format!(
                "cc_alg={v}: not Vegas, so circuits keep SENDME windows (the model has no \
                 other congestion control)"
            ),
            None => "no cc_alg: fixed SENDME windows (tor's default; tor before 0.4.7 had \
                     nothing else)"
                .into(),
        },
    });
    let flow: &[Mapping] = if vegas { VEGAS } else { SENDME };
    for m in COMMON.iter().chain(flow) {
        let setting = match params.get(m.param) {
            Some(&v) => from_consensus(m.key, m.param, v, m.convert),
            None => {
                let default = match era {
                    TorEra::Tor045 => m.default_045.unwrap_or(m.default_046),
                    TorEra::Tor046 => m.default_046,
                };
                PeriodSetting {
                    key: m.key,
                    value: (m.convert)(default),
                    source: format!("{} not in params: {}'s default", m.param, era.release()),
                }
            }
        };
        out.push(setting);
    }
    for s in &mut out {
        clamp(s);
    }
    out
}

fn from_consensus(
    key: &'static str,
    param: &str,
    v: i64,
    convert: fn(i64) -> SettingValue,
) -> PeriodSetting {
    PeriodSetting {
        key,
        value: convert(v),
        source: format!("{param}={v}"),
    }
}

/// Clamps a numeric setting into the model's range for its key.
fn clamp(s: &mut PeriodSetting) {
    let Some(range) = TorParams::RANGES.iter().find(|r| r.field == s.key) else {
        return;
    };
    let v = match s.value {
        SettingValue::Whole(v) => v as f64,
        SettingValue::Real(v) => v,
        _ => return,
    };
    if v >= range.min && v <= range.max {
        return;
    }
    let c = v.clamp(range.min, range.max);
    s.value = match s.value {
        SettingValue::Whole(_) => SettingValue::Whole(c as u64),
        _ => SettingValue::Real(c),
    };
    s.source = format!(
        "{}, clamped to the model's range ({})",
        s.source,
        range.expected()
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get<'a>(s: &'a [PeriodSetting], key: &str) -> &'a PeriodSetting {
        s.iter()
            .find(|x| x.key == key)
            .unwrap_or_else(|| panic!("no {key}"))
    }

    fn params(line: &str) -> BTreeMap<String, i64> {
        line.split_whitespace()
            .map(|kv| {
                let (k, v) = kv.split_once('=').unwrap();
                (k.to_string(), v.parse().unwrap())
            })
            .collect()
    }

    #[test]
    fn eras_follow_the_valid_after_date() {
        assert_eq!(TorEra::of(Some("2019-12-15 13:00:00")), TorEra::Tor045);
        assert_eq!(TorEra::of(Some("2021-06-13 23:00:00")), TorEra::Tor045);
        assert_eq!(TorEra::of(Some("2021-06-14 00:00:00")), TorEra::Tor046);
        assert_eq!(TorEra::of(Some("2023-06-01 10:00:00")), TorEra::Tor046);
        assert_eq!(TorEra::of(None), TorEra::Tor046);
    }

    /// The 2019 consensus's params line (shipped as consensus-2019-microdesc): no congestion
    /// control, no KIST interval, no queue cap, so tor 0.4.2's defaults fill them in.
    #[test]
    fn a_2019_consensus_runs_sendme_windows_and_tor_0_4_2_defaults() {
        let p = params(
            "CircuitPriorityHalflifeMsec=30000 DoSCircuitCreationEnabled=1 NumDirectoryGuards=3 \
             NumEntryGuards=1 UseOptimisticData=1 cbttestfreq=10 usecreatefast=0",
        );
        let s = period_settings(&p, Some("2019-12-15 13:00:00"));
        assert_eq!(get(&s, "flow_control").value, SettingValue::Word("sendme"));
        assert_eq!(get(&s, "scheduler").value, SettingValue::Word("kist"));
        assert_eq!(
            get(&s, "kist_run_interval_ms").value,
            SettingValue::Whole(10)
        );
        assert_eq!(
            get(&s, "max_circuit_queue_cells").value,
            SettingValue::Whole(50_000)
        );
        assert_eq!(
            get(&s, "circuit_priority_halflife_s").value,
            SettingValue::Real(30.0)
        );
        assert!(get(&s, "circuit_priority_halflife_s")
            .source
            .starts_with("CircuitPriority"));
        assert_eq!(get(&s, "num_primary_guards").value, SettingValue::Whole(1));
        assert_eq!(
            get(&s, "relay_channel_idle_timeout_s").value,
            SettingValue::Whole(3600)
        );
        assert_eq!(get(&s, "cbt_num_xm_modes").value, SettingValue::Whole(3));
        assert_eq!(
            get(&s, "cbt_close_quantile").value,
            SettingValue::Real(0.95)
        );
        assert_eq!(
            get(&s, "cbt_min_timeout_ms").value,
            SettingValue::Whole(1500)
        );
        assert_eq!(get(&s, "circuit_window").value, SettingValue::Whole(1000));
        assert!(s
            .iter()
            .all(|x| !x.key.starts_with("cc_") && !x.key.starts_with("vegas")));
    }

    /// The 2023 consensus (consensus-2023): Vegas with the values its params line sets, and
    /// 0.4.7.13's defaults for the rest.
    #[test]
    fn a_2023_consensus_runs_vegas_with_its_own_values() {
        let p = params(
            "CircuitPriorityHalflifeMsec=30000 KISTSchedRunInterval=2 cc_alg=2 \
             cc_cwnd_full_gap=4 cc_cwnd_full_minpct=25 cc_cwnd_inc=1 cc_cwnd_inc_rate=31 \
             cc_cwnd_min=124 cc_sscap_exit=600 cc_sscap_onion=475 cc_vegas_alpha_exit=186 \
             cc_vegas_beta_onion=372 cc_vegas_delta_exit=310 cc_vegas_delta_onion=434 \
             cc_vegas_gamma_onion=248 circ_max_cell_queue_size=1250 \
             guard-n-primary-guards-to-use=2",
        );
        let s = period_settings(&p, Some("2023-06-01 10:00:00"));
        let whole_of = |k| get(&s, k).value;
        assert_eq!(whole_of("flow_control"), SettingValue::Word("vegas"));
        assert_eq!(whole_of("kist_run_interval_ms"), SettingValue::Whole(2));
        assert_eq!(
            whole_of("max_circuit_queue_cells"),
            SettingValue::Whole(1250)
        );
        assert_eq!(whole_of("num_primary_guards"), SettingValue::Whole(2));
        assert_eq!(whole_of("cc_cwnd_min"), SettingValue::Whole(124));
        assert_eq!(whole_of("cc_ss_max"), SettingValue::Whole(600));
        assert_eq!(whole_of("vegas_alpha"), SettingValue::Whole(186));
        assert_eq!(whole_of("vegas_delta"), SettingValue::Whole(310));
        // Not in the line: 0.4.7.13's 4 and 3 outbufs of 62 cells.
        assert_eq!(whole_of("vegas_beta"), SettingValue::Whole(248));
        assert_eq!(whole_of("vegas_gamma"), SettingValue::Whole(186));
        assert_eq!(whole_of("cc_cwnd_init"), SettingValue::Whole(124));
        assert_eq!(whole_of("cbt_num_xm_modes"), SettingValue::Whole(10));
        assert_eq!(whole_of("cc_cwnd_full_per_cwnd"), SettingValue::Flag(true));
        assert!(s.iter().all(|x| x.key != "circuit_window"));
    }

    #[test]
    fn a_disabled_kist_falls_back_to_kist_lite_and_out_of_range_values_are_clamped() {
        let p = params("KISTSchedRunInterval=0 cc_alg=2 cc_vegas_alpha_exit=5000");
        let s = period_settings(&p, Some("2024-01-01 00:00:00"));
        assert_eq!(get(&s, "scheduler").value, SettingValue::Word("kist_lite"));
        assert_eq!(
            get(&s, "kist_run_interval_ms").value,
            SettingValue::Whole(10)
        );
        let alpha = get(&s, "vegas_alpha");
        assert_eq!(alpha.value, SettingValue::Whole(1000));
        assert!(alpha.source.contains("clamped"), "{}", alpha.source);
    }

    /// Every key written is a parameter the model has, and every value lies in its range.
    #[test]
    fn every_setting_names_a_model_parameter_within_its_range() {
        for (line, date) in [
            ("", "2019-12-15 13:00:00"),
            ("cc_alg=2", "2023-06-01 10:00:00"),
            ("cc_alg=0", "2023-06-01 10:00:00"),
        ] {
            let s = period_settings(&params(line), Some(date));
            let json = serde_json::to_value(TorParams::default()).unwrap();
            for x in &s {
                assert!(json.get(x.key).is_some(), "{} is not a tor: key", x.key);
                if let Some(r) = TorParams::RANGES.iter().find(|r| r.field == x.key) {
                    let v = match x.value {
                        SettingValue::Whole(v) => v as f64,
                        SettingValue::Real(v) => v,
                        _ => continue,
                    };
                    assert!(v >= r.min && v <= r.max, "{} = {v} out of range", x.key);
                }
            }
        }
    }
}
