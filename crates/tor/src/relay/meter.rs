//! What a relay measures: the counters of the current second and the per-second samples
//! they become (`relays.csv`), what its channel design did (`run.json`'s `transport`), and
//! the bounds tests check (cells in flight, KIST's limits).
//!
//! None of it feeds back into what the relay does: the model reads nothing here.

use crate::measure::RelaySample;

use super::ChannelStats;
#[cfg(feature = "audit")]
use super::KistAudit;

/// Counters of the current second.
#[derive(Default)]
pub(super) struct Counters {
    pub bytes_read: u64,
    pub bytes_written: u64,
    pub cells_in: u64,
    pub cells_out: u64,
    /// Circuits closed because their queue exceeded the cap.
    pub circuits_killed: u64,
    /// Connections refused or not opened because of ConnLimit.
    pub conn_limit_refusals: u64,
}

/// The state of the relay at the end of a second, which a sample records beside its
/// counters.
pub(super) struct SecondEnd {
    pub second: u64,
    pub queued_cells: u64,
    pub open_sockets: u32,
    pub socket_queued_bytes: u64,
    pub cpu: Option<crate::cpu::CpuSecond>,
}

/// A relay's measurements.
#[derive(Default)]
pub struct RelayMeter {
    /// This second's counters, until the sample takes them.
    pub(super) second: Counters,
    /// One sample per second of the run.
    pub samples: Vec<RelaySample>,
    /// What the channel design counts.
    pub channels: ChannelStats,
    /// Largest number of cells in flight seen on any exit circuit: DATA cells packaged minus
    /// the cells acknowledged by the SENDMEs accepted, counted apart from the window state.
    pub max_circuit_in_flight: u32,
    /// The same for exit streams (windowed streams, SENDME flow control, only).
    pub max_stream_in_flight: u32,
    /// Times a channel still had cells when its write limit ran out.
    pub write_limit_hits: u64,
    /// KIST's limits as the sockets saw them, when asked for (`Some`): the audit reads every
    /// written socket's state a second time in each run. Only tests read it, so it exists
    /// only with the crate's `audit` feature, which the crate's own tests turn on.
    #[cfg(feature = "audit")]
    pub kist_audit: Option<KistAudit>,
}

impl RelayMeter {
    /// Ends a second: its counters and `end` become a sample, and the next second counts
    /// from zero.
    pub(super) fn sample(&mut self, end: SecondEnd) {
        let c = std::mem::take(&mut self.second);
        self.samples.push(RelaySample {
            second: end.second,
            bytes_read: c.bytes_read,
            bytes_written: c.bytes_written,
            cells_in: c.cells_in,
            cells_out: c.cells_out,
            queued_cells: end.queued_cells,
            open_sockets: end.open_sockets,
            socket_queued_bytes: end.socket_queued_bytes,
            circuits_killed: c.circuits_killed,
            conn_limit_refusals: c.conn_limit_refusals,
            cpu: end.cpu,
        });
    }

    /// Notes the cells in flight on an exit circuit after it packaged one.
    #[inline]
    pub(super) fn circuit_in_flight(&mut self, cells: u64) {
        self.max_circuit_in_flight = self.max_circuit_in_flight.max(saturate(cells));
    }

    /// Notes the cells in flight on a windowed exit stream after it packaged one.
    #[inline]
    pub(super) fn stream_in_flight(&mut self, cells: u64) {
        self.max_stream_in_flight = self.max_stream_in_flight.max(saturate(cells));
    }

    /// Notes how many sockets are open after one more opened.
    pub(super) fn sockets_open(&mut self, open: u32) {
        self.channels.max_open_sockets = self.channels.max_open_sockets.max(open);
    }
}

fn saturate(cells: u64) -> u32 {
    cells.min(u32::MAX as u64) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sample_takes_the_seconds_counters_and_the_next_starts_from_zero() {
        let mut m = RelayMeter::default();
        m.second.cells_in = 7;
        m.second.conn_limit_refusals = 2;
        let end = |second| SecondEnd {
            second,
            queued_cells: 3,
            open_sockets: 4,
            socket_queued_bytes: 5,
            cpu: None,
        };
        m.sample(end(1));
        m.second.cells_out = 1;
        m.sample(end(2));
        let s = &m.samples;
        assert_eq!(
            (s[0].second, s[0].cells_in, s[0].conn_limit_refusals),
            (1, 7, 2)
        );
        assert_eq!(
            (
                s[0].queued_cells,
                s[0].open_sockets,
                s[0].socket_queued_bytes
            ),
            (3, 4, 5)
        );
        assert_eq!(
            (s[1].cells_in, s[1].cells_out, s[1].conn_limit_refusals),
            (0, 1, 0)
        );
    }

    #[test]
    fn maxima_keep_the_largest_and_saturate() {
        let mut m = RelayMeter::default();
        m.circuit_in_flight(10);
        m.circuit_in_flight(4);
        m.stream_in_flight(u64::MAX);
        m.sockets_open(3);
        m.sockets_open(2);
        assert_eq!(m.max_circuit_in_flight, 10);
        assert_eq!(m.max_stream_in_flight, u32::MAX);
        assert_eq!(m.channels.max_open_sockets, 3);
    }
}
