//! Sets of byte ranges that are empty most of the time.

use std::fmt;

/// Sorted, disjoint, non-adjacent half-open ranges `[start, end)` behind one nullable pointer:
/// 8 bytes while empty, which is what out-of-order, acknowledged-ahead and lost ranges are on
/// a healthy stream. The list is allocated on the first range and released when it empties,
/// so only loss and reordering episodes allocate, never steady traffic.
// The extra allocation clippy warns about is the point: it buys the 16 bytes an inline empty
// `Vec` would cost every stream.
#[allow(clippy::box_collection)]
#[derive(Clone, Default, PartialEq, Eq)]
pub(crate) struct RangeSet(Option<Box<Vec<(u64, u64)>>>);

impl RangeSet {
    pub(crate) const fn new() -> Self {
        RangeSet(None)
    }

    pub(crate) fn as_slice(&self) -> &[(u64, u64)] {
        self.0.as_deref().map_or(&[], Vec::as_slice)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.as_slice().is_empty()
    }

    pub(crate) fn first(&self) -> Option<(u64, u64)> {
        self.as_slice().first().copied()
    }

    /// Total bytes covered.
    pub(crate) fn total(&self) -> u64 {
        self.as_slice().iter().map(|&(s, e)| e - s).sum()
    }

    fn release_if_empty(&mut self) {
        if self.0.as_ref().is_some_and(|v| v.is_empty()) {
            self.0 = None;
        }
    }

    /// Adds `[start, end)`; returns how many bytes were not covered before.
    pub(crate) fn insert(&mut self, start: u64, end: u64) -> u64 {
        if start >= end {
            return 0;
        }
        let before = self.overlap(start, end);
        let v = self.0.get_or_insert_with(Box::default);
        // First range that ends at or after `start` (touching ranges merge).
        let i = v.partition_point(|&(_, e)| e < start);
        let mut j = i;
        let mut s = start;
        let mut e = end;
        while j < v.len() && v[j].0 <= end {
            s = s.min(v[j].0);
            e = e.max(v[j].1);
            j += 1;
        }
        v.splice(i..j, std::iter::once((s, e)));
        (end - start) - before
    }

    /// Removes `[start, end)`; returns how many bytes were covered.
    pub(crate) fn remove(&mut self, start: u64, end: u64) -> u64 {
        if start >= end || self.is_empty() {
            return 0;
        }
        let removed = self.overlap(start, end);
        if removed == 0 {
            return 0;
        }
        let v = self.0.as_mut().expect("non-empty");
        let i = v.partition_point(|&(_, e)| e <= start);
        let mut j = i;
        while j < v.len() && v[j].0 < end {
            j += 1;
        }
        let left = (v[i].0 < start).then_some((v[i].0, start));
        let right = (v[j - 1].1 > end).then_some((end, v[j - 1].1));
        v.splice(i..j, left.into_iter().chain(right));
        self.release_if_empty();
        removed
    }

    /// Bytes of `[start, end)` the set covers.
    pub(crate) fn overlap(&self, start: u64, end: u64) -> u64 {
        let v = self.as_slice();
        let i = v.partition_point(|&(_, e)| e <= start);
        v[i..]
            .iter()
            .take_while(|&&(s, _)| s < end)
            .map(|&(s, e)| e.min(end) - s.max(start))
            .sum()
    }

    /// Removes and returns the first range if it starts at or below `at` (for advancing a
    /// contiguous prefix).
    pub(crate) fn pop_if_starts_by(&mut self, at: u64) -> Option<(u64, u64)> {
        let (s, e) = self.first()?;
        if s > at {
            return None;
        }
        let v = self.0.as_mut().expect("non-empty");
        v.remove(0);
        self.release_if_empty();
        Some((s, e))
    }

    /// Takes up to `max` bytes from the front of the first range.
    pub(crate) fn take_front(&mut self, max: u64) -> Option<(u64, u64)> {
        let (s, e) = self.first()?;
        if max == 0 {
            return None;
        }
        let end = e.min(s + max);
        self.remove(s, end);
        Some((s, end))
    }

    pub(crate) fn heap_bytes(&self) -> usize {
        self.0.as_ref().map_or(0, |v| {
            std::mem::size_of::<Vec<(u64, u64)>>() + v.capacity() * 16
        })
    }

    /// Asserts the invariants: sorted, disjoint, non-adjacent, non-empty ranges.
    pub(crate) fn check(&self) {
        let v = self.as_slice();
        assert!(self.0.is_none() || !v.is_empty(), "empty list kept");
        for w in v.windows(2) {
            assert!(w[0].1 < w[1].0, "ranges {v:?}");
        }
        for &(s, e) in v {
            assert!(s < e, "ranges {v:?}");
        }
    }
}

impl fmt::Debug for RangeSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.as_slice()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insert_merge_remove() {
        let mut r = RangeSet::new();
        assert_eq!(std::mem::size_of::<RangeSet>(), 8);
        assert_eq!(r.insert(10, 20), 10);
        assert_eq!(r.insert(30, 40), 10);
        assert_eq!(r.insert(15, 32), 10);
        assert_eq!(r.as_slice(), &[(10, 40)]);
        assert_eq!(r.insert(40, 45), 5);
        assert_eq!(r.as_slice(), &[(10, 45)]);
        assert_eq!(r.remove(20, 25), 5);
        assert_eq!(r.as_slice(), &[(10, 20), (25, 45)]);
        assert_eq!(r.overlap(0, 100), 30);
        assert_eq!(r.take_front(4), Some((10, 14)));
        assert_eq!(r.remove(0, 30), 11);
        assert_eq!(r.as_slice(), &[(30, 45)]);
        assert_eq!(r.pop_if_starts_by(29), None);
        assert_eq!(r.pop_if_starts_by(30), Some((30, 45)));
        assert!(r.is_empty());
        assert_eq!(r.heap_bytes(), 0);
        r.check();
    }
}
