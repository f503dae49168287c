//! [`MapsEntry`]: one line of `/proc/PID/maps`, and its conversion to the
//! `PERF_RECORD_MMAP2` the kernel would have emitted for it ([`crate::Mmap2Event`]). Read by
//! the live path's process scan, the recorder and the heap sampler.

use std::path::{Path, PathBuf};

use crate::Mmap2Event;

/// Why a maps file could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MapsError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The maps file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A line did not parse.
    #[error("{path}: line {line} does not parse: `{text}`")]
    BadLine {
        /// The maps file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// The line (truncated to 200 characters).
        text: String,
    },
}

/// `PROT_READ`.
pub const PROT_READ: u32 = 1;
/// `PROT_WRITE`.
pub const PROT_WRITE: u32 = 2;
/// `PROT_EXEC`.
pub const PROT_EXEC: u32 = 4;
/// `MAP_SHARED`.
pub const MAP_SHARED: u32 = 1;
/// `MAP_PRIVATE`.
pub const MAP_PRIVATE: u32 = 2;

/// One `/proc/PID/maps` line: `start-end perms offset maj:min inode [path]`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct MapsEntry {
    /// First address.
    pub start: u64,
    /// One past the last address.
    pub end: u64,
    /// `PROT_*` bits from `rwx`.
    pub prot: u32,
    /// True for `s` (shared), false for `p` (private).
    pub shared: bool,
    /// File offset of `start`.
    pub offset: u64,
    /// Device major (hex in the file).
    pub maj: u32,
    /// Device minor (hex in the file).
    pub min: u32,
    /// Inode (0 for anonymous and special mappings).
    pub ino: u64,
    /// Path, `[vdso]`, `[stack]`..., or empty for anonymous memory.
    pub path: String,
}

impl MapsEntry {
    /// True when the mapping is executable.
    pub fn is_executable(&self) -> bool {
        self.prot & PROT_EXEC != 0
    }

    /// True when `addr` lies inside the mapping.
    pub fn contains(&self, addr: u64) -> bool {
        (self.start..self.end).contains(&addr)
    }

    /// The name perf reports for the mapping: the path, or `//anon` for anonymous memory.
    pub fn perf_filename(&self) -> String {
        if self.path.is_empty() {
            "//anon".to_string()
        } else {
            self.path.clone()
        }
    }

    /// The MMAP2 event the kernel emits for this mapping in task `pid`/`tid`.
    pub fn to_mmap2(&self, pid: i32, tid: i32) -> Mmap2Event {
        Mmap2Event {
            pid,
            tid,
            addr: self.start,
            len: self.end - self.start,
            pgoff: self.offset,
            prot: self.prot,
            flags: if self.shared { MAP_SHARED } else { MAP_PRIVATE },
            maj: self.maj,
            min: self.min,
            ino: self.ino,
            ino_generation: 0,
            build_id: None,
            filename: self.perf_filename(),
        }
    }
}

/// Parses the whole text of a maps file; `path` names it in errors.
pub fn parse_maps(text: &str, path: &Path) -> Result<Vec<MapsEntry>, MapsError> {
    text.lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty())
        .map(|(i, line)| {
            parse_line(line).ok_or_else(|| MapsError::BadLine {
                path: path.to_path_buf(),
                line: i + 1,
                text: line.chars().take(200).collect(),
            })
        })
        .collect()
}

/// Reads and parses `/proc/<pid>/maps`.
pub fn read_maps(pid: i32) -> Result<Vec<MapsEntry>, MapsError> {
    let path = PathBuf::from(format!("/proc/{pid}/maps"));
    let text = std::fs::read_to_string(&path).map_err(|source| MapsError::Io {
        path: path.clone(),
        source,
    })?;
    parse_maps(&text, &path)
}

fn parse_line(line: &str) -> Option<MapsEntry> {
    // Five space-separated fields, then the path (which may contain spaces) after padding.
    let mut rest = line;
    let mut fields = [""; 5];
    for field in fields.iter_mut() {
        rest = rest.trim_start_matches(' ');
        let end = rest.find(' ').unwrap_or(rest.len());
        *field = &rest[..end];
        rest = &rest[end..];
    }
    let path = rest.trim_start_matches(' ').to_string();
    let (start, end) = fields[0].split_once('-')?;
    let start = u64::from_str_radix(start, 16).ok()?;
    let end = u64::from_str_radix(end, 16).ok()?;
    if end < start {
        return None;
    }
    let perms = fields[1].as_bytes();
    if perms.len() != 4 {
        return None;
    }
    let mut prot = 0;
    if perms[0] == b'r' {
        prot |= PROT_READ;
    }
    if perms[1] == b'w' {
        prot |= PROT_WRITE;
    }
    if perms[2] == b'x' {
        prot |= PROT_EXEC;
    }
    let shared = perms[3] == b's';
    let offset = u64::from_str_radix(fields[2], 16).ok()?;
    let (maj, min) = fields[3].split_once(':')?;
    let maj = u32::from_str_radix(maj, 16).ok()?;
    let min = u32::from_str_radix(min, 16).ok()?;
    let ino = fields[4].parse().ok()?;
    Some(MapsEntry {
        start,
        end,
        prot,
        shared,
        offset,
        maj,
        min,
        ino,
        path,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAPS: &str = "\
55d4a7e00000-55d4a7e01000 r--p 00000000 fe:01 1835033                    /work/a b/prog
55d4a7e01000-55d4a7e02000 r-xp 00001000 fe:01 1835033                    /work/a b/prog
7ffd1c9f6000-7ffd1c9f8000 r-xp 00000000 00:00 0                          [vdso]
7f0000000000-7f0000001000 rwxs 00000000 00:00 0 
";

    #[test]
    fn parses_maps_lines() {
        let maps = parse_maps(MAPS, Path::new("maps")).unwrap();
        assert_eq!(maps.len(), 4);
        assert_eq!(
            maps[1],
            MapsEntry {
                start: 0x55d4a7e01000,
                end: 0x55d4a7e02000,
                prot: PROT_READ | PROT_EXEC,
                shared: false,
                offset: 0x1000,
                maj: 0xfe,
                min: 1,
                ino: 1835033,
                path: "/work/a b/prog".into(),
            }
        );
        assert!(!maps[0].is_executable());
        assert_eq!(maps[2].path, "[vdso]");
        assert_eq!(maps[3].perf_filename(), "//anon");
        assert!(maps[3].shared);
        let ev = maps[1].to_mmap2(7, 8);
        assert_eq!(
            (ev.pid, ev.tid, ev.addr, ev.len, ev.pgoff, ev.prot, ev.flags),
            (7, 8, 0x55d4a7e01000, 0x1000, 0x1000, 5, 2)
        );
        assert_eq!((ev.maj, ev.min, ev.ino), (0xfe, 1, 1835033));
    }

    #[test]
    fn rejects_bad_lines_with_their_position() {
        let err = parse_maps("0-1 r-xp 0 00:00 0\nzzz\n", Path::new("m")).unwrap_err();
        assert!(matches!(err, MapsError::BadLine { line: 2, .. }), "{err}");
        assert!(parse_line("2000-1000 r-xp 0 00:00 0").is_none());
        assert!(parse_line("1000-2000 r-x 0 00:00 0").is_none());
    }
}
