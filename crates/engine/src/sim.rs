//! The round loop: conservative parallel simulation with a deterministic barrier exchange.
//!
//! Time advances in rounds `[start, start + lookahead)`. Because no message between two hosts
//! can arrive sooner than `lookahead` after it was sent, every host can run all of its events in
//! the round without hearing from anyone else. Each worker files the messages addressed to its
//! own hosts in its calendar (`calendar.rs`): a message sent by a host it runs (its own, or one
//! stolen from another worker) at once, one sent by a host another worker runs at the barrier,
//! out of that worker's outbox. At the start of the round they fall due in, it hands each host
//! its messages, which the host takes merged with its own queue. Both are ordered by (time,
//! source host, source sequence), so the result is the same whatever the thread count or the
//! timing of threads (a host's one leading event, `Context::schedule_leading_at`, takes the
//! sequence number below all of its others). A host that nothing reaches within several
//! lookaheads runs that many rounds at a time (its span; see `Simulation::set_min_delays`).

use std::any::Any;
use std::cell::UnsafeCell;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::agenda::Agenda;
use crate::barrier::SpinBarrier;
use crate::calendar::{Calendar, Chunk, Message, Slot, CHUNK};
use crate::partition::Partition;
use crate::queue::{key_source, order_key, Due, EventQueue, FIRST_SEQ, LEADING_SEQ, MAX_HOSTS};
use crate::rng::{host_rng, HostRng};
use crate::time::{SimDuration, SimTime};
use crate::HostId;

/// A simulated host: its whole state, driven one event at a time.
///
/// Hosts never share state; everything they learn about each other arrives as events. That is
/// what lets the engine run them on any worker and move them between workers.
pub trait Host: Send {
    /// What this host's events and the messages sent to it carry: timers it set itself and
    /// messages from other hosts alike.
    type Event: Send;
    /// Handles one event at simulated time `ctx.now()`, acting on the world only through
    /// `ctx` (new events for itself, messages to other hosts).
    fn handle(&mut self, ctx: &mut Context<'_, Self::Event>, event: Self::Event);

    /// Asks the cache for the state this host's next event will most likely read first (with
    /// [`prefetch`]), while the worker still runs an earlier host. On a large network a host's
    /// state has left the cache between its runs, and reaching it is a chain of misses the
    /// processor cannot overlap with anything else; started early, they overlap with that
    /// host's work. It must only form addresses, never read through them: the state it names
    /// is not in the cache yet, and reading it would wait for it.
    fn prefetch(&self) {}

    /// Asks the cache for what handling `event`, one of the host's coming messages, will
    /// most likely read first, while the worker still handles the host's earlier events.
    /// Unlike [`Host::prefetch`] it is called on the running host, whose own fields are in
    /// the cache and may be read; what they point to must only be named, as there.
    fn prefetch_event(&self, _event: &Self::Event) {}
}

/// What a host may do while handling an event.
pub struct Context<'a, E> {
    now: SimTime,
    host: HostId,
    /// The order key of the event being handled.
    key: u64,
    /// The end of the host's run: the round's end, or later for a host whose messages all
    /// come from further away than a lookahead (see `Simulation::set_min_delays`).
    run_end: SimTime,
    /// The end of the round: a message due before it cannot be delivered in time.
    round_end: SimTime,
    lookahead: SimDuration,
    seq: &'a mut u64,
    queue: &'a mut EventQueue<E>,
    /// The earliest time this host has pushed into `queue` in its current run (`NOT_DUE` if
    /// none): the round loop reads the queue's heap only when that, or the host's agenda
    /// entry, says something in it may be due.
    queued_min: &'a mut SimTime,
    /// Events the host scheduled for itself inside the round (see `schedule_at`).
    held: &'a mut Vec<Due<E>>,
    rng: &'a mut HostRng,
    out: &'a mut Outbox<E>,
}

impl<E> Context<'_, E> {
    /// The current simulated time.
    #[inline]
    pub fn now(&self) -> SimTime {
        self.now
    }

    /// The host whose event is being handled.
    #[inline]
    pub fn host(&self) -> HostId {
        self.host
    }

    /// The host that created the event being handled: the sender of a message, this host for
    /// what it scheduled for itself (and what the simulation scheduled on it).
    ///
    /// Events due at the same time are handled in order of their creator's id, then of the
    /// order each creator made them in, a leading event (`schedule_leading_at`) before the
    /// rest of its creator's: so a leading event this host schedules for the current time
    /// comes before the current event unless a host with a smaller id sent that one. A model
    /// that stands in for its own leading timer without scheduling it (see the relay's parked
    /// scheduler) decides with this which of the two it would have seen first.
    #[inline]
    pub fn sender(&self) -> HostId {
        key_source(self.key)
    }

    /// The engine's lookahead: the least delay a message to another host may have.
    #[inline]
    pub fn lookahead(&self) -> SimDuration {
        self.lookahead
    }

    /// This host's random stream.
    #[inline]
    pub fn rng(&mut self) -> &mut HostRng {
        self.rng
    }

    #[inline]
    fn next_key(&mut self) -> u64 {
        let key = order_key(self.host, *self.seq);
        *self.seq += 1;
        key
    }

    /// Schedules an event for this host at `time` (not before now).
    ///
    /// Most events a host gives itself fall due within the round: a packet's delivery after
    /// its arrival, the scheduler run after a delivery. Up to `HELD_EVENTS` of them wait in a
    /// short list beside the queue instead of going through the heap and its slab, whose
    /// entries are cache misses on a large network. The round loop takes events from that
    /// list, the queue and the messages in (time, order key) order alike, so where an event
    /// waits never changes the order.
    #[inline]
    pub fn schedule_at(&mut self, time: SimTime, event: E) {
        let key = self.next_key();
        self.schedule_keyed(time, key, event);
    }

    /// Schedules an event for this host at `time` (not before now) that comes before every
    /// other event this host gave itself for the same instant, whenever each was scheduled.
    /// For a periodic timer that a model may stop arming while it knows the runs would do
    /// nothing, and arm again later: armed early or late, it keeps its place among ties.
    /// A host may have at most one such event pending at a time (two would tie exactly).
    #[inline]
    pub fn schedule_leading_at(&mut self, time: SimTime, event: E) {
        self.schedule_keyed(time, order_key(self.host, LEADING_SEQ), event);
    }

    #[inline]
    fn schedule_keyed(&mut self, time: SimTime, key: u64, event: E) {
        debug_assert!(time >= self.now, "event scheduled in the past");
        let time = time.max(self.now);
        if time < self.run_end && self.held.len() < HELD_EVENTS {
            self.held.push(Due { time, key, event });
        } else {
            *self.queued_min = (*self.queued_min).min(time);
            self.queue.push(time, key, event);
        }
    }

    /// Schedules an event for this host `delay` from now. The sum saturates: a delay beyond
    /// the end of time schedules the event at `SimTime::MAX`, which no run reaches.
    #[inline]
    pub fn schedule_in(&mut self, delay: SimDuration, event: E) {
        self.schedule_at(self.now.saturating_add(delay), event);
    }

    /// Sends an event to another host (or to this one through the barrier), due at `time`.
    ///
    /// A message due before the end of the current round cannot be delivered in time; it is
    /// delivered at the round end instead and counted in `RunStats::late_messages`. This only
    /// happens when the lookahead was set above the smallest real latency (a speed/accuracy
    /// trade the caller chose).
    ///
    /// # Panics
    ///
    /// If `dst` was declared to hear from nobody sooner than `k` lookaheads
    /// (`Simulation::set_min_delays`) and `time` is less than its span of rounds ahead: it
    /// might already have run past `time`.
    #[inline]
    pub fn send(&mut self, dst: HostId, time: SimTime, event: E) {
        let class = self.out.class_of[dst as usize] as usize;
        assert!(
            class == 0 || time >= self.now.saturating_add(self.lookahead * span(class)),
            "host {} sent host {dst} a message due in {} ns, sooner than the least delay \
             declared for it ({} rounds of {} ns)",
            self.host,
            time.saturating_sub(self.now),
            span(class),
            self.lookahead
        );
        let key = self.next_key();
        let time = if time < self.round_end {
            self.out.late += 1;
            self.round_end
        } else {
            time
        };
        self.out.sent += 1;
        let worker = self.out.worker_of[dst as usize] as usize;
        let message = Message {
            dst,
            time,
            key,
            event,
        };
        if worker == self.out.own {
            // Due after the round (and after the run of the destination under way, if it has
            // a span), so filed now it is taken exactly as if filed at the barrier.
            self.out.calendars[class].push(message);
        } else {
            self.out.by_worker[worker].push(message);
        }
    }
}

/// Hosts a worker claims from a round list at once: a host's model is read ahead of its run
/// (`Host::prefetch`) only once the worker has claimed it, and one atomic operation serves
/// several hosts. Small, so that stealing still divides a round finely.
const CLAIM_BATCH: usize = 4;

/// How many of a host's coming messages its run announces to the model ahead of taking them
/// (`Host::prefetch_event`): enough for several misses to be under way at once, few enough
/// that what they bring is still in the cache when the message is handled.
const MESSAGES_AHEAD: usize = 4;

/// Events a host may hold beside its queue within a round (`Context::schedule_at`). The
/// round loop scans them for the earliest, so the list stays short.
const HELD_EVENTS: usize = 8;

/// Classes of hosts by span, the rounds one run of theirs covers: 1, 2, 4 and 8 (see
/// `Simulation::set_min_delays`). Longer spans would save little more: most of what a run of
/// two or four rounds saves is the cold start of the host's state, paid once instead of two
/// or four times.
const SPAN_CLASSES: usize = 4;

/// The rounds a run of a host of span class `class` covers.
#[inline]
fn span(class: usize) -> u64 {
    1 << class
}

/// A worker's messages created this round: those to hosts of other workers bucketed by that
/// worker, those to its own hosts filed at once in its calendars.
struct Outbox<E> {
    worker_of: Arc<[u32]>,
    /// Each host's span class, to check that no message is due inside a run of its
    /// destination that may already be under way, and to find its calendar.
    class_of: Arc<[u8]>,
    /// The worker whose outbox this is.
    own: usize,
    /// That worker's calendars, one per span class (lent by the simulation for the run).
    /// Messages between its own hosts go straight in: through the mailbox they were copied
    /// twice more and read back cold at the barrier, 3% of web-6876's time on one thread.
    calendars: Vec<Calendar<E>>,
    /// Messages to other workers' hosts, by worker (this worker's own bucket stays empty).
    by_worker: Vec<Vec<Message<E>>>,
    sent: u64,
    late: u64,
}

struct HostSlot<H: Host> {
    model: H,
    queue: EventQueue<H::Event>,
    rng: HostRng,
    seq: u64,
    trace: u64,
    /// The time under which the host stands in its owner's agenda (`NOT_DUE`: not there, or
    /// taken into the current round). An agenda entry with another time is stale.
    due: SimTime,
}

/// `HostSlot::due` of a host with no agenda entry.
const NOT_DUE: SimTime = SimTime::MAX;

/// Hosts shared between workers. Each host is touched only by the worker its partition names,
/// in both phases of a round, and workers meet at a barrier between phases; that discipline is
/// what makes the unsynchronised access below sound.
struct HostTable<H: Host> {
    slots: Vec<UnsafeCell<HostSlot<H>>>,
}

unsafe impl<H: Host> Sync for HostTable<H> {}

impl<H: Host> HostTable<H> {
    /// # Safety
    /// The caller must be the worker that owns `host` in the current partition, and must not
    /// hold another reference to the same slot.
    #[allow(clippy::mut_from_ref)]
    unsafe fn slot(&self, host: HostId) -> &mut HostSlot<H> {
        &mut *self.slots[host as usize].get()
    }

    /// Asks the cache for what listing a round reads of a host's slot: its agenda time and
    /// its queue's heap.
    #[inline]
    fn prefetch_agenda_fields(&self, host: HostId) {
        let slot = self.slots[host as usize].get();
        // SAFETY: only addresses are formed, no reference, and a prefetch reads nothing the
        // program can observe.
        let (due, queue) = unsafe { (&raw const (*slot).due, &raw const (*slot).queue) };
        prefetch(due, std::mem::size_of::<SimTime>());
        prefetch(queue, std::mem::size_of::<EventQueue<H::Event>>());
    }
}

/// Engine settings.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// Scenario seed; every host's random stream derives from it and the host id.
    pub seed: u64,
    /// Worker threads.
    pub threads: usize,
    /// Round width. Must not exceed the smallest host-to-host delay for exact results.
    pub lookahead: SimDuration,
    /// Keep a running hash of every host's processed events (see `Simulation::trace_hash`).
    pub trace: bool,
    /// Let a worker that has run all its hosts for a round run other workers' hosts that have
    /// not started it yet. Results are the same either way; only the wall time differs.
    pub work_stealing: bool,
}

/// Per-worker time accounting.
#[derive(Clone, Debug, Default)]
pub struct WorkerStats {
    /// Hosts the partition gives this worker (it owns their queues and messages).
    pub hosts: usize,
    /// Events this worker handled, its own hosts' and stolen ones' alike.
    pub events: u64,
    /// Wall-clock time the worker spent outside the barrier waits.
    pub busy: Duration,
    /// Wall-clock time the worker spent waiting at the barrier for the others.
    pub blocked: Duration,
    /// Host rounds this worker ran for other workers (a host run in ten rounds counts ten).
    pub stolen: u64,
    /// Runs of hosts: a host that runs in a round counts one, however many rounds its span
    /// covers (see `Simulation::set_min_delays`).
    pub runs: u64,
}

/// What a run did and how long it took.
#[derive(Clone, Debug, Default)]
pub struct RunStats {
    /// Events handled over all hosts.
    pub events: u64,
    /// Rounds run, each at most one lookahead of simulated time (stretches with no event are
    /// skipped, not run).
    pub rounds: u64,
    /// Messages between hosts (including a host's messages to itself through the barrier).
    pub messages: u64,
    /// Messages due before their round ended and delivered at the round end instead.
    pub late_messages: u64,
    /// Wall-clock time the run took.
    pub wall: Duration,
    /// Simulated time reached: the end of the last round run, or the stop time.
    pub sim_time: SimTime,
    /// True if the run stopped because of an interrupt rather than reaching its stop time.
    pub interrupted: bool,
    /// Each worker's accounting, by worker index.
    pub workers: Vec<WorkerStats>,
}

/// Handles for observing and stopping a run from another thread (e.g. a progress bar or a
/// Ctrl-C handler).
///
/// An interrupt stops the run at the next round boundary. Workers also look at it every
/// `INTERRUPT_CHECK_EVENTS` events within a round, so that a round that does not end (a model
/// that keeps scheduling events at one instant) can still be stopped; such a round is cut
/// short and the run reports the round's start as the time reached. Once set, the interrupt
/// stays set: later `run_until` calls return at once (after at most one round).
#[derive(Clone, Debug, Default)]
pub struct RunControl {
    interrupt: Arc<AtomicBool>,
    progress: Arc<AtomicU64>,
}

impl RunControl {
    /// Asks the run to stop at the next round boundary.
    pub fn interrupt(&self) {
        self.interrupt.store(true, Ordering::Relaxed);
    }

    /// Whether [`RunControl::interrupt`] has been called: what work done before the run (the
    /// network's construction) looks at to stop early.
    pub fn is_interrupted(&self) -> bool {
        self.interrupt.load(Ordering::Relaxed)
    }

    /// The start of the round being run, in simulated nanoseconds.
    pub fn sim_time(&self) -> SimTime {
        self.progress.load(Ordering::Relaxed)
    }
}

/// A simulation of a set of hosts of one model type.
pub struct Simulation<H: Host> {
    config: EngineConfig,
    hosts: HostTable<H>,
    partition: Partition,
    /// Each worker's messages not yet due, by the span class of their destination.
    calendars: Vec<Vec<Calendar<H::Event>>>,
    /// Each host's span class (see `set_min_delays`); all 0 unless that was called.
    class_of: Arc<[u8]>,
    control: RunControl,
    /// Time up to which every host has run.
    clock: SimTime,
}

impl<H: Host> Simulation<H> {
    /// Creates a simulation of `models` (host id = index) with hosts dealt round-robin to workers
    /// (never more workers than hosts).
    pub fn new(config: EngineConfig, models: Vec<H>) -> Self {
        let partition = Partition::round_robin(models.len(), config.threads);
        Self::with_partition(config, models, partition)
    }

    /// Creates a simulation with an explicit partition. Workers the partition gives no host
    /// are dropped, so a run never has more workers than hosts; `config().threads` is the
    /// number of workers actually used.
    pub fn with_partition(mut config: EngineConfig, models: Vec<H>, partition: Partition) -> Self {
        assert!(models.len() < MAX_HOSTS, "at most {MAX_HOSTS} hosts");
        assert_eq!(
            partition.hosts(),
            models.len(),
            "partition does not cover every host"
        );
        assert!(config.lookahead > 0, "lookahead must be positive");
        let partition = partition.without_idle_workers();
        config.threads = partition.workers();
        let seed = config.seed;
        let host_count = models.len();
        let slots = models
            .into_iter()
            .enumerate()
            .map(|(id, model)| {
                UnsafeCell::new(HostSlot {
                    model,
                    queue: EventQueue::new(),
                    rng: host_rng(seed, id as HostId, 0),
                    seq: FIRST_SEQ,
                    trace: 0,
                    due: NOT_DUE,
                })
            })
            .collect();
        let lookahead = config.lookahead;
        let calendars = (0..config.threads)
            .map(|_| {
                (0..SPAN_CLASSES)
                    .map(|c| Calendar::new(lookahead.saturating_mul(span(c))))
                    .collect()
            })
            .collect();
        let class_of = vec![0; host_count].into();
        Self {
            config,
            hosts: HostTable { slots },
            partition,
            calendars,
            class_of,
            control: RunControl::default(),
            clock: 0,
        }
    }

    /// The settings the simulation runs with (`threads` being the workers actually used).
    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    /// Tells the engine the least delay any message to each host has (`min_delays[host]`),
    /// which lets a host whose messages all come from further away than a lookahead run
    /// several rounds in one go.
    ///
    /// Rounds are one lookahead long because that is the shortest delay between any two
    /// hosts. A host that nothing reaches in less than `k` lookaheads cannot be sent anything
    /// due within `k` lookaheads of the start of a round by any event of that round or later,
    /// so it may run that far ahead: its span is the largest power of two up to `k` (at most
    /// 8), and it runs once every span rounds, over the whole span. On a large network, where
    /// a host's state has left the cache by its next run, each run begins with a chain of
    /// misses on it; a host of span 4 pays them once where it paid them four times. Every
    /// host still takes its events in (time, order key) order with every message due before
    /// the end of its run already in hand, so results are the same as with spans of 1, on
    /// any number of threads; runs are cut at the stop time, so all hosts have reached it
    /// when `run_until` returns.
    ///
    /// A delay shorter than the lookahead anywhere (a lookahead set above the smallest real
    /// delay) gives every host span 1: such a message is delivered at the end of the round it
    /// was sent in, and which round that is would then depend on spans. It must be called
    /// while no message is in flight (before the first run); a message sent with less delay
    /// than its destination's span allows is a bug in the caller, and panics in `send`.
    pub fn set_min_delays(&mut self, min_delays: &[SimDuration]) {
        assert_eq!(
            min_delays.len(),
            self.host_count(),
            "one least delay per host"
        );
        assert!(
            self.calendars.iter().flatten().all(|c| c.len() == 0),
            "spans are set while no message is in flight"
        );
        let lookahead = self.config.lookahead;
        let exact = min_delays.iter().all(|&d| d >= lookahead);
        self.class_of = min_delays
            .iter()
            .map(|&d| {
                let rounds = (d / lookahead).clamp(1, span(SPAN_CLASSES - 1));
                if exact {
                    rounds.ilog2() as u8
                } else {
                    0
                }
            })
            .collect();
    }

    /// How many hosts have each span (1, 2, 4, 8 rounds).
    pub fn span_counts(&self) -> [usize; SPAN_CLASSES] {
        let mut counts = [0; SPAN_CLASSES];
        for &c in self.class_of.iter() {
            counts[c as usize] += 1;
        }
        counts
    }

    /// Turns work stealing on or off for later runs (it changes wall time, never results).
    pub fn set_work_stealing(&mut self, on: bool) {
        self.config.work_stealing = on;
    }

    /// The number of hosts; their ids are `0..host_count()`.
    pub fn host_count(&self) -> usize {
        self.hosts.slots.len()
    }

    /// A handle on this simulation's runs, to interrupt them or follow their progress from
    /// another thread.
    pub fn control(&self) -> RunControl {
        self.control.clone()
    }

    /// Makes `control` the run's handle, so that one made before the simulation (watching
    /// the network's construction) goes on to stop the run. An interrupt it already holds
    /// stops the run at once.
    pub fn set_control(&mut self, control: RunControl) {
        control
            .progress
            .store(self.control.sim_time(), Ordering::Relaxed);
        self.control = control;
    }

    /// The time up to which all hosts have been simulated.
    pub fn now(&self) -> SimTime {
        self.clock
    }

    /// Schedules an initial (or between-runs) event on `host`.
    pub fn schedule(&mut self, host: HostId, time: SimTime, event: H::Event) {
        let slot = self.hosts.slots[host as usize].get_mut();
        let key = order_key(host, slot.seq);
        slot.seq += 1;
        slot.queue.push(time.max(self.clock), key, event);
    }

    /// The model of `host`, to read its state between runs.
    pub fn host(&self, host: HostId) -> &H {
        // SAFETY: `&self` excludes a concurrent run, which needs `&mut self`.
        unsafe { &(*self.hosts.slots[host as usize].get()).model }
    }

    /// The model of `host`, to change its state between runs.
    pub fn host_mut(&mut self, host: HostId) -> &mut H {
        &mut self.hosts.slots[host as usize].get_mut().model
    }

    /// Every host's model in id order.
    pub fn hosts(&self) -> impl Iterator<Item = &H> {
        (0..self.host_count()).map(|h| self.host(h as HostId))
    }

    /// Ends the simulation and gives back the models in id order, for their final state.
    pub fn into_hosts(self) -> Vec<H> {
        self.hosts
            .slots
            .into_iter()
            .map(|s| s.into_inner().model)
            .collect()
    }

    /// Events still pending on all hosts.
    pub fn pending_events(&self) -> usize {
        let messages: usize = self.calendars.iter().flatten().map(Calendar::len).sum();
        (0..self.host_count())
            // SAFETY: as in `host`.
            .map(|h| unsafe { (*self.hosts.slots[h].get()).queue.len() })
            .sum::<usize>()
            + messages
    }

    /// A hash of the sequence of events each host processed (time and origin of each), combined
    /// over hosts in id order. Equal hashes mean every host saw the same events in the same
    /// order. Zero unless `EngineConfig::trace` is set.
    pub fn trace_hash(&self) -> u64 {
        let mut h = 0u64;
        for id in 0..self.host_count() {
            // SAFETY: as in `host`.
            let t = unsafe { (*self.hosts.slots[id].get()).trace };
            h = mix(h ^ t);
        }
        h
    }

    /// Runs every event due before `stop` (or until interrupted). May be called again with a
    /// later stop time to continue.
    ///
    /// Events at or after `stop` stay queued; a run whose next event lies beyond `stop` returns
    /// at once with the stop time reached. If a host's model panics, every worker stops at the
    /// end of that round (the other hosts complete the round, the failed host stops at the
    /// event that panicked) and the panic is resumed here, on the calling thread, with its
    /// original payload; if several hosts panic in the round, the one with the lowest host id
    /// is resumed. `now()` is then the start of that round.
    pub fn run_until(&mut self, stop: SimTime) -> RunStats {
        let started = Instant::now();
        let workers = self.partition.workers();
        // The first round starts at the earliest pending event.
        // Every host stands in its owner's agenda under its next event (hosts may have been
        // given events between runs, and a run cut short leaves stale marks).
        let mut first = u64::MAX;
        for slot in &mut self.hosts.slots {
            let slot = slot.get_mut();
            slot.due = slot.queue.next_time().unwrap_or(NOT_DUE);
            first = first.min(slot.due);
        }
        for calendar in self.calendars.iter().flatten() {
            first = first.min(calendar.next_time());
        }
        if first >= stop {
            // No round to run: there is nothing to do before `stop`. An interrupt still counts,
            // so that a caller running leg after leg of empty time stops when asked.
            let interrupted = self.control.interrupt.load(Ordering::Relaxed);
            if !interrupted {
                self.clock = self.clock.max(stop);
            }
            self.control.progress.store(self.clock, Ordering::Relaxed);
            return RunStats {
                wall: started.elapsed(),
                sim_time: self.clock,
                interrupted,
                workers: (0..workers)
                    .map(|w| WorkerStats {
                        hosts: self.partition.hosts_of(w).len(),
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            };
        }
        let shared = Shared {
            barrier: SpinBarrier::new(workers),
            mail: (0..workers * workers)
                .map(|_| Mutex::new(Vec::new()))
                .collect(),
            next_time: (0..workers).map(|_| AtomicU64::new(u64::MAX)).collect(),
            halt: AtomicBool::new(false),
            failed: AtomicBool::new(false),
            cut_short: AtomicBool::new(false),
            panic: Mutex::new(None),
            worker_of: (0..self.host_count())
                .map(|h| self.partition.worker_of(h as HostId) as u32)
                .collect(),
            lists: (0..workers)
                .map(|w| RoundList::new(self.partition.hosts_of(w).len()))
                .collect(),
        };
        let run = RoundParams {
            stop,
            lookahead: self.config.lookahead,
            trace: self.config.trace,
            steal: self.config.work_stealing && workers > 1,
            // Rounds start on multiples of the lookahead where they can, so that each takes
            // whole slices of the calendars (results do not depend on where rounds start).
            first: align_down(first, self.config.lookahead).max(self.clock),
        };
        let hosts = &self.hosts;
        let partition = &self.partition;
        let control = &self.control;
        let shared = &shared;
        // Every worker, the calling thread's included, runs under `catch_unwind`: a panic that
        // escapes the per-round catch (none should: model panics are caught there) poisons the
        // barrier, so the others return instead of waiting for it forever, and `scope` can
        // join them.
        let class_of = &self.class_of;
        let guarded = move |w: usize, calendars: &mut Vec<Calendar<H::Event>>| {
            catch_unwind(AssertUnwindSafe(|| {
                worker_loop(
                    w, hosts, partition, calendars, class_of, shared, control, run,
                )
            }))
            .inspect_err(|_| shared.barrier.poison())
        };
        let (lead_calendar, other_calendars) = self
            .calendars
            .split_first_mut()
            .expect("a simulation has a worker");
        let results: Vec<Result<WorkerResult, Box<dyn Any + Send>>> = std::thread::scope(|scope| {
            let handles: Vec<_> = other_calendars
                .iter_mut()
                .enumerate()
                .map(|(k, calendars)| scope.spawn(move || guarded(k + 1, calendars)))
                .collect();
            let mut results = vec![guarded(0, lead_calendar)];
            results.extend(handles.into_iter().map(|h| h.join().and_then(|r| r)));
            results
        });
        let mut results = match results.into_iter().collect::<Result<Vec<_>, _>>() {
            Ok(results) => results,
            // An engine failure outside the models: nothing sensible is left to report.
            Err(payload) => resume_unwind(payload),
        };
        let lead = &results[0];
        self.clock = self.clock.max(lead.reached);
        self.control.progress.store(self.clock, Ordering::Relaxed);
        if let Some((_, payload)) = lock(&shared.panic).take() {
            resume_unwind(payload);
        }
        RunStats {
            events: results.iter().map(|r| r.stats.events).sum(),
            rounds: lead.rounds,
            messages: results.iter().map(|r| r.messages).sum(),
            late_messages: results.iter().map(|r| r.late).sum(),
            wall: started.elapsed(),
            sim_time: self.clock,
            interrupted: lead.interrupted,
            workers: results.drain(..).map(|r| r.stats).collect(),
        }
    }
}

/// Locks a mutex whose data stays valid whatever a panicking holder did (mailboxes are
/// swapped whole, the panic slot is written whole).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Workers look at the interrupt flag within a round after every this many events (a power of
/// two). A look is one load of a flag no one writes until the end, so it costs nothing at
/// this rate; what one event may allocate (a client's start opens connections of several
/// KiB) times this many events is what a memory limit can be overshot by once it has fired.
const INTERRUPT_CHECK_EVENTS: u64 = 1 << 8;

struct Shared<E> {
    barrier: SpinBarrier,
    /// `mail[src * workers + dst]`: messages from worker `src` to hosts of worker `dst`.
    mail: Vec<Mutex<Vec<Message<E>>>>,
    /// Each worker's earliest pending event after the exchange.
    next_time: Vec<AtomicU64>,
    halt: AtomicBool,
    /// A host's model panicked this round.
    failed: AtomicBool,
    /// A worker cut this round short because of an interrupt.
    cut_short: AtomicBool,
    /// The panic to resume: the lowest failed host and its payload.
    panic: Mutex<Option<(HostId, Box<dyn Any + Send>)>>,
    worker_of: Arc<[u32]>,
    /// Each worker's hosts due in the current round, which any worker may claim.
    lists: Vec<RoundList<E>>,
}

/// A worker's hosts due in one round, with the messages due to them, claimed one host at a
/// time by the owner and, once it has finished its own list, by other workers (work stealing).
///
/// The owner fills it at the start of a round and publishes it by storing the round's number;
/// a thief reads it only after seeing that number, and every claim of a round happens before
/// the round's first barrier, after which the owner alone reads the results. Claiming through
/// one counter means each host runs exactly once per round, on whichever worker got to it
/// first; since hosts only meet through messages ordered by the simulation itself, which
/// worker that was changes nothing in the results.
struct RoundList<E> {
    /// In ascending host id, so that a round walks the host table in address order.
    hosts: Box<[AtomicU32]>,
    /// `runs[i]`: where the messages to `hosts[i]` lie in `order` (start in the high half,
    /// end in the low half).
    runs: Box<[AtomicU64]>,
    /// `ends[i]`: where the run of `hosts[i]` ends (the round's end, or its span's).
    ends: Box<[AtomicU64]>,
    /// `next[i]`: the time under which `hosts[i]` must be put (back) in its owner's agenda
    /// after it ran, or `NOT_DUE` if no new entry is needed; written by whichever worker ran it.
    /// A host that stopped inside the round (its model panicked, or the run was interrupted)
    /// gets `NOT_DUE`: the run halts after the round and the next one files every host anew,
    /// whereas the slot's value from an earlier round would file it in the past.
    next: Box<[AtomicU64]>,
    len: AtomicUsize,
    cursor: AtomicUsize,
    /// The round (counted from 1) whose list this is.
    round: AtomicU64,
    /// The round's messages to this worker's hosts, in the calendars' chunks they lay in,
    /// each taken by the worker that runs its host. Written by the owner only before the list
    /// is published and after the round's first barrier.
    messages: UnsafeCell<Vec<Chunk<E>>>,
    /// The span class of the calendar each chunk of `messages` came from, which takes it back.
    classes: UnsafeCell<Vec<u8>>,
    /// Indices of messages (`chunk * CHUNK + place`), by (destination, time, order key).
    order: UnsafeCell<Vec<u32>>,
}

// SAFETY: the cells are written by the owner alone while no other worker reads the list (see
// `messages`), and during the round each message is taken only by the worker that claimed its
// host through `cursor`.
unsafe impl<E: Send> Sync for RoundList<E> {}

impl<E> RoundList<E> {
    fn new(capacity: usize) -> Self {
        Self {
            hosts: (0..capacity).map(|_| AtomicU32::new(0)).collect(),
            runs: (0..capacity).map(|_| AtomicU64::new(0)).collect(),
            ends: (0..capacity).map(|_| AtomicU64::new(0)).collect(),
            next: (0..capacity).map(|_| AtomicU64::new(NOT_DUE)).collect(),
            len: AtomicUsize::new(0),
            cursor: AtomicUsize::new(0),
            round: AtomicU64::new(0),
            messages: UnsafeCell::new(Vec::new()),
            classes: UnsafeCell::new(Vec::new()),
            order: UnsafeCell::new(Vec::new()),
        }
    }

    /// The slot of the `k`th message in the round's order.
    ///
    /// # Safety
    /// The list must be published (its messages no longer written but through their slots),
    /// and `k` within its order.
    #[inline]
    unsafe fn slot(&self, k: usize) -> &Slot<E> {
        // SAFETY: the caller's promise; the vectors are only read while the list is published.
        let (order, messages) = unsafe { (&*self.order.get(), &*self.messages.get()) };
        let index = order[k] as usize;
        &messages[index / CHUNK][index % CHUNK]
    }

    /// Where the messages to the `i`th host lie in `order`: `start..end`.
    #[inline]
    fn run(&self, i: usize) -> (usize, usize) {
        let run = self.runs[i].load(Ordering::Relaxed);
        ((run >> 32) as usize, (run & u32::MAX as u64) as usize)
    }

    /// Claims the next (up to) `CLAIM_BATCH` unclaimed hosts of the list: their indices.
    #[inline]
    fn claim(&self) -> Option<std::ops::Range<usize>> {
        let len = self.len.load(Ordering::Relaxed);
        if self.cursor.load(Ordering::Relaxed) >= len {
            return None;
        }
        let i = self.cursor.fetch_add(CLAIM_BATCH, Ordering::Relaxed);
        (i < len).then(|| i..(i + CLAIM_BATCH).min(len))
    }
}

impl<E> Shared<E> {
    fn record_panic(&self, host: HostId, payload: Box<dyn Any + Send>) {
        let mut slot = lock(&self.panic);
        if slot.as_ref().is_none_or(|(h, _)| host < *h) {
            *slot = Some((host, payload));
        }
        self.failed.store(true, Ordering::Relaxed);
    }
}

#[derive(Clone, Copy)]
struct RoundParams {
    stop: SimTime,
    lookahead: SimDuration,
    trace: bool,
    steal: bool,
    first: SimTime,
}

struct WorkerResult {
    stats: WorkerStats,
    rounds: u64,
    messages: u64,
    late: u64,
    reached: SimTime,
    interrupted: bool,
}

/// What one worker needs to run hosts in the current round, its own or another worker's.
struct RoundRunner<'a, H: Host> {
    hosts: &'a HostTable<H>,
    control: &'a RunControl,
    run: RoundParams,
    end: SimTime,
    out: &'a mut Outbox<H::Event>,
    /// The running host's held events (`Context::held`); empty between hosts.
    held: &'a mut Vec<Due<H::Event>>,
    stats: &'a mut WorkerStats,
}

impl<H: Host> RoundRunner<'_, H> {
    /// Claims and runs hosts of `list` until none is left; false if the round was cut short
    /// by an interrupt. A host whose model panics is recorded and the others go on.
    fn run_list(
        &mut self,
        list: &RoundList<H::Event>,
        shared: &Shared<H::Event>,
        stolen: bool,
    ) -> bool {
        // Hosts claimed and not yet run; after a panic the rest of the batch goes on.
        let mut batch = 0..0;
        loop {
            let mut current = None;
            let ran = catch_unwind(AssertUnwindSafe(|| loop {
                if batch.is_empty() {
                    match list.claim() {
                        Some(claimed) => batch = claimed,
                        None => return true,
                    }
                }
                let i = batch.start;
                batch.start += 1;
                let id = list.hosts[i].load(Ordering::Relaxed);
                current = Some((id, i));
                self.prefetch(list, i + 1);
                if !batch.is_empty() {
                    // The next host of the batch is this worker's for the round, so its model
                    // may be read while this one runs.
                    let next = list.hosts[batch.start].load(Ordering::Relaxed);
                    // SAFETY: claimed by this worker, and not running.
                    unsafe { self.hosts.slot(next) }.model.prefetch();
                }
                if stolen {
                    self.stats.stolen += 1;
                }
                self.stats.runs += 1;
                if !self.run_host(id, list, i) {
                    return false;
                }
            }));
            match ran {
                Ok(finished) => return finished,
                Err(payload) => {
                    if let Some((id, i)) = current {
                        // The failed host keeps what it held, like the rest of its queue.
                        // SAFETY: this worker claimed `id`; the panic ended its borrows.
                        let queue = &mut unsafe { self.hosts.slot(id) }.queue;
                        for d in self.held.drain(..) {
                            queue.push(d.time, d.key, d.event);
                        }
                        list.next[i].store(NOT_DUE, Ordering::Relaxed);
                        shared.record_panic(id, payload);
                    }
                }
            }
        }
    }

    /// Asks the cache for the slot and first message of the `i`th host of `list`, which this
    /// worker will most likely run next: on a large network both are usually out of the cache,
    /// and the loads would otherwise wait one after the other.
    #[inline]
    fn prefetch(&self, list: &RoundList<H::Event>, i: usize) {
        if i >= list.len.load(Ordering::Relaxed) {
            return;
        }
        let id = list.hosts[i].load(Ordering::Relaxed) as usize;
        prefetch(
            self.hosts.slots[id].get(),
            std::mem::size_of::<HostSlot<H>>(),
        );
        let (j, last) = list.run(i);
        if j < last {
            // SAFETY: as in `run_host`; the message is only read, by the hardware.
            prefetch(
                unsafe { list.slot(j) }.get(),
                std::mem::size_of::<Message<H::Event>>(),
            );
        }
    }

    /// Runs the `i`th host of `list` up to the round end, taking its messages and its own
    /// events in (time, order key) order, and notes in the list whether its owner's agenda
    /// needs a new entry for it.
    #[inline]
    fn run_host(&mut self, id: HostId, list: &RoundList<H::Event>, i: usize) -> bool {
        // SAFETY: the host was claimed from a round list, which hands each host to exactly
        // one worker per round, and no other reference to its slot is held.
        let slot = unsafe { self.hosts.slot(id) };
        let HostSlot {
            model,
            queue,
            rng,
            seq,
            trace,
            due,
        } = slot;
        let (mut j, last) = list.run(i);
        let run_end = list.ends[i].load(Ordering::Relaxed);
        let listed_under = *due;
        let held = &mut *self.held;
        // Whether the queue may hold an event due in the round. A host listed only for its
        // messages stands in the agenda under its queue's front, at or after the round end,
        // so its queue is not read (a cache miss on a large network) unless it queues
        // something due in the round itself.
        let mut check_queue = listed_under == NOT_DUE;
        // What the host queued since the last look, and the queue's front as far as pushes
        // (not pops) tell.
        let mut queued_min = NOT_DUE;
        let mut front = listed_under;
        let mut popped = false;
        // The host's messages are announced to the model (`Host::prefetch_event`)
        // `MESSAGES_AHEAD` before they are taken, so that the misses of several overlap with
        // the work on the ones before them.
        let message_at = |k: usize| {
            // SAFETY: as for the messages taken below; this only reads one not yet taken.
            (k < last)
                .then(|| unsafe { &*list.slot(k).get() }.as_ref())
                .flatten()
        };
        for k in j..j + MESSAGES_AHEAD {
            if let Some(m) = message_at(k) {
                model.prefetch_event(&m.event);
            }
        }
        loop {
            // SAFETY: the owner filled the list before publishing it and changes it only after
            // the round; the messages in `j..last` belong to this host, which this worker
            // claimed, and no other reference to this one is live.
            let message = (j < last).then(|| unsafe { &mut *list.slot(j).get() });
            let message_key = message
                .as_ref()
                .map(|m| m.as_ref().expect("a message is taken once"))
                .map(|m| (m.time, m.key));
            let earliest_held = held
                .iter()
                .enumerate()
                .map(|(i, d)| ((d.time, d.key), i))
                .min();
            // The earliest of the message and the held events (all due in the round), then
            // the queue's front if it is earlier still and due in the round.
            let (first, from_held) = match (message_key, earliest_held) {
                (Some(m), Some((h, i))) if h < m => (Some(h), Some(i)),
                (Some(m), _) => (Some(m), None),
                (None, Some((h, i))) => (Some(h), Some(i)),
                (None, None) => (None, None),
            };
            if queued_min != NOT_DUE {
                check_queue |= queued_min < run_end;
                front = front.min(queued_min);
                queued_min = NOT_DUE;
            }
            let from_queue = check_queue
                && match queue.peek() {
                    Some(own) if own.0 < run_end => first.is_none_or(|first| own < first),
                    _ => {
                        check_queue = false;
                        false
                    }
                };
            let (time, key, event) = if from_queue {
                popped = true;
                let entry = queue
                    .pop_before(run_end)
                    .expect("the front is due in the round");
                (entry.time, entry.key, entry.event)
            } else if let Some(i) = from_held {
                let d = held.swap_remove(i);
                (d.time, d.key, d.event)
            } else if let Some(slot) = message {
                let m = slot.as_mut().expect("a message is taken once");
                let (time, key) = (m.time, m.key);
                // SAFETY: the event is read out once: the slot is overwritten with `None` at
                // once, without dropping what it held (the message's other fields own
                // nothing). `Option::take` copied the whole message out before the event was
                // moved on, two copies of 136 bytes where one does.
                let event = unsafe {
                    let event = std::ptr::read(&m.event);
                    std::ptr::write(slot, None);
                    event
                };
                if let Some(ahead) = message_at(j + MESSAGES_AHEAD) {
                    model.prefetch_event(&ahead.event);
                }
                j += 1;
                (time, key, event)
            } else {
                break;
            };
            if self.run.trace {
                *trace = mix(*trace ^ time ^ mix(key));
            }
            self.stats.events += 1;
            let mut ctx = Context {
                now: time,
                host: id,
                key,
                run_end,
                round_end: self.end,
                lookahead: self.run.lookahead,
                seq,
                queue,
                queued_min: &mut queued_min,
                held,
                rng,
                out: self.out,
            };
            model.handle(&mut ctx, event);
            if self.stats.events & (INTERRUPT_CHECK_EVENTS - 1) == 0
                && self.control.interrupt.load(Ordering::Relaxed)
            {
                // The host stops here: what it holds waits in its queue for the next run.
                for d in held.drain(..) {
                    queue.push(d.time, d.key, d.event);
                }
                list.next[i].store(NOT_DUE, Ordering::Relaxed);
                return false;
            }
        }
        debug_assert!(held.is_empty(), "an event due in the round was left");
        // A host listed for its messages alone still stands in the agenda under its own next
        // event; it needs a new entry only if that changed. Unless the host took events from
        // its queue, its front is the earlier of its agenda time and what it queued.
        *due = if popped || listed_under == NOT_DUE {
            queue.next_time().unwrap_or(NOT_DUE)
        } else {
            front
        };
        debug_assert_eq!(*due, queue.next_time().unwrap_or(NOT_DUE));
        let entry = if *due == listed_under { NOT_DUE } else { *due };
        list.next[i].store(entry, Ordering::Relaxed);
        true
    }
}

#[allow(clippy::too_many_arguments)]
fn worker_loop<H: Host>(
    w: usize,
    hosts: &HostTable<H>,
    partition: &Partition,
    calendars: &mut Vec<Calendar<H::Event>>,
    class_of: &Arc<[u8]>,
    shared: &Shared<H::Event>,
    control: &RunControl,
    run: RoundParams,
) -> WorkerResult {
    let workers = partition.workers();
    let mine = partition.hosts_of(w);
    let list = &shared.lists[w];
    let mut out = Outbox {
        worker_of: shared.worker_of.clone(),
        class_of: class_of.clone(),
        own: w,
        calendars: std::mem::take(calendars),
        by_worker: (0..workers).map(|_| Vec::new()).collect(),
        sent: 0,
        late: 0,
    };
    let mut inbox: Vec<Message<H::Event>> = Vec::new();
    let mut held = Vec::with_capacity(HELD_EVENTS);
    let mut stats = WorkerStats {
        hosts: mine.len(),
        ..Default::default()
    };
    // The agendas: this worker's hosts by their next own event (messages wait in the
    // calendars), one per span class, so a round visits only the hosts that have something to
    // do in it, however many hosts there are. Entries are never removed early; one whose time
    // is not its host's `due` is stale and skipped.
    let mut agendas: Vec<Agenda> = (0..SPAN_CLASSES)
        .map(|c| Agenda::new(run.lookahead.saturating_mul(span(c)), run.first))
        .collect();
    for &id in mine {
        // SAFETY: this worker owns `id`, and no round is under way.
        let due = unsafe { hosts.slot(id) }.due;
        if due != NOT_DUE {
            agendas[class_of[id as usize] as usize].push(due, id);
        }
    }
    // Where each class's current run ends (`ends[c]`); a class whose run has not ended by a
    // round's start begins a new one in it. The same on every worker: it follows from the
    // round starts alone.
    let mut ends = [run.first; SPAN_CLASSES];
    let mut own_due: Vec<HostId> = Vec::new();
    let mut candidates: Vec<(SimTime, HostId)> = Vec::new();
    let mut sorter = RoundOrder::new(hosts.slots.len());
    let mut rounds = 0;
    let mut start = run.first;
    let mut interrupted = false;
    let wall = Instant::now();
    while start < run.stop {
        let end = start.saturating_add(run.lookahead).min(run.stop);
        if w == 0 {
            control.progress.store(start, Ordering::Relaxed);
        }
        // The classes that begin a run in this round, and its end: the end of the span that
        // holds the round's start (spans of a class are aligned to multiples of its length),
        // never before the round's end nor after the stop time. Span 1 runs every round.
        let mut begins = [false; SPAN_CLASSES];
        for c in 0..SPAN_CLASSES {
            if ends[c] <= start {
                let length = run.lookahead.saturating_mul(span(c));
                let span_end = (start / length).saturating_add(1).saturating_mul(length);
                ends[c] = span_end.min(run.stop).max(end);
                begins[c] = true;
            }
        }
        // Phase 1: list this worker's hosts due before the round end, publish the list, and
        // run it; then help the others with theirs. A panic in a model is caught; the failed
        // host stops, the others complete the round, and the run stops at its end (the same
        // state on any number of threads).
        // In three passes, so that the loads of many hosts' slots, then of their heaps' tops,
        // overlap: on a large network each is a cache miss, and one pass would wait for each
        // in turn.
        own_due.clear();
        candidates.clear();
        for (c, agenda) in agendas.iter_mut().enumerate() {
            if !begins[c] {
                continue;
            }
            agenda.take_due(start, ends[c], |time, id| {
                hosts.prefetch_agenda_fields(id);
                candidates.push((time, id));
            });
        }
        for &(time, id) in &candidates {
            // SAFETY: this worker owns `id`; no round list holds it yet.
            let slot = unsafe { hosts.slot(id) };
            if slot.due == time {
                slot.due = NOT_DUE;
                own_due.push(id);
                slot.queue.prefetch_top();
            }
        }
        for &id in &own_due {
            // SAFETY: as above.
            unsafe { hosts.slot(id) }.queue.prefetch_front();
        }
        own_due.sort_unstable();
        let len = list_round(
            list,
            &mut out.calendars,
            class_of,
            (start, &begins, &ends),
            &own_due,
            &mut sorter,
        );
        list.len.store(len, Ordering::Relaxed);
        list.cursor.store(0, Ordering::Relaxed);
        list.round.store(rounds + 1, Ordering::Release);
        let mut runner = RoundRunner {
            hosts,
            control,
            run,
            end,
            out: &mut out,
            held: &mut held,
            stats: &mut stats,
        };
        let mut finished = runner.run_list(list, shared, false);
        if run.steal {
            for v in (1..workers).map(|k| (w + k) % workers) {
                if !finished {
                    break;
                }
                let victim = &shared.lists[v];
                if victim.round.load(Ordering::Acquire) == rounds + 1 {
                    finished = runner.run_list(victim, shared, true);
                }
            }
        }
        if !finished {
            shared.cut_short.store(true, Ordering::Relaxed);
        }
        for (dst, bucket) in out.by_worker.iter_mut().enumerate() {
            std::mem::swap(bucket, &mut *lock(&shared.mail[w * workers + dst]));
        }
        let Ok(waited) = shared.barrier.wait() else {
            break;
        };
        stats.blocked += waited;
        // Phase 2: put the hosts that ran back in the agenda, then file the messages
        // addressed to owned hosts.
        for i in 0..len {
            let next = list.next[i].load(Ordering::Relaxed);
            if next != NOT_DUE {
                let id = list.hosts[i].load(Ordering::Relaxed);
                agendas[class_of[id as usize] as usize].push(next, id);
            }
        }
        // The round's chunks go back to their calendars. Hosts that did not finish the round
        // keep their messages for the next run, in the calendar the chunk came from (that of
        // its messages' span class).
        // SAFETY: the round's claims all happened before the barrier.
        let (chunks, classes) = unsafe { (&mut *list.messages.get(), &mut *list.classes.get()) };
        let incomplete =
            shared.cut_short.load(Ordering::Relaxed) || shared.failed.load(Ordering::Relaxed);
        for (mut chunk, class) in chunks.drain(..).zip(classes.drain(..)) {
            let calendar = &mut out.calendars[class as usize];
            if incomplete {
                for m in chunk.iter_mut().filter_map(|slot| slot.get_mut().take()) {
                    calendar.push(m);
                }
            }
            calendar.recycle(chunk);
        }
        for src in 0..workers {
            std::mem::swap(&mut inbox, &mut *lock(&shared.mail[src * workers + w]));
            for m in inbox.drain(..) {
                out.calendars[class_of[m.dst as usize] as usize].push(m);
            }
        }
        // A stale agenda entry may make the next round start earlier than needed (see
        // `Agenda`); on a network busy enough for that to cost, every round has work anyway.
        let local_next = out
            .calendars
            .iter()
            .map(Calendar::next_time)
            .chain(agendas.iter().map(Agenda::next_time))
            .min()
            .unwrap();
        shared.next_time[w].store(local_next, Ordering::Relaxed);
        if w == 0 {
            // Failures and cut rounds were flagged before the first barrier, so every worker
            // is covered by this one decision. The interrupt flag only ever goes from false to
            // true, so a worker that cut its round short saw what this load sees.
            let halt =
                control.interrupt.load(Ordering::Relaxed) || shared.failed.load(Ordering::Relaxed);
            shared.halt.store(halt, Ordering::Relaxed);
        }
        let Ok(waited) = shared.barrier.wait() else {
            break;
        };
        stats.blocked += waited;
        rounds += 1;
        if shared.halt.load(Ordering::Relaxed) {
            interrupted = true;
            // A round cut short or ended by a failure was not completed by every host: the
            // time every host has reached is its start.
            let incomplete =
                shared.cut_short.load(Ordering::Relaxed) || shared.failed.load(Ordering::Relaxed);
            if !incomplete {
                start = end;
            }
            break;
        }
        // Every worker computes the same minimum from the same published values.
        let next = shared
            .next_time
            .iter()
            .map(|t| t.load(Ordering::Relaxed))
            .min()
            .unwrap_or(u64::MAX);
        start = if next == u64::MAX {
            run.stop
        } else {
            align_down(next, run.lookahead).max(end)
        };
    }
    stats.busy = wall.elapsed().saturating_sub(stats.blocked);
    *calendars = std::mem::take(&mut out.calendars);
    WorkerResult {
        stats,
        rounds,
        messages: out.sent,
        late: out.late,
        reached: if interrupted { start } else { run.stop },
        interrupted,
    }
}

/// Scratch space for ordering a round's messages by (destination, time, order key).
///
/// A comparison sort of all of a round's messages cost about 2% of web-6876's time: a few
/// thousand 24-byte keys per worker and round, compared field by field. But the order is
/// mostly by destination, and a round's hosts get only a handful of messages each, so the
/// messages are first counted and placed by destination (one pass each), and only each
/// host's own few are sorted by (time, order key). Order keys are unique, so the result is
/// exactly the full sort's.
struct RoundOrder {
    /// `rank[host]`: the host's place in `dsts` while a round is being listed, `NO_RANK`
    /// otherwise (every entry set is reset before the listing ends).
    rank: Vec<u32>,
    /// The round's destinations and their ranks (the order they were first met in); once
    /// `finish`ed, sorted by host, each with where its messages end in the order.
    dsts: Vec<(HostId, u32)>,
    /// By rank: the number of messages to the host, then where its messages end in `placed`.
    ends: Vec<u32>,
    /// The round's messages as met: (rank of the destination, time, order key, index).
    met: Vec<(u32, SimTime, u64, u32)>,
    /// The same by destination: (time, order key, index).
    placed: Vec<(SimTime, u64, u32)>,
}

/// `RoundOrder::rank` of a host with no message in the round being listed.
const NO_RANK: u32 = u32::MAX;

impl RoundOrder {
    fn new(hosts: usize) -> Self {
        Self {
            rank: vec![NO_RANK; hosts],
            dsts: Vec::new(),
            ends: Vec::new(),
            met: Vec::new(),
            placed: Vec::new(),
        }
    }

    /// Notes the message at `index` (`chunk * CHUNK + place`).
    #[inline]
    fn meet(&mut self, dst: HostId, time: SimTime, key: u64, index: u32) {
        let rank = &mut self.rank[dst as usize];
        if *rank == NO_RANK {
            *rank = self.dsts.len() as u32;
            self.dsts.push((dst, *rank));
            self.ends.push(0);
        }
        self.ends[*rank as usize] += 1;
        self.met.push((*rank, time, key, index));
    }

    /// Orders what was met: `order` gets the messages' indices by (destination, time, order
    /// key), and `dsts` the destinations in ascending id, each with where its messages end in
    /// `order`.
    fn finish(&mut self, order: &mut Vec<u32>) {
        self.dsts.sort_unstable();
        let mut at = 0;
        for &(_, rank) in &self.dsts {
            let n = self.ends[rank as usize];
            self.ends[rank as usize] = at;
            at += n;
        }
        self.placed.clear();
        self.placed.resize(self.met.len(), (0, 0, 0));
        for &(rank, time, key, index) in &self.met {
            let place = &mut self.ends[rank as usize];
            self.placed[*place as usize] = (time, key, index);
            *place += 1;
        }
        let mut start = 0;
        for (host, rank) in &mut self.dsts {
            let end = self.ends[*rank as usize];
            if end - start > 1 {
                self.placed[start as usize..end as usize].sort_unstable();
            }
            self.rank[*host as usize] = NO_RANK;
            *rank = end;
            start = end;
        }
        order.extend(self.placed.iter().map(|p| p.2));
        self.met.clear();
        self.ends.clear();
    }
}

/// Fills `list` for the round that starts at `start`: for each span class that begins a run
/// in it (`begins`), the messages due before that run's end (`ends`), ordered by (host, time,
/// order key), and the hosts that have messages or (`own_due`, in ascending id) events of
/// their own due before their run's end, in ascending id, each with that end. Returns the
/// number of hosts.
fn list_round<E>(
    list: &RoundList<E>,
    calendars: &mut [Calendar<E>],
    class_of: &[u8],
    (start, begins, ends): (SimTime, &[bool; SPAN_CLASSES], &[SimTime; SPAN_CLASSES]),
    own_due: &[HostId],
    sorter: &mut RoundOrder,
) -> usize {
    // SAFETY: the list is not published yet, and every claim of the previous round happened
    // before the barrier that ended it.
    let (messages, classes, order) = unsafe {
        (
            &mut *list.messages.get(),
            &mut *list.classes.get(),
            &mut *list.order.get(),
        )
    };
    debug_assert!(
        messages.is_empty(),
        "the last round's chunks were given back"
    );
    order.clear();
    sorter.dsts.clear();
    for (c, calendar) in calendars.iter_mut().enumerate() {
        if begins[c] {
            calendar.take_due(start, ends[c], |mut chunk| {
                let base = messages.len() * CHUNK;
                for (place, slot) in chunk.iter_mut().enumerate() {
                    if let Some(m) = slot.get_mut() {
                        sorter.meet(m.dst, m.time, m.key, (base + place) as u32);
                    }
                }
                messages.push(chunk);
                classes.push(c as u8);
            });
        }
    }
    sorter.finish(order);
    let mut len = 0;
    let (mut j, mut k) = (0, 0);
    let mut first = 0;
    loop {
        let by_message = sorter.dsts.get(j).map(|d| d.0);
        let by_own = own_due.get(k).copied();
        let host = match (by_message, by_own) {
            (Some(a), Some(b)) => a.min(b),
            (Some(a), None) => a,
            (None, Some(b)) => b,
            (None, None) => break,
        };
        if by_own == Some(host) {
            k += 1;
        }
        let mut last = first;
        if by_message == Some(host) {
            last = sorter.dsts[j].1;
            j += 1;
        }
        list.hosts[len].store(host, Ordering::Relaxed);
        list.runs[len].store(((first as u64) << 32) | last as u64, Ordering::Relaxed);
        list.ends[len].store(ends[class_of[host as usize] as usize], Ordering::Relaxed);
        first = last;
        len += 1;
    }
    len
}

/// Hints the processor to load `bytes` from `p` into the cache: every 64-byte line the range
/// touches, also when it starts inside a line, as heap objects and slots of a table do
/// (nothing on other architectures). A hint never faults, whatever the address.
#[inline(always)]
pub fn prefetch<T>(p: *const T, bytes: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        let line = p.cast::<i8>().wrapping_sub(p as usize % 64);
        for offset in (0..p as usize % 64 + bytes).step_by(64) {
            // SAFETY: prefetching reads nothing the program can observe and cannot fault.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(line.wrapping_add(offset)) };
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (p, bytes);
}

/// `time` rounded down to a multiple of `width`.
fn align_down(time: SimTime, width: SimDuration) -> SimTime {
    time - time % width
}

/// A 64-bit finaliser (from SplitMix64) used to fold event identities into trace hashes.
#[inline]
pub(crate) fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Counting and placing by destination, then sorting each destination's few, gives
    /// exactly the order a sort of every message by (destination, time, order key) gives,
    /// round after round with the same scratch space.
    #[test]
    fn a_rounds_messages_are_ordered_by_destination_time_and_order_key() {
        let mut sorter = RoundOrder::new(50);
        let mut x = 7u64;
        for round in 0..20 {
            let mut all = Vec::new();
            for index in 0..(round * 37 % 300) as u32 {
                x = mix(x);
                let dst = (x % 50) as HostId;
                // Few distinct times, so that ties on time are settled by the order key.
                let time = 1_000 + (x >> 8) % 7;
                let key = order_key((x >> 16) as HostId % 50, index as u64);
                sorter.meet(dst, time, key, index);
                all.push((dst, time, key, index));
            }
            all.sort_unstable();
            let mut order = Vec::new();
            sorter.finish(&mut order);
            assert_eq!(order, all.iter().map(|m| m.3).collect::<Vec<_>>());
            let mut hosts: Vec<HostId> = all.iter().map(|m| m.0).collect();
            hosts.dedup();
            assert_eq!(
                sorter.dsts.iter().map(|d| d.0).collect::<Vec<_>>(),
                hosts,
                "destinations in ascending id"
            );
            for &(host, end) in &sorter.dsts {
                let last = all.iter().rposition(|m| m.0 == host).unwrap();
                assert_eq!(end as usize, last + 1, "where host {host}'s messages end");
            }
            assert!(sorter.rank.iter().all(|&r| r == NO_RANK), "ranks reset");
            sorter.dsts.clear();
        }
    }
}
