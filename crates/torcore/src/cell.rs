//! Cells as the simulation carries them: their header fields, never their payload.
//!
//! A cell on the wire is 514 bytes whatever it carries; what the model needs to know about it
//! (its circuit, command, relay command, stream and how much of its payload is used) travels as
//! this small descriptor beside the byte stream. A few fields have no wire counterpart and say
//! what the real cell would have said inside its encrypted payload (`hop`, `arg`).

/// Bytes of a cell on the wire (link protocol 4 and later).
pub const CELL_BYTES: u32 = 514;
/// Payload bytes of a RELAY_DATA cell.
pub const RELAY_DATA_BYTES: u32 = 498;

/// A cell's command (tor-spec 3): what the cell does on its channel. Only the commands the
/// model has a use for are listed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum CellCommand {
    /// PADDING: link padding, dropped by the receiving end of the channel.
    Padding,
    /// CREATE2: asks the next relay to create a circuit hop (the ntor handshake's first half).
    Create2,
    /// CREATED2: the answer to CREATE2; the hop is open.
    Created2,
    /// RELAY: carries a relay command end to end along the circuit.
    Relay,
    /// RELAY_EARLY: a relay cell that may carry EXTEND2 (clients send EXTEND2 in these).
    RelayEarly,
    /// DESTROY: tears the circuit down hop by hop; `arg` holds the reason.
    Destroy,
}

/// The relay command inside a RELAY or RELAY_EARLY cell (tor-spec 6.1), or `None` for other
/// cells.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum RelayCommand {
    /// Not a relay cell.
    None,
    /// RELAY_BEGIN: opens a stream to the destination in `arg` at the exit.
    Begin,
    /// Opens a stream to the relay's own directory cache (tor's RELAY_BEGIN_DIR).
    BeginDir,
    /// RELAY_DATA: up to [`RELAY_DATA_BYTES`] of a stream's bytes (`length` says how many).
    Data,
    /// RELAY_END: closes a stream.
    End,
    /// RELAY_CONNECTED: the exit (or directory cache) opened the stream that BEGIN asked for.
    Connected,
    /// RELAY_SENDME: acknowledges cells to the sender (a stream's when `stream_id` is set, the
    /// circuit's when it is 0), reopening its window or giving congestion control an RTT
    /// sample.
    Sendme,
    /// RELAY_EXTEND2: asks the last hop to extend the circuit to the relay in `arg`.
    Extend2,
    /// RELAY_EXTENDED2: the circuit reached one more hop.
    Extended2,
    /// RELAY_TRUNCATED: a hop beyond the sender's was torn down.
    Truncated,
    /// RELAY_DROP: long-range padding, discarded by the hop that recognises it.
    Drop,
    /// XOFF (proposal 324): the receiver's edge is full; stop sending on this stream.
    Xoff,
    /// XON (proposal 324): the stream may send again.
    Xon,
}

/// One cell's header as the model carries it beside the byte stream (see the module
/// documentation).
///
/// The fields are laid out with no gaps (C order, widest first), so that two cells compare as
/// one 16-byte word: a connection's pipe compares every cell written with the one before it to
/// find runs of equal cells, where the derived comparison tested the eight fields one by one.
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub struct Cell {
    /// Circuit id on the channel the cell travels on.
    pub circ_id: u32,
    /// What the payload says that the model needs: the host to extend to (EXTEND2), the
    /// destination (BEGIN), a request's size, a DESTROY reason.
    pub arg: u32,
    /// Stream the relay cell belongs to; 0 for circuit-level relay cells and non-relay cells.
    pub stream_id: u16,
    /// Relay payload bytes in use (RELAY_DATA: up to 498).
    pub length: u16,
    /// What the cell does on its channel (tor-spec 3).
    pub command: CellCommand,
    /// The relay command, [`RelayCommand::None`] unless `command` is RELAY or RELAY_EARLY.
    pub relay: RelayCommand,
    /// For relay cells travelling away from the client: the hop (1 = guard) that recognises
    /// it, which in Tor follows from the layers of encryption.
    pub hop: u8,
    /// On a stream's first DATA cell (the application's request): it announces an upload
    /// of `arg` bytes (a PUT) rather than asking for a download of them (a GET).
    pub upload: bool,
}

// No padding: the fields' sizes add up to the struct's, so all its 16 bytes are initialised.
const _: () = assert!(std::mem::size_of::<Cell>() == 4 + 4 + 2 + 2 + 1 + 1 + 1 + 1);

impl Cell {
    fn word(&self) -> u128 {
        // SAFETY: `Cell` is `repr(C)` with no padding (asserted above) and 16 bytes, so every
        // byte is initialised and any 16 bytes are a valid `u128`.
        unsafe { std::mem::transmute::<Cell, u128>(*self) }
    }
}

impl PartialEq for Cell {
    fn eq(&self, other: &Self) -> bool {
        self.word() == other.word()
    }
}

impl Eq for Cell {}

impl Cell {
    /// A cell with `command` on circuit `circ_id`, every other field zero (no relay command).
    pub fn new(circ_id: u32, command: CellCommand) -> Self {
        Self {
            circ_id,
            command,
            relay: RelayCommand::None,
            hop: 0,
            stream_id: 0,
            length: 0,
            arg: 0,
            upload: false,
        }
    }

    /// A RELAY cell carrying `relay` for `hop`, on stream `stream_id` (0 for circuit-level
    /// commands), with no payload in use yet.
    pub fn relay(circ_id: u32, relay: RelayCommand, hop: u8, stream_id: u16) -> Self {
        Self {
            circ_id,
            command: CellCommand::Relay,
            relay,
            hop,
            stream_id,
            length: 0,
            arg: 0,
            upload: false,
        }
    }

    /// Whether the cell is RELAY or RELAY_EARLY, i.e. carries a relay command.
    pub fn is_relay(&self) -> bool {
        matches!(self.command, CellCommand::Relay | CellCommand::RelayEarly)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cell_descriptor_is_small() {
        // Millions of cells wait in queues; keep each descriptor to 16 bytes.
        assert!(std::mem::size_of::<Cell>() <= 16);
    }
}
