//! Post-processing (`postProcessProfiles`, llvm-profgen.md §2.7.7): summary-based
//! thresholds, cold-context merging/trimming, ambiguous-profile filtering. The CS
//! pre-inliner and the nested-profile conversion plug in here (not implemented yet).

use std::collections::BTreeMap;

use super::GenerateOptions;
use crate::profile::{ContextTrie, FunctionSamples, ProfileSummary, SampleContext, SampleProfile};

/// Non-CS: trimming (when asked) and the ambiguous-profile filter.
pub fn post_process_flat(profile: &mut SampleProfile, opts: &GenerateOptions) {
    if opts.trim_cold_profile {
        let cold = ProfileSummary::compute(profile).cold_count_threshold();
        profile.profiles.retain(|_, f| f.total >= cold);
    }
    profile.filter_ambiguous_profiles();
}

/// CS: trie → flat CS profile, cold-context merge (on unless the pre-inliner ran), then
/// the ambiguous-profile filter.
pub fn post_process_cs(
    trie: ContextTrie,
    probe_based: bool,
    fs: bool,
    opts: &GenerateOptions,
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
    let hot = ProfileSummary::compute(&profile).hot_count_threshold();
    if opts.trim_cold_profile || opts.merge_cold_context {
        trim_and_merge_cold_contexts(
            &mut profile.profiles,
            hot,
            opts.trim_cold_profile,
            opts.merge_cold_context,
            opts.max_cold_context_depth,
        );
    }
    profile.filter_ambiguous_profiles();
    profile
}

/// `SampleContextTrimmer::trimAndMergeColdContextProfiles`: contexts whose total is
/// below `threshold` are removed and (when merging) merged into their last
/// `frame_length` frames.
pub fn trim_and_merge_cold_contexts(
    profiles: &mut BTreeMap<SampleContext, FunctionSamples>,
    threshold: u64,
    trim: bool,
    merge: bool,
    frame_length: usize,
) {
    if (!trim && !merge) || threshold == 0 {
        return;
    }
    let cold: Vec<SampleContext> = profiles
        .iter()
        .filter(|(_, f)| f.total < threshold)
        .map(|(c, _)| c.clone())
        .collect();
    let mut merged: BTreeMap<SampleContext, FunctionSamples> = BTreeMap::new();
    for ctx in cold {
        let Some(fs) = profiles.remove(&ctx) else {
            continue;
        };
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
