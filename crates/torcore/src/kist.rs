//! KIST's per-socket write limits (scheduler_kist.c).
//!
//! KIST asks the kernel how much a socket could send right away and lets the scheduler write
//! only that much (plus one more congestion window's worth, scaled by the socket buffer
//! factor), so cells wait in Tor's circuit queues, where EWMA can prioritise them, rather than
//! in kernel buffers, where it cannot. KISTLite has no kernel facts and falls back to filling
//! the channel's output buffer up to the high watermark, like the vanilla scheduler.

use crate::cell::CELL_BYTES;

/// Bytes Tor charges per cell for TLS framing when accounting KIST writes.
pub const TLS_PER_CELL_OVERHEAD: u64 = 29;

/// What one cell costs against a KIST limit: the cell plus Tor's TLS overhead estimate.
pub const KIST_BYTES_PER_CELL: u64 = CELL_BYTES as u64 + TLS_PER_CELL_OVERHEAD;

/// KIST pushes a channel's outbuf to the kernel mid-run only once it holds more than this
/// many bytes (8 cells), so that two equal-priority channels do not ping-pong single cells.
pub const KIST_KERNEL_WRITE_THRESHOLD: u64 = 8 * CELL_BYTES as u64;

/// KIST's write limit for one socket, in bytes.
///
/// `cwnd`, `unacked` and `mss` are the kernel's `tcpi_snd_cwnd`, `tcpi_unacked` (segments) and
/// `tcpi_snd_mss` (bytes); `notsent` is SIOCOUTQNSD (bytes queued in the kernel and not yet
/// sent); `channel_outbuf` is what already sits in Tor's outbuf for the channel. Follows Tor's
/// arithmetic: the free TCP space is zero when more segments are unacked than the window
/// allows, the extra space is `cwnd * mss * factor` truncated towards zero (Tor's
/// `clamp_double_to_int64`) minus what is already queued and may be negative, and a negative
/// total means no writes this run.
pub fn kist_write_limit(
    cwnd: u32,
    unacked: u32,
    mss: u32,
    notsent: u64,
    channel_outbuf: u64,
    sock_buf_factor: f64,
) -> u64 {
    let tcp_space: i64 = if cwnd >= unacked {
        (cwnd - unacked) as i64 * mss as i64
    } else {
        0
    };
    // `as` from f64 saturates and maps NaN to 0, exactly what clamp_double_to_int64 does.
    let scaled = ((cwnd as i64 * mss as i64) as f64 * sock_buf_factor) as i64;
    let extra = scaled
        .saturating_sub(to_i64(notsent))
        .saturating_sub(to_i64(channel_outbuf));
    let total = tcp_space.saturating_add(extra);
    if total < 0 {
        0
    } else {
        total as u64
    }
}

/// KISTLite's limit (and KIST's fallback when kernel facts are unavailable): the number of
/// cells that still fit below the outbuf high watermark, rounded up (Tor's
/// `channel_num_cells_writeable`), each charged cell plus TLS overhead.
///
/// Tor computes the free space with unsigned arithmetic, which wraps when the outbuf is already
/// above the watermark; the model treats that case as no space.
pub fn kistlite_write_limit(outbuf_high: u64, outbuf: u64) -> u64 {
    let free = outbuf_high.saturating_sub(outbuf);
    free.div_ceil(CELL_BYTES as u64) * KIST_BYTES_PER_CELL
}

/// Whether a socket with `limit` may take another cell after `written` bytes this run: KIST
/// allows a write only while at least one whole cell (plus overhead) of the limit remains.
pub fn kist_socket_can_write(limit: u64, written: u64) -> bool {
    (limit as i128 - written as i128) / KIST_BYTES_PER_CELL as i128 > 0
}

fn to_i64(v: u64) -> i64 {
    v.min(i64::MAX as u64) as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idle_socket_gets_two_windows() {
        // cwnd 10 x 1448: 14,480 of TCP space plus 14,480 extra.
        assert_eq!(kist_write_limit(10, 0, 1448, 0, 0, 1.0), 28_960);
    }

    #[test]
    fn queued_bytes_reduce_the_extra_space() {
        // tcp_space = (20 - 15) * 1448 = 7,240; extra = 28,960 - 10,000 - 3,000 = 15,960.
        assert_eq!(kist_write_limit(20, 15, 1448, 10_000, 3_000, 1.0), 23_200);
        // extra may be negative and eat into the TCP space: 7,240 + (28,960 - 30,000 - 2,000).
        assert_eq!(kist_write_limit(20, 15, 1448, 30_000, 2_000, 1.0), 4_200);
        // ... and a negative total means nothing may be written.
        assert_eq!(kist_write_limit(20, 15, 1448, 50_000, 0, 1.0), 0);
    }

    #[test]
    fn more_unacked_than_cwnd_leaves_no_tcp_space() {
        // tcp_space 0 (not negative); extra = 10 * 1000 * 1.0 - 4,000.
        assert_eq!(kist_write_limit(10, 12, 1000, 4_000, 0, 1.0), 6_000);
    }

    #[test]
    fn factor_scales_and_truncates() {
        // extra = trunc(3 * 1001 * 0.5) = trunc(1501.5) = 1501; tcp_space = 3003.
        assert_eq!(kist_write_limit(3, 0, 1001, 0, 0, 0.5), 4_504);
        // factor 0: only the free TCP space.
        assert_eq!(kist_write_limit(10, 4, 1448, 0, 0, 0.0), 8_688);
        assert_eq!(kist_write_limit(10, 4, 1448, 0, 0, f64::NAN), 8_688);
    }

    #[test]
    fn kistlite_fills_to_the_high_watermark_in_whole_cells() {
        // 32 KiB empty outbuf: ceil(32768 / 514) = 64 cells x 543.
        assert_eq!(kistlite_write_limit(32 * 1024, 0), 64 * 543);
        // 10,000 queued: ceil(22,768 / 514) = 45 cells.
        assert_eq!(kistlite_write_limit(32 * 1024, 10_000), 45 * 543);
        assert_eq!(kistlite_write_limit(32 * 1024, 40_000), 0);
    }

    #[test]
    fn can_write_needs_a_whole_cell_of_room() {
        assert!(kist_socket_can_write(1086, 0));
        assert!(kist_socket_can_write(1086, 543));
        assert!(!kist_socket_can_write(1086, 544));
        assert!(!kist_socket_can_write(542, 0));
        assert!(!kist_socket_can_write(1000, 5000));
    }
}
