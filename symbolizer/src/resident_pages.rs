//! Test support: how much of a file mapping is resident in this process.

use std::path::Path;

/// Resident kB of this process's mapping of `path` (`/proc/self/smaps`), `None` when it
/// is not mapped.
pub(crate) fn resident_kb(path: &Path) -> Option<u64> {
    let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
    let path = path.to_string_lossy();
    let mut lines = smaps.lines().skip_while(|l| !l.ends_with(&*path));
    lines.next()?;
    let rss = lines.find(|l| l.starts_with("Rss:"))?;
    rss.split_whitespace().nth(1)?.parse().ok()
}

/// A file of `bytes` in a directory of its own named after `name` and the process (removed
/// by the caller with [`std::fs::remove_dir_all`] of the file's parent).
pub(crate) fn temp_file(name: &str, bytes: &[u8]) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}
