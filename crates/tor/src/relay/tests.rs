//! The relay as a sans-IO state machine: inputs from a scripted outside world, and what the
//! relay asked of it.

use std::collections::HashMap;

use onionlab_engine::slab::Key;
use onionlab_engine::time::millis;
use onionlab_netdir::{Consensus, ExitPolicy, RelayFlags};
use onionlab_torcore::{Cell, CellCommand, RelayCommand, TorParams, CELL_BYTES};

use super::*;
use crate::io::script::{Asked, ScriptIo};
use crate::io::Sockets;
use crate::wire::INITIATOR_BIT;
use crate::world::testing::descriptor;
use onionlab_net::SocketId;

/// Guard, middle and exit at hosts 0, 1, 2; the client is host 3.
const MIDDLE: HostId = 1;
const EXIT: HostId = 2;
const CLIENT: HostId = 3;

/// The guard (consensus relay 0) under `channel`, with ConnLimit `conn_limit`, started.
fn guard(channel: ChannelDesign, conn_limit: u32) -> (Relay, ScriptIo<RelayTimer>) {
    guard_with(TorParams {
        channel,
        conn_limit,
        ..TorParams::default()
    })
}

/// The guard (consensus relay 0) under `params`, started. Its scripted peers send cells
/// without the link handshake, so it runs none (`handshaking_guard` runs it).
fn guard_with(params: TorParams) -> (Relay, ScriptIo<RelayTimer>) {
    started_guard(TorParams {
        link_handshake: false,
        ..params
    })
}

/// The guard under `params` as they are.
fn started_guard(params: TorParams) -> (Relay, ScriptIo<RelayTimer>) {
    let relays = vec![
        descriptor("guard", 1, RelayFlags::GUARD, ExitPolicy::reject_all()),
        descriptor("middle", 2, RelayFlags::default(), ExitPolicy::reject_all()),
        descriptor("exit", 3, RelayFlags::EXIT, ExitPolicy::reject_all()),
    ];
    let names = ["guard", "middle", "exit", "client"]
        .map(String::from)
        .to_vec();
    let world = Arc::new(TorWorld::new(
        params,
        Consensus::from_relays(relays),
        vec![0, 1, 2],
        names,
        Vec::new(),
    ));
    let limits = RelayLimits {
        bandwidth_rate: 100 << 20,
        bandwidth_burst: 100 << 20,
        relay_bandwidth_rate: None,
        relay_bandwidth_burst: None,
        conn_limit: None,
    };
    let mut relay = Relay::new(0, world, &limits);
    let mut io = ScriptIo::new();
    relay.start(&mut io);
    (relay, io)
}

/// The relay handles a timer, as `driver::Driven` hands it one.
fn fire(relay: &mut Relay, io: &mut ScriptIo<RelayTimer>, timer: RelayTimer) {
    relay.on_timer(io, timer);
    relay.after_event(io);
}

/// Lets the relay handle what is queued, then runs its timers for `ms` simulated ms.
fn settle(relay: &mut Relay, io: &mut ScriptIo<RelayTimer>, ms: u64) {
    io.hand_in(relay);
    let end = io.now + millis(ms);
    while io.now < end {
        io.now += millis(1);
        for timer in io.due() {
            fire(relay, io, timer);
        }
    }
}

fn bytes() -> u64 {
    (CELL_BYTES + TorParams::default().tls_overhead_per_cell) as u64
}

fn create(circ_id: u32) -> Wire {
    let mut cell = Cell::new(circ_id | INITIATOR_BIT, CellCommand::Create2);
    cell.hop = 1;
    Wire::Cell(cell)
}

fn extend(circ_id: u32, to: HostId) -> Wire {
    let mut cell = Cell::relay(circ_id | INITIATOR_BIT, RelayCommand::Extend2, 1, 0);
    cell.command = CellCommand::RelayEarly;
    cell.arg = to;
    Wire::Cell(cell)
}

fn commands(written: &[Wire]) -> Vec<(CellCommand, RelayCommand)> {
    written
        .iter()
        .filter_map(|w| match w {
            Wire::Cell(c) => Some((c.command, c.relay)),
            _ => None,
        })
        .collect()
}

#[test]
fn a_started_relay_listens_on_its_or_port_and_samples_every_second() {
    let (mut relay, mut io) = guard(ChannelDesign::Vanilla, 100);
    assert_eq!(io.listening, [OR_PORT]);
    settle(&mut relay, &mut io, 3000);
    assert_eq!(relay.meter.samples.len(), 3);
    assert_eq!(relay.meter.samples[2].second, 3);
}

#[test]
fn a_create2_is_answered_with_created2_on_the_connection_it_came_on() {
    let (mut relay, mut io) = guard(ChannelDesign::Vanilla, 100);
    let client = io.accept(CLIENT, OR_PORT);
    io.arrive(client, bytes(), create(5));
    settle(&mut relay, &mut io, 20);
    let written = io.written(client);
    assert_eq!(
        commands(&written),
        [(CellCommand::Created2, RelayCommand::None)]
    );
    let Wire::Cell(reply) = written[0] else {
        unreachable!()
    };
    assert_eq!(reply.circ_id, 5 | INITIATOR_BIT);
    assert_eq!(relay.meter.samples.len(), 0);
    assert_eq!(relay.open_sockets(), 1);
}

/// The stack reports the peer's FIN once the bytes before it are in the receive buffer; the
/// messages of a read the relay makes while handling earlier events come back after that
/// report. The connection must end only after them: IMUX's peer flushes cells and then
/// CLOSING_CONN_END right before closing, and losing those cells stalled their circuits for
/// good (the receiver waits for the missing sequence number).
#[test]
fn what_the_peer_sent_before_closing_is_handled_before_the_connection_ends() {
    let (mut relay, mut io) = guard(ChannelDesign::Vanilla, 100);
    let client = io.accept(CLIENT, OR_PORT);
    io.arrive(client, bytes(), create(5));
    io.arrive(client, bytes(), extend(5, MIDDLE));
    io.peer_close(client);
    settle(&mut relay, &mut io, 20);
    // The EXTEND2 (read after the FIN was reported) was acted on: the relay connected to
    // the middle. Then the channel closed, and the circuit with it.
    let opened = io.connects();
    assert_eq!(opened.len(), 1, "{:?}", io.asked);
    assert_eq!((opened[0].1, opened[0].2), (MIDDLE, OR_PORT));
    assert!(io.asked.contains(&Asked::Abort(client)), "{:?}", io.asked);
    assert!(relay.circuit_views().is_empty());
}

#[test]
fn an_extend2_opens_a_channel_to_the_next_relay_and_reports_extended2() {
    let (mut relay, mut io) = guard(ChannelDesign::Vanilla, 100);
    let client = io.accept(CLIENT, OR_PORT);
    io.arrive(client, bytes(), create(5));
    io.arrive(client, bytes(), extend(5, MIDDLE));
    settle(&mut relay, &mut io, 20);
    let opened = io.connects();
    assert_eq!(opened.len(), 1);
    let (next, peer, port) = opened[0];
    assert_eq!((peer, port), (MIDDLE, OR_PORT));
    // Nothing goes out before the connection is up; then the CREATE2.
    assert!(io.written(next).is_empty());
    io.establish(next);
    settle(&mut relay, &mut io, 20);
    let sent = io.written(next);
    assert_eq!(
        commands(&sent),
        [(CellCommand::Create2, RelayCommand::None)]
    );
    let Wire::Cell(onward) = sent[0] else {
        unreachable!()
    };
    // The middle answers on the id the guard chose; the client hears EXTENDED2.
    io.arrive(
        next,
        bytes(),
        Wire::Cell(Cell::new(onward.circ_id, CellCommand::Created2)),
    );
    settle(&mut relay, &mut io, 20);
    let back = commands(&io.written(client));
    assert_eq!(
        back,
        [
            (CellCommand::Created2, RelayCommand::None),
            (CellCommand::Relay, RelayCommand::Extended2)
        ]
    );
}

fn link(flight: LinkMessage) -> Wire {
    Wire::Link(flight)
}

fn flights(written: &[Wire]) -> Vec<LinkMessage> {
    written
        .iter()
        .filter_map(|w| match w {
            Wire::Link(f) => Some(*f),
            _ => None,
        })
        .collect()
}

/// With the link handshake, a relay answers a connecting client flight by flight and takes
/// its CREATE2 only behind its NETINFO; a connection it opens to extend carries the
/// ClientHello first and the CREATE2 only after the responder's cells came back, two round
/// trips after TCP's.
#[test]
fn a_new_connections_first_cell_waits_for_the_link_handshake() {
    let (mut relay, mut io) = started_guard(TorParams::default());
    let client = io.accept(CLIENT, OR_PORT);
    io.arrive(client, 517, link(LinkMessage::ClientHello));
    settle(&mut relay, &mut io, 20);
    assert_eq!(io.written(client), [link(LinkMessage::ServerHello)]);
    io.arrive(client, 113, link(LinkMessage::Versions));
    settle(&mut relay, &mut io, 20);
    assert_eq!(
        flights(&io.written(client)),
        [LinkMessage::ServerHello, LinkMessage::ResponderCells]
    );
    let netinfo = LinkMessage::InitiatorCells {
        authenticated: false,
    };
    io.arrive(client, netinfo.wire_bytes(), link(netinfo));
    io.arrive(client, bytes(), create(5));
    io.arrive(client, bytes(), extend(5, MIDDLE));
    settle(&mut relay, &mut io, 20);
    assert_eq!(
        commands(&io.written(client)),
        [(CellCommand::Created2, RelayCommand::None)]
    );
    let next = io.connects()[0].0;
    io.establish(next);
    settle(&mut relay, &mut io, 20);
    // TCP is up: the ClientHello, no cell.
    assert_eq!(io.written(next), [link(LinkMessage::ClientHello)]);
    io.arrive(next, 1140, link(LinkMessage::ServerHello));
    settle(&mut relay, &mut io, 20);
    assert_eq!(
        flights(&io.written(next)),
        [LinkMessage::ClientHello, LinkMessage::Versions]
    );
    io.arrive(next, 2195, link(LinkMessage::ResponderCells));
    settle(&mut relay, &mut io, 20);
    // A relay authenticates, and its CREATE2 follows in the same flight.
    let sent = io.written(next);
    assert_eq!(
        sent[2],
        link(LinkMessage::InitiatorCells {
            authenticated: true
        })
    );
    assert_eq!(sent.len(), 4);
    assert_eq!(
        commands(&sent),
        [(CellCommand::Create2, RelayCommand::None)]
    );
}

/// A cell before the handshake is done breaks the protocol: the connection is dropped.
#[test]
fn a_cell_before_the_link_handshake_ends_the_connection() {
    let (mut relay, mut io) = started_guard(TorParams::default());
    let client = io.accept(CLIENT, OR_PORT);
    io.arrive(client, bytes(), create(5));
    settle(&mut relay, &mut io, 20);
    assert!(io.written(client).is_empty());
    assert!(io.asked.contains(&Asked::Abort(client)), "{:?}", io.asked);
    assert_eq!(relay.open_sockets(), 0);
}

/// The guard with circuit 5 from the client through it to the middle built: the client's
/// socket, the middle's, and the circuit's id on the middle's channel.
fn guard_with_circuit(params: TorParams) -> (Relay, ScriptIo<RelayTimer>, [SocketId; 2], u32) {
    let (mut relay, mut io) = guard_with(params);
    let client = io.accept(CLIENT, OR_PORT);
    io.arrive(client, bytes(), create(5));
    io.arrive(client, bytes(), extend(5, MIDDLE));
    settle(&mut relay, &mut io, 20);
    let next = io.connects()[0].0;
    io.establish(next);
    settle(&mut relay, &mut io, 20);
    let Wire::Cell(onward) = io.written(next)[0] else {
        unreachable!()
    };
    io.arrive(
        next,
        bytes(),
        Wire::Cell(Cell::new(onward.circ_id, CellCommand::Created2)),
    );
    settle(&mut relay, &mut io, 20);
    (relay, io, [client, next], onward.circ_id)
}

/// What a relay did with 30 DATA cells each way on circuit 5, arrived all in one read (one run
/// of equal cells each way) or in a read each: the cells it wrote towards the middle and the
/// client, its work, cells in and circuits killed.
fn forward_data(params: TorParams, one_read: bool) -> (Vec<Wire>, Vec<Wire>, Work, [u64; 2]) {
    let (mut relay, mut io, [client, next], onward) = guard_with_circuit(params);
    let mut out = Cell::relay(5 | INITIATOR_BIT, RelayCommand::Data, 3, 1);
    out.length = 498;
    let mut back = Cell::relay(onward, RelayCommand::Data, 0, 1);
    back.length = 498;
    for (socket, cell) in [(client, out), (next, back)] {
        for _ in 0..30 {
            io.arrive(socket, bytes(), Wire::Cell(cell));
            if !one_read {
                settle(&mut relay, &mut io, 1);
            }
        }
        settle(&mut relay, &mut io, 20);
    }
    let data = |written: Vec<Wire>| -> Vec<Wire> {
        let is_data = |w: &Wire| matches!(w, Wire::Cell(c) if c.relay == RelayCommand::Data);
        written.into_iter().filter(is_data).collect()
    };
    let counters = [
        relay.meter.second.cells_in,
        relay.meter.second.circuits_killed,
    ];
    (
        data(io.written(next)),
        data(io.written(client)),
        cell_work(relay.work),
        counters,
    )
}

/// A relay's work less its system calls and TLS records, which count reads and flushes: one
/// read of many cells against a read per cell.
fn cell_work(work: Work) -> Work {
    Work {
        syscalls: 0,
        tls_records: 0,
        ..work
    }
}

#[test]
fn a_run_of_cells_passing_through_is_forwarded_as_the_same_cells_one_by_one() {
    let (to_middle, to_client, work, counters) = forward_data(TorParams::default(), true);
    assert_eq!(to_middle.len(), 30);
    assert_eq!(to_client.len(), 30);
    let Wire::Cell(first) = to_middle[0] else {
        unreachable!()
    };
    assert_ne!(
        first.circ_id,
        5 | INITIATOR_BIT,
        "the cell takes the next hop's id"
    );
    assert_eq!(counters, [60 + 3, 0]);
    let one_by_one = forward_data(TorParams::default(), false);
    assert_eq!((to_middle, to_client, work, counters), one_by_one);
}

#[test]
fn a_run_too_long_for_its_circuits_queue_kills_the_circuit_at_the_same_cell() {
    // Sockets take nothing (no congestion window), so cells pile up in the circuit's queue.
    let params = TorParams {
        max_circuit_queue_cells: 10,
        ..TorParams::default()
    };
    let run = |one_read: bool| {
        let (mut relay, mut io, [client, _], _) = guard_with_circuit(params.clone());
        io.cwnd = 0;
        let mut out = Cell::relay(5 | INITIATOR_BIT, RelayCommand::Data, 3, 1);
        out.length = 498;
        for _ in 0..30 {
            io.arrive(client, bytes(), Wire::Cell(out));
            if !one_read {
                settle(&mut relay, &mut io, 1);
            }
        }
        settle(&mut relay, &mut io, 20);
        let killed = relay.meter.second.circuits_killed;
        (killed, cell_work(relay.work), relay.circuit_views().len())
    };
    assert_eq!(run(true), run(false));
    assert_eq!(run(true).0, 1);
}

#[test]
fn vanilla_shares_one_connection_per_peer_and_pctcp_opens_one_per_circuit() {
    for (channel, expected) in [(ChannelDesign::Vanilla, 1), (ChannelDesign::Pctcp, 3)] {
        let (mut relay, mut io) = guard(channel, 100);
        let client = io.accept(CLIENT, OR_PORT);
        for id in 1..=3 {
            io.arrive(client, bytes(), create(id));
            io.arrive(client, bytes(), extend(id, EXIT));
        }
        settle(&mut relay, &mut io, 20);
        let opened = io.connects();
        assert_eq!(opened.len(), expected, "{channel:?}: {opened:?}");
        assert!(opened.iter().all(|&(_, peer, _)| peer == EXIT));
    }
}

#[test]
fn at_its_conn_limit_a_relay_refuses_connections_and_fails_the_extend() {
    // Two sockets: the first client's connection and the channel to the middle.
    let (mut relay, mut io) = guard(ChannelDesign::Pctcp, 2);
    let client = io.accept(CLIENT, OR_PORT);
    io.arrive(client, bytes(), create(1));
    io.arrive(client, bytes(), extend(1, MIDDLE));
    settle(&mut relay, &mut io, 20);
    assert_eq!(io.connects().len(), 1);
    // A second client is refused at once.
    let late = io.accept(CLIENT + 1, OR_PORT);
    settle(&mut relay, &mut io, 20);
    assert!(io.asked.contains(&Asked::Abort(late)));
    // Under PCTCP a second circuit needs a connection of its own, which the limit forbids:
    // the circuit is destroyed with CONNECTFAILED.
    io.arrive(client, bytes(), create(2));
    io.arrive(client, bytes(), extend(2, MIDDLE));
    settle(&mut relay, &mut io, 20);
    assert_eq!(io.connects().len(), 1);
    let destroy = io.written(client).into_iter().find_map(|w| match w {
        Wire::Cell(c) if c.command == CellCommand::Destroy => Some(c),
        _ => None,
    });
    let destroy = destroy.expect("the second circuit is destroyed");
    assert_eq!(destroy.circ_id, 2 | INITIATOR_BIT);
    assert_eq!(destroy.arg, DESTROY_CONNECT_FAILED);
    assert_eq!(relay.open_sockets(), 2);
    let refused: u64 = relay.meter.second.conn_limit_refusals;
    assert_eq!(refused, 2);
}

/// Sequenced cells written on `socket`.
fn sequenced_on(io: &ScriptIo<RelayTimer>, socket: SocketId) -> usize {
    io.written(socket)
        .iter()
        .filter(|w| matches!(w, Wire::Sequenced { .. }))
        .count()
}

/// The guard under `params` (an IMUX design) with circuits 1 to 4 extended to the middle on
/// one connection, whose every CREATE2 the middle answered: returns the client's socket and
/// that connection's.
fn imux_guard_with_four_circuits(
    params: TorParams,
) -> (Relay, ScriptIo<RelayTimer>, SocketId, SocketId) {
    let (mut relay, mut io) = guard_with(params);
    let client = io.accept(CLIENT, OR_PORT);
    for id in 1..=4 {
        io.arrive(client, bytes(), create(id));
        io.arrive(client, bytes(), extend(id, MIDDLE));
    }
    settle(&mut relay, &mut io, 20);
    let first = io.connects()[0].0;
    io.establish(first);
    settle(&mut relay, &mut io, 20);
    for w in io.written(first) {
        if let Wire::Sequenced { cell, .. } = w {
            if cell.command == CellCommand::Create2 {
                let created = Cell::new(cell.circ_id, CellCommand::Created2);
                let message = Wire::Sequenced {
                    cell: created,
                    seq: 0,
                };
                io.arrive(first, bytes(), message);
            }
        }
    }
    settle(&mut relay, &mut io, 20);
    (relay, io, client, first)
}

#[test]
fn an_imux_relay_puts_no_cell_on_an_extra_connection_before_its_peer_takes_it() {
    let (mut relay, mut io, client, _) = imux_guard_with_four_circuits(TorParams {
        channel: ChannelDesign::Imux,
        conn_limit: 100,
        ..TorParams::default()
    });
    // A second later the connection manager grows the channel: the middle's connections
    // connect, and the guard only introduces them (Join) until the middle takes them.
    settle(&mut relay, &mut io, 1000);
    let extra: Vec<SocketId> = io.connects().iter().skip(1).map(|c| c.0).collect();
    assert!(
        !extra.is_empty(),
        "the channel did not grow: {:?}",
        io.asked
    );
    for &s in &extra {
        io.establish(s);
    }
    let data = |id: u32| Wire::Cell(Cell::relay(id | INITIATOR_BIT, RelayCommand::Data, 3, 1));
    for round in 0..20 {
        for id in 1..=4 {
            io.arrive(client, bytes(), data(id));
        }
        settle(&mut relay, &mut io, 5);
        if round == 9 {
            // The middle takes the extra connections.
            for &s in &extra {
                assert_eq!(
                    sequenced_on(&io, s),
                    0,
                    "a cell went on an unconfirmed connection"
                );
                assert!(matches!(io.written(s)[..], [Wire::Join { .. }]));
                io.arrive(s, bytes(), Wire::Joined);
            }
        }
    }
    let on_extra: usize = extra.iter().map(|&s| sequenced_on(&io, s)).sum();
    assert!(on_extra > 0, "no cell used the confirmed connections");
}

/// Checks that every circuit side on the guard's channel to the middle is pinned to nothing
/// or to a live, active connection of that channel, and that each connection counts exactly
/// the sides pinned to it; returns how many sides are pinned.
fn pins_are_counted(relay: &Relay, ch: ChannelId) -> u32 {
    let mut pinned: HashMap<ConnId, u32> = HashMap::new();
    for c in relay.circuits.values() {
        for side in std::iter::once(&c.prev).chain(c.next.as_ref()) {
            if let (true, Some(k)) = (side.chan == ch, side.conn) {
                assert!(
                    relay.table.channels[ch].conns.contains(&k),
                    "a circuit is pinned to connection {k:?} that is not the channel's"
                );
                *pinned.entry(k).or_default() += 1;
            }
        }
    }
    for &k in &relay.table.channels[ch].conns {
        let (counted, pinned) = (relay.table.conns[k].circuits, pinned.get(&k).copied());
        assert_eq!(
            counted,
            pinned.unwrap_or(0),
            "connection {k:?} counts {counted} circuits, {pinned:?} are pinned to it"
        );
    }
    pinned.values().sum()
}

#[test]
fn imux_round_robin_repins_circuits_whose_connection_closed_before_its_slot_is_reused() {
    let (mut relay, mut io, client, first) = imux_guard_with_four_circuits(TorParams {
        channel: ChannelDesign::Imux,
        conn_limit: 100,
        imux_scheduler: ImuxScheduler::RoundRobin,
        ..TorParams::default()
    });
    // The manager grows the channel; the middle takes the new connections.
    settle(&mut relay, &mut io, 1000);
    let extra: Vec<SocketId> = io.connects().iter().skip(1).map(|c| c.0).collect();
    assert!(!extra.is_empty(), "the channel did not grow");
    for &s in &extra {
        io.establish(s);
        io.arrive(s, bytes(), Wire::Joined);
    }
    settle(&mut relay, &mut io, 20);
    let ch = relay
        .circuits
        .values()
        .find_map(|c| c.next.as_ref().map(|n| n.chan))
        .unwrap();
    let first_conn = relay.table.channels[ch].conns[0];
    assert_eq!(pins_are_counted(&relay, ch), 4);
    assert_eq!(relay.table.conns[first_conn].circuits, 4);
    // The middle closes the first connection, which all four circuits were pinned to; they
    // stay quiet until the manager opens a connection into its slot.
    io.arrive(first, bytes(), Wire::ClosingBegin);
    settle(&mut relay, &mut io, 20);
    assert_eq!(
        pins_are_counted(&relay, ch),
        0,
        "circuits pinned to a closed connection"
    );
    let before = io.connects().len();
    let mut waited = 0;
    while io.connects().len() == before {
        assert!(waited < 20_000, "the manager opened no connection in 20 s");
        settle(&mut relay, &mut io, 100);
        waited += 100;
    }
    let newcomer = io.connects()[before].0;
    assert_eq!(
        relay.table.channels[ch].conns.last().map(|k| k.slot()),
        Some(first_conn.slot()),
        "the new connection did not take the freed slot, so this test shows nothing"
    );
    io.establish(newcomer);
    io.arrive(newcomer, bytes(), Wire::Joined);
    let data = |id: u32| Wire::Cell(Cell::relay(id | INITIATOR_BIT, RelayCommand::Data, 3, 1));
    for id in 1..=4 {
        io.arrive(client, bytes(), data(id));
    }
    settle(&mut relay, &mut io, 20);
    // Each circuit took the next connection in turn, counted there.
    assert_eq!(pins_are_counted(&relay, ch), 4);
}

/// The guard with circuits 1 and 2 extended to the middle under `quic`: returns the channel's
/// TCP and QUIC sockets, with the TCP connection established but its link handshake (the
/// peer's Joined) not yet answered.
fn quic_channel(
    relay: &mut Relay,
    io: &mut ScriptIo<RelayTimer>,
) -> (SocketId, SocketId, SocketId) {
    let client = io.accept(CLIENT, OR_PORT);
    for id in 1..=2 {
        io.arrive(client, bytes(), create(id));
        io.arrive(client, bytes(), extend(id, MIDDLE));
    }
    settle(relay, io, 20);
    let opened = io.connects();
    let ports: Vec<(HostId, u16)> = opened.iter().map(|c| (c.1, c.2)).collect();
    assert_eq!(ports, [(MIDDLE, OR_PORT), (MIDDLE, QUIC_PORT)]);
    let (tcp, quic) = (opened[0].0, opened[1].0);
    io.establish(tcp);
    settle(relay, io, 20);
    // Only the link handshake's Join goes out before the peer answers it.
    assert!(
        matches!(io.written(tcp)[..], [Wire::Join { .. }]),
        "{:?}",
        io.written(tcp)
    );
    (client, tcp, quic)
}

#[test]
fn a_quic_channel_moves_its_circuits_to_streams_when_quic_is_ready_in_time() {
    let (mut relay, mut io) = guard(ChannelDesign::Quic, 100);
    assert_eq!(io.listening, [OR_PORT, QUIC_PORT]);
    let (client, tcp, quic) = quic_channel(&mut relay, &mut io);
    io.quic_ready = true;
    io.arrive(tcp, bytes(), Wire::Joined);
    settle(&mut relay, &mut io, 20);
    assert_eq!(relay.meter.channels.quic_channels, 1);
    assert_eq!(relay.meter.channels.tcp_fallbacks, 0);
    // One stream per circuit, each carrying its circuit's CREATE2; nothing more on TCP,
    // which closes; the QUIC connection stays.
    assert_eq!(io.streams.len(), 2);
    for &s in &io.streams {
        assert_eq!(
            commands(&io.written(s)),
            [(CellCommand::Create2, RelayCommand::None)]
        );
    }
    assert_eq!(io.written(tcp).len(), 1);
    assert!(io.asked.contains(&Asked::Close(tcp)));
    assert!(io.is_open(quic));
    // The client's connection and the QUIC connection are the relay's sockets; streams
    // cost none.
    assert_eq!(relay.open_sockets(), 2);
    // A third circuit gets a stream of its own at once.
    io.arrive(client, bytes(), create(3));
    io.arrive(client, bytes(), extend(3, MIDDLE));
    settle(&mut relay, &mut io, 20);
    assert_eq!(io.streams.len(), 3);
    assert_eq!(relay.open_sockets(), 2);
}

#[test]
fn a_quic_channel_stays_on_tcp_when_quic_is_not_ready_in_time() {
    let (mut relay, mut io) = guard(ChannelDesign::Quic, 100);
    let (_, tcp, quic) = quic_channel(&mut relay, &mut io);
    io.arrive(tcp, bytes(), Wire::Joined);
    settle(&mut relay, &mut io, 20);
    assert_eq!(relay.meter.channels.quic_channels, 0);
    assert_eq!(relay.meter.channels.tcp_fallbacks, 1);
    assert!(io.streams.is_empty());
    assert!(io.asked.contains(&Asked::Close(quic)));
    assert_eq!(
        commands(&io.written(tcp)),
        [
            (CellCommand::Create2, RelayCommand::None),
            (CellCommand::Create2, RelayCommand::None)
        ]
    );
    assert_eq!(relay.open_sockets(), 2);
}

#[test]
fn a_quic_channel_without_a_socket_left_for_quic_stays_on_tcp_and_says_so() {
    // Two sockets: the client's connection and the channel's TCP connection.
    let (mut relay, mut io) = guard(ChannelDesign::Quic, 2);
    let client = io.accept(CLIENT, OR_PORT);
    io.arrive(client, bytes(), create(1));
    io.arrive(client, bytes(), extend(1, MIDDLE));
    settle(&mut relay, &mut io, 20);
    let opened = io.connects();
    assert_eq!(
        opened.len(),
        1,
        "no QUIC connection at the limit: {opened:?}"
    );
    let tcp = opened[0].0;
    io.establish(tcp);
    io.quic_ready = true;
    io.arrive(tcp, bytes(), Wire::Joined);
    settle(&mut relay, &mut io, 20);
    assert_eq!(relay.meter.channels.tcp_fallbacks, 1);
    assert_eq!(relay.meter.channels.quic_channels, 0);
    assert_eq!(
        commands(&io.written(tcp)),
        [(CellCommand::Create2, RelayCommand::None)]
    );
    assert_eq!(relay.open_sockets(), 2);
}

/// A closed channel's slot is reused once nothing names it, so a relay whose peers come and
/// go (PCTCP closes a channel with its last circuit, failures and ConnLimit close others)
/// holds a table as large as its most channels at once, not as its channels over the run.
#[test]
fn closed_channels_leave_their_slots_for_new_ones() {
    let (mut relay, mut io) = guard(ChannelDesign::Vanilla, 100);
    for round in 0..5 {
        let client = io.accept(CLIENT, OR_PORT);
        io.arrive(client, bytes(), create(5));
        settle(&mut relay, &mut io, 20);
        assert_eq!(relay.channel_views().len(), 1, "round {round}");
        io.peer_close(client);
        settle(&mut relay, &mut io, 20);
        assert!(relay.channel_views().is_empty(), "round {round}");
        assert!(relay.circuit_views().is_empty(), "round {round}");
        // Within a second the slot is held (the scheduler's list or an onion skin may name
        // it); after the next sample it is free again.
        settle(&mut relay, &mut io, 1000);
    }
    assert_eq!(
        relay.table.channels.slots(),
        1,
        "every channel took a new slot"
    );
}

/// The fields a scheduler run reads of every pending channel share its first cache line, and
/// the layout that puts them there costs no padding (see `Channel`).
#[test]
fn a_channels_hot_fields_share_its_first_cache_line() {
    use std::mem::{offset_of, size_of};
    for end in [
        offset_of!(Channel, pending) + 1,
        offset_of!(Channel, carrier) + 1,
        offset_of!(Channel, room) + 4,
        offset_of!(Channel, queued) + 8,
        offset_of!(Channel, conns) + size_of::<SmallVec<[ConnId; 2]>>(),
        // The mux's active list, its first field.
        offset_of!(Channel, mux) + size_of::<Vec<u64>>(),
    ] {
        assert!(end <= 64, "a hot field of Channel ends at byte {end}");
    }
    // 464 with the multi-connection designs' fields inline (now `MultiConn`, out of line).
    assert!(
        size_of::<Channel>() <= 312,
        "Channel is {} bytes",
        size_of::<Channel>()
    );
}

/// A connection's fields that scheduler runs and reads touch come first, and the layout that
/// puts them there costs no padding (see `Conn`).
#[test]
fn a_connections_hot_fields_come_first() {
    use std::mem::{offset_of, size_of};
    assert!(
        offset_of!(Conn, stream) < 49,
        "{}",
        offset_of!(Conn, stream)
    );
    assert!(offset_of!(Conn, limit_run) < 49);
    assert!(offset_of!(Conn, socket) < 49);
    // The eight-byte channel id (slot and generation) leaves four bytes of padding.
    assert_eq!(size_of::<Conn>(), 104);
}

/// A guard with a circuit whose next hop's connection takes nothing (no congestion window),
/// after `cells` DATA cells from the client: they wait in the circuit's queue.
fn blocked_guard(cells: usize) -> (Relay, ScriptIo<RelayTimer>, [SocketId; 2]) {
    blocked_guard_on_cpu(cells, false)
}

/// [`blocked_guard`], on a modelled CPU if `cpu` (whose scheduler never parks).
fn blocked_guard_on_cpu(cells: usize, cpu: bool) -> (Relay, ScriptIo<RelayTimer>, [SocketId; 2]) {
    let (mut relay, mut io, sockets, _) = guard_with_circuit(TorParams::default());
    io.cwnd = 0;
    io.cpu = cpu;
    let mut out = Cell::relay(5 | INITIATOR_BIT, RelayCommand::Data, 3, 1);
    out.length = 498;
    for _ in 0..cells {
        io.arrive(sockets[0], bytes(), Wire::Cell(out));
    }
    settle(&mut relay, &mut io, 20);
    (relay, io, sockets)
}

fn schedule_timers(io: &ScriptIo<RelayTimer>) -> Vec<SimTime> {
    (io.timers.iter())
        .filter(|t| matches!(t.1, RelayTimer::Schedule))
        .map(|t| t.0)
        .collect()
}

#[test]
fn a_kist_scheduler_without_room_parks_and_wakes_on_its_run_grid() {
    let interval = millis(TorParams::default().kist_run_interval_ms);
    let (mut relay, mut io, [client, next]) = blocked_guard(5);
    assert!(
        relay.sched.is_parked(),
        "nothing had room: the scheduler parks"
    );
    assert!(
        schedule_timers(&io).is_empty(),
        "a parked scheduler arms no run"
    );
    let last = relay.sched.last_run().unwrap();
    let written = io.written(next).len();

    // More cells for the blocked circuit, from the client: the next hop's socket has not
    // moved, so the runs would still find no room, and the scheduler stays parked.
    let mut out = Cell::relay(5 | INITIATOR_BIT, RelayCommand::Data, 3, 1);
    out.length = 498;
    io.now = last + interval + interval / 3;
    io.arrive(client, bytes(), Wire::Cell(out));
    io.hand_in(&mut relay);
    assert!(
        relay.sched.is_parked(),
        "the client's socket is not waited on"
    );
    assert!(schedule_timers(&io).is_empty());

    // The next hop's socket moves, but its window stays shut: still no room.
    io.now += interval;
    io.set_cwnd(0);
    io.hand_in(&mut relay);
    assert!(relay.sched.is_parked(), "a move that gives no room");
    assert!(schedule_timers(&io).is_empty());

    // The next hop's socket moves between two runs the scheduler would have made: the three
    // before it are counted, and the next is armed where it would have been.
    io.now = last + 3 * interval + interval / 2;
    io.set_cwnd(10);
    io.hand_in(&mut relay);
    assert!(!relay.sched.is_parked());
    assert_eq!(relay.sched.last_run(), Some(last + 3 * interval));
    assert_eq!(schedule_timers(&io), vec![last + 4 * interval]);
    assert_eq!(
        io.written(next).len(),
        written,
        "no run before the armed one"
    );
    io.now = last + 4 * interval;
    for timer in io.due() {
        fire(&mut relay, &mut io, timer);
    }
    assert_eq!(
        io.written(next).len(),
        written + 6,
        "the run writes the queued cells"
    );
}

/// A channel that becomes pending may have room where the parked scheduler's had none: it
/// wakes the scheduler, whose next run is armed once, on its grid.
#[test]
fn a_channel_that_becomes_pending_wakes_a_parked_scheduler() {
    let interval = millis(TorParams::default().kist_run_interval_ms);
    let (mut relay, mut io, _) = blocked_guard(1);
    assert!(relay.sched.is_parked());
    let last = relay.sched.last_run().unwrap();
    // A second client builds a circuit: its CREATED2 waits on a channel no run has seen.
    io.now = last + 2 * interval + interval / 4;
    let other = io.accept(CLIENT + 1, OR_PORT);
    io.arrive(other, bytes(), create(7));
    io.hand_in(&mut relay);
    assert!(!relay.sched.is_parked());
    assert_eq!(relay.sched.last_run(), Some(last + 2 * interval));
    assert_eq!(schedule_timers(&io), vec![last + 3 * interval]);
}

#[test]
fn a_parked_schedulers_run_due_at_the_instant_of_an_input_keeps_its_place() {
    let interval = millis(TorParams::default().kist_run_interval_ms);
    for timers_first in [false, true] {
        let (mut relay, mut io, _) = blocked_guard(1);
        let last = relay.sched.last_run().unwrap();
        io.timers_first = timers_first;
        io.now = last + 2 * interval;
        // The waited-on socket's window opens.
        io.set_cwnd(10);
        io.hand_in(&mut relay);
        if timers_first {
            // The run due now came first, before the window opened, found nothing, and
            // armed the next.
            assert_eq!(relay.sched.last_run(), Some(last + 2 * interval));
            assert_eq!(schedule_timers(&io), vec![last + 3 * interval]);
        } else {
            // The run due now comes after this input, and sees what it changed.
            assert_eq!(relay.sched.last_run(), Some(last + interval));
            assert_eq!(schedule_timers(&io), vec![last + 2 * interval]);
        }
    }
}

/// Cells written by a guard whose next connection opens and closes its window at times no
/// run interval divides, while more cells arrive, inputs and timers due at one instant taken
/// in either order: the count after every step. `cpu` keeps the scheduler from parking (a
/// relay on a modelled CPU never parks), so it runs every interval as tor's does.
fn writes_over_time(cpu: bool) -> (Vec<(SimTime, usize)>, u32) {
    let (mut relay, mut io, [client, next]) = blocked_guard_on_cpu(3, cpu);
    let mut out = Cell::relay(5 | INITIATOR_BIT, RelayCommand::Data, 3, 1);
    out.length = 498;
    let mut log = Vec::new();
    let mut parked_steps = 0;
    for step in 0u64..400 {
        io.now += millis(1) / 2;
        let input = step % 7 == 0 || step % 11 == 3 || step % 13 == 5;
        io.timers_first = step % 3 != 0;
        let feed = |relay: &mut Relay, io: &mut ScriptIo<RelayTimer>| {
            if step % 11 == 3 {
                io.set_cwnd(if io.cwnd == 0 { 2 } else { 0 });
            }
            if step % 7 == 0 {
                io.arrive(client, bytes(), Wire::Cell(out));
            }
            io.hand_in(relay);
        };
        if input && !io.timers_first {
            feed(&mut relay, &mut io);
        }
        for timer in io.due() {
            fire(&mut relay, &mut io, timer);
        }
        if input && io.timers_first {
            feed(&mut relay, &mut io);
        }
        parked_steps += u32::from(relay.sched.is_parked());
        log.push((io.now, io.written(next).len()));
    }
    (log, parked_steps)
}

#[test]
fn a_parked_scheduler_writes_what_and_when_one_running_every_interval_does() {
    let (parking, parked) = writes_over_time(false);
    let (running, never) = writes_over_time(true);
    assert_eq!(never, 0);
    assert!(parked > 40, "parked in {parked} of 400 steps");
    assert!(running.last().unwrap().1 > 20, "cells were written");
    assert_eq!(parking, running);
}
