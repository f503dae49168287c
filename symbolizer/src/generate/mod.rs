//! Profile generation from counters: CS probe, CS line, flat line (AutoFDO), flat probe,
//! as llvm-profgen 19's `ProfileGenerator` / `CSProfileGenerator` do it.
//!
//! Entry point: [`generate_profile`], for any [`BinaryView`] (the real
//! [`crate::ProfiledBinary`] implements it). CS probe generation infers tail-call frames
//! ([`MissingFrameInferrer`], `--infer-missing-frames`). Post-processing runs with the flags
//! the conformance suite uses (`--csspgo-preinliner=false --gen-cs-nested-profile=false`);
//! the pre-inliner, the nested conversion, `--fill-zero-for-all-funcs` and the density
//! warning are not implemented.
//!
//! Checked against llvm-profgen-19 on the corpus (tests/tests/generate.rs): identical
//! canonical text for all four profile kinds.

pub mod binary_view;
pub mod context_shape;
pub mod cs;
pub mod disjoint;
pub mod flat;
pub mod missing_frames;
pub mod post;

#[cfg(test)]
mod fake_binary;
#[cfg(test)]
mod tests;

pub use binary_view::{BinaryView, BinaryViewExt, BranchClass};
pub use missing_frames::MissingFrameInferrer;

use unwinder::{ContextCounters, CounterKind, CounterSet};

use crate::profile::SampleProfile;

/// llvm-profgen options that affect generation (defaults as llvm-profgen 19).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GenerateOptions {
    /// `--compress-recursion` (-1: no size limit).
    pub compress_recursion: i32,
    /// `--csprof-max-context-depth` (-1: no limit).
    pub max_context_depth: i32,
    /// `--trim-cold-profile`.
    pub trim_cold_profile: bool,
    /// `--csprof-merge-cold-context` (effective value: llvm-profgen turns it off when
    /// the pre-inliner runs unless given explicitly).
    pub merge_cold_context: bool,
    /// `--csprof-max-cold-context-depth`.
    pub max_cold_context_depth: usize,
    /// `--update-total-samples`.
    pub update_total_samples: bool,
    /// `--infer-missing-frames` (CS probe profiles: tail-call frames the unwinder could not
    /// see are inferred from the sampled call graph).
    pub infer_missing_frames: bool,
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
            let trie = cs::generate_cs_probe_trie(binary, counters, opts);
            post::post_process_cs(trie, true, fs, opts)
        }
        CounterKind::LineContext => {
            let mut trie = cs::generate_cs_line_trie(binary, counters, opts);
            for id in trie.post_order() {
                if trie.samples(id).is_some() {
                    let f = trie.samples_mut(id);
                    if opts.update_total_samples {
                        f.update_total_samples();
                    }
                    f.update_callsite_samples();
                }
            }
            post::post_process_cs(trie, false, fs, opts)
        }
    }
}
