//! LBR-only (non-CS) counting: llvm-profgen 19's `computeCounterFromLBR`.

use crate::counter_table::{ContextId, CounterTable};
use crate::sample_prep::PerfSample;
use crate::CodeLayout;

/// Adds one aggregated sample's branches and fall-through ranges, `repeat` times, to the
/// single flat context (`context` of `out`).
///
/// Entries are newest first: the range between entry `i`'s target and entry `i−1`'s
/// source is what ran in between. A branch is counted when its target is in the binary
/// (its source may be external: an external caller, later a head sample); a range when
/// both ends are instructions and no unconditional transfer lies inside.
pub fn count_lbr_sample(
    sample: &PerfSample,
    repeat: u64,
    layout: &dyn CodeLayout,
    out: &mut CounterTable,
    context: ContextId,
) {
    let mut end = 0u64;
    for br in &sample.lbr {
        let target_is_code = layout.is_code(br.target);
        if target_is_code {
            out.add_branch(context, br.source, br.target, repeat);
        }
        let start = br.target;
        if target_is_code && layout.is_code(end) && layout.is_valid_fall_through_range(start, end) {
            out.add_range(context, start, end, repeat);
        }
        end = br.source;
    }
}

/// `--leading-ip-only` flat counting (`computeCounterFromLBR`): the first entry, when its
/// source is its target (a sampled IP) and code, is a one-address range; nothing else of
/// the sample is counted.
pub fn count_leading_ip_sample(
    sample: &PerfSample,
    repeat: u64,
    layout: &dyn CodeLayout,
    out: &mut CounterTable,
    context: ContextId,
) {
    if let Some(first) = sample.lbr.first() {
        if first.source == first.target && layout.is_code(first.target) {
            out.add_range(context, first.source, first.target, repeat);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sample_prep::Branch;
    use crate::test_support::{FakeLayout, Inst};
    use crate::{ContextCounters, CounterKind, EXTERNAL_ADDR};

    fn count(s: &PerfSample, repeat: u64, l: &FakeLayout) -> ContextCounters {
        let mut table = CounterTable::new(CounterKind::Flat);
        let flat = table.context(&[]);
        count_lbr_sample(s, repeat, l, &mut table, flat);
        table.into_counter_set().contexts.remove(&vec![]).unwrap()
    }

    /// 0x10 a; 0x12 jcc; 0x14 b; 0x16 jmp; 0x18 c; 0x1a call; 0x1f d; 0x20 ret
    fn layout() -> FakeLayout {
        FakeLayout::new(
            &[
                (0x10, Inst::Other),
                (0x12, Inst::CondBranch),
                (0x14, Inst::Other),
                (0x16, Inst::Jump),
                (0x18, Inst::Other),
                (0x1a, Inst::Call),
                (0x1f, Inst::Other),
                (0x20, Inst::Return),
            ],
            &[0x10],
        )
    }

    fn br(source: u64, target: u64) -> Branch {
        Branch { source, target }
    }

    #[test]
    fn ranges_between_consecutive_entries() {
        let l = layout();
        // Newest first: ...0x10 → jcc 0x12 taken to 0x18 → call at 0x1a → ext... ret 0x20 → ext
        let s = PerfSample {
            call_stack: vec![],
            lbr: vec![
                br(0x20, EXTERNAL_ADDR),
                br(EXTERNAL_ADDR, 0x1f),
                br(0x1a, EXTERNAL_ADDR),
                br(0x12, 0x18),
                br(0x16, 0x10),
            ],
        };
        let c = count(&s, 3, &l);
        assert_eq!(
            c.branches.iter().map(|(k, v)| (*k, *v)).collect::<Vec<_>>(),
            vec![
                ((EXTERNAL_ADDR, 0x1f), 3),
                ((0x12, 0x18), 3),
                ((0x16, 0x10), 3)
            ]
        );
        // [0x1f, 0x20] (ext → 0x1f, then ret at 0x20), [0x18, 0x1a], [0x10, 0x12].
        assert_eq!(
            c.ranges.iter().map(|(k, v)| (*k, *v)).collect::<Vec<_>>(),
            vec![((0x10, 0x12), 3), ((0x18, 0x1a), 3), ((0x1f, 0x20), 3)]
        );
    }

    #[test]
    fn leading_ip_counts_the_first_entry_only_when_it_is_an_ip() {
        let l = layout();
        let mut table = CounterTable::new(CounterKind::Flat);
        let flat = table.context(&[]);
        let ip = |a| PerfSample {
            call_stack: vec![],
            lbr: vec![br(a, a), br(0x12, 0x18)],
        };
        count_leading_ip_sample(&ip(0x14), 2, &l, &mut table, flat);
        // Not an instruction; a branch (source ≠ target) is no IP.
        count_leading_ip_sample(&ip(0x15), 5, &l, &mut table, flat);
        let branch = PerfSample {
            call_stack: vec![],
            lbr: vec![br(0x12, 0x18)],
        };
        count_leading_ip_sample(&branch, 7, &l, &mut table, flat);
        let c = table.into_counter_set().contexts.remove(&vec![]).unwrap();
        assert_eq!(
            c.ranges.iter().map(|(k, v)| (*k, *v)).collect::<Vec<_>>(),
            vec![((0x14, 0x14), 2)]
        );
        assert!(c.branches.is_empty());
    }

    #[test]
    fn invalid_ranges_dropped_branches_kept() {
        let l = layout();
        // [0x14, 0x1a] crosses the jmp at 0x16; [0x18, 0x12] is backwards.
        let s = PerfSample {
            call_stack: vec![],
            lbr: vec![br(0x1a, 0x10), br(0x12, 0x14), br(0x12, 0x18)],
        };
        let c = count(&s, 1, &l);
        assert!(c.ranges.is_empty());
        assert_eq!(c.branches.len(), 3);
    }
}
