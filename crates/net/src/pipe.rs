//! Application messages carried by a TCP stream, as byte ranges.
//!
//! TCP in onionlab counts bytes and never carries payload, yet receivers need to know what they
//! received (a Tor cell's circuit and command, the end of an HTTP response). The sender writes
//! each message's descriptor into the connection's pipe, keyed by the stream offset where the
//! message ends; the receiver takes it out when its in-order read position passes that offset.
//!
//! The pipe is the one piece of state two hosts share, and it is safe to share: a receiver only
//! ever takes entries for bytes it has received, and those bytes left the sender at least one
//! lookahead earlier, i.e. in an earlier round, so the entry was written before the barrier
//! that separates the two. The result therefore never depends on thread timing.
//!
//! The two ends may still touch one pipe at the same time (the sender appending while the
//! receiver takes older entries), so it needs a lock; but they rarely meet there, and the
//! lock is taken for every message, so a spin lock does: its release is a plain store, where
//! the standard mutex's is a locked exchange, which profiles of large networks showed costing
//! as much as the rest of a push.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use spin::mutex::SpinMutex;

/// Equal messages written back to back, kept as one entry: a circuit's DATA cells of one
/// stream, which a relay's scheduler writes one after another, are most of what a large
/// network's pipes carry (three in four of web-6876's messages equal the one before them), and
/// one entry per run saves the memory traffic of an entry per cell at both ends.
struct Run<M> {
    /// The stream offset where the run's first message ends.
    first_end: u64,
    /// Bytes from one message's end to the next's (meaningful once `count` > 1).
    step: u32,
    count: u32,
    message: M,
}

impl<M> Run<M> {
    fn last_end(&self) -> u64 {
        self.first_end + u64::from(self.step) * u64::from(self.count - 1)
    }
}

/// The runs a pipe holds, oldest first.
///
/// The oldest run is kept in the pipe itself. Most pipes hold one run or none at a time (of
/// web-6876's reads, three in five found a single run, and one push in seven found the pipe
/// empty), so most need no storage of their own: with all runs in a `VecDeque`, each push into
/// an empty pipe allocated its storage and the read that emptied it freed it again, at cold
/// lines each time. The runs behind the first are boxed, so that a pipe, two of which every
/// connection carries, grows by two words, not by a whole second `VecDeque`.
struct Runs<M> {
    /// `None` only while the pipe is empty.
    front: Option<Run<M>>,
    /// The runs behind `front`, once the pipe has held two at a time; given back when it
    /// empties. Boxed on purpose (see above).
    #[allow(clippy::box_collection)]
    rest: Option<Box<VecDeque<Run<M>>>>,
}

impl<M> Runs<M> {
    fn back_mut(&mut self) -> Option<&mut Run<M>> {
        match self.rest.as_mut().and_then(|rest| rest.back_mut()) {
            Some(back) => Some(back),
            None => self.front.as_mut(),
        }
    }

    fn push_back(&mut self, run: Run<M>) {
        if self.front.is_none() {
            self.front = Some(run);
        } else {
            self.rest.get_or_insert_default().push_back(run);
        }
    }
}

/// One direction of a connection.
pub struct Pipe<M> {
    runs: SpinMutex<Runs<M>>,
}

impl<M> Default for Pipe<M> {
    fn default() -> Self {
        Self {
            runs: SpinMutex::new(Runs {
                front: None,
                rest: None,
            }),
        }
    }
}

impl<M: Clone + PartialEq> Pipe<M> {
    /// Records that a message ends at stream offset `end`.
    pub(crate) fn push(&self, end: u64, message: M) {
        let mut q = self.runs.lock();
        if let Some(run) = q.back_mut() {
            debug_assert!(run.last_end() <= end);
            if run.message == message {
                // A run keeps one step, so only messages of the run's size join it; a
                // message of no bytes (step 0) would make the run's split point ambiguous.
                let gap = end - run.last_end();
                let fits = gap > 0 && run.count < u32::MAX;
                if fits && run.count == 1 && gap <= u64::from(u32::MAX) {
                    run.step = gap as u32;
                    run.count = 2;
                    return;
                }
                if fits && run.count > 1 && gap == u64::from(run.step) {
                    run.count += 1;
                    return;
                }
            }
        }
        q.push_back(Run {
            first_end: end,
            step: 0,
            count: 1,
            message,
        });
    }

    /// Records `count` equal messages of `step` bytes each, the last ending at `last_end`: the
    /// messages [`Pipe::push`] would record one by one, at once.
    pub(crate) fn push_run(&self, last_end: u64, step: u32, count: u32, message: M) {
        debug_assert!(count > 0 && step > 0);
        let first_end = last_end - u64::from(step) * u64::from(count - 1);
        let mut q = self.runs.lock();
        if let Some(run) = q.back_mut() {
            debug_assert!(run.last_end() <= first_end);
            // Joined only when the result is one evenly spaced run; otherwise the messages
            // start a run of their own, which delivers them just the same.
            let joins = run.message == message
                && first_end - run.last_end() == u64::from(step)
                && (run.count == 1 || run.step == step)
                && run.count.checked_add(count).is_some();
            if joins {
                run.step = step;
                run.count += count;
                return;
            }
        }
        q.push_back(Run {
            first_end,
            step: if count > 1 { step } else { 0 },
            count,
            message,
        });
    }

    /// Takes every message that ends at or before `offset`, oldest first, as runs of equal
    /// messages: `f(message, n)` stands for `n` copies of `message` back to back.
    pub(crate) fn take_through(&self, offset: u64, mut f: impl FnMut(M, u32)) {
        let mut q = self.runs.lock();
        while let Some(run) = q.front.as_mut() {
            if run.first_end > offset {
                break;
            }
            let through = if run.count == 1 {
                1
            } else {
                // At most `count`, so the quotient fits.
                ((offset - run.first_end) / u64::from(run.step) + 1).min(u64::from(run.count))
                    as u32
            };
            if through < run.count {
                // The read ends inside the run: the rest waits for its bytes.
                f(run.message.clone(), through);
                run.first_end += u64::from(run.step) * u64::from(through);
                run.count -= through;
                break;
            }
            let next = q.rest.as_mut().and_then(|rest| rest.pop_front());
            let run = std::mem::replace(&mut q.front, next).unwrap();
            f(run.message, run.count);
        }
        // A long-lived connection's pipe would otherwise keep the storage of its largest
        // burst (thousands of entries) for the rest of the run. An empty pipe keeps none: most
        // of a full-size network's connections (a relay's channels to peers it shares no busy
        // circuit with, users' channels to their guards) sit idle between bursts, and keeping
        // their pipes' storage cost net-10pct 3% of its peak memory; a busy pipe is rarely
        // empty, so this costs an allocation per burst of several runs, not per message.
        if q.front.is_none() {
            q.rest = None;
        } else if let Some(rest) = q.rest.as_mut() {
            onionlab_engine::heap::trim(rest);
        }
    }

    /// Shows `f` the messages not taken yet, oldest first, each with the stream offset where it
    /// ends, until `f` returns false. A reader that needs what a message says before it has
    /// read the message's last byte (the bytes a managed process reads, which may stop inside
    /// a message) looks here; the entries it sees were written before their bytes left the
    /// sender, as for [`Pipe::take_through`].
    pub(crate) fn peek(&self, mut f: impl FnMut(u64, &M) -> bool) {
        let q = self.runs.lock();
        let rest = q.rest.iter().flat_map(|rest| rest.iter());
        for run in q.front.iter().chain(rest) {
            for i in 0..run.count {
                if !f(
                    run.first_end + u64::from(run.step) * u64::from(i),
                    &run.message,
                ) {
                    return;
                }
            }
        }
    }

    /// Runs held.
    #[cfg(test)]
    fn runs(&self) -> usize {
        let q = self.runs.lock();
        q.front.iter().count() + q.rest.as_ref().map_or(0, |rest| rest.len())
    }

    /// Whether the pipe keeps storage of its own beside its first run.
    #[cfg(test)]
    fn has_storage(&self) -> bool {
        self.runs.lock().rest.is_some()
    }
}

/// Both directions of one connection.
pub struct ConnPipes<M> {
    /// Written by the side that connected.
    pub(crate) forward: Pipe<M>,
    /// Written by the side that accepted.
    pub(crate) backward: Pipe<M>,
}

impl<M> Default for ConnPipes<M> {
    fn default() -> Self {
        Self {
            forward: Pipe::default(),
            backward: Pipe::default(),
        }
    }
}

/// The message pipes of a QUIC connection's streams, shared by its two ends.
///
/// The side that opens a stream creates the stream's pipes and leaves them here under the
/// stream's id; the other side takes them when the stream's first frame arrives. That frame
/// left the opener at least one lookahead after the pipes were left, i.e. in an earlier round,
/// so the hand-over never depends on thread timing. Only streams whose first frame has not yet
/// arrived are held here.
pub struct QuicPipes<M> {
    opened: Mutex<Vec<(u64, Arc<ConnPipes<M>>)>>,
}

impl<M> Default for QuicPipes<M> {
    fn default() -> Self {
        Self {
            opened: Mutex::new(Vec::new()),
        }
    }
}

impl<M> QuicPipes<M> {
    pub(crate) fn offer(&self, stream: u64, pipes: Arc<ConnPipes<M>>) {
        self.opened.lock().unwrap().push((stream, pipes));
    }

    pub(crate) fn take(&self, stream: u64) -> Option<Arc<ConnPipes<M>>> {
        let mut opened = self.opened.lock().unwrap();
        let i = opened.iter().position(|(s, _)| *s == stream)?;
        Some(opened.swap_remove(i).1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn take(pipe: &Pipe<u8>, offset: u64) -> Vec<(u8, u32)> {
        let mut got = Vec::new();
        pipe.take_through(offset, |m, n| got.push((m, n)));
        got
    }

    #[test]
    fn equal_messages_of_one_size_form_a_run_that_reads_split_exactly() {
        let pipe = Pipe::default();
        // Five 10-byte messages 'a', then one 'b', then 'a' again.
        for i in 1..=5 {
            pipe.push(i * 10, b'a');
        }
        pipe.push(60, b'b');
        pipe.push(70, b'a');
        assert_eq!(pipe.runs(), 3);
        assert!(take(&pipe, 9).is_empty());
        assert_eq!(take(&pipe, 10), vec![(b'a', 1)]);
        // A read that ends inside a message takes only the messages it completed.
        assert_eq!(take(&pipe, 39), vec![(b'a', 2)]);
        assert_eq!(take(&pipe, 65), vec![(b'a', 2), (b'b', 1)]);
        assert_eq!(take(&pipe, 1000), vec![(b'a', 1)]);
        assert!(take(&pipe, u64::MAX).is_empty());
    }

    #[test]
    fn peek_shows_each_message_not_taken_with_its_end_until_told_to_stop() {
        let pipe = Pipe::default();
        for i in 1..=3 {
            pipe.push(i * 10, b'a');
        }
        pipe.push(45, b'b');
        assert_eq!(take(&pipe, 15), vec![(b'a', 1)]);
        let mut seen = Vec::new();
        pipe.peek(|end, &m| {
            seen.push((end, m));
            true
        });
        assert_eq!(seen, vec![(20, b'a'), (30, b'a'), (45, b'b')]);
        seen.clear();
        pipe.peek(|end, &m| {
            seen.push((end, m));
            end < 30
        });
        assert_eq!(seen, vec![(20, b'a'), (30, b'a')]);
        // Peeking takes nothing.
        assert_eq!(take(&pipe, 45), vec![(b'a', 2), (b'b', 1)]);
    }

    #[test]
    fn messages_of_another_size_or_of_no_bytes_start_a_new_run() {
        let pipe = Pipe::default();
        pipe.push(10, 1u8);
        pipe.push(20, 1);
        pipe.push(25, 1); // Shorter: its own run.
        pipe.push(25, 1); // No bytes: its own run.
        pipe.push(35, 1);
        assert_eq!(pipe.runs(), 3);
        assert_eq!(take(&pipe, 24), vec![(1, 2)]);
        assert_eq!(take(&pipe, 25), vec![(1, 1), (1, 1)]);
        assert_eq!(take(&pipe, 35), vec![(1, 1)]);
    }

    #[test]
    fn a_run_pushed_at_once_reads_as_the_same_messages_pushed_one_by_one() {
        let one_by_one = Pipe::default();
        let at_once = Pipe::default();
        for pipe in [&one_by_one, &at_once] {
            pipe.push(10, 1u8);
        }
        // Five of 10 bytes right after (they join the first), then three of 7 bytes a gap
        // away, then one more single message.
        for i in 1..=5 {
            one_by_one.push(10 + i * 10, 1);
        }
        at_once.push_run(60, 10, 5, 1);
        for i in 1..=3 {
            one_by_one.push(100 + i * 7, 1);
        }
        at_once.push_run(121, 7, 3, 1);
        one_by_one.push(130, 2);
        at_once.push_run(130, 9, 1, 2);
        assert_eq!(at_once.runs(), 3);
        let mut read = [Vec::new(), Vec::new()];
        for offset in [5, 25, 59, 60, 100, 110, 114, 1000] {
            for (got, pipe) in read.iter_mut().zip([&one_by_one, &at_once]) {
                // Each read as messages one by one, whatever the grouping into runs.
                pipe.take_through(offset, |m, n| got.extend((0..n).map(|_| (offset, m))));
            }
        }
        assert_eq!(read[0], read[1]);
        assert_eq!(read[0].len(), 10);
    }

    #[test]
    fn a_run_split_by_a_read_keeps_growing_at_its_end() {
        let pipe = Pipe::default();
        for i in 1..=4 {
            pipe.push(i * 514, 7u8);
        }
        assert_eq!(take(&pipe, 2 * 514 + 100), vec![(7, 2)]);
        pipe.push(5 * 514, 7);
        assert_eq!(pipe.runs(), 1);
        assert_eq!(take(&pipe, 5 * 514), vec![(7, 3)]);
        // An emptied pipe gives its storage back.
        assert!(!pipe.has_storage());
    }

    #[test]
    fn a_pipe_of_one_run_keeps_no_storage() {
        let pipe = Pipe::default();
        pipe.push(514, 3u8);
        pipe.push_run(5 * 514, 514, 4, 3);
        assert_eq!((pipe.runs(), pipe.has_storage()), (1, false));
        assert_eq!(take(&pipe, 2 * 514), vec![(3, 2)]);
        assert_eq!(take(&pipe, 5 * 514), vec![(3, 3)]);
        // A second run needs storage, given back once the pipe empties.
        pipe.push(6 * 514, 3);
        pipe.push(6 * 514 + 9, 4);
        assert_eq!((pipe.runs(), pipe.has_storage()), (2, true));
        assert_eq!(take(&pipe, 6 * 514), vec![(3, 1)]);
        assert_eq!((pipe.runs(), pipe.has_storage()), (1, true));
        assert_eq!(take(&pipe, u64::MAX), vec![(4, 1)]);
        assert_eq!((pipe.runs(), pipe.has_storage()), (0, false));
    }

    #[test]
    fn delivers_what_a_list_of_single_messages_delivers() {
        use rand::RngExt;
        let mut rng = onionlab_engine::host_rng(15, 0, 0);
        let pipe = Pipe::default();
        // Every message written and not yet read, as (end, message).
        let mut model = std::collections::VecDeque::new();
        let (mut written, mut read) = (0u64, 0u64);
        let mut most_runs = 0;
        for _ in 0..20_000 {
            // Few distinct messages and sizes, so that runs form, split and join.
            let message = rng.random_range(0..3u8);
            let size = [514u32, 514, 514, 100, 0][rng.random_range(0..5usize)];
            match rng.random_range(0..10) {
                0..=3 => {
                    written += u64::from(size);
                    pipe.push(written, message);
                    model.push_back((written, message));
                }
                4..=6 if size > 0 => {
                    let count = rng.random_range(1..=40u32);
                    written += u64::from(size) * u64::from(count);
                    pipe.push_run(written, size, count, message);
                    for i in (0..count).rev() {
                        model.push_back((written - u64::from(size) * u64::from(i), message));
                    }
                }
                _ => {
                    read = rng.random_range(read..=written);
                    let mut got = Vec::new();
                    pipe.take_through(read, |m, n| got.extend((0..n).map(|_| m)));
                    let mut expected = Vec::new();
                    while model.front().is_some_and(|&(end, _)| end <= read) {
                        expected.push(model.pop_front().unwrap().1);
                    }
                    assert_eq!(got, expected);
                }
            }
            most_runs = most_runs.max(pipe.runs());
            assert_eq!(pipe.runs() == 0, model.is_empty());
        }
        assert!(
            most_runs > 10,
            "the test never held many runs ({most_runs})"
        );
    }
}
