//! [`ProfileStore`]: the HTTP read model over the daemon's state directory.
//!
//! The daemon's workers write, per build id, `<hex>.unsymbolized` (llvm-profgen's
//! unsymbolized profile, offsets from the preferred base) and `<hex>.json` (path, counter
//! kind, sample counts), each by temp file + rename; the store only reads those files, so it
//! never blocks a worker. Symbolization happens here, on request: the binary is found by
//! build id (the recorded path, then the configured debug directories), loaded and kept
//! while it is used ([`crate::loaded_binaries`]: the few used last); rendered profiles are
//! cached by ETag (MD5 of the unsymbolized bytes + format). A binary that cannot be found,
//! or line (DWARF) contexts, which the state file keeps as symbolized strings, are served
//! as the unsymbolized profile and listed as such.
//!
//! Fresh reads: with a [`LiveSource`] (the daemon's workers), the list and the profiles
//! serve what the workers hold now rather than what the last flush wrote. The workers'
//! aggregate of a binary holds everything counted since the start *and* the windows
//! restored from the state directory (it is what the next flush writes, replacing the
//! files), so an aggregate is served from the workers or from its files, never the sum of
//! both: no count is served twice. A build id no worker holds (a restored aggregate whose
//! binary was not loaded again, one evicted for memory, a worker that did not answer in
//! time) is served from its files. Snapshots are kept [`LIVE_SNAPSHOT_TTL`], so a burst of
//! requests asks the workers once; every entry says where its counts come from and how
//! old they are ([`Freshness`]). The quality gauges keep reading the flushed files.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use collector::BuildId;
use md5::{Digest, Md5};
use serde::{Deserialize, Serialize};
use symbolizer::debug_file::{build_id_candidates, DebugFileFinder};
use symbolizer::generate::{generate_profile, GenerateOptions};

use crate::loaded_binaries::{LoadedBinaries, BINARY_IDLE, LOADED_BINARIES};
use crate::sampling_guidance::{density_guidance, DensityGuidance};
use symbolizer::{LoadOptions, ProfiledBinary};

use exporter::format::unsymbolized::read_unsymbolized;

/// Largest state file the store reads (bytes): a bound on what a request can allocate.
pub const MAX_STATE_FILE_BYTES: u64 = 512 << 20;
/// Rendered profiles kept in the cache.
pub const RENDER_CACHE_ENTRIES: usize = 32;
/// How long a snapshot of the workers' aggregates is served before the workers are asked
/// again (a burst of requests asks them once).
pub const LIVE_SNAPSHOT_TTL: Duration = Duration::from_secs(1);

/// Errors of the store.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// No aggregate for this build id.
    #[error("no profile for build id {0}")]
    NotFound(String),
    /// Reading a state file failed.
    #[error("reading {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// A state file is bigger than [`MAX_STATE_FILE_BYTES`].
    #[error("{path}: {size} bytes exceeds the limit of {max}")]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// Its size.
        size: u64,
        /// The limit.
        max: u64,
    },
    /// A state file does not parse.
    #[error("{path}: {reason}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// Writing a profile failed.
    #[error("rendering the profile of {build_id}: {reason}")]
    Render {
        /// The build id.
        build_id: String,
        /// What failed.
        reason: String,
    },
}

/// The `<hex>.json` metadata the daemon's workers write (extra fields are ignored).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct StateMeta {
    /// Build id, hex.
    pub build_id: String,
    /// Mapped path of the binary.
    pub path: String,
    /// Counter kind: `flat`, `probe_context` or `line_context`.
    pub kind: String,
    /// Samples in the retained windows.
    pub samples: u64,
    /// Samples the unwinder could not use fully, by reason (absent in older files).
    #[serde(default)]
    pub unwind_errors: BTreeMap<String, u64>,
    /// Samples taken in a prologue or epilogue, by repair outcome (`repaired`,
    /// `unrepairable`; absent in older files).
    #[serde(default)]
    pub stack_repairs: BTreeMap<String, u64>,
    /// Where the worker that counted the samples found the binary's names.
    #[serde(default)]
    pub names: Option<NamesReport>,
    /// Whether that binary has a `.pseudo_probe` section (absent in older files).
    #[serde(default)]
    pub has_pseudo_probes: Option<bool>,
    /// Samples counted since the daemon started sampling the binary (absent in older
    /// files).
    #[serde(default)]
    pub counted: u64,
    /// Seconds from the first to the latest samples counted since then (absent in older
    /// files): with `counted`, the rate the binary is sampled at.
    #[serde(default)]
    pub sampled_secs: u64,
}

/// Whether the host can symbolize a profile, and why not.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Symbolization {
    /// The binary was found and loaded: text and extbinary are served.
    Symbolized,
    /// No binary with this build id at the recorded path or in the debug directories.
    BinaryNotFound,
    /// The binary was found, but neither it nor a debug file names its code (stripped, no
    /// debug file found): the unsymbolized profile (addresses) is served;
    /// [`ProfileSummary::names`] says what was tried.
    AddressOnly,
    /// The binary names its functions (symbols) but has neither DWARF line tables nor
    /// pseudo probes, nor a debug file with them (built without `-g`): a sample profile
    /// has nothing to key its counts by, so text and extbinary serve the unsymbolized
    /// profile; pprof and flame graphs name functions from the symbols. Build with `-g`
    /// (or `-gline-tables-only`, or `-fpseudo-probe-for-profiling`), or install the debug
    /// file.
    NoLineTables,
}

/// Where a binary's names come from, as the list and the worker's summary report it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NamesReport {
    /// `binary` (its own symbols and DWARF), `debug_file` or `address_only`.
    pub source: String,
    /// How the debug file was found: `debug_dirs`, `gnu_debuglink` or `debuginfod`
    /// (`None` for a debug file given by path, or without one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub route: Option<String>,
    /// The debug file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub debug_file: Option<String>,
    /// The candidates looked at and why each was not used (when a lookup was made).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tried: Vec<String>,
    /// The binary names its functions but has no DWARF line tables and no pseudo probes
    /// ([`Symbolization::NoLineTables`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub no_line_tables: bool,
}

impl NamesReport {
    /// The report of `binary`, loaded after `lookup` (if a lookup was made).
    pub fn of(
        binary: &ProfiledBinary,
        lookup: Option<&symbolizer::debug_file::DebugLookup>,
    ) -> NamesReport {
        use symbolizer::binary::NameSource;
        let found = lookup.and_then(|l| l.found.as_ref());
        let (source, debug_file) = match binary.name_source() {
            NameSource::Binary => ("binary", None),
            NameSource::DebugFile(p) => ("debug_file", Some(p.display().to_string())),
            NameSource::AddressOnly => ("address_only", None),
        };
        NamesReport {
            source: source.to_string(),
            route: found
                .filter(|_| debug_file.is_some())
                .map(|f| f.route.to_string()),
            debug_file,
            tried: lookup.map(|l| l.tried.clone()).unwrap_or_default(),
            no_line_tables: names_without_lines(binary),
        }
    }
}

/// True when `binary` names its functions but a sample profile has nothing to key its
/// counts by: no DWARF line tables and no pseudo probes ([`Symbolization::NoLineTables`]).
pub fn names_without_lines(binary: &ProfiledBinary) -> bool {
    binary.name_source().has_names() && !binary.has_pseudo_probes() && !binary.has_line_info()
}

impl Symbolization {
    /// How the host symbolizes profiles with `binary` (found): `Symbolized` when a sample
    /// profile can be made from it.
    pub fn of(binary: &ProfiledBinary) -> Symbolization {
        if !binary.name_source().has_names() {
            Symbolization::AddressOnly
        } else if names_without_lines(binary) {
            Symbolization::NoLineTables
        } else {
            Symbolization::Symbolized
        }
    }
}

/// One entry of `GET /api/v1/profiles`.
#[derive(Clone, Debug, Serialize)]
pub struct ProfileSummary {
    /// Build id, hex.
    pub build_id: String,
    /// Binary paths seen.
    pub binary_paths: Vec<String>,
    /// Sampling mode of the daemon (`intel_lbr`, `amd_branch`, `cpu_clock`).
    pub mode: String,
    /// Counter kind (`flat`, `probe_context`, `line_context`).
    pub kind: String,
    /// Samples in the retained windows.
    pub samples: u64,
    /// The window range served.
    pub window: WindowRange,
    /// True when the binary has a `.pseudo_probe` section (`None`: binary not found).
    pub has_pseudo_probes: Option<bool>,
    /// Whether text/extbinary are served.
    pub symbolization: Symbolization,
    /// Where the names come from (`None`: binary not found).
    pub names: Option<NamesReport>,
    /// Samples the unwinder could not use fully, by reason, since the daemon started.
    pub unwind_errors: BTreeMap<String, u64>,
    /// The density of the last flushed profile, its verdict and the sampling time still
    /// needed ([`crate::sampling_guidance`]); `None` when not computed (binaries past the
    /// first [`crate::metrics::QUALITY_BINARIES`] symbolizable ones, or not symbolizable).
    pub density: Option<DensityGuidance>,
    /// Samples taken in a prologue or epilogue, by repair outcome, since the daemon
    /// started.
    pub stack_repairs: BTreeMap<String, u64>,
    /// Where the counts come from and how old they are (`source`, `updated_unix_secs`,
    /// `age_secs` in the JSON entry).
    #[serde(flatten)]
    pub freshness: Freshness,
}

/// The window range of a served aggregate: all retained windows up to
/// [`Freshness::updated_unix_secs`].
#[derive(Clone, Copy, Debug, Serialize)]
pub struct WindowRange {
    /// Seconds covered at most (`window_secs * retained_windows`).
    pub retained_secs: u64,
    /// Unix time of the last flush (file modification time; 0: not flushed yet).
    pub last_flush_unix_secs: u64,
}

/// Where a served aggregate's counts come from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AggregateSource {
    /// The state directory: the aggregate as the last flush wrote it (no [`LiveSource`],
    /// or no worker holds it now).
    #[default]
    StateDir,
    /// The workers' memory, at [`Freshness::updated_unix_secs`]: everything counted until
    /// then, the restored windows included (what the next flush writes).
    Workers,
}

/// How current a served aggregate is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Freshness {
    /// Where the counts come from.
    pub source: AggregateSource,
    /// Unix time the counts were taken: the workers' snapshot, or the last flush (file
    /// modification time).
    pub updated_unix_secs: u64,
    /// Seconds from then to the response: how old the served aggregate is.
    pub age_secs: u64,
}

impl Freshness {
    fn at(source: AggregateSource, updated_unix_secs: u64) -> Freshness {
        Freshness {
            source,
            updated_unix_secs,
            age_secs: unix_now().saturating_sub(updated_unix_secs),
        }
    }
}

/// One aggregate as the daemon's workers hold it now.
#[derive(Clone, Debug)]
pub struct LiveAggregate {
    /// Its metadata (what the next flush writes to `<hex>.json`).
    pub meta: StateMeta,
    /// Its unsymbolized profile (what the next flush writes to `<hex>.unsymbolized`).
    pub unsymbolized: Arc<Vec<u8>>,
}

/// The aggregates the daemon's workers hold now, between flushes (fresh reads; see the
/// module docs). Implemented by the daemon over its workers; calls block briefly.
pub trait LiveSource: Send + Sync {
    /// The metadata of every aggregate held now (workers that do not answer in time are
    /// left out: their aggregates are served from their files).
    fn list(&self) -> Vec<StateMeta>;
    /// The aggregate of `id` held now; `None` when no worker holds it (or its worker did
    /// not answer in time).
    fn get(&self, id: &BuildId) -> Option<LiveAggregate>;
}

/// The output formats of `GET /api/v1/profiles/{build_id}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Deserialize, Serialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum ProfileFormat {
    /// LLVM extbinary sample profile.
    #[default]
    Extbinary,
    /// LLVM text sample profile.
    Text,
    /// llvm-profgen's unsymbolized profile (mergeable counters).
    Unsymbolized,
    /// pprof `profile.proto` (uncompressed; see [`exporter::format::pprof`]).
    Pprof,
}

impl ProfileFormat {
    /// The file extension used in `Content-Disposition`.
    pub fn extension(self) -> &'static str {
        match self {
            ProfileFormat::Extbinary => "extbinary.prof",
            ProfileFormat::Text => "text.prof",
            ProfileFormat::Unsymbolized => "unsymbolized",
            ProfileFormat::Pprof => "pb",
        }
    }

    /// The `Content-Type`.
    pub fn content_type(self) -> &'static str {
        match self {
            ProfileFormat::Extbinary | ProfileFormat::Pprof => "application/octet-stream",
            ProfileFormat::Text | ProfileFormat::Unsymbolized => "text/plain; charset=utf-8",
        }
    }
}

/// A profile rendered for one request.
#[derive(Clone, Debug)]
pub struct RenderedProfile {
    /// The format actually served (unsymbolized when symbolization is not possible).
    pub format: ProfileFormat,
    /// The bytes.
    pub bytes: Arc<Vec<u8>>,
    /// Strong ETag (quoted): MD5 of the unsymbolized aggregate and the format.
    pub etag: String,
    /// Unix time of the aggregate's last flush (0: not flushed yet).
    pub last_flush_unix_secs: u64,
    /// Where the served counts come from and how old they are.
    pub freshness: Freshness,
}

/// Where the store reads from and how it labels what it serves.
#[derive(Clone, Debug)]
pub struct StoreSettings {
    /// The daemon's state directory.
    pub state_dir: PathBuf,
    /// Finds binaries (`<dir>/.build-id/ab/cdef….debug`, `<dir>/<hex>` of its debug
    /// directories, when the recorded path is gone) and their debug files.
    pub debug_files: DebugFileFinder,
    /// Sampling mode label.
    pub mode: String,
    /// `window_secs * retained_windows`.
    pub retained_secs: u64,
}

/// Quality figures of one aggregate ([`crate::profile_quality`]).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct ProfileQuality {
    /// llvm-profgen's profile density of the generated profile.
    pub density: f64,
    /// Taken branches counted per byte of function code.
    pub taken_branches_per_text_byte: f64,
    /// Share of body samples in functions whose probe checksum differs from the binary's
    /// `.pseudo_probe_desc` (stale: clang would drop them).
    pub stale_sample_share: f64,
}

/// A loaded binary and where its names come from.
type NamedBinary = (Arc<ProfiledBinary>, NamesReport);

/// A snapshot of the live source: when it was taken (for [`LIVE_SNAPSHOT_TTL`]), its Unix
/// time, and what it held.
type Snapshot<T> = (Instant, u64, T);

/// One aggregate as served: the unsymbolized bytes, its metadata when already known (the
/// workers'; the state directory's is read only when needed), how current it is.
struct Aggregate {
    raw: Arc<Vec<u8>>,
    meta: Option<StateMeta>,
    freshness: Freshness,
}

/// See the module docs.
pub struct ProfileStore {
    settings: StoreSettings,
    binaries: Mutex<LoadedBinaries<NamedBinary>>,
    rendered: Mutex<Vec<(String, RenderedProfile)>>,
    quality: Mutex<HashMap<BuildId, (Vec<u8>, ProfileQuality)>>,
    live: Option<Arc<dyn LiveSource>>,
    live_list: Mutex<Option<Snapshot<Arc<Vec<StateMeta>>>>>,
    live_aggregates: Mutex<HashMap<BuildId, Snapshot<Option<LiveAggregate>>>>,
}

impl ProfileStore {
    /// A store over `settings.state_dir`.
    pub fn new(settings: StoreSettings) -> ProfileStore {
        ProfileStore {
            settings,
            binaries: Mutex::new(LoadedBinaries::new(LOADED_BINARIES, BINARY_IDLE)),
            rendered: Mutex::new(Vec::new()),
            quality: Mutex::new(HashMap::new()),
            live: None,
            live_list: Mutex::new(None),
            live_aggregates: Mutex::new(HashMap::new()),
        }
    }

    /// Serves what `live` holds now over the files of the state directory (fresh reads;
    /// see the module docs).
    pub fn with_live(mut self, live: Arc<dyn LiveSource>) -> ProfileStore {
        self.live = Some(live);
        self
    }

    /// The metadata of every aggregate the live source holds, as of a snapshot at most
    /// [`LIVE_SNAPSHOT_TTL`] old, with its Unix time (empty without a live source).
    fn live_list(&self) -> (u64, Arc<Vec<StateMeta>>) {
        let Some(live) = &self.live else {
            return (0, Arc::default());
        };
        // Held while the workers are asked: concurrent requests wait for this snapshot.
        let mut cached = self.live_list.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((taken, unix, list)) = &*cached {
            if taken.elapsed() < LIVE_SNAPSHOT_TTL {
                return (*unix, list.clone());
            }
        }
        let list = Arc::new(live.list());
        let unix = unix_now();
        *cached = Some((Instant::now(), unix, list.clone()));
        (unix, list)
    }

    /// The aggregate of `id` the live source holds, as of a snapshot at most
    /// [`LIVE_SNAPSHOT_TTL`] old, with its Unix time.
    fn live_aggregate(&self, id: &BuildId) -> Option<(u64, LiveAggregate)> {
        let live = self.live.as_ref()?;
        let mut cached = self
            .live_aggregates
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        // Expired snapshots go (a profile's bytes are not kept past their use).
        cached.retain(|_, (taken, _, _)| taken.elapsed() < LIVE_SNAPSHOT_TTL);
        if let Some((_, unix, agg)) = cached.get(id) {
            return agg.clone().map(|a| (*unix, a));
        }
        let agg = live.get(id);
        let unix = unix_now();
        cached.insert(id.clone(), (Instant::now(), unix, agg.clone()));
        agg.map(|a| (unix, a))
    }

    /// The aggregate of `id` as served: the workers' when they hold it, else the state
    /// directory's.
    fn aggregate(&self, id: &BuildId) -> Result<Aggregate, StoreError> {
        if let Some((unix, live)) = self.live_aggregate(id) {
            return Ok(Aggregate {
                raw: live.unsymbolized,
                meta: Some(live.meta),
                freshness: Freshness::at(AggregateSource::Workers, unix),
            });
        }
        let path = self.path(id, "unsymbolized");
        let raw = read_bounded(&path, id)?;
        Ok(Aggregate {
            raw: Arc::new(raw),
            meta: None,
            freshness: Freshness::at(AggregateSource::StateDir, mtime_secs(&path)),
        })
    }

    /// The metadata of `agg`, the aggregate of `id`.
    fn meta_of(&self, id: &BuildId, agg: &Aggregate) -> Result<StateMeta, StoreError> {
        match &agg.meta {
            Some(m) => Ok(m.clone()),
            None => self.meta(id),
        }
    }

    /// The settings.
    pub fn settings(&self) -> &StoreSettings {
        &self.settings
    }

    /// Every aggregate, most samples first: those the workers hold now (with a live
    /// source), then the others of the state directory.
    pub fn list(&self) -> Result<Vec<ProfileSummary>, StoreError> {
        let dir = &self.settings.state_dir;
        let rd = std::fs::read_dir(dir).map_err(|source| StoreError::Io {
            path: dir.clone(),
            source,
        })?;
        let (unix, live) = self.live_list();
        let mut out = Vec::new();
        let mut held = HashSet::new();
        for meta in live.iter() {
            let Some(id) = BuildId::from_hex(&meta.build_id) else {
                continue;
            };
            if held.insert(id.clone()) {
                let freshness = Freshness::at(AggregateSource::Workers, unix);
                out.push(self.summarize(&id, meta.clone(), freshness));
            }
        }
        for entry in rd.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(hex) = name.strip_suffix(".json") else {
                continue;
            };
            let Some(id) = BuildId::from_hex(hex).filter(|i| i.to_hex() == hex) else {
                continue;
            };
            if held.contains(&id) {
                continue;
            }
            let Ok(meta) = self.meta(&id) else { continue };
            let flushed = mtime_secs(&self.path(&id, "unsymbolized"));
            out.push(self.summarize(&id, meta, Freshness::at(AggregateSource::StateDir, flushed)));
        }
        out.sort_by(|a, b| b.samples.cmp(&a.samples).then(a.build_id.cmp(&b.build_id)));
        Ok(out)
    }

    /// The metadata of `id` in the state directory (as last flushed).
    pub fn meta(&self, id: &BuildId) -> Result<StateMeta, StoreError> {
        let path = self.path(id, "json");
        let bytes = read_bounded(&path, id)?;
        serde_json::from_slice(&bytes).map_err(|e| StoreError::Invalid {
            path,
            reason: e.to_string(),
        })
    }

    /// The summary of one aggregate (the list entry).
    pub fn summary(&self, id: &BuildId) -> Result<ProfileSummary, StoreError> {
        let (unix, live) = self.live_list();
        if let Some(meta) = live.iter().find(|m| m.build_id == id.to_hex()) {
            let freshness = Freshness::at(AggregateSource::Workers, unix);
            return Ok(self.summarize(id, meta.clone(), freshness));
        }
        let meta = self.meta(id)?;
        let flushed = mtime_secs(&self.path(id, "unsymbolized"));
        Ok(self.summarize(id, meta, Freshness::at(AggregateSource::StateDir, flushed)))
    }

    fn summarize(&self, id: &BuildId, meta: StateMeta, freshness: Freshness) -> ProfileSummary {
        let remembered = self.binaries.lock().ok().and_then(|m| m.peek(id).cloned());
        let of_binary =
            |(b, n): NamedBinary| (Some(b.has_pseudo_probes()), Symbolization::of(&b), Some(n));
        let (has_pseudo_probes, symbolization, names) = match (remembered, &meta.names) {
            // The store looked for it and found nothing.
            (Some(None), names) => (None, Symbolization::BinaryNotFound, names.clone()),
            (Some(Some(loaded)), _) => of_binary(loaded),
            (None, Some(names)) => {
                // Listed from what the worker reported of the binary it held (now, or at
                // the flush): loading every binary a list names (each library of the
                // host) would cost the store their size in memory. It is loaded when its
                // profile is asked for.
                let found = file_has_build_id(Path::new(&meta.path), id)
                    || build_id_candidates(self.settings.debug_files.debug_dirs(), id)
                        .iter()
                        .any(|p| p.is_file());
                let symbolization = match names.source.as_str() {
                    "address_only" => Symbolization::AddressOnly,
                    _ if !found => Symbolization::BinaryNotFound,
                    _ if names.no_line_tables => Symbolization::NoLineTables,
                    _ => Symbolization::Symbolized,
                };
                (meta.has_pseudo_probes, symbolization, Some(names.clone()))
            }
            (None, None) => match self.binary_with_names(id, &meta.path) {
                Some(found) => of_binary(found),
                None => (None, Symbolization::BinaryNotFound, None),
            },
        };
        ProfileSummary {
            build_id: id.to_hex(),
            binary_paths: vec![meta.path.clone()],
            mode: self.settings.mode.clone(),
            kind: meta.kind,
            samples: meta.samples,
            window: WindowRange {
                retained_secs: self.settings.retained_secs,
                last_flush_unix_secs: mtime_secs(&self.path(id, "unsymbolized")),
            },
            has_pseudo_probes,
            symbolization,
            names,
            unwind_errors: meta.unwind_errors,
            density: None,
            stack_repairs: meta.stack_repairs,
            freshness,
        }
    }

    /// The raw unsymbolized aggregate of `id` as served: the workers' when they hold it,
    /// else the state directory's.
    pub fn unsymbolized_bytes(&self, id: &BuildId) -> Result<Vec<u8>, StoreError> {
        Ok(self.aggregate(id)?.raw.to_vec())
    }

    /// Renders `id` as `format` (or as the unsymbolized profile when the host cannot
    /// symbolize it; [`RenderedProfile::format`] says which).
    pub fn render(
        &self,
        id: &BuildId,
        format: ProfileFormat,
    ) -> Result<RenderedProfile, StoreError> {
        let agg = self.aggregate(id)?;
        let raw = agg.raw.clone();
        let freshness = agg.freshness;
        let last_flush_unix_secs = mtime_secs(&self.path(id, "unsymbolized"));
        let digest = |f: ProfileFormat| {
            let mut h = Md5::new();
            h.update(&*raw);
            h.update(format!("{f:?}").as_bytes());
            let d = h.finalize();
            format!(
                "\"{}\"",
                d.iter().map(|b| format!("{b:02x}")).collect::<String>()
            )
        };
        let unsymbolized_etag = digest(ProfileFormat::Unsymbolized);
        let etag = digest(format);
        let unsymbolized = |raw: Arc<Vec<u8>>| RenderedProfile {
            format: ProfileFormat::Unsymbolized,
            etag: unsymbolized_etag.clone(),
            bytes: raw,
            last_flush_unix_secs,
            freshness,
        };
        if format == ProfileFormat::Unsymbolized {
            return Ok(unsymbolized(raw));
        }
        if let Some(hit) = self.cached(&etag) {
            // The same counts: served with this request's freshness.
            return Ok(RenderedProfile {
                last_flush_unix_secs,
                freshness,
                ..hit
            });
        }
        let meta = self.meta_of(id, &agg)?;
        // pprof names what it can (`ProfiledBinary::function_label`: exported names or
        // hex starts without a symbol table); a sample profile needs names and lines or
        // probes to key its counts by.
        let Some(binary) = self.binary(id, &meta.path).filter(|b| {
            format == ProfileFormat::Pprof || Symbolization::of(b) == Symbolization::Symbolized
        }) else {
            return Ok(unsymbolized(raw));
        };
        let text = String::from_utf8_lossy(&raw);
        let base = binary.preferred_base();
        let parsed = read_unsymbolized(&text, base).map_err(|e| StoreError::Invalid {
            path: self.path(id, "unsymbolized"),
            reason: e.to_string(),
        })?;
        let counters = parsed.to_counter_set_for(base, binary.has_pseudo_probes());
        if format == ProfileFormat::Pprof {
            // Line contexts are stored as symbolized strings: their counters go context-less.
            let flat = |p: &exporter::format::unsymbolized::UnsymbolizedProfile| {
                let mut all = unwinder::ContextCounters::default();
                for c in p.contexts.values() {
                    all.merge(c);
                }
                all
            };
            let pprof = match &counters {
                Some(set) => exporter::format::pprof::build(
                    &binary,
                    set.contexts.iter().map(|(k, c)| (k.as_slice(), c)),
                ),
                None => {
                    let all = flat(&parsed);
                    exporter::format::pprof::build(&binary, [(&[][..], &all)])
                }
            };
            return Ok(self.remember(RenderedProfile {
                format,
                bytes: Arc::new(exporter::format::pprof::to_bytes(&pprof)),
                etag,
                last_flush_unix_secs,
                freshness,
            }));
        }
        let profile = match (counters, parsed.line_contexts()) {
            (Some(counters), _) => {
                generate_profile(&*binary, &counters, &GenerateOptions::default())
            }
            // Symbolized line contexts (the host had the binary's DWARF): made as from an
            // unsymbolized file (`convert --unsymbolized-profile`).
            (None, Some(contexts)) => symbolizer::generate::generate_line_profile_of_contexts(
                &*binary,
                &contexts,
                &GenerateOptions::default(),
            ),
            (None, None) => return Ok(unsymbolized(raw)),
        };
        let mut bytes = Vec::new();
        let written = match format {
            ProfileFormat::Text => exporter::format::llvm_text::write(&profile, &mut bytes),
            _ => exporter::format::extbinary::write(&profile, &mut bytes),
        };
        written.map_err(|e| StoreError::Render {
            build_id: id.to_hex(),
            reason: e.to_string(),
        })?;
        Ok(self.remember(RenderedProfile {
            format,
            bytes: Arc::new(bytes),
            etag,
            last_flush_unix_secs,
            freshness,
        }))
    }

    /// The SVG flame graph of `id` (frames named with the binary when found, as pprof's
    /// functions are, else hex offsets), of the aggregate as served
    /// ([`ProfileStore::unsymbolized_bytes`]).
    pub fn flamegraph(&self, id: &BuildId) -> Result<Vec<u8>, StoreError> {
        let agg = self.aggregate(id)?;
        let raw = agg.raw.clone();
        let meta = self.meta_of(id, &agg)?;
        let binary = self.binary(id, &meta.path);
        let base = binary.as_ref().map_or(0, |b| b.preferred_base());
        let parsed = read_unsymbolized(&String::from_utf8_lossy(&raw), base).map_err(|e| {
            StoreError::Invalid {
                path: self.path(id, "unsymbolized"),
                reason: e.to_string(),
            }
        })?;
        let lines = exporter::format::flamegraph::collapsed(&parsed, binary.as_deref(), base);
        let title = format!("{} ({})", meta.path, id.to_hex());
        let mut svg = Vec::new();
        exporter::format::flamegraph::write_svg(&lines, &title, &mut svg).map_err(|e| {
            StoreError::Render {
                build_id: id.to_hex(),
                reason: e.to_string(),
            }
        })?;
        Ok(svg)
    }

    /// The quality figures of `id` as last flushed (the state directory's aggregate: they
    /// move with the flushes, not with every scrape), recomputed only when that changed;
    /// `None` when the host cannot symbolize it.
    pub fn quality(&self, id: &BuildId) -> Result<Option<ProfileQuality>, StoreError> {
        let raw = read_bounded(&self.path(id, "unsymbolized"), id)?;
        let digest = Md5::digest(&raw).to_vec();
        if let Some((d, q)) = self.quality.lock().ok().and_then(|m| m.get(id).cloned()) {
            if d == digest {
                return Ok(Some(q));
            }
        }
        let meta = self.meta(id)?;
        // Only a binary a sample profile can be made from has a profile's quality.
        let Some(binary) = self
            .binary(id, &meta.path)
            .filter(|b| Symbolization::of(b) == Symbolization::Symbolized)
        else {
            return Ok(None);
        };
        let base = binary.preferred_base();
        let parsed = read_unsymbolized(&String::from_utf8_lossy(&raw), base).map_err(|e| {
            StoreError::Invalid {
                path: self.path(id, "unsymbolized"),
                reason: e.to_string(),
            }
        })?;
        // As rendered: address contexts through the counters, symbolized line contexts
        // (the host had the binary's DWARF) as they are.
        let options = GenerateOptions::default();
        let profile = match (
            parsed.to_counter_set_for(base, binary.has_pseudo_probes()),
            parsed.line_contexts(),
        ) {
            (Some(counters), _) => generate_profile(&*binary, &counters, &options),
            (None, Some(contexts)) => symbolizer::generate::generate_line_profile_of_contexts(
                &*binary, &contexts, &options,
            ),
            (None, None) => return Ok(None),
        };
        let branches: u64 = parsed
            .contexts
            .values()
            .flat_map(|c| c.branches.values())
            .sum();
        let q = ProfileQuality {
            density: crate::profile_quality::profile_density(
                &profile,
                crate::profile_quality::DENSITY_CUTOFF_HOT,
            ),
            taken_branches_per_text_byte: crate::profile_quality::taken_branches_per_text_byte(
                branches, &binary,
            ),
            stale_sample_share: symbolizer::verify::stale_sample_share(&profile, |name| {
                binary
                    .probe_desc(symbolizer::guid::function_guid(name))
                    .map(|d| d.hash)
            }),
        };
        if let Ok(mut m) = self.quality.lock() {
            m.insert(id.clone(), (digest, q));
        }
        Ok(Some(q))
    }

    /// The density guidance of `id`'s last flush: its quality's density with the samples,
    /// rate and time of the same flush; `None` when the host cannot symbolize it.
    pub fn density_guidance(&self, id: &BuildId) -> Result<Option<DensityGuidance>, StoreError> {
        let Some(q) = self.quality(id)? else {
            return Ok(None);
        };
        let meta = self.meta(id)?;
        Ok(Some(density_guidance(
            q.density,
            meta.samples,
            meta.counted,
            meta.sampled_secs,
        )))
    }

    fn remember(&self, rendered: RenderedProfile) -> RenderedProfile {
        if let Ok(mut cache) = self.rendered.lock() {
            if cache.len() >= RENDER_CACHE_ENTRIES {
                cache.remove(0);
            }
            cache.push((rendered.etag.clone(), rendered.clone()));
        }
        rendered
    }

    fn cached(&self, etag: &str) -> Option<RenderedProfile> {
        let cache = self.rendered.lock().ok()?;
        cache
            .iter()
            .find(|(e, _)| e == etag)
            .map(|(_, r)| r.clone())
    }

    fn path(&self, id: &BuildId, ext: &str) -> PathBuf {
        self.settings
            .state_dir
            .join(format!("{}.{ext}", id.to_hex()))
    }

    /// The binary of `id`: `recorded_path` if its build id matches, else a debug directory
    /// file; with its debug file when it lacks names ([`ProfiledBinary::load_with_lookup`]).
    /// Kept while it is used, a miss too ([`crate::loaded_binaries`]).
    pub fn binary(&self, id: &BuildId, recorded_path: &str) -> Option<Arc<ProfiledBinary>> {
        self.binary_with_names(id, recorded_path).map(|(b, _)| b)
    }

    /// [`ProfileStore::binary`] with the report of where its names come from.
    pub fn binary_with_names(&self, id: &BuildId, recorded_path: &str) -> Option<NamedBinary> {
        if let Some(hit) = self.binaries.lock().ok()?.get(id, Instant::now()) {
            return hit;
        }
        let mut candidates = vec![PathBuf::from(recorded_path)];
        candidates.extend(build_id_candidates(
            self.settings.debug_files.debug_dirs(),
            id,
        ));
        let found = candidates.iter().filter(|p| p.is_file()).find_map(|p| {
            // Decoded as the served profile's contexts reach the code (exact answers, as
            // `convert`'s).
            let options = LoadOptions {
                lazy_code: true,
                release_decoded_pages: true,
                symbol_functions_without_dwarf: true,
                ..LoadOptions::default()
            };
            let (binary, lookup) =
                ProfiledBinary::load_with_lookup(p, &self.settings.debug_files, &options).ok()?;
            (binary.build_id() == Some(id)).then(|| {
                let names = NamesReport::of(&binary, lookup.as_ref());
                (Arc::new(binary), names)
            })
        });
        if let Ok(mut m) = self.binaries.lock() {
            m.insert(id.clone(), found.clone(), Instant::now());
        }
        found
    }

    /// Forgets the binaries (and failed lookups) not used for [`BINARY_IDLE`]; how many
    /// loaded binaries went. The daemon calls it periodically, so that an idle store holds
    /// no binary.
    pub fn forget_idle_binaries(&self) -> usize {
        self.binaries
            .lock()
            .map_or(0, |mut m| m.forget_idle(Instant::now()))
    }
}

/// True when `path` is a file whose GNU build id is `id` (read from its first bytes, where
/// a linked file keeps its notes), or one whose build id is not there to compare: after an
/// upgrade, the recorded path holds another build, which does not symbolize this one.
fn file_has_build_id(path: &Path, id: &BuildId) -> bool {
    symbolizer::elf_image::build_id_of_file_head(path).is_ok_and(|b| b.is_none_or(|b| b == *id))
}

fn read_bounded(path: &Path, id: &BuildId) -> Result<Vec<u8>, StoreError> {
    let meta = std::fs::metadata(path).map_err(|source| {
        if source.kind() == std::io::ErrorKind::NotFound {
            StoreError::NotFound(id.to_hex())
        } else {
            StoreError::Io {
                path: path.to_path_buf(),
                source,
            }
        }
    })?;
    if meta.len() > MAX_STATE_FILE_BYTES {
        return Err(StoreError::TooLarge {
            path: path.to_path_buf(),
            size: meta.len(),
            max: MAX_STATE_FILE_BYTES,
        });
    }
    std::fs::read(path).map_err(|source| StoreError::Io {
        path: path.to_path_buf(),
        source,
    })
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn mtime_secs(path: &Path) -> u64 {
    std::fs::metadata(path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store_with(files: &[(&str, &str)]) -> (ProfileStore, PathBuf) {
        let dir =
            std::env::temp_dir().join(format!("pgo-store-{}-{}", std::process::id(), files.len()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        for (n, t) in files {
            std::fs::write(dir.join(n), t).unwrap();
        }
        let s = ProfileStore::new(StoreSettings {
            state_dir: dir.clone(),
            debug_files: DebugFileFinder::default(),
            mode: "cpu_clock".into(),
            retained_secs: 3600,
        });
        (s, dir)
    }

    #[test]
    fn lists_state_files_and_serves_unsymbolized_without_binary() {
        let meta = r#"{"build_id":"abcd","path":"/nonexistent/bin","kind":"flat","samples":7}"#;
        let (s, dir) = store_with(&[
            ("abcd.json", meta),
            ("abcd.unsymbolized", "1\n10-20:7\n0\n"),
            ("README.json", "{}"),
        ]);
        let list = s.list().unwrap();
        assert_eq!(list.len(), 1);
        assert_eq!(list[0].build_id, "abcd");
        assert_eq!(list[0].samples, 7);
        assert_eq!(list[0].symbolization, Symbolization::BinaryNotFound);
        assert_eq!(list[0].has_pseudo_probes, None);
        let id = BuildId::from_hex("abcd").unwrap();
        let r = s.render(&id, ProfileFormat::Extbinary).unwrap();
        assert_eq!(r.format, ProfileFormat::Unsymbolized);
        assert_eq!(&**r.bytes, b"1\n10-20:7\n0\n");
        // md5("1\n10-20:7\n0\nUnsymbolized"), 32 hex digits, quoted.
        assert_eq!(r.etag.len(), 34);
        let missing = BuildId::from_hex("abce").unwrap();
        assert!(matches!(
            s.render(&missing, ProfileFormat::Text),
            Err(StoreError::NotFound(h)) if h == "abce"
        ));
        let _ = std::fs::remove_dir_all(dir);
    }

    /// A live source holding fixed aggregates; counts the times it is asked.
    #[derive(Default)]
    struct FakeWorkers {
        held: Mutex<Vec<(StateMeta, String)>>,
        asked: std::sync::atomic::AtomicUsize,
    }

    impl LiveSource for FakeWorkers {
        fn list(&self) -> Vec<StateMeta> {
            self.asked.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            self.held
                .lock()
                .unwrap()
                .iter()
                .map(|(m, _)| m.clone())
                .collect()
        }

        fn get(&self, id: &BuildId) -> Option<LiveAggregate> {
            self.asked.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let held = self.held.lock().unwrap();
            let (meta, text) = held.iter().find(|(m, _)| m.build_id == id.to_hex())?;
            Some(LiveAggregate {
                meta: meta.clone(),
                unsymbolized: Arc::new(text.clone().into_bytes()),
            })
        }
    }

    fn meta(hex: &str, samples: u64) -> StateMeta {
        StateMeta {
            build_id: hex.into(),
            path: "/nonexistent/bin".into(),
            kind: "flat".into(),
            samples,
            unwind_errors: BTreeMap::new(),
            stack_repairs: BTreeMap::new(),
            names: None,
            has_pseudo_probes: None,
            counted: 0,
            sampled_secs: 0,
        }
    }

    /// The workers' aggregate of a binary already holds its restored (flushed) counts: it
    /// replaces the state directory's files, never adds to them; binaries no worker holds
    /// are served from their files; snapshots are reused for `LIVE_SNAPSHOT_TTL`.
    #[test]
    fn live_aggregates_replace_their_flushed_files_and_the_rest_are_served_from_files() {
        let flushed = r#"{"build_id":"abcd","path":"/nonexistent/bin","kind":"flat","samples":7}"#;
        let only_file =
            r#"{"build_id":"beef","path":"/nonexistent/bin","kind":"flat","samples":3}"#;
        let (s, dir) = store_with(&[
            ("abcd.json", flushed),
            ("abcd.unsymbolized", "1\n10-20:7\n0\n"),
            ("beef.json", only_file),
            ("beef.unsymbolized", "1\n30-40:3\n0\n"),
        ]);
        let workers = Arc::new(FakeWorkers::default());
        // abcd: the 7 restored samples + 5 counted since (one range gained 5, one is new);
        // cafe: sampled since the start, not flushed yet.
        workers.held.lock().unwrap().extend([
            (meta("abcd", 12), "2\n10-20:10\n50-60:2\n0\n".to_string()),
            (
                StateMeta {
                    names: Some(NamesReport {
                        source: "address_only".into(),
                        ..NamesReport::default()
                    }),
                    has_pseudo_probes: Some(false),
                    counted: 0,
                    sampled_secs: 0,
                    ..meta("cafe", 4)
                },
                "1\n70-80:4\n0\n".to_string(),
            ),
        ]);
        let s = s.with_live(workers.clone());
        let list = s.list().unwrap();
        let got: Vec<(&str, u64, AggregateSource)> = list
            .iter()
            .map(|p| (p.build_id.as_str(), p.samples, p.freshness.source))
            .collect();
        assert_eq!(
            got,
            [
                ("abcd", 12, AggregateSource::Workers),
                ("cafe", 4, AggregateSource::Workers),
                ("beef", 3, AggregateSource::StateDir),
            ]
        );
        let now = unix_now();
        for p in &list {
            assert!(p.freshness.updated_unix_secs + 2 >= now, "{p:?}");
            assert!(p.freshness.age_secs <= 2, "{p:?}");
        }
        // Not flushed yet: no last flush. Listed as its worker reports it, without
        // loading the binary here.
        assert_eq!(list[1].window.last_flush_unix_secs, 0);
        assert_eq!(list[1].symbolization, Symbolization::AddressOnly);
        assert_eq!(list[1].has_pseudo_probes, Some(false));
        assert_eq!(list[1].names.as_ref().unwrap().source, "address_only");
        assert_eq!(list[0].symbolization, Symbolization::BinaryNotFound);
        assert!(list[0].window.last_flush_unix_secs > 0);

        let id = |hex: &str| BuildId::from_hex(hex).unwrap();
        let served = |hex: &str| {
            let r = s.render(&id(hex), ProfileFormat::Text).unwrap();
            assert_eq!(r.format, ProfileFormat::Unsymbolized);
            (
                String::from_utf8(r.bytes.to_vec()).unwrap(),
                r.freshness.source,
            )
        };
        // The workers' counts, not the file's added to them (10, not 17).
        let (abcd, source) = served("abcd");
        assert_eq!(abcd, "2\n10-20:10\n50-60:2\n0\n");
        assert_eq!(source, AggregateSource::Workers);
        let total = |text: &str| -> u64 {
            let parsed = read_unsymbolized(text, 0).unwrap();
            parsed
                .contexts
                .values()
                .flat_map(|c| c.ranges.values())
                .sum()
        };
        assert_eq!(total(&abcd), list[0].samples);
        assert_eq!(
            served("beef"),
            ("1\n30-40:3\n0\n".into(), AggregateSource::StateDir)
        );
        assert_eq!(served("cafe").0, "1\n70-80:4\n0\n");
        assert_eq!(s.summary(&id("cafe")).unwrap().samples, 4);
        assert!(matches!(
            s.render(&id("f00d"), ProfileFormat::Text),
            Err(StoreError::NotFound(_))
        ));

        // A burst within the TTL asks the workers no more; after it, they are asked again
        // and their new counts are served.
        let asked = workers.asked.load(std::sync::atomic::Ordering::SeqCst);
        for _ in 0..10 {
            s.list().unwrap();
            served("abcd");
        }
        assert_eq!(
            workers.asked.load(std::sync::atomic::Ordering::SeqCst),
            asked
        );
        workers.held.lock().unwrap()[0] = (meta("abcd", 13), "2\n10-20:11\n50-60:2\n0\n".into());
        std::thread::sleep(LIVE_SNAPSHOT_TTL);
        assert_eq!(s.list().unwrap()[0].samples, 13);
        assert_eq!(served("abcd").0, "2\n10-20:11\n50-60:2\n0\n");
        // A binary the workers dropped (evicted) is served from its last flush again.
        workers.held.lock().unwrap().remove(0);
        std::thread::sleep(LIVE_SNAPSHOT_TTL);
        let abcd = s.summary(&id("abcd")).unwrap();
        assert_eq!(
            (abcd.samples, abcd.freshness.source),
            (7, AggregateSource::StateDir)
        );
        assert_eq!(served("abcd").0, "1\n10-20:7\n0\n");
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn debug_file_candidates_follow_the_gdb_layout() {
        let id = BuildId::from_hex("abcdef01").unwrap();
        let dirs = [PathBuf::from("/usr/lib/debug"), PathBuf::from("/srv/bin")];
        assert_eq!(
            build_id_candidates(&dirs, &id),
            [
                PathBuf::from("/usr/lib/debug/.build-id/ab/cdef01.debug"),
                PathBuf::from("/usr/lib/debug/abcdef01"),
                PathBuf::from("/srv/bin/.build-id/ab/cdef01.debug"),
                PathBuf::from("/srv/bin/abcdef01"),
            ]
        );
    }
}
