//! RFC 5681 congestion avoidance: one segment per window of acknowledged data.

#[derive(Clone, Debug, Default)]
pub(super) struct Reno {
    /// Bytes acknowledged since cwnd last grew (appropriate byte counting, RFC 3465).
    acked: u64,
}

impl Reno {
    pub(super) fn on_ack(&mut self, cwnd: &mut u64, acked: u64, mss: u64) {
        self.acked += acked;
        while self.acked >= *cwnd {
            self.acked -= *cwnd;
            *cwnd += mss;
        }
    }

    pub(super) fn reset(&mut self) {
        self.acked = 0;
    }
}
