//! What the model's TCP streams carry: Tor cells between relays and clients, and the requests
//! and responses between exits and file servers.

use onionlab_torcore::Cell;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wire {
    Cell(Cell),
    /// An HTTP-like request for `bytes` of response.
    Request {
        bytes: u32,
    },
}

/// Bytes an HTTP GET with its headers takes on the wire (request to a file server).
pub const REQUEST_BYTES: u64 = 200;
