//! # unwinder — from [`collector::Sample`]s to range and branch counters
//!
//! Stage two. Input: samples in process addresses plus the MMAP2 events that place the
//! profiled binary. Output: [`CounterSet`], range and branch counters per calling context,
//! in the binary's own (preferred, "SVMA") addresses, keyed by build id upstream.
//!
//! The unwinder needs to know which addresses are instructions, calls, returns and
//! unconditional branches; it asks a [`CodeLayout`], which the symbolizer implements for a
//! real ELF binary (like framehop's `read_stack` closure, the caller supplies the knowledge).
//!
//! The algorithms are llvm-profgen 19's (`PerfReader.cpp`), step by step:
//!
//! 1. [`BinaryPlacement`]: MMAP2 events of the binary set its load base
//!    (`updateBinaryAddress`); every address is rebased as it is read.
//! 2. [`sample_prep`]: non-code addresses become [`EXTERNAL_ADDR`], return addresses become
//!    call addresses, broken stacks are truncated or dropped, the stack leaf is replaced by
//!    the newest LBR target; [`Aggregator`] counts identical [`PerfSample`]s once.
//! 3. [`lbr_counter`] (LBR-only, flat) or [`VirtualUnwinder`] (hybrid, context-sensitive)
//!    turn aggregated samples into counters; [`UnwindStats`] counts what llvm-profgen
//!    warns about.
//!
//! It does not symbolize: line contexts stay address stacks until the symbolizer expands
//! them into inline frames.
#![deny(missing_docs)]

pub mod aggregator;
pub mod binary_placement;
pub mod code_layout;
pub mod context;
pub mod counters;
pub mod error;
pub mod frame_trie;
pub mod fx_hash;
pub mod lbr_counter;
pub mod leading_ip;
pub mod options;
pub mod sample_prep;
pub mod shard;
pub mod stats;
pub mod test_support;
pub mod virtual_unwind;
pub mod window;

pub use aggregator::{unwind_samples, Aggregator};
pub use binary_placement::{BinaryLoadInfo, BinaryPlacement, MmapOutcome};
pub use code_layout::{CodeLayout, RangeChecks, EXTERNAL_ADDR};
pub use context::{compress_recursion, trim_context};
pub use counters::{ContextCounters, ContextKey, CounterKind, CounterSet};
pub use error::UnwindError;
pub use frame_trie::FrameTrie;
pub use options::{processes_mapping, PerfContent, UnwindOptions};
pub use sample_prep::{Branch, PerfSample};
pub use stats::UnwindStats;
pub use virtual_unwind::VirtualUnwinder;
