//! What a relay's work costs in CPU time: unit costs measured on a machine (`onionlab
//! calibrate` writes them), the implementations a profile chooses (how relay cells are
//! encrypted, whether packets go through the kernel), and the arithmetic that turns counted
//! work into time per category.
//!
//! Counting and pricing are kept apart: a relay counts what it did ([`Work`]: system calls,
//! packets, TLS records and bytes, cipher calls, digest bytes, cells), and a [`CostTable`]
//! built from a calibration and a profile prices it. So one run's counts could be priced under
//! any profile, and a test can check the price of a known amount of work by hand.

use serde::{Deserialize, Serialize};

/// The version of the calibration file format ([`CpuCalibration::format`]).
pub const CALIBRATION_FORMAT: u32 = 2;

/// Bytes of a relay cell that relay crypto encrypts (the cell less its circuit id and
/// command: what one AES-CTR layer and the running digest cover).
pub const RELAY_PAYLOAD_BYTES: u64 = 509;

/// Largest TLS record payload: a read or write of more bytes takes several records.
pub const TLS_RECORD_BYTES: u64 = 16_384;

/// Unit costs, in nanoseconds of one core's time, as measured on one machine.
///
/// Each is what one operation costs a thread that does it, not a latency: a system call's
/// entry and exit, one packet's way through the kernel's TCP/IP code, one TLS record's
/// fixed and per-byte work, one AES-CTR call and its bytes. The default is every cost zero
/// (free work), a base for costs set one by one.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UnitCosts {
    /// One system call that moves little data (a read, write or epoll_wait on a socket).
    pub syscall: f64,
    /// One TCP segment's way through the kernel (send or receive, loopback measured, the
    /// data copy included), beyond the system call that asked for it.
    pub kernel_packet: f64,
    /// A TLS record's fixed cost (AES-128-GCM seal or open of an empty record).
    pub tls_record: f64,
    /// A TLS record's cost per byte (AES-128-GCM).
    pub tls_byte: f64,
    /// One AES-128-CTR call's fixed cost (key schedule lookup, counter set-up).
    pub aes_call: f64,
    /// AES-128-CTR per byte with native counter mode (AES-NI where the CPU has it).
    pub aes_byte: f64,
    /// AES-128-CTR per byte built by hand on AES-ECB, 16 bytes at a time (tor before native
    /// counter mode).
    pub soft_ctr_byte: f64,
    /// SHA-1 per byte (the running digest at a circuit's edges).
    pub sha1_byte: f64,
    /// The server side of one ntor handshake (X25519 key generation and two
    /// scalar multiplications, plus its hashing).
    pub ntor: f64,
    /// The responding relay's public-key work in one link handshake with a relay (TLS 1.3's
    /// X25519 exchange and RSA-2048 CertificateVerify signature, the initiator's
    /// certificates and AUTHENTICATE checked).
    pub link_responder: f64,
    /// The initiating relay's public-key work in one link handshake (X25519, the responder's
    /// signature and certificates checked, its own AUTHENTICATE signed).
    pub link_initiator: f64,
    /// tor's own work per cell beyond what is priced above (queues, scheduler, buffers).
    pub cell_other: f64,
    /// Kernel bypass: a user-space network stack's work per packet (replaces `syscall` and
    /// `kernel_packet`).
    pub user_packet: f64,
    /// An on-chip crypto unit: the CPU's cost to hand it one cell and take the result back.
    pub offload_call: f64,
    /// An on-chip crypto unit: the CPU's cost per byte (what the unit leaves to the CPU).
    pub offload_byte: f64,
}

impl UnitCosts {
    /// Every cost by its name in files, for validation and reports.
    pub fn named(&self) -> [(&'static str, f64); 15] {
        [
            ("syscall", self.syscall),
            ("kernel_packet", self.kernel_packet),
            ("tls_record", self.tls_record),
            ("tls_byte", self.tls_byte),
            ("aes_call", self.aes_call),
            ("aes_byte", self.aes_byte),
            ("soft_ctr_byte", self.soft_ctr_byte),
            ("sha1_byte", self.sha1_byte),
            ("ntor", self.ntor),
            ("link_responder", self.link_responder),
            ("link_initiator", self.link_initiator),
            ("cell_other", self.cell_other),
            ("user_packet", self.user_packet),
            ("offload_call", self.offload_call),
            ("offload_byte", self.offload_byte),
        ]
    }

    /// The cost named `name`, to set (custom values in a scenario).
    pub fn get_mut(&mut self, name: &str) -> Option<&mut f64> {
        Some(match name {
            "syscall" => &mut self.syscall,
            "kernel_packet" => &mut self.kernel_packet,
            "tls_record" => &mut self.tls_record,
            "tls_byte" => &mut self.tls_byte,
            "aes_call" => &mut self.aes_call,
            "aes_byte" => &mut self.aes_byte,
            "soft_ctr_byte" => &mut self.soft_ctr_byte,
            "sha1_byte" => &mut self.sha1_byte,
            "ntor" => &mut self.ntor,
            "link_responder" => &mut self.link_responder,
            "link_initiator" => &mut self.link_initiator,
            "cell_other" => &mut self.cell_other,
            "user_packet" => &mut self.user_packet,
            "offload_call" => &mut self.offload_call,
            "offload_byte" => &mut self.offload_byte,
            _ => return None,
        })
    }

    /// The first cost outside `[0, MAX_UNIT_COST_NS]` (or not a number), by name.
    pub fn out_of_range(&self) -> Option<(&'static str, f64)> {
        self.named()
            .into_iter()
            .find(|(_, v)| !(0.0..=MAX_UNIT_COST_NS).contains(v))
    }
}

/// The largest unit cost a file may give (one second): beyond it a relay could not handle a
/// cell within a run, and a typo in the unit (s for ns) is the likelier story.
pub const MAX_UNIT_COST_NS: f64 = 1e9;

/// The spread of one measured cost over its repeated timings.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Spread {
    /// 10th percentile of the timings, ns per operation.
    pub p10: f64,
    /// 90th percentile of the timings, ns per operation.
    pub p90: f64,
    /// Timings taken (each over many operations).
    pub runs: u32,
}

/// A calibration file: the unit costs measured on one machine, and how they spread.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CpuCalibration {
    /// [`CALIBRATION_FORMAT`].
    pub format: u32,
    /// The machine measured, in words (CPU model, cores, kernel).
    pub machine: String,
    /// When (a date), and with what (`onionlab calibrate` and its version).
    pub measured: String,
    /// Medians, ns per operation.
    pub costs: UnitCosts,
    /// The spread of each measured cost, by name (costs not measured on this machine, such
    /// as `cell_other` or the offload unit's, have none; `notes` says where they come from).
    #[serde(default)]
    pub spread: std::collections::BTreeMap<String, Spread>,
    /// How each cost was measured or where it comes from, by name.
    #[serde(default)]
    pub notes: std::collections::BTreeMap<String, String>,
}

/// How relay cells are encrypted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CellCrypto {
    /// Counter mode built by hand on AES-ECB, 16 bytes per call.
    SoftwareCtr,
    /// The library's native counter mode (AES-NI).
    NativeCtr,
    /// An on-chip crypto unit: a per-call and a per-byte cost to the CPU.
    Offload,
}

/// How packets reach the network.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PacketPath {
    /// System calls and the kernel's TCP/IP stack.
    Kernel,
    /// A user-space stack with the NIC mapped into the process (no system calls).
    Bypass,
}

/// The named CPU profiles of a scenario's `cpu.profile`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CpuProfile {
    /// Hand-built counter mode on AES-ECB, packets through the kernel (older tor).
    SoftwareCtr,
    /// Native AES-CTR, packets through the kernel (tor today).
    NativeCtr,
    /// Relay crypto on an on-chip crypto unit, packets through the kernel.
    Offload,
    /// Native AES-CTR and a user-space network stack with no system calls.
    KernelBypass,
}

impl CpuProfile {
    /// The cell encryption and packet path the profile stands for.
    pub fn parts(self) -> (CellCrypto, PacketPath) {
        match self {
            CpuProfile::SoftwareCtr => (CellCrypto::SoftwareCtr, PacketPath::Kernel),
            CpuProfile::NativeCtr => (CellCrypto::NativeCtr, PacketPath::Kernel),
            CpuProfile::Offload => (CellCrypto::Offload, PacketPath::Kernel),
            CpuProfile::KernelBypass => (CellCrypto::NativeCtr, PacketPath::Bypass),
        }
    }

    /// The profile's name as a scenario writes it.
    pub fn name(self) -> &'static str {
        match self {
            CpuProfile::SoftwareCtr => "software_ctr",
            CpuProfile::NativeCtr => "native_ctr",
            CpuProfile::Offload => "offload",
            CpuProfile::KernelBypass => "kernel_bypass",
        }
    }
}

/// Work a relay did, counted as it did it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Work {
    /// System calls: reads, writes, and one epoll_wait per wake of the main loop.
    pub syscalls: u64,
    /// Packets sent and received by the host's network stack.
    pub packets: u64,
    /// TLS records opened and sealed.
    pub tls_records: u64,
    /// Bytes in those TLS records.
    pub tls_bytes: u64,
    /// Relay-crypto cipher calls (one per cell per layer).
    pub cipher_calls: u64,
    /// Bytes through those cipher calls ([`RELAY_PAYLOAD_BYTES`] per call).
    pub cipher_bytes: u64,
    /// Bytes through the running digest (cells originated or recognised here).
    pub digest_bytes: u64,
    /// Cells handled (read from a channel, or packaged at the edge).
    pub cells: u64,
    /// TLS bytes written since the last flush (they go out in the flush's records).
    pub unflushed: u64,
    /// Link handshakes answered as the responding relay (their public-key work).
    pub link_responses: u64,
    /// Link handshakes opened as the initiating relay (their public-key work).
    pub link_initiations: u64,
}

impl Work {
    /// What was done since `earlier` (counts only grow).
    pub fn since(&self, earlier: &Work) -> Work {
        Work {
            syscalls: self.syscalls - earlier.syscalls,
            packets: self.packets - earlier.packets,
            tls_records: self.tls_records - earlier.tls_records,
            tls_bytes: self.tls_bytes - earlier.tls_bytes,
            cipher_calls: self.cipher_calls - earlier.cipher_calls,
            cipher_bytes: self.cipher_bytes - earlier.cipher_bytes,
            digest_bytes: self.digest_bytes - earlier.digest_bytes,
            cells: self.cells - earlier.cells,
            unflushed: 0,
            link_responses: self.link_responses - earlier.link_responses,
            link_initiations: self.link_initiations - earlier.link_initiations,
        }
    }

    /// A TLS read or write of `bytes` (a system call, and the records it takes).
    pub fn tls_io(&mut self, bytes: u64) {
        self.syscalls += 1;
        self.tls_records += bytes.div_ceil(TLS_RECORD_BYTES).max(1);
        self.tls_bytes += bytes;
    }

    /// Bytes written to a TLS connection's buffer (they are sealed when it is flushed).
    pub fn tls_write(&mut self, bytes: u64) {
        self.tls_bytes += bytes;
        self.unflushed += bytes;
    }

    /// A TLS connection's buffer written to the kernel: a system call, and the records
    /// that its bytes since the last flush take.
    pub fn tls_flush(&mut self) {
        self.syscalls += 1;
        self.tls_records += self.unflushed.div_ceil(TLS_RECORD_BYTES).max(1);
        self.unflushed = 0;
    }

    /// A cell this hop originates (at the edge of its circuit): digest and one layer.
    pub fn originate(&mut self) {
        self.relay_crypt(true);
        self.cells += 1;
    }

    /// One layer of relay crypto on one cell; `edge` adds the running digest.
    pub fn relay_crypt(&mut self, edge: bool) {
        self.relay_crypt_cells(edge, 1);
    }

    /// One layer of relay crypto on each of `n` cells (a run of one circuit's cells).
    pub fn relay_crypt_cells(&mut self, edge: bool, n: u64) {
        self.cipher_calls += n;
        self.cipher_bytes += n * RELAY_PAYLOAD_BYTES;
        if edge {
            self.digest_bytes += n * RELAY_PAYLOAD_BYTES;
        }
    }
}

/// CPU time by where it goes, in picoseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuSplit {
    /// Relay-cell crypto (AES-CTR, the digest), onion-skin handshakes and link handshakes.
    pub crypto: u64,
    /// System calls and the kernel's (or a user-space stack's) packet work.
    pub kernel: u64,
    /// TLS records.
    pub tls: u64,
    /// tor's own bookkeeping.
    pub other: u64,
}

impl CpuSplit {
    /// All four parts together, in picoseconds.
    pub fn total(&self) -> u64 {
        self.crypto + self.kernel + self.tls + self.other
    }

    /// Adds `o` part by part.
    pub fn add(&mut self, o: &CpuSplit) {
        self.crypto += o.crypto;
        self.kernel += o.kernel;
        self.tls += o.tls;
        self.other += o.other;
    }

    /// Each part scaled by `num / den` (the same rounding for every part, so a split's parts
    /// keep their order).
    pub fn scaled(&self, num: u64, den: u64) -> CpuSplit {
        let f = |v: u64| ((v as u128 * num as u128) / den.max(1) as u128) as u64;
        CpuSplit {
            crypto: f(self.crypto),
            kernel: f(self.kernel),
            tls: f(self.tls),
            other: f(self.other),
        }
    }
}

fn ps(ns: f64) -> u64 {
    (ns * 1000.0).round() as u64
}

/// Unit costs in picoseconds under one profile: integers, so pricing is exact and the same
/// on every machine that replays the run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CostTable {
    /// One system call (0 on a kernel-bypass path).
    pub syscall: u64,
    /// One packet through the network stack, the kernel's or a user-space one.
    pub packet: u64,
    /// A TLS record's fixed cost.
    pub tls_record: u64,
    /// A TLS record's cost per byte.
    pub tls_byte: u64,
    /// One relay-crypto cipher call, under the profile's cell encryption.
    pub cipher_call: u64,
    /// A relay-crypto byte, under the profile's cell encryption.
    pub cipher_byte: u64,
    /// A byte through the running SHA-1 digest.
    pub digest_byte: u64,
    /// tor's own work per cell (queues, scheduler, buffers).
    pub cell: u64,
    /// The server side of one ntor handshake.
    pub ntor: u64,
    /// The responding relay's public-key work in one link handshake.
    pub link_responder: u64,
    /// The initiating relay's public-key work in one link handshake.
    pub link_initiator: u64,
}

impl CostTable {
    /// Prices `costs` (nanoseconds) in picoseconds, with the cipher costs of `crypto` and the
    /// packet costs of `path`.
    pub fn new(costs: &UnitCosts, crypto: CellCrypto, path: PacketPath) -> Self {
        let (cipher_call, cipher_byte) = match crypto {
            CellCrypto::SoftwareCtr => (costs.aes_call, costs.soft_ctr_byte),
            CellCrypto::NativeCtr => (costs.aes_call, costs.aes_byte),
            CellCrypto::Offload => (costs.offload_call, costs.offload_byte),
        };
        let (syscall, packet) = match path {
            PacketPath::Kernel => (costs.syscall, costs.kernel_packet),
            PacketPath::Bypass => (0.0, costs.user_packet),
        };
        CostTable {
            syscall: ps(syscall),
            packet: ps(packet),
            tls_record: ps(costs.tls_record),
            tls_byte: ps(costs.tls_byte),
            cipher_call: ps(cipher_call),
            cipher_byte: ps(cipher_byte),
            digest_byte: ps(costs.sha1_byte),
            cell: ps(costs.cell_other),
            ntor: ps(costs.ntor),
            link_responder: ps(costs.link_responder),
            link_initiator: ps(costs.link_initiator),
        }
    }

    /// The CPU time `w` takes, by category.
    pub fn price(&self, w: &Work) -> CpuSplit {
        CpuSplit {
            crypto: w.cipher_calls * self.cipher_call
                + w.cipher_bytes * self.cipher_byte
                + w.digest_bytes * self.digest_byte
                + w.link_responses * self.link_responder
                + w.link_initiations * self.link_initiator,
            kernel: w.syscalls * self.syscall + w.packets * self.packet,
            tls: w.tls_records * self.tls_record + w.tls_bytes * self.tls_byte,
            other: w.cells * self.cell,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unit() -> UnitCosts {
        UnitCosts {
            syscall: 1.0,
            kernel_packet: 2.0,
            tls_record: 3.0,
            tls_byte: 0.5,
            aes_call: 4.0,
            aes_byte: 0.25,
            soft_ctr_byte: 2.0,
            sha1_byte: 1.5,
            ntor: 100_000.0,
            link_responder: 900_000.0,
            link_initiator: 300_000.0,
            cell_other: 7.0,
            user_packet: 0.5,
            offload_call: 9.0,
            offload_byte: 0.0,
        }
    }

    #[test]
    fn pricing_adds_up_by_hand() {
        let t = CostTable::new(&unit(), CellCrypto::NativeCtr, PacketPath::Kernel);
        let mut w = Work::default();
        w.tls_io(20_000); // 1 syscall, 2 records
        w.relay_crypt(true);
        w.cells = 1;
        w.packets = 3;
        let s = t.price(&w);
        assert_eq!(s.kernel, 1_000 + 3 * 2_000);
        assert_eq!(s.tls, 2 * 3_000 + 20_000 * 500);
        assert_eq!(s.crypto, 4_000 + 509 * 250 + 509 * 1_500);
        assert_eq!(s.other, 7_000);
        // Link handshakes go to crypto, each side at its own price.
        let w = Work {
            link_responses: 2,
            link_initiations: 1,
            ..Work::default()
        };
        assert_eq!(t.price(&w).crypto, 2 * 900_000_000 + 300_000_000);
    }

    #[test]
    fn profiles_change_only_their_part() {
        let u = unit();
        let mut w = Work::default();
        w.tls_io(514);
        w.relay_crypt(false);
        w.packets = 2;
        let native = CostTable::new(&u, CellCrypto::NativeCtr, PacketPath::Kernel).price(&w);
        let soft = CostTable::new(&u, CellCrypto::SoftwareCtr, PacketPath::Kernel).price(&w);
        let off = CostTable::new(&u, CellCrypto::Offload, PacketPath::Kernel).price(&w);
        let bypass = CostTable::new(&u, CellCrypto::NativeCtr, PacketPath::Bypass).price(&w);
        assert!(soft.crypto > native.crypto);
        assert_eq!(off.crypto, 9_000);
        assert_eq!((soft.kernel, soft.tls), (native.kernel, native.tls));
        assert_eq!(bypass.kernel, 2 * 500);
        assert_eq!(bypass.crypto, native.crypto);
    }

    #[test]
    fn scaling_keeps_parts() {
        let s = CpuSplit {
            crypto: 10,
            kernel: 20,
            tls: 30,
            other: 40,
        };
        assert_eq!(s.scaled(3, 2).total(), 150);
        assert_eq!(s.scaled(1, 0).crypto, 10);
    }

    #[test]
    fn range_check_names_the_cost() {
        let mut u = unit();
        assert_eq!(u.out_of_range(), None);
        *u.get_mut("tls_byte").unwrap() = -1.0;
        assert_eq!(u.out_of_range().map(|(n, _)| n), Some("tls_byte"));
        u.tls_byte = f64::NAN;
        assert_eq!(u.out_of_range().map(|(n, _)| n), Some("tls_byte"));
    }
}
