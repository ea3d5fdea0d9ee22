//! Cutting a TCP super-frame into the wire packets a NIC's segmentation offload would send.
//!
//! With TSO/GSO on, a sender's stack hands its interface one frame of up to 64 KiB and leaves
//! the cutting to "hardware". On a real link the segments then travel, queue and get lost one
//! by one, so the switch does the NIC's job before it delays anything: each segment is a frame
//! of its own to the delay line and to the receiving port's rate limit, and the receiver's GRO
//! sees wire packets, as it would from a real NIC.
//!
//! Frames here start with the `virtio_net_hdr` that `PACKET_VNET_HDR` puts in front of every
//! frame (little-endian fields on the hosts we run on). A segment leaves with its checksum
//! unfinished (`VIRTIO_NET_HDR_F_NEEDS_CSUM`, the TCP checksum field holding the pseudo-header
//! sum for the segment's own length), as the stack leaves a checksum for a NIC to fill in; the
//! receiving stack accepts such a frame as it accepts one from a local veth.

/// `struct virtio_net_hdr`: flags, gso_type, hdr_len, gso_size, csum_start, csum_offset.
pub const VNET_HDR_LEN: usize = 10;
const ETH_LEN: usize = 14;
const NEEDS_CSUM: u8 = 1;
const GSO_TCPV4: u8 = 1;
const GSO_TCPV6: u8 = 4;
/// `VIRTIO_NET_HDR_GSO_ECN`: the segments carry ECN marks; it does not change the cutting.
const GSO_ECN: u8 = 0x80;
const TCP_FIN: u8 = 0x01;
const TCP_PSH: u8 = 0x08;
const TCP_CWR: u8 = 0x80;
/// Where the TCP checksum sits in the TCP header.
const TCP_CHECK: usize = 16;

/// How a super-frame cuts into segments: found once, then used for each segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cut {
    /// IPv4 (`true`) or IPv6.
    v4: bool,
    /// Offsets in the frame after the virtio header: network header, TCP header, payload.
    l3: usize,
    l4: usize,
    payload: usize,
    /// Payload bytes per segment.
    mss: usize,
    /// How many segments the super-frame cuts into.
    pub segments: usize,
}

impl Cut {
    /// The cut of `frame` (virtio header included), or `None` when it is not a TCP super-frame
    /// over plain Ethernet whose headers hold together; such a frame is forwarded whole.
    pub fn of(frame: &[u8]) -> Option<Cut> {
        let hdr = frame.get(..VNET_HDR_LEN)?;
        let gso_type = hdr[1] & !GSO_ECN;
        let mss = usize::from(u16::from_le_bytes([hdr[4], hdr[5]]));
        let csum_start = usize::from(u16::from_le_bytes([hdr[6], hdr[7]]));
        let eth = &frame[VNET_HDR_LEN..];
        if mss == 0 || eth.len() < ETH_LEN {
            return None;
        }
        let ethertype = u16::from_be_bytes([eth[12], eth[13]]);
        let l3 = ETH_LEN;
        let (v4, l4) = match (gso_type, ethertype) {
            (GSO_TCPV4, 0x0800) => {
                let ip = eth.get(l3..l3 + 20)?;
                let ihl = usize::from(ip[0] & 0x0f) * 4;
                if ip[0] >> 4 != 4 || ihl < 20 || ip[9] != 6 {
                    return None;
                }
                (true, l3 + ihl)
            }
            // No extension headers: a stack that segments in software puts none there for TCP.
            (GSO_TCPV6, 0x86dd) => {
                let ip = eth.get(l3..l3 + 40)?;
                if ip[0] >> 4 != 6 || ip[6] != 6 {
                    return None;
                }
                (false, l3 + 40)
            }
            _ => return None,
        };
        if csum_start != l4 {
            return None;
        }
        let doff = usize::from(eth.get(l4 + 12)? >> 4) * 4;
        let payload = l4 + doff;
        if doff < 20 || payload > eth.len() {
            return None;
        }
        let bytes = eth.len() - payload;
        Some(Cut {
            v4,
            l3,
            l4,
            payload,
            mss,
            segments: bytes.div_ceil(mss).max(1),
        })
    }

    /// Length of segment `i` with its virtio header.
    pub fn len(&self, frame: &[u8], i: usize) -> usize {
        let bytes = frame.len() - VNET_HDR_LEN - self.payload;
        let chunk = bytes.saturating_sub(i * self.mss).min(self.mss);
        VNET_HDR_LEN + self.payload + chunk
    }

    /// Writes segment `i` of `frame` into `out`, which must be at least [`Cut::len`] long;
    /// returns the length written.
    pub fn write(&self, frame: &[u8], i: usize, out: &mut [u8]) -> usize {
        let len = self.len(frame, i);
        let chunk = len - VNET_HDR_LEN - self.payload;
        let last = i + 1 == self.segments;
        let src = &frame[VNET_HDR_LEN..];
        let out = &mut out[..len];
        out[..VNET_HDR_LEN].fill(0);
        out[0] = NEEDS_CSUM;
        out[6..8].copy_from_slice(&(self.l4 as u16).to_le_bytes());
        out[8..10].copy_from_slice(&(TCP_CHECK as u16).to_le_bytes());
        let eth = &mut out[VNET_HDR_LEN..];
        eth[..self.payload].copy_from_slice(&src[..self.payload]);
        let from = self.payload + i * self.mss;
        eth[self.payload..].copy_from_slice(&src[from..from + chunk]);

        let tcp_len = self.payload - self.l4 + chunk;
        let ip = &mut eth[self.l3..self.l4];
        // The pseudo-header: both addresses, the protocol (6) and the TCP length.
        let pseudo = if self.v4 {
            let total = (ip.len() + tcp_len) as u16;
            ip[2..4].copy_from_slice(&total.to_be_bytes());
            // As Linux's segmentation does: each segment takes the next IP identifier.
            let id = u16::from_be_bytes([ip[4], ip[5]]).wrapping_add(i as u16);
            ip[4..6].copy_from_slice(&id.to_be_bytes());
            ip[10..12].fill(0);
            let check = !fold(sum_words(ip, 0));
            ip[10..12].copy_from_slice(&check.to_be_bytes());
            sum_words(&ip[12..20], 6 + tcp_len as u32)
        } else {
            ip[4..6].copy_from_slice(&(tcp_len as u16).to_be_bytes());
            sum_words(&ip[8..40], 6 + tcp_len as u32)
        };
        let tcp = &mut eth[self.l4..];
        let seq = u32::from_be_bytes([tcp[4], tcp[5], tcp[6], tcp[7]])
            .wrapping_add((i * self.mss) as u32);
        tcp[4..8].copy_from_slice(&seq.to_be_bytes());
        if i > 0 {
            tcp[13] &= !TCP_CWR;
        }
        if !last {
            tcp[13] &= !(TCP_FIN | TCP_PSH);
        }
        tcp[TCP_CHECK..TCP_CHECK + 2].copy_from_slice(&fold(pseudo).to_be_bytes());
        len
    }
}

/// One's-complement sum of big-endian 16-bit words (an odd last byte padded with zero), added
/// to `start`; not yet folded.
fn sum_words(bytes: &[u8], start: u32) -> u32 {
    let mut sum = start;
    let mut words = bytes.chunks_exact(2);
    for w in &mut words {
        sum += u32::from(u16::from_be_bytes([w[0], w[1]]));
    }
    if let [b] = words.remainder() {
        sum += u32::from(*b) << 8;
    }
    sum
}

fn fold(mut sum: u32) -> u16 {
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A TCPv4 super-frame from 10.0.0.1:40000 to 10.0.0.2:9000 with `payload` bytes of a
    /// counting pattern, sequence number `seq`, flags `flags`, cut at `mss`.
    fn v4_frame(payload: usize, mss: u16, seq: u32, flags: u8) -> Vec<u8> {
        let mut f = vec![0u8; VNET_HDR_LEN];
        f[0] = NEEDS_CSUM;
        f[1] = GSO_TCPV4;
        f[2..4].copy_from_slice(&66u16.to_le_bytes());
        f[4..6].copy_from_slice(&mss.to_le_bytes());
        f[6..8].copy_from_slice(&34u16.to_le_bytes());
        f[8..10].copy_from_slice(&16u16.to_le_bytes());
        f.extend_from_slice(&[2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x08, 0x00]);
        let total = (20 + 32 + payload) as u16;
        let mut ip = vec![
            0x45, 0, 0, 0, 0x12, 0x34, 0x40, 0, 64, 6, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
        ];
        ip[2..4].copy_from_slice(&total.to_be_bytes());
        f.extend_from_slice(&ip);
        let mut tcp = vec![0u8; 32];
        tcp[0..2].copy_from_slice(&40000u16.to_be_bytes());
        tcp[2..4].copy_from_slice(&9000u16.to_be_bytes());
        tcp[4..8].copy_from_slice(&seq.to_be_bytes());
        tcp[12] = 8 << 4;
        tcp[13] = flags;
        tcp[20..32].copy_from_slice(&[1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2]);
        f.extend_from_slice(&tcp);
        f.extend((0..payload).map(|k| k as u8));
        f
    }

    /// The TCP checksum a NIC would finish: over the TCP segment, starting from the partial
    /// sum in its checksum field.
    fn finished_tcp_check_ok(seg: &[u8], l4: usize, src: &[u8], dst: &[u8]) -> bool {
        let tcp = &seg[VNET_HDR_LEN + l4..];
        let finished = !fold(sum_words(tcp, 0));
        let mut done = tcp.to_vec();
        done[16..18].copy_from_slice(&finished.to_be_bytes());
        let mut pseudo = Vec::new();
        pseudo.extend_from_slice(src);
        pseudo.extend_from_slice(dst);
        let total = fold(sum_words(&pseudo, 6 + tcp.len() as u32) + sum_words(&done, 0));
        total == 0xffff
    }

    #[test]
    fn a_v4_super_frame_cuts_into_wire_segments() {
        let seq = u32::MAX - 1000;
        let frame = v4_frame(4000, 1448, seq, 0x18 | TCP_FIN | TCP_CWR);
        let cut = Cut::of(&frame).expect("a TCPv4 super-frame");
        assert_eq!(cut.segments, 3);
        let mut payload = Vec::new();
        for i in 0..cut.segments {
            let mut out = vec![0u8; 2048];
            let n = cut.write(&frame, i, &mut out);
            assert_eq!(n, cut.len(&frame, i));
            let seg = &out[..n];
            let chunk = [1448, 1448, 1104][i];
            assert_eq!(n, VNET_HDR_LEN + 14 + 20 + 32 + chunk);
            assert_eq!(seg[0], NEEDS_CSUM);
            assert_eq!(seg[1], 0, "a wire segment is no super-frame");
            let ip = &seg[VNET_HDR_LEN + 14..VNET_HDR_LEN + 34];
            assert_eq!(usize::from(u16::from_be_bytes([ip[2], ip[3]])), 52 + chunk);
            assert_eq!(u16::from_be_bytes([ip[4], ip[5]]), 0x1234 + i as u16);
            assert_eq!(fold(sum_words(ip, 0)), 0xffff, "IPv4 header checksum");
            let tcp = &seg[VNET_HDR_LEN + 34..];
            let got_seq = u32::from_be_bytes([tcp[4], tcp[5], tcp[6], tcp[7]]);
            assert_eq!(got_seq, seq.wrapping_add(1448 * i as u32));
            let flags = tcp[13];
            assert_eq!(flags & TCP_CWR != 0, i == 0, "CWR only on the first");
            assert_eq!(flags & TCP_FIN != 0, i == 2, "FIN only on the last");
            assert_eq!(flags & TCP_PSH != 0, i == 2, "PSH only on the last");
            assert_eq!(flags & 0x10, 0x10, "ACK on all");
            assert!(finished_tcp_check_ok(
                seg,
                34,
                &[10, 0, 0, 1],
                &[10, 0, 0, 2]
            ));
            assert_eq!(&tcp[20..32], &frame[VNET_HDR_LEN + 54..VNET_HDR_LEN + 66]);
            payload.extend_from_slice(&tcp[32..]);
        }
        assert_eq!(payload, (0..4000).map(|k| k as u8).collect::<Vec<_>>());
    }

    #[test]
    fn a_v6_super_frame_cuts_with_its_own_lengths() {
        let mut f = vec![0u8; VNET_HDR_LEN];
        f[1] = GSO_TCPV6 | GSO_ECN;
        f[4..6].copy_from_slice(&1000u16.to_le_bytes());
        f[6..8].copy_from_slice(&54u16.to_le_bytes());
        f.extend_from_slice(&[2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x86, 0xdd]);
        let mut ip = vec![0u8; 40];
        ip[0] = 0x60;
        ip[6] = 6;
        ip[8..24].copy_from_slice(&[0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
        ip[24..40].copy_from_slice(&[0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
        f.extend_from_slice(&ip);
        let mut tcp = vec![0u8; 20];
        tcp[12] = 5 << 4;
        tcp[13] = 0x18;
        f.extend_from_slice(&tcp);
        f.extend(std::iter::repeat_n(7u8, 2500));
        let cut = Cut::of(&f).expect("a TCPv6 super-frame");
        assert_eq!(cut.segments, 3);
        let mut out = vec![0u8; 2048];
        let n = cut.write(&f, 2, &mut out);
        assert_eq!(n, VNET_HDR_LEN + 14 + 40 + 20 + 500);
        let ip = &out[VNET_HDR_LEN + 14..VNET_HDR_LEN + 54];
        assert_eq!(u16::from_be_bytes([ip[4], ip[5]]), 520);
        assert!(finished_tcp_check_ok(
            &out[..n],
            54,
            &ip[8..24],
            &ip[24..40]
        ));
    }

    #[test]
    fn frames_that_are_not_tcp_super_frames_stay_whole() {
        let good = v4_frame(3000, 1448, 1, 0x10);
        let mut plain = good.clone();
        plain[1] = 0;
        plain[4..6].fill(0);
        assert_eq!(Cut::of(&plain), None, "no gso_size");
        let mut udp = good.clone();
        udp[1] = 5;
        assert_eq!(Cut::of(&udp), None, "UDP segmentation is not TCP's");
        let mut odd_start = good.clone();
        odd_start[6] = 40;
        assert_eq!(
            Cut::of(&odd_start),
            None,
            "checksum start is not the TCP header"
        );
        assert_eq!(
            Cut::of(&good[..VNET_HDR_LEN + 40]),
            None,
            "truncated headers"
        );
        assert_eq!(Cut::of(&good[..5]), None);
    }
}
