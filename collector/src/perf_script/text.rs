//! [`ScriptText`]: a perf script file's bytes in memory — mapped when it is a regular file
//! (a perf script is often hundreds of megabytes: mapping avoids copying it), read
//! otherwise (a pipe, `/dev/stdin`).

use std::fs::File;
use std::io::Read;
use std::path::Path;

use super::reader::PerfScriptError;

/// Bytes unmapped at a time by [`ScriptText::release`] (a multiple of any page size).
const UNMAP_SLICE: usize = 8 << 20;

/// The bytes of one perf script input and its name (the path, for errors).
#[derive(Debug)]
pub struct ScriptText {
    name: String,
    bytes: Bytes,
}

#[derive(Debug)]
enum Bytes {
    Mapped(memmap2::Mmap),
    Owned(Vec<u8>),
}

impl ScriptText {
    /// Maps (or reads) the file at `path`.
    ///
    /// The mapping is read-only and private to this process; like every reader of a
    /// mapped file, it assumes the file is not truncated while it is being read.
    pub fn open(path: &Path) -> Result<ScriptText, PerfScriptError> {
        let name = path.display().to_string();
        let io = |source| PerfScriptError::Io {
            name: name.clone(),
            source,
        };
        let mut file = File::open(path).map_err(io)?;
        let meta = file.metadata().map_err(io)?;
        if meta.is_file() && meta.len() > 0 {
            // SAFETY: the map is only read, and dropped with `self`. A file truncated by
            // another process while mapped would fault; perf script outputs are written
            // once and then read.
            let map = unsafe { memmap2::MmapOptions::new().map(&file) }.map_err(io)?;
            #[cfg(unix)]
            let _ = map.advise(memmap2::Advice::Sequential);
            return Ok(ScriptText {
                name,
                bytes: Bytes::Mapped(map),
            });
        }
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes).map_err(io)?;
        Ok(ScriptText {
            name,
            bytes: Bytes::Owned(bytes),
        })
    }

    /// Text already in memory, named `name` in errors.
    pub fn from_bytes(name: impl Into<String>, bytes: Vec<u8>) -> ScriptText {
        ScriptText {
            name: name.into(),
            bytes: Bytes::Owned(bytes),
        }
    }

    /// The input's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Gives the text back to the system. A mapping is unmapped a slice at a time: the
    /// kernel holds the process's memory-map lock while it unmaps, and a single call for
    /// hundreds of megabytes keeps every other thread that maps memory (an allocation
    /// growing, a first touch of new memory is fine) waiting for milliseconds; between
    /// slices they get their turn.
    pub fn release(self) {
        let Bytes::Mapped(map) = self.bytes else {
            return;
        };
        let (start, len) = (map.as_ptr(), map.len());
        // From here on the slices below own the mapping.
        std::mem::forget(map);
        let mut done = 0;
        while done < len {
            let n = UNMAP_SLICE.min(len - done);
            // SAFETY: `[start + done, start + done + n)` lies in the mapping made by
            // `open` (page-aligned at `start`, and `UNMAP_SLICE` is a multiple of the page
            // size), nothing else refers to it (`self` is consumed), and each slice is
            // unmapped once. munmap only fails for arguments that are not a mapping's
            // pages; a failure would leave the pages mapped until exit, nothing worse.
            unsafe {
                libc::munmap(start.add(done) as *mut libc::c_void, n);
            }
            done += n;
            // The other threads' turn at the lock (an unmapping thread that asks again at
            // once keeps getting it).
            std::thread::sleep(std::time::Duration::from_micros(200));
        }
    }

    /// The whole text.
    pub fn bytes(&self) -> &[u8] {
        match &self.bytes {
            Bytes::Mapped(m) => m,
            Bytes::Owned(v) => v,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_files_and_reads_empty_ones() {
        let dir = std::env::temp_dir().join(format!("script-text-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("a.perfscript");
        std::fs::write(&path, b"\t 10\n 0x1/0x2/P/-/-/0\n").unwrap();
        let text = ScriptText::open(&path).unwrap();
        assert_eq!(text.bytes(), b"\t 10\n 0x1/0x2/P/-/-/0\n");
        assert_eq!(text.name(), path.display().to_string());
        text.release();
        std::fs::write(&path, b"").unwrap();
        assert_eq!(ScriptText::open(&path).unwrap().bytes(), b"");
        let missing = ScriptText::open(&dir.join("missing"))
            .unwrap_err()
            .to_string();
        assert!(missing.contains("missing"), "{missing}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Releasing unmaps every slice of a mapping longer than one slice.
    #[test]
    fn release_unmaps_the_whole_mapping() {
        let dir = std::env::temp_dir().join(format!("script-release-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("big.perfscript");
        let len = 2 * UNMAP_SLICE as u64 + 12_345;
        File::create(&path).unwrap().set_len(len).unwrap();
        let mapped = || {
            std::fs::read_to_string("/proc/self/maps")
                .unwrap()
                .lines()
                .filter(|l| l.ends_with(&*path.to_string_lossy()))
                .count()
        };
        let text = ScriptText::open(&path).unwrap();
        assert_eq!(text.bytes().len() as u64, len);
        assert_eq!(text.bytes()[len as usize - 1], 0);
        assert_eq!(mapped(), 1);
        text.release();
        assert_eq!(mapped(), 0, "a slice of the mapping is left");
        // Owned text has nothing to unmap.
        ScriptText::from_bytes("owned", b"\t 10\n".to_vec()).release();
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
