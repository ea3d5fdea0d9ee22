//! A circuit's queue of cells waiting for its channel, kept as runs of equal cells.
//!
//! Tor queues a circuit's cells one by one. Most of what a busy relay queues is a stream's
//! DATA cells, which the model carries as equal descriptors (same circuit, stream and length),
//! and which reach a relay in runs (a pipe hands a middle relay a run of equal cells at once;
//! an exit packages a response as one). Kept cell by cell, every run was copied into the queue
//! and out of it again one 16-byte cell at a time, into storage that moved with each doubling
//! and each trim as the queue filled and drained: on a large network, cache lines the relay
//! touched for nothing. A run is one entry however long it is, so the queue's storage stays a
//! few entries and rarely moves. What leaves the queue, and in what order, is exactly what a
//! queue of single cells would give (tested against one).

use std::collections::VecDeque;

use crate::cell::{Cell, CellCommand};

/// `count` copies of `cell`, back to back.
#[derive(Clone, Copy, Debug)]
struct Run {
    cell: Cell,
    count: u32,
}

/// First in, first out, like a `VecDeque<Cell>`, where [`CellQueue::push_run`] adds many
/// equal cells in one step.
///
/// The oldest run is kept in the queue itself: most circuits hold one run at a time (or a few
/// cells of their handshake), so most queues need no storage of their own, and the scheduler,
/// which has just read the circuit, finds the cell it takes on the same lines. The runs behind
/// it are boxed, so that the queue is 32 bytes and a relay's circuit table, one of a large
/// network's biggest, is no larger than with a plain `VecDeque<Cell>`.
#[derive(Debug)]
pub struct CellQueue {
    /// The oldest run; meaningless while the queue is empty.
    front: Run,
    /// The runs behind `front`, oldest first, once the queue has held two runs at a time.
    /// Boxed on purpose (see above): eight bytes here instead of a `VecDeque`'s 32.
    #[allow(clippy::box_collection)]
    rest: Option<Box<VecDeque<Run>>>,
    /// Cells held: the sum of the runs' counts.
    len: u32,
}

impl Default for CellQueue {
    fn default() -> Self {
        Self {
            front: Run {
                cell: Cell::new(0, CellCommand::Padding),
                count: 0,
            },
            rest: None,
            len: 0,
        }
    }
}

impl CellQueue {
    /// An empty queue, with no storage of its own.
    pub fn new() -> Self {
        Self::default()
    }

    /// Cells held (not runs).
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// Whether no cell is queued.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Queues `count` copies of `cell` behind what is queued. The caller bounds the queue (tor's
    /// circuit queue limit), far below `u32::MAX` cells.
    pub fn push_run(&mut self, cell: Cell, count: u32) {
        if count == 0 {
            return;
        }
        let was_empty = self.len == 0;
        self.len = self
            .len
            .checked_add(count)
            .expect("a circuit queue holds fewer than 2^32 cells");
        if was_empty {
            self.front = Run { cell, count };
            return;
        }
        let back = match self.rest.as_mut().and_then(|rest| rest.back_mut()) {
            Some(back) => back,
            None => &mut self.front,
        };
        if back.cell == cell {
            back.count += count;
        } else {
            let run = Run { cell, count };
            self.rest.get_or_insert_default().push_back(run);
        }
    }

    /// Puts a cell back in front, where a cell taken out for a write that failed was.
    pub fn push_front(&mut self, cell: Cell) {
        self.len += 1;
        if self.len == 1 {
            self.front = Run { cell, count: 1 };
        } else if self.front.cell == cell {
            self.front.count += 1;
        } else {
            let old = std::mem::replace(&mut self.front, Run { cell, count: 1 });
            self.rest.get_or_insert_default().push_front(old);
        }
    }

    /// Takes the oldest cell. A circuit lives for minutes, so the storage of the runs behind
    /// the first is trimmed as they leave ([`onionlab_engine::heap::trim`]) rather than kept
    /// at its longest burst's size.
    pub fn pop_front(&mut self) -> Option<Cell> {
        if self.len == 0 {
            return None;
        }
        self.len -= 1;
        let cell = self.front.cell;
        self.front.count -= 1;
        if self.front.count == 0 {
            if let Some(rest) = self.rest.as_mut() {
                if let Some(next) = rest.pop_front() {
                    self.front = next;
                    onionlab_engine::heap::trim(rest);
                }
            }
        }
        Some(cell)
    }

    /// Runs held.
    #[cfg(test)]
    fn runs(&self) -> usize {
        if self.len == 0 {
            0
        } else {
            1 + self.rest.as_ref().map_or(0, |rest| rest.len())
        }
    }

    /// Whether the queue keeps storage of its own beside its first run.
    #[cfg(test)]
    fn has_storage(&self) -> bool {
        self.rest.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cell::RelayCommand;
    use crate::test_rng::Rng;

    fn data(stream_id: u16, length: u16) -> Cell {
        let mut cell = Cell::new(7, CellCommand::Relay);
        cell.relay = RelayCommand::Data;
        cell.stream_id = stream_id;
        cell.length = length;
        cell
    }

    #[test]
    fn equal_cells_share_a_run_and_leave_in_order() {
        let mut q = CellQueue::new();
        q.push_run(data(1, 498), 40);
        q.push_run(data(1, 498), 1);
        q.push_run(data(1, 100), 1);
        q.push_run(data(2, 498), 3);
        assert_eq!((q.len(), q.runs()), (45, 3));
        for _ in 0..41 {
            assert_eq!(q.pop_front(), Some(data(1, 498)));
        }
        assert_eq!(q.pop_front(), Some(data(1, 100)));
        // A cell put back in front joins the run it came from.
        let cell = q.pop_front().unwrap();
        q.push_front(cell);
        assert_eq!((q.len(), q.runs()), (3, 1));
        q.push_front(data(1, 100));
        assert_eq!(q.runs(), 2);
        assert_eq!(q.pop_front(), Some(data(1, 100)));
        assert_eq!(
            (0..3).map(|_| q.pop_front()).collect::<Vec<_>>(),
            vec![Some(data(2, 498)); 3]
        );
        assert_eq!(q.pop_front(), None);
        assert!(q.is_empty());
        q.push_run(data(3, 1), 0);
        assert!(q.is_empty());
    }

    #[test]
    fn a_queue_of_one_run_keeps_no_storage() {
        let mut q = CellQueue::new();
        q.push_run(Cell::new(3, CellCommand::Create2), 1);
        assert_eq!(q.pop_front(), Some(Cell::new(3, CellCommand::Create2)));
        q.push_run(data(1, 498), 500);
        q.push_run(data(1, 498), 1);
        let cell = q.pop_front().unwrap();
        q.push_front(cell);
        assert_eq!((q.len(), q.runs(), q.has_storage()), (501, 1, false));
        q.push_run(data(1, 3), 1);
        assert!(q.has_storage());
    }

    #[test]
    fn a_queue_is_as_small_as_a_vec_deque() {
        assert_eq!(std::mem::size_of::<CellQueue>(), 32);
    }

    /// Against a queue of single cells: random pushes of runs, single cells, cells put back
    /// in front and pops give the same cells in the same order, and the same lengths.
    #[test]
    fn behaves_like_a_queue_of_single_cells() {
        let mut rng = Rng(15);
        let mut q = CellQueue::new();
        let mut model: VecDeque<Cell> = VecDeque::new();
        let cells = [
            data(1, 498),
            data(1, 17),
            data(2, 498),
            Cell::new(7, CellCommand::Destroy),
        ];
        for _ in 0..20_000 {
            match rng.below(4) {
                0 => {
                    let cell = cells[rng.below(cells.len() as u64) as usize];
                    let count = rng.below(30) as u32;
                    q.push_run(cell, count);
                    model.extend(std::iter::repeat_n(cell, count as usize));
                }
                1 => {
                    let cell = cells[rng.below(cells.len() as u64) as usize];
                    q.push_run(cell, 1);
                    model.push_back(cell);
                }
                2 => {
                    // The scheduler's failed write: the cell it took goes back in front.
                    let cell = q.pop_front();
                    assert_eq!(cell, model.pop_front());
                    if let Some(cell) = cell {
                        q.push_front(cell);
                        model.push_front(cell);
                    }
                }
                _ => {
                    for _ in 0..rng.below(40) {
                        assert_eq!(q.pop_front(), model.pop_front());
                    }
                }
            }
            assert_eq!(q.len(), model.len());
            assert_eq!(q.is_empty(), model.is_empty());
        }
        while let Some(cell) = model.pop_front() {
            assert_eq!(q.pop_front(), Some(cell));
        }
        assert_eq!(q.pop_front(), None);
    }
}
