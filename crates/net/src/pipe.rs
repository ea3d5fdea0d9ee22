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

/// One direction of a connection.
pub struct Pipe<M> {
    entries: SpinMutex<VecDeque<(u64, M)>>,
}

impl<M> Default for Pipe<M> {
    fn default() -> Self {
        Self {
            entries: SpinMutex::new(VecDeque::new()),
        }
    }
}

impl<M> Pipe<M> {
    /// Records that a message ends at stream offset `end`.
    pub(crate) fn push(&self, end: u64, message: M) {
        let mut q = self.entries.lock();
        debug_assert!(q.back().is_none_or(|(e, _)| *e <= end));
        q.push_back((end, message));
    }

    /// Takes every message that ends at or before `offset`, oldest first.
    pub(crate) fn take_through(&self, offset: u64, mut f: impl FnMut(M)) {
        let mut q = self.entries.lock();
        while q.front().is_some_and(|(end, _)| *end <= offset) {
            let (_, m) = q.pop_front().unwrap();
            f(m);
        }
        // A long-lived connection's pipe would otherwise keep the storage of its largest
        // burst (thousands of entries) for the rest of the run. An empty pipe keeps none: most
        // of a full-size network's connections (a relay's channels to peers it shares no busy
        // circuit with, users' channels to their guards) sit idle between bursts, and keeping
        // their pipes' storage cost net-10pct 3% of its peak memory; a busy pipe is rarely
        // empty, so this costs an allocation per burst, not per message.
        if q.is_empty() {
            *q = VecDeque::new();
        } else {
            onionlab_engine::heap::trim(&mut q);
        }
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
