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

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum CellCommand {
    Padding,
    Create2,
    Created2,
    Relay,
    RelayEarly,
    Destroy,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum RelayCommand {
    /// Not a relay cell.
    None,
    Begin,
    /// Opens a stream to the relay's own directory cache (tor's RELAY_BEGIN_DIR).
    BeginDir,
    Data,
    End,
    Connected,
    Sendme,
    Extend2,
    Extended2,
    Truncated,
    Drop,
    Xoff,
    Xon,
}

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
    pub stream_id: u16,
    /// Relay payload bytes in use (RELAY_DATA: up to 498).
    pub length: u16,
    pub command: CellCommand,
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
