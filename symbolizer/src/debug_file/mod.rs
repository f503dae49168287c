//! Finding a stripped binary's debug file, the way gdb 13, perf and systemd-coredump do:
//! by build id in the debug directories, by the binary's `.gnu_debuglink`, then from a
//! remote source (a debuginfod server; the daemon implements [`RemoteDebugSource`]).
//!
//! [`DebugFileFinder::find`] searches, in order:
//! 1. for each debug directory `D`: `D/.build-id/ab/cdef….debug`, then `D/<full hex>`
//!    ([`build_id_candidates`]);
//! 2. the `.gnu_debuglink` name `NAME`: `EXECDIR/NAME`, `EXECDIR/.debug/NAME`, then for each
//!    `D`: `D/EXECDIR/NAME` ([`debuglink_candidates`]); when the binary is a symbolic link
//!    into another directory, the same three forms with that directory;
//! 3. the remote source.
//!
//! A candidate counts when it is a regular file other than the binary itself, an ELF file
//! with the binary's build id (a debuglink candidate may lack one, but its CRC-32 must equal
//! the one in `.gnu_debuglink`) and with symbols or DWARF ([`has_symbols_or_dwarf`]). Every
//! rejected candidate leaves a line in [`DebugLookup::tried`].
//!
//! The finder keeps no memory of past lookups: a miss turns into a hit when a debug package
//! is installed, and a hit from the debuginfod cache can be evicted. Callers that load the
//! debug file keep what they loaded per build id (as the HTTP store keeps its binaries).

mod build_id_dirs;
mod debuglink;
mod elf_facts;
#[cfg(test)]
mod tests;

use std::fmt;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use collector::BuildId;

pub use build_id_dirs::build_id_candidates;
pub use debuglink::{debuglink_candidates, file_crc32, parse_debuglink};

use elf_facts::elf_facts;

/// How a debug file was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DebugRoute {
    /// By build id in a debug directory (`.build-id/ab/cdef….debug` or the flat `<hex>`).
    DebugDir,
    /// By the binary's `.gnu_debuglink` name and CRC.
    GnuDebuglink,
    /// From the remote source (debuginfod).
    Debuginfod,
}

impl fmt::Display for DebugRoute {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DebugRoute::DebugDir => "debug_dirs",
            DebugRoute::GnuDebuglink => "gnu_debuglink",
            DebugRoute::Debuginfod => "debuginfod",
        })
    }
}

/// A debug file that passed the checks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DebugFile {
    /// Where it is.
    pub path: PathBuf,
    /// How it was found.
    pub route: DebugRoute,
}

/// The outcome of one [`DebugFileFinder::find`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DebugLookup {
    /// The debug file, when one was found.
    pub found: Option<DebugFile>,
    /// One line per rejected candidate, in search order, each saying why
    /// (`/usr/lib/debug/.build-id/ab/cdef.debug: not found`).
    pub tried: Vec<String>,
}

/// Where debug files come from when no local candidate has them (a debuginfod client).
pub trait RemoteDebugSource: Send + Sync {
    /// Fetches (or finds cached) the debug file of `id`; Ok(None) when no server has it.
    fn fetch_debuginfo(&self, id: &BuildId) -> Result<Option<PathBuf>, String>;
    /// Names the source in [`DebugLookup::tried`] lines (`debuginfod http://h:8002`).
    fn describe(&self) -> String;
}

/// Searches debug directories, `.gnu_debuglink` and an optional remote source for a
/// binary's debug file (see the [module documentation](self)).
#[derive(Clone, Default)]
pub struct DebugFileFinder {
    debug_dirs: Vec<PathBuf>,
    remote: Option<Arc<dyn RemoteDebugSource>>,
}

impl fmt::Debug for DebugFileFinder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DebugFileFinder")
            .field("debug_dirs", &self.debug_dirs)
            .field("remote", &self.remote.as_ref().map(|r| r.describe()))
            .finish()
    }
}

/// What a candidate must match besides having symbols or DWARF.
#[derive(Clone, Copy)]
enum Expect<'a> {
    /// A build-id candidate: this build id.
    BuildId(&'a BuildId),
    /// A debuglink candidate: this CRC, and this build id when it has one.
    Link { crc: u32, id: &'a BuildId },
}

impl DebugFileFinder {
    /// A finder over `debug_dirs` (`/usr/lib/debug` is gdb's default), without remote source.
    pub fn new(debug_dirs: Vec<PathBuf>) -> DebugFileFinder {
        DebugFileFinder {
            debug_dirs,
            remote: None,
        }
    }

    /// Asks `remote` when no local candidate is the debug file.
    pub fn with_remote(self, remote: Arc<dyn RemoteDebugSource>) -> DebugFileFinder {
        DebugFileFinder {
            remote: Some(remote),
            ..self
        }
    }

    /// The debug directories searched, in order.
    pub fn debug_dirs(&self) -> &[PathBuf] {
        &self.debug_dirs
    }

    /// The debug file of the binary `binary_path` (its bytes `binary`, an ELF with build id
    /// `id`). Besides the rejected candidates, [`DebugLookup::tried`] says when the binary
    /// has no `.gnu_debuglink` or cannot be read as ELF (`/usr/bin/x: has no .gnu_debuglink`)
    /// and what the remote source answered (`debuginfod http://h:8002: 404`).
    pub fn find(&self, id: &BuildId, binary_path: &Path, binary: &[u8]) -> DebugLookup {
        let itself = Itself::of(binary_path);
        let mut tried = Vec::new();
        let try_candidate = |path: &Path, expect: Expect, tried: &mut Vec<String>| {
            let verdict = check(path, &itself, expect);
            if let Err(why) = &verdict {
                tried.push(format!("{}: {why}", path.display()));
            }
            verdict.is_ok()
        };
        let found = |path: PathBuf, route: DebugRoute, tried: Vec<String>| DebugLookup {
            found: Some(DebugFile { path, route }),
            tried,
        };

        for path in build_id_candidates(&self.debug_dirs, id) {
            if try_candidate(&path, Expect::BuildId(id), &mut tried) {
                return found(path, DebugRoute::DebugDir, tried);
            }
        }

        match elf_facts(binary) {
            Err(why) => tried.push(format!(
                "{}: {why}; its .gnu_debuglink was not read",
                binary_path.display()
            )),
            Ok(facts) => match facts.debuglink {
                None => tried.push(format!("{}: has no .gnu_debuglink", binary_path.display())),
                Some((name, crc)) => {
                    let mut candidates = Vec::new();
                    for dir in exec_dirs(binary_path) {
                        for path in debuglink_candidates(&dir, &name, &self.debug_dirs) {
                            if !candidates.contains(&path) {
                                candidates.push(path);
                            }
                        }
                    }
                    for path in candidates {
                        if try_candidate(&path, Expect::Link { crc, id }, &mut tried) {
                            return found(path, DebugRoute::GnuDebuglink, tried);
                        }
                    }
                }
            },
        }

        if let Some(remote) = self.remote.as_ref().filter(|_| !id.is_empty()) {
            match remote.fetch_debuginfo(id) {
                Ok(Some(path)) => {
                    if try_candidate(&path, Expect::BuildId(id), &mut tried) {
                        return found(path, DebugRoute::Debuginfod, tried);
                    }
                }
                Ok(None) => tried.push(format!("{}: 404", remote.describe())),
                Err(e) => tried.push(format!("{}: {e}", remote.describe())),
            }
        }
        DebugLookup { found: None, tried }
    }
}

/// True when `data` is an ELF file whose `.symtab` is non-empty or that has `.debug_info`
/// (what makes a file useful as a debug file).
pub fn has_symbols_or_dwarf(data: &[u8]) -> bool {
    elf_facts(data).is_ok_and(|facts| facts.symbols_or_dwarf)
}

/// The binary's directory, absolute (gdb works with the absolute file name); then, when the
/// binary is a symbolic link to a file in another directory, that directory (gdb tries the
/// three debuglink forms again there).
fn exec_dirs(binary_path: &Path) -> Vec<PathBuf> {
    let dir = match binary_path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let mut dirs = vec![std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf())];
    let is_link = fs::symlink_metadata(binary_path).is_ok_and(|m| m.file_type().is_symlink());
    if is_link {
        if let Some(target_dir) = fs::canonicalize(binary_path)
            .ok()
            .and_then(|p| p.parent().map(Path::to_path_buf))
            .filter(|d| *d != dirs[0])
        {
            dirs.push(target_dir);
        }
    }
    dirs
}

/// The binary's own file, which is never its debug file (gdb compares names and inodes).
struct Itself {
    path: PathBuf,
    dev_ino: Option<(u64, u64)>,
}

impl Itself {
    fn of(binary_path: &Path) -> Itself {
        Itself {
            path: std::path::absolute(binary_path).unwrap_or_else(|_| binary_path.into()),
            dev_ino: fs::metadata(binary_path).ok().map(|m| (m.dev(), m.ino())),
        }
    }

    fn is(&self, path: &Path, meta: &fs::Metadata) -> bool {
        std::path::absolute(path).is_ok_and(|p| p == self.path)
            || self.dev_ino == Some((meta.dev(), meta.ino()))
    }
}

/// Why `path` is not the debug file, or `Ok` when it is.
fn check(path: &Path, itself: &Itself, expect: Expect) -> Result<(), String> {
    let meta = match fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err("not found".into()),
        Err(e) => return Err(e.to_string()),
    };
    if !meta.is_file() {
        return Err("not a regular file".into());
    }
    if itself.is(path, &meta) {
        return Err("is the binary itself".into());
    }
    let file = fs::File::open(path).map_err(|e| e.to_string())?;
    let cache = object::ReadCache::new(file);
    let facts = elf_facts(&cache)?;
    drop(cache);

    let (want_id, crc) = match expect {
        Expect::BuildId(id) => (Some(id), None),
        Expect::Link { crc, id } => (Some(id).filter(|id| !id.is_empty()), Some(crc)),
    };
    match (&facts.build_id, want_id) {
        (None, Some(_)) if crc.is_none() => return Err("has no build id".into()),
        (Some(theirs), Some(ours)) if *theirs != ours.0 => {
            return Err(format!(
                "build id {} differs from the binary's {}",
                BuildId(theirs.clone()),
                ours
            ))
        }
        _ => {}
    }
    if !facts.symbols_or_dwarf {
        return Err("has neither .symtab nor DWARF".into());
    }
    if let Some(want) = crc {
        let actual = file_crc32(path).map_err(|e| format!("reading it for its CRC: {e}"))?;
        if actual != want {
            return Err(format!(
                "CRC 0x{actual:08x} differs from .gnu_debuglink's 0x{want:08x}"
            ));
        }
    }
    Ok(())
}
