//! The circuit scheduler: which queued cell goes next, on which connection, and how many may be
//! written now (KIST's per-connection limit, the write bucket, and where a channel has several
//! connections, the design's choice among them: see [`super::design`]).

use super::channels::HeldCells;
use super::runs::{RunState, SchedScratch};
use super::*;
use onionlab_net::tcp::SendWindow;
use onionlab_torcore::ewma::CellWeight;
use onionlab_torcore::TorParams;

/// Where [`Relay::requeue_unless_first`] left a channel.
pub(super) enum Requeued {
    /// No connection of the channel has room left in this run.
    NoRoom,
    /// Back in the heap.
    Queued,
    /// Not in the heap: it is the next to write, from this circuit (its quietest).
    First(CircuitId),
}

/// One scheduler run: what it reads for every cell, taken once at its start, and what it
/// spends as it goes.
pub(super) struct Run {
    pub(super) now: SimTime,
    /// The smallest cell on the wire: the write bucket is out of tokens below it.
    base_cell_bytes: u64,
    design: ChannelDesign,
    /// An exit circuit whose queue falls this low reads from its streams again.
    queue_low_cells: u64,
    /// What is left of the write bucket.
    allowance: u64,
    /// Every cell of the run is sent at `now`: one EWMA weight serves them all.
    pub(super) weight: CellWeight,
    /// Cells written and not yet handed to their socket (see `Relay::write_held`).
    pub(super) held: Option<HeldCells>,
}

/// A cell the run has found a connection for.
#[derive(Clone, Copy)]
struct CellToWrite {
    /// Its channel, circuit and connection.
    ch: ChannelId,
    circ: CircuitId,
    k: ConnId,
    /// Its size on the wire.
    bytes: u64,
    /// The channel runs on QUIC, whose connection's room the run counts down too.
    on_quic: bool,
    /// The channel's cells carry sequence numbers.
    sequenced: bool,
}

impl Relay {
    pub(super) fn mark_pending(&mut self, io: &mut impl Io<RelayTimer>, ch: ChannelId) {
        let chan = &mut self.table.channels[ch];
        if chan.pending || chan.mux.is_empty() {
            return;
        }
        chan.pending = true;
        self.now_pending(io, ch);
    }

    /// Channel `ch` has just been marked pending: it joins the next run's list, and the
    /// scheduler wakes or is armed for that run.
    pub(super) fn now_pending(&mut self, io: &mut impl Io<RelayTimer>, ch: ChannelId) {
        self.sched.pending.push(ch);
        self.wake_scheduler(io);
        self.arm_scheduler(io);
    }

    /// Arms the KIST scheduler like tor's `kist_scheduler_schedule` (see [`Scheduler::arm`]);
    /// the old scheduler has no timer.
    pub(super) fn arm_scheduler(&mut self, io: &mut impl Io<RelayTimer>) {
        if self.world.params.scheduler == SchedulerKind::Vanilla {
            return;
        }
        if let Some(at) = self.sched.arm(io.now()) {
            io.arm_leading_at(at, RelayTimer::Schedule);
        }
    }

    /// Wakes a parked scheduler: once a socket it waits on has moved so that a pending
    /// channel has room (`Machine::after_event`), and for what may give it room without
    /// moving such a socket (a channel that becomes pending, a connection added to a channel,
    /// a run outside the timer). Nothing if it is not parked.
    ///
    /// On web-6876, runs that wrote nothing were 76% of all scheduler runs (31.1 M of 40.7 M
    /// in the first 100 simulated seconds), each an event whose host state had mostly left
    /// the cache; a parked scheduler skips them ([`Scheduler::unpark`] counts them). The next
    /// run is a leading timer (`Io::arm_leading_at`), so it keeps its place among the relay's
    /// other events at its instant however late it is armed. Token buckets are refilled from
    /// the clock whenever they are read, so the skipped reads change nothing.
    pub(super) fn wake_scheduler(&mut self, io: &mut impl Io<RelayTimer>) {
        if !self.sched.is_parked() {
            return;
        }
        let now = io.now();
        let (next, sockets) = self.sched.unpark(now, || io.leading_timer_first());
        for socket in sockets {
            io.watch(socket, false);
        }
        io.arm_leading_at(next, RelayTimer::Schedule);
    }

    /// Puts a channel back in the scheduler's heap, keyed by its quietest circuit, if one of
    /// its connections may still take a cell in this run; false if none may.
    pub(super) fn requeue(
        &self,
        ch: ChannelId,
        weight: &CellWeight,
        heap: &mut BinaryHeap<Reverse<(u64, ChannelId)>>,
    ) -> bool {
        let chan = &self.table.channels[ch];
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
        ch: ChannelId,
        weight: &CellWeight,
        heap: &mut BinaryHeap<Reverse<(u64, ChannelId)>>,
    ) -> Requeued {
        let chan = &self.table.channels[ch];
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
    pub(super) fn count_room(&mut self, ch: ChannelId, cell_bytes: u64) {
        let chan = &mut self.table.channels[ch];
        let conns = &self.table.conns;
        chan.room = chan
            .conns
            .iter()
            .filter(|&&k| conns[k].has_room(cell_bytes))
            .count() as u32;
    }

    /// Reads connection `k`'s write limit (KIST's, from its socket) and queue for this
    /// scheduler run, unless this run already did.
    pub(super) fn refresh_limit(&mut self, io: &impl Io<RelayTimer>, k: ConnId) {
        let stamp = self.sched.stamp();
        refresh_conn_limit(&self.world.params, stamp, io, &mut self.table.conns[k]);
    }

    /// Whether a connection of a pending channel has room for a cell now: what the parked
    /// scheduler's next run would find first (as `start_run` reads it). No scheduler parks
    /// while a pending channel holds several connections whose room a run finds only as it
    /// tries them (IMUX), so each is a TCP socket, or a QUIC stream whose room is its
    /// connection's.
    pub(super) fn parked_room(&self, io: &impl Io<RelayTimer>) -> bool {
        let params = &self.world.params;
        let reads_every_limit = with_design!(self.design, D => D::reads_every_limit(self));
        self.sched.pending.iter().any(|&ch| {
            let chan = &self.table.channels[ch];
            let cell_bytes = self.chan_cell_bytes(ch);
            if chan.mux.is_empty() {
                return false;
            }
            let conns = &self.table.conns;
            match chan.carrier {
                Carrier::Quic => {
                    // A run reads several streams' room only as it tries them (all of it
                    // while their connection's limit lasts), one stream's at once.
                    self.quic_limit_now(io, ch) >= cell_bytes
                        && (chan.reads_room_lazily(reads_every_limit)
                            || chan.conns.iter().any(|&k| conns[k].usable()))
                }
                _ => chan.conns.iter().any(|&k| {
                    let conn = &conns[k];
                    conn.usable() && socket_limit(params, io, conn.socket).0 >= cell_bytes
                }),
            }
        })
    }
    /// Whether connection `k` (if any, and if it is still open) may take a cell of
    /// `cell_bytes` in this run, reading its write limit first: `Some(k)` if it may.
    pub(super) fn try_conn(
        &mut self,
        io: &impl Io<RelayTimer>,
        k: Option<ConnId>,
        cell_bytes: u64,
    ) -> Option<ConnId> {
        let (k, stamp) = (k?, self.sched.stamp());
        let conn = self.table.conns.get_mut(k)?;
        refresh_conn_limit(&self.world.params, stamp, io, conn);
        conn.has_room(cell_bytes).then_some(k)
    }

    /// Moves queued cells into connection sockets: globally across channels, quietest
    /// circuit first, within each socket's write limit and the write bucket.
    ///
    /// A run takes the pending channels and reads their connections' room
    /// ([`start_run`](Self::start_run)), writes cells until no channel may send more
    /// ([`write_cells`](Self::write_cells)), then flushes what it wrote and decides when the
    /// next run comes ([`end_run`](Self::end_run)).
    pub(super) fn run_scheduler(&mut self, io: &mut impl Io<RelayTimer>) {
        // A run outside the timer's (a token refill's): the parked runs before it come first.
        self.wake_scheduler(io);
        let now = io.now();
        self.sched.begin_run(now);
        let mut run = Run {
            now,
            base_cell_bytes: self.world.cell_wire_bytes(),
            design: self.design,
            queue_low_cells: self.world.params.circuit_queue_low_cells as u64,
            allowance: self.buckets.write_allowance(now, true),
            weight: self.clock.cell_weight(now),
            held: None,
        };
        // The run's working lists live in the relay between runs, so that a run (one per few
        // cells on a quiet relay) allocates nothing.
        let mut scratch = std::mem::take(&mut self.sched.scratch);
        let any_room = self.start_run(io, &run, &mut scratch);
        self.write_cells(io, &mut run, &mut scratch);
        self.end_run(io, &run, any_room, scratch);
    }

    /// Takes the pending channels into the run: reads their connections' write limits, puts
    /// each channel with room in the heap and the others aside for a later run. Returns
    /// whether any had room: if none had, the run writes nothing, and the runs after it find
    /// the same until something reaches the relay.
    fn start_run(
        &mut self,
        io: &mut impl Io<RelayTimer>,
        run: &Run,
        scratch: &mut SchedScratch,
    ) -> bool {
        let reads_every_limit = with_design!(run.design, D => D::reads_every_limit(self));
        let SchedScratch {
            heap,
            deferred,
            pending,
            ..
        } = scratch;
        std::mem::swap(&mut self.sched.pending, pending);
        let mut any_room = false;
        for ch in pending.drain(..) {
            let chan = &mut self.table.channels[ch];
            chan.pending = false;
            if chan.mux.is_empty() {
                continue;
            }
            let cell_bytes = self.chan_cell_bytes(ch);
            if self.table.channels[ch].carrier == Carrier::Quic {
                self.refresh_quic_limit(io, ch);
            }
            let lazy = self.table.channels[ch].reads_room_lazily(reads_every_limit);
            if lazy {
                // Limits are read as connections are tried; running out of room shows as
                // the channel's circuits parking one by one.
                self.table.channels[ch].room = u32::MAX;
                with_design!(run.design, D => D::rank(self, ch, run.now));
            } else {
                for i in 0..self.table.channels[ch].conns.len() {
                    let k = self.table.channels[ch].conns[i];
                    self.refresh_limit(io, k);
                }
                self.count_room(ch, cell_bytes);
                with_design!(run.design, D => D::rank(self, ch, run.now));
            }
            let chan = &mut self.table.channels[ch];
            if chan.carrier == Carrier::Quic && chan.quic_limit < cell_bytes {
                // Its QUIC connection takes nothing more in this run, on any stream.
                chan.room = 0;
            }
            if self.requeue(ch, &run.weight, heap) {
                any_room = true;
            } else {
                deferred.push(ch);
            }
        }
        any_room
    }

    /// Writes cells one at a time, each from the channel whose quietest circuit is the
    /// quietest, until no channel may send more in this run: its connections are full, the
    /// write bucket is empty, or it has nothing left.
    fn write_cells(
        &mut self,
        io: &mut impl Io<RelayTimer>,
        run: &mut Run,
        scratch: &mut SchedScratch,
    ) {
        // The channel that stays first after writing a cell, taken next without the heap.
        let mut first = None;
        loop {
            let (ch, best) = match first.take() {
                Some((ch, circ)) => (ch, Some(circ)),
                None => match scratch.heap.pop() {
                    Some(Reverse((_, ch))) => (ch, None),
                    None => break,
                },
            };
            let chan = &self.table.channels[ch];
            let cell_bytes = self.cell_bytes_on(chan);
            let (on_quic, sequenced) = (chan.carrier == Carrier::Quic, chan.sequenced);
            let quic_full = on_quic && chan.quic_limit < cell_bytes;
            if run.allowance < cell_bytes {
                scratch.deferred.push(ch);
                continue;
            }
            if quic_full {
                // The QUIC connection has taken what KIST lets it have in this run.
                self.meter.write_limit_hits += 1;
                scratch.deferred.push(ch);
                continue;
            }
            let best = best.or_else(|| self.table.channels[ch].mux.best(run.now));
            let Some(circ) = best else {
                continue;
            };
            let Some(k) = self.conn_for_cell(io, run, ch, circ, cell_bytes, scratch) else {
                continue;
            };
            let cell = CellToWrite {
                ch,
                circ,
                k,
                bytes: cell_bytes,
                on_quic,
                sequenced,
            };
            if !self.write_cell(io, run, cell, scratch) {
                continue;
            }
            if !self.table.channels[ch].mux.is_empty() {
                match self.requeue_unless_first(ch, &run.weight, &mut scratch.heap) {
                    Requeued::NoRoom => {
                        self.meter.write_limit_hits += 1;
                        scratch.deferred.push(ch);
                    }
                    Requeued::First(circ) => first = Some((ch, circ)),
                    Requeued::Queued => {}
                }
            }
        }
        Self::release(&self.table.conns, &mut self.work, io, &mut run.held);
    }

    /// The connection the next cell of `circ` goes on in this run. `None` if the circuit has
    /// nothing queued or its connection is full: it then waits for a later run (parked, if
    /// it has cells) while the channel's other circuits go on.
    fn conn_for_cell(
        &mut self,
        io: &mut impl Io<RelayTimer>,
        run: &Run,
        ch: ChannelId,
        circ: CircuitId,
        cell_bytes: u64,
        scratch: &mut SchedScratch,
    ) -> Option<ConnId> {
        let side = self.circuits[circ].side_on_chan(ch);
        let (empty, pinned) = (side.queue.is_empty(), side.conn);
        let chosen = if empty {
            None
        } else {
            with_design!(self.design, D => D::pick_conn(self, io, ch, circ, pinned, cell_bytes))
        };
        if chosen.is_none() {
            let chan = &mut self.table.channels[ch];
            chan.mux.remove(circ);
            if !empty {
                chan.parked.push(circ);
                if chan.parked.len() == 1 {
                    scratch.parked.push(ch);
                }
            }
            if !chan.mux.is_empty() && !self.requeue(ch, &run.weight, &mut scratch.heap) {
                scratch.deferred.push(ch);
            }
        }
        chosen
    }

    /// Writes the first queued cell of `cell.circ` to connection `cell.k`, and counts it
    /// everywhere it counts. False if the socket refused it: the cell goes back to the head
    /// of its queue, and the channel back to the heap if another connection has room.
    fn write_cell(
        &mut self,
        io: &mut impl Io<RelayTimer>,
        run: &mut Run,
        cell: CellToWrite,
        scratch: &mut SchedScratch,
    ) -> bool {
        let CellToWrite {
            ch,
            circ,
            k,
            bytes: cell_bytes,
            on_quic,
            sequenced,
        } = cell;
        let c = &mut self.circuits[circ];
        let side = c.side_for(ch);
        let cell = side.queue.pop_front().unwrap();
        let message = if sequenced {
            Wire::Sequenced {
                cell,
                seq: side.seq_out,
            }
        } else {
            Wire::Cell(cell)
        };
        if !Self::write_held(
            &mut self.table.conns,
            &mut self.unsent_watch,
            &mut self.work,
            io,
            &mut run.held,
            k,
            cell_bytes,
            message,
        ) {
            side.queue.push_front(cell);
            self.update_conn(k, |c| c.blocked = true);
            // It had room (it was chosen for it); now it has none.
            self.table.channels[ch].room -= 1;
            if !self.requeue(ch, &run.weight, &mut scratch.heap) {
                scratch.deferred.push(ch);
            }
            return false;
        }
        side.seq_out += 1;
        let conn = &mut self.table.conns[k];
        conn.limit -= cell_bytes;
        let full = conn.limit < cell_bytes;
        conn.queued_bytes += cell_bytes;
        conn.last_used = run.now;
        if !conn.touched {
            conn.touched = true;
            scratch.touched.push(k);
        }
        let emptied = side.queue.is_empty();
        let own = side.queue.len() as u64 + 1;
        if let Some(exit) = c.exit.as_mut() {
            if exit.edge_blocked && own - 1 <= run.queue_low_cells {
                exit.edge_blocked = false;
                scratch.unblocked.push(circ);
            }
        }
        let chan = &mut self.table.channels[ch];
        if on_quic {
            chan.quic_limit -= cell_bytes;
        }
        if full {
            chan.room -= 1;
        }
        c.stats.cells += 1;
        c.stats.overtaken += chan.queued - own;
        chan.queued -= 1;
        self.circuits.cell_left();
        run.allowance -= cell_bytes;
        self.buckets.note_written(cell_bytes, true);
        self.meter.second.cells_out += 1;
        self.meter.channels.cells_written += 1;
        self.meter.second.bytes_written += cell_bytes;
        chan.mux.note_sent_weighted(circ, 1, run.weight);
        if emptied {
            chan.mux.remove(circ);
        }
        with_design!(run.design, D => D::cell_written(self, io, run, ch, circ, k));
        true
    }

    /// Ends a run: flushes the connections it wrote, gives parked circuits back to their
    /// channels, lets exit circuits whose queues fell low read from their streams again,
    /// and puts the channels with cells left back on the work list. If there are some, the
    /// next run is armed, or the scheduler parks (see [`Scheduler::park`]) where the runs it
    /// would skip are sure to find what this one found.
    fn end_run(
        &mut self,
        io: &mut impl Io<RelayTimer>,
        run: &Run,
        any_room: bool,
        mut scratch: SchedScratch,
    ) {
        let kist_timer = self.world.params.scheduler != SchedulerKind::Vanilla;
        #[cfg(feature = "audit")]
        if self.world.params.scheduler == SchedulerKind::Kist && self.meter.kist_audit.is_some() {
            self.audit_kist(io, &scratch.touched);
        }
        for &k in scratch.touched.iter() {
            self.table.conns[k].touched = false;
            self.flush_conn(io, k);
        }
        scratch.touched.clear();
        for ch in scratch.parked.drain(..) {
            let chan = &mut self.table.channels[ch];
            for circ in std::mem::take(&mut chan.parked) {
                chan.mux.add_active(circ);
            }
            scratch.deferred.push(ch);
        }
        for circ in scratch.unblocked.drain(..) {
            self.package(io, circ);
        }
        let out_of_tokens = run.allowance < run.base_cell_bytes;
        for ch in scratch.deferred.drain(..) {
            let chan = &mut self.table.channels[ch];
            if !chan.pending && !chan.mux.is_empty() {
                chan.pending = true;
                self.sched.pending.push(ch);
            }
        }
        self.sched.scratch = scratch;
        if self.sched.pending.is_empty() {
            return;
        }
        if out_of_tokens {
            self.arm_refill(io);
        }
        // Parked only where the runs it skips are sure to find what this one found: not
        // while tokens are short (their refill is an event, and may come at the instant of
        // a run), nor with a CPU model (which may hold a run back), nor where the design
        // says not (`Design::MAY_PARK`); nor with a run already armed.
        let park = !any_room
            && !out_of_tokens
            && self.sched.state() == RunState::Idle
            && kist_timer
            && with_design!(run.design, D => D::MAY_PARK)
            && !io.models_cpu();
        if park {
            let (channels, conns) = (&self.table.channels, &self.table.conns);
            let sockets = self.sched.park(|ch, sockets| {
                let chan = &channels[ch];
                match (chan.carrier, chan.quic) {
                    // Its streams' room is the connection's.
                    (Carrier::Quic, Some(q)) => sockets.push(q),
                    _ => sockets.extend(chan.conns.iter().map(|&k| conns[k].socket)),
                }
            });
            for &socket in sockets {
                io.watch(socket, true);
            }
            // Whatever moved before now was seen by this run.
            io.take_watch_hit();
        } else {
            self.arm_scheduler(io);
        }
    }

    #[cfg(feature = "audit")]
    /// Checks KIST's limits as the sockets written in this run see them: no socket holds
    /// more unsent than its free congestion window plus KIST's extra space (tests read the
    /// audit, `RelayMeter::kist_audit`).
    fn audit_kist(&mut self, io: &impl Io<RelayTimer>, touched: &[ConnId]) {
        let Some(audit) = self.meter.kist_audit.as_mut() else {
            return;
        };
        let sock_buf_size_factor = self.world.params.kist_sock_buf_size_factor;
        // Sockets only: a QUIC stream's limit is its connection's (see `quic_limit`).
        for &k in touched.iter().filter(|&&k| !self.table.conns[k].stream) {
            let socket = self.table.conns[k].socket;
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
}

/// Reads `conn`'s write limit (KIST's, from its socket) and queue for the scheduler run
/// stamped `stamp`, unless that run already did.
fn refresh_conn_limit(params: &TorParams, stamp: u32, io: &impl Io<RelayTimer>, conn: &mut Conn) {
    if conn.limit_run == stamp {
        return;
    }
    conn.limit_run = stamp;
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
pub(super) fn write_limit(params: &TorParams, info: Option<&SendWindow>) -> u64 {
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
