//! The CS pre-inliner (llvm-profgen 19 `CSPreInliner`, CSPreInliner.cpp) on LLVM's
//! context tracker (`SampleContextTracker`, SampleContextTracker.cpp).
//!
//! Functions are visited top-down (reversed SCC order of the profiled call graph, cold
//! edges trimmed). For each function its base profile is formed by promoting every
//! context of the function that was not inlined to the top level, merging subtrees
//! (`getBaseSamplesFor`). Its trie children are inline candidates, taken from a priority
//! queue (size-0 first, then hotter, then smaller, then GUID) while the function's grown
//! size stays below its limit; a candidate is inlined when its context size is below a
//! threshold scaled by its hotness. Inlined contexts get `ContextShouldBeInlined` and stay
//! nested under their caller; all other non-top-level contexts are dropped (their samples
//! live on in the base profiles).
//!
//! Tries order children by LLVM's call-site hash ([`call_site_hash`]), so every traversal
//! (and therefore merge order and tie-breaking) follows llvm-profgen's; the candidate queue
//! uses libstdc++'s heap algorithms; members of recursive SCCs are ordered by LLVM's
//! `scc_member_iterator` (`--sort-profiled-scc-member`).

use std::collections::{BTreeMap, HashMap, VecDeque};

use super::size_tracker::{call_site_hash, SizeTracker};
use crate::guid::function_guid;
use crate::profile::{
    ContextFrame, FunctionSamples, LineLocation, ProfileSummary, SampleContext, ThresholdRule,
    CONTEXT_SHOULD_BE_INLINED, CONTEXT_WAS_INLINED,
};

/// Pre-inliner knobs (llvm-profgen 19 defaults when not given on the command line).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PreInlineOptions {
    /// `--sample-profile-hot-inline-threshold` (pre-inliner default 1500).
    pub hot_threshold: i32,
    /// `--sample-profile-cold-inline-threshold` (pre-inliner default 0).
    pub cold_threshold: i32,
    /// `--sample-profile-inline-growth-limit` (12).
    pub growth_limit: i32,
    /// `--sample-profile-inline-limit-min` (100).
    pub limit_min: i32,
    /// `--sample-profile-inline-limit-max` (pre-inliner default 50000).
    pub limit_max: i32,
    /// `--use-context-cost-for-preinliner` (true): sizes from the binary, else the number
    /// of body samples.
    pub use_context_cost: bool,
    /// `--csspgo-preinliner-multiplier-for-previous-inlining` (100): threshold factor for
    /// hot contexts already inlined in the profiled binary.
    pub previous_inlining_multiplier: i32,
    /// `--sort-profiled-scc-member` (true): order members of recursive SCCs by call
    /// weight.
    pub sort_scc_members: bool,
    /// `--csspgo-replay-preinline` (false): inline exactly the contexts the profiled
    /// binary inlined (`ContextWasInlined`), whatever their size and count.
    pub replay: bool,
}

impl Default for PreInlineOptions {
    fn default() -> PreInlineOptions {
        PreInlineOptions {
            hot_threshold: 1500,
            cold_threshold: 0,
            growth_limit: 12,
            limit_min: 100,
            limit_max: 50000,
            use_context_cost: true,
            previous_inlining_multiplier: 100,
            sort_scc_members: true,
            replay: false,
        }
    }
}

/// Hot/cold thresholds the pre-inliner reads from the context-less summary.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PreInlineThresholds {
    /// `getColdCountThreshold` (with `--profile-summary-cutoff-cold` or
    /// `--profile-summary-cold-count`).
    pub cold_count: u64,
    /// Min count of the 10% cutoff (the hotness normalisation bound).
    pub p10_count: u64,
}

impl PreInlineThresholds {
    /// From a summary, with the cold threshold by `rule`.
    pub fn from_summary(summary: &ProfileSummary, rule: &ThresholdRule) -> Self {
        PreInlineThresholds {
            cold_count: rule.cold(summary),
            p10_count: summary.entry_for(100000).map_or(0, |e| e.min_count),
        }
    }
}

/// `ContextStateMask`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Raw,
    Synthetic,
    Inlined,
    Merged,
}

#[derive(Clone, Debug)]
struct Node {
    func: String,
    callsite: LineLocation,
    parent: Option<usize>,
    children: BTreeMap<u64, usize>,
    prof: Option<usize>,
}

#[derive(Clone, Debug)]
struct Prof {
    fs: FunctionSamples,
    state: State,
    node: usize,
}

/// LLVM's `SampleContextTracker` over a flat CS profile map.
#[derive(Clone, Debug)]
pub struct ContextTracker {
    nodes: Vec<Node>,
    profs: Vec<Prof>,
    func_to_ctx: HashMap<String, Vec<usize>>,
}

const ROOT: usize = 0;

impl ContextTracker {
    /// Builds the trie of `profiles` (full contexts) and the function → contexts index
    /// (`populateFuncToCtxtMap`, breadth-first).
    pub fn new(profiles: BTreeMap<SampleContext, FunctionSamples>) -> ContextTracker {
        let mut t = ContextTracker {
            nodes: vec![Node {
                func: String::new(),
                callsite: LineLocation::default(),
                parent: None,
                children: BTreeMap::new(),
                prof: None,
            }],
            profs: Vec::with_capacity(profiles.len()),
            func_to_ctx: HashMap::new(),
        };
        for (ctx, fs) in profiles {
            let mut node = ROOT;
            let mut loc = LineLocation::default();
            for f in &ctx.frames {
                node = t.child_or_create(node, loc, &f.func);
                loc = f.location;
            }
            let id = t.profs.len();
            t.profs.push(Prof {
                fs,
                state: State::Raw,
                node,
            });
            t.nodes[node].prof = Some(id);
        }
        for n in t.bfs() {
            if let Some(p) = t.nodes[n].prof {
                t.func_to_ctx
                    .entry(t.nodes[n].func.clone())
                    .or_default()
                    .push(p);
            }
        }
        t
    }

    fn child(&self, parent: usize, loc: LineLocation, func: &str) -> Option<usize> {
        self.nodes[parent]
            .children
            .get(&call_site_hash(function_guid(func), loc))
            .copied()
    }

    fn child_or_create(&mut self, parent: usize, loc: LineLocation, func: &str) -> usize {
        if let Some(c) = self.child(parent, loc, func) {
            return c;
        }
        let id = self.nodes.len();
        self.nodes.push(Node {
            func: func.to_string(),
            callsite: loc,
            parent: Some(parent),
            children: BTreeMap::new(),
            prof: None,
        });
        self.nodes[parent]
            .children
            .insert(call_site_hash(function_guid(func), loc), id);
        id
    }

    /// Nodes reachable from the root, breadth-first, children in hash order (the
    /// tracker's iterator).
    fn bfs(&self) -> Vec<usize> {
        let mut out = Vec::with_capacity(self.nodes.len());
        let mut q = VecDeque::from([ROOT]);
        while let Some(n) = q.pop_front() {
            out.push(n);
            q.extend(self.nodes[n].children.values().copied());
        }
        out
    }

    /// `getBaseSamplesFor(Name, MergeContext = true)`.
    fn base_samples_for(&mut self, name: &str) -> Option<usize> {
        let mut node = self.child(ROOT, LineLocation::default(), name);
        let list = self.func_to_ctx.get(name).cloned().unwrap_or_default();
        for p in list {
            if matches!(self.profs[p].state, State::Inlined | State::Merged) {
                continue;
            }
            let from = self.profs[p].node;
            if Some(from) == node {
                continue;
            }
            node = Some(self.promote_merge(from, ROOT));
        }
        node.and_then(|n| self.nodes[n].prof)
    }

    /// `promoteMergeContextSamplesTree(FromNode, ToNodeParent)`.
    fn promote_merge(&mut self, from: usize, to_parent: usize) -> usize {
        let old_loc = self.nodes[from].callsite;
        let from_parent = self.nodes[from].parent;
        let move_to_root = to_parent == ROOT;
        let new_loc = if move_to_root {
            LineLocation::default()
        } else {
            old_loc
        };
        let func = self.nodes[from].func.clone();
        let to = match self.child(to_parent, new_loc, &func) {
            None => {
                self.move_subtree(to_parent, new_loc, from);
                from
            }
            Some(to) => {
                self.merge_node(from, to);
                let kids: Vec<usize> = self.nodes[from].children.values().copied().collect();
                for k in kids {
                    self.promote_merge(k, to);
                }
                self.nodes[from].children.clear();
                to
            }
        };
        if move_to_root {
            if let Some(fp) = from_parent {
                let key = call_site_hash(function_guid(&func), old_loc);
                if self.nodes[fp].children.get(&key) == Some(&from) {
                    self.nodes[fp].children.remove(&key);
                }
            }
        }
        to
    }

    /// `moveContextSamples`: relinks `node` under `to_parent` at `loc`; every profile in
    /// the subtree becomes synthetic.
    fn move_subtree(&mut self, to_parent: usize, loc: LineLocation, node: usize) {
        let key = call_site_hash(function_guid(&self.nodes[node].func), loc);
        self.nodes[to_parent].children.insert(key, node);
        self.nodes[node].parent = Some(to_parent);
        self.nodes[node].callsite = loc;
        let mut q = VecDeque::from([node]);
        while let Some(n) = q.pop_front() {
            if let Some(p) = self.nodes[n].prof {
                self.profs[p].node = n;
                self.profs[p].state = State::Synthetic;
            }
            q.extend(self.nodes[n].children.values().copied());
        }
    }

    /// `mergeContextNode`. Like LLVM, the node merged from keeps its profile pointer: it
    /// is detached right after, but while its children are promoted a child can be merged
    /// into it (when it is itself a child of the destination), and that child's samples
    /// are then lost, as in llvm-profgen.
    fn merge_node(&mut self, from: usize, to: usize) {
        match (self.nodes[from].prof, self.nodes[to].prof) {
            (Some(f), Some(t)) => {
                let other = self.profs[f].fs.clone();
                self.profs[t].fs.merge(&other);
                self.profs[t].state = State::Synthetic;
                self.profs[f].state = State::Merged;
                if other.attributes & CONTEXT_SHOULD_BE_INLINED != 0 {
                    self.profs[t].fs.attributes |= CONTEXT_SHOULD_BE_INLINED;
                }
            }
            (Some(f), None) => {
                self.nodes[to].prof = Some(f);
                self.profs[f].node = to;
                self.profs[f].state = State::Synthetic;
            }
            _ => {}
        }
    }

    /// The leaf-first size-lookup path of `node` (function, call site into the previous
    /// entry), as `getFuncSizeForContext` walks it.
    fn size_path(&self, node: usize) -> Vec<(&str, LineLocation)> {
        let mut out = Vec::new();
        let mut loc = LineLocation::default();
        let mut cur = node;
        while let Some(parent) = self.nodes[cur].parent {
            out.push((self.nodes[cur].func.as_str(), loc));
            loc = self.nodes[cur].callsite;
            cur = parent;
        }
        out
    }

    /// The profiles left in the trie as a flat CS map of full contexts
    /// (`convertToProfileMap`).
    pub fn into_profiles(mut self) -> BTreeMap<SampleContext, FunctionSamples> {
        let mut out = BTreeMap::new();
        for n in self.bfs() {
            let Some(p) = self.nodes[n].prof else {
                continue;
            };
            let mut frames = vec![ContextFrame::new(
                self.nodes[n].func.clone(),
                LineLocation::default(),
            )];
            let mut cur = n;
            while let Some(parent) = self.nodes[cur].parent {
                if parent == ROOT {
                    break;
                }
                frames.push(ContextFrame::new(
                    self.nodes[parent].func.clone(),
                    self.nodes[cur].callsite,
                ));
                cur = parent;
            }
            frames.reverse();
            let ctx = SampleContext::from_frames(frames);
            let mut fs = std::mem::take(&mut self.profs[p].fs);
            fs.context = ctx.clone();
            out.insert(ctx, fs);
        }
        out
    }
}

/// One inline candidate (`ProfiledInlineCandidate`).
#[derive(Clone, Copy, Debug)]
struct Candidate {
    prof: usize,
    count: u64,
    size: u32,
    guid: u64,
}

/// `ProfiledCandidateComparer`: true when `l` has lower priority than `r`.
fn lower_priority(l: &Candidate, r: &Candidate) -> bool {
    if (l.size == 0 || r.size == 0) && l.size != r.size {
        return r.size == 0;
    }
    if l.count != r.count {
        return l.count < r.count;
    }
    if l.size != r.size {
        return l.size > r.size;
    }
    l.guid < r.guid
}

/// `std::priority_queue` with libstdc++'s heap algorithms, so that ties pop in
/// llvm-profgen's order.
#[derive(Default)]
struct CandidateQueue {
    heap: Vec<Candidate>,
}

impl CandidateQueue {
    fn push(&mut self, c: Candidate) {
        self.heap.push(c);
        let hole = self.heap.len() - 1;
        self.sift_up(hole, 0, c);
    }

    /// libstdc++ `__push_heap`.
    fn sift_up(&mut self, mut hole: usize, top: usize, value: Candidate) {
        while hole > top {
            let parent = (hole - 1) / 2;
            if !lower_priority(&self.heap[parent], &value) {
                break;
            }
            self.heap[hole] = self.heap[parent];
            hole = parent;
        }
        self.heap[hole] = value;
    }

    /// libstdc++ `pop_heap` + `pop_back`.
    fn pop(&mut self) -> Option<Candidate> {
        let len = self.heap.len();
        if len <= 1 {
            return self.heap.pop();
        }
        let top = self.heap[0];
        let last = len - 1;
        let value = self.heap[last];
        self.heap[last] = top;
        // __adjust_heap(first, 0, last, value)
        let n = last;
        let mut hole = 0usize;
        let mut second = 0usize;
        while n >= 2 && second < (n - 1) / 2 {
            second = 2 * (second + 1);
            if lower_priority(&self.heap[second], &self.heap[second - 1]) {
                second -= 1;
            }
            self.heap[hole] = self.heap[second];
            hole = second;
        }
        if n >= 2 && n.is_multiple_of(2) && second == (n - 2) / 2 {
            second = 2 * (second + 1);
            self.heap[hole] = self.heap[second - 1];
            hole = second - 1;
        }
        self.sift_up(hole, 0, value);
        self.heap.pop()
    }

    fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }
}

/// The pre-inliner over a tracker.
pub struct PreInliner<'a> {
    tracker: ContextTracker,
    sizes: Option<&'a SizeTracker>,
    opts: &'a PreInlineOptions,
    thresholds: PreInlineThresholds,
}

impl<'a> PreInliner<'a> {
    /// A pre-inliner for `profiles` (a flat CS map). `sizes` is required for context
    /// costs (`use_context_cost`); without it sizes are body-sample counts.
    pub fn new(
        profiles: BTreeMap<SampleContext, FunctionSamples>,
        sizes: Option<&'a SizeTracker>,
        opts: &'a PreInlineOptions,
        thresholds: PreInlineThresholds,
    ) -> PreInliner<'a> {
        PreInliner {
            tracker: ContextTracker::new(profiles),
            sizes,
            opts,
            thresholds,
        }
    }

    /// `CSPreInliner::run`: returns the pre-inlined flat CS map.
    pub fn run(mut self) -> BTreeMap<SampleContext, FunctionSamples> {
        for name in self.top_down_order() {
            self.process_function(&name);
        }
        let t = &mut self.tracker;
        for n in t.bfs() {
            let Some(p) = t.nodes[n].prof else { continue };
            if t.nodes[n].parent != Some(ROOT) && t.profs[p].state != State::Inlined {
                t.nodes[n].prof = None;
            }
        }
        self.tracker.into_profiles()
    }

    fn func_size(&self, node: usize) -> u32 {
        if self.opts.use_context_cost {
            if let Some(s) = self.sizes {
                return s.size_for_context(&self.tracker.size_path(node));
            }
        }
        self.tracker.nodes[node]
            .prof
            .map_or(0, |p| self.tracker.profs[p].fs.body.len() as u32)
    }

    /// `buildTopDownOrder`: the profiled call graph (edges from the trie, weights
    /// max(call-target count, callee head estimate), edges ≤ cold count dropped), SCCs by
    /// Tarjan from a synthetic root linked to every function in name order, reversed.
    fn top_down_order(&self) -> Vec<String> {
        let t = &self.tracker;
        let mut names: Vec<String> = Vec::new();
        let mut index: HashMap<String, usize> = HashMap::new();
        // Per function: target name → (target index, weight).
        let mut edges: Vec<BTreeMap<String, (usize, u64)>> = Vec::new();
        let mut add_fn = |name: &str,
                          names: &mut Vec<String>,
                          edges: &mut Vec<BTreeMap<String, (usize, u64)>>|
         -> usize {
            if let Some(i) = index.get(name) {
                return *i;
            }
            let i = names.len();
            names.push(name.to_string());
            edges.push(BTreeMap::new());
            index.insert(name.to_string(), i);
            i
        };
        let mut queue: VecDeque<usize> = VecDeque::new();
        for c in t.nodes[ROOT].children.values() {
            add_fn(&t.nodes[*c].func, &mut names, &mut edges);
            queue.push_back(*c);
        }
        while let Some(caller) = queue.pop_front() {
            let caller_fs = t.nodes[caller].prof.map(|p| &t.profs[p].fs);
            let caller_idx = add_fn(&t.nodes[caller].func, &mut names, &mut edges);
            for c in t.nodes[caller].children.values() {
                let callee = &t.nodes[*c];
                let callee_idx = add_fn(&callee.func, &mut names, &mut edges);
                queue.push_back(*c);
                let weight = match (caller_fs, callee.prof.map(|p| &t.profs[p].fs)) {
                    (Some(cf), Some(ce)) => {
                        let entry = ce.head_samples_estimate(true);
                        let site = cf
                            .body
                            .get(&callee.callsite)
                            .and_then(|b| b.call_targets.get(&callee.func))
                            .copied()
                            .unwrap_or(0);
                        site.max(entry)
                    }
                    _ => 0,
                };
                let e = edges[caller_idx]
                    .entry(callee.func.clone())
                    .or_insert((callee_idx, 0));
                e.1 = e.1.saturating_add(weight);
            }
        }
        let cold = self.thresholds.cold_count;
        let root = names.len();
        // Edges after `trimColdEges`, by target name: (target, weight).
        let mut adj: Vec<Vec<(usize, u64)>> = edges
            .iter()
            .map(|m| {
                m.values()
                    .filter(|(_, w)| cold == 0 || *w > cold)
                    .copied()
                    .collect()
            })
            .collect();
        let mut by_name: Vec<usize> = (0..names.len()).collect();
        by_name.sort_by(|a, b| names[*a].as_bytes().cmp(names[*b].as_bytes()));
        adj.push(by_name.into_iter().map(|i| (i, 0)).collect());
        let mut out: Vec<String> = Vec::with_capacity(names.len());
        for scc in tarjan_sccs(&adj, root) {
            let members = if self.opts.sort_scc_members {
                sort_scc_members(&adj, &scc)
            } else {
                scc
            };
            out.extend(
                members
                    .into_iter()
                    .filter(|n| *n != root)
                    .map(|n| names[n].clone()),
            );
        }
        out.reverse();
        out
    }

    fn inline_candidates(&self, queue: &mut CandidateQueue, caller_prof: usize) {
        let t = &self.tracker;
        let caller_node = t.profs[caller_prof].node;
        let caller_fs = &t.profs[caller_prof].fs;
        for c in t.nodes[caller_node].children.values() {
            let node = &t.nodes[*c];
            let Some(p) = node.prof else { continue };
            let callee = &t.profs[p].fs;
            let entry = callee.head_samples_estimate(true);
            let site = caller_fs
                .body
                .get(&node.callsite)
                .and_then(|b| b.call_targets.get(&node.func))
                .copied()
                .unwrap_or(0);
            queue.push(Candidate {
                prof: p,
                count: site.max(entry),
                size: self.func_size(*c),
                guid: function_guid(&node.func),
            });
        }
    }

    /// `shouldInline`.
    fn should_inline(&self, c: &Candidate) -> bool {
        let fs = &self.tracker.profs[c.prof].fs;
        let was_inlined = fs.attributes & CONTEXT_WAS_INLINED != 0;
        if self.opts.replay {
            return was_inlined;
        }
        let cold = self.thresholds.cold_count;
        let threshold: u32 = if c.count <= cold {
            self.opts.cold_threshold as u32
        } else {
            let upper = self.thresholds.p10_count as f64;
            let lower = cold as f64;
            let mut hotness = (c.count as f64 - lower) / (upper - lower);
            if hotness > 1.0 {
                hotness = 1.0;
            }
            let mut t = (f64::from(self.opts.hot_threshold) * hotness * 100.0
                + f64::from(self.opts.cold_threshold)
                + 1.0) as u32;
            if was_inlined {
                t = t.wrapping_mul(self.opts.previous_inlining_multiplier as u32);
            }
            t
        };
        c.size < threshold
    }

    /// `processFunction`.
    fn process_function(&mut self, name: &str) {
        let Some(base) = self.tracker.base_samples_for(name) else {
            return;
        };
        let size = self.func_size(self.tracker.profs[base].node);
        let mut final_size = size;
        let limit = size
            .wrapping_mul(self.opts.growth_limit as u32)
            .min(self.opts.limit_max as u32)
            .max(self.opts.limit_min as u32);
        let mut queue = CandidateQueue::default();
        self.inline_candidates(&mut queue, base);
        while !queue.is_empty() && final_size < limit {
            let Some(c) = queue.pop() else { break };
            if self.should_inline(&c) {
                let p = &mut self.tracker.profs[c.prof];
                p.state = State::Inlined;
                p.fs.attributes |= CONTEXT_SHOULD_BE_INLINED;
                final_size = final_size.wrapping_add(c.size);
                self.inline_candidates(&mut queue, c.prof);
            }
        }
    }
}

/// LLVM's `scc_iterator` (iterative Tarjan) from `root` over `adj` (edges in order): the
/// SCCs in completion order, each SCC's members in the order they leave the node stack.
fn tarjan_sccs(adj: &[Vec<(usize, u64)>], root: usize) -> Vec<Vec<usize>> {
    struct Frame {
        node: usize,
        next: usize,
        min: u32,
    }
    let mut num: Vec<Option<u32>> = vec![None; adj.len()];
    let mut visit = 0u32;
    let mut scc_stack: Vec<usize> = Vec::new();
    let mut stack: Vec<Frame> = Vec::new();
    let mut out = Vec::new();
    let mut visit_one = |n: usize,
                         num: &mut Vec<Option<u32>>,
                         scc_stack: &mut Vec<usize>,
                         stack: &mut Vec<Frame>| {
        visit += 1;
        num[n] = Some(visit);
        scc_stack.push(n);
        stack.push(Frame {
            node: n,
            next: 0,
            min: visit,
        });
    };
    visit_one(root, &mut num, &mut scc_stack, &mut stack);
    while !stack.is_empty() {
        while let Some(top) = stack.last_mut() {
            let kids = &adj[top.node];
            if top.next >= kids.len() {
                break;
            }
            let child = kids[top.next].0;
            top.next += 1;
            match num[child] {
                None => visit_one(child, &mut num, &mut scc_stack, &mut stack),
                Some(n) => {
                    if top.min > n {
                        top.min = n;
                    }
                }
            }
        }
        let Some(done) = stack.pop() else { break };
        if let Some(parent) = stack.last_mut() {
            if parent.min > done.min {
                parent.min = done.min;
            }
        }
        if Some(done.min) != num[done.node] {
            continue;
        }
        let mut scc = Vec::new();
        while let Some(n) = scc_stack.pop() {
            num[n] = Some(u32::MAX);
            scc.push(n);
            if n == done.node {
                break;
            }
        }
        out.push(scc);
    }
    out
}

/// LLVM's `scc_member_iterator` (`--sort-profiled-scc-member`, default true): members of
/// a multi-node SCC ordered by a maximum-weight spanning forest (Kruskal over edges by
/// weight, descending, stable), walked breadth-first from its roots (Kahn), reversed.
fn sort_scc_members(adj: &[Vec<(usize, u64)>], scc: &[usize]) -> Vec<usize> {
    if scc.len() <= 1 {
        return scc.to_vec();
    }
    let in_scc: HashMap<usize, usize> = scc.iter().enumerate().map(|(i, n)| (*n, i)).collect();
    // Edges (source, target, weight) within the SCC, stably sorted by weight descending.
    let mut sorted: Vec<(usize, usize, u64)> = Vec::new();
    for n in scc {
        for (t, w) in &adj[*n] {
            if in_scc.contains_key(t) {
                sorted.push((*n, *t, *w));
            }
        }
    }
    sorted.sort_by_key(|e| std::cmp::Reverse(e.2));
    // Kruskal with union-find.
    let mut group: Vec<usize> = (0..scc.len()).collect();
    let mut rank: Vec<u32> = vec![0; scc.len()];
    fn find(group: &mut [usize], x: usize) -> usize {
        let mut r = x;
        while group[r] != r {
            r = group[r];
        }
        let mut c = x;
        while group[c] != r {
            let next = group[c];
            group[c] = r;
            c = next;
        }
        r
    }
    let mut mst: std::collections::HashSet<(usize, usize)> = std::collections::HashSet::new();
    for (s, t, _) in &sorted {
        let g1 = find(&mut group, in_scc[s]);
        let g2 = find(&mut group, in_scc[t]);
        if g1 == g2 {
            continue;
        }
        if rank[g1] < rank[g2] {
            group[g1] = g2;
        } else {
            group[g2] = g1;
            if rank[g1] == rank[g2] {
                rank[g1] += 1;
            }
        }
        mst.insert((*s, *t));
    }
    // Kahn's walk over the MST.
    let mut incoming: HashMap<usize, std::collections::HashSet<usize>> = HashMap::new();
    for (s, t) in &mst {
        incoming.entry(*t).or_default().insert(*s);
    }
    let mut visited: std::collections::HashSet<usize> = std::collections::HashSet::new();
    let mut queue: VecDeque<usize> = VecDeque::new();
    for (s, _, _) in &sorted {
        if !visited.contains(s) && incoming.get(s).is_none_or(|i| i.is_empty()) {
            queue.push_back(*s);
            visited.insert(*s);
        }
    }
    let mut nodes = Vec::with_capacity(scc.len());
    while let Some(n) = queue.pop_front() {
        nodes.push(n);
        for (t, _) in &adj[n] {
            if let Some(inc) = incoming.get_mut(t) {
                inc.remove(&n);
                if mst.contains(&(n, *t)) && inc.is_empty() {
                    queue.push_back(*t);
                }
            }
        }
    }
    if nodes.len() != scc.len() {
        // LLVM asserts this cannot happen; keep Tarjan's order if it does.
        return scc.to_vec();
    }
    nodes.reverse();
    nodes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx(frames: &[(&str, u32)]) -> SampleContext {
        SampleContext::from_frames(
            frames
                .iter()
                .map(|(n, l)| ContextFrame::new(*n, LineLocation::new(*l, 0)))
                .collect(),
        )
    }

    fn prof(c: &SampleContext, total: u64, head: u64) -> FunctionSamples {
        let mut f = FunctionSamples::new(c.clone());
        f.total = total;
        f.head = head;
        f.add_body_samples(LineLocation::new(1, 0), total);
        f
    }

    #[test]
    fn tarjan_completes_callees_first() {
        // root(3) → 0, 1, 2; 0 → 1; 1 → 2; 2 → 1 (cycle {1,2}).
        let w = |v: Vec<usize>| v.into_iter().map(|n| (n, 1)).collect::<Vec<_>>();
        let adj = vec![w(vec![1]), w(vec![2]), w(vec![1]), w(vec![0, 1, 2])];
        let sccs = tarjan_sccs(&adj, 3);
        // {1,2} completes first (2 popped before 1), then 0, then root.
        assert_eq!(sccs, vec![vec![2, 1], vec![0], vec![3]]);
    }

    #[test]
    fn scc_members_follow_the_hot_spanning_tree() {
        // SCC {0, 1}: 0 → 1 weight 10, 1 → 0 weight 5. The MST keeps 0 → 1; Kahn visits 0
        // then 1; reversed: [1, 0] (so the reversed overall order processes 0 first).
        let adj = vec![vec![(1, 10)], vec![(0, 5)]];
        assert_eq!(sort_scc_members(&adj, &[1, 0]), vec![1, 0]);
        let adj = vec![vec![(1, 5)], vec![(0, 10)]];
        assert_eq!(sort_scc_members(&adj, &[1, 0]), vec![0, 1]);
    }

    #[test]
    fn queue_pops_zero_size_then_hot_then_small() {
        let c = |prof, count, size, guid| Candidate {
            prof,
            count,
            size,
            guid,
        };
        let mut q = CandidateQueue::default();
        for x in [
            c(0, 10, 5, 1),
            c(1, 50, 9, 1),
            c(2, 1, 0, 1),
            c(3, 50, 3, 1),
            c(4, 10, 5, 2),
        ] {
            q.push(x);
        }
        let order: Vec<usize> = std::iter::from_fn(|| q.pop()).map(|c| c.prof).collect();
        assert_eq!(order, vec![2, 3, 1, 4, 0]);
    }

    #[test]
    fn not_inlined_contexts_merge_into_base() {
        // main calls foo at two sites; foo's contexts are cold (count 1 ≤ cold 5), so
        // neither is inlined: both merge into a base profile [foo].
        let mut m = BTreeMap::new();
        let main = ctx(&[("main", 0)]);
        let mut mp = prof(&main, 100, 0);
        mp.add_called_target_samples(LineLocation::new(2, 0), "foo", 1);
        mp.add_called_target_samples(LineLocation::new(3, 0), "foo", 1);
        m.insert(main, mp);
        for l in [2, 3] {
            let c = ctx(&[("main", l), ("foo", 0)]);
            m.insert(c.clone(), prof(&c, 1, 1));
        }
        let opts = PreInlineOptions {
            use_context_cost: false,
            ..PreInlineOptions::default()
        };
        let th = PreInlineThresholds {
            cold_count: 5,
            p10_count: 100,
        };
        let out = PreInliner::new(m, None, &opts, th).run();
        let keys: Vec<String> = out.keys().map(|c| c.to_string()).collect();
        assert_eq!(keys, vec!["foo", "main"]);
        let foo = &out[&ctx(&[("foo", 0)])];
        assert_eq!((foo.total, foo.head, foo.attributes), (2, 2, 0));
    }

    #[test]
    fn hot_small_context_is_inlined_and_marked() {
        let mut m = BTreeMap::new();
        let main = ctx(&[("main", 0)]);
        let mut mp = prof(&main, 100, 0);
        mp.add_called_target_samples(LineLocation::new(2, 0), "foo", 50);
        m.insert(main, mp);
        let c = ctx(&[("main", 2), ("foo", 0)]);
        let mut fp = prof(&c, 50, 50);
        fp.attributes = CONTEXT_WAS_INLINED;
        m.insert(c.clone(), fp);
        let opts = PreInlineOptions {
            use_context_cost: false,
            ..PreInlineOptions::default()
        };
        let th = PreInlineThresholds {
            cold_count: 5,
            p10_count: 100,
        };
        let out = PreInliner::new(m, None, &opts, th).run();
        assert_eq!(out.len(), 2);
        // Size 1 (one body sample) < threshold: inlined, attributes 1 | 2.
        assert_eq!(out[&c].attributes, 3);
    }
}
