//! The engine under failure: panicking models, absurd delays, interrupts of rounds that do not
//! end, more threads than hosts.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use onionlab_engine::time::{millis, secs};
use onionlab_engine::{
    Context, EngineConfig, Host, HostId, Partition, RunControl, SimTime, Simulation,
};
use rand::RngExt;

fn engine(threads: usize) -> EngineConfig {
    EngineConfig {
        seed: 9,
        threads,
        lookahead: millis(1),
        trace: true,
        work_stealing: true,
    }
}

/// Runs `f` on its own thread and fails the test if it has not finished after `limit`
/// (a deadlocked run would otherwise hang the test suite).
fn within<T: Send + 'static>(limit: Duration, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(limit)
        .expect("the run did not return in time (deadlock or hang)")
}

/// Ticks every millisecond, sending a message to the next host each tick; panics at its
/// `panic_at` tick if it has one.
struct Ticker {
    hosts: u32,
    panic_at: Option<SimTime>,
    ticks: Vec<SimTime>,
    heard: u64,
}

#[derive(Clone, Copy)]
enum Ev {
    Tick,
    Hello,
}

impl Host for Ticker {
    type Event = Ev;
    fn handle(&mut self, ctx: &mut Context<'_, Ev>, ev: Ev) {
        match ev {
            Ev::Tick => {
                let now = ctx.now();
                self.ticks.push(now);
                if self.panic_at == Some(now) {
                    panic!("boom at host {} at {now} ns", ctx.host());
                }
                let next = (ctx.host() + 1) % self.hosts;
                ctx.send(next, now + millis(1), Ev::Hello);
                ctx.schedule_in(millis(1), Ev::Tick);
            }
            Ev::Hello => self.heard += 1,
        }
    }
}

fn tickers(threads: usize, panics: &[(HostId, SimTime)]) -> Simulation<Ticker> {
    let hosts = 8u32;
    let models = (0..hosts)
        .map(|h| Ticker {
            hosts,
            panic_at: panics.iter().find(|p| p.0 == h).map(|p| p.1),
            ticks: Vec::new(),
            heard: 0,
        })
        .collect();
    let mut sim = Simulation::new(engine(threads), models);
    for h in 0..hosts {
        sim.schedule(h, 0, Ev::Tick);
    }
    sim
}

fn message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default()
}

/// What a run that panicked left behind: the message, the time reached, each host's ticks,
/// and the trace hash.
type Aftermath = (String, SimTime, Vec<Vec<SimTime>>, u64);

fn run_to_panic(threads: usize, panics: Vec<(HostId, SimTime)>) -> Aftermath {
    within(Duration::from_secs(60), move || {
        let mut sim = tickers(threads, &panics);
        let outcome = catch_unwind(AssertUnwindSafe(|| sim.run_until(secs(10))));
        let payload = outcome.expect_err("the model's panic must surface from run_until");
        let ticks = sim.hosts().map(|t| t.ticks.clone()).collect();
        (message(&*payload), sim.now(), ticks, sim.trace_hash())
    })
}

#[test]
fn a_panic_on_any_worker_surfaces_from_run_until_with_its_message() {
    // Host 3 belongs to worker 1 of 2 and worker 3 of 4 (round robin); host 0 to worker 0.
    for host in [3, 0] {
        let at = millis(5);
        let one = run_to_panic(1, vec![(host, at)]);
        assert_eq!(one.0, format!("boom at host {host} at {at} ns"));
        // The run stopped at the end of the round of the panic: its start is the time
        // reached, the failed host's last tick is the one that panicked, and no host ran
        // beyond that round (1 ms wide, starting at 5 ms).
        assert_eq!(one.1, at);
        assert_eq!(*one.2[host as usize].last().unwrap(), at);
        for ticks in &one.2 {
            assert_eq!(
                *ticks.last().unwrap(),
                at,
                "a host ran past the failed round"
            );
        }
        for threads in [2, 4] {
            let many = run_to_panic(threads, vec![(host, at)]);
            assert_eq!(one, many, "host {host}, {threads} threads");
        }
    }
}

#[test]
fn of_several_panics_in_one_round_the_lowest_host_surfaces() {
    for threads in [1, 2, 4] {
        let (msg, reached, _, _) = run_to_panic(threads, vec![(6, millis(7)), (5, millis(7))]);
        assert_eq!(msg, format!("boom at host 5 at {} ns", millis(7)));
        assert_eq!(reached, millis(7));
    }
}

#[test]
fn a_simulation_can_be_read_after_a_panic() {
    let sim = within(Duration::from_secs(60), || {
        let mut sim = tickers(2, &[(1, millis(3))]);
        assert!(catch_unwind(AssertUnwindSafe(|| sim.run_until(secs(1)))).is_err());
        sim
    });
    // Host 2 heard host 1's messages sent at 0, 1 and 2 ms (due 1, 2, 3 ms).
    assert_eq!(sim.host(2).heard, 3);
    assert_eq!(sim.control().sim_time(), millis(3));
}

/// Schedules one timer with a delay that overflows any clock, then ticks once a second.
struct Far {
    far_fired: bool,
    ticks: u64,
}

#[derive(Clone, Copy)]
enum FarEv {
    Start,
    Far,
    Tick,
}

impl Host for Far {
    type Event = FarEv;
    fn handle(&mut self, ctx: &mut Context<'_, FarEv>, ev: FarEv) {
        match ev {
            FarEv::Start => {
                ctx.schedule_in(u64::MAX, FarEv::Far);
                ctx.schedule_in(u64::MAX / 2 + 12_345, FarEv::Far);
                ctx.schedule_in(secs(1), FarEv::Tick);
            }
            FarEv::Far => self.far_fired = true,
            FarEv::Tick => {
                self.ticks += 1;
                ctx.schedule_in(secs(1), FarEv::Tick);
            }
        }
    }
}

#[test]
fn delays_beyond_the_end_of_time_saturate_and_never_fire() {
    let mut sim = Simulation::new(
        engine(2),
        vec![
            Far {
                far_fired: false,
                ticks: 0,
            },
            Far {
                far_fired: false,
                ticks: 0,
            },
        ],
    );
    sim.schedule(0, secs(3), FarEv::Start);
    sim.schedule(1, 0, FarEv::Start);
    let stats = within(Duration::from_secs(60), move || {
        let stats = sim.run_until(secs(100));
        (stats, sim)
    });
    let (stats, sim) = stats;
    assert_eq!(stats.sim_time, secs(100));
    assert!(!stats.interrupted);
    for h in 0..2 {
        assert!(!sim.host(h).far_fired, "host {h}: a saturated timer fired");
    }
    assert_eq!(sim.host(0).ticks, 96);
    assert_eq!(sim.host(1).ticks, 99);
    // The far events are still queued: 2 per host, plus each host's next tick.
    assert_eq!(sim.pending_events(), 6);
}

#[test]
fn a_run_whose_next_event_is_beyond_stop_reaches_stop() {
    let mut sim = Simulation::new(
        engine(2),
        vec![
            Far {
                far_fired: false,
                ticks: 0,
            },
            Far {
                far_fired: false,
                ticks: 0,
            },
        ],
    );
    sim.schedule(0, secs(50), FarEv::Tick);
    sim.schedule(1, u64::MAX, FarEv::Far);
    let stats = sim.run_until(secs(10));
    assert_eq!(
        (stats.sim_time, stats.rounds, stats.events),
        (secs(10), 0, 0)
    );
    assert_eq!(sim.now(), secs(10));
    assert_eq!(sim.control().sim_time(), secs(10));
    let stats = sim.run_until(secs(55));
    assert_eq!(stats.sim_time, secs(55));
    assert_eq!(sim.host(0).ticks, 5);
    assert!(!sim.host(1).far_fired);
    // An event at the end of time never runs, even in a run to the end of time.
    let mut last = Simulation::new(
        engine(2),
        vec![Far {
            far_fired: false,
            ticks: 0,
        }],
    );
    last.schedule(0, u64::MAX, FarEv::Far);
    let (last, stats) = within(Duration::from_secs(60), move || {
        let stats = last.run_until(u64::MAX);
        (last, stats)
    });
    assert_eq!(stats.sim_time, u64::MAX);
    assert!(!last.host(0).far_fired);
}

/// One host whose only event is far past the runs of the tests below.
fn far_only() -> Simulation<Far> {
    let mut sim = Simulation::new(
        engine(1),
        vec![Far {
            far_fired: false,
            ticks: 0,
        }],
    );
    sim.schedule(0, secs(1_000), FarEv::Tick);
    sim
}

#[test]
fn an_interrupt_counts_even_when_there_is_nothing_to_run() {
    let mut sim = far_only();
    let first = sim.run_until(secs(10));
    assert!(!first.interrupted);
    sim.control().interrupt();
    let second = sim.run_until(secs(20));
    assert!(second.interrupted);
    assert_eq!(
        second.sim_time,
        secs(10),
        "an interrupted run does not advance"
    );
}

#[test]
fn a_control_made_before_the_simulation_stops_it() {
    let control = RunControl::default();
    let mut sim = far_only();
    sim.set_control(control.clone());
    assert!(!control.is_interrupted());
    assert!(!sim.run_until(secs(10)).interrupted);
    assert_eq!(control.sim_time(), secs(10), "the handle follows the run");
    control.interrupt();
    assert!(control.is_interrupted());
    let stopped = sim.run_until(secs(20));
    assert!(stopped.interrupted);
    assert_eq!(stopped.sim_time, secs(10));
}

/// A broken model: once started it schedules itself again at the same instant forever, so
/// its round never ends.
struct Spinner {
    events: u64,
}

impl Host for Spinner {
    type Event = ();
    fn handle(&mut self, ctx: &mut Context<'_, ()>, _: ()) {
        self.events += 1;
        ctx.schedule_in(0, ());
    }
}

#[test]
fn an_interrupt_stops_a_round_that_never_ends() {
    for threads in [1, 2] {
        let models = (0..3).map(|_| Spinner { events: 0 }).collect();
        let mut sim = Simulation::new(engine(threads), models);
        sim.schedule(1, millis(2), ());
        let control = sim.control();
        let handle = thread::spawn(move || {
            let stats = sim.run_until(secs(10));
            (stats, sim)
        });
        thread::sleep(Duration::from_millis(50));
        control.interrupt();
        let (tx, rx) = mpsc::channel();
        thread::spawn(move || {
            let _ = tx.send(handle.join());
        });
        let (stats, sim) = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("the interrupt did not stop the spinning round")
            .unwrap();
        assert!(stats.interrupted);
        // The round (starting at 2 ms) was cut short: its start is the time reached.
        assert_eq!(stats.sim_time, millis(2));
        assert!(sim.host(1).events > 1000);
        // The event the spinner gave itself last is kept for the next run.
        assert_eq!(sim.pending_events(), 1);
    }
}

struct Idle;

impl Host for Idle {
    type Event = ();
    fn handle(&mut self, _: &mut Context<'_, ()>, _: ()) {}
}

#[test]
fn never_more_workers_than_hosts() {
    let mut sim = Simulation::new(engine(64), (0..3).map(|_| Idle).collect());
    assert_eq!(sim.config().threads, 3);
    sim.schedule(2, 5, ());
    let stats = sim.run_until(secs(1));
    assert_eq!(stats.workers.len(), 3);
    assert_eq!(stats.events, 1);
    // No hosts at all: one worker.
    let mut empty: Simulation<Idle> = Simulation::new(engine(8), Vec::new());
    assert_eq!(empty.config().threads, 1);
    assert_eq!(empty.run_until(secs(1)).sim_time, secs(1));
    // An explicit partition with idle workers loses them.
    let partition = Partition::from_assignment(vec![5, 2, 5], 9);
    let sim = Simulation::with_partition(engine(9), (0..3).map(|_| Idle).collect(), partition);
    assert_eq!(sim.config().threads, 2);
}

#[test]
fn time_conversions_saturate() {
    assert_eq!(millis(u64::MAX / 1000), u64::MAX);
    assert_eq!(secs(u64::MAX / 2), u64::MAX);
    assert_eq!(millis(18_446_744_073_710), u64::MAX);
    assert_eq!(millis(3), 3_000_000);
    assert_eq!(onionlab_engine::time::secs_f64(1e30), u64::MAX);
    assert_eq!(onionlab_engine::time::secs_f64(f64::NAN), 0);
}

/// PHOLD's closed system: every event handled makes exactly one more, to a random host (most
/// often another), so however a run stops, the events pending are the jobs it started with.
/// A host given `control` interrupts the run itself once its clock reaches the time given
/// with it.
struct Juggler {
    hosts: u32,
    control: Option<(RunControl, SimTime)>,
    last: SimTime,
}

impl Host for Juggler {
    type Event = ();
    fn handle(&mut self, ctx: &mut Context<'_, ()>, _: ()) {
        self.last = ctx.now();
        if let Some((control, at)) = &self.control {
            if ctx.now() >= *at {
                control.interrupt();
            }
        }
        let dst = ctx.rng().random_range(0..self.hosts);
        let at = ctx.now() + millis(1) + ctx.rng().random_range(0..millis(2));
        if dst == ctx.host() {
            ctx.schedule_at(at, ());
        } else {
            ctx.send(dst, at, ());
        }
    }
}

#[test]
fn a_round_cut_short_keeps_every_message_its_hosts_had_not_taken() {
    const HOSTS: u32 = 1000;
    // Enough jobs that a round holds more events than a worker handles between two looks at
    // the interrupt flag: on one thread the interrupt raised by host 0, the first host of its
    // round, is seen before that round ends.
    const JOBS: u32 = 12;
    for threads in [1, 2, 3] {
        let models = (0..HOSTS)
            .map(|_| Juggler {
                hosts: HOSTS,
                control: None,
                last: 0,
            })
            .collect();
        let mut sim = Simulation::new(engine(threads), models);
        sim.host_mut(0).control = Some((sim.control(), millis(50)));
        for host in 0..HOSTS {
            for job in 0..JOBS {
                sim.schedule(host, u64::from(job) * 100_000, ());
            }
        }
        let stats = sim.run_until(secs(10));
        assert!(stats.interrupted, "{threads} threads");
        assert!(stats.sim_time >= millis(49) && stats.sim_time <= millis(51));
        if threads == 1 {
            // The round stopped partway: its start is the time reached, and hosts ran in it.
            assert!(sim.hosts().any(|h| h.last >= stats.sim_time));
            assert!(!sim.hosts().all(|h| h.last >= stats.sim_time));
        }
        assert_eq!(
            sim.pending_events(),
            (HOSTS * JOBS) as usize,
            "{threads} threads: a message or event was lost or doubled"
        );
    }
}
