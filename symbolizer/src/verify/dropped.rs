//! Dropped functions: code that ran (it has samples in the raw counters) but whose function
//! has no profile at all, so the compiler sees it as never executed.
//!
//! **Sampled functions** ([`sampled_functions`]): every range counter with a non-zero
//! count, in every context, adds its count once to each function it covers at the leaf
//! level, the level a profile records body samples at. For a probe binary the functions
//! covered are those of the block probes whose address lies in the range (the probe's own
//! function, from `.pseudo_probe_desc`; inlined probes name the inlinee): llvm-profgen
//! records body samples only at block probes, so a range holding just a call probe
//! gives no profile; code without probes (crt start-up files, PLT) is no function of a
//! probe profile. For other binaries
//! they are the innermost DWARF inline frames of the range's instructions. Names are
//! compared in canonical form ([`crate::canonical_function_name`]); llvm-profgen's
//! ambiguous names ([`AMBIGUOUS_PREFIXES`]) are left out, as it drops their profiles.
//!
//! **Present in the profile**: the name of any [`FunctionSamples`], top-level or nested
//! inlinee at any depth, or any frame of a context (a context-sensitive profile keeps a
//! caller only as a frame of its callees' contexts).

use std::collections::{BTreeMap, BTreeSet};

use unwinder::CounterSet;

use crate::binary::ProfiledBinary;
use crate::name::canonical_function_name;
use crate::probe::ProbeKind;
use crate::profile::sample_profile::AMBIGUOUS_PREFIXES;
use crate::profile::{FunctionSamples, SampleProfile};

/// A sampled function absent from the profile.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DroppedFunction {
    /// Canonical function name.
    pub name: String,
    /// Its raw samples (see the module docs).
    pub samples: u64,
}

/// The dropped check's result.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DroppedReport {
    /// Functions with samples in the counters.
    pub sampled: usize,
    /// Those absent from the profile, hottest first.
    pub dropped: Vec<DroppedFunction>,
}

impl DroppedReport {
    /// True when no sampled function is missing.
    pub fn passed(&self) -> bool {
        self.dropped.is_empty()
    }
}

/// Raw samples per canonical function name (see the module docs).
pub fn sampled_functions(binary: &ProfiledBinary, counters: &CounterSet) -> BTreeMap<String, u64> {
    let mut out: BTreeMap<String, u64> = BTreeMap::new();
    let probes = binary.probes();
    let mut names = BTreeSet::new();
    for context in counters.contexts.values() {
        for (&(start, end), &count) in &context.ranges {
            if count == 0 || end < start {
                continue;
            }
            names.clear();
            if binary.has_pseudo_probes() {
                let first = probes.partition_point(|p| p.address < start);
                let in_range = probes[first..].iter().take_while(|p| p.address <= end);
                for p in in_range.filter(|p| p.kind == ProbeKind::Block) {
                    if let Some(desc) = binary.probe_desc(p.guid) {
                        names.insert(canonical_function_name(&desc.name));
                    }
                }
            } else {
                for (addr, _) in binary.instructions_in(start, end) {
                    if let Some(leaf) = binary.inline_frames(addr).last() {
                        names.insert(canonical_function_name(&leaf.func_name));
                    }
                }
            }
            for name in &names {
                let n = out.entry((*name).to_string()).or_default();
                *n = n.saturating_add(count);
            }
        }
    }
    out.retain(|name, _| !AMBIGUOUS_PREFIXES.iter().any(|p| name.starts_with(p)));
    out
}

fn collect_names<'a>(fs: &'a FunctionSamples, out: &mut BTreeSet<&'a str>) {
    out.insert(canonical_function_name(fs.name()));
    for callees in fs.callsites.values() {
        for callee in callees.values() {
            collect_names(callee, out);
        }
    }
}

/// Every canonical function name present in `profile` (see the module docs).
pub fn profile_function_names(profile: &SampleProfile) -> BTreeSet<&str> {
    let mut out = BTreeSet::new();
    for fs in profile.profiles.values() {
        for frame in &fs.context.frames {
            out.insert(canonical_function_name(&frame.func));
        }
        collect_names(fs, &mut out);
    }
    out
}

/// The functions of `sampled` with at least `min_samples` samples that `profile` lacks.
pub fn check_dropped(
    profile: &SampleProfile,
    sampled: &BTreeMap<String, u64>,
    min_samples: u64,
) -> DroppedReport {
    let present = profile_function_names(profile);
    let mut dropped: Vec<DroppedFunction> = sampled
        .iter()
        .filter(|&(name, &samples)| samples >= min_samples && !present.contains(name.as_str()))
        .map(|(name, &samples)| DroppedFunction {
            name: name.clone(),
            samples,
        })
        .collect();
    dropped.sort_by(|a, b| b.samples.cmp(&a.samples).then(a.name.cmp(&b.name)));
    DroppedReport {
        sampled: sampled.len(),
        dropped,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::{ContextFrame, LineLocation, SampleContext};

    #[test]
    fn names_anywhere_in_the_profile_count_as_present() {
        let mut p = SampleProfile {
            is_cs: true,
            ..SampleProfile::default()
        };
        let ctx = SampleContext::from_frames(vec![
            ContextFrame::new("main", LineLocation::new(3, 0)),
            ContextFrame::new("foo.llvm.42", LineLocation::new(0, 0)),
        ]);
        let mut foo = FunctionSamples::new(ctx.clone());
        foo.callee_mut(LineLocation::new(2, 0), "bar");
        p.profiles.insert(ctx, foo);
        let sampled: BTreeMap<String, u64> = [
            ("main", 5),
            ("foo", 9),
            ("bar", 1),
            ("baz", 7),
            ("qux", 30),
            ("cold", 1),
        ]
        .into_iter()
        .map(|(n, c)| (n.to_string(), c))
        .collect();
        let r = check_dropped(&p, &sampled, 2);
        assert_eq!(
            r.dropped,
            vec![
                DroppedFunction {
                    name: "qux".into(),
                    samples: 30
                },
                DroppedFunction {
                    name: "baz".into(),
                    samples: 7
                },
            ]
        );
        assert_eq!(r.sampled, 6);
    }
}
