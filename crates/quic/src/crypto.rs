//! The handshake as CRYPTO byte counts: how many bytes each side sends in each packet number
//! space, what was acknowledged or lost, and what arrived.

use crate::ranges::RangeSet;

/// A QUIC ClientHello with its transport parameters (quinn's and Chromium's are 250-350 bytes).
pub(crate) const CLIENT_HELLO: u32 = 300;
/// The ServerHello, carried in the server's Initial; the rest of the server's flight
/// (certificates, Finished) goes in Handshake packets.
pub(crate) const SERVER_HELLO: u32 = 90;
/// The client's TLS Finished: a 4-byte header and a SHA-256 verify_data.
pub(crate) const CLIENT_FINISHED: u32 = 36;

#[derive(Clone, Debug, Default)]
pub(crate) struct Crypto {
    /// Bytes this side sends in the space (0 until it has them to send).
    pub send_total: u32,
    /// Next new offset.
    pub sent: u32,
    /// Ranges to send again.
    lost: RangeSet,
    acked: RangeSet,
    /// Bytes the peer sends in the space.
    pub recv_total: u32,
    received: RangeSet,
}

impl Crypto {
    pub(crate) fn new(send_total: u32, recv_total: u32) -> Self {
        Crypto {
            send_total,
            recv_total,
            ..Crypto::default()
        }
    }

    pub(crate) fn wants_to_send(&self) -> bool {
        !self.lost.is_empty() || self.sent < self.send_total
    }

    /// The next CRYPTO frame's `(offset, len)` of at most `max` bytes.
    pub(crate) fn next_chunk(&mut self, max: u64) -> Option<(u64, u64)> {
        if max == 0 {
            return None;
        }
        if let Some((s, e)) = self.lost.take_front(max) {
            return Some((s, e - s));
        }
        if self.sent >= self.send_total {
            return None;
        }
        let len = u64::from(self.send_total - self.sent).min(max);
        let offset = u64::from(self.sent);
        self.sent += len as u32;
        Some((offset, len))
    }

    pub(crate) fn on_acked(&mut self, offset: u64, len: u64) {
        self.acked.insert(offset, offset + len);
        self.lost.remove(offset, offset + len);
    }

    /// Queues what of `[offset, offset + len)` is unacknowledged for sending again.
    pub(crate) fn on_lost(&mut self, offset: u64, len: u64) {
        self.lost.insert(offset, offset + len);
        for &(s, e) in self.acked.as_slice() {
            self.lost.remove(s, e);
        }
    }

    /// A probe resends everything sent and not acknowledged (handshake flights are small).
    pub(crate) fn requeue_unacked(&mut self) {
        if self.sent > 0 {
            self.on_lost(0, u64::from(self.sent));
        }
    }

    pub(crate) fn on_received(&mut self, offset: u64, len: u64) {
        let end = (offset + len).min(u64::from(self.recv_total));
        self.received.insert(offset, end);
    }

    /// Everything the peer sends in this space has arrived.
    pub(crate) fn recv_complete(&self) -> bool {
        self.recv_total == 0 || self.received.first() == Some((0, u64::from(self.recv_total)))
    }
}
