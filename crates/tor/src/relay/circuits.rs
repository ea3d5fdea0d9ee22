//! The circuit table and switching: the circuits through this relay, each a side towards
//! the client and (except at the last hop) a side towards the exit, and where a cell that
//! arrives on one goes.
//!
//! [`CircuitTable`] keeps the circuits and the cells on their queues. A circuit answers the
//! switching question for a relayed cell ([`Circuit::switch`]): on to the next hop, back to
//! the previous one, or for this hop. The relay's half of this file does what follows from the
//! answer: CREATE2 makes a circuit (its onion skin priced by the CPU model), EXTEND2 gives it
//! a side on a channel to the next relay, a queued cell makes its channel pending for the
//! scheduler, and DESTROY (or a full queue, or a failed extend) tears it down and tells the
//! sides it did not come from.
//!
//! A circuit is found from a cell by its channel's id map (`ChannelCircuits`, in the channel),
//! which names the circuit by its [`CircuitId`] in this table.

use std::cmp::Reverse;

use onionlab_engine::slab::Slab;
use onionlab_engine::HostId;
use onionlab_torcore::{Cell, CellCommand, CellQueue, RelayCommand};

use super::design::{with_design, Design};
use super::{
    ChannelId, CircuitId, ConnId, ConnState, ExitCircuit, Relay, RelayTimer, StreamEnd,
    DESTROY_CONNECT_FAILED,
};
use crate::io::Io;
use crate::wire::Wire;

/// The circuits through a relay, and the cells on their queues.
pub(super) struct CircuitTable {
    circuits: Slab<CircuitId, Circuit>,
    /// Cells on every circuit's queues, both sides.
    queued: u64,
}

impl CircuitTable {
    pub(super) fn new() -> Self {
        CircuitTable {
            circuits: Slab::new(),
            queued: 0,
        }
    }

    pub(super) fn insert(&mut self, circuit: Circuit) -> CircuitId {
        self.circuits.insert(circuit)
    }

    /// Takes a circuit out of the table, with whatever its queues still hold (no longer
    /// counted as queued).
    pub(super) fn remove(&mut self, circ: CircuitId) -> Option<Circuit> {
        let c = self.circuits.remove(circ)?;
        self.queued -= c.prev.queue.len() as u64;
        if let Some(next) = &c.next {
            self.queued -= next.queue.len() as u64;
        }
        Some(c)
    }

    #[inline]
    pub(super) fn get(&self, circ: CircuitId) -> Option<&Circuit> {
        self.circuits.get(circ)
    }

    #[inline]
    pub(super) fn get_mut(&mut self, circ: CircuitId) -> Option<&mut Circuit> {
        self.circuits.get_mut(circ)
    }

    #[inline]
    pub(super) fn contains(&self, circ: CircuitId) -> bool {
        self.circuits.contains(circ)
    }

    pub(super) fn len(&self) -> usize {
        self.circuits.len()
    }

    pub(super) fn values(&self) -> impl Iterator<Item = &Circuit> {
        self.circuits.values()
    }

    /// Cells on all the circuits' queues.
    pub(super) fn queued_cells(&self) -> u64 {
        self.queued
    }

    /// Queues `count` copies of `cell` on `circ` towards the exit (`forward`) or the client,
    /// under the circuit's id on that side, and returns the channel they wait for. `None`,
    /// queueing nothing, if they would take the queue past `cap` cells.
    #[inline]
    pub(super) fn push(
        &mut self,
        circ: CircuitId,
        forward: bool,
        mut cell: Cell,
        count: u32,
        cap: u32,
    ) -> Option<ChannelId> {
        let c = &mut self.circuits[circ];
        let side = if forward {
            c.next
                .as_mut()
                .expect("a cell forwarded on a circuit with a next hop")
        } else {
            &mut c.prev
        };
        if side.queue.len() + count as usize > cap as usize {
            return None;
        }
        cell.circ_id = side.circ_id;
        side.queue.push_run(cell, count);
        c.stats.max_queue = c.stats.max_queue.max(side.queue.len() as u32);
        self.queued += u64::from(count);
        Some(side.chan)
    }

    /// One cell left a queue for its channel: the scheduler takes it off the side's queue
    /// itself, since the socket may refuse it and it then goes back.
    #[inline]
    pub(super) fn cell_left(&mut self) {
        self.queued -= 1;
    }
}

impl std::ops::Index<CircuitId> for CircuitTable {
    type Output = Circuit;

    #[inline]
    fn index(&self, circ: CircuitId) -> &Circuit {
        &self.circuits[circ]
    }
}

impl std::ops::IndexMut<CircuitId> for CircuitTable {
    #[inline]
    fn index_mut(&mut self, circ: CircuitId) -> &mut Circuit {
        &mut self.circuits[circ]
    }
}

/// Where a RELAY cell goes from the circuit it arrived on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Switch {
    /// It came from the client for a later hop: on towards the exit.
    Forward,
    /// It came from the exit's side: back towards the client, a layer of crypto added.
    Backward,
    /// It came from the client for this hop.
    ForUs,
    /// It came from the client for a hop beyond the circuit's last: dropped.
    Beyond,
}

/// One direction of a circuit: the channel it leaves on, its id there, and its queue.
pub(super) struct Side {
    /// The channel to the neighbour on this side.
    pub(super) chan: ChannelId,
    /// The connection its cells go on, where the design pins circuits to one (`None` where
    /// each cell's connection is chosen as it is written, or where its connection went).
    /// A live connection's `circuits` counts the sides pinned to it.
    pub(super) conn: Option<ConnId>,
    /// The circuit's id on that channel (every cell sent on this side carries it).
    pub(super) circ_id: u32,
    /// Cells waiting for the scheduler to write them to the channel.
    pub(super) queue: CellQueue,
    /// Sequence number of the next cell sent on this side (multi-connection channels).
    pub(super) seq_out: u32,
    /// Sequence number of the next cell expected from the peer on this side.
    pub(super) seq_in: u32,
    /// Torchestra: the circuit travels on the heavy connection.
    pub(super) heavy: bool,
}

impl Side {
    /// A side on channel `chan` under id `circ_id`, expecting sequence number `seq_in` first.
    pub(super) fn new(chan: ChannelId, circ_id: u32, seq_in: u32) -> Self {
        Side {
            chan,
            conn: None,
            circ_id,
            queue: CellQueue::new(),
            seq_out: 0,
            seq_in,
            heavy: false,
        }
    }
}

/// How a circuit's cells fared in this relay's queues.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueueStats {
    /// Cells written to a channel.
    pub cells: u64,
    /// The longest the circuit's own queue got.
    pub max_queue: u32,
    /// Summed over the cells written: the cells other circuits had queued for the same
    /// channel at that moment (cells that this circuit's cells overtook).
    pub overtaken: u64,
}

impl QueueStats {
    /// Cells of other circuits waiting when one of this circuit's cells left, on average.
    pub fn mean_overtaken(&self) -> f64 {
        self.overtaken as f64 / self.cells.max(1) as f64
    }
}

/// A circuit through this relay.
pub(super) struct Circuit {
    /// Towards the client.
    pub(super) prev: Side,
    /// Towards the exit; `None` at the last hop.
    pub(super) next: Option<Side>,
    /// This relay's position (1 = guard).
    pub(super) hop: u8,
    /// Torchestra ideal: the client declared the circuit bulk.
    pub(super) declared_heavy: bool,
    /// At the last hop, what it keeps for the circuit's streams (`exit.rs`).
    pub(super) exit: Option<Box<ExitCircuit>>,
    /// How its cells fared in this relay's queues.
    pub(super) stats: QueueStats,
}

impl Circuit {
    /// Whether a cell on channel `ch` under id `circ_id` came from the client's side. A
    /// circuit may leave on one channel both ways (a peer that extends back through us),
    /// so the id decides as well as the channel.
    #[inline]
    pub(super) fn came_from_prev(&self, ch: ChannelId, circ_id: u32) -> bool {
        self.prev.chan == ch && self.prev.circ_id == circ_id
    }

    /// Where a RELAY cell for hop `hop` goes, having come from the client's side or not.
    #[inline]
    pub(super) fn switch(&self, from_prev: bool, hop: u8) -> Switch {
        if !from_prev {
            Switch::Backward
        } else if hop == self.hop {
            Switch::ForUs
        } else if self.next.is_some() {
            Switch::Forward
        } else {
            Switch::Beyond
        }
    }

    /// The side on channel `ch` under id `circ_id`, if either is.
    pub(super) fn side_on(&mut self, ch: ChannelId, circ_id: u32) -> Option<&mut Side> {
        if self.came_from_prev(ch, circ_id) {
            return Some(&mut self.prev);
        }
        self.next
            .as_mut()
            .filter(|n| n.chan == ch && n.circ_id == circ_id)
    }

    /// The side that leaves on channel `ch` (prev first: a circuit may use one channel for
    /// both sides only if a peer extends back through us, and then prev is the older).
    pub(super) fn side_for(&mut self, ch: ChannelId) -> &mut Side {
        if self.prev.chan == ch {
            &mut self.prev
        } else {
            self.next
                .as_mut()
                .expect("a circuit queued on a channel has a side there")
        }
    }

    /// As [`Circuit::side_for`], to read.
    pub(super) fn side_on_chan(&self, ch: ChannelId) -> &Side {
        if self.prev.chan == ch {
            &self.prev
        } else {
            self.next.as_ref().unwrap_or(&self.prev)
        }
    }
}

/// One direction of a circuit as tests see it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CircuitView {
    /// Cells this relay sent on the circuit (both directions).
    pub cells: u64,
    /// Torchestra: a direction of it travels on a heavy connection.
    pub heavy: bool,
    /// The client declared it bulk (idealised Torchestra).
    pub declared_heavy: bool,
}

impl Relay {
    /// A cell that arrived on connection `k` of channel `ch`: a CREATE2 makes a circuit;
    /// any other finds its circuit by id and goes where the circuit sends it.
    pub(super) fn handle_cell(
        &mut self,
        io: &mut impl Io<RelayTimer>,
        ch: ChannelId,
        k: ConnId,
        cell: Cell,
    ) {
        if cell.command == CellCommand::Create2 {
            self.on_create(io, ch, k, cell);
            return;
        }
        let Some(circ) = self.table.channels[ch].circs.lookup(cell.circ_id) else {
            return;
        };
        let c = &self.circuits[circ];
        let from_prev = c.came_from_prev(ch, cell.circ_id);
        match cell.command {
            CellCommand::Destroy => self.destroy_circuit(io, circ, Some(from_prev)),
            CellCommand::Created2 if !from_prev => {
                // Our EXTEND2 succeeded: tell the client.
                let reply = Cell::relay(0, RelayCommand::Extended2, c.hop, 0);
                self.work.originate();
                self.queue_towards(io, circ, false, reply);
            }
            CellCommand::Relay | CellCommand::RelayEarly => {
                let switch = c.switch(from_prev, cell.hop);
                // One layer off (towards the exit) or on (towards the client); the hop a cell
                // is for also checks its digest.
                self.work.relay_crypt(switch == Switch::ForUs);
                match switch {
                    Switch::ForUs => self.relay_cell_for_us(io, circ, cell),
                    Switch::Forward => self.queue_towards(io, circ, true, cell),
                    Switch::Backward => self.queue_towards(io, circ, false, cell),
                    Switch::Beyond => {}
                }
            }
            _ => {}
        }
    }

    fn on_create(&mut self, io: &mut impl Io<RelayTimer>, ch: ChannelId, k: ConnId, cell: Cell) {
        let seq_in = u32::from(self.sequenced());
        let circ = self.circuits.insert(Circuit {
            prev: Side::new(ch, cell.circ_id, seq_in),
            next: None,
            hop: cell.hop.max(1),
            declared_heavy: with_design!(self.design, D => D::HONOURS_DECLARED_BULK)
                && cell.arg == 1,
            exit: None,
            stats: QueueStats::default(),
        });
        if !self.table.channels[ch]
            .circs
            .bind_theirs(cell.circ_id, circ)
        {
            // The id is taken: a confused peer. Refuse.
            self.circuits.remove(circ);
            return;
        }
        self.assign_conn(circ, false, Some(k));
        let done = io.onion_skin();
        if done > io.now() {
            // A worker thread answers it; the CREATED2 waits for that.
            self.onion_skins.push(Reverse((done, circ, ch)));
            io.arm_at(done, RelayTimer::OnionSkin);
            return;
        }
        let reply = Cell::new(0, CellCommand::Created2);
        self.queue_towards(io, circ, false, reply);
    }

    /// Answers the CREATE2 cells whose onion skins the workers have finished.
    pub(super) fn onion_skins_done(&mut self, io: &mut impl Io<RelayTimer>) {
        let now = io.now();
        while let Some(&Reverse((done, circ, _))) = self.onion_skins.peek() {
            if done > now {
                break;
            }
            self.onion_skins.pop();
            // A circuit destroyed meanwhile is gone (its id finds no later circuit).
            if self.circuits.contains(circ) {
                let reply = Cell::new(0, CellCommand::Created2);
                self.queue_towards(io, circ, false, reply);
            }
        }
    }

    fn relay_cell_for_us(&mut self, io: &mut impl Io<RelayTimer>, circ: CircuitId, cell: Cell) {
        match cell.relay {
            RelayCommand::Extend2 => self.extend(io, circ, cell.arg as HostId),
            RelayCommand::Begin => self.begin(io, circ, cell),
            RelayCommand::BeginDir => self.begin_dir(io, circ, cell),
            RelayCommand::Data => self.exit_data(io, circ, cell),
            RelayCommand::Sendme => self.exit_sendme(io, circ, cell),
            RelayCommand::End => {
                if let Some(st) = self.find_stream(circ, cell.stream_id) {
                    self.end_stream(io, st, false);
                }
            }
            RelayCommand::Xoff | RelayCommand::Xon => {
                if let Some(st) = self.find_stream(circ, cell.stream_id) {
                    let s = self.streams.get_mut(st).unwrap();
                    s.sender.set_xoff(cell.relay == RelayCommand::Xoff);
                    if cell.relay == RelayCommand::Xon {
                        self.package(io, circ);
                    }
                }
            }
            _ => {}
        }
    }

    fn extend(&mut self, io: &mut impl Io<RelayTimer>, circ: CircuitId, target: HostId) {
        if self.circuits[circ].next.is_some() {
            return;
        }
        let Some(ch) = self.channel_to(io, target) else {
            self.destroy_circuit_because(io, circ, None, DESTROY_CONNECT_FAILED);
            return;
        };
        let Ok(arrived_on) = with_design!(self.design, D => D::circuit_conn(self, io, ch)) else {
            self.destroy_circuit_because(io, circ, None, DESTROY_CONNECT_FAILED);
            return;
        };
        let circ_id = self.table.channels[ch].circs.allocate(circ);
        let c = &mut self.circuits[circ];
        c.next = Some(Side::new(ch, circ_id, 0));
        let mut create = Cell::new(0, CellCommand::Create2);
        create.hop = c.hop + 1;
        create.arg = u32::from(c.declared_heavy);
        self.assign_conn(circ, true, arrived_on);
        self.queue_towards(io, circ, true, create);
    }

    /// Puts a cell on a circuit's queue towards the exit (`forward`) or the client. A cell
    /// that finds the queue full kills the circuit, as tor's limit on a circuit's queue does.
    pub(super) fn queue_towards(
        &mut self,
        io: &mut impl Io<RelayTimer>,
        circ: CircuitId,
        forward: bool,
        cell: Cell,
    ) {
        let cap = self.world.params.max_circuit_queue_cells;
        let Some(ch) = self.circuits.push(circ, forward, cell, 1, cap) else {
            self.meter.second.circuits_killed += 1;
            self.destroy_circuit(io, circ, None);
            return;
        };
        self.cells_queued(io, circ, ch, 1);
    }

    /// `count` cells of `circ` were just queued for channel `ch`: the channel counts them,
    /// the circuit is active in its mux, and the channel is pending for the scheduler.
    pub(super) fn cells_queued(
        &mut self,
        io: &mut impl Io<RelayTimer>,
        circ: CircuitId,
        ch: ChannelId,
        count: u32,
    ) {
        let chan = &mut self.table.channels[ch];
        chan.queued += u64::from(count);
        chan.mux.add_active(circ);
        // `mark_pending` with the channel at hand (its queue is not empty now).
        if !chan.pending {
            chan.pending = true;
            self.now_pending(io, ch);
        }
    }

    pub(super) fn destroy_circuit(
        &mut self,
        io: &mut impl Io<RelayTimer>,
        circ: CircuitId,
        came_from_prev: Option<bool>,
    ) {
        self.destroy_circuit_because(io, circ, came_from_prev, 0);
    }

    /// Tears a circuit down, telling the sides it did not come from with DESTROY cells that
    /// give `reason` (tor's END_CIRC_REASON number; 0 = none).
    pub(super) fn destroy_circuit_because(
        &mut self,
        io: &mut impl Io<RelayTimer>,
        circ: CircuitId,
        came_from_prev: Option<bool>,
        reason: u32,
    ) {
        let Some(c) = self.circuits.remove(circ) else {
            return;
        };
        let prev = Some((c.prev, came_from_prev != Some(true)));
        let next = c.next.map(|next| (next, came_from_prev != Some(false)));
        let cell_bytes = self.world.cell_wire_bytes();
        for (side, notify) in [prev, next].into_iter().flatten() {
            let chan = &mut self.table.channels[side.chan];
            chan.queued -= side.queue.len() as u64;
            chan.mux.detach(circ);
            chan.parked.retain(|&x| x != circ);
            chan.release(side.circ_id);
            // The connection the DESTROY goes on: the circuit's own, else any usable one.
            let own = side.conn.filter(|k| chan.conns.contains(k));
            let conn = own.or_else(|| {
                chan.conns
                    .iter()
                    .copied()
                    .find(|&k| self.table.conns[k].state == ConnState::Active)
            });
            if let Some(k) = own {
                let pinned = &mut self.table.conns[k].circuits;
                *pinned = pinned.saturating_sub(1);
            }
            let sequenced_chan = chan.sequenced;
            let conn = conn.filter(|&k| notify && self.table.conns[k].carries_cells());
            if let Some(conn) = conn {
                let mut destroy = Cell::new(side.circ_id, CellCommand::Destroy);
                destroy.arg = reason;
                let message = if sequenced_chan {
                    Wire::Sequenced {
                        cell: destroy,
                        seq: side.seq_out,
                    }
                } else {
                    Wire::Cell(destroy)
                };
                if self.write_conn(io, conn, cell_bytes, message) {
                    self.flush_conn(io, conn);
                }
            }
            // Where the connection was the circuit's own (PCTCP, QUIC), it goes too.
            let own = side
                .conn
                .filter(|k| self.table.channels[side.chan].conns.contains(k));
            if let Some(k) = own {
                let ch = side.chan;
                with_design!(self.design, D => D::circuit_left(self, io, ch, k));
            }
        }
        if let Some(exit) = c.exit {
            for st in exit.streams {
                if let Some(s) = self.streams.remove(st) {
                    if let StreamEnd::Server(socket) = s.end {
                        io.abort(socket);
                        self.open_sockets -= 1;
                    }
                }
            }
        }
    }

    /// The circuits open here.
    pub fn circuit_views(&self) -> Vec<CircuitView> {
        self.circuits
            .values()
            .map(|c| CircuitView {
                cells: c.stats.cells,
                heavy: c.prev.heavy || c.next.as_ref().is_some_and(|n| n.heavy),
                declared_heavy: c.declared_heavy,
            })
            .collect()
    }

    /// Cells queued in all circuit queues (for tests and samples).
    pub fn queued_cells(&self) -> u64 {
        self.circuits.queued_cells()
    }

    /// Queue statistics of the circuits open here.
    pub fn circuit_queue_stats(&self) -> Vec<QueueStats> {
        self.circuits.values().map(|c| c.stats).collect()
    }
}

#[cfg(test)]
mod tests {
    use onionlab_engine::slab::Key;

    use super::*;

    fn chan(slot: u32) -> ChannelId {
        ChannelId::from_parts(slot, 1)
    }

    /// A circuit at hop `hop` that came in on channel 1 under id 7, and (if `next`) leaves
    /// on channel 2 under id 9.
    fn circuit(hop: u8, next: bool) -> Circuit {
        Circuit {
            prev: Side::new(chan(1), 7, 0),
            next: next.then(|| Side::new(chan(2), 9, 0)),
            hop,
            declared_heavy: false,
            exit: None,
            stats: QueueStats::default(),
        }
    }

    #[test]
    fn relay_cells_go_on_back_or_stop_here_by_the_side_they_came_from_and_their_hop() {
        let middle = circuit(2, true);
        assert!(middle.came_from_prev(chan(1), 7));
        assert!(!middle.came_from_prev(chan(2), 9));
        assert_eq!(middle.switch(true, 3), Switch::Forward);
        assert_eq!(middle.switch(true, 2), Switch::ForUs);
        assert_eq!(middle.switch(false, 2), Switch::Backward);
        let last = circuit(3, false);
        assert_eq!(last.switch(true, 3), Switch::ForUs);
        assert_eq!(last.switch(true, 4), Switch::Beyond);
    }

    #[test]
    fn a_circuit_that_leaves_both_ways_on_one_channel_is_told_apart_by_its_ids() {
        // A peer that extends back through us: both sides on channel 1.
        let mut c = circuit(2, true);
        c.next = Some(Side::new(chan(1), 0x8000_0003, 0));
        assert!(c.came_from_prev(chan(1), 7));
        assert!(!c.came_from_prev(chan(1), 0x8000_0003));
        assert_eq!(c.side_on_chan(chan(1)).circ_id, 7, "prev, the older, first");
    }

    #[test]
    fn queued_cells_take_the_sides_id_and_are_counted_until_sent_or_destroyed() {
        let mut table = CircuitTable::new();
        let circ = table.insert(circuit(2, true));
        let data = Cell::relay(0, RelayCommand::Data, 3, 1);
        assert_eq!(table.push(circ, true, data, 3, 10), Some(chan(2)));
        assert_eq!(table.push(circ, false, data, 2, 10), Some(chan(1)));
        assert_eq!(table.queued_cells(), 5);
        let c = &mut table[circ];
        assert_eq!(c.stats.max_queue, 3);
        let next = c.next.as_mut().unwrap();
        assert_eq!(next.queue.len(), 3);
        assert_eq!(next.queue.pop_front().unwrap().circ_id, 9);
        assert_eq!(c.prev.queue.pop_front().unwrap().circ_id, 7);
        table.cell_left();
        table.cell_left();
        assert_eq!(table.queued_cells(), 3);
        assert!(table.remove(circ).is_some());
        assert_eq!(
            table.queued_cells(),
            0,
            "the destroyed circuit's cells are not queued"
        );
        assert!(!table.contains(circ));
        assert!(table.remove(circ).is_none());
    }

    #[test]
    fn a_run_that_would_pass_the_queue_limit_is_refused_whole() {
        let mut table = CircuitTable::new();
        let circ = table.insert(circuit(1, true));
        let data = Cell::relay(0, RelayCommand::Data, 3, 1);
        assert_eq!(table.push(circ, true, data, 5, 4), None);
        assert_eq!(table.queued_cells(), 0);
        assert_eq!(table[circ].next.as_ref().unwrap().queue.len(), 0);
        assert_eq!(table.push(circ, true, data, 4, 4), Some(chan(2)));
        assert_eq!(table.push(circ, true, data, 1, 4), None);
        assert_eq!(table.queued_cells(), 4);
        assert_eq!(
            table.push(circ, false, data, 4, 4),
            Some(chan(1)),
            "each side its own"
        );
    }
}
