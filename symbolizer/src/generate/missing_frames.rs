//! Missing-frame inference for CS probe profiles (llvm-profgen 19 `MissingFrameInferrer`,
//! `--infer-missing-frames`, on by default): a tail call (`jmp` to another function)
//! leaves no return address, so the unwinder's context lacks the frame that made it.
//! Between two adjacent context frames (a call site and the next frame's address), when the
//! callee is not a sampled target of the call site but can be reached from one through a
//! **unique** chain of sampled tail calls, the tail-call sites of that chain are inserted.
//!
//! Edges come from the sampled branches of all contexts, filtered by the static kind of
//! their source (`ProfiledBinary::dissassembleSymbol`): calls (`CallEdges`), and tail-call
//! sites (`TailCallEdges`): direct unconditional `jmp`s whose target is in another
//! function, and indirect `jmp`s whose sampled target is in another function range.
//! Conditional jumps never are, even clang's conditional tail calls: on the corpus program
//! `inline_tail`, `chain_tail` reaches `dispatch_tail` by `je` and by `jmp`, and
//! llvm-profgen 19 infers the unique path through the `jmp` (`[main:5 @ chain_tail:3 @
//! dispatch_tail]`), which counting the `je` would make ambiguous.
//!
//! [`ProfiledBinary`](crate::ProfiledBinary)'s instruction kinds do not tell indirect jumps
//! from conditional ones; its [`BranchClass::OtherJump`] is treated as conditional, so
//! indirect tail calls (`jmp *%rax` to another function) are not inferred through.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use unwinder::CounterSet;

use super::binary_view::{BinaryView, BranchClass};

/// A function of the binary ([`BinaryView::func_range_id_at`]'s function id).
type FuncId = usize;

/// `--max-search-depth` default (`UINT32_MAX - 1`): the search is not depth-limited.
pub const DEFAULT_MAX_SEARCH_DEPTH: u32 = u32::MAX - 1;

/// The sampled call graph and the memoised tail-call paths; see the module docs.
#[derive(Debug, Default)]
pub struct MissingFrameInferrer {
    /// Call site → functions it was sampled calling (`CallEdgesF`).
    call_edges: HashMap<u64, Vec<FuncId>>,
    /// Tail-call site → functions it was sampled jumping to (`TailCallEdgesF`).
    tail_call_edges: HashMap<u64, Vec<FuncId>>,
    /// Functions reached by some tail call (`TailCallTargetFuncs`).
    tail_call_targets: HashSet<FuncId>,
    /// Function → its sampled tail-call sites (`FuncToTailCallMap`).
    func_tail_calls: HashMap<FuncId, Vec<u64>>,
    /// Memoised search state (queries take `&self`).
    search: RefCell<Search>,
    /// `--max-search-depth`: the most functions a tail-call path search goes through.
    max_search_depth: u32,
}

#[derive(Debug, Default)]
struct Search {
    unique_paths: HashMap<(FuncId, FuncId), Vec<u64>>,
    non_unique_paths: HashMap<(FuncId, FuncId), u64>,
    visiting: HashSet<FuncId>,
    depth: u32,
}

impl MissingFrameInferrer {
    /// `MissingFrameInferrer::initialize` from the branch counters of every context.
    pub fn new<B: BinaryView>(binary: &B, counters: &CounterSet) -> MissingFrameInferrer {
        let mut sampled_calls: BTreeMap<u64, BTreeSet<u64>> = BTreeMap::new();
        let mut sampled_tail_calls: BTreeMap<u64, BTreeSet<u64>> = BTreeMap::new();
        for cc in counters.contexts.values() {
            for &(from, to) in cc.branches.keys() {
                // Static edges exist only for instructions inside a known function.
                let Some((from_range, from_func)) = binary.func_range_id_at(from) else {
                    continue;
                };
                let to_range = binary.func_range_id_at(to);
                match binary.branch_class(from) {
                    BranchClass::Call => {
                        sampled_calls.entry(from).or_default().insert(to);
                    }
                    BranchClass::DirectJump => {
                        // Static: target in another function; sampled: another range.
                        if let Some((to_start, to_func)) = to_range {
                            if to_func != from_func && to_start != from_range {
                                sampled_tail_calls.entry(from).or_default().insert(to);
                            }
                        }
                    }
                    BranchClass::IndirectJump => {
                        if to_range.map(|r| r.0) != Some(from_range) {
                            sampled_tail_calls.entry(from).or_default().insert(to);
                        }
                    }
                    BranchClass::OtherJump => {}
                    BranchClass::Other => {}
                }
            }
        }
        let mut inferrer = MissingFrameInferrer {
            max_search_depth: DEFAULT_MAX_SEARCH_DEPTH,
            ..MissingFrameInferrer::default()
        };
        for (site, targets) in &sampled_calls {
            for &t in targets {
                if let Some((_, f)) = binary.func_range_id_at(t) {
                    push_unique(inferrer.call_edges.entry(*site).or_default(), f);
                }
            }
        }
        for (site, targets) in &sampled_tail_calls {
            for &t in targets {
                if let Some((_, f)) = binary.func_range_id_at(t) {
                    push_unique(inferrer.tail_call_edges.entry(*site).or_default(), f);
                    inferrer.tail_call_targets.insert(f);
                }
            }
            if let Some((_, f)) = binary.func_range_id_at(*site) {
                inferrer.func_tail_calls.entry(f).or_default().push(*site);
            }
        }
        inferrer
    }

    /// `--max-search-depth`: a tail-call path search goes through at most `depth`
    /// functions after the call site's targets (0: only targets the call site reaches
    /// directly; [`DEFAULT_MAX_SEARCH_DEPTH`]: unlimited).
    pub fn with_max_search_depth(mut self, depth: u32) -> MissingFrameInferrer {
        self.max_search_depth = depth;
        self
    }

    /// `getContextNodeForLeafProbe`'s use of `inferMissingFrames`: the context `key` with
    /// `leaf` appended, missing tail-call frames inserted, `leaf` removed again.
    pub fn infer<B: BinaryView>(&self, binary: &B, key: &[u64], leaf: u64) -> Vec<u64> {
        if key.is_empty() {
            return Vec::new();
        }
        let mut out = Vec::with_capacity(key.len() + 2);
        let mut search = self.search.borrow_mut();
        for i in 0..key.len() {
            let to = key.get(i + 1).copied().unwrap_or(leaf);
            self.infer_pair(binary, &mut search, key[i], to, &mut out);
        }
        out
    }

    /// `inferMissingFrames(From, To, UniquePath)`: pushes `from`, then the unique tail-call
    /// path to `to`'s function if there is one.
    fn infer_pair<B: BinaryView>(
        &self,
        binary: &B,
        search: &mut Search,
        from: u64,
        to: u64,
        path: &mut Vec<u64>,
    ) {
        path.push(from);
        let pos = path.len();
        let Some((_, to_func)) = binary.func_range_id_at(to) else {
            return;
        };
        let Some(callees) = self.call_edges.get(&from) else {
            return;
        };
        if callees.contains(&to_func) || !self.tail_call_targets.contains(&to_func) {
            return;
        }
        search.visiting.clear();
        search.depth = 0;
        let mut paths = 0u64;
        for &target in callees {
            paths += self.unique_path_from_func(search, target, to_func, path);
            if paths > 1 {
                break;
            }
        }
        if paths != 1 {
            path.truncate(pos);
        }
    }

    /// `computeUniqueTailCallPath(BinaryFunction *From, To, Path)`: the number of tail-call
    /// paths from function `from` to `to` (counting stops at 2), the path appended when 1.
    fn unique_path_from_func(
        &self,
        search: &mut Search,
        from: FuncId,
        to: FuncId,
        path: &mut Vec<u64>,
    ) -> u64 {
        if from == to {
            return 1;
        }
        // Cycle check before the cache: a cached result may go through `from` again.
        if search.visiting.contains(&from) {
            return 0;
        }
        if let Some(p) = search.unique_paths.get(&(from, to)) {
            path.extend_from_slice(p);
            return 1;
        }
        if let Some(&n) = search.non_unique_paths.get(&(from, to)) {
            return n;
        }
        let pos = path.len();
        if search.depth == self.max_search_depth {
            return 0;
        }
        let Some(sites) = self.func_tail_calls.get(&from) else {
            return 0;
        };
        search.depth += 1;
        search.visiting.insert(from);
        let mut paths = 0u64;
        for &site in sites {
            paths += self.unique_path_from_site(search, site, to, path);
            if paths > 1 {
                break;
            }
        }
        search.depth -= 1;
        search.visiting.remove(&from);
        if paths != 1 {
            path.truncate(pos);
        }
        if paths == 1 {
            search.unique_paths.insert((from, to), path[pos..].to_vec());
        } else {
            search.non_unique_paths.insert((from, to), paths);
        }
        paths
    }

    /// `computeUniqueTailCallPath(uint64_t From, To, Path)`: paths through tail-call site
    /// `site`.
    fn unique_path_from_site(
        &self,
        search: &mut Search,
        site: u64,
        to: FuncId,
        path: &mut Vec<u64>,
    ) -> u64 {
        let Some(targets) = self.tail_call_edges.get(&site) else {
            return 0;
        };
        path.push(site);
        let mut paths = 0u64;
        for &t in targets {
            paths += self.unique_path_from_func(search, t, to, path);
            if paths > 1 {
                break;
            }
        }
        if paths != 1 {
            path.pop();
        }
        paths
    }
}

fn push_unique(v: &mut Vec<FuncId>, f: FuncId) {
    if !v.contains(&f) {
        v.push(f);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::generate::fake_binary::FakeBinary;
    use unwinder::CounterKind;

    /// main [0x10,0x20) calls go at 0x14; go [0x20,0x30) tail-jumps to foo at 0x24 and
    /// to bar at 0x28; foo [0x30,0x40); bar [0x40,0x50) tail-jumps to foo at 0x44.
    fn binary() -> FakeBinary {
        let mut b = FakeBinary::default();
        for (name, s, e) in [
            ("main", 0x10, 0x20),
            ("go", 0x20, 0x30),
            ("foo", 0x30, 0x40),
            ("bar", 0x40, 0x50),
        ] {
            b.funcs.insert(name.to_string(), vec![(s, e)]);
        }
        b.branches.insert(0x14, BranchClass::Call);
        b.branches.insert(0x24, BranchClass::DirectJump);
        b.branches.insert(0x28, BranchClass::DirectJump);
        b.branches.insert(0x44, BranchClass::DirectJump);
        b
    }

    fn counters(edges: &[(u64, u64)]) -> CounterSet {
        let mut set = CounterSet::new(CounterKind::ProbeContext);
        for &e in edges {
            set.context_mut(&[]).branches.insert(e, 1);
        }
        set
    }

    #[test]
    fn inserts_a_unique_tail_call_chain() {
        let b = binary();
        // main:0x14 → go; go:0x24 → foo (tail). Context [0x14] with leaf in foo.
        let inf = MissingFrameInferrer::new(&b, &counters(&[(0x14, 0x20), (0x24, 0x30)]));
        assert_eq!(inf.infer(&b, &[0x14], 0x34), vec![0x14, 0x24]);
        // A leaf in go itself: go is a direct call target, nothing to add.
        assert_eq!(inf.infer(&b, &[0x14], 0x22), vec![0x14]);
        // Empty context: unchanged.
        assert!(inf.infer(&b, &[], 0x34).is_empty());
    }

    #[test]
    fn search_depth_bounds_the_chain() {
        let b = binary();
        // main:0x14 → go; go:0x28 → bar (tail); bar:0x44 → foo (tail): a chain through two
        // functions (go, bar) after the call site's target.
        let set = counters(&[(0x14, 0x20), (0x28, 0x40), (0x44, 0x30)]);
        let infer = |depth| {
            MissingFrameInferrer::new(&b, &set)
                .with_max_search_depth(depth)
                .infer(&b, &[0x14], 0x34)
        };
        assert_eq!(infer(DEFAULT_MAX_SEARCH_DEPTH), vec![0x14, 0x28, 0x44]);
        assert_eq!(infer(2), vec![0x14, 0x28, 0x44]);
        assert_eq!(infer(1), vec![0x14]);
        assert_eq!(infer(0), vec![0x14]);
    }

    #[test]
    fn two_paths_are_ambiguous() {
        let b = binary();
        // go → foo directly (0x24) and go → bar (0x28) → foo (0x44): two paths.
        let set = counters(&[(0x14, 0x20), (0x24, 0x30), (0x28, 0x40), (0x44, 0x30)]);
        let inf = MissingFrameInferrer::new(&b, &set);
        assert_eq!(inf.infer(&b, &[0x14], 0x34), vec![0x14]);
        // bar is reachable through the unique path go:0x28.
        assert_eq!(inf.infer(&b, &[0x14], 0x48), vec![0x14, 0x28]);
    }

    #[test]
    fn conditional_jumps_are_not_tail_calls() {
        let mut b = binary();
        // go reaches foo by a conditional jump (0x22) and a jmp (0x24): only the jmp
        // counts, so the path is unique.
        b.branches.insert(0x22, BranchClass::OtherJump);
        let set = counters(&[(0x14, 0x20), (0x22, 0x30), (0x24, 0x30)]);
        let inf = MissingFrameInferrer::new(&b, &set);
        assert_eq!(inf.infer(&b, &[0x14], 0x34), vec![0x14, 0x24]);
        // An indirect jump to foo does count: two paths, nothing inferred.
        b.branches.insert(0x22, BranchClass::IndirectJump);
        let inf = MissingFrameInferrer::new(&b, &set);
        assert_eq!(inf.infer(&b, &[0x14], 0x34), vec![0x14]);
    }
}
