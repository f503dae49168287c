//! Flow conservation inside each probe-based function profile.
//!
//! A probe profile's body entry at index `i` is the count of block or call probe `i`; a
//! call probe's entry also names its call targets; `head` is the count of the entry block
//! (probe 1); `total` is what the function's samples add up to. llvm-profgen 19 fills them
//! together (`populateBodySamplesWithProbes`, `populateBoundarySamplesWithProbes`), and
//! what it does next keeps three relations, which this check verifies per
//! [`FunctionSamples`], top-level and nested:
//!
//! 1. **Call sites.** Context-sensitive generation counts a call probe once per call taken
//!    into a callee, adding the same count as a call target, so a call site's count equals
//!    the sum of its targets. Nesting a context into its caller
//!    (`removeCalledTargetAndBodySample`) takes the same amount off both, and merging
//!    contexts adds both. Flat generation counts the call instruction's range and then raises
//!    it to at least its targets (`updateCallsiteSamples`): there, targets ≤ count in a
//!    top-level profile. LLVM 19 does not raise inlined callees' call sites, whose range
//!    count may be below their targets (an LBR stack's oldest branch counts as a branch but
//!    ends no range), so in them the check is skipped.
//! 2. **Total.** Every count added to a body entry is added to the total, and an inlined
//!    callee's total to its caller's: `total = Σ body + Σ inlinee totals`, exactly for
//!    context-sensitive output. Flat output raised some call sites without touching the
//!    total, so there `total` lies between that sum minus the raised call sites (entries
//!    whose count equals their targets' sum) and the sum.
//! 3. **Entry.** The entry probe's count is also added to `head` (`isEntry`), so a top-level
//!    profile's head equals its probe-1 count (nested inlinees have no head in the formats).
//!
//! "Context-sensitive" means the profile is CS or pre-inlined (the pre-inliner runs only on
//! CS profiles, and its nested output keeps the exact relations). Two counts agree when
//! `|a − b| ≤ tolerance · max(a, b)`. Line-based functions (checksum 0) are not checked:
//! llvm-profgen keeps the maximum count of a line's instructions, so nothing is conserved.
//! Every correct corpus profile of both tools passes with tolerance 0; a profile with one
//! count changed fails.

use crate::profile::{FunctionSamples, LineLocation, SampleProfile};

/// Which relation failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IssueKind {
    /// A call site's count and the sum of its call targets disagree.
    CallSite {
        /// The call probe.
        location: LineLocation,
        /// Its count.
        count: u64,
        /// Sum of its call targets.
        targets: u64,
    },
    /// The total disagrees with the body counts plus inlinee totals.
    Total {
        /// The function's total.
        total: u64,
        /// `Σ body + Σ inlinee totals`.
        sum: u64,
        /// The smallest total accepted (`sum` for context-sensitive profiles).
        lower_bound: u64,
    },
    /// A top-level profile's head differs from its entry probe's count.
    Entry {
        /// Head samples.
        head: u64,
        /// Count of probe 1.
        entry_count: u64,
    },
}

/// One failed relation in one function profile.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConsistencyIssue {
    /// The profile: its context, then ` @ ` and the call site for nested inlinees
    /// (`main:3 @ foo`).
    pub context: String,
    /// What failed.
    pub kind: IssueKind,
}

/// The consistency check's result.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConsistencyReport {
    /// True when the exact (context-sensitive) relations were checked.
    pub exact: bool,
    /// Probe-based function profiles checked.
    pub checked: usize,
    /// Line-based function profiles skipped.
    pub skipped_line_based: usize,
    /// Every failed relation.
    pub issues: Vec<ConsistencyIssue>,
}

impl ConsistencyReport {
    /// True when no relation failed.
    pub fn passed(&self) -> bool {
        self.issues.is_empty()
    }
}

/// True when `a` and `b` agree within `tolerance` (relative to the larger).
fn agree(a: u64, b: u64, tolerance: f64) -> bool {
    a.abs_diff(b) as f64 <= tolerance * a.max(b) as f64
}

struct Checker {
    exact: bool,
    tolerance: f64,
    report: ConsistencyReport,
}

impl Checker {
    fn check(&mut self, fs: &FunctionSamples, context: &str, top_level: bool) {
        if fs.checksum == 0 {
            self.report.skipped_line_based += 1;
        } else {
            self.report.checked += 1;
            self.check_one(fs, context, top_level);
        }
        for (loc, callees) in &fs.callsites {
            for (name, callee) in callees {
                self.check(callee, &format!("{context}:{loc} @ {name}"), false);
            }
        }
    }

    fn issue(&mut self, context: &str, kind: IssueKind) {
        self.report.issues.push(ConsistencyIssue {
            context: context.to_string(),
            kind,
        });
    }

    fn check_one(&mut self, fs: &FunctionSamples, context: &str, top_level: bool) {
        let tol = self.tolerance;
        let mut sum = 0u64;
        let mut raised = 0u64;
        for (&location, b) in &fs.body {
            sum = sum.saturating_add(b.count);
            if b.call_targets.is_empty() {
                continue;
            }
            let targets = b.call_target_sum();
            let ok = if self.exact {
                agree(b.count, targets, tol)
            } else if top_level {
                targets <= b.count || agree(b.count, targets, tol)
            } else {
                // A flat profile's inlinee keeps its range count (not raised): no relation.
                true
            };
            if !ok {
                self.issue(
                    context,
                    IssueKind::CallSite {
                        location,
                        count: b.count,
                        targets,
                    },
                );
            }
            if b.count == targets {
                raised = raised.saturating_add(b.count);
            }
        }
        for callee in fs.callsites.values().flat_map(|c| c.values()) {
            sum = sum.saturating_add(callee.total);
        }
        let lower_bound = if self.exact {
            sum
        } else {
            sum.saturating_sub(raised)
        };
        let total_ok = (lower_bound..=sum).contains(&fs.total)
            || agree(fs.total, sum, tol)
            || agree(fs.total, lower_bound, tol);
        if !total_ok {
            self.issue(
                context,
                IssueKind::Total {
                    total: fs.total,
                    sum,
                    lower_bound,
                },
            );
        }
        if top_level {
            let entry_count: u64 = fs
                .body
                .range(LineLocation::new(1, 0)..LineLocation::new(2, 0))
                .map(|(_, b)| b.count)
                .sum();
            if !agree(fs.head, entry_count, tol) {
                self.issue(
                    context,
                    IssueKind::Entry {
                        head: fs.head,
                        entry_count,
                    },
                );
            }
        }
    }
}

/// Checks every probe-based function profile of `profile` (see the module docs).
pub fn check_consistency(profile: &SampleProfile, tolerance: f64) -> ConsistencyReport {
    let exact = profile.is_cs || profile.is_preinlined;
    let mut checker = Checker {
        exact,
        tolerance,
        report: ConsistencyReport {
            exact,
            ..ConsistencyReport::default()
        },
    };
    for fs in profile.profiles.values() {
        checker.check(fs, &fs.context.to_string(), true);
    }
    checker.report
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::SampleContext;

    /// `foo`: entry 10, block 3: 40, call site 4 → bar ×25 (inlined bar total 7 at 5).
    fn foo() -> FunctionSamples {
        let mut f = FunctionSamples::new(SampleContext::from_name("foo"));
        f.checksum = 99;
        f.head = 10;
        f.add_body_samples(LineLocation::new(1, 0), 10);
        f.add_body_samples(LineLocation::new(3, 0), 40);
        f.add_body_samples(LineLocation::new(4, 0), 25);
        f.add_called_target_samples(LineLocation::new(4, 0), "bar", 25);
        let bar = f.callee_mut(LineLocation::new(5, 0), "bar");
        bar.checksum = 7;
        bar.total = 7;
        bar.add_body_samples(LineLocation::new(1, 0), 7);
        f.total = 10 + 40 + 25 + 7;
        f
    }

    fn profile(f: FunctionSamples, cs: bool) -> SampleProfile {
        let mut p = SampleProfile {
            is_cs: cs,
            ..SampleProfile::default()
        };
        p.profiles.insert(f.context.clone(), f);
        p
    }

    #[test]
    fn a_conserved_profile_passes_in_both_modes() {
        for cs in [true, false] {
            let r = check_consistency(&profile(foo(), cs), 0.0);
            assert_eq!((r.exact, r.checked, r.issues.len()), (cs, 2, 0), "{r:?}");
        }
    }

    #[test]
    fn a_changed_block_count_breaks_the_total() {
        let mut f = foo();
        f.body.get_mut(&LineLocation::new(3, 0)).unwrap().count = 80;
        let r = check_consistency(&profile(f, true), 0.01);
        assert_eq!(
            r.issues,
            vec![ConsistencyIssue {
                context: "foo".into(),
                kind: IssueKind::Total {
                    total: 82,
                    sum: 122,
                    lower_bound: 122
                }
            }]
        );
    }

    #[test]
    fn call_sites_are_exact_in_cs_and_bounded_below_in_flat() {
        let mut f = foo();
        // A flat profile's call site counted 30 by its range, 25 by its targets.
        f.body.get_mut(&LineLocation::new(4, 0)).unwrap().count = 30;
        f.total += 5;
        assert!(check_consistency(&profile(f.clone(), false), 0.0).passed());
        let r = check_consistency(&profile(f, true), 0.1);
        assert_eq!(
            r.issues,
            vec![ConsistencyIssue {
                context: "foo".into(),
                kind: IssueKind::CallSite {
                    location: LineLocation::new(4, 0),
                    count: 30,
                    targets: 25
                }
            }]
        );
        // Within a 20% tolerance 30 and 25 agree.
        assert!(check_consistency(&profile(foo(), true), 0.2).passed());
    }

    #[test]
    fn flat_inlinee_call_sites_are_not_bounded() {
        // An inlinee's call site below its targets: only a flat profile allows it.
        let mut f = foo();
        let bar = f.callee_mut(LineLocation::new(5, 0), "bar");
        bar.add_body_samples(LineLocation::new(2, 0), 3);
        bar.add_called_target_samples(LineLocation::new(2, 0), "baz", 4);
        bar.total += 3;
        f.total += 3;
        assert!(check_consistency(&profile(f.clone(), false), 0.0).passed());
        let r = check_consistency(&profile(f.clone(), true), 0.0);
        assert_eq!(r.issues.len(), 1, "{r:?}");
        // At the top level the flat bound holds.
        f.body.get_mut(&LineLocation::new(4, 0)).unwrap().count = 20;
        f.total -= 5;
        let r = check_consistency(&profile(f, false), 0.0);
        assert_eq!(r.issues.len(), 1, "{r:?}");
    }

    #[test]
    fn flat_totals_may_lack_the_raised_call_sites() {
        // Raised from a range count of 0 to its 25 targets: the total kept 10 + 40 + 7.
        let mut f = foo();
        f.total = 57;
        assert!(check_consistency(&profile(f.clone(), false), 0.0).passed());
        let r = check_consistency(&profile(f, true), 0.0);
        assert_eq!(r.issues.len(), 1);
    }

    #[test]
    fn head_must_match_the_entry_probe_and_nested_contexts_are_named() {
        let mut f = foo();
        f.head = 11;
        f.callsites
            .get_mut(&LineLocation::new(5, 0))
            .unwrap()
            .get_mut("bar")
            .unwrap()
            .total = 9;
        let r = check_consistency(&profile(f, true), 0.0);
        let kinds: Vec<(&str, &IssueKind)> = r
            .issues
            .iter()
            .map(|i| (i.context.as_str(), &i.kind))
            .collect();
        assert_eq!(
            kinds,
            vec![
                (
                    "foo",
                    &IssueKind::Total {
                        total: 82,
                        sum: 84,
                        lower_bound: 84
                    }
                ),
                (
                    "foo",
                    &IssueKind::Entry {
                        head: 11,
                        entry_count: 10
                    }
                ),
                (
                    "foo:5 @ bar",
                    &IssueKind::Total {
                        total: 9,
                        sum: 7,
                        lower_bound: 7
                    }
                ),
            ]
        );
    }

    #[test]
    fn line_based_functions_are_skipped() {
        let mut f = foo();
        f.checksum = 0;
        f.total = 1;
        let r = check_consistency(&profile(f, true), 0.0);
        assert_eq!((r.checked, r.skipped_line_based, r.passed()), (1, 1, true));
    }
}
