//! Storage for lists that are empty on an idle connection.

use std::fmt;
use std::ops::Deref;

/// A vector kept behind a single nullable pointer, so that while it is empty and released it
/// costs 8 bytes of connection state instead of 24. The SACK scoreboard and the reassembly
/// ranges only hold anything during a loss episode; allocating on the first hole and releasing
/// once they empty keeps millions of idle connections small while steady-state traffic never
/// allocates.
// The extra allocation clippy warns about is the point: it is made once per loss episode and
// buys the 16 bytes an inline empty `Vec` would cost every connection.
#[allow(clippy::box_collection)]
#[derive(Clone, Default, PartialEq, Eq)]
pub(crate) struct LazyVec<T>(Option<Box<Vec<T>>>);

impl<T> LazyVec<T> {
    pub(crate) const fn new() -> Self {
        LazyVec(None)
    }

    /// The vector for modification, allocated on first use. Only for paths that are about to
    /// store something, so that reading or trimming an empty list never allocates.
    pub(crate) fn vec_mut(&mut self) -> &mut Vec<T> {
        self.0.get_or_insert_with(Box::default)
    }

    /// The vector for modification if it is allocated.
    pub(crate) fn get_mut(&mut self) -> Option<&mut Vec<T>> {
        self.0.as_deref_mut()
    }

    /// Frees the storage once the list is empty.
    pub(crate) fn release_if_empty(&mut self) {
        if self.0.as_ref().is_some_and(|v| v.is_empty()) {
            self.0 = None;
        }
    }

    pub(crate) fn heap_bytes(&self) -> usize {
        self.0.as_ref().map_or(0, |v| {
            std::mem::size_of::<Vec<T>>() + v.capacity() * std::mem::size_of::<T>()
        })
    }
}

impl<T> Deref for LazyVec<T> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        self.0.as_deref().map_or(&[], Vec::as_slice)
    }
}

impl<T: fmt::Debug> fmt::Debug for LazyVec<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl<T: PartialEq> PartialEq<Vec<T>> for LazyVec<T> {
    fn eq(&self, other: &Vec<T>) -> bool {
        **self == **other
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocates_only_while_non_empty() {
        let mut v: LazyVec<(u64, u64)> = LazyVec::new();
        assert_eq!(v.heap_bytes(), 0);
        assert!(v.get_mut().is_none());
        v.release_if_empty();
        v.vec_mut().push((1, 2));
        assert_eq!(*v, [(1, 2)]);
        assert!(v.heap_bytes() > 0);
        v.release_if_empty();
        assert!(v.heap_bytes() > 0);
        v.get_mut().unwrap().clear();
        v.release_if_empty();
        assert_eq!(v.heap_bytes(), 0);
        assert!(v.is_empty());
        assert_eq!(std::mem::size_of::<LazyVec<(u64, u64)>>(), 8);
    }
}
