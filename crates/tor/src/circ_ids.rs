//! A channel's circuit-id table: which circuit an id names, for the ids one side chose.
//!
//! Ids index a window that starts at the lowest id still in use, so lookups stay a subtraction
//! and an index even when ids are never reused. Multi-connection channels need that: a new
//! circuit's CREATE2 on one connection may overtake the DESTROY of an old circuit with the same
//! id on another, so those channels hand out ids in increasing order (as tor's random 31-bit
//! ids make reuse practically impossible) and the window slides past closed circuits.

use std::collections::VecDeque;

const NONE: u32 = u32::MAX;

#[derive(Clone, Debug, Default)]
pub struct CircIdTable {
    /// The id of `slots[0]`.
    base: u32,
    /// Circuit index per id, `NONE` where no circuit has the id.
    slots: VecDeque<u32>,
}

impl CircIdTable {
    /// The circuit with id `i`.
    pub fn get(&self, i: u32) -> Option<u32> {
        let off = i.checked_sub(self.base)?;
        self.slots.get(off as usize).copied().filter(|&c| c != NONE)
    }

    /// Whether id `i` names no circuit.
    pub fn is_free(&self, i: u32) -> bool {
        self.get(i).is_none()
    }

    /// Gives id `i` to circuit `circ`, widening the window as needed.
    pub fn set(&mut self, i: u32, circ: u32) {
        if self.slots.is_empty() {
            self.base = i;
        }
        while i < self.base {
            self.slots.push_front(NONE);
            self.base -= 1;
        }
        let off = (i - self.base) as usize;
        if off >= self.slots.len() {
            self.slots.resize(off + 1, NONE);
        }
        self.slots[off] = circ;
    }

    /// Frees id `i`; true if a circuit had it. The window drops freed ids at either end.
    pub fn clear(&mut self, i: u32) -> bool {
        let Some(off) = i.checked_sub(self.base) else {
            return false;
        };
        let Some(slot) = self.slots.get_mut(off as usize) else {
            return false;
        };
        let had = *slot != NONE;
        *slot = NONE;
        while self.slots.front() == Some(&NONE) {
            self.slots.pop_front();
            self.base += 1;
        }
        while self.slots.back() == Some(&NONE) {
            self.slots.pop_back();
        }
        had
    }

    /// The circuits, in id order.
    pub fn circuits(&self) -> impl Iterator<Item = u32> + '_ {
        self.slots.iter().copied().filter(|&c| c != NONE)
    }

    /// Ids the window spans (live or freed in between).
    #[cfg(test)]
    pub fn span(&self) -> usize {
        self.slots.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_map_to_circuits_and_free_again() {
        let mut t = CircIdTable::default();
        t.set(3, 30);
        t.set(5, 50);
        assert_eq!(t.get(3), Some(30));
        assert_eq!(t.get(4), None);
        assert_eq!(t.get(5), Some(50));
        assert_eq!(t.get(2), None);
        assert!(t.clear(3));
        assert!(!t.clear(3));
        assert_eq!(t.get(3), None);
        assert_eq!(t.get(5), Some(50));
        assert_eq!(t.circuits().collect::<Vec<_>>(), vec![50]);
    }

    #[test]
    fn the_window_slides_with_increasing_ids() {
        let mut t = CircIdTable::default();
        for i in 0..10_000u32 {
            t.set(i, i);
            if i >= 2 {
                t.clear(i - 2);
            }
        }
        // Only the two newest ids are live, and the window spans just them.
        assert_eq!(t.span(), 2);
        assert_eq!(t.circuits().collect::<Vec<_>>(), vec![9_998, 9_999]);
    }

    #[test]
    fn a_lower_id_reused_after_the_window_moved_is_found() {
        let mut t = CircIdTable::default();
        t.set(0, 7);
        t.set(1, 8);
        t.clear(0);
        t.set(0, 9);
        assert_eq!(t.get(0), Some(9));
        assert_eq!(t.get(1), Some(8));
        assert_eq!(t.circuits().collect::<Vec<_>>(), vec![9, 8]);
    }
}
