//! The operations timed: each is the smallest piece of a relay's work that one unit cost
//! stands for, done with the same primitives (system calls, the kernel's TCP, AES, SHA-1,
//! X25519) a relay uses.
//!
//! Each `*_op` function returns the operation as a closure that runs it `n` times, with its
//! state (sockets, keys, buffers) built beforehand so that only the operation is timed.
//! Inputs go in and results come out through `black_box`, so the optimizer can neither hoist
//! the work out of the loop nor drop it as unused.

use std::hint::black_box;
use std::io;
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd;

use aes::cipher::{Block, BlockCipherEncrypt, KeyInit, KeyIvInit, StreamCipher};
use aes::Aes128;
use aes_gcm::aead::AeadInOut;
use aes_gcm::Aes128Gcm;
use hmac::{Hmac, Mac};
use sha1::{Digest, Sha1};
use sha2::Sha256;
use x25519_dalek::{PublicKey, StaticSecret};

/// Payload of a full-sized TCP segment on Ethernet (1500-byte MTU less IPv4, TCP and the
/// timestamp option): what a busy relay's packets carry.
pub(crate) const SEGMENT_BYTES: usize = 1448;

/// An Ethernet frame of a full-sized segment, as a NIC hands it over.
pub(crate) const FRAME_BYTES: usize = 1514;

/// Bytes of one relay cell's payload that relay crypto covers.
pub(crate) const CELL_BYTES: usize = onionlab_torcore::cpu::RELAY_PAYLOAD_BYTES as usize;

/// A connected loopback TCP pair with Nagle off (a relay sets TCP_NODELAY, and with Nagle a
/// small write could wait for an ACK instead of leaving at once).
pub(crate) fn tcp_pair() -> io::Result<(TcpStream, TcpStream)> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let a = TcpStream::connect(listener.local_addr()?)?;
    let (b, _) = listener.accept()?;
    a.set_nodelay(true)?;
    b.set_nodelay(true)?;
    Ok((a, b))
}

/// read(2) on a socket with nothing to read, non-blocking so it returns EAGAIN at once: the
/// kernel entry and exit and a socket lookup, with no data moved — what every read, write or
/// epoll_wait of a relay pays before any packet work. `sock` must be non-blocking and idle.
pub(crate) fn syscall_op(sock: &TcpStream) -> impl FnMut(u64) + '_ {
    let fd = sock.as_raw_fd();
    let mut buf = [0u8; 64];
    move |n| {
        for _ in 0..n {
            // SAFETY: `buf` is a live, writable buffer of `buf.len()` bytes, and `fd` is an
            // open socket borrowed from `sock` for the closure's lifetime.
            let r = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
            black_box(r);
        }
    }
}

/// Checks that [`syscall_op`] would time the intended failure, not a read that returns data
/// (which would add the copy) or an error path that skips the socket.
pub(crate) fn read_would_block(sock: &TcpStream) -> bool {
    let mut buf = [0u8; 64];
    // SAFETY: as in `syscall_op`.
    let r = unsafe { libc::read(sock.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
    r < 0 && io::Error::last_os_error().kind() == io::ErrorKind::WouldBlock
}

/// `buf.len()` bytes written to `fd` with write(2), retrying short writes.
fn write_all(fd: i32, buf: &[u8]) {
    let mut done = 0;
    while done < buf.len() {
        // SAFETY: the pointer and length describe the unwritten tail of `buf`.
        let r = unsafe { libc::write(fd, buf[done..].as_ptr().cast(), buf.len() - done) };
        assert!(
            r > 0,
            "write on a loopback socket failed: {}",
            io::Error::last_os_error()
        );
        done += r as usize;
    }
}

/// `buf.len()` bytes read from `fd` with read(2) (blocking), retrying short reads.
fn read_exact(fd: i32, buf: &mut [u8]) {
    let mut done = 0;
    while done < buf.len() {
        // SAFETY: the pointer and length describe the unfilled tail of `buf`.
        let r = unsafe { libc::read(fd, buf[done..].as_mut_ptr().cast(), buf.len() - done) };
        assert!(
            r > 0,
            "read on a loopback socket failed: {}",
            io::Error::last_os_error()
        );
        done += r as usize;
    }
}

/// One full-sized segment written on one end of a loopback TCP connection and read on the
/// other, in one thread: on loopback the write carries the segment through the sender's and
/// the receiver's TCP/IP code (and any ACK back), the read copies it out. So an iteration is
/// two system calls plus one packet sent and one received. Both ends must be blocking.
pub(crate) fn kernel_packet_op<'a>(tx: &'a TcpStream, rx: &'a TcpStream) -> impl FnMut(u64) + 'a {
    let (tx, rx) = (tx.as_raw_fd(), rx.as_raw_fd());
    let out = [0x5au8; SEGMENT_BYTES];
    let mut inb = [0u8; SEGMENT_BYTES];
    move |n| {
        for _ in 0..n {
            write_all(tx, black_box(&out));
            read_exact(rx, &mut inb);
            black_box(&mut inb);
        }
    }
}

/// AES-128-GCM seal then open of one TLS record of `len` bytes, in place (the open restores
/// the plaintext for the next round). A relay seals what it sends and opens what it receives,
/// and the two cost the same (counter mode and GHASH over the same bytes), so half an
/// iteration is one record either way. The 5-byte additional data is TLS 1.3's record header;
/// the nonce changes per record as TLS's sequence number makes it.
pub(crate) fn tls_op(len: usize) -> impl FnMut(u64) {
    let gcm = Aes128Gcm::new(&[0x11u8; 16].into());
    let header = [0x17u8, 0x03, 0x03, (len >> 8) as u8, len as u8];
    let mut record = vec![0x42u8; len];
    let mut seq = 0u64;
    move |n| {
        for _ in 0..n {
            seq += 1;
            let mut nonce = [0x07u8; 12];
            nonce[4..].copy_from_slice(&seq.to_be_bytes());
            let nonce = nonce.into();
            let tag = gcm
                .encrypt_inout_detached(&nonce, &header, record.as_mut_slice().into())
                .expect("an AES-GCM record of at most 16 KiB seals");
            gcm.decrypt_inout_detached(&nonce, &header, record.as_mut_slice().into(), &tag)
                .expect("a record sealed with the same key and nonce opens");
            black_box(&mut record);
        }
    }
}

/// AES-128-CTR on `len` bytes through the `ctr` crate, the cipher set up anew for each call
/// (key expansion and counter block included): the fixed part of a call is what the fit
/// over two lengths attributes to `aes_call`.
pub(crate) fn aes_ctr_op(len: usize) -> impl FnMut(u64) {
    let key = [0x2bu8; 16];
    let iv = [0u8; 16];
    let mut data = vec![0x33u8; len];
    move |n| {
        for _ in 0..n {
            let mut c = ctr::Ctr128BE::<Aes128>::new(&black_box(key).into(), &black_box(iv).into());
            c.apply_keystream(&mut data);
            black_box(&mut data);
        }
    }
}

/// Counter mode the way tor did it before it used a library's: one AES block encryption
/// call per 16 bytes of the cell, its output XORed in, the counter incremented. The CPU
/// cannot overlap blocks the way a native counter mode interleaves several, and every block
/// pays a call.
pub(crate) fn soft_ctr_op() -> impl FnMut(u64) {
    let aes = Aes128::new(&[0x2bu8; 16].into());
    let mut cell = [0x33u8; CELL_BYTES];
    let mut counter = 0u128;
    move |n| {
        for _ in 0..n {
            soft_ctr(&aes, &mut counter, &mut cell);
            black_box(&mut cell);
        }
    }
}

/// `data` XORed with the AES keystream of consecutive counter blocks from `counter`, one
/// block encryption per 16 bytes; `counter` is left at the next unused block.
fn soft_ctr(aes: &Aes128, counter: &mut u128, data: &mut [u8]) {
    for chunk in data.chunks_mut(16) {
        let mut pad: Block<Aes128> = counter.to_be_bytes().into();
        aes.encrypt_block(&mut pad);
        for (byte, k) in chunk.iter_mut().zip(pad.iter()) {
            *byte ^= k;
        }
        *counter = counter.wrapping_add(1);
    }
}

/// One cell's payload through a running SHA-1 digest (the relay-crypto digest at a circuit's
/// edge grows with every cell and is never restarted).
pub(crate) fn sha1_op() -> impl FnMut(u64) {
    let mut digest = Sha1::new();
    let cell = [0x44u8; CELL_BYTES];
    move |n| {
        for _ in 0..n {
            digest.update(black_box(&cell));
            black_box(&mut digest);
        }
    }
}

/// A small deterministic generator for key material: the handshake's cost does not depend on
/// where its secret bytes come from, and a seeded source keeps the OS's random number
/// generator (a system call) out of the timing.
struct SplitMix(u64);

impl SplitMix {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn bytes32(&mut self) -> [u8; 32] {
        let mut out = [0u8; 32];
        for chunk in out.chunks_mut(8) {
            chunk.copy_from_slice(&self.next_u64().to_le_bytes());
        }
        out
    }
}

/// ntor's protocol id and the tweaks that separate its uses of HMAC (tor-spec, "The ntor
/// handshake").
const PROTOID: &[u8] = b"ntor-curve25519-sha256-1";
const T_MAC: &[u8] = b"ntor-curve25519-sha256-1:mac";
const T_KEY: &[u8] = b"ntor-curve25519-sha256-1:key_extract";
const T_VERIFY: &[u8] = b"ntor-curve25519-sha256-1:verify";
const M_EXPAND: &[u8] = b"ntor-curve25519-sha256-1:key_expand";

/// Bytes of key material a circuit hop derives: two 20-byte digest seeds and two 16-byte
/// AES keys.
const NTOR_KEY_BYTES: usize = 72;

type HmacSha256 = Hmac<Sha256>;

fn hmac_parts(key: &[u8], parts: &[&[u8]]) -> [u8; 32] {
    let mut mac = HmacSha256::new_from_slice(key).expect("HMAC takes a key of any length");
    for part in parts {
        mac.update(part);
    }
    mac.finalize().into_bytes().into()
}

/// The server's half of one ntor handshake: a fresh key pair (y, Y), EXP(X,y) and EXP(X,b),
/// the verifier and AUTH, and HKDF-SHA256 of the 72 bytes of circuit keys. Returns AUTH and
/// the keys, which a relay would send and keep.
fn ntor_server(
    rng: &mut SplitMix,
    b: &StaticSecret,
    big_b: &PublicKey,
    big_x: &PublicKey,
    id: &[u8; 20],
) -> ([u8; 32], [u8; NTOR_KEY_BYTES]) {
    let y = StaticSecret::from(rng.bytes32());
    let big_y = PublicKey::from(&y);
    let xy = y.diffie_hellman(big_x);
    let xb = b.diffie_hellman(big_x);
    // secret_input = EXP(X,y) | EXP(X,b) | ID | B | X | Y | PROTOID
    let secret_input: [&[u8]; 7] = [
        xy.as_bytes(),
        xb.as_bytes(),
        id,
        big_b.as_bytes(),
        big_x.as_bytes(),
        big_y.as_bytes(),
        PROTOID,
    ];
    let verify = hmac_parts(T_VERIFY, &secret_input);
    // auth_input = verify | ID | B | Y | X | PROTOID | "Server"
    let auth = hmac_parts(
        T_MAC,
        &[
            &verify,
            id,
            big_b.as_bytes(),
            big_y.as_bytes(),
            big_x.as_bytes(),
            PROTOID,
            b"Server",
        ],
    );
    // HKDF-SHA256 (RFC 5869): extract with T_KEY as salt, expand with M_EXPAND as info.
    let prk = hmac_parts(T_KEY, &secret_input);
    let mut keys = [0u8; NTOR_KEY_BYTES];
    let mut prev: Option<[u8; 32]> = None;
    for (i, chunk) in keys.chunks_mut(32).enumerate() {
        let counter = [i as u8 + 1];
        let t = match &prev {
            Some(p) => hmac_parts(&prk, &[p, M_EXPAND, &counter]),
            None => hmac_parts(&prk, &[M_EXPAND, &counter]),
        };
        chunk.copy_from_slice(&t[..chunk.len()]);
        prev = Some(t);
    }
    (auth, keys)
}

/// Server-side ntor handshakes against one client's onion skin (the client's cost is not the
/// relay's; a fixed X does not change the server's work).
pub(crate) fn ntor_op() -> impl FnMut(u64) {
    let mut rng = SplitMix(0x6f6e_696f_6e6c_6162);
    let b = StaticSecret::from(rng.bytes32());
    let big_b = PublicKey::from(&b);
    let big_x = PublicKey::from(&StaticSecret::from(rng.bytes32()));
    let id = [0x49u8; 20];
    move |n| {
        for _ in 0..n {
            black_box(ntor_server(&mut rng, &b, &big_b, black_box(&big_x), &id));
        }
    }
}

/// Keys of the sizes tor's link handshake uses (see `keys/README.md`; they protect nothing).
const RSA2048_PKCS1: &[u8] = include_bytes!("../keys/rsa2048-pkcs1.der");
const RSA1024_PUBLIC: &[u8] = include_bytes!("../keys/rsa1024-public.der");
const RSA1024_SIGNATURE: &[u8] = include_bytes!("../keys/rsa1024-sha256.sig");
const RSA1024_MESSAGE: &[u8] = b"onionlab calibration: an RSA-1024 signature as in a CERTS cell";

/// Bytes an Ed25519 certificate signs (tor-spec's cert-spec: version to extensions) and an
/// AUTHENTICATE cell's body signs (its 352 bytes less the 64-byte signature).
const ED_CERT_BYTES: usize = 104;
const AUTHENTICATE_SIGNED_BYTES: usize = 288;

/// The public-key work both ends of a link handshake share: an ephemeral X25519 key pair and
/// the shared secret (TLS 1.3's key exchange).
fn x25519_exchange(rng: &mut SplitMix, peer: &PublicKey) -> [u8; 32] {
    let e = StaticSecret::from(rng.bytes32());
    black_box(PublicKey::from(&e));
    *e.diffie_hellman(peer).as_bytes()
}

/// What both link ops need: an RSA-2048 link key, the RSA-1024 signature of a certificate,
/// Ed25519 certificates and an AUTHENTICATE body with their signatures.
struct LinkKeys {
    random: ring::rand::SystemRandom,
    link: ring::rsa::KeyPair,
    link_public: Vec<u8>,
    transcript: [u8; 130],
    transcript_signature: Vec<u8>,
    ed: ring::signature::Ed25519KeyPair,
    ed_cert: [u8; ED_CERT_BYTES],
    ed_cert_signature: Vec<u8>,
    authenticate: [u8; AUTHENTICATE_SIGNED_BYTES],
    peer: PublicKey,
}

impl LinkKeys {
    fn new(rng: &mut SplitMix) -> Self {
        use ring::signature::{Ed25519KeyPair, RSA_PSS_SHA256};
        let random = ring::rand::SystemRandom::new();
        let link =
            ring::rsa::KeyPair::from_der(RSA2048_PKCS1).expect("the shipped RSA-2048 test key");
        // TLS 1.3's CertificateVerify signs 64 spaces, a context string and the transcript
        // hash: 130 bytes with SHA-256.
        let transcript = [0x20u8; 130];
        let mut transcript_signature = vec![0; link.public().modulus_len()];
        link.sign(
            &RSA_PSS_SHA256,
            &random,
            &transcript,
            &mut transcript_signature,
        )
        .expect("RSA-PSS signing with a valid key");
        let ed = Ed25519KeyPair::from_seed_unchecked(&rng.bytes32()).expect("any 32-byte seed");
        let ed_cert = [0x04u8; ED_CERT_BYTES];
        let ed_cert_signature = ed.sign(&ed_cert).as_ref().to_vec();
        LinkKeys {
            link_public: link.public().as_ref().to_vec(),
            random,
            link,
            transcript,
            transcript_signature,
            ed_cert,
            ed_cert_signature,
            authenticate: [0x41u8; AUTHENTICATE_SIGNED_BYTES],
            peer: PublicKey::from(&StaticSecret::from(rng.bytes32())),
            ed,
        }
        .checked()
    }

    /// Fails loudly if a verification the ops time would fail (and so return early).
    fn checked(self) -> Self {
        assert!(self.rsa1024_verify() && self.ed_verify() && self.link_verify());
        self
    }

    fn rsa1024_verify(&self) -> bool {
        use ring::signature::{UnparsedPublicKey, RSA_PKCS1_1024_8192_SHA256_FOR_LEGACY_USE_ONLY};
        let key = UnparsedPublicKey::new(
            &RSA_PKCS1_1024_8192_SHA256_FOR_LEGACY_USE_ONLY,
            RSA1024_PUBLIC,
        );
        key.verify(black_box(RSA1024_MESSAGE), RSA1024_SIGNATURE)
            .is_ok()
    }

    fn ed_verify(&self) -> bool {
        use ring::signature::{KeyPair, UnparsedPublicKey, ED25519};
        let key = UnparsedPublicKey::new(&ED25519, self.ed.public_key().as_ref());
        key.verify(black_box(&self.ed_cert), &self.ed_cert_signature)
            .is_ok()
    }

    fn link_verify(&self) -> bool {
        use ring::signature::{UnparsedPublicKey, RSA_PSS_2048_8192_SHA256};
        let key = UnparsedPublicKey::new(&RSA_PSS_2048_8192_SHA256, &self.link_public);
        key.verify(black_box(&self.transcript), &self.transcript_signature)
            .is_ok()
    }
}

/// The responding relay's public-key work in one link handshake with a relay: TLS 1.3's
/// X25519 exchange and CertificateVerify (an RSA-PSS-SHA256 signature with the RSA-2048 link
/// key); then the initiator's CERTS (its RSA-1024 identity certificate and RSA-to-Ed25519
/// cross-certificate, two RSA verifications; its Ed25519 signing-key and authentication-key
/// certificates, two Ed25519 verifications) and its AUTHENTICATE (one Ed25519 verification).
pub(crate) fn link_responder_op() -> impl FnMut(u64) {
    let mut rng = SplitMix(0x6c69_6e6b_7265_7370);
    let keys = LinkKeys::new(&mut rng);
    let mut signature = vec![0; keys.link.public().modulus_len()];
    move |n| {
        for _ in 0..n {
            black_box(x25519_exchange(&mut rng, &keys.peer));
            keys.link
                .sign(
                    &ring::signature::RSA_PSS_SHA256,
                    &keys.random,
                    black_box(&keys.transcript),
                    &mut signature,
                )
                .expect("RSA-PSS signing with a valid key");
            black_box(&signature);
            for _ in 0..2 {
                black_box(keys.rsa1024_verify());
            }
            for _ in 0..3 {
                black_box(keys.ed_verify());
            }
        }
    }
}

/// The initiating relay's public-key work in one link handshake: TLS 1.3's X25519 exchange
/// and the check of the responder's CertificateVerify (an RSA-2048 verification); the
/// responder's CERTS (its link certificate, identity certificate and cross-certificate, three
/// RSA-1024 verifications; its Ed25519 signing-key and link-key certificates, two Ed25519
/// verifications); and its own AUTHENTICATE (one Ed25519 signature).
pub(crate) fn link_initiator_op() -> impl FnMut(u64) {
    let mut rng = SplitMix(0x6c69_6e6b_696e_6974);
    let keys = LinkKeys::new(&mut rng);
    move |n| {
        for _ in 0..n {
            black_box(x25519_exchange(&mut rng, &keys.peer));
            black_box(keys.link_verify());
            for _ in 0..3 {
                black_box(keys.rsa1024_verify());
            }
            for _ in 0..2 {
                black_box(keys.ed_verify());
            }
            black_box(keys.ed.sign(black_box(&keys.authenticate)));
        }
    }
}

/// Slots in the simulated receive ring: 1 MiB of frames, more than a core's private caches
/// hold, as a NIC's ring is filled by DMA rather than by the core that reads it.
const RING_SLOTS: usize = 512;
const SLOT_BYTES: usize = 2048;

/// The Internet checksum (ones'-complement sum of 16-bit words) of `data`, which a user-space
/// stack must verify on every IPv4 header itself.
pub(crate) fn ones_complement_checksum(data: &[u8]) -> u16 {
    let mut sum: u32 = 0;
    for pair in data.chunks(2) {
        let word = u16::from_be_bytes([pair[0], *pair.get(1).unwrap_or(&0)]);
        sum += u32::from(word);
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// What a user-space stack cannot avoid per received packet: copy the frame out of the
/// NIC's ring into the application's buffer, and checksum its IPv4 header. Consecutive
/// packets come from consecutive slots, as a ring is consumed.
pub(crate) fn user_packet_op() -> impl FnMut(u64) {
    let mut ring = vec![0u8; RING_SLOTS * SLOT_BYTES];
    for (i, slot) in ring.chunks_mut(SLOT_BYTES).enumerate() {
        for (j, byte) in slot.iter_mut().enumerate() {
            *byte = (i * 7 + j) as u8;
        }
        // An IPv4 header after the 14-byte Ethernet header: version 4, 20 bytes.
        slot[14] = 0x45;
    }
    let mut app = vec![0u8; FRAME_BYTES];
    let mut slot = 0usize;
    move |n| {
        for _ in 0..n {
            let frame = &ring[slot * SLOT_BYTES..slot * SLOT_BYTES + FRAME_BYTES];
            app.copy_from_slice(black_box(frame));
            black_box(ones_complement_checksum(&app[14..34]));
            black_box(&mut app);
            slot = (slot + 1) % RING_SLOTS;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checksum_of_a_known_header() {
        // The worked example of an IPv4 header checksum (RFC 1071 style): the header with
        // its checksum field zeroed sums to the checksum, and with it filled in to zero.
        let mut h = [
            0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00, 0xc0, 0xa8,
            0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7,
        ];
        let sum = ones_complement_checksum(&h);
        assert_eq!(sum, 0xb861);
        h[10..12].copy_from_slice(&sum.to_be_bytes());
        assert_eq!(ones_complement_checksum(&h), 0);
    }

    #[test]
    fn soft_ctr_matches_the_library_counter_mode() {
        // The hand-built counter mode must be counter mode, or its cost stands for nothing;
        // two cells in a row check that the counter carries over.
        let key = [0x2bu8; 16];
        let mut expect = [0x33u8; 2 * CELL_BYTES];
        let mut c = ctr::Ctr128BE::<Aes128>::new(&key.into(), &[0u8; 16].into());
        c.apply_keystream(&mut expect[..CELL_BYTES]);
        // The hand-built mode starts each cell on a fresh block; so does this reference.
        let mut c = ctr::Ctr128BE::<Aes128>::new(&key.into(), &32u128.to_be_bytes().into());
        c.apply_keystream(&mut expect[CELL_BYTES..]);

        let aes = Aes128::new(&key.into());
        let mut cells = [0x33u8; 2 * CELL_BYTES];
        let mut counter = 0u128;
        let (first, second) = cells.split_at_mut(CELL_BYTES);
        soft_ctr(&aes, &mut counter, first);
        assert_eq!(counter, 32);
        soft_ctr(&aes, &mut counter, second);
        assert_eq!(cells, expect);
    }

    #[test]
    fn ntor_server_is_deterministic_and_keyed() {
        let mut rng = SplitMix(1);
        let b = StaticSecret::from(rng.bytes32());
        let big_b = PublicKey::from(&b);
        let big_x = PublicKey::from(&StaticSecret::from(rng.bytes32()));
        let (auth1, keys1) = ntor_server(&mut SplitMix(9), &b, &big_b, &big_x, &[1; 20]);
        let (auth2, keys2) = ntor_server(&mut SplitMix(9), &b, &big_b, &big_x, &[1; 20]);
        assert_eq!((auth1, keys1), (auth2, keys2));
        let (auth3, _) = ntor_server(&mut SplitMix(9), &b, &big_b, &big_x, &[2; 20]);
        assert_ne!(auth1, auth3);
        assert_ne!(keys1, [0u8; NTOR_KEY_BYTES]);
    }

    #[test]
    fn loopback_pair_moves_a_segment_and_idles_would_block() {
        let (a, b) = tcp_pair().unwrap();
        kernel_packet_op(&a, &b)(3);
        b.set_nonblocking(true).unwrap();
        assert!(read_would_block(&b));
    }
}
