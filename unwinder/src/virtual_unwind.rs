//! [`VirtualUnwinder`]: llvm-profgen 19's context-sensitive unwinding of hybrid samples
//! (`VirtualUnwinder::unwind` and `collectSamplesFromFrameTrie`).
//!
//! Starting from the sampled call stack (leaf = the newest LBR target), the LBR is replayed
//! newest to oldest. Before each branch but the newest, the linear range from that
//! branch's target to the previous branch's source is recorded (`unwindLinear`); then the
//! branch itself moves the frame: a call pops back to the caller (or switches to the call
//! site if the caller is not on the stack), a return pushes the callee frame under the
//! call site it returned to, any other branch switches to its source in the same frame. A
//! range that is not a valid fall-through, or an unpaired external address, makes the
//! state invalid: the rest of the LBR is replayed context-less under the root.

use crate::address_form::ADDRESS_FORM_MARK;
use crate::context::{compress_recursion, trim_context};
use std::collections::HashMap;

use rustc_hash::FxBuildHasher;

use crate::counter_table::{ContextId, CounterTable, WalkId};
use crate::frame_trie::{FrameId, FrameTrie, ROOT};
use crate::layout_cache::{LayoutCache, LayoutTables};
use crate::pending_counters::PendingCounters;
use crate::sample_prep::{Branch, PerfSample};
use crate::{CodeLayout, UnwindStats, EXTERNAL_ADDR};

/// llvm-profgen's "Bogus trace" threshold: the stack leaf must be at most 0xff bytes after
/// the newest LBR target.
pub const MAX_LEAF_TO_LBR_TIP: u64 = 0x100;

/// How context keys are shaped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct KeyShape {
    /// True for probe binaries: counters recorded on the caller frame, keys are call-site
    /// addresses, recursion-compressed and trimmed. False: line keys, as is.
    pub probes: bool,
    /// `--compress-recursion` (`None` = unlimited).
    pub compress_recursion: Option<u32>,
    /// The depth probe keys are trimmed to (`None` = unlimited).
    pub depth: Option<usize>,
    /// Line keys of a layout without inline frames counted by address, as probe keys
    /// are, and marked ([`crate::address_form`]): ranges and branches on the caller
    /// frame, expanded to line keys when the counters are taken.
    pub address_form: bool,
}

/// Where the replay is: the leaf frame, its parent and address, and the instruction.
///
/// When ranges and branches go on the caller's frame, a leaf frame matters only once
/// something is pushed under it (a return): until then it is kept as its parent and
/// address ([`UNMADE`]), so a jump, which moves the leaf to its source, looks nothing up
/// in the trie.
struct State {
    /// The leaf frame, or [`UNMADE`].
    leaf: FrameId,
    /// The leaf's parent.
    parent: FrameId,
    /// The leaf's address.
    address: u64,
    ip: u64,
    invalid: bool,
    /// Leaves are left [`UNMADE`] (false: made at once, as a walk of the sample's own trie
    /// needs every frame).
    lazy: bool,
}

/// [`State::leaf`] of a leaf not looked up in the trie yet.
const UNMADE: FrameId = FrameId::MAX;

/// Unwinds aggregated hybrid samples into a [`CounterTable`].
///
/// The frame trie is kept from sample to sample: a frame stands for its path from the
/// root (its calling context), so the frames of the contexts samples share are found
/// rather than made again, and each frame's context is interned in the counter table once
/// (not hashed as a key again for every sample that reaches it). A sample's counters sit
/// on the frames it touched until [`Self::unwind`] hands them to the counter table. In line
/// contexts, the walk of a range back from its end (a piece per inline context, or per
/// instruction in a binary without inline frames) depends only on the parent frame and the
/// range: it is made once, registered in the counter table as a walk of its pieces, and
/// counted with one [`CounterTable::add_walk`] by every sample that takes it.
pub struct VirtualUnwinder<'a> {
    cache: LayoutCache<'a>,
    kept: KeptUnwinder,
}

/// What a [`VirtualUnwinder`] keeps from one sample to the next, apart from its layout:
/// an owner of the layout keeps it between the unwinders it makes over that layout
/// ([`VirtualUnwinder::resume`], [`VirtualUnwinder::suspend`]), so that a new one starts
/// with the frames, contexts and layout answers of the previous ones.
pub struct KeptUnwinder {
    /// The layout cache's tables (`None` while an unwinder has them).
    tables: Option<LayoutTables>,
    shape: KeyShape,
    /// False when the layout has no inline frames (every range splits at every
    /// instruction: no need to ask).
    inline_frames: bool,
    trie: FrameTrie,
    /// The counters the current sample added to frames of `trie`.
    pending: PendingCounters,
    /// Per frame, its context in the counter table `contexts_of` (or [`NO_CONTEXT`]).
    contexts: Vec<ContextId>,
    contexts_of: Option<u64>,
    /// The current sample reached a child of an external frame (`untracked_callsites`).
    external_children: bool,
    /// The current sample made a frame at address 0 (see [`VirtualUnwinder::unwind`]).
    zero_frames: bool,
    /// The exact walk's own trie, cleared for every sample.
    exact: FrameTrie,
    /// The frame-address stacks of the exact walk; the first `stacks_used` are in use
    /// (the others keep their buffers for the next sample).
    stacks: Vec<Vec<u64>>,
    stacks_used: usize,
    /// The exact walk's work list (reused).
    work: Vec<Visit>,
    /// The context key being built (reused).
    key: Vec<u64>,
    /// Line walks by (parent frame, start, end): see [`VirtualUnwinder`].
    walk_memo: HashMap<(FrameId, u64, u64), Walk, FxBuildHasher>,
    /// The memoized walks: their ranges by frame (`memo_pieces`) and, once a sample
    /// taking it was counted, their walk in the counter table.
    memos: Vec<MemoWalk>,
    memo_pieces: Vec<(FrameId, u64, u64)>,
    /// The memoized walks the current sample took (indices in `memos`), with its count.
    walks: Vec<(u32, u64)>,
    /// A walk's ranges by context (reused).
    ranges: Vec<(ContextId, u64, u64)>,
    /// The walk being memoized adds its ranges to `memo_pieces`.
    recording: bool,
    /// Range samples that are not valid fall-throughs, as the range checks count them
    /// (`BogusRange`), summed over the samples replayed since [`VirtualUnwinder::take_bogus_ranges`].
    bogus_ranges: u64,
}

/// A memoized line walk.
struct MemoWalk {
    /// Its ranges: `memo_pieces[pieces.0..pieces.1]`.
    pieces: (u32, u32),
    walk: Option<WalkId>,
}

/// What a line walk memo holds.
#[derive(Clone, Copy)]
enum Walk {
    /// The walk (its index in `memos`) and where it leaves the leaf.
    Memo { memo: u32, leaf: FrameId, ip: u64 },
    /// A walk that makes a frame at address 0 (or too many ranges to keep): walked every
    /// time.
    Unmemoized,
}

/// Most ranges of memoized walks the unwinder and a counter table hold (each 24 bytes).
const MAX_WALK_PIECES: usize = 1 << 18;

impl KeptUnwinder {
    /// The shape of the keys it was made for.
    pub fn shape(&self) -> KeyShape {
        self.shape
    }

    fn new(layout: &dyn CodeLayout, shape: KeyShape) -> KeptUnwinder {
        KeptUnwinder {
            tables: Some(LayoutTables::new()),
            shape,
            inline_frames: layout.has_inline_frames(),
            trie: FrameTrie::new(),
            pending: PendingCounters::default(),
            contexts: Vec::new(),
            contexts_of: None,
            external_children: false,
            zero_frames: false,
            exact: FrameTrie::new(),
            stacks: Vec::new(),
            stacks_used: 0,
            work: Vec::new(),
            key: Vec::new(),
            walk_memo: HashMap::default(),
            memos: Vec::new(),
            memo_pieces: Vec::new(),
            walks: Vec::new(),
            ranges: Vec::new(),
            recording: false,
            bogus_ranges: 0,
        }
    }
}

/// No context interned yet for a frame.
const NO_CONTEXT: ContextId = ContextId::MAX;

/// Most frames the kept trie holds: past it, the trie starts again from the root alone
/// (it is a cache of contexts; the counters are in the counter table).
const MAX_KEPT_FRAMES: usize = 1 << 15;

enum Visit {
    Enter(FrameId, usize),
    Exit(usize),
}

impl<'a> VirtualUnwinder<'a> {
    /// An unwinder over `layout` producing keys of `shape`.
    pub fn new(layout: &'a dyn CodeLayout, shape: KeyShape) -> VirtualUnwinder<'a> {
        VirtualUnwinder::resume(layout, KeptUnwinder::new(layout, shape))
    }

    /// The shape of the keys it produces.
    pub fn shape(&self) -> KeyShape {
        self.kept.shape
    }

    /// An unwinder over `layout` that goes on from `kept`, which unwinders over the same
    /// layout (alive all along) left with [`Self::suspend`]. Counting is the same as a new
    /// unwinder's; its shape is `kept`'s.
    pub fn resume(layout: &'a dyn CodeLayout, mut kept: KeptUnwinder) -> VirtualUnwinder<'a> {
        let tables = kept.tables.take().unwrap_or_default();
        kept.inline_frames = layout.has_inline_frames();
        VirtualUnwinder {
            cache: LayoutCache::with_tables(layout, tables),
            kept,
        }
    }

    /// The range samples replayed since the last call that are not valid fall-throughs,
    /// counted as the range checks count them (`warnInvalidRange`'s `BogusRange`: both
    /// ends code, the start in a function, a range that is no fall-through): every range
    /// of every sample [`Self::unwind`] was given, with its count, whatever the sample's
    /// occurrence. What counting without a range tally reports.
    pub fn take_bogus_ranges(&mut self) -> u64 {
        std::mem::take(&mut self.kept.bogus_ranges)
    }

    /// What the next unwinder over this layout may go on from ([`Self::resume`]).
    pub fn suspend(self) -> KeptUnwinder {
        let mut kept = self.kept;
        kept.tables = Some(self.cache.into_tables());
        kept
    }

    /// Unwinds one aggregated sample standing for `repeat` samples and adds its counters.
    /// Returns false when the sample was rejected (no stack or LBR, or a bogus trace).
    pub fn unwind(
        &mut self,
        sample: &PerfSample,
        repeat: u64,
        counters: &mut CounterTable,
        stats: &mut UnwindStats,
    ) -> bool {
        if self.kept.trie.len() > MAX_KEPT_FRAMES || self.kept.contexts_of != Some(counters.id()) {
            // The frames' contexts and walks are ids of this trie and of that table.
            if self.kept.trie.len() > MAX_KEPT_FRAMES {
                self.kept.trie.clear();
            }
            self.kept.contexts.clear();
            self.kept.walk_memo.clear();
            self.kept.memos.clear();
            self.kept.memo_pieces.clear();
            self.kept.contexts_of = Some(counters.id());
        }
        if !self.replay(sample, repeat, stats, true) {
            return false;
        }
        if self.kept.zero_frames {
            self.unwind_exact(sample, repeat, counters, stats);
        } else {
            self.collect(counters, stats);
        }
        true
    }

    /// A sample that made a frame at address 0 (a return to an address that follows no
    /// call) is counted as llvm-profgen counts it: on a trie of its own, walked depth
    /// first with a stack of frame addresses that such a frame pops without having pushed
    /// (`FrameStack::popFrame`), so that the contexts of the frames visited after it
    /// depend on the order of the walk, not on their paths alone.
    fn unwind_exact(
        &mut self,
        sample: &PerfSample,
        repeat: u64,
        counters: &mut CounterTable,
        stats: &mut UnwindStats,
    ) {
        // The kept trie's counters of this sample are dropped; the replay's statistics
        // were counted by the first replay.
        self.kept.pending.clear();
        self.kept.walks.clear();
        let replayed =
            self.unwind_on_own_trie(sample, repeat, &mut UnwindStats::default(), counters, stats);
        debug_assert!(replayed);
    }

    /// Replays the sample on a trie of its own (statistics to `replay_stats`) and, when it
    /// was not rejected, counts it walking that trie depth first (statistics to `stats`);
    /// the kept trie is left as it was. Returns whether the sample was replayed.
    fn unwind_on_own_trie(
        &mut self,
        sample: &PerfSample,
        repeat: u64,
        replay_stats: &mut UnwindStats,
        counters: &mut CounterTable,
        stats: &mut UnwindStats,
    ) -> bool {
        std::mem::swap(&mut self.kept.trie, &mut self.kept.exact);
        self.kept.trie.clear();
        let replayed = self.replay(sample, repeat, replay_stats, false);
        if replayed {
            self.collect_exact(counters, stats);
        }
        self.kept.pending.clear();
        std::mem::swap(&mut self.kept.trie, &mut self.kept.exact);
        replayed
    }

    /// [`Self::unwind`] always on a trie of the sample's own, walked depth first: the
    /// reference the kept trie's counting is tested against.
    #[cfg(test)]
    fn unwind_by_walk(
        &mut self,
        sample: &PerfSample,
        repeat: u64,
        counters: &mut CounterTable,
        stats: &mut UnwindStats,
    ) -> bool {
        let mut replay_stats = UnwindStats::default();
        let replayed = self.unwind_on_own_trie(sample, repeat, &mut replay_stats, counters, stats);
        stats.merge(&replay_stats);
        replayed
    }

    /// Replays the sample on the trie, leaving its counters on the frames it touched (and,
    /// with `memoize`, on the kept trie, its memoized walks in `walks`); false for a
    /// rejected sample.
    fn replay(
        &mut self,
        sample: &PerfSample,
        repeat: u64,
        stats: &mut UnwindStats,
        memoize: bool,
    ) -> bool {
        let (Some(&leaf_addr), Some(newest)) = (sample.call_stack.first(), sample.lbr.first())
        else {
            self.note_bogus_ranges_of_rejected(sample, repeat, memoize);
            return false;
        };
        self.kept.external_children = false;
        self.kept.zero_frames = false;
        let mut parent = ROOT;
        for &a in sample.call_stack[1..].iter().rev() {
            parent = self.child(parent, a);
        }
        let mut st = State {
            leaf: UNMADE,
            parent: ROOT,
            address: 0,
            ip: leaf_addr,
            invalid: false,
            lazy: memoize && self.counts_on_caller(memoize),
        };
        self.set_leaf(&mut st, parent, leaf_addr);
        if leaf_addr < newest.target || leaf_addr - newest.target >= MAX_LEAF_TO_LBR_TIP {
            stats.bogus_traces += 1;
            self.note_bogus_ranges_of_rejected(sample, repeat, memoize);
            return false;
        }
        stats.total_branches += sample.lbr.len() as u64;
        for (i, br) in sample.lbr.iter().enumerate() {
            if i > 0 {
                self.unwind_linear(&mut st, br.target, repeat, stats, memoize);
            }
            let src = br.source;
            let from_external_call_site =
                src == EXTERNAL_ADDR && self.call_for_frame(br.target) != 0;
            let (is_call, is_return) = self.cache.call_or_return(src);
            if !st.invalid && (is_call || (src == EXTERNAL_ADDR && !from_external_call_site)) {
                self.unwind_call(&mut st, src, stats);
            } else if !st.invalid && (is_return || from_external_call_site) {
                let call = self.call_for_frame(br.target);
                self.switch_to(&mut st, call);
                let caller = self.leaf(&mut st);
                self.set_leaf(&mut st, caller, src);
                st.ip = src;
            } else if !st.invalid {
                self.switch_to(&mut st, src);
                st.ip = src;
            } else {
                st.ip = src;
                self.set_leaf(&mut st, ROOT, src);
            }
            self.record_branch(&mut st, *br, repeat, memoize);
        }
        true
    }

    /// [`FrameTrie::child`], noting what [`Self::collect`] must know of the sample.
    #[inline]
    fn child(&mut self, parent: FrameId, address: u64) -> FrameId {
        self.kept.external_children |= self.kept.trie.frame(parent).address == EXTERNAL_ADDR;
        self.kept.zero_frames |= address == 0;
        self.kept.trie.child(parent, address)
    }

    /// Records the range on frame `id`.
    #[inline]
    fn add_range(&mut self, id: FrameId, start: u64, end: u64, repeat: u64) {
        self.kept.pending.add_range(id, start, end, repeat);
    }

    /// Records the branch on frame `id`.
    #[inline]
    fn add_branch(&mut self, id: FrameId, source: u64, target: u64, repeat: u64) {
        self.kept.pending.add_branch(id, source, target, repeat);
    }

    /// `getCallAddrFromFrameAddr`: the call before a return address, 0 when none.
    fn call_for_frame(&mut self, addr: u64) -> u64 {
        self.cache.call_before_return_address(addr).unwrap_or(0)
    }

    /// Moves the leaf to the child of `parent` at `address` (looked up now unless the
    /// replay is lazy).
    #[inline]
    fn set_leaf(&mut self, st: &mut State, parent: FrameId, address: u64) {
        st.parent = parent;
        st.address = address;
        if st.lazy {
            // What `child` would note of the frame.
            self.kept.external_children |= self.kept.trie.frame(parent).address == EXTERNAL_ADDR;
            self.kept.zero_frames |= address == 0;
            st.leaf = UNMADE;
        } else {
            st.leaf = self.child(parent, address);
        }
    }

    /// Moves the leaf to frame `id`, which exists.
    #[inline]
    fn enter(&mut self, st: &mut State, id: FrameId) {
        let frame = self.kept.trie.frame(id);
        st.parent = frame.parent;
        st.address = frame.address;
        st.leaf = id;
    }

    /// The leaf frame, looked up when it is [`UNMADE`].
    #[inline]
    fn leaf(&mut self, st: &mut State) -> FrameId {
        if st.leaf == UNMADE {
            st.leaf = self.child(st.parent, st.address);
        }
        st.leaf
    }

    #[inline]
    fn switch_to(&mut self, st: &mut State, address: u64) {
        if st.address == address {
            return;
        }
        self.set_leaf(st, st.parent, address);
    }

    fn unwind_call(&mut self, st: &mut State, source: u64, stats: &mut UnwindStats) {
        let parent = st.parent;
        if parent == ROOT || self.kept.trie.frame(parent).address != source {
            // The caller's frame is missing (sampled in a prolog/epilog, or an external
            // caller): stay at this depth on the call site.
            self.switch_to(st, source);
            if parent != ROOT {
                if source == EXTERNAL_ADDR {
                    stats.mismatched_ext_call_branches += 1;
                } else {
                    stats.mismatched_prolog_epilog_branches += 1;
                }
            }
        } else {
            self.enter(st, parent);
        }
        st.ip = source;
    }

    fn unwind_linear(
        &mut self,
        st: &mut State,
        target: u64,
        repeat: u64,
        stats: &mut UnwindStats,
        memoize: bool,
    ) {
        let end = st.ip;
        if end == EXTERNAL_ADDR && target == EXTERNAL_ADDR {
            stats.paired_external_addresses += 1;
            return;
        }
        if end == EXTERNAL_ADDR || target == EXTERNAL_ADDR {
            stats.unpaired_external_addresses += 1;
            st.invalid = true;
            return;
        }
        if !self.cache.is_valid_fall_through_range(target, end) {
            st.invalid = true;
            if memoize {
                self.note_bogus_range(target, repeat);
            }
            return;
        }
        let parent = st.parent;
        if self.counts_on_caller(memoize) {
            if self.kept.shape.address_form {
                // The walk would give each instruction a frame under `parent`.
                self.kept.external_children |=
                    self.kept.trie.frame(parent).address == EXTERNAL_ADDR;
            }
            self.add_range(parent, target, end, repeat);
            return;
        }
        if !memoize {
            self.walk_line(st, target, repeat);
            return;
        }
        // Memoized: the walk from the leaf at `end` (the child of `parent` there) back to
        // `target` depends on nothing else.
        let key = (parent, target, end);
        if st.address == end {
            match self.kept.walk_memo.get(&key) {
                Some(&Walk::Memo { memo, leaf, ip }) => {
                    self.kept.external_children |=
                        self.kept.trie.frame(parent).address == EXTERNAL_ADDR;
                    self.kept.walks.push((memo, repeat));
                    self.enter(st, leaf);
                    st.ip = ip;
                    return;
                }
                Some(Walk::Unmemoized) => {}
                None => {
                    let had_zero_frames = std::mem::replace(&mut self.kept.zero_frames, false);
                    let first = self.kept.memo_pieces.len();
                    self.kept.recording = true;
                    self.walk_line(st, target, repeat);
                    self.kept.recording = false;
                    let memo =
                        if self.kept.zero_frames || self.kept.memo_pieces.len() > MAX_WALK_PIECES {
                            self.kept.memo_pieces.truncate(first);
                            Walk::Unmemoized
                        } else {
                            self.kept.memos.push(MemoWalk {
                                pieces: (first as u32, self.kept.memo_pieces.len() as u32),
                                walk: None,
                            });
                            Walk::Memo {
                                memo: (self.kept.memos.len() - 1) as u32,
                                leaf: self.leaf(st),
                                ip: st.ip,
                            }
                        };
                    self.kept.zero_frames |= had_zero_frames;
                    self.kept.walk_memo.insert(key, memo);
                    return;
                }
            }
        }
        self.walk_line(st, target, repeat);
    }

    /// Counts the range starting at `start` that is no fall-through, as the range checks do:
    /// only when it starts in a function (both of its ends are code: the preparation made
    /// every other address external). The first replay of a sample counts it
    /// (`memoize`); a sample walked again on its own trie is not counted twice.
    #[cold]
    fn note_bogus_range(&mut self, start: u64, repeat: u64) {
        let in_function = self
            .cache
            .layout()
            .range_checks()
            .is_some_and(|c| c.function_range(start).is_some());
        if in_function {
            self.kept.bogus_ranges = self.kept.bogus_ranges.wrapping_add(repeat);
        }
    }

    /// [`Self::note_bogus_range`] of every range of a sample the replay rejects (the range
    /// checks count the ranges of every sample).
    #[cold]
    fn note_bogus_ranges_of_rejected(&mut self, sample: &PerfSample, repeat: u64, memoize: bool) {
        if !memoize || self.cache.layout().range_checks().is_none() {
            return;
        }
        for pair in sample.lbr.windows(2) {
            let (start, end) = (pair[1].target, pair[0].source);
            if start != EXTERNAL_ADDR
                && end != EXTERNAL_ADDR
                && !self.cache.is_valid_fall_through_range(start, end)
            {
                self.note_bogus_range(start, repeat);
            }
        }
    }

    /// Line contexts: walks the range back from the leaf to `target` one instruction at a
    /// time and splits it where the inline context changes: each piece belongs to the
    /// frame of its own inline context.
    fn walk_line(&mut self, st: &mut State, target: u64, repeat: u64) {
        let mut end = st.ip;
        while st.ip > target {
            let prev = st.ip;
            st.ip = self.cache.previous_instruction(st.ip).unwrap_or(0);
            if !self.kept.inline_frames || !self.cache.inline_context_equal(prev, st.ip) {
                self.switch_to(st, prev);
                if prev <= end {
                    let leaf = self.leaf(st);
                    self.add_line_range(leaf, prev, end, repeat);
                }
                end = st.ip;
            }
        }
        let ip = st.ip;
        self.switch_to(st, ip);
        if ip <= end {
            let leaf = self.leaf(st);
            self.add_line_range(leaf, ip, end, repeat);
        }
    }

    /// [`Self::add_range`] of a line walk, noted when the walk is being memoized.
    #[inline]
    fn add_line_range(&mut self, id: FrameId, start: u64, end: u64, repeat: u64) {
        if self.kept.recording {
            self.kept.memo_pieces.push((id, start, end));
        }
        self.add_range(id, start, end, repeat);
    }

    /// True when ranges and branches go on the caller's frame: probe keys, and line keys
    /// counted by address on the kept trie (a sample walked on its own trie is counted in
    /// line form).
    fn counts_on_caller(&self, memoize: bool) -> bool {
        self.kept.shape.probes || (memoize && self.kept.shape.address_form)
    }

    fn record_branch(&mut self, st: &mut State, br: Branch, repeat: u64, memoize: bool) {
        if br.target == EXTERNAL_ADDR {
            return;
        }
        if br.source == EXTERNAL_ADDR {
            // External caller: kept on the root for head samples.
            self.add_branch(ROOT, br.source, br.target, repeat);
            return;
        }
        let owner = if self.counts_on_caller(memoize) {
            st.parent
        } else {
            self.leaf(st)
        };
        self.add_branch(owner, br.source, br.target, repeat);
    }

    /// `collectSamplesFromFrameTrie` for a sample without frames at address 0: every
    /// frame's context is its path from the root (frame addresses, restarting after an
    /// external frame, which truncates the context), interned once per frame of the kept
    /// trie; the counters of the frames the sample touched go to it.
    fn collect(&mut self, counters: &mut CounterTable, stats: &mut UnwindStats) {
        if self.kept.external_children {
            stats.untracked_callsites.insert(EXTERNAL_ADDR);
        }
        let walks = std::mem::take(&mut self.kept.walks);
        for &(memo, n) in &walks {
            let walk = match self.kept.memos[memo as usize].walk {
                Some(walk) => Some(walk),
                None => self.register_walk(memo, counters),
            };
            match walk {
                Some(walk) => counters.add_walk(walk, n),
                None => {
                    // The table holds all the walks it may: range by range.
                    let (first, last) = self.kept.memos[memo as usize].pieces;
                    for k in first..last {
                        let (frame, start, end) = self.kept.memo_pieces[k as usize];
                        let c = self.context_of(frame, counters);
                        counters.add_range(c, start, end, n);
                    }
                }
            }
        }
        self.kept.walks = walks;
        self.kept.walks.clear();
        let mut pending = std::mem::take(&mut self.kept.pending);
        for &((id, s, e), n) in pending.ranges() {
            let c = self.context_of(id, counters);
            counters.add_range(c, s, e, n);
        }
        for &((id, s, t), n) in pending.branches() {
            let c = self.context_of(id, counters);
            counters.add_branch(c, s, t, n);
        }
        pending.clear();
        self.kept.pending = pending;
    }

    /// Registers memo `memo`'s walk in `counters` (its first sample is being counted: its
    /// contexts have counters); `None` when the table holds all the walks it may.
    fn register_walk(&mut self, memo: u32, counters: &mut CounterTable) -> Option<WalkId> {
        let (first, last) = self.kept.memos[memo as usize].pieces;
        if counters.walk_pieces() + (last - first) as usize > MAX_WALK_PIECES {
            return None;
        }
        let mut ranges = std::mem::take(&mut self.kept.ranges);
        ranges.clear();
        for k in first..last {
            let (frame, start, end) = self.kept.memo_pieces[k as usize];
            ranges.push((self.context_of(frame, counters), start, end));
        }
        let walk = counters.walk(&ranges);
        self.kept.ranges = ranges;
        self.kept.memos[memo as usize].walk = Some(walk);
        Some(walk)
    }

    /// The context of frame `id` of the kept trie in `counters`, interned on first use.
    #[inline]
    fn context_of(&mut self, id: FrameId, counters: &mut CounterTable) -> ContextId {
        match self.kept.contexts.get(id as usize) {
            Some(&c) if c != NO_CONTEXT => c,
            _ => self.intern_context(id, counters),
        }
    }

    /// [`Self::context_of`] of a frame whose context is not interned yet.
    #[inline(never)]
    fn intern_context(&mut self, id: FrameId, counters: &mut CounterTable) -> ContextId {
        self.kept.key.clear();
        let mut f = id;
        while f != ROOT {
            let frame = self.kept.trie.frame(f);
            if frame.address == EXTERNAL_ADDR {
                break;
            }
            if frame.address != 0 {
                self.kept.key.push(frame.address);
            }
            f = frame.parent;
        }
        self.kept.key.reverse();
        if self.kept.shape.probes {
            compress_recursion(&mut self.kept.key, self.kept.shape.compress_recursion);
            trim_context(&mut self.kept.key, self.kept.shape.depth);
        }
        if self.kept.shape.address_form {
            self.kept.key.push(ADDRESS_FORM_MARK);
        }
        let c = counters.context(&self.kept.key);
        if self.kept.contexts.len() <= id as usize {
            self.kept
                .contexts
                .resize(self.kept.trie.len().max(id as usize + 1), NO_CONTEXT);
        }
        self.kept.contexts[id as usize] = c;
        c
    }

    /// `collectSamplesFromFrameTrie`: DFS from the root with the stack of frame addresses;
    /// an external frame restarts its subtree with an empty stack (context truncation).
    /// Iterative, so hostile stack depths cannot overflow the thread's stack.
    fn collect_exact(&mut self, counters: &mut CounterTable, stats: &mut UnwindStats) {
        // Each frame visited finds its counters.
        self.kept.pending.sort_by_frame();
        self.kept.stacks_used = 0;
        let root_stack = self.new_stack();
        let mut work = std::mem::take(&mut self.kept.work);
        work.clear();
        work.push(Visit::Enter(ROOT, root_stack));
        while let Some(visit) = work.pop() {
            let (id, s) = match visit {
                Visit::Exit(s) => {
                    self.kept.stacks[s].pop();
                    continue;
                }
                Visit::Enter(id, s) => (id, s),
            };
            let address = self.kept.trie.frame(id).address;
            let has_children = self.kept.trie.frame(id).has_children();
            let s = if address != 0 && address == EXTERNAL_ADDR {
                if has_children {
                    stats.untracked_callsites.insert(address);
                }
                self.new_stack()
            } else {
                // Address 0 is the dummy root (or, as in llvm-profgen, a frame created
                // for a return whose target follows no call): nothing pushed, but the
                // exit still pops, like FrameStack::popFrame.
                if address != 0 {
                    self.kept.stacks[s].push(address);
                }
                work.push(Visit::Exit(s));
                s
            };
            self.collect_frame(id, s, counters);
            // Newest first onto the stack: visited oldest first (creation order).
            for child in self.kept.trie.children(id) {
                work.push(Visit::Enter(child, s));
            }
        }
        self.kept.work = work;
    }

    /// An empty stack for [`Self::collect_exact`]: its index.
    fn new_stack(&mut self) -> usize {
        if self.kept.stacks_used == self.kept.stacks.len() {
            self.kept.stacks.push(Vec::new());
        }
        self.kept.stacks[self.kept.stacks_used].clear();
        self.kept.stacks_used += 1;
        self.kept.stacks_used - 1
    }

    fn collect_frame(&mut self, id: FrameId, stack: usize, counters: &mut CounterTable) {
        let (ranges, branches) = self.kept.pending.of_sorted(id);
        if ranges.is_empty() && branches.is_empty() {
            return;
        }
        self.kept.key.clear();
        self.kept.key.extend_from_slice(&self.kept.stacks[stack]);
        if self.kept.shape.probes {
            compress_recursion(&mut self.kept.key, self.kept.shape.compress_recursion);
            trim_context(&mut self.kept.key, self.kept.shape.depth);
        }
        let c = counters.context(&self.kept.key);
        for &((_, s, e), n) in ranges {
            counters.add_range(c, s, e, n);
        }
        for &((_, s, t), n) in branches {
            counters.add_branch(c, s, t, n);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{FakeLayout, Inst};
    use crate::{CounterKind, CounterSet};

    const EXT: u64 = EXTERNAL_ADDR;

    type Pairs = Vec<((u64, u64), u64)>;

    /// main:  0x100 push; 0x101 mov; 0x104 call foo; 0x109 cmp; 0x10b jcc 0x104; 0x10d pop; 0x10e ret
    /// foo:   0x110 push; 0x111 mov; 0x114 add (inlined bar); 0x117 jcc 0x11c; 0x119 nop;
    ///        0x11c pop; 0x11d ret
    /// main2: 0x120 push; 0x121 mov; 0x124 call foo; 0x129 pop; 0x12a ret
    fn layout(probes: bool) -> FakeLayout {
        use Inst::*;
        FakeLayout::new(
            &[
                (0x100, Other),
                (0x101, Other),
                (0x104, Call),
                (0x109, Other),
                (0x10b, CondBranch),
                (0x10d, Other),
                (0x10e, Return),
                (0x110, Other),
                (0x111, Other),
                (0x114, Other),
                (0x117, CondBranch),
                (0x119, Other),
                (0x11c, Other),
                (0x11d, Return),
                (0x120, Other),
                (0x121, Other),
                (0x124, Call),
                (0x129, Other),
                (0x12a, Return),
            ],
            &[0x100, 0x110, 0x120],
        )
        .with_probes(probes)
        .with_inline(0x100, 0x10e, &[1])
        .with_inline(0x110, 0x11d, &[2])
        .with_inline(0x114, 0x114, &[2, 3])
        .with_inline(0x120, 0x12a, &[4])
    }

    fn br(source: u64, target: u64) -> Branch {
        Branch { source, target }
    }

    fn run(
        layout: &FakeLayout,
        shape: KeyShape,
        samples: &[(PerfSample, u64)],
    ) -> (CounterSet, UnwindStats) {
        let kind = if shape.probes {
            CounterKind::ProbeContext
        } else {
            CounterKind::LineContext
        };
        let mut counters = CounterTable::new(kind);
        let mut stats = UnwindStats::default();
        let mut u = VirtualUnwinder::new(layout, shape);
        for (s, n) in samples {
            u.unwind(s, *n, &mut counters, &mut stats);
        }
        (counters.into_counter_set(), stats)
    }

    fn flat(c: &CounterSet, key: &[u64]) -> (Pairs, Pairs) {
        let cc = c
            .contexts
            .get(key)
            .unwrap_or_else(|| panic!("no context {key:x?} in {:x?}", c.contexts.keys()));
        (
            cc.ranges.iter().map(|(k, v)| (*k, *v)).collect(),
            cc.branches.iter().map(|(k, v)| (*k, *v)).collect(),
        )
    }

    /// main loops calling foo; the sample is in foo's second call:
    /// call 0x104→0x110 (newest), jcc 0x10b→0x104, ret 0x11d→0x109, jcc 0x117→0x11c,
    /// call 0x104→0x110.
    fn loop_sample() -> PerfSample {
        PerfSample {
            call_stack: vec![0x110, 0x104],
            lbr: vec![
                br(0x104, 0x110),
                br(0x10b, 0x104),
                br(0x11d, 0x109),
                br(0x117, 0x11c),
                br(0x104, 0x110),
            ],
        }
    }

    #[test]
    fn probe_call_return_branch() {
        let l = layout(true);
        let shape = KeyShape {
            probes: true,
            ..KeyShape::default()
        };
        let (c, s) = run(&l, shape, &[(loop_sample(), 3)]);
        assert_eq!(c.contexts.len(), 2);
        assert_eq!(
            flat(&c, &[]),
            (
                vec![((0x104, 0x104), 3), ((0x109, 0x10b), 3)],
                vec![((0x104, 0x110), 6), ((0x10b, 0x104), 3)]
            )
        );
        assert_eq!(
            flat(&c, &[0x104]),
            (
                vec![((0x110, 0x117), 3), ((0x11c, 0x11d), 3)],
                vec![((0x117, 0x11c), 3), ((0x11d, 0x109), 3)]
            )
        );
        assert_eq!(s.total_branches, 5);
        assert_eq!(s.mismatched_prolog_epilog_branches, 0);
    }

    #[test]
    fn line_ranges_split_by_inline_context() {
        let l = layout(false);
        let (c, _) = run(&l, KeyShape::default(), &[(loop_sample(), 1)]);
        let expect: Vec<(Vec<u64>, Pairs, Pairs)> = vec![
            (
                vec![0x104],
                vec![((0x104, 0x104), 1)],
                vec![((0x104, 0x110), 2)],
            ),
            (vec![0x10b], vec![], vec![((0x10b, 0x104), 1)]),
            (vec![0x109], vec![((0x109, 0x10b), 1)], vec![]),
            (vec![0x104, 0x11d], vec![], vec![((0x11d, 0x109), 1)]),
            (vec![0x104, 0x11c], vec![((0x11c, 0x11d), 1)], vec![]),
            (
                vec![0x104, 0x117],
                vec![((0x117, 0x117), 1)],
                vec![((0x117, 0x11c), 1)],
            ),
            (vec![0x104, 0x114], vec![((0x114, 0x114), 1)], vec![]),
            (vec![0x104, 0x110], vec![((0x110, 0x111), 1)], vec![]),
        ];
        assert_eq!(c.contexts.len(), expect.len());
        for (key, ranges, branches) in expect {
            assert_eq!(flat(&c, &key), (ranges, branches), "context {key:x?}");
        }
    }

    /// foo called back from a library that main called: stack foo, EXT, main.
    fn callback_sample() -> PerfSample {
        PerfSample {
            call_stack: vec![0x11c, EXT, 0x104],
            lbr: vec![
                br(0x117, 0x11c),
                br(EXT, 0x110),
                br(0x104, EXT),
                br(0x10b, 0x104),
            ],
        }
    }

    #[test]
    fn external_frame_truncates_context() {
        let l = layout(true);
        let shape = KeyShape {
            probes: true,
            ..KeyShape::default()
        };
        let (c, st) = run(&l, shape, &[(callback_sample(), 1)]);
        assert_eq!(c.contexts.len(), 1);
        assert_eq!(
            flat(&c, &[]),
            (
                vec![((0x104, 0x104), 1), ((0x110, 0x117), 1)],
                vec![((EXT, 0x110), 1), ((0x10b, 0x104), 1), ((0x117, 0x11c), 1)]
            )
        );
        assert_eq!(st.paired_external_addresses, 1);
        assert_eq!(st.unpaired_external_addresses, 0);
        assert_eq!(
            st.untracked_callsites.iter().copied().collect::<Vec<_>>(),
            vec![EXT]
        );
    }

    /// One unwinder keeps its trie, stacks and work list from sample to sample: counting
    /// samples one after another with it equals counting each with a fresh unwinder.
    #[test]
    fn a_reused_unwinder_counts_like_fresh_ones() {
        let l = layout(true);
        let shape = KeyShape {
            probes: true,
            ..KeyShape::default()
        };
        let samples = [
            (callback_sample(), 2),
            (loop_sample(), 3),
            (callback_sample(), 5),
            (loop_sample(), 7),
        ];
        let (reused, reused_stats) = run(&l, shape, &samples);
        let mut fresh = CounterSet::new(CounterKind::ProbeContext);
        let mut branches = 0;
        for s in &samples {
            let (c, st) = run(&l, shape, std::slice::from_ref(s));
            fresh.merge(&c);
            branches += st.total_branches;
        }
        assert_eq!(reused, fresh);
        assert_eq!(reused_stats.total_branches, branches);
        let mut keys: Vec<_> = reused.contexts.keys().cloned().collect();
        keys.sort();
        assert_eq!(keys, [vec![], vec![0x104]]);
    }

    /// Stack foo, main (0x104), main2 (0x124). Newest first: main calls foo; main jumps
    /// at 0x10b (a sibling frame of main's under main2); foo returns to 0x109 (back in
    /// main's frame); foo branches at 0x117; main2 returns to foo's 0x110, which follows
    /// no call: a frame at address 0 under main's. In llvm-profgen's walk that frame pops
    /// main's address without having pushed it, so the sibling frame 0x10b, walked after
    /// it, is keyed without main2's call site.
    fn zero_frame_sample() -> PerfSample {
        PerfSample {
            call_stack: vec![0x110, 0x104, 0x124],
            lbr: vec![
                br(0x104, 0x110),
                br(0x10b, 0x104),
                br(0x11d, 0x109),
                br(0x117, 0x11c),
                br(0x12a, 0x110),
            ],
        }
    }

    /// Counting on the kept trie (contexts by path, interned once) equals llvm-profgen's
    /// walk of a trie per sample, for probe and line keys, with and without inline
    /// frames (and, without, counted by address and expanded), over samples with external
    /// frames and frames at address 0, in any order.
    #[test]
    fn the_kept_trie_counts_like_a_walk_per_sample() {
        let samples = [
            (loop_sample(), 3),
            (callback_sample(), 2),
            (zero_frame_sample(), 5),
            (loop_sample(), 7),
            (zero_frame_sample(), 1),
            (callback_sample(), 11),
        ];
        let layouts = [
            (layout(true), true, None),
            (layout(true), true, Some(1)),
            (layout(false), false, None),
        ];
        for (l, probes, depth) in layouts {
            let without_inline = FakeLayout::new(
                &[
                    (0x100, Inst::Other),
                    (0x101, Inst::Other),
                    (0x104, Inst::Call),
                    (0x109, Inst::Other),
                    (0x10b, Inst::CondBranch),
                    (0x10d, Inst::Other),
                    (0x10e, Inst::Return),
                    (0x110, Inst::Other),
                    (0x111, Inst::Other),
                    (0x114, Inst::Other),
                    (0x117, Inst::CondBranch),
                    (0x119, Inst::Other),
                    (0x11c, Inst::Other),
                    (0x11d, Inst::Return),
                    (0x120, Inst::Other),
                    (0x121, Inst::Other),
                    (0x124, Inst::Call),
                    (0x129, Inst::Other),
                    (0x12a, Inst::Return),
                ],
                &[0x100, 0x110, 0x120],
            )
            .with_probes(probes);
            for layout in [&l, &without_inline] {
                let shape = KeyShape {
                    probes,
                    depth,
                    ..KeyShape::default()
                };
                let kind = if probes {
                    CounterKind::ProbeContext
                } else {
                    CounterKind::LineContext
                };
                for order in [false, true] {
                    let mut ordered = samples.to_vec();
                    if order {
                        ordered.reverse();
                    }
                    let (mut kept, mut walked) = (CounterTable::new(kind), CounterTable::new(kind));
                    let (mut kept_stats, mut walked_stats) =
                        (UnwindStats::default(), UnwindStats::default());
                    let mut u = VirtualUnwinder::new(layout, shape);
                    let mut reference = VirtualUnwinder::new(layout, shape);
                    for (s, n) in &ordered {
                        let a = u.unwind(s, *n, &mut kept, &mut kept_stats);
                        let b = reference.unwind_by_walk(s, *n, &mut walked, &mut walked_stats);
                        assert_eq!(a, b);
                    }
                    let mut zero = VirtualUnwinder::new(layout, shape);
                    let mut scratch = CounterTable::new(kind);
                    let mut st = UnwindStats::default();
                    zero.unwind(&zero_frame_sample(), 1, &mut scratch, &mut st);
                    assert!(zero.kept.zero_frames, "the sample makes a frame at 0");
                    zero.unwind(&loop_sample(), 1, &mut scratch, &mut st);
                    assert!(!zero.kept.zero_frames);
                    let (kept, walked) = (kept.into_counter_set(), walked.into_counter_set());
                    assert!(kept.contexts.len() > 1);
                    assert_eq!(kept, walked, "probes {probes}");
                    assert_eq!(format!("{kept_stats:?}"), format!("{walked_stats:?}"));
                    if !probes && !layout.has_inline_frames() {
                        // Counted by address, then expanded: the same line counters.
                        let shape = KeyShape {
                            address_form: true,
                            ..shape
                        };
                        let mut by_address = CounterTable::new(kind);
                        let mut stats = UnwindStats::default();
                        let mut u = VirtualUnwinder::new(layout, shape);
                        for (s, n) in &ordered {
                            u.unwind(s, *n, &mut by_address, &mut stats);
                        }
                        let mut expanded = by_address.into_counter_set();
                        assert!(expanded
                            .contexts
                            .keys()
                            .any(|k| k.last() == Some(&ADDRESS_FORM_MARK)));
                        crate::address_form::expand_address_form(&mut expanded, layout);
                        assert_eq!(expanded, walked, "by address");
                        assert_eq!(format!("{stats:?}"), format!("{walked_stats:?}"));
                    }
                }
            }
        }
    }

    #[test]
    fn unpaired_external_invalidates_rest() {
        let l = layout(true);
        let shape = KeyShape {
            probes: true,
            ..KeyShape::default()
        };
        let s = PerfSample {
            call_stack: vec![0x110, 0x104],
            lbr: vec![
                br(0x104, 0x110),
                br(0x10b, EXT),
                br(0x117, 0x109),
                br(0x104, 0x110),
            ],
        };
        let (c, st) = run(&l, shape, &[(s, 1)]);
        assert_eq!(st.unpaired_external_addresses, 1);
        // After the invalid point everything is context-less, recorded on the root.
        assert_eq!(c.contexts.len(), 1);
        assert_eq!(
            flat(&c, &[]),
            (
                vec![((0x109, 0x10b), 1), ((0x110, 0x117), 1)],
                vec![((0x104, 0x110), 2), ((0x117, 0x109), 1)]
            )
        );
    }

    #[test]
    fn bogus_range_invalidates() {
        let l = layout(true);
        let shape = KeyShape {
            probes: true,
            ..KeyShape::default()
        };
        // [0x119, 0x104] is backwards: invalid, the rest is context-less under the root
        // (where [0x109, 0x10b] is still a valid range).
        let s = PerfSample {
            call_stack: vec![0x110, 0x104],
            lbr: vec![br(0x104, 0x110), br(0x10b, 0x119), br(0x11d, 0x109)],
        };
        let (c, st) = run(&l, shape, &[(s, 1)]);
        assert_eq!(st.unpaired_external_addresses, 0);
        assert_eq!(c.contexts.len(), 1);
        assert_eq!(
            flat(&c, &[]),
            (
                vec![((0x109, 0x10b), 1)],
                vec![
                    ((0x104, 0x110), 1),
                    ((0x10b, 0x119), 1),
                    ((0x11d, 0x109), 1)
                ]
            )
        );
    }

    #[test]
    fn mismatched_call_site_counts_prolog_epilog() {
        let l = layout(true);
        let shape = KeyShape {
            probes: true,
            ..KeyShape::default()
        };
        // The stack says main called foo, the LBR says main2 did; main2 was entered from
        // outside (0x11d before 0x120 is not a call: an external call).
        let s = PerfSample {
            call_stack: vec![0x110, 0x104],
            lbr: vec![br(0x124, 0x110), br(EXT, 0x120)],
        };
        let (c, st) = run(&l, shape, &[(s, 1)]);
        assert_eq!(st.mismatched_prolog_epilog_branches, 1);
        assert_eq!(st.mismatched_ext_call_branches, 1);
        // The call was replayed as a switch to 0x124 under main's 0x104 frame, so main2's
        // range and call are keyed [0x104]; the external call switched to an EXT frame.
        assert_eq!(c.contexts.len(), 2);
        assert_eq!(
            flat(&c, &[0x104]),
            (vec![((0x120, 0x124), 1)], vec![((0x124, 0x110), 1)])
        );
        assert_eq!(flat(&c, &[]), (vec![], vec![((EXT, 0x120), 1)]));
        assert!(st.untracked_callsites.is_empty());
    }

    #[test]
    fn bogus_trace_rejected() {
        let l = layout(true);
        let shape = KeyShape {
            probes: true,
            ..KeyShape::default()
        };
        let s = PerfSample {
            call_stack: vec![0x104],
            lbr: vec![br(0x10b, 0x110)],
        };
        let (c, st) = run(&l, shape, &[(s, 1)]);
        assert_eq!(st.bogus_traces, 1);
        assert!(c.contexts.is_empty());
    }

    /// Ranges that are no fall-through are counted as the range checks count them: with
    /// their counts, when they start in a function, also in a sample the replay rejects.
    #[test]
    fn bogus_ranges_are_counted_as_the_range_checks_count_them() {
        // main (0x100..0x10f) is no function here.
        let l = layout(true).with_function_ranges(&[(0x110, 0x11e), (0x120, 0x12b)]);
        let shape = KeyShape {
            probes: true,
            ..KeyShape::default()
        };
        let mut u = VirtualUnwinder::new(&l, shape);
        let mut counters = CounterTable::new(CounterKind::ProbeContext);
        let mut stats = UnwindStats::default();
        let samples = [
            // [0x119, 0x104] backwards, starting in foo: 3.
            (
                PerfSample {
                    call_stack: vec![0x110, 0x104],
                    lbr: vec![br(0x104, 0x110), br(0x10b, 0x119), br(0x11d, 0x109)],
                },
                3,
            ),
            // A bogus trace (the leaf before the newest target) with [0x119, 0x10b]
            // backwards in foo: 5.
            (
                PerfSample {
                    call_stack: vec![0x104],
                    lbr: vec![br(0x10b, 0x110), br(0x11d, 0x119)],
                },
                5,
            ),
            // [0x109, 0x104] backwards, starting in main: not counted.
            (
                PerfSample {
                    call_stack: vec![0x110, 0x104],
                    lbr: vec![br(0x104, 0x110), br(0x10b, 0x109)],
                },
                7,
            ),
        ];
        for (s, n) in &samples {
            u.unwind(s, *n, &mut counters, &mut stats);
        }
        assert_eq!(stats.bogus_traces, 1);
        assert_eq!(u.take_bogus_ranges(), 3 + 5);
        assert_eq!(u.take_bogus_ranges(), 0, "taken");
        // Without range checks nothing is counted.
        let unchecked = layout(true);
        let mut u = VirtualUnwinder::new(&unchecked, shape);
        for (s, n) in &samples {
            u.unwind(s, *n, &mut counters, &mut stats);
        }
        assert_eq!(u.take_bogus_ranges(), 0);
    }

    /// fib: 0x200 push; 0x201 mov; 0x204 jcc; 0x206 call fib; 0x20b pop; 0x20c ret
    /// main: 0x210 push; 0x211 mov; 0x214 call fib; 0x219 pop; 0x21a ret
    fn recursion_layout() -> FakeLayout {
        use Inst::*;
        FakeLayout::new(
            &[
                (0x200, Other),
                (0x201, Other),
                (0x204, CondBranch),
                (0x206, Call),
                (0x20b, Other),
                (0x20c, Return),
                (0x210, Other),
                (0x211, Other),
                (0x214, Call),
                (0x219, Other),
                (0x21a, Return),
            ],
            &[0x200, 0x210],
        )
        .with_probes(true)
    }

    #[test]
    fn recursion_compressed_and_trimmed() {
        let l = recursion_layout();
        let s = PerfSample {
            call_stack: vec![0x200, 0x206, 0x206, 0x206, 0x214],
            lbr: vec![br(0x206, 0x200), br(0x204, 0x206)],
        };
        let expect = |c: &CounterSet, key: &[u64]| {
            assert_eq!(c.contexts.len(), 1);
            assert_eq!(
                flat(c, key),
                (
                    vec![((0x206, 0x206), 1)],
                    vec![((0x204, 0x206), 1), ((0x206, 0x200), 1)]
                )
            );
        };
        let shape = KeyShape {
            probes: true,
            ..KeyShape::default()
        };
        expect(&run(&l, shape, &[(s.clone(), 1)]).0, &[0x214, 0x206]);
        let off = KeyShape {
            compress_recursion: Some(0),
            ..shape
        };
        expect(&run(&l, off, &[(s.clone(), 1)]).0, &[0x214, 0x206, 0x206]);
        let trimmed = KeyShape {
            depth: Some(1),
            ..shape
        };
        expect(&run(&l, trimmed, &[(s.clone(), 1)]).0, &[0x206]);
        let zero = KeyShape {
            depth: Some(0),
            ..shape
        };
        expect(&run(&l, zero, &[(s, 1)]).0, &[]);
    }
}
