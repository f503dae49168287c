//! Stale functions: a probe-based profile records each function's CFG checksum
//! (`!CFGChecksum`, the `FuncHash` of its `.pseudo_probe_desc` record at profiling time).
//! When the source changes, the compiler's new checksum differs and clang's sample loader
//! ignores that function's profile (LLVM's `SampleProfileLoader` with
//! `-profile-checksum-mismatch`), so a profile is stale function by function.
//!
//! Every [`FunctionSamples`] with a non-zero checksum is checked, top-level and nested
//! inlinees alike (each carries its own function's checksum). A function the binary has no
//! descriptor for is listed in [`StaleReport::not_in_binary`]: it was removed or renamed,
//! which the loader ignores too, but it is not a checksum mismatch and does not fail.

use std::collections::{BTreeMap, BTreeSet};

use crate::profile::{FunctionSamples, SampleProfile};

/// One function whose profile checksum differs from the binary's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StaleFunction {
    /// Function name (as the profile and `.pseudo_probe_desc` spell it).
    pub name: String,
    /// The checksums found in the profile for it (several when contexts disagree).
    pub profile_checksums: Vec<u64>,
    /// The binary's checksum.
    pub binary_checksum: u64,
}

/// The stale check's result.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StaleReport {
    /// Distinct probe-based functions checked.
    pub checked: usize,
    /// Functions whose checksum differs, by name.
    pub stale: Vec<StaleFunction>,
    /// Probe-based functions of the profile without a descriptor in the binary.
    pub not_in_binary: Vec<String>,
    /// The profile is probe-based (it has checksums) and the binary has no pseudo probes
    /// (built without `-fpseudo-probe-for-profiling`): clang ignores the whole profile for
    /// such a build (warning "Pseudo-probe-based profile requires SampleProfileProbePass").
    pub binary_without_probes: bool,
}

impl StaleReport {
    /// True when no function is stale and the profile fits the binary's kind.
    pub fn passed(&self) -> bool {
        self.stale.is_empty() && !self.binary_without_probes
    }
}

fn collect(fs: &FunctionSamples, out: &mut BTreeMap<String, BTreeSet<u64>>) {
    if fs.checksum != 0 {
        out.entry(fs.name().to_string())
            .or_default()
            .insert(fs.checksum);
    }
    for callees in fs.callsites.values() {
        for callee in callees.values() {
            collect(callee, out);
        }
    }
}

/// Compares every checksum of `profile` with `binary_checksum(name)` (the binary's
/// `.pseudo_probe_desc` hash of that function, `None` when it has none).
pub fn check_stale(
    profile: &SampleProfile,
    binary_checksum: impl Fn(&str) -> Option<u64>,
) -> StaleReport {
    let mut by_name = BTreeMap::new();
    for fs in profile.profiles.values() {
        collect(fs, &mut by_name);
    }
    let mut report = StaleReport {
        checked: by_name.len(),
        ..StaleReport::default()
    };
    for (name, checksums) in by_name {
        match binary_checksum(&name) {
            None => report.not_in_binary.push(name),
            Some(hash) if checksums.iter().any(|&c| c != hash) => {
                report.stale.push(StaleFunction {
                    name,
                    profile_checksums: checksums.into_iter().collect(),
                    binary_checksum: hash,
                })
            }
            Some(_) => {}
        }
    }
    report
}

/// The share of body samples (0 to 1) that lie in functions whose checksum differs from
/// `binary_checksum(name)`: what clang's sample loader would drop. Every nesting level
/// counts its own body samples; 0 for a profile without body samples.
pub fn stale_sample_share(
    profile: &SampleProfile,
    binary_checksum: impl Fn(&str) -> Option<u64>,
) -> f64 {
    fn walk(
        fs: &FunctionSamples,
        check: &dyn Fn(&str) -> Option<u64>,
        stale: &mut u64,
        total: &mut u64,
    ) {
        let own: u64 = fs
            .body
            .values()
            .map(|b| b.count)
            .fold(0, u64::saturating_add);
        *total = total.saturating_add(own);
        if fs.checksum != 0 && check(fs.name()).is_some_and(|h| h != fs.checksum) {
            *stale = stale.saturating_add(own);
        }
        for callees in fs.callsites.values() {
            for callee in callees.values() {
                walk(callee, check, stale, total);
            }
        }
    }
    let (mut stale, mut total) = (0u64, 0u64);
    for fs in profile.profiles.values() {
        walk(fs, &binary_checksum, &mut stale, &mut total);
    }
    if total == 0 {
        0.0
    } else {
        stale as f64 / total as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::{LineLocation, SampleContext};

    fn func(name: &str, checksum: u64) -> FunctionSamples {
        let mut f = FunctionSamples::new(SampleContext::from_name(name));
        f.checksum = checksum;
        f
    }

    #[test]
    fn reports_mismatches_by_name_including_nested_inlinees() {
        let mut main = func("main", 10);
        *main.callee_mut(LineLocation::new(3, 0), "foo") = func("foo", 21);
        let mut p = SampleProfile::default();
        p.profiles.insert(main.context.clone(), main);
        let foo = func("foo", 20);
        p.profiles.insert(foo.context.clone(), foo);
        let gone = func("gone", 5);
        p.profiles.insert(gone.context.clone(), gone);
        let line_based = func("lines", 0);
        p.profiles.insert(line_based.context.clone(), line_based);

        let binary = |name: &str| match name {
            "main" => Some(10),
            "foo" => Some(20),
            "lines" => Some(1),
            _ => None,
        };
        let r = check_stale(&p, binary);
        assert_eq!(r.checked, 3);
        assert_eq!(
            r.stale,
            vec![StaleFunction {
                name: "foo".into(),
                profile_checksums: vec![20, 21],
                binary_checksum: 20
            }]
        );
        assert_eq!(r.not_in_binary, vec!["gone".to_string()]);
        assert!(!r.passed());
    }

    #[test]
    fn stale_share_weighs_body_samples_at_every_level() {
        let mut main = func("main", 10);
        main.body.entry(LineLocation::new(1, 0)).or_default().count = 30;
        let mut foo = func("foo", 21);
        foo.body.entry(LineLocation::new(2, 0)).or_default().count = 10;
        *main.callee_mut(LineLocation::new(3, 0), "foo") = foo;
        let mut p = SampleProfile::default();
        p.profiles.insert(main.context.clone(), main);
        let binary = |name: &str| match name {
            "main" => Some(10),
            "foo" => Some(20),
            _ => None,
        };
        assert_eq!(stale_sample_share(&p, binary), 0.25);
        assert_eq!(stale_sample_share(&p, |_| Some(10)), 0.25);
        assert_eq!(stale_sample_share(&SampleProfile::default(), binary), 0.0);
    }
}
