//! What travels between two connections: header fields and a payload length.

use std::fmt;

/// TCP control bits. Only the ones whose semantics the model implements exist.
#[derive(Clone, Copy, PartialEq, Eq, Default)]
pub struct TcpFlags(pub u8);

impl TcpFlags {
    /// The sender has no more data: its stream ends here.
    pub const FIN: TcpFlags = TcpFlags(0x01);
    /// Opens the connection and carries the initial sequence number.
    pub const SYN: TcpFlags = TcpFlags(0x02);
    /// Aborts the connection.
    pub const RST: TcpFlags = TcpFlags(0x04);
    /// The acknowledgment number is valid (every segment but the opening SYN carries it).
    pub const ACK: TcpFlags = TcpFlags(0x10);
    /// No control bit set: the empty set that others are added to.
    pub const NONE: TcpFlags = TcpFlags(0);

    /// Whether every bit of `other` is set.
    pub const fn contains(self, other: TcpFlags) -> bool {
        self.0 & other.0 == other.0
    }

    /// Both sets of bits (what `|` does, usable in `const` context).
    pub const fn union(self, other: TcpFlags) -> TcpFlags {
        TcpFlags(self.0 | other.0)
    }

    /// Sets the bits of `other` in place.
    pub fn insert(&mut self, other: TcpFlags) {
        self.0 |= other.0;
    }
}

impl std::ops::BitOr for TcpFlags {
    type Output = TcpFlags;
    fn bitor(self, rhs: TcpFlags) -> TcpFlags {
        self.union(rhs)
    }
}

impl fmt::Debug for TcpFlags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names = [
            (TcpFlags::SYN, "SYN"),
            (TcpFlags::ACK, "ACK"),
            (TcpFlags::FIN, "FIN"),
            (TcpFlags::RST, "RST"),
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

/// One TCP segment, without payload bytes.
///
/// Every packet in flight is an engine event, and a large network has millions of them at
/// once, so the segment keeps what the wire keeps: 32-bit window and SACK edges. Sequence and
/// acknowledgment numbers stay 64-bit (the model counts bytes from the connection's start and
/// never wraps them); SACK edges are the low 32 bits of theirs, as in the real option, and are
/// read back against `ack` (they lie within 2 GiB of it, as RFC 2018 requires of any block).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TcpSegment {
    /// Sequence number of the first payload byte, or of the SYN or FIN (64-bit, never wraps).
    pub seq: u64,
    /// Next sequence number the sender expects from the peer (meaningful with ACK).
    pub ack: u64,
    /// Payload length in bytes (SYN and FIN occupy sequence space but are not counted here).
    pub len: u32,
    /// Advertised receive window in bytes, unscaled (a scaled window is at most 1 GiB).
    pub window: u32,
    /// Control bits.
    pub flags: TcpFlags,
    /// SACK blocks `[start, end)` as the low 32 bits of their edges; the first `sack_len` are
    /// valid, most recent first.
    sack: [(u32, u32); 3],
    sack_len: u8,
}

/// IPv4 header without options.
const IPV4_HEADER: u32 = 20;
/// TCP header without options.
const TCP_HEADER: u32 = 20;
/// Timestamps option (10) padded with two NOPs, as Linux sends on every segment.
const TIMESTAMPS_OPTION: u32 = 12;
/// A Linux SYN carries MSS (4), SACK-permitted (2), timestamps (10), NOP (1) and window scale
/// (3): 20 option bytes instead of the 12 of an established segment.
const SYN_OPTIONS: u32 = 20;

impl TcpSegment {
    /// A segment without SACK blocks. A window beyond 32 bits (never offered: Linux's largest
    /// receive buffer is far below it) is capped.
    pub fn new(seq: u64, ack: u64, len: u32, window: u64, flags: TcpFlags) -> Self {
        TcpSegment {
            seq,
            ack,
            len,
            window: u32::try_from(window).unwrap_or(u32::MAX),
            flags,
            sack: [(0, 0); 3],
            sack_len: 0,
        }
    }

    /// Sets the SACK blocks (at most three are kept), each `[start, end)` within 2 GiB of
    /// `ack`.
    pub fn set_sack(&mut self, blocks: &[(u64, u64)]) {
        let n = blocks.len().min(3);
        for (slot, &(start, end)) in self.sack.iter_mut().zip(&blocks[..n]) {
            debug_assert!(start.abs_diff(self.ack) < 1 << 31 && end.abs_diff(self.ack) < 1 << 31);
            *slot = (start as u32, end as u32);
        }
        self.sack_len = n as u8;
    }

    /// Bytes on the wire besides payload, so that link serialization and queue occupancy match
    /// a real IPv4 path.
    pub fn header_bytes(&self) -> u32 {
        let options = if self.flags.contains(TcpFlags::SYN) {
            SYN_OPTIONS
        } else {
            TIMESTAMPS_OPTION
        };
        let sack = if self.sack_len > 0 {
            (2 + 8 * u32::from(self.sack_len)).div_ceil(4) * 4
        } else {
            0
        };
        IPV4_HEADER + TCP_HEADER + options + sack
    }

    /// Size on the wire in bytes, IPv4 and TCP headers and options plus payload.
    pub fn wire_bytes(&self) -> u32 {
        self.header_bytes() + self.len
    }

    /// Sequence space the segment occupies: payload plus one for each of SYN and FIN.
    pub fn seq_len(&self) -> u64 {
        u64::from(self.len)
            + u64::from(self.flags.contains(TcpFlags::SYN))
            + u64::from(self.flags.contains(TcpFlags::FIN))
    }

    /// The number of SACK blocks.
    pub fn sack_len(&self) -> usize {
        usize::from(self.sack_len)
    }

    /// The SACK blocks as full sequence numbers, most recent first.
    pub fn sack_blocks(&self) -> SackBlocks {
        let mut blocks = SackBlocks {
            blocks: [(0, 0); 3],
            len: self.sack_len,
        };
        for (out, &(start, end)) in blocks.blocks.iter_mut().zip(&self.sack[..self.sack_len()]) {
            *out = (self.near_ack(start), self.near_ack(end));
        }
        blocks
    }

    /// The sequence number whose low 32 bits are `low`, nearest to `ack`.
    fn near_ack(&self, low: u32) -> u64 {
        let offset = low.wrapping_sub(self.ack as u32) as i32;
        self.ack.wrapping_add_signed(i64::from(offset))
    }
}

/// A segment's SACK blocks, read as a slice of `[start, end)` pairs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SackBlocks {
    blocks: [(u64, u64); 3],
    len: u8,
}

impl std::ops::Deref for SackBlocks {
    type Target = [(u64, u64)];
    fn deref(&self) -> &[(u64, u64)] {
        &self.blocks[..usize::from(self.len)]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seg(flags: TcpFlags, len: u32, sack_len: u8) -> TcpSegment {
        let mut s = TcpSegment::new(0, 0, len, 0, flags);
        s.set_sack(&[(1, 2), (3, 4), (5, 6)][..usize::from(sack_len)]);
        s
    }

    #[test]
    fn sack_edges_read_back_around_the_ack() {
        // Edges above and below the ACK (a D-SACK block), across a 32-bit boundary.
        let ack = (5u64 << 32) + 100;
        let mut s = TcpSegment::new(7, ack, 0, 1 << 20, TcpFlags::ACK);
        let blocks = [
            (ack - 3_000, ack - 1_000),
            (ack + 1_000, ack + (1 << 30)),
            (ack - 200, ack),
        ];
        s.set_sack(&blocks);
        assert_eq!(&*s.sack_blocks(), &blocks);
        s.set_sack(&blocks[..1]);
        assert_eq!((s.sack_len(), &*s.sack_blocks()), (1, &blocks[..1]));
        assert_eq!(
            TcpSegment::new(0, 0, 0, 1 << 40, TcpFlags::ACK).window,
            u32::MAX
        );
    }

    #[test]
    fn a_segment_stays_small() {
        // Every packet in flight is an engine event holding one.
        assert!(std::mem::size_of::<TcpSegment>() <= 56);
    }

    #[test]
    fn header_sizes_match_linux() {
        assert_eq!(seg(TcpFlags::ACK, 1448, 0).wire_bytes(), 1500);
        assert_eq!(seg(TcpFlags::SYN, 0, 0).header_bytes(), 60);
        assert_eq!(seg(TcpFlags::ACK, 0, 1).header_bytes(), 64);
        assert_eq!(seg(TcpFlags::ACK, 0, 2).header_bytes(), 72);
        assert_eq!(seg(TcpFlags::ACK, 0, 3).header_bytes(), 80);
    }

    #[test]
    fn flags_combine() {
        let f = TcpFlags::SYN | TcpFlags::ACK;
        assert!(f.contains(TcpFlags::SYN) && f.contains(TcpFlags::ACK));
        assert!(!f.contains(TcpFlags::FIN));
        assert_eq!(format!("{f:?}"), "SYN|ACK");
        assert_eq!(seg(f, 0, 0).seq_len(), 1);
    }
}
