//! [`KeptCounting`]: what counting keeps from one flush of a binary's samples to the next.
//!
//! The live daemon flushes a binary's aggregator again and again (its held samples, a few
//! thousand at most). A new unwinder would start with an empty layout cache and frame
//! trie, and a new counter table would intern every context again (hashing its whole
//! key): for samples as distinct as hardware's, most of the work. Kept between flushes of
//! the same binary ([`crate::Aggregator::count_tally_kept`]), they start warm.
//!
//! The counters stay in the kept table too, summed over flushes until
//! [`KeptCounting::take_counters`]: a counter set built and merged per flush would cost as
//! much as counting the flush's samples when most of them repeat. Line contexts of a
//! binary without inline frames are counted there by address and expanded when taken
//! ([`crate::address_form`]).

use crate::address_form::expand_address_form;
use crate::counter_table::CounterTable;
use crate::virtual_unwind::KeptUnwinder;
use crate::{CodeLayout, CounterSet};

/// Most contexts the kept counter table interns: past it, the table is dropped when its
/// counters are taken, and the next flush starts a new one (the kept table is a cache of
/// interned contexts).
pub(crate) const MAX_KEPT_CONTEXTS: usize = 1 << 16;

/// Most counters left in the kept table before [`KeptCounting::holds_too_much`] asks for
/// them to be taken (about 48 bytes each in its hash tables: under 1 MiB a binary, held
/// besides the windows' copy of the counters already settled).
const MAX_LEFT_COUNTERS: usize = 1 << 14;

/// The unwinder (frame trie, interned contexts' ids, layout answers) and the counter
/// table (interned contexts, and counters left there) of the last flush of a binary's
/// samples, for the next one. Keep one per binary, alive no longer than the layout it
/// counted with.
#[derive(Default)]
pub struct KeptCounting {
    pub(crate) unwinder: Option<KeptUnwinder>,
    pub(crate) table: Option<CounterTable>,
}

impl KeptCounting {
    /// The counters left in the table (empty when none are), taken out of it, those
    /// counted by address expanded over `layout` (the layout they were counted with); the
    /// table keeps its interned contexts unless it holds more than `MAX_KEPT_CONTEXTS`.
    pub fn take_counters(&mut self, layout: &dyn CodeLayout) -> CounterSet {
        let Some(table) = &mut self.table else {
            return CounterSet::default();
        };
        let mut counters = table.take_counter_set();
        expand_address_form(&mut counters, layout);
        if table.context_count() > MAX_KEPT_CONTEXTS {
            self.table = None;
        }
        counters
    }

    /// True when the counters left in the table, or the contexts it interned, are past
    /// their bounds: time to [`KeptCounting::take_counters`].
    pub fn holds_too_much(&self) -> bool {
        self.table.as_ref().is_some_and(|t| {
            t.counter_count() > MAX_LEFT_COUNTERS || t.context_count() > MAX_KEPT_CONTEXTS
        })
    }

    /// A rough size of the counters left in the table, in bytes.
    pub fn approx_counter_bytes(&self) -> usize {
        self.table.as_ref().map_or(0, |t| t.counter_count() * 48)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::CounterKind;

    /// Counters left in the table past the bound ask to be taken; taken, they are all
    /// there, and the table keeps its contexts and no counter.
    #[test]
    fn counters_left_past_the_bound_ask_to_be_taken() {
        let mut table = CounterTable::new(CounterKind::LineContext);
        let context = table.context(&[0x10]);
        let n = MAX_LEFT_COUNTERS as u64 + 4096;
        for k in 0..n {
            table.add_range(context, 0x1000 + k, 0x2000 + k, 1);
        }
        let mut kept = KeptCounting {
            unwinder: None,
            table: Some(table),
        };
        assert!(kept.holds_too_much());
        assert!(kept.approx_counter_bytes() > MAX_LEFT_COUNTERS * 48);
        let layout = crate::test_support::main_calls_foo();
        let taken = kept.take_counters(&layout);
        assert_eq!(taken.contexts[&vec![0x10]].ranges.len() as u64, n);
        assert!(!kept.holds_too_much());
        assert_eq!(kept.approx_counter_bytes(), 0);
        assert_eq!(kept.table.as_ref().map(|t| t.context_count()), Some(1));
        assert!(KeptCounting::default()
            .take_counters(&layout)
            .contexts
            .is_empty());
    }
}
