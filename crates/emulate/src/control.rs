//! A small blocking client for tor's control protocol.
//!
//! The emulator talks to every tor it starts through its ControlPort: to learn when a relay has
//! bootstrapped, to read the consensus the directory authorities produced, and to watch
//! circuits, streams and bandwidth while the scenario runs. The caller opens the TCP stream
//! (often from inside the tor's network namespace) and hands it over; the stream keeps working
//! from any thread afterwards.
//!
//! Tor may send an asynchronous event (code 650) at any moment, including between a command and
//! its reply, so every reply read is checked for that and events are queued for
//! [`ControlConn::next_event`] instead of being mistaken for the answer to a command.

use std::collections::VecDeque;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::Path;
use std::time::Duration;

/// How long a command waits for tor's reply by default. Tor answers control commands from its
/// main loop, so a reply that takes this long means tor is wedged or gone.
pub const DEFAULT_REPLY_TIMEOUT: Duration = Duration::from_secs(30);

/// The longest reply line accepted, so a misbehaving peer cannot make us buffer without bound.
/// Real lines are far shorter; long values come as data blocks of many short lines.
const MAX_LINE: u64 = 1 << 20;

/// The status code of asynchronous event replies.
const EVENT_CODE: u16 = 650;

/// Why a control-port operation failed.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// Reading from or writing to the control connection failed (a timeout included).
    #[error("control connection I/O error: {0}")]
    Io(#[from] io::Error),
    /// Tor answered with an error code or with something this client cannot read; the text is
    /// tor's reply (or the offending line) so the cause shows up in logs.
    #[error("control protocol error: {0}")]
    Protocol(String),
    /// Tor closed the connection before a complete reply.
    #[error("tor closed the control connection")]
    Closed,
}

/// An asynchronous event, parsed where the emulator needs the fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// Bytes tor read and wrote in the last second (tor emits one per second).
    Bw {
        /// Bytes read in that second.
        read: u64,
        /// Bytes written in that second.
        written: u64,
    },
    /// A circuit changed status.
    Circ(CircEvent),
    /// An application stream changed status.
    Stream(StreamEvent),
    /// Any other event, or one whose fields did not parse: the full event text, with the lines
    /// of multi-line events joined by `\n`.
    Other(String),
}

/// A `CIRC` event: a circuit changed status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CircEvent {
    /// Tor's circuit id, which later events of the same circuit repeat.
    pub id: u64,
    /// LAUNCHED, BUILT, GUARD_WAIT, EXTENDED, FAILED or CLOSED.
    pub status: String,
    /// The hops built so far (empty for a circuit that was only just launched).
    pub path: Vec<PathHop>,
    /// What tor built the circuit for (`GENERAL`, `HS_VANGUARDS`, ...), if the event says.
    pub purpose: Option<String>,
    /// Why a circuit FAILED or CLOSED (e.g. `TIMEOUT`, `DESTROYED`, `FINISHED`).
    pub reason: Option<String>,
    /// When tor created the circuit, as tor writes it (`2024-05-01T12:00:00.123456`).
    pub time_created: Option<String>,
}

/// One relay in a circuit path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathHop {
    /// The relay's identity fingerprint: 40 uppercase hex digits.
    pub fingerprint: String,
    /// The relay's nickname, when tor gives one (`$FINGERPRINT~nickname` or `=nickname`).
    pub nickname: Option<String>,
}

/// A `STREAM` event: an application stream changed status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamEvent {
    /// Tor's stream id, which later events of the same stream repeat.
    pub id: u64,
    /// NEW, SENTCONNECT, SUCCEEDED, FAILED, CLOSED, DETACHED, ...
    pub status: String,
    /// The circuit the stream is attached to; 0 while it is not attached to any.
    pub circuit: u64,
    /// `address:port` the client asked for.
    pub target: String,
    /// Why a stream FAILED or CLOSED (e.g. `DONE`, `TIMEOUT`, `EXITPOLICY`).
    pub reason: Option<String>,
    /// The client's end of the SOCKS connection, which lets the emulator tie a stream to the
    /// SOCKS connection that made it.
    pub source_addr: Option<SocketAddr>,
}

/// One router status entry from `GETINFO ns/all`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouterStatus {
    /// The relay's nickname, from the `r` line.
    pub nickname: String,
    /// Identity fingerprint: 40 uppercase hex digits.
    pub fingerprint: String,
    /// The relay's IPv4 address, from the `r` line.
    pub address: Ipv4Addr,
    /// The relay's ORPort, where other relays and clients open channels to it.
    pub or_port: u16,
    /// The `s` line: Fast, Guard, Exit, Running, Valid, ...
    pub flags: Vec<String>,
    /// Consensus weight from the `w` line (in kilobytes per second, as the consensus has it).
    pub bandwidth: Option<u64>,
    /// Whether bandwidth authorities measured the weight; without them (as in a small test
    /// network) tor marks every weight `Unmeasured=1` and caps it.
    pub measured: bool,
}

/// One line of a reply, with the data block that follows a `+` line.
#[derive(Debug)]
struct ReplyLine {
    code: u16,
    sep: char,
    text: String,
    data: Option<Vec<String>>,
}

/// A complete reply: mid lines and the end line.
#[derive(Debug)]
struct Reply {
    lines: Vec<ReplyLine>,
}

impl Reply {
    /// The status of the reply is the code of its end line.
    fn code(&self) -> u16 {
        self.lines.last().map_or(0, |l| l.code)
    }

    fn is_success(&self) -> bool {
        (200..300).contains(&self.code())
    }

    /// The reply as tor sent it (data blocks included), for error messages and
    /// [`Event::Other`].
    fn to_text(&self) -> String {
        let mut out = String::new();
        for line in &self.lines {
            if !out.is_empty() {
                out.push('\n');
            }
            out.push_str(&line.text);
            if let Some(data) = &line.data {
                for d in data {
                    out.push('\n');
                    out.push_str(d);
                }
            }
        }
        out
    }

    fn error(&self) -> ControlError {
        ControlError::Protocol(format!("{} {}", self.code(), self.to_text()))
    }
}

/// A connection to one tor's ControlPort.
pub struct ControlConn {
    writer: TcpStream,
    reader: BufReader<TcpStream>,
    events: VecDeque<Event>,
    reply_timeout: Option<Duration>,
    /// Set when a read failed in the middle of a reply: the connection is then out of step with
    /// tor and every later command would read the wrong reply.
    broken: bool,
}

impl ControlConn {
    /// Takes an open connection to a ControlPort that needs no authentication (our torrcs set
    /// none) and authenticates.
    pub fn new(stream: TcpStream) -> Result<Self, ControlError> {
        let mut conn = Self::unauthenticated(stream)?;
        conn.expect_ok("AUTHENTICATE")?;
        Ok(conn)
    }

    /// Takes an open connection to a ControlPort with `CookieAuthentication 1` and
    /// authenticates with the cookie tor wrote to `cookie_path`.
    pub fn with_cookie(stream: TcpStream, cookie_path: &Path) -> Result<Self, ControlError> {
        let cookie = std::fs::read(cookie_path)?;
        let mut conn = Self::unauthenticated(stream)?;
        conn.authenticate_cookie(&cookie)?;
        Ok(conn)
    }

    fn unauthenticated(stream: TcpStream) -> Result<Self, ControlError> {
        stream.set_read_timeout(Some(DEFAULT_REPLY_TIMEOUT))?;
        let reader = BufReader::new(stream.try_clone()?);
        Ok(Self {
            writer: stream,
            reader,
            events: VecDeque::new(),
            reply_timeout: Some(DEFAULT_REPLY_TIMEOUT),
            broken: false,
        })
    }

    fn authenticate_cookie(&mut self, cookie: &[u8]) -> Result<(), ControlError> {
        let hex: String = cookie.iter().map(|b| format!("{b:02X}")).collect();
        self.expect_ok(&format!("AUTHENTICATE {hex}"))
    }

    /// How long a command waits for its reply; `None` waits forever.
    pub fn set_reply_timeout(&mut self, timeout: Option<Duration>) -> Result<(), ControlError> {
        if timeout == Some(Duration::ZERO) {
            return Err(ControlError::Io(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a zero reply timeout would fail every command",
            )));
        }
        self.writer.set_read_timeout(timeout)?;
        self.reply_timeout = timeout;
        Ok(())
    }

    /// `GETINFO key`: the value, whether tor sent it on one line or as a data block (then the
    /// lines are joined with `\n`, without a trailing newline).
    pub fn getinfo(&mut self, key: &str) -> Result<String, ControlError> {
        let reply = self.request(&format!("GETINFO {key}"))?;
        if !reply.is_success() {
            return Err(reply.error());
        }
        let prefix = format!("{key}=");
        for line in &reply.lines {
            if let Some(value) = line.text.strip_prefix(&prefix) {
                return Ok(match &line.data {
                    Some(data) => data.join("\n"),
                    None => value.to_string(),
                });
            }
        }
        Err(ControlError::Protocol(format!(
            "GETINFO reply has no value for {key}: {}",
            reply.to_text()
        )))
    }

    /// `SETEVENTS`: replaces the set of events tor sends (an empty list turns them all off).
    pub fn setevents(&mut self, events: &[&str]) -> Result<(), ControlError> {
        let mut line = String::from("SETEVENTS");
        for e in events {
            line.push(' ');
            line.push_str(e);
        }
        self.expect_ok(&line)
    }

    /// `SIGNAL`, e.g. `NEWNYM`, `HUP`, `SHUTDOWN`, `HALT`.
    pub fn signal(&mut self, signal: &str) -> Result<(), ControlError> {
        self.expect_ok(&format!("SIGNAL {signal}"))
    }

    /// Any other command, as one line without the line ending. Returns the text of each reply
    /// line; a line that introduced a data block is followed by the block's lines, joined to it
    /// with `\n` in the same element. A reply that is not 2xx is an error.
    pub fn command(&mut self, line: &str) -> Result<Vec<String>, ControlError> {
        let reply = self.request(line)?;
        if !reply.is_success() {
            return Err(reply.error());
        }
        Ok(reply
            .lines
            .iter()
            .map(|l| match &l.data {
                Some(data) => {
                    let mut s = l.text.clone();
                    for d in data {
                        s.push('\n');
                        s.push_str(d);
                    }
                    s
                }
                None => l.text.clone(),
            })
            .collect())
    }

    /// The next asynchronous event: one queued while a command waited for its reply, or one
    /// read from tor. `timeout` bounds only the wait for an event to begin (`None` waits
    /// forever); `Ok(None)` means none arrived in time.
    pub fn next_event(&mut self, timeout: Option<Duration>) -> Result<Option<Event>, ControlError> {
        if let Some(ev) = self.events.pop_front() {
            return Ok(Some(ev));
        }
        self.check_usable()?;
        if !self.wait_readable(timeout)? {
            return Ok(None);
        }
        let reply = self.read_reply()?;
        if reply.code() == EVENT_CODE {
            return Ok(Some(event_from_reply(&reply)));
        }
        // A reply to no command: tor does not send these, so the connection is confused.
        self.broken = true;
        Err(ControlError::Protocol(format!(
            "unsolicited reply: {} {}",
            reply.code(),
            reply.to_text()
        )))
    }

    fn expect_ok(&mut self, line: &str) -> Result<(), ControlError> {
        let reply = self.request(line)?;
        if reply.is_success() {
            Ok(())
        } else {
            Err(reply.error())
        }
    }

    /// Sends one command and returns its reply, queueing events that arrive first.
    fn request(&mut self, line: &str) -> Result<Reply, ControlError> {
        if line.contains(['\r', '\n']) {
            return Err(ControlError::Protocol(format!(
                "refusing to send a command with a line break: {line:?}"
            )));
        }
        self.check_usable()?;
        let mut buf = Vec::with_capacity(line.len() + 2);
        buf.extend_from_slice(line.as_bytes());
        buf.extend_from_slice(b"\r\n");
        if let Err(e) = self
            .writer
            .write_all(&buf)
            .and_then(|()| self.writer.flush())
        {
            // A partial write leaves tor with half a command; nothing after it can be trusted.
            self.broken = true;
            return Err(e.into());
        }
        loop {
            let reply = self.read_reply()?;
            if reply.code() == EVENT_CODE {
                let ev = event_from_reply(&reply);
                self.events.push_back(ev);
                continue;
            }
            return Ok(reply);
        }
    }

    fn check_usable(&self) -> Result<(), ControlError> {
        if self.broken {
            Err(ControlError::Protocol(
                "control connection is out of step with tor after an earlier error".into(),
            ))
        } else {
            Ok(())
        }
    }

    /// Waits up to `timeout` for the first byte of a reply without consuming anything, so a
    /// timeout never splits a reply.
    fn wait_readable(&mut self, timeout: Option<Duration>) -> Result<bool, ControlError> {
        if !self.reader.buffer().is_empty() {
            return Ok(true);
        }
        // The socket refuses a zero timeout; a millisecond is close enough to a poll.
        let t = timeout.map(|t| t.max(Duration::from_millis(1)));
        self.writer.set_read_timeout(t)?;
        let result = loop {
            match self.reader.fill_buf() {
                Ok([]) => break Err(ControlError::Closed),
                Ok(_) => break Ok(true),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    break Ok(false)
                }
                Err(e) => break Err(e.into()),
            }
        };
        self.writer.set_read_timeout(self.reply_timeout)?;
        result
    }

    /// Reads one complete reply. Any failure marks the connection unusable, since the rest of
    /// the reply would otherwise be read as the answer to the next command.
    fn read_reply(&mut self) -> Result<Reply, ControlError> {
        let result = self.read_reply_inner();
        if result.is_err() {
            self.broken = true;
        }
        result
    }

    fn read_reply_inner(&mut self) -> Result<Reply, ControlError> {
        let mut lines = Vec::new();
        loop {
            let raw = self.read_line()?;
            let mut line = parse_reply_line(&raw)?;
            // Tor writes each reply whole, so a different code means the reply was cut off.
            if let Some(first) = lines.first().map(|l: &ReplyLine| l.code) {
                if first != line.code {
                    return Err(ControlError::Protocol(format!(
                        "reply changed status code from {first} to {} mid-reply: {raw:?}",
                        line.code
                    )));
                }
            }
            match line.sep {
                '+' => {
                    line.data = Some(self.read_data_block()?);
                    lines.push(line);
                }
                '-' => lines.push(line),
                _ => {
                    lines.push(line);
                    return Ok(Reply { lines });
                }
            }
        }
    }

    /// The lines of a data block up to the terminating `.`, with dot-stuffing undone.
    fn read_data_block(&mut self) -> Result<Vec<String>, ControlError> {
        let mut data = Vec::new();
        loop {
            let line = self.read_line()?;
            if line == "." {
                return Ok(data);
            }
            match line.strip_prefix('.') {
                Some(rest) => data.push(rest.to_string()),
                None => data.push(line),
            }
        }
    }

    /// One line without its CRLF (a bare LF is accepted too).
    fn read_line(&mut self) -> Result<String, ControlError> {
        let mut buf = Vec::new();
        let n = (&mut self.reader)
            .take(MAX_LINE)
            .read_until(b'\n', &mut buf)?;
        if n == 0 {
            return Err(ControlError::Closed);
        }
        if buf.last() != Some(&b'\n') {
            if n as u64 >= MAX_LINE {
                return Err(ControlError::Protocol(format!(
                    "reply line longer than {MAX_LINE} bytes"
                )));
            }
            // EOF in the middle of a line.
            return Err(ControlError::Closed);
        }
        buf.pop();
        if buf.last() == Some(&b'\r') {
            buf.pop();
        }
        Ok(String::from_utf8_lossy(&buf).into_owned())
    }
}

/// Splits `250-text` into code, separator and text.
fn parse_reply_line(raw: &str) -> Result<ReplyLine, ControlError> {
    let bad = || ControlError::Protocol(format!("malformed reply line: {raw:?}"));
    let b = raw.as_bytes();
    if b.len() < 4 || !b[..3].iter().all(u8::is_ascii_digit) {
        return Err(bad());
    }
    let sep = match b[3] {
        b'-' => '-',
        b'+' => '+',
        b' ' => ' ',
        _ => return Err(bad()),
    };
    let code = raw[..3].parse().map_err(|_| bad())?;
    Ok(ReplyLine {
        code,
        sep,
        text: raw[4..].to_string(),
        data: None,
    })
}

fn event_from_reply(reply: &Reply) -> Event {
    match reply.lines.as_slice() {
        [only] if only.data.is_none() => Event::parse(&only.text),
        _ => Event::Other(reply.to_text()),
    }
}

impl Event {
    /// Parses the text of a single-line event (what follows `650 `). Events this client does
    /// not model, and malformed ones, become [`Event::Other`] rather than errors, since one odd
    /// event must not end the watch over a tor.
    pub fn parse(text: &str) -> Event {
        let tokens = tokenize(text);
        let parsed = match tokens.first().map(String::as_str) {
            Some("BW") => parse_bw(&tokens),
            Some("CIRC") => parse_circ(&tokens).map(Event::Circ),
            Some("STREAM") => parse_stream(&tokens).map(Event::Stream),
            _ => None,
        };
        parsed.unwrap_or_else(|| Event::Other(text.to_string()))
    }
}

fn parse_bw(tokens: &[String]) -> Option<Event> {
    Some(Event::Bw {
        read: tokens.get(1)?.parse().ok()?,
        written: tokens.get(2)?.parse().ok()?,
    })
}

fn parse_circ(tokens: &[String]) -> Option<CircEvent> {
    let id = tokens.get(1)?.parse().ok()?;
    let status = tokens.get(2)?.clone();
    let mut rest = &tokens[3..];
    let mut path = Vec::new();
    // The path is the only positional argument left; keyword arguments are KEY=value. Path
    // hops may also contain '=' ($FP=nick), so look at the leading '$' first.
    if let Some(first) = rest.first() {
        if first.starts_with('$') || !first.contains('=') {
            for hop in first.split(',') {
                path.push(parse_path_hop(hop)?);
            }
            rest = &rest[1..];
        }
    }
    Some(CircEvent {
        id,
        status,
        path,
        purpose: keyword(rest, "PURPOSE"),
        reason: keyword(rest, "REASON"),
        time_created: keyword(rest, "TIME_CREATED"),
    })
}

/// `$FP~nick`, `$FP=nick` or `$FP`.
fn parse_path_hop(hop: &str) -> Option<PathHop> {
    let hop = hop.strip_prefix('$')?;
    let (fp, nick) = match hop.find(['~', '=']) {
        Some(i) => (&hop[..i], Some(&hop[i + 1..])),
        None => (hop, None),
    };
    if fp.len() != 40 || !fp.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    Some(PathHop {
        fingerprint: fp.to_ascii_uppercase(),
        nickname: nick.filter(|n| !n.is_empty()).map(str::to_string),
    })
}

fn parse_stream(tokens: &[String]) -> Option<StreamEvent> {
    let rest = tokens.get(5..).unwrap_or(&[]);
    Some(StreamEvent {
        id: tokens.get(1)?.parse().ok()?,
        status: tokens.get(2)?.clone(),
        circuit: tokens.get(3)?.parse().ok()?,
        target: tokens.get(4)?.clone(),
        reason: keyword(rest, "REASON"),
        // Tor writes "(Tor_internal):0" for streams it made itself; that is no address.
        source_addr: keyword(rest, "SOURCE_ADDR").and_then(|a| a.parse().ok()),
    })
}

/// The value of `KEY=value` among keyword arguments.
fn keyword(tokens: &[String], key: &str) -> Option<String> {
    tokens.iter().find_map(|t| {
        let (k, v) = t.split_once('=')?;
        (k == key).then(|| v.to_string())
    })
}

/// Splits event arguments on spaces, decoding quoted strings in place: `KEY="a \"b\""` becomes
/// the token `KEY=a "b"`.
fn tokenize(text: &str) -> Vec<String> {
    let mut tokens = Vec::new();
    let mut chars = text.chars().peekable();
    loop {
        while chars.next_if(|&c| c == ' ').is_some() {}
        if chars.peek().is_none() {
            return tokens;
        }
        let mut token = String::new();
        while let Some(c) = chars.next_if(|&c| c != ' ') {
            if c != '"' {
                token.push(c);
                continue;
            }
            // A quoted string; an unterminated one runs to the end of the line.
            while let Some(q) = chars.next() {
                match q {
                    '"' => break,
                    '\\' => match chars.next() {
                        Some('n') => token.push('\n'),
                        Some('r') => token.push('\r'),
                        Some('t') => token.push('\t'),
                        Some(other) => token.push(other),
                        None => {}
                    },
                    _ => token.push(q),
                }
            }
        }
        tokens.push(token);
    }
}

/// Parses the router status entries of `GETINFO ns/all` (or `ns/id/...`). Entries that do not
/// parse are skipped rather than failing the whole document.
pub fn parse_network_status(text: &str) -> Vec<RouterStatus> {
    let mut out = Vec::new();
    // The entry being filled in; None while skipping the lines of an entry whose r line was
    // malformed.
    let mut current: Option<RouterStatus> = None;
    for line in text.lines() {
        let line = line.trim_end_matches('\r');
        let mut words = line.split_ascii_whitespace();
        match words.next() {
            Some("r") => {
                out.extend(current.take());
                let fields: Vec<&str> = words.collect();
                current = parse_r_line(&fields);
            }
            Some("s") => {
                if let Some(rs) = current.as_mut() {
                    rs.flags = words.map(str::to_string).collect();
                }
            }
            Some("w") => {
                if let Some(rs) = current.as_mut() {
                    let mut unmeasured = false;
                    for kv in words {
                        match kv.split_once('=') {
                            Some(("Bandwidth", v)) => rs.bandwidth = v.parse().ok(),
                            Some(("Unmeasured", v)) => unmeasured = v == "1",
                            _ => {}
                        }
                    }
                    rs.measured = rs.bandwidth.is_some() && !unmeasured;
                }
            }
            _ => {}
        }
    }
    out.extend(current);
    out
}

/// `r nickname identity [digest] date time IP ORPort DirPort`. The descriptor digest is absent
/// in microdescriptor-flavoured entries, so the fields are taken from both ends.
fn parse_r_line(fields: &[&str]) -> Option<RouterStatus> {
    if !(fields.len() == 7 || fields.len() == 8) {
        return None;
    }
    let n = fields.len();
    let identity = onionlab_netdir::decode_base64(fields[1])?;
    if identity.len() != 20 {
        return None;
    }
    Some(RouterStatus {
        nickname: fields[0].to_string(),
        fingerprint: identity.iter().map(|b| format!("{b:02X}")).collect(),
        address: fields[n - 3].parse().ok()?,
        or_port: fields[n - 2].parse().ok()?,
        flags: Vec::new(),
        bandwidth: None,
        measured: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;
    use std::thread;

    /// A fake ControlPort: for each expected command, reads it, checks it and writes the
    /// scripted reply bytes. Extra bytes after the script (events) are written at the end.
    fn fake_tor(script: Vec<(&'static str, &'static str)>, trailer: &'static str) -> TcpStream {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        thread::spawn(move || {
            let (stream, _) = listener.accept().unwrap();
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut writer = stream;
            for (expect, reply) in script {
                let mut line = String::new();
                reader.read_line(&mut line).unwrap();
                assert_eq!(line, format!("{expect}\r\n"));
                writer.write_all(reply.as_bytes()).unwrap();
            }
            writer.write_all(trailer.as_bytes()).unwrap();
            // Keep the connection open until the client is done.
            let mut rest = Vec::new();
            let _ = reader.read_to_end(&mut rest);
        });
        TcpStream::connect(addr).unwrap()
    }

    #[test]
    fn getinfo_single_line_with_interleaved_events() {
        let stream = fake_tor(
            vec![
                ("AUTHENTICATE", "250 OK\r\n"),
                (
                    "GETINFO version",
                    "650 BW 10 20\r\n650 STREAM 7 NEW 0 10.0.0.1:80 SOURCE_ADDR=127.0.0.1:5000\r\n\
                     250-version=0.4.9.11\r\n250 OK\r\n",
                ),
            ],
            "650 BW 30 40\r\n",
        );
        let mut c = ControlConn::new(stream).unwrap();
        assert_eq!(c.getinfo("version").unwrap(), "0.4.9.11");
        let t = Some(Duration::from_secs(5));
        assert_eq!(
            c.next_event(t).unwrap(),
            Some(Event::Bw {
                read: 10,
                written: 20
            })
        );
        match c.next_event(t).unwrap() {
            Some(Event::Stream(s)) => {
                assert_eq!(s.id, 7);
                assert_eq!(s.status, "NEW");
                assert_eq!(s.circuit, 0);
                assert_eq!(s.target, "10.0.0.1:80");
                assert_eq!(s.source_addr, Some("127.0.0.1:5000".parse().unwrap()));
            }
            other => panic!("expected a stream event, got {other:?}"),
        }
        assert_eq!(
            c.next_event(t).unwrap(),
            Some(Event::Bw {
                read: 30,
                written: 40
            })
        );
        assert_eq!(c.next_event(Some(Duration::from_millis(50))).unwrap(), None);
    }

    #[test]
    fn getinfo_data_block() {
        let stream = fake_tor(
            vec![
                ("AUTHENTICATE", "250 OK\r\n"),
                (
                    "GETINFO ns/all",
                    "250+ns/all=\r\nr a b\r\n..dotted\r\ns Fast\r\n.\r\n650 BW 1 2\r\n250 OK\r\n",
                ),
            ],
            "",
        );
        // An event between the data block and the end line would be a protocol violation by
        // tor; here it ends the reply early, which must be reported rather than mis-parsed.
        let mut c = ControlConn::new(stream).unwrap();
        assert!(matches!(
            c.getinfo("ns/all"),
            Err(ControlError::Protocol(_))
        ));
    }

    #[test]
    fn getinfo_data_block_well_formed() {
        let stream = fake_tor(
            vec![
                ("AUTHENTICATE", "250 OK\r\n"),
                (
                    "GETINFO ns/all",
                    "650 CIRC 1 LAUNCHED PURPOSE=GENERAL\r\n\
                     250+ns/all=\r\nr a b\r\n..dotted\r\ns Fast\r\n.\r\n250 OK\r\n",
                ),
                ("SETEVENTS BW CIRC", "250 OK\r\n"),
                ("SIGNAL NEWNYM", "250 OK\r\n"),
                ("GETINFO nope", "552 Unrecognized key \"nope\"\r\n"),
                (
                    "GETCONF SocksPort ORPort",
                    "250-SocksPort=0\r\n250 ORPort=9001\r\n",
                ),
            ],
            "650-NS\r\n650 OK\r\n",
        );
        let mut c = ControlConn::new(stream).unwrap();
        assert_eq!(c.getinfo("ns/all").unwrap(), "r a b\n.dotted\ns Fast");
        c.setevents(&["BW", "CIRC"]).unwrap();
        c.signal("NEWNYM").unwrap();
        match c.getinfo("nope") {
            Err(ControlError::Protocol(msg)) => assert!(msg.contains("552"), "{msg}"),
            other => panic!("expected an error, got {other:?}"),
        }
        assert_eq!(
            c.command("GETCONF SocksPort ORPort").unwrap(),
            vec!["SocksPort=0", "ORPort=9001"]
        );
        let t = Some(Duration::from_secs(5));
        match c.next_event(t).unwrap() {
            Some(Event::Circ(ev)) => {
                assert_eq!(ev.id, 1);
                assert_eq!(ev.status, "LAUNCHED");
                assert!(ev.path.is_empty());
                assert_eq!(ev.purpose.as_deref(), Some("GENERAL"));
            }
            other => panic!("expected a circuit event, got {other:?}"),
        }
        assert_eq!(
            c.next_event(t).unwrap(),
            Some(Event::Other("NS\nOK".into()))
        );
    }

    #[test]
    fn failed_authentication_and_closed_connection() {
        let stream = fake_tor(
            vec![(
                "AUTHENTICATE",
                "515 Authentication failed: Wrong length on authentication cookie.\r\n",
            )],
            "",
        );
        match ControlConn::new(stream) {
            Err(ControlError::Protocol(msg)) => assert!(msg.starts_with("515"), "{msg}"),
            Err(e) => panic!("unexpected error {e}"),
            Ok(_) => panic!("authentication should fail"),
        }

        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let server = thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut buf = [0u8; 64];
            let _ = s.read(&mut buf);
            s.write_all(b"250 OK\r\n650 BW 1").unwrap();
        });
        let mut c = ControlConn::new(TcpStream::connect(addr).unwrap()).unwrap();
        server.join().unwrap();
        assert!(matches!(
            c.next_event(Some(Duration::from_secs(5))),
            Err(ControlError::Closed)
        ));
        // The connection is now unusable, and says so instead of hanging.
        assert!(c.getinfo("version").is_err());
    }

    #[test]
    fn malformed_reply_is_an_error() {
        let stream = fake_tor(vec![("AUTHENTICATE", "hello\r\n")], "");
        assert!(matches!(
            ControlConn::new(stream),
            Err(ControlError::Protocol(_))
        ));
    }

    #[test]
    fn refuses_command_injection() {
        let stream = fake_tor(vec![("AUTHENTICATE", "250 OK\r\n")], "");
        let mut c = ControlConn::new(stream).unwrap();
        assert!(matches!(
            c.getinfo("version\r\nSIGNAL HALT"),
            Err(ControlError::Protocol(_))
        ));
    }

    const FP1: &str = "7BE683E65D48141321C5ED92F075C55364AC7123";
    const FP2: &str = "0011BD2485AD45D984EC4159C88FC066E5E3300E";

    #[test]
    fn parses_circ_events() {
        let text = format!(
            "CIRC 42 BUILT ${FP1}~dannenberg,${FP2}=moria1,$ABCDEF0123456789ABCDEF0123456789ABCDEF01 \
             BUILD_FLAGS=NEED_CAPACITY PURPOSE=GENERAL TIME_CREATED=2024-05-01T12:00:00.123456"
        );
        let Event::Circ(ev) = Event::parse(&text) else {
            panic!("not a circuit event");
        };
        assert_eq!(ev.id, 42);
        assert_eq!(ev.status, "BUILT");
        assert_eq!(ev.path.len(), 3);
        assert_eq!(ev.path[0].fingerprint, FP1);
        assert_eq!(ev.path[0].nickname.as_deref(), Some("dannenberg"));
        assert_eq!(ev.path[1].nickname.as_deref(), Some("moria1"));
        assert_eq!(ev.path[2].nickname, None);
        assert_eq!(ev.purpose.as_deref(), Some("GENERAL"));
        assert_eq!(
            ev.time_created.as_deref(),
            Some("2024-05-01T12:00:00.123456")
        );

        let text = format!(
            "CIRC 43 FAILED ${FP1}~a BUILD_FLAGS=IS_INTERNAL,NEED_CAPACITY PURPOSE=HS_VANGUARDS \
             TIME_CREATED=2024-05-01T12:00:01.000000 REASON=TIMEOUT \
             SOCKS_USERNAME=\"iso \\\"1\\\"\" SOCKS_PASSWORD=\"x\""
        );
        let Event::Circ(ev) = Event::parse(&text) else {
            panic!("not a circuit event");
        };
        assert_eq!(ev.status, "FAILED");
        assert_eq!(ev.reason.as_deref(), Some("TIMEOUT"));
        assert_eq!(ev.purpose.as_deref(), Some("HS_VANGUARDS"));
        assert_eq!(
            keyword(&tokenize(&text), "SOCKS_USERNAME").as_deref(),
            Some("iso \"1\"")
        );

        let ev = Event::parse("CIRC 5 LAUNCHED BUILD_FLAGS=NEED_CAPACITY PURPOSE=GENERAL");
        let Event::Circ(ev) = ev else {
            panic!("not a circuit event");
        };
        assert!(ev.path.is_empty());

        // A lowercase fingerprint is normalised; a short one makes the event unparsed.
        let ev = Event::parse(&format!("CIRC 6 EXTENDED ${}", FP1.to_lowercase()));
        let Event::Circ(ev) = ev else {
            panic!("not a circuit event");
        };
        assert_eq!(ev.path[0].fingerprint, FP1);
        let text = "CIRC 7 EXTENDED $ABC~x";
        assert_eq!(Event::parse(text), Event::Other(text.into()));
    }

    #[test]
    fn parses_stream_and_other_events() {
        let ev = Event::parse(
            "STREAM 12 FAILED 42 10.1.2.3:443 REASON=TIMEOUT REMOTE_REASON=CONNECTREFUSED \
             SOURCE_ADDR=127.0.0.1:40000 PURPOSE=USER",
        );
        let Event::Stream(s) = ev else {
            panic!("not a stream event");
        };
        assert_eq!(s.circuit, 42);
        assert_eq!(s.reason.as_deref(), Some("TIMEOUT"));
        assert_eq!(s.source_addr, Some("127.0.0.1:40000".parse().unwrap()));

        let ev = Event::parse("STREAM 13 NEW 0 1.2.3.4:80 SOURCE_ADDR=(Tor_internal):0");
        let Event::Stream(s) = ev else {
            panic!("not a stream event");
        };
        assert_eq!(s.source_addr, None);

        assert_eq!(
            Event::parse("BW 1024 2048 OR=1 DIR=0"),
            Event::Bw {
                read: 1024,
                written: 2048
            }
        );
        for text in [
            "BW x 1",
            "BW",
            "STREAM 1",
            "CIRC",
            "",
            "NOTICE Bootstrapped 100% (done): Done",
        ] {
            assert_eq!(Event::parse(text), Event::Other(text.into()));
        }
    }

    #[test]
    fn parses_network_status() {
        // FP1 and FP2 in base64, as r lines write identities.
        let text = "\
r dannenberg e+aD5l1IFBMhxe2S8HXFU2SscSM 4Ky6Y5XWjAV3LVBOhlMvM1PiHbA 2024-05-01 12:00:00 193.23.244.244 443 80
a [2001:678:558:1000::244]:443
s Authority Fast Guard HSDir Running Stable V2Dir Valid
w Bandwidth=20 Unmeasured=1
p reject 1-65535
r moria1 ABG9JIWtRdmE7EFZyI/AZuXjMA4 2024-05-01 12:00:00 128.31.0.39 9201 9231
s Exit Fast Running Valid
w Bandwidth=5000
r broken !!!! 2024-05-01 12:00:00 10.0.0.1 1 0
s Fast
r badaddr ABG9JIWtRdmE7EFZyI/AZuXjMA4 2024-05-01 12:00:00 10.0.0.300 1 0
r noweight ABG9JIWtRdmE7EFZyI/AZuXjMA4 AAAAAAAAAAAAAAAAAAAAAAAAAAA 2024-05-01 12:00:00 10.0.0.2 5000 0
";
        let rs = parse_network_status(text);
        assert_eq!(rs.len(), 3);
        assert_eq!(rs[0].nickname, "dannenberg");
        assert_eq!(rs[0].fingerprint, FP1);
        assert_eq!(rs[0].address, Ipv4Addr::new(193, 23, 244, 244));
        assert_eq!(rs[0].or_port, 443);
        assert!(rs[0].flags.iter().any(|f| f == "Guard"));
        assert_eq!(rs[0].bandwidth, Some(20));
        assert!(!rs[0].measured);
        // The microdescriptor form, without the digest field.
        assert_eq!(rs[1].nickname, "moria1");
        assert_eq!(rs[1].fingerprint, FP2);
        assert_eq!(rs[1].or_port, 9201);
        assert_eq!(rs[1].flags, vec!["Exit", "Fast", "Running", "Valid"]);
        assert_eq!(rs[1].bandwidth, Some(5000));
        assert!(rs[1].measured);
        assert_eq!(rs[2].nickname, "noweight");
        assert_eq!(rs[2].bandwidth, None);
        assert!(!rs[2].measured);
        assert!(rs[2].flags.is_empty());

        assert!(parse_network_status("").is_empty());
        assert!(parse_network_status("r\ns\nw\n").is_empty());
    }
}
