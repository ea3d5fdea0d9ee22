//! Directory traffic: what each user's tor fetches to keep a live view of the network.
//!
//! A running tor client holds a microdescriptor consensus and fetches the next one on tor's
//! client schedule (`update_consensus_networkstatus_fetch_time_impl`): with the live network's
//! hourly consensus (fresh for one hour, valid for three), at a time drawn uniformly from
//! `[fresh_until + 45 min, fresh_until + 45 min + 3,937 s)` of the consensus it holds, which
//! leaves the directory caches the first three quarters of an hour to fetch it first. It asks
//! its directory guard (the first of its primary guards), over a one-hop circuit and a
//! BEGIN_DIR stream, for a diff from the consensus it holds, then for the microdescriptors the
//! new consensus lists that it lacks, split as tor splits them (three requests where each
//! then holds at least 32, fewer where it would not, and none over 500).
//!
//! The sizes are the live network's of December 2019, measured from two consensuses 16 hours
//! apart and the microdescriptors a tor 0.4.1 client held then, compressed as a cache served
//! them (`scripts/directory-sizes.py`, which documents its input and the method): a diff
//! spanning `k` hours is taken as the 16-hour diff's compressed bytes in proportion to the lines
//! expected to change in `k` hours (r lines change when a relay republishes, every 18 hours;
//! the other lines at the rates seen over 16 hours; relays join and leave at the rates seen).
//! Every scenario's users fetch what a user of that network fetched, whatever relays the
//! scenario has: a generated network's users stand for users of the whole network.
//!
//! Simulated time 0 is the start of a consensus hour. Every user starts mid-way through the
//! schedule: its state is drawn by running the schedule from two days before, so that fetches
//! arrive at the steady rate from the first second (no user bootstraps from nothing).
//!
//! Left out: clients that bootstrap (a full consensus of 519 KB and every microdescriptor),
//! caches' own fetches from the authorities, relays' descriptor uploads, and the minutes at
//! the start of an hour when a cache does not hold the newest consensus yet.

use onionlab_engine::time::{secs, SimDuration, SimTime, NANOS_PER_SEC};
use onionlab_engine::HostRng;
use rand::RngExt;

/// The consensus interval (`fresh-until` minus `valid-after`): one hour.
const INTERVAL_S: i64 = 3600;

/// tor's client schedule, from the consensus's `valid-after`: fetching starts three quarters
/// of an interval after `fresh-until` ...
const FETCH_START_S: i64 = INTERVAL_S + INTERVAL_S * 3 / 4;

/// ... and spreads over seven eighths of what is left until `valid-until` (three intervals
/// after `valid-after`), in whole seconds as tor computes it.
const FETCH_SPREAD_S: i64 = (3 * INTERVAL_S - FETCH_START_S) * 7 / 8;

/// Compressed bytes of a consensus diff spanning 1, 2 and 3 hours (xz preset 6, as tor's
/// HIGH_COMPRESSION LZMA; `scripts/directory-sizes.py`).
pub const DIFF_BYTES: [u64; 3] = [24_379, 47_339, 69_024];

/// Microdescriptors new to the network per hour (382 in 16 hours).
pub const MICRODESCS_PER_HOUR: f64 = 382.0 / 16.0;

/// Bytes of one microdescriptor as a cache streams it (zstd level 9, tor's
/// HIGH_COMPRESSION; 560 bytes uncompressed, mostly key material).
pub const MICRODESC_BYTES: u64 = 215;

/// An HTTP/1.0 response's status line and headers from a directory cache (Date,
/// Content-Type, X-Your-Address-Is, Content-Encoding, Expires): an estimate from the format.
pub const RESPONSE_HEADER_BYTES: u64 = 160;

/// tor's microdescriptor request splitting for a client (`launch_descriptor_downloads`,
/// `max_dl_per_request` when tunnelling): at least this many per request ...
const MIN_PER_REQUEST: u64 = 32;
/// ... in at least this many requests ...
const MIN_REQUESTS: u64 = 3;
/// ... and at most this many per request.
const MAX_PER_REQUEST: u64 = 500;

/// How long a fetch that failed waits before the user tries again (tor backs off from its own
/// schedule; the model retries once a minute).
pub const RETRY: SimDuration = secs(60);

/// How long one directory request may take before the client gives up on it (tor's
/// `DIR_CONN_MAX_STALL`).
pub const REQUEST_TIMEOUT: SimDuration = secs(5 * 60);

/// The compressed bytes of a diff spanning `hours` consensus intervals (beyond three, growing
/// by the third hour's increment).
pub fn diff_bytes(hours: u32) -> u64 {
    match hours {
        0 => 0,
        1..=3 => DIFF_BYTES[hours as usize - 1],
        _ => DIFF_BYTES[2] + u64::from(hours - 3) * (DIFF_BYTES[2] - DIFF_BYTES[1]),
    }
}

/// How many microdescriptors each request of a fetch of `n` asks for, as tor splits them.
pub fn microdesc_requests(n: u64) -> impl Iterator<Item = u64> {
    let per = n
        .div_ceil(MIN_REQUESTS)
        .min(MAX_PER_REQUEST)
        .max(MIN_PER_REQUEST.min(MAX_PER_REQUEST));
    let requests = n.div_ceil(per);
    (0..requests).map(move |i| per.min(n - i * per))
}

/// The time of the next fetch for a user holding the consensus of hour `held` (its
/// `valid-after`, in hours from time 0), in seconds.
fn next_fetch_s(held: i64, rng: &mut HostRng) -> i64 {
    held * INTERVAL_S + FETCH_START_S + rng.random_range(0..FETCH_SPREAD_S)
}

/// What a user's tor is doing about its directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Holds a live consensus; fetches the next at `next`.
    Waiting,
    /// Fetching the consensus diff.
    Consensus,
    /// Fetching microdescriptors: this many requests are still out.
    Microdescs(u8),
}

#[derive(Clone, Copy, Debug)]
struct UserDirectory {
    phase: Phase,
    /// The hour whose consensus the user holds.
    held: i64,
    /// When it fetches next (seconds), while `Waiting`.
    next_s: i64,
    /// The hour of the consensus being fetched.
    fetching: i64,
}

/// One directory request a client must send: the response's size, and for whom.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DirRequest {
    /// The user (of those the client host stands for) whose fetch the request is part of.
    pub user: u32,
    /// Bytes of the response the directory guard sends, headers included.
    pub bytes: u64,
}

/// Counts of a client's directory traffic.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DirectoryStats {
    /// Users whose fetches these are.
    pub users: u64,
    /// Consensus fetches completed (with their microdescriptors).
    pub fetches: u64,
    /// Directory requests that failed (each is retried as a whole fetch).
    pub failures: u64,
    /// Response bytes received, headers included.
    pub bytes: u64,
}

/// The directory schedule of a client host's users, sans-IO: the client asks what is due,
/// sends the requests it is given, and reports each one's end.
pub struct DirectoryClient {
    users: Vec<UserDirectory>,
    rng: HostRng,
    /// What the users' fetches have amounted to so far.
    pub stats: DirectoryStats,
}

impl DirectoryClient {
    /// `users` users, each in a state drawn from the schedule's steady state.
    pub fn new(users: u32, mut rng: HostRng) -> Self {
        let users: Vec<UserDirectory> = (0..users)
            .map(|_| {
                // Two days of fetches before time 0 forget where the walk started.
                let mut held = -48;
                let mut next_s = next_fetch_s(held, &mut rng);
                while next_s < 0 {
                    held = next_s.div_euclid(INTERVAL_S);
                    next_s = next_fetch_s(held, &mut rng);
                }
                UserDirectory {
                    phase: Phase::Waiting,
                    held,
                    next_s,
                    fetching: held,
                }
            })
            .collect();
        DirectoryClient {
            stats: DirectoryStats {
                users: users.len() as u64,
                ..DirectoryStats::default()
            },
            users,
            rng,
        }
    }

    /// When the next fetch is due, if any user is waiting for one.
    pub fn next_due(&self) -> Option<SimTime> {
        self.users
            .iter()
            .filter(|u| u.phase == Phase::Waiting)
            .map(|u| u.next_s)
            .min()
            .map(|s| secs(s.max(0) as u64))
    }

    /// The consensus request of a user whose fetch is due at `now`, if any: the diff from the
    /// consensus it holds to the newest one (the cache is taken to hold the current hour's).
    pub fn take_due(&mut self, now: SimTime) -> Option<DirRequest> {
        let now_s = (now / NANOS_PER_SEC) as i64;
        let (user, u) = self
            .users
            .iter_mut()
            .enumerate()
            .find(|(_, u)| u.phase == Phase::Waiting && u.next_s <= now_s)?;
        u.phase = Phase::Consensus;
        u.fetching = now_s.div_euclid(INTERVAL_S);
        let hours = (u.fetching - u.held).clamp(1, u32::MAX as i64) as u32;
        Some(DirRequest {
            user: user as u32,
            bytes: RESPONSE_HEADER_BYTES + diff_bytes(hours),
        })
    }

    /// A user's consensus arrived (`bytes` of response): the microdescriptor requests that
    /// follow. None when no microdescriptor is new, and the fetch is complete.
    pub fn consensus_done(&mut self, user: u32, bytes: u64) -> Vec<DirRequest> {
        self.stats.bytes += bytes;
        let u = &mut self.users[user as usize];
        let expected = MICRODESCS_PER_HOUR * (u.fetching - u.held).max(1) as f64;
        let mut n = expected.floor() as u64;
        if self.rng.random::<f64>() < expected - expected.floor() {
            n += 1;
        }
        let requests: Vec<DirRequest> = microdesc_requests(n)
            .map(|k| DirRequest {
                user,
                bytes: RESPONSE_HEADER_BYTES + k * MICRODESC_BYTES,
            })
            .collect();
        if requests.is_empty() {
            self.complete(user);
        } else {
            self.users[user as usize].phase = Phase::Microdescs(requests.len() as u8);
        }
        requests
    }

    /// A microdescriptor response arrived.
    pub fn microdescs_done(&mut self, user: u32, bytes: u64) {
        self.stats.bytes += bytes;
        let u = &mut self.users[user as usize];
        if let Phase::Microdescs(left) = u.phase {
            if left <= 1 {
                self.complete(user);
            } else {
                u.phase = Phase::Microdescs(left - 1);
            }
        }
    }

    /// A request of a user's fetch failed: the fetch is tried again after [`RETRY`] (the
    /// user's other requests still out are abandoned).
    pub fn failed(&mut self, user: u32, now: SimTime) {
        let u = &mut self.users[user as usize];
        if u.phase == Phase::Waiting {
            return;
        }
        self.stats.failures += 1;
        u.phase = Phase::Waiting;
        u.next_s = ((now + RETRY) / NANOS_PER_SEC) as i64;
    }

    /// Whether the user's fetch has a request out (a response for it is still wanted).
    pub fn fetching(&self, user: u32) -> bool {
        self.users[user as usize].phase != Phase::Waiting
    }

    fn complete(&mut self, user: u32) {
        self.stats.fetches += 1;
        let u = &mut self.users[user as usize];
        u.held = u.fetching;
        u.phase = Phase::Waiting;
        u.next_s = next_fetch_s(u.held, &mut self.rng);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_schedule_is_tors_for_an_hourly_consensus() {
        // fresh_until + 3/4 interval = 1 h 45 min after valid-after; 7/8 of the 75 minutes
        // to valid-until, truncated to whole seconds.
        assert_eq!(FETCH_START_S, 6300);
        assert_eq!(FETCH_SPREAD_S, 3937);
    }

    #[test]
    fn microdescriptor_requests_split_as_tors() {
        assert_eq!(microdesc_requests(0).count(), 0);
        // Fewer than 32 per request is never asked for: 24 go in one request, 48 in two.
        assert_eq!(microdesc_requests(24).collect::<Vec<_>>(), vec![24]);
        assert_eq!(microdesc_requests(48).collect::<Vec<_>>(), vec![32, 16]);
        // Three requests where each gets 32 or more; 500 at most each.
        assert_eq!(microdesc_requests(300).collect::<Vec<_>>(), vec![100; 3]);
        assert_eq!(
            microdesc_requests(2000).collect::<Vec<_>>(),
            vec![500, 500, 500, 500]
        );
        assert_eq!(microdesc_requests(1001).sum::<u64>(), 1001);
    }

    #[test]
    fn every_user_starts_holding_a_live_consensus_and_fetches_within_tors_window() {
        let d = DirectoryClient::new(2000, onionlab_engine::host_rng(3, 1, 9));
        for u in &d.users {
            // Its next fetch is after time 0 and inside its consensus's fetch window.
            assert!(u.next_s >= 0);
            let from = u.held * INTERVAL_S + FETCH_START_S;
            assert!((from..from + FETCH_SPREAD_S).contains(&u.next_s), "{u:?}");
        }
        // Users at the steady state: a fetch falls in every part of the first hour. The share
        // due within its first ten minutes is 600 s over the 6,377 s mean interval.
        let early = d.users.iter().filter(|u| u.next_s < 600).count() as f64;
        assert!((early / 2000.0 - 600.0 / 6377.0).abs() < 0.025, "{early}");
    }

    #[test]
    fn a_fetch_asks_for_the_diff_since_the_held_consensus_then_the_new_microdescriptors() {
        let mut d = DirectoryClient::new(1, onionlab_engine::host_rng(5, 2, 9));
        let due = d.next_due().unwrap();
        assert!(d.take_due(due - secs(1)).is_none());
        let r = d.take_due(due).unwrap();
        let hours = (due / NANOS_PER_SEC / 3600) as i64 - d.users[0].held;
        assert!(hours == 1 || hours == 2, "{hours}");
        assert_eq!(
            r.bytes,
            RESPONSE_HEADER_BYTES + DIFF_BYTES[hours as usize - 1]
        );
        assert!(d.next_due().is_none(), "one fetch at a time per user");
        let md = d.consensus_done(0, r.bytes);
        let n: u64 = md
            .iter()
            .map(|m| (m.bytes - RESPONSE_HEADER_BYTES) / MICRODESC_BYTES)
            .sum();
        let expected = MICRODESCS_PER_HOUR * hours as f64;
        assert!((n as f64 - expected).abs() < 1.0, "{n} vs {expected}");
        for m in &md {
            d.microdescs_done(0, m.bytes);
        }
        assert_eq!(d.stats.fetches, 1);
        assert_eq!(
            d.stats.bytes,
            r.bytes + md.iter().map(|m| m.bytes).sum::<u64>()
        );
        // The next fetch follows from the consensus just fetched.
        let next = d.next_due().unwrap() / NANOS_PER_SEC;
        let from = (due / NANOS_PER_SEC / 3600) as i64 * 3600 + 6300;
        assert!((from..from + 3937).contains(&(next as i64)));
    }

    #[test]
    fn a_failed_fetch_is_tried_again_a_minute_later() {
        let mut d = DirectoryClient::new(1, onionlab_engine::host_rng(5, 3, 9));
        let due = d.next_due().unwrap();
        d.take_due(due).unwrap();
        d.failed(0, due + secs(30));
        assert_eq!(d.stats.failures, 1);
        assert_eq!(d.next_due(), Some(due + secs(90)));
        assert!(!d.fetching(0));
    }
}
