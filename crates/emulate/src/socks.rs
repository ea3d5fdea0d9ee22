//! The client side of a SOCKS5 handshake with a tor SocksPort.
//!
//! Emulated clients reach their servers through tor's SocksPort, and a failed stream is one of
//! the outcomes the emulator reports: the reply code tor sends says whether the exit refused the
//! connection, the stream timed out, and so on, so errors keep that code and name it with a short
//! label suited to a CSV column.
//!
//! SOCKS username/password authentication (RFC 1929) is supported because tor uses the
//! credentials for stream isolation: streams with different credentials never share a circuit.

use std::io::{self, Read, Write};
use std::net::{SocketAddrV4, TcpStream};

const VERSION: u8 = 5;
const METHOD_NO_AUTH: u8 = 0x00;
const METHOD_USER_PASS: u8 = 0x02;
const METHOD_NONE_ACCEPTABLE: u8 = 0xff;
const USER_PASS_VERSION: u8 = 1;
const CMD_CONNECT: u8 = 1;
const ATYP_IPV4: u8 = 1;
const ATYP_DOMAIN: u8 = 3;
const ATYP_IPV6: u8 = 4;

/// Why a SOCKS5 CONNECT through tor failed.
#[derive(Debug, thiserror::Error)]
pub enum SocksError {
    /// Reading from or writing to the SOCKS connection failed (a timeout included).
    #[error("SOCKS I/O error: {0}")]
    Io(#[from] io::Error),
    /// The proxy closed the connection before the handshake finished.
    #[error("SOCKS proxy closed the connection mid-handshake")]
    Closed,
    /// The CONNECT reply carried a failure code.
    #[error("SOCKS5 reply {code}: {}", reply_meaning(*code))]
    Reply {
        /// The SOCKS5 reply code (RFC 1928 6), which tor sets from the stream's end reason.
        code: u8,
    },
    /// The proxy refused every authentication method offered (reply method 0xff).
    #[error("SOCKS proxy accepted none of the offered authentication methods")]
    NoAcceptableMethod,
    /// The proxy rejected the username and password (RFC 1929).
    #[error("SOCKS username/password rejected (status {status})")]
    AuthFailed {
        /// The non-zero status byte of the proxy's RFC 1929 reply.
        status: u8,
    },
    /// Username or password is empty or longer than the 255 bytes RFC 1929 allows.
    #[error("SOCKS username and password must each be 1 to 255 bytes")]
    BadCredentials,
    /// The proxy sent something that is not SOCKS5.
    #[error("SOCKS protocol error: {0}")]
    Protocol(String),
}

impl SocksError {
    /// A short, stable label for reports.
    pub fn kind(&self) -> &'static str {
        match self {
            SocksError::Io(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock
                ) =>
            {
                "socks-timeout"
            }
            SocksError::Io(_) => "socks-io",
            SocksError::Closed => "socks-closed",
            SocksError::Reply { code } => match code {
                1 => "socks-general",
                2 => "socks-not-allowed",
                3 => "socks-net-unreachable",
                4 => "socks-host-unreachable",
                5 => "socks-refused",
                6 => "socks-ttl-expired",
                7 => "socks-cmd-unsupported",
                8 => "socks-addr-unsupported",
                _ => "socks-unknown-reply",
            },
            SocksError::NoAcceptableMethod => "socks-no-method",
            SocksError::AuthFailed { .. } => "socks-auth-failed",
            SocksError::BadCredentials => "socks-bad-credentials",
            SocksError::Protocol(_) => "socks-protocol",
        }
    }
}

/// What a SOCKS5 reply code means, with tor's use of it where that differs from RFC 1928's
/// wording (tor reports a stream timeout as "TTL expired").
pub fn reply_meaning(code: u8) -> &'static str {
    match code {
        0 => "succeeded",
        1 => "general failure",
        2 => "connection not allowed by ruleset (exit policy)",
        3 => "network unreachable",
        4 => "host unreachable",
        5 => "connection refused",
        6 => "TTL expired (tor: stream timed out)",
        7 => "command not supported",
        8 => "address type not supported",
        _ => "unknown reply code",
    }
}

/// Asks the SOCKS5 proxy on `stream` (no authentication) to connect to `addr`. On success the
/// stream carries the connection to `addr`.
pub fn socks5_connect(stream: &mut TcpStream, addr: SocketAddrV4) -> Result<(), SocksError> {
    socks5_connect_with_auth(stream, addr, None)
}

/// Like [`socks5_connect`], authenticating with `(username, password)` when given; tor accepts
/// any credentials and uses them to isolate streams onto separate circuits.
pub fn socks5_connect_with_auth(
    stream: &mut TcpStream,
    addr: SocketAddrV4,
    auth: Option<(&str, &str)>,
) -> Result<(), SocksError> {
    handshake(stream, addr, auth)
}

/// The handshake over any byte stream, so tests can drive it without sockets if they wish.
fn handshake<S: Read + Write>(
    stream: &mut S,
    addr: SocketAddrV4,
    auth: Option<(&str, &str)>,
) -> Result<(), SocksError> {
    if let Some((user, pass)) = auth {
        if !(1..=255).contains(&user.len()) || !(1..=255).contains(&pass.len()) {
            return Err(SocksError::BadCredentials);
        }
    }
    // Offer only the method we mean to use: with credentials, a proxy choosing no-auth would
    // silently drop the isolation the caller asked for.
    let method = if auth.is_some() {
        METHOD_USER_PASS
    } else {
        METHOD_NO_AUTH
    };
    stream.write_all(&[VERSION, 1, method])?;
    let mut choice = [0u8; 2];
    read_exact(stream, &mut choice)?;
    if choice[0] != VERSION {
        return Err(SocksError::Protocol(format!(
            "method selection has version {}, not 5",
            choice[0]
        )));
    }
    if choice[1] == METHOD_NONE_ACCEPTABLE {
        return Err(SocksError::NoAcceptableMethod);
    }
    if choice[1] != method {
        return Err(SocksError::Protocol(format!(
            "proxy chose method {:#04x}, which was not offered",
            choice[1]
        )));
    }

    if let Some((user, pass)) = auth {
        let mut msg = Vec::with_capacity(3 + user.len() + pass.len());
        msg.push(USER_PASS_VERSION);
        msg.push(user.len() as u8);
        msg.extend_from_slice(user.as_bytes());
        msg.push(pass.len() as u8);
        msg.extend_from_slice(pass.as_bytes());
        stream.write_all(&msg)?;
        let mut status = [0u8; 2];
        read_exact(stream, &mut status)?;
        if status[0] != USER_PASS_VERSION {
            return Err(SocksError::Protocol(format!(
                "username/password reply has version {}, not 1",
                status[0]
            )));
        }
        if status[1] != 0 {
            return Err(SocksError::AuthFailed { status: status[1] });
        }
    }

    let mut req = [0u8; 10];
    req[..4].copy_from_slice(&[VERSION, CMD_CONNECT, 0, ATYP_IPV4]);
    req[4..8].copy_from_slice(&addr.ip().octets());
    req[8..].copy_from_slice(&addr.port().to_be_bytes());
    stream.write_all(&req)?;
    stream.flush()?;

    let mut head = [0u8; 4];
    read_exact(stream, &mut head)?;
    if head[0] != VERSION {
        return Err(SocksError::Protocol(format!(
            "CONNECT reply has version {}, not 5",
            head[0]
        )));
    }
    let code = head[1];
    // Read the bound address too, so that on success the stream is positioned at the first
    // byte from the destination. After a failure tor closes the connection; its reply code
    // matters more than whether the rest of the reply arrived.
    let rest = read_bound_address(stream, head[3]);
    if code != 0 {
        return Err(SocksError::Reply { code });
    }
    rest
}

/// Consumes BND.ADDR and BND.PORT, whose length depends on the address type.
fn read_bound_address<S: Read>(stream: &mut S, atyp: u8) -> Result<(), SocksError> {
    let addr_len = match atyp {
        ATYP_IPV4 => 4,
        ATYP_IPV6 => 16,
        ATYP_DOMAIN => {
            let mut len = [0u8; 1];
            read_exact(stream, &mut len)?;
            usize::from(len[0])
        }
        other => {
            return Err(SocksError::Protocol(format!(
                "CONNECT reply has unknown address type {other}"
            )))
        }
    };
    let mut buf = [0u8; 255 + 2];
    read_exact(stream, &mut buf[..addr_len + 2])
}

/// `read_exact` that reports a proxy hanging up as [`SocksError::Closed`].
fn read_exact<S: Read>(stream: &mut S, buf: &mut [u8]) -> Result<(), SocksError> {
    stream.read_exact(buf).map_err(|e| {
        if e.kind() == io::ErrorKind::UnexpectedEof {
            SocksError::Closed
        } else {
            SocksError::Io(e)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, TcpListener};
    use std::thread;
    use std::time::Duration;

    /// A fake SOCKS proxy that reads `expect` bytes (checking them) and then writes `reply`,
    /// step by step, and finally echoes one byte so tests can check the stream is positioned
    /// right after the reply.
    fn fake_proxy(steps: Vec<(Vec<u8>, Vec<u8>)>, then_close: bool) -> TcpStream {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            for (expect, reply) in steps {
                let mut got = vec![0u8; expect.len()];
                s.read_exact(&mut got).unwrap();
                assert_eq!(got, expect);
                s.write_all(&reply).unwrap();
            }
            if then_close {
                return;
            }
            let mut b = [0u8; 1];
            if s.read_exact(&mut b).is_ok() {
                let _ = s.write_all(&b);
            }
        });
        let s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s
    }

    fn target() -> SocketAddrV4 {
        SocketAddrV4::new(Ipv4Addr::new(10, 1, 2, 3), 8080)
    }

    fn connect_request() -> Vec<u8> {
        vec![5, 1, 0, 1, 10, 1, 2, 3, 0x1f, 0x90]
    }

    fn echo_check(s: &mut TcpStream) {
        s.write_all(b"x").unwrap();
        let mut b = [0u8; 1];
        s.read_exact(&mut b).unwrap();
        assert_eq!(&b, b"x");
    }

    #[test]
    fn connect_without_auth_and_each_bound_address_form() {
        let bound_forms: [Vec<u8>; 3] = [
            vec![1, 127, 0, 0, 1, 0, 80],
            {
                let mut v = vec![3, 9];
                v.extend_from_slice(b"localhost");
                v.extend_from_slice(&[0, 80]);
                v
            },
            {
                let mut v = vec![4];
                v.extend_from_slice(&[0; 16]);
                v.extend_from_slice(&[0, 80]);
                v
            },
        ];
        for bound in bound_forms {
            let mut reply = vec![5, 0, 0];
            reply.extend_from_slice(&bound);
            let mut s = fake_proxy(
                vec![(vec![5, 1, 0], vec![5, 0]), (connect_request(), reply)],
                false,
            );
            socks5_connect(&mut s, target()).unwrap();
            echo_check(&mut s);
        }
    }

    #[test]
    fn connect_with_auth() {
        let mut auth = vec![1, 3];
        auth.extend_from_slice(b"iso");
        auth.extend_from_slice(&[2]);
        auth.extend_from_slice(b"pw");
        let mut s = fake_proxy(
            vec![
                (vec![5, 1, 2], vec![5, 2]),
                (auth, vec![1, 0]),
                (connect_request(), vec![5, 0, 0, 1, 0, 0, 0, 0, 0, 0]),
            ],
            false,
        );
        socks5_connect_with_auth(&mut s, target(), Some(("iso", "pw"))).unwrap();
        echo_check(&mut s);
    }

    #[test]
    fn reply_codes_are_reported() {
        for (code, kind) in [
            (1, "socks-general"),
            (2, "socks-not-allowed"),
            (3, "socks-net-unreachable"),
            (4, "socks-host-unreachable"),
            (5, "socks-refused"),
            (6, "socks-ttl-expired"),
            (7, "socks-cmd-unsupported"),
            (8, "socks-addr-unsupported"),
            (42, "socks-unknown-reply"),
        ] {
            let mut s = fake_proxy(
                vec![
                    (vec![5, 1, 0], vec![5, 0]),
                    (connect_request(), vec![5, code, 0, 1, 0, 0, 0, 0, 0, 0]),
                ],
                true,
            );
            let err = socks5_connect(&mut s, target()).unwrap_err();
            assert!(matches!(err, SocksError::Reply { code: c } if c == code));
            assert_eq!(err.kind(), kind);
        }
        // A failure reply cut short still reports its code.
        let mut s = fake_proxy(
            vec![
                (vec![5, 1, 0], vec![5, 0]),
                (connect_request(), vec![5, 5, 0, 1]),
            ],
            true,
        );
        let err = socks5_connect(&mut s, target()).unwrap_err();
        assert_eq!(err.kind(), "socks-refused");
        assert!(err.to_string().contains("connection refused"), "{err}");
    }

    #[test]
    fn handshake_failures() {
        let mut s = fake_proxy(vec![(vec![5, 1, 0], vec![5, 0xff])], true);
        assert_eq!(
            socks5_connect(&mut s, target()).unwrap_err().kind(),
            "socks-no-method"
        );

        let mut s = fake_proxy(vec![(vec![5, 1, 0], vec![4, 0])], true);
        assert_eq!(
            socks5_connect(&mut s, target()).unwrap_err().kind(),
            "socks-protocol"
        );

        let mut s = fake_proxy(vec![(vec![5, 1, 0], vec![5])], true);
        assert_eq!(
            socks5_connect(&mut s, target()).unwrap_err().kind(),
            "socks-closed"
        );

        let mut s = fake_proxy(
            vec![
                (vec![5, 1, 2], vec![5, 2]),
                (vec![1, 1, b'u', 1, b'p'], vec![1, 1]),
            ],
            true,
        );
        let err = socks5_connect_with_auth(&mut s, target(), Some(("u", "p"))).unwrap_err();
        assert!(matches!(err, SocksError::AuthFailed { status: 1 }));

        let mut s = fake_proxy(
            vec![
                (vec![5, 1, 0], vec![5, 0]),
                (connect_request(), vec![5, 0, 0, 9, 0, 0]),
            ],
            true,
        );
        assert_eq!(
            socks5_connect(&mut s, target()).unwrap_err().kind(),
            "socks-protocol"
        );

        let long = "x".repeat(256);
        let mut s = fake_proxy(vec![], true);
        let err = socks5_connect_with_auth(&mut s, target(), Some((&long, "p"))).unwrap_err();
        assert_eq!(err.kind(), "socks-bad-credentials");
    }

    #[test]
    fn silent_proxy_times_out() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut s = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let _held = listener.accept().unwrap();
        s.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
        assert_eq!(
            socks5_connect(&mut s, target()).unwrap_err().kind(),
            "socks-timeout"
        );
    }
}
