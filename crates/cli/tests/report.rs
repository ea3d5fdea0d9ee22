//! Reports, comparisons and repeated trials from the command line.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn onionlab(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_onionlab"))
        .args(args)
        .output()
        .expect("onionlab runs")
}

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("onionlab-report-{}-{name}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    dir
}

fn tiny(scheduler: &str) -> String {
    format!(
        r#"
name: tiny-{scheduler}
run: {{ seed: 7, stop_time: 3m, bootstrap: 1m }}
network: {{ graph: builtin, builtin: {{ latency: 20ms, bandwidth: 1 Gbit }} }}
tor: {{ scheduler: {scheduler} }}
authorities: 1
relays:
  generate: {{ guard: 3, exit: 2, guard_exit: 1, middle: 4, bandwidth: {{ fixed: 2 MiB/s }} }}
servers: [ {{ name: web, count: 2, bandwidth: 1 Gbit }} ]
clients:
  - {{ name: web, count: 6, workload: {{ web: {{ size: 320 KiB, pause: [1s, 10s] }} }}, bandwidth: 50 Mbit }}
  - {{ name: bulk, count: 2, workload: {{ bulk: {{ size: 5 MiB }} }}, bandwidth: 50 Mbit }}
"#
    )
}

fn ok(out: &Output) {
    assert!(
        out.status.success(),
        "exit {:?}: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Every `src=` and `href=` of the page names a file that exists beside it, and nothing is
/// fetched from the network.
fn check_references(html_path: &Path) {
    let html = fs::read_to_string(html_path).unwrap();
    assert!(
        !html.contains("http://") && !html.contains("https://"),
        "external reference"
    );
    let dir = html_path.parent().unwrap();
    let mut refs = 0;
    for attr in ["src=\"", "href=\""] {
        for part in html.split(attr).skip(1) {
            let target = part.split('"').next().unwrap();
            if target.starts_with('#') || target.starts_with("data:") {
                continue;
            }
            refs += 1;
            assert!(
                dir.join(target).exists(),
                "{} references missing {target}",
                html_path.display()
            );
        }
    }
    assert!(refs > 0 || html.contains("<svg"), "the page shows no plots");
}

/// Renders the page in headless Chromium: no console messages (the page has no scripts, so any
/// message is an error such as a missing file), and a screenshot that is not blank. Required in
/// CI (which installs Chromium); skipped with a notice on machines without it.
fn check_in_browser(html_path: &Path) {
    let browser = ["chromium", "chromium-browser", "google-chrome"]
        .into_iter()
        .find(|b| {
            Command::new(b)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        });
    let Some(browser) = browser else {
        assert!(
            std::env::var("CI").is_err(),
            "CI must have Chromium installed (.ci/run)"
        );
        eprintln!("notice: no Chromium here; the in-browser check of the report is skipped");
        return;
    };
    let shot = html_path.with_file_name("screenshot.png");
    let profile = html_path.with_file_name("chromium-profile");
    let out = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--enable-logging=stderr",
            "--v=0",
            "--window-size=1200,2000",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(format!("--screenshot={}", shot.display()))
        .arg(format!(
            "file://{}",
            html_path.canonicalize().unwrap().display()
        ))
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&out.stderr);
    let console: Vec<&str> = log.lines().filter(|l| l.contains("CONSOLE")).collect();
    assert!(console.is_empty(), "console messages: {console:#?}");
    let decoder = png::Decoder::new(std::io::BufReader::new(fs::File::open(&shot).unwrap()));
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut buf).unwrap();
    let pixels = &buf[..info.buffer_size()];
    let first = &pixels[..3];
    let differing = pixels
        .chunks(info.color_type.samples())
        .filter(|p| &p[..3] != first)
        .count();
    assert!(
        differing > 10_000,
        "the screenshot is (nearly) blank: {differing} pixels differ"
    );
}

#[test]
fn a_run_gets_a_report_that_references_only_existing_files_and_renders() {
    let dir = tmp("single");
    let scenario = dir.join("tiny.yaml");
    fs::write(&scenario, tiny("kist")).unwrap();
    let run = dir.join("run");
    ok(&onionlab(&[
        "run",
        scenario.to_str().unwrap(),
        "-o",
        run.to_str().unwrap(),
        "--quiet",
    ]));
    let html = run.join("report.html");
    assert!(html.exists(), "run writes a report by default");
    check_references(&html);
    // `report` regenerates it.
    fs::remove_file(&html).unwrap();
    ok(&onionlab(&["report", run.to_str().unwrap()]));
    check_references(&html);
    check_in_browser(&html);
    let svgs = fs::read_dir(&run)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "svg")
        })
        .count();
    let pngs = fs::read_dir(&run)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "png")
        })
        .count();
    assert!(svgs >= 6 && pngs >= 6, "{svgs} SVG and {pngs} PNG plots");
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn comparing_a_run_with_itself_shows_no_change() {
    let dir = tmp("self");
    let scenario = dir.join("tiny.yaml");
    fs::write(&scenario, tiny("kist")).unwrap();
    let run = dir.join("run");
    ok(&onionlab(&[
        "run",
        scenario.to_str().unwrap(),
        "-o",
        run.to_str().unwrap(),
        "--quiet",
        "--no-report",
    ]));
    assert!(!run.join("report.html").exists(), "--no-report");
    let out_dir = dir.join("cmp");
    let r = run.to_str().unwrap();
    let out = onionlab(&[
        "compare",
        r,
        r,
        "-o",
        out_dir.to_str().unwrap(),
        "--label",
        "a",
        "--label",
        "b",
    ]);
    ok(&out);
    let table = String::from_utf8_lossy(&out.stdout);
    // Every relative change is zero; none is non-zero.
    assert!(
        table.contains("+0.0%") || table.contains(" 0.0%"),
        "{table}"
    );
    for line in table.lines() {
        for word in line
            .split_whitespace()
            .filter(|w| w.ends_with('%') && w.starts_with(['+', '-']))
        {
            let v: f64 = word.trim_end_matches('%').parse().unwrap();
            assert_eq!(v, 0.0, "{line}");
        }
    }
    check_references(&out_dir.join("compare.html"));
    // Runs must be told apart: two equal labels, given or derived, are bad input.
    for labels in [&["--label", "a", "--label", "a"][..], &[]] {
        let mut args = vec!["compare", r, r, "-o", out_dir.to_str().unwrap()];
        args.extend_from_slice(labels);
        let out = onionlab(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{labels:?}: {stderr}");
        assert!(stderr.contains("both labelled"), "{stderr}");
    }
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn two_designs_three_trials_each_give_one_page_with_confidence_bands() {
    let dir = tmp("trials");
    let mut trial_dirs = Vec::new();
    for scheduler in ["kist", "vanilla"] {
        let scenario = dir.join(format!("{scheduler}.yaml"));
        fs::write(&scenario, tiny(scheduler)).unwrap();
        let out = dir.join(scheduler);
        ok(&onionlab(&[
            "run",
            scenario.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
            "--trials",
            "3",
            "--stop-time",
            "2m",
            "--quiet",
        ]));
        for k in 1..=3 {
            assert!(out.join(format!("trial-{k}/downloads.csv")).exists());
        }
        assert!(out.join("trials.json").exists());
        assert!(out.join("report.html").exists());
        trial_dirs.push(out);
    }
    // Trials have different seeds, so different results.
    let a = fs::read(trial_dirs[0].join("trial-1/downloads.csv")).unwrap();
    let b = fs::read(trial_dirs[0].join("trial-2/downloads.csv")).unwrap();
    assert_ne!(a, b);
    let cmp = dir.join("cmp");
    let out = onionlab(&[
        "compare",
        trial_dirs[0].to_str().unwrap(),
        trial_dirs[1].to_str().unwrap(),
        "-o",
        cmp.to_str().unwrap(),
    ]);
    ok(&out);
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.contains("tiny-kist") && table.contains("tiny-vanilla"),
        "{table}"
    );
    assert!(
        table.contains("CI") || table.contains("±"),
        "no confidence intervals: {table}"
    );
    check_references(&cmp.join("compare.html"));
    check_in_browser(&cmp.join("compare.html"));
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn broken_report_inputs_give_clear_errors() {
    let dir = tmp("broken");
    let not_a_run = dir.join("empty");
    fs::create_dir_all(&not_a_run).unwrap();
    for args in [
        vec![
            "report".to_string(),
            dir.join("missing").display().to_string(),
        ],
        vec!["report".to_string(), not_a_run.display().to_string()],
        vec![
            "compare".to_string(),
            not_a_run.display().to_string(),
            dir.join("missing").display().to_string(),
        ],
        vec!["compare".to_string(), not_a_run.display().to_string()],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_onionlab"))
            .args(&args)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert!(stderr.contains("error:"), "{args:?}: {stderr}");
    }
    let _ = fs::remove_dir_all(&dir);
}
