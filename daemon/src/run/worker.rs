//! [`Worker`]: owns the aggregates of the binaries whose build ids hash to it (a
//! [`BinaryShard`] each, no lock), loads each binary once, and writes every aggregate to
//! the state directory at each flush (temp file + rename).

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use collector::live::SampleRecycler;
use collector::BuildId;
use exporter::format::unsymbolized::{line_context_name, write_unsymbolized};
use service::store::NamesReport;
use symbolizer::debug_file::DebugFileFinder;
use symbolizer::generate::GenerateOptions;
use symbolizer::{LazyCode, LoadOptions, ProfiledBinary, SharedBytes};
use unwinder::shard::{BinaryShard, ShardInput, ShardStats};
use unwinder::window::WindowSettings;
use unwinder::{CounterKind, CounterSet, UnwindOptions};

use super::debug_fetches::{BackgroundFetches, FETCHING};
use super::persist::{self, PersistedState, StateHeader};
use super::router::SampleGroup;
use crate::atomic_file::write_atomic;
use crate::error_chain::ErrorChain;

/// What a worker is told to do.
#[derive(Debug)]
pub enum WorkItem {
    /// Aggregate these samples.
    Samples(SampleGroup),
    /// Write every aggregate that changed.
    Flush {
        /// Daemon time in seconds.
        now_secs: u64,
    },
}

/// How workers aggregate (shared by all workers).
#[derive(Clone, Debug)]
pub struct WorkerSettings {
    /// What the samples carry.
    pub input: ShardInput,
    /// Unwinder options.
    pub options: UnwindOptions,
    /// Windows.
    pub windows: WindowSettings,
    /// Per-binary sample budget per window.
    pub max_samples_per_window: u64,
    /// This worker's share of the memory budget.
    pub memory_budget_bytes: u64,
    /// This worker's share of `decoded_budget_bytes`: what its binaries may hold in code,
    /// probes and line tables decoded on demand ([`Worker::enforce_decoded_budget`]).
    pub decoded_budget_bytes: u64,
    /// Where aggregates are written.
    pub state_dir: PathBuf,
    /// Consecutive groups of the same binary and process (same mappings, same window) are
    /// held and fed to the shard together, up to this many samples (1: no coalescing).
    /// Fewer, larger feeds: the aggregator's per-feed cost is paid once, and identical
    /// samples across groups are unwound once (llvm-profgen aggregates identical samples
    /// before unwinding). Costs about 1 KiB per held LBR sample.
    pub coalesce_samples: usize,
    /// Finds the debug files of binaries that lack symbols or DWARF.
    pub debug_files: DebugFileFinder,
    /// The debuginfod fetches `debug_files` starts in the background (`None`: no
    /// debuginfod server): a binary whose debug file is being fetched is loaded without it
    /// and loaded again once the fetch is over (`Worker::settle_debug_fetches`).
    pub debug_fetches: Option<Arc<BackgroundFetches>>,
}

/// The daemon's [`WorkerSettings::coalesce_samples`]: 512 LBR samples (a reader's batch),
/// about 512 KiB. Larger groups dedup more but cost more: the samples a worker holds are
/// not handed back to the readers until fed, so the readers parse into samples gone cold
/// and the worker reads them from L3 (with 4096, parse and route ran at 2.4 and 3.5 M
/// samples/s instead of 5–6 and 6–7 M, and the live bench at 0.86 instead of 1.2 M
/// samples/s/core: `bench/live_pipeline.md`).
pub const COALESCE_SAMPLES: usize = 512;

impl WorkerSettings {
    /// Settings without sample or memory budgets: default unwinder options and windows,
    /// the daemon's coalescing, aggregates written under `state_dir` (replays, benches).
    pub fn unlimited(input: ShardInput, state_dir: PathBuf) -> WorkerSettings {
        WorkerSettings {
            input,
            options: UnwindOptions::default(),
            windows: WindowSettings::default(),
            max_samples_per_window: u64::MAX,
            memory_budget_bytes: u64::MAX,
            decoded_budget_bytes: u64::MAX,
            state_dir,
            coalesce_samples: COALESCE_SAMPLES,
            debug_files: DebugFileFinder::default(),
            debug_fetches: None,
        }
    }
}

/// One binary's aggregate as last written.
#[derive(Clone, Debug, serde::Serialize)]
pub struct BinarySummary {
    /// Build id, hex.
    pub build_id: String,
    /// Mapped path.
    pub path: String,
    /// Counter kind (`flat`, `probe_context`, `line_context`).
    pub kind: &'static str,
    /// Samples in the retained windows.
    pub samples: u64,
    /// Samples offered / counted / refused.
    pub offered: u64,
    /// Samples counted.
    pub counted: u64,
    /// Samples refused by the per-binary budget.
    pub over_budget: u64,
    /// The unsymbolized profile file.
    pub profile: PathBuf,
    /// Samples the unwinder could not use fully, by reason (since the daemon started);
    /// the HTTP store reads it for `pgo_agent_unwind_errors_total`.
    pub unwind_errors: std::collections::BTreeMap<&'static str, u64>,
    /// Samples taken in a prologue or epilogue, by repair outcome (`repaired`,
    /// `unrepairable`), since the daemon started: `pgo_agent_stack_repairs_total`.
    pub stack_repairs: std::collections::BTreeMap<&'static str, u64>,
    /// Where the names of the binary's code came from when the worker loaded it.
    pub names: NamesReport,
    /// Whether the binary has a `.pseudo_probe` section.
    pub has_pseudo_probes: bool,
    /// Seconds from the first to the latest samples fed since the daemon started (with
    /// `counted`, the rate the binary is sampled at: the store's density guidance).
    pub sampled_secs: u64,
}

/// How the workers load binaries: from the file's memory map, code decoded a function at
/// a time as samples reach it, line tables read per unit on first use, probes per
/// function (memory grows with the code samples touch, not with the file), the pages
/// read given back, and the work one sample's range checks can cost bounded.
const LOAD_OPTIONS: LoadOptions = LoadOptions {
    load_functions_from_symbols: false,
    symbol_functions_without_dwarf: false,
    use_dwarf_correlation: false,
    release_decoded_pages: true,
    lazy_code: true,
    bounded_range_checks: true,
    // `<binary>.dwp`, else the `.dwo` files the binary names.
    split_dwarf: symbolizer::dwarf::SplitDwarf { dwp: None },
};

struct Entry {
    binary: Arc<ProfiledBinary>,
    names: NamesReport,
    shard: BinaryShard,
    path: String,
    dirty: bool,
    /// Daemon times (seconds) of the first and the latest samples fed since start.
    fed_secs: Option<(u64, u64)>,
    /// The file's bytes (the map the binary holds, shared): what it is loaded again from.
    source: SharedBytes,
    /// The worker's feed count when its samples were last fed (least recently sampled
    /// binaries give their decoded code back first).
    last_fed: u64,
}

/// Why a binary is loaded again ([`Worker::reload`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Reload {
    /// Its debuginfod fetch is over.
    DebugFetchOver,
    /// Its decoded code is given back (`decoded_budget_bytes`).
    DecodedBudget,
}

/// Counters of a worker.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct WorkerStats {
    /// Binaries that could not be loaded.
    pub load_failures: u64,
    /// Samples dropped because the memory budget was exhausted.
    pub over_memory: u64,
    /// Samples of binaries that failed to load.
    pub unloadable_samples: u64,
    /// Flush write failures.
    pub write_failures: u64,
    /// Binaries whose windows were restored from state files at start.
    pub restored_binaries: u64,
    /// Contexts evicted (coldest first) to stay within the memory budget.
    pub evicted_contexts: u64,
    /// Binaries evicted (all their contexts, or a restored aggregate not sampled since).
    pub evicted_binaries: u64,
    /// Binaries that gave their decoded code back to stay within `decoded_budget_bytes`.
    pub evicted_decoded: u64,
    /// Aggregates the worker's last flush could not write (a write error; when the worker
    /// stops, what they counted since their last written flush is lost).
    pub unwritten_by_last_flush: u64,
}

/// Default [`Worker::set_max_binary_bytes`]: 1 GiB (the router reads no larger file).
pub const DEFAULT_MAX_BINARY_BYTES: u64 = 1 << 30;

/// Samples fed between two memory budget checks (each check walks every context).
pub const BUDGET_CHECK_SAMPLES: u64 = 4096;

/// The counters are held to this fraction (1/N) of `memory_budget_bytes`, which bounds the
/// daemon's whole RSS: a flush briefly holds more copies of a binary's counters (the merged
/// windows, the rendered profile's context map and strings), the size estimate is
/// approximate, and the rest of the daemon (rings, queues, loaded binaries, allocator
/// slack) needs room too. tests/tests/e2e/host/service.rs checks the bound; bench/README.md ("Memory
/// budget") gives the peak RSS it measures for several shares.
pub const COUNTER_SHARE_OF_BUDGET: u64 = 16;

/// For a `memory_budget_bytes`, the counters' share (above it, the coldest contexts are
/// evicted) and what eviction brings them down to (a tenth below, so that the next
/// samples do not evict again at once).
pub fn counter_budget(memory_budget_bytes: u64) -> (u64, u64) {
    let share = memory_budget_bytes / COUNTER_SHARE_OF_BUDGET;
    (share, share - share / 10)
}

/// A restored aggregate whose binary could not be loaded yet (it is merged into the
/// binary's shard when its samples arrive); its windows still expire at each flush.
struct Restored {
    state: PersistedState,
    windows: unwinder::window::WindowedCounters,
}

/// See the module docs.
pub struct Worker {
    settings: WorkerSettings,
    entries: HashMap<BuildId, Entry>,
    pending: HashMap<BuildId, SampleGroup>,
    failed: HashSet<BuildId>,
    approx_bytes: u64,
    stats: WorkerStats,
    restored: HashMap<BuildId, Restored>,
    fed_since_budget_check: u64,
    sink: Option<crate::sink::SinkHandle>,
    sink_sent: HashMap<BuildId, Option<u64>>,
    max_binary_bytes: u64,
    /// Where fed samples go back to the readers (see [`Worker::with_recycler`]).
    recycler: Option<SampleRecycler>,
    /// Binaries loaded while their debug files were being fetched.
    awaiting: HashSet<BuildId>,
    /// Groups fed so far (the clock of [`Entry::last_fed`]).
    feeds: u64,
}

/// True when the lookup behind `names` left the debug file to a background fetch (it
/// answered [`FETCHING`]): the binary is loaded again once the fetch is over, whenever that
/// was (it may be over before the load is).
fn awaits_debug_file(names: &NamesReport) -> bool {
    names.tried.iter().any(|t| t.ends_with(FETCHING))
}

/// Logs that the binary at `path` is counted by address: no symbols, no debug file found.
fn warn_address_only(path: &str, id: &BuildId, names: &NamesReport) {
    tracing::warn!(
        "{path} ({id}) has no symbols and no debug file was found: counted by address, \
         served unsymbolized (tried: {})",
        names.tried.join("; ")
    );
}

fn kind_name(kind: CounterKind) -> &'static str {
    match kind {
        CounterKind::Flat => "flat",
        CounterKind::ProbeContext => "probe_context",
        CounterKind::LineContext => "line_context",
    }
}

impl Worker {
    /// A worker with no binaries yet.
    pub fn new(settings: WorkerSettings) -> Worker {
        Worker {
            settings,
            entries: HashMap::new(),
            pending: HashMap::new(),
            failed: HashSet::new(),
            approx_bytes: 0,
            stats: WorkerStats::default(),
            restored: HashMap::new(),
            fed_since_budget_check: 0,
            sink: None,
            sink_sent: HashMap::new(),
            max_binary_bytes: DEFAULT_MAX_BINARY_BYTES,
            recycler: None,
            awaiting: HashSet::new(),
            feeds: 0,
        }
    }

    /// Hands every sample back to `recycler` once fed (the readers parse new records into
    /// them: no allocation per sample).
    pub fn with_recycler(mut self, recycler: SampleRecycler) -> Worker {
        self.recycler = Some(recycler);
        self
    }

    /// Binaries larger than `bytes` are not loaded: marked failed, their samples dropped,
    /// counted in `pgo_agent_binaries_rejected_total{reason="too_large"}`.
    pub fn set_max_binary_bytes(&mut self, bytes: u64) {
        self.max_binary_bytes = bytes;
    }

    /// Hands each closed window to `sink` (at every flush; see [`Worker::hand_windows`]).
    pub fn with_sink(mut self, sink: crate::sink::SinkHandle) -> Worker {
        self.sink = Some(sink);
        self
    }

    /// Hands the windows closed by `now_secs` (all with `all`: shutdown) that were not
    /// handed yet to the sink, if any. Never blocks (a full sink queue drops, counted).
    pub fn hand_windows(&mut self, now_secs: u64, all: bool) {
        let Some(sink) = &self.sink else { return };
        for (id, e) in &mut self.entries {
            e.shard.settle();
            crate::sink::hand_closed_windows(
                sink,
                id,
                e.binary.preferred_base(),
                e.shard.windows(),
                self.settings.windows.window_secs,
                now_secs,
                all,
                self.sink_sent.entry(id.clone()).or_default(),
            );
        }
    }

    /// The statistics.
    pub fn stats(&self) -> &WorkerStats {
        &self.stats
    }

    /// The merged counters of `build_id` (all retained windows), held samples included.
    pub fn counters(&mut self, build_id: &BuildId) -> Option<CounterSet> {
        self.feed_pending_of(build_id);
        self.entries.get(build_id).map(|e| e.shard.snapshot().0)
    }

    /// Feeds every held group to its shard, and settles every shard: the windows then
    /// hold every sample the worker was handed.
    pub fn feed_pending(&mut self) {
        let held: Vec<SampleGroup> = self.pending.drain().map(|(_, g)| g).collect();
        for g in held {
            self.feed_now(g);
        }
        for e in self.entries.values_mut() {
            e.shard.settle();
        }
    }

    /// [`Worker::feed_pending`] for the binary of `build_id` alone.
    fn feed_pending_of(&mut self, build_id: &BuildId) {
        if let Some(g) = self.pending.remove(build_id) {
            self.feed_now(g);
        }
        if let Some(e) = self.entries.get_mut(build_id) {
            e.shard.settle();
        }
    }

    /// The loaded binary of `build_id`.
    pub fn binary(&self, build_id: &BuildId) -> Option<&ProfiledBinary> {
        self.entries.get(build_id).map(|e| &*e.binary)
    }

    /// The on-demand code of the binary of `build_id`.
    pub fn lazy_code(&self, build_id: &BuildId) -> Option<&LazyCode> {
        self.entries
            .get(build_id)
            .and_then(|e| e.binary.lazy_code())
    }

    /// Handles one item; flush errors are counted and reported on stderr.
    pub fn handle(&mut self, item: WorkItem) {
        match item {
            WorkItem::Samples(g) => self.feed(g),
            WorkItem::Flush { now_secs } => {
                self.feed_pending();
                self.settle_debug_fetches(None);
                let started = std::time::Instant::now();
                if let Err(e) = self.flush(now_secs) {
                    self.stats.write_failures += 1;
                    service::metrics::count_flush_failure();
                    tracing::error!("flush failed: {chain}", chain = ErrorChain(e.as_ref()));
                }
                service::metrics::observe_flush(started.elapsed());
            }
        }
    }

    /// Holds `g` with the held group of its binary when they can be fed together (same
    /// process mappings, same window, room for both in the held group's
    /// `coalesce_samples`), else feeds the held group and holds `g`; feeds when the held
    /// group reaches `coalesce_samples`.
    fn feed(&mut self, g: SampleGroup) {
        let window = self.settings.windows.window_secs.max(1);
        let id = &g.binary.build_id;
        let mut g = match self.pending.remove(id) {
            // Merged while the held group has room: growing a group copies every sample
            // in it (over a hundred bytes each), so a group is held with room for a
            // coalesced feed, and fed rather than grown.
            Some(mut held)
                if held.pid == g.pid
                    && held.now_secs / window == g.now_secs / window
                    && held.mappings == g.mappings
                    && held.samples.len() + g.samples.len() <= held.samples.capacity() =>
            {
                if !Arc::ptr_eq(&held.binary, &g.binary) {
                    if let Ok(mut b) = g.binary.bytes.lock() {
                        b.take();
                    }
                }
                held.samples.extend(g.samples);
                held
            }
            Some(held) => {
                self.feed_now(held);
                g
            }
            None => g,
        };
        if g.samples.len() >= self.settings.coalesce_samples {
            self.feed_now(g);
        } else {
            let room = self.settings.coalesce_samples - g.samples.len();
            g.samples.reserve_exact(room);
            self.pending.insert(g.binary.build_id.clone(), g);
        }
    }

    fn feed_now(&mut self, mut g: SampleGroup) {
        self.feed_group(&g);
        if let Some(r) = &self.recycler {
            r.give(&mut g.samples);
        }
    }

    fn feed_group(&mut self, g: &SampleGroup) {
        let id = g.binary.build_id.clone();
        if self.failed.contains(&id) {
            self.stats.unloadable_samples += g.samples.len() as u64;
            return;
        }
        if self.awaiting.contains(&id) {
            self.settle_debug_fetches(Some(&id));
        }
        if !self.entries.contains_key(&id) {
            match self.load(g) {
                Ok(mut e) => {
                    if awaits_debug_file(&e.names) {
                        self.awaiting.insert(id.clone());
                    }
                    if let Some(r) = self.restored.remove(&id) {
                        let windows = r.windows.windows().cloned().collect();
                        self.merge_restored(&id, &mut e, windows);
                    }
                    self.entries.insert(id.clone(), e);
                }
                Err(err) => {
                    tracing::warn!(
                        "not profiling {} ({id}): {chain}",
                        g.binary.path,
                        chain = ErrorChain(err.as_ref())
                    );
                    service::metrics::count_binary_rejected(rejection_reason(&err));
                    self.failed.insert(id);
                    self.stats.load_failures += 1;
                    self.stats.unloadable_samples += g.samples.len() as u64;
                    return;
                }
            }
        } else if let Ok(mut b) = g.binary.bytes.lock() {
            b.take();
        }
        let entry = self.entries.get_mut(&id).expect("inserted above");
        let code_less = !entry.binary.has_code();
        if code_less {
            // Nothing in it can ever be counted: the router stops sending its samples
            // here (this group is still fed, for its statistics).
            g.binary.mark_code_less();
        }
        if entry
            .shard
            .feed(&g.mappings, &g.samples, g.now_secs)
            .is_ok()
        {
            entry.dirty = true;
        }
        let first = entry.fed_secs.map_or(g.now_secs, |(first, _)| first);
        entry.fed_secs = Some((first, g.now_secs));
        self.feeds += 1;
        entry.last_fed = self.feeds;
        self.fed_since_budget_check += g.samples.len() as u64;
        if self.fed_since_budget_check >= BUDGET_CHECK_SAMPLES {
            self.enforce_memory_budget();
            self.enforce_decoded_budget();
        }
    }

    /// Takes the aggregates restored from the state directory (the ones whose build ids
    /// this worker owns). A binary still at its recorded path (same build id) is loaded
    /// now; the others wait for their samples. Windows keep their start times and expire
    /// normally; a restored current window counts against the per-binary sample budget.
    /// Returns the samples restored.
    pub fn restore(&mut self, states: Vec<PersistedState>, now_secs: u64) -> u64 {
        let mut samples = 0;
        for state in states {
            samples += state.samples();
            self.stats.restored_binaries += 1;
            let id = state.build_id.clone();
            match self.load_path(&state) {
                Ok(mut e) => {
                    if awaits_debug_file(&e.names) {
                        self.awaiting.insert(id.clone());
                    }
                    self.merge_restored(&id, &mut e, state.windows);
                    e.shard.expire(now_secs);
                    self.entries.insert(id, e);
                }
                Err(err) => {
                    tracing::warn!(
                        "restored {id} ({}) waits for its samples: {chain}",
                        state.path,
                        chain = ErrorChain(err.as_ref()),
                    );
                    let mut windows =
                        unwinder::window::WindowedCounters::new(state.kind, self.settings.windows);
                    for w in state.windows.iter().cloned() {
                        windows.restore(self.align(w));
                    }
                    windows.expire(now_secs);
                    self.restored.insert(id, Restored { state, windows });
                }
            }
        }
        self.enforce_memory_budget();
        samples
    }

    fn align(&self, mut w: unwinder::window::Window) -> unwinder::window::Window {
        w.start_secs -= w.start_secs % self.settings.windows.window_secs.max(1);
        w
    }

    fn merge_restored(&self, id: &BuildId, e: &mut Entry, windows: Vec<unwinder::window::Window>) {
        if let Some(w) = windows
            .first()
            .filter(|w| w.counters.kind != e.shard.kind())
        {
            tracing::warn!(
                "restored {id}: counters of kind {} do not match {}; not merged",
                kind_name(w.counters.kind),
                kind_name(e.shard.kind())
            );
            return;
        }
        for w in windows {
            e.shard.windows_mut().restore(self.align(w));
        }
        e.dirty = true;
    }

    /// Loads the binary a restored state names, if it is still there with the same id.
    fn load_path(&self, state: &PersistedState) -> anyhow::Result<Entry> {
        let path = Path::new(&state.path);
        let meta = std::fs::metadata(path).with_context(|| format!("{}", path.display()))?;
        anyhow::ensure!(meta.len() <= 4 << 30, "{} is too large", path.display());
        let file = std::fs::File::open(path).with_context(|| format!("{}", path.display()))?;
        let bytes = super::router::map_binary(&file)
            .with_context(|| format!("mapping {}", path.display()))?;
        let source: SharedBytes = Arc::new(bytes);
        let (binary, lookup, _) = ProfiledBinary::from_shared_bytes_with_lookup(
            path,
            source.clone(),
            &self.settings.debug_files,
            &LOAD_OPTIONS,
        )
        .with_context(|| format!("loading {}", path.display()))?;
        anyhow::ensure!(
            binary.build_id() == Some(&state.build_id),
            "{} now has another build id",
            path.display()
        );
        let names = NamesReport::of(&binary, lookup.as_ref());
        self.entry_for(Arc::new(binary), names, state.path.clone(), source)
    }

    /// The bytes the shards (counters and held samples) and restored aggregates hold.
    fn counter_bytes(&self) -> u64 {
        self.entries
            .values()
            .map(|e| e.shard.approx_bytes() as u64)
            .chain(
                self.restored
                    .values()
                    .map(|r| r.windows.approx_bytes() as u64),
            )
            .sum()
    }

    /// Keeps the counters within the worker's memory budget: past it, every shard counts
    /// its held samples and, if that is not enough, the coldest contexts (fewest counts
    /// over the retained windows) of all binaries are evicted until the counters are back
    /// under 90% of it; restored aggregates not sampled since the start go first, and a
    /// binary left with no context is dropped. Their last flushed files stay in the state
    /// directory. Counted in `pgo_agent_memory_evictions_total`.
    pub fn enforce_memory_budget(&mut self) {
        self.fed_since_budget_check = 0;
        let (budget, target) = counter_budget(self.settings.memory_budget_bytes);
        let mut total = self.counter_bytes();
        self.approx_bytes = total;
        if total <= budget {
            return;
        }
        // Eviction ranks every context held: the unsettled ones too. Settling counts the
        // held samples, whose bytes are then freed.
        for e in self.entries.values_mut() {
            e.shard.settle();
        }
        total = self.counter_bytes();
        self.approx_bytes = total;
        if total <= budget {
            return;
        }
        let mut restored: Vec<(u64, BuildId)> = self
            .restored
            .iter()
            .map(|(id, r)| (r.windows.merged().1, id.clone()))
            .collect();
        restored.sort();
        let mut binaries = 0u64;
        for (_, id) in restored {
            if total <= target {
                break;
            }
            if let Some(r) = self.restored.remove(&id) {
                total = total.saturating_sub(r.windows.approx_bytes() as u64);
                binaries += 1;
            }
        }
        let mut contexts = 0u64;
        if total > target {
            let mut heat: Vec<(u64, usize, &BuildId, &unwinder::ContextKey)> = Vec::new();
            for (id, e) in &self.entries {
                for (k, (n, bytes)) in e.shard.windows().context_heat() {
                    heat.push((n, bytes, id, k));
                }
            }
            heat.sort_unstable_by_key(|h| h.0);
            let mut cold: HashMap<BuildId, HashSet<unwinder::ContextKey>> = HashMap::new();
            for (_, bytes, id, key) in heat {
                if total <= target {
                    break;
                }
                total = total.saturating_sub(bytes as u64);
                cold.entry(id.clone()).or_default().insert(key.clone());
            }
            for (id, keys) in cold {
                let Some(e) = self.entries.get_mut(&id) else {
                    continue;
                };
                contexts += e.shard.windows_mut().evict_contexts(&keys) as u64;
                e.dirty = true;
                if e.shard.approx_bytes() == 0 {
                    self.entries.remove(&id);
                    binaries += 1;
                }
            }
        }
        self.approx_bytes = total;
        self.stats.evicted_contexts += contexts;
        self.stats.evicted_binaries += binaries;
        tracing::warn!(
            "memory budget: evicted {contexts} coldest contexts and {binaries} binaries; counters now ~{} KiB of {} KiB (totals: {} contexts, {} binaries)",
            total >> 10,
            budget >> 10,
            self.stats.evicted_contexts,
            self.stats.evicted_binaries
        );
        service::metrics::count_evictions("context", contexts);
        service::metrics::count_evictions("binary", binaries);
        // Give the freed counters back to the kernel, or RSS stays at its peak.
        collector::freed_memory::give_back_freed_memory();
    }

    fn load(&self, g: &SampleGroup) -> anyhow::Result<Entry> {
        let taken = g.binary.bytes.lock().ok().and_then(|mut b| b.take());
        let bytes = match taken {
            Some(bytes) => bytes,
            // Its map went with the aggregate the memory budget evicted (or with a
            // duplicate's): mapped again from where it was opened.
            None => Arc::new(map_again(&g.binary)?),
        };
        if bytes.len() as u64 > self.max_binary_bytes {
            return Err(symbolizer::SymbolizerError::TooLarge {
                path: g.binary.opened_from.clone(),
                what: "binary size (aggregation.max_binary_bytes)",
                size: bytes.len() as u64,
                max: self.max_binary_bytes,
            }
            .into());
        }
        // Named by the mapped path: `.gnu_debuglink` candidates are beside it. The binary
        // keeps the map (shared, not copied) and decodes the functions samples reach.
        let source = bytes.clone();
        let (binary, lookup, _) = ProfiledBinary::from_shared_bytes_with_lookup(
            Path::new(&g.binary.path),
            bytes,
            &self.settings.debug_files,
            &LOAD_OPTIONS,
        )
        .with_context(|| format!("loading {}", g.binary.opened_from.display()))?;
        if binary.build_id() != Some(&g.binary.build_id) {
            anyhow::bail!(
                "{} is now another build than the one sampled ({})",
                g.binary.opened_from.display(),
                g.binary.build_id
            );
        }
        let names = NamesReport::of(&binary, lookup.as_ref());
        if awaits_debug_file(&names) {
            tracing::info!(
                "{} ({}): its debug file is being fetched from debuginfod; counted by \
                 address until it arrives",
                g.binary.path,
                g.binary.build_id
            );
        } else if !binary.name_source().has_names() {
            warn_address_only(&g.binary.path, &g.binary.build_id, &names);
        }
        // Loading frees as much as it keeps (section copies, the decoder's scratch): give
        // it back to the kernel, or RSS stays at the load's peak.
        collector::freed_memory::give_back_freed_memory();
        self.entry_for(Arc::new(binary), names, g.binary.path.clone(), source)
    }

    /// Loads again, with their debug files, the binaries whose debuginfod fetches are over
    /// (all of them, or `only` that one): the counters so far move into the new aggregate,
    /// which counts with the debug file's names from then on, and the names report says
    /// where they come from. A fetch that found nothing updates the report only.
    pub fn settle_debug_fetches(&mut self, only: Option<&BuildId>) {
        let Some(fetches) = self.settings.debug_fetches.clone() else {
            return;
        };
        let settled: Vec<BuildId> = match only {
            Some(id) => vec![id.clone()],
            None => self.awaiting.iter().cloned().collect(),
        };
        for id in settled {
            if !fetches.in_flight(&id) && self.awaiting.remove(&id) {
                self.reload(&id, Reload::DebugFetchOver);
            }
        }
    }

    /// Keeps what the binaries decoded on demand within this worker's share of
    /// `decoded_budget_bytes`: past it, the least recently sampled binaries are loaded
    /// again from their bytes, which gives back everything they decoded (their counters
    /// stay), until the rest fits. The binary sampled last is kept whatever it holds.
    /// Counted in `pgo_agent_memory_evictions_total{what="decoded"}`.
    pub fn enforce_decoded_budget(&mut self) {
        let budget = self.settings.decoded_budget_bytes;
        // What the whole process holds bounds this worker's share: no binary to walk
        // while that is within the budget.
        if symbolizer::decoded_bytes().total() <= budget {
            return;
        }
        let mut held: Vec<(u64, u64, BuildId)> = self
            .entries
            .iter()
            .map(|(id, e)| (e.last_fed, e.binary.decoded_bytes().total(), id.clone()))
            .collect();
        let mut total: u64 = held.iter().map(|h| h.1).sum();
        if total <= budget {
            return;
        }
        held.sort_unstable();
        held.pop(); // the binary sampled last
        let mut evicted = 0u64;
        for (_, bytes, id) in held {
            if total <= budget {
                break;
            }
            if bytes > 0 && self.reload(&id, Reload::DecodedBudget) {
                total = total.saturating_sub(bytes);
                evicted += 1;
            }
        }
        self.stats.evicted_decoded += evicted;
        service::metrics::count_evictions("decoded", evicted);
        tracing::debug!(
            "decoded budget: {evicted} binaries gave their decoded code back; ~{} KiB of {} KiB held",
            total >> 10,
            budget >> 10
        );
    }

    /// Loads the binary of entry `id` again from its bytes, with the debug file the lookup
    /// finds now; the new aggregate takes over the counters and statistics. After a
    /// debuginfod fetch that found nothing, only the names report changes. Returns whether
    /// the entry was replaced.
    fn reload(&mut self, id: &BuildId, why: Reload) -> bool {
        let Some(old) = self.entries.get(id) else {
            return false; // evicted meanwhile
        };
        let (path, source, old_names) = (old.path.clone(), old.source.clone(), old.names.clone());
        let with_lookup = || {
            ProfiledBinary::from_shared_bytes_with_lookup(
                Path::new(&path),
                source.clone(),
                &self.settings.debug_files,
                &LOAD_OPTIONS,
            )
            .map(|(binary, lookup, _)| (binary, lookup))
        };
        let loaded = match why {
            Reload::DebugFetchOver => with_lookup(),
            // The same files as before, without a lookup (no candidate checked, no CRC
            // read); a lookup only if the debug file is gone (evicted from a cache).
            Reload::DecodedBudget => {
                let debug = old_names.debug_file.as_ref().map(PathBuf::from);
                ProfiledBinary::from_shared_bytes_with_debug_file(
                    Path::new(&path),
                    source.clone(),
                    debug.as_deref(),
                    &LOAD_OPTIONS,
                )
                .map(|(binary, _)| (binary, None))
                .or_else(|_| with_lookup())
            }
        };
        let (binary, lookup) = match loaded {
            Ok(loaded) => loaded,
            Err(e) => {
                tracing::warn!("{path} ({id}): loading it again failed: {e}");
                return false;
            }
        };
        if why == Reload::DebugFetchOver && lookup.as_ref().is_none_or(|l| l.found.is_none()) {
            // Still without names: the report says what the fetch found.
            if let Some(old) = self.entries.get_mut(id) {
                old.names = NamesReport::of(&old.binary, lookup.as_ref());
                old.dirty = true;
                if !old.binary.name_source().has_names() {
                    warn_address_only(&path, id, &old.names);
                }
            }
            return false;
        }
        let names = match (why, &lookup) {
            (Reload::DecodedBudget, None) => old_names,
            _ => NamesReport::of(&binary, lookup.as_ref()),
        };
        let mut fresh = match self.entry_for(Arc::new(binary), names, path.clone(), source) {
            Ok(fresh) => fresh,
            Err(e) => {
                tracing::warn!("{path} ({id}): loading it again failed: {e:#}");
                return false;
            }
        };
        let Some(mut old) = self.entries.remove(id) else {
            return false;
        };
        match fresh.shard.adopt(old.shard) {
            Ok(()) => {
                if why == Reload::DebugFetchOver {
                    tracing::info!(
                        "{path} ({id}): its debug file arrived ({}); counted with its names",
                        fresh.names.debug_file.as_deref().unwrap_or("?")
                    );
                }
                fresh.dirty = true;
                fresh.fed_secs = old.fed_secs;
                fresh.last_fed = old.last_fed;
                self.entries.insert(id.clone(), fresh);
                true
            }
            Err(shard) => {
                tracing::warn!(
                    "{path} ({id}): loaded again it would count {} counters, not {}; kept as it is",
                    kind_name(fresh.shard.kind()),
                    kind_name(shard.kind())
                );
                old.shard = *shard;
                self.entries.insert(id.clone(), old);
                false
            }
        }
    }

    fn entry_for(
        &self,
        binary: Arc<ProfiledBinary>,
        names: NamesReport,
        path: String,
        source: SharedBytes,
    ) -> anyhow::Result<Entry> {
        let layout: Arc<dyn unwinder::CodeLayout + Send + Sync> = binary.clone();
        let shard = BinaryShard::new(
            layout,
            binary.load_info(),
            self.settings.input,
            self.settings.options.clone(),
            self.settings.windows,
            Some(self.settings.max_samples_per_window),
        )?;
        Ok(Entry {
            binary,
            names,
            shard,
            path,
            dirty: false,
            fed_secs: None,
            source,
            last_fed: 0,
        })
    }

    /// Writes every changed aggregate: `<build-id>.state` (the windows, restored at
    /// start; see [`persist`]), `<build-id>.unsymbolized` and `<build-id>.json`. A failed
    /// write (disk full) leaves the previous files intact and the aggregate in memory, to
    /// be written at the next flush.
    pub fn flush(&mut self, now_secs: u64) -> anyhow::Result<()> {
        let mut first_err = None;
        let mut unwritten = 0;
        self.hand_windows(now_secs, false);
        let mode = persist::mode_label(self.settings.input);
        let window_secs = self.settings.windows.window_secs;
        for (id, e) in self.entries.iter_mut() {
            let before = e.shard.windows().windows().count();
            e.shard.expire(now_secs);
            if e.shard.windows().windows().count() != before {
                e.dirty = true;
            }
            if !e.dirty {
                continue;
            }
            match write_entry(&self.settings.state_dir, id, e, mode, window_secs) {
                Ok(()) => e.dirty = false,
                Err(err) => {
                    unwritten += 1;
                    first_err.get_or_insert(err);
                }
            }
        }
        let dir = self.settings.state_dir.clone();
        self.restored.retain(|id, r| {
            let before = r.windows.windows().count();
            r.windows.expire(now_secs);
            let left = r.windows.windows().count();
            if left == before {
                return true;
            }
            if left == 0 {
                for ext in ["state", "unsymbolized", "json"] {
                    let _ = std::fs::remove_file(dir.join(format!("{}.{ext}", id.to_hex())));
                }
                return false;
            }
            let windows: Vec<&unwinder::window::Window> = r.windows.windows().collect();
            if let Err(err) = persist::write_state(&dir, &r.state.header(), &windows) {
                unwritten += 1;
                first_err.get_or_insert(err);
            }
            true
        });
        // Counted here, not from what is still changed: the memory budget's evictions
        // below mark aggregates changed too.
        self.stats.unwritten_by_last_flush = unwritten;
        self.enforce_memory_budget();
        first_err.map_or(Ok(()), Err)
    }

    /// One summary per binary held now, held samples fed first (fresh reads: what the
    /// next flush would write to each `<build-id>.json`).
    pub fn live_summaries(&mut self) -> Vec<BinarySummary> {
        self.feed_pending();
        self.settle_debug_fetches(None);
        self.summaries()
    }

    /// The summary and unsymbolized profile of `build_id` as held now, its held samples
    /// fed first: the restored windows and everything counted since, i.e. what the next
    /// flush would write (fresh reads; nothing is written). `None` when not held.
    pub fn live_profile(&mut self, build_id: &BuildId) -> Option<(BinarySummary, Vec<u8>)> {
        self.feed_pending_of(build_id);
        self.settle_debug_fetches(Some(build_id));
        let e = self.entries.get(build_id)?;
        let mut bytes = Vec::new();
        match write_profile(&mut bytes, e) {
            Ok(()) => Some((summary(&self.settings.state_dir, build_id, e), bytes)),
            Err(err) => {
                tracing::error!(
                    "rendering the profile of {build_id}: {chain}",
                    chain = ErrorChain(err.as_ref())
                );
                None
            }
        }
    }

    /// One summary per binary.
    pub fn summaries(&self) -> Vec<BinarySummary> {
        self.entries
            .iter()
            .map(|(id, e)| summary(&self.settings.state_dir, id, e))
            .collect()
    }
}

fn summary(dir: &Path, id: &BuildId, e: &Entry) -> BinarySummary {
    let s: &ShardStats = e.shard.stats();
    BinarySummary {
        build_id: id.to_hex(),
        path: e.path.clone(),
        kind: kind_name(e.shard.windows().kind()),
        // Not `snapshot().1`: that merges every window's counters into a copy.
        samples: e.shard.windows().samples(),
        offered: s.offered,
        counted: s.counted,
        over_budget: s.over_budget,
        profile: dir.join(format!("{}.unsymbolized", id.to_hex())),
        unwind_errors: s.errors_by_reason().into_iter().collect(),
        stack_repairs: s.stack_repairs().into_iter().collect(),
        names: e.names.clone(),
        has_pseudo_probes: e.binary.has_pseudo_probes(),
        sampled_secs: e.fed_secs.map_or(0, |(first, last)| last - first),
    }
}

fn write_entry(
    dir: &Path,
    id: &BuildId,
    e: &Entry,
    mode: &str,
    window_secs: u64,
) -> anyhow::Result<()> {
    let windows: Vec<&unwinder::window::Window> = e.shard.windows().windows().collect();
    let header = StateHeader {
        build_id: id,
        kind: e.shard.kind(),
        mode,
        path: &e.path,
        preferred_base: e.binary.preferred_base(),
        window_secs,
    };
    persist::write_state(dir, &header, &windows)?;
    let profile = dir.join(format!("{}.unsymbolized", id.to_hex()));
    write_atomic(&profile, |out| write_profile(out, e))?;
    let meta = dir.join(format!("{}.json", id.to_hex()));
    write_atomic(&meta, |out| {
        serde_json::to_writer_pretty(&mut *out, &summary(dir, id, e))?;
        Ok(())
    })
}

/// Writes the unsymbolized profile of `e`'s retained windows (`<build-id>.unsymbolized`,
/// and what fresh reads serve).
fn write_profile(out: &mut dyn std::io::Write, e: &Entry) -> anyhow::Result<()> {
    // One window (the usual case with long windows): write it without a merged copy.
    let merged;
    let counters = match e.shard.windows().windows().collect::<Vec<_>>()[..] {
        [only] => &only.counters,
        _ => {
            merged = e.shard.snapshot().0;
            &merged
        }
    };
    let binary = &e.binary;
    let (opts, base) = (GenerateOptions::default(), binary.preferred_base());
    let line_context = |key: &[u64]| line_context_name(binary, key, base, &opts);
    write_unsymbolized(out, counters, base, Some(&line_context))?;
    Ok(())
}

/// The file of `binary` mapped again from where it was first opened (its first map was
/// released); the load checks it is still the build that was sampled.
fn map_again(binary: &super::router::BinaryRef) -> anyhow::Result<memmap2::Mmap> {
    let path = &binary.opened_from;
    let file = std::fs::File::open(path)
        .with_context(|| format!("opening {} again to load it", path.display()))?;
    super::router::map_binary(&file).with_context(|| format!("mapping {}", path.display()))
}

/// The `reason` label of `pgo_agent_binaries_rejected_total` for a load error.
fn rejection_reason(err: &anyhow::Error) -> &'static str {
    use symbolizer::SymbolizerError as E;
    match err.chain().find_map(|e| e.downcast_ref::<E>()) {
        Some(E::TooLarge { .. }) => "too_large",
        Some(E::InvalidElf { .. }) => "invalid_elf",
        Some(E::UnsupportedArchitecture { .. } | E::NoExecutableSegment { .. }) => "unsupported",
        Some(E::SectionData { .. } | E::MalformedSection { .. }) => "malformed_section",
        Some(E::Dwarf { .. }) => "dwarf",
        Some(E::Io { .. }) => "io",
        _ => "other",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::router::{map_binary, BinaryRef};
    use collector::{LbrEntry, Mmap2Event, Sample};
    use unwinder::PerfContent;

    /// The C library this test process maps (stripped on Debian: no symbol table).
    fn libc_path() -> PathBuf {
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let line = maps.lines().find(|l| l.contains("/libc.so")).unwrap();
        PathBuf::from(line[line.find('/').unwrap()..].trim())
    }

    /// The executable mapping of the first library of this process whose path contains
    /// `name`, as an MMAP2 event of pid 1, and the address in its middle (in `.text`).
    fn exec_mapping(name: &str) -> (PathBuf, Mmap2Event, u64) {
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let line = maps
            .lines()
            .find(|l| l.contains(name) && l.split_whitespace().nth(1) == Some("r-xp"))
            .unwrap_or_else(|| panic!("no executable mapping of {name}"));
        let f: Vec<&str> = line.split_whitespace().collect();
        let (start, end) = f[0].split_once('-').unwrap();
        let (start, end) = (
            u64::from_str_radix(start, 16).unwrap(),
            u64::from_str_radix(end, 16).unwrap(),
        );
        let path = PathBuf::from(f[5]);
        let event = Mmap2Event {
            pid: 1,
            tid: 1,
            addr: start,
            len: end - start,
            pgoff: u64::from_str_radix(f[2], 16).unwrap(),
            prot: 5,
            filename: f[5].to_string(),
            ..Mmap2Event::default()
        };
        (path, event, start + (end - start) / 2)
    }

    /// One sample of pid 1 at `at` (no call chain), fed as a group of `binary`.
    fn feed_at(w: &mut Worker, binary: &Arc<BinaryRef>, mapping: &Mmap2Event, at: u64) {
        let sample = Sample {
            pid: 1,
            tid: 1,
            ip: at,
            count: 1,
            ..Sample::default()
        };
        w.handle(WorkItem::Samples(SampleGroup {
            binary: binary.clone(),
            pid: 1,
            mappings: vec![mapping.clone()],
            samples: vec![sample],
            now_secs: 0,
        }));
    }

    /// Settings of a worker that feeds each cpu-clock sample (no call chain) as it comes.
    fn feeding_each_sample() -> WorkerSettings {
        WorkerSettings {
            coalesce_samples: 1,
            ..WorkerSettings::unlimited(
                ShardInput::LeadingIp {
                    has_callchain: false,
                },
                std::env::temp_dir(),
            )
        }
    }

    fn binary_ref(path: &Path) -> Arc<BinaryRef> {
        let bytes = std::fs::read(path).unwrap();
        let id = symbolizer::elf_image::build_id_from_program_headers(&bytes).expect("a build id");
        Arc::new(BinaryRef::new(
            id,
            path.to_string_lossy().into_owned(),
            path.to_path_buf(),
            map_binary(&std::fs::File::open(path).unwrap()).unwrap(),
        ))
    }

    /// A debuginfod server that has no file and answers at once: its miss is then known.
    #[derive(Default)]
    struct EmptyServer {
        asked: std::sync::atomic::AtomicBool,
    }

    impl symbolizer::RemoteDebugSource for EmptyServer {
        fn fetch_debuginfo(&self, _id: &BuildId) -> Result<Option<PathBuf>, String> {
            self.asked.store(true, std::sync::atomic::Ordering::SeqCst);
            Ok(None)
        }
        fn describe(&self) -> String {
            "debuginfod http://empty".into()
        }
    }

    impl super::super::debug_fetches::CachingRemote for EmptyServer {
        fn answer_from_cache(&self, _id: &BuildId) -> Option<Result<Option<PathBuf>, String>> {
            self.asked
                .load(std::sync::atomic::Ordering::SeqCst)
                .then_some(Ok(None))
        }
    }

    /// A binary whose debug file was left to a background fetch is looked up again once the
    /// fetch is over, also when it ended before the load did: its names report then says
    /// what the server answered.
    #[test]
    fn a_fetch_over_before_the_load_is_settled() {
        let server = Arc::new(EmptyServer::default());
        let fetches = BackgroundFetches::start(server.clone()).unwrap();
        let mut w = Worker::new(WorkerSettings {
            debug_files: DebugFileFinder::new(Vec::new()).with_remote(fetches.clone()),
            debug_fetches: Some(fetches.clone()),
            ..feeding_each_sample()
        });
        let (libc, libc_map, libc_at) = exec_mapping("/libc.so");
        let libc_ref = binary_ref(&libc);
        let id = libc_ref.build_id.clone();
        feed_at(&mut w, &libc_ref, &libc_map, libc_at);
        let first = w.summaries();
        let tried = &first[0].names.tried;
        assert!(
            tried.last().is_some_and(|t| t.ends_with(super::FETCHING)),
            "{tried:?}"
        );
        let start = std::time::Instant::now();
        while fetches.in_flight(&id) {
            assert!(start.elapsed() < std::time::Duration::from_secs(10));
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let settled = w.live_summaries();
        assert_eq!(
            settled[0].names.tried.last().map(String::as_str),
            Some("debuginfod http://empty: 404"),
            "{:?}",
            settled[0].names
        );
        assert_eq!(settled[0].names.source, "address_only");
    }

    #[test]
    fn least_recently_sampled_binaries_give_their_decoded_code_back() {
        let mut w = Worker::new(WorkerSettings {
            decoded_budget_bytes: 1,
            ..feeding_each_sample()
        });
        let (libc, libc_map, libc_at) = exec_mapping("/libc.so");
        let (ld, ld_map, ld_at) = exec_mapping("/ld-linux");
        let (libc_ref, ld_ref) = (binary_ref(&libc), binary_ref(&ld));
        let (libc_id, ld_id) = (libc_ref.build_id.clone(), ld_ref.build_id.clone());
        let decoded = |w: &Worker, id: &BuildId| w.binary(id).unwrap().decoded_bytes().total();

        feed_at(&mut w, &libc_ref, &libc_map, libc_at);
        feed_at(&mut w, &ld_ref, &ld_map, ld_at);
        assert!(decoded(&w, &libc_id) > 0 && decoded(&w, &ld_id) > 0);
        let counted = w.counters(&libc_id).unwrap();
        let stats = w.summaries();
        let libc_stats = stats
            .iter()
            .find(|s| s.build_id == libc_id.to_hex())
            .unwrap();
        assert_eq!(libc_stats.offered, 1);
        let stats_of =
            |s: &BinarySummary| (s.offered, s.counted, s.samples, s.unwind_errors.clone());

        // Over the budget: libc, sampled least recently, gives its code back; ld.so, sampled
        // last, keeps it. libc's counters and statistics stay.
        let ld_held = decoded(&w, &ld_id);
        w.enforce_decoded_budget();
        assert_eq!(decoded(&w, &libc_id), 0);
        assert_eq!(decoded(&w, &ld_id), ld_held);
        assert_eq!(w.stats().evicted_decoded, 1);
        assert_eq!(w.counters(&libc_id).unwrap(), counted);
        let after = w.summaries();
        let libc_after = after
            .iter()
            .find(|s| s.build_id == libc_id.to_hex())
            .unwrap();
        assert_eq!(stats_of(libc_after), stats_of(libc_stats));

        // Sampled again, libc decodes what it needs again and counts on.
        feed_at(&mut w, &libc_ref, &libc_map, libc_at);
        assert!(decoded(&w, &libc_id) > 0);
        let again = w.summaries();
        let libc_again = again
            .iter()
            .find(|s| s.build_id == libc_id.to_hex())
            .unwrap();
        assert_eq!(libc_again.offered, 2);
        assert_eq!(
            libc_again.counted + libc_again.unwind_errors.values().sum::<u64>(),
            2,
            "each sample counted or refused once: {libc_again:?}"
        );

        // Within the budget nothing is given back.
        w.settings.decoded_budget_bytes = u64::MAX;
        w.enforce_decoded_budget();
        assert!(decoded(&w, &libc_id) > 0);
        assert_eq!(w.stats().evicted_decoded, 1);
    }

    /// A binary whose aggregate the memory budget evicted is loaded again, from its file,
    /// when it is sampled again.
    #[test]
    fn a_binary_evicted_by_the_memory_budget_is_loaded_again() {
        let mut w = Worker::new(WorkerSettings {
            ..feeding_each_sample()
        });
        let (libc, libc_map, libc_at) = exec_mapping("/libc.so");
        let libc_ref = binary_ref(&libc);
        let id = libc_ref.build_id.clone();
        feed_at(&mut w, &libc_ref, &libc_map, libc_at);
        assert!(w.binary(&id).is_some());
        assert!(
            libc_ref.bytes.lock().unwrap().is_none(),
            "the load took the map"
        );
        // What `enforce_memory_budget` does to a binary whose contexts all went.
        w.entries.remove(&id);
        feed_at(&mut w, &libc_ref, &libc_map, libc_at);
        assert!(w.binary(&id).is_some(), "loaded again");
        assert_eq!(w.stats().load_failures, 0);
        let s = w.summaries();
        let libc_now = s.iter().find(|s| s.build_id == id.to_hex()).unwrap();
        assert_eq!(libc_now.offered, 1, "counted anew after the eviction");
    }

    /// A worker of LBR stack samples feeding up to `coalesce_samples` at once, handing the
    /// fed samples to `recycler`.
    fn recycling_worker(coalesce_samples: usize, recycler: &SampleRecycler) -> Worker {
        Worker::new(WorkerSettings {
            coalesce_samples,
            ..WorkerSettings::unlimited(
                ShardInput::Lbr(PerfContent::LbrStack),
                std::env::temp_dir(),
            )
        })
        .with_recycler(recycler.clone())
    }

    /// The system's libc loaded, and a reference to it as the router makes one.
    fn libc_binary() -> (ProfiledBinary, Arc<BinaryRef>) {
        let path = libc_path();
        let bytes = std::fs::read(&path).unwrap();
        let binary = ProfiledBinary::from_bytes(&path, &bytes, &LoadOptions::default()).unwrap();
        let r = Arc::new(BinaryRef::new(
            binary.build_id().unwrap().clone(),
            path.to_string_lossy().into_owned(),
            path.clone(),
            map_binary(&std::fs::File::open(&path).unwrap()).unwrap(),
        ));
        (binary, r)
    }

    /// A group of `n` one-branch LBR samples of process 1 in `r`.
    fn lbr_group(r: &Arc<BinaryRef>, n: usize) -> SampleGroup {
        let sample = Sample {
            pid: 1,
            tid: 1,
            ip: 2,
            callchain: vec![2],
            lbr: vec![LbrEntry {
                from: 1,
                to: 2,
                flags: 0,
            }],
            count: 1,
            ..Sample::default()
        };
        SampleGroup {
            binary: r.clone(),
            pid: 1,
            mappings: Vec::new(),
            samples: vec![sample; n],
            now_secs: 0,
        }
    }

    /// Groups of a binary are held and fed together up to `coalesce_samples`; a group
    /// that does not fit in the held group's room has the held group fed first.
    #[test]
    fn groups_are_held_up_to_a_coalesced_feed_and_fed_rather_than_grown() {
        let recycler = SampleRecycler::new(100);
        let mut w = recycling_worker(4, &recycler);
        let (_, r) = libc_binary();
        // Held (fed samples go back to the recycler).
        w.handle(WorkItem::Samples(lbr_group(&r, 3)));
        assert_eq!(recycler.len(), 0);
        // 3 + 3 exceed the room of 4: the held 3 are fed, the new 3 held.
        w.handle(WorkItem::Samples(lbr_group(&r, 3)));
        assert_eq!(recycler.len(), 3);
        // 3 + 1 fit and reach 4: fed together.
        w.handle(WorkItem::Samples(lbr_group(&r, 1)));
        assert_eq!(recycler.len(), 7);
        // A group as large as a feed is fed at once.
        w.handle(WorkItem::Samples(lbr_group(&r, 5)));
        assert_eq!(recycler.len(), 12);
        assert_eq!(w.summaries()[0].offered, 12);
    }

    #[test]
    fn fed_samples_go_back_to_the_recycler_and_stripped_libraries_are_decoded() {
        let recycler = SampleRecycler::new(100);
        let mut w = recycling_worker(1, &recycler);
        // (A binary with code is not marked: the replay test in tests/tests/e2e/host/live.rs would
        // lose its samples. Loading this test's own executable takes too long here.)
        let path = libc_path();
        for group in 0..2 {
            let (binary, r) = libc_binary();
            w.handle(WorkItem::Samples(lbr_group(&r, 3)));
            assert_eq!(r.is_code_less(), binary.code().is_empty(), "{path:?}");
            // This VM's libc has no symbol table: its code is decoded from the `.eh_frame`
            // function extents, so it is not marked code-less.
            assert!(binary.code().len() > 100_000, "{}", binary.code().len());
            assert!(!r.is_code_less());
            assert_eq!(recycler.len(), 3 * (group + 1));
        }
        let s = &w.summaries()[0];
        assert_eq!((s.offered, s.counted), (6, 0));
        // The worker decodes on demand: the samples above reach no code, so (almost)
        // nothing is decoded.
        let id = BuildId::from_hex(&s.build_id).unwrap();
        let loaded = w.binary(&id).unwrap();
        let lazy = w.lazy_code(&id).expect("decoded on demand");
        assert!(!lazy.is_empty());
        assert!(loaded.code().is_empty());
        let eager = ProfiledBinary::from_bytes(
            &path,
            &std::fs::read(&path).unwrap(),
            &LoadOptions::default(),
        )
        .unwrap();
        assert!(
            lazy.decoded_instructions() < eager.code().len() / 100,
            "{} of {}",
            lazy.decoded_instructions(),
            eager.code().len()
        );
    }
}
