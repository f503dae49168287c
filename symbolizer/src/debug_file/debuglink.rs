//! `.gnu_debuglink`: the section `objcopy --add-gnu-debuglink=FILE` adds to a stripped
//! binary. It holds FILE's base name, a NUL, zero padding to a multiple of 4 bytes, then the
//! CRC-32 of FILE's whole contents as a u32 in the binary's byte order (`k.debug` gives 12
//! bytes, `kk.debug` 16). The CRC is the reflected CRC-32 with polynomial 0xEDB88320 (zlib's
//! `crc32`, [`crc32fast::hash`]).
//!
//! gdb 13 looks for the named file in the binary's directory, then in its `.debug`
//! subdirectory, then under each debug directory followed by the binary's directory
//! (`/usr/lib/debug/usr/bin/k.debug`), and warns about and skips a file whose CRC differs.

use std::ffi::{OsStr, OsString};
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

/// Parses a `.gnu_debuglink` section's bytes into (debug file name, CRC). `None` when the
/// name is empty or not NUL-terminated, when the CRC's 4 bytes after the padding are
/// missing, or when the name is not a base name (`objcopy` stores the base name; a name with
/// a `/`, `.` or `..` would point outside the directories searched).
pub fn parse_debuglink(section: &[u8], endian: object::Endianness) -> Option<(OsString, u32)> {
    let nul = section.iter().position(|&b| b == 0)?;
    let name = &section[..nul];
    if name.is_empty() || name.contains(&b'/') || name == b"." || name == b".." {
        return None;
    }
    let crc_at = (nul + 1).next_multiple_of(4);
    let crc: [u8; 4] = section
        .get(crc_at..crc_at.checked_add(4)?)?
        .try_into()
        .ok()?;
    let crc = match endian {
        object::Endianness::Little => u32::from_le_bytes(crc),
        object::Endianness::Big => u32::from_be_bytes(crc),
    };
    Some((OsStr::from_bytes(name).to_os_string(), crc))
}

/// Where gdb 13 looks for the debug file `name` of a binary in `exec_dir`, in its order:
/// `EXECDIR/NAME`, `EXECDIR/.debug/NAME`, then `D/EXECDIR/NAME` for each debug directory
/// `D` (only when `exec_dir` is absolute: it is appended below `D`).
pub fn debuglink_candidates(exec_dir: &Path, name: &OsStr, debug_dirs: &[PathBuf]) -> Vec<PathBuf> {
    let mut out = vec![exec_dir.join(name), exec_dir.join(".debug").join(name)];
    if exec_dir.is_absolute() {
        let below_root: PathBuf = exec_dir
            .components()
            .filter(|c| !matches!(c, Component::RootDir | Component::Prefix(_)))
            .collect();
        out.extend(debug_dirs.iter().map(|d| d.join(&below_root).join(name)));
    }
    out
}

/// The CRC-32 of the whole file at `path`, read in 64 KiB pieces.
pub fn file_crc32(path: &Path) -> std::io::Result<u32> {
    let mut file = std::fs::File::open(path)?;
    let mut hasher = crc32fast::Hasher::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match file.read(&mut buf) {
            Ok(0) => return Ok(hasher.finalize()),
            Ok(n) => hasher.update(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}
