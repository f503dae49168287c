//! The functions a profile's counters touch (`ProfileGeneratorBase::collectProfiledFunctions`):
//! those a range starts in, a branch starts or ends in, or (address-keyed contexts, CS
//! probe profiles) a context frame is in. llvm-profgen decodes the pseudo probes of these
//! functions only, so a range that reaches into another function (a zero gap between
//! ranges, `--fill-zero-for-all-funcs`) counts none of that function's probes; the CS
//! pre-inliner sizes these functions only.

use std::collections::BTreeMap;

use unwinder::{ContextCounters, CounterKind, CounterSet};

use super::BinaryView;

/// The profiled functions of a binary, by function id, each with the first address seen
/// in it.
#[derive(Clone, Debug, Default)]
pub struct ProfiledFunctions {
    first_address: BTreeMap<usize, u64>,
}

impl ProfiledFunctions {
    /// The functions `counters` touch (the context keys' addresses count for
    /// address-keyed CS probe counters only, as llvm-profgen's `AddrBasedCtxKey`).
    pub fn of_set<B: BinaryView>(binary: &B, counters: &CounterSet) -> ProfiledFunctions {
        let address_keys = counters.kind == CounterKind::ProbeContext;
        let mut profiled = ProfiledFunctions::default();
        for (key, c) in &counters.contexts {
            if address_keys {
                key.iter().for_each(|&a| profiled.note(binary, a));
            }
            profiled.add_counters(binary, c);
        }
        profiled
    }

    /// The functions one context's (or a flat profile's) counters touch.
    pub fn of_counters<B: BinaryView>(binary: &B, counters: &ContextCounters) -> ProfiledFunctions {
        let mut profiled = ProfiledFunctions::default();
        profiled.add_counters(binary, counters);
        profiled
    }

    fn add_counters<B: BinaryView>(&mut self, binary: &B, c: &ContextCounters) {
        for &(start, _) in c.ranges.keys() {
            self.note(binary, start);
        }
        for &(src, dst) in c.branches.keys() {
            self.note(binary, src);
            self.note(binary, dst);
        }
    }

    fn note<B: BinaryView>(&mut self, binary: &B, addr: u64) {
        if let Some((_, id)) = binary.func_range_id_at(addr) {
            self.first_address.entry(id).or_insert(addr);
        }
    }

    /// True when `addr` is in a profiled function.
    pub fn contains<B: BinaryView>(&self, binary: &B, addr: u64) -> bool {
        binary
            .func_range_id_at(addr)
            .is_some_and(|(_, id)| self.first_address.contains_key(&id))
    }

    /// One address in each profiled function, by function id.
    pub fn addresses(&self) -> impl Iterator<Item = u64> + '_ {
        self.first_address.values().copied()
    }
}
