//! The connection state machine: ties the send and receive sides, timers and congestion
//! control together behind the sans-IO interface.

use crate::config::TcpConfig;
use crate::recv::{Receiver, NEVER};
use crate::rtt::RttEstimator;
use crate::segment::{TcpFlags, TcpSegment};
use crate::send::{Phase, Sender};
use onionlab_congestion::Congestion;
use onionlab_engine::time::{SimDuration, SimTime, NANOS_PER_MILLI};
use std::sync::Arc;

/// RFC 793 connection states (LISTEN is the caller's business: it calls `accept` on a SYN).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TcpState {
    /// Active open: our SYN is out, waiting for the peer's SYN-ACK.
    SynSent,
    /// Passive open: the peer's SYN arrived and our SYN-ACK is out, waiting for its ACK.
    SynReceived,
    /// Handshake complete; data may flow both ways.
    Established,
    /// We closed first; our FIN is not yet acknowledged.
    FinWait1,
    /// Our FIN is acknowledged; waiting for the peer's.
    FinWait2,
    /// The peer closed; we may still send until the application closes too.
    CloseWait,
    /// Both ends closed at once: the peer's FIN came before the ACK of ours.
    Closing,
    /// We closed after the peer did; waiting for the ACK of our FIN.
    LastAck,
    /// Both FINs acknowledged; lingering `TcpConfig::time_wait` to acknowledge again a FIN
    /// the peer retransmits because our last ACK was lost.
    TimeWait,
    /// Nothing left of the connection: closed in order, reset, timed out or aborted.
    Closed,
}

/// Notifications for the application. Repeated occurrences before the caller polls are
/// coalesced, so events are edge triggers to go and look at the connection, not counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TcpEvent {
    /// The handshake completed (the connection left SYN-SENT or SYN-RECEIVED).
    Connected,
    /// New in-order bytes arrived for `read`.
    Readable,
    /// Send space freed after `send` accepted less than offered.
    Writable,
    /// FIN received and all data before it delivered.
    PeerFinished,
    /// Orderly close complete.
    Closed,
    /// RST received.
    Reset,
    /// Retransmissions exhausted.
    TimedOut,
}

const EVENT_ORDER: [TcpEvent; 7] = [
    TcpEvent::Connected,
    TcpEvent::Readable,
    TcpEvent::Writable,
    TcpEvent::PeerFinished,
    TcpEvent::Closed,
    TcpEvent::Reset,
    TcpEvent::TimedOut,
];

fn event_bit(e: TcpEvent) -> u8 {
    1 << EVENT_ORDER.iter().position(|&x| x == e).unwrap_or(0)
}

/// Counters and estimates, in the spirit of Linux's `tcp_info`.
#[derive(Clone, Debug)]
pub struct TcpInfo {
    /// Where the connection is in its life.
    pub state: TcpState,
    /// Congestion window, whole segments.
    pub cwnd: u32,
    /// Slow-start threshold, whole segments (`u32::MAX` before the first loss).
    pub ssthresh: u32,
    /// Segments sent and not cumulatively acknowledged (rounded up).
    pub unacked: u32,
    /// Bytes in the send buffer never sent.
    pub notsent: u64,
    /// Payload bytes per full segment, after clamping the configured MSS.
    pub mss: u32,
    /// Smoothed round-trip time (RFC 6298 SRTT); 0 before the first sample.
    pub srtt: SimDuration,
    /// Smoothed mean deviation of the RTT samples (RFC 6298 RTTVAR); 0 before the first.
    pub rttvar: SimDuration,
    /// Retransmission timeout now, exponential backoff included, at most `rto_max`.
    pub rto: SimDuration,
    /// Smallest RTT sample so far; 0 before the first.
    pub min_rtt: SimDuration,
    /// Payload bytes transmitted, retransmissions included.
    pub bytes_sent: u64,
    /// Payload bytes cumulatively acknowledged by the peer.
    pub bytes_acked: u64,
    /// Payload bytes received in order.
    pub bytes_received: u64,
    /// Segments retransmitted (fast, SACK-driven and timeout-driven).
    pub retransmits: u64,
    /// Retransmission timeouts that sent the connection into loss recovery (SYN
    /// retransmissions are not counted).
    pub rto_count: u64,
    /// Entries into fast recovery, by duplicate ACKs, SACK or a tail loss probe's answer.
    pub fast_recoveries: u64,
    /// Send buffer size in bytes now (autotuning may have grown it).
    pub send_buffer: u64,
    /// Receive buffer size in bytes now (autotuning may have grown it).
    pub recv_buffer: u64,
}

/// The four facts of a sender's window that Tor's KIST scheduler reads from the kernel (its
/// `tcp_space` and `notsent`), apart from the rest of [`TcpInfo`]: KIST reads them in every
/// run for every socket it writes to, and the rest of `TcpInfo` would also read the RTT
/// estimator, the receiver and the counters, state the write itself does not touch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SendWindow {
    /// Congestion window, whole segments.
    pub cwnd: u32,
    /// Segments sent and not cumulatively acknowledged (rounded up).
    pub unacked: u32,
    /// Bytes in the send buffer never sent.
    pub notsent: u64,
    /// Payload bytes per full segment, to turn the segment counts into bytes.
    pub mss: u32,
}

/// Which deadline the connection's one protocol timer slot holds. The retransmission, persist
/// and TIME_WAIT timers are never armed together: the RTO (or the tail loss probe that stands
/// in front of it) runs only while something (data, SYN or FIN) is unacknowledged, the persist
/// timer only while nothing is and the peer's window is closed, and TIME_WAIT cancels both.
/// Sharing one deadline keeps connections small.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Timer {
    None,
    Rto,
    /// The tail loss probe; when it fires, the RTO takes the slot.
    Probe,
    Persist,
    TimeWait,
}

/// Where a tail loss probe stands (RFC 8985 section 7).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Tlp {
    None,
    /// The probe timer fired: the next transmission opportunity sends the probe.
    Due,
    /// A probe of new data is unanswered.
    New,
    /// A probe that sent the last segment again is unanswered.
    Retransmitted,
}

/// Linux's slack on the probe timeout when more than one segment is in flight
/// (`TCP_TIMEOUT_MIN`, two jiffies at 1000 Hz).
const PROBE_SLACK: SimDuration = 2 * NANOS_PER_MILLI;

/// One endpoint of a TCP connection.
#[derive(Clone, Debug)]
pub struct TcpConnection {
    snd: Sender,
    rcv: Receiver,
    cc: Congestion,
    rtt: RttEstimator,
    /// Shared by every connection made with it: a per-connection copy would dominate the size
    /// of an idle connection. Values that need clamping are clamped at the point of use.
    cfg: Arc<TcpConfig>,
    /// Deadline of the protocol timer named by `timer` (`NEVER` when none is armed).
    timer_at: SimTime,
    /// Congestion-window validation (RFC 7661 spirit, Linux's `is_cwnd_limited`): the window
    /// only grows when the sender actually used it. Tracked per flight of data ending at
    /// `win_end`.
    win_end: u64,
    /// Largest flights in bytes; `u32` suffices as buffers are capped far below 4 GiB.
    win_max_flight: u32,
    prev_max_flight: u32,
    /// When new data was last sent, for restarting the window after idle periods.
    last_send: SimTime,
    /// SND.NXT when the unanswered tail loss probe went out.
    tlp_high: u64,
    bytes_sent: u64,
    /// Event counters, like the two below: `u32` (saturating) is ample for counts of segments
    /// and episodes, and keeps connections small; `TcpInfo` widens them.
    retransmits: u32,
    rto_count: u32,
    fast_recoveries: u32,
    timer: Timer,
    tlp: Tlp,
    state: TcpState,
    events: u8,
    retries: u8,
    /// Consecutive retransmission timeouts; the RTO doubles with each.
    backoff: u8,
    persist_backoff: u8,
    win_limited: bool,
    prev_limited: bool,
    syn_pending: bool,
    rst_pending: bool,
    probe_pending: bool,
    /// `send` refused bytes for lack of space; a Writable event is owed.
    app_blocked: bool,
}

impl TcpConnection {
    fn new(config: &Arc<TcpConfig>, iss: u64, state: TcpState) -> Self {
        let mss = u64::from(config.effective_mss());
        let initial_cwnd = u64::from(config.effective_initial_cwnd()) * mss;
        TcpConnection {
            snd: Sender::new(iss, config.send_buffer_initial),
            rcv: Receiver::new(config.recv_buffer_initial, mss),
            cc: Congestion::new(config.congestion, initial_cwnd),
            rtt: RttEstimator::new(config.rto_initial),
            cfg: Arc::clone(config),
            timer_at: NEVER,
            win_end: iss,
            win_max_flight: 0,
            prev_max_flight: 0,
            last_send: 0,
            tlp_high: 0,
            bytes_sent: 0,
            retransmits: 0,
            rto_count: 0,
            fast_recoveries: 0,
            timer: Timer::None,
            tlp: Tlp::None,
            state,
            events: 0,
            retries: 0,
            backoff: 0,
            persist_backoff: 0,
            win_limited: false,
            prev_limited: false,
            syn_pending: true,
            rst_pending: false,
            probe_pending: false,
            app_blocked: false,
        }
    }

    /// Active open: the SYN goes out on the next `poll_transmit`.
    pub fn connect(config: &Arc<TcpConfig>, _now: SimTime, iss: u64) -> Self {
        Self::new(config, iss, TcpState::SynSent)
    }

    /// Passive open from a received SYN: the SYN-ACK goes out on the next `poll_transmit`.
    pub fn accept(config: &Arc<TcpConfig>, _now: SimTime, iss: u64, syn: &TcpSegment) -> Self {
        let mut c = Self::new(config, iss, TcpState::SynReceived);
        c.rcv.init(syn.seq);
        c.snd.wnd_right = iss + 1 + u64::from(syn.window);
        c.snd.max_wnd = u64::from(syn.window);
        c.snd.wl1 = syn.seq;
        c.snd.wl2 = iss;
        c
    }

    fn mss(&self) -> u64 {
        u64::from(self.cfg.effective_mss())
    }

    /// Deadline of timer `kind`, `NEVER` unless it is the one armed.
    fn timer(&self, kind: Timer) -> SimTime {
        if self.timer == kind {
            self.timer_at
        } else {
            NEVER
        }
    }

    fn set_timer(&mut self, kind: Timer, at: SimTime) {
        debug_assert!(
            self.timer == Timer::None || self.timer == kind,
            "{kind:?} armed while {:?} is",
            self.timer
        );
        self.timer = kind;
        self.timer_at = at;
    }

    /// Disarms timer `kind`; leaves another armed timer alone.
    fn cancel_timer(&mut self, kind: Timer) {
        if self.timer == kind {
            self.timer = Timer::None;
            self.timer_at = NEVER;
        }
    }

    /// Where the connection is in its life.
    pub fn state(&self) -> TcpState {
        self.state
    }

    fn can_send(&self) -> bool {
        !self.snd.fin
            && matches!(
                self.state,
                TcpState::SynSent
                    | TcpState::SynReceived
                    | TcpState::Established
                    | TcpState::CloseWait
            )
    }

    /// Queues `bytes` for transmission; returns how many fit in the send buffer.
    pub fn send(&mut self, bytes: u64) -> u64 {
        if !self.can_send() {
            return 0;
        }
        let n = bytes.min(self.snd.space());
        if n < bytes {
            self.app_blocked = true;
        }
        self.snd.data_end += n;
        n
    }

    /// Records that the application has more to write than fits (e.g. a whole message it will
    /// not split), so that `Writable` is reported once space frees, as after a short `send`.
    pub fn wait_writable(&mut self) {
        if self.can_send() {
            self.app_blocked = true;
        }
    }

    /// Bytes `send` would accept now: free room in the send buffer, 0 once the application
    /// has closed or the connection is past sending.
    pub fn send_space(&self) -> u64 {
        if self.can_send() {
            self.snd.space()
        } else {
            0
        }
    }

    /// In-order bytes received and not yet read.
    pub fn recv_available(&self) -> u64 {
        self.rcv.available()
    }

    /// Reads up to `max` in-order bytes; returns how many were read. Freeing buffer space
    /// may owe the peer a window update, sent on the next `poll_transmit`.
    pub fn read(&mut self, max: u64) -> u64 {
        let mss = self.mss();
        self.rcv.consume(max, mss)
    }

    /// In-order payload bytes received over the connection's life, read or not: the stream
    /// offset the peer's `written` is compared with.
    pub fn delivered(&self) -> u64 {
        self.rcv.delivered()
    }

    /// Bytes `send` has accepted over the connection's life: the stream offset where written
    /// data ends, so an application can tell how much of its output TCP owns without keeping
    /// its own count, and compare it with the peer's `delivered`.
    pub fn written(&self) -> u64 {
        self.snd.data_end - (self.snd.iss + 1)
    }

    /// Orderly close. The FIN follows all queued data; before the handshake completes it is
    /// remembered and sent once established, so an application may connect, write and close
    /// in one go.
    pub fn close(&mut self, _now: SimTime) {
        match self.state {
            TcpState::SynSent | TcpState::SynReceived => self.snd.fin = true,
            TcpState::Established => {
                self.snd.fin = true;
                self.state = TcpState::FinWait1;
            }
            TcpState::CloseWait => {
                self.snd.fin = true;
                self.state = TcpState::LastAck;
            }
            _ => {}
        }
    }

    /// Abortive close: a RST goes out on the next `poll_transmit` (unless the peer never knew
    /// of the connection) and the connection is Closed at once.
    pub fn abort(&mut self, _now: SimTime) {
        if !matches!(
            self.state,
            TcpState::Closed | TcpState::SynSent | TcpState::TimeWait
        ) {
            self.rst_pending = true;
        }
        self.enter_closed();
    }

    fn enter_closed(&mut self) {
        self.state = TcpState::Closed;
        self.timer = Timer::None;
        self.timer_at = NEVER;
        self.rcv.delack_at = NEVER;
        self.rcv.ack_now = false;
        self.syn_pending = false;
        self.probe_pending = false;
    }

    fn emit(&mut self, e: TcpEvent) {
        self.events |= event_bit(e);
    }

    /// Takes the next pending notification, in `TcpEvent` declaration order; `None` when
    /// there is none.
    pub fn poll_event(&mut self) -> Option<TcpEvent> {
        if self.events == 0 {
            return None;
        }
        let i = self.events.trailing_zeros() as usize;
        self.events &= !(1 << i);
        Some(EVENT_ORDER[i])
    }

    /// The earliest armed deadline (retransmission, probe, persist, TIME-WAIT or delayed
    /// ACK), at which the caller must call `on_timeout`; `None` when no timer is armed.
    pub fn poll_timeout(&self) -> Option<SimTime> {
        if self.state == TcpState::Closed {
            return None;
        }
        let t = self.timer_at.min(self.rcv.delack_at);
        (t != NEVER).then_some(t)
    }

    // ---------------------------------------------------------------- incoming segments

    /// Processes a segment from the peer that arrived at `now`. Replies and events it causes
    /// are collected with `poll_transmit` and `poll_event`.
    pub fn on_segment(&mut self, now: SimTime, seg: &TcpSegment) {
        let f = seg.flags;
        match self.state {
            TcpState::Closed => return,
            TcpState::SynSent => {
                if f.contains(TcpFlags::RST) {
                    if f.contains(TcpFlags::ACK) && seg.ack == self.snd.iss + 1 {
                        self.enter_closed();
                        self.emit(TcpEvent::Reset);
                    }
                    return;
                }
                if f.contains(TcpFlags::SYN | TcpFlags::ACK) && seg.ack == self.snd.iss + 1 {
                    self.rcv.init(seg.seq);
                    self.snd.wl1 = seg.seq;
                    self.snd.wl2 = seg.ack;
                    self.snd.wnd_right = seg.ack + u64::from(seg.window);
                    self.snd.max_wnd = u64::from(seg.window);
                    self.established(now, seg.ack);
                    self.rcv.ack_now = true;
                }
                return;
            }
            TcpState::SynReceived => {
                if f.contains(TcpFlags::RST) {
                    if seg.seq == self.rcv.nxt {
                        self.enter_closed();
                        self.emit(TcpEvent::Reset);
                    }
                    return;
                }
                if f.contains(TcpFlags::SYN) {
                    // Our SYN-ACK was lost and the peer retransmitted its SYN.
                    if !f.contains(TcpFlags::ACK) {
                        self.syn_pending = true;
                    }
                    return;
                }
                if !f.contains(TcpFlags::ACK) || seg.ack != self.snd.iss + 1 {
                    return;
                }
                self.established(now, seg.ack);
                // Fall through: the ACK may carry data, a window or a FIN.
            }
            _ => {}
        }
        self.on_synchronized_segment(now, seg);
    }

    fn established(&mut self, now: SimTime, ack: u64) {
        self.snd.una = ack;
        self.snd.nxt = self.snd.nxt.max(ack);
        self.snd.high_rxt = ack;
        self.snd.recover = ack;
        self.win_end = ack;
        self.rtt.on_ack(now, ack, self.cfg.rto_min);
        self.backoff = 0;
        self.retries = 0;
        self.cancel_timer(Timer::Rto);
        self.syn_pending = false;
        self.state = if self.snd.fin {
            TcpState::FinWait1
        } else {
            TcpState::Established
        };
        self.emit(TcpEvent::Connected);
    }

    fn on_synchronized_segment(&mut self, now: SimTime, seg: &TcpSegment) {
        let f = seg.flags;
        if f.contains(TcpFlags::RST) {
            if seg.seq >= self.rcv.nxt && seg.seq <= self.rcv.right_edge.max(self.rcv.nxt) {
                self.enter_closed();
                self.emit(TcpEvent::Reset);
            }
            return;
        }
        if f.contains(TcpFlags::SYN) {
            // A retransmitted SYN-ACK: our handshake ACK was lost.
            self.rcv.ack_now = true;
            return;
        }
        if !f.contains(TcpFlags::ACK) {
            return;
        }
        if seg.ack > self.snd.nxt {
            self.rcv.ack_now = true;
            return;
        }
        self.process_ack(now, seg);
        if self.state == TcpState::Closed {
            return;
        }
        self.process_data(now, seg);
    }

    fn process_ack(&mut self, now: SimTime, seg: &TcpSegment) {
        let mss = self.mss();
        let snd = &mut self.snd;
        let mut window_changed = false;
        if seg.ack >= snd.una && (seg.seq > snd.wl1 || (seg.seq == snd.wl1 && seg.ack >= snd.wl2)) {
            let right = seg.ack + u64::from(seg.window);
            window_changed = right != snd.wnd_right;
            snd.wnd_right = right;
            snd.wl1 = seg.seq;
            snd.wl2 = seg.ack;
            snd.max_wnd = snd.max_wnd.max(u64::from(seg.window));
        }
        if seg.ack < snd.una {
            return;
        }
        let mut dsack = false;
        if self.cfg.sack {
            let blocks = seg.sack_blocks();
            // RFC 2883: a first block below the cumulative ACK, or inside the second block,
            // reports a duplicate.
            dsack = blocks.first().is_some_and(|&(s, e)| {
                e <= seg.ack || blocks.get(1).is_some_and(|&(s2, e2)| s2 <= s && e <= e2)
            });
            for &(s, e) in blocks.iter() {
                snd.add_sack(s, e);
            }
        }
        if seg.ack > snd.una {
            self.on_new_ack(now, seg.ack);
        } else if seg.len == 0
            && !seg.flags.contains(TcpFlags::FIN)
            && snd.nxt > snd.una
            && !window_changed
        {
            snd.dupacks += 1;
        }

        self.on_probe_answer(seg.ack, dsack);

        let snd = &self.snd;
        if snd.recovery == Phase::Open
            && snd.nxt > snd.una
            && (u64::from(snd.dupacks) >= 3 || (self.cfg.sack && snd.una_lost_by_sack(mss)))
        {
            let flight = snd.nxt - snd.una;
            self.cc.on_congestion(flight, mss);
            self.snd.enter_recovery(Phase::Recovery);
            self.fast_recoveries += 1;
        }

        if self.snd.wnd_right > self.snd.nxt || self.snd.nxt > self.snd.una {
            self.cancel_timer(Timer::Persist);
            self.persist_backoff = 0;
        } else {
            self.arm_persist(now);
        }

        if self.snd.fin_acked() {
            match self.state {
                TcpState::FinWait1 => self.state = TcpState::FinWait2,
                TcpState::Closing => self.enter_time_wait(now),
                TcpState::LastAck => {
                    self.enter_closed();
                    self.emit(TcpEvent::Closed);
                }
                _ => {}
            }
        }
    }

    fn on_new_ack(&mut self, now: SimTime, ack: u64) {
        let mss = self.mss();
        let acked = ack - self.snd.una;
        self.rtt.on_ack(now, ack, self.cfg.rto_min);
        self.snd.ack(ack);
        self.retries = 0;
        self.backoff = 0;
        if self.snd.una >= self.win_end {
            self.prev_max_flight = self.win_max_flight;
            self.prev_limited = self.win_limited;
            self.win_max_flight = 0;
            self.win_limited = false;
            self.win_end = self.snd.nxt;
        }
        let was = self.snd.recovery;
        match was {
            Phase::Recovery => {
                if ack >= self.snd.recover {
                    self.snd.recovery = Phase::Open;
                    self.snd.dupacks = 0;
                    self.cc.on_recovery_end();
                } else if !self.cfg.sack {
                    // NewReno partial ACK: the segments it covers were not duplicates after all.
                    let segs = (acked / mss).saturating_sub(1);
                    self.snd.dupacks = self.snd.dupacks.saturating_sub(segs as u32);
                }
            }
            Phase::Loss => {
                if ack >= self.snd.recover {
                    self.snd.recovery = Phase::Open;
                }
            }
            Phase::Open => self.snd.dupacks = 0,
        }
        if was != Phase::Recovery {
            if self.cwnd_limited() {
                let srtt = self.rtt.srtt_or(self.cfg.rto_min);
                self.cc.on_ack(now, acked, mss, srtt);
            } else {
                // Time spent application-limited must not count as CUBIC growth time.
                self.cc.on_idle();
            }
        }
        if self.snd.una < self.snd.nxt {
            self.schedule_retransmission(now);
        } else {
            self.cancel_timer(Timer::Rto);
            self.cancel_timer(Timer::Probe);
        }
        if self.app_blocked {
            if self.cfg.autotune {
                // Send-buffer autotuning: room for two congestion windows, so the application
                // can keep a full window queued behind the one in flight.
                let target = (2 * self.cc.cwnd).min(self.cfg.send_buffer_limit());
                self.snd.buf_size = self.snd.buf_size.max(target);
            }
            if self.can_send() && 3 * self.snd.space() >= self.snd.buf_size {
                self.app_blocked = false;
                self.emit(TcpEvent::Writable);
            }
        }
    }

    /// Linux's `tcp_is_cwnd_limited`: in slow start, grow while the window is less than twice
    /// what was actually in flight; in congestion avoidance, only if the window was full.
    fn cwnd_limited(&self) -> bool {
        if self.cc.in_slow_start() {
            // The flight in whole segments, as Linux's `max_packets_out` counts packets: a
            // sub-MSS segment in flight is one. Compared in bytes, a connection that KIST and
            // Nagle keep to one small segment per round trip after a timeout never counted as
            // window-limited, so its window never grew again (a 20 Mbit/s relay pair held at
            // 12 KB/s for minutes).
            let flight = u64::from(self.prev_max_flight.max(self.win_max_flight));
            self.cc.cwnd < 2 * flight.div_ceil(self.mss()) * self.mss()
        } else {
            self.prev_limited || self.win_limited
        }
    }

    fn process_data(&mut self, now: SimTime, seg: &TcpSegment) {
        let fin = seg.flags.contains(TcpFlags::FIN);
        match self.state {
            TcpState::Established | TcpState::FinWait1 | TcpState::FinWait2 => {
                if seg.len == 0 && !fin && seg.seq >= self.rcv.nxt {
                    return;
                }
                let mss = self.mss();
                let quickack = self
                    .cfg
                    .quickack
                    .then(|| self.rtt.rto(self.cfg.rto_max).max(self.cfg.rto_min));
                let out = self.rcv.on_data(
                    now,
                    seg.seq,
                    u64::from(seg.len),
                    fin,
                    mss,
                    self.cfg.delayed_ack,
                    quickack,
                );
                if out.readable {
                    self.emit(TcpEvent::Readable);
                    if self.cfg.autotune {
                        let rtt = self.rtt.srtt_or(self.cfg.rto_min);
                        self.rcv.autotune(now, rtt, self.cfg.recv_buffer_limit());
                    }
                }
                if out.fin {
                    self.emit(TcpEvent::PeerFinished);
                    match self.state {
                        TcpState::Established => self.state = TcpState::CloseWait,
                        TcpState::FinWait1 => {
                            if self.snd.fin_acked() {
                                self.enter_time_wait(now);
                            } else {
                                self.state = TcpState::Closing;
                            }
                        }
                        TcpState::FinWait2 => self.enter_time_wait(now),
                        _ => {}
                    }
                }
            }
            TcpState::TimeWait => {
                if fin || seg.len > 0 {
                    // The peer missed our final ACK; acknowledge again and restart the wait.
                    self.rcv.ack_now = true;
                    self.set_timer(Timer::TimeWait, now + self.cfg.time_wait);
                }
            }
            _ => {
                if fin || seg.len > 0 || seg.seq < self.rcv.nxt {
                    self.rcv.ack_now = true;
                }
            }
        }
    }

    fn enter_time_wait(&mut self, now: SimTime) {
        self.state = TcpState::TimeWait;
        // Replaces any retransmission or persist timer: nothing is left to send.
        self.timer = Timer::TimeWait;
        self.timer_at = now + self.cfg.time_wait;
    }

    // ---------------------------------------------------------------- timers

    /// Runs every timer due at or before `now`; harmless when none is (a stale wake-up).
    pub fn on_timeout(&mut self, now: SimTime) {
        if self.state == TcpState::Closed {
            return;
        }
        if self.timer(Timer::TimeWait) <= now {
            self.enter_closed();
            self.emit(TcpEvent::Closed);
            return;
        }
        if self.rcv.delack_at <= now {
            self.rcv.delack_fired();
        }
        if self.timer(Timer::Rto) <= now {
            self.cancel_timer(Timer::Rto);
            self.on_rto(now);
        }
        if self.timer(Timer::Probe) <= now {
            self.cancel_timer(Timer::Probe);
            self.on_probe_timeout(now);
        }
        if self.timer(Timer::Persist) <= now {
            self.cancel_timer(Timer::Persist);
            if self.snd.nxt == self.snd.una
                && self.snd.nxt < self.snd.data_end
                && self.snd.wnd_right <= self.snd.nxt
            {
                self.probe_pending = true;
                self.persist_backoff = self.persist_backoff.saturating_add(1);
                self.arm_persist(now);
            }
        }
    }

    fn on_rto(&mut self, now: SimTime) {
        let mss = self.mss();
        match self.state {
            TcpState::SynSent | TcpState::SynReceived => {
                self.retries += 1;
                if self.retries > self.cfg.syn_retry_limit() {
                    self.time_out();
                    return;
                }
                self.syn_pending = true;
            }
            _ => {
                if self.snd.una >= self.snd.nxt {
                    return;
                }
                self.retries += 1;
                if self.retries > self.cfg.retry_limit() {
                    self.time_out();
                    return;
                }
                self.rto_count += 1;
                self.tlp = Tlp::None;
                let flight = self.snd.nxt - self.snd.una;
                self.cc.on_timeout(flight, mss);
                self.snd.enter_recovery(Phase::Loss);
                self.win_max_flight = 0;
                self.prev_max_flight = 0;
            }
        }
        self.rtt.cancel();
        self.backoff = self.backoff.saturating_add(1);
        let at = now + self.rtt.current_rto(self.backoff, self.cfg.rto_max);
        self.set_timer(Timer::Rto, at);
    }

    fn time_out(&mut self) {
        self.enter_closed();
        self.emit(TcpEvent::TimedOut);
    }

    fn arm_persist(&mut self, now: SimTime) {
        if self.timer(Timer::Persist) == NEVER
            && self.snd.nxt == self.snd.una
            && self.snd.nxt < self.snd.data_end
            && self.snd.wnd_right <= self.snd.nxt
        {
            let base = self.rtt.rto(self.cfg.rto_max).max(self.cfg.rto_min);
            let shift = u32::from(self.persist_backoff.min(32));
            let t = base.saturating_mul(1 << shift).min(self.cfg.rto_max);
            self.set_timer(Timer::Persist, now + t);
        }
    }

    // ---------------------------------------------------------------- outgoing segments

    fn build(&mut self, seq: u64, len: u64, flags: TcpFlags) -> TcpSegment {
        let mss = self.mss();
        let syn = flags.contains(TcpFlags::SYN);
        let synced = self.state != TcpState::SynSent;
        let window = if synced {
            self.rcv.window(mss)
        } else {
            self.rcv.buf_size
        };
        let (sack, sack_len) = if self.cfg.sack && !syn && synced {
            self.rcv.sack_blocks()
        } else {
            ([(0, 0); 3], 0)
        };
        let mut flags = flags;
        if synced {
            flags.insert(TcpFlags::ACK);
            self.rcv.on_ack_sent();
        }
        let ack = if synced { self.rcv.nxt } else { 0 };
        let mut seg = TcpSegment::new(seq, ack, len as u32, window, flags);
        seg.set_sack(&sack[..usize::from(sack_len)]);
        seg
    }

    /// Arms the retransmission timer if it is not running; a probe timer is pushed back, as
    /// Linux re-arms its probe from every transmission.
    fn arm_rto(&mut self, now: SimTime) {
        if self.timer != Timer::Rto {
            self.schedule_retransmission(now);
        }
    }

    /// The tail loss probe's timeout, if a probe may guard the flight now (Linux's
    /// `tcp_schedule_loss_probe`): SACK on, no recovery under way, no probe unanswered, an RTT
    /// measured. Two round trips, plus room for a delayed ACK when one segment is in flight.
    fn probe_timeout(&self) -> Option<SimDuration> {
        let eligible = self.cfg.sack
            && self.cfg.tail_loss_probe
            && self.snd.recovery == Phase::Open
            && self.tlp == Tlp::None
            && self.rtt.has_sample()
            && self.snd.nxt > self.snd.una
            && !matches!(self.state, TcpState::SynSent | TcpState::SynReceived);
        if !eligible {
            return None;
        }
        let slack = if self.snd.nxt - self.snd.una <= self.mss() {
            self.cfg.rto_min
        } else {
            PROBE_SLACK
        };
        Some(2 * self.rtt.srtt + slack)
    }

    /// Arms the timer that guards the flight: the tail loss probe where it may, else the RTO.
    fn schedule_retransmission(&mut self, now: SimTime) {
        self.cancel_timer(Timer::Rto);
        self.cancel_timer(Timer::Probe);
        let rto = self.rtt.current_rto(self.backoff, self.cfg.rto_max);
        match self.probe_timeout() {
            // Linux arms the probe even when the RTO would come first, at the RTO's time: a
            // probe then stands in for the RTO, without its collapse of the window.
            Some(pto) => self.set_timer(Timer::Probe, now + pto.min(rto)),
            None => self.set_timer(Timer::Rto, now + rto),
        }
    }

    /// The flight went unanswered for a probe timeout. If data above a hole was SACKed, the
    /// hole's data was sent at least that long before it and is lost (RACK's time rule):
    /// recover it at once. Otherwise send a probe. Either way the RTO guards what follows.
    fn on_probe_timeout(&mut self, now: SimTime) {
        if self.snd.una >= self.snd.nxt {
            return;
        }
        let sacked = self.snd.highest_sacked();
        if self.snd.recovery != Phase::Open {
            // Recovery began after the probe was armed; it has its own retransmissions.
        } else if sacked > self.snd.una {
            self.recover_below(sacked);
        } else {
            self.tlp = Tlp::Due;
        }
        let at = now + self.rtt.current_rto(self.backoff, self.cfg.rto_max);
        self.set_timer(Timer::Rto, at);
    }

    /// Fast recovery in which every hole below `lost_below` counts as lost.
    fn recover_below(&mut self, lost_below: u64) {
        let mss = self.mss();
        let flight = self.snd.nxt - self.snd.una;
        self.cc.on_congestion(flight, mss);
        self.snd.enter_recovery(Phase::Recovery);
        self.snd.lost_below = lost_below;
        self.fast_recoveries += 1;
        self.tlp = Tlp::None;
    }

    /// What an ACK says about the unanswered probe (RFC 8985 section 7.4): a probe SACKed
    /// above holes shows them lost; a retransmitted probe acknowledged without a D-SACK
    /// repaired a loss, which calls for the congestion response a fast recovery would have
    /// made; a D-SACK shows the probe was not needed.
    fn on_probe_answer(&mut self, ack: u64, dsack: bool) {
        if !matches!(self.tlp, Tlp::New | Tlp::Retransmitted) {
            return;
        }
        if ack >= self.tlp_high {
            if self.tlp == Tlp::Retransmitted && !dsack {
                // The ACK has emptied the flight, so the reduction is taken from the window
                // (Linux's CWR: what the window was when the loss happened).
                let mss = self.mss();
                self.cc.on_congestion(self.cc.cwnd, mss);
            }
            self.tlp = Tlp::None;
        } else if self.tlp == Tlp::Retransmitted && dsack {
            self.tlp = Tlp::None;
        } else if self.snd.highest_sacked() >= self.tlp_high && self.snd.recovery == Phase::Open {
            self.recover_below(self.tlp_high);
        }
    }

    /// Sends `len` bytes of new data from SND.NXT (with the FIN if they end the stream), for
    /// the ordinary send path and the tail loss probe alike.
    fn send_new(&mut self, now: SimTime, len: u64) -> TcpSegment {
        let seq = self.snd.nxt;
        let fin = self.snd.fin && seq + len == self.snd.data_end && self.may_send_fin();
        if len < self.mss() {
            self.snd.sml = seq + len;
        }
        self.snd.nxt += len + u64::from(fin);
        self.bytes_sent += len;
        self.last_send = now;
        self.rtt.start_timing(now, self.snd.nxt);
        self.note_flight(self.cc.cwnd);
        if self.cfg.quickack && len > 0 {
            self.rcv.on_data_sent(now, self.cfg.delayed_ack);
        }
        let flags = if fin { TcpFlags::FIN } else { TcpFlags::NONE };
        self.build(seq, len, flags)
    }

    /// The probe: one new segment if the peer's window takes it (whatever the congestion
    /// window and Nagle), else the last segment sent, again.
    fn send_probe(&mut self, now: SimTime) -> Option<TcpSegment> {
        let mss = self.mss();
        let avail = self.snd.data_end.saturating_sub(self.snd.nxt);
        let room = self.snd.wnd_right.saturating_sub(self.snd.nxt);
        let len = avail.min(mss).min(room);
        if len > 0 {
            let seg = self.send_new(now, len);
            self.tlp = Tlp::New;
            self.tlp_high = self.snd.nxt;
            return Some(seg);
        }
        let end = self.snd.nxt;
        let start = end.saturating_sub(mss).max(self.snd.una);
        let (len, fin) = self.snd.segment_at(start, end, mss);
        if len == 0 && !fin {
            self.tlp = Tlp::None;
            return None;
        }
        self.retransmits = self.retransmits.saturating_add(1);
        self.bytes_sent += len;
        self.rtt.on_retransmit(start);
        self.tlp = Tlp::Retransmitted;
        self.tlp_high = self.snd.nxt;
        let flags = if fin { TcpFlags::FIN } else { TcpFlags::NONE };
        Some(self.build(start, len, flags))
    }

    /// The next segment to put on the wire at `now`, or `None` when the windows, Nagle or
    /// the state allow nothing more. Call until `None` after every input.
    pub fn poll_transmit(&mut self, now: SimTime) -> Option<TcpSegment> {
        if self.rst_pending {
            self.rst_pending = false;
            let seg = TcpSegment::new(
                self.snd.nxt,
                self.rcv.nxt,
                0,
                0,
                TcpFlags::RST | TcpFlags::ACK,
            );
            return Some(seg);
        }
        match self.state {
            TcpState::Closed => None,
            TcpState::SynSent | TcpState::SynReceived => {
                if !self.syn_pending {
                    return None;
                }
                self.syn_pending = false;
                let iss = self.snd.iss;
                self.snd.nxt = iss + 1;
                self.last_send = now;
                self.arm_rto(now);
                if self.retries == 0 {
                    self.rtt.start_timing(now, iss + 1);
                }
                Some(self.build(iss, 0, TcpFlags::SYN))
            }
            _ => self.transmit_synchronized(now),
        }
    }

    fn transmit_synchronized(&mut self, now: SimTime) -> Option<TcpSegment> {
        if self.tlp == Tlp::Due {
            if let Some(seg) = self.send_probe(now) {
                return Some(seg);
            }
        }
        if let Some(seg) = self.transmit_data(now) {
            return Some(seg);
        }
        if self.probe_pending {
            self.probe_pending = false;
            // An already-acknowledged sequence number forces the peer to answer with its
            // current window without consuming any of it.
            let seq = self.snd.nxt - 1;
            return Some(self.build(seq, 0, TcpFlags::NONE));
        }
        if self.rcv.ack_now {
            let seq = self.snd.nxt;
            return Some(self.build(seq, 0, TcpFlags::NONE));
        }
        None
    }

    fn may_send_fin(&self) -> bool {
        matches!(
            self.state,
            TcpState::FinWait1 | TcpState::LastAck | TcpState::Closing
        )
    }

    fn transmit_data(&mut self, now: SimTime) -> Option<TcpSegment> {
        let mss = self.mss();
        let sack = self.cfg.sack;
        let cwnd = self.cc.cwnd;

        if let Some((s, e)) = self.snd.next_lost(mss, sack) {
            let (len, fin) = self.snd.segment_at(s, e, mss);
            let force = self.snd.force_una && s == self.snd.una;
            let pipe = self.snd.pipe(mss, sack);
            if force || pipe + len.max(1) <= cwnd {
                if s == self.snd.una {
                    self.snd.force_una = false;
                }
                self.snd.high_rxt = s + len + u64::from(fin);
                self.retransmits = self.retransmits.saturating_add(1);
                self.bytes_sent += len;
                self.rtt.on_retransmit(s);
                self.arm_rto(now);
                self.note_flight(cwnd);
                let flags = if fin { TcpFlags::FIN } else { TcpFlags::NONE };
                return Some(self.build(s, len, flags));
            }
            self.win_limited = true;
            return None;
        }

        let avail = self.snd.data_end.saturating_sub(self.snd.nxt);
        if avail > 0 {
            let room = self.snd.wnd_right.saturating_sub(self.snd.nxt);
            let outstanding = self.snd.nxt - self.snd.una;
            let len = avail.min(mss).min(room);
            if len == 0 {
                self.arm_persist(now);
                return None;
            }
            let held = len < mss
                && outstanding > 0
                && if len < avail {
                    // Sender-side silly window avoidance: wait for a worthwhile window.
                    len < self.snd.max_wnd / 2
                } else {
                    // Nagle as Linux does it (Minshall's variant): hold a small segment only
                    // while an earlier small segment is unacknowledged, so a stream of full
                    // segments with a short tail is not held up by its own full segments.
                    !self.cfg.nodelay && !self.snd.fin && self.snd.sml > self.snd.una
                };
            if held {
                return None;
            }
            if outstanding == 0 {
                self.restart_after_idle(now);
            }
            let cwnd = self.cc.cwnd;
            let pipe = self.snd.pipe(mss, sack);
            if pipe + len > cwnd {
                self.win_limited = true;
                return None;
            }
            let seg = self.send_new(now, len);
            self.arm_rto(now);
            return Some(seg);
        }

        if self.snd.fin && self.snd.nxt == self.snd.data_end && self.may_send_fin() {
            let seq = self.snd.nxt;
            self.snd.nxt += 1;
            self.arm_rto(now);
            return Some(self.build(seq, 0, TcpFlags::FIN));
        }
        None
    }

    /// Linux's `tcp_slow_start_after_idle`: a window unused for longer than an RTO no longer
    /// reflects the path, so it is halved per idle RTO down to the initial window.
    fn restart_after_idle(&mut self, now: SimTime) {
        if !self.cfg.slow_start_after_idle {
            return;
        }
        let rto = self.rtt.current_rto(0, self.cfg.rto_max);
        let mut idle = now.saturating_sub(self.last_send);
        if idle <= rto {
            return;
        }
        let restart = (u64::from(self.cfg.effective_initial_cwnd()) * self.mss()).min(self.cc.cwnd);
        self.cc.ssthresh = self.cc.ssthresh.max(self.cc.cwnd / 2 + self.cc.cwnd / 4);
        while idle > rto && self.cc.cwnd > restart {
            idle -= rto;
            self.cc.cwnd /= 2;
        }
        self.cc.cwnd = self.cc.cwnd.max(restart);
        self.cc.on_idle();
    }

    fn note_flight(&mut self, cwnd: u64) {
        let flight = self.snd.nxt - self.snd.una;
        self.win_max_flight = self
            .win_max_flight
            .max(flight.min(u64::from(u32::MAX)) as u32);
        if flight + self.mss() > cwnd {
            self.win_limited = true;
        }
    }

    // ---------------------------------------------------------------- introspection

    /// How many segments Linux would hand its NIC as one under TSO/GSO on this connection now
    /// (`tcp_tso_autosize`, [`Congestion::burst_segments`]): what its pacing rate sends in
    /// 1/1024 s, at least two segments and at most `max`.
    pub fn offload_segments(&self, max: u16) -> u16 {
        self.cc.burst_segments(self.mss(), self.rtt.srtt, max)
    }

    /// A snapshot of the connection's counters and estimates.
    pub fn info(&self) -> TcpInfo {
        let mss = self.mss();
        let data_start = self.snd.iss + 1;
        let window = self.send_window();
        TcpInfo {
            state: self.state,
            cwnd: window.cwnd,
            ssthresh: (self.cc.ssthresh / mss).min(u64::from(u32::MAX)) as u32,
            unacked: window.unacked,
            notsent: window.notsent,
            mss: window.mss,
            srtt: self.rtt.srtt,
            rttvar: self.rtt.rttvar,
            rto: self.rtt.current_rto(self.backoff, self.cfg.rto_max),
            min_rtt: self.rtt.min_rtt,
            bytes_sent: self.bytes_sent,
            bytes_acked: self
                .snd
                .una
                .min(self.snd.data_end)
                .saturating_sub(data_start),
            bytes_received: self.rcv.delivered(),
            retransmits: u64::from(self.retransmits),
            rto_count: u64::from(self.rto_count),
            fast_recoveries: u64::from(self.fast_recoveries),
            send_buffer: self.snd.buf_size,
            recv_buffer: self.rcv.buf_size,
        }
    }

    /// The window facts of [`TcpConnection::info`] alone.
    #[inline]
    pub fn send_window(&self) -> SendWindow {
        let mss = self.mss();
        SendWindow {
            cwnd: (self.cc.cwnd / mss).min(u64::from(u32::MAX)) as u32,
            unacked: (self.snd.nxt - self.snd.una).div_ceil(mss) as u32,
            notsent: self.snd.notsent(),
            mss: mss as u32,
        }
    }

    /// Heap memory owned by the connection: only the SACK scoreboard and the reassembly
    /// ranges, and only while holes exist. Lets a simulator account for its memory.
    pub fn heap_bytes(&self) -> usize {
        self.snd.heap_bytes() + self.rcv.heap_bytes()
    }

    /// Asserts internal invariants (reassembly ranges, scoreboard, buffer accounting). Cheap
    /// enough to call after every event in tests.
    pub fn check_invariants(&self) {
        self.snd.check();
        self.rcv.check();
        assert!(self.snd.occupancy() <= self.snd.buf_size.max(self.snd.occupancy()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connection_is_small() {
        let size = std::mem::size_of::<TcpConnection>();
        // 400 before the tail loss probe (its state, and the receiver's D-SACK block).
        assert!(size <= 440, "TcpConnection is {size} bytes");
    }

    /// Exchanges segments between two connections until both are quiet (no loss, no delay).
    fn exchange(a: &mut TcpConnection, b: &mut TcpConnection, now: SimTime) {
        loop {
            let mut moved = false;
            while let Some(seg) = a.poll_transmit(now) {
                b.on_segment(now, &seg);
                moved = true;
            }
            while let Some(seg) = b.poll_transmit(now) {
                a.on_segment(now, &seg);
                moved = true;
            }
            if !moved {
                break;
            }
        }
    }

    #[test]
    fn written_counts_accepted_bytes_only() {
        let cfg = Arc::new(TcpConfig {
            send_buffer_initial: 10_000,
            autotune: false,
            ..TcpConfig::default()
        });
        let mut client = TcpConnection::connect(&cfg, 0, 1000);
        assert_eq!(client.written(), 0);
        assert_eq!(client.send(4000), 4000);
        // The buffer is full: only what was accepted counts.
        assert_eq!(client.send(8000), 6000);
        assert_eq!(client.written(), 10_000);

        let syn = client.poll_transmit(0).expect("SYN");
        let mut server = TcpConnection::accept(&cfg, 0, 7_000_000, &syn);
        exchange(&mut client, &mut server, 0);
        assert_eq!(server.read(u64::MAX), 10_000);
        assert_eq!(client.send(2500), 2500);
        client.close(0);
        // Neither the SYN nor the FIN counts, and nothing is accepted after close.
        assert_eq!(client.send(1), 0);
        exchange(&mut client, &mut server, 0);
        assert_eq!(client.written(), 12_500);
        assert_eq!(server.delivered(), client.written());
        assert_eq!(server.written(), 0);
        assert_eq!(client.state(), TcpState::FinWait2);
    }

    /// After a timeout, a connection that sends one small segment at a time (KIST and Nagle
    /// keep a relay's to that) must still count as window-limited in slow start, as Linux
    /// does counting packets: its window grows to two segments and it may send more. Compared
    /// in bytes (500 in flight against a window of 1.3 segments), it never grew again.
    #[test]
    fn a_window_of_small_segments_grows_after_a_timeout() {
        // The timeout itself, not the tail loss probe that would stand in for it.
        let cfg = Arc::new(TcpConfig {
            tail_loss_probe: false,
            ..TcpConfig::default()
        });
        let mut client = TcpConnection::connect(&cfg, 0, 1000);
        let syn = client.poll_transmit(0).expect("SYN");
        let mut server = TcpConnection::accept(&cfg, 0, 7_000_000, &syn);
        exchange(&mut client, &mut server, 0);
        assert_eq!(client.send(500), 500);
        let lost = client.poll_transmit(0).expect("data");
        assert_eq!(lost.len, 500);
        let mut now = client.poll_timeout().expect("RTO armed");
        client.on_timeout(now);
        assert_eq!(client.info().cwnd, 1);
        for round in 0..3 {
            let seg = client.poll_transmit(now).expect("a segment");
            assert_eq!(seg.len, 500, "round {round}");
            server.on_segment(now, &seg);
            let ack = match server.poll_transmit(now) {
                Some(ack) => ack,
                None => {
                    now = server.poll_timeout().expect("delayed ACK");
                    server.on_timeout(now);
                    server.poll_transmit(now).expect("ACK")
                }
            };
            client.on_segment(now, &ack);
            // 1,448 + 500 bytes after the first round, + 500 after the second, then two
            // segments (the slow-start threshold). Compared in bytes, it stayed at 1,948.
            let want = if round < 2 { 1 } else { 2 };
            assert_eq!(
                client.info().cwnd,
                want,
                "round {round}: {:?}",
                client.info()
            );
            assert_eq!(server.read(u64::MAX), 500);
            assert_eq!(client.send(500), 500);
        }
    }

    const MS: SimTime = NANOS_PER_MILLI;

    /// A connection whose handshake took a 50 ms round trip, `segments` full segments sent at
    /// `now` = 50 ms.
    fn with_flight(segments: u64) -> (TcpConnection, TcpConnection, Vec<TcpSegment>) {
        let cfg = Arc::new(TcpConfig::default());
        let mut c = TcpConnection::connect(&cfg, 0, 1000);
        let syn = c.poll_transmit(0).expect("SYN");
        let mut s = TcpConnection::accept(&cfg, 0, 7_000_000, &syn);
        let synack = s.poll_transmit(0).expect("SYN-ACK");
        c.on_segment(50 * MS, &synack);
        let ack = c.poll_transmit(50 * MS).expect("handshake ACK");
        s.on_segment(50 * MS, &ack);
        assert_eq!(c.send(segments * 1448), segments * 1448);
        let flight: Vec<_> = std::iter::from_fn(|| c.poll_transmit(50 * MS)).collect();
        assert_eq!(flight.len() as u64, segments);
        (c, s, flight)
    }

    /// The server's ACK for what it holds, at once or when its delayed-ACK timer fires.
    fn answer(s: &mut TcpConnection, now: &mut SimTime) -> TcpSegment {
        if let Some(ack) = s.poll_transmit(*now) {
            return ack;
        }
        *now = s.poll_timeout().expect("delayed ACK");
        s.on_timeout(*now);
        s.poll_transmit(*now).expect("ACK")
    }

    /// RFC 8985's tail loss probe: the last segment of a flight is lost; two round trips later
    /// (not an RTO later) it is sent again, and the window is reduced once, as a fast
    /// recovery would have.
    #[test]
    fn a_lost_last_segment_is_probed_not_timed_out() {
        let (mut c, mut s, flight) = with_flight(3);
        let mut now = 50 * MS;
        s.on_segment(now, &flight[0]);
        s.on_segment(now, &flight[1]);
        let ack = answer(&mut s, &mut now);
        now += 25 * MS;
        c.on_segment(now, &ack);
        let cwnd = c.info().cwnd;
        // One segment out: the probe waits for a delayed ACK too, so it comes at the RTO's
        // time, but as a probe.
        let at = c.poll_timeout().expect("probe timer");
        assert!(
            at <= now + c.info().rto,
            "probe at {at}, RTO {}",
            c.info().rto
        );
        now = at;
        c.on_timeout(now);
        let probe = c.poll_transmit(now).expect("probe");
        assert_eq!((probe.seq, probe.len), (flight[2].seq, flight[2].len));
        s.on_segment(now, &probe);
        let ack = answer(&mut s, &mut now);
        c.on_segment(now, &ack);
        let info = c.info();
        assert_eq!((info.rto_count, info.retransmits), (0, 1));
        assert_eq!(s.read(u64::MAX), 3 * 1448);
        assert!(
            info.cwnd < cwnd,
            "cwnd {} after the repair, {cwnd} before",
            info.cwnd
        );
    }

    /// The last segment arrived but its ACK was lost: the probe duplicates it, the receiver
    /// reports the duplicate with a D-SACK block, and the window is left alone.
    #[test]
    fn a_needless_probe_is_recognised_by_its_dsack() {
        let (mut c, mut s, flight) = with_flight(3);
        let mut now = 50 * MS;
        for seg in &flight {
            s.on_segment(now, seg);
        }
        let _lost = answer(&mut s, &mut now);
        let _lost_too = s.poll_transmit(now);
        let cwnd = c.info().cwnd;
        now = c.poll_timeout().expect("probe timer");
        c.on_timeout(now);
        let probe = c.poll_transmit(now).expect("probe");
        s.on_segment(now, &probe);
        let ack = s.poll_transmit(now).expect("ACK with D-SACK");
        assert_eq!(
            &*ack.sack_blocks(),
            [(probe.seq, probe.seq + probe.len as u64)]
        );
        c.on_segment(now, &ack);
        let info = c.info();
        assert_eq!((info.rto_count, info.cwnd), (0, cwnd));
    }

    /// A segment in the middle of a short flight is lost and too few segments follow it for
    /// the duplicate-ACK rule. The probe timeout finds SACKed data above the hole, sent at the
    /// same time as the hole's data and answered long ago: the hole is lost, and it is
    /// retransmitted at once (RACK's time rule) instead of after an RTO.
    #[test]
    fn a_hole_under_sacked_data_is_recovered_at_the_probe_timeout() {
        let (mut c, mut s, flight) = with_flight(3);
        let mut now = 50 * MS;
        s.on_segment(now, &flight[0]);
        s.on_segment(now, &flight[2]);
        let ack = answer(&mut s, &mut now);
        now += 25 * MS;
        c.on_segment(now, &ack);
        now = c.poll_timeout().expect("probe timer");
        c.on_timeout(now);
        let rtx = c.poll_transmit(now).expect("retransmission");
        assert_eq!((rtx.seq, rtx.len), (flight[1].seq, flight[1].len));
        s.on_segment(now, &rtx);
        let ack = answer(&mut s, &mut now);
        c.on_segment(now, &ack);
        assert_eq!(c.info().rto_count, 0);
        assert_eq!(s.read(u64::MAX), 3 * 1448);
    }
}
