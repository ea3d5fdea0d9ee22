//! The connection state machine: ties the handshake, packet number spaces, loss detection,
//! congestion control, flow control and streams together behind the sans-IO interface.

use crate::ack::NEVER;
use crate::config::QuicConfig;
use crate::crypto::{Crypto, CLIENT_FINISHED, CLIENT_HELLO, SERVER_HELLO};
use crate::flow::RecvWindow;
use crate::packet::{
    header_len, pn_len, stream_frame_overhead, varint_len, Frames, QuicPacket, Space, StreamFrame,
    StreamId, AEAD_TAG,
};
use crate::recovery::{self, SentPacket, SpaceState};
use crate::rtt::{RttEstimator, GRANULARITY};
use crate::stream::{Stream, StreamTable};
use onionlab_congestion::Congestion;
use onionlab_engine::time::{SimDuration, SimTime};
use std::collections::VecDeque;
use std::sync::Arc;

/// Notifications for the application, in the order they happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QuicEvent {
    /// Handshake complete on this side.
    Connected,
    /// The peer opened a stream (its first frame arrived).
    StreamOpened(StreamId),
    /// New in-order bytes wait to be read (reported again only after a `read`).
    StreamReadable(StreamId),
    /// Send-buffer space freed after a write found it full (or after `wait_writable`).
    StreamWritable(StreamId),
    /// The peer's FIN arrived and everything before it has been read.
    StreamFinished(StreamId),
    /// Closed, locally or by the peer's CONNECTION_CLOSE.
    Closed,
    /// Nothing received for the idle timeout.
    TimedOut,
}

/// State and counters, in the spirit of `tcp_info`, so the overhead and behaviour of QUIC can
/// be reported next to TCP's.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct QuicInfo {
    /// The handshake completed on this side and the connection is not closed.
    pub established: bool,
    /// Congestion window, bytes.
    pub cwnd: u64,
    /// Slow-start threshold, bytes (`u64::MAX` before the first congestion event).
    pub ssthresh: u64,
    /// Bytes of ack-eliciting packets sent and neither acknowledged, declared lost nor
    /// discarded with their space (RFC 9002's `bytes_in_flight`).
    pub bytes_in_flight: u64,
    /// Largest UDP payload a packet may have, bytes (`max_udp_payload` after clamping).
    pub max_datagram: u32,
    /// Smoothed RTT (RFC 9002 5.3); `initial_rtt` before the first sample.
    pub srtt: SimDuration,
    /// RTT variation (RFC 9002 5.3); half of `initial_rtt` before the first sample.
    pub rttvar: SimDuration,
    /// Smallest RTT sample so far; 0 before the first.
    pub min_rtt: SimDuration,
    /// Consecutive PTOs now.
    pub pto_count: u32,
    /// Packets sent in all spaces, ACK-only and CONNECTION_CLOSE packets included.
    pub packets_sent: u64,
    /// Packets declared lost by the packet or time threshold (RFC 9002 6.1).
    pub packets_lost: u64,
    /// PTO expiries in total.
    pub ptos: u64,
    /// UDP payload bytes of every packet sent.
    pub udp_bytes_sent: u64,
    /// Stream payload bytes sent for the first time.
    pub stream_bytes_sent: u64,
    /// Stream payload bytes sent again (after loss, or as probes).
    pub stream_bytes_retransmitted: u64,
    /// In-order stream bytes delivered to the receive buffers.
    pub stream_bytes_received: u64,
    /// Stream bytes written by the application and never sent yet, all streams.
    pub unsent: u64,
    /// Losses that started a recovery period and so reduced the congestion window.
    pub congestion_events: u64,
    /// Times persistent congestion collapsed the window to its minimum (RFC 9002 7.6).
    pub persistent_congestion: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Handshaking,
    Established,
    Closed,
    TimedOut,
}

/// Bytes of a CONNECTION_CLOSE frame: type, error code, frame type and an empty reason.
const CLOSE_FRAME: u32 = 4;
/// Minimum payload of a client's Initial datagram (RFC 9000 14.1).
const MIN_INITIAL: u32 = 1200;
/// Anti-amplification factor (RFC 9000 8.1).
const AMPLIFICATION: u64 = 3;
/// Packet-reordering threshold (RFC 9002 6.1.1).
const PACKET_THRESHOLD: u64 = 3;
/// Persistent-congestion threshold in PTOs (RFC 9002 7.6.1).
const PERSISTENT_CONGESTION_THRESHOLD: u64 = 3;
/// Headroom for the frame headers of the (up to two) STREAM frames when judging whether all
/// pending stream data fits a window-limited packet.
const STREAM_FRAMES_HEADROOM: u64 = 32;

/// One endpoint of a QUIC connection.
#[derive(Clone, Debug)]
pub struct QuicConnection {
    /// Shared by every connection made with it; values needing clamps are clamped at use.
    cfg: Arc<QuicConfig>,
    /// Initial and Handshake spaces, each dropped when its keys are discarded, the box once
    /// both are: an established connection carries only its 1-RTT space.
    hs: Option<Box<[Option<SpaceState>; 2]>>,
    data: SpaceState,
    rtt: RttEstimator,
    cc: Congestion,
    bytes_in_flight: u64,
    /// Packets sent at or before this time belong to the current recovery period (`NEVER`:
    /// none).
    recovery_start: SimTime,
    /// When the first RTT sample was taken: persistent congestion needs losses after it.
    first_sample_at: SimTime,
    /// Congestion-window validation, per flight ending at packet `win_end_pn` (as the TCP
    /// model does, after Linux's `tcp_is_cwnd_limited`): the window grows only if the sender
    /// used it (RFC 9002 7.8).
    win_end_pn: u64,
    win_max_flight: u64,
    prev_max_flight: u64,
    win_limited: bool,
    prev_limited: bool,
    pto_count: u32,
    /// Streams this side opened and streams the peer opened.
    local: StreamTable,
    remote: StreamTable,
    /// Streams with something to send, served round robin.
    send_queue: VecDeque<u64>,
    /// Streams owing a MAX_STREAM_DATA.
    flow_queue: VecDeque<u64>,
    /// Streams that may have finished in both directions, to be forgotten.
    reap_queue: VecDeque<u64>,
    /// Connection-level receive window (the MAX_DATA we announce).
    conn_window: RecvWindow,
    /// Stream bytes the application read, all streams.
    conn_read: u64,
    /// Sum of the highest offsets received on every stream (what MAX_DATA limits).
    conn_received: u64,
    /// The peer's MAX_DATA, and the new stream bytes sent against it.
    peer_max_data: u64,
    data_sent: u64,
    unsent: u64,
    /// Stream bytes queued for retransmission, all streams.
    retx_pending: u64,
    events: VecDeque<QuicEvent>,
    /// Bytes received before the peer's address was validated (server anti-amplification).
    bytes_received: u64,
    last_received: SimTime,
    /// When the last ack-eliciting packet was sent in any space.
    last_eliciting: SimTime,
    packets_sent: u64,
    packets_lost: u64,
    ptos: u64,
    udp_bytes_sent: u64,
    stream_bytes_sent: u64,
    stream_bytes_retransmitted: u64,
    stream_bytes_received: u64,
    congestion_events: u64,
    persistent_congestion: u64,
    state: State,
    client: bool,
    /// Handshake keys are available: the ServerHello (client) or ClientHello (server) is in.
    hs_keys: bool,
    /// Handshake confirmed (RFC 9001 4.1.2): the server at completion, the client on
    /// HANDSHAKE_DONE or an acknowledged 1-RTT packet.
    confirmed: bool,
    /// The peer's address is validated: always for a client; for a server once a Handshake
    /// packet arrived. Until then a server sends at most three times what it received.
    validated: bool,
    handshake_done_pending: bool,
    max_data_pending: bool,
    /// The space a CONNECTION_CLOSE is owed in.
    close_pending: Option<Space>,
}

impl QuicConnection {
    fn new(cfg: Arc<QuicConfig>, now: SimTime, client: bool) -> Self {
        let server_rest = cfg.server_handshake_bytes.max(SERVER_HELLO + 1) - SERVER_HELLO;
        let (initial, handshake) = if client {
            (
                Crypto::new(CLIENT_HELLO, SERVER_HELLO),
                Crypto::new(0, server_rest),
            )
        } else {
            // The server's flight is queued once the ClientHello is complete.
            (
                Crypto::new(0, CLIENT_HELLO),
                Crypto::new(0, CLIENT_FINISHED),
            )
        };
        let cc = Congestion::new(cfg.congestion, cfg.initial_window());
        let conn_window = cfg.conn_window();
        QuicConnection {
            hs: Some(Box::new([
                Some(SpaceState::new(initial)),
                Some(SpaceState::new(handshake)),
            ])),
            data: SpaceState::new(Crypto::default()),
            rtt: RttEstimator::new(cfg.initial_rtt()),
            cc,
            bytes_in_flight: 0,
            recovery_start: NEVER,
            first_sample_at: NEVER,
            win_end_pn: 0,
            win_max_flight: 0,
            prev_max_flight: 0,
            win_limited: false,
            prev_limited: false,
            pto_count: 0,
            local: StreamTable::default(),
            remote: StreamTable::default(),
            send_queue: VecDeque::new(),
            flow_queue: VecDeque::new(),
            reap_queue: VecDeque::new(),
            conn_window: RecvWindow::new(conn_window),
            conn_read: 0,
            conn_received: 0,
            peer_max_data: conn_window,
            data_sent: 0,
            unsent: 0,
            retx_pending: 0,
            events: VecDeque::new(),
            bytes_received: 0,
            last_received: now,
            last_eliciting: now,
            packets_sent: 0,
            packets_lost: 0,
            ptos: 0,
            udp_bytes_sent: 0,
            stream_bytes_sent: 0,
            stream_bytes_retransmitted: 0,
            stream_bytes_received: 0,
            congestion_events: 0,
            persistent_congestion: 0,
            state: State::Handshaking,
            client,
            hs_keys: false,
            confirmed: false,
            validated: client,
            handshake_done_pending: false,
            max_data_pending: false,
            close_pending: None,
            cfg,
        }
    }

    /// Client side: the Initial carrying the ClientHello goes out on the next `poll_transmit`.
    pub fn connect(cfg: Arc<QuicConfig>, now: SimTime) -> Self {
        Self::new(cfg, now, true)
    }

    /// Server side, from the client's first Initial (which it consumes): the server's flight
    /// goes out on the next `poll_transmit`.
    pub fn accept(cfg: Arc<QuicConfig>, now: SimTime, first: &QuicPacket) -> Self {
        let mut c = Self::new(cfg, now, false);
        c.on_packet(now, first);
        c
    }

    /// Whether this end opened the connection (`connect`) rather than accepted it.
    pub fn is_client(&self) -> bool {
        self.client
    }

    /// Whether the handshake has completed on this side and the connection is not closed.
    pub fn is_established(&self) -> bool {
        self.state == State::Established
    }

    /// Closed or timed out, with nothing left to send: the connection may be dropped.
    pub fn is_closed(&self) -> bool {
        matches!(self.state, State::Closed | State::TimedOut) && self.close_pending.is_none()
    }

    fn open(&self) -> bool {
        matches!(self.state, State::Handshaking | State::Established)
    }

    fn mds(&self) -> u64 {
        u64::from(self.cfg.max_datagram())
    }

    // ---------------------------------------------------------------- spaces

    fn space(&self, s: Space) -> Option<&SpaceState> {
        match s {
            Space::Data => Some(&self.data),
            _ => self.hs.as_ref()?[s.index()].as_ref(),
        }
    }

    fn space_mut(&mut self, s: Space) -> Option<&mut SpaceState> {
        match s {
            Space::Data => Some(&mut self.data),
            _ => self.hs.as_mut()?[s.index()].as_mut(),
        }
    }

    /// Discards a handshake space's keys (RFC 9001 4.9): its packets leave the flight and its
    /// timers stop.
    fn discard(&mut self, s: Space) {
        debug_assert!(s != Space::Data);
        let Some(hs) = self.hs.as_mut() else {
            return;
        };
        let Some(sp) = hs[s.index()].take() else {
            return;
        };
        for p in sp.rec.sent.iter().filter(|p| !p.settled()) {
            self.bytes_in_flight -= u64::from(p.bytes);
        }
        if hs.iter().all(Option::is_none) {
            self.hs = None;
        }
        // RFC 9002 6.2.2: the PTO backoff restarts with the remaining spaces.
        self.pto_count = 0;
    }

    fn confirm(&mut self) {
        if !self.confirmed {
            self.confirmed = true;
            self.discard(Space::Initial);
            self.discard(Space::Handshake);
        }
    }

    // ---------------------------------------------------------------- streams

    /// Whether `id` names a stream this side opened.
    fn is_local(&self, id: u64) -> bool {
        (id & 1 == 0) == self.client
    }

    fn stream_id(&self, local: bool, index: u64) -> u64 {
        let client_initiated = local == self.client;
        (index << 2) | u64::from(!client_initiated)
    }

    fn stream(&self, id: u64) -> Option<&Stream> {
        if id & 2 != 0 {
            return None;
        }
        if self.is_local(id) {
            self.local.get(id >> 2)
        } else {
            self.remote.get(id >> 2)
        }
    }

    fn stream_mut(&mut self, id: u64) -> Option<&mut Stream> {
        if id & 2 != 0 {
            return None;
        }
        if self.is_local(id) {
            self.local.get_mut(id >> 2)
        } else {
            self.remote.get_mut(id >> 2)
        }
    }

    /// Opens a stream; `None` at `max_streams` open streams, or once closed. Works before the
    /// handshake completes: data written waits for it. The peer learns of the stream with its
    /// first frame.
    pub fn open_stream(&mut self) -> Option<StreamId> {
        if !self.open() || self.local.open >= self.cfg.max_streams {
            return None;
        }
        let id = self.stream_id(true, self.local.next);
        // Stream ids travel as `u32` in packets.
        if id > u64::from(u32::MAX) {
            return None;
        }
        let w = self.cfg.stream_window();
        self.local.open(Stream::new(w, w));
        Some(StreamId(id))
    }

    /// A stream's send buffer: room for two congestion windows (so a full window can wait
    /// behind the one in flight, as the TCP model's send buffer autotunes), at least
    /// `stream_send_buffer` and at most `stream_send_buffer_max`.
    fn send_buffer(&self) -> u64 {
        self.cfg
            .stream_send_buffer
            .max(2 * self.cc.cwnd)
            .min(self.cfg.send_buffer_limit())
    }

    /// Takes up to `bytes` into the stream's send buffer; returns how many fit. A short count
    /// arranges a `StreamWritable` for when space frees.
    pub fn send(&mut self, s: StreamId, bytes: u64) -> u64 {
        if !self.open() {
            return 0;
        }
        let limit = self.send_buffer();
        let Some(st) = self.stream_mut(s.0) else {
            return 0;
        };
        if st.send.fin {
            return 0;
        }
        let n = bytes.min(limit.saturating_sub(st.send.buffered()));
        if n < bytes {
            st.wants_writable = true;
        }
        st.send.written += n;
        self.unsent += n;
        if n > 0 {
            self.enqueue(s.0);
        }
        n
    }

    /// Bytes `send` would take on `s` now: 0 for an unknown or finished stream, or once the
    /// connection is closed.
    pub fn send_space(&self, s: StreamId) -> u64 {
        if !self.open() {
            return 0;
        }
        match self.stream(s.0) {
            Some(st) if !st.send.fin => self.send_buffer().saturating_sub(st.send.buffered()),
            _ => 0,
        }
    }

    /// How many datagrams to send as one `UDP_SEGMENT` batch now: what a pacing rate of the
    /// window per smoothed round trip sends in about a millisecond, at least two and at most
    /// `max`, as Linux sizes TCP's offloaded bursts ([`Congestion::burst_segments`]). The
    /// model does not pace QUIC; the bound keeps a batch, which reaches its receiver whole
    /// once its last datagram has crossed the slowest link, from holding the first datagrams
    /// back longer than a millisecond's worth of the flow.
    pub fn offload_datagrams(&self, max: u16) -> u16 {
        self.cc.burst_segments(self.mds(), self.rtt.smoothed, max)
    }

    /// Asks for a `StreamWritable` when space frees (an application with a whole message that
    /// does not fit, as after a short `send`).
    pub fn wait_writable(&mut self, s: StreamId) {
        if let Some(st) = self.stream_mut(s.0) {
            if !st.send.fin {
                st.wants_writable = true;
            }
        }
    }

    /// Total bytes the application wrote on `s`: the stream offset where written data ends.
    pub fn written(&self, s: StreamId) -> u64 {
        self.stream(s.0).map_or(0, |st| st.send.written)
    }

    /// FIN after what was written.
    pub fn finish(&mut self, s: StreamId) {
        if !self.open() {
            return;
        }
        if let Some(st) = self.stream_mut(s.0) {
            if !st.send.fin {
                st.send.fin = true;
                self.enqueue(s.0);
            }
        }
    }

    /// In-order bytes of `s` received and not yet read (0 for an unknown stream).
    pub fn readable(&self, s: StreamId) -> u64 {
        self.stream(s.0).map_or(0, |st| st.recv.readable())
    }

    /// Consumes up to `max` in-order bytes; returns how many. Reading frees receive window:
    /// once half a window is consumed, a new MAX_STREAM_DATA (and MAX_DATA) is queued.
    /// `read` takes no clock, so window autotuning dates the update by the last packet
    /// received (which is when the bytes read became readable, for a prompt reader).
    pub fn read(&mut self, s: StreamId, max: u64) -> u64 {
        let now_hint = self.last_received;
        let srtt = self.rtt.smoothed;
        let (max_w, autotune) = (self.cfg.stream_window_limit(), self.cfg.autotune);
        let Some(st) = self.stream_mut(s.0) else {
            return 0;
        };
        let n = st.recv.readable().min(max);
        st.readable_signalled = false;
        if n == 0 {
            return 0;
        }
        st.recv.read += n;
        let mut flow = false;
        if st.recv.final_size == NEVER {
            let read = st.recv.read;
            if st
                .recv
                .window
                .on_consumed(read, now_hint, srtt, max_w, autotune)
                && !st.flow_queued
            {
                st.flow_queued = true;
                flow = true;
            }
        }
        let finished = st.recv.is_done() && !st.finished_signalled;
        if finished {
            st.finished_signalled = true;
        }
        if flow {
            self.flow_queue.push_back(s.0);
        }
        if finished {
            self.events.push_back(QuicEvent::StreamFinished(s));
            self.reap_queue.push_back(s.0);
        }
        self.conn_read += n;
        if self.conn_window.on_consumed(
            self.conn_read,
            now_hint,
            srtt,
            self.cfg.conn_window_limit(),
            autotune,
        ) {
            self.max_data_pending = true;
        }
        n
    }

    /// Bytes read so far on `s`.
    pub fn read_offset(&self, s: StreamId) -> u64 {
        self.stream(s.0).map_or(0, |st| st.recv.read)
    }

    /// Bytes written on `s` and never sent yet.
    pub fn stream_unsent(&self, s: StreamId) -> u64 {
        self.stream(s.0).map_or(0, |st| st.send.unsent())
    }

    /// Bytes of `s` sent and not yet acknowledged (nor waiting to be sent again).
    pub fn stream_in_flight(&self, s: StreamId) -> u64 {
        self.stream(s.0).map_or(0, |st| st.send.in_flight())
    }

    /// Whether the connection still holds `s`: a stream is forgotten once both directions
    /// are finished (its FIN sent and acknowledged, the peer's FIN received and read).
    pub fn stream_is_open(&self, s: StreamId) -> bool {
        self.stream(s.0).is_some()
    }

    /// Streams open, both initiators.
    pub fn streams(&self) -> usize {
        (self.local.open + self.remote.open) as usize
    }

    fn enqueue(&mut self, id: u64) {
        if let Some(st) = self.stream_mut(id) {
            if !st.queued {
                st.queued = true;
                self.send_queue.push_back(id);
            }
        }
    }

    /// Forgets streams finished in both directions.
    fn reap(&mut self) {
        while let Some(id) = self.reap_queue.pop_front() {
            if self.stream(id).is_some_and(Stream::is_done) {
                if self.is_local(id) {
                    self.local.forget(id >> 2);
                } else {
                    self.remote.forget(id >> 2);
                }
            }
        }
        if self.reap_queue.capacity() > 64 {
            self.reap_queue = VecDeque::new();
        }
    }

    // ---------------------------------------------------------------- events

    /// Takes the oldest pending notification; `None` when there is none.
    pub fn poll_event(&mut self) -> Option<QuicEvent> {
        let e = self.events.pop_front();
        if e.is_none() && self.events.capacity() > 64 {
            self.events = VecDeque::new();
        }
        e
    }

    fn enter_closed(&mut self, state: State) {
        self.state = state;
        self.data.probes = 0;
        if let Some(hs) = self.hs.as_mut() {
            for sp in hs.iter_mut().flatten() {
                sp.probes = 0;
            }
        }
        self.events.push_back(if state == State::TimedOut {
            QuicEvent::TimedOut
        } else {
            QuicEvent::Closed
        });
    }

    /// Sends CONNECTION_CLOSE (on the next `poll_transmit`) and closes at once; the peer
    /// closes when it receives it. A lost CONNECTION_CLOSE is not repeated (no closing
    /// period): the peer then times out.
    pub fn close(&mut self, _now: SimTime) {
        if !self.open() {
            return;
        }
        if self.packets_sent > 0 {
            self.close_pending = Some(if self.state == State::Established {
                Space::Data
            } else if self.hs_keys && self.space(Space::Handshake).is_some() {
                Space::Handshake
            } else {
                Space::Initial
            });
        }
        self.enter_closed(State::Closed);
    }

    // ---------------------------------------------------------------- timers

    /// The earliest deadline (idle timeout, delayed ACK, loss timer or PTO) at which the
    /// caller must call `on_timeout`; `None` once the connection is closed.
    pub fn poll_timeout(&self) -> Option<SimTime> {
        if !self.open() {
            return None;
        }
        let idle = self.last_received.saturating_add(self.cfg.idle_timeout);
        let t = idle
            .min(self.data.ack.deadline)
            .min(self.loss_detection_deadline().0);
        (t != NEVER).then_some(t)
    }

    fn amplification_budget(&self) -> u64 {
        if self.validated {
            u64::MAX
        } else {
            (AMPLIFICATION * self.bytes_received).saturating_sub(self.udp_bytes_sent)
        }
    }

    fn pto_duration(&self, s: Space) -> SimDuration {
        let mut d = self.rtt.pto_base();
        if s == Space::Data {
            d += self.cfg.max_ack_delay;
        }
        d.saturating_mul(1u64 << self.pto_count.min(30))
    }

    /// The loss-detection timer (RFC 9002 A.8): the earliest time-threshold loss, else the
    /// PTO, and the space it belongs to. `None` for the space means the client's
    /// anti-deadlock probe.
    fn loss_detection_deadline(&self) -> (SimTime, Option<Space>) {
        let mut best = (NEVER, None);
        for s in Space::ALL {
            if let Some(sp) = self.space(s) {
                if sp.rec.loss_time < best.0 {
                    best = (sp.rec.loss_time, Some(s));
                }
            }
        }
        if best.0 != NEVER {
            return best;
        }
        // A server blocked by the amplification limit has nothing it could send on a PTO.
        if self.amplification_budget() < u64::from(MIN_INITIAL) / 4 {
            return (NEVER, None);
        }
        let in_flight: u32 = Space::ALL
            .iter()
            .filter_map(|&s| self.space(s))
            .map(|sp| sp.rec.outstanding)
            .sum();
        if in_flight == 0 {
            // RFC 9002 6.2.2.1: until the server has surely validated it, the client keeps a
            // PTO armed so that a server blocked by the amplification limit is not deadlocked.
            if self.client && !self.confirmed && self.hs.is_some() {
                let s = if self.hs_keys {
                    Space::Handshake
                } else {
                    Space::Initial
                };
                return (
                    self.last_eliciting.saturating_add(self.pto_duration(s)),
                    None,
                );
            }
            return (NEVER, None);
        }
        for s in Space::ALL {
            let Some(sp) = self.space(s) else { continue };
            if sp.rec.outstanding == 0 || (s == Space::Data && !self.confirmed) {
                continue;
            }
            let t = sp.rec.last_eliciting.saturating_add(self.pto_duration(s));
            if t < best.0 {
                best = (t, Some(s));
            }
        }
        best
    }

    /// Runs what is due at `now`: the idle timeout, the delayed ACK, loss detection or a
    /// probe timeout. Harmless when nothing is (a stale wake-up).
    pub fn on_timeout(&mut self, now: SimTime) {
        if !self.open() {
            return;
        }
        if now >= self.last_received.saturating_add(self.cfg.idle_timeout) {
            self.enter_closed(State::TimedOut);
            return;
        }
        if self.data.ack.deadline <= now {
            self.data.ack.deadline = NEVER;
            self.data.ack.ack_now = true;
        }
        let (t, space) = self.loss_detection_deadline();
        if t > now {
            return;
        }
        if let Some(s) = space {
            if self.space(s).is_some_and(|sp| sp.rec.loss_time != NEVER) {
                self.detect_lost(s, now);
                return;
            }
        }
        self.on_pto(space);
    }

    /// A probe timeout: one or two ack-eliciting probes, carrying new data if there is any,
    /// else the oldest unacknowledged data, else a PING (RFC 9002 6.2.4).
    fn on_pto(&mut self, space: Option<Space>) {
        self.pto_count += 1;
        self.ptos += 1;
        match space {
            None => {
                // Anti-deadlock: resend the handshake data of the space the client can use.
                let s = if self.hs_keys {
                    Space::Handshake
                } else {
                    Space::Initial
                };
                if let Some(sp) = self.space_mut(s) {
                    sp.crypto.requeue_unacked();
                    sp.probes = 1;
                }
            }
            Some(Space::Data) => {
                let credit = self.peer_max_data - self.data_sent;
                let new_data = self.unsent > 0 && credit > 0;
                if !new_data && self.retx_pending == 0 {
                    let mut n = 0;
                    let mut i = 0;
                    while n < 2 && i < self.data.rec.sent.len() {
                        let p = self.data.rec.sent[i];
                        i += 1;
                        if !p.settled() {
                            self.requeue_frames(Space::Data, &p);
                            n += 1;
                        }
                    }
                }
                self.data.probes = 2;
            }
            Some(_) => {
                // Handshake flights are small: probe every handshake space with data in flight
                // (RFC 9002 6.2.4 asks for both), resending all their unacknowledged bytes.
                for s in [Space::Initial, Space::Handshake] {
                    if let Some(sp) = self.space_mut(s) {
                        if sp.rec.outstanding > 0 {
                            sp.crypto.requeue_unacked();
                            sp.probes = 1;
                        }
                    }
                }
            }
        }
    }

    // ---------------------------------------------------------------- incoming packets

    /// Processes a packet from the peer that arrived at `now`. Replies and events it causes
    /// are collected with `poll_transmit` and `poll_event`.
    pub fn on_packet(&mut self, now: SimTime, p: &QuicPacket) {
        if !self.open() {
            return;
        }
        let s = p.space;
        if !self.validated {
            self.bytes_received += u64::from(p.bytes);
        }
        // 1-RTT packets are processed only once the handshake is complete here (a server
        // drops those that overtake the client's Finished; the client resends them).
        if s == Space::Data && self.state != State::Established {
            return;
        }
        let threshold = self.cfg.ack_threshold();
        let max_ack_delay = self.cfg.max_ack_delay;
        match self.space(s) {
            Some(sp) if !sp.ack.is_duplicate(p.pn) => {}
            _ => return,
        }
        self.last_received = now;
        if p.frames.contains(Frames::CONNECTION_CLOSE) {
            self.enter_closed(State::Closed);
            return;
        }
        if let Some(sp) = self.space_mut(s) {
            let immediate = s != Space::Data;
            let eliciting = p.ack_eliciting();
            sp.ack
                .on_packet(now, p.pn, eliciting, immediate, threshold, max_ack_delay);
        }
        if !self.client && s == Space::Handshake && !self.validated {
            // RFC 9000 8.1: a Handshake packet proves the client's address; RFC 9001 4.9.1:
            // the server drops its Initial keys.
            self.validated = true;
            self.discard(Space::Initial);
        }
        if p.frames.contains(Frames::ACK) {
            self.on_ack_frame(s, p, now);
        }
        if p.frames.contains(Frames::CRYPTO) {
            self.on_crypto(s, u64::from(p.crypto_offset), u64::from(p.crypto_len));
        }
        if p.frames.contains(Frames::HANDSHAKE_DONE) && self.client {
            self.confirm();
        }
        if s == Space::Data {
            if p.frames.contains(Frames::MAX_DATA) && p.max_data > self.peer_max_data {
                self.peer_max_data = p.max_data;
            }
            if p.frames.contains(Frames::MAX_STREAM_DATA) {
                let id = u64::from(p.max_stream_data_id);
                if let Some(st) = self.stream_mut(id) {
                    if p.max_stream_data > st.send.peer_limit {
                        st.send.peer_limit = p.max_stream_data;
                        if st.send.wants_to_send(u64::MAX) {
                            self.enqueue(id);
                        }
                    }
                }
            }
            for f in p.stream_frames() {
                self.on_stream_frame(f);
            }
        }
        self.reap();
    }

    fn on_crypto(&mut self, s: Space, offset: u64, len: u64) {
        let Some(sp) = self.space_mut(s) else {
            return;
        };
        sp.crypto.on_received(offset, len);
        let complete = sp.crypto.recv_complete();
        match (self.client, s) {
            (false, Space::Initial) if complete && !self.hs_keys => {
                // The ClientHello is in: the server's whole flight is ready to go.
                self.hs_keys = true;
                let rest = self.cfg.server_handshake_bytes.max(SERVER_HELLO + 1) - SERVER_HELLO;
                if let Some(sp) = self.space_mut(Space::Initial) {
                    sp.crypto.send_total = SERVER_HELLO;
                }
                if let Some(sp) = self.space_mut(Space::Handshake) {
                    sp.crypto.send_total = rest;
                }
            }
            (true, Space::Initial) if complete => self.hs_keys = true,
            (false, Space::Handshake) if complete && self.state == State::Handshaking => {
                // The client's Finished: complete and, for a server, confirmed.
                self.state = State::Established;
                self.events.push_back(QuicEvent::Connected);
                self.handshake_done_pending = true;
                self.confirm();
            }
            _ => {}
        }
        if self.client && self.state == State::Handshaking && self.hs_keys {
            let hs_complete = self
                .space(Space::Handshake)
                .is_some_and(|sp| sp.crypto.recv_complete());
            if hs_complete {
                self.state = State::Established;
                self.events.push_back(QuicEvent::Connected);
                if let Some(sp) = self.space_mut(Space::Handshake) {
                    sp.crypto.send_total = CLIENT_FINISHED;
                }
            }
        }
    }

    fn on_stream_frame(&mut self, f: &StreamFrame) {
        let id = u64::from(f.id);
        if id & 2 != 0 {
            return;
        }
        if !self.is_local(id) {
            let index = id >> 2;
            if index >= self.remote.next {
                // Opening a stream opens every lower-numbered one of its kind (RFC 9000 3.2).
                let count = index - self.remote.next + 1;
                if u64::from(self.remote.open) + count > u64::from(self.cfg.max_streams) {
                    return;
                }
                let w = self.cfg.stream_window();
                while self.remote.next <= index {
                    let i = self.remote.open(Stream::new(w, w));
                    let sid = self.stream_id(false, i);
                    self.events
                        .push_back(QuicEvent::StreamOpened(StreamId(sid)));
                }
            }
        }
        let Some(st) = self.stream_mut(id) else {
            return;
        };
        let out = st.recv.on_frame(f.offset, u64::from(f.len), f.fin);
        let readable = out.in_order > 0 && !st.readable_signalled;
        if readable {
            st.readable_signalled = true;
        }
        let finished = st.recv.is_done() && !st.finished_signalled;
        if finished {
            st.finished_signalled = true;
        }
        self.conn_received += out.highest_grew;
        self.stream_bytes_received += out.in_order;
        if readable {
            self.events
                .push_back(QuicEvent::StreamReadable(StreamId(id)));
        }
        if finished {
            self.events
                .push_back(QuicEvent::StreamFinished(StreamId(id)));
            self.reap_queue.push_back(id);
        }
    }

    fn on_ack_frame(&mut self, s: Space, p: &QuicPacket, now: SimTime) {
        let ack = &p.ack;
        let Some(sp) = self.space_mut(s) else {
            return;
        };
        if ack.largest >= sp.rec.next_pn {
            return;
        }
        if sp.rec.largest_acked().is_none_or(|l| ack.largest > l) {
            sp.rec.largest_acked = ack.largest;
        }
        let mut growth_bytes = 0u64;
        let mut largest_newly: Option<SentPacket> = None;
        let mut any = false;
        let mut data_acked = false;
        for (low, high) in ack.iter() {
            let mut i = self.space(s).expect("space").rec.index_of(low);
            while let Some(sp) = self.space_mut(s) {
                let Some(rec) = sp.rec.sent.get_mut(i) else {
                    break;
                };
                if rec.pn > high {
                    break;
                }
                i += 1;
                if rec.settled() {
                    continue;
                }
                rec.flags |= recovery::ACKED;
                let rec = *rec;
                sp.rec.outstanding -= 1;
                any = true;
                data_acked |= s == Space::Data;
                self.bytes_in_flight -= u64::from(rec.bytes);
                if !self.in_recovery(rec.time_sent) {
                    growth_bytes += u64::from(rec.bytes);
                }
                if largest_newly.is_none_or(|l| rec.pn > l.pn) {
                    largest_newly = Some(rec);
                }
                self.on_frames_acked(s, &rec);
            }
        }
        if !any {
            return;
        }
        if let Some(l) = largest_newly.filter(|l| l.pn == ack.largest) {
            // RFC 9002 5.3: the peer's ACK delay counts only in the 1-RTT space, limited to
            // max_ack_delay once the handshake is confirmed.
            let mut delay = if s == Space::Data {
                u64::from(ack.delay_us) * 1000
            } else {
                0
            };
            if self.confirmed {
                delay = delay.min(self.cfg.max_ack_delay);
            }
            self.rtt.sample(now.saturating_sub(l.time_sent), delay);
            if self.first_sample_at == NEVER {
                self.first_sample_at = now;
            }
        }
        self.pto_count = 0;
        // A recovery period ends with the acknowledgement of a packet sent after it began.
        if largest_newly.is_some_and(|l| !self.in_recovery(l.time_sent)) {
            self.recovery_start = NEVER;
        }
        if growth_bytes > 0 {
            if self.cwnd_limited() {
                let (mds, srtt) = (self.mds(), self.rtt.smoothed);
                self.cc.on_ack(now, growth_bytes, mds, srtt);
            } else {
                // Time spent application-limited must not count as CUBIC growth time.
                self.cc.on_idle();
            }
        }
        if s == Space::Data {
            if let Some(l) = largest_newly {
                if l.pn >= self.win_end_pn {
                    self.prev_max_flight = self.win_max_flight;
                    self.prev_limited = self.win_limited;
                    self.win_max_flight = 0;
                    self.win_limited = false;
                    self.win_end_pn = self.data.rec.next_pn;
                }
            }
        }
        self.detect_lost(s, now);
        if let Some(sp) = self.space_mut(s) {
            sp.rec.drop_settled();
        }
        if data_acked && self.client {
            // RFC 9001 4.1.2: an acknowledged 1-RTT packet confirms the handshake.
            self.confirm();
        }
    }

    fn in_recovery(&self, time_sent: SimTime) -> bool {
        self.recovery_start != NEVER && time_sent <= self.recovery_start
    }

    /// Linux's `tcp_is_cwnd_limited`, as in the TCP model: in slow start, grow while the
    /// window is less than twice the largest flight; in congestion avoidance, only if the
    /// window was full.
    fn cwnd_limited(&self) -> bool {
        if self.cc.in_slow_start() {
            self.cc.cwnd < 2 * self.prev_max_flight.max(self.win_max_flight)
        } else {
            self.prev_limited || self.win_limited
        }
    }

    fn on_frames_acked(&mut self, s: Space, p: &SentPacket) {
        if p.flags & recovery::CRYPTO != 0 {
            if let Some(sp) = self.space_mut(s) {
                sp.crypto
                    .on_acked(u64::from(p.crypto_offset), u64::from(p.crypto_len));
            }
        }
        if p.stream_frames == 0 {
            return;
        }
        let limit = self.send_buffer();
        for f in p.stream_frames() {
            let id = u64::from(f.id);
            let Some(st) = self.stream_mut(id) else {
                continue;
            };
            let unlost = st.send.on_acked(f.offset, u64::from(f.len), f.fin);
            let writable = st.wants_writable
                && (3 * limit.saturating_sub(st.send.buffered()) >= limit
                    || st.send.buffered() == 0);
            if writable {
                st.wants_writable = false;
            }
            let done = st.is_done();
            self.retx_pending -= unlost;
            if writable {
                self.events
                    .push_back(QuicEvent::StreamWritable(StreamId(id)));
            }
            if done {
                self.reap_queue.push_back(id);
            }
        }
    }

    /// RFC 9002 6.1: packets below the largest acknowledged are lost once three later ones
    /// are acknowledged or they are older than 9/8 RTT; the rest set the loss timer.
    fn detect_lost(&mut self, s: Space, now: SimTime) {
        let loss_delay = self.rtt.loss_delay();
        let lost_before = now.saturating_sub(loss_delay);
        let Some(sp) = self.space_mut(s) else {
            return;
        };
        sp.rec.loss_time = NEVER;
        let Some(largest) = sp.rec.largest_acked() else {
            return;
        };
        let mut largest_lost_time: Option<SimTime> = None;
        // Earliest and latest send times of the lost packets, for persistent congestion.
        let mut first_lost: Option<(u64, SimTime)> = None;
        let mut last_lost: Option<(u64, SimTime)> = None;
        let mut i = 0;
        while let Some(sp) = self.space_mut(s) {
            let Some(rec) = sp.rec.sent.get_mut(i) else {
                break;
            };
            if rec.pn >= largest {
                break;
            }
            i += 1;
            if rec.settled() {
                continue;
            }
            if rec.time_sent <= lost_before || largest >= rec.pn + PACKET_THRESHOLD {
                rec.flags |= recovery::LOST;
                let rec = *rec;
                sp.rec.outstanding -= 1;
                self.bytes_in_flight -= u64::from(rec.bytes);
                self.packets_lost += 1;
                largest_lost_time = Some(rec.time_sent);
                if first_lost.is_none() {
                    first_lost = Some((rec.pn, rec.time_sent));
                }
                last_lost = Some((rec.pn, rec.time_sent));
                self.requeue_frames(s, &rec);
            } else {
                let t = rec.time_sent.saturating_add(loss_delay);
                sp.rec.loss_time = sp.rec.loss_time.min(t);
            }
        }
        let Some(latest) = largest_lost_time else {
            return;
        };
        // One reduction per recovery period (RFC 9002 7.3.2).
        if !self.in_recovery(latest) {
            self.recovery_start = now;
            let (cwnd, mds) = (self.cc.cwnd, self.mds());
            // RFC 9002 halves the window for Reno (CUBIC ignores the flight argument).
            self.cc.on_congestion(cwnd, mds);
            self.congestion_events += 1;
        }
        if let (Some((fpn, ft)), Some((lpn, lt))) = (first_lost, last_lost) {
            self.check_persistent_congestion(s, fpn, ft, lpn, lt);
        }
    }

    /// RFC 9002 7.6: losses spanning more than three PTOs with nothing acknowledged in
    /// between collapse the window to its minimum.
    fn check_persistent_congestion(
        &mut self,
        s: Space,
        fpn: u64,
        ft: SimTime,
        lpn: u64,
        lt: SimTime,
    ) {
        if self.first_sample_at == NEVER || ft <= self.first_sample_at {
            return;
        }
        let period =
            (self.rtt.smoothed + (4 * self.rtt.var).max(GRANULARITY) + self.cfg.max_ack_delay)
                * PERSISTENT_CONGESTION_THRESHOLD;
        if lt - ft <= period {
            return;
        }
        let Some(sp) = self.space(s) else { return };
        let from = sp.rec.index_of(fpn);
        let to = sp.rec.index_of(lpn + 1);
        let acked_between = (from..to).any(|i| sp.rec.sent[i].flags & recovery::ACKED != 0);
        if acked_between {
            return;
        }
        let min = self.cfg.minimum_window();
        self.cc.on_persistent_congestion(min);
        self.recovery_start = NEVER;
        self.persistent_congestion += 1;
    }

    /// Puts a lost (or probed) packet's frames back to be sent again: stream data to its
    /// stream's lost queue, CRYPTO to its space, and flow-control frames and HANDSHAKE_DONE
    /// with their latest values.
    fn requeue_frames(&mut self, s: Space, p: &SentPacket) {
        if p.flags & recovery::CRYPTO != 0 {
            if let Some(sp) = self.space_mut(s) {
                sp.crypto
                    .on_lost(u64::from(p.crypto_offset), u64::from(p.crypto_len));
            }
        }
        if p.flags & recovery::MAX_DATA != 0 {
            self.max_data_pending = true;
        }
        if p.flags & recovery::HANDSHAKE_DONE != 0 {
            self.handshake_done_pending = true;
        }
        if p.flags & recovery::MAX_STREAM_DATA != 0 {
            let id = u64::from(p.msd_id);
            if let Some(st) = self.stream_mut(id) {
                if st.recv.final_size == NEVER && !st.flow_queued {
                    st.flow_queued = true;
                    self.flow_queue.push_back(id);
                }
            }
        }
        for f in p.stream_frames() {
            let id = u64::from(f.id);
            if let Some(st) = self.stream_mut(id) {
                let added = st.send.on_lost(f.offset, u64::from(f.len), f.fin);
                self.retx_pending += added;
                self.enqueue(id);
            }
        }
    }

    // ---------------------------------------------------------------- outgoing packets

    /// The next packet (one UDP datagram) to send at `now`, or `None` when the congestion
    /// window, flow control, the anti-amplification limit or a lack of data allow nothing
    /// more. Call until `None` after every input.
    pub fn poll_transmit(&mut self, now: SimTime) -> Option<QuicPacket> {
        self.reap();
        if !self.open() {
            let s = self.close_pending.take()?;
            return Some(self.close_packet(s));
        }
        for s in Space::ALL {
            if let Some(p) = self.build(s, now) {
                return Some(p);
            }
        }
        None
    }

    fn close_packet(&mut self, s: Space) -> QuicPacket {
        let sp = match self.space_mut(s) {
            Some(sp) => sp,
            None => &mut self.data,
        };
        let pn = sp.rec.next_pn;
        sp.rec.next_pn += 1;
        let pnl = pn_len(pn, sp.rec.largest_acked());
        let mut p = QuicPacket::empty(s, pn);
        p.frames.insert(Frames::CONNECTION_CLOSE);
        p.bytes = header_len(s, pnl) + CLOSE_FRAME.max(4 - pnl.min(4)) + AEAD_TAG;
        self.packets_sent += 1;
        self.udp_bytes_sent += u64::from(p.bytes);
        p
    }

    /// Whether this side may send in space `s` now.
    fn can_send_in(&self, s: Space) -> bool {
        match s {
            Space::Initial => self.space(s).is_some(),
            Space::Handshake => self.hs_keys && self.space(s).is_some(),
            Space::Data => self.state == State::Established,
        }
    }

    /// Builds the next packet of space `s`, if it has anything to send: an ACK that is due,
    /// probes, or (within the congestion window) handshake data, HANDSHAKE_DONE, flow-control
    /// limits and stream data, packed in that order.
    fn build(&mut self, s: Space, now: SimTime) -> Option<QuicPacket> {
        if !self.can_send_in(s) {
            return None;
        }
        let budget = self.amplification_budget();
        let limit = u64::from(self.cfg.max_datagram()).min(budget) as u32;
        let (pn, pnl, ack_due, ack_fresh, probe) = {
            let sp = self.space(s)?;
            let pn = sp.rec.next_pn;
            (
                pn,
                pn_len(pn, sp.rec.largest_acked()),
                sp.ack.due(now),
                sp.ack.fresh(),
                sp.probes > 0,
            )
        };
        let header = header_len(s, pnl);
        if limit < header + AEAD_TAG + 8 {
            return None;
        }
        let room = u64::from(limit - header - AEAD_TAG);
        let mut p = QuicPacket::empty(s, pn);
        let mut used: u64 = 0;
        if ack_fresh {
            let ack = self.space(s)?.ack.frame(now);
            p.ack = ack;
            p.frames.insert(Frames::ACK);
            used += u64::from(ack.encoded_len());
        }
        // Room for ack-eliciting frames: the datagram, and unless probing, the window.
        let cc_room = if probe {
            u64::MAX
        } else {
            self.cc.cwnd.saturating_sub(self.bytes_in_flight)
        };
        let overhead = u64::from(header + AEAD_TAG);
        let mut eliciting_room = (room - used).min(cc_room.saturating_sub(overhead + used));
        if self.client && s == Space::Initial && !probe && cc_room < u64::from(MIN_INITIAL) {
            eliciting_room = 0;
        }
        let mut rec = SentPacket {
            pn,
            time_sent: now,
            stream: [StreamFrame::default(); 2],
            msd_id: 0,
            crypto_offset: 0,
            crypto_len: 0,
            bytes: 0,
            stream_frames: 0,
            flags: 0,
        };
        let start = used;
        if s == Space::Data && self.handshake_done_pending && eliciting_room > 0 {
            self.handshake_done_pending = false;
            p.frames.insert(Frames::HANDSHAKE_DONE);
            rec.flags |= recovery::HANDSHAKE_DONE;
            used += 1;
            eliciting_room -= 1;
        }
        if s != Space::Data {
            let sp = self.space_mut(s)?;
            if sp.crypto.wants_to_send() {
                let ovh = 1 + 4 + 2;
                if eliciting_room > ovh {
                    if let Some((off, len)) = sp
                        .crypto
                        .next_chunk((eliciting_room - ovh).min(u64::from(u16::MAX)))
                    {
                        p.frames.insert(Frames::CRYPTO);
                        p.crypto_offset = off as u32;
                        p.crypto_len = len as u16;
                        rec.flags |= recovery::CRYPTO;
                        rec.crypto_offset = off as u32;
                        rec.crypto_len = len as u16;
                        let n = 1 + u64::from(varint_len(off) + varint_len(len)) + len;
                        used += n;
                        eliciting_room -= n;
                    }
                } else {
                    self.win_limited |= !probe;
                }
            }
        }
        if s == Space::Data {
            if self.max_data_pending {
                let v = self.conn_window.limit;
                let n = 1 + u64::from(varint_len(v));
                if eliciting_room >= n {
                    self.max_data_pending = false;
                    p.frames.insert(Frames::MAX_DATA);
                    p.max_data = v;
                    rec.flags |= recovery::MAX_DATA;
                    used += n;
                    eliciting_room -= n;
                }
            }
            self.add_max_stream_data(&mut p, &mut rec, &mut used, &mut eliciting_room);
            self.add_stream_frames(
                &mut p,
                &mut rec,
                &mut used,
                &mut eliciting_room,
                probe,
                cc_room,
                limit,
            );
        }
        let mut eliciting = used > start;
        if probe && !eliciting {
            p.frames.insert(Frames::PING);
            used += 1;
            eliciting = true;
        }
        if !eliciting && !ack_due {
            return None;
        }
        if !eliciting && !p.frames.contains(Frames::ACK) {
            return None;
        }
        // Header protection samples 4 bytes past the packet number (RFC 9001 5.4.2).
        let mut frames_len = used as u32;
        if frames_len + pnl < 4 {
            frames_len = 4 - pnl;
            p.frames.insert(Frames::PADDING);
        }
        let mut bytes = header + frames_len + AEAD_TAG;
        if self.client && s == Space::Initial && eliciting && bytes < MIN_INITIAL {
            bytes = MIN_INITIAL;
            p.frames.insert(Frames::PADDING);
        }
        p.bytes = bytes;
        // Commit.
        let in_flight = eliciting;
        let sp = self.space_mut(s)?;
        if p.frames.contains(Frames::ACK) {
            sp.ack.on_sent();
        }
        sp.rec.next_pn += 1;
        if probe && eliciting {
            sp.probes -= 1;
        }
        if in_flight {
            rec.bytes = bytes as u16;
            sp.rec.sent.push_back(rec);
            sp.rec.outstanding += 1;
            sp.rec.last_eliciting = now;
            self.last_eliciting = now;
            self.bytes_in_flight += u64::from(bytes);
            if s == Space::Data {
                self.win_max_flight = self.win_max_flight.max(self.bytes_in_flight);
                if self.bytes_in_flight + self.mds() > self.cc.cwnd {
                    self.win_limited = true;
                }
            }
        }
        self.packets_sent += 1;
        self.udp_bytes_sent += u64::from(bytes);
        if self.client && s == Space::Handshake {
            // RFC 9001 4.9.1: a client drops its Initial keys on sending its first Handshake
            // packet.
            self.discard(Space::Initial);
        }
        Some(p)
    }

    fn add_max_stream_data(
        &mut self,
        p: &mut QuicPacket,
        rec: &mut SentPacket,
        used: &mut u64,
        room: &mut u64,
    ) {
        while let Some(&id) = self.flow_queue.front() {
            let Some(st) = self.stream_mut(id) else {
                self.flow_queue.pop_front();
                continue;
            };
            if !st.flow_queued || st.recv.final_size != NEVER {
                st.flow_queued = false;
                self.flow_queue.pop_front();
                continue;
            }
            let v = st.recv.window.limit;
            let n = 1 + u64::from(varint_len(id) + varint_len(v));
            if *room < n {
                return;
            }
            st.flow_queued = false;
            self.flow_queue.pop_front();
            p.frames.insert(Frames::MAX_STREAM_DATA);
            p.max_stream_data_id = id as u32;
            p.max_stream_data = v;
            rec.flags |= recovery::MAX_STREAM_DATA;
            rec.msd_id = id as u32;
            *used += n;
            *room -= n;
            return;
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn add_stream_frames(
        &mut self,
        p: &mut QuicPacket,
        rec: &mut SentPacket,
        used: &mut u64,
        room: &mut u64,
        probe: bool,
        cc_room: u64,
        limit: u32,
    ) {
        if self.send_queue.is_empty() {
            return;
        }
        // Window-limited (less than a full datagram of window left): send only if everything
        // pending fits, rather than cutting a runt packet out of a larger backlog.
        if !probe && cc_room < u64::from(limit) {
            let pending = self.unsent + self.retx_pending;
            if pending + STREAM_FRAMES_HEADROOM > *room {
                self.win_limited = true;
                return;
            }
        }
        let mut attempts = self.send_queue.len();
        while p.stream_frames < 2 && attempts > 0 {
            attempts -= 1;
            let Some(id) = self.send_queue.pop_front() else {
                break;
            };
            let credit = self.peer_max_data - self.data_sent;
            let Some(st) = self.stream_mut(id) else {
                continue;
            };
            // Worst-case frame header for this stream's offsets.
            let ovh = u64::from(stream_frame_overhead(id, st.send.written.max(1), 65535));
            if *room <= ovh {
                // No room left in this packet: the stream keeps its turn.
                self.send_queue.push_front(id);
                break;
            }
            let Some(c) = st
                .send
                .next_chunk((*room - ovh).min(u64::from(u16::MAX)), credit)
            else {
                if st.send.blocked_by_connection() && credit == 0 {
                    self.send_queue.push_back(id);
                } else {
                    st.queued = false;
                }
                continue;
            };
            let more = st
                .send
                .wants_to_send(credit.saturating_sub(if c.retransmit { 0 } else { c.len }));
            let keep = more || (st.send.blocked_by_connection());
            if !keep {
                st.queued = false;
            }
            if keep {
                self.send_queue.push_back(id);
            }
            let f = StreamFrame {
                offset: c.offset,
                id: id as u32,
                len: c.len as u16,
                fin: c.fin,
            };
            let n = u64::from(f.encoded_len());
            p.stream[usize::from(p.stream_frames)] = f;
            p.stream_frames += 1;
            rec.stream[usize::from(rec.stream_frames)] = f;
            rec.stream_frames += 1;
            *used += n;
            *room -= n.min(*room);
            if c.retransmit {
                self.retx_pending -= c.len;
                self.stream_bytes_retransmitted += c.len;
            } else {
                self.unsent -= c.len;
                self.data_sent += c.len;
                self.stream_bytes_sent += c.len;
            }
        }
    }

    // ---------------------------------------------------------------- introspection

    /// A snapshot of the connection's counters and estimates.
    pub fn info(&self) -> QuicInfo {
        QuicInfo {
            established: self.state == State::Established,
            cwnd: self.cc.cwnd,
            ssthresh: self.cc.ssthresh,
            bytes_in_flight: self.bytes_in_flight,
            max_datagram: self.cfg.max_datagram(),
            srtt: self.rtt.smoothed,
            rttvar: self.rtt.var,
            min_rtt: self.rtt.min,
            pto_count: self.pto_count,
            packets_sent: self.packets_sent,
            packets_lost: self.packets_lost,
            ptos: self.ptos,
            udp_bytes_sent: self.udp_bytes_sent,
            stream_bytes_sent: self.stream_bytes_sent,
            stream_bytes_retransmitted: self.stream_bytes_retransmitted,
            stream_bytes_received: self.stream_bytes_received,
            unsent: self.unsent,
            congestion_events: self.congestion_events,
            persistent_congestion: self.persistent_congestion,
        }
    }

    /// Heap memory the connection owns (sent-packet records, streams, queues), so a simulator
    /// can account for its memory.
    pub fn heap_bytes(&self) -> usize {
        let hs = self.hs.as_ref().map_or(0, |hs| {
            std::mem::size_of::<[Option<SpaceState>; 2]>()
                + hs.iter()
                    .flatten()
                    .map(|sp| sp.rec.heap_bytes())
                    .sum::<usize>()
        });
        hs + self.data.rec.heap_bytes()
            + self.local.heap_bytes()
            + self.remote.heap_bytes()
            + (self.send_queue.capacity() + self.flow_queue.capacity() + self.reap_queue.capacity())
                * 8
            + self.events.capacity() * std::mem::size_of::<QuicEvent>()
    }

    /// The connection's receive limits as announced: MAX_DATA, and MAX_STREAM_DATA of `s`
    /// (0 for an unknown stream). For tests that check the peer honours them.
    pub fn recv_limits(&self, s: StreamId) -> (u64, u64) {
        (
            self.conn_window.limit,
            self.stream(s.0).map_or(0, |st| st.recv.window.limit),
        )
    }

    /// Asserts internal invariants (ranges, counters, flight accounting). Cheap enough to call
    /// after every event in tests.
    pub fn check_invariants(&self) {
        let mut flight = 0;
        for s in Space::ALL {
            if let Some(sp) = self.space(s) {
                let mut out = 0;
                let mut prev = None;
                for p in &sp.rec.sent {
                    assert!(prev.is_none_or(|q| q < p.pn), "records out of order");
                    prev = Some(p.pn);
                    if !p.settled() {
                        out += 1;
                        flight += u64::from(p.bytes);
                    }
                }
                assert_eq!(out, sp.rec.outstanding, "{s:?} outstanding");
            }
        }
        assert_eq!(flight, self.bytes_in_flight, "bytes in flight");
        let mut unsent = 0;
        let mut lost = 0;
        for t in [&self.local, &self.remote] {
            for (_, st) in t.iter() {
                st.send.check();
                st.recv.check();
                unsent += st.send.unsent();
                lost += st.send.lost_bytes();
            }
        }
        assert_eq!(unsent, self.unsent, "unsent");
        assert_eq!(lost, self.retx_pending, "retransmission queue");
        assert!(self.data_sent <= self.peer_max_data);
        assert!(self.conn_received <= self.conn_window.limit);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connection_is_small() {
        let size = std::mem::size_of::<QuicConnection>();
        assert!(size <= 800, "QuicConnection is {size} bytes");
    }
}
