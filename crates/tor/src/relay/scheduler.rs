//! The circuit scheduler: which queued cell goes next, on which connection, and how many may be
//! written now (KIST's per-connection limit, the write bucket, the IMUX connection schedulers,
//! Torchestra's light/heavy classification).

use super::*;
use onionlab_engine::time::SimDuration;
use onionlab_net::tcp::SendWindow;
use onionlab_torcore::ewma::CellWeight;
use onionlab_torcore::TorParams;

/// The lists one scheduler run works through, empty between runs; kept so that their
/// buffers are reused rather than allocated for every run.
#[derive(Default)]
pub(super) struct SchedScratch {
    /// Channels that may still send in this run, quietest circuit first.
    heap: BinaryHeap<Reverse<(u64, u32)>>,
    /// Channels with cells left for a later run.
    deferred: Vec<u32>,
    /// Channels with circuits whose connection was full.
    parked: Vec<u32>,
    /// Connections written in this run, to flush at its end.
    touched: Vec<u32>,
    /// Exit circuits whose queue fell low enough to read from their streams again.
    unblocked: Vec<u32>,
    /// The pending channels this run started with.
    pending: Vec<u32>,
}

/// Where [`Relay::requeue_unless_first`] left a channel.
pub(super) enum Requeued {
    /// No connection of the channel has room left in this run.
    NoRoom,
    /// Back in the heap.
    Queued,
    /// Not in the heap: it is the next to write, from this circuit (its quietest).
    First(u32),
}

impl Relay {
    pub(super) fn mark_pending(&mut self, io: &mut impl Io<RelayTimer>, ch: u32) {
        let chan = &mut self.channels[ch as usize];
        if chan.pending || chan.mux.is_empty() {
            return;
        }
        chan.pending = true;
        self.pending.push(ch);
        self.wake_scheduler(io);
        self.arm_scheduler(io);
    }

    /// Arms the KIST scheduler like tor's `kist_scheduler_schedule`: at the end of the run
    /// interval counted from the last run, which is now if the last run is that long ago.
    pub(super) fn arm_scheduler(&mut self, io: &mut impl Io<RelayTimer>) {
        if self.world.params.scheduler == SchedulerKind::Vanilla || self.schedule_armed {
            return;
        }
        self.schedule_armed = true;
        let interval = self.run_interval();
        let since = self
            .last_schedule_run
            .map_or(interval, |t| io.now().saturating_sub(t));
        let at = io.now().saturating_add(interval.saturating_sub(since));
        io.arm_leading_at(at, RelayTimer::Schedule);
    }

    /// KIST's run interval. Never 0: a run that leaves work (a blocked channel) would re-arm
    /// itself at the same instant forever. Huge intervals saturate (the scheduler then never
    /// runs again).
    fn run_interval(&self) -> SimDuration {
        millis(self.world.params.kist_run_interval_ms).max(1)
    }

    /// Wakes a parked scheduler (see `unpark_scheduler`); nothing if it is not parked. Called
    /// for what may give it room without moving a socket it waits on: a channel that becomes
    /// pending, a connection added to a channel, a run outside the timer.
    pub(super) fn wake_scheduler(&mut self, io: &mut impl Io<RelayTimer>) {
        if self.scheduler_parked {
            self.unpark_scheduler(io);
        }
    }

    /// Brings a parked scheduler up to the present and arms its next run: once a socket it
    /// waits on has moved so that a pending channel has room (`Machine::after_event`), or
    /// through `wake_scheduler`.
    ///
    /// A KIST run that finds no connection of its pending channels with room writes nothing
    /// and changes nothing but its own bookkeeping, and so does every run after it, one per
    /// run interval, until one of those connections' sockets moves (an ACK, a timer, a
    /// segment sent: their send windows are the only thing the runs read that could give
    /// them room) or another channel becomes pending. On web-6876, runs that wrote nothing
    /// were 76% of all scheduler runs (31.1 M of 40.7 M in the first 100 simulated seconds),
    /// each an event whose host state had mostly left the cache. A parked scheduler skips
    /// them: it watches its pending channels' sockets (`Io::watch`), and the wake counts the
    /// runs it would have made before now (their run stamps and last run time) and arms the
    /// next one on the same grid of run intervals. The run is a leading timer
    /// (`Io::arm_leading_at`), so it keeps its place among the relay's other events at its
    /// instant however late it is armed; a run due at the very instant of the waking event
    /// is one of the skipped ones when it would have come first. Token buckets are refilled
    /// from the clock whenever they are read, so the skipped reads change nothing.
    fn unpark_scheduler(&mut self, io: &mut impl Io<RelayTimer>) {
        self.scheduler_parked = false;
        for socket in self.parked_on.drain(..) {
            io.watch(socket, false);
        }
        let interval = self.run_interval();
        let last = self
            .last_schedule_run
            .expect("a scheduler parks only at the end of a run");
        let since = io.now().saturating_sub(last);
        let mut skipped = since / interval;
        if skipped > 0 && since % interval == 0 && !io.leading_timer_first() {
            // The run due now would have come after this event, which may give it work.
            skipped -= 1;
        }
        if skipped > 0 {
            self.last_schedule_run = Some(last + skipped * interval);
            self.run_stamp = self.run_stamp.wrapping_add(skipped as u32);
        }
        self.schedule_armed = true;
        let next = last.saturating_add(interval.saturating_mul(skipped + 1));
        io.arm_leading_at(next, RelayTimer::Schedule);
    }

    /// Puts a channel back in the scheduler's heap, keyed by its quietest circuit, if one of
    /// its connections may still take a cell in this run; false if none may.
    pub(super) fn requeue(
        &self,
        ch: u32,
        weight: &CellWeight,
        heap: &mut BinaryHeap<Reverse<(u64, u32)>>,
    ) -> bool {
        let chan = &self.channels[ch as usize];
        if chan.room == 0 {
            return false;
        }
        let best = chan.mux.best_at(weight).map_or(0.0, |b| b.1);
        heap.push(Reverse((ewma_key(best), ch)));
        true
    }

    /// As [`Relay::requeue`] after the channel wrote a cell, except that a channel that would
    /// come straight back out of the heap (its key below every other channel's, as happens
    /// while one busy channel has the relay to itself) is not put in: the heap's order is
    /// unchanged and the next cell is the channel's, as it would have been.
    pub(super) fn requeue_unless_first(
        &self,
        ch: u32,
        weight: &CellWeight,
        heap: &mut BinaryHeap<Reverse<(u64, u32)>>,
    ) -> Requeued {
        let chan = &self.channels[ch as usize];
        if chan.room == 0 {
            return Requeued::NoRoom;
        }
        let best = chan.mux.best_at(weight);
        let entry = Reverse((ewma_key(best.map_or(0.0, |b| b.1)), ch));
        // No two entries are equal: a channel is in the heap at most once.
        if let Some((circ, _)) = best {
            if heap.peek().is_none_or(|top| entry > *top) {
                return Requeued::First(circ);
            }
        }
        heap.push(entry);
        Requeued::Queued
    }

    /// Counts the channel's connections with room for a cell at the start of a scheduler run.
    pub(super) fn count_room(&mut self, ch: u32, cell_bytes: u64) {
        let chan = &mut self.channels[ch as usize];
        let conns = &self.conns;
        chan.room = chan
            .conns
            .iter()
            .filter(|&&k| conns[k as usize].usable() && conns[k as usize].limit >= cell_bytes)
            .count() as u32;
    }

    /// Reads connection `k`'s write limit (KIST's, from its socket) and queue for this
    /// scheduler run, unless this run already did.
    pub(super) fn refresh_limit(&mut self, io: &impl Io<RelayTimer>, k: u32) {
        let params = &self.world.params;
        let conn = &mut self.conns[k as usize];
        if conn.limit_run == self.run_stamp {
            return;
        }
        conn.limit_run = self.run_stamp;
        if !conn.usable() {
            conn.limit = 0;
            return;
        }
        if conn.stream {
            // A stream takes what its send buffer (and flow control) takes; KIST's limit is
            // its QUIC connection's, shared by the channel's streams (`Channel::quic_limit`).
            conn.limit = u64::MAX;
            conn.queued_bytes = 0;
            return;
        }
        (conn.limit, conn.queued_bytes) = socket_limit(params, io, conn.socket);
    }

    /// Whether a connection of a pending channel has room for a cell now: what the parked
    /// scheduler's next run would find first (as `refresh_limit` and `count_room` read it).
    /// No scheduler parks while a pending channel holds several connections (a run finds
    /// their room only as it tries them) or under QUIC, so each is a TCP socket's.
    pub(super) fn parked_room(&self, io: &impl Io<RelayTimer>) -> bool {
        let params = &self.world.params;
        self.pending.iter().any(|&ch| {
            let chan = &self.channels[ch as usize];
            let cell_bytes = self.chan_cell_bytes(ch);
            !chan.mux.is_empty()
                && chan.conns.iter().any(|&k| {
                    let conn = &self.conns[k as usize];
                    conn.usable() && socket_limit(params, io, conn.socket).0 >= cell_bytes
                })
        })
    }

    /// What KIST lets a channel on QUIC write to its QUIC connection in this scheduler run:
    /// the connection's free congestion window plus KIST's extra socket space, less what its
    /// streams hold unsent (tor's `tcp_space` with the connection in the socket's place).
    pub(super) fn refresh_quic_limit(&mut self, io: &impl Io<RelayTimer>, ch: u32) {
        let info = io.send_window(self.channels[ch as usize].quic);
        self.channels[ch as usize].quic_limit = write_limit(&self.world.params, info.as_ref());
    }

    /// Under IMUX's EWMA mapping, brings the channel's ranking of its usable connections up
    /// to date and ranks its circuits, quietest first.
    pub(super) fn rank_conns(&mut self, ch: u32, now: SimTime) {
        if self.design != ChannelDesign::Imux
            || self.world.params.imux_scheduler != ImuxScheduler::Ewma
        {
            return;
        }
        let clock = &self.clock;
        let tick = clock.tick(now);
        let Channel {
            conns: chan_conns,
            mux,
            multi,
            ..
        } = &mut self.channels[ch as usize];
        let m = MultiConn::made(multi);
        let mut current = !m.ranking_stale && m.ranking_tick == tick;
        if current {
            for &k in &m.rank_dirty {
                let conn = &mut self.conns[k as usize];
                let old = (conn.ewma_seen, k);
                conn.ewma_seen = conn.ewma.value(clock, now);
                conn.ewma_seen_tick = tick;
                if !transport::rerank(&mut m.ranking, old, (conn.ewma_seen, k)) {
                    current = false;
                }
            }
        }
        m.rank_dirty.clear();
        if !current {
            m.ranking.clear();
            for &k in chan_conns.iter() {
                let conn = &mut self.conns[k as usize];
                if conn.usable() {
                    if conn.ewma_seen_tick != tick {
                        conn.ewma_seen = conn.ewma.value(clock, now);
                        conn.ewma_seen_tick = tick;
                    }
                    m.ranking.push((conn.ewma_seen, k));
                }
            }
            m.ranking.sort_unstable_by(transport::ranking_order);
            m.ranking_tick = tick;
            m.ranking_stale = false;
        }
        if cfg!(test) {
            // The ranking kept up to date is the one built afresh.
            let mut fresh: Vec<(f64, u32)> = (chan_conns.iter())
                .filter(|&&k| self.conns[k as usize].usable())
                .map(|&k| (self.conns[k as usize].ewma.value(clock, now), k))
                .collect();
            fresh.sort_unstable_by(transport::ranking_order);
            assert_eq!(m.ranking, fresh, "IMUX ranking out of step");
        }
        mux.ranks(now, &mut self.rank_scratch, &mut m.circ_ranks);
    }

    /// The connection the next cell of `circ` goes on, among those with room in this run.
    pub(super) fn pick_conn(
        &mut self,
        io: &impl Io<RelayTimer>,
        ch: u32,
        circ: u32,
        cell_bytes: u64,
    ) -> Option<u32> {
        let room = |conns: &[Conn], k: u32| {
            k != NONE && conns[k as usize].usable() && conns[k as usize].limit >= cell_bytes
        };
        let pinned = self.circuits[circ as usize]
            .as_mut()
            .unwrap()
            .side_for(ch)
            .conn;
        let k = match (self.design, self.world.params.imux_scheduler) {
            (ChannelDesign::Imux, ImuxScheduler::ShortestQueue) => {
                // Every connection's queue was read at the start of the run.
                let chan = &self.channels[ch as usize];
                let best =
                    transport::shortest_queue(chan.conns.iter().map(|&k| {
                        room(&self.conns, k).then(|| self.conns[k as usize].queued_bytes)
                    }))?;
                return Some(chan.conns[best]);
            }
            (ChannelDesign::Imux, ImuxScheduler::Ewma) => {
                let multi = self.channels[ch as usize].multi();
                let ranks = &multi.circ_ranks;
                let rank = ranks
                    .binary_search_by_key(&circ, |e| e.0)
                    .map_or(0, |i| ranks[i].1 as usize);
                transport::imux_ewma_pick(rank, ranks.len().max(1), &multi.ranking)?.1
            }
            (ChannelDesign::Imux, ImuxScheduler::RoundRobin) => {
                // A freed slot has no socket; a reused one may sit on another channel.
                let alive = pinned != NONE && {
                    let c = &self.conns[pinned as usize];
                    c.chan == ch && c.socket.slot != NONE && c.state == ConnState::Active
                };
                if alive {
                    pinned
                } else {
                    let conns = &self.conns;
                    let chan = &mut self.channels[ch as usize];
                    let is_active = |k: &&u32| conns[**k as usize].state == ConnState::Active;
                    let active = chan.conns.iter().filter(is_active).count();
                    if active == 0 {
                        return None;
                    }
                    let multi = MultiConn::made(&mut chan.multi);
                    multi.turn = (multi.turn + 1) % active;
                    let k = *chan.conns.iter().filter(is_active).nth(multi.turn).unwrap();
                    let side = self.circuits[circ as usize].as_mut().unwrap().side_for(ch);
                    side.conn = k;
                    self.conns[k as usize].circuits += 1;
                    k
                }
            }
            _ => pinned,
        };
        if k != NONE {
            self.refresh_limit(io, k);
        }
        room(&self.conns, k).then_some(k)
    }

    /// Moves queued cells into connection sockets: globally across channels, quietest
    /// circuit first, within each socket's write limit and the write bucket.
    pub(super) fn run_scheduler(&mut self, io: &mut impl Io<RelayTimer>) {
        // A run outside the timer's (a token refill's): the parked runs before it come first.
        self.wake_scheduler(io);
        let now = io.now();
        // Tor stamps the run when it ends; in simulated time that is this same instant, and
        // stamping first keeps work queued during the run from re-arming it at once.
        self.last_schedule_run = Some(now);
        self.run_stamp = self.run_stamp.wrapping_add(1);
        let base_cell_bytes = self.world.cell_wire_bytes();
        // The few parameters the run reads, copied: cloning the shared world's `Arc` in every
        // run would write its reference count, a cache line every worker reads.
        let params = &self.world.params;
        let imux_shortest_queue = params.imux_scheduler == ImuxScheduler::ShortestQueue;
        let queue_low_cells = params.circuit_queue_low_cells as u64;
        let kist = params.scheduler == SchedulerKind::Kist;
        // KIST and KIST-lite run on a timer; the old scheduler runs when there is work.
        let kist_timer = params.scheduler != SchedulerKind::Vanilla;
        let sock_buf_size_factor = params.kist_sock_buf_size_factor;
        let design = self.design;
        let mut allowance = self.buckets.write_allowance(now, true);
        // Every cell of the run is sent at `now`: one EWMA weight serves them all.
        let weight = self.clock.cell_weight(now);
        // The run's working lists live in the relay between runs, so that a run (one per few
        // cells on a quiet relay) allocates nothing.
        let mut scratch = std::mem::take(&mut self.sched_scratch);
        let SchedScratch {
            heap,
            deferred,
            parked,
            touched,
            unblocked,
            pending,
        } = &mut scratch;
        std::mem::swap(&mut self.pending, pending);
        // Whether any pending channel had a connection with room: if none had, the run writes
        // nothing, and the runs after it find the same until something reaches the relay.
        let mut any_room = false;
        for ch in pending.drain(..) {
            let chan = &mut self.channels[ch as usize];
            chan.pending = false;
            if chan.mux.is_empty() {
                continue;
            }
            let cell_bytes = self.chan_cell_bytes(ch);
            if self.channels[ch as usize].carrier == Carrier::Quic {
                self.refresh_quic_limit(io, ch);
            }
            let lazy = self.channels[ch as usize].conns.len() > 1
                && !(design == ChannelDesign::Imux && imux_shortest_queue);
            if lazy {
                // Limits are read as connections are tried; running out of room shows as
                // the channel's circuits parking one by one.
                self.channels[ch as usize].room = u32::MAX;
                self.rank_conns(ch, now);
            } else {
                for i in 0..self.channels[ch as usize].conns.len() {
                    let k = self.channels[ch as usize].conns[i];
                    self.refresh_limit(io, k);
                }
                self.count_room(ch, cell_bytes);
                self.rank_conns(ch, now);
            }
            if self.requeue(ch, &weight, heap) {
                any_room = true;
            } else {
                deferred.push(ch);
            }
        }
        // The channel that stays first after writing a cell, taken next without the heap.
        let mut first = None;
        // Cells written and not yet handed to their socket (see `write_held`).
        let mut held = None;
        loop {
            let (ch, best) = match first.take() {
                Some((ch, circ)) => (ch, Some(circ)),
                None => match heap.pop() {
                    Some(Reverse((_, ch))) => (ch, None),
                    None => break,
                },
            };
            let cell_bytes = self.chan_cell_bytes(ch);
            if allowance < cell_bytes {
                deferred.push(ch);
                continue;
            }
            let on_quic = self.channels[ch as usize].carrier == Carrier::Quic;
            if on_quic && self.channels[ch as usize].quic_limit < cell_bytes {
                // The QUIC connection has taken what KIST lets it have in this run.
                self.write_limit_hits += 1;
                deferred.push(ch);
                continue;
            }
            let best = best.or_else(|| self.channels[ch as usize].mux.best(now));
            let Some(circ) = best else {
                continue;
            };
            let empty = self.circuits[circ as usize]
                .as_mut()
                .unwrap()
                .side_for(ch)
                .queue
                .is_empty();
            let chosen = if empty {
                None
            } else {
                self.pick_conn(io, ch, circ, cell_bytes)
            };
            let Some(k) = chosen else {
                // Nothing queued, or its connection is full: it waits for a later run while
                // the channel's other circuits go on.
                let chan = &mut self.channels[ch as usize];
                chan.mux.remove(circ);
                if !empty {
                    chan.parked.push(circ);
                    if chan.parked.len() == 1 {
                        parked.push(ch);
                    }
                }
                if !chan.mux.is_empty() && !self.requeue(ch, &weight, heap) {
                    deferred.push(ch);
                }
                continue;
            };
            let c = self.circuits[circ as usize].as_mut().unwrap();
            let side = c.side_for(ch);
            let cell = side.queue.pop_front().unwrap();
            let message = if self.channels[ch as usize].sequenced {
                Wire::Sequenced {
                    cell,
                    seq: side.seq_out,
                }
            } else {
                Wire::Cell(cell)
            };
            if !Self::write_held(
                &mut self.conns,
                &mut self.unsent_watch,
                &mut self.work,
                io,
                &mut held,
                k,
                cell_bytes,
                message,
            ) {
                side.queue.push_front(cell);
                self.update_conn(k, |c| c.blocked = true);
                // It had room (it was chosen for it); now it has none.
                self.channels[ch as usize].room -= 1;
                if !self.requeue(ch, &weight, heap) {
                    deferred.push(ch);
                }
                continue;
            }
            side.seq_out += 1;
            if on_quic {
                self.channels[ch as usize].quic_limit -= cell_bytes;
            }
            let conn = &mut self.conns[k as usize];
            conn.limit -= cell_bytes;
            if conn.limit < cell_bytes {
                self.channels[ch as usize].room -= 1;
            }
            conn.queued_bytes += cell_bytes;
            conn.last_used = now;
            if design == ChannelDesign::Imux {
                conn.ewma.note_cells(&self.clock, 1, now);
                if conn.ewma_seen_tick != u64::MAX {
                    conn.ewma_seen_tick = u64::MAX;
                    self.channels[ch as usize].multi_mut().rank_dirty.push(k);
                }
            }
            let emptied = side.queue.is_empty();
            let own = side.queue.len() as u64 + 1;
            if let Some(exit) = c.exit.as_mut() {
                if exit.edge_blocked && own - 1 <= queue_low_cells {
                    exit.edge_blocked = false;
                    unblocked.push(circ);
                }
            }
            let chan = &mut self.channels[ch as usize];
            c.stats.cells += 1;
            c.stats.overtaken += chan.queued - own;
            chan.queued -= 1;
            self.queued_cells -= 1;
            allowance -= cell_bytes;
            self.buckets.note_written(cell_bytes, true);
            self.now_counters.cells_out += 1;
            self.channel_stats.cells_written += 1;
            self.now_counters.bytes_written += cell_bytes;
            chan.mux.note_sent_weighted(circ, 1, weight);
            if emptied {
                chan.mux.remove(circ);
            }
            if !self.conns[k as usize].touched {
                self.conns[k as usize].touched = true;
                touched.push(k);
            }
            if design == ChannelDesign::Torchestra {
                Self::release(&self.conns, &mut self.work, io, &mut held);
                self.classify_torchestra(io, ch, circ, now);
            }
            if !self.channels[ch as usize].mux.is_empty() {
                match self.requeue_unless_first(ch, &weight, heap) {
                    Requeued::NoRoom => {
                        self.write_limit_hits += 1;
                        deferred.push(ch);
                    }
                    Requeued::First(circ) => first = Some((ch, circ)),
                    Requeued::Queued => {}
                }
            }
        }
        Self::release(&self.conns, &mut self.work, io, &mut held);
        if let (true, Some(audit)) = (kist, self.kist_audit.as_mut()) {
            // Sockets only: a QUIC stream's limit is its connection's (see `quic_limit`).
            for &k in touched.iter().filter(|&&k| !self.conns[k as usize].stream) {
                let socket = self.conns[k as usize].socket;
                if let Some(i) = io.send_window(socket) {
                    let (cwnd, unacked, mss) = (i.cwnd as i64, i.unacked as i64, i.mss as i64);
                    let space = (cwnd - unacked).max(0) * mss;
                    let extra = ((cwnd * mss) as f64 * sock_buf_size_factor) as i64;
                    let excess = (i.notsent as i64).saturating_sub(space.saturating_add(extra));
                    audit.checks += 1;
                    audit.max_excess = audit.max_excess.max(excess);
                }
            }
        }
        for &k in touched.iter() {
            self.conns[k as usize].touched = false;
            self.flush_conn(io, k);
        }
        touched.clear();
        for ch in parked.drain(..) {
            let chan = &mut self.channels[ch as usize];
            for circ in std::mem::take(&mut chan.parked) {
                chan.mux.add_active(circ);
            }
            deferred.push(ch);
        }
        for circ in unblocked.drain(..) {
            self.package(io, circ);
        }
        let out_of_tokens = allowance < base_cell_bytes;
        for ch in deferred.drain(..) {
            let chan = &mut self.channels[ch as usize];
            if !chan.pending && !chan.mux.is_empty() {
                chan.pending = true;
                self.pending.push(ch);
            }
        }
        self.sched_scratch = scratch;
        if !self.pending.is_empty() {
            if out_of_tokens {
                self.arm_refill(io);
            }
            // Parked only where the runs it skips are sure to find what this one found: not
            // while tokens are short (their refill is an event, and may come at the instant of
            // a run), nor with a CPU model (which may hold a run back), nor under IMUX (whose
            // connection ranking moves with the clock), nor under QUIC (whose channels' limits
            // come from QUIC connections, which the stack does not watch); nor with a run
            // already armed.
            let park = !any_room
                && !out_of_tokens
                && !self.schedule_armed
                && kist_timer
                && design != ChannelDesign::Imux
                && design != ChannelDesign::Quic
                && !io.models_cpu();
            if park {
                self.scheduler_parked = true;
                for &ch in &self.pending {
                    for &k in &self.channels[ch as usize].conns {
                        let socket = self.conns[k as usize].socket;
                        io.watch(socket, true);
                        self.parked_on.push(socket);
                    }
                }
                // Whatever moved before now was seen by this run.
                io.take_watch_hit();
            } else {
                self.arm_scheduler(io);
            }
        }
    }

    /// Torchestra: after a cell of `circ` left on channel `ch`, moves the circuit between
    /// the light and the heavy connection if its EWMA crossed the threshold, and tells the
    /// peer so it moves the circuit's other direction too.
    pub(super) fn classify_torchestra(
        &mut self,
        io: &mut impl Io<RelayTimer>,
        ch: u32,
        circ: u32,
        now: SimTime,
    ) {
        let chan = &self.channels[ch as usize];
        let (light, heavy) = (chan.multi().light, chan.multi().heavy);
        if light == NONE || heavy == NONE {
            return;
        }
        let Some(ewma) = chan.mux.value(circ, now) else {
            return;
        };
        let was_heavy = self.circuits[circ as usize]
            .as_ref()
            .is_some_and(|c| c.side_on_chan(ch).heavy);
        if !was_heavy && ewma < transport::TORCHESTRA_MIN_HEAVY_CELLS {
            // Checked before the scan below: most cells are of circuits that stay light.
            return;
        }
        // The average over the light connection's circuits that carry traffic (at least
        // TORCHESTRA_MIN_HEAVY_CELLS recently): idle circuits would dilute it, and a web
        // circuit's burst would then look heavy. The circuits and their counts are taken once
        // per scheduler run (a few ms; scanning them for every cell of a busy circuit cost
        // Torchestra half again vanilla's time); the circuit being judged counts with its
        // current value, so that a circuit alone on the light connection never outgrows
        // itself.
        if chan.multi().light_run != self.run_stamp {
            let circuits = &self.circuits;
            let Channel { mux, multi, .. } = &mut self.channels[ch as usize];
            let m = MultiConn::made(multi);
            m.light_counts.clear();
            m.light_counts.extend(mux.values(now).filter(|&(c, value)| {
                value >= transport::TORCHESTRA_MIN_HEAVY_CELLS
                    && circuits[c as usize]
                        .as_ref()
                        .is_some_and(|cc| cc.side_on_chan(ch).conn == light)
            }));
            m.light_counts.sort_unstable_by_key(|e| e.0);
            m.light_sum = m.light_counts.iter().map(|e| e.1).sum();
            m.light_run = self.run_stamp;
        }
        let m = self.channels[ch as usize].multi();
        let n = m.light_counts.len();
        if n == 0 {
            // No light circuit carries traffic: nothing to protect, the class stays.
            return;
        }
        let own = m.light_counts.binary_search_by_key(&circ, |e| e.0);
        let sum = m.light_sum + own.map_or(0.0, |i| ewma - m.light_counts[i].1);
        let light_average = sum / n as f64;
        let heavy_now = transport::torchestra_heavy(
            was_heavy,
            ewma,
            light_average,
            self.world.params.torchestra_threshold,
        );
        if heavy_now == was_heavy {
            return;
        }
        let side = self.circuits[circ as usize].as_mut().unwrap().side_for(ch);
        let circ_id = side.circ_id;
        let target = if heavy_now { heavy } else { light };
        self.pin_torchestra(circ, ch, circ_id, heavy_now, target);
        if heavy_now {
            self.channel_stats.switched_heavy += 1;
        } else {
            self.channel_stats.switched_light += 1;
        }
        let bytes = self.world.cell_wire_bytes();
        if self.write_conn(
            io,
            light,
            bytes,
            Wire::Switch {
                circ_id,
                heavy: heavy_now,
            },
        ) {
            self.flush_conn(io, light);
        }
    }
}

/// The write limit (`write_limit`) for a usable TCP connection on `socket`, from the socket's
/// send window, and the bytes the socket holds (unsent, and sent but unacknowledged).
fn socket_limit(params: &TorParams, io: &impl Io<RelayTimer>, socket: SocketId) -> (u64, u64) {
    let info = io.send_window(socket);
    let queued = info.map_or(0, |i| i.notsent + i.unacked as u64 * i.mss as u64);
    (write_limit(params, info.as_ref()), queued)
}

/// What the scheduler may write to a socket (or QUIC connection) in one run: KIST's limit
/// from its kernel facts, KIST-lite's output buffer, or for the old scheduler everything the
/// kernel takes; nothing to a socket that is gone.
fn write_limit(params: &TorParams, info: Option<&SendWindow>) -> u64 {
    match (params.scheduler, info) {
        (_, None) => 0,
        (SchedulerKind::Kist, Some(i)) => kist_write_limit(
            i.cwnd,
            i.unacked,
            i.mss,
            i.notsent,
            0,
            params.kist_sock_buf_size_factor,
        ),
        (SchedulerKind::KistLite, Some(_)) => kistlite_write_limit(params.outbuf_high_bytes, 0),
        // The old scheduler writes until the kernel refuses more.
        (SchedulerKind::Vanilla, Some(_)) => u64::MAX,
    }
}

/// Orders EWMA values (non-negative floats) as integers: for non-negative IEEE doubles the
/// bit patterns sort like the values.
fn ewma_key(value: f64) -> u64 {
    value.max(0.0).to_bits()
}
