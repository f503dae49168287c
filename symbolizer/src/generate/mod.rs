//! Profile generation from counters: CS probe, CS line, flat line (AutoFDO), flat probe,
//! as llvm-profgen 19's `ProfileGenerator` / `CSProfileGenerator` do it.
//!
//! Entry point: [`generate_profile`], for any [`BinaryView`] (the real
//! [`crate::ProfiledBinary`] implements it). CS probe generation infers tail-call frames
//! ([`MissingFrameInferrer`], `--infer-missing-frames`). CS post-processing runs as
//! llvm-profgen 19's by default: the CS pre-inliner ([`preinline`], context sizes from
//! [`SizeTracker`]), cold-context trimming/merging, and the conversion to a nested profile
//! ([`nested`]).
//!
//! Checked against llvm-profgen-19 on the corpus (tests/tests/e2e/offline/generate.rs,
//! tests/tests/e2e/offline/conformance.rs): identical canonical text for all four profile kinds, with
//! the default flags and with `--csspgo-preinliner=false --gen-cs-nested-profile=false`.

pub mod binary_view;
pub mod context_shape;
pub mod cs;
pub mod disjoint;
pub mod flat;
pub mod missing_frames;
pub mod nested;
pub mod post;
pub mod preinline;
pub mod profiled_functions;
pub mod size_tracker;

#[cfg(test)]
mod fake_binary;
#[cfg(test)]
mod tests;

pub use binary_view::{BinaryView, BinaryViewExt, BranchClass};
pub use missing_frames::MissingFrameInferrer;
pub use preinline::PreInlineOptions;
pub use profiled_functions::ProfiledFunctions;
pub use size_tracker::SizeTracker;

use std::collections::BTreeMap;

use unwinder::{ContextCounters, CounterKind, CounterSet};

use crate::profile::{ContextTrie, SampleContext, SampleProfile, ThresholdRule};

/// llvm-profgen options that affect generation (defaults as llvm-profgen 19).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GenerateOptions {
    /// `--compress-recursion` (-1: no size limit).
    pub compress_recursion: i32,
    /// `--csprof-max-context-depth` (-1: no limit).
    pub max_context_depth: i32,
    /// `--trim-cold-profile`.
    pub trim_cold_profile: bool,
    /// `--csprof-merge-cold-context` as given (default true); llvm-profgen turns it off
    /// when the pre-inliner runs unless given explicitly ([`Self::merge_cold_context_given`]).
    pub merge_cold_context: bool,
    /// `--csprof-merge-cold-context` was given on the command line.
    pub merge_cold_context_given: bool,
    /// `--csprof-max-cold-context-depth`.
    pub max_cold_context_depth: usize,
    /// `--update-total-samples`.
    pub update_total_samples: bool,
    /// `--infer-missing-frames` (CS probe profiles: tail-call frames the unwinder could not
    /// see are inferred from the sampled call graph).
    pub infer_missing_frames: bool,
    /// `--max-search-depth`: the deepest tail-call chain missing-frame inference searches
    /// ([`missing_frames::DEFAULT_MAX_SEARCH_DEPTH`]: unlimited).
    pub max_search_depth: u32,
    /// `--csspgo-preinliner` (default true).
    pub preinliner: bool,
    /// `--gen-cs-nested-profile` (default true).
    pub nested_profile: bool,
    /// `--generate-merged-base-profiles`: nested profiles also merge every inlined context
    /// into its function's top-level profile.
    pub merged_base_profiles: bool,
    /// Pre-inliner thresholds and limits.
    pub preinline: PreInlineOptions,
    /// The summary's hot and cold count thresholds (`--profile-summary-cutoff-hot/-cold`,
    /// `--profile-summary-hot-count/-cold-count`).
    pub thresholds: ThresholdRule,
    /// `--leading-ip-only`: line-based body counts are the SUM of the instructions' counts
    /// at a location, without duplication factors (else the MAX × duplication factor).
    pub leading_ip_only: bool,
    /// `--fill-zero-for-all-funcs`: flat profiles zero-fill the ranges of every function
    /// of the binary (else only of functions a sampled range starts in).
    pub fill_zero_for_all_funcs: bool,
}

impl Default for GenerateOptions {
    fn default() -> GenerateOptions {
        GenerateOptions {
            compress_recursion: -1,
            max_context_depth: -1,
            trim_cold_profile: false,
            merge_cold_context: true,
            max_cold_context_depth: 1,
            update_total_samples: false,
            infer_missing_frames: true,
            max_search_depth: missing_frames::DEFAULT_MAX_SEARCH_DEPTH,
            preinliner: true,
            nested_profile: true,
            merged_base_profiles: false,
            preinline: PreInlineOptions::default(),
            thresholds: ThresholdRule::default(),
            merge_cold_context_given: false,
            leading_ip_only: false,
            fill_zero_for_all_funcs: false,
        }
    }
}

/// Generates the sample profile of `counters` for `binary`: flat line/probe for
/// [`CounterKind::Flat`], CS probe for [`CounterKind::ProbeContext`], CS line for
/// [`CounterKind::LineContext`]; then post-processing.
pub fn generate_profile<B: BinaryView>(
    binary: &B,
    counters: &CounterSet,
    opts: &GenerateOptions,
) -> SampleProfile {
    let opts = &*summing_sampled_ips(opts, counters.contexts.values());
    let fs = binary.uses_fs_discriminator();
    match counters.kind {
        CounterKind::Flat => {
            let mut all = ContextCounters::default();
            for c in counters.contexts.values() {
                all.merge(c);
            }
            let mut p = if binary.has_pseudo_probes() {
                flat::generate_flat_probe(binary, &all, opts)
            } else {
                flat::generate_flat_line(binary, &all, opts)
            };
            post::post_process_flat(&mut p, opts);
            p
        }
        CounterKind::ProbeContext => {
            let profiled = ProfiledFunctions::of_set(binary, counters);
            let trie = cs::generate_cs_probe_trie(binary, counters, &profiled, opts);
            let sizes = uses_context_cost(opts).then(|| SizeTracker::build(binary, &profiled));
            post::post_process_cs(trie, true, fs, opts, sizes.as_ref())
        }
        CounterKind::LineContext => {
            let trie = cs::generate_cs_line_trie(binary, counters, opts);
            finish_line_trie(binary, trie, counters, opts)
        }
    }
}

/// True when `contexts` hold counters of sampled IPs: one range (IP, IP) per sample and
/// no branch, what `--leading-ip-only` counts and what stack samples without a branch
/// stack (cpu-clock: the daemon's `cpu_clock` mode, `convert` of `perf record -g` input)
/// give. A line's body is then the sum of its instructions' samples, as llvm-profgen's
/// `--leading-ip-only` makes it, whether or not the flag was given: the maximum (what
/// fall-through ranges of taken branches want, each instruction of a line executed as
/// often) would keep one instruction's samples of a line. Counters of branch stacks
/// always hold branches.
pub fn counts_sampled_ips<'c>(mut contexts: impl Iterator<Item = &'c ContextCounters>) -> bool {
    let mut any = false;
    let all = contexts.all(|c| {
        any |= !c.ranges.is_empty();
        c.branches.is_empty() && c.ranges.keys().all(|&(start, end)| start == end)
    });
    all && any
}

/// `opts`, with `leading_ip_only` set when `contexts` hold counters of sampled IPs
/// ([`counts_sampled_ips`]).
fn summing_sampled_ips<'o, 'c>(
    opts: &'o GenerateOptions,
    contexts: impl Iterator<Item = &'c ContextCounters>,
) -> std::borrow::Cow<'o, GenerateOptions> {
    if !opts.leading_ip_only && counts_sampled_ips(contexts) {
        std::borrow::Cow::Owned(GenerateOptions {
            leading_ip_only: true,
            ..opts.clone()
        })
    } else {
        std::borrow::Cow::Borrowed(opts)
    }
}

/// The CS line-based profile of counters keyed by symbolized context (`main:7 @ quick`,
/// what an unsymbolized profile of a DWARF binary holds), as llvm-profgen 19 makes it
/// from such a file.
pub fn generate_line_profile_of_contexts<B: BinaryView>(
    binary: &B,
    contexts: &BTreeMap<SampleContext, ContextCounters>,
    opts: &GenerateOptions,
) -> SampleProfile {
    let opts = &*summing_sampled_ips(opts, contexts.values());
    let trie = cs::generate_cs_line_trie_of_contexts(binary, contexts, opts);
    // The pre-inliner's sizes come from the functions the ranges and branches reach (the
    // stack addresses of symbolized contexts are not known).
    let counters = CounterSet {
        kind: CounterKind::LineContext,
        contexts: contexts
            .values()
            .enumerate()
            .map(|(i, c)| (vec![i as u64], c.clone()))
            .collect(),
    };
    finish_line_trie(binary, trie, &counters, opts)
}

/// Totals, call-site counts and post-processing of a CS line-based trie.
fn finish_line_trie<B: BinaryView>(
    binary: &B,
    mut trie: ContextTrie,
    counters: &CounterSet,
    opts: &GenerateOptions,
) -> SampleProfile {
    let fs = binary.uses_fs_discriminator();
    for id in trie.post_order() {
        if trie.samples(id).is_some() {
            let f = trie.samples_mut(id);
            if opts.update_total_samples {
                f.update_total_samples();
            }
            f.update_callsite_samples();
        }
    }
    let sizes = uses_context_cost(opts)
        .then(|| SizeTracker::build(binary, &ProfiledFunctions::of_set(binary, counters)));
    post::post_process_cs(trie, false, fs, opts, sizes.as_ref())
}

/// The pre-inliner runs and needs the context sizes (`TrackFuncContextSize`).
fn uses_context_cost(opts: &GenerateOptions) -> bool {
    opts.preinliner && opts.preinline.use_context_cost
}
