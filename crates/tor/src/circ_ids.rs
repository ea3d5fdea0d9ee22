//! A channel's circuit ids: which circuit an id names, and handing out new ids. Relays and
//! clients share this (a client's channel to its guard is the initiating side of one).
//!
//! Ids index a window that starts at the lowest id still in use, so lookups stay a subtraction
//! and an index even when ids are never reused. Multi-connection channels need that: a new
//! circuit's CREATE2 on one connection may overtake the DESTROY of an old circuit with the same
//! id on another, so those channels hand out ids in increasing order (as tor's random 31-bit
//! ids make reuse practically impossible) and the window slides past closed circuits.

use std::collections::VecDeque;

use crate::wire::INITIATOR_BIT;

/// The circuits of one channel by id, both the ids this side chose and those the peer chose.
/// The side that opened the channel's TLS link (the initiator) sets `INITIATOR_BIT` in the ids
/// it chooses, so the two never collide. `K` is the id of a circuit in its owner's table.
#[derive(Clone, Debug)]
pub(crate) struct ChannelCircuits<K> {
    initiator: bool,
    /// Freed ids of ours are given out again, the last freed first. Off for channels whose
    /// cells may overtake each other (see the module comment).
    pub reuse_ids: bool,
    /// Circuits by the id the peer chose (without the initiator bit).
    theirs: CircIdTable<K>,
    /// Circuits by the id this side chose.
    ours: CircIdTable<K>,
    /// Ids of ours that may be given out again.
    ours_free: Vec<u32>,
    /// The lowest id of ours never given out.
    next_id: u32,
    /// Circuits bound to the channel.
    count: u32,
}

impl<K: Copy> ChannelCircuits<K> {
    pub(crate) fn new(initiator: bool) -> Self {
        ChannelCircuits {
            initiator,
            reuse_ids: true,
            theirs: CircIdTable::default(),
            ours: CircIdTable::default(),
            ours_free: Vec::new(),
            next_id: 0,
            count: 0,
        }
    }

    /// Whether an id (with its initiator bit) is one this side chose.
    fn is_ours(&self, circ_id: u32) -> bool {
        (circ_id & INITIATOR_BIT != 0) == self.initiator
    }

    /// The circuit a cell's id names.
    pub(crate) fn lookup(&self, circ_id: u32) -> Option<K> {
        let table = if self.is_ours(circ_id) {
            &self.ours
        } else {
            &self.theirs
        };
        table.get(circ_id & !INITIATOR_BIT)
    }

    /// Binds the id the peer chose in its CREATE2 to `circ`; false if that id is taken.
    pub(crate) fn bind_theirs(&mut self, circ_id: u32, circ: K) -> bool {
        let i = circ_id & !INITIATOR_BIT;
        if !self.theirs.is_free(i) {
            return false;
        }
        self.theirs.set(i, circ);
        self.count += 1;
        true
    }

    /// A new id of ours for `circ`, with the initiator bit if we are the initiator.
    pub(crate) fn allocate(&mut self, circ: K) -> u32 {
        let i = match self.ours_free.pop() {
            Some(i) if self.reuse_ids => i,
            _ => {
                let i = self.next_id;
                self.next_id = (self.next_id + 1) & !INITIATOR_BIT;
                i
            }
        };
        self.ours.set(i, circ);
        self.count += 1;
        i | if self.initiator { INITIATOR_BIT } else { 0 }
    }

    /// Frees an id (either side's); true if a circuit had it.
    pub(crate) fn release(&mut self, circ_id: u32) -> bool {
        let i = circ_id & !INITIATOR_BIT;
        let ours = self.is_ours(circ_id);
        let had = if ours {
            self.ours.clear(i)
        } else {
            self.theirs.clear(i)
        };
        if had {
            self.count -= 1;
            if ours && self.reuse_ids {
                self.ours_free.push(i);
            }
        }
        had
    }

    /// How many circuits the channel carries.
    pub(crate) fn count(&self) -> u32 {
        self.count
    }

    /// The channel's circuits: ours in id order, then theirs.
    pub(crate) fn all(&self) -> impl Iterator<Item = K> + '_ {
        self.ours.circuits().chain(self.theirs.circuits())
    }
}

#[derive(Clone, Debug)]
struct CircIdTable<K> {
    /// The id of `slots[0]`.
    base: u32,
    /// The circuit of each id, `None` where no circuit has the id.
    slots: VecDeque<Option<K>>,
}

impl<K> Default for CircIdTable<K> {
    fn default() -> Self {
        CircIdTable {
            base: 0,
            slots: VecDeque::new(),
        }
    }
}

impl<K: Copy> CircIdTable<K> {
    /// The circuit with id `i`.
    pub(crate) fn get(&self, i: u32) -> Option<K> {
        let off = i.checked_sub(self.base)?;
        self.slots.get(off as usize).copied().flatten()
    }

    /// Whether id `i` names no circuit.
    pub(crate) fn is_free(&self, i: u32) -> bool {
        self.get(i).is_none()
    }

    /// Gives id `i` to circuit `circ`, widening the window as needed.
    pub(crate) fn set(&mut self, i: u32, circ: K) {
        if self.slots.is_empty() {
            self.base = i;
        }
        while i < self.base {
            self.slots.push_front(None);
            self.base -= 1;
        }
        let off = (i - self.base) as usize;
        if off >= self.slots.len() {
            self.slots.resize(off + 1, None);
        }
        self.slots[off] = Some(circ);
    }

    /// Frees id `i`; true if a circuit had it. The window drops freed ids at either end.
    pub(crate) fn clear(&mut self, i: u32) -> bool {
        let Some(off) = i.checked_sub(self.base) else {
            return false;
        };
        let Some(slot) = self.slots.get_mut(off as usize) else {
            return false;
        };
        let had = slot.take().is_some();
        while matches!(self.slots.front(), Some(None)) {
            self.slots.pop_front();
            self.base += 1;
        }
        while matches!(self.slots.back(), Some(None)) {
            self.slots.pop_back();
        }
        had
    }

    /// The circuits, in id order.
    pub(crate) fn circuits(&self) -> impl Iterator<Item = K> + '_ {
        self.slots.iter().copied().flatten()
    }

    /// Ids the window spans (live or freed in between).
    #[cfg(test)]
    pub(crate) fn span(&self) -> usize {
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
    fn each_side_finds_the_ids_both_chose() {
        let mut initiator = ChannelCircuits::new(true);
        let mut responder = ChannelCircuits::new(false);
        let a = initiator.allocate(10);
        assert_ne!(a & INITIATOR_BIT, 0);
        assert!(responder.bind_theirs(a, 20));
        assert!(!responder.bind_theirs(a, 21), "an id in use is refused");
        let b = responder.allocate(22);
        assert_eq!(b & INITIATOR_BIT, 0);
        assert_eq!(
            b & !INITIATOR_BIT,
            a & !INITIATOR_BIT,
            "the two sides' id spaces overlap"
        );
        assert_eq!(responder.lookup(a), Some(20));
        assert_eq!(responder.lookup(b), Some(22));
        assert_eq!(responder.count(), 2);
        assert_eq!(responder.all().collect::<Vec<_>>(), vec![22, 20]);
        assert!(responder.release(a));
        assert!(!responder.release(a));
        assert_eq!(responder.lookup(a), None);
        assert_eq!(responder.count(), 1);
    }

    #[test]
    fn freed_ids_are_reused_only_when_allowed() {
        let mut c = ChannelCircuits::new(true);
        let a = c.allocate(1);
        c.allocate(2);
        c.release(a);
        assert_eq!(c.allocate(3), a, "the last freed id comes back first");
        let mut c = ChannelCircuits::new(true);
        c.reuse_ids = false;
        let a = c.allocate(1);
        c.release(a);
        assert_ne!(c.allocate(2), a);
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
