//! [`ScriptText`]: a perf script file's bytes in memory — mapped when it is a regular file
//! (a perf script is often hundreds of megabytes: mapping avoids copying it), read
//! otherwise (a pipe, `/dev/stdin`).

use std::fs::File;
use std::io::Read;
use std::path::Path;

use super::reader::PerfScriptError;

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
        std::fs::write(&path, b"").unwrap();
        assert_eq!(ScriptText::open(&path).unwrap().bytes(), b"");
        let missing = ScriptText::open(&dir.join("missing"))
            .unwrap_err()
            .to_string();
        assert!(missing.contains("missing"), "{missing}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
