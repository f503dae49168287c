//! [`IntervalMap`]: disjoint half-open address intervals, built by inserting intervals where a
//! later insertion overrides the parts of earlier ones it overlaps. This is what LLVM's
//! `DWARFUnit::updateAddressDieMap` computes for nested subroutine DIEs (children, inserted
//! after their parents, win) and, inserted in reverse unit order, what `DWARFDebugAranges`
//! computes for overlapping units (the lowest unit offset wins).

use std::collections::BTreeMap;

/// Builder: insert with override semantics, then [`IntervalMapBuilder::finish`].
#[derive(Debug)]
pub struct IntervalMapBuilder<T> {
    map: BTreeMap<u64, (u64, T)>,
}

impl<T: Copy> Default for IntervalMapBuilder<T> {
    fn default() -> Self {
        IntervalMapBuilder {
            map: BTreeMap::new(),
        }
    }
}

impl<T: Copy> IntervalMapBuilder<T> {
    /// Maps `[lo, hi)` to `value`, overriding what was there; empty intervals are ignored.
    pub fn insert(&mut self, lo: u64, hi: u64, value: T) {
        if lo >= hi {
            return;
        }
        let overlapping: Vec<(u64, u64, T)> = self
            .map
            .range(..hi)
            .rev()
            .take_while(|(_, (end, _))| *end > lo)
            .map(|(s, (e, v))| (*s, *e, *v))
            .collect();
        for (start, end, old) in overlapping {
            self.map.remove(&start);
            if start < lo {
                self.map.insert(start, (lo, old));
            }
            if end > hi {
                self.map.insert(hi, (end, old));
            }
        }
        self.map.insert(lo, (hi, value));
    }

    /// Flattens into a sorted vector.
    pub fn finish(self) -> IntervalMap<T> {
        IntervalMap {
            entries: self
                .map
                .into_iter()
                .map(|(lo, (hi, v))| (lo, hi, v))
                .collect(),
        }
    }
}

/// Disjoint sorted intervals `[lo, hi)` with a value each.
#[derive(Clone, Debug)]
pub struct IntervalMap<T> {
    entries: Vec<(u64, u64, T)>,
}

impl<T> Default for IntervalMap<T> {
    fn default() -> Self {
        IntervalMap {
            entries: Vec::new(),
        }
    }
}

impl<T: Copy> IntervalMap<T> {
    /// The value of the interval containing `addr`.
    pub fn get(&self, addr: u64) -> Option<T> {
        let i = self
            .entries
            .partition_point(|e| e.0 <= addr)
            .checked_sub(1)?;
        let (_, hi, v) = self.entries[i];
        (addr < hi).then_some(v)
    }

    /// All intervals, sorted.
    pub fn entries(&self) -> &[(u64, u64, T)] {
        &self.entries
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn later_insertions_override_nested_and_partial_overlaps() {
        let mut b = IntervalMapBuilder::default();
        b.insert(0x100, 0x200, 'a');
        b.insert(0x140, 0x160, 'b');
        b.insert(0x150, 0x158, 'c');
        b.insert(0x1f0, 0x210, 'd');
        b.insert(0x300, 0x300, 'e');
        let m = b.finish();
        assert_eq!(
            m.entries(),
            [
                (0x100, 0x140, 'a'),
                (0x140, 0x150, 'b'),
                (0x150, 0x158, 'c'),
                (0x158, 0x160, 'b'),
                (0x160, 0x1f0, 'a'),
                (0x1f0, 0x210, 'd'),
            ]
        );
        assert_eq!(m.get(0x157), Some('c'));
        assert_eq!(m.get(0x158), Some('b'));
        assert_eq!(m.get(0x210), None);
        assert_eq!(m.get(0xff), None);
    }
}
