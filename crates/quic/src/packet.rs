//! What travels between two endpoints: one QUIC packet per UDP datagram, described by its size
//! and its frames' fields, never by payload bytes.
//!
//! The layout is chosen for size, not beauty: a packet is copied into every simulator event that
//! carries it, so it must stay within 112 bytes. Hence stream ids travel as `u32` (a connection
//! may use four billion stream ids), ACK gaps and lengths beyond the first range as `u16`, and
//! presence is marked by bits in [`Frames`] rather than by `Option`s.

use std::fmt;

/// Stream id as RFC 9000 numbers it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StreamId(pub u64);

impl StreamId {
    /// Bit 0 names the initiator: 0 for the client.
    pub fn is_client_initiated(self) -> bool {
        self.0 & 1 == 0
    }

    /// Bit 1 is set for unidirectional streams, which the model does not use.
    pub fn is_bidirectional(self) -> bool {
        self.0 & 2 == 0
    }

    /// The stream's index among the streams of its initiator and type (`id >> 2`).
    pub fn index(self) -> u64 {
        self.0 >> 2
    }
}

/// Packet number space (RFC 9000 12.3). `Data` is the application data space of 1-RTT packets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Space {
    /// Initial packets: the ClientHello and ServerHello, under keys anyone can derive.
    Initial,
    /// Handshake packets: the rest of the server's flight and the client's Finished.
    Handshake,
    /// 1-RTT packets: stream data, flow control and HANDSHAKE_DONE.
    Data,
}

impl Space {
    pub(crate) const ALL: [Space; 3] = [Space::Initial, Space::Handshake, Space::Data];

    pub(crate) fn index(self) -> usize {
        match self {
            Space::Initial => 0,
            Space::Handshake => 1,
            Space::Data => 2,
        }
    }
}

/// Which frame kinds a packet carries (besides STREAM frames, counted by `stream_frames`).
#[derive(Clone, Copy, PartialEq, Eq, Default)]
pub struct Frames(pub u8);

impl Frames {
    /// An ACK frame, described by `QuicPacket::ack`.
    pub const ACK: Frames = Frames(0x01);
    /// A PING: makes a packet ack-eliciting without carrying data (a probe with nothing else
    /// to send).
    pub const PING: Frames = Frames(0x02);
    /// PADDING: fills a client's Initial to 1200 bytes, or a tiny packet up to what header
    /// protection samples.
    pub const PADDING: Frames = Frames(0x04);
    /// A CRYPTO frame of handshake bytes (`QuicPacket::crypto_offset` and `crypto_len`).
    pub const CRYPTO: Frames = Frames(0x08);
    /// A MAX_DATA frame raising the connection's flow-control limit (`QuicPacket::max_data`).
    pub const MAX_DATA: Frames = Frames(0x10);
    /// A MAX_STREAM_DATA frame raising one stream's flow-control limit
    /// (`QuicPacket::max_stream_data_id` and `max_stream_data`).
    pub const MAX_STREAM_DATA: Frames = Frames(0x20);
    /// HANDSHAKE_DONE: the server tells the client the handshake is confirmed.
    pub const HANDSHAKE_DONE: Frames = Frames(0x40);
    /// CONNECTION_CLOSE: the sender has closed the connection.
    pub const CONNECTION_CLOSE: Frames = Frames(0x80);
    /// No frame kind: the empty set that others are added to.
    pub const NONE: Frames = Frames(0);

    /// Whether every kind in `other` is present.
    pub const fn contains(self, other: Frames) -> bool {
        self.0 & other.0 == other.0
    }

    /// Adds the kinds in `other`.
    pub fn insert(&mut self, other: Frames) {
        self.0 |= other.0;
    }
}

impl fmt::Debug for Frames {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names = [
            (Frames::ACK, "ACK"),
            (Frames::PING, "PING"),
            (Frames::PADDING, "PADDING"),
            (Frames::CRYPTO, "CRYPTO"),
            (Frames::MAX_DATA, "MAX_DATA"),
            (Frames::MAX_STREAM_DATA, "MAX_STREAM_DATA"),
            (Frames::HANDSHAKE_DONE, "HANDSHAKE_DONE"),
            (Frames::CONNECTION_CLOSE, "CONNECTION_CLOSE"),
        ];
        let mut first = true;
        for (flag, name) in names {
            if self.contains(flag) {
                if !first {
                    f.write_str("|")?;
                }
                f.write_str(name)?;
                first = false;
            }
        }
        if first {
            f.write_str("-")?;
        }
        Ok(())
    }
}

/// One ACK range below the first: `gap` unacknowledged packets, then `len` acknowledged ones
/// (both counted exactly, not in RFC 9000's minus-one encoding). `len == 0` marks an unused
/// slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct AckRange {
    /// Packets not acknowledged between this range and the newer one above it.
    pub gap: u16,
    /// Packets acknowledged in this range; 0 for an unused slot.
    pub len: u16,
}

/// An ACK frame (RFC 9000 19.3): the first range ends at `largest` and holds `first` packets;
/// up to three older ranges follow, the most recent ones. Older ranges were reported by
/// earlier ACKs, as TCP's SACK option carries only the latest three or four blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct AckFrame {
    /// Largest packet number acknowledged: the top of the first range.
    pub largest: u64,
    /// Time the receiver held the ACK since `largest` arrived, microseconds.
    pub delay_us: u32,
    /// Packets in the first range, `largest` included (at least 1).
    pub first: u32,
    /// Older ranges below the first, newest first; unused slots have `len == 0`.
    pub ranges: [AckRange; 3],
}

impl AckFrame {
    /// The acknowledged ranges as inclusive `(low, high)` packet numbers, newest first.
    pub fn iter(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        let first_low = self
            .largest
            .saturating_sub(u64::from(self.first.max(1)) - 1);
        let mut low = first_low;
        std::iter::once((first_low, self.largest)).chain(
            self.ranges
                .iter()
                .take_while(|r| r.len > 0)
                .map_while(move |r| {
                    let high = low.checked_sub(u64::from(r.gap) + 1)?;
                    let l = high.checked_sub(u64::from(r.len) - 1)?;
                    low = l;
                    Some((l, high))
                }),
        )
    }

    /// Number of ranges beyond the first.
    pub fn extra_ranges(&self) -> usize {
        self.ranges.iter().take_while(|r| r.len > 0).count()
    }

    /// Encoded size (RFC 9000 19.3), with ack_delay_exponent 3.
    pub fn encoded_len(&self) -> u32 {
        let mut n = 1
            + varint_len(self.largest)
            + varint_len(u64::from(self.delay_us >> 3))
            + varint_len(self.extra_ranges() as u64)
            + varint_len(u64::from(self.first.max(1)) - 1);
        for r in self.ranges.iter().take_while(|r| r.len > 0) {
            n += varint_len(u64::from(r.gap).saturating_sub(1)) + varint_len(u64::from(r.len) - 1);
        }
        n
    }
}

/// A STREAM frame: `len` bytes of stream `id` at `offset`, with or without FIN.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct StreamFrame {
    /// Stream offset of the frame's first byte.
    pub offset: u64,
    /// The stream id (see [`StreamFrame::stream`]); `u32` keeps packets small.
    pub id: u32,
    /// Stream bytes carried (the frame's header not counted).
    pub len: u16,
    /// The stream ends with this frame: its final size is `offset + len`.
    pub fin: bool,
}

impl StreamFrame {
    /// The stream id, widened back from the packed `id`.
    pub fn stream(&self) -> StreamId {
        StreamId(u64::from(self.id))
    }

    /// Type byte, stream id, offset (omitted at 0) and an explicit length (always present,
    /// which real stacks omit for a packet's last frame).
    pub fn encoded_len(&self) -> u32 {
        stream_frame_overhead(u64::from(self.id), self.offset, u64::from(self.len))
            + u32::from(self.len)
    }
}

pub(crate) fn stream_frame_overhead(id: u64, offset: u64, len: u64) -> u32 {
    let off = if offset > 0 { varint_len(offset) } else { 0 };
    1 + varint_len(id) + off + varint_len(len)
}

/// What travels in one UDP datagram: sizes and frame descriptions only. Copy, no heap.
/// Each packet is its own datagram: the model does not coalesce packets of different spaces.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct QuicPacket {
    /// Packet number space, which also decides between the long and the short header.
    pub space: Space,
    /// Packet number within its space: counts up from 0 and is never reused.
    pub pn: u64,
    /// UDP payload bytes: header, frames and AEAD tag.
    pub bytes: u32,
    /// Frame kinds present (STREAM frames are counted by `stream_frames`).
    pub frames: Frames,
    /// Valid if `frames` contains ACK.
    pub ack: AckFrame,
    /// The first `stream_frames` entries are valid.
    pub stream: [StreamFrame; 2],
    /// Valid entries of `stream` (0 to 2).
    pub stream_frames: u8,
    /// CRYPTO frame (`frames` contains CRYPTO): offset and length of handshake bytes.
    pub crypto_offset: u32,
    /// Handshake bytes the CRYPTO frame carries.
    pub crypto_len: u16,
    /// MAX_DATA value.
    pub max_data: u64,
    /// MAX_STREAM_DATA: stream id and value.
    pub max_stream_data_id: u32,
    /// MAX_STREAM_DATA value: the stream offset, in bytes, up to which the peer may send.
    pub max_stream_data: u64,
}

impl QuicPacket {
    /// A packet with no frames yet.
    pub(crate) fn empty(space: Space, pn: u64) -> Self {
        QuicPacket {
            space,
            pn,
            bytes: 0,
            frames: Frames::NONE,
            ack: AckFrame::default(),
            stream: [StreamFrame::default(); 2],
            stream_frames: 0,
            crypto_offset: 0,
            crypto_len: 0,
            max_data: 0,
            max_stream_data_id: 0,
            max_stream_data: 0,
        }
    }

    /// Whether the receiver must acknowledge it: anything but ACK, PADDING and
    /// CONNECTION_CLOSE (RFC 9002 2).
    pub fn ack_eliciting(&self) -> bool {
        self.stream_frames > 0
            || self.frames.0 & !(Frames::ACK.0 | Frames::PADDING.0 | Frames::CONNECTION_CLOSE.0)
                != 0
    }

    /// Counts towards bytes in flight: ack-eliciting or padded (RFC 9002 2).
    pub fn in_flight(&self) -> bool {
        self.ack_eliciting() || self.frames.contains(Frames::PADDING)
    }

    /// The valid STREAM frames.
    pub fn stream_frames(&self) -> &[StreamFrame] {
        &self.stream[..usize::from(self.stream_frames.min(2))]
    }

    /// Stream payload bytes carried.
    pub fn stream_bytes(&self) -> u64 {
        self.stream_frames().iter().map(|f| u64::from(f.len)).sum()
    }
}

/// Length of a variable-length integer (RFC 9000 16).
pub fn varint_len(v: u64) -> u32 {
    if v < 1 << 6 {
        1
    } else if v < 1 << 14 {
        2
    } else if v < 1 << 30 {
        4
    } else {
        8
    }
}

/// AEAD tag of every packet (AES-GCM and ChaCha20-Poly1305 alike).
pub(crate) const AEAD_TAG: u32 = 16;
/// Connection id length both ends use (quinn and Chromium pick 8 bytes).
const CID_LEN: u32 = 8;

/// Packet number length (RFC 9000 A.2): enough bits to cover twice the span between the
/// packet number and the largest the peer has acknowledged.
pub(crate) fn pn_len(pn: u64, largest_acked: Option<u64>) -> u32 {
    let unacked = match largest_acked {
        Some(l) => pn.saturating_sub(l),
        None => pn + 1,
    };
    let bits = 64 - unacked.max(1).leading_zeros() + 1;
    bits.div_ceil(8).clamp(1, 4)
}

/// Header bytes before the frames (RFC 9000 17.2 and 17.3). Long headers carry a 2-byte
/// length field; Initial packets also a zero-length token.
pub(crate) fn header_len(space: Space, pn_len: u32) -> u32 {
    match space {
        Space::Initial => 1 + 4 + 1 + CID_LEN + 1 + CID_LEN + 1 + 2 + pn_len,
        Space::Handshake => 1 + 4 + 1 + CID_LEN + 1 + CID_LEN + 2 + pn_len,
        Space::Data => 1 + CID_LEN + pn_len,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packet_is_small() {
        let size = std::mem::size_of::<QuicPacket>();
        assert!(size <= 112, "QuicPacket is {size} bytes");
    }

    #[test]
    fn varints_and_pn_lengths() {
        assert_eq!(varint_len(63), 1);
        assert_eq!(varint_len(64), 2);
        assert_eq!(varint_len(16383), 2);
        assert_eq!(varint_len(16384), 4);
        assert_eq!(varint_len(1 << 30), 8);
        // RFC 9000 A.2's example: 0xac5c02 with 0xabe8b3 acknowledged needs 2 bytes...
        assert_eq!(pn_len(0xac5c02, Some(0xabe8b3)), 2);
        // ... and 0xace8fe needs 3.
        assert_eq!(pn_len(0xace8fe, Some(0xabe8b3)), 3);
        assert_eq!(pn_len(0, None), 1);
        assert_eq!(pn_len(200, None), 2);
    }

    #[test]
    fn ack_ranges_round_trip() {
        let a = AckFrame {
            largest: 100,
            delay_us: 0,
            first: 5,
            ranges: [
                AckRange { gap: 2, len: 3 },
                AckRange { gap: 1, len: 1 },
                AckRange::default(),
            ],
        };
        let v: Vec<_> = a.iter().collect();
        assert_eq!(v, vec![(96, 100), (91, 93), (89, 89)]);
        assert_eq!(a.extra_ranges(), 2);
    }

    #[test]
    fn ack_eliciting_frames() {
        let mut p = QuicPacket::empty(Space::Data, 0);
        p.frames.insert(Frames::ACK);
        p.frames.insert(Frames::PADDING);
        assert!(!p.ack_eliciting());
        assert!(p.in_flight());
        p.frames.insert(Frames::PING);
        assert!(p.ack_eliciting());
        let mut q = QuicPacket::empty(Space::Data, 0);
        q.stream_frames = 1;
        assert!(q.ack_eliciting());
    }
}
