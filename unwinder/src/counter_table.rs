//! [`CounterTable`]: counters as the unwinder adds them, before they become a
//! [`CounterSet`].
//!
//! Unwinding adds a range and a branch counter per LBR entry, hundreds of thousands for a
//! large input, to few distinct counters. Adding into a context's ordered maps costs a
//! tree search each; here every context is interned once per frame and each counter is
//! one hash-table update keyed by (context, start, end). [`CounterTable::into_counter_set`]
//! builds the ordered maps once, from sorted counters.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::summing_cache::SummingCache;
use crate::{ContextCounters, ContextKey, CounterKind, CounterSet};
use rustc_hash::FxBuildHasher;

/// Index of an interned context in its [`CounterTable`].
pub type ContextId = u32;

/// Index of a walk ([`CounterTable::walk`]) in its [`CounterTable`].
pub type WalkId = u32;

/// Range and branch counters keyed by interned context.
#[derive(Debug)]
pub struct CounterTable {
    /// Tells this table apart from every other (see [`CounterTable::id`]).
    id: u64,
    kind: CounterKind,
    ids: HashMap<ContextKey, ContextId, FxBuildHasher>,
    keys: Vec<ContextKey>,
    ranges: HashMap<(ContextId, u64, u64), u64, FxBuildHasher>,
    branches: HashMap<(ContextId, u64, u64), u64, FxBuildHasher>,
    /// Additions on their way to `ranges` and `branches` (flushed before they are read).
    range_sums: SummingCache<(ContextId, u64, u64)>,
    branch_sums: SummingCache<(ContextId, u64, u64)>,
    /// The ranges of every walk, walk after walk; walk `w`'s are
    /// `walk_ranges[walk_spans[w].0..walk_spans[w].1]`.
    walk_ranges: Vec<(ContextId, u64, u64)>,
    walk_spans: Vec<(u32, u32)>,
    /// Per walk, the sum added since its ranges last got it (`None`: nothing added).
    walk_sums: Vec<Option<u64>>,
    /// The walks with a sum, each once.
    walks_added: Vec<WalkId>,
}

/// The next [`CounterTable::id`].
static NEXT_TABLE_ID: AtomicU64 = AtomicU64::new(0);

impl Default for CounterTable {
    fn default() -> Self {
        CounterTable::new(CounterKind::default())
    }
}

impl Clone for CounterTable {
    /// A copy with an id of its own: the two tables intern new contexts apart.
    fn clone(&self) -> Self {
        CounterTable {
            id: NEXT_TABLE_ID.fetch_add(1, Ordering::Relaxed),
            kind: self.kind,
            ids: self.ids.clone(),
            keys: self.keys.clone(),
            ranges: self.ranges.clone(),
            branches: self.branches.clone(),
            range_sums: self.range_sums.clone(),
            branch_sums: self.branch_sums.clone(),
            walk_ranges: self.walk_ranges.clone(),
            walk_spans: self.walk_spans.clone(),
            walk_sums: self.walk_sums.clone(),
            walks_added: self.walks_added.clone(),
        }
    }
}

impl CounterTable {
    /// An empty table of `kind`.
    pub fn new(kind: CounterKind) -> CounterTable {
        CounterTable {
            id: NEXT_TABLE_ID.fetch_add(1, Ordering::Relaxed),
            kind,
            ids: HashMap::default(),
            keys: Vec::new(),
            ranges: HashMap::default(),
            branches: HashMap::default(),
            range_sums: SummingCache::default(),
            branch_sums: SummingCache::default(),
            walk_ranges: Vec::new(),
            walk_spans: Vec::new(),
            walk_sums: Vec::new(),
            walks_added: Vec::new(),
        }
    }

    /// A number no other table of the process has: what a caller that remembers the
    /// [`ContextId`]s of a table checks they belong to (ids stay valid as long as the
    /// table lives; interning only adds).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// True when no context is interned.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The id of `key`, interned when new.
    pub fn context(&mut self, key: &[u64]) -> ContextId {
        if let Some(&id) = self.ids.get(key) {
            return id;
        }
        let id = self.keys.len() as ContextId;
        self.keys.push(key.to_vec());
        self.ids.insert(key.to_vec(), id);
        id
    }

    /// Adds `n` to the range `[start, end]` of `context` (counts wrap like llvm-profgen's
    /// `uint64_t`).
    #[inline]
    pub fn add_range(&mut self, context: ContextId, start: u64, end: u64, n: u64) {
        self.range_sums
            .add((context, start, end), n, &mut self.ranges);
    }

    /// Adds `n` to the branch `source → target` of `context`.
    #[inline]
    pub fn add_branch(&mut self, context: ContextId, source: u64, target: u64, n: u64) {
        self.branch_sums
            .add((context, source, target), n, &mut self.branches);
    }

    /// Registers a walk: ranges `(context, start, end)` that are always added together
    /// (the pieces of one range of a line-context unwinding, one per inline context or
    /// instruction), which [`CounterTable::add_walk`] then adds in one step.
    pub fn walk(&mut self, ranges: &[(ContextId, u64, u64)]) -> WalkId {
        let start = self.walk_ranges.len() as u32;
        self.walk_ranges.extend_from_slice(ranges);
        self.walk_spans.push((start, self.walk_ranges.len() as u32));
        self.walk_sums.push(None);
        (self.walk_spans.len() - 1) as WalkId
    }

    /// Number of ranges of all registered walks.
    pub fn walk_pieces(&self) -> usize {
        self.walk_ranges.len()
    }

    /// Adds `n` to every range of `walk` (added to the ranges when the table is read:
    /// the same sums, wrapping, as adding each range every time).
    #[inline]
    pub fn add_walk(&mut self, walk: WalkId, n: u64) {
        match &mut self.walk_sums[walk as usize] {
            Some(sum) => *sum = sum.wrapping_add(n),
            none => {
                *none = Some(n);
                self.walks_added.push(walk);
            }
        }
    }

    /// Sends the sums on their way to the maps there.
    fn flush(&mut self) {
        for w in self.walks_added.drain(..) {
            let Some(n) = self.walk_sums[w as usize].take() else {
                continue;
            };
            let (start, end) = self.walk_spans[w as usize];
            for &(c, s, e) in &self.walk_ranges[start as usize..end as usize] {
                self.range_sums.add((c, s, e), n, &mut self.ranges);
            }
        }
        self.range_sums.flush_into(&mut self.ranges);
        self.branch_sums.flush_into(&mut self.branches);
    }

    /// What the keys mean.
    pub fn kind(&self) -> CounterKind {
        self.kind
    }

    /// Number of interned contexts.
    pub fn context_count(&self) -> usize {
        self.keys.len()
    }

    /// Distinct counters in the table's maps (those still summing on their way there
    /// not included): the size of what [`CounterTable::take_counter_set`] would give.
    pub fn counter_count(&self) -> usize {
        self.ranges.len() + self.branches.len()
    }

    /// The counters added since the table was made or last taken, as a [`CounterSet`] of
    /// the contexts that have any: what [`CounterTable::into_counter_set`] gives for a
    /// table that interned only those. The table keeps its interned contexts (and their
    /// ids) and no counter.
    pub fn take_counter_set(&mut self) -> CounterSet {
        self.flush();
        // Per context with counters: its ranges and branches.
        let mut slot_of = vec![u32::MAX; self.keys.len()];
        type Counters = (ContextId, Vec<((u64, u64), u64)>, Vec<((u64, u64), u64)>);
        let mut taken: Vec<Counters> = Vec::new();
        let mut slot = |c: ContextId, taken: &mut Vec<Counters>| {
            let s = &mut slot_of[c as usize];
            if *s == u32::MAX {
                *s = taken.len() as u32;
                taken.push((c, Vec::new(), Vec::new()));
            }
            *s as usize
        };
        for ((c, s, e), n) in self.ranges.drain() {
            let i = slot(c, &mut taken);
            taken[i].1.push(((s, e), n));
        }
        for ((c, s, t), n) in self.branches.drain() {
            let i = slot(c, &mut taken);
            taken[i].2.push(((s, t), n));
        }
        let mut set = CounterSet::new(self.kind);
        set.contexts.reserve(taken.len());
        for (c, r, b) in taken {
            set.contexts.insert(
                self.keys[c as usize].clone(),
                ContextCounters {
                    ranges: ordered(r),
                    branches: ordered(b),
                },
            );
        }
        set
    }

    /// Adds every counter of `other`.
    pub fn merge(&mut self, mut other: CounterTable) {
        other.flush();
        let ids: Vec<ContextId> = other.keys.iter().map(|k| self.context(k)).collect();
        for ((c, s, e), n) in other.ranges {
            self.add_range(ids[c as usize], s, e, n);
        }
        for ((c, s, t), n) in other.branches {
            self.add_branch(ids[c as usize], s, t, n);
        }
    }

    /// The counters as a [`CounterSet`]: every interned context with its counters.
    pub fn into_counter_set(mut self) -> CounterSet {
        self.flush();
        let mut ranges: Vec<Vec<((u64, u64), u64)>> = vec![Vec::new(); self.keys.len()];
        for ((c, s, e), n) in self.ranges {
            ranges[c as usize].push(((s, e), n));
        }
        let mut branches: Vec<Vec<((u64, u64), u64)>> = vec![Vec::new(); self.keys.len()];
        for ((c, s, t), n) in self.branches {
            branches[c as usize].push(((s, t), n));
        }
        let mut set = CounterSet::new(self.kind);
        set.contexts.reserve(self.keys.len());
        for ((key, r), b) in self.keys.into_iter().zip(ranges).zip(branches) {
            set.contexts.insert(
                key,
                ContextCounters {
                    ranges: ordered(r),
                    branches: ordered(b),
                },
            );
        }
        set
    }
}

/// Counters sorted into their map (built from sorted entries at once).
fn ordered(mut v: Vec<((u64, u64), u64)>) -> BTreeMap<(u64, u64), u64> {
    v.sort_unstable_by_key(|&(k, _)| k);
    v.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Taking the counters gives what a table of only that period's additions gives, and
    /// keeps the contexts' ids.
    #[test]
    fn taken_counters_are_those_since_the_last_take() {
        let mut kept = CounterTable::new(CounterKind::LineContext);
        let a = kept.context(&[0x10]);
        let b = kept.context(&[0x10, 0x20]);
        kept.add_range(a, 1, 2, 3);
        kept.add_branch(b, 5, 6, 1);
        let mut first = CounterTable::new(CounterKind::LineContext);
        let fa = first.context(&[0x10]);
        first.add_range(fa, 1, 2, 3);
        let fb = first.context(&[0x10, 0x20]);
        first.add_branch(fb, 5, 6, 1);
        assert_eq!(kept.take_counter_set(), first.into_counter_set());
        // Only b is counted now: a is interned but has no counter, and is left out.
        kept.add_range(b, 7, 8, u64::MAX);
        kept.add_range(b, 7, 8, 2);
        assert_eq!(kept.context(&[0x10, 0x20]), b);
        let mut second = CounterTable::new(CounterKind::LineContext);
        let sb = second.context(&[0x10, 0x20]);
        second.add_range(sb, 7, 8, 1);
        assert_eq!(kept.take_counter_set(), second.into_counter_set());
        assert_eq!(kept.context_count(), 2);
        assert!(kept.take_counter_set().contexts.is_empty());
        assert_ne!(kept.id(), kept.clone().id());
    }

    #[test]
    fn counters_sum_per_context_and_merge() {
        let mut a = CounterTable::new(CounterKind::ProbeContext);
        let main = a.context(&[0x10]);
        let leaf = a.context(&[0x10, 0x20]);
        assert_eq!(a.context(&[0x10]), main);
        a.add_range(main, 1, 2, 3);
        a.add_range(main, 1, 2, 4);
        a.add_branch(leaf, 5, 6, u64::MAX);
        let mut b = CounterTable::new(CounterKind::ProbeContext);
        let leaf_b = b.context(&[0x10, 0x20]);
        b.add_branch(leaf_b, 5, 6, 2);
        b.add_range(leaf_b, 0, 9, 1);
        a.merge(b);
        let set = a.into_counter_set();
        assert_eq!(set.kind, CounterKind::ProbeContext);
        assert_eq!(set.contexts.len(), 2);
        let m = &set.contexts[&vec![0x10]];
        assert_eq!(m.ranges.iter().collect::<Vec<_>>(), [(&(1, 2), &7)]);
        assert!(m.branches.is_empty());
        let l = &set.contexts[&vec![0x10, 0x20]];
        // u64::MAX + 2 wraps to 1.
        assert_eq!(l.branches.iter().collect::<Vec<_>>(), [(&(5, 6), &1)]);
        assert_eq!(l.ranges.iter().collect::<Vec<_>>(), [(&(0, 9), &1)]);
    }
}
