//! Keys and fingerprints of the emulated tors, made before any of them starts, because every
//! torrc names the authorities by their keys and the authorities name the guards and exits.

use std::path::Path;
use std::process::Command;

use crate::netns;
use crate::plan::{Layout, Role, DIR_PORT, OR_PORT};
use crate::torrc::Identity;

/// Authority certificates stay valid this many months: far longer than any run.
const CERT_MONTHS: &str = "12";

/// Makes the keys of every tor that needs an identity (authorities and relays) under
/// `dirs[i]/data`, in parallel, and returns the identities by host index (clients and servers
/// get an empty one).
pub fn make_identities(
    layout: &Layout,
    dirs: &[std::path::PathBuf],
) -> Result<Vec<Identity>, String> {
    std::thread::scope(|s| {
        let handles: Vec<_> = layout
            .nodes
            .iter()
            .enumerate()
            .map(|(i, node)| {
                let dir = &dirs[i];
                s.spawn(move || -> Result<Identity, String> {
                    match node.role {
                        Role::Authority => {
                            let v3ident = authority_certificate(dir, node.address)?;
                            let fingerprint = relay_fingerprint(dir, &node.nickname(i))?;
                            Ok(Identity {
                                fingerprint,
                                v3ident: Some(v3ident),
                            })
                        }
                        Role::Relay { .. } => Ok(Identity {
                            fingerprint: relay_fingerprint(dir, &node.nickname(i))?,
                            v3ident: None,
                        }),
                        _ => Ok(Identity::default()),
                    }
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .map_err(|_| "key generation thread panicked".to_string())?
            })
            .collect()
    })
}

/// Creates an authority identity key, signing key and certificate with `tor-gencert`; returns
/// the identity key's fingerprint (the authority's `v3ident`).
fn authority_certificate(dir: &Path, address: std::net::Ipv4Addr) -> Result<String, String> {
    let keys = dir.join("data").join("keys");
    std::fs::create_dir_all(&keys).map_err(|e| format!("{}: {e}", keys.display()))?;
    // An empty passphrase on stdin: the keys live and die with the run.
    netns::run(
        Command::new("tor-gencert")
            .current_dir(&keys)
            .args(["--create-identity-key", "-m", CERT_MONTHS])
            .args(["-a", &format!("{address}:{DIR_PORT}")])
            .args(["-i", "authority_identity_key"])
            .args(["-s", "authority_signing_key"])
            .args(["-c", "authority_certificate"])
            .args(["--passphrase-fd", "0"]),
        Some(b"\n"),
    )?;
    let cert = std::fs::read_to_string(keys.join("authority_certificate"))
        .map_err(|e| format!("tor-gencert wrote no certificate: {e}"))?;
    cert.lines()
        .find_map(|l| l.strip_prefix("fingerprint "))
        .map(|f| f.trim().to_string())
        .ok_or_else(|| "tor-gencert's certificate has no fingerprint line".into())
}

/// Makes a relay's identity keys with `tor --list-fingerprint` and reads the fingerprint.
fn relay_fingerprint(dir: &Path, nickname: &str) -> Result<String, String> {
    let data = dir.join("data");
    std::fs::create_dir_all(&data).map_err(|e| format!("{}: {e}", data.display()))?;
    netns::run(
        Command::new("tor")
            .arg("--list-fingerprint")
            .args(["--DataDirectory", &data.display().to_string()])
            .args(["--ORPort", &OR_PORT.to_string()])
            .args(["--Nickname", nickname])
            .args(["--SocksPort", "0"])
            .args(["--Log", "err stderr"]),
        None,
    )?;
    let text = std::fs::read_to_string(data.join("fingerprint"))
        .map_err(|e| format!("tor wrote no fingerprint for {nickname}: {e}"))?;
    text.split_whitespace()
        .nth(1)
        .map(str::to_string)
        .ok_or_else(|| format!("unreadable fingerprint file for {nickname}"))
}
