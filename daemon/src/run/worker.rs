//! [`Worker`]: owns the aggregates of the binaries whose build ids hash to it (a
//! [`BinaryShard`] each, no lock), loads each binary once, and writes every aggregate to
//! the state directory at each flush (temp file + rename).

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use collector::BuildId;
use exporter::format::unsymbolized::write_unsymbolized;
use symbolizer::generate::cs::expand_line_context;
use symbolizer::generate::GenerateOptions;
use symbolizer::profile::SampleContext;
use symbolizer::{LoadOptions, ProfiledBinary};
use unwinder::shard::{BinaryShard, ShardInput, ShardStats};
use unwinder::window::WindowSettings;
use unwinder::{CounterKind, CounterSet, UnwindOptions};

use super::router::SampleGroup;
use crate::atomic_file::write_atomic;

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
    /// Where aggregates are written.
    pub state_dir: PathBuf,
    /// Consecutive groups of the same binary and process (same mappings, same window) are
    /// held and fed to the shard together, up to this many samples (1: no coalescing).
    /// Fewer, larger feeds: the aggregator's per-feed cost is paid once, and identical
    /// samples across groups are unwound once (llvm-profgen aggregates identical samples
    /// before unwinding). Costs about 1 KiB per held LBR sample.
    pub coalesce_samples: usize,
}

/// The daemon's [`WorkerSettings::coalesce_samples`]: 4096 LBR samples, about 4 MiB.
pub const COALESCE_SAMPLES: usize = 4096;

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
}

struct Entry {
    binary: Arc<ProfiledBinary>,
    shard: BinaryShard,
    path: String,
    dirty: bool,
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
}

/// See the module docs.
pub struct Worker {
    settings: WorkerSettings,
    entries: HashMap<BuildId, Entry>,
    pending: HashMap<BuildId, SampleGroup>,
    failed: HashSet<BuildId>,
    approx_bytes: u64,
    stats: WorkerStats,
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
        }
    }

    /// The statistics.
    pub fn stats(&self) -> &WorkerStats {
        &self.stats
    }

    /// The merged counters of `build_id` (all retained windows), held samples included.
    pub fn counters(&mut self, build_id: &BuildId) -> Option<CounterSet> {
        if let Some(g) = self.pending.remove(build_id) {
            self.feed_now(g);
        }
        self.entries.get(build_id).map(|e| e.shard.snapshot().0)
    }

    /// Feeds every held group to its shard.
    pub fn feed_pending(&mut self) {
        let held: Vec<SampleGroup> = self.pending.drain().map(|(_, g)| g).collect();
        for g in held {
            self.feed_now(g);
        }
    }

    /// The loaded binary of `build_id`.
    pub fn binary(&self, build_id: &BuildId) -> Option<&ProfiledBinary> {
        self.entries.get(build_id).map(|e| &*e.binary)
    }

    /// Handles one item; flush errors are counted and reported on stderr.
    pub fn handle(&mut self, item: WorkItem) {
        match item {
            WorkItem::Samples(g) => self.feed(g),
            WorkItem::Flush { now_secs } => {
                self.feed_pending();
                let started = std::time::Instant::now();
                if let Err(e) = self.flush(now_secs) {
                    self.stats.write_failures += 1;
                    eprintln!("pgo-agent: flush failed: {e:#}");
                }
                exporter::metrics::observe_flush(started.elapsed());
            }
        }
    }

    /// Holds `g` with the held group of its binary when they can be fed together (same
    /// process mappings, same window), else feeds the held group and holds `g`; feeds
    /// when the held group reaches `coalesce_samples`.
    fn feed(&mut self, g: SampleGroup) {
        let window = self.settings.windows.window_secs.max(1);
        let id = &g.binary.build_id;
        let g = match self.pending.remove(id) {
            Some(mut held)
                if held.pid == g.pid
                    && held.now_secs / window == g.now_secs / window
                    && held.mappings == g.mappings =>
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
            self.pending.insert(g.binary.build_id.clone(), g);
        }
    }

    fn feed_now(&mut self, g: SampleGroup) {
        let id = g.binary.build_id.clone();
        if self.failed.contains(&id) {
            self.stats.unloadable_samples += g.samples.len() as u64;
            return;
        }
        if self.approx_bytes > self.settings.memory_budget_bytes {
            self.stats.over_memory += g.samples.len() as u64;
            return;
        }
        if !self.entries.contains_key(&id) {
            match self.load(&g) {
                Ok(e) => {
                    self.entries.insert(id.clone(), e);
                }
                Err(err) => {
                    eprintln!("pgo-agent: not profiling {} ({id}): {err:#}", g.binary.path);
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
        if entry
            .shard
            .feed(&g.mappings, &g.samples, g.now_secs)
            .is_ok()
        {
            entry.dirty = true;
        }
    }

    fn load(&self, g: &SampleGroup) -> anyhow::Result<Entry> {
        let bytes = g
            .binary
            .bytes
            .lock()
            .ok()
            .and_then(|mut b| b.take())
            .context("binary bytes already taken")?;
        let binary =
            ProfiledBinary::from_bytes(Path::new(&g.binary.path), &bytes, &LoadOptions::default())
                .with_context(|| format!("loading {}", g.binary.opened_from.display()))?;
        let binary = Arc::new(binary);
        let shard = BinaryShard::new(
            binary.clone(),
            binary.load_info(),
            self.settings.input,
            self.settings.options.clone(),
            self.settings.windows,
            Some(self.settings.max_samples_per_window),
        )?;
        Ok(Entry {
            binary,
            shard,
            path: g.binary.path.clone(),
            dirty: false,
        })
    }

    /// Writes every changed aggregate: `<build-id>.unsymbolized` and `<build-id>.json`.
    pub fn flush(&mut self, now_secs: u64) -> anyhow::Result<()> {
        let mut bytes = 0u64;
        let mut first_err = None;
        for (id, e) in self.entries.iter_mut() {
            e.shard.expire(now_secs);
            bytes += e.shard.windows().approx_bytes() as u64;
            if !e.dirty {
                continue;
            }
            match write_entry(&self.settings.state_dir, id, e) {
                Ok(()) => e.dirty = false,
                Err(err) => {
                    first_err.get_or_insert(err);
                }
            }
        }
        self.approx_bytes = bytes;
        first_err.map_or(Ok(()), Err)
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
        samples: e.shard.snapshot().1,
        offered: s.offered,
        counted: s.counted,
        over_budget: s.over_budget,
        profile: dir.join(format!("{}.unsymbolized", id.to_hex())),
        unwind_errors: s.errors_by_reason().into_iter().collect(),
    }
}

fn write_entry(dir: &Path, id: &BuildId, e: &Entry) -> anyhow::Result<()> {
    let (counters, _) = e.shard.snapshot();
    let binary = &e.binary;
    let profile = dir.join(format!("{}.unsymbolized", id.to_hex()));
    write_atomic(&profile, |out| {
        let opts = GenerateOptions::default();
        let line_context = |key: &[u64]| {
            let (frames, _) = expand_line_context(&**binary, key, &opts);
            SampleContext { frames }.to_string()
        };
        write_unsymbolized(out, &counters, binary.preferred_base(), Some(&line_context))?;
        Ok(())
    })?;
    let meta = dir.join(format!("{}.json", id.to_hex()));
    write_atomic(&meta, |out| {
        serde_json::to_writer_pretty(&mut *out, &summary(dir, id, e))?;
        Ok(())
    })
}
