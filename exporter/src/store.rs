//! [`ProfileStore`]: the HTTP read model over the daemon's state directory.
//!
//! The daemon's workers write, per build id, `<hex>.unsymbolized` (llvm-profgen's
//! unsymbolized profile, offsets from the preferred base) and `<hex>.json` (path, counter
//! kind, sample counts), each by temp file + rename; the store only reads those files, so it
//! never blocks a worker. Symbolization happens here, on request: the binary is found by
//! build id (the recorded path, then the configured debug directories), loaded once and
//! cached; rendered profiles are cached by ETag (MD5 of the unsymbolized bytes + format).
//! A binary that cannot be found, or line (DWARF) contexts, which the state file keeps as
//! symbolized strings, are served as the unsymbolized profile and listed as such.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::UNIX_EPOCH;

use collector::BuildId;
use md5::{Digest, Md5};
use serde::{Deserialize, Serialize};
use symbolizer::debug_file::{build_id_candidates, DebugFileFinder};
use symbolizer::generate::{generate_profile, GenerateOptions};
use symbolizer::{LoadOptions, ProfiledBinary};

use crate::format::unsymbolized::read_unsymbolized;

/// Largest state file the store reads (bytes): a bound on what a request can allocate.
pub const MAX_STATE_FILE_BYTES: u64 = 512 << 20;
/// Rendered profiles kept in the cache.
pub const RENDER_CACHE_ENTRIES: usize = 32;

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
#[derive(Clone, Debug, Deserialize)]
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
}

/// Whether the host can symbolize a profile, and why not.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Symbolization {
    /// The binary was found and loaded: text and extbinary are served.
    Symbolized,
    /// No binary with this build id at the recorded path or in the debug directories.
    BinaryNotFound,
    /// Line (DWARF) contexts are stored symbolized; only the unsymbolized profile is served.
    LineContexts,
    /// The binary was found, but neither it nor a debug file names its code (stripped, no
    /// debug file found): the unsymbolized profile (addresses) is served;
    /// [`ProfileSummary::names`] says what was tried.
    AddressOnly,
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
}

/// The window range of a served aggregate: all retained windows up to the last flush.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct WindowRange {
    /// Seconds covered at most (`window_secs * retained_windows`).
    pub retained_secs: u64,
    /// Unix time of the last flush (file modification time).
    pub last_flush_unix_secs: u64,
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
    /// pprof `profile.proto` (uncompressed; see [`crate::format::pprof`]).
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
    /// Unix time of the aggregate's last flush.
    pub last_flush_unix_secs: u64,
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

/// See the module docs.
pub struct ProfileStore {
    settings: StoreSettings,
    binaries: Mutex<HashMap<BuildId, Option<NamedBinary>>>,
    rendered: Mutex<Vec<(String, RenderedProfile)>>,
    quality: Mutex<HashMap<BuildId, (Vec<u8>, ProfileQuality)>>,
}

impl ProfileStore {
    /// A store over `settings.state_dir`.
    pub fn new(settings: StoreSettings) -> ProfileStore {
        ProfileStore {
            settings,
            binaries: Mutex::new(HashMap::new()),
            rendered: Mutex::new(Vec::new()),
            quality: Mutex::new(HashMap::new()),
        }
    }

    /// The settings.
    pub fn settings(&self) -> &StoreSettings {
        &self.settings
    }

    /// Every aggregate in the state directory, most samples first.
    pub fn list(&self) -> Result<Vec<ProfileSummary>, StoreError> {
        let dir = &self.settings.state_dir;
        let rd = std::fs::read_dir(dir).map_err(|source| StoreError::Io {
            path: dir.clone(),
            source,
        })?;
        let mut out = Vec::new();
        for entry in rd.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(hex) = name.strip_suffix(".json") else {
                continue;
            };
            let Some(id) = BuildId::from_hex(hex).filter(|i| i.to_hex() == hex) else {
                continue;
            };
            let Ok(meta) = self.meta(&id) else { continue };
            out.push(self.summarize(&id, meta));
        }
        out.sort_by(|a, b| b.samples.cmp(&a.samples).then(a.build_id.cmp(&b.build_id)));
        Ok(out)
    }

    /// The metadata of `id`.
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
        let meta = self.meta(id)?;
        Ok(self.summarize(id, meta))
    }

    fn summarize(&self, id: &BuildId, meta: StateMeta) -> ProfileSummary {
        let found = self.binary_with_names(id, &meta.path);
        // A binary without names is reported as such whatever its counter kind: its line
        // contexts could not be named either.
        let symbolization = match (&found, meta.kind.as_str()) {
            (Some((b, _)), _) if !b.name_source().has_names() => Symbolization::AddressOnly,
            (_, "line_context") => Symbolization::LineContexts,
            (Some(_), _) => Symbolization::Symbolized,
            (None, _) => Symbolization::BinaryNotFound,
        };
        let (binary, names) = match found {
            Some((b, n)) => (Some(b), Some(n)),
            None => (None, None),
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
            has_pseudo_probes: binary.map(|b| b.has_pseudo_probes()),
            symbolization,
            names,
            unwind_errors: meta.unwind_errors,
        }
    }

    /// The raw unsymbolized aggregate of `id`.
    pub fn unsymbolized_bytes(&self, id: &BuildId) -> Result<Vec<u8>, StoreError> {
        read_bounded(&self.path(id, "unsymbolized"), id)
    }

    /// Renders `id` as `format` (or as the unsymbolized profile when the host cannot
    /// symbolize it; [`RenderedProfile::format`] says which).
    pub fn render(
        &self,
        id: &BuildId,
        format: ProfileFormat,
    ) -> Result<RenderedProfile, StoreError> {
        let raw = self.unsymbolized_bytes(id)?;
        let last_flush_unix_secs = mtime_secs(&self.path(id, "unsymbolized"));
        let digest = |f: ProfileFormat| {
            let mut h = Md5::new();
            h.update(&raw);
            h.update(format!("{f:?}").as_bytes());
            let d = h.finalize();
            format!(
                "\"{}\"",
                d.iter().map(|b| format!("{b:02x}")).collect::<String>()
            )
        };
        let unsymbolized_etag = digest(ProfileFormat::Unsymbolized);
        let etag = digest(format);
        let unsymbolized = |raw: Vec<u8>| RenderedProfile {
            format: ProfileFormat::Unsymbolized,
            etag: unsymbolized_etag.clone(),
            bytes: Arc::new(raw),
            last_flush_unix_secs,
        };
        if format == ProfileFormat::Unsymbolized {
            return Ok(unsymbolized(raw));
        }
        if let Some(hit) = self.cached(&etag) {
            return Ok(hit);
        }
        let meta = self.meta(id)?;
        let Some(binary) = self
            .binary(id, &meta.path)
            .filter(|b| b.name_source().has_names())
        else {
            return Ok(unsymbolized(raw));
        };
        let text = String::from_utf8_lossy(&raw);
        let base = binary.preferred_base();
        let parsed = read_unsymbolized(&text, base).map_err(|e| StoreError::Invalid {
            path: self.path(id, "unsymbolized"),
            reason: e.to_string(),
        })?;
        let counters = parsed.to_counter_set(base);
        if format == ProfileFormat::Pprof {
            // Line contexts are stored as symbolized strings: their counters go context-less.
            let flat = |p: &crate::format::unsymbolized::UnsymbolizedProfile| {
                let mut all = unwinder::ContextCounters::default();
                for c in p.contexts.values() {
                    all.merge(c);
                }
                all
            };
            let pprof = match &counters {
                Some(set) => crate::format::pprof::build(
                    &binary,
                    set.contexts.iter().map(|(k, c)| (k.as_slice(), c)),
                ),
                None => {
                    let all = flat(&parsed);
                    crate::format::pprof::build(&binary, [(&[][..], &all)])
                }
            };
            return Ok(self.remember(RenderedProfile {
                format,
                bytes: Arc::new(crate::format::pprof::to_bytes(&pprof)),
                etag,
                last_flush_unix_secs,
            }));
        }
        let Some(counters) = counters else {
            return Ok(unsymbolized(raw));
        };
        let profile = generate_profile(&*binary, &counters, &GenerateOptions::default());
        let mut bytes = Vec::new();
        let written = match format {
            ProfileFormat::Text => crate::format::llvm_text::write(&profile, &mut bytes),
            _ => crate::format::extbinary::write(&profile, &mut bytes),
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
        }))
    }

    /// The SVG flame graph of `id` (frames named with the binary when found, else hex).
    pub fn flamegraph(&self, id: &BuildId) -> Result<Vec<u8>, StoreError> {
        let raw = self.unsymbolized_bytes(id)?;
        let meta = self.meta(id)?;
        // An address-only binary names nothing: frames in hex, as without a binary.
        let binary = self
            .binary(id, &meta.path)
            .filter(|b| b.name_source().has_names());
        let base = binary.as_ref().map_or(0, |b| b.preferred_base());
        let parsed = read_unsymbolized(&String::from_utf8_lossy(&raw), base).map_err(|e| {
            StoreError::Invalid {
                path: self.path(id, "unsymbolized"),
                reason: e.to_string(),
            }
        })?;
        let lines = crate::format::flamegraph::collapsed(&parsed, binary.as_deref(), base);
        let title = format!("{} ({})", meta.path, id.to_hex());
        let mut svg = Vec::new();
        crate::format::flamegraph::write_svg(&lines, &title, &mut svg).map_err(|e| {
            StoreError::Render {
                build_id: id.to_hex(),
                reason: e.to_string(),
            }
        })?;
        Ok(svg)
    }

    /// The quality figures of `id`, recomputed only when its aggregate changed; `None`
    /// when the host cannot symbolize it.
    pub fn quality(&self, id: &BuildId) -> Result<Option<ProfileQuality>, StoreError> {
        let raw = self.unsymbolized_bytes(id)?;
        let digest = Md5::digest(&raw).to_vec();
        if let Some((d, q)) = self.quality.lock().ok().and_then(|m| m.get(id).cloned()) {
            if d == digest {
                return Ok(Some(q));
            }
        }
        let meta = self.meta(id)?;
        let Some(binary) = self.binary(id, &meta.path) else {
            return Ok(None);
        };
        let base = binary.preferred_base();
        let parsed = read_unsymbolized(&String::from_utf8_lossy(&raw), base).map_err(|e| {
            StoreError::Invalid {
                path: self.path(id, "unsymbolized"),
                reason: e.to_string(),
            }
        })?;
        let Some(counters) = parsed.to_counter_set(base) else {
            return Ok(None);
        };
        let profile = generate_profile(&*binary, &counters, &GenerateOptions::default());
        let q = ProfileQuality {
            density: crate::profile_quality::profile_density(
                &profile,
                crate::profile_quality::DENSITY_CUTOFF_HOT,
            ),
            taken_branches_per_text_byte: crate::profile_quality::taken_branches_per_text_byte(
                &counters, &binary,
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
    /// Looked up once per build id (a miss is remembered too).
    pub fn binary(&self, id: &BuildId, recorded_path: &str) -> Option<Arc<ProfiledBinary>> {
        self.binary_with_names(id, recorded_path).map(|(b, _)| b)
    }

    /// [`ProfileStore::binary`] with the report of where its names come from.
    pub fn binary_with_names(&self, id: &BuildId, recorded_path: &str) -> Option<NamedBinary> {
        if let Some(hit) = self.binaries.lock().ok()?.get(id) {
            return hit.clone();
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
            m.insert(id.clone(), found.clone());
        }
        found
    }
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
