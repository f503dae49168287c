//! [`KeptCounting`]: what counting keeps from one flush of a binary's samples to the next.
//!
//! The live daemon flushes a binary's aggregator for every batch of a few thousand
//! samples. A new unwinder starts with an empty layout cache and frame trie, and a new
//! counter table interns every context again (hashing its whole key): for samples as
//! distinct as hardware's, in binaries without DWARF (a frame and a context per
//! instruction of every range), that was most of the work. Kept between flushes of the
//! same binary ([`crate::Aggregator::finish_kept`]), they start warm; the counters each
//! flush gives are the same.

use crate::counter_table::CounterTable;
use crate::virtual_unwind::KeptUnwinder;

/// Most contexts the kept counter table interns: past it, the next flush starts a new
/// table (the kept one is a cache; every flush's counters are already handed over).
pub(crate) const MAX_KEPT_CONTEXTS: usize = 1 << 16;

/// The unwinder (frame trie, interned contexts' ids, layout answers) and the counter
/// table (interned contexts) of the last flush of a binary's samples, for the next one.
/// Keep one per binary, alive no longer than the layout it counted with.
#[derive(Default)]
pub struct KeptCounting {
    pub(crate) unwinder: Option<KeptUnwinder>,
    pub(crate) table: Option<CounterTable>,
}
