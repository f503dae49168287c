//! Non-CS generation (`ProfileGenerator`): flat line-based AutoFDO profiles
//! (llvm-profgen.md §2.7.2) and flat probe-based profiles (§2.7.3).

use std::collections::{BTreeMap, HashMap};

use unwinder::ContextCounters;

use super::binary_view::{BinaryView, BinaryViewExt};
use super::disjoint::find_disjoint_ranges;
use super::profiled_functions::ProfiledFunctions;
use super::GenerateOptions;
use crate::binary::FrameLocation;
use crate::dwarf::discriminator::{base_discriminator, duplication_factor};
use crate::probe::{ProbeFrame, PseudoProbe};
use crate::profile::{FunctionSamples, LineLocation, SampleContext, SampleProfile};

/// A frame of an inline stack as the flat generators walk it: a function and the raw
/// location in it (line offset + raw discriminator, or probe index + 0).
pub(crate) trait StackFrame {
    /// The function.
    fn func(&self) -> &str;
    /// The raw location.
    fn raw_location(&self) -> LineLocation;
}

impl StackFrame for FrameLocation {
    fn func(&self) -> &str {
        &self.func_name
    }
    fn raw_location(&self) -> LineLocation {
        LineLocation::new(self.line_offset, self.discriminator)
    }
}

impl StackFrame for ProbeFrame<'_> {
    fn func(&self) -> &str {
        self.func_name
    }
    fn raw_location(&self) -> LineLocation {
        LineLocation::new(self.probe_index, 0)
    }
}

/// Top-level flat profiles by function name (looked up without allocating).
#[derive(Default)]
struct FlatProfiles {
    by_name: BTreeMap<String, FunctionSamples>,
}

impl FlatProfiles {
    fn top_level(&mut self, name: &str) -> &mut FunctionSamples {
        if !self.by_name.contains_key(name) {
            self.by_name.insert(
                name.to_string(),
                FunctionSamples::new(SampleContext::from_name(name)),
            );
        }
        self.by_name.get_mut(name).expect("inserted above")
    }

    fn into_profile(self, fs: bool, probe_based: bool) -> SampleProfile {
        SampleProfile {
            profiles: self
                .by_name
                .into_values()
                .map(|f| (f.context.clone(), f))
                .collect(),
            is_fs: fs,
            is_probe_based: probe_based,
            ..SampleProfile::default()
        }
    }
}

/// Range counters plus zero-count ranges covering every function a range starts in (every
/// function with `--fill-zero-for-all-funcs`), made disjoint
/// (`ProfileGenerator::preprocessRangeCounter`). A probe binary's unprofiled functions
/// then count nothing ([`probe_counts`]): given its `profiled` functions, only theirs are
/// zero-filled.
fn preprocess_ranges<B: BinaryView>(
    binary: &B,
    counters: &ContextCounters,
    opts: &GenerateOptions,
    profiled: Option<&ProfiledFunctions>,
) -> BTreeMap<(u64, u64), u64> {
    let mut ranges = counters.ranges.clone();
    let mut zero = |(s, e): (u64, u64)| {
        if e > s {
            ranges.entry((s, e - 1)).or_insert(0);
        }
    };
    if opts.fill_zero_for_all_funcs {
        // In a probe binary only the profiled functions' probes count: the others' zero
        // ranges would add nothing but the decoding of their code (each profiled function is
        // covered by its own zero range, so no address's count or coverage changes).
        for range in binary.all_function_ranges() {
            if profiled.is_none_or(|p| p.contains(binary, range.0)) {
                zero(range);
            }
        }
    } else {
        for &(start, _) in counters.ranges.keys() {
            binary
                .function_ranges_at(start)
                .iter()
                .copied()
                .for_each(&mut zero);
        }
    }
    find_disjoint_ranges(&ranges)
}

/// The leaf profile of an inline stack (`getLeafProfileAndAddTotalSamples`): the top-level
/// profile of the outermost frame, then inlined callees keyed by each caller frame's
/// location (base discriminator); every profile on the way gets `count` more total samples
/// (and, for probe binaries, its function's checksum).
fn leaf_profile<'p, B: BinaryView, F: StackFrame>(
    profiles: &'p mut FlatProfiles,
    binary: &B,
    frames: &[F],
    count: u64,
    fs: bool,
) -> &'p mut FunctionSamples {
    let probes = binary.has_pseudo_probes();
    let mut cur = profiles.top_level(frames[0].func());
    cur.add_total_samples(count);
    if probes {
        cur.checksum = binary.checksum_for_name(frames[0].func()).unwrap_or(0);
    }
    for k in 1..frames.len() {
        let caller = frames[k - 1].raw_location();
        let loc = LineLocation::new(
            caller.line_offset,
            base_discriminator(caller.discriminator, fs),
        );
        cur = cur.callee_mut(loc, frames[k].func());
        cur.add_total_samples(count);
        if probes {
            cur.checksum = binary.checksum_for_name(frames[k].func()).unwrap_or(0);
        }
    }
    cur
}

/// The body update of `updateBodySamplesforFunctionProfile`: MAX × duplication factor, or
/// the SUM with `--leading-ip-only` (`sum`).
pub(crate) fn update_body_max(
    profile: &mut FunctionSamples,
    line: u32,
    disc: u32,
    count: u64,
    fs: bool,
    sum: bool,
) {
    let loc = LineLocation::new(line, base_discriminator(disc, fs));
    if sum {
        profile.add_body_samples(loc, count);
        return;
    }
    let v = count.saturating_mul(u64::from(duplication_factor(disc, fs)));
    let prev = profile.samples_at(loc).unwrap_or(0);
    if prev <= v {
        profile.add_body_samples(loc, v - prev);
    }
}

/// Callsite-sample and (optionally) total-sample updates of every profile
/// (`updateFunctionSamples`).
fn update_function_samples(profiles: &mut FlatProfiles, opts: &GenerateOptions) {
    for f in profiles.by_name.values_mut() {
        f.update_callsite_samples();
        if opts.update_total_samples {
            f.update_total_samples();
        }
    }
}

/// Flat DWARF line-based profile (`generateLineNumBasedProfile`).
pub fn generate_flat_line<B: BinaryView>(
    binary: &B,
    counters: &ContextCounters,
    opts: &GenerateOptions,
) -> SampleProfile {
    let fs = binary.uses_fs_discriminator();
    let mut profiles = FlatProfiles::default();
    for ((b, e), c) in preprocess_ranges(binary, counters, opts, None) {
        for (addr, size) in binary.instructions_in(b, e) {
            let frames = binary.inline_frames(addr);
            let Some(leaf) = frames.last() else {
                continue;
            };
            let f = leaf_profile(
                &mut profiles,
                binary,
                frames,
                c.saturating_mul(u64::from(size)),
                fs,
            );
            update_body_max(
                f,
                leaf.line_offset,
                leaf.discriminator,
                c,
                fs,
                opts.leading_ip_only,
            );
        }
    }
    for (&(src, dst), &c) in &counters.branches {
        let Some(callee) = binary.callee_name_at(dst) else {
            continue;
        };
        let frames = binary.inline_frames(src);
        if let Some(leaf) = frames.last() {
            let f = leaf_profile(&mut profiles, binary, frames, 0, fs);
            let loc =
                LineLocation::new(leaf.line_offset, base_discriminator(leaf.discriminator, fs));
            f.add_called_target_samples(loc, callee, c);
        }
        profiles.top_level(callee).add_head_samples(c);
    }
    update_function_samples(&mut profiles, opts);
    profiles.into_profile(fs, false)
}

/// Identity of a decoded probe within a binary: (address, inline-tree node, index,
/// discriminator, is call). Two probes with the same key are the same probe.
pub(crate) type ProbeKey = (u64, u32, u32, u32, bool);

/// `extractProbesFromRange` over already-disjoint ranges: every probe (block and call) at
/// an instruction of a range gets the range's count; in address order. Only the probes of
/// `profiled` functions exist for llvm-profgen (it decodes no others).
pub(crate) fn probe_counts<'b, B: BinaryView>(
    binary: &'b B,
    ranges: &BTreeMap<(u64, u64), u64>,
    profiled: &ProfiledFunctions,
) -> BTreeMap<ProbeKey, (&'b PseudoProbe, u64)> {
    let mut counts: HashMap<ProbeKey, (&PseudoProbe, u64)> = HashMap::new();
    for (&(b, e), &c) in ranges {
        for (addr, _) in binary.instructions_in(b, e) {
            let probes = binary.probes_at(addr);
            if probes.is_empty() || !profiled.contains(binary, addr) {
                continue;
            }
            for p in probes {
                let key = (
                    p.address,
                    p.node,
                    p.index,
                    p.discriminator,
                    p.kind.is_call(),
                );
                let v = counts.entry(key).or_insert((p, 0));
                v.1 = v.1.saturating_add(c);
            }
        }
    }
    counts.into_iter().collect()
}

/// Flat probe-based profile (`ProfileGenerator::generateProbeBasedProfile`).
pub fn generate_flat_probe<B: BinaryView>(
    binary: &B,
    counters: &ContextCounters,
    opts: &GenerateOptions,
) -> SampleProfile {
    let fs = binary.uses_fs_discriminator();
    let mut profiles = FlatProfiles::default();
    let profiled = ProfiledFunctions::of_counters(binary, counters);
    let ranges = preprocess_ranges(binary, counters, opts, Some(&profiled));
    for (probe, c) in probe_counts(binary, &ranges, &profiled).into_values() {
        let frames = binary.probe_inline_context(probe, true);
        if frames.is_empty() {
            continue;
        }
        let f = leaf_profile(&mut profiles, binary, &frames, c, fs);
        f.add_body_samples(LineLocation::new(probe.index, probe.discriminator), c);
        if probe.index == 1 {
            f.add_head_samples(c);
        }
    }
    for (&(src, dst), &c) in &counters.branches {
        let Some(callee) = binary.callee_name_at(dst) else {
            continue;
        };
        let Some(call_probe) = binary.call_probe_at(src) else {
            continue;
        };
        let frames = binary.probe_inline_context(call_probe, true);
        if let Some(leaf) = frames.last() {
            let loc = leaf.raw_location();
            let f = leaf_profile(&mut profiles, binary, &frames, 0, fs);
            f.add_called_target_samples(loc, callee, c);
        }
    }
    update_function_samples(&mut profiles, opts);
    profiles.into_profile(fs, true)
}
