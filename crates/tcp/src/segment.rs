//! What travels between two connections: header fields and a payload length.

use std::fmt;

/// TCP control bits. Only the ones whose semantics the model implements exist.
#[derive(Clone, Copy, PartialEq, Eq, Default)]
pub struct TcpFlags(pub u8);

impl TcpFlags {
    pub const FIN: TcpFlags = TcpFlags(0x01);
    pub const SYN: TcpFlags = TcpFlags(0x02);
    pub const RST: TcpFlags = TcpFlags(0x04);
    pub const ACK: TcpFlags = TcpFlags(0x10);
    pub const NONE: TcpFlags = TcpFlags(0);

    pub const fn contains(self, other: TcpFlags) -> bool {
        self.0 & other.0 == other.0
    }

    pub const fn union(self, other: TcpFlags) -> TcpFlags {
        TcpFlags(self.0 | other.0)
    }

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
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TcpSegment {
    pub seq: u64,
    pub ack: u64,
    /// Payload length in bytes (SYN and FIN occupy sequence space but are not counted here).
    pub len: u32,
    /// Advertised receive window in bytes, unscaled.
    pub window: u64,
    pub flags: TcpFlags,
    /// SACK blocks `[start, end)`, the first `sack_len` are valid, most recent first.
    pub sack: [(u64, u64); 3],
    pub sack_len: u8,
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

    pub fn wire_bytes(&self) -> u32 {
        self.header_bytes() + self.len
    }

    /// Sequence space the segment occupies: payload plus one for each of SYN and FIN.
    pub fn seq_len(&self) -> u64 {
        u64::from(self.len)
            + u64::from(self.flags.contains(TcpFlags::SYN))
            + u64::from(self.flags.contains(TcpFlags::FIN))
    }

    /// The valid SACK blocks.
    pub fn sack_blocks(&self) -> &[(u64, u64)] {
        &self.sack[..usize::from(self.sack_len.min(3))]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seg(flags: TcpFlags, len: u32, sack_len: u8) -> TcpSegment {
        TcpSegment {
            seq: 0,
            ack: 0,
            len,
            window: 0,
            flags,
            sack: [(0, 0); 3],
            sack_len,
        }
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
