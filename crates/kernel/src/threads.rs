//! Threads, futexes and which thread runs.
//!
//! A managed process's threads are real threads, but they run one at a time: the kernel says
//! which one ([`Kernel::resume`]), and that thread runs natively until its next call reaches the
//! kernel. A thread keeps running while its calls finish; when one blocks, the next ready
//! thread runs, in the order the threads became ready. So a program's threads interleave at
//! the same points, in the same order, on every run and on any number of worker threads.
//!
//! The shim creates the real thread (`clone`) once the kernel has given it a slot and a thread
//! id; the new thread then waits until the kernel gives it its first turn
//! ([`Resume::Start`]). `futex` waits and wake-ups happen here, not in Linux: a thread that
//! waits leaves the turn to the others, exactly as it would sleep in Linux. A waiting thread
//! that others never wake, and which has no time limit, waits for ever, as it would there.
//!
//! What the kernel needs of the program's memory the shim copies into the call: the value at a
//! futex's address (read while the caller runs and no other thread does, so the compare and
//! the wait are one step, as Linux makes them), and for `FUTEX_WAKE_OP` the old value of the
//! word the shim changed.

use std::collections::VecDeque;

use onionlab_engine::time::SimTime;
use rand::Rng;

use crate::*;

/// A thread of a managed process: its slot in the shim's table (0: the main thread).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ThreadId(pub u32);

/// The main thread, the one a process starts with.
pub const MAIN_THREAD: ThreadId = ThreadId(0);

/// How many threads a process may have at once (the shim's table).
pub const MAX_THREADS: usize = 128;

/// What a thread that gets the turn ([`Kernel::resume`]) does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resume {
    /// Its blocked call finished with this result; the bytes [`Kernel::resume`] gave go back
    /// with it.
    Reply(i64),
    /// It is a new thread and runs for the first time.
    Start,
}

pub(crate) const ETIMEDOUT: i64 = 110;

// `clone`'s flags (linux/sched.h).
const CLONE_VM: i64 = 0x100;
const CLONE_FS: i64 = 0x200;
const CLONE_FILES: i64 = 0x400;
const CLONE_SIGHAND: i64 = 0x800;
const CLONE_THREAD: i64 = 0x10000;
const CLONE_SYSVSEM: i64 = 0x40000;
const CLONE_SETTLS: i64 = 0x80000;
const CLONE_PARENT_SETTID: i64 = 0x100000;
const CLONE_CHILD_CLEARTID: i64 = 0x200000;
const CLONE_DETACHED: i64 = 0x400000;
const CLONE_CHILD_SETTID: i64 = 0x1000000;
/// What a thread shares with the others here: everything, as `pthread_create` asks.
const THREAD_FLAGS: i64 = CLONE_VM | CLONE_FILES | CLONE_SIGHAND | CLONE_THREAD | CLONE_SETTLS;
/// Flags a thread may add, which the shim honours (the ids) or which change nothing here.
const OPTIONAL_FLAGS: i64 = CLONE_FS
    | CLONE_SYSVSEM
    | CLONE_PARENT_SETTID
    | CLONE_CHILD_CLEARTID
    | CLONE_DETACHED
    | CLONE_CHILD_SETTID;

// `futex`'s operations and flags (linux/futex.h).
const FUTEX_WAIT: i64 = 0;
const FUTEX_WAKE: i64 = 1;
const FUTEX_REQUEUE: i64 = 3;
const FUTEX_CMP_REQUEUE: i64 = 4;
const FUTEX_WAKE_OP: i64 = 5;
const FUTEX_WAIT_BITSET: i64 = 9;
const FUTEX_WAKE_BITSET: i64 = 10;
const FUTEX_PRIVATE_FLAG: i64 = 128;
const FUTEX_CLOCK_REALTIME: i64 = 256;

/// One thread's state in the kernel.
#[derive(Debug)]
pub(crate) struct Thread {
    tid: i32,
    /// Its blocked call, if it is blocked.
    pub(crate) pending: Option<Pending>,
    /// The bytes of a blocked call that finished, until the thread gets the turn.
    reply: Vec<u8>,
}

/// The process's threads and their turns.
pub(crate) struct Threads {
    table: Vec<Option<Thread>>,
    /// Threads whose turn is due, in the order they became ready.
    ready: VecDeque<(ThreadId, Resume)>,
    /// The thread that runs, if one does.
    pub(crate) running: Option<ThreadId>,
    pid: i32,
    /// The count from which the next thread's id is made.
    next_tid: u32,
    /// Counts blocked calls, so that futex wake-ups take the longest waiter first.
    pub(crate) next_seq: u64,
}

/// How many thread ids a process draws from before they come round again (skipping those in
/// use): thread ids are `pid * TID_SPAN + n`, apart from every other process's.
const TID_SPAN: u32 = 10_000;

impl Threads {
    /// A process with its main thread running, whose id is the pid.
    pub(crate) fn new(pid: i32) -> Self {
        Threads {
            table: vec![Some(Thread {
                tid: pid,
                pending: None,
                reply: Vec::new(),
            })],
            ready: VecDeque::new(),
            running: Some(MAIN_THREAD),
            pid,
            next_tid: 1,
            next_seq: 0,
        }
    }

    pub(crate) fn get(&self, t: ThreadId) -> Option<&Thread> {
        self.table.get(t.0 as usize).and_then(Option::as_ref)
    }

    pub(crate) fn get_mut(&mut self, t: ThreadId) -> Option<&mut Thread> {
        self.table.get_mut(t.0 as usize).and_then(Option::as_mut)
    }

    /// The threads that exist, in slot order.
    pub(crate) fn ids(&self) -> impl Iterator<Item = ThreadId> + '_ {
        self.table
            .iter()
            .enumerate()
            .filter(|(_, t)| t.is_some())
            .map(|(i, _)| ThreadId(i as u32))
    }

    /// How many slots the table has (some may be free).
    pub(crate) fn slots(&self) -> usize {
        self.table.len()
    }

    fn live(&self) -> usize {
        self.table.iter().filter(|t| t.is_some()).count()
    }

    /// Thread `t`'s call finished with `ret` (its bytes in `bytes`): it runs when its turn
    /// comes.
    pub(crate) fn make_ready(&mut self, t: ThreadId, ret: i64, bytes: &[u8]) {
        if let Some(th) = self.get_mut(t) {
            th.reply.clear();
            th.reply.extend_from_slice(bytes);
            self.ready.push_back((t, Resume::Reply(ret)));
        }
    }

    pub(crate) fn clear(&mut self) {
        self.table.clear();
        self.ready.clear();
        self.running = None;
    }
}

impl<R: Rng, S: Copy + Eq + std::fmt::Debug> Kernel<R, S> {
    /// The thread that runs (the one whose calls [`Kernel::call`] takes), if one does.
    pub fn running(&self) -> Option<ThreadId> {
        self.threads.running
    }

    /// Thread `t`'s id as the program sees it (`gettid`), if the thread exists.
    pub fn tid(&self, t: ThreadId) -> Option<i32> {
        self.threads.get(t).map(|th| th.tid)
    }

    /// Gives the turn to the next ready thread, if there is one, and returns it with what it
    /// does; a blocked call's bytes go in `out` (cleared first). The thread then runs until
    /// its next call.
    pub fn resume(&mut self, out: &mut Vec<u8>) -> Option<(ThreadId, Resume)> {
        out.clear();
        debug_assert!(self.threads.running.is_none(), "one thread runs at a time");
        let (t, resume) = self.threads.ready.pop_front()?;
        if let Some(th) = self.threads.get_mut(t) {
            std::mem::swap(out, &mut th.reply);
        }
        self.threads.running = Some(t);
        Some((t, resume))
    }

    /// `clone` (or `clone3`, whose arguments the shim laid out as `clone`'s: flags, stack,
    /// parent's tid word, child's tid word, TLS): a thread, given a slot (in `out`, four bytes)
    /// and an id (the result). Anything that is not a thread sharing everything (a `fork`, a
    /// `vfork`, new namespaces) is not supported.
    pub(crate) fn clone_thread(&mut self, call: &Call<'_>, out: &mut Vec<u8>) -> i64 {
        let flags = call.args[0] & !0xff; // the low byte is the exit signal
        if flags & THREAD_FLAGS != THREAD_FLAGS || flags & !(THREAD_FLAGS | OPTIONAL_FLAGS) != 0 {
            self.count_unsupported(call.nr);
            return -ENOSYS;
        }
        if call.args[1] == 0 {
            return -EINVAL; // a thread needs a stack of its own
        }
        let Some(slot) =
            (0..MAX_THREADS).find(|&i| self.threads.table.get(i).is_none_or(|t| t.is_none()))
        else {
            return -EAGAIN;
        };
        let tid = self.next_tid();
        if self.threads.table.len() <= slot {
            self.threads.table.resize_with(slot + 1, || None);
        }
        self.threads.table[slot] = Some(Thread {
            tid,
            pending: None,
            reply: Vec::new(),
        });
        let t = ThreadId(slot as u32);
        self.threads.ready.push_back((t, Resume::Start));
        out.extend_from_slice(&t.0.to_le_bytes());
        i64::from(tid)
    }

    /// The next thread id not in use.
    fn next_tid(&mut self) -> i32 {
        let base = i64::from(self.threads.pid) * i64::from(TID_SPAN);
        loop {
            let n = self.threads.next_tid;
            self.threads.next_tid = if n + 1 >= TID_SPAN { 1 } else { n + 1 };
            let tid = (base + i64::from(n)).min(i64::from(i32::MAX)) as i32;
            if !self.threads.table.iter().flatten().any(|t| t.tid == tid) {
                return tid;
            }
        }
    }

    /// The shim could not make the real thread for slot `slot`: it is forgotten.
    pub(crate) fn thread_failed(&mut self, slot: i64) -> i64 {
        let Ok(i) = usize::try_from(slot) else {
            return -EINVAL;
        };
        let t = ThreadId(i as u32);
        if Some(t) == self.threads.running || self.threads.get(t).is_none() {
            return -EINVAL;
        }
        self.threads.table[i] = None;
        self.threads.ready.retain(|&(r, _)| r != t);
        0
    }

    /// `exit` of the running thread with status `code`; `clear_tid` is the address of the word
    /// the shim cleared for it (0: none), whose waiters wake, as Linux wakes them when a thread
    /// ends. The last thread's exit is the process's.
    pub(crate) fn exit_thread(&mut self, code: i64, clear_tid: i64) -> Outcome {
        if self.threads.live() <= 1 {
            return Outcome::Exit((code & 0xff) as i32);
        }
        if clear_tid != 0 {
            self.futex_wake(clear_tid, i64::from(i32::MAX), u32::MAX);
        }
        if let Some(t) = self.threads.running.take() {
            self.threads.table[t.0 as usize] = None;
        }
        Outcome::ThreadExit
    }

    /// `sched_yield`: the running thread goes behind the others that are ready.
    pub(crate) fn yield_turn(&mut self) -> Outcome {
        if let Some(t) = self.threads.running.take() {
            self.threads.make_ready(t, 0, &[]);
        }
        Outcome::Blocked { until: None }
    }

    /// `futex`, with the value at its address (or, for `FUTEX_WAKE_OP`, the old value of the
    /// second word) in the call's first four bytes of data and, for a wait with a time limit,
    /// the `timespec` after them.
    pub(crate) fn futex(&mut self, now: SimTime, call: &Call<'_>) -> Outcome {
        let a = call.args;
        let (addr, op, val) = (a[0], a[1], a[2]);
        let cmd = op & !(FUTEX_PRIVATE_FLAG | FUTEX_CLOCK_REALTIME);
        let word = || -> Result<u32, i64> {
            call.data
                .get(..4)
                .map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")))
                .ok_or(EFAULT)
        };
        let result = match cmd {
            FUTEX_WAIT | FUTEX_WAIT_BITSET => {
                let bitset = if cmd == FUTEX_WAIT {
                    u32::MAX
                } else {
                    a[5] as u32
                };
                if bitset == 0 {
                    return Outcome::Done(-EINVAL);
                }
                let current = match word() {
                    Ok(w) => w,
                    Err(e) => return Outcome::Done(-e),
                };
                if current != val as u32 {
                    return Outcome::Done(-EAGAIN);
                }
                let until = if a[3] == 0 {
                    None
                } else {
                    let t = match call.data.get(4..).map(timespec) {
                        Some(Ok(t)) => t,
                        Some(Err(e)) => return Outcome::Done(-e),
                        None => return Outcome::Done(-EFAULT),
                    };
                    Some(if cmd == FUTEX_WAIT {
                        now.saturating_add(t)
                    } else {
                        (t as i64).saturating_sub(self.epoch_ns).max(0) as u64
                    })
                };
                if until.is_some_and(|u| u <= now) {
                    return Outcome::Done(-ETIMEDOUT);
                }
                let mut args = a;
                args[5] = i64::from(bitset);
                self.block(
                    &Call {
                        nr: SYS_FUTEX,
                        args,
                        data: &[],
                    },
                    until,
                );
                return Outcome::Blocked { until };
            }
            FUTEX_WAKE => self.futex_wake(addr, val, u32::MAX),
            FUTEX_WAKE_BITSET if a[5] as u32 == 0 => -EINVAL,
            FUTEX_WAKE_BITSET => self.futex_wake(addr, val, a[5] as u32),
            FUTEX_REQUEUE | FUTEX_CMP_REQUEUE => {
                if cmd == FUTEX_CMP_REQUEUE {
                    match word() {
                        Ok(w) if w != a[5] as u32 => return Outcome::Done(-EAGAIN),
                        Ok(_) => {}
                        Err(e) => return Outcome::Done(-e),
                    }
                }
                let woken = self.futex_wake(addr, val, u32::MAX);
                let moved = self.futex_requeue(addr, a[4], a[3]);
                if cmd == FUTEX_CMP_REQUEUE {
                    woken + moved
                } else {
                    woken
                }
            }
            FUTEX_WAKE_OP => match word() {
                Ok(old) => {
                    let mut woken = self.futex_wake(addr, val, u32::MAX);
                    if wake_op_compares(a[5] as u32, old) {
                        woken += self.futex_wake(a[4], a[3], u32::MAX);
                    }
                    woken
                }
                Err(e) => -e,
            },
            _ => {
                self.count_unsupported(call.nr);
                -ENOSYS
            }
        };
        Outcome::Done(result)
    }

    /// Wakes up to `count` threads waiting on `addr` whose bitset meets `bitset`, the longest
    /// waiting first; returns how many.
    fn futex_wake(&mut self, addr: i64, count: i64, bitset: u32) -> i64 {
        let mut woken = 0;
        while woken < count.max(0) {
            let Some(t) = self.longest_futex_waiter(addr, bitset) else {
                break;
            };
            if let Some(th) = self.threads.get_mut(t) {
                th.pending = None;
            }
            self.threads.make_ready(t, 0, &[]);
            woken += 1;
        }
        woken
    }

    /// Moves up to `count` threads waiting on `from` to wait on `to`; returns how many.
    fn futex_requeue(&mut self, from: i64, to: i64, count: i64) -> i64 {
        let mut moved = 0;
        while moved < count.max(0) {
            let Some(t) = self.longest_futex_waiter(from, u32::MAX) else {
                break;
            };
            if let Some(p) = self.threads.get_mut(t).and_then(|th| th.pending.as_mut()) {
                p.args[0] = to;
            }
            moved += 1;
        }
        moved
    }

    fn longest_futex_waiter(&self, addr: i64, bitset: u32) -> Option<ThreadId> {
        self.threads
            .ids()
            .filter_map(|t| {
                let p = self.threads.get(t)?.pending.as_ref()?;
                (p.nr == SYS_FUTEX && p.args[0] == addr && (p.args[5] as u32) & bitset != 0)
                    .then_some((p.seq, t))
            })
            .min()
            .map(|(_, t)| t)
    }
}

/// `FUTEX_WAKE_OP`'s comparison of the second word's old value, as its operation word `op`
/// encodes it (the shim made the change the word also encodes).
fn wake_op_compares(op: u32, old: u32) -> bool {
    let cmp = (op >> 24) & 0xf;
    // 12 bits, sign-extended.
    let arg = ((op & 0xfff) as i32) << 20 >> 20;
    let old = old as i32;
    match cmp {
        0 => old == arg,
        1 => old != arg,
        2 => old < arg,
        3 => old <= arg,
        4 => old > arg,
        5 => old >= arg,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use onionlab_engine::host_rng;

    type TestKernel = Kernel<onionlab_engine::rng::HostRng, u32>;

    fn kernel() -> TestKernel {
        Kernel::new("h", 1000, 0, host_rng(1, 1, 1))
    }

    fn futex(k: &mut TestKernel, now: SimTime, args: [i64; 6], word: u32) -> Outcome {
        let data = word.to_le_bytes();
        k.call(
            now,
            &Call {
                nr: SYS_FUTEX,
                args,
                data: &data,
            },
            &mut Vec::new(),
            &mut Offline,
        )
    }

    /// Makes a thread with `clone` from the running one and returns its slot and id.
    fn spawn(k: &mut TestKernel) -> (ThreadId, i64) {
        let mut out = Vec::new();
        let flags = THREAD_FLAGS | CLONE_PARENT_SETTID | CLONE_CHILD_CLEARTID;
        let tid = match k.call(
            0,
            &Call {
                nr: SYS_CLONE,
                args: [flags, 0x1000, 0, 0, 0, 0],
                data: &[],
            },
            &mut out,
            &mut Offline,
        ) {
            Outcome::Done(tid) => tid,
            other => panic!("{other:?}"),
        };
        (
            ThreadId(u32::from_le_bytes(out[..4].try_into().unwrap())),
            tid,
        )
    }

    #[test]
    fn threads_take_turns_in_the_order_they_become_ready() {
        let mut k = kernel();
        let mut out = Vec::new();
        assert_eq!(k.running(), Some(MAIN_THREAD));
        assert_eq!(k.tid(MAIN_THREAD), Some(1000));
        let (a, tid_a) = spawn(&mut k);
        let (b, tid_b) = spawn(&mut k);
        assert_eq!((a, b), (ThreadId(1), ThreadId(2)));
        assert_eq!((tid_a, tid_b), (10_000_001, 10_000_002));
        // The main thread runs on until it blocks: here, waiting on a futex at 0x40.
        assert_eq!(
            futex(&mut k, 0, [0x40, FUTEX_WAIT, 7, 0, 0, 0], 7),
            Outcome::Blocked { until: None }
        );
        assert_eq!(k.running(), None);
        assert_eq!(k.resume(&mut out), Some((a, Resume::Start)));
        // A value that has changed already: no wait.
        assert_eq!(
            futex(&mut k, 0, [0x40, FUTEX_WAIT, 7, 0, 0, 0], 8),
            Outcome::Done(-EAGAIN)
        );
        // Thread a waits too; b wakes one waiter, the longest waiting: the main thread.
        assert_eq!(
            futex(&mut k, 0, [0x40, FUTEX_WAIT_BITSET, 7, 0, 0, 1], 7),
            Outcome::Blocked { until: None }
        );
        assert_eq!(k.resume(&mut out), Some((b, Resume::Start)));
        assert_eq!(
            futex(&mut k, 0, [0x40, FUTEX_WAKE, 1, 0, 0, 0], 0),
            Outcome::Done(1)
        );
        // A wake-up whose bitset a's wait does not share wakes nobody.
        assert_eq!(
            futex(&mut k, 0, [0x40, FUTEX_WAKE_BITSET, 5, 0, 0, 2], 0),
            Outcome::Done(0)
        );
        // b yields: the main thread, ready first, runs, then b.
        assert_eq!(
            k.call(
                0,
                &Call {
                    nr: SYS_SCHED_YIELD,
                    args: [0; 6],
                    data: &[]
                },
                &mut out,
                &mut Offline
            ),
            Outcome::Blocked { until: None }
        );
        assert_eq!(k.resume(&mut out), Some((MAIN_THREAD, Resume::Reply(0))));
        // The main thread waits with a time limit (absolute, on the process's clock); it
        // times out.
        let mut data = 7u32.to_le_bytes().to_vec();
        data.extend_from_slice(&2i64.to_le_bytes());
        data.extend_from_slice(&0i64.to_le_bytes());
        assert_eq!(
            k.call(
                1_000_000_000,
                &Call {
                    nr: SYS_FUTEX,
                    args: [0x80, FUTEX_WAIT_BITSET | FUTEX_PRIVATE_FLAG, 7, 1, 0, -1],
                    data: &data
                },
                &mut out,
                &mut Offline
            ),
            Outcome::Blocked {
                until: Some(2_000_000_000)
            }
        );
        assert_eq!(k.resume(&mut out), Some((b, Resume::Reply(0))));
        k.wake(MAIN_THREAD, 2_000_000_000, &mut Offline);
        // b exits; its tid word is 0x40, where a waits: a wakes.
        assert_eq!(
            k.call(
                2_000_000_000,
                &Call {
                    nr: SYS_EXIT,
                    args: [0, 0x40, 0, 0, 0, 0],
                    data: &[]
                },
                &mut out,
                &mut Offline
            ),
            Outcome::ThreadExit
        );
        assert_eq!(k.tid(b), None);
        assert_eq!(
            k.resume(&mut out),
            Some((MAIN_THREAD, Resume::Reply(-ETIMEDOUT)))
        );
        k.yield_turn();
        assert_eq!(k.resume(&mut out), Some((a, Resume::Reply(0))));
        // The slot b left is taken again, with a new id.
        let (c, tid_c) = spawn(&mut k);
        assert_eq!((c, tid_c), (ThreadId(2), 10_000_003));
        assert_eq!(
            futex(&mut k, 0, [0x40, FUTEX_WAIT, 0, 0, 0, 0], 0),
            Outcome::Blocked { until: None }
        );
        assert_eq!(k.resume(&mut out), Some((MAIN_THREAD, Resume::Reply(0))));
        assert_eq!(
            futex(&mut k, 0, [0x40, FUTEX_WAIT, 0, 0, 0, 0], 0),
            Outcome::Blocked { until: None }
        );
        assert_eq!(k.resume(&mut out), Some((c, Resume::Start)));
    }

    #[test]
    fn requeue_and_wake_op_move_and_wake_the_right_waiters() {
        let mut out = Vec::new();
        // Main, a and b wait on 0x10 in that order; c runs.
        let mut k = kernel();
        let (a, _) = spawn(&mut k);
        let (b, _) = spawn(&mut k);
        let (c, _) = spawn(&mut k);
        assert_eq!(
            futex(&mut k, 0, [0x10, FUTEX_WAIT, 0, 0, 0, 0], 0),
            Outcome::Blocked { until: None }
        );
        for next in [a, b] {
            assert_eq!(k.resume(&mut out), Some((next, Resume::Start)));
            assert_eq!(
                futex(&mut k, 0, [0x10, FUTEX_WAIT, 0, 0, 0, 0], 0),
                Outcome::Blocked { until: None }
            );
        }
        assert_eq!(k.resume(&mut out), Some((c, Resume::Start)));
        // CMP_REQUEUE with a stale value: EAGAIN; with the right one: wake 1, move 1.
        assert_eq!(
            futex(&mut k, 0, [0x10, FUTEX_CMP_REQUEUE, 1, 1, 0x20, 5], 4),
            Outcome::Done(-EAGAIN)
        );
        assert_eq!(
            futex(&mut k, 0, [0x10, FUTEX_CMP_REQUEUE, 1, 1, 0x20, 5], 5),
            Outcome::Done(2)
        );
        // WAKE_OP: wake 1 on 0x10 (b, still there), and if the old value of 0x20's word was
        // 0 (`cmp` EQ 0), 1 on 0x20 (a, moved there).
        let op = (1u32 << 28) | (1 << 12); // FUTEX_OP_ADD 1, compare EQ 0
        assert_eq!(
            futex(&mut k, 0, [0x10, FUTEX_WAKE_OP, 1, 1, 0x20, op as i64], 0),
            Outcome::Done(2)
        );
        assert_eq!(
            futex(&mut k, 0, [0x10, FUTEX_WAKE, 10, 0, 0, 0], 0),
            Outcome::Done(0)
        );
        // Woken in order: main (by the requeue's wake), then b, then a.
        k.yield_turn();
        let order: Vec<ThreadId> = std::iter::from_fn(|| {
            let r = k.resume(&mut out).map(|(t, _)| t);
            k.threads.running = None;
            r
        })
        .collect();
        assert_eq!(order, vec![MAIN_THREAD, b, a, c]);
    }

    #[test]
    fn a_fork_is_not_supported_and_the_last_exit_ends_the_process() {
        let mut k = kernel();
        let mut out = Vec::new();
        let fork = Call {
            nr: SYS_CLONE,
            args: [17, 0, 0, 0, 0, 0], // SIGCHLD: fork()
            data: &[],
        };
        assert_eq!(
            k.call(0, &fork, &mut out, &mut Offline),
            Outcome::Done(-ENOSYS)
        );
        assert_eq!(k.unsupported(), vec![("clone".to_string(), 1)]);
        let (a, _) = spawn(&mut k);
        // The shim could not make the thread: it is forgotten, and never gets a turn.
        assert_eq!(
            k.call(
                0,
                &Call {
                    nr: REQ_THREAD_FAILED,
                    args: [i64::from(a.0), 0, 0, 0, 0, 0],
                    data: &[]
                },
                &mut out,
                &mut Offline
            ),
            Outcome::Done(0)
        );
        assert_eq!(k.tid(a), None);
        let exit = Call {
            nr: SYS_EXIT,
            args: [3, 0, 0, 0, 0, 0],
            data: &[],
        };
        assert_eq!(k.call(0, &exit, &mut out, &mut Offline), Outcome::Exit(3));
        assert!(wake_op_compares(2 << 24 | 0xfff, u32::MAX - 1)); // -2 < -1
        assert!(!wake_op_compares(4 << 24 | 1, 1)); // 1 > 1
    }
}
