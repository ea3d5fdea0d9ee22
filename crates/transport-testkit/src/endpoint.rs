//! One end of a flow: its connection (once it exists), its application and what it logged.

use crate::app::{App, StreamApp};
use crate::transport::{Conn, Event, Pkt, Proto};
use crate::NEVER;
use onionlab_engine::time::SimTime;
use onionlab_tcp::TcpSegment;
use std::collections::BTreeMap;

/// An endpoint of the simulated network.
pub struct Endpoint {
    /// The connection: from the start on a client, from the first packet on a server.
    pub conn: Option<Conn>,
    /// The transport and configuration a server accepts with.
    pub proto: Proto,
    /// The application's script.
    pub app: App,
    /// QUIC: each stream's application, by stream id.
    pub streams: BTreeMap<u64, StreamApp>,
    /// Every notification the connection raised, with when.
    pub events: Vec<(SimTime, Event)>,
    /// Every packet this endpoint handed to the network, when `record` is on.
    pub sent: Vec<(SimTime, Pkt)>,
    /// Keep `sent`: off by default, since bulk runs send hundreds of thousands of packets.
    pub record: bool,
    /// The deadline the event loop holds a timer for ([`NEVER`]: none).
    pub(crate) timer_at: SimTime,
    /// QUIC: the streams of `app.open` have been opened.
    pub(crate) started: bool,
    /// TCP: the delivered count at the last look, which must never go back.
    pub(crate) last_delivered: u64,
}

impl Endpoint {
    pub(crate) fn new(conn: Option<Conn>, proto: Proto) -> Self {
        Endpoint {
            conn,
            proto,
            app: App::sink(),
            streams: BTreeMap::new(),
            events: Vec::new(),
            sent: Vec::new(),
            record: false,
            timer_at: NEVER,
            started: false,
            last_delivered: 0,
        }
    }

    /// The TCP segments in `sent`, in order, with when they were sent.
    pub fn tcp_sent(&self) -> impl Iterator<Item = (SimTime, &TcpSegment)> + '_ {
        self.sent.iter().filter_map(|(t, p)| match p {
            Pkt::Tcp(seg) => Some((*t, seg)),
            Pkt::Quic(_) => None,
        })
    }

    /// Whether the connection raised `e` at some point.
    pub fn has_event(&self, e: impl Into<Event>) -> bool {
        let e = e.into();
        self.events.iter().any(|&(_, x)| x == e)
    }

    /// When the connection first raised `e`.
    pub fn event_time(&self, e: impl Into<Event>) -> Option<SimTime> {
        let e = e.into();
        self.events.iter().find(|&&(_, x)| x == e).map(|&(t, _)| t)
    }
}
