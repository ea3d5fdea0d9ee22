//! End-to-end flow and congestion control of circuits and streams, as the model's edges use it.
//!
//! Downloads flow from the exit to the client, so the exit is the sending end (package
//! windows, or Vegas congestion control) and the client the receiving end (it owes SENDMEs);
//! uploads flow the other way, with the same types at the other ends. Under congestion
//! control a SENDME acknowledges `cc_sendme_inc` cells and streams rely on XON/XOFF instead
//! of windows.

use onionlab_engine::time::SimTime;
use onionlab_torcore::sendme::{DeliverWindow, PackageWindow, SendmeError};
use onionlab_torcore::vegas::VegasCc;
use onionlab_torcore::{FlowControl, TorParams};

/// The sending end of a circuit.
pub(crate) enum CircuitSender {
    Sendme(PackageWindow),
    Vegas(Box<VegasCc>),
}

impl CircuitSender {
    pub(crate) fn new(params: &TorParams, now: SimTime) -> Self {
        match params.flow_control {
            FlowControl::Sendme => CircuitSender::Sendme(PackageWindow::circuit(params)),
            FlowControl::Vegas => CircuitSender::Vegas(Box::new(VegasCc::new(params, true, now))),
        }
    }

    pub(crate) fn can_send(&self) -> bool {
        match self {
            CircuitSender::Sendme(window) => window.can_package(),
            CircuitSender::Vegas(cc) => cc.can_send(),
        }
    }

    pub(crate) fn on_sent(&mut self, now: SimTime) {
        match self {
            CircuitSender::Sendme(window) => window.on_packaged(),
            CircuitSender::Vegas(cc) => cc.on_cell_sent(now),
        }
    }

    /// A circuit-level SENDME arrived. `blocked` says whether the channel towards the client
    /// is currently full (Vegas treats that as congestion). Returns false on a protocol
    /// violation (a SENDME nothing was sent for).
    pub(crate) fn on_sendme(&mut self, now: SimTime, blocked: bool) -> bool {
        match self {
            CircuitSender::Sendme(window) => window.on_sendme().is_ok(),
            CircuitSender::Vegas(cc) => cc.on_sendme(now, blocked).is_ok(),
        }
    }

    /// The congestion window (Vegas) or what is left of the package window (SENDME), in
    /// cells.
    pub(crate) fn window(&self) -> u32 {
        match self {
            CircuitSender::Sendme(window) => window.window(),
            CircuitSender::Vegas(cc) => cc.cwnd() as u32,
        }
    }

    /// Cells sent and not yet acknowledged.
    pub(crate) fn in_flight(&self) -> u32 {
        match self {
            CircuitSender::Sendme(window) => window.in_flight(),
            CircuitSender::Vegas(cc) => cc.inflight() as u32,
        }
    }
}

/// The receiving end of a circuit: decides when a circuit-level SENDME is owed.
pub(crate) enum CircuitReceiver {
    Sendme(DeliverWindow),
    Vegas { since_sendme: u32, every: u32 },
}

impl CircuitReceiver {
    pub(crate) fn new(params: &TorParams) -> Self {
        match params.flow_control {
            FlowControl::Sendme => CircuitReceiver::Sendme(DeliverWindow::circuit(params)),
            FlowControl::Vegas => CircuitReceiver::Vegas {
                since_sendme: 0,
                every: params.cc_sendme_inc,
            },
        }
    }

    /// A DATA cell was delivered; true if a SENDME must be sent now. An error means the peer
    /// sent beyond the deliver window, a protocol violation tor answers by closing the circuit;
    /// the model's exits never do it, and callers count it rather than act on it.
    pub(crate) fn on_data(&mut self) -> Result<bool, SendmeError> {
        match self {
            CircuitReceiver::Sendme(w) => w.on_delivered(),
            CircuitReceiver::Vegas {
                since_sendme,
                every,
            } => {
                *since_sendme += 1;
                if *since_sendme >= *every {
                    *since_sendme = 0;
                    Ok(true)
                } else {
                    Ok(false)
                }
            }
        }
    }
}

/// The sending end of a stream: a package window under SENDME flow control; under congestion
/// control only the receiver's XOFF stops it.
pub(crate) enum StreamSender {
    Sendme(PackageWindow),
    Xon { xoff: bool },
}

impl StreamSender {
    pub(crate) fn new(params: &TorParams) -> Self {
        match params.flow_control {
            FlowControl::Sendme => StreamSender::Sendme(PackageWindow::stream(params)),
            FlowControl::Vegas => StreamSender::Xon { xoff: false },
        }
    }

    pub(crate) fn can_send(&self) -> bool {
        match self {
            StreamSender::Sendme(w) => w.can_package(),
            StreamSender::Xon { xoff } => !xoff,
        }
    }

    pub(crate) fn on_sent(&mut self) {
        if let StreamSender::Sendme(w) = self {
            w.on_packaged();
        }
    }

    /// Whether the stream has a package window (SENDME flow control).
    pub(crate) fn windowed(&self) -> bool {
        matches!(self, StreamSender::Sendme(_))
    }

    pub(crate) fn on_sendme(&mut self) -> bool {
        match self {
            StreamSender::Sendme(w) => w.on_sendme().is_ok(),
            StreamSender::Xon { .. } => false,
        }
    }

    pub(crate) fn set_xoff(&mut self, off: bool) {
        if let StreamSender::Xon { xoff } = self {
            *xoff = off;
        }
    }
}

/// The receiving end of a stream: owes stream SENDMEs under SENDME flow control only.
pub(crate) enum StreamReceiver {
    Sendme(DeliverWindow),
    None,
}

impl StreamReceiver {
    pub(crate) fn new(params: &TorParams) -> Self {
        match params.flow_control {
            FlowControl::Sendme => StreamReceiver::Sendme(DeliverWindow::stream(params)),
            FlowControl::Vegas => StreamReceiver::None,
        }
    }

    /// As `CircuitReceiver::on_data`.
    pub(crate) fn on_data(&mut self) -> Result<bool, SendmeError> {
        match self {
            StreamReceiver::Sendme(w) => w.on_delivered(),
            StreamReceiver::None => Ok(false),
        }
    }

    /// A DATA cell arrived; its acknowledgement waits for [`StreamReceiver::take_sendme`]. An
    /// exit acknowledges an upload's cells only once their bytes have gone on towards the
    /// server, as tor sends no stream SENDME while the edge connection's buffer is full, so a
    /// slow server holds the client back.
    pub(crate) fn on_received(&mut self) -> Result<(), SendmeError> {
        match self {
            StreamReceiver::Sendme(w) => w.on_received(),
            StreamReceiver::None => Ok(()),
        }
    }

    /// Whether a stream SENDME is owed now (crediting it); call until false.
    pub(crate) fn take_sendme(&mut self) -> bool {
        match self {
            StreamReceiver::Sendme(w) => w.take_sendme(),
            StreamReceiver::None => false,
        }
    }
}
