//! Sent-packet bookkeeping of one packet number space, for loss detection (RFC 9002 6).
//!
//! Only packets that count in flight (ack-eliciting ones) are recorded: ACK-only packets are
//! never acknowledged for their own sake, so records of them would never be settled. Records
//! sit in packet-number order in a ring buffer; an acknowledged or lost packet is marked and
//! its record dropped once everything older is settled too, so the buffer holds about one
//! flight and, once drained, is released.

use crate::ack::{AckTracker, NEVER};
use crate::crypto::Crypto;
use crate::packet::StreamFrame;
use onionlab_engine::time::SimTime;
use std::collections::VecDeque;

/// Record flags.
pub(crate) const ACKED: u8 = 0x01;
pub(crate) const LOST: u8 = 0x02;
pub(crate) const MAX_DATA: u8 = 0x04;
pub(crate) const MAX_STREAM_DATA: u8 = 0x08;
pub(crate) const HANDSHAKE_DONE: u8 = 0x10;
pub(crate) const CRYPTO: u8 = 0x20;

/// What an ack-eliciting packet carried that may need sending again: frames are retransmitted,
/// not packets.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SentPacket {
    pub pn: u64,
    pub time_sent: SimTime,
    pub stream: [StreamFrame; 2],
    pub msd_id: u32,
    pub crypto_offset: u32,
    pub crypto_len: u16,
    /// UDP payload bytes (at most 65527).
    pub bytes: u16,
    pub stream_frames: u8,
    pub flags: u8,
}

impl SentPacket {
    pub(crate) fn settled(&self) -> bool {
        self.flags & (ACKED | LOST) != 0
    }

    pub(crate) fn stream_frames(&self) -> &[StreamFrame] {
        &self.stream[..usize::from(self.stream_frames)]
    }
}

/// Above this many records of capacity, a drained buffer is released (so an idle connection
/// does not keep a bulk transfer's buffer) while small flights reuse theirs.
const KEEP_CAPACITY: usize = 8;

#[derive(Clone, Debug)]
pub(crate) struct Recovery {
    pub sent: VecDeque<SentPacket>,
    pub next_pn: u64,
    /// Largest packet number the peer acknowledged (`NEVER` for none).
    pub largest_acked: u64,
    /// When the earliest packet not yet lost by the time threshold will be (RFC 9002 6.1.2).
    pub loss_time: SimTime,
    /// When the last ack-eliciting packet was sent.
    pub last_eliciting: SimTime,
    /// Records neither acknowledged nor lost.
    pub outstanding: u32,
}

impl Recovery {
    pub(crate) fn new() -> Self {
        Recovery {
            sent: VecDeque::new(),
            next_pn: 0,
            largest_acked: NEVER,
            loss_time: NEVER,
            last_eliciting: 0,
            outstanding: 0,
        }
    }

    pub(crate) fn largest_acked(&self) -> Option<u64> {
        (self.largest_acked != NEVER).then_some(self.largest_acked)
    }

    /// Index of the first record with a packet number of at least `pn`.
    pub(crate) fn index_of(&self, pn: u64) -> usize {
        self.sent.partition_point(|p| p.pn < pn)
    }

    /// Drops settled records from the front.
    pub(crate) fn drop_settled(&mut self) {
        while self.sent.front().is_some_and(SentPacket::settled) {
            self.sent.pop_front();
        }
        if self.sent.is_empty() && self.sent.capacity() > KEEP_CAPACITY {
            self.sent = VecDeque::new();
        }
    }

    pub(crate) fn heap_bytes(&self) -> usize {
        self.sent.capacity() * std::mem::size_of::<SentPacket>()
    }
}

/// Everything about one packet number space.
#[derive(Clone, Debug)]
pub(crate) struct SpaceState {
    pub rec: Recovery,
    pub ack: AckTracker,
    pub crypto: Crypto,
    /// Probe packets owed after a PTO; they may exceed the congestion window.
    pub probes: u8,
}

impl SpaceState {
    pub(crate) fn new(crypto: Crypto) -> Self {
        SpaceState {
            rec: Recovery::new(),
            ack: AckTracker::new(),
            crypto,
            probes: 0,
        }
    }
}
