//! A table of entries under typed, generation-checked ids whose slots are reused.
//!
//! A model's circuits, streams, connections and sockets come and go by the million over a run,
//! and the ids that name them travel in events, timers and other tables. A [`Slab`] gives each
//! new entry the most recently freed slot (or a new one at the end), so it is as large as the
//! most entries alive at once rather than all entries ever made. The order in which slots are
//! reused is part of a run's determinism: always last freed, first reused.
//!
//! An id names a slot *and* the occupant it was given to: each slot counts its occupants (its
//! generation), and an id whose generation is not the slot's current one finds nothing. So an
//! id kept in a timer or a list after its entry went can never reach a stranger that took the
//! slot since, without any check of the caller's own.
//!
//! Each table has its own id type, declared with [`slab_key!`](crate::slab_key), so a
//! circuit's id cannot be used where a stream's is meant; [`Slab::new`] takes the key type as
//! its first parameter.

use std::marker::PhantomData;
use std::ops::{Index, IndexMut};

use crate::heap::push_growing_by_eighths;

/// An id into a [`Slab`]: a slot and the generation of the entry it was given to. Declare
/// one with [`slab_key!`](crate::slab_key).
pub trait Key: Copy {
    /// The id of generation `generation` in slot `slot`.
    fn from_parts(slot: u32, generation: u32) -> Self;
    /// Its slot, which also indexes any side table kept per slot.
    fn slot(self) -> u32;
    /// Which occupant of the slot it names.
    fn generation(self) -> u32;
}

/// Declares a [`Key`] type: a copyable id of a slot and a generation, ordered by slot first.
///
/// ```
/// onionlab_engine::slab_key! {
///     /// A widget's id.
///     pub struct WidgetId;
/// }
/// let mut widgets = onionlab_engine::slab::Slab::<WidgetId, &str>::new();
/// let w = widgets.insert("sprocket");
/// assert_eq!(widgets[w], "sprocket");
/// ```
#[macro_export]
macro_rules! slab_key {
    ($(#[$meta:meta])* $vis:vis struct $name:ident;) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        $vis struct $name {
            slot: u32,
            generation: u32,
        }

        impl $crate::slab::Key for $name {
            #[inline]
            fn from_parts(slot: u32, generation: u32) -> Self {
                $name { slot, generation }
            }
            #[inline]
            fn slot(self) -> u32 {
                self.slot
            }
            #[inline]
            fn generation(self) -> u32 {
                self.generation
            }
        }
    };
}

/// `repr(C)`: the generation first, in the cache line where the entry starts, since every
/// lookup reads it before the entry.
///
/// The generation counts both arrivals and departures: odd while the slot holds an entry,
/// even while it is free. Every id is given out with an odd generation, so an id whose
/// generation matches the slot's names a live entry: indexing needs that one comparison.
#[repr(C)]
#[derive(Clone, Debug)]
struct Slot<T> {
    generation: u32,
    value: Option<T>,
}

impl<T> Slot<T> {
    /// The entry, for an id whose generation matched the slot's (so the slot is occupied).
    #[inline]
    fn occupant(&self) -> &T {
        debug_assert!(self.generation & 1 == 1 && self.value.is_some());
        // SAFETY: the generation is odd exactly while `value` is `Some` (`insert` and
        // `remove` change both together), and ids carry odd generations only.
        unsafe { self.value.as_ref().unwrap_unchecked() }
    }

    /// As [`Slot::occupant`], to change in place.
    #[inline]
    fn occupant_mut(&mut self) -> &mut T {
        debug_assert!(self.generation & 1 == 1 && self.value.is_some());
        // SAFETY: as in `occupant`.
        unsafe { self.value.as_mut().unwrap_unchecked() }
    }
}

/// Entries of type `T` under ids of type `K`; see the module doc.
#[derive(Clone, Debug)]
pub struct Slab<K, T> {
    slots: Vec<Slot<T>>,
    /// Freed slots, the last freed on top.
    free: Vec<u32>,
    live: u32,
    key: PhantomData<K>,
}

impl<K: Key, T> Default for Slab<K, T> {
    fn default() -> Self {
        Slab {
            slots: Vec::new(),
            free: Vec::new(),
            live: 0,
            key: PhantomData,
        }
    }
}

impl<K: Key, T> Slab<K, T> {
    /// An empty table, which allocates nothing until the first insert.
    pub fn new() -> Self {
        Self::default()
    }

    /// Stores `value` in the most recently freed slot, or a new one; returns its id.
    pub fn insert(&mut self, value: T) -> K {
        self.live += 1;
        let slot = match self.free.pop() {
            Some(slot) => slot,
            None => {
                push_growing_by_eighths(
                    &mut self.slots,
                    Slot {
                        generation: 0,
                        value: None,
                    },
                );
                (self.slots.len() - 1) as u32
            }
        };
        let entry = &mut self.slots[slot as usize];
        entry.value = Some(value);
        entry.generation = entry.generation.wrapping_add(1);
        K::from_parts(slot, entry.generation)
    }

    /// Takes the entry of `id` out and frees its slot for a new generation; `None` (and
    /// nothing freed) if `id` names no live entry.
    pub fn remove(&mut self, id: K) -> Option<T> {
        let entry = self.slots.get_mut(id.slot() as usize)?;
        if entry.generation != id.generation() {
            return None;
        }
        let value = entry.value.take()?;
        entry.generation = entry.generation.wrapping_add(1);
        self.free.push(id.slot());
        self.live -= 1;
        Some(value)
    }

    /// The entry of `id`, unless it has been removed.
    #[inline]
    pub fn get(&self, id: K) -> Option<&T> {
        let entry = self.slots.get(id.slot() as usize)?;
        if entry.generation == id.generation() {
            entry.value.as_ref()
        } else {
            None
        }
    }

    /// The entry of `id` to change in place, unless it has been removed.
    #[inline]
    pub fn get_mut(&mut self, id: K) -> Option<&mut T> {
        let entry = self.slots.get_mut(id.slot() as usize)?;
        if entry.generation == id.generation() {
            entry.value.as_mut()
        } else {
            None
        }
    }

    /// Whether `id` names a live entry.
    #[inline]
    pub fn contains(&self, id: K) -> bool {
        self.get(id).is_some()
    }

    /// The id of the entry now in slot `slot`, if one is: to walk the table by slot while
    /// changing it.
    #[inline]
    pub fn id_at(&self, slot: u32) -> Option<K> {
        let entry = self.slots.get(slot as usize)?;
        entry
            .value
            .as_ref()
            .map(|_| K::from_parts(slot, entry.generation))
    }

    /// Asks the cache for the slot of `id`, all of its entry, ahead of a lookup.
    #[inline]
    pub fn prefetch(&self, id: K) {
        if let Some(entry) = self.slots.get(id.slot() as usize) {
            crate::prefetch(entry as *const Slot<T>, std::mem::size_of::<Slot<T>>());
        }
    }

    /// Entries alive.
    pub fn len(&self) -> usize {
        self.live as usize
    }

    /// Whether no entry is alive (freed slots may remain).
    pub fn is_empty(&self) -> bool {
        self.live == 0
    }

    /// Slots allocated, live or free: every live id's slot is below this.
    pub fn slots(&self) -> u32 {
        self.slots.len() as u32
    }

    /// The live entries with their ids, in slot order.
    pub fn iter(&self) -> impl Iterator<Item = (K, &T)> {
        self.slots.iter().enumerate().filter_map(|(slot, entry)| {
            let value = entry.value.as_ref()?;
            Some((K::from_parts(slot as u32, entry.generation), value))
        })
    }

    /// The live entries in slot order.
    pub fn values(&self) -> impl Iterator<Item = &T> {
        self.slots.iter().filter_map(|entry| entry.value.as_ref())
    }
}

impl<K: Key, T> Index<K> for Slab<K, T> {
    type Output = T;
    /// The entry of `id`. Panics if it has been removed: a caller that may hold an id whose
    /// entry went uses [`Slab::get`].
    #[inline]
    #[track_caller]
    fn index(&self, id: K) -> &T {
        match self.slots.get(id.slot() as usize) {
            Some(entry) if entry.generation == id.generation() => entry.occupant(),
            _ => panic!("slab id in slot {} names no live entry", id.slot()),
        }
    }
}

impl<K: Key, T> IndexMut<K> for Slab<K, T> {
    /// The entry of `id`, to change in place. Panics if it has been removed.
    #[inline]
    #[track_caller]
    fn index_mut(&mut self, id: K) -> &mut T {
        match self.slots.get_mut(id.slot() as usize) {
            Some(entry) if entry.generation == id.generation() => entry.occupant_mut(),
            _ => panic!("slab id in slot {} names no live entry", id.slot()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    crate::slab_key! {
        /// A test id.
        struct Id;
    }

    fn slot_of(id: Id) -> u32 {
        id.slot()
    }

    #[test]
    fn freed_slots_are_reused_last_freed_first() {
        let mut s = Slab::<Id, u32>::new();
        let ids: Vec<Id> = (0..4).map(|i| s.insert(i * 10)).collect();
        assert_eq!(
            ids.iter().map(|&i| slot_of(i)).collect::<Vec<_>>(),
            [0, 1, 2, 3]
        );
        assert_eq!(s.remove(ids[1]), Some(10));
        assert_eq!(s.remove(ids[3]), Some(30));
        assert_eq!(
            s.remove(ids[3]),
            None,
            "removed already: nothing freed twice"
        );
        assert_eq!(s.len(), 2);
        assert_eq!(s.get(ids[1]), None);
        let a = s.insert(99);
        let b = s.insert(98);
        let c = s.insert(97);
        assert_eq!((slot_of(a), slot_of(b), slot_of(c)), (3, 1, 4));
        assert_eq!(s.values().copied().collect::<Vec<_>>(), [0, 98, 20, 99, 97]);
        assert_eq!(s.slots(), 5);
        assert_eq!(
            s.remove(Id::from_parts(17, 0)),
            None,
            "an id never given out"
        );
    }

    #[test]
    fn an_id_whose_entry_went_never_finds_the_slots_next_occupant() {
        let mut s = Slab::<Id, &str>::new();
        let old = s.insert("old");
        s.remove(old);
        let new = s.insert("new");
        assert_eq!(slot_of(old), slot_of(new), "the slot is reused");
        assert_ne!(old, new, "under a new generation");
        assert_eq!(s.get(old), None);
        assert!(!s.contains(old));
        assert_eq!(s.remove(old), None, "a stale id frees nothing");
        assert_eq!(s[new], "new");
        assert_eq!(s.id_at(slot_of(new)), Some(new));
        assert_eq!(s.iter().collect::<Vec<_>>(), [(new, &"new")]);
        *s.get_mut(new).unwrap() = "newer";
        assert_eq!(s.iter().map(|(id, _)| id).collect::<Vec<_>>(), [new]);
        assert_eq!(s[new], "newer");
        s.remove(new);
        assert_eq!(s.id_at(slot_of(new)), None);
        assert!(s.is_empty());
    }

    /// A lookup reads the generation and then the entry: both in the slot's first cache line.
    #[test]
    fn a_slots_generation_sits_before_its_entry() {
        use std::mem::offset_of;
        assert_eq!(offset_of!(Slot<[u64; 60]>, generation), 0);
        assert!(offset_of!(Slot<[u64; 60]>, value) <= 8);
    }

    #[test]
    #[should_panic(expected = "names no live entry")]
    fn indexing_with_a_stale_id_panics() {
        let mut s = Slab::<Id, u8>::new();
        let id = s.insert(1);
        s.remove(id);
        let _ = s[id];
    }
}
