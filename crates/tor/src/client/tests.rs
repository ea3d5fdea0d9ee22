//! The client as a sans-IO state machine: a scripted guard answers its circuits, and the
//! tests read what the client asked of the outside world.

use onionlab_engine::host_rng;
use onionlab_netdir::{Consensus, ExitPolicy, RelayFlags};
use onionlab_torcore::TorParams;

use super::*;
use crate::io::script::ScriptIo;
use crate::world::testing::descriptor;

/// Guard, middle and exit at hosts 0, 1, 2; the client is host 3 and the file server host 4.
const GUARD: HostId = 0;
const MIDDLE: HostId = 1;
const EXIT: HostId = 2;
const SERVER: HostId = 4;
const SIZE: u64 = 1 << 20;
/// Past the circuit build timeout before it has learnt anything (tor's 60 s).
const TIMEOUT: SimDuration = secs(120);

/// A started client with a bulk workload over a consensus of a guard, a middle and (if
/// `with_exit`) an exit, without link handshakes (the scripted guard sends cells only).
fn client(with_exit: bool) -> (Client, ScriptIo<ClientTimer>) {
    let exit_flags = if with_exit {
        RelayFlags::EXIT
    } else {
        RelayFlags::default()
    };
    let exit_policy = if with_exit {
        ExitPolicy::accept_all()
    } else {
        ExitPolicy::reject_all()
    };
    let relays = vec![
        descriptor("guard", 1, RelayFlags::GUARD, ExitPolicy::reject_all()),
        descriptor("middle", 2, RelayFlags::default(), ExitPolicy::reject_all()),
        descriptor("exit", 3, exit_flags, exit_policy),
    ];
    let names = ["guard", "middle", "exit", "client", "server"]
        .map(String::from)
        .to_vec();
    let params = TorParams {
        link_handshake: false,
        ..TorParams::default()
    };
    let world = Arc::new(TorWorld::new(
        params,
        Consensus::from_relays(relays),
        vec![GUARD, MIDDLE, EXIT],
        names,
        vec![("server".into(), vec![SERVER])],
    ));
    let workload = Workload::Bulk {
        size_bytes: SIZE,
        timeout: TIMEOUT,
    };
    let mut client = Client::new(
        world,
        workload,
        vec![SERVER],
        0,
        ClientOptions::default(),
        host_rng(1, 3, 9),
    );
    let mut io = ScriptIo::new();
    client.start(&mut io);
    (client, io)
}

/// The cells written on `socket` so far.
fn cells(io: &ScriptIo<ClientTimer>, socket: SocketId) -> Vec<Cell> {
    io.written(socket)
        .into_iter()
        .filter_map(|w| match w {
            Wire::Cell(c) => Some(c),
            _ => None,
        })
        .collect()
}

/// The client's one connection, to its guard, established.
fn connected(client: &mut Client, io: &mut ScriptIo<ClientTimer>) -> SocketId {
    let opened = io.connects();
    assert_eq!(opened.len(), 1, "{opened:?}");
    let (socket, peer, port) = opened[0];
    assert_eq!((peer, port), (GUARD, OR_PORT));
    io.establish(socket);
    io.hand_in(client);
    socket
}

/// The guard answers every hop of every circuit the client is building, until none is left
/// building: CREATED2 for the first hop, EXTENDED2 from the hop before for the others.
fn answer_every_hop(client: &mut Client, io: &mut ScriptIo<ClientTimer>, socket: SocketId) {
    let mut answered = 0;
    loop {
        let sent = cells(io, socket);
        let Some(cell) = sent.get(answered).copied() else {
            return;
        };
        answered += 1;
        let reply = match (cell.command, cell.relay) {
            (CellCommand::Create2, _) => Cell::new(cell.circ_id, CellCommand::Created2),
            (CellCommand::RelayEarly, RelayCommand::Extend2) => {
                Cell::relay(cell.circ_id, RelayCommand::Extended2, cell.hop, 0)
            }
            _ => continue,
        };
        io.deliver(socket, Wire::Cell(reply));
        io.hand_in(client);
    }
}

#[test]
fn a_client_connects_to_its_guard_and_builds_its_preemptive_circuits_once_connected() {
    let (mut client, mut io) = client(true);
    // One connection to the guard, and nothing written before it is up.
    let opened = io.connects();
    assert_eq!(opened.len(), 1);
    assert!(cells(&io, opened[0].0).is_empty());
    let socket = connected(&mut client, &mut io);
    let creates: Vec<Cell> = cells(&io, socket);
    let preemptive = TorParams::default().preemptive_circuits as usize;
    assert_eq!(creates.len(), preemptive, "{creates:?}");
    assert!(creates
        .iter()
        .all(|c| c.command == CellCommand::Create2 && c.hop == 1));
    let mut ids: Vec<u32> = creates.iter().map(|c| c.circ_id).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), preemptive, "each circuit has its own id");
    // The first download waits on one of them, with its timeout armed.
    let timeouts = (io.timers.iter())
        .filter(|(at, t)| *at == TIMEOUT && matches!(t, ClientTimer::DownloadTimeout { .. }))
        .count();
    assert_eq!(timeouts, 1);
}

#[test]
fn circuits_extend_hop_by_hop_and_the_download_begins_on_one_once_it_is_open() {
    let (mut client, mut io) = client(true);
    let socket = connected(&mut client, &mut io);
    answer_every_hop(&mut client, &mut io, socket);
    let sent = cells(&io, socket);
    // Each circuit extended to the middle (hop 1 asks) and then to the exit (hop 2 asks),
    // in RELAY_EARLY cells.
    let extends: Vec<(u32, u8, u32)> = (sent.iter())
        .filter(|c| c.relay == RelayCommand::Extend2)
        .inspect(|c| assert_eq!(c.command, CellCommand::RelayEarly))
        .map(|c| (c.circ_id, c.hop, c.arg))
        .collect();
    // Once the download took one, a new circuit keeps the preemptive ones clean.
    let created = (sent.iter())
        .filter(|c| c.command == CellCommand::Create2)
        .count();
    assert_eq!(
        created,
        TorParams::default().preemptive_circuits as usize + 1
    );
    assert_eq!(extends.len(), 2 * created, "{extends:?}");
    for &(circ_id, hop, to) in &extends {
        let expected = if hop == 1 { MIDDLE } else { EXIT };
        assert_eq!(to, expected, "circuit {circ_id} hop {hop}");
    }
    // The download's BEGIN goes to the exit (hop 3) on one circuit, on a stream of its own.
    let begins: Vec<&Cell> = (sent.iter())
        .filter(|c| c.relay == RelayCommand::Begin)
        .collect();
    assert_eq!(begins.len(), 1, "{sent:?}");
    assert_eq!(begins[0].hop, 3);
    assert_ne!(begins[0].stream_id, 0);
    // None of them closed, and the download is under way.
    assert!(client.circuit_log.is_empty());
    assert!(client.finished.is_empty());
}

#[test]
fn a_circuit_still_building_at_the_build_timeout_is_torn_down_and_its_download_moves_on() {
    let (mut client, mut io) = client(true);
    let socket = connected(&mut client, &mut io);
    let first: Vec<u32> = cells(&io, socket).iter().map(|c| c.circ_id).collect();
    // No answer from the guard: the circuits' build timeouts come.
    let deadline = (io.timers.iter())
        .filter(|(_, t)| matches!(t, ClientTimer::BuildTimeout { .. }))
        .map(|(at, _)| *at)
        .max()
        .expect("a build timeout is armed");
    assert!(
        deadline < TIMEOUT,
        "the build timeout comes before the download's"
    );
    io.now = deadline;
    for timer in io.due() {
        client.on_timer(&mut io, timer);
        client.after_event(&mut io);
    }
    assert_eq!(client.circuit_log.len(), first.len());
    assert!((client.circuit_log.iter()).all(|c| c.outcome == CircuitOutcome::Timeout));
    // Each was torn down towards the guard with a DESTROY.
    let sent = cells(&io, socket);
    let mut destroyed: Vec<u32> = (sent.iter())
        .filter(|c| c.command == CellCommand::Destroy)
        .map(|c| c.circ_id)
        .collect();
    destroyed.sort_unstable();
    let mut expected = first.clone();
    expected.sort_unstable();
    assert_eq!(destroyed, expected);
    // The download had received nothing, so it did not fail: it waits on a new circuit
    // (which may take a freed id).
    assert!(client.finished.is_empty());
    let torn = (sent.iter())
        .position(|c| c.command == CellCommand::Destroy)
        .unwrap();
    let fresh = (sent[torn..].iter())
        .filter(|c| c.command == CellCommand::Create2)
        .count();
    assert!(fresh >= 1, "{sent:?}");
}

#[test]
fn a_stream_no_path_can_serve_fails_with_no_path_at_its_timeout() {
    let (mut client, mut io) = client(false);
    // Without an exit no circuit can be launched, so no channel is opened either.
    assert!(io.connects().is_empty());
    // The client keeps trying once a second while the stream waits.
    assert!(io
        .timers
        .iter()
        .any(|(_, t)| matches!(t, ClientTimer::RetryPending)));
    io.now = TIMEOUT;
    for timer in io.due() {
        client.on_timer(&mut io, timer);
        client.after_event(&mut io);
    }
    assert_eq!(client.finished.len(), 1);
    let log = &client.finished[0];
    assert_eq!(log.outcome, DownloadOutcome::Error("no path"));
    assert_eq!((log.size, log.server, log.start), (SIZE, SERVER, 0));
    assert_eq!(log.path, None);
}
