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
//!
//! `convert` calls [`unwind_samples`] once (or feeds an aggregator
//! [`Aggregator::counting_as_fed`], which counts each sample as it is prepared instead of
//! holding it until the end); the live daemon's [`shard::BinaryShard`]s hold each binary's
//! samples from batch to batch in a [`SampleTally`] of distinct ones, and count them through
//! an [`Aggregator`] finished with the [`KeptCounting`] of their binary, so that the
//! unwinder and the interned contexts carry over (flushed counter sets merge into exactly
//! what one conversion of all samples gives; line contexts of a binary without inline
//! frames are counted by address there and expanded when read: [`address_form`]).
//!
//! ```
//! use collector::{LbrEntry, PerfEvent, Sample};
//! use unwinder::test_support::{FakeLayout, Inst};
//! use unwinder::{unwind_samples, BinaryLoadInfo, CounterKind, UnwindOptions};
//!
//! // main: 0x1000 push; 0x1001 mov; 0x1004 call foo; 0x1009 ret
//! // foo:  0x1010 push; 0x1011 mov; 0x1014 jcc 0x1011; 0x1016 pop; 0x1017 ret
//! let layout = FakeLayout::new(
//!     &[(0x1000, Inst::Other), (0x1001, Inst::Other), (0x1004, Inst::Call), (0x1009, Inst::Return),
//!       (0x1010, Inst::Other), (0x1011, Inst::Other), (0x1014, Inst::CondBranch),
//!       (0x1016, Inst::Other), (0x1017, Inst::Return)],
//!     &[0x1000, 0x1010],
//! )
//! .with_probes(true);
//! let load = BinaryLoadInfo {
//!     name: "prog".into(),
//!     preferred_base: 0x1000,
//!     text_segment_offsets: vec![0],
//!     preferred_text_segment_addresses: vec![0x1000],
//!     kernel: false,
//! };
//! // Sampled in foo's loop (called from main at 0x1004), newest branch first.
//! let sample = Sample {
//!     callchain: vec![0x1014, 0x1009],
//!     lbr: vec![
//!         LbrEntry { from: 0x1014, to: 0x1011, flags: 0 },
//!         LbrEntry { from: 0x1004, to: 0x1010, flags: 0 },
//!     ],
//!     count: 1,
//!     ..Sample::default()
//! };
//! let (counters, _stats) =
//!     unwind_samples([PerfEvent::Sample(sample)], &layout, &load, &UnwindOptions::default()).unwrap();
//! assert_eq!(counters.kind, CounterKind::ProbeContext);
//! // foo's range [0x1010, 0x1014] and its back edge, keyed by main's call site.
//! let foo = &counters.contexts[&vec![0x1004]];
//! assert_eq!(foo.ranges[&(0x1010, 0x1014)], 1);
//! assert_eq!(foo.branches[&(0x1014, 0x1011)], 1);
//! // The call itself belongs to main, the root context.
//! assert_eq!(counters.contexts[&vec![]].branches[&(0x1004, 0x1010)], 1);
//! ```
#![deny(missing_docs)]

pub mod address_form;
pub mod aggregator;
pub mod binary_placement;
pub mod code_layout;
pub mod context;
pub mod counted_samples;
pub mod counter_table;
pub mod counters;
pub mod error;
pub mod frame_trie;
pub mod held_samples;
pub mod kept_counting;
pub mod layout_cache;
pub mod lbr_counter;
pub mod leading_ip;
pub mod options;
pub mod pending_counters;
pub mod sample_prep;
pub mod sample_tally;
pub mod shard;
pub mod stack_repair;
pub mod stats;
mod summing_cache;
pub mod test_support;
pub mod virtual_unwind;
pub mod window;

pub use aggregator::{unwind_repeated_samples, unwind_samples, Aggregator};
pub use binary_placement::{BinaryLoadInfo, BinaryPlacement, MmapOutcome, Rebase};
pub use code_layout::{CodeBitmap, CodeLayout, FrameSetup, RangeChecks, EXTERNAL_ADDR};
pub use context::{compress_recursion, trim_context};
pub use counted_samples::CountedSamples;
pub use counter_table::CounterTable;
pub use counters::{ContextCounters, ContextKey, CounterKind, CounterSet};
pub use error::UnwindError;
pub use frame_trie::FrameTrie;
pub use kept_counting::KeptCounting;
pub use options::{processes_mapping, PerfContent, UnwindOptions};
pub use sample_prep::{Branch, PerfSample};
pub use sample_tally::SampleTally;
pub use stack_repair::{leaf_repair, RepairWitness, StackRepair};
pub use stats::UnwindStats;
pub use virtual_unwind::VirtualUnwinder;
