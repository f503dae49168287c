//! [`UnwindStats`]: counts of every per-sample problem llvm-profgen 19 warns about, so the
//! CLI can print the same warning summary (`emitWarningSummary`: "P%(N/T) message").

use std::collections::BTreeSet;

/// Counters gathered while preparing, aggregating and unwinding samples.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct UnwindStats {
    /// llvm-profgen's `NumTotalSample`, the denominator of the first warnings: it counts
    /// parse attempts, so the empty line `perf script` prints before each sample with a
    /// call chain counts as one more sample (a hybrid sample counts 2).
    pub total_samples: u64,
    /// Samples fed, really (those filtered by pid excluded).
    pub samples_seen: u64,
    /// Samples skipped by [`crate::UnwindOptions::sample_pids`].
    pub filtered_by_pid: u64,
    /// Samples whose leaf frame is outside the binary (`NumLeafExternalFrame`).
    pub leaf_external_frames: u64,
    /// Samples with a leading outgoing LBR (`NumLeadingOutgoingLBR`; llvm-profgen 19 never
    /// increments it, kept for the summary's shape).
    pub leading_outgoing_lbr: u64,
    /// Distinct return addresses whose previous instruction is not a call, where a stack
    /// was truncated (`InvalidReturnAddresses`).
    pub invalid_return_addresses: BTreeSet<u64>,
    /// Hybrid samples dropped because the stack was empty or its leaf in a prolog/epilog.
    pub dropped_stack_samples: u64,
    /// Samples dropped because no LBR entry was left (all external to external).
    pub dropped_empty_lbr_samples: u64,
    /// Hybrid samples whose call chain missed the leaf's caller (a prologue or epilogue)
    /// and got it back from the sample's registers ([`crate::UnwindOptions::stack_repair`]).
    pub repaired_stacks: u64,
    /// Hybrid samples whose call chain missed the leaf's caller and could not be repaired
    /// (also in `dropped_stack_samples`).
    pub unrepairable_stacks: u64,
    /// Distinct aggregated samples (`AggregatedSamples.size()`, summed over flushes).
    pub aggregated_samples: u64,
    /// Sum of the counts of the fall-through ranges of the aggregated samples (the total
    /// of `warnInvalidRange`); 0 means "No samples in perf script!".
    pub total_range_samples: u64,
    /// Range samples not starting on an instruction or not ending on a branch
    /// (`warnInvalidRange`'s `InstNotBoundary`; needs [`crate::code_layout::RangeChecks`]).
    pub ranges_not_on_boundary: u64,
    /// Range samples starting outside every function (`UnmatchedRange`).
    pub ranges_outside_functions: u64,
    /// Range samples crossing the end of their function (`RangeCrossFunc`).
    pub ranges_crossing_functions: u64,
    /// Range samples that are not valid fall-throughs (`BogusRange`).
    pub bogus_ranges: u64,
    /// True when the range checks above were computed.
    pub range_checks_done: bool,
    /// The "No relevant mmap event is matched" warning, once, when it was emitted.
    pub missing_mmap_warning: Option<String>,
    /// The binary is the kernel ([`crate::BinaryLoadInfo::kernel`]) and no event mapped
    /// it: llvm-profgen 19 stops with "Kernel is requested, but no kernel is found in mmap
    /// events."
    pub kernel_not_mapped: bool,
    /// Samples whose stack leaf is before or too far from the LBR tip ("Bogus trace").
    pub bogus_traces: u64,
    /// LBR entries of unwound samples (`NumTotalBranches`).
    pub total_branches: u64,
    /// Calls from outside that did not match the call frame stack
    /// (`NumMismatchedExtCallBranch`).
    pub mismatched_ext_call_branches: u64,
    /// Calls that did not match the call frame stack, likely in a prolog/epilog
    /// (`NumMismatchedProEpiBranch`).
    pub mismatched_prolog_epilog_branches: u64,
    /// Linear ranges whose both ends are external (`NumPairedExtAddr`).
    pub paired_external_addresses: u64,
    /// Linear ranges with exactly one external end (`NumUnpairedExtAddr`).
    pub unpaired_external_addresses: u64,
    /// Artificial call branches from outside (`NumExtCallBranch`; not incremented by 19).
    pub ext_call_branches: u64,
    /// Artificial calls without an external frame (`NumMissingExternalFrame`; idem).
    pub missing_external_frames: u64,
    /// Non-leaf frames where a context was truncated (`UntrackedCallsites`).
    pub untracked_callsites: BTreeSet<u64>,
    /// Context-sensitive contexts produced (`SampleCounters.size()`).
    pub contexts: u64,
    /// With [`crate::UnwindOptions::detailed_warnings`]: each invalid range
    /// `warnInvalidRange` names (start, end, message), in no particular order.
    pub range_details: Vec<(u64, u64, &'static str)>,
}

/// `warnInvalidRange`'s message for a range not on instruction boundaries.
pub const RANGE_NOT_ON_BOUNDARY: &str =
    "Range is not on instruction boundary, likely due to profile and binary mismatch.";
/// `warnInvalidRange`'s message for a range outside every function.
pub const RANGE_OUTSIDE_FUNCTIONS: &str =
    "Range does not belong to any functions, likely from PLT, .init or .fini section.";
/// `warnInvalidRange`'s message for a range crossing its function's end.
pub const RANGE_CROSSING_FUNCTIONS: &str =
    "Fall through range should not cross function boundaries, likely due to profile and binary mismatch.";
/// `warnInvalidRange`'s message for a range that is not a valid fall-through.
pub const RANGE_BOGUS: &str = "Range start is after or too far from range end.";

/// The message of the leaf-external-frame warning.
pub const LEAF_EXTERNAL_FRAME: &str = "of samples have leaf external frame in call stack.";

/// llvm-profgen's `emitWarningSummary` text (without the "warning: " prefix), or `None`
/// when it prints nothing (zero count or zero total).
pub fn warning_summary(num: u64, total: u64, message: &str) -> Option<String> {
    if num == 0 || total == 0 {
        return None;
    }
    let percent = num as f64 * 100.0 / total as f64;
    Some(format!("{percent:.2}%({num}/{total}) {message}"))
}

impl UnwindStats {
    /// Adds the counts of `other` (e.g. of another batch).
    pub fn merge(&mut self, other: &UnwindStats) {
        self.total_samples += other.total_samples;
        self.samples_seen += other.samples_seen;
        self.filtered_by_pid += other.filtered_by_pid;
        self.leaf_external_frames += other.leaf_external_frames;
        self.leading_outgoing_lbr += other.leading_outgoing_lbr;
        self.invalid_return_addresses
            .extend(other.invalid_return_addresses.iter().copied());
        self.dropped_stack_samples += other.dropped_stack_samples;
        self.dropped_empty_lbr_samples += other.dropped_empty_lbr_samples;
        self.repaired_stacks += other.repaired_stacks;
        self.unrepairable_stacks += other.unrepairable_stacks;
        self.aggregated_samples += other.aggregated_samples;
        self.total_range_samples += other.total_range_samples;
        self.ranges_not_on_boundary += other.ranges_not_on_boundary;
        self.ranges_outside_functions += other.ranges_outside_functions;
        self.ranges_crossing_functions += other.ranges_crossing_functions;
        self.bogus_ranges += other.bogus_ranges;
        self.range_checks_done |= other.range_checks_done;
        self.kernel_not_mapped |= other.kernel_not_mapped;
        if self.missing_mmap_warning.is_none() {
            self.missing_mmap_warning = other.missing_mmap_warning.clone();
        }
        self.bogus_traces += other.bogus_traces;
        self.total_branches += other.total_branches;
        self.mismatched_ext_call_branches += other.mismatched_ext_call_branches;
        self.mismatched_prolog_epilog_branches += other.mismatched_prolog_epilog_branches;
        self.paired_external_addresses += other.paired_external_addresses;
        self.unpaired_external_addresses += other.unpaired_external_addresses;
        self.ext_call_branches += other.ext_call_branches;
        self.missing_external_frames += other.missing_external_frames;
        self.untracked_callsites
            .extend(other.untracked_callsites.iter().copied());
        self.contexts += other.contexts;
        self.range_details
            .extend(other.range_details.iter().copied());
    }

    /// Where a warning's figure differs from the one llvm-profgen 19 prints for the same
    /// input, that figure (convert prints these after the warnings, as notes): 19's
    /// leaf-external-frame share divides by [`UnwindStats::total_samples`], which counts
    /// each sample with a call stack twice.
    pub fn notes(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.total_samples != self.samples_seen {
            if let Some(theirs) = warning_summary(
                self.leaf_external_frames,
                self.total_samples,
                LEAF_EXTERNAL_FRAME,
            ) {
                out.push(format!(
                    "llvm-profgen 19 prints the leaf external frame share as \"{theirs}\": its \
                     perf script reader counts the blank line before each sample with a call \
                     stack as one more sample"
                ));
            }
        }
        out
    }

    /// The warnings llvm-profgen 19 prints while reading samples and unwinding, in its
    /// order, without the "warning: " prefix (the per-sample "Bogus trace" lines aside).
    /// The `warnInvalidRange` percentages appear when the layout offered
    /// [`crate::code_layout::RangeChecks`]. For line contexts llvm-profgen's context count
    /// is the number of symbolized contexts: set [`UnwindStats::contexts`] to it first.
    pub fn warnings(&self, context_sensitive: bool) -> Vec<String> {
        self.warnings_detailed(context_sensitive, false)
    }

    /// [`UnwindStats::warnings`], with `detailed` (`--show-detailed-warning`) the warning of
    /// each item before its summary, as llvm-profgen 19 prints them: each invalid return
    /// address, each invalid range (`[   start,     end]: message`, canonical addresses,
    /// sorted here where llvm-profgen's order is its hash map's) and each call site where
    /// a context was truncated.
    pub fn warnings_detailed(&self, context_sensitive: bool, detailed: bool) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(w) = &self.missing_mmap_warning {
            out.push(w.clone());
        }
        // The samples read: llvm-profgen 19 divides by `total_samples` (see `notes`).
        out.extend(warning_summary(
            self.leaf_external_frames,
            self.samples_seen,
            LEAF_EXTERNAL_FRAME,
        ));
        let mut push = |num, total, msg: &str| out.extend(warning_summary(num, total, msg));
        push(
            self.leading_outgoing_lbr,
            self.total_samples,
            "of samples have leading external LBR.",
        );
        if detailed {
            for a in &self.invalid_return_addresses {
                out.push(format!(
                    "Truncated stack sample due to invalid return address at {a:#x}, likely caused by frame pointer omission"
                ));
            }
        }
        let mut push = |num, total, msg: &str| out.extend(warning_summary(num, total, msg));
        push(
            self.invalid_return_addresses.len() as u64,
            self.aggregated_samples,
            "of truncated stack samples due to invalid return address, likely caused by frame pointer omission.",
        );
        if self.total_range_samples == 0 {
            out.push("No samples in perf script!".to_string());
        } else if self.range_checks_done {
            if detailed {
                let mut details = self.range_details.clone();
                details.sort();
                for (start, end, msg) in details {
                    out.push(format!("[{start:8x},{end:8x}]: {msg}"));
                }
            }
            let total = self.total_range_samples;
            let mut push = |num, msg: &str| out.extend(warning_summary(num, total, msg));
            push(
                self.ranges_not_on_boundary,
                "of samples are from ranges that are not on instruction boundary.",
            );
            push(
                self.ranges_outside_functions,
                "of samples are from ranges that do not belong to any functions.",
            );
            push(
                self.ranges_crossing_functions,
                "of samples are from ranges that do cross function boundaries.",
            );
            push(
                self.bogus_ranges,
                "of samples are from ranges that have range start after or too far from range end acrossing the unconditinal jmp.",
            );
        }
        if !context_sensitive {
            return out;
        }
        if detailed {
            for a in &self.untracked_callsites {
                out.push(format!(
                    "Profile context truncated due to missing probe for call instruction at {a:#x}"
                ));
            }
        }
        let mut push = |num, total, msg: &str| out.extend(warning_summary(num, total, msg));
        push(
            self.untracked_callsites.len() as u64,
            self.contexts,
            "of profiled contexts are truncated due to missing probe for call instruction.",
        );
        push(
            self.mismatched_ext_call_branches,
            self.total_branches,
            "of branches'source is a call instruction but doesn't match call frame stack, likely due to unwinding error of external frame.",
        );
        push(
            self.paired_external_addresses * 2,
            self.total_branches,
            "of branches containing paired external address.",
        );
        push(
            self.unpaired_external_addresses,
            self.total_branches,
            "of branches containing external address but doesn't have another external address to pair, likely due to interrupt jmp or broken perf script.",
        );
        push(
            self.mismatched_prolog_epilog_branches,
            self.total_branches,
            "of branches'source is a call instruction but doesn't match call frame stack, likely due to frame in prolog/epilog.",
        );
        push(
            self.missing_external_frames,
            self.ext_call_branches,
            "of artificial call branches but doesn't have an external frame to match.",
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_format_matches_emit_warning_summary() {
        assert_eq!(
            warning_summary(1, 3, "of x."),
            Some("33.33%(1/3) of x.".to_string())
        );
        assert_eq!(warning_summary(0, 3, "m"), None);
        assert_eq!(warning_summary(3, 0, "m"), None);
        assert_eq!(
            warning_summary(2, 2, "m"),
            Some("100.00%(2/2) m".to_string())
        );
    }

    #[test]
    fn detailed_warnings_come_before_their_summaries() {
        let s = UnwindStats {
            aggregated_samples: 4,
            invalid_return_addresses: BTreeSet::from([0x1234]),
            total_range_samples: 10,
            range_checks_done: true,
            ranges_outside_functions: 3,
            range_details: vec![(0x2000, 0x2008, RANGE_OUTSIDE_FUNCTIONS)],
            contexts: 2,
            untracked_callsites: BTreeSet::from([0x40]),
            ..UnwindStats::default()
        };
        assert_eq!(
            s.warnings_detailed(true, true),
            vec![
                "Truncated stack sample due to invalid return address at 0x1234, likely caused by frame pointer omission",
                "25.00%(1/4) of truncated stack samples due to invalid return address, likely caused by frame pointer omission.",
                "[    2000,    2008]: Range does not belong to any functions, likely from PLT, .init or .fini section.",
                "30.00%(3/10) of samples are from ranges that do not belong to any functions.",
                "Profile context truncated due to missing probe for call instruction at 0x40",
                "50.00%(1/2) of profiled contexts are truncated due to missing probe for call instruction.",
            ]
        );
        assert_eq!(s.warnings(true).len(), 3);
    }

    #[test]
    fn warnings_in_order() {
        let mut s = UnwindStats {
            total_samples: 4,
            samples_seen: 4,
            leaf_external_frames: 1,
            aggregated_samples: 2,
            total_range_samples: 5,
            total_branches: 8,
            paired_external_addresses: 1,
            ..UnwindStats::default()
        };
        s.invalid_return_addresses.insert(0x40);
        assert_eq!(
            s.warnings(true),
            vec![
                "25.00%(1/4) of samples have leaf external frame in call stack.".to_string(),
                "50.00%(1/2) of truncated stack samples due to invalid return address, likely caused by frame pointer omission.".to_string(),
                "25.00%(2/8) of branches containing paired external address.".to_string(),
            ]
        );
        assert_eq!(s.warnings(false).len(), 2);
        s.total_range_samples = 0;
        assert_eq!(s.warnings(false)[2], "No samples in perf script!");
        assert!(s.notes().is_empty());
        // Two samples with call stacks: the share is of the 2 samples read; llvm-profgen 19
        // divides by 4 (a note gives its figure).
        s.samples_seen = 2;
        assert_eq!(
            s.warnings(true)[0],
            "50.00%(1/2) of samples have leaf external frame in call stack."
        );
        assert_eq!(
            s.notes(),
            [
                "llvm-profgen 19 prints the leaf external frame share as \"25.00%(1/4) of \
                 samples have leaf external frame in call stack.\": its perf script reader \
                 counts the blank line before each sample with a call stack as one more sample"
            ]
        );
    }
}
