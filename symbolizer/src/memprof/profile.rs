//! [`HeapProfile`]: MemProf allocation contexts aggregated across raw profiles (runs and
//! processes) of one binary. Frames are interned once; each context is a list of frame ids
//! (leaf first) with one [`MemInfoBlock`] folded with the runtime's merge rule (counts and
//! totals summed, so every `Total*/AllocCount` average is weighted by count; min/max kept;
//! histograms merged). LLVM's own `llvm-profdata merge` keeps MemProf data from one input only,
//! so this is where aggregation happens.
//!
//! [`HeapProfile::add`] folds a whole [`SymbolizedProfile`] or nothing: callers parse and
//! symbolize a file completely before adding it, so a bad file never half-merges.

use std::collections::{BTreeMap, HashMap};

use collector::memprof::MemInfoBlock;
use collector::BuildId;

use super::frame::MemProfFrame;
use super::symbolize::SymbolizedProfile;

/// Aggregated heap profile of one binary; see the module docs.
#[derive(Clone, Debug, Default)]
pub struct HeapProfile {
    build_id: Option<BuildId>,
    frames: Vec<MemProfFrame>,
    frame_ids: HashMap<MemProfFrame, u32>,
    contexts: Vec<(Box<[u32]>, MemInfoBlock)>,
    context_ids: HashMap<Box<[u32]>, usize>,
    names: BTreeMap<u64, String>,
    profiles: usize,
    dropped_contexts: usize,
}

/// How well call stacks share storage: contexts stored as paths in a trie rooted at the
/// outermost caller (as MemProf metadata chains `!callsite` ids), against flat frame lists.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CallStackStats {
    /// Allocation contexts.
    pub contexts: usize,
    /// Distinct frames.
    pub unique_frames: usize,
    /// Frames over all contexts, stored flat.
    pub total_frames: usize,
    /// Nodes of the caller-rooted trie holding all contexts.
    pub trie_nodes: usize,
}

impl CallStackStats {
    /// `total_frames / trie_nodes` (1.0 when nothing is shared or there is nothing).
    pub fn dedup_ratio(&self) -> f64 {
        if self.trie_nodes == 0 {
            1.0
        } else {
            self.total_frames as f64 / self.trie_nodes as f64
        }
    }
}

impl HeapProfile {
    /// An empty profile for the binary `build_id`.
    pub fn new(build_id: Option<BuildId>) -> HeapProfile {
        HeapProfile {
            build_id,
            ..Default::default()
        }
    }

    /// Folds one symbolized raw profile in, merging contexts with equal frames.
    pub fn add(&mut self, profile: SymbolizedProfile) {
        for (guid, name) in profile.names {
            self.names.entry(guid).or_insert(name);
        }
        for context in profile.contexts {
            let ids: Box<[u32]> = context.frames.iter().map(|f| self.intern(*f)).collect();
            match self.context_ids.get(&ids) {
                Some(&i) => self.contexts[i].1.merge(&context.mib),
                None => {
                    self.context_ids.insert(ids.clone(), self.contexts.len());
                    self.contexts.push((ids, context.mib));
                }
            }
        }
        self.dropped_contexts += profile.dropped_contexts;
        self.profiles += 1;
    }

    /// Folds another aggregated profile in (e.g. per-worker partial aggregates).
    pub fn merge(&mut self, other: &HeapProfile) {
        for (guid, name) in &other.names {
            self.names.entry(*guid).or_insert_with(|| name.clone());
        }
        for (ids, mib) in &other.contexts {
            let mine: Box<[u32]> = ids
                .iter()
                .map(|&i| self.intern(other.frames[i as usize]))
                .collect();
            match self.context_ids.get(&mine) {
                Some(&i) => self.contexts[i].1.merge(mib),
                None => {
                    self.context_ids.insert(mine.clone(), self.contexts.len());
                    self.contexts.push((mine, mib.clone()));
                }
            }
        }
        self.dropped_contexts += other.dropped_contexts;
        self.profiles += other.profiles;
    }

    fn intern(&mut self, frame: MemProfFrame) -> u32 {
        if let Some(&id) = self.frame_ids.get(&frame) {
            return id;
        }
        let id = self.frames.len() as u32;
        self.frames.push(frame);
        self.frame_ids.insert(frame, id);
        id
    }

    /// The binary's build id, when known.
    pub fn build_id(&self) -> Option<&BuildId> {
        self.build_id.as_ref()
    }

    /// Contexts in first-seen order: frames (leaf first) and their merged statistics.
    pub fn contexts(&self) -> impl Iterator<Item = (Vec<MemProfFrame>, &MemInfoBlock)> + '_ {
        self.contexts
            .iter()
            .map(|(ids, mib)| (ids.iter().map(|&i| self.frames[i as usize]).collect(), mib))
    }

    /// Number of distinct contexts.
    pub fn len(&self) -> usize {
        self.contexts.len()
    }

    /// True when no context has been added.
    pub fn is_empty(&self) -> bool {
        self.contexts.is_empty()
    }

    /// Linkage name of a function GUID, when a symbolized frame had it.
    pub fn function_name(&self, guid: u64) -> Option<&str> {
        self.names.get(&guid).map(String::as_str)
    }

    /// Raw profiles folded in.
    pub fn profiles(&self) -> usize {
        self.profiles
    }

    /// Raw MIBs dropped because none of their PCs symbolized.
    pub fn dropped_contexts(&self) -> usize {
        self.dropped_contexts
    }

    /// Sets the raw-profile and dropped-context counts: restoring a persisted aggregate
    /// rebuilds the contexts with one [`HeapProfile::add`], which counts one profile.
    pub fn set_counts(&mut self, profiles: usize, dropped_contexts: usize) {
        self.profiles = profiles;
        self.dropped_contexts = dropped_contexts;
    }

    /// Storage sharing of the call stacks (see [`CallStackStats`]).
    pub fn call_stack_stats(&self) -> CallStackStats {
        // Trie nodes keyed by (parent node, frame id); node 0 is the root.
        let mut children: HashMap<(u32, u32), u32> = HashMap::new();
        let mut total = 0;
        for (ids, _) in &self.contexts {
            total += ids.len();
            let mut node = 0u32;
            for &f in ids.iter().rev() {
                let next = children.len() as u32 + 1;
                node = *children.entry((node, f)).or_insert(next);
            }
        }
        CallStackStats {
            contexts: self.contexts.len(),
            unique_frames: self.frames.len(),
            total_frames: total,
            trie_nodes: children.len(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memprof::symbolize::SymbolizedContext;

    fn f(function: u64, line_offset: u32) -> MemProfFrame {
        MemProfFrame {
            function,
            line_offset,
            column: 3,
            is_inline: false,
        }
    }

    fn run(hot: u32, cold: u32) -> SymbolizedProfile {
        let mib = |count: u32, size: u64, life: u64| MemInfoBlock {
            alloc_count: count,
            total_size: size * u64::from(count),
            min_size: size as u32,
            max_size: size as u32,
            total_lifetime: life * u64::from(count),
            min_lifetime: life as u32,
            max_lifetime: life as u32,
            ..Default::default()
        };
        SymbolizedProfile {
            contexts: vec![
                SymbolizedContext {
                    frames: vec![f(1, 1), f(2, 1), f(9, 5)],
                    mib: mib(hot, 64, 0),
                },
                SymbolizedContext {
                    frames: vec![f(1, 1), f(3, 1), f(9, 4)],
                    mib: mib(cold, 4096, 300),
                },
            ],
            names: HashMap::from([(1, "_Z8make_bufm".to_string())]),
            dropped_contexts: 1,
        }
    }

    #[test]
    fn runs_sum_per_context() {
        let mut p = HeapProfile::new(None);
        p.add(run(10, 1));
        p.add(run(30, 3));
        assert_eq!(p.len(), 2);
        let contexts: Vec<_> = p.contexts().collect();
        assert_eq!(contexts[0].1.alloc_count, 40);
        assert_eq!(contexts[0].1.total_size, 40 * 64);
        assert_eq!(contexts[1].1.alloc_count, 4);
        assert_eq!(contexts[1].1.total_size, 4 * 4096);
        assert_eq!(contexts[1].1.average_lifetime_ms(), 300);
        assert_eq!(p.profiles(), 2);
        assert_eq!(p.dropped_contexts(), 2);
        assert_eq!(p.function_name(1), Some("_Z8make_bufm"));

        let mut q = HeapProfile::new(None);
        q.merge(&p);
        q.merge(&p);
        assert_eq!(q.contexts().next().unwrap().1.alloc_count, 80);
    }

    #[test]
    fn trie_shares_callers() {
        let mut p = HeapProfile::new(None);
        p.add(run(1, 1));
        let s = p.call_stack_stats();
        // Two 3-frame contexts; main's frames differ (lines 5 and 4), so no sharing at the root
        // and 6 trie nodes; 5 distinct frames (make_buf shared).
        assert_eq!(s.total_frames, 6);
        assert_eq!(s.unique_frames, 5);
        assert_eq!(s.trie_nodes, 6);
        assert_eq!(s.dedup_ratio(), 1.0);
    }
}
