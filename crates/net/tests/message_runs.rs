//! Messages on a TCP connection: runs of equal messages written one by one or at once
//! (`write_messages`) arrive as the same messages in the same order, equal ones grouped; and
//! messages marked after plain bytes (a file server's response, then anything else) arrive at
//! the read that completes them, though the receiver leaves the pipe alone until its peer says
//! it has marked one.

use std::sync::Arc;

use onionlab_engine::time::{millis, secs};
use onionlab_engine::{Context, EngineConfig, Host, HostId, Simulation};
use onionlab_net::topology::Graph;
use onionlab_net::{
    HostPlacement, NetEvent, NetStack, Network, NetworkConfig, SocketEvent, SocketId,
};

const PORT: u16 = 9001;
const CELL: u64 = 514;
/// Batch sizes the sender cycles through.
const BATCHES: [u32; 5] = [1, 3, 8, 2, 12];

enum Ev {
    Net(NetEvent<u32>),
    Start,
    /// The sender writes its next batch.
    Write,
}

impl From<NetEvent<u32>> for Ev {
    fn from(e: NetEvent<u32>) -> Self {
        Ev::Net(e)
    }
}

struct Peer {
    stack: NetStack<u32>,
    /// Sender: connection 0 written a message at a time, connection 1 a batch at a time.
    out: Vec<SocketId>,
    batch: usize,
    /// Receiver: the accepted sockets in order, and the messages each delivered, one entry
    /// per message, with the largest run seen.
    accepted: Vec<SocketId>,
    got: [Vec<u32>; 2],
    longest_run: [u32; 2],
}

impl Host for Peer {
    type Event = Ev;
    fn handle(&mut self, ctx: &mut Context<'_, Ev>, event: Ev) {
        match event {
            Ev::Net(e) => self.stack.handle(ctx, e),
            Ev::Start => {
                for _ in 0..2 {
                    let s = self.stack.connect(ctx, 1, PORT);
                    self.out.push(s);
                }
            }
            Ev::Write => {
                let n = BATCHES[self.batch % BATCHES.len()];
                // Every other batch repeats the last one's message, so runs also cross
                // batches.
                let message = (self.batch / 2) as u32;
                let (one, many) = (self.out[0], self.out[1]);
                let fits = |stack: &NetStack<u32>, s| stack.send_space(s) >= CELL * u64::from(n);
                if fits(&self.stack, one) && fits(&self.stack, many) {
                    for _ in 0..n {
                        assert!(self.stack.write_message(one, CELL, message));
                    }
                    self.stack.write_messages(many, CELL, message, n);
                    self.batch += 1;
                }
                for s in [one, many] {
                    self.stack.flush(ctx, s);
                }
                if ctx.now() < secs(2) {
                    ctx.schedule_in(millis(3), Ev::Write);
                }
            }
        }
        while let Some(e) = self.stack.poll_event() {
            match e {
                SocketEvent::Accepted { socket, .. } => self.accepted.push(socket),
                SocketEvent::Message {
                    socket,
                    message,
                    count,
                } => {
                    let i = self.accepted.iter().position(|&s| s == socket).unwrap();
                    self.got[i].extend((0..count).map(|_| message));
                    self.longest_run[i] = self.longest_run[i].max(count);
                }
                _ => {}
            }
        }
    }
}

const GML: &str = r#"graph [
  directed 0
  node [ id 1 host_bandwidth_up "50 Mbit" host_bandwidth_down "50 Mbit" ]
  node [ id 2 host_bandwidth_up "50 Mbit" host_bandwidth_down "50 Mbit" ]
  edge [ source 1 target 1 latency "1 ms" ]
  edge [ source 2 target 2 latency "1 ms" ]
  edge [ source 1 target 2 latency "20 ms" ]
]
"#;

/// Two hosts 20 ms apart, host 1 listening on `PORT`, on one thread.
fn simulation<P: Host<Event = Ev>>(seed: u64, peer: impl Fn(NetStack<u32>) -> P) -> Simulation<P> {
    let graph = Graph::from_gml(GML, "runs.gml").unwrap();
    let placements: Vec<_> = (0..2)
        .map(|n| HostPlacement {
            node: graph.node_index(n + 1).unwrap(),
            bandwidth_up: None,
            bandwidth_down: None,
        })
        .collect();
    let net = Arc::new(Network::build(&graph, &placements, NetworkConfig::default()).unwrap());
    let hosts = (0..2)
        .map(|h: HostId| {
            let mut stack = NetStack::new(h, net.clone());
            if h == 1 {
                stack.listen(PORT).unwrap();
            }
            peer(stack)
        })
        .collect();
    Simulation::new(
        EngineConfig {
            seed,
            threads: 1,
            lookahead: net.lookahead(),
            trace: false,
            work_stealing: false,
        },
        hosts,
    )
}

#[test]
fn messages_written_at_once_arrive_as_the_same_messages_written_one_by_one() {
    let mut sim = simulation(3, |stack| Peer {
        stack,
        out: Vec::new(),
        batch: 0,
        accepted: Vec::new(),
        got: [Vec::new(), Vec::new()],
        longest_run: [0, 0],
    });
    sim.schedule(0, 0, Ev::Start);
    sim.schedule(0, millis(200), Ev::Write);
    sim.run_until(secs(3));
    let sender = sim.host(0);
    let written: u32 = (0..sender.batch).map(|b| BATCHES[b % BATCHES.len()]).sum();
    assert!(written > 1000, "only {written} messages written");
    let receiver = sim.host(1);
    assert_eq!(receiver.got[0].len(), written as usize);
    assert_eq!(receiver.got[0], receiver.got[1]);
    // Equal messages arrive grouped, whichever way they were written.
    assert!(
        receiver.longest_run.iter().all(|&n| n > 1),
        "{:?}",
        receiver.longest_run
    );
}

/// Sends plain bytes, then marks their end, then writes messages of its own; receives them.
struct PlainThenMarked {
    stack: NetStack<u32>,
    /// Sender: its socket, the bytes written so far and the messages marked (each message
    /// is the stream offset where it ends).
    out: Option<SocketId>,
    written: u64,
    marked: Vec<u32>,
    /// Receiver: bytes read before the latest read and after it, and each message with the
    /// bytes read when it was handed over.
    read_before: u64,
    read: u64,
    got: Vec<(u32, u64, u64)>,
}

impl Host for PlainThenMarked {
    type Event = Ev;
    fn handle(&mut self, ctx: &mut Context<'_, Ev>, event: Ev) {
        match event {
            Ev::Net(e) => self.stack.handle(ctx, e),
            Ev::Start => self.out = Some(self.stack.connect(ctx, 1, PORT)),
            Ev::Write => {
                let s = self.out.unwrap();
                let now = ctx.now();
                if now < millis(800) {
                    // Plain bytes, never marked.
                    self.written += self.stack.write(s, 3_000);
                } else if now < millis(900) {
                    // Plain bytes whose end is then marked: the message is those bytes.
                    self.written += self.stack.write(s, 1_000);
                    self.stack.mark(s, self.written as u32);
                    self.marked.push(self.written as u32);
                } else if self.stack.send_space(s) >= CELL {
                    // Then messages of their own.
                    let end = (self.written + CELL) as u32;
                    assert!(self.stack.write_message(s, CELL, end));
                    self.written += CELL;
                    self.marked.push(end);
                }
                self.stack.flush(ctx, s);
                if now < secs(2) {
                    ctx.schedule_in(millis(2), Ev::Write);
                }
            }
        }
        while let Some(e) = self.stack.poll_event() {
            match e {
                SocketEvent::Data { bytes, .. } => {
                    self.read_before = self.read;
                    self.read += bytes;
                }
                SocketEvent::Message { message, count, .. } => {
                    for _ in 0..count {
                        self.got.push((message, self.read_before, self.read));
                    }
                }
                _ => {}
            }
        }
    }
}

#[test]
fn messages_marked_after_plain_bytes_arrive_at_the_read_that_completes_them() {
    let mut sim = simulation(5, |stack| PlainThenMarked {
        stack,
        out: None,
        written: 0,
        marked: Vec::new(),
        read_before: 0,
        read: 0,
        got: Vec::new(),
    });
    sim.schedule(0, 0, Ev::Start);
    sim.schedule(0, millis(100), Ev::Write);
    sim.run_until(secs(4));
    let sender = sim.host(0);
    let receiver = sim.host(1);
    assert_eq!(receiver.read, sender.written, "every byte arrives");
    assert!(
        sender.marked.len() > 100,
        "{} messages",
        sender.marked.len()
    );
    let got: Vec<u32> = receiver.got.iter().map(|&(m, _, _)| m).collect();
    assert_eq!(got, sender.marked, "every message, once, in order");
    for &(end, before, after) in &receiver.got {
        // Handed over by the read that took the stream past the message's end.
        assert!(
            before < u64::from(end) && u64::from(end) <= after,
            "message ending at {end} handed over after reading {before}..{after}"
        );
    }
}
