//! IMUX (Geddes, Jansen and Hopper, "IMUX: Managing Tor Connections from Two to Infinity, and
//! Beyond", WPES 2014): a channel holds as many TCP connections as its share of the relay's
//! circuits earns (`getMaxConns`, resized once a second, under a relay-wide cap of
//! `ConnLimit * tau` sockets), and the scheduler spreads its circuits over them: pinned round
//! robin, per cell to the shortest queue, or by the EWMA mapping (a circuit's rank among the
//! channel's circuits picks the connection of the same rank). Cells carry sequence numbers;
//! surplus connections close with a two-message handshake so no cell is lost.

use super::super::*;
use super::{ConnLoss, Design};

/// Many connections per channel, sized by the channel's share of circuits.
pub(in crate::relay) struct Imux;

impl Design for Imux {
    const SEQUENCED: bool = true;
    const SEQ_BYTES: u64 = IMUX_SEQ_BYTES;
    const JOINS: bool = true;
    /// The EWMA ranking moves with the clock.
    const MAY_PARK: bool = false;

    fn start(_r: &mut Relay, io: &mut impl Io<RelayTimer>) {
        io.arm_in(NANOS_PER_SEC, RelayTimer::ManageConnections);
    }

    /// The share `ConnLimit * tau` that the design keeps for itself.
    fn socket_limit(r: &Relay) -> u32 {
        transport::imux_socket_cap(r.conn_limit, r.world.params.imux_tau)
    }

    /// A connection beyond the channel's first waits for its Joined.
    fn waits_for_joined(extra: bool) -> bool {
        extra
    }

    /// Over the socket cap an extra connection is refused with the closing handshake;
    /// otherwise a Joined confirms it.
    fn joined(r: &mut Relay, io: &mut impl Io<RelayTimer>, ch: ChannelId, k: ConnId, _heavy: bool) {
        if r.table.channels[ch].conns.len() > 1 && r.open_sockets > r.socket_limit() {
            r.meter.second.conn_limit_refusals += 1;
            r.begin_closing(io, k);
        } else {
            r.confirm_join(io, k);
        }
    }

    /// Round robin pins each circuit to the next connection in turn; the other schedulers
    /// choose per cell.
    fn pin(
        r: &mut Relay,
        ch: ChannelId,
        _bulk: bool,
        _arrived_on: Option<ConnId>,
    ) -> (Option<ConnId>, bool) {
        let chan = &mut r.table.channels[ch];
        if r.world.params.imux_scheduler != ImuxScheduler::RoundRobin || chan.conns.is_empty() {
            return (None, false);
        }
        let n = chan.conns.len();
        let multi = chan.multi_mut();
        multi.turn = (multi.turn + 1) % n;
        let turn = multi.turn;
        (Some(chan.conns[turn]), false)
    }

    /// Under the EWMA mapping, brings the channel's ranking of its usable connections up
    /// to date and ranks its circuits, quietest first.
    fn rank(r: &mut Relay, ch: ChannelId, now: SimTime) {
        if r.world.params.imux_scheduler != ImuxScheduler::Ewma {
            return;
        }
        let clock = &r.clock;
        let tick = clock.tick(now);
        let Channel {
            conns: chan_conns,
            mux,
            multi,
            ..
        } = &mut r.table.channels[ch];
        let m = MultiConn::made(multi);
        let mut current = !m.ranking_stale && m.ranking_tick == tick;
        if current {
            for &k in &m.rank_dirty {
                let conn = &mut r.table.conns[k];
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
                let conn = &mut r.table.conns[k];
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
            let mut fresh: Vec<(f64, ConnId)> = (chan_conns.iter())
                .filter(|&&k| r.table.conns[k].usable())
                .map(|&k| (r.table.conns[k].ewma.value(clock, now), k))
                .collect();
            fresh.sort_unstable_by(transport::ranking_order);
            assert_eq!(m.ranking, fresh, "IMUX ranking out of step");
        }
        mux.ranks(now, &mut r.sched.rank_scratch, &mut m.circ_ranks);
    }

    /// Shortest queue compares every connection's queue.
    fn reads_every_limit(r: &Relay) -> bool {
        r.world.params.imux_scheduler == ImuxScheduler::ShortestQueue
    }

    fn pick_conn(
        r: &mut Relay,
        io: &impl Io<RelayTimer>,
        ch: ChannelId,
        circ: CircuitId,
        pinned: Option<ConnId>,
        cell_bytes: u64,
    ) -> Option<ConnId> {
        let k = match r.world.params.imux_scheduler {
            ImuxScheduler::ShortestQueue => {
                // Every connection's queue was read at the start of the run.
                let (chan, conns) = (&r.table.channels[ch], &r.table.conns);
                let best = transport::shortest_queue(chan.conns.iter().map(|&k| {
                    let c = &conns[k];
                    c.has_room(cell_bytes).then_some(c.queued_bytes)
                }))?;
                return Some(chan.conns[best]);
            }
            ImuxScheduler::Ewma => {
                let multi = r.table.channels[ch].multi();
                let ranks = &multi.circ_ranks;
                let rank = ranks
                    .binary_search_by_key(&circ, |e| e.0)
                    .map_or(0, |i| ranks[i].1 as usize);
                transport::imux_ewma_pick(rank, ranks.len().max(1), &multi.ranking)?.1
            }
            ImuxScheduler::RoundRobin => Self::round_robin(r, ch, circ, pinned)?,
        };
        r.try_conn(io, Some(k), cell_bytes)
    }

    /// Counts the cell in its connection's EWMA, and marks the connection for re-ranking.
    fn cell_written(
        r: &mut Relay,
        _io: &mut impl Io<RelayTimer>,
        run: &mut Run,
        ch: ChannelId,
        _circ: CircuitId,
        k: ConnId,
    ) {
        let conn = &mut r.table.conns[k];
        conn.ewma.note_weighted(&r.clock, 1, &run.weight);
        if conn.ewma_seen_tick != u64::MAX {
            conn.ewma_seen_tick = u64::MAX;
            r.table.channels[ch].multi_mut().rank_dirty.push(k);
        }
    }

    /// A connection of a channel with others left just goes.
    fn conn_lost(r: &Relay, ch: ChannelId, _k: ConnId) -> ConnLoss {
        if r.table.channels[ch].conns.len() > 1 {
            ConnLoss::Quiet
        } else {
            ConnLoss::Channel
        }
    }

    /// The peer refused or closed a connection of a channel we opened, so its own
    /// share for the channel is below ours. Hold the channel at what is left for
    /// `IMUX_PEER_HOLD`, then probe one connection a second: without this the opener reopens
    /// every refused connection each second and both relays churn thousands of handshakes.
    /// Called while the refused or closed connection is still one of the channel's.
    fn peer_refused(r: &mut Relay, ch: ChannelId, now: SimTime) {
        let chan = &mut r.table.channels[ch];
        if !chan.opener {
            return;
        }
        let remaining = chan.conns.len().saturating_sub(1) as u32;
        let multi = chan.multi_mut();
        multi.peer_cap = Some(remaining.max(1));
        multi.peer_hold_until = now.saturating_add(transport::IMUX_PEER_HOLD);
    }

    /// The once-a-second housekeeping: sizes every channel's set of connections by its
    /// share of the relay's circuits (`getMaxConns`), opening connections on channels this
    /// relay opened and closing the surplus on any.
    fn manage(r: &mut Relay, io: &mut impl Io<RelayTimer>) {
        let p = &r.world.params;
        let (tau, limit) = (p.imux_tau, r.conn_limit);
        let now = io.now();
        let mut ages = Vec::new();
        let mut close = Vec::new();
        // By slot, since opening and closing connections changes the table.
        for slot in 0..r.table.channels.slots() {
            let Some(ch) = r.table.channels.id_at(slot) else {
                continue;
            };
            let chan = &mut r.table.channels[ch];
            if chan.closed || chan.conns.is_empty() || !chan.opener && chan.token.is_none() {
                continue;
            }
            if let Some(m) = chan.multi.as_deref_mut() {
                if let Some(cap) = m.peer_cap.as_mut().filter(|_| now >= m.peer_hold_until) {
                    *cap += 1;
                }
            }
            let nconns = chan.conns.len() as u32;
            let target = transport::imux_max_conns(
                nconns,
                chan.circs.count(),
                r.circuits.len() as u32,
                limit,
                tau,
                r.open_sockets,
            )
            .min(
                chan.multi()
                    .peer_cap
                    .map_or(u32::MAX, |cap| cap.max(nconns)),
            );
            if target > nconns && chan.opener {
                for _ in nconns..target {
                    // Growth stops quietly at the cap: that is the design, not a refusal.
                    if r.open_sockets >= r.socket_limit() || r.open_conn(io, ch, 0).is_none() {
                        break;
                    }
                }
            } else if target < nconns {
                let chan = &r.table.channels[ch];
                ages.clear();
                ages.extend(chan.conns.iter().map(|&k| {
                    let c = &r.table.conns[k];
                    ConnAge {
                        open: c.carries_cells(),
                        created: c.created,
                        last_used: c.last_used,
                    }
                }));
                transport::imux_close_order(&ages, (nconns - target) as usize, &mut close);
                let victims: Vec<ConnId> = close.iter().map(|&i| chan.conns[i]).collect();
                for k in victims {
                    r.begin_closing(io, k);
                }
            }
        }
    }
}

impl Imux {
    /// Round robin: the circuit's pinned connection while it is alive, else the next active
    /// one in turn, pinned from now on; `None` if the channel has no active connection.
    fn round_robin(
        r: &mut Relay,
        ch: ChannelId,
        circ: CircuitId,
        pinned: Option<ConnId>,
    ) -> Option<ConnId> {
        // A connection that goes unpins its circuits (`Relay::drop_conn`); one closing keeps
        // them until then, but takes no more of their cells.
        if let Some(k) = pinned {
            let conn = &mut r.table.conns[k];
            debug_assert_eq!(
                conn.chan, ch,
                "a circuit pinned to another channel's connection"
            );
            if conn.state == ConnState::Active {
                return Some(k);
            }
            conn.circuits = conn.circuits.saturating_sub(1);
        }
        let conns = &r.table.conns;
        let chan = &mut r.table.channels[ch];
        let is_active = |k: &&ConnId| conns[**k].state == ConnState::Active;
        let active = chan.conns.iter().filter(is_active).count();
        if active == 0 {
            return None;
        }
        let multi = MultiConn::made(&mut chan.multi);
        multi.turn = (multi.turn + 1) % active;
        let k = *chan.conns.iter().filter(is_active).nth(multi.turn).unwrap();
        let side = r.circuits[circ].side_for(ch);
        side.conn = Some(k);
        r.table.conns[k].circuits += 1;
        Some(k)
    }
}
