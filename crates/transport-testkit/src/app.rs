//! The scripted applications at the endpoints: what each writes, reads and closes, and, for
//! QUIC streams, what it observed, so that tests can assert on delivery.

use onionlab_engine::time::SimTime;
use std::collections::BTreeMap;

/// What the application on an endpoint does. Fields marked TCP or QUIC apply to connections
/// of that transport only; a test sets what its scenario needs on top of [`App::sink`].
#[derive(Clone, Debug)]
pub struct App {
    /// Read whatever arrives (on QUIC, on every stream, within `read_rate`).
    pub reading: bool,
    /// TCP: bytes still to write (`u64::MAX`: an endless bulk source).
    pub to_send: u64,
    /// TCP: close once everything is written.
    pub close_when_done: bool,
    /// TCP: close once the peer has finished (a server answering a client's close).
    pub close_on_peer_fin: bool,
    /// TCP: bytes read so far.
    pub read_total: u64,
    /// TCP: the application has closed its side.
    pub closed: bool,
    /// QUIC: streams to open at start, `(bytes, finish when written)`.
    pub open: Vec<(u64, bool)>,
    /// QUIC: reply written on each peer-opened stream once the peer finished it.
    pub reply: Option<u64>,
    /// QUIC: reader limited to this many bytes per second, granted every [`Sim::tick`]
    /// (None: reads everything at once).
    ///
    /// [`Sim::tick`]: crate::Sim::tick
    pub read_rate: Option<u64>,
    /// QUIC: bytes the rate-limited reader may still read.
    pub read_budget: u64,
    /// QUIC: bytes written on the first stream at every tick (an application-limited source).
    pub write_per_tick: u64,
    /// QUIC: keep `(time, read offset)` samples per stream in [`StreamApp::progress`].
    pub record_progress: bool,
}

impl App {
    /// An application that only reads.
    pub fn sink() -> Self {
        App {
            reading: true,
            to_send: 0,
            close_when_done: false,
            close_on_peer_fin: false,
            read_total: 0,
            closed: false,
            open: Vec::new(),
            reply: None,
            read_rate: None,
            read_budget: 0,
            write_per_tick: 0,
            record_progress: false,
        }
    }

    /// A TCP application that writes `bytes`, then closes if `close`, and reads what arrives.
    pub fn source(bytes: u64, close: bool) -> Self {
        App {
            to_send: bytes,
            close_when_done: close,
            ..App::sink()
        }
    }
}

/// What the application does with one QUIC stream, and what it observed.
#[derive(Clone, Debug, Default)]
pub struct StreamApp {
    /// Bytes still to write (`u64::MAX`: endless).
    pub to_send: u64,
    /// Finish once everything is written.
    pub fin_when_done: bool,
    /// The application has finished its side.
    pub fin_sent: bool,
    /// Bytes to write back once the peer finished (then finish).
    pub reply: Option<u64>,
    /// Bytes the connection accepted.
    pub written: u64,
    /// Bytes read, in order.
    pub read: u64,
    /// The peer finished the stream.
    pub peer_finished: bool,
    /// When the peer's finish was reported.
    pub finished_at: Option<SimTime>,
    /// Byte ranges that arrived in STREAM frames (start -> end), merged: every read must lie
    /// inside one, or the connection delivered bytes that never crossed the network.
    pub arrived: BTreeMap<u64, u64>,
    /// `(time, read offset)` samples, when the app records progress.
    pub progress: Vec<(SimTime, u64)>,
}

impl StreamApp {
    /// Notes that `[start, end)` arrived in a STREAM frame.
    pub(crate) fn note_arrival(&mut self, start: u64, end: u64) {
        if start >= end {
            return;
        }
        let mut s = start;
        let mut e = end;
        // Merge with overlapping or touching ranges.
        let keys: Vec<u64> = self
            .arrived
            .range(..=e)
            .filter(|(&a, &b)| b >= s && a <= e)
            .map(|(&a, _)| a)
            .collect();
        for k in keys {
            let v = self.arrived.remove(&k).expect("a key just listed");
            s = s.min(k);
            e = e.max(v);
        }
        self.arrived.insert(s, e);
    }

    /// Whether `[start, end)` arrived, all of it.
    pub(crate) fn covered(&self, start: u64, end: u64) -> bool {
        start >= end
            || self
                .arrived
                .range(..=start)
                .next_back()
                .is_some_and(|(_, &e)| e >= end)
    }
}
