//! The relay's CPU: the processing stage between its network stack and its Tor state machine.
//!
//! A relay's main thread is one event loop on one core. Everything it does costs CPU time
//! (priced by [`CostTable`] from the work the relay counted), and while it is busy nothing
//! else it was woken for can start: socket events wait in the stack's queue and timers are
//! put off until the thread is free. The kernel goes on receiving meanwhile, so a saturated
//! relay's receive buffers fill, its TCP windows close and its peers slow down, as with a
//! real one. Onion-skin handshakes go to a pool of worker threads instead (tor's cpuworkers,
//! `NumCPUs + 1` of them), each finishing its jobs in turn.
//!
//! The threads of every relay placed on one machine share its cores. A relay cannot see the
//! others' state (hosts are isolated so that they run on any worker thread), so each one
//! measures its threads' demand over a short window and tells its machine-mates with a
//! message due one lookahead later; each then runs its threads at `cores / total demand` of
//! a core (never more than one). That is processor sharing with a delay of one window:
//! saturated threads split the cores evenly, and a thread that needs less than its share
//! gets what it needs.
//!
//! Without a CPU model a relay has no stage and runs as before, byte for byte.

use onionlab_engine::time::{SimDuration, SimTime, NANOS_PER_SEC};
use onionlab_engine::{Context, HostId};
use onionlab_torcore::cpu::{CostTable, CpuSplit, Work};

/// Events of the CPU stage.
#[derive(Clone, Copy, Debug)]
pub enum CpuEvent {
    /// The main thread is free again: handle what the sockets reported meanwhile.
    Wake,
    /// The end of a demand window.
    Window,
    /// A machine-mate's threads' demand over its last window, in millionths of a core.
    Demand {
        /// The machine-mate's host.
        from: HostId,
        /// Its threads' demand together, in millionths of a core (more than a million when
        /// they need more than one core).
        ppm: u32,
    },
}

/// A relay's machine and its price list.
#[derive(Clone, Debug)]
pub struct CpuConfig {
    /// What each unit of the relay's work costs, in picoseconds of a core.
    pub table: CostTable,
    /// Cores of the machine the relay runs on.
    pub cores: u32,
    /// Onion-skin worker threads.
    pub workers: u32,
    /// The other relays on the same machine.
    pub mates: Vec<HostId>,
    /// How often demand is measured and shared.
    pub window: SimDuration,
}

/// The fixed-point unit of a thread's speed: a whole core.
const FULL_SPEED: u64 = 1 << 16;
const PPM: u64 = 1_000_000;

/// What the CPU did in one second, in nanoseconds of wall time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuSecond {
    /// The main thread's busy time by category (at the speed it ran at, so a thread slowed
    /// by sharing shows busier).
    pub crypto: u64,
    /// The main thread's busy time in system calls and the network stack's packet work.
    pub kernel: u64,
    /// The main thread's busy time on TLS records (encryption and decryption on channels).
    pub tls: u64,
    /// The main thread's busy time on tor's own bookkeeping (queues, scheduling, circuits
    /// and connections).
    pub other: u64,
    /// Worker threads' busy time, summed over the workers.
    pub workers: u64,
    /// Onion skins handed to the workers.
    pub onion_skins: u64,
}

impl CpuSecond {
    /// The main thread's busy time, every category together, in nanoseconds.
    pub fn main_busy(&self) -> u64 {
        self.crypto + self.kernel + self.tls + self.other
    }
}

/// A relay's CPU model: until when its main thread and its onion-skin workers are busy, the
/// speed that sharing the machine leaves them, and the current second's figures.
pub struct CpuStage {
    table: CostTable,
    cores: u64,
    mates: Vec<HostId>,
    window: SimDuration,
    /// When the main thread finishes what it is doing.
    busy_until: SimTime,
    wake_armed: bool,
    /// When each worker finishes its queue.
    workers: Vec<SimTime>,
    /// A thread's speed, in `FULL_SPEED` units.
    speed: u64,
    window_armed: bool,
    /// Wall time the relay's threads were busy with jobs started since the last window
    /// ended (their parts beyond it are taken off when it ends, and counted in the next).
    window_busy: u64,
    /// The last demand told to the mates, and theirs, in ppm.
    told: u32,
    own: u32,
    mate_demand: Vec<u32>,
    /// The relay's and the stack's counters when work was last priced.
    priced: Work,
    packets: u64,
    second: CpuSecond,
}

impl CpuStage {
    /// An idle CPU at full speed on the machine `cfg` describes.
    pub fn new(cfg: &CpuConfig) -> Self {
        CpuStage {
            table: cfg.table,
            cores: u64::from(cfg.cores.max(1)),
            mates: cfg.mates.clone(),
            window: cfg.window.max(1),
            busy_until: 0,
            wake_armed: false,
            workers: vec![0; cfg.workers.max(1) as usize],
            speed: FULL_SPEED,
            window_armed: false,
            window_busy: 0,
            told: 0,
            own: 0,
            mate_demand: vec![0; cfg.mates.len()],
            priced: Work::default(),
            packets: 0,
            second: CpuSecond::default(),
        }
    }

    /// Whether the main thread is busy at `now`.
    pub fn busy(&self, now: SimTime) -> bool {
        now < self.busy_until
    }

    /// When the main thread finishes the work it has been charged (in the past when idle).
    pub fn busy_until(&self) -> SimTime {
        self.busy_until
    }

    /// Arranges a [`CpuEvent::Wake`] for when the main thread is free.
    pub fn arm_wake<E: From<CpuEvent>>(&mut self, ctx: &mut Context<'_, E>) {
        if !self.wake_armed {
            self.wake_armed = true;
            ctx.schedule_at(self.busy_until, E::from(CpuEvent::Wake));
        }
    }

    /// The wake-up fired.
    pub fn woken(&mut self) {
        self.wake_armed = false;
    }

    fn wall(&self, cost_ps: u64) -> u64 {
        // Picoseconds of a whole core's work to nanoseconds at this thread's speed (rounded
        // up, so any work takes time).
        let ps = cost_ps as u128 * FULL_SPEED as u128 / self.speed as u128;
        ps.div_ceil(1000) as u64
    }

    /// Prices what the main thread did in the handler just run (the relay's counters `work`,
    /// the stack's packet count `packets`, one epoll_wait for the wake) and keeps the thread
    /// busy for it from `now`.
    pub fn charge<E: From<CpuEvent>>(
        &mut self,
        ctx: &mut Context<'_, E>,
        work: Work,
        packets: u64,
    ) {
        let now = ctx.now();
        let mut done = work.since(&self.priced);
        done.packets = packets - self.packets;
        done.syscalls += 1;
        self.priced = work;
        self.packets = packets;
        let split: CpuSplit = self.table.price(&done);
        let cost = split.total();
        let wall = self.wall(cost);
        let start = now.max(self.busy_until);
        self.busy_until = start + wall;
        // The split in wall nanoseconds: each part's share of `wall`.
        let s = split.scaled(wall, cost);
        self.second.crypto += s.crypto;
        self.second.kernel += s.kernel;
        self.second.tls += s.tls;
        self.second.other += s.other;
        self.note_busy(ctx, wall);
    }

    /// Hands one onion skin to the worker that is free first; returns when it is done.
    pub fn onion_skin<E: From<CpuEvent>>(&mut self, ctx: &mut Context<'_, E>) -> SimTime {
        let now = ctx.now();
        let wall = self.wall(self.table.ntor);
        let (i, free) = self
            .workers
            .iter()
            .enumerate()
            .min_by_key(|(i, t)| (**t, *i))
            .map(|(i, t)| (i, *t))
            .expect("a relay has at least one worker");
        let done = free.max(now) + wall;
        self.workers[i] = done;
        self.second.workers += wall;
        self.second.onion_skins += 1;
        self.note_busy(ctx, wall);
        done
    }

    fn note_busy<E: From<CpuEvent>>(&mut self, ctx: &mut Context<'_, E>, wall: u64) {
        self.window_busy += wall;
        if !self.window_armed && wall > 0 {
            self.window_armed = true;
            ctx.schedule_in(self.window, E::from(CpuEvent::Window));
        }
    }

    /// The end of a demand window: measure this relay's demand, tell the mates if it
    /// changed, and set the threads' speed.
    pub fn window_ended<E: From<CpuEvent>>(&mut self, ctx: &mut Context<'_, E>) {
        self.window_armed = false;
        let now = ctx.now();
        // What the threads are still to do belongs to the next window.
        let ahead: u64 = std::iter::once(self.busy_until)
            .chain(self.workers.iter().copied())
            .map(|t| t.saturating_sub(now))
            .sum();
        let threads = self.workers.len() as u64 + 1;
        let within = self.window_busy.saturating_sub(ahead);
        let ppm = (within as u128 * PPM as u128 / self.window as u128).min((threads * PPM) as u128)
            as u32;
        self.window_busy = ahead;
        self.own = ppm;
        if ppm != self.told && !self.mates.is_empty() {
            let at = ctx.now() + ctx.lookahead();
            let me = ctx.host();
            for &m in &self.mates {
                ctx.send(m, at, E::from(CpuEvent::Demand { from: me, ppm }));
            }
            self.told = ppm;
        }
        self.set_speed();
        if ppm > 0 || ahead > 0 {
            // Keep measuring while there is work (an idle relay's last window reports 0).
            self.window_armed = true;
            ctx.schedule_in(self.window, E::from(CpuEvent::Window));
        }
    }

    /// A mate's demand arrived.
    pub fn mate_demand(&mut self, from: HostId, ppm: u32) {
        if let Some(i) = self.mates.iter().position(|&m| m == from) {
            self.mate_demand[i] = ppm;
            self.set_speed();
        }
    }

    fn set_speed(&mut self) {
        let demand: u64 =
            u64::from(self.own) + self.mate_demand.iter().map(|&d| u64::from(d)).sum::<u64>();
        let capacity = self.cores * PPM;
        self.speed = if demand <= capacity {
            FULL_SPEED
        } else {
            (capacity * FULL_SPEED / demand).max(1)
        };
    }

    /// The second just ended's figures (and a fresh second).
    pub fn take_second(&mut self) -> CpuSecond {
        std::mem::take(&mut self.second)
    }
}

/// The length of a demand window when the scenario does not say.
pub const DEFAULT_WINDOW: SimDuration = NANOS_PER_SEC / 100;
