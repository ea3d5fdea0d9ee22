//! Position weights (`bandwidth-weights`), published or computed as the authorities do.

use crate::consensus::{Relay, RelayClass};

/// Denominator of every position weight (dir-spec `bwweightscale` default).
pub const WEIGHT_SCALE: u32 = 10_000;

/// The consensus position weights, each out of [`WEIGHT_SCALE`].
///
/// Naming follows dir-spec: `W<position><class>`, position g(uard), m(iddle), e(xit); class
/// g = Guard-flagged only, e = Exit-flagged only, d = both, m = neither. Clients multiply a
/// relay's consensus bandwidth by the weight for the position and its class so that the load
/// on guards, middles and exits balances across the network.
#[derive(Clone, Debug, PartialEq)]
pub struct BandwidthWeights {
    /// `Wgg`: guard position, Guard-only relays.
    pub wgg: u32,
    /// `Wgm`: guard position, relays with neither flag.
    pub wgm: u32,
    /// `Wgd`: guard position, Guard+Exit relays.
    pub wgd: u32,
    /// `Wmg`: middle position, Guard-only relays.
    pub wmg: u32,
    /// `Wmm`: middle position, relays with neither flag.
    pub wmm: u32,
    /// `Wme`: middle position, Exit-only relays.
    pub wme: u32,
    /// `Wmd`: middle position, Guard+Exit relays.
    pub wmd: u32,
    /// `Weg`: exit position, Guard-only relays.
    pub weg: u32,
    /// `Wem`: exit position, relays with neither flag.
    pub wem: u32,
    /// `Wee`: exit position, Exit-only relays.
    pub wee: u32,
    /// `Wed`: exit position, Guard+Exit relays.
    pub wed: u32,
    /// Directory-request weights (`Wb*`, `Wdb`, `Web`, `Wgb`, `Wmb`): kept when published so a
    /// consensus can be re-emitted, unused by path selection.
    pub wbd: Option<u32>,
    /// `Wbe`: directory requests, Exit-only relays.
    pub wbe: Option<u32>,
    /// `Wbg`: directory requests, Guard-only relays.
    pub wbg: Option<u32>,
    /// `Wbm`: directory requests, relays with neither flag.
    pub wbm: Option<u32>,
    /// `Wdb`: directory-capable Guard+Exit relays.
    pub wdb: Option<u32>,
    /// `Web`: directory-capable Exit-only relays.
    pub web: Option<u32>,
    /// `Wgb`: directory-capable Guard-only relays.
    pub wgb: Option<u32>,
    /// `Wmb`: directory-capable relays with neither flag.
    pub wmb: Option<u32>,
}

/// Which branch of the dir-spec case analysis [`BandwidthWeights::compute_with_case`] took.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WeightCase {
    /// Neither guards nor exits are scarce (both at least a third of the total).
    Case1,
    /// Both scarce, and the rarer plus the Guard+Exit bandwidth is below the other.
    Case2a,
    /// Both scarce, first solution (Wgg = 1, Wmd = Wgd) satisfied the constraints.
    Case2b1,
    /// Both scarce, fallback solution Wgg = Wee = 1.
    Case2b2,
    /// As 2b2 but the middle share of D went negative (too much middle bandwidth) and was
    /// clamped to zero.
    Case2b3,
    /// One class scarce and, even with all of D, it stays below a third.
    Case3a,
    /// One class scarce but it plus D reaches a third.
    Case3b,
    /// No usable bandwidth at all: every weight is `WEIGHT_SCALE` (selection by plain
    /// bandwidth), since no balancing is meaningful.
    Empty,
}

impl BandwidthWeights {
    /// The weights the live network's consensus published in January 2026, the default for
    /// scenarios that do not bring a consensus.
    pub fn live() -> Self {
        BandwidthWeights {
            wgg: 5875,
            wgm: 5875,
            wgd: 1113,
            wmg: 4125,
            wmm: 10_000,
            wme: 0,
            wmd: 1113,
            weg: 7774,
            wem: 10_000,
            wee: 10_000,
            wed: 7774,
            wbd: None,
            wbe: None,
            wbg: None,
            wbm: None,
            wdb: None,
            web: None,
            wgb: None,
            wmb: None,
        }
    }

    /// Every weight at `WEIGHT_SCALE`: position-blind selection by bandwidth alone.
    pub fn uniform() -> Self {
        let s = WEIGHT_SCALE;
        BandwidthWeights {
            wgg: s,
            wgm: s,
            wgd: s,
            wmg: s,
            wmm: s,
            wme: s,
            wmd: s,
            weg: s,
            wem: s,
            wee: s,
            wed: s,
            wbd: None,
            wbe: None,
            wbg: None,
            wbm: None,
            wdb: None,
            web: None,
            wgb: None,
            wmb: None,
        }
    }

    /// The weights the authorities would publish for these relays (see
    /// [`compute_with_case`](Self::compute_with_case)); for generated networks, which have no
    /// published line.
    pub fn compute(relays: &[Relay]) -> Self {
        Self::compute_with_case(relays).0
    }

    /// dir-spec section 3.8.3 ("Computing Bandwidth Weights", consensus method 10 and later),
    /// all cases: 1, 2a, 2b (with its two fallbacks) and 3a/3b for either scarce class.
    ///
    /// G, M, E, D are the summed consensus bandwidths of usable (Running, Valid) relays that are
    /// Guard only, neither, Exit only, and Guard+Exit, BadExit relays counting as non-exits.
    ///
    /// Deviation from tor: tor publishes no weights when any of G, M, E, D is zero. Generated
    /// networks often lack a class (say, no Guard+Exit relays), so the formulas are applied
    /// anyway with zero divisors treated as "this class has no bandwidth, its weight is moot"
    /// and every weight clamped to `0..=WEIGHT_SCALE`; where all four classes are non-empty the
    /// result is tor's, integer rounding included.
    pub fn compute_with_case(relays: &[Relay]) -> (Self, WeightCase) {
        let (mut g, mut m, mut e, mut d) = (0i128, 0i128, 0i128, 0i128);
        for r in relays.iter().filter(|r| r.flags.is_usable()) {
            let bw = i128::from(r.bandwidth);
            match r.class() {
                RelayClass::GuardOnly => g += bw,
                RelayClass::ExitOnly => e += bw,
                RelayClass::GuardExit => d += bw,
                RelayClass::Middle => m += bw,
            }
        }
        let t = g + m + e + d;
        if t == 0 {
            return (Self::uniform(), WeightCase::Empty);
        }
        let w = i128::from(WEIGHT_SCALE);
        // Integer division as in tor (truncating toward zero); a zero divisor means the class
        // it normalises by is empty, so the weight never multiplies any bandwidth.
        let div = |num: i128, den: i128| if den == 0 { 0 } else { num / den };

        let wgg;
        let wgd;
        let wmg;
        let wme;
        let wmd;
        let wee;
        let wed;
        let case;
        if 3 * e >= t && 3 * g >= t {
            case = WeightCase::Case1;
            wgd = w / 3;
            wed = w / 3;
            wmd = w / 3;
            wee = div(w * (e + g + m), 3 * e);
            wme = w - wee;
            wmg = div(w * (2 * g - e - m), 3 * g);
            wgg = w - wmg;
        } else if 3 * e < t && 3 * g < t {
            let r = e.min(g);
            let s = e.max(g);
            if r + d < s {
                case = WeightCase::Case2a;
                wgg = w;
                wee = w;
                wmg = 0;
                wme = 0;
                wmd = 0;
                if e < g {
                    wed = w;
                    wgd = 0;
                } else {
                    wed = 0;
                    wgd = w;
                }
            } else {
                let b1 = Raw {
                    wee: div(w * (e - g + m), e),
                    wed: div(w * (d - 2 * e + 4 * g - 2 * m), 3 * d),
                    wme: div(w * (g - m), e),
                    wmg: 0,
                    wgg: w,
                    wmd: 0,
                    wgd: 0,
                };
                let b1 = Raw {
                    wmd: (w - b1.wed) / 2,
                    wgd: (w - b1.wed) / 2,
                    ..b1
                };
                let chosen = if b1.check(w, g, m, e, d, t).is_ok() {
                    (b1, WeightCase::Case2b1)
                } else {
                    let wed2 = div(w * (d - 2 * e + g + m), 3 * d);
                    let mut wmd2 = div(w * (d - 2 * m + g + e), 3 * d);
                    let mut c = WeightCase::Case2b2;
                    if wmd2 < 0 {
                        wmd2 = 0;
                        c = WeightCase::Case2b3;
                    }
                    (
                        Raw {
                            wgg: w,
                            wee: w,
                            wed: wed2,
                            wmd: wmd2,
                            wme: 0,
                            wmg: 0,
                            wgd: w - wed2 - wmd2,
                        },
                        c,
                    )
                };
                let raw = chosen.0;
                case = chosen.1;
                wgg = raw.wgg;
                wgd = raw.wgd;
                wmg = raw.wmg;
                wme = raw.wme;
                wmd = raw.wmd;
                wee = raw.wee;
                wed = raw.wed;
            }
        } else {
            let s = e.min(g);
            if 3 * (s + d) < t {
                case = WeightCase::Case3a;
                if g < e {
                    wgg = w;
                    wgd = w;
                    wmd = 0;
                    wed = 0;
                    wmg = 0;
                    wme = if e < m { 0 } else { div(w * (e - m), 2 * e) };
                    wee = w - wme;
                } else {
                    wee = w;
                    wed = w;
                    wmd = 0;
                    wgd = 0;
                    wme = 0;
                    wmg = if g < m { 0 } else { div(w * (g - m), 2 * g) };
                    wgg = w - wmg;
                }
            } else {
                case = WeightCase::Case3b;
                if g < e {
                    wgg = w;
                    wgd = div(w * (d - 2 * g + e + m), 3 * d);
                    wmg = 0;
                    wee = div(w * (e + m), 2 * e);
                    wme = w - wee;
                    wmd = (w - wgd) / 2;
                    wed = (w - wgd) / 2;
                } else {
                    wee = w;
                    wed = div(w * (d - 2 * e + g + m), 3 * d);
                    wme = 0;
                    wgg = div(w * (g + m), 2 * g);
                    wmg = w - wgg;
                    wmd = (w - wed) / 2;
                    wgd = (w - wed) / 2;
                }
            }
        }

        let clamp = |x: i128| x.clamp(0, w) as u32;
        let (wgg, wgd, wmg, wme, wmd, wee, wed) = (
            clamp(wgg),
            clamp(wgd),
            clamp(wmg),
            clamp(wme),
            clamp(wmd),
            clamp(wee),
            clamp(wed),
        );
        // The derived weights tor publishes alongside: Wgm = Wgg, Wem = Wee, Weg = Wed,
        // Wmm = 1, and the directory-request weights.
        let ws = WEIGHT_SCALE;
        let weights = BandwidthWeights {
            wgg,
            wgm: wgg,
            wgd,
            wmg,
            wmm: ws,
            wme,
            wmd,
            weg: wed,
            wem: wee,
            wee,
            wed,
            wbd: Some(wmd),
            wbe: Some(wme),
            wbg: Some(wmg),
            wbm: Some(ws),
            wdb: Some(ws),
            web: Some(ws),
            wgb: Some(ws),
            wmb: Some(ws),
        };
        (weights, case)
    }
}

/// Intermediate signed weights, before clamping, for the case-2b feasibility test.
#[derive(Clone, Copy)]
struct Raw {
    wgg: i128,
    wgd: i128,
    wmg: i128,
    wme: i128,
    wmd: i128,
    wee: i128,
    wed: i128,
}

impl Raw {
    /// tor's acceptance test for a candidate solution: the per-class weights sum to one (within
    /// a margin of 10 out of 10000), each lies in range, and guard, exit and middle positions
    /// receive equal weighted bandwidth (within margin x T / 3).
    fn check(&self, w: i128, g: i128, m: i128, e: i128, d: i128, t: i128) -> Result<(), ()> {
        const MARGIN: i128 = 10;
        let near = |a: i128, b: i128, margin: i128| (a - b).abs() <= margin;
        let sums_ok = near(self.wed + self.wmd + self.wgd, w, MARGIN)
            && near(self.wmg + self.wgg, w, MARGIN)
            && near(self.wme + self.wee, w, MARGIN);
        let in_range = [
            self.wgg, self.wgd, self.wmg, self.wme, self.wmd, self.wed, self.wee,
        ]
        .iter()
        .all(|&x| (0..=w).contains(&x));
        let guard_side = self.wgg * g + self.wgd * d;
        let balanced = near(guard_side, self.wee * e + self.wed * d, MARGIN * t / 3)
            && near(
                guard_side,
                m * w + self.wmd * d + self.wme * e + self.wmg * g,
                MARGIN * t / 3,
            );
        if sums_ok && in_range && balanced {
            Ok(())
        } else {
            Err(())
        }
    }
}
