//! Crash-safe file replacement: write a temporary file beside the target, fsync it, rename
//! it over the target, fsync the directory. A reader (or a restart after SIGKILL or power
//! loss) sees either the old file or the new one, never a mix; when the write fails (disk
//! full), the old file is untouched and the temporary is removed.

use std::io::Write;
use std::path::Path;

use anyhow::Context;

/// Replaces `path` with what `write` produces, atomically (see the module docs).
pub fn write_atomic(
    path: &Path,
    write: impl FnOnce(&mut dyn Write) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = path.with_file_name(format!(".{name}.tmp"));
    let result = write_then_rename(&tmp, path, write);
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

fn write_then_rename(
    tmp: &Path,
    path: &Path,
    write: impl FnOnce(&mut dyn Write) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let file = std::fs::File::create(tmp).with_context(|| format!("creating {}", tmp.display()))?;
    let mut out = std::io::BufWriter::new(file);
    write(&mut out).with_context(|| format!("writing {}", tmp.display()))?;
    let file = out
        .into_inner()
        .map_err(|e| e.into_error())
        .with_context(|| format!("writing {}", tmp.display()))?;
    file.sync_all()
        .with_context(|| format!("fsync {}", tmp.display()))?;
    drop(file);
    std::fs::rename(tmp, path)
        .with_context(|| format!("renaming {} to {}", tmp.display(), path.display()))?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        // The rename is durable only once the directory entry is on disk.
        if let Ok(d) = std::fs::File::open(dir) {
            let _ = d.sync_all();
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> std::path::PathBuf {
        let d =
            std::env::temp_dir().join(format!("pgo-agent-atomic-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn replaces_the_file_and_leaves_no_temporary() {
        let d = scratch("ok");
        let p = d.join("state.bin");
        std::fs::write(&p, b"old").unwrap();
        write_atomic(&p, |w| Ok(w.write_all(b"new contents")?)).unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"new contents");
        let names: Vec<_> = std::fs::read_dir(&d)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("state.bin")]);
    }

    #[test]
    fn a_failed_write_keeps_the_old_file() {
        let d = scratch("fail");
        let p = d.join("state.bin");
        std::fs::write(&p, b"old").unwrap();
        let err = write_atomic(&p, |w| {
            w.write_all(b"half")?;
            anyhow::bail!("disk full")
        })
        .unwrap_err();
        assert!(format!("{err:#}").contains("disk full"), "{err:#}");
        assert_eq!(std::fs::read(&p).unwrap(), b"old");
        assert_eq!(std::fs::read_dir(&d).unwrap().count(), 1);
    }
}
