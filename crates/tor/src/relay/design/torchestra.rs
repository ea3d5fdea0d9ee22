//! Torchestra (Gopal and Heninger, "Torchestra: Reducing Interactive Traffic Delays over
//! Tor", WPES 2012): each channel has a light and a heavy TCP connection. A circuit starts on
//! the light one and moves to the heavy one while its EWMA of cells sent stands well above the
//! light circuits' average, and back when it falls; the relay that moves it tells its peer with
//! a Switch message, so both directions travel together. Cells carry sequence numbers, since a
//! circuit's cells may overtake each other when it moves.
//!
//! The idealised variant (`torchestra_ideal`) classifies nothing: the client declares a bulk
//! circuit in its CREATE2, and the circuit travels on the heavy connection from the start.

use super::super::*;
use super::Design;

/// Light and heavy connections, classified by the relays.
pub(in crate::relay) struct Torchestra;

/// Light and heavy connections, bulk circuits declared by the client.
pub(in crate::relay) struct TorchestraIdeal;

impl Design for Torchestra {
    const SEQUENCED: bool = true;
    const JOINS: bool = true;

    /// The light connection (role 0) and the heavy one (role 1).
    fn open_channel(r: &mut Relay, io: &mut impl Io<RelayTimer>, ch: ChannelId, _target: HostId) {
        let light = r.open_conn(io, ch, 0);
        let heavy = r.open_conn(io, ch, 1);
        let multi = r.table.channels[ch].multi_mut();
        multi.light = light;
        multi.heavy = heavy;
    }

    fn joined(r: &mut Relay, _io: &mut impl Io<RelayTimer>, ch: ChannelId, k: ConnId, heavy: bool) {
        let multi = r.table.channels[ch].multi_mut();
        if heavy {
            multi.heavy = Some(k);
        } else {
            multi.light = Some(k);
        }
    }

    /// The light connection, or for a declared bulk circuit the heavy one; before either
    /// exists, the one the circuit arrived on.
    fn pin(
        r: &mut Relay,
        ch: ChannelId,
        bulk: bool,
        arrived_on: Option<ConnId>,
    ) -> (Option<ConnId>, bool) {
        let multi = r.table.channels[ch].multi();
        let (light, heavy) = (multi.light, multi.heavy);
        match (bulk, light, heavy) {
            (true, _, Some(heavy)) => (Some(heavy), true),
            (_, Some(light), _) => (Some(light), false),
            _ => (arrived_on, false),
        }
    }

    /// Judges the circuit after each cell. What the run holds back for the socket goes first:
    /// a move sends a Switch on the light connection.
    fn cell_written(
        r: &mut Relay,
        io: &mut impl Io<RelayTimer>,
        run: &mut Run,
        ch: ChannelId,
        circ: CircuitId,
        _k: ConnId,
    ) {
        Relay::release(&r.table.conns, &mut r.work, io, &mut run.held);
        Self::classify(r, io, ch, circ, run.now);
    }
}

impl Design for TorchestraIdeal {
    const SEQUENCED: bool = true;
    const JOINS: bool = true;
    const HONOURS_DECLARED_BULK: bool = true;

    fn open_channel(r: &mut Relay, io: &mut impl Io<RelayTimer>, ch: ChannelId, target: HostId) {
        Torchestra::open_channel(r, io, ch, target);
    }

    fn joined(r: &mut Relay, io: &mut impl Io<RelayTimer>, ch: ChannelId, k: ConnId, heavy: bool) {
        Torchestra::joined(r, io, ch, k, heavy);
    }

    fn pin(
        r: &mut Relay,
        ch: ChannelId,
        bulk: bool,
        arrived_on: Option<ConnId>,
    ) -> (Option<ConnId>, bool) {
        Torchestra::pin(r, ch, bulk, arrived_on)
    }
}

impl Torchestra {
    /// The peer moved a circuit (id `circ_id` on the channel of connection `k`) to its heavy
    /// or light connection: this side's direction follows.
    pub(in crate::relay) fn switched(r: &mut Relay, k: ConnId, circ_id: u32, heavy: bool) {
        let ch = r.table.conns[k].chan;
        let chan = &r.table.channels[ch];
        let target = if heavy {
            chan.multi().heavy
        } else {
            chan.multi().light
        };
        let Some(target) = target else {
            return;
        };
        if let Some(circ) = chan.circs.lookup(circ_id) {
            Self::move_circuit(r, circ, ch, circ_id, heavy, target);
        }
    }

    /// After a cell of `circ` left on channel `ch`, moves the circuit between
    /// the light and the heavy connection if its EWMA crossed the threshold, and tells the
    /// peer so it moves the circuit's other direction too.
    fn classify(
        r: &mut Relay,
        io: &mut impl Io<RelayTimer>,
        ch: ChannelId,
        circ: CircuitId,
        now: SimTime,
    ) {
        let chan = &r.table.channels[ch];
        let (Some(light), Some(heavy)) = (chan.multi().light, chan.multi().heavy) else {
            return;
        };
        let Some(ewma) = chan.mux.value(circ, now) else {
            return;
        };
        let was_heavy = r
            .circuits
            .get(circ)
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
        // itr.
        if chan.multi().light_run != r.sched.stamp() {
            let circuits = &r.circuits;
            let Channel { mux, multi, .. } = &mut r.table.channels[ch];
            let m = MultiConn::made(multi);
            m.light_counts.clear();
            m.light_counts.extend(mux.values(now).filter(|&(c, value)| {
                value >= transport::TORCHESTRA_MIN_HEAVY_CELLS
                    && circuits
                        .get(c)
                        .is_some_and(|cc| cc.side_on_chan(ch).conn == Some(light))
            }));
            m.light_counts.sort_unstable_by_key(|e| e.0);
            m.light_sum = m.light_counts.iter().map(|e| e.1).sum();
            m.light_run = r.sched.stamp();
        }
        let m = r.table.channels[ch].multi();
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
            r.world.params.torchestra_threshold,
        );
        if heavy_now == was_heavy {
            return;
        }
        let side = r.circuits[circ].side_for(ch);
        let circ_id = side.circ_id;
        let target = if heavy_now { heavy } else { light };
        Self::move_circuit(r, circ, ch, circ_id, heavy_now, target);
        if heavy_now {
            r.meter.channels.switched_heavy += 1;
        } else {
            r.meter.channels.switched_light += 1;
        }
        let bytes = r.world.cell_wire_bytes();
        if r.write_conn(
            io,
            light,
            bytes,
            Wire::Switch {
                circ_id,
                heavy: heavy_now,
            },
        ) {
            r.flush_conn(io, light);
        }
    }

    /// Moves a circuit's side on channel `ch` (id `circ_id` there) to connection `target`,
    /// travelling as heavy traffic or not.
    fn move_circuit(
        r: &mut Relay,
        circ: CircuitId,
        ch: ChannelId,
        circ_id: u32,
        heavy: bool,
        target: ConnId,
    ) {
        let Some(side) = r
            .circuits
            .get_mut(circ)
            .and_then(|c| c.side_on(ch, circ_id))
        else {
            return;
        };
        if side.heavy == heavy || side.conn == Some(target) {
            side.heavy = heavy;
            return;
        }
        let old = side.conn.replace(target);
        side.heavy = heavy;
        if let Some(c) = old.and_then(|old| r.table.conns.get_mut(old)) {
            c.circuits = c.circuits.saturating_sub(1);
        }
        r.table.conns[target].circuits += 1;
    }
}
