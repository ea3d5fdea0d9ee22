//! A table of entries under small integer ids, whose freed ids are reused.
//!
//! A model's circuits, streams and downloads come and go by the million over a run, and the
//! ids that name them travel in events and in other tables. A [`Slab`] gives each new entry
//! the most recently freed id (or a new one at the end), so its table is as large as the most
//! entries alive at once rather than all entries ever made, and an id is a plain index. The
//! order in which ids are reused is part of a run's determinism: it is always last freed,
//! first reused.
//!
//! A slot is read as an `Option`: `slab[id]` is `None` once the entry is removed, which is how
//! the models tell an id whose entry has gone from a live one.

use std::ops::{Index, IndexMut};

use crate::heap::push_growing_by_eighths;

/// Entries under reusable `u32` ids; see the module doc.
#[derive(Clone, Debug)]
pub struct Slab<T> {
    slots: Vec<Option<T>>,
    /// Freed ids, the last freed on top.
    free: Vec<u32>,
    live: u32,
}

impl<T> Default for Slab<T> {
    fn default() -> Self {
        Slab {
            slots: Vec::new(),
            free: Vec::new(),
            live: 0,
        }
    }
}

impl<T> Slab<T> {
    /// An empty table, which allocates nothing until the first insert.
    pub fn new() -> Self {
        Self::default()
    }

    /// Stores `value` under the most recently freed id, or a new one; returns the id.
    pub fn insert(&mut self, value: T) -> u32 {
        self.live += 1;
        match self.free.pop() {
            Some(id) => {
                self.slots[id as usize] = Some(value);
                id
            }
            None => {
                push_growing_by_eighths(&mut self.slots, Some(value));
                (self.slots.len() - 1) as u32
            }
        }
    }

    /// Takes the entry under `id` out and frees the id; `None` (and nothing freed) if there
    /// is none.
    pub fn remove(&mut self, id: u32) -> Option<T> {
        let value = self.slots.get_mut(id as usize)?.take()?;
        self.free.push(id);
        self.live -= 1;
        Some(value)
    }

    /// Entries alive.
    pub fn len(&self) -> usize {
        self.live as usize
    }

    /// Whether no entry is alive (freed slots may remain).
    pub fn is_empty(&self) -> bool {
        self.live == 0
    }

    /// Every slot in id order, the free ones `None`.
    pub fn slots(&self) -> &[Option<T>] {
        &self.slots
    }

    /// The live entries in id order.
    pub fn values(&self) -> impl Iterator<Item = &T> {
        self.slots.iter().flatten()
    }
}

impl<T> Index<u32> for Slab<T> {
    type Output = Option<T>;
    /// The slot of `id`: `None` if its entry was removed. Panics for an id never given out.
    #[inline]
    fn index(&self, id: u32) -> &Option<T> {
        &self.slots[id as usize]
    }
}

impl<T> IndexMut<u32> for Slab<T> {
    /// The slot of `id`, to change its entry in place. Use [`Slab::remove`] to free it:
    /// emptying the slot through here would leave its id out of reuse.
    #[inline]
    fn index_mut(&mut self, id: u32) -> &mut Option<T> {
        &mut self.slots[id as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn freed_ids_are_reused_last_freed_first() {
        let mut s = Slab::new();
        let ids: Vec<u32> = (0..4).map(|i| s.insert(i * 10)).collect();
        assert_eq!(ids, [0, 1, 2, 3]);
        assert_eq!(s.remove(1), Some(10));
        assert_eq!(s.remove(3), Some(30));
        assert_eq!(s.remove(3), None, "removed already: nothing freed twice");
        assert_eq!(s.len(), 2);
        assert_eq!(s[1], None);
        assert_eq!(s.insert(99), 3);
        assert_eq!(s.insert(98), 1);
        assert_eq!(s.insert(97), 4);
        assert_eq!(s.values().copied().collect::<Vec<_>>(), [0, 98, 20, 99, 97]);
        assert_eq!(s.slots().len(), 5);
        assert_eq!(s.remove(17), None, "an id never given out");
    }
}
