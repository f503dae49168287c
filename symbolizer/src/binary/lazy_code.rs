//! [`LazyCode`]: the unwinder's [`CodeLayout`] of a binary without DWARF and without placed
//! pseudo probes, decoded one extent at a time as queries reach it.
//!
//! [`ProfiledBinary`](super::ProfiledBinary) decodes every instruction when it loads. For
//! a large library of which samples touch a small part (a compiler's `libLLVM.so`: tens of
//! MB of code, ~10 bytes per decoded instruction) most of that is never asked about.
//! `LazyCode` keeps the file's bytes (a shared memory map, not a copy) and the decode
//! extents the eager loader walks: per executable section other than `.plt`, each symbol
//! (sorted by address, then name) up to the next symbol or the section end. An extent is
//! decoded on its first query into its own sorted arrays and kept (a [`OnceLock`] per
//! extent: lookups take no lock once it is decoded). Memory grows with the code samples
//! touch.
//!
//! Every answer equals the eager `ProfiledBinary`'s for the same binary — the instruction
//! starts of an extent lie in `[symbol, next symbol)` and the extents are disjoint, so the
//! concatenated extents are llvm-profgen's `CodeAddressVec` — except
//! [`CodeLayout::range_crosses_uncond_branch`] over more than [`MAX_RANGE_EXTENTS`]
//! extents, which answers `true` without decoding them (see there).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use unwinder::{CodeLayout, RangeChecks, EXTERNAL_ADDR};

use crate::decoded_bytes::Cache;

use super::address_memo::AddressMemo;
use super::disasm::{decode_range, KIND_BRANCH, KIND_CALL, KIND_RETURN, KIND_UNCOND};
use super::start_bits::StartBits;

/// The bytes of a binary file, shared: a memory map (`Arc<memmap2::Mmap>` coerces to it)
/// or, in tests, a `Vec<u8>`.
pub type SharedBytes = Arc<dyn AsRef<[u8]> + Send + Sync>;

/// A range crossing more extents than this is answered `true` by
/// [`CodeLayout::range_crosses_uncond_branch`] without decoding them: it spans whole
/// functions, and a compiled function ends in a `ret`, a `jmp` or a call (to a function
/// that does not return), each an unconditional transfer. The answer differs from the
/// eager one only when none of the spanned functions has any call, return or direct jump.
pub const MAX_RANGE_EXTENTS: usize = 32;

/// One decode extent before decoding: instructions start in `[start, end)` and their bytes
/// are read from the file at `offset` up to `bytes_end` (the containing section's end).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ExtentPlan {
    /// First instruction address.
    pub start: u64,
    /// Bound on instruction starts: the next symbol or the end of the section's bytes.
    pub end: u64,
    /// File offset of `start`.
    pub offset: usize,
    /// File offset of the end of the section's bytes.
    pub bytes_end: usize,
}

/// The decoded instructions of one extent: offsets from its start, sorted, and the same
/// starts as a bitmap (lookups by address are a bit test and a population count).
#[derive(Debug, Default)]
struct Decoded {
    /// Dense index of the first instruction: extents are numbered in the order they are
    /// decoded, so the indices of decoded instructions are `0..decoded_instructions()`.
    base: usize,
    offsets: Box<[u32]>,
    sizes: Box<[u8]>,
    kinds: Box<[u8]>,
    /// Offsets of the instructions in llvm-profgen's `UncondBranchAddrSet`.
    uncond: Box<[u32]>,
    /// The instruction starts, one bit per byte of the extent.
    starts: StartBits,
}

impl Decoded {
    fn len(&self) -> usize {
        self.offsets.len()
    }

    /// The bytes it holds.
    fn bytes(&self) -> usize {
        std::mem::size_of::<Decoded>()
            + self.offsets.len() * 4
            + self.sizes.len()
            + self.kinds.len()
            + self.uncond.len() * 4
            + self.starts.heap_bytes()
    }
}

/// An extent and, once queried, its instructions (boxed: an extent not yet decoded costs
/// 48 bytes, and a large library has over 100 000 extents).
#[derive(Debug)]
struct Extent {
    plan: ExtentPlan,
    decoded: OnceLock<Box<Decoded>>,
}

/// An instruction: extent index and index within the extent.
type Pos = (usize, usize);

/// See the module docs.
pub struct LazyCode {
    data: SharedBytes,
    extents: Vec<Extent>,
    /// Function ranges `[start, end)`, sorted by start (the `FunctionTable`'s).
    ranges: Vec<(u64, u64)>,
    has_pseudo_probes: bool,
    /// The second-to-last instruction's address (`None`: fewer than two instructions).
    second_last: OnceLock<Option<u64>>,
    decoded: AtomicUsize,
    /// Bytes the decoded extents hold.
    held_bytes: AtomicUsize,
    /// Give back the pages of each decoded extent ([`LazyCode::releasing_decoded_pages`]).
    release_pages: bool,
    /// Decode every extent a range spans ([`LazyCode::with_exact_ranges`]) instead of
    /// answering `true` past [`MAX_RANGE_EXTENTS`].
    exact_ranges: bool,
    /// The extent the last address lookup found: consecutive lookups (the addresses of one
    /// sample) mostly fall in the same function.
    last_extent: AtomicUsize,
    /// [`CodeLayout::is_code`]'s answers (1: an instruction starts there).
    code_answers: AddressMemo,
    /// [`CodeLayout::call_before_return_address`]'s answers: the return address less the
    /// call's, 0 for none.
    call_answers: AddressMemo,
}

impl Drop for LazyCode {
    fn drop(&mut self) {
        Cache::Code.sub(self.held_bytes());
    }
}

impl std::fmt::Debug for LazyCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LazyCode")
            .field("extents", &self.extents.len())
            .field("ranges", &self.ranges.len())
            .field("decoded_instructions", &self.decoded_instructions())
            .finish()
    }
}

impl LazyCode {
    /// A layout over `data` with the decode extents `plans` (see the module docs) and the
    /// function ranges `ranges` (sorted by start). Extents without bytes are dropped.
    /// `None` when two extents overlap or one is longer than 4 GiB: the eager decoder's
    /// answers (duplicates merged, first decoded wins) are then not reproduced here.
    pub(crate) fn new(
        data: SharedBytes,
        mut plans: Vec<ExtentPlan>,
        ranges: Vec<(u64, u64)>,
        has_pseudo_probes: bool,
    ) -> Option<LazyCode> {
        plans.retain(|p| p.start < p.end && p.offset < p.bytes_end);
        plans.sort_by_key(|p| p.start);
        let len = (*data).as_ref().len();
        for (i, p) in plans.iter().enumerate() {
            if p.end - p.start > u64::from(u32::MAX) || p.bytes_end > len {
                return None;
            }
            if i > 0 && plans[i - 1].end > p.start {
                return None;
            }
        }
        Some(LazyCode {
            data,
            extents: plans
                .into_iter()
                .map(|plan| Extent {
                    plan,
                    decoded: OnceLock::new(),
                })
                .collect(),
            ranges,
            has_pseudo_probes,
            second_last: OnceLock::new(),
            decoded: AtomicUsize::new(0),
            held_bytes: AtomicUsize::new(0),
            release_pages: false,
            exact_ranges: false,
            last_extent: AtomicUsize::new(0),
            code_answers: AddressMemo::default(),
            call_answers: AddressMemo::default(),
        })
    }

    /// With `exact`, [`CodeLayout::range_crosses_uncond_branch`] decodes every extent a
    /// range spans, so every answer equals the eager one (`convert`, whose output must be
    /// llvm-profgen's); without it a range over more than [`MAX_RANGE_EXTENTS`] extents is
    /// answered `true` undecoded (the daemon, which bounds the work one sample costs).
    pub(crate) fn with_exact_ranges(mut self, exact: bool) -> LazyCode {
        self.exact_ranges = exact;
        self
    }

    /// An upper bound on the dense instruction indices ([`LazyCode::dense_index`]): the
    /// bytes the extents span.
    pub(crate) fn index_capacity(&self) -> usize {
        self.extents
            .iter()
            .map(|e| (e.plan.end - e.plan.start) as usize)
            .sum()
    }

    /// The dense index of the instruction starting at `addr`: unique, below
    /// [`LazyCode::index_capacity`], assigned when its extent is decoded.
    pub(crate) fn dense_index(&self, addr: u64) -> Option<usize> {
        let (k, j) = self.index_of(addr)?;
        Some(self.decode(k).base + j)
    }

    /// The kind bits ([`super::disasm`]`::KIND_*`) of the instruction at `addr`; 0 when
    /// none starts there.
    pub(crate) fn kind(&self, addr: u64) -> u8 {
        self.index_of(addr).map_or(0, |p| self.kind_at(p))
    }

    /// The byte size of the instruction at `addr`.
    pub(crate) fn size(&self, addr: u64) -> Option<u32> {
        let (k, j) = self.index_of(addr)?;
        Some(u32::from(self.decode(k).sizes[j]))
    }

    /// Instructions with `start <= addr <= end_inclusive`, as (address, byte size), in
    /// address order (the eager [`super::CodeMap::instructions_in`]).
    pub(crate) fn instructions_in(
        &self,
        start: u64,
        end_inclusive: u64,
    ) -> impl Iterator<Item = (u64, u32)> + '_ {
        let first = self.extents.partition_point(|e| e.plan.end <= start);
        self.extents[first..]
            .iter()
            .enumerate()
            .take_while(move |(_, e)| e.plan.start <= end_inclusive)
            .flat_map(move |(n, e)| {
                let d = self.decode(first + n);
                let plan_start = e.plan.start;
                let lo = start.saturating_sub(plan_start);
                let from = d.offsets.partition_point(|&o| u64::from(o) < lo);
                d.offsets[from..]
                    .iter()
                    .zip(&d.sizes[from..])
                    .map(move |(&o, &s)| (plan_start + u64::from(o), u32::from(s)))
                    .take_while(move |(a, _)| *a <= end_inclusive)
            })
    }

    /// With `release`, the pages of each extent's bytes are given back once it is decoded
    /// (see [`crate::LoadOptions::release_decoded_pages`]: only for bytes that are a
    /// read-only file mapping).
    pub(crate) fn releasing_decoded_pages(mut self, release: bool) -> LazyCode {
        self.release_pages = release;
        self
    }

    /// Drops the page-table entries of `bytes`' pages (whole pages around it: they are
    /// read again from the file's page cache when touched).
    pub(crate) fn release(bytes: &[u8]) {
        const PAGE: usize = 4096;
        let start = bytes.as_ptr() as usize & !(PAGE - 1);
        let end = (bytes.as_ptr() as usize + bytes.len()).next_multiple_of(PAGE);
        // SAFETY: the range covers only pages of the read-only private file mapping the
        // bytes lie in (`release_pages` is set only for such bytes, and a mapping covers
        // whole pages); MADV_DONTNEED on it unmaps those pages from this process, and the
        // next read faults them in again from the file. Nothing is written or freed.
        unsafe {
            libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_DONTNEED);
        }
    }

    /// [`LazyCode::release`] of the [`FAULT_AROUND`] windows `range` of `data` (a
    /// read-only file mapping, page-aligned) lies in: reading `range` may have mapped all of
    /// them.
    pub(crate) fn release_around(data: &[u8], range: std::ops::Range<usize>) {
        let windows = fault_around(data, range);
        if !windows.is_empty() {
            LazyCode::release(windows);
        }
    }

    /// Counts `bytes` more held (decoded instructions, remembered answers).
    fn count_bytes(&self, bytes: usize) {
        Cache::Code.add(bytes);
        self.held_bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    /// Keeps `answer` for `addr` in `memo`, counting the bytes of its table when this
    /// answer allocates it.
    fn remember(&self, memo: &AddressMemo, addr: u64, answer: u8) {
        let bytes = memo.put(addr, answer);
        if bytes != 0 {
            self.count_bytes(bytes);
        }
    }

    /// [`CodeLayout::is_code`] of an address the memo has no answer for: decoded, and
    /// the answer kept.
    #[inline(never)]
    fn is_code_decoded(&self, addr: u64) -> bool {
        let code = self.extent_of(addr).is_some_and(|k| {
            let start = self.extents[k].plan.start;
            self.decode(k).starts.contains(addr - start)
        });
        self.remember(&self.code_answers, addr, u8::from(code));
        code
    }

    /// [`CodeLayout::call_before_return_address`] of a return address the memo has no
    /// answer for: decoded, and the answer kept when it fits.
    #[inline(never)]
    fn call_before_decoded(&self, ret: u64) -> Option<u64> {
        let call = self
            .before(ret)
            .filter(|&prev| self.kind_at(prev) & KIND_CALL != 0)
            .map(|prev| self.address(prev));
        // Kept when the distance fits the answer's byte (a call ends at the return
        // address, and is at most 15 bytes long; a call before a gap is asked again).
        let distance = match call {
            None => Some(0),
            Some(c) => u8::try_from(ret.wrapping_sub(c)).ok().filter(|&d| d != 0),
        };
        if let Some(d) = distance {
            self.remember(&self.call_answers, ret, d);
        }
        call
    }

    /// Instructions decoded so far (over all extents).
    pub fn decoded_instructions(&self) -> usize {
        self.decoded.load(Ordering::Relaxed)
    }

    /// Bytes the instructions decoded so far hold.
    pub fn held_bytes(&self) -> usize {
        self.held_bytes.load(Ordering::Relaxed)
    }

    /// True when the binary has no code to decode (no extent has bytes).
    pub fn is_empty(&self) -> bool {
        self.extents.is_empty()
    }

    /// Number of decode extents with bytes.
    pub fn extent_count(&self) -> usize {
        self.extents.len()
    }

    /// Number of extents decoded so far.
    pub fn decoded_extents(&self) -> usize {
        self.extents
            .iter()
            .filter(|e| e.decoded.get().is_some())
            .count()
    }

    /// The decoded instructions of extent `k`.
    fn decode(&self, k: usize) -> &Decoded {
        let e = &self.extents[k];
        e.decoded.get_or_init(|| {
            let p = e.plan;
            let bytes = &(*self.data).as_ref()[p.offset..p.bytes_end];
            let (mut offsets, mut sizes, mut kinds, mut uncond) =
                (Vec::new(), Vec::new(), Vec::new(), Vec::new());
            decode_range(bytes, p.start, p.start, p.end, |addr, size, kind| {
                let off = (addr - p.start) as u32;
                offsets.push(off);
                sizes.push(size);
                kinds.push(kind);
                if kind & KIND_UNCOND != 0 {
                    uncond.push(off);
                }
            });
            let base = self.decoded.fetch_add(offsets.len(), Ordering::Relaxed);
            if self.release_pages {
                // Decoding read at most one instruction (15 bytes) past the extent's end.
                let read = (p.end - p.start) as usize + 15;
                let data = (*self.data).as_ref();
                let end = (p.offset + read).min(p.bytes_end);
                Self::release_around(data, p.offset..end);
            }
            let starts = StartBits::new(&offsets, p.end - p.start);
            let decoded = Box::new(Decoded {
                base,
                starts,
                offsets: offsets.into_boxed_slice(),
                sizes: sizes.into_boxed_slice(),
                kinds: kinds.into_boxed_slice(),
                uncond: uncond.into_boxed_slice(),
            });
            self.count_bytes(decoded.bytes());
            decoded
        })
    }

    fn address(&self, (k, j): Pos) -> u64 {
        self.extents[k].plan.start + u64::from(self.decode(k).offsets[j])
    }

    fn kind_at(&self, (k, j): Pos) -> u8 {
        self.decode(k).kinds[j]
    }

    /// The instruction starting at `addr`.
    fn index_of(&self, addr: u64) -> Option<Pos> {
        let k = self.extent_of(addr)?;
        let j = self
            .decode(k)
            .starts
            .index_of(addr - self.extents[k].plan.start)?;
        Some((k, j))
    }

    /// The bytes of the file it decodes.
    pub(crate) fn bytes(&self) -> &[u8] {
        (*self.data).as_ref()
    }

    /// The extent `addr` lies in: the one the last lookup found when it is, else a binary
    /// search.
    #[inline]
    fn extent_of(&self, addr: u64) -> Option<usize> {
        let hint = self.last_extent.load(Ordering::Relaxed);
        let k = match self.extents.get(hint) {
            Some(e) if e.plan.start <= addr && addr < e.plan.end => return Some(hint),
            _ => self
                .extents
                .partition_point(|e| e.plan.start <= addr)
                .checked_sub(1)?,
        };
        self.last_extent.store(k, Ordering::Relaxed);
        (addr < self.extents[k].plan.end).then_some(k)
    }

    /// The last extent starting below `addr`: the one the last address lookup found when it
    /// is (a call stack's return addresses mostly lie in the functions its LBR entries do).
    fn last_extent_below(&self, addr: u64) -> Option<usize> {
        let hint = self.last_extent.load(Ordering::Relaxed);
        let below = |k: usize| self.extents.get(k).is_some_and(|e| e.plan.start < addr);
        if below(hint) && !below(hint + 1) {
            return Some(hint);
        }
        self.extents
            .partition_point(|e| e.plan.start < addr)
            .checked_sub(1)
    }

    /// The last instruction of extent `k` or of the nearest extent before it with any.
    fn last_at_or_before_extent(&self, k: usize) -> Option<Pos> {
        (0..=k).rev().find_map(|k| {
            let n = self.decode(k).len();
            n.checked_sub(1).map(|j| (k, j))
        })
    }

    /// `lower_bound(CodeAddressVec, addr) - 1`: the last instruction below `addr`.
    fn before(&self, addr: u64) -> Option<Pos> {
        let k = self.last_extent_below(addr)?;
        let d = self.decode(k);
        let j = d.starts.rank(addr - self.extents[k].plan.start, d.len());
        match j.checked_sub(1) {
            Some(j) => Some((k, j)),
            None => self.last_at_or_before_extent(k.checked_sub(1)?),
        }
    }

    /// The instruction after `pos`.
    fn after(&self, (k, j): Pos) -> Option<Pos> {
        if j + 1 < self.decode(k).len() {
            return Some((k, j + 1));
        }
        (k + 1..self.extents.len()).find_map(|k| (self.decode(k).len() > 0).then_some((k, 0)))
    }

    /// The address of the second-to-last instruction of the binary.
    fn second_last(&self) -> Option<u64> {
        *self.second_last.get_or_init(|| {
            let last = self.last_at_or_before_extent(self.extents.len().checked_sub(1)?)?;
            let addr = self.address(last);
            self.before(addr).map(|p| self.address(p))
        })
    }

    /// `PrologEpilogTracker`'s range-start entries: the start of every range up to and
    /// including the first one with fewer than two instructions at or above its start.
    fn is_listed_range_start(&self, addr: u64) -> bool {
        let Ok(i) = self.ranges.binary_search_by_key(&addr, |r| r.0) else {
            return false;
        };
        let stop = match self.second_last() {
            Some(l2) => self.ranges.partition_point(|r| r.0 <= l2),
            None => 0,
        };
        i <= stop
    }
}

impl CodeLayout for LazyCode {
    #[inline]
    fn is_code(&self, addr: u64) -> bool {
        // The memo's answer inlined where it is asked (once per LBR address); the
        // decode out of line.
        match self.code_answers.get(addr) {
            Some(answer) => answer != 0,
            None => self.is_code_decoded(addr),
        }
    }

    fn is_code_each(&self, addrs: &[u64], out: &mut [bool]) {
        // The memo's table fetched once (again after a decode, which may have made it).
        let mut table = self.code_answers.table();
        for (&a, o) in addrs.iter().zip(out) {
            *o = match table.and_then(|t| AddressMemo::get_in(t, a)) {
                Some(answer) => answer != 0,
                None => {
                    let code = self.is_code_decoded(a);
                    table = self.code_answers.table();
                    code
                }
            };
        }
    }

    fn is_call(&self, addr: u64) -> bool {
        self.index_of(addr)
            .is_some_and(|p| self.kind_at(p) & KIND_CALL != 0)
    }

    fn is_return(&self, addr: u64) -> bool {
        self.index_of(addr)
            .is_some_and(|p| self.kind_at(p) & KIND_RETURN != 0)
    }

    fn range_crosses_uncond_branch(&self, start: u64, end: u64) -> bool {
        if start >= end {
            return false;
        }
        let first = self.extents.partition_point(|e| e.plan.end <= start);
        for (n, k) in (first..self.extents.len()).enumerate() {
            let plan = self.extents[k].plan;
            if plan.start >= end {
                break;
            }
            if n == MAX_RANGE_EXTENTS && !self.exact_ranges {
                // See `MAX_RANGE_EXTENTS`: the range spans whole functions.
                return true;
            }
            let lo = start.saturating_sub(plan.start);
            let uncond = &self.decode(k).uncond;
            let i = uncond.partition_point(|&o| u64::from(o) < lo);
            if uncond
                .get(i)
                .is_some_and(|&o| plan.start + u64::from(o) < end)
            {
                return true;
            }
        }
        false
    }

    fn previous_instruction(&self, addr: u64) -> Option<u64> {
        self.before(addr).map(|p| self.address(p))
    }

    fn is_prolog_or_epilog(&self, addr: u64) -> bool {
        if self.is_listed_range_start(addr) {
            return true;
        }
        let Some(pos) = self.index_of(addr) else {
            return false;
        };
        // A return, or the instruction before one.
        if self.kind_at(pos) & KIND_RETURN != 0 {
            return true;
        }
        if self
            .after(pos)
            .is_some_and(|n| self.kind_at(n) & KIND_RETURN != 0)
        {
            return true;
        }
        // The instruction after `lower_bound(start)` of some range start: the instruction
        // before `addr` is the first one at or above that start.
        let Some(prev) = self.before(addr) else {
            return false;
        };
        let prev_addr = self.address(prev);
        let floor = self.before(prev_addr).map(|p| self.address(p));
        let i = self.ranges.partition_point(|r| r.0 <= prev_addr);
        i.checked_sub(1)
            .is_some_and(|i| floor.is_none_or(|f| self.ranges[i].0 > f))
    }

    fn has_pseudo_probes(&self) -> bool {
        self.has_pseudo_probes
    }

    fn inline_context_equal(&self, _a: u64, _b: u64) -> bool {
        // No DWARF: no instruction has inline frames.
        false
    }

    fn has_inline_frames(&self) -> bool {
        false
    }

    fn range_checks(&self) -> Option<&dyn RangeChecks> {
        Some(self)
    }

    fn frame_setup(&self, addr: u64) -> Option<unwinder::FrameSetup> {
        if !self.is_code(addr) {
            return None;
        }
        let (entry, _) = self.function_range(addr)?;
        Some(super::frame_setup::frame_setup(
            addr,
            Some(entry),
            |a| self.kind(a),
            |a| self.previous_instruction(a),
        ))
    }

    #[inline]
    fn call_before_return_address(&self, ret: u64) -> Option<u64> {
        if ret == EXTERNAL_ADDR {
            return Some(EXTERNAL_ADDR);
        }
        match self.call_answers.get(ret) {
            Some(distance) => (distance != 0).then(|| ret - u64::from(distance)),
            None => self.call_before_decoded(ret),
        }
    }
}

impl RangeChecks for LazyCode {
    fn is_transfer(&self, addr: u64) -> bool {
        self.index_of(addr)
            .is_some_and(|p| self.kind_at(p) & (KIND_BRANCH | KIND_CALL | KIND_RETURN) != 0)
    }

    fn function_range(&self, addr: u64) -> Option<(u64, u64)> {
        let i = self
            .ranges
            .partition_point(|r| r.0 <= addr)
            .checked_sub(1)?;
        let r = self.ranges[i];
        (addr < r.1).then_some(r)
    }
}

/// The aligned window a page fault of a cached file may map around the page it faults on:
/// the kernel's `fault_around_bytes` (64 KiB by default) or, where the page cache holds
/// the file in large folios (ext4 and XFS on recent kernels, once the file was read
/// sequentially), the whole folio, up to a PMD (2 MiB on x86-64).
const FAULT_AROUND: usize = 2 << 20;

/// The bytes of `data` (a file mapping, page-aligned) in the [`FAULT_AROUND`] windows
/// `range` touches: reading `range` may map them all, and giving back `range` alone would
/// leave the rest of its windows resident (decoding the 519 functions samples reach in
/// the convert benchmark's 21.6 MB of code left 15 MiB of it mapped; with 64 KiB windows,
/// 8 MiB).
fn fault_around(data: &[u8], range: std::ops::Range<usize>) -> &[u8] {
    let base = data.as_ptr() as usize;
    let start = (base + range.start) & !(FAULT_AROUND - 1);
    let end = (base + range.end).next_multiple_of(FAULT_AROUND);
    let start = start.max(base) - base;
    let end = end.min(base + data.len()) - base;
    &data[start..end.max(start)]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `nop; call rel32; ret` at 0x1000, `jmp rel8; int3` at 0x1007.
    fn layout() -> LazyCode {
        let bytes: Vec<u8> = vec![0x90, 0xe8, 0, 0, 0, 0, 0xc3, 0xeb, 0x00, 0xcc];
        let plans = vec![
            ExtentPlan {
                start: 0x1007,
                end: 0x100a,
                offset: 7,
                bytes_end: 10,
            },
            ExtentPlan {
                start: 0x1000,
                end: 0x1007,
                offset: 0,
                bytes_end: 10,
            },
            // Empty (a second symbol at the same address): dropped.
            ExtentPlan {
                start: 0x1000,
                end: 0x1000,
                offset: 0,
                bytes_end: 10,
            },
        ];
        LazyCode::new(Arc::new(bytes), plans, vec![(0x1000, 0x1007)], false).unwrap()
    }

    #[test]
    fn answers_across_extents() {
        let code = layout();
        assert_eq!(std::mem::size_of::<Extent>(), 48);
        assert_eq!(code.extent_count(), 2);
        assert_eq!(code.decoded_instructions(), 0);
        assert!(code.is_code(0x1007));
        assert_eq!(
            (code.decoded_extents(), code.decoded_instructions()),
            (1, 2)
        );
        assert_eq!(code.previous_instruction(0x1007), Some(0x1006));
        assert_eq!(code.previous_instruction(0x1000), None);
        assert_eq!(code.call_before_return_address(0x1006), Some(0x1001));
        assert!(code.is_call(0x1001) && code.is_return(0x1006) && !code.is_code(0x1002));
        // Asked together, on a fresh layout (the first decode makes the memo's table
        // mid-way) and again (answers from the memo): what each asked alone answers.
        let addrs: Vec<u64> = (0x0ff0..0x1030).collect();
        let alone: Vec<bool> = addrs.iter().map(|&a| code.is_code(a)).collect();
        assert_eq!(alone.iter().filter(|&&c| c).count(), 5);
        for together in [&layout(), &code] {
            for _ in 0..2 {
                let mut out = vec![false; addrs.len()];
                together.is_code_each(&addrs, &mut out);
                assert_eq!(out, alone);
            }
        }
        // Range start, the instruction after it, a ret and the one before it.
        let pe: Vec<u64> = (0x1000..0x100a)
            .filter(|&a| code.is_prolog_or_epilog(a))
            .collect();
        assert_eq!(pe, [0x1000, 0x1001, 0x1006]);
        assert!(code.range_crosses_uncond_branch(0x1007, 0x1008));
        assert!(!code.range_crosses_uncond_branch(0x1008, 0x100a));
        assert!(code.range_crosses_uncond_branch(0x1002, 0x1008));
        assert!(code.is_transfer(0x1007) && !code.is_transfer(0x1009));
        assert_eq!(code.function_range(0x1006), Some((0x1000, 0x1007)));
        assert_eq!(code.function_range(0x1007), None);
    }

    #[test]
    fn overlapping_extents_are_refused() {
        let plan = |start, end| ExtentPlan {
            start,
            end,
            offset: 0,
            bytes_end: 4,
        };
        let refused = LazyCode::new(
            Arc::new(vec![0x90; 4]),
            vec![plan(0x10, 0x14), plan(0x12, 0x14)],
            Vec::new(),
            false,
        );
        assert!(refused.is_none());
        let empty = LazyCode::new(Arc::new(vec![0x90; 4]), Vec::new(), Vec::new(), false).unwrap();
        assert!(empty.is_empty());
        assert_eq!(empty.previous_instruction(5), None);
        assert!(!empty.is_prolog_or_epilog(5));
    }
}
