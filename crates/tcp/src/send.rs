//! Send side: the byte-count send buffer, the peer's window and the SACK scoreboard.
//!
//! Loss recovery follows RFC 6675 but keeps only what cannot be derived: the SACKed ranges
//! (allocated only while holes exist), the highest retransmitted sequence (`HighRxt`) and the
//! recovery point. Whether a hole is lost, and the pipe estimate, are recomputed by walking the
//! holes, which are few. After a timeout every hole below the recovery point counts as lost, so
//! the same machinery performs the go-back-N retransmission while still skipping SACKed data.

use crate::lazy_vec::LazyVec;

/// Loss-recovery phase, as in Linux's `ca_state` reduced to what the model distinguishes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Phase {
    Open,
    /// Fast recovery after duplicate ACKs or SACK-detected loss.
    Recovery,
    /// After a retransmission timeout.
    Loss,
}

/// Duplicate-ACK threshold (RFC 5681).
const DUP_THRESH: u64 = 3;

#[derive(Clone, Debug)]
pub(crate) struct Sender {
    pub iss: u64,
    /// Oldest unacknowledged sequence number (SND.UNA).
    pub una: u64,
    /// Next new sequence number to send (SND.NXT); never moves back, retransmissions are
    /// driven by the scoreboard instead.
    pub nxt: u64,
    /// Sequence number just past the last byte the application queued.
    pub data_end: u64,
    /// The application closed: a FIN occupies sequence number `data_end`.
    pub fin: bool,
    pub buf_size: u64,
    /// Right edge of the peer's receive window.
    pub wnd_right: u64,
    pub wl1: u64,
    pub wl2: u64,
    /// Largest window the peer ever offered, for sender-side SWS avoidance.
    pub max_wnd: u64,
    /// End of the last sub-MSS segment sent (Linux's `snd_sml`), for Minshall's Nagle.
    pub sml: u64,
    pub high_rxt: u64,
    pub recover: u64,
    pub recovery: Phase,
    /// RFC 6675 retransmits the first segment when recovery starts, whatever the pipe.
    pub force_una: bool,
    /// Every hole below this is lost, whatever the duplicate-ACK rule says: set when a tail
    /// loss probe, or a segment SACKed a probe timeout after everything below it was sent,
    /// shows the data below was not merely reordered (RACK's time rule, for the one case the
    /// model times: the probe timeout is at least two round trips).
    pub lost_below: u64,
    pub dupacks: u32,
    sacked: LazyVec<(u64, u64)>,
    sacked_bytes: u64,
}

impl Sender {
    pub(crate) fn new(iss: u64, buf_size: u64) -> Self {
        Sender {
            iss,
            una: iss,
            nxt: iss,
            sml: iss,
            data_end: iss + 1,
            fin: false,
            buf_size,
            wnd_right: iss + 1,
            wl1: 0,
            wl2: 0,
            max_wnd: 0,
            high_rxt: iss,
            recover: iss,
            recovery: Phase::Open,
            force_una: false,
            lost_below: 0,
            dupacks: 0,
            sacked: LazyVec::new(),
            sacked_bytes: 0,
        }
    }

    /// Sequence number just past everything that will ever be sent (FIN included).
    pub(crate) fn end(&self) -> u64 {
        self.data_end + u64::from(self.fin)
    }

    pub(crate) fn fin_acked(&self) -> bool {
        self.fin && self.una > self.data_end
    }

    /// Bytes held in the buffer: sent-but-unacknowledged plus not-yet-sent, as Linux's
    /// `sk_wmem_queued` counts them.
    pub(crate) fn occupancy(&self) -> u64 {
        self.data_end - self.una.clamp(self.iss + 1, self.data_end)
    }

    pub(crate) fn space(&self) -> u64 {
        self.buf_size.saturating_sub(self.occupancy())
    }

    /// Bytes queued by the application and never sent.
    pub(crate) fn notsent(&self) -> u64 {
        self.data_end.saturating_sub(self.nxt.max(self.iss + 1))
    }

    #[cfg(test)]
    pub(crate) fn sacked_bytes(&self) -> u64 {
        self.sacked_bytes
    }

    /// Records a SACK block, clipped to what is outstanding.
    pub(crate) fn add_sack(&mut self, start: u64, end: u64) {
        let (start, end) = (start.max(self.una), end.min(self.nxt));
        if start >= end {
            return;
        }
        let i = self.sacked.partition_point(|&(_, e)| e < start);
        let mut j = i;
        let (mut s, mut e) = (start, end);
        let mut removed = 0;
        while j < self.sacked.len() && self.sacked[j].0 <= e {
            s = s.min(self.sacked[j].0);
            e = e.max(self.sacked[j].1);
            removed += self.sacked[j].1 - self.sacked[j].0;
            j += 1;
        }
        let sacked = self.sacked.vec_mut();
        if j == i {
            sacked.insert(i, (s, e));
        } else {
            sacked[i] = (s, e);
            sacked.drain(i + 1..j);
        }
        self.sacked_bytes = self.sacked_bytes - removed + (e - s);
    }

    /// Advances SND.UNA and forgets SACK state below it.
    pub(crate) fn ack(&mut self, ack: u64) {
        self.una = ack;
        if let Some(sacked) = self.sacked.get_mut() {
            let mut k = 0;
            while k < sacked.len() && sacked[k].1 <= ack {
                self.sacked_bytes -= sacked[k].1 - sacked[k].0;
                k += 1;
            }
            sacked.drain(..k);
            if let Some(first) = sacked.first_mut() {
                if first.0 < ack {
                    self.sacked_bytes -= ack - first.0;
                    first.0 = ack;
                }
            }
        }
        // Recovery is over once nothing is SACKed: an idle connection owns no heap memory.
        self.sacked.release_if_empty();
    }

    /// Start of the lost prefix of hole `[start, end)` ends at the returned sequence number
    /// (`start` when nothing in it is deemed lost). `above` and `ranges_above` describe the
    /// SACKed data beyond the hole.
    fn lost_end(
        &self,
        start: u64,
        end: u64,
        above: u64,
        ranges_above: usize,
        mss: u64,
        sack: bool,
    ) -> u64 {
        match self.recovery {
            Phase::Open => start,
            Phase::Loss => {
                if start < self.recover {
                    end.min(self.recover)
                } else {
                    start
                }
            }
            Phase::Recovery => {
                // RFC 6675's IsLost (or, without SACK, NewReno's first segment)...
                let by_dupacks = if sack
                    && (above > (DUP_THRESH - 1) * mss || ranges_above as u64 >= DUP_THRESH)
                {
                    end
                } else if start == self.una && (!sack || self.force_una) {
                    end.min(self.una + mss)
                } else {
                    start
                };
                // ...or the time rule: what of the hole lies below `lost_below` (nothing, for
                // a hole above it).
                by_dupacks.max(end.min(self.lost_below))
            }
        }
    }

    /// Calls `f(start, end, lost_end)` for each unSACKed hole in `[una, nxt)`, lowest first;
    /// stops when `f` returns false.
    fn for_each_hole(&self, mss: u64, sack: bool, mut f: impl FnMut(u64, u64, u64) -> bool) {
        let mut start = self.una;
        let mut above = self.sacked_bytes;
        let n = self.sacked.len();
        for (i, &(s, e)) in self.sacked.iter().enumerate() {
            if start < s {
                let lost = self.lost_end(start, s, above, n - i, mss, sack);
                if !f(start, s, lost) {
                    return;
                }
            }
            above -= e - s;
            start = e;
        }
        if start < self.nxt {
            let lost = self.lost_end(start, self.nxt, 0, 0, mss, sack);
            f(start, self.nxt, lost);
        }
    }

    /// RFC 6675 NextSeg rule 1: the first lost, not yet retransmitted range, at most one MSS.
    pub(crate) fn next_lost(&self, mss: u64, sack: bool) -> Option<(u64, u64)> {
        if self.recovery == Phase::Open {
            return None;
        }
        let mut found = None;
        self.for_each_hole(mss, sack, |start, _end, lost| {
            let from = start.max(self.high_rxt);
            if from < lost {
                found = Some((from, lost.min(from + mss)));
                return false;
            }
            // Lost-ness only decreases going up, so the first non-lost hole ends the search.
            lost > start
        });
        found
    }

    /// Whether the hole at SND.UNA is lost by the SACK rule (the RFC 6675 trigger for recovery).
    pub(crate) fn una_lost_by_sack(&self, mss: u64) -> bool {
        match self.sacked.first() {
            Some(&(s, _)) if s > self.una => {
                self.sacked_bytes > (DUP_THRESH - 1) * mss || self.sacked.len() as u64 >= DUP_THRESH
            }
            _ => false,
        }
    }

    /// RFC 6675 SetPipe: bytes believed to be in the network. Without SACK each duplicate ACK
    /// stands for one segment that left the network, as Linux's Reno emulation assumes.
    pub(crate) fn pipe(&self, mss: u64, sack: bool) -> u64 {
        let mut pipe = 0;
        let in_recovery = self.recovery != Phase::Open;
        self.for_each_hole(mss, sack, |start, end, lost| {
            pipe += end - lost;
            if in_recovery && self.high_rxt > start {
                pipe += self.high_rxt.min(end) - start;
            }
            true
        });
        if !sack && self.recovery != Phase::Loss {
            pipe = pipe.saturating_sub(u64::from(self.dupacks) * mss);
        }
        pipe
    }

    /// End of the highest SACKed range (SND.UNA when none).
    pub(crate) fn highest_sacked(&self) -> u64 {
        self.sacked.last().map_or(self.una, |r| r.1)
    }

    pub(crate) fn enter_recovery(&mut self, kind: Phase) {
        self.recovery = kind;
        self.lost_below = self.una;
        self.recover = self.nxt;
        self.high_rxt = self.una;
        self.force_una = true;
        if kind == Phase::Loss {
            self.dupacks = 0;
        }
    }

    /// Payload length and FIN flag of a segment starting at `seq` within `[seq, end)`.
    pub(crate) fn segment_at(&self, seq: u64, end: u64, mss: u64) -> (u64, bool) {
        let len = end.min(self.data_end).saturating_sub(seq).min(mss);
        let fin = self.fin && seq + len == self.data_end && end > self.data_end;
        (len, fin)
    }

    pub(crate) fn heap_bytes(&self) -> usize {
        self.sacked.heap_bytes()
    }

    /// Internal consistency, for tests.
    pub(crate) fn check(&self) {
        assert!(self.iss <= self.una && self.una <= self.nxt && self.nxt <= self.end());
        let mut prev = self.una;
        let mut sum = 0;
        for &(s, e) in self.sacked.iter() {
            assert!(
                s > prev || (s == self.una && prev == self.una),
                "sack {s} {prev}"
            );
            assert!(e > s && e <= self.nxt);
            sum += e - s;
            prev = e;
        }
        assert_eq!(sum, self.sacked_bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    const MSS: u64 = 1000;

    fn sender_with_flight(segments: u64) -> Sender {
        let mut s = Sender::new(0, 1 << 30);
        s.una = 1;
        s.data_end = 1 + segments * MSS;
        s.nxt = s.data_end;
        s
    }

    #[test]
    fn scoreboard_marks_three_holes_lost() {
        let mut s = sender_with_flight(20);
        // Segments 2, 5 and 9 (0-based) lost; everything else above segment 1 SACKed.
        let seg = |i: u64| (1 + i * MSS, 1 + (i + 1) * MSS);
        s.ack(seg(2).0);
        for i in [3, 4, 6, 7, 8] {
            s.add_sack(seg(i).0, seg(i).1);
        }
        for i in 10..20 {
            s.add_sack(seg(i).0, seg(i).1);
        }
        s.check();
        assert_eq!(s.sacked_bytes(), 15 * MSS);
        assert!(s.una_lost_by_sack(MSS));
        s.enter_recovery(Phase::Recovery);
        assert_eq!(s.pipe(MSS, true), 0);
        let mut got = vec![];
        while let Some((a, b)) = s.next_lost(MSS, true) {
            got.push((a, b));
            s.high_rxt = b;
        }
        assert_eq!(got, vec![seg(2), seg(5), seg(9)]);
        assert_eq!(s.pipe(MSS, true), 3 * MSS);
        s.ack(seg(5).0);
        s.check();
        assert_eq!(s.sacked_bytes(), 13 * MSS);
    }

    #[test]
    fn loss_state_goes_back_n_skipping_sacked() {
        let mut s = sender_with_flight(4);
        s.add_sack(1 + 2 * MSS, 1 + 3 * MSS);
        s.enter_recovery(Phase::Loss);
        let mut got = vec![];
        while let Some((a, b)) = s.next_lost(MSS, true) {
            got.push((a, b));
            s.high_rxt = b;
        }
        assert_eq!(got, vec![(1, 1001), (1001, 2001), (3001, 4001)]);
    }

    #[test]
    fn buffer_accounting() {
        let mut s = Sender::new(100, 5000);
        assert_eq!(s.space(), 5000);
        s.data_end += 3000;
        assert_eq!(s.space(), 2000);
        assert_eq!(s.notsent(), 3000);
        s.una = 101;
        s.nxt = 1101;
        assert_eq!(s.notsent(), 2000);
        s.ack(601);
        assert_eq!(s.space(), 2500);
    }
}
