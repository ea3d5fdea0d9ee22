//! `onionlab calibrate`: measures what a relay's unit operations cost on this machine and
//! writes them as a calibration file ([`CpuCalibration`]) that scenarios load.
//!
//! This crate is part of onionlab, a simulator of Tor networks. The book's relay CPU page
//! (`docs/src/user/cpu.md`) says how calibrations are used.
//!
//! # Overview
//!
//! A simulated relay counts its work (system calls, packets, TLS records, cipher calls and
//! bytes, handshakes) and prices it with these unit costs, so a run's CPU figures are only as
//! good as the costs. Measuring them here, with the same primitives a relay uses, ties the
//! model to a real machine instead of to numbers copied from papers about other hardware.
//!
//! Every measured cost is timed repeatedly over batches of operations; the median is the
//! cost (robust to the odd interrupted timing), and the 10th and 90th percentiles go in
//! `spread` so a reader can tell a steady number from a noisy one. Costs that have a fixed
//! and a per-byte part are fitted from two sizes timed in turns.
//!
//! # Not in this crate
//!
//! The calibration's format and the CPU profiles that price work with it are
//! `onionlab-torcore`'s (`cpu`); a scenario's `cpu:` section loads a calibration
//! (`onionlab-scenario`), and the relays' CPU model that spends the time is `onionlab-tor`'s.
//! The calibration used when a scenario names none is shipped in `data/cpu/`.
//!
//! # Tests
//!
//! `tests/calibrate.rs` runs a quick calibration of the machine the tests run on and checks
//! only what holds by wide margins on a noisy shared machine (every cost usable, the file
//! loadable), not values. Unit tests sit in `lib.rs`, `machine`, `ops`, `timing` and `yaml`.
//! `crates/cli/tests/calibrate.rs` runs `onionlab calibrate` as a user does.

mod machine;
mod ops;
mod timing;
mod yaml;

use std::collections::BTreeMap;
use std::time::Duration;

use onionlab_torcore::cpu::{CpuCalibration, Spread, UnitCosts, CALIBRATION_FORMAT};

use ops::{CELL_BYTES, FRAME_BYTES, SEGMENT_BYTES};
use timing::{round_sig, Summary, Timer};

pub use yaml::to_yaml;

/// How to calibrate.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Fewer and shorter timings (7 of ~5 ms instead of 31 of ~10 ms): about a second instead
    /// of several, for tests and a first look; the spread says how much precision it cost.
    pub quick: bool,
    /// tor's own work per cell, in ns: it cannot be measured without tor itself, so it is
    /// carried over from a base calibration. Must be finite and non-negative.
    pub cell_other_ns: f64,
}

/// Significant digits kept: repeated calibrations of one machine differ in the second or
/// third digit, so more would only be noise in the file.
const DIGITS: i32 = 4;

/// Record sizes the TLS costs are fitted from: the smallest record worth sending (a few
/// bytes of payload) and the largest TLS allows.
const TLS_SMALL: usize = 16;
const TLS_LARGE: usize = onionlab_torcore::cpu::TLS_RECORD_BYTES as usize;

/// Lengths the AES-CTR costs are fitted from: one relay cell's payload (what relay crypto
/// encrypts per call), and a length long enough for the per-byte rate to dominate.
const AES_SMALL: usize = CELL_BYTES;
const AES_LARGE: usize = 16_384;

/// Fixed and per-byte costs from pairs of timings at `small` and `large` bytes: the line
/// through each pair, summarized over the pairs. Negative intercepts (noise when the fixed
/// part is tiny) are clamped at zero, as a cost cannot be negative.
fn fit(pairs: &[(f64, f64)], small: usize, large: usize) -> (Summary, Summary) {
    let (mut fixed, mut per_byte) = (Vec::new(), Vec::new());
    for &(ts, tl) in pairs {
        let b = ((tl - ts) / (large - small) as f64).max(0.0);
        per_byte.push(b);
        fixed.push((ts - b * small as f64).max(0.0));
    }
    (Summary::of(&fixed), Summary::of(&per_byte))
}

fn scaled(samples: Vec<f64>, f: impl Fn(f64) -> f64) -> Vec<f64> {
    samples.into_iter().map(f).collect()
}

/// Measures this machine. `progress` is told what is being measured as it starts (the full
/// calibration takes several seconds).
///
/// # Panics
///
/// If a loopback TCP connection cannot be made (the kernel costs are measured on one): on a
/// machine without a working `lo`, there is nothing meaningful to report for them.
pub fn calibrate(opts: &Options, progress: &mut dyn FnMut(&str)) -> CpuCalibration {
    let timer = if opts.quick {
        Timer {
            target: Duration::from_millis(5),
            runs: 7,
        }
    } else {
        Timer {
            target: Duration::from_millis(10),
            runs: 31,
        }
    };
    let mut measured: BTreeMap<&'static str, Summary> = BTreeMap::new();

    progress("syscall: read(2) on an empty non-blocking socket");
    let (idle, _peer) = ops::tcp_pair().expect("a loopback TCP connection (127.0.0.1)");
    idle.set_nonblocking(true)
        .expect("a socket can be made non-blocking");
    assert!(
        ops::read_would_block(&idle),
        "a read on an idle non-blocking socket returns EAGAIN"
    );
    let syscall = Summary::of(&timer.samples(ops::syscall_op(&idle)));
    measured.insert("syscall", syscall);

    progress("kernel_packet: 1448-byte segments over loopback TCP");
    let (tx, rx) = ops::tcp_pair().expect("a loopback TCP connection (127.0.0.1)");
    let iterations = timer.samples(ops::kernel_packet_op(&tx, &rx));
    let per_packet = scaled(iterations, |v| ((v - 2.0 * syscall.median) / 2.0).max(0.0));
    measured.insert("kernel_packet", Summary::of(&per_packet));

    progress("tls_record, tls_byte: AES-128-GCM records of 16 and 16384 bytes");
    let pairs = timer.paired(ops::tls_op(TLS_SMALL), ops::tls_op(TLS_LARGE));
    // Each iteration sealed and opened one record: half of it is one record's cost.
    let pairs: Vec<_> = pairs.into_iter().map(|(s, l)| (s / 2.0, l / 2.0)).collect();
    let (tls_record, tls_byte) = fit(&pairs, TLS_SMALL, TLS_LARGE);
    measured.insert("tls_record", tls_record);
    measured.insert("tls_byte", tls_byte);

    progress("aes_call, aes_byte: AES-128-CTR on 509 and 16384 bytes");
    let pairs = timer.paired(ops::aes_ctr_op(AES_SMALL), ops::aes_ctr_op(AES_LARGE));
    let (aes_call, aes_byte) = fit(&pairs, AES_SMALL, AES_LARGE);
    measured.insert("aes_call", aes_call);
    measured.insert("aes_byte", aes_byte);

    progress("soft_ctr_byte: counter mode from one-block AES calls");
    let cells = timer.samples(ops::soft_ctr_op());
    let per_byte = scaled(cells, |v| v / CELL_BYTES as f64);
    measured.insert("soft_ctr_byte", Summary::of(&per_byte));

    progress("sha1_byte: running SHA-1 digest over 509-byte cells");
    let cells = timer.samples(ops::sha1_op());
    let per_byte = scaled(cells, |v| v / CELL_BYTES as f64);
    measured.insert("sha1_byte", Summary::of(&per_byte));

    progress("ntor: server side of the ntor handshake");
    measured.insert("ntor", Summary::of(&timer.samples(ops::ntor_op())));

    progress("link_responder, link_initiator: the public-key work of a link handshake");
    measured.insert(
        "link_responder",
        Summary::of(&timer.samples(ops::link_responder_op())),
    );
    measured.insert(
        "link_initiator",
        Summary::of(&timer.samples(ops::link_initiator_op())),
    );

    progress("user_packet: frame copy and header checksum in user space");
    measured.insert(
        "user_packet",
        Summary::of(&timer.samples(ops::user_packet_op())),
    );

    assemble(&measured, opts)
}

/// The calibration from the measured summaries, with the costs that are not measured here
/// filled in as documented in their notes.
fn assemble(measured: &BTreeMap<&'static str, Summary>, opts: &Options) -> CpuCalibration {
    let median = |name: &str| round_sig(measured[name].median, DIGITS);
    let syscall = median("syscall");
    let costs = UnitCosts {
        syscall,
        kernel_packet: median("kernel_packet"),
        tls_record: median("tls_record"),
        tls_byte: median("tls_byte"),
        aes_call: median("aes_call"),
        aes_byte: median("aes_byte"),
        soft_ctr_byte: median("soft_ctr_byte"),
        sha1_byte: median("sha1_byte"),
        ntor: median("ntor"),
        link_responder: median("link_responder"),
        link_initiator: median("link_initiator"),
        cell_other: opts.cell_other_ns,
        user_packet: median("user_packet"),
        offload_call: syscall,
        offload_byte: 0.0,
    };
    let spread = measured
        .iter()
        .map(|(name, s)| {
            let spread = Spread {
                p10: round_sig(s.p10, DIGITS),
                p90: round_sig(s.p90, DIGITS),
                runs: s.runs,
            };
            (name.to_string(), spread)
        })
        .collect();
    CpuCalibration {
        format: CALIBRATION_FORMAT,
        machine: machine::describe(),
        measured: format!(
            "{}, onionlab calibrate {}",
            machine::today(),
            env!("CARGO_PKG_VERSION")
        ),
        costs,
        spread,
        notes: notes(opts),
    }
}

/// How each cost was measured, or where it comes from when it was not.
fn notes(opts: &Options) -> BTreeMap<String, String> {
    let s = SEGMENT_BYTES;
    let lines = [
        ("syscall", "one system call moving little data: read(2) on an idle non-blocking TCP socket (returns EAGAIN), per call".to_string()),
        ("kernel_packet", format!("one TCP segment through the kernel, each way: a {s}-byte write(2) on one end of a loopback TCP connection (TCP_NODELAY) and its read(2) on the other, in one thread; per iteration less 2 x syscall, halved (one packet sent and one received), clamped at 0")),
        ("tls_record", format!("fixed cost of one TLS record: AES-128-GCM (aes-gcm crate, 5-byte header as additional data) seal then open of records of {TLS_SMALL} and {TLS_LARGE} bytes, halved (seal and open cost the same), intercept of the line through the two sizes")),
        ("tls_byte", format!("per byte of a TLS record: slope of the same AES-128-GCM fit over {TLS_SMALL} and {TLS_LARGE} bytes")),
        ("aes_call", format!("fixed cost of one AES-128-CTR call: ctr::Ctr128BE<Aes128>::new (key expansion included) and apply_keystream on {AES_SMALL} and {AES_LARGE} bytes, intercept of the fit")),
        ("aes_byte", format!("per byte of AES-128-CTR with the library's counter mode: slope of the same fit over {AES_SMALL} and {AES_LARGE} bytes (the aes crate uses AES-NI when the CPU has it; see machine)")),
        ("soft_ctr_byte", format!("per byte of counter mode built by hand: one Aes128::encrypt_block call per 16-byte counter block of a {CELL_BYTES}-byte cell, XORed in; time per cell / {CELL_BYTES}")),
        ("sha1_byte", format!("per byte of the running SHA-1 digest (sha1 crate): update with {CELL_BYTES}-byte cells, no finalization")),
        ("ntor", "server side of one ntor handshake: X25519 key pair generation, EXP(X,y) and EXP(X,b) (x25519-dalek), verify and AUTH HMAC-SHA256, HKDF-SHA256 of 72 bytes of keys".to_string()),
        ("link_responder", "the responding relay's public-key work in one link handshake with a relay: X25519 key pair and shared secret (x25519-dalek); an RSA-PSS-SHA256 signature with a 2048-bit key (TLS 1.3 CertificateVerify, ring); two RSA-1024 PKCS#1 verifications and three Ed25519 verifications (the initiator's CERTS and AUTHENTICATE, ring). TLS's key schedule and transcript hashes are left out (a few microseconds)".to_string()),
        ("link_initiator", "the initiating relay's public-key work in one link handshake: X25519 key pair and shared secret (x25519-dalek); an RSA-PSS-SHA256 verification with a 2048-bit key (the responder's CertificateVerify), three RSA-1024 PKCS#1 and two Ed25519 verifications (its CERTS), one Ed25519 signature (its own AUTHENTICATE) (ring)".to_string()),
        ("cell_other", format!("given, not measured: tor's own per-cell work (queues, scheduler, buffers) cannot be measured without tor; {} ns was passed to calibrate", opts.cell_other_ns)),
        ("user_packet", format!("a floor: copy of a {FRAME_BYTES}-byte frame out of a 1 MiB receive ring into an application buffer plus the IPv4 header checksum (20 bytes); a real user-space stack does more per packet, so kernel-bypass results are an upper bound of its gain")),
        ("offload_call", "not measurable without a crypto unit: set to the measured syscall (handing a job to the unit's driver and taking the result back costs about one kernel crossing)".to_string()),
        ("offload_byte", "not measurable without a crypto unit: 0 (the unit does the bytes)".to_string()),
    ];
    lines.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fit_recovers_a_line() {
        let pairs = [(10.0 + 0.5 * 16.0, 10.0 + 0.5 * 1016.0); 3];
        let (fixed, byte) = fit(&pairs, 16, 1016);
        assert!((fixed.median - 10.0).abs() < 1e-9);
        assert!((byte.median - 0.5).abs() < 1e-12);
        // A larger small-size timing than large-size one (noise) gives no negative cost.
        let (fixed, byte) = fit(&[(5.0, 4.0)], 16, 1016);
        assert_eq!((fixed.median, byte.median), (5.0, 0.0));
    }

    #[test]
    fn every_cost_has_a_note() {
        let notes = notes(&Options::default());
        let names = [
            "syscall",
            "kernel_packet",
            "tls_record",
            "tls_byte",
            "aes_call",
            "aes_byte",
            "soft_ctr_byte",
            "sha1_byte",
            "ntor",
            "link_responder",
            "link_initiator",
            "cell_other",
            "user_packet",
            "offload_call",
            "offload_byte",
        ];
        assert_eq!(notes.len(), names.len());
        for n in names {
            assert!(notes.contains_key(n), "{n}");
        }
    }
}
