//! The MemProf spool of `pgo-agent run` (`[heap] spool_dir`): raw MemProf profiles dropped
//! into the spool directory are folded into one aggregate per build id, with the very step
//! `pgo-agent heap` uses ([`crate::heap::fold_in`]).
//!
//! Per file (names starting with `.` or ending in `.tmp` are ignored: writers rename
//! finished files into place):
//! 1. read (at most `max_raw_file_bytes`) and parse it whole ([`RawMemProfile::parse`]);
//! 2. the main binary's build id is segment 0's; the binary is the first of `[heap]
//!    binaries`, then `<debug dir>/.build-id/ab/cdef….debug`, `<debug dir>/<hex>`, whose
//!    build id matches (the HTTP store's lookup);
//! 3. symbolize and fold into a copy of the aggregate, persist the copy (temp file + rename),
//!    then keep it and move the file to `ingested/`.
//!
//! Any failure moves the file to `rejected/` with `<name>.reason` (input, reason, the
//! parser's error with its offset) and counts it; the aggregate is not touched. A persist
//! failure leaves the file in the spool for the next scan. Each aggregate remembers the last
//! [`RECENT_FILES`] ingested files (name and size), so a file whose move to `ingested/` was
//! cut short by a crash is not counted twice.
//!
//! State files per build id, in the state directory: `<hex>.memprof.agg.json` (the aggregate,
//! reloaded at start), and for HTTP (`service::http::heap`) `<hex>.memprof.json` (summary),
//! `.yaml`, `.txt`, `.pb.gz`.

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use collector::memprof::{MemInfoBlock, MemProfRawError, RawMemProfile, MIB_FIELD_NAMES};
use collector::BuildId;
use exporter::format::memprof_text::write_memprof_text;
use exporter::format::memprof_yaml::{inline_chains, write_memprof_yaml};
use exporter::format::pprof::{build_heap, to_gzip_bytes, HeapContext, HeapFrame, HeapMapping};
use serde::{Deserialize, Serialize};
use service::http::heap::{heap_file_name, HeapFormat, HeapSummary};
use symbolizer::memprof::{
    full_stack_id, HeapProfile, MemProfBinary, MemProfFrame, SymbolizedContext, SymbolizedProfile,
};

use crate::atomic_file::write_atomic;
use crate::config::Config;
use crate::error_chain::ErrorChain;

/// Ingested files remembered per aggregate (crash-safe exactly-once ingest).
pub const RECENT_FILES: usize = 4096;
/// Version of the `<hex>.memprof.agg.json` layout.
pub const AGGREGATE_VERSION: u32 = 1;
/// Subdirectory of the spool for ingested files.
pub const INGESTED_DIR: &str = "ingested";
/// Subdirectory of the spool for rejected files and their `.reason` files.
pub const REJECTED_DIR: &str = "rejected";

/// Where the spool reads and writes.
#[derive(Clone, Debug)]
pub struct HeapSpoolSettings {
    /// The spool directory.
    pub spool_dir: PathBuf,
    /// The daemon's state directory.
    pub state_dir: PathBuf,
    /// Largest raw profile read.
    pub max_raw_file_bytes: u64,
    /// Binaries matched by build id, searched first.
    pub binaries: Vec<PathBuf>,
    /// Debug directories searched by build id.
    pub debug_dirs: Vec<PathBuf>,
    /// Scan period.
    pub scan_interval: Duration,
}

impl HeapSpoolSettings {
    /// The settings of `config` (`None` when `[heap] spool_dir` is unset).
    pub fn from_config(config: &Config, state_dir: &Path) -> Option<HeapSpoolSettings> {
        let h = &config.heap;
        Some(HeapSpoolSettings {
            spool_dir: h.spool_dir.clone()?,
            state_dir: state_dir.to_path_buf(),
            max_raw_file_bytes: h.max_raw_file_bytes,
            binaries: h.binaries.clone(),
            debug_dirs: config.output.debug_dirs.clone(),
            scan_interval: Duration::from_secs(h.scan_interval_secs.max(1)),
        })
    }
}

/// Why a raw profile was rejected: a bounded set (the metric label).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RejectReason {
    /// The file ends before a structure does.
    Truncated,
    /// Not a raw MemProf profile.
    BadMagic,
    /// A raw format version the parser does not know.
    UnsupportedVersion,
    /// Inconsistent header, count or section.
    Corrupt,
    /// Over `max_raw_file_bytes` or a parser limit.
    TooLarge,
    /// Reading failed.
    Io,
    /// No segment, hence no build id.
    NoBuildId,
    /// No binary with the build id was found.
    BinaryNotFound,
    /// Symbolization failed.
    Symbolize,
}

impl RejectReason {
    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            RejectReason::Truncated => "truncated",
            RejectReason::BadMagic => "bad_magic",
            RejectReason::UnsupportedVersion => "unsupported_version",
            RejectReason::Corrupt => "corrupt",
            RejectReason::TooLarge => "too_large",
            RejectReason::Io => "io",
            RejectReason::NoBuildId => "no_build_id",
            RejectReason::BinaryNotFound => "binary_not_found",
            RejectReason::Symbolize => "symbolize",
        }
    }

    fn of_raw(e: &MemProfRawError) -> RejectReason {
        match e {
            MemProfRawError::Io { .. } => RejectReason::Io,
            MemProfRawError::Truncated { .. } => RejectReason::Truncated,
            MemProfRawError::BadMagic { .. } => RejectReason::BadMagic,
            MemProfRawError::UnsupportedVersion { .. } => RejectReason::UnsupportedVersion,
            MemProfRawError::TooLarge { .. } => RejectReason::TooLarge,
            _ => RejectReason::Corrupt,
        }
    }
}

/// What one scan did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ScanReport {
    /// Files folded in (their spool paths), with the build id.
    pub ingested: Vec<(PathBuf, String)>,
    /// Files rejected, with the reason and the error text.
    pub rejected: Vec<(PathBuf, RejectReason, String)>,
    /// Files left in the spool for the next scan (persisting failed).
    pub retried: Vec<PathBuf>,
}

struct Aggregate {
    profile: HeapProfile,
    binary_path: PathBuf,
    recent: VecDeque<String>,
}

/// The spool: aggregates per build id and the binaries loaded for them.
pub struct HeapSpool {
    settings: HeapSpoolSettings,
    aggregates: HashMap<BuildId, Aggregate>,
    binaries: HashMap<BuildId, Arc<MemProfBinary>>,
}

#[derive(Serialize, Deserialize)]
struct PersistedContext {
    frames: Vec<u32>,
    fields: Vec<u64>,
    histogram: Vec<u64>,
}

#[derive(Serialize, Deserialize)]
struct PersistedHeap {
    version: u32,
    build_id: String,
    binary_path: PathBuf,
    profiles: usize,
    dropped_contexts: usize,
    names: Vec<(u64, String)>,
    /// `(GUID, line offset, column, is_inline)`.
    frames: Vec<(u64, u32, u32, bool)>,
    contexts: Vec<PersistedContext>,
    recent: Vec<String>,
}

fn unix_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The dedup key of a spool file: name and size.
fn recent_key(name: &str, len: u64) -> String {
    format!("{name}:{len}")
}

impl HeapSpool {
    /// Creates the spool directories and restores the aggregates of the state directory
    /// (an unreadable aggregate is renamed `<name>.corrupt-<unix secs>` and starts empty).
    pub fn open(settings: HeapSpoolSettings) -> anyhow::Result<HeapSpool> {
        for d in [
            settings.spool_dir.clone(),
            settings.spool_dir.join(INGESTED_DIR),
            settings.spool_dir.join(REJECTED_DIR),
            settings.state_dir.clone(),
        ] {
            std::fs::create_dir_all(&d).with_context(|| format!("creating {}", d.display()))?;
        }
        let mut spool = HeapSpool {
            settings,
            aggregates: HashMap::new(),
            binaries: HashMap::new(),
        };
        let rd = std::fs::read_dir(&spool.settings.state_dir)
            .with_context(|| format!("reading {}", spool.settings.state_dir.display()))?;
        for entry in rd.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if !name.ends_with(".memprof.agg.json") {
                continue;
            }
            match restore(&entry.path()) {
                Ok((id, agg)) => {
                    spool.aggregates.insert(id, agg);
                }
                Err(e) => {
                    let to = entry
                        .path()
                        .with_file_name(format!("{name}.corrupt-{}", unix_secs()));
                    let _ = std::fs::rename(entry.path(), &to);
                    tracing::warn!(
                        "heap: {chain}; set aside as {}; that build id starts empty",
                        to.display(),
                        chain = ErrorChain(e.as_ref()),
                    );
                }
            }
        }
        Ok(spool)
    }

    /// The aggregate of `id`.
    pub fn profile(&self, id: &BuildId) -> Option<&HeapProfile> {
        self.aggregates.get(id).map(|a| &a.profile)
    }

    /// Ingests every complete file now in the spool directory (name order).
    pub fn scan(&mut self) -> ScanReport {
        let mut report = ScanReport::default();
        let Ok(rd) = std::fs::read_dir(&self.settings.spool_dir) else {
            tracing::error!(
                "heap: cannot read spool dir {}",
                self.settings.spool_dir.display()
            );
            return report;
        };
        let mut files: Vec<PathBuf> = rd
            .flatten()
            .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| !n.starts_with('.') && !n.ends_with(".tmp"))
            })
            .collect();
        files.sort();
        for path in files {
            self.ingest_file(&path, &mut report);
        }
        report
    }

    fn ingest_file(&mut self, path: &Path, report: &mut ScanReport) {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let (raw, len) = match self.read(path) {
            Ok(r) => r,
            Err((reason, msg)) => return self.reject(path, reason, msg, report),
        };
        let Some(id) = raw.main_build_id().cloned() else {
            let msg = format!("{}: no segment, hence no build id", path.display());
            return self.reject(path, RejectReason::NoBuildId, msg, report);
        };
        let key = recent_key(&name, len);
        if self
            .aggregates
            .get(&id)
            .is_some_and(|a| a.recent.contains(&key))
        {
            // Folded in before a crash cut the move short: only finish the move.
            self.move_to(path, INGESTED_DIR);
            report.ingested.push((path.to_path_buf(), id.to_hex()));
            return;
        }
        let Some(binary) = self.binary(&id) else {
            let msg = format!(
                "{}: build id {} (segment 0): no binary with this build id in heap.binaries \
                 or output.debug_dirs",
                path.display(),
                id.to_hex()
            );
            return self.reject(path, RejectReason::BinaryNotFound, msg, report);
        };
        let mut next = match self.aggregates.get(&id) {
            Some(a) => Aggregate {
                profile: a.profile.clone(),
                binary_path: binary.path().to_path_buf(),
                recent: a.recent.clone(),
            },
            None => Aggregate {
                profile: HeapProfile::new(Some(id.clone())),
                binary_path: binary.path().to_path_buf(),
                recent: VecDeque::new(),
            },
        };
        if let Err(e) = crate::heap::fold_in(&mut next.profile, &binary, path, &raw) {
            return self.reject(path, RejectReason::Symbolize, e.to_string(), report);
        }
        next.recent.push_back(key);
        while next.recent.len() > RECENT_FILES {
            next.recent.pop_front();
        }
        if let Err(e) = persist(&self.settings.state_dir, &id, &next) {
            tracing::error!(
                "heap: persisting {}: {chain}; {} stays in the spool",
                id.to_hex(),
                path.display(),
                chain = ErrorChain(e.as_ref()),
            );
            report.retried.push(path.to_path_buf());
            return;
        }
        self.aggregates.insert(id.clone(), next);
        self.move_to(path, INGESTED_DIR);
        service::metrics::count_heap_profile_ingested();
        report.ingested.push((path.to_path_buf(), id.to_hex()));
    }

    fn read(&self, path: &Path) -> Result<(RawMemProfile, u64), (RejectReason, String)> {
        let io = |e: std::io::Error| (RejectReason::Io, format!("{}: {e}", path.display()));
        let len = std::fs::metadata(path).map_err(io)?.len();
        let max = self.settings.max_raw_file_bytes;
        if len > max {
            return Err((
                RejectReason::TooLarge,
                format!(
                    "{}: file size {len} bytes is above heap.max_raw_file_bytes {max}",
                    path.display()
                ),
            ));
        }
        let data = std::fs::read(path).map_err(io)?;
        let raw = RawMemProfile::parse(path, &data)
            .map_err(|e| (RejectReason::of_raw(&e), e.to_string()))?;
        Ok((raw, len))
    }

    fn binary(&mut self, id: &BuildId) -> Option<Arc<MemProfBinary>> {
        if let Some(b) = self.binaries.get(id) {
            return Some(b.clone());
        }
        let mut candidates = self.settings.binaries.clone();
        candidates.extend(symbolizer::debug_file::build_id_candidates(
            &self.settings.debug_dirs,
            id,
        ));
        // A miss is not remembered: the binary may be deployed later.
        let found = candidates
            .iter()
            .filter(|p| p.is_file())
            .find_map(|p| MemProfBinary::load(p).ok().filter(|b| b.build_id() == id))
            .map(Arc::new)?;
        self.binaries.insert(id.clone(), found.clone());
        Some(found)
    }

    fn reject(&self, path: &Path, reason: RejectReason, msg: String, report: &mut ScanReport) {
        tracing::warn!(
            "heap: rejected {} ({}): {msg}",
            path.display(),
            reason.label()
        );
        if let Some(to) = self.move_to(path, REJECTED_DIR) {
            let mut reason_file = to.clone().into_os_string();
            reason_file.push(".reason");
            let text = format!(
                "input: {}\nreason: {}\nerror: {msg}\n",
                path.display(),
                reason.label()
            );
            let _ = std::fs::write(PathBuf::from(reason_file), text);
        }
        service::metrics::count_heap_profile_rejected(reason.label());
        report.rejected.push((path.to_path_buf(), reason, msg));
    }

    /// Moves `path` into the spool's `sub` directory (a suffix avoids overwriting).
    fn move_to(&self, path: &Path, sub: &str) -> Option<PathBuf> {
        let dir = self.settings.spool_dir.join(sub);
        let name = path.file_name()?.to_string_lossy().into_owned();
        let mut to = dir.join(&name);
        let mut n = 1;
        while to.exists() {
            to = dir.join(format!("{name}.{n}"));
            n += 1;
        }
        match std::fs::rename(path, &to) {
            Ok(()) => Some(to),
            Err(e) => {
                tracing::warn!("heap: moving {} to {}: {e}", path.display(), to.display());
                let _ = std::fs::remove_file(path);
                None
            }
        }
    }
}

fn restore(path: &Path) -> anyhow::Result<(BuildId, Aggregate)> {
    let len = std::fs::metadata(path)?.len();
    anyhow::ensure!(
        len <= service::store::MAX_STATE_FILE_BYTES,
        "{}: {len} bytes is above the limit",
        path.display()
    );
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let p: PersistedHeap =
        serde_json::from_slice(&bytes).with_context(|| format!("parsing {}", path.display()))?;
    anyhow::ensure!(
        p.version == AGGREGATE_VERSION,
        "{}: version {} (expected {AGGREGATE_VERSION})",
        path.display(),
        p.version
    );
    let id = BuildId::from_hex(&p.build_id)
        .filter(|i| i.to_hex() == p.build_id)
        .with_context(|| format!("{}: bad build id {:?}", path.display(), p.build_id))?;
    let frames: Vec<MemProfFrame> = p
        .frames
        .iter()
        .map(|&(function, line_offset, column, is_inline)| MemProfFrame {
            function,
            line_offset,
            column,
            is_inline,
        })
        .collect();
    let mut contexts = Vec::with_capacity(p.contexts.len());
    for (i, c) in p.contexts.into_iter().enumerate() {
        let frames = c
            .frames
            .iter()
            .map(|&f| frames.get(f as usize).copied())
            .collect::<Option<Vec<_>>>()
            .with_context(|| format!("{}: context {i}: frame id out of range", path.display()))?;
        anyhow::ensure!(
            c.fields.len() == MIB_FIELD_NAMES.len(),
            "{}: context {i}: {} MIB fields (expected {})",
            path.display(),
            c.fields.len(),
            MIB_FIELD_NAMES.len()
        );
        let mut mib = MemInfoBlock::default();
        for (name, v) in MIB_FIELD_NAMES.iter().zip(&c.fields) {
            mib.set_field(name, *v);
        }
        mib.access_histogram = c.histogram;
        contexts.push(SymbolizedContext { frames, mib });
    }
    let mut profile = HeapProfile::new(Some(id.clone()));
    profile.add(SymbolizedProfile {
        contexts,
        names: p.names.into_iter().collect(),
        dropped_contexts: 0,
    });
    profile.set_counts(p.profiles, p.dropped_contexts);
    Ok((
        id,
        Aggregate {
            profile,
            binary_path: p.binary_path,
            recent: p.recent.into_iter().collect(),
        },
    ))
}

fn persisted(id: &BuildId, agg: &Aggregate) -> PersistedHeap {
    let mut frame_ids: HashMap<MemProfFrame, u32> = HashMap::new();
    let mut frames = Vec::new();
    let mut names = std::collections::BTreeMap::new();
    let mut contexts = Vec::new();
    for (ctx, mib) in agg.profile.contexts() {
        let ids = ctx
            .iter()
            .map(|f| {
                if let Some(n) = agg.profile.function_name(f.function) {
                    names.insert(f.function, n.to_string());
                }
                *frame_ids.entry(*f).or_insert_with(|| {
                    frames.push((f.function, f.line_offset, f.column, f.is_inline));
                    frames.len() as u32 - 1
                })
            })
            .collect();
        contexts.push(PersistedContext {
            frames: ids,
            fields: mib.fields().iter().map(|&(_, v)| v).collect(),
            histogram: mib.access_histogram.clone(),
        });
    }
    PersistedHeap {
        version: AGGREGATE_VERSION,
        build_id: id.to_hex(),
        binary_path: agg.binary_path.clone(),
        profiles: agg.profile.profiles(),
        dropped_contexts: agg.profile.dropped_contexts(),
        names: names.into_iter().collect(),
        frames,
        contexts,
        recent: agg.recent.iter().cloned().collect(),
    }
}

/// The pprof heap profile of a MemProf aggregate: one sample per context with
/// `alloc_objects` = AllocCount and `alloc_space` = TotalSize (MemProf records every
/// allocation, so the period is 1). MemProf frames carry no addresses: each inline chain is
/// one location whose address is the chain's [`full_stack_id`] (unmapped), its lines the
/// chain's functions innermost first (by linkage name, else `0x<GUID>`; line numbers are
/// not kept: MemProf has offsets from the function's declaration line only).
pub fn heap_pprof(profile: &HeapProfile, binary_path: &Path) -> Vec<u8> {
    let mapping = HeapMapping {
        filename: binary_path.display().to_string(),
        build_id: profile.build_id().map(BuildId::to_hex).unwrap_or_default(),
        ..Default::default()
    };
    let name = |guid: u64| {
        profile
            .function_name(guid)
            .map_or_else(|| format!("{guid:#018x}"), str::to_owned)
    };
    let contexts: Vec<HeapContext> = profile
        .contexts()
        .map(|(frames, mib)| HeapContext {
            frames: inline_chains(&frames)
                .into_iter()
                .map(|chain| HeapFrame {
                    mapping: None,
                    address: full_stack_id(chain),
                    functions: chain.iter().map(|f| name(f.function)).collect(),
                })
                .collect(),
            alloc_objects: f64::from(mib.alloc_count),
            alloc_space: mib.total_size as f64,
        })
        .collect();
    to_gzip_bytes(&build_heap(&[mapping], &contexts, 1))
}

/// Writes every state file of one aggregate (see the module docs), each atomically; the
/// reloadable aggregate last, so a restart never knows of an ingest the HTTP files lack.
fn persist(state_dir: &Path, id: &BuildId, agg: &Aggregate) -> anyhow::Result<()> {
    let file = |f: Option<HeapFormat>| state_dir.join(heap_file_name(id, f));
    write_atomic(&file(Some(HeapFormat::Yaml)), |w| {
        Ok(write_memprof_yaml(&agg.profile, &mut { w })?)
    })?;
    write_atomic(&file(Some(HeapFormat::Text)), |w| {
        Ok(write_memprof_text(&agg.profile, &mut { w })?)
    })?;
    let pprof = heap_pprof(&agg.profile, &agg.binary_path);
    write_atomic(&file(Some(HeapFormat::Pprof)), |w| Ok(w.write_all(&pprof)?))?;
    let summary = HeapSummary {
        build_id: id.to_hex(),
        binary_path: agg.binary_path.display().to_string(),
        profiles_merged: agg.profile.profiles() as u64,
        contexts: agg.profile.len() as u64,
        dropped_contexts: agg.profile.dropped_contexts() as u64,
        last_ingest_unix_secs: unix_secs(),
    };
    write_atomic(&file(None), |w| Ok(serde_json::to_writer(w, &summary)?))?;
    let agg_path = state_dir.join(format!("{}.memprof.agg.json", id.to_hex()));
    write_atomic(&agg_path, |w| {
        Ok(serde_json::to_writer(w, &persisted(id, agg))?)
    })
}

/// Runs the spool on its own thread: a scan every `scan_interval` (and one at start) until
/// `stop`, then one last scan.
pub fn spawn(
    settings: HeapSpoolSettings,
    stop: Arc<AtomicBool>,
) -> anyhow::Result<std::thread::JoinHandle<()>> {
    let interval = settings.scan_interval;
    let mut spool = HeapSpool::open(settings)?;
    tracing::info!(
        "heap: spool {} ({} aggregates restored), scanned every {} s",
        spool.settings.spool_dir.display(),
        spool.aggregates.len(),
        interval.as_secs()
    );
    Ok(std::thread::Builder::new()
        .name("pgo-heap-spool".into())
        .spawn(move || {
            let mut next = Instant::now();
            loop {
                let stopping = stop.load(Ordering::SeqCst);
                if stopping || Instant::now() >= next {
                    let r = spool.scan();
                    if !r.ingested.is_empty() || !r.rejected.is_empty() {
                        tracing::info!(
                            "heap: {} raw profiles ingested, {} rejected",
                            r.ingested.len(),
                            r.rejected.len()
                        );
                    }
                    next = Instant::now() + interval;
                }
                if stopping {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        })?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("pgo-heap-spool-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn settings(d: &Path) -> HeapSpoolSettings {
        HeapSpoolSettings {
            spool_dir: d.join("spool"),
            state_dir: d.join("state"),
            max_raw_file_bytes: 1 << 20,
            binaries: vec![],
            debug_dirs: vec![],
            scan_interval: Duration::from_secs(1),
        }
    }

    #[test]
    fn bad_and_incomplete_files_are_handled_without_an_aggregate() {
        let d = temp("bad");
        let mut spool = HeapSpool::open(settings(&d)).unwrap();
        let s = d.join("spool");
        std::fs::write(s.join("run.1"), [0u8; 10]).unwrap();
        std::fs::write(s.join("big.2"), vec![0u8; (1 << 20) + 1]).unwrap();
        std::fs::write(s.join(".partial"), b"x").unwrap();
        std::fs::write(s.join("late.tmp"), b"x").unwrap();
        let r = spool.scan();
        assert!(r.ingested.is_empty());
        let reasons: Vec<_> = r
            .rejected
            .iter()
            .map(|(p, r, _)| (p.file_name().unwrap().to_str().unwrap(), r.label()))
            .collect();
        // 10 bytes: the 48-byte header does not fit.
        assert_eq!(
            reasons,
            vec![("big.2", "too_large"), ("run.1", "truncated")]
        );
        let reason = std::fs::read_to_string(s.join("rejected/run.1.reason")).unwrap();
        assert!(
            reason.starts_with(&format!(
                "input: {}\nreason: truncated\n",
                s.join("run.1").display()
            )),
            "{reason}"
        );
        assert!(reason.contains("offset 0"), "{reason}");
        assert!(s.join(".partial").exists() && s.join("late.tmp").exists());
        assert!(!s.join("run.1").exists() && s.join("rejected/run.1").exists());
        let _ = std::fs::remove_dir_all(d);
    }

    #[test]
    fn spool_is_off_unless_spool_dir_is_set() {
        let state = Path::new("/var/lib/pgo-agent");
        assert!(HeapSpoolSettings::from_config(&Config::embedded(), state).is_none());
        let c = Config::parse("[heap]\nspool_dir = \"/tmp/spool\"\n", Path::new("t.toml")).unwrap();
        let s = HeapSpoolSettings::from_config(&c, state).unwrap();
        assert_eq!(s.spool_dir, PathBuf::from("/tmp/spool"));
        assert_eq!(s.scan_interval, Duration::from_secs(10));
        assert_eq!(s.max_raw_file_bytes, 256 << 20);
        assert_eq!(s.debug_dirs, vec![PathBuf::from("/usr/lib/debug")]);
        let e = Config::parse("[heap]\nmax_raw_file_bytes = 0\n", Path::new("t.toml")).unwrap_err();
        assert!(
            format!("{e:#}").contains("heap.max_raw_file_bytes"),
            "{e:#}"
        );
    }

    #[test]
    fn corrupt_aggregate_is_set_aside_at_open() {
        let d = temp("corrupt");
        let st = settings(&d);
        std::fs::create_dir_all(&st.state_dir).unwrap();
        std::fs::write(st.state_dir.join("abcd.memprof.agg.json"), b"{\"version\":").unwrap();
        let spool = HeapSpool::open(st.clone()).unwrap();
        assert!(spool.aggregates.is_empty());
        let names: Vec<String> = std::fs::read_dir(&st.state_dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names.len(), 1);
        assert!(
            names[0].starts_with("abcd.memprof.agg.json.corrupt-"),
            "{names:?}"
        );
        let _ = std::fs::remove_dir_all(d);
    }
}
