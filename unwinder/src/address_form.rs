//! Line contexts of a binary without inline frames, counted by address and expanded when
//! the counters are taken.
//!
//! llvm-profgen's line unwinding (`unwindLinear`) walks every range back one instruction
//! at a time and splits it where the inline context changes; in a binary without DWARF
//! no two instructions share one (`inlineContextEqual` is false), so every instruction of
//! every range becomes a frame of its own under the caller's frame, with a one-instruction
//! range, and every branch is recorded on a frame at its source. Counting that per sample
//! makes a frame and a context per instruction. A live shard counts such a binary by
//! address instead, as probe contexts are counted: each range and branch on the caller's
//! frame, its key marked with [`ADDRESS_FORM_MARK`]. Every frame being its path from the
//! root, the line form follows from the caller's key and the addresses alone, which
//! [`expand_address_form`] rebuilds when the counters leave the counter table: the same
//! counters as walking each sample. Samples that make a frame at address 0 are walked in
//! line form on a trie of their own, as before ([`crate::VirtualUnwinder`]).

use crate::{CodeLayout, CounterSet, EXTERNAL_ADDR};

/// The last element of the key of a context counted by address (no instruction lives at
/// the top of the address space).
pub const ADDRESS_FORM_MARK: u64 = u64::MAX;

/// Replaces every context of `set` counted by address (its key ends in
/// [`ADDRESS_FORM_MARK`]) by the line contexts llvm-profgen's walk gives over `layout`:
/// each instruction of a range `[start, end]`, walked back from `end` with
/// [`CodeLayout::previous_instruction`], a one-instruction range in the caller's context
/// and the instruction; each branch in the caller's context and its source (a branch from
/// outside the binary, kept on the root, in the caller's context alone).
pub fn expand_address_form(set: &mut CounterSet, layout: &dyn CodeLayout) {
    let marked: Vec<Vec<u64>> = set
        .contexts
        .keys()
        .filter(|k| k.last() == Some(&ADDRESS_FORM_MARK))
        .cloned()
        .collect();
    for mut key in marked {
        let Some(counters) = set.contexts.remove(&key) else {
            continue;
        };
        key.pop();
        let caller = key.len();
        let mut add = |set: &mut CounterSet, leaf: u64, range: (u64, u64), n: u64, branch: bool| {
            key.truncate(caller);
            // A frame at address 0 adds nothing to a key.
            if leaf != 0 {
                key.push(leaf);
            }
            let c = set.context_mut(&key);
            let counter = if branch {
                c.branches.entry(range).or_default()
            } else {
                c.ranges.entry(range).or_default()
            };
            *counter = counter.wrapping_add(n);
        };
        for (&(start, end), &n) in &counters.ranges {
            // `VirtualUnwinder::walk_line` without inline frames.
            let (mut ip, mut piece_end) = (end, end);
            while ip > start {
                let prev = ip;
                ip = layout.previous_instruction(ip).unwrap_or(0);
                if prev <= piece_end {
                    add(set, prev, (prev, piece_end), n, false);
                }
                piece_end = ip;
            }
            if ip <= piece_end {
                add(set, ip, (ip, piece_end), n, false);
            }
        }
        for (&(source, target), &n) in &counters.branches {
            let leaf = if source == EXTERNAL_ADDR { 0 } else { source };
            add(set, leaf, (source, target), n, true);
        }
    }
}
