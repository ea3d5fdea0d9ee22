//! What the model's TCP streams carry: Tor cells between relays and clients, the control
//! messages of channels that span several connections, and the requests and responses
//! between exits and file servers.

use onionlab_torcore::Cell;

use crate::link::LinkMessage;

/// A message on a connection of the model: what its bytes stand for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wire {
    /// A Tor cell on a channel.
    Cell(Cell),
    /// A flight of the link handshake that opens every connection between Tor nodes.
    Link(LinkMessage),
    /// A cell of a channel whose circuits' cells may travel over different connections
    /// (IMUX, Torchestra): its position in its circuit's direction, for the receiver to
    /// restore the order.
    Sequenced {
        /// The Tor cell, as [`Wire::Cell`] would carry it.
        cell: Cell,
        /// The cell's sequence number in its circuit's direction on this channel, from 0.
        seq: u32,
    },
    /// The first message on a connection of a multi-connection channel: which of the
    /// opener's channels it belongs to (the stand-in for the channel identity a real design
    /// puts in its handshake), and for Torchestra whether it is the heavy connection.
    Join {
        /// The opener's token for the channel: a count of the channels it opened, not a
        /// slot it may reuse.
        channel: u32,
        /// Torchestra: whether this connection is the channel's heavy one.
        heavy: bool,
    },
    /// IMUX: the answer to a `Join` the accepting relay keeps. The opener puts no cell on a
    /// connection beyond a channel's first before this arrives, as a real relay sends none
    /// before the link handshake (which needs the peer) completes: a peer at its socket limit
    /// resets a new connection, and cells already on it would be lost with it.
    Joined,
    /// IMUX's closing handshake: the sender writes nothing more on this connection.
    ClosingBegin,
    /// The answer to `ClosingBegin`: everything for this connection has been written; close.
    ClosingEnd,
    /// Torchestra: the sender moved the circuit to its heavy (or back to its light)
    /// connection; the receiver moves the circuit's other direction likewise.
    Switch {
        /// The circuit's id on this channel.
        circ_id: u32,
        /// Whether the circuit moved to the heavy connection (false: back to the light one).
        heavy: bool,
    },
    /// An HTTP-like request for `bytes` of response.
    Request {
        /// Bytes the server is to send back.
        bytes: u32,
    },
    /// An HTTP-like upload's header (a PUT): `bytes` of body follow on the connection, and
    /// the server answers with [`UPLOAD_RESPONSE_BYTES`] once it has read them all.
    Upload {
        /// Bytes of the body that follows.
        bytes: u32,
    },
    /// A piece of an upload's body as the exit writes it (the bytes of its DATA cells); the
    /// server counts the bytes it reads and needs nothing from the descriptor.
    UploadBody,
    /// Bytes a managed process wrote: `len` bytes, kept under `key` in the world's
    /// [`crate::process::Payloads`] until the peer has read them.
    Bytes {
        /// The payload's key.
        key: u64,
        /// Its length.
        len: u32,
    },
}

/// Circuit ids chosen by the side that opened the channel (a client, or the relay that
/// connected) have the top bit set, so the two sides never pick the same id.
pub const INITIATOR_BIT: u32 = 1 << 31;

/// Bytes an HTTP GET with its headers takes on the wire (request to a file server).
pub const REQUEST_BYTES: u64 = 200;

/// Bytes of a server's answer to an upload (status line and headers): the client's upload is
/// done when they arrive.
pub const UPLOAD_RESPONSE_BYTES: u64 = 200;
