//! The link handshake that opens every connection between Tor nodes, as a sans-IO machine.
//!
//! A TCP connection carries no cell until both ends have run TLS and then Tor's own link
//! protocol (tor-spec, "Negotiating and initializing connections"). With TLS 1.3 and link
//! protocol 3 or later the messages go in five flights, each answering the one before:
//!
//! | flight | from | what |
//! | --- | --- | --- |
//! | 1 | initiator | TLS ClientHello |
//! | 2 | responder | ServerHello to server Finished (its RSA link certificate and signature) |
//! | 3 | initiator | TLS Finished and a VERSIONS cell |
//! | 4 | responder | VERSIONS, CERTS, AUTH_CHALLENGE and NETINFO cells |
//! | 5 | initiator | a relay's CERTS and AUTHENTICATE, then NETINFO |
//!
//! The initiator may send its first circuit's CREATE2 right behind flight 5, so a new
//! connection delays its first cell by three round trips (TCP's and two of the handshake)
//! where a connection without the handshake would take one. The responder takes the
//! connection into use once flight 5 arrives.
//!
//! The bytes of each flight were measured against tor 0.4.9.11 with OpenSSL 3.0 as the
//! responder (`scripts/link-handshake-bytes.py`, which plays the initiator): they are what the
//! TCP connection carries, TLS records included. They vary by some tens of bytes from relay
//! to relay with the random host names tor puts in its certificates. An initiating relay's
//! CERTS cell holds
//! certificates of the same kinds and sizes as the responder's and its AUTHENTICATE cell is
//! of the fixed size the specification gives; the client's ClientHello is the one Python's
//! OpenSSL sends (tor's differs in its cipher list, by tens of bytes).

/// One flight of the link handshake, as a message on the connection's byte stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkMessage {
    /// Flight 1: TLS ClientHello.
    ClientHello,
    /// Flight 2: TLS ServerHello, EncryptedExtensions, Certificate, CertificateVerify and
    /// Finished.
    ServerHello,
    /// Flight 3: the initiator's TLS Finished and its VERSIONS cell.
    Versions,
    /// Flight 4: the responder's VERSIONS, CERTS, AUTH_CHALLENGE and NETINFO cells, in their
    /// TLS records.
    ResponderCells,
    /// Flight 5: the initiator's NETINFO, after CERTS and AUTHENTICATE if it is a relay
    /// (clients do not authenticate).
    InitiatorCells {
        /// Whether the initiator is a relay, and so sends CERTS and AUTHENTICATE before its
        /// NETINFO.
        authenticated: bool,
    },
}

/// Measured flight sizes in bytes (see the module documentation).
const CLIENT_HELLO_BYTES: u64 = 517;
const SERVER_HELLO_BYTES: u64 = 1140;
const VERSIONS_BYTES: u64 = 80 + 33;
const RESPONDER_CELLS_BYTES: u64 = 2195;
/// NETINFO: one fixed-size cell in a TLS record of its own.
const NETINFO_BYTES: u64 = 536;
/// A relay's CERTS (as large as the responder's, 1,447 bytes) and AUTHENTICATE (7 bytes of
/// header and the 352-byte Ed25519-SHA256-RFC5705 body), each in a record (22 bytes with
/// AES-256-GCM).
const AUTHENTICATION_BYTES: u64 = 1447 + 22 + 7 + 352 + 22;

impl LinkMessage {
    /// Bytes the flight takes on the connection.
    pub fn wire_bytes(self) -> u64 {
        match self {
            LinkMessage::ClientHello => CLIENT_HELLO_BYTES,
            LinkMessage::ServerHello => SERVER_HELLO_BYTES,
            LinkMessage::Versions => VERSIONS_BYTES,
            LinkMessage::ResponderCells => RESPONDER_CELLS_BYTES,
            LinkMessage::InitiatorCells { authenticated } => {
                NETINFO_BYTES
                    + if authenticated {
                        AUTHENTICATION_BYTES
                    } else {
                        0
                    }
            }
        }
    }
}

/// Where one end of a connection is in the handshake.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stage {
    /// Initiator: TCP has not connected yet.
    Connecting,
    /// Waiting for this flight from the peer.
    Awaiting(LinkMessage),
    /// Cells may flow.
    Open,
}

/// One end's handshake. Two bytes: every connection of a relay holds one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LinkHandshake {
    stage: Stage,
    /// Initiator only: whether it authenticates (a relay) or not (a client).
    authenticate: bool,
}

/// A flight arrived that the handshake did not expect at this point: the peer broke the
/// protocol, and the connection should be closed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UnexpectedFlight(pub LinkMessage);

impl LinkHandshake {
    /// The end that connects: a relay authenticates, a client does not.
    pub fn initiator(authenticate: bool) -> Self {
        LinkHandshake {
            stage: Stage::Connecting,
            authenticate,
        }
    }

    /// The end that connects when the network runs the handshake (`tor.link_handshake`), and
    /// a connection that carries cells at once when it does not.
    pub fn opening(handshake: bool, authenticate: bool) -> Self {
        if handshake {
            Self::initiator(authenticate)
        } else {
            Self::skipped()
        }
    }

    /// The end that accepted the connection: it waits for the ClientHello.
    pub fn responder() -> Self {
        LinkHandshake {
            stage: Stage::Awaiting(LinkMessage::ClientHello),
            authenticate: false,
        }
    }

    /// A connection that carries cells from its first byte (the model without the
    /// handshake, `tor.link_handshake: false`).
    pub fn skipped() -> Self {
        LinkHandshake {
            stage: Stage::Open,
            authenticate: false,
        }
    }

    /// Whether cells may flow.
    pub fn is_open(&self) -> bool {
        self.stage == Stage::Open
    }

    /// TCP connected: the initiator's first flight (none for a responder, or when skipped).
    pub fn connected(&mut self) -> Option<LinkMessage> {
        if self.stage != Stage::Connecting {
            return None;
        }
        self.stage = Stage::Awaiting(LinkMessage::ServerHello);
        Some(LinkMessage::ClientHello)
    }

    /// A flight from the peer arrived: the answer to send, if any. After it the handshake may
    /// be open ([`is_open`](Self::is_open)).
    pub fn on_flight(&mut self, m: LinkMessage) -> Result<Option<LinkMessage>, UnexpectedFlight> {
        let expected = match self.stage {
            Stage::Awaiting(e) => e,
            _ => return Err(UnexpectedFlight(m)),
        };
        let same = match (expected, m) {
            (LinkMessage::InitiatorCells { .. }, LinkMessage::InitiatorCells { .. }) => true,
            (e, m) => e == m,
        };
        if !same {
            return Err(UnexpectedFlight(m));
        }
        let (next, reply) = match m {
            LinkMessage::ClientHello => (
                Stage::Awaiting(LinkMessage::Versions),
                Some(LinkMessage::ServerHello),
            ),
            LinkMessage::ServerHello => (
                Stage::Awaiting(LinkMessage::ResponderCells),
                Some(LinkMessage::Versions),
            ),
            LinkMessage::Versions => (
                Stage::Awaiting(LinkMessage::InitiatorCells {
                    authenticated: false,
                }),
                Some(LinkMessage::ResponderCells),
            ),
            LinkMessage::ResponderCells => (
                Stage::Open,
                Some(LinkMessage::InitiatorCells {
                    authenticated: self.authenticate,
                }),
            ),
            LinkMessage::InitiatorCells { .. } => (Stage::Open, None),
        };
        self.stage = next;
        Ok(reply)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs a handshake between two ends, flight by flight; returns the flights in order.
    fn run(authenticate: bool) -> Vec<LinkMessage> {
        let mut init = LinkHandshake::initiator(authenticate);
        let mut resp = LinkHandshake::responder();
        let mut flights = Vec::new();
        let mut next = init.connected();
        let mut to_responder = true;
        while let Some(m) = next {
            flights.push(m);
            let end = if to_responder { &mut resp } else { &mut init };
            next = end.on_flight(m).expect("flights in order");
            to_responder = !to_responder;
        }
        assert!(init.is_open() && resp.is_open());
        flights
    }

    #[test]
    fn five_flights_open_both_ends() {
        let flights = run(true);
        assert_eq!(
            flights,
            [
                LinkMessage::ClientHello,
                LinkMessage::ServerHello,
                LinkMessage::Versions,
                LinkMessage::ResponderCells,
                LinkMessage::InitiatorCells {
                    authenticated: true
                },
            ]
        );
        // A client's last flight is its NETINFO alone.
        assert_eq!(
            run(false)[4],
            LinkMessage::InitiatorCells {
                authenticated: false
            }
        );
        let relay: u64 = run(true).iter().map(|m| m.wire_bytes()).sum();
        let client: u64 = run(false).iter().map(|m| m.wire_bytes()).sum();
        assert_eq!(relay - client, 1447 + 22 + 7 + 352 + 22);
        assert_eq!(client, 517 + 1140 + 113 + 2195 + 536);
    }

    #[test]
    fn the_initiator_opens_a_round_trip_before_the_responder() {
        let mut init = LinkHandshake::initiator(false);
        let mut resp = LinkHandshake::responder();
        let hello = init.connected().unwrap();
        let server = resp.on_flight(hello).unwrap().unwrap();
        let versions = init.on_flight(server).unwrap().unwrap();
        assert!(!init.is_open());
        let cells = resp.on_flight(versions).unwrap().unwrap();
        assert!(!resp.is_open());
        let last = init.on_flight(cells).unwrap().unwrap();
        assert!(init.is_open() && !resp.is_open());
        assert_eq!(resp.on_flight(last), Ok(None));
        assert!(resp.is_open());
    }

    #[test]
    fn flights_out_of_order_are_refused() {
        let mut resp = LinkHandshake::responder();
        assert_eq!(
            resp.on_flight(LinkMessage::Versions),
            Err(UnexpectedFlight(LinkMessage::Versions))
        );
        let mut init = LinkHandshake::initiator(true);
        // Before TCP connected nothing may arrive.
        assert!(init.on_flight(LinkMessage::ServerHello).is_err());
        assert_eq!(init.connected(), Some(LinkMessage::ClientHello));
        assert_eq!(init.connected(), None);
        let mut open = LinkHandshake::skipped();
        assert!(open.is_open());
        assert_eq!(open.connected(), None);
        assert!(open.on_flight(LinkMessage::ClientHello).is_err());
    }
}
