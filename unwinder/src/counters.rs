//! The counter model shared by `convert` and the live daemon: range and branch counters per
//! calling context, in the profiled binary's preferred addresses.

use std::collections::{BTreeMap, HashMap};

use rustc_hash::FxBuildHasher;

/// A calling context as addresses, outermost caller first.
///
/// * [`CounterKind::Flat`]: always empty.
/// * [`CounterKind::ProbeContext`]: the call-site addresses of the frames above the frame
///   the counters belong to (llvm-profgen's `AddrBasedCtxKey`), recursion-compressed.
/// * [`CounterKind::LineContext`]: the frame addresses including the frame the counters
///   belong to; the symbolizer expands it into inline frames (`StringBasedCtxKey`).
///
/// [`crate::EXTERNAL_ADDR`] never appears in a key: a context is truncated there.
pub type ContextKey = Vec<u64>;

/// What the keys of a [`CounterSet`] mean.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum CounterKind {
    /// LBR-only (non-CS) counters: one empty context.
    #[default]
    Flat,
    /// Context-sensitive counters for a binary with pseudo probes.
    ProbeContext,
    /// Context-sensitive counters for a binary described by DWARF line tables.
    LineContext,
}

/// Range and branch counters of one context.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct ContextCounters {
    /// `(start, end)` inclusive fall-through ranges → count.
    pub ranges: BTreeMap<(u64, u64), u64>,
    /// `(source, target)` taken branches → count. The source may be
    /// [`crate::EXTERNAL_ADDR`] (a branch into the binary from outside).
    pub branches: BTreeMap<(u64, u64), u64>,
}

impl ContextCounters {
    /// Adds every counter of `other` into `self`.
    pub fn merge(&mut self, other: &ContextCounters) {
        for (k, v) in &other.ranges {
            let e = self.ranges.entry(*k).or_default();
            *e = e.wrapping_add(*v);
        }
        for (k, v) in &other.branches {
            let e = self.branches.entry(*k).or_default();
            *e = e.wrapping_add(*v);
        }
    }

    /// True when no counter is set.
    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty() && self.branches.is_empty()
    }
}

/// All counters of one binary.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct CounterSet {
    /// What the context keys mean.
    pub kind: CounterKind,
    /// Counters per context (hashed with Fx: a window's contexts are looked up once per
    /// counter as they are settled and expanded).
    pub contexts: HashMap<ContextKey, ContextCounters, FxBuildHasher>,
}

impl CounterSet {
    /// An empty set of the given kind.
    pub fn new(kind: CounterKind) -> CounterSet {
        CounterSet {
            kind,
            contexts: HashMap::default(),
        }
    }

    /// The counters of `key`, created empty when missing.
    pub fn context_mut(&mut self, key: &[u64]) -> &mut ContextCounters {
        if !self.contexts.contains_key(key) {
            self.contexts
                .insert(key.to_vec(), ContextCounters::default());
        }
        self.contexts.get_mut(key).expect("inserted above")
    }

    /// [`CounterSet::merge`] taking `other` by value: its contexts missing from `self`
    /// move over without copying.
    pub fn merge_from(&mut self, other: CounterSet) {
        for (key, counters) in other.contexts {
            match self.contexts.get_mut(&key) {
                Some(mine) => mine.merge(&counters),
                None => {
                    self.contexts.insert(key, counters);
                }
            }
        }
    }

    /// Sums `other` into `self` (the merge that makes host aggregation and fleet merges
    /// equal to converting the concatenated samples).
    pub fn merge(&mut self, other: &CounterSet) {
        for (key, counters) in &other.contexts {
            self.context_mut(key).merge(counters);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_sums_per_key() {
        let mut a = CounterSet::new(CounterKind::ProbeContext);
        a.context_mut(&[0x10]).ranges.insert((1, 2), 3);
        let mut b = CounterSet::new(CounterKind::ProbeContext);
        b.context_mut(&[0x10]).ranges.insert((1, 2), 4);
        b.context_mut(&[]).branches.insert((5, 6), 1);
        a.merge(&b);
        assert_eq!(a.contexts[&vec![0x10]].ranges[&(1, 2)], 7);
        assert_eq!(a.contexts[&vec![]].branches[&(5, 6)], 1);
    }
}
