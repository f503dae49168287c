//! [`Router`]: the one thread between the per-CPU readers and the workers. It keeps the
//! [`ProcessTable`] from side-band events, applies the process filter, finds the binary
//! (build id) each sample belongs to, and groups samples per (binary, process) for the
//! worker that owns the binary (binaries are sharded by build id, so no aggregate is
//! shared between threads).
//!
//! Which binaries a sample goes to:
//! * cpu-clock: the binary mapped at the leading IP;
//! * branch stacks: every binary mapped at a source or target of its LBR entries —
//!   llvm-profgen converts every sample against each binary, and a sample touching none of
//!   a binary's addresses yields nothing for it, so this gives each binary exactly the
//!   counters `convert` would. A branch stack that lies within one mapping (the usual
//!   case) is routed by its lowest and highest address: every address between lies in that
//!   mapping, so this is the same set, found without a lookup per address.
//!
//! A binary with no decodable code (no symbol table, debug file or `.eh_frame` names any
//! of it, so every address in it is external and nothing is ever counted for it) is
//! skipped once its worker has loaded it and found it so
//! ([`BinaryRef::mark_code_less`]); such samples are counted in
//! [`RouterStats::code_less_binary`].
//!
//! Where a binary's file is found: through the process's own view of it (its
//! `/proc/PID/map_files` entry, its root), then through the roots of its living ancestors
//! (a short-lived program in a private mount namespace, its file on a tmpfs only that
//! namespace sees, has often exited before its first sample is routed; the shell or
//! container init that started it is still there), then the path in the daemon's own
//! namespace ([`binary_candidates`]). The file is looked up when the router applies the
//! MMAP2 record of an executable mapping of a sampled process, while the process is more
//! likely alive, and again at its first sample if that failed. A file found at an MMAP2
//! that no sample reaches is let go at the second [`Router::collect_exited`] after it
//! (its mapping would keep a deleted file's inode alive).

use std::collections::hash_map::DefaultHasher;
use std::collections::HashMap;
use std::fs::File;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use collector::live::proc_scan::binary_candidates;
use collector::process_maps::read_maps;
use collector::{BuildId, Mmap2Event, PerfEvent, Sample, SideBandEvent};
use rustc_hash::FxBuildHasher;
use symbolizer::elf_image::{build_id_from_program_headers, ElfFacts, MAX_ELF_BYTES};

use super::filters::{ProcessFacts, ProcessFilter};
use super::process_table::ProcessTable;

/// A binary that samples hit: its build id and the file's bytes to load it from (a
/// read-only memory map, taken by the worker that loads it).
#[derive(Debug)]
pub struct BinaryRef {
    /// The GNU build id.
    pub build_id: BuildId,
    /// The path as mapped (for reports).
    pub path: String,
    /// Where the file was opened.
    pub opened_from: PathBuf,
    /// The whole file, mapped read-only ([`map_binary`]), until a worker takes it.
    pub bytes: Mutex<Option<Arc<memmap2::Mmap>>>,
    /// Set by the worker that loaded it when it has no decodable code.
    code_less: AtomicBool,
}

impl BinaryRef {
    /// A binary opened at `opened_from` (its map `bytes`), mapped as `path`.
    pub fn new(
        build_id: BuildId,
        path: String,
        opened_from: PathBuf,
        bytes: memmap2::Mmap,
    ) -> Self {
        BinaryRef {
            build_id,
            path,
            opened_from,
            bytes: Mutex::new(Some(Arc::new(bytes))),
            code_less: AtomicBool::new(false),
        }
    }

    /// Records that the loaded binary has no decodable code (no instruction the unwinder
    /// could ever count): the router stops routing samples to it.
    pub fn mark_code_less(&self) {
        self.code_less.store(true, Ordering::Relaxed);
    }

    /// True once [`BinaryRef::mark_code_less`] was called.
    pub fn is_code_less(&self) -> bool {
        self.code_less.load(Ordering::Relaxed)
    }
}

/// Samples of one process for one binary.
#[derive(Debug)]
pub struct SampleGroup {
    /// The binary.
    pub binary: Arc<BinaryRef>,
    /// The process.
    pub pid: u32,
    /// The process's mappings of the binary.
    pub mappings: Vec<Mmap2Event>,
    /// The samples, in arrival order.
    pub samples: Vec<Sample>,
    /// Daemon time (seconds since start) when routed.
    pub now_secs: u64,
}

/// How samples are attributed to binaries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RouteBy {
    /// The binary at the leading IP (cpu-clock).
    LeadingIp,
    /// Every binary at an LBR source or target.
    BranchStack,
}

/// What the router did.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct RouterStats {
    /// Samples received.
    pub samples: u64,
    /// Samples of processes the filter excludes (or the daemon itself).
    pub filtered: u64,
    /// Samples with no executable file mapping at their address(es).
    pub unmapped: u64,
    /// Samples in binaries without a build id or that could not be read.
    pub unresolved_binary: u64,
    /// Routings of a sample to a binary skipped because the binary has no decodable code
    /// (see the module docs).
    pub code_less_binary: u64,
    /// Branch-stack samples without branch entries.
    pub empty_branch_stack: u64,
    /// Sample groups handed to workers.
    pub groups: u64,
    /// Side-band events applied.
    pub side_band: u64,
}

impl RouterStats {
    /// The samples not passed on to any worker, by reason (the metric's `reason` label).
    pub fn not_routed(&self) -> Vec<(&'static str, u64)> {
        vec![
            ("filtered", self.filtered),
            ("unmapped", self.unmapped),
            ("unresolved_binary", self.unresolved_binary),
            ("code_less_binary", self.code_less_binary),
            ("empty_branch_stack", self.empty_branch_stack),
        ]
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum FileKey {
    BuildId(BuildId),
    Inode {
        maj: u32,
        min: u32,
        ino: u64,
        path: String,
    },
}

/// See the module docs.
pub struct Router {
    proc: PathBuf,
    table: ProcessTable,
    filter: ProcessFilter,
    binaries: BinaryCache,
    route_by: RouteBy,
    workers: usize,
    skip_pid: Option<u32>,
    stats: RouterStats,
    /// Mapping indices a sample touches (reused: no allocation per sample).
    kept: Vec<usize>,
    /// The last pid found sampled and known (its filter verdict and mappings are current
    /// until the process table or the filter changes, which clears it).
    sampled_pid: Option<u32>,
}

/// Maps the whole of `file` read-only: the file's pages are read from the page cache when
/// they are used, and no copy of them is made in anonymous memory.
///
/// The map stays valid after `file` is closed, and keeps its inode alive: a binary that is
/// replaced the way package managers do it (a new file renamed over the path) or deleted
/// stays readable through it, unchanged. A file truncated or rewritten in place is not
/// safe: a read of a page past its new end raises SIGBUS, which ends the daemon, and a
/// rewrite shows its new bytes. A running program's executable cannot be opened for
/// writing (ETXTBSY), but a library, or an executable whose processes have exited, can.
pub fn map_binary(file: &File) -> std::io::Result<memmap2::Mmap> {
    // SAFETY: the daemon only reads the map. Its bytes can change under it, or vanish
    // (SIGBUS), only if another process rewrites or truncates the file in place; the
    // caveat is documented above.
    unsafe { memmap2::Mmap::map(file) }
}

/// The worker that owns `build_id` among `workers`.
pub fn worker_for(build_id: &BuildId, workers: usize) -> usize {
    let mut h = DefaultHasher::new();
    build_id.hash(&mut h);
    (h.finish() % workers.max(1) as u64) as usize
}

impl Router {
    /// A router over procfs at `proc`; `skip_pid` (the daemon) is never sampled.
    pub fn new(
        proc: &Path,
        filter: ProcessFilter,
        route_by: RouteBy,
        workers: usize,
        skip_pid: Option<u32>,
    ) -> Router {
        Router {
            proc: proc.to_path_buf(),
            table: ProcessTable::default(),
            filter,
            binaries: BinaryCache::default(),
            route_by,
            workers: workers.max(1),
            skip_pid,
            stats: RouterStats::default(),
            kept: Vec::new(),
            sampled_pid: None,
        }
    }

    /// The statistics so far.
    pub fn stats(&self) -> &RouterStats {
        &self.stats
    }

    /// The process table.
    pub fn table(&self) -> &ProcessTable {
        &self.table
    }

    /// Replaces the filter (SIGHUP); verdicts are recomputed.
    pub fn reload(&mut self, filter: ProcessFilter) {
        self.filter = filter;
        self.sampled_pid = None;
        self.table.clear_verdicts();
    }

    /// Drops exited processes, and the files found at an MMAP2 that no sample reached
    /// since the collection before this one (called at each flush).
    pub fn collect_exited(&mut self) {
        self.sampled_pid = None;
        self.table.collect_exited();
        self.binaries.let_go_of_unrouted();
    }

    /// Applies side-band events and routes samples; returns the groups per worker index,
    /// in the order each (binary, process) first appeared.
    ///
    /// Hot path (every sample): no sort, no per-sample allocation besides the group's
    /// vector, no reference count touched (binaries are found by index; their `Arc` is
    /// cloned once per group); a sample is moved into its last group and cloned only for
    /// the others.
    pub fn route(&mut self, events: Vec<PerfEvent>, now_secs: u64) -> Vec<(usize, SampleGroup)> {
        let mut groups: Vec<SampleGroup> = Vec::new();
        // pid → indices of its groups (one per binary; usually one).
        let mut by_pid: HashMap<u32, Vec<usize>, FxBuildHasher> = HashMap::default();
        let mut hits: Vec<usize> = Vec::new();
        let mut last: Option<usize> = None;
        let batch_len = events.len();
        let mut events = events.into_iter().peekable();
        while let Some(event) = events.next() {
            if let Some(PerfEvent::Sample(next)) = events.peek() {
                next.prefetch();
            }
            match event {
                PerfEvent::SideBand(e) => {
                    self.stats.side_band += 1;
                    self.sampled_pid = None;
                    self.table.apply(&e);
                    if let SideBandEvent::Mmap2(m) = &e {
                        self.resolve_at_mmap(m);
                    }
                }
                PerfEvent::Sample(s) => {
                    self.stats.samples += 1;
                    self.binaries_of(&s, &mut hits);
                    let n = hits.len();
                    let mut sample = Some(s);
                    for (i, &bi) in hits.iter().enumerate() {
                        let binary = self.binaries.get(bi);
                        let pid = sample.as_ref().map_or(0, |s| s.pid);
                        let same = |g: &SampleGroup| {
                            g.pid == pid
                                && (Arc::ptr_eq(&g.binary, binary)
                                    || g.binary.build_id == binary.build_id)
                        };
                        let gi = match last.filter(|&l| same(&groups[l])) {
                            Some(l) => l,
                            None => {
                                let known = by_pid.entry(pid).or_default();
                                match known.iter().copied().find(|&g| same(&groups[g])) {
                                    Some(g) => g,
                                    None => {
                                        known.push(groups.len());
                                        let mappings = self
                                            .table
                                            .get(pid)
                                            .map(|p| {
                                                p.mappings
                                                    .iter()
                                                    .filter(|m| m.filename == binary.path)
                                                    .cloned()
                                                    .collect()
                                            })
                                            .unwrap_or_default();
                                        // The first group of a batch usually takes
                                        // every sample: size it for the batch.
                                        let capacity =
                                            if groups.is_empty() { batch_len } else { 16 };
                                        groups.push(SampleGroup {
                                            binary: binary.clone(),
                                            pid,
                                            mappings,
                                            samples: Vec::with_capacity(capacity),
                                            now_secs,
                                        });
                                        groups.len() - 1
                                    }
                                }
                            }
                        };
                        last = Some(gi);
                        let s = if i + 1 == n {
                            sample.take()
                        } else {
                            sample.clone()
                        };
                        if let Some(s) = s {
                            groups[gi].samples.push(s);
                        }
                    }
                }
            }
        }
        self.stats.groups += groups.len() as u64;
        groups
            .into_iter()
            .map(|g| (worker_for(&g.binary.build_id, self.workers), g))
            .collect()
    }

    /// Looks up the file of a new executable mapping of a sampled process (see the module
    /// docs), unless it is cached.
    fn resolve_at_mmap(&mut self, m: &Mmap2Event) {
        let pid = m.pid as u32;
        // Only a mapping the process table keeps can be sampled.
        if self.table.get(pid).and_then(|p| p.mapping_at(m.addr)) != Some(m) || !self.sampled(pid) {
            return;
        }
        self.binaries.resolve_early(&self.proc, m, &self.table);
    }

    /// Applies synthesised side-band events (the /proc scan).
    pub fn apply_all(&mut self, events: &[PerfEvent]) {
        self.sampled_pid = None;
        for e in events {
            if let PerfEvent::SideBand(e) = e {
                self.table.apply(e);
            }
        }
    }

    fn sampled(&mut self, pid: u32) -> bool {
        if self.sampled_pid == Some(pid) {
            return true;
        }
        let verdict = self.sampled_uncached(pid);
        self.sampled_pid = verdict.then_some(pid);
        verdict
    }

    fn sampled_uncached(&mut self, pid: u32) -> bool {
        if Some(pid) == self.skip_pid || pid == 0 {
            return false;
        }
        if self
            .table
            .get(pid)
            .is_none_or(|p| p.mappings.is_empty() && !p.rescanned)
        {
            // A process we have not heard of (its MMAP2s were lost, or it started between
            // the /proc scan and the events' enabling): read its maps once.
            self.rescan(pid);
        }
        if let Some(v) = self.table.get(pid).and_then(|p| p.sampled) {
            return v;
        }
        let verdict = self.filter.matches_all() || {
            let comm = self
                .table
                .get(pid)
                .map(|p| p.comm.clone())
                .unwrap_or_default();
            self.filter
                .matches(&ProcessFacts::read(&self.proc, pid, &comm))
        };
        self.table.entry(pid).sampled = Some(verdict);
        verdict
    }

    fn rescan(&mut self, pid: u32) {
        let p = self.table.entry(pid);
        p.rescanned = true;
        if let Ok(maps) = read_maps(pid as i32) {
            if p.comm.is_empty() {
                p.comm = std::fs::read_to_string(self.proc.join(pid.to_string()).join("comm"))
                    .map(|c| c.trim_end().to_string())
                    .unwrap_or_default();
            }
            // Only the gaps: a mapping the side band already reported keeps its MMAP2
            // (which may carry the build id), so its binary is not looked up, and possibly
            // rejected, a second time under another key.
            for m in maps
                .iter()
                .filter(|m| m.is_executable() && m.path.starts_with('/'))
            {
                if self
                    .table
                    .get(pid)
                    .is_some_and(|p| p.overlaps(m.start, m.end))
                {
                    continue;
                }
                self.table
                    .apply(&SideBandEvent::Mmap2(m.to_mmap2(pid as i32, pid as i32)));
            }
        }
    }

    /// The binaries `s` touches ([`BinaryCache::get`] indices), into `out` (cleared
    /// first), each build id once, in the order the sample's addresses first reach them.
    fn binaries_of(&mut self, s: &Sample, out: &mut Vec<usize>) {
        out.clear();
        if !self.sampled(s.pid) {
            self.stats.filtered += 1;
            return;
        }
        if self.route_by == RouteBy::BranchStack && s.lbr.is_empty() {
            self.stats.empty_branch_stack += 1;
            return;
        }
        let mut kept = std::mem::take(&mut self.kept);
        self.touched_mappings_of(s, &mut kept);
        if kept.is_empty() && self.table.get(s.pid).is_some_and(|p| !p.rescanned) {
            // An address the side band did not map: its MMAP2 may be in another CPU's
            // ring, behind this sample, or lost. Read the maps once per image.
            self.rescan(s.pid);
            self.sampled_pid = None;
            self.touched_mappings_of(s, &mut kept);
        }
        let Some(process) = self.table.get(s.pid).filter(|_| !kept.is_empty()) else {
            self.stats.unmapped += 1;
            self.kept = kept;
            return;
        };
        for &i in &kept {
            let m = &process.mappings[i];
            match self.binaries.resolve(&self.proc, m, s.pid, &self.table) {
                Some(b) if self.binaries.get(b).is_code_less() => self.stats.code_less_binary += 1,
                Some(b) => {
                    let id = &self.binaries.get(b).build_id;
                    if !out.iter().any(|&o| self.binaries.get(o).build_id == *id) {
                        out.push(b);
                    }
                }
                None => self.stats.unresolved_binary += 1,
            }
        }
        self.kept = kept;
    }

    /// The indices of `s`'s process's mappings that its address(es) fall in, into `kept`
    /// (cleared first; empty for an unknown process).
    fn touched_mappings_of(&self, s: &Sample, kept: &mut Vec<usize>) {
        kept.clear();
        let Some(process) = self.table.get(s.pid) else {
            return;
        };
        match self.route_by {
            RouteBy::LeadingIp => touched_mappings(&process.mappings, [s.ip], kept),
            RouteBy::BranchStack => {
                let first = s.lbr.first().map_or(0, |e| e.from);
                match mapping_index(&process.mappings, first) {
                    Some(i) if all_within(&s.lbr, &process.mappings[i]) => kept.push(i),
                    _ => touched_mappings(
                        &process.mappings,
                        s.lbr.iter().flat_map(|e| [e.from, e.to]),
                        kept,
                    ),
                }
            }
        }
    }
}

/// True when every source and target of a branch stack lies in mapping `m` (most
/// branch stacks stay in one binary): one subtraction and compare per address, where a
/// mapping lookup per address would be a binary search.
fn all_within(lbr: &[collector::LbrEntry], m: &Mmap2Event) -> bool {
    let (base, span) = (m.addr, mapping_end(m) - m.addr);
    lbr.iter()
        .all(|e| e.from.wrapping_sub(base) < span && e.to.wrapping_sub(base) < span)
}

/// The end (exclusive) of mapping `m`.
fn mapping_end(m: &Mmap2Event) -> u64 {
    m.addr.saturating_add(m.len)
}

/// The index of the mapping (sorted by address, non-overlapping) containing `a`.
fn mapping_index(mappings: &[Mmap2Event], a: u64) -> Option<usize> {
    let i = mappings.partition_point(|m| m.addr <= a).checked_sub(1)?;
    (a < mapping_end(&mappings[i])).then_some(i)
}

/// The mappings the addresses `addrs` fall in, into `kept`: one per file name, in the
/// order the addresses first reach them; addresses outside every mapping are skipped.
fn touched_mappings(
    mappings: &[Mmap2Event],
    addrs: impl IntoIterator<Item = u64>,
    kept: &mut Vec<usize>,
) {
    // The address range last found (consecutive branches mostly stay in one mapping),
    // then the few ranges already seen; a branch stack touches few mappings.
    let mut last = (0u64, 0u64);
    let mut seen: [(u64, u64); 8] = [(0, 0); 8];
    let mut seen_n = 0usize;
    for a in addrs {
        if a >= last.0 && a < last.1 {
            continue;
        }
        if let Some(&r) = seen[..seen_n].iter().find(|&&(lo, hi)| a >= lo && a < hi) {
            last = r;
            continue;
        }
        let Some(i) = mapping_index(mappings, a) else {
            continue;
        };
        let m = &mappings[i];
        last = (m.addr, mapping_end(m));
        if seen_n < seen.len() {
            seen[seen_n] = last;
            seen_n += 1;
        }
        if !kept.contains(&i) && !kept.iter().any(|&k| mappings[k].filename == m.filename) {
            kept.push(i);
        }
    }
}

impl FileKey {
    /// The key of the file behind `m`.
    fn of(m: &Mmap2Event) -> FileKey {
        match &m.build_id {
            Some(b) => FileKey::BuildId(b.clone()),
            None => FileKey::Inode {
                maj: m.maj,
                min: m.min,
                ino: m.ino,
                path: m.filename.clone(),
            },
        }
    }

    /// `FileKey::of(m) == *self`, without building the key.
    fn is_of(&self, m: &Mmap2Event) -> bool {
        match (self, &m.build_id) {
            (FileKey::BuildId(k), Some(b)) => k == b,
            (
                FileKey::Inode {
                    maj,
                    min,
                    ino,
                    path,
                },
                None,
            ) => (*maj, *min, *ino) == (m.maj, m.min, m.ino) && *path == m.filename,
            _ => false,
        }
    }
}

/// What a file's lookup found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Found {
    /// The binary at this index of [`BinaryCache::binaries`].
    Binary(usize),
    /// An ELF file that cannot be profiled (too large, not valid, no GNU build id):
    /// reported once, never looked up again.
    Rejected,
    /// No candidate path held the file (none could be opened, or each held another build
    /// id than the MMAP2's): looked up again at the file's next MMAP2.
    Unreachable,
}

impl Found {
    fn binary(self) -> Option<usize> {
        match self {
            Found::Binary(i) => Some(i),
            Found::Rejected | Found::Unreachable => None,
        }
    }
}

/// Files resolved to binaries: every file ever seen, plus the last few looked up so the
/// per-sample lookup builds no key (no allocation).
#[derive(Default)]
struct BinaryCache {
    /// Every binary found, in finding order (the maps hold indices into it); a slot in
    /// `free` holds a binary let go of.
    binaries: Vec<Arc<BinaryRef>>,
    /// Per slot of `binaries`: a sample was routed to it.
    routed: Vec<bool>,
    /// Slots of `binaries` to reuse.
    free: Vec<usize>,
    /// Binaries found at an MMAP2 and not yet routed to: (slot, key, seen by one
    /// collection already).
    unrouted: Vec<(usize, FileKey, bool)>,
    files: HashMap<FileKey, Found>,
    recent: Vec<(FileKey, Option<usize>)>,
    next_recent: usize,
}

/// Entries of [`BinaryCache::recent`].
const RECENT_FILES: usize = 8;

/// The most ancestors whose roots are tried for one file.
const MAX_ANCESTORS: usize = 8;

impl BinaryCache {
    /// The binary behind mapping `m` of process `pid` under procfs `proc`, for a sample
    /// routed to it (looked up once per file, through the process's view of it or its
    /// ancestors', see [`binary_candidates`]), or `None` when it has no GNU build id or
    /// cannot be read. Returns its index for [`BinaryCache::get`].
    fn resolve(
        &mut self,
        proc: &Path,
        m: &Mmap2Event,
        pid: u32,
        table: &ProcessTable,
    ) -> Option<usize> {
        let found = match self.recent.iter().find(|(k, _)| k.is_of(m)) {
            Some(&(_, r)) => r,
            None => self.resolve_uncached(proc, m, pid, table),
        };
        if let Some(i) = found {
            self.routed[i] = true;
        }
        found
    }

    fn resolve_uncached(
        &mut self,
        proc: &Path,
        m: &Mmap2Event,
        pid: u32,
        table: &ProcessTable,
    ) -> Option<usize> {
        let key = FileKey::of(m);
        let found = match self.files.get(&key) {
            Some(&r) => r,
            None => {
                let found = self.look_up(proc, m, pid, table);
                self.files.insert(key.clone(), found);
                found
            }
        }
        .binary();
        if self.recent.len() < RECENT_FILES {
            self.recent.push((key, found));
        } else {
            self.recent[self.next_recent] = (key, found);
            self.next_recent = (self.next_recent + 1) % RECENT_FILES;
        }
        found
    }

    /// Looks up the file behind `m` (a new mapping of a sampled process) unless it is
    /// known or was rejected: a file unreachable at an earlier lookup is tried again.
    fn resolve_early(&mut self, proc: &Path, m: &Mmap2Event, table: &ProcessTable) {
        let key = FileKey::of(m);
        if matches!(
            self.files.get(&key),
            Some(Found::Binary(_) | Found::Rejected)
        ) {
            return;
        }
        let found = self.look_up(proc, m, m.pid as u32, table);
        if let Found::Binary(i) = found {
            self.unrouted.push((i, key.clone(), false));
        }
        self.forget_recent(&key);
        self.files.insert(key, found);
    }

    /// Lets go of the binaries found at an MMAP2 that no sample has reached since the
    /// call before this one: their maps are dropped and their files looked up anew
    /// when they are mapped or sampled again.
    fn let_go_of_unrouted(&mut self) {
        let mut unrouted = std::mem::take(&mut self.unrouted);
        unrouted.retain_mut(|(i, key, seen)| {
            if self.routed[*i] {
                return false;
            }
            if !*seen {
                *seen = true;
                return true;
            }
            if let Ok(mut b) = self.binaries[*i].bytes.lock() {
                b.take();
            }
            self.files.remove(key);
            self.forget_recent(key);
            self.free.push(*i);
            false
        });
        self.unrouted = unrouted;
    }

    fn forget_recent(&mut self, key: &FileKey) {
        self.recent.retain(|(k, _)| k != key);
        self.next_recent = 0;
    }

    /// Finds the file behind `m` of process `pid` and keeps its binary in a slot.
    fn look_up(&mut self, proc: &Path, m: &Mmap2Event, pid: u32, table: &ProcessTable) -> Found {
        let ancestors = table.ancestors(pid, MAX_ANCESTORS, |p| parent_in_proc(proc, p));
        match open_binary(proc, m, &ancestors) {
            Ok(b) => {
                let i = match self.free.pop() {
                    Some(i) => {
                        self.binaries[i] = b;
                        self.routed[i] = false;
                        i
                    }
                    None => {
                        self.binaries.push(b);
                        self.routed.push(false);
                        self.binaries.len() - 1
                    }
                };
                Found::Binary(i)
            }
            Err(miss) => miss,
        }
    }

    /// The binary at index `i` (from [`BinaryCache::resolve`]).
    fn get(&self, i: usize) -> &Arc<BinaryRef> {
        &self.binaries[i]
    }
}

/// The parent of `pid` by `proc/PID/stat`; 0 when it cannot be read.
fn parent_in_proc(proc: &Path, pid: u32) -> u32 {
    let Ok(stat) = std::fs::read_to_string(proc.join(pid.to_string()).join("stat")) else {
        return 0;
    };
    // `pid (comm) state ppid ...`: the name may hold spaces and parentheses.
    stat.rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse().ok())
        .unwrap_or(0)
}

/// Opens and maps the file behind `m`: the first candidate path ([`binary_candidates`],
/// with the roots of `ancestors`) that holds an ELF file with a GNU build id matching the
/// MMAP2's, if it carried one.
fn open_binary(proc: &Path, m: &Mmap2Event, ancestors: &[u32]) -> Result<Arc<BinaryRef>, Found> {
    // An executable mapping of an ELF file we cannot use is reported once per file (the
    // cache keeps the `Rejected`): logged and counted in pgo_agent_binaries_rejected_total.
    let mut rejected: Option<(&'static str, String)> = None;
    let found = binary_candidates(
        proc,
        m.pid,
        m.addr,
        m.addr.saturating_add(m.len),
        &m.filename,
        ancestors,
    )
    .into_iter()
    .find_map(|path| {
        let file = File::open(&path).ok()?;
        let len = file.metadata().ok()?.len();
        if len > MAX_ELF_BYTES {
            rejected.get_or_insert(("too_large", format!("{len} bytes, over {MAX_ELF_BYTES}")));
            return None;
        }
        let map = map_binary(&file).ok()?;
        // The notes the program headers list are at the file's start (a page or two);
        // parsing the whole ELF file reads its section headers, at its end, too.
        let id = build_id_from_program_headers(&map).unwrap_or_else(|| {
            let facts = ElfFacts::parse(&map);
            if facts.build_id.is_empty() && map.starts_with(b"\x7fELF") {
                // A parsed ELF executable always has segments: none means it did not
                // parse.
                rejected.get_or_insert(if facts.segments.is_empty() {
                    ("invalid_elf", "not a valid ELF file".into())
                } else {
                    ("no_build_id", "no GNU build id".into())
                });
            }
            facts.build_id
        });
        if id.is_empty() || m.build_id.as_ref().is_some_and(|b| *b != id) {
            return None;
        }
        Some(Arc::new(BinaryRef::new(id, m.filename.clone(), path, map)))
    });
    match (found, rejected) {
        (Some(b), _) => Ok(b),
        (None, Some((reason, what))) => {
            tracing::warn!("not profiling {}: {what}", m.filename);
            service::metrics::count_binary_rejected(reason);
            Err(Found::Rejected)
        }
        (None, None) => Err(Found::Unreachable),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::FilterConfig;
    use collector::{CommEvent, LbrEntry};

    /// The test executable itself: an ELF file with a GNU build id (the toolchain's
    /// default), mapped by fake processes at fake addresses.
    fn exe() -> String {
        std::env::current_exe()
            .unwrap()
            .to_string_lossy()
            .into_owned()
    }

    fn mmap(pid: u32, addr: u64, filename: &str) -> PerfEvent {
        PerfEvent::SideBand(SideBandEvent::Mmap2(Mmap2Event {
            pid: pid as i32,
            tid: pid as i32,
            addr,
            len: 0x10000,
            prot: 5,
            filename: filename.into(),
            ..Mmap2Event::default()
        }))
    }

    fn comm(pid: u32, name: &str) -> PerfEvent {
        PerfEvent::SideBand(SideBandEvent::Comm(CommEvent {
            pid,
            tid: pid,
            comm: name.into(),
            exec: false,
        }))
    }

    fn sample(pid: u32, ip: u64, lbr: &[(u64, u64)]) -> PerfEvent {
        PerfEvent::Sample(Sample {
            pid,
            tid: pid,
            ip,
            lbr: lbr
                .iter()
                .map(|&(from, to)| LbrEntry { from, to, flags: 0 })
                .collect(),
            count: 1,
            ..Sample::default()
        })
    }

    /// A procfs with nothing in it: facts come from the side band only.
    fn empty_proc() -> PathBuf {
        let d = std::env::temp_dir().join(format!("pgo-router-proc-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    /// A fresh directory for one test's files.
    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("pgo-router-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn fork(pid: u32, ppid: u32) -> PerfEvent {
        PerfEvent::SideBand(SideBandEvent::Fork(collector::TaskEvent {
            pid,
            ppid,
            tid: pid,
            ptid: ppid,
            time: 0,
        }))
    }

    fn exit(pid: u32) -> PerfEvent {
        PerfEvent::SideBand(SideBandEvent::Exit(collector::TaskEvent {
            pid,
            ppid: 1,
            tid: pid,
            ptid: 1,
            time: 1,
        }))
    }

    #[test]
    fn a_file_only_an_ancestor_sees_is_opened_through_its_root() {
        // A procfs where the sampled process (42) and its parent (41, exited) are gone,
        // and its grandparent (40) sees the file at /ns-only/prog in its root (a link to
        // this test's executable); the path does not exist in this namespace.
        let proc = scratch("ancestors");
        let bin = proc.join("40/root/ns-only");
        std::fs::create_dir_all(&bin).unwrap();
        std::os::unix::fs::symlink(exe(), bin.join("prog")).unwrap();
        std::fs::write(proc.join("40/stat"), "40 (a (b) c) S 1 40 40 0 -1\n").unwrap();
        let route = |with_parents: bool| {
            let mut r = Router::new(&proc, ProcessFilter::default(), RouteBy::LeadingIp, 1, None);
            let mut events = Vec::new();
            if with_parents {
                events.extend([fork(41, 40), fork(42, 41), exit(41)]);
            }
            events.extend([
                mmap(42, 0x10000, "/ns-only/prog"),
                exit(42),
                sample(42, 0x10010, &[]),
            ]);
            let groups = r.route(events, 0);
            (groups, r.stats().unresolved_binary)
        };
        let (groups, unresolved) = route(true);
        assert_eq!((groups.len(), unresolved), (1, 0));
        let b = &groups[0].1.binary;
        assert_eq!(b.opened_from, bin.join("prog"));
        assert_eq!(b.path, "/ns-only/prog");
        let bytes = b.bytes.lock().unwrap().clone().unwrap();
        assert_eq!(bytes.len() as u64, std::fs::metadata(exe()).unwrap().len());
        // Without the FORK records no ancestor is known: nothing opens the file.
        let (groups, unresolved) = route(false);
        assert_eq!((groups.len(), unresolved), (0, 1));
        assert_eq!(parent_in_proc(&proc, 40), 1);
        assert_eq!(parent_in_proc(&proc, 41), 0);
        std::fs::remove_dir_all(&proc).unwrap();
    }

    #[test]
    fn the_file_is_found_at_its_mmap_and_let_go_of_when_no_sample_reaches_it() {
        let dir = scratch("at-mmap");
        let (prog, lib) = (dir.join("prog"), dir.join("lib"));
        let name = |p: &Path| p.to_string_lossy().into_owned();
        std::os::unix::fs::symlink(exe(), &prog).unwrap();
        let filter = ProcessFilter::new(FilterConfig {
            comms: vec!["app".into()],
            ..FilterConfig::default()
        });
        let (pid, other) = (40_000_010u32, 40_000_011u32);
        let mut r = Router::new(&empty_proc(), filter, RouteBy::LeadingIp, 1, None);
        // The file is there when the MMAP2 is routed, gone at the sample (the program
        // exited, its namespace with it): the sample still goes to the binary.
        assert!(r
            .route(vec![comm(pid, "app"), mmap(pid, 0x10000, &name(&prog))], 0)
            .is_empty());
        std::fs::remove_file(&prog).unwrap();
        let groups = r.route(vec![sample(pid, 0x10010, &[])], 0);
        assert_eq!(groups.len(), 1);
        assert_eq!(r.stats().unresolved_binary, 0);
        // A process the filter excludes: its files are not looked up at its MMAP2s.
        std::os::unix::fs::symlink(exe(), &lib).unwrap();
        r.route(
            vec![comm(other, "other"), mmap(other, 0x10000, &name(&lib))],
            0,
        );
        assert_eq!(r.binaries.files.len(), 1);
        // A mapping no sample reaches: its file is let go of at the second collection.
        r.route(vec![mmap(pid, 0x50000, &name(&lib))], 0);
        assert_eq!(r.binaries.files.len(), 2);
        let unrouted = r.binaries.unrouted.last().unwrap().0;
        let lib_ref = r.binaries.get(unrouted).clone();
        r.collect_exited();
        assert!(lib_ref.bytes.lock().unwrap().is_some());
        r.collect_exited();
        assert!(lib_ref.bytes.lock().unwrap().is_none());
        assert_eq!(r.binaries.files.len(), 1);
        assert_eq!(r.binaries.free, [unrouted]);
        // The sampled binary stays; the library is found again at a sample, in the slot
        // let go of.
        let groups = r.route(
            vec![sample(pid, 0x10020, &[]), sample(pid, 0x50010, &[])],
            0,
        );
        assert_eq!(groups.len(), 1);
        assert_eq!(groups[0].1.samples.len(), 2);
        assert_eq!(r.binaries.binaries.len(), 2);
        assert!(r.binaries.free.is_empty() && r.binaries.unrouted.is_empty());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_file_unreachable_at_its_first_lookup_is_tried_again_at_its_next_mmap() {
        let dir = scratch("retry");
        let prog = dir.join("prog");
        let name = prog.to_string_lossy().into_owned();
        let (a, b) = (40_000_012u32, 40_000_013u32);
        let mut r = Router::new(
            &empty_proc(),
            ProcessFilter::default(),
            RouteBy::LeadingIp,
            1,
            None,
        );
        // Not there at the MMAP2 nor at the sample: unresolved, and not looked up again
        // for later samples.
        let groups = r.route(vec![mmap(a, 0x10000, &name), sample(a, 0x10010, &[])], 0);
        assert!(groups.is_empty());
        std::os::unix::fs::symlink(exe(), &prog).unwrap();
        assert!(r.route(vec![sample(a, 0x10010, &[])], 0).is_empty());
        assert_eq!(r.stats().unresolved_binary, 2);
        // The next MMAP2 of the file finds it, for every process mapping it.
        let groups = r.route(
            vec![
                mmap(b, 0x10000, &name),
                sample(b, 0x10010, &[]),
                sample(a, 0x10010, &[]),
            ],
            0,
        );
        assert_eq!(groups.len(), 2);
        assert_eq!(r.stats().unresolved_binary, 2);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn groups_per_binary_and_process_filters_by_comm_and_reloads() {
        let exe = exe();
        let filter = |comms: &[&str]| {
            ProcessFilter::new(FilterConfig {
                comms: comms.iter().map(|c| c.to_string()).collect(),
                ..FilterConfig::default()
            })
        };
        // Fake pids far above pid_max, so no /proc/PID view exists.
        let (a, b) = (40_000_001u32, 40_000_002u32);
        let mut r = Router::new(&empty_proc(), filter(&["app"]), RouteBy::LeadingIp, 3, None);
        let events = vec![
            comm(a, "app"),
            comm(b, "other"),
            mmap(a, 0x10000, &exe),
            mmap(b, 0x50000, &exe),
            sample(a, 0x10010, &[]),
            sample(b, 0x50010, &[]),
            sample(a, 0x90000, &[]), // no mapping there
            sample(a, 0x10020, &[]),
        ];
        let groups = r.route(events.clone(), 7);
        assert_eq!(groups.len(), 1);
        let (worker, g) = &groups[0];
        assert_eq!(*worker, worker_for(&g.binary.build_id, 3));
        assert!(!g.binary.build_id.is_empty());
        assert_eq!((g.pid, g.now_secs, g.mappings.len()), (a, 7, 1));
        assert_eq!(
            g.samples.iter().map(|s| s.ip).collect::<Vec<_>>(),
            vec![0x10010, 0x10020]
        );
        assert_eq!(
            (r.stats().samples, r.stats().filtered, r.stats().unmapped),
            (4, 1, 1)
        );

        // SIGHUP: now only `other` is sampled.
        r.reload(filter(&["other"]));
        let groups = r.route(events[4..].to_vec(), 8);
        assert_eq!(groups.len(), 1);
        assert_eq!(groups[0].1.pid, b);
        assert_eq!(groups[0].1.samples.len(), 1);
        assert_eq!(r.stats().filtered, 1 + 3);
    }

    #[test]
    fn code_less_binaries_are_skipped_and_exec_renews_the_verdict() {
        let exe = exe();
        let pid = 40_000_004u32;
        let filter = ProcessFilter::new(FilterConfig {
            comms: vec!["app".into()],
            ..FilterConfig::default()
        });
        let mut r = Router::new(&empty_proc(), filter, RouteBy::BranchStack, 1, None);
        let within = sample(pid, 0x10004, &[(0x10008, 0x10020), (0x10030, 0x10000)]);
        let groups = r.route(
            vec![comm(pid, "app"), mmap(pid, 0x10000, &exe), within.clone()],
            0,
        );
        assert_eq!(groups.len(), 1);
        // The worker found no code in it: later samples are not routed there.
        groups[0].1.binary.mark_code_less();
        assert!(r.route(vec![within.clone()], 0).is_empty());
        assert_eq!((r.stats().samples, r.stats().code_less_binary), (2, 1));
        // An exec under another name: the cached verdict is not reused.
        let exec = PerfEvent::SideBand(SideBandEvent::Comm(CommEvent {
            pid,
            tid: pid,
            comm: "other".into(),
            exec: true,
        }));
        assert!(r.route(vec![exec, within], 0).is_empty());
        assert_eq!((r.stats().filtered, r.stats().code_less_binary), (1, 1));
    }

    #[test]
    fn a_branch_stack_within_one_mapping_or_across_several() {
        let exe = exe();
        let pid = 40_000_005u32;
        let mut r = Router::new(
            &empty_proc(),
            ProcessFilter::default(),
            RouteBy::BranchStack,
            1,
            None,
        );
        let side = vec![
            mmap(pid, 0x10000, &exe),
            mmap(pid, 0x30000, "/nonexistent/lib.so"),
        ];
        r.apply_all(&side);
        // [lo, hi] in one mapping; then one address past its end (0x20000 is unmapped:
        // skipped); then a stack reaching the other file (unresolved) too.
        let groups = r.route(
            vec![
                sample(pid, 0x10004, &[(0x10008, 0x1fff0), (0x10000, 0x10004)]),
                sample(pid, 0x10004, &[(0x10008, 0x20000), (0x10000, 0x10004)]),
                sample(pid, 0x10004, &[(0x10008, 0x30010), (0x30020, 0x10004)]),
                sample(pid, 0x20004, &[(0x20008, 0x2000c)]),
            ],
            0,
        );
        assert_eq!(groups.len(), 1);
        assert_eq!(groups[0].1.samples.len(), 3);
        let s = r.stats();
        assert_eq!((s.samples, s.unresolved_binary, s.unmapped), (4, 1, 1));
    }

    #[test]
    fn a_branch_stack_goes_to_every_binary_it_touches_once() {
        let exe = exe();
        let pid = 40_000_003u32;
        let mut r = Router::new(
            &empty_proc(),
            ProcessFilter::default(),
            RouteBy::BranchStack,
            1,
            None,
        );
        // The same file mapped twice (one binary), and a file without a build id.
        let groups = r.route(
            vec![
                mmap(pid, 0x10000, &exe),
                mmap(pid, 0x30000, &exe),
                mmap(pid, 0x70000, "/nonexistent/lib.so"),
                sample(pid, 0x10004, &[(0x10008, 0x30000), (0x70010, 0x10000)]),
                sample(pid, 0x70004, &[]),
            ],
            0,
        );
        assert_eq!(groups.len(), 1);
        assert_eq!(groups[0].1.samples.len(), 1);
        // Both mappings of the file go with the group (the shard places the binary by them).
        assert_eq!(groups[0].1.mappings.len(), 2);
        let s = r.stats();
        assert_eq!(
            (s.samples, s.empty_branch_stack, s.unresolved_binary),
            (2, 1, 1)
        );
    }

    #[test]
    fn a_child_whose_records_overtake_its_fork_is_still_sampled() {
        // The failure seen live: a vfork child exec'd on one CPU while its FORK was still
        // in the other CPU's ring; the FORK, routed last, used to replace the child with a
        // copy of its (filtered-out) parent, and every later sample was filtered.
        let exe = exe();
        let (parent, child) = (40_000_006u32, 40_000_007u32);
        let filter = ProcessFilter::new(FilterConfig {
            comms: vec!["app".into()],
            ..FilterConfig::default()
        });
        let mut r = Router::new(&empty_proc(), filter, RouteBy::LeadingIp, 1, None);
        let exec = PerfEvent::SideBand(SideBandEvent::Comm(CommEvent {
            pid: child,
            tid: child,
            comm: "app".into(),
            exec: true,
        }));
        let fork = PerfEvent::SideBand(SideBandEvent::Fork(collector::TaskEvent {
            pid: child,
            ppid: parent,
            tid: child,
            ptid: parent,
            time: 0,
        }));
        let groups = r.route(
            vec![
                comm(parent, "harness"),
                mmap(parent, 0x10000, &exe),
                sample(parent, 0x10010, &[]),
                exec,
                mmap(child, 0x50000, &exe),
                sample(child, 0x50010, &[]),
                fork,
                sample(child, 0x50020, &[]),
            ],
            0,
        );
        assert_eq!(groups.len(), 1);
        assert_eq!(groups[0].1.pid, child);
        assert_eq!(groups[0].1.samples.len(), 2);
        assert_eq!((r.stats().samples, r.stats().filtered), (3, 1));
    }

    #[test]
    fn an_address_the_side_band_did_not_map_is_looked_up_in_proc_once() {
        // This process, with only a made-up mapping known: a sample in its real code
        // (this function) is placed by reading /proc/self/maps.
        let pid = std::process::id();
        let ip =
            an_address_the_side_band_did_not_map_is_looked_up_in_proc_once as fn() as usize as u64;
        let mut r = Router::new(
            Path::new("/proc"),
            ProcessFilter::default(),
            RouteBy::LeadingIp,
            1,
            None,
        );
        r.apply_all(&[mmap(pid, 0x10000, "/nonexistent/lib.so")]);
        let groups = r.route(vec![sample(pid, ip, &[]), sample(pid, 0x8, &[])], 0);
        assert_eq!(groups.len(), 1);
        assert_eq!(groups[0].1.samples.len(), 1);
        assert_eq!(
            std::fs::canonicalize(&groups[0].1.binary.path).unwrap(),
            std::env::current_exe().unwrap().canonicalize().unwrap()
        );
        assert!(r.table().get(pid).unwrap().rescanned);
        // The second address is in no mapping at all: counted, and /proc is not read
        // again for this image.
        assert_eq!(r.stats().unmapped, 1);
    }

    #[test]
    fn reading_the_maps_fills_gaps_and_keeps_what_the_side_band_said() {
        // This process, with its own code's page reported by a made-up MMAP2: a sample in
        // libc (unknown to the side band) reads /proc/self/maps, which adds libc and
        // leaves the reported mapping alone (its binary is not looked up again under
        // another key).
        let pid = std::process::id();
        let own =
            reading_the_maps_fills_gaps_and_keeps_what_the_side_band_said as fn() as usize as u64;
        let page = own & !0xfff;
        let in_libc = libc::getpid as unsafe extern "C" fn() -> libc::pid_t as usize as u64;
        let mut r = Router::new(
            Path::new("/proc"),
            ProcessFilter::default(),
            RouteBy::LeadingIp,
            1,
            None,
        );
        r.apply_all(&[PerfEvent::SideBand(SideBandEvent::Mmap2(Mmap2Event {
            pid: pid as i32,
            tid: pid as i32,
            addr: page,
            len: 0x1000,
            prot: 5,
            filename: "/side-band/name".into(),
            ..Mmap2Event::default()
        }))]);
        r.route(vec![sample(pid, in_libc, &[])], 0);
        let p = r.table().get(pid).unwrap();
        assert!(p.rescanned);
        assert_eq!(p.mapping_at(own).unwrap().filename, "/side-band/name");
        assert!(
            p.mapping_at(in_libc).unwrap().filename.contains("libc"),
            "{:?}",
            p.mapping_at(in_libc)
        );
    }
}
