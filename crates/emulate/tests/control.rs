//! The control-port client against a real tor, started with networking disabled so the test
//! needs no Internet and no other relays.

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use onionlab_emulate::control::{ControlConn, Event};

/// The tor binary: Debian's, else the first on PATH.
fn find_tor() -> Option<PathBuf> {
    let debian = Path::new("/usr/sbin/tor");
    if debian.is_file() {
        return Some(debian.to_path_buf());
    }
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join("tor"))
        .find(|p| p.is_file())
}

/// Kills tor and removes its DataDirectory however the test ends.
struct TorGuard {
    child: Child,
    dir: PathBuf,
}

impl Drop for TorGuard {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl TorGuard {
    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("tor.log")).unwrap_or_default()
    }
}

#[test]
fn real_tor_version_and_bw_events() {
    let Some(tor) = find_tor() else {
        assert!(
            std::env::var_os("CI").is_none(),
            "tor is not installed, and CI is set"
        );
        eprintln!("skipping: no tor binary found");
        return;
    };

    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    let dir = std::env::temp_dir().join(format!(
        "onionlab-control-test-{}-{nanos}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    // An empty torrc and defaults file keep /etc/tor/torrc out of the test.
    let torrc = dir.join("torrc");
    std::fs::write(&torrc, "").unwrap();
    let port_file = dir.join("control_port");
    // The guard owns the directory from here on, even if spawning fails.
    let child = Command::new(&tor)
        .arg("-f")
        .arg(&torrc)
        .arg("--defaults-torrc")
        .arg(&torrc)
        .arg("--DataDirectory")
        .arg(&dir)
        .args(["--SocksPort", "0", "--ControlPort", "auto"])
        .arg("--ControlPortWriteToFile")
        .arg(&port_file)
        .args(["--DisableNetwork", "1"])
        .arg("--Log")
        .arg(format!("notice file {}", dir.join("tor.log").display()))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn();
    let child = match child {
        Ok(c) => c,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&dir);
            panic!("starting {}: {e}", tor.display());
        }
    };
    let mut guard = TorGuard { child, dir };

    // ControlPort auto avoids racing other processes for a free port; tor writes the port it
    // chose as "PORT=127.0.0.1:NNNN" once it is listening.
    let deadline = Instant::now() + Duration::from_secs(8);
    let stream = loop {
        if let Some(status) = guard.child.try_wait().unwrap() {
            panic!(
                "tor exited with {status} before opening its ControlPort:\n{}",
                guard.log()
            );
        }
        let addr = std::fs::read_to_string(&port_file)
            .ok()
            .and_then(|s| s.trim().strip_prefix("PORT=").map(str::to_string));
        if let Some(stream) = addr.and_then(|a| TcpStream::connect(a.as_str()).ok()) {
            break stream;
        }
        assert!(
            Instant::now() < deadline,
            "tor did not open its ControlPort in time:\n{}",
            guard.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    };

    let mut conn = ControlConn::new(stream).unwrap();
    let version = conn.getinfo("version").unwrap();
    assert!(version.starts_with("0.4"), "unexpected version {version:?}");

    conn.setevents(&["BW"]).unwrap();
    let deadline = Instant::now() + Duration::from_secs(4);
    let mut bw_events = 0;
    while bw_events < 2 {
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(!left.is_zero(), "only {bw_events} BW events within 4 s");
        if let Some(Event::Bw { .. }) = conn.next_event(Some(left)).unwrap() {
            bw_events += 1;
        }
    }

    // A multi-line value comes back as a data block, and commands still work after events.
    let config = conn.getinfo("config-text").unwrap();
    assert!(config.contains("DisableNetwork 1"), "{config}");
    conn.setevents(&[]).unwrap();
}
