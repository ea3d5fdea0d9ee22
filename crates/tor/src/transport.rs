//! The decisions of the relay-to-relay transport designs, apart from any socket: how many
//! connections an IMUX channel may hold, which connection to close, which connection a cell
//! goes on, when a Torchestra circuit changes class, and how the receiving side of a channel
//! puts cells that travelled over several connections back in order.
//!
//! Everything here takes plain numbers and returns a decision, so each rule can be tested
//! against the design's published description directly (IMUX: Geddes, Jansen and Hopper,
//! "IMUX: Managing Tor Connections from Two to Infinity, and Beyond", WPES 2014; Torchestra:
//! Gopal and Heninger, "Torchestra: Reducing Interactive Traffic Delays over Tor", WPES 2012);
//! the relay applies the decisions to its connections.

use onionlab_engine::time::{SimTime, NANOS_PER_SEC};
use onionlab_torcore::Cell;

/// Bytes each cell carries on an IMUX channel for its sequence number.
pub const IMUX_SEQ_BYTES: u64 = 8;

/// How long an IMUX opener keeps a channel at the size its peer last allowed (by refusing or
/// closing a connection) before probing for more. IMUX's published connection manager only
/// sizes by the relay's own circuits; both ends size the same channel from different shares,
/// so the opener needs some memory of the peer's answer. Ten manager rounds is our choice.
pub const IMUX_PEER_HOLD: SimTime = 10 * NANOS_PER_SEC;

/// IMUX's `getMaxConns`: how many connections a channel with `nconns` connections and
/// `ncircs` circuits may hold, on a relay with `total_circs` circuits and `open_sockets`
/// sockets, under `ConnLimit * tau`. Never below 1: a channel keeps one connection while it
/// exists. The result may be below `nconns`, which asks for connections to be closed.
pub fn imux_max_conns(
    nconns: u32,
    ncircs: u32,
    total_circs: u32,
    conn_limit: u32,
    tau: f64,
    open_sockets: u32,
) -> u32 {
    if ncircs == 0 || total_circs == 0 {
        return 1;
    }
    let frac = ncircs as f64 / total_circs as f64;
    let total_max = (conn_limit as f64 * tau).floor();
    let left = total_max - open_sockets as f64;
    let max = (frac * total_max)
        .min(nconns as f64 * 2.0)
        .min(nconns as f64 + left);
    max.floor().max(1.0) as u32
}

/// The relay-wide cap on sockets under IMUX, `ConnLimit * tau`.
pub fn imux_socket_cap(conn_limit: u32, tau: f64) -> u32 {
    ((conn_limit as f64 * tau).floor() as u32).max(1)
}

/// What the closing rule needs to know of a connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnAge {
    /// The TCP handshake has completed.
    pub open: bool,
    /// Order of creation (larger is newer).
    pub created: u64,
    /// When a cell last went out on it.
    pub last_used: SimTime,
}

/// Which `n` of `conns` to close, by IMUX's rule: connections not yet open first, newest
/// first among them; then open ones, least recently used first (ties: the older). Writes
/// indices into `out` (cleared first).
pub fn imux_close_order(conns: &[ConnAge], n: usize, out: &mut Vec<usize>) {
    out.clear();
    out.extend(0..conns.len());
    out.sort_by_key(|&i| {
        let c = conns[i];
        if c.open {
            (1u8, c.last_used, c.created)
        } else {
            (0u8, u64::MAX - c.created, 0)
        }
    });
    out.truncate(n);
}

/// IMUX's EWMA mapping: a circuit ranked `rank` (0 = quietest) among `ncircs` circuits goes to
/// the connection whose band of the connection ranking (quietest first) holds the same
/// percentile. `conn_order` lists connection indices from the least to the most loaded.
pub fn imux_ewma_pick<T: Copy>(rank: usize, ncircs: usize, conn_order: &[T]) -> Option<T> {
    if conn_order.is_empty() {
        return None;
    }
    let p = rank as f64 / ncircs.max(1) as f64;
    let band = ((p * conn_order.len() as f64).floor() as usize).min(conn_order.len() - 1);
    Some(conn_order[band])
}

/// The order of IMUX's connection ranking: by decayed count, ties by connection id (a total
/// order, so a ranking does not depend on the order it was built in).
pub fn ranking_order<K: Ord>(a: &(f64, K), b: &(f64, K)) -> std::cmp::Ordering {
    a.0.total_cmp(&b.0).then(a.1.cmp(&b.1))
}

/// Moves one entry of a ranking sorted by [`ranking_order`] from `old` to `new` (the same
/// connection with a new count), keeping it sorted: what one connection's cells change
/// between two scheduler runs. False, changing nothing, if `old` is not in it.
pub fn rerank<K: Ord>(ranking: &mut Vec<(f64, K)>, old: (f64, K), new: (f64, K)) -> bool {
    let Ok(from) = ranking.binary_search_by(|e| ranking_order(e, &old)) else {
        return false;
    };
    ranking.remove(from);
    let to = ranking.partition_point(|e| ranking_order(e, &new).is_lt());
    ranking.insert(to, new);
    true
}

/// IMUX's shortest-queue choice: among connections that may take a cell (`Some(queued)`),
/// the one with the least data queued; ties to the lowest index.
pub fn shortest_queue(queued: impl IntoIterator<Item = Option<u64>>) -> Option<usize> {
    let mut best: Option<(u64, usize)> = None;
    for (i, q) in queued.into_iter().enumerate() {
        if let Some(q) = q {
            if best.is_none_or(|(b, _)| q < b) {
                best = Some((q, i));
            }
        }
    }
    best.map(|(_, i)| i)
}

/// Torchestra: a circuit whose count is below this many cells never turns heavy, however
/// quiet the light connection (our choice: a circuit being built sends a few cells).
pub const TORCHESTRA_MIN_HEAVY_CELLS: f64 = 32.0;

/// Torchestra's classification of a circuit from its EWMA cell rate and the average EWMA per
/// circuit on the light connection: a light circuit turns heavy above `threshold` times the
/// average; a heavy one turns light again once it is no busier than the average (the gap
/// between the two keeps a circuit near the threshold from switching back and forth).
pub fn torchestra_heavy(was_heavy: bool, ewma: f64, light_average: f64, threshold: f64) -> bool {
    if was_heavy {
        ewma > light_average
    } else {
        ewma > threshold * light_average
    }
}

/// The receiving side of a channel whose cells may overtake each other on different
/// connections: per circuit id, cells are handed on in sequence order, and cells that arrive
/// early wait here.
///
/// Expected sequence numbers live with the circuits (the relay passes them in); only early
/// cells are stored, in a short list that is empty whenever the connections deliver in order,
/// so the common case costs nothing.
#[derive(Default, Debug)]
pub struct Reorder {
    early: Vec<(u32, u32, Cell)>,
}

impl Reorder {
    /// A reorder buffer holding no early cell.
    pub const fn new() -> Self {
        Reorder { early: Vec::new() }
    }

    /// A cell `seq` for `circ_id` arrived while `expected` is next: true if it is next (hand it
    /// on now), false if it arrived early and was kept. A cell older than expected is handed
    /// on (it can only be a circuit id the peer reused).
    pub fn arrive(&mut self, circ_id: u32, seq: u32, expected: u32, cell: Cell) -> bool {
        if seq <= expected {
            return true;
        }
        self.early.push((circ_id, seq, cell));
        false
    }

    /// The kept cell of `circ_id` with sequence number `expected`, if it has arrived.
    pub fn take(&mut self, circ_id: u32, expected: u32) -> Option<Cell> {
        let i = self
            .early
            .iter()
            .position(|&(c, s, _)| c == circ_id && s == expected)?;
        Some(self.early.swap_remove(i).2)
    }

    /// Drops the early cells of a circuit id (its circuit is gone).
    pub fn forget(&mut self, circ_id: u32) {
        self.early.retain(|&(c, _, _)| c != circ_id);
    }

    /// Cells waiting for an earlier one.
    pub fn waiting(&self) -> usize {
        self.early.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use onionlab_torcore::CellCommand;

    #[test]
    fn max_conns_follows_the_share_of_circuits_and_doubles_at_most() {
        // No circuits: one connection.
        assert_eq!(imux_max_conns(5, 0, 100, 4096, 0.9, 10), 1);
        assert_eq!(imux_max_conns(5, 3, 0, 4096, 0.9, 10), 1);
        // Half the circuits of the relay: half of 3686 sockets, but at most doubling.
        assert_eq!(imux_max_conns(1, 50, 100, 4096, 0.9, 10), 2);
        assert_eq!(imux_max_conns(1000, 50, 100, 4096, 0.9, 10), 1843);
        // Few sockets left: at most nconns + left, possibly below nconns (close some).
        assert_eq!(imux_max_conns(100, 50, 100, 4096, 0.9, 3680), 106);
        assert_eq!(imux_max_conns(100, 50, 100, 4096, 0.9, 3700), 86);
        // Over the cap: never below one.
        assert_eq!(imux_max_conns(2, 1, 100, 100, 0.9, 500), 1);
    }

    #[test]
    fn reranking_one_connection_agrees_with_sorting_again() {
        use rand::RngExt;
        let mut rng = onionlab_engine::rng::host_rng(7, 0, 0);
        for _ in 0..200 {
            let n = rng.random_range(1..12u32);
            // Few distinct counts, so ties (broken by index) are common.
            let mut ranking: Vec<(f64, u32)> = (0..n)
                .map(|k| (rng.random_range(0..4u32) as f64, k))
                .collect();
            ranking.sort_by(ranking_order);
            let old = ranking[rng.random_range(0..n) as usize];
            let new = (old.0 + rng.random_range(0..3u32) as f64, old.1);
            assert!(rerank(&mut ranking, old, new));
            let mut expected = ranking.clone();
            expected.sort_by(ranking_order);
            assert_eq!(ranking, expected);
            assert!(ranking.contains(&new) && !(new != old && ranking.contains(&old)));
        }
        // An entry that is not there changes nothing.
        let mut ranking = vec![(1.0, 0), (2.0, 1)];
        assert!(!rerank(&mut ranking, (1.5, 0), (3.0, 0)));
        assert_eq!(ranking, vec![(1.0, 0), (2.0, 1)]);
    }

    #[test]
    fn the_socket_cap_is_conn_limit_times_tau() {
        assert_eq!(imux_socket_cap(4096, 0.9), 3686);
        assert_eq!(imux_socket_cap(1, 0.5), 1);
    }

    #[test]
    fn closing_takes_unopened_newest_first_then_least_recently_used() {
        let conns = [
            ConnAge {
                open: true,
                created: 0,
                last_used: 50,
            },
            ConnAge {
                open: false,
                created: 1,
                last_used: 0,
            },
            ConnAge {
                open: true,
                created: 2,
                last_used: 10,
            },
            ConnAge {
                open: false,
                created: 3,
                last_used: 0,
            },
        ];
        let mut out = Vec::new();
        imux_close_order(&conns, 3, &mut out);
        assert_eq!(out, vec![3, 1, 2]);
        imux_close_order(&conns, 9, &mut out);
        assert_eq!(out, vec![3, 1, 2, 0]);
    }

    #[test]
    fn ewma_mapping_sends_quiet_circuits_to_the_least_loaded_connections() {
        // Connections ranked least loaded first: 2, 0, 1.
        let order = [2, 0, 1];
        assert_eq!(imux_ewma_pick(0, 9, &order), Some(2));
        assert_eq!(imux_ewma_pick(2, 9, &order), Some(2));
        assert_eq!(imux_ewma_pick(3, 9, &order), Some(0));
        assert_eq!(imux_ewma_pick(8, 9, &order), Some(1));
        assert_eq!(imux_ewma_pick(0, 1, &order), Some(2));
        assert_eq!(imux_ewma_pick::<usize>(0, 1, &[]), None);
    }

    #[test]
    fn shortest_queue_picks_the_least_queued_usable_connection() {
        assert_eq!(
            shortest_queue([Some(500), None, Some(100), Some(100)]),
            Some(2)
        );
        assert_eq!(shortest_queue([None, None]), None);
        assert_eq!(shortest_queue([Some(0)]), Some(0));
    }

    #[test]
    fn torchestra_switches_with_a_gap() {
        assert!(!torchestra_heavy(false, 14.0, 10.0, 1.5));
        assert!(torchestra_heavy(false, 16.0, 10.0, 1.5));
        assert!(torchestra_heavy(true, 11.0, 10.0, 1.5));
        assert!(!torchestra_heavy(true, 9.0, 10.0, 1.5));
    }

    #[test]
    fn reorder_hands_cells_on_in_sequence() {
        let cell = |n: u16| {
            let mut c = Cell::new(7, CellCommand::Relay);
            c.length = n;
            c
        };
        let mut r = Reorder::default();
        let mut expected = 0;
        let mut delivered = Vec::new();
        for (seq, n) in [(0u32, 0u16), (2, 2), (3, 3), (1, 1), (4, 4)] {
            if r.arrive(7, seq, expected, cell(n)) {
                delivered.push(n);
                expected += 1;
                while let Some(c) = r.take(7, expected) {
                    delivered.push(c.length);
                    expected += 1;
                }
            }
        }
        assert_eq!(delivered, vec![0, 1, 2, 3, 4]);
        assert_eq!(r.waiting(), 0);
        r.arrive(9, 5, 0, cell(5));
        assert_eq!(r.waiting(), 1);
        r.forget(9);
        assert_eq!(r.waiting(), 0);
    }
}
