//! Legacy fixed SENDME windows (tor-spec 7.3 circuit level, 7.4 stream level).
//!
//! Before proposal 324 every circuit and stream had a fixed window: the sender may have at most
//! 1000 (circuit) or 500 (stream) DATA cells unacknowledged, and the receiver returns a SENDME
//! per 100 / 50 cells. They still matter for circuits that do not negotiate congestion control
//! and for comparing the old network with today's.

use crate::params::TorParams;

/// A SENDME protocol violation; Tor closes the circuit (or stream) on either.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendmeError {
    /// A SENDME arrived that would take the package window above its start value: the peer
    /// acknowledged cells that were never sent.
    UnexpectedSendme,
    /// A DATA cell arrived with the deliver window already exhausted: the peer ignored the
    /// window.
    WindowExceeded,
}

impl std::fmt::Display for SendmeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SendmeError::UnexpectedSendme => f.write_str("unexpected SENDME"),
            SendmeError::WindowExceeded => f.write_str("DATA cell beyond the deliver window"),
        }
    }
}

impl std::error::Error for SendmeError {}

/// The sending side: how many more DATA cells may be packaged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PackageWindow {
    window: u32,
    start: u32,
    increment: u32,
}

impl PackageWindow {
    /// A full window of `start` cells, reopened by `increment` cells per SENDME.
    pub fn new(start: u32, increment: u32) -> Self {
        Self {
            window: start,
            start,
            increment,
        }
    }

    /// A circuit's window (`circuit_window`, `circuit_sendme_increment`).
    pub fn circuit(params: &TorParams) -> Self {
        Self::new(params.circuit_window, params.circuit_sendme_increment)
    }

    /// A stream's window (`stream_window`, `stream_sendme_increment`).
    pub fn stream(params: &TorParams) -> Self {
        Self::new(params.stream_window, params.stream_sendme_increment)
    }

    /// Whether one more DATA cell may be packaged.
    pub fn can_package(&self) -> bool {
        self.window > 0
    }

    /// Accounts for one packaged DATA cell. Packaging with a closed window is a bug in the
    /// caller, not a peer's misbehaviour, hence the assertion rather than an error.
    pub fn on_packaged(&mut self) {
        debug_assert!(self.window > 0, "packaged a cell with a closed window");
        self.window = self.window.saturating_sub(1);
    }

    /// A SENDME arrived: reopen the window by one increment.
    pub fn on_sendme(&mut self) -> Result<(), SendmeError> {
        if self.window + self.increment > self.start {
            return Err(SendmeError::UnexpectedSendme);
        }
        self.window += self.increment;
        Ok(())
    }

    /// DATA cells that may still be packaged before a SENDME must arrive.
    pub fn window(&self) -> u32 {
        self.window
    }

    /// Cells packaged and not yet acknowledged.
    pub fn in_flight(&self) -> u32 {
        self.start - self.window
    }
}

/// The receiving side: counts DATA cells and says when a SENDME is owed.
///
/// Receipt and acknowledgement are separate steps because Tor acknowledges streams only once
/// the data has drained towards the application (the edge connection's outbuf is not too full),
/// while circuit-level SENDMEs go out as soon as the cell is received; `on_delivered` combines
/// them for the circuit case.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeliverWindow {
    window: u32,
    start: u32,
    increment: u32,
}

impl DeliverWindow {
    /// A full window of `start` cells, with a SENDME owed per `increment` cells received.
    pub fn new(start: u32, increment: u32) -> Self {
        Self {
            window: start,
            start,
            increment,
        }
    }

    /// A circuit's window (`circuit_window`, `circuit_sendme_increment`).
    pub fn circuit(params: &TorParams) -> Self {
        Self::new(params.circuit_window, params.circuit_sendme_increment)
    }

    /// A stream's window (`stream_window`, `stream_sendme_increment`).
    pub fn stream(params: &TorParams) -> Self {
        Self::new(params.stream_window, params.stream_sendme_increment)
    }

    /// One DATA cell received.
    pub fn on_received(&mut self) -> Result<(), SendmeError> {
        if self.window == 0 {
            return Err(SendmeError::WindowExceeded);
        }
        self.window -= 1;
        Ok(())
    }

    /// Whether a SENDME is owed now; if so the window is credited as Tor does when it sends
    /// one. Call repeatedly until it returns false: a delayed stream may owe several.
    pub fn take_sendme(&mut self) -> bool {
        if self.window + self.increment <= self.start {
            self.window += self.increment;
            true
        } else {
            false
        }
    }

    /// Receipt and immediate acknowledgement (circuit level): true when a SENDME must be sent.
    pub fn on_delivered(&mut self) -> Result<bool, SendmeError> {
        self.on_received()?;
        Ok(self.take_sendme())
    }

    /// DATA cells that may still arrive before the window is exhausted; each SENDME sent
    /// credits it back by the increment.
    pub fn window(&self) -> u32 {
        self.window
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;

    use crate::test_rng::Rng;

    #[test]
    fn package_window_counts_down_and_rejects_excess_sendmes() {
        let p = TorParams::default();
        let mut w = PackageWindow::circuit(&p);
        assert_eq!(w.window(), 1000);
        assert_eq!(w.on_sendme(), Err(SendmeError::UnexpectedSendme));
        for _ in 0..1000 {
            assert!(w.can_package());
            w.on_packaged();
        }
        assert!(!w.can_package());
        assert_eq!(w.in_flight(), 1000);
        assert_eq!(w.on_sendme(), Ok(()));
        assert_eq!(w.window(), 100);
        for _ in 0..9 {
            w.on_sendme().unwrap();
        }
        assert_eq!(w.window(), 1000);
        assert!(w.on_sendme().is_err());

        let mut s = PackageWindow::stream(&p);
        for _ in 0..49 {
            s.on_packaged();
        }
        assert_eq!(
            s.on_sendme(),
            Err(SendmeError::UnexpectedSendme),
            "451 + 50 > 500"
        );
        s.on_packaged();
        assert_eq!(s.on_sendme(), Ok(()));
    }

    #[test]
    fn deliver_window_asks_for_a_sendme_every_increment() {
        let p = TorParams::default();
        let mut d = DeliverWindow::circuit(&p);
        let mut sendmes = 0;
        for i in 1..=1000 {
            if d.on_delivered().unwrap() {
                sendmes += 1;
                assert_eq!(i % 100, 0, "SENDME after cell {i}");
            }
        }
        assert_eq!(sendmes, 10);

        let mut s = DeliverWindow::stream(&p);
        for _ in 0..500 {
            s.on_received().unwrap();
        }
        assert_eq!(s.on_received(), Err(SendmeError::WindowExceeded));
        let mut owed = 0;
        while s.take_sendme() {
            owed += 1;
        }
        assert_eq!(owed, 10);
    }

    /// A sender and receiver joined by a network with random delays, a receiver that
    /// acknowledges at random times, and SENDMEs that come back at random times: the receiver
    /// never holds more unacknowledged-by-it cells than the window and nothing is a violation.
    fn run_pair(start: u32, inc: u32, delay_acks: bool, seed: u64) -> u32 {
        let mut rng = Rng(seed);
        let mut pw = PackageWindow::new(start, inc);
        let mut dw = DeliverWindow::new(start, inc);
        // (arrival time) of cells in flight and SENDMEs in flight; FIFO like a circuit.
        let mut cells: VecDeque<u64> = VecDeque::new();
        let mut sendmes: VecDeque<u64> = VecDeque::new();
        let (mut sent, mut received, mut max_in_flight) = (0u64, 0u64, 0u32);
        for now in 0..20_000u64 {
            // Sender: package a random burst while the window allows.
            for _ in 0..rng.below(40) {
                if !pw.can_package() {
                    break;
                }
                pw.on_packaged();
                sent += 1;
                let at = cells
                    .back()
                    .copied()
                    .unwrap_or(0)
                    .max(now + 1 + rng.below(30));
                cells.push_back(at);
            }
            // Receiver: cells that have arrived.
            while cells.front().is_some_and(|&t| t <= now) {
                cells.pop_front();
                dw.on_received().expect("receiver window exceeded");
                received += 1;
            }
            let in_flight = (sent - received) as u32 + (start - dw.window());
            max_in_flight = max_in_flight.max((sent - received) as u32);
            assert!(in_flight <= start, "{in_flight} > {start}");
            if !delay_acks || rng.below(4) == 0 {
                while dw.take_sendme() {
                    let at = sendmes
                        .back()
                        .copied()
                        .unwrap_or(0)
                        .max(now + 1 + rng.below(30));
                    sendmes.push_back(at);
                }
            }
            while sendmes.front().is_some_and(|&t| t <= now) {
                sendmes.pop_front();
                pw.on_sendme().expect("unexpected SENDME");
            }
            assert!(pw.in_flight() <= start);
        }
        assert!(received > 10 * start as u64, "the pair made progress");
        max_in_flight
    }

    #[test]
    fn never_more_than_a_window_in_flight_for_any_timing() {
        for seed in 1..=30u64 {
            let s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15);
            let m = run_pair(1000, 100, false, s);
            assert!(m <= 1000);
            let m = run_pair(500, 50, true, s ^ 0xABCD);
            assert!(m <= 500);
        }
    }
}
