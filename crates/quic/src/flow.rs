//! Receive-side flow control: when to announce a new MAX_DATA or MAX_STREAM_DATA limit, and
//! window autotuning. One type serves a stream and the whole connection.

use crate::ack::NEVER;
use onionlab_engine::time::{SimDuration, SimTime};

#[derive(Clone, Debug)]
pub(crate) struct RecvWindow {
    /// The limit announced to the peer: an absolute offset (or, for the connection, a sum of
    /// stream offsets) the peer may send up to.
    pub limit: u64,
    /// Credit granted by each announcement.
    pub window: u64,
    /// When the last announcement was made (`NEVER` before the first).
    last_update: SimTime,
}

impl RecvWindow {
    pub(crate) fn new(window: u64) -> Self {
        RecvWindow {
            limit: window,
            window,
            last_update: NEVER,
        }
    }

    /// The application has consumed up to `consumed`. Returns whether a new limit is due: once
    /// more than half the window has been consumed since the last announcement (so a limit
    /// goes out about twice per window, as in quinn and Chromium). With `autotune`, a window
    /// whose previous update came less than two smoothed RTTs ago is doubled, up to `max`:
    /// the reader drains it faster than one round trip could refill it, so it limits the
    /// transfer (Chromium's receive-window autotuning).
    pub(crate) fn on_consumed(
        &mut self,
        consumed: u64,
        now: SimTime,
        srtt: SimDuration,
        max: u64,
        autotune: bool,
    ) -> bool {
        if self.limit.saturating_sub(consumed) > self.window / 2 {
            return false;
        }
        if autotune
            && self.last_update != NEVER
            && now.saturating_sub(self.last_update) < 2 * srtt
            && self.window < max
        {
            self.window = (2 * self.window).min(max);
        }
        self.last_update = now;
        self.limit = consumed + self.window;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn announces_after_half_and_autotunes() {
        let mut w = RecvWindow::new(1000);
        assert!(!w.on_consumed(499, 0, 100, 8000, true));
        assert!(w.on_consumed(500, 10, 100, 8000, true));
        // First update: nothing to compare with, no growth.
        assert_eq!((w.limit, w.window), (1500, 1000));
        // Next one due 50 ns later, within 2 RTTs: doubled.
        assert!(w.on_consumed(1000, 60, 100, 8000, true));
        assert_eq!((w.limit, w.window), (3000, 2000));
        // A slow reader: no growth.
        assert!(w.on_consumed(2000, 10_000, 100, 8000, true));
        assert_eq!((w.limit, w.window), (4000, 2000));
        // Capped.
        let mut w = RecvWindow::new(1000);
        for i in 0..20 {
            w.on_consumed(w.limit, i, 100, 3000, true);
        }
        assert_eq!(w.window, 3000);
    }
}
