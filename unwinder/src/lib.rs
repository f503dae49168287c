//! # unwinder — from [`collector::Sample`]s to range and branch counters
//!
//! Stage two. Input: samples in process addresses plus the MMAP2 events that place the
//! profiled binary. Output: [`CounterSet`], range and branch counters per calling context,
//! in the binary's own (preferred, "SVMA") addresses, keyed by build id upstream.
//!
//! The unwinder needs to know which addresses are instructions, calls, returns and
//! unconditional branches; it asks a [`CodeLayout`], which the symbolizer implements for a
//! real ELF binary (like framehop's `read_stack` closure, the caller supplies the knowledge).
#![deny(missing_docs)]

pub mod code_layout;
pub mod counters;

pub use code_layout::{CodeLayout, EXTERNAL_ADDR};
pub use counters::{ContextCounters, ContextKey, CounterKind, CounterSet};
