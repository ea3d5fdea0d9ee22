//! Runs of equal messages: written one by one or at once (`write_messages`), a TCP
//! connection delivers the same messages in the same order, and equal ones arrive grouped.

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
    /// The sender writes its next batch on both connections.
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

#[test]
fn messages_written_at_once_arrive_as_the_same_messages_written_one_by_one() {
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
            Peer {
                stack,
                out: Vec::new(),
                batch: 0,
                accepted: Vec::new(),
                got: [Vec::new(), Vec::new()],
                longest_run: [0, 0],
            }
        })
        .collect();
    let mut sim = Simulation::new(
        EngineConfig {
            seed: 3,
            threads: 1,
            lookahead: net.lookahead(),
            trace: false,
            work_stealing: false,
        },
        hosts,
    );
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
