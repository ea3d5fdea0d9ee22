//! Receive side: reassembly, the advertised window, ACK scheduling and buffer autotuning.
//!
//! Out-of-order data is tracked as byte ranges, so a connection without holes owns no heap
//! memory: the range list is allocated when a hole appears and released by the first ACK sent
//! after the last hole is filled.

use crate::lazy_vec::LazyVec;
use onionlab_engine::time::{SimDuration, SimTime};

pub(crate) const NEVER: SimTime = u64::MAX;

/// The interactive bit of `Receiver::quick`: data went out within a delayed ACK of data
/// arriving, so ACKs wait to ride on replies; a delayed ACK that had to go out on its own
/// ends it.
const PINGPONG: u8 = 0x80;

/// Whole milliseconds of a time, held below `u32::MAX` (49 days; later times read as that).
fn millis_of(t: SimTime) -> u32 {
    (t / onionlab_engine::time::NANOS_PER_MILLI).min(u64::from(u32::MAX - 1)) as u32
}

/// What the caller must do after a data segment was processed.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct DataOutcome {
    /// In-order data became available to the reader.
    pub readable: bool,
    /// The peer's FIN was reached in sequence.
    pub fin: bool,
}

#[derive(Clone, Debug)]
pub(crate) struct Receiver {
    /// Initial receive sequence number (the peer's SYN).
    pub irs: u64,
    /// Next sequence number expected (RCV.NXT), including the FIN once consumed.
    pub nxt: u64,
    /// Sequence number of the next byte the application will read.
    pub read: u64,
    pub buf_size: u64,
    /// Right edge of the window last advertised; never moves left (RFC 793 discourages
    /// shrinking the window, and Linux never does it).
    pub right_edge: u64,
    /// Out-of-order ranges above `nxt`: sorted, disjoint, non-adjacent, each with the arrival
    /// stamp of its latest segment so SACK can report the most recent blocks first.
    ooo: LazyVec<(u64, u64, u32)>,
    /// Sequence number of the peer's FIN, `NEVER` until seen.
    pub fin_seq: u64,
    /// In-order bytes received since the last ACK went out, saturating: it is only compared
    /// with two segments' worth.
    unacked: u16,
    /// An ACK must go out at the next transmission opportunity.
    pub ack_now: bool,
    /// A segment that arrived entirely duplicated, reported once as a D-SACK block (RFC
    /// 2883, on in Linux) so the sender can tell a needless retransmission; `(0, 0)` if none.
    dsack: (u64, u64),
    /// Deadline of the delayed-ACK timer.
    pub delack_at: SimTime,
    /// Quick ACKs left (Linux's `icsk_ack.quick`, at most 16) in the low bits, and
    /// [`PINGPONG`] (Linux's ping-pong mode). While quick ACKs are left and the connection is
    /// not interactive, in-order data is acknowledged at once. One byte, so that the receiver
    /// keeps its size.
    quick: u8,
    /// When in-order data last arrived, in whole milliseconds as Linux keeps it in jiffies
    /// (`lrcvtime`), so that it fits beside the flags; `u32::MAX` before the first.
    last_data_ms: u32,
    /// Dynamic right-sizing: bytes received per RTT, measured from `drs_seq` at `drs_time`.
    drs_seq: u64,
    drs_time: SimTime,
    drs_space: u64,
}

impl Receiver {
    pub(crate) fn new(buf_size: u64, mss: u64) -> Self {
        Receiver {
            irs: 0,
            // Until the peer's SYN arrives, an empty stream starting at 1.
            nxt: 1,
            read: 1,
            buf_size,
            right_edge: 0,
            ooo: LazyVec::new(),
            dsack: (0, 0),
            fin_seq: NEVER,
            unacked: 0,
            ack_now: false,
            delack_at: NEVER,
            quick: 0,
            last_data_ms: u32::MAX,
            drs_seq: 0,
            drs_time: NEVER,
            drs_space: 10 * mss,
        }
    }

    /// Synchronises with the peer's SYN.
    pub(crate) fn init(&mut self, irs: u64) {
        self.irs = irs;
        self.nxt = irs + 1;
        self.read = irs + 1;
        self.right_edge = self.read + self.buf_size;
    }

    /// End of in-order payload (excludes the FIN's sequence number).
    pub(crate) fn data_end(&self) -> u64 {
        self.nxt.min(self.fin_seq)
    }

    pub(crate) fn available(&self) -> u64 {
        self.data_end() - self.read
    }

    pub(crate) fn delivered(&self) -> u64 {
        self.data_end() - (self.irs + 1)
    }

    pub(crate) fn fin_received(&self) -> bool {
        self.nxt > self.fin_seq
    }

    /// Window to advertise now. The edge only advances by at least one MSS or half the buffer
    /// (receiver-side silly window syndrome avoidance, RFC 1122 4.2.3.3).
    pub(crate) fn window(&mut self, mss: u64) -> u64 {
        let edge = self.read + self.buf_size;
        if edge >= self.right_edge + mss.min(self.buf_size / 2) {
            self.right_edge = edge;
        }
        self.right_edge.saturating_sub(self.nxt)
    }

    /// Consumes in-order bytes; returns how many were read. Requests a window update when the
    /// window at least doubles and grows by an MSS, as Linux's receive cleanup does, so that a
    /// sender stalled by a closed window resumes without waiting for a persist probe.
    pub(crate) fn consume(&mut self, max: u64, mss: u64) -> u64 {
        let n = max.min(self.available());
        self.read += n;
        let old = self.right_edge.saturating_sub(self.nxt);
        let new = (self.read + self.buf_size).saturating_sub(self.nxt);
        if n > 0 && new >= 2 * old && new - old >= mss {
            self.ack_now = true;
        }
        n
    }

    /// Most quick ACKs granted at once (Linux's `TCP_MAX_QUICKACKS`).
    const MAX_QUICKACKS: u64 = 16;

    /// In-order data arrived at `now`: Linux's `tcp_event_data_recv` for the quick-ACK mode.
    /// The first data of a connection, and data after a silence longer than `rto`, grant
    /// quick ACKs: one per two segments the window holds, at least 2 and at most 16.
    fn note_data(&mut self, now: SimTime, rto: SimDuration, mss: u64) {
        let now_ms = millis_of(now);
        let silent = self.last_data_ms == u32::MAX
            || u64::from(now_ms.saturating_sub(self.last_data_ms)) > millis_of(rto).into();
        if silent {
            let grant = (self.buf_size / (2 * mss.max(1))).clamp(2, Self::MAX_QUICKACKS) as u8;
            let left = self.quick & !PINGPONG;
            self.quick = (self.quick & PINGPONG) | left.max(grant);
        }
        self.last_data_ms = now_ms;
    }

    /// Whether in-order data is acknowledged at once (Linux's `tcp_in_quickack_mode`).
    fn quick_mode(&self) -> bool {
        self.quick & !PINGPONG > 0 && self.quick & PINGPONG == 0
    }

    /// Data is going out at `now`: within `ato` of data arriving, the connection is
    /// interactive (Linux's `tcp_event_data_sent`).
    pub(crate) fn on_data_sent(&mut self, now: SimTime, ato: SimDuration) {
        if self.last_data_ms != u32::MAX
            && u64::from(millis_of(now)) < u64::from(self.last_data_ms) + u64::from(millis_of(ato))
        {
            self.quick |= PINGPONG;
        }
    }

    /// The delayed-ACK timer fired: the ACK goes out on its own, and an interactive
    /// connection stops counting on replies to carry its ACKs.
    pub(crate) fn delack_fired(&mut self) {
        self.delack_at = NEVER;
        self.ack_now = true;
        self.quick &= !PINGPONG;
    }

    /// Processes the payload (and FIN) of an acceptable segment. With `quickack`, Linux's
    /// quick-ACK and ping-pong modes decide whether in-order data waits for the delayed ACK
    /// (`rto` bounds the silence after which quick ACKs come back).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn on_data(
        &mut self,
        now: SimTime,
        seq: u64,
        len: u64,
        fin: bool,
        mss: u64,
        delack: SimDuration,
        quickack: Option<SimDuration>,
    ) -> DataOutcome {
        let mut out = DataOutcome::default();
        if self.fin_received() {
            // Everything the peer will ever send has arrived; this is a retransmission.
            self.ack_now = true;
            return out;
        }
        // Accept what fits in the larger of the advertised window and the current buffer.
        let limit = self.right_edge.max(self.read + self.buf_size);
        let mut end = seq + len;
        let mut fin = fin;
        if end > limit {
            end = limit;
            fin = false;
        }
        if fin && self.fin_seq == NEVER {
            self.fin_seq = end;
        }
        let start = seq.max(self.nxt);
        if len > 0 && end <= self.nxt {
            // Pure duplicate: the peer missed our ACK.
            self.ack_now = true;
            self.dsack = (seq, end);
        } else if len > 0 && start < end {
            if seq <= self.nxt {
                let had_holes = !self.ooo.is_empty();
                self.nxt = end;
                if let Some(ooo) = self.ooo.get_mut() {
                    while let Some(&(s, e, _)) = ooo.first() {
                        if s > self.nxt {
                            break;
                        }
                        self.nxt = self.nxt.max(e);
                        ooo.remove(0);
                    }
                }
                out.readable = true;
                if let Some(rto) = quickack {
                    self.note_data(now, rto, mss);
                }
                if had_holes {
                    self.ack_now = true;
                } else {
                    let max = u64::from(u16::MAX);
                    self.unacked = self.unacked.saturating_add((end - start).min(max) as u16);
                    if u64::from(self.unacked) >= (2 * mss).min(max) || self.quick_mode() {
                        self.ack_now = true;
                    } else if self.delack_at == NEVER {
                        self.delack_at = now + delack;
                    }
                }
            } else {
                if self.ooo.iter().any(|&(s, e, _)| s <= start && end <= e) {
                    self.dsack = (start, end);
                }
                self.insert_ooo(start, end);
                self.ack_now = true;
            }
        } else if len > 0 {
            // Entirely outside the window.
            self.ack_now = true;
        } else if len == 0 && seq < self.nxt && !fin {
            // A zero-window probe (or a stale segment) must be answered with the window.
            self.ack_now = true;
        }
        if self.nxt == self.fin_seq {
            self.nxt += 1;
            self.ack_now = true;
            out.fin = true;
            if let Some(ooo) = self.ooo.get_mut() {
                ooo.clear();
            }
        }
        out
    }

    fn insert_ooo(&mut self, start: u64, end: u64) {
        // Stamps only order the ranges present, so the counter lives in the ranges themselves.
        let stamp = self
            .ooo
            .iter()
            .map(|r| r.2)
            .max()
            .unwrap_or(0)
            .saturating_add(1);
        // First range that ends at or after `start` (may merge).
        let i = self.ooo.partition_point(|&(_, e, _)| e < start);
        let mut j = i;
        let (mut s, mut e) = (start, end);
        while j < self.ooo.len() && self.ooo[j].0 <= e {
            s = s.min(self.ooo[j].0);
            e = e.max(self.ooo[j].1);
            j += 1;
        }
        let ooo = self.ooo.vec_mut();
        if j == i {
            ooo.insert(i, (s, e, stamp));
        } else {
            ooo[i] = (s, e, stamp);
            ooo.drain(i + 1..j);
        }
    }

    /// Up to three SACK blocks: a D-SACK block first if one is owed, then the most recently
    /// changed ranges (RFC 2018 section 4, RFC 2883).
    pub(crate) fn sack_blocks(&self) -> ([(u64, u64); 3], u8) {
        let mut blocks = [(0, 0); 3];
        let mut stamps = [0u32; 3];
        let mut n = 0usize;
        if self.dsack != (0, 0) {
            blocks[0] = self.dsack;
            // Ranks above every arrival stamp, so it stays first.
            stamps[0] = u32::MAX;
            n = 1;
        }
        for &(s, e, st) in self.ooo.iter() {
            // Insertion into a 3-slot list ordered by recency, newest first.
            let mut pos = n;
            while pos > 0 && stamps[pos - 1] < st {
                pos -= 1;
            }
            if pos < 3 {
                let last = n.min(2);
                let mut k = last;
                while k > pos {
                    blocks[k] = blocks[k - 1];
                    stamps[k] = stamps[k - 1];
                    k -= 1;
                }
                blocks[pos] = (s, e);
                stamps[pos] = st;
                n = (n + 1).min(3);
            }
        }
        (blocks, n as u8)
    }

    /// An ACK carrying the current state is going out.
    pub(crate) fn on_ack_sent(&mut self) {
        if self.unacked > 0 {
            // An ACK of new data spends a quick ACK (Linux's `tcp_dec_quickack_mode`).
            let left = self.quick & !PINGPONG;
            self.quick = (self.quick & PINGPONG) | left.saturating_sub(1);
        }
        self.ack_now = false;
        self.dsack = (0, 0);
        self.unacked = 0;
        self.delack_at = NEVER;
        // All holes are filled: an idle connection owns no heap memory.
        self.ooo.release_if_empty();
    }

    /// Linux-style dynamic right-sizing: once per RTT, if the application read more bytes than
    /// in any earlier RTT, size the buffer to twice that (four times while the rate is still
    /// doubling, as in slow start), so the window never limits a sender that is ramping up.
    /// Like Linux (which counts bytes copied to the application), a slow reader does not grow
    /// the buffer: data it does not read is not worth buffering more of.
    pub(crate) fn autotune(&mut self, now: SimTime, rtt: SimDuration, max: u64) {
        if self.drs_time == NEVER {
            self.drs_time = now;
            self.drs_seq = self.read;
            return;
        }
        if now < self.drs_time + rtt {
            return;
        }
        let got = self.read.saturating_sub(self.drs_seq);
        if got > self.drs_space {
            let factor = if got >= self.drs_space + self.drs_space / 2 {
                4
            } else {
                2
            };
            self.drs_space = got;
            let target = (factor * got).min(max);
            if target > self.buf_size {
                self.buf_size = target;
            }
        }
        self.drs_time = now;
        self.drs_seq = self.read;
    }

    pub(crate) fn heap_bytes(&self) -> usize {
        self.ooo.heap_bytes()
    }

    /// Internal consistency, for tests and debug assertions.
    pub(crate) fn check(&self) {
        assert!(self.read <= self.data_end());
        let mut prev = self.nxt;
        for &(s, e, _) in self.ooo.iter() {
            assert!(s > prev, "ooo range {s}..{e} not above {prev}");
            assert!(e > s);
            prev = e;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rx() -> Receiver {
        let mut r = Receiver::new(100_000, 1000);
        r.init(0);
        r
    }

    #[test]
    fn reassembles_and_counts_once() {
        let mut r = rx();
        r.on_data(0, 1001, 1000, false, 1000, 40, None);
        r.on_data(0, 3001, 1000, false, 1000, 40, None);
        r.on_data(0, 2501, 1000, false, 1000, 40, None);
        assert_eq!(r.ooo, vec![(1001, 2001, 1), (2501, 4001, 3)]);
        assert_eq!(r.sack_blocks(), ([(2501, 4001), (1001, 2001), (0, 0)], 2));
        r.on_data(0, 1, 1000, false, 1000, 40, None);
        assert_eq!(r.delivered(), 2000);
        r.on_data(0, 1, 2600, false, 1000, 40, None);
        assert_eq!(r.delivered(), 4000);
        assert!(r.ooo.is_empty());
        r.on_data(0, 1, 4000, false, 1000, 40, None);
        assert_eq!(r.delivered(), 4000);
        r.check();
    }

    #[test]
    fn sack_blocks_most_recent_first() {
        let mut r = rx();
        for s in [2001, 4001, 6001, 8001] {
            r.on_data(0, s, 1000, false, 1000, 40, None);
        }
        let (b, n) = r.sack_blocks();
        assert_eq!(n, 3);
        assert_eq!(b, [(8001, 9001), (6001, 7001), (4001, 5001)]);
        // Inside a range already held: a D-SACK block for it first, then its range.
        r.on_data(0, 2500, 100, false, 1000, 40, None);
        let (b, _) = r.sack_blocks();
        assert_eq!(b[..2], [(2500, 2600), (2001, 3001)]);
        r.on_ack_sent();
        let (b, _) = r.sack_blocks();
        assert_eq!(b[0], (2001, 3001));
    }

    #[test]
    fn fin_after_hole() {
        let mut r = rx();
        let o = r.on_data(0, 501, 500, true, 1000, 40, None);
        assert!(!o.fin);
        let o = r.on_data(0, 1, 500, false, 1000, 40, None);
        assert!(o.fin && r.fin_received());
        assert_eq!(r.delivered(), 1000);
        assert_eq!(r.nxt, 1002);
    }

    #[test]
    fn delayed_ack_rules() {
        let mut r = rx();
        r.on_data(0, 1, 100, false, 1000, 40, None);
        assert!(!r.ack_now);
        assert_eq!(r.delack_at, 40);
        r.on_data(0, 101, 1000, false, 1000, 40, None);
        assert!(!r.ack_now);
        r.on_data(0, 1101, 1000, false, 1000, 40, None);
        assert!(r.ack_now);
    }

    const MS: SimTime = onionlab_engine::time::NANOS_PER_MILLI;
    const RTO: SimDuration = 200 * MS;

    /// A connection's first data is acknowledged at once, up to 16 segments (100,000-byte
    /// window / 2,000 is 50, capped at 16); after them a lone segment waits for the delayed
    /// ACK, and after a silence longer than the RTO quick ACKs come back.
    #[test]
    fn quick_acks_for_the_first_segments_and_after_a_silence() {
        let mut r = rx();
        let mut seq = 1;
        let mut at = 0;
        let mut segment = |r: &mut Receiver, at: SimTime| {
            r.on_data(at, seq, 100, false, 1000, 40 * MS, Some(RTO));
            seq += 100;
            let now = r.ack_now;
            r.on_ack_sent();
            now
        };
        for _ in 0..16 {
            at += 10 * MS;
            assert!(segment(&mut r, at), "a quick ACK");
        }
        at += 10 * MS;
        assert!(!segment(&mut r, at), "the 17th waits");
        at += RTO + MS;
        assert!(segment(&mut r, at), "after a silence, quick again");
        // Without the mode every small segment waits.
        let mut plain = rx();
        plain.on_data(0, 1, 100, false, 1000, 40 * MS, None);
        assert!(!plain.ack_now && plain.delack_at == 40 * MS);
    }

    /// Data sent within a delayed ACK of data arriving makes the connection interactive: its
    /// ACKs wait to ride on replies, until a delayed ACK has to go out alone.
    #[test]
    fn an_interactive_connection_delays_its_acks_until_one_goes_alone() {
        let mut r = rx();
        let ato = 40 * MS;
        r.on_data(0, 1, 100, false, 1000, ato, Some(RTO));
        assert!(r.ack_now);
        r.on_data_sent(5 * MS, ato);
        r.on_ack_sent();
        r.on_data(20 * MS, 101, 100, false, 1000, ato, Some(RTO));
        assert!(!r.ack_now, "interactive: the ACK waits for a reply");
        assert_eq!(r.delack_at, 60 * MS);
        r.delack_fired();
        assert!(r.ack_now);
        r.on_ack_sent();
        r.on_data(100 * MS, 201, 100, false, 1000, ato, Some(RTO));
        assert!(r.ack_now, "no longer interactive: quick again");
        // Data sent long after the last arrival does not make it interactive.
        r.on_ack_sent();
        r.on_data_sent(500 * MS, ato);
        r.on_data(510 * MS, 301, 100, false, 1000, ato, Some(RTO));
        assert!(r.ack_now);
    }
}
