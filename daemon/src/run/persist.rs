//! Restart safety: each binary's retained windows in one versioned, checksummed state file,
//! `<build-id>.state` in the state directory, written at every flush with
//! [`write_atomic`] (temporary + fsync + rename + directory fsync) and restored at start.
//!
//! Layout (little-endian; counts are u32, values u64):
//!
//! ```text
//! magic "PGOSTATE" | version u32 (= STATE_VERSION)
//! build id: len u8, bytes | kind u8 (0 flat, 1 probe_context, 2 line_context)
//! mode: len u8, utf8 (sampling mode) | path: len u32, utf8 | preferred base u64
//! window_secs u64 | windows u32, then per window:
//!   start_secs u64 | samples u64 | contexts u32, then per context (keys ascending):
//!     key len u32, key u64s | ranges u32, (begin, end, count)* | branches u32, (src, dst, count)*
//! blake3 of every byte above (32 bytes)
//! ```
//!
//! A file that is truncated, fails its checksum, has another magic or version, or names
//! another build id than its file name is renamed aside (`<name>.corrupt-<unix secs>`),
//! logged with the reason and counted (`pgo_agent_state_files_set_aside_total{reason}`);
//! the daemon then starts with no state for that binary instead of failing.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use collector::BuildId;
use unwinder::shard::ShardInput;
use unwinder::window::Window;
use unwinder::{ContextCounters, CounterKind, CounterSet};

use crate::atomic_file::write_atomic;

/// First bytes of every state file.
pub const STATE_MAGIC: [u8; 8] = *b"PGOSTATE";
/// The format version this build writes and reads.
pub const STATE_VERSION: u32 = 1;
/// Largest state file read back (bounds the allocation of a restore).
pub const MAX_STATE_BYTES: u64 = 1 << 30;
/// File name suffix of state files.
pub const STATE_SUFFIX: &str = ".state";
const CHECKSUM_BYTES: usize = 32;

/// One binary's persisted aggregate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PersistedState {
    /// The binary's build id (also the file name).
    pub build_id: BuildId,
    /// What the counters' keys mean.
    pub kind: CounterKind,
    /// Sampling mode that produced the counters (`cpu_clock`, `intel_lbr`, ...): counters
    /// of different modes are not merged.
    pub mode: String,
    /// The binary's mapped path (to load it again at start).
    pub path: String,
    /// The binary's preferred base (offsets in the unsymbolized profile are from it).
    pub preferred_base: u64,
    /// Window length the windows were cut with.
    pub window_secs: u64,
    /// The retained windows, oldest first (start times are Unix seconds).
    pub windows: Vec<Window>,
}

impl PersistedState {
    /// Samples in all windows.
    pub fn samples(&self) -> u64 {
        self.windows.iter().map(|w| w.samples).sum()
    }
}

/// Why a state file was not restored.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// Reading failed.
    #[error("{name}: {source}")]
    Io {
        /// File name.
        name: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// Larger than [`MAX_STATE_BYTES`].
    #[error("{name}: {len} bytes, more than the {MAX_STATE_BYTES} a state file may have")]
    TooLarge {
        /// File name.
        name: String,
        /// Its size.
        len: u64,
    },
    /// Not a state file.
    #[error("{name}: bad magic {found:02x?} (expected \"PGOSTATE\")")]
    Magic {
        /// File name.
        name: String,
        /// The first bytes.
        found: Vec<u8>,
    },
    /// Written by another format version.
    #[error("{name}: format version {found}, this build reads version {STATE_VERSION}")]
    Version {
        /// File name.
        name: String,
        /// The version in the file.
        found: u32,
    },
    /// The blake3 trailer does not match the contents.
    #[error("{name}: checksum mismatch (stored {stored}, computed {computed})")]
    Checksum {
        /// File name.
        name: String,
        /// Trailer, hex.
        stored: String,
        /// Hash of the contents, hex.
        computed: String,
    },
    /// The file ends inside a field.
    #[error("{name}: truncated at offset {offset} reading {what}")]
    Truncated {
        /// File name.
        name: String,
        /// Where.
        offset: usize,
        /// Which field.
        what: &'static str,
    },
    /// A field holds an impossible value (checksum valid, so written by a broken build).
    #[error("{name}: offset {offset}: {what}")]
    Malformed {
        /// File name.
        name: String,
        /// Where.
        offset: usize,
        /// What is wrong.
        what: String,
    },
    /// The build id inside differs from the file name's.
    #[error("{name}: holds build id {found}")]
    BuildId {
        /// File name.
        name: String,
        /// The build id inside.
        found: String,
    },
}

impl StateError {
    /// The metric label of the reason (a fixed set).
    pub fn reason(&self) -> &'static str {
        match self {
            StateError::Io { .. } => "io",
            StateError::TooLarge { .. } => "too_large",
            StateError::Magic { .. } => "magic",
            StateError::Version { .. } => "version",
            StateError::Checksum { .. } => "checksum",
            StateError::Truncated { .. } => "truncated",
            StateError::Malformed { .. } => "malformed",
            StateError::BuildId { .. } => "build_id",
        }
    }
}

fn kind_byte(kind: CounterKind) -> u8 {
    match kind {
        CounterKind::Flat => 0,
        CounterKind::ProbeContext => 1,
        CounterKind::LineContext => 2,
    }
}

/// What a state file says about its binary, borrowed (see [`write_state_to`]).
#[derive(Clone, Copy, Debug)]
pub struct StateHeader<'a> {
    /// Build id.
    pub build_id: &'a BuildId,
    /// Counter kind.
    pub kind: CounterKind,
    /// Sampling mode label ([`mode_label`]).
    pub mode: &'a str,
    /// Mapped path.
    pub path: &'a str,
    /// Preferred base.
    pub preferred_base: u64,
    /// Window length.
    pub window_secs: u64,
}

/// The mode label stored in state files: counters of branch-stack modes (intel_lbr,
/// amd_branch) mean the same thing; leading-IP (cpu_clock) counters do not.
pub fn mode_label(input: ShardInput) -> &'static str {
    match input {
        ShardInput::Lbr(_) => "branch_stack",
        ShardInput::LeadingIp { .. } => "leading_ip",
    }
}

/// Unix time in seconds (the daemon's window clock: windows survive restarts).
pub fn unix_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// An [`Instant`](std::time::Instant) at the Unix epoch, so that `elapsed()` is Unix time
/// on the monotonic clock (an Instant may lie before boot: it is a signed timespec).
/// Falls back to `now` if the platform cannot represent it.
pub fn unix_epoch_instant(now: std::time::Instant) -> std::time::Instant {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    now.checked_sub(since).unwrap_or(now)
}

/// Feeds the checksum and the output at once.
struct Hashing<'a> {
    out: &'a mut dyn Write,
    hasher: blake3::Hasher,
}

impl Hashing<'_> {
    fn put(&mut self, b: &[u8]) -> std::io::Result<()> {
        self.hasher.update(b);
        self.out.write_all(b)
    }

    fn u32(&mut self, v: usize) -> std::io::Result<()> {
        let v = u32::try_from(v).map_err(|_| std::io::Error::other("count over u32"))?;
        self.put(&v.to_le_bytes())
    }

    fn u64(&mut self, v: u64) -> std::io::Result<()> {
        self.put(&v.to_le_bytes())
    }

    fn triples(&mut self, m: &BTreeMap<(u64, u64), u64>) -> std::io::Result<()> {
        self.u32(m.len())?;
        for (&(a, b), &n) in m {
            for v in [a, b, n] {
                self.u64(v)?;
            }
        }
        Ok(())
    }
}

/// Streams a state file (header, `windows`, checksum) to `out` (contexts in ascending
/// key order, so equal states give equal bytes).
pub fn write_state_to(
    out: &mut dyn Write,
    h: &StateHeader<'_>,
    windows: &[&Window],
) -> std::io::Result<()> {
    let mut w = Hashing {
        out,
        hasher: blake3::Hasher::new(),
    };
    w.put(&STATE_MAGIC)?;
    w.put(&STATE_VERSION.to_le_bytes())?;
    let id = &h.build_id.0[..h.build_id.0.len().min(255)];
    w.put(&[id.len() as u8])?;
    w.put(id)?;
    w.put(&[kind_byte(h.kind)])?;
    let mode = &h.mode.as_bytes()[..h.mode.len().min(255)];
    w.put(&[mode.len() as u8])?;
    w.put(mode)?;
    w.u32(h.path.len())?;
    w.put(h.path.as_bytes())?;
    w.u64(h.preferred_base)?;
    w.u64(h.window_secs)?;
    w.u32(windows.len())?;
    for win in windows {
        w.u64(win.start_secs)?;
        w.u64(win.samples)?;
        let mut keys: Vec<_> = win.counters.contexts.iter().collect();
        keys.sort_by(|a, b| a.0.cmp(b.0));
        w.u32(keys.len())?;
        for (key, c) in keys {
            w.u32(key.len())?;
            for &v in key {
                w.u64(v)?;
            }
            w.triples(&c.ranges)?;
            w.triples(&c.branches)?;
        }
    }
    let hash = w.hasher.finalize();
    w.out.write_all(hash.as_bytes())
}

impl PersistedState {
    /// The header of this state.
    pub fn header(&self) -> StateHeader<'_> {
        StateHeader {
            build_id: &self.build_id,
            kind: self.kind,
            mode: &self.mode,
            path: &self.path,
            preferred_base: self.preferred_base,
            window_secs: self.window_secs,
        }
    }
}

/// The bytes of `state`'s file.
pub fn encode_state(state: &PersistedState) -> Vec<u8> {
    let mut out = Vec::new();
    let windows: Vec<&Window> = state.windows.iter().collect();
    write_state_to(&mut out, &state.header(), &windows).expect("writing to a Vec cannot fail");
    out
}

struct Cursor<'a> {
    name: &'a str,
    bytes: &'a [u8],
    pos: usize,
}

impl Cursor<'_> {
    fn take(&mut self, n: usize, what: &'static str) -> Result<&[u8], StateError> {
        if self.bytes.len() - self.pos < n {
            return Err(StateError::Truncated {
                name: self.name.to_string(),
                offset: self.pos,
                what,
            });
        }
        let s = &self.bytes[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn u8(&mut self, what: &'static str) -> Result<u8, StateError> {
        Ok(self.take(1, what)?[0])
    }

    fn u32(&mut self, what: &'static str) -> Result<u32, StateError> {
        let b = self.take(4, what)?;
        Ok(u32::from_le_bytes(b.try_into().expect("4 bytes")))
    }

    fn u64(&mut self, what: &'static str) -> Result<u64, StateError> {
        let b = self.take(8, what)?;
        Ok(u64::from_le_bytes(b.try_into().expect("8 bytes")))
    }

    /// A count of items of at least `item_bytes` each: never more than the bytes left
    /// allow, so a hostile count cannot drive a large allocation.
    fn count(&mut self, item_bytes: usize, what: &'static str) -> Result<usize, StateError> {
        let at = self.pos;
        let n = self.u32(what)? as usize;
        if n.saturating_mul(item_bytes) > self.bytes.len() - self.pos {
            return Err(StateError::Malformed {
                name: self.name.to_string(),
                offset: at,
                what: format!(
                    "{what} = {n} exceeds the {} bytes left",
                    self.bytes.len() - self.pos
                ),
            });
        }
        Ok(n)
    }

    fn string(&mut self, len: usize, what: &'static str) -> Result<String, StateError> {
        let at = self.pos;
        let b = self.take(len, what)?;
        String::from_utf8(b.to_vec()).map_err(|_| StateError::Malformed {
            name: self.name.to_string(),
            offset: at,
            what: format!("{what} is not UTF-8"),
        })
    }

    fn triples(&mut self, what: &'static str) -> Result<BTreeMap<(u64, u64), u64>, StateError> {
        let n = self.count(24, what)?;
        let mut m = BTreeMap::new();
        for _ in 0..n {
            let (a, b, c) = (self.u64(what)?, self.u64(what)?, self.u64(what)?);
            m.insert((a, b), c);
        }
        Ok(m)
    }
}

/// Parses a state file's bytes; `name` names it in errors. Checks the magic, the
/// version, then the checksum, then every field.
pub fn decode_state(bytes: &[u8], name: &str) -> Result<PersistedState, StateError> {
    let header = STATE_MAGIC.len() + 4;
    if bytes.len() < STATE_MAGIC.len() || bytes[..STATE_MAGIC.len()] != STATE_MAGIC {
        return Err(StateError::Magic {
            name: name.to_string(),
            found: bytes[..bytes.len().min(STATE_MAGIC.len())].to_vec(),
        });
    }
    let truncated = |what| StateError::Truncated {
        name: name.to_string(),
        offset: bytes.len(),
        what,
    };
    let version = bytes
        .get(STATE_MAGIC.len()..header)
        .map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")))
        .ok_or_else(|| truncated("version"))?;
    if version != STATE_VERSION {
        return Err(StateError::Version {
            name: name.to_string(),
            found: version,
        });
    }
    if bytes.len() < header + CHECKSUM_BYTES {
        return Err(truncated("checksum"));
    }
    let (body, stored) = bytes.split_at(bytes.len() - CHECKSUM_BYTES);
    let computed = blake3::hash(body);
    if computed.as_bytes() != stored {
        return Err(StateError::Checksum {
            name: name.to_string(),
            stored: stored.iter().map(|b| format!("{b:02x}")).collect(),
            computed: computed.to_hex().to_string(),
        });
    }
    let mut c = Cursor {
        name,
        bytes: body,
        pos: header,
    };
    let id_len = c.u8("build id length")? as usize;
    let build_id = BuildId(c.take(id_len, "build id")?.to_vec());
    let at = c.pos;
    let kind = match c.u8("counter kind")? {
        0 => CounterKind::Flat,
        1 => CounterKind::ProbeContext,
        2 => CounterKind::LineContext,
        k => {
            return Err(StateError::Malformed {
                name: name.to_string(),
                offset: at,
                what: format!("unknown counter kind {k}"),
            })
        }
    };
    let mode_len = c.u8("mode length")? as usize;
    let mode = c.string(mode_len, "mode")?;
    let path_len = c.count(1, "path length")?;
    let path = c.string(path_len, "path")?;
    let preferred_base = c.u64("preferred base")?;
    let window_secs = c.u64("window length")?;
    let n_windows = c.count(20, "window count")?;
    let mut windows = Vec::with_capacity(n_windows);
    for _ in 0..n_windows {
        let start_secs = c.u64("window start")?;
        let samples = c.u64("window samples")?;
        let n_contexts = c.count(12, "context count")?;
        let mut counters = CounterSet::new(kind);
        for _ in 0..n_contexts {
            let key_len = c.count(8, "context key length")?;
            let mut key = Vec::with_capacity(key_len);
            for _ in 0..key_len {
                key.push(c.u64("context key")?);
            }
            let ranges = c.triples("range count")?;
            let branches = c.triples("branch count")?;
            counters
                .contexts
                .insert(key, ContextCounters { ranges, branches });
        }
        windows.push(Window {
            start_secs,
            counters,
            samples,
        });
    }
    if c.pos != c.bytes.len() {
        return Err(StateError::Malformed {
            name: name.to_string(),
            offset: c.pos,
            what: format!("{} bytes after the last window", c.bytes.len() - c.pos),
        });
    }
    Ok(PersistedState {
        build_id,
        kind,
        mode,
        path,
        preferred_base,
        window_secs,
        windows,
    })
}

/// `<dir>/<build-id>.state`.
pub fn state_path(dir: &Path, id: &BuildId) -> PathBuf {
    dir.join(format!("{}{STATE_SUFFIX}", id.to_hex()))
}

/// Writes the state file of `h` in `dir`, atomically (the previous file stays intact when
/// the write fails, e.g. on a full disk).
pub fn write_state(dir: &Path, h: &StateHeader<'_>, windows: &[&Window]) -> anyhow::Result<()> {
    write_atomic(&state_path(dir, h.build_id), |out| {
        write_state_to(out, h, windows)?;
        Ok(())
    })
}

/// Reads and checks one state file (its name must be `<build-id>.state`).
pub fn read_state(path: &Path) -> Result<PersistedState, StateError> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let io = |source| StateError::Io {
        name: name.clone(),
        source,
    };
    let len = std::fs::metadata(path).map_err(io)?.len();
    if len > MAX_STATE_BYTES {
        return Err(StateError::TooLarge { name, len });
    }
    let bytes = std::fs::read(path).map_err(io)?;
    let state = decode_state(&bytes, &name)?;
    let expected = name.strip_suffix(STATE_SUFFIX).unwrap_or(&name);
    if state.build_id.to_hex() != expected {
        return Err(StateError::BuildId {
            name,
            found: state.build_id.to_hex(),
        });
    }
    Ok(state)
}

/// Renames `path` aside to `<name>.corrupt-<unix secs>`; returns the new path.
pub fn set_aside(path: &Path) -> std::io::Result<PathBuf> {
    let now = unix_secs();
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let to = path.with_file_name(format!("{name}.corrupt-{now}"));
    std::fs::rename(path, &to)?;
    Ok(to)
}

/// What [`restore_dir`] found.
#[derive(Debug, Default)]
pub struct RestoreReport {
    /// The valid states of the sampling mode in use.
    pub states: Vec<PersistedState>,
    /// Files set aside: new path and reason.
    pub set_aside: Vec<(PathBuf, String)>,
    /// Temporaries of interrupted writes that were removed.
    pub temporaries_removed: usize,
}

/// Reads every `*.state` file of `dir`. Invalid ones, and those of another sampling mode
/// than `mode` (their counters mean something else), are set aside, logged and counted;
/// temporaries left by a write that was interrupted (SIGKILL, power loss) are removed.
pub fn restore_dir(dir: &Path, mode: &str) -> RestoreReport {
    let mut report = RestoreReport::default();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return report;
    };
    let mut paths: Vec<PathBuf> = entries.filter_map(|e| Some(e.ok()?.path())).collect();
    paths.sort();
    for path in paths {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if name.starts_with('.') && name.ends_with(".tmp") {
            if std::fs::remove_file(&path).is_ok() {
                report.temporaries_removed += 1;
            }
            continue;
        }
        if !name.ends_with(STATE_SUFFIX) {
            continue;
        }
        let (reason, message) = match read_state(&path) {
            Ok(s) if s.mode == mode => {
                report.states.push(s);
                continue;
            }
            Ok(s) => (
                "mode",
                format!("{name}: written in sampling mode {}, now {mode}", s.mode),
            ),
            Err(e) => (e.reason(), e.to_string()),
        };
        match set_aside(&path) {
            Ok(to) => {
                tracing::warn!(
                    "state file set aside ({reason}): {message}; moved to {}",
                    to.display()
                );
                report.set_aside.push((to, reason.to_string()));
            }
            Err(e) => tracing::warn!(
                "state file not restored ({reason}): {message}; could not move it aside: {e}"
            ),
        }
        service::metrics::count_state_file_set_aside(reason);
    }
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample_state() -> PersistedState {
        let mut c = CounterSet::new(CounterKind::ProbeContext);
        c.context_mut(&[0x10, 0x20])
            .ranges
            .insert((0x1004, 0x1008), 7);
        c.context_mut(&[]).branches.insert((0x1008, 0x1000), 3);
        PersistedState {
            build_id: BuildId(vec![0xab, 0xcd]),
            kind: CounterKind::ProbeContext,
            mode: "cpu_clock".into(),
            path: "/bin/p".into(),
            preferred_base: 0x1000,
            window_secs: 600,
            windows: vec![Window {
                start_secs: 1_800_000_000,
                counters: c,
                samples: 9,
            }],
        }
    }

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("pgo-persist-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn the_epoch_instant_counts_unix_seconds() {
        let zero = unix_epoch_instant(std::time::Instant::now());
        let (a, b) = (zero.elapsed().as_secs(), unix_secs());
        assert!(a.abs_diff(b) <= 1, "{a} {b}");
        assert!(b > 1_700_000_000);
    }

    #[test]
    fn layout_is_exact_and_round_trips() {
        let s = sample_state();
        let bytes = encode_state(&s);
        assert_eq!(&bytes[..12], b"PGOSTATE\x01\x00\x00\x00");
        // build id, kind, mode.
        assert_eq!(&bytes[12..16], &[2, 0xab, 0xcd, 1]);
        assert_eq!(&bytes[16..26], b"\x09cpu_clock");
        assert_eq!(&bytes[26..30], &6u32.to_le_bytes());
        // Header 30 + path 6 + base 8 + window_secs 8 + count 4; window 8 + 8 + 4; two
        // contexts: [] (4 + 4 + 4 + 24) and [0x10,0x20] (4 + 16 + 4 + 24 + 4); checksum.
        assert_eq!(bytes.len(), 56 + 20 + 36 + 52 + 32);
        assert_eq!(
            &bytes[bytes.len() - 32..],
            blake3::hash(&bytes[..bytes.len() - 32]).as_bytes()
        );
        assert_eq!(decode_state(&bytes, "x").unwrap(), s);
        assert_eq!(encode_state(&decode_state(&bytes, "x").unwrap()), bytes);
    }

    #[test]
    fn every_damage_is_an_error_with_its_reason() {
        let bytes = encode_state(&sample_state());
        let reason = |b: &[u8]| decode_state(b, "t").unwrap_err().reason();
        for cut in [0, 5, 11, 12, 40, bytes.len() - 1] {
            let r = reason(&bytes[..cut]);
            assert!(
                ["magic", "truncated", "checksum"].contains(&r),
                "{cut}: {r}"
            );
        }
        let mut flipped = bytes.clone();
        flipped[60] ^= 1;
        assert_eq!(reason(&flipped), "checksum");
        let mut v2 = bytes.clone();
        v2[8] = 2;
        assert_eq!(reason(&v2), "version");
        let mut other = bytes.clone();
        other[0] = b'X';
        assert_eq!(reason(&other), "magic");
        // A huge window count with a valid checksum does not allocate.
        let mut body = bytes[..52].to_vec();
        body.extend_from_slice(&u32::MAX.to_le_bytes());
        let h = blake3::hash(&body);
        body.extend_from_slice(h.as_bytes());
        assert_eq!(reason(&body), "malformed");
    }

    #[test]
    fn restore_sets_aside_bad_files_and_removes_temporaries() {
        let d = scratch("restore");
        let good = sample_state();
        let windows: Vec<&Window> = good.windows.iter().collect();
        write_state(&d, &good.header(), &windows).unwrap();
        std::fs::write(d.join("ffff.state"), b"PGOSTATE\x07\x00\x00\x00rest").unwrap();
        std::fs::write(d.join("0102.state"), encode_state(&good)).unwrap();
        std::fs::write(d.join(".abcd.state.tmp"), b"half").unwrap();
        let r = restore_dir(&d, "cpu_clock");
        assert_eq!(r.states, vec![good.clone()]);
        assert_eq!(r.temporaries_removed, 1);
        let mut reasons: Vec<&str> = r.set_aside.iter().map(|x| x.1.as_str()).collect();
        reasons.sort();
        assert_eq!(reasons, vec!["build_id", "version"]);
        for (p, _) in &r.set_aside {
            assert!(p.to_string_lossy().contains(".state.corrupt-"), "{p:?}");
            assert!(p.exists());
        }
        // Another sampling mode: set aside too.
        let r = restore_dir(&d, "intel_lbr");
        assert!(r.states.is_empty());
        assert_eq!(r.set_aside.len(), 1);
        assert_eq!(r.set_aside[0].1, "mode");
        let _ = std::fs::remove_dir_all(d);
    }
}
