//! Parsing real and malformed consensus documents.

mod common;

use std::net::Ipv4Addr;
use std::time::Instant;

use common::{load, read, C2019_MD, C2022, C2023};
use onionlab_netdir::{Consensus, ExitPolicy, Flavour, RelayFlags};
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha12Rng;

/// Count relays whose `s` line has `flag` as a word, independently of the parser.
fn count_flag(text: &str, flag: &str) -> usize {
    text.lines()
        .filter(|l| l.starts_with("s "))
        .filter(|l| l.split(' ').skip(1).any(|w| w == flag))
        .count()
}

fn count_r_lines(text: &str) -> usize {
    text.lines().filter(|l| l.starts_with("r ")).count()
}

#[test]
fn parses_2023_full_consensus() {
    let text = read(C2023);
    let t0 = Instant::now();
    let c = Consensus::parse(&text, C2023).unwrap();
    let took = t0.elapsed();
    eprintln!("parsed 2023 consensus in {took:?}");
    assert!(took.as_secs_f64() < 2.0, "parsing took {took:?}");

    assert_eq!(c.flavour, Flavour::Full);
    assert_eq!(c.valid_after.as_deref(), Some("2023-06-01 10:00:00"));
    assert_eq!(c.relays.len(), 6876);
    assert_eq!(c.relays.len(), count_r_lines(&text));

    let guards = c
        .relays
        .iter()
        .filter(|r| r.flags.contains(RelayFlags::GUARD))
        .count();
    let exits = c
        .relays
        .iter()
        .filter(|r| r.flags.contains(RelayFlags::EXIT))
        .count();
    let bad = c
        .relays
        .iter()
        .filter(|r| r.flags.contains(RelayFlags::BAD_EXIT))
        .count();
    assert_eq!(guards, count_flag(&text, "Guard"));
    assert_eq!(exits, count_flag(&text, "Exit"));
    assert_eq!(bad, count_flag(&text, "BadExit"));
    assert_eq!((guards, exits, bad), (3695, 2138, 85));
    assert_eq!(c.usable().count(), 6876);
    let unmeasured = c.relays.iter().filter(|r| r.unmeasured).count();
    assert_eq!(unmeasured, text.matches("Unmeasured=1").count());

    // bandwidth-weights Wbd=83 Wbe=0 Wbg=4142 Wbm=10000 Wdb=10000 Web=10000 Wed=9834 Wee=10000
    // Weg=9834 Wem=10000 Wgb=10000 Wgd=83 Wgg=5858 Wgm=5858 Wmb=10000 Wmd=83 Wme=0 Wmg=4142
    // Wmm=10000
    let w = &c.weights;
    assert_eq!(
        (w.wgg, w.wgm, w.wgd, w.wmg, w.wmm, w.wme, w.wmd),
        (5858, 5858, 83, 4142, 10000, 0, 83)
    );
    assert_eq!((w.weg, w.wem, w.wee, w.wed), (9834, 10000, 10000, 9834));
    assert_eq!(
        (w.wbd, w.wbe, w.wbg, w.wbm),
        (Some(83), Some(0), Some(4142), Some(10000))
    );
    assert_eq!(
        (w.wdb, w.web, w.wgb, w.wmb),
        (Some(10000), Some(10000), Some(10000), Some(10000))
    );

    assert_eq!(c.params.get("cc_alg"), Some(&2));
    assert_eq!(c.params.get("circ_max_cell_queue_size"), Some(&1250));
    assert_eq!(c.param("guard-n-primary-guards-to-use", 3), 2);
    assert_eq!(c.param("NoSuchParam", -7), -7);
    assert_eq!(c.params.len(), 38);

    // r titamon3 ABElTMhEQ2myDvERVriZBDgiGlQ Hxgl9Ih+Vz0yxaI1nvmdN0m7ea8 2023-05-31 16:24:27
    //   178.218.144.18 443 0
    let r = c.relays.iter().find(|r| r.nickname == "titamon3").unwrap();
    assert_eq!(
        r.fingerprint,
        "0011254CC8444369B20EF11156B899043822 1A54".replace(' ', "")
    );
    assert_eq!(r.address, Ipv4Addr::new(178, 218, 144, 18));
    assert_eq!(r.or_port, 443);
    assert_eq!(r.bandwidth, 25000);
    assert!(!r.unmeasured);
    assert_eq!(
        r.flags.to_string(),
        "Exit Fast Guard HSDir Running Stable V2Dir Valid"
    );
    assert!(r.exit_policy.is_accept());
    for p in [20, 21, 23, 80, 443, 8443, 64738] {
        assert!(r.exit_policy.allows_port(p), "port {p}");
    }
    for p in [22, 25, 82, 6670, 65535] {
        assert!(!r.exit_policy.allows_port(p), "port {p}");
    }
    assert!(r
        .exit_policy
        .to_string()
        .starts_with("accept 20-21,23,43,53,79-81,88,"));
    assert_eq!(r.family, None);

    let seele = &c.relays[0];
    assert_eq!(seele.nickname, "seele");
    assert_eq!(seele.exit_policy, ExitPolicy::reject_all());
    assert_eq!(seele.bandwidth, 360);
}

#[test]
fn parses_2022_full_consensus() {
    let text = read(C2022);
    let c = load(C2022);
    assert_eq!(c.flavour, Flavour::Full);
    assert_eq!(c.relays.len(), 6088);
    assert_eq!(c.relays.len(), count_r_lines(&text));
    let guards = c
        .relays
        .iter()
        .filter(|r| r.flags.contains(RelayFlags::GUARD))
        .count();
    let exits = c
        .relays
        .iter()
        .filter(|r| r.flags.contains(RelayFlags::EXIT))
        .count();
    assert_eq!(guards, count_flag(&text, "Guard"));
    assert_eq!(exits, count_flag(&text, "Exit"));
    assert_eq!(c.valid_after.as_deref(), Some("2022-11-19 10:00:00"));
}

#[test]
fn parses_2019_microdesc_consensus() {
    let text = read(C2019_MD);
    let mut c = load(C2019_MD);
    assert_eq!(c.flavour, Flavour::Microdesc);
    assert_eq!(c.relays.len(), 6345);
    assert_eq!(c.relays.len(), count_r_lines(&text));
    let exits = c
        .relays
        .iter()
        .filter(|r| r.flags.contains(RelayFlags::EXIT))
        .count();
    assert_eq!(exits, count_flag(&text, "Exit"));
    // r reb00z AALMVwXahU5Odx8kCjhVZ/SjwT0 2019-12-14 21:37:32 155.4.197.206 9001 9030
    let r = &c.relays[0];
    assert_eq!(r.nickname, "reb00z");
    assert_eq!(r.address, Ipv4Addr::new(155, 4, 197, 206));
    assert_eq!(r.or_port, 9001);
    assert_eq!(r.bandwidth, 5590);
    // No p lines in this flavour: nobody can exit until policies are assumed.
    assert!(c.relays.iter().all(|r| !r.exit_policy.allows_any()));
    let changed = c.assume_exit_policies(&ExitPolicy::parse("accept 80,443").unwrap());
    assert_eq!(changed, exits);
}

#[test]
fn exit_policy_edge_cases() {
    let p = ExitPolicy::parse("accept 80,443,1000-2000").unwrap();
    assert!(p.allows_port(80) && p.allows_port(443));
    assert!(p.allows_port(1000) && p.allows_port(1500) && p.allows_port(2000));
    assert!(!p.allows_port(79) && !p.allows_port(81) && !p.allows_port(999));
    assert!(!p.allows_port(2001) && !p.allows_port(0) && !p.allows_port(65535));
    assert!(p.allows_any());

    let r = ExitPolicy::parse("reject 1-65535").unwrap();
    assert_eq!(r, ExitPolicy::reject_all());
    assert!(!r.allows_any());
    assert!(!r.allows_port(1) && !r.allows_port(65535));

    let a = ExitPolicy::parse("accept 1-65535").unwrap();
    assert_eq!(a, ExitPolicy::accept_all());
    assert!(a.allows_port(1) && a.allows_port(65535) && !a.allows_port(0));

    let r25 =
        ExitPolicy::parse("reject 25,119,135-139,445,563,1214,4661-4666,6346-6429,6699,6881-6999")
            .unwrap();
    assert!(r25.allows_port(80) && !r25.allows_port(25) && !r25.allows_port(6400));
    assert!(r25.allows_port(6345) && r25.allows_port(7000) && r25.allows_any());

    // Unsorted, overlapping and adjacent items merge.
    let m = ExitPolicy::parse("accept 443,80-90,85-100,101,22").unwrap();
    assert_eq!(m.ranges(), &[(22, 22), (80, 101), (443, 443)]);
    assert_eq!(m.to_string(), "accept 22,80-101,443");
    assert!(m.allows_port(101) && !m.allows_port(102));

    let edge = ExitPolicy::parse("reject 1,65535").unwrap();
    assert!(!edge.allows_port(1) && edge.allows_port(2) && !edge.allows_port(65535));
    assert!(edge.allows_port(65534));

    for bad in [
        "",
        "accept",
        "allow 80",
        "accept 0",
        "accept 65536",
        "accept 90-80",
        "accept 80,",
        "accept -80",
        "accept 80-",
        "accept 8a",
        "accept 80 443",
        "reject 1--2",
        "accept +80",
    ] {
        assert!(
            ExitPolicy::parse(bad).is_err(),
            "{bad:?} should be rejected"
        );
    }
}

/// A minimal well-formed full-flavour document with two relays, to mutate into bad ones.
fn mini() -> String {
    [
        "network-status-version 3",
        "valid-after 2023-06-01 10:00:00",
        "params cc_alg=2 foo=-3",
        "r alpha AAoQ1DAR6kkoo19hBAX5K0QztNw iajsCOue5T2C0+2p88LUBW1oDog 2023-05-31 17:32:23 10.0.0.1 9001 0",
        "s Fast Guard Running Stable Valid",
        "w Bandwidth=100",
        "p reject 1-65535",
        "r beta ABElTMhEQ2myDvERVriZBDgiGlQ Hxgl9Ih+Vz0yxaI1nvmdN0m7ea8 2023-05-31 16:24:27 10.1.0.1 443 80",
        "s Exit Fast Running Valid",
        "w Bandwidth=200 Unmeasured=1",
        "p accept 80,443",
        "directory-footer",
        "bandwidth-weights Wbd=0 Wed=9000 Wee=10000 Weg=9000 Wem=10000 Wgd=500 Wgg=6000 Wgm=6000 Wmd=500 Wme=0 Wmg=4000 Wmm=10000",
        "directory-signature X Y",
        "-----BEGIN SIGNATURE-----",
        "r abc",
        "-----END SIGNATURE-----",
        "",
    ]
    .join("\n")
}

#[test]
fn minimal_document_parses() {
    let c = Consensus::parse(&mini(), "mini").unwrap();
    assert_eq!(c.relays.len(), 2);
    assert_eq!(c.params.get("foo"), Some(&-3));
    assert!(c.relays[1].unmeasured);
    assert_eq!(c.weights.wed, 9000);
    assert_eq!(c.weights.wbe, None);
    // CRLF line ends are accepted too.
    let crlf = mini().replace('\n', "\r\n");
    assert_eq!(Consensus::parse(&crlf, "crlf").unwrap().relays, c.relays);
}

fn expect_err(text: &str, line: Option<usize>, needle: &str) {
    let e = Consensus::parse(text, "doc.txt").expect_err("should fail");
    assert_eq!(e.file, "doc.txt");
    assert_eq!(e.line, line, "{e}");
    assert!(
        e.message.contains(needle),
        "message {:?} lacks {:?}",
        e.message,
        needle
    );
    let shown = e.to_string();
    match line {
        Some(l) => assert!(shown.starts_with(&format!("doc.txt:{l}: ")), "{shown}"),
        None => assert!(shown.starts_with("doc.txt: "), "{shown}"),
    }
}

fn replace_line(doc: &str, lineno: usize, with: &str) -> String {
    doc.lines()
        .enumerate()
        .map(|(i, l)| if i + 1 == lineno { with } else { l })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn malformed_documents_give_located_errors() {
    let d = mini();
    let r_line =
        "r alpha AAoQ1DAR6kkoo19hBAX5K0QztNw iajsCOue5T2C0+2p88LUBW1oDog 2023-05-31 17:32:23";
    expect_err(&replace_line(&d, 4, r_line), Some(4), "fields");
    expect_err(
        &replace_line(
            &d,
            4,
            "r alpha !!notbase64!! x 2023-05-31 17:32:23 10.0.0.1 9001 0",
        ),
        Some(4),
        "identity",
    );
    expect_err(
        &replace_line(
            &d,
            4,
            "r alpha AAoQ1DAR6kkoo19hBAX5K0QztNw x 2023-05-31 17:32:23 10.0.0.300 9001 0",
        ),
        Some(4),
        "IPv4",
    );
    expect_err(
        &replace_line(
            &d,
            8,
            "r beta ABElTMhEQ2myDvERVriZBDgiGlQ x 2023-05-31 16:24:27 10.1.0.1 70000 80",
        ),
        Some(8),
        "OR port",
    );
    expect_err(
        &replace_line(
            &d,
            8,
            "r beta ABElTMhEQ2myDvERVriZBDgiGlQ x 2023-05-31 16:24:27 10.1.0.1 0 80",
        ),
        Some(8),
        "OR port",
    );
    expect_err(
        &replace_line(&d, 6, "w Bandwidth=lots"),
        Some(6),
        "Bandwidth",
    );
    expect_err(
        &replace_line(&d, 6, "w Measured=5"),
        Some(6),
        "no Bandwidth",
    );
    expect_err(&replace_line(&d, 6, "w Bandwidth"), Some(6), "Key=Value");
    expect_err(
        &replace_line(&d, 13, "bandwidth-weights Wgg=6000 Wgd=-5"),
        Some(13),
        "Wgd",
    );
    expect_err(
        &replace_line(&d, 13, "bandwidth-weights Wgg=6k"),
        Some(13),
        "Wgg",
    );
    expect_err(
        &replace_line(&d, 11, "p accept 80-70"),
        Some(11),
        "exit policy",
    );
    expect_err(
        &replace_line(&d, 11, "p permit 80"),
        Some(11),
        "exit policy",
    );
    expect_err(
        &replace_line(&d, 3, "params cc_alg=fast"),
        Some(3),
        "cc_alg",
    );
    expect_err(
        &replace_line(&d, 3, "s Fast Running"),
        Some(3),
        "outside a router entry",
    );
    expect_err(
        &replace_line(&d, 1, "network-status-version 2"),
        Some(1),
        "version 3",
    );
    expect_err(
        &replace_line(&d, 1, "network-status-version 3 vote"),
        Some(1),
        "flavour",
    );
    expect_err(
        &replace_line(&d, 1, "hello"),
        Some(1),
        "network-status-version",
    );
    expect_err(&replace_line(&d, 5, "v Tor 0.4.7.13"), Some(4), "no 's'");
    expect_err(
        &replace_line(&d, 10, "s Exit Running"),
        Some(10),
        "second 's'",
    );

    // Whole-file problems.
    expect_err("", None, "empty");
    expect_err("\n\n  \n", None, "empty");
    let cut: String = d.lines().take(9).collect::<Vec<_>>().join("\n");
    expect_err(&cut, None, "truncated");
    let cut: String = d.lines().take(15).collect::<Vec<_>>().join("\n");
    expect_err(&cut, None, "truncated");
    let cut: String = d.lines().take(2).collect::<Vec<_>>().join("\n");
    expect_err(&cut, None, "truncated");
    // A relay after the footer.
    let mut after = d.clone();
    after.push_str("r late AAoQ1DAR6kkoo19hBAX5K0QztNw x 2023-05-31 17:32:23 10.0.0.1 9001 0\n");
    expect_err(&after, Some(18), "after directory-footer");
}

#[test]
fn load_reports_missing_file() {
    let e = Consensus::load(std::path::Path::new("/nonexistent/consensus")).unwrap_err();
    assert_eq!(e.line, None);
    assert!(e
        .to_string()
        .starts_with("/nonexistent/consensus: does not exist"));
}

/// The parser must turn any prefix of a real document into a result or an error, never a panic;
/// byte-level cuts also exercise half-written lines and split UTF-8 is avoided by cutting on
/// char boundaries.
#[test]
fn random_truncations_never_panic() {
    let text = read(C2023);
    let mut rng = ChaCha12Rng::seed_from_u64(7);
    let mut errors = 0;
    for _ in 0..200 {
        let mut cut = rng.random_range(0..text.len());
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        let result = std::panic::catch_unwind(|| {
            Consensus::parse(&text[..cut], "cut").map(|c| c.relays.len())
        });
        let result = result.expect("parser panicked");
        if result.is_err() {
            errors += 1;
        }
    }
    // Cuts before the footer (almost all of the file) must be reported as errors.
    assert!(
        errors >= 190,
        "only {errors} of 200 truncations were rejected"
    );
}

/// Random byte corruption of a small document: results or errors, never panics.
#[test]
fn random_garbage_never_panics() {
    let base = mini().into_bytes();
    let mut rng = ChaCha12Rng::seed_from_u64(11);
    for _ in 0..2000 {
        let mut b = base.clone();
        for _ in 0..rng.random_range(1..6) {
            let i = rng.random_range(0..b.len());
            b[i] = rng.random_range(0..128u8);
        }
        let s = String::from_utf8_lossy(&b);
        let _ = std::panic::catch_unwind(|| Consensus::parse(&s, "garbage")).expect("panicked");
    }
}
