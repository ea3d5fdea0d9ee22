//! Streams: the send side (buffered, in-flight, lost and acknowledged byte ranges), the receive
//! side (reassembly and in-order delivery) and the table that finds a stream by id.
//!
//! Like the packets, streams carry no bytes: a send side is a handful of offsets plus range
//! sets that are empty (8 bytes) unless loss or reordering is being repaired.

use crate::ack::NEVER;
use crate::flow::RecvWindow;
use crate::ranges::RangeSet;
use std::collections::VecDeque;

/// A frame's worth of stream data chosen for sending.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Chunk {
    pub offset: u64,
    pub len: u64,
    pub fin: bool,
    /// Retransmission of data sent before (from the lost queue).
    pub retransmit: bool,
}

#[derive(Clone, Debug)]
pub(crate) struct SendStream {
    /// End offset of what the application wrote.
    pub written: u64,
    /// End of the data sent at least once (the next new byte).
    pub sent: u64,
    /// Everything below is acknowledged.
    pub acked: u64,
    /// Acknowledged ranges above `acked`.
    acked_above: RangeSet,
    /// Ranges to send again (declared lost, or queued by a probe), above `acked`.
    lost: RangeSet,
    /// The peer's MAX_STREAM_DATA.
    pub peer_limit: u64,
    /// The application finished the stream (FIN after `written`).
    pub fin: bool,
    pub fin_sent: bool,
    pub fin_acked: bool,
    /// The FIN must be sent again.
    fin_lost: bool,
}

impl SendStream {
    pub(crate) fn new(peer_limit: u64) -> Self {
        SendStream {
            written: 0,
            sent: 0,
            acked: 0,
            acked_above: RangeSet::new(),
            lost: RangeSet::new(),
            peer_limit,
            fin: false,
            fin_sent: false,
            fin_acked: false,
            fin_lost: false,
        }
    }

    /// Unacknowledged plus unsent bytes: what the send buffer holds.
    pub(crate) fn buffered(&self) -> u64 {
        self.written - self.acked
    }

    pub(crate) fn unsent(&self) -> u64 {
        self.written - self.sent
    }

    /// Bytes waiting for retransmission.
    pub(crate) fn lost_bytes(&self) -> u64 {
        self.lost.total()
    }

    /// Sent, not acknowledged, and not waiting to be sent again.
    pub(crate) fn in_flight(&self) -> u64 {
        (self.sent - self.acked) - self.acked_above.total() - self.lost.total()
    }

    /// Whether a frame could be produced with `conn_credit` bytes of connection-level credit.
    pub(crate) fn wants_to_send(&self, conn_credit: u64) -> bool {
        !self.lost.is_empty() || self.fin_lost || self.can_send_new(conn_credit)
    }

    fn can_send_new(&self, conn_credit: u64) -> bool {
        let new = self.sent < self.written && self.sent < self.peer_limit && conn_credit > 0;
        new || (self.fin && !self.fin_sent && self.sent == self.written)
    }

    /// New data exists but only connection-level credit holds it back.
    pub(crate) fn blocked_by_connection(&self) -> bool {
        self.lost.is_empty()
            && !self.fin_lost
            && self.sent < self.written
            && self.sent < self.peer_limit
    }

    /// Takes the next frame of at most `max` bytes: lost data first, then new data within the
    /// stream's and the connection's limits. A FIN-only frame needs no room for data.
    pub(crate) fn next_chunk(&mut self, max: u64, conn_credit: u64) -> Option<Chunk> {
        if !self.lost.is_empty() {
            let (s, e) = self.lost.take_front(max)?;
            let fin = self.fin && e == self.written && self.fin_lost;
            if fin {
                self.fin_lost = false;
            }
            return Some(Chunk {
                offset: s,
                len: e - s,
                fin,
                retransmit: true,
            });
        }
        if self.fin_lost {
            self.fin_lost = false;
            return Some(Chunk {
                offset: self.written,
                len: 0,
                fin: true,
                retransmit: true,
            });
        }
        let len = (self.written - self.sent)
            .min(self.peer_limit.saturating_sub(self.sent))
            .min(conn_credit)
            .min(max);
        let fin = self.fin && !self.fin_sent && self.sent + len == self.written;
        if len == 0 && !fin {
            return None;
        }
        let offset = self.sent;
        self.sent += len;
        if fin {
            self.fin_sent = true;
        }
        Some(Chunk {
            offset,
            len,
            fin,
            retransmit: false,
        })
    }

    /// A frame was acknowledged. Returns the bytes that left the lost queue (acknowledged
    /// after all before being resent).
    pub(crate) fn on_acked(&mut self, offset: u64, len: u64, fin: bool) -> u64 {
        let end = offset + len;
        if fin {
            self.fin_acked = true;
            self.fin_lost = false;
        }
        let unlost = self.lost.remove(offset, end);
        if end > self.acked {
            if offset <= self.acked {
                self.acked = end;
                while let Some((_, e)) = self.acked_above.pop_if_starts_by(self.acked) {
                    self.acked = self.acked.max(e);
                }
            } else {
                self.acked_above.insert(offset, end);
            }
        }
        unlost
    }

    /// A frame was lost (or a probe re-queues it): whatever of it is still unacknowledged goes
    /// back to the lost queue. Returns the bytes added.
    pub(crate) fn on_lost(&mut self, offset: u64, len: u64, fin: bool) -> u64 {
        let start = offset.max(self.acked);
        let end = offset + len;
        let mut added = 0;
        if start < end {
            // Insert the parts not acknowledged yet.
            let mut at = start;
            // Disjoint fields: the acknowledged ranges are read while the lost ones change.
            for &(s, e) in self.acked_above.as_slice() {
                if e <= at || s >= end {
                    continue;
                }
                if s > at {
                    added += self.lost.insert(at, s);
                }
                at = at.max(e);
            }
            if at < end {
                added += self.lost.insert(at, end);
            }
        }
        if fin && !self.fin_acked {
            self.fin_lost = true;
        }
        added
    }

    /// Everything written, the FIN included, is acknowledged.
    pub(crate) fn is_done(&self) -> bool {
        self.fin && self.fin_acked && self.acked == self.written
    }

    pub(crate) fn heap_bytes(&self) -> usize {
        self.acked_above.heap_bytes() + self.lost.heap_bytes()
    }

    pub(crate) fn check(&self) {
        self.acked_above.check();
        self.lost.check();
        assert!(self.acked <= self.sent && self.sent <= self.written);
        if let Some((s, _)) = self.lost.first() {
            assert!(s >= self.acked, "lost {s} below acked {}", self.acked);
        }
        assert!(self
            .lost
            .as_slice()
            .last()
            .is_none_or(|&(_, e)| e <= self.sent));
    }
}

/// What a received frame changed.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct RecvOutcome {
    /// Growth of the highest offset received (what connection flow control counts).
    pub highest_grew: u64,
    /// Bytes newly in order.
    pub in_order: u64,
}

#[derive(Clone, Debug)]
pub(crate) struct RecvStream {
    /// Bytes the application has read.
    pub read: u64,
    /// End of the bytes received in order.
    pub contig: u64,
    /// Ranges received above `contig`.
    above: RangeSet,
    /// Highest offset received.
    pub highest: u64,
    /// The stream's final size once a FIN arrived (`NEVER` before).
    pub final_size: u64,
    pub window: RecvWindow,
}

impl RecvStream {
    pub(crate) fn new(window: u64) -> Self {
        RecvStream {
            read: 0,
            contig: 0,
            above: RangeSet::new(),
            highest: 0,
            final_size: NEVER,
            window: RecvWindow::new(window),
        }
    }

    /// Takes in a STREAM frame. Bytes beyond the announced limit (which a correct peer never
    /// sends) are ignored, and so is a FIN that comes with them.
    pub(crate) fn on_frame(&mut self, offset: u64, len: u64, fin: bool) -> RecvOutcome {
        let mut out = RecvOutcome::default();
        let mut end = offset + len;
        let mut fin = fin;
        if end > self.window.limit {
            end = self.window.limit;
            fin = false;
        }
        if self.final_size != NEVER {
            end = end.min(self.final_size);
        } else if fin && end >= self.highest {
            self.final_size = end;
        }
        if end > self.highest {
            out.highest_grew = end - self.highest;
            self.highest = end;
        }
        if end <= self.contig || offset >= end {
            return out;
        }
        if offset <= self.contig {
            let before = self.contig;
            self.contig = end;
            while let Some((_, e)) = self.above.pop_if_starts_by(self.contig) {
                self.contig = self.contig.max(e);
            }
            out.in_order = self.contig - before;
        } else {
            self.above.insert(offset, end);
        }
        out
    }

    pub(crate) fn readable(&self) -> u64 {
        self.contig - self.read
    }

    /// The FIN arrived and everything before it is in order.
    #[cfg(test)]
    pub(crate) fn fin_reached(&self) -> bool {
        self.final_size != NEVER && self.contig >= self.final_size
    }

    /// The FIN arrived and the application has read everything before it.
    pub(crate) fn is_done(&self) -> bool {
        self.final_size != NEVER && self.read >= self.final_size
    }

    pub(crate) fn heap_bytes(&self) -> usize {
        self.above.heap_bytes()
    }

    pub(crate) fn check(&self) {
        self.above.check();
        assert!(self.read <= self.contig && self.contig <= self.highest);
        assert!(self.highest <= self.window.limit);
        if let Some((s, _)) = self.above.first() {
            assert!(s > self.contig);
        }
    }
}

/// One stream, both directions.
#[derive(Clone, Debug)]
pub(crate) struct Stream {
    pub send: SendStream,
    pub recv: RecvStream,
    /// In the connection's queue of streams with something to send.
    pub queued: bool,
    /// A MAX_STREAM_DATA is owed (the stream is in the flow-control queue).
    pub flow_queued: bool,
    /// The application wants `StreamWritable` when buffer space frees.
    pub wants_writable: bool,
    /// `StreamReadable` reported and not yet followed by a `read`.
    pub readable_signalled: bool,
    pub finished_signalled: bool,
}

impl Stream {
    pub(crate) fn new(send_limit: u64, recv_window: u64) -> Self {
        Stream {
            send: SendStream::new(send_limit),
            recv: RecvStream::new(recv_window),
            queued: false,
            flow_queued: false,
            wants_writable: false,
            readable_signalled: false,
            finished_signalled: false,
        }
    }

    /// Both directions are finished: the stream can be forgotten.
    pub(crate) fn is_done(&self) -> bool {
        self.send.is_done() && self.recv.is_done()
    }

    pub(crate) fn heap_bytes(&self) -> usize {
        std::mem::size_of::<Stream>() + self.send.heap_bytes() + self.recv.heap_bytes()
    }
}

/// The streams of one initiator, as a window over stream indices (`id >> 2`): ids are opened
/// in order, so the window's base moves up as the oldest streams are forgotten, lookups are an
/// index, and memory follows the span of open streams rather than every stream ever opened.
/// Streams are boxed so a forgotten stream inside the window costs one pointer.
#[derive(Clone, Debug, Default)]
pub(crate) struct StreamTable {
    base: u64,
    slots: VecDeque<Option<Box<Stream>>>,
    /// Index the next stream will take.
    pub next: u64,
    /// Streams open.
    pub open: u32,
}

impl StreamTable {
    pub(crate) fn get(&self, index: u64) -> Option<&Stream> {
        let i = index.checked_sub(self.base)?;
        self.slots.get(usize::try_from(i).ok()?)?.as_deref()
    }

    pub(crate) fn get_mut(&mut self, index: u64) -> Option<&mut Stream> {
        let i = index.checked_sub(self.base)?;
        self.slots.get_mut(usize::try_from(i).ok()?)?.as_deref_mut()
    }

    /// Opens the next stream; returns its index.
    pub(crate) fn open(&mut self, stream: Stream) -> u64 {
        if self.slots.is_empty() {
            self.base = self.next;
        }
        let index = self.next;
        self.slots.push_back(Some(Box::new(stream)));
        self.next += 1;
        self.open += 1;
        index
    }

    /// Forgets a stream; the window's start moves past forgotten streams.
    pub(crate) fn forget(&mut self, index: u64) {
        let Some(i) = index.checked_sub(self.base) else {
            return;
        };
        let Some(slot) = self.slots.get_mut(i as usize) else {
            return;
        };
        if slot.take().is_some() {
            self.open -= 1;
        }
        while self.slots.front().is_some_and(Option::is_none) {
            self.slots.pop_front();
            self.base += 1;
        }
        if self.slots.is_empty() {
            // Release the window's memory once no stream is open.
            self.slots = VecDeque::new();
            self.base = self.next;
        }
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = (u64, &Stream)> + '_ {
        let base = self.base;
        self.slots
            .iter()
            .enumerate()
            .filter_map(move |(i, s)| s.as_deref().map(|s| (base + i as u64, s)))
    }

    pub(crate) fn heap_bytes(&self) -> usize {
        self.slots.capacity() * std::mem::size_of::<Option<Box<Stream>>>()
            + self.iter().map(|(_, s)| s.heap_bytes()).sum::<usize>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn send_side_loss_and_ack() {
        let mut s = SendStream::new(10_000);
        s.written = 3000;
        s.fin = true;
        let a = s.next_chunk(1000, u64::MAX).unwrap();
        assert_eq!((a.offset, a.len, a.fin), (0, 1000, false));
        let b = s.next_chunk(1000, u64::MAX).unwrap();
        let c = s.next_chunk(1000, u64::MAX).unwrap();
        assert!(c.fin);
        assert!(s.next_chunk(1000, u64::MAX).is_none());
        s.on_acked(c.offset, c.len, c.fin);
        assert_eq!(s.in_flight(), 2000);
        assert_eq!(s.on_lost(a.offset, a.len, false), 1000);
        s.on_acked(b.offset, b.len, false);
        assert_eq!(s.in_flight(), 0);
        let r = s.next_chunk(600, u64::MAX).unwrap();
        assert_eq!((r.offset, r.len, r.retransmit), (0, 600, true));
        // A late ACK of the original covers the rest of the lost range.
        assert_eq!(s.on_acked(0, 1000, false), 400);
        assert!(s.is_done());
        s.check();
    }

    #[test]
    fn receive_side_reassembles() {
        let mut r = RecvStream::new(10_000);
        assert_eq!(r.on_frame(1000, 1000, false).in_order, 0);
        assert_eq!(r.on_frame(3000, 500, true).highest_grew, 1500);
        assert_eq!(r.on_frame(0, 1000, false).in_order, 2000);
        assert!(!r.fin_reached());
        assert_eq!(r.on_frame(2000, 1000, false).in_order, 1500);
        assert!(r.fin_reached());
        // Duplicates change nothing.
        let o = r.on_frame(0, 3500, false);
        assert_eq!((o.in_order, o.highest_grew), (0, 0));
        r.read = 3500;
        assert!(r.is_done());
        r.check();
    }

    #[test]
    fn table_window_moves() {
        let mut t = StreamTable::default();
        for _ in 0..3 {
            t.open(Stream::new(1, 1));
        }
        t.forget(1);
        assert!(t.get(1).is_none() && t.get(0).is_some());
        t.forget(0);
        assert_eq!(t.base, 2);
        t.forget(2);
        assert_eq!(t.open, 0);
        assert_eq!(t.heap_bytes(), 0);
        assert_eq!(t.open(Stream::new(1, 1)), 3);
    }
}
