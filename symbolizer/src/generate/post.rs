//! Post-processing (`postProcessProfiles`, llvm-profgen.md §2.7.7): summary-based
//! thresholds, the CS pre-inliner, cold-context merging/trimming, the nested-profile
//! conversion and ambiguous-profile filtering.

use std::collections::BTreeMap;

use super::nested::convert_cs_to_nested;
use super::preinline::{PreInlineThresholds, PreInliner};
use super::size_tracker::SizeTracker;
use super::GenerateOptions;
use crate::profile::{ContextTrie, FunctionSamples, ProfileSummary, SampleContext, SampleProfile};

/// Non-CS: trimming (when asked) and the ambiguous-profile filter.
pub fn post_process_flat(profile: &mut SampleProfile, opts: &GenerateOptions) {
    if opts.trim_cold_profile {
        let cold = opts.thresholds.cold(&ProfileSummary::compute(profile));
        profile.profiles.retain(|_, f| f.total >= cold);
    }
    profile.filter_ambiguous_profiles();
}

/// CS (`CSProfileGenerator::postProcessProfiles`): thresholds from the context-less
/// summary, the pre-inliner (when on; cold merging then stays off unless given
/// explicitly), trie → flat CS map, cold-context trimming/merging, the nested conversion
/// (when on), then the ambiguous-profile filter. `sizes` are the context sizes the
/// pre-inliner uses (`--use-context-cost-for-preinliner`).
pub fn post_process_cs(
    trie: ContextTrie,
    probe_based: bool,
    fs: bool,
    opts: &GenerateOptions,
    sizes: Option<&SizeTracker>,
) -> SampleProfile {
    let mut profile = SampleProfile {
        profiles: trie.into_profiles(),
        is_cs: true,
        is_probe_based: probe_based,
        is_fs: fs,
        is_preinlined: false,
    };
    // Thresholds from the context-less merge (`computeSummaryAndThreshold`); the
    // context-less summary of the flat CS map is the same computation.
    let summary = ProfileSummary::compute(&profile);
    let hot = opts.thresholds.hot(&summary);
    let mut merge = opts.merge_cold_context;
    if opts.preinliner {
        let thresholds = PreInlineThresholds::from_summary(&summary, &opts.thresholds);
        let flat = std::mem::take(&mut profile.profiles);
        profile.profiles = PreInliner::new(flat, sizes, &opts.preinline, thresholds).run();
        profile.is_preinlined = true;
        if !opts.merge_cold_context_given {
            merge = false;
        }
    }
    if opts.trim_cold_profile || merge {
        trim_and_merge_cold_contexts(
            &mut profile.profiles,
            hot,
            opts.trim_cold_profile,
            merge,
            opts.max_cold_context_depth,
            opts.preinliner,
        );
    }
    if opts.nested_profile {
        let flat = std::mem::take(&mut profile.profiles);
        profile.profiles = convert_cs_to_nested(flat, opts.merged_base_profiles);
        profile.is_cs = false;
    }
    profile.filter_ambiguous_profiles();
    profile
}

/// `SampleContextTrimmer::trimAndMergeColdContextProfiles`: contexts whose total is
/// below `threshold` are removed and (when merging) merged into their last
/// `frame_length` frames. With `trim_base_only` (the pre-inliner ran) and no merging, only
/// base (single-frame) contexts are trimmed, honouring the pre-inliner's decisions.
pub fn trim_and_merge_cold_contexts(
    profiles: &mut BTreeMap<SampleContext, FunctionSamples>,
    threshold: u64,
    trim: bool,
    merge: bool,
    frame_length: usize,
    trim_base_only: bool,
) {
    if (!trim && !merge) || threshold == 0 {
        return;
    }
    let base_only = trim_base_only && !merge;
    let mut merged: BTreeMap<SampleContext, FunctionSamples> = BTreeMap::new();
    // Taken out of the map as they are found (moved, not copied: most contexts of a
    // large profile are cold).
    let cold = profiles.extract_if(.., |c, f| {
        f.total < threshold && (!base_only || c.frames.len() == 1)
    });
    for (ctx, fs) in cold {
        if merge {
            let frames = &ctx.frames;
            let keep = frames.len().min(frame_length);
            let new_ctx = SampleContext::from_frames(frames[frames.len() - keep..].to_vec());
            merged
                .entry(new_ctx.clone())
                .or_insert_with(|| FunctionSamples::new(new_ctx))
                .merge(&fs);
        }
    }
    for (ctx, fs) in merged {
        if trim && fs.total < threshold && !profiles.contains_key(&ctx) {
            continue;
        }
        profiles
            .entry(ctx)
            .or_insert_with(|| FunctionSamples::new(SampleContext::default()))
            .merge(&fs);
    }
}
