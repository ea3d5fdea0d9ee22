//! The receiving side of acknowledgements in one packet number space: which packets arrived,
//! and when an ACK frame is owed (RFC 9000 13.2).

use crate::packet::{AckFrame, AckRange};
use onionlab_engine::time::{SimDuration, SimTime};

pub(crate) const NEVER: SimTime = u64::MAX;
/// Ranges remembered: exactly those one ACK frame reports (the first and three more).
const RANGES: usize = 4;

#[derive(Clone, Debug)]
pub(crate) struct AckTracker {
    /// Received packet numbers as inclusive `(low, high)` ranges, newest first.
    ranges: [(u64, u64); RANGES],
    count: u8,
    /// Whether the first ack-eliciting packet of the run was seen: everything below `floor`
    /// is treated as received. When a fifth range would appear the oldest is forgotten and the
    /// floor rises over it; a straggler from below the floor is then dropped unprocessed and
    /// unacknowledged, so its sender declares it lost and resends its frames (safe, and rare:
    /// it needs four holes at once).
    floor: u64,
    /// When the largest packet arrived, for the ACK delay field.
    largest_at: SimTime,
    /// Ack-eliciting packets received since the last ACK went out.
    eliciting: u32,
    /// Deadline of the delayed ACK (`NEVER` when none is owed).
    pub deadline: SimTime,
    /// An ACK must go out at the next opportunity.
    pub ack_now: bool,
    /// Packets arrived since the last ACK went out (an ACK frame rides on any packet sent).
    fresh: bool,
}

impl AckTracker {
    pub(crate) fn new() -> Self {
        AckTracker {
            ranges: [(0, 0); RANGES],
            count: 0,
            floor: 0,
            largest_at: 0,
            eliciting: 0,
            deadline: NEVER,
            ack_now: false,
            fresh: false,
        }
    }

    fn ranges(&self) -> &[(u64, u64)] {
        &self.ranges[..usize::from(self.count)]
    }

    pub(crate) fn largest(&self) -> Option<u64> {
        self.ranges().first().map(|r| r.1)
    }

    /// Whether `pn` was received (or lies below what is remembered).
    pub(crate) fn is_duplicate(&self, pn: u64) -> bool {
        pn < self.floor || self.ranges().iter().any(|&(l, h)| l <= pn && pn <= h)
    }

    /// Records a packet that is not a duplicate. `immediate`: the space acknowledges at once
    /// (Initial and Handshake, RFC 9000 13.2.1).
    pub(crate) fn on_packet(
        &mut self,
        now: SimTime,
        pn: u64,
        eliciting: bool,
        immediate: bool,
        threshold: u32,
        max_ack_delay: SimDuration,
    ) {
        let largest = self.largest();
        // A packet below the largest fills a hole; one beyond largest + 1 opens a gap. Both are
        // acknowledged at once so the sender's loss detection sees the change quickly.
        let out_of_order = largest.is_some_and(|l| pn < l || pn > l + 1);
        if largest.is_none_or(|l| pn > l) {
            self.largest_at = now;
        }
        self.insert(pn);
        self.fresh = true;
        if eliciting {
            self.eliciting += 1;
            if immediate || out_of_order || self.eliciting >= threshold {
                self.ack_now = true;
            } else if self.deadline == NEVER {
                self.deadline = now.saturating_add(max_ack_delay);
            }
        }
    }

    fn insert(&mut self, pn: u64) {
        let mut v: [(u64, u64); RANGES + 1] = [(0, 0); RANGES + 1];
        let mut n = 0;
        let mut placed = false;
        for &(l, h) in self.ranges() {
            if !placed && pn > h {
                v[n] = (pn, pn);
                n += 1;
                placed = true;
            }
            v[n] = (l, h);
            n += 1;
        }
        if !placed {
            v[n] = (pn, pn);
            n += 1;
        }
        // Merge neighbours (newest first: v[i].0 - 1 == v[i + 1].1 means adjacent).
        let mut m = 0;
        for i in 0..n {
            if m > 0 && v[m - 1].0 <= v[i].1 + 1 {
                v[m - 1].0 = v[m - 1].0.min(v[i].0);
            } else {
                v[m] = v[i];
                m += 1;
            }
        }
        if m > RANGES {
            m = RANGES;
            self.floor = self.floor.max(v[RANGES - 1].0);
        }
        self.ranges[..m].copy_from_slice(&v[..m]);
        self.count = m as u8;
    }

    /// Whether an ACK-only packet should go out now.
    pub(crate) fn due(&self, now: SimTime) -> bool {
        self.count > 0 && (self.ack_now || self.deadline <= now)
    }

    /// Whether an ACK frame is worth attaching to a packet that is sent anyway.
    pub(crate) fn fresh(&self) -> bool {
        self.count > 0 && self.fresh
    }

    /// The ACK frame to send now (the caller then calls `on_sent` if it goes out).
    pub(crate) fn frame(&self, now: SimTime) -> AckFrame {
        let r = self.ranges();
        let (low, high) = r[0];
        let delay = now.saturating_sub(self.largest_at) / 1000;
        let mut ack = AckFrame {
            largest: high,
            delay_us: delay.min(u64::from(u32::MAX)) as u32,
            first: (high - low + 1).min(u64::from(u32::MAX)) as u32,
            ranges: [AckRange::default(); 3],
        };
        if high - low + 1 > u64::from(u32::MAX) {
            // Too long to report whole: report its newest part only.
            return ack;
        }
        let mut prev_low = low;
        for (i, &(l, h)) in r[1..].iter().enumerate() {
            let gap = prev_low - h - 1;
            let len = h - l + 1;
            if gap > u64::from(u16::MAX) || len > u64::from(u16::MAX) {
                break;
            }
            ack.ranges[i] = AckRange {
                gap: gap as u16,
                len: len as u16,
            };
            prev_low = l;
        }
        ack
    }

    pub(crate) fn on_sent(&mut self) {
        self.eliciting = 0;
        self.ack_now = false;
        self.deadline = NEVER;
        self.fresh = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rx(t: &mut AckTracker, pn: u64) {
        t.on_packet(0, pn, true, false, 2, 25_000_000);
    }

    #[test]
    fn delayed_then_threshold_then_gap() {
        let mut t = AckTracker::new();
        rx(&mut t, 0);
        assert!(!t.ack_now);
        assert_eq!(t.deadline, 25_000_000);
        rx(&mut t, 1);
        assert!(t.ack_now);
        t.on_sent();
        rx(&mut t, 3);
        assert!(t.ack_now, "a gap is acknowledged at once");
        let a = t.frame(0);
        assert_eq!(a.iter().collect::<Vec<_>>(), vec![(3, 3), (0, 1)]);
        t.on_sent();
        rx(&mut t, 2);
        assert!(t.ack_now, "filling it too");
        assert_eq!(t.frame(0).iter().collect::<Vec<_>>(), vec![(0, 3)]);
        assert!(t.is_duplicate(2));
    }

    #[test]
    fn keeps_four_newest_ranges() {
        let mut t = AckTracker::new();
        for pn in [0, 2, 4, 6, 8, 10] {
            rx(&mut t, pn);
        }
        let a = t.frame(0);
        assert_eq!(
            a.iter().collect::<Vec<_>>(),
            vec![(10, 10), (8, 8), (6, 6), (4, 4)]
        );
        // Below the oldest range kept: treated as seen.
        assert!(t.is_duplicate(3));
        assert!(!t.is_duplicate(5));
    }
}
