//! [`ScriptText`]: a perf script file's bytes in memory — mapped when it is a regular file
//! (a perf script is often hundreds of megabytes: mapping avoids copying it), read
//! otherwise (a pipe, `/dev/stdin`).

use std::fs::File;
use std::io::Read;
use std::ops::Range;
use std::path::Path;

use super::reader::PerfScriptError;

/// Bytes whose pages [`ScriptText::release`] drops at a time (a multiple of any page
/// size).
const DROP_SLICE: usize = 8 << 20;

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
    /// The mapping is read-only (and shared: its pages are the page cache's); like every
    /// reader of a mapped file, it assumes the file is not truncated while it is being read.
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

    /// Gives the text back to the system. A mapping's pages are dropped a slice at a time
    /// (`MADV_DONTNEED`: the page tables' entries go, the file's pages stay in the page
    /// cache), then the mapping, empty by then, is unmapped once. Unmapping it in slices,
    /// with a pause between them, leaves the cores partly idle while the other threads
    /// allocate (they wait on the memory-map lock; per-thread timelines of `convert`);
    /// dropping the pages first leaves no such gap.
    pub fn release(self) {
        let Bytes::Mapped(map) = self.bytes else {
            return;
        };
        let (start, len) = (map.as_ptr(), map.len());
        // From here on this function owns the mapping.
        std::mem::forget(map);
        // SAFETY: the whole mapping made by `open` (page-aligned), nothing refers to it any
        // more (`self` is consumed).
        unsafe { drop_pages(start, len) };
        // SAFETY: the whole mapping made by `open`, unmapped once, nothing referring to it.
        // munmap only fails for arguments that are not a mapping's pages; a failure would
        // leave it mapped until exit.
        unsafe {
            libc::munmap(start as *mut libc::c_void, len);
        }
    }

    /// Gives back the pages of `bytes()[range]` (with the pages it starts and ends in) when
    /// the text is a file mapping: the bytes stay readable, read again from the page cache
    /// or the file when touched. Other text is left as it is.
    pub fn drop_pages_of(&self, range: Range<usize>) {
        const PAGE: usize = 4096;
        let Bytes::Mapped(map) = &self.bytes else {
            return;
        };
        if range.is_empty() {
            return;
        }
        let end = range.end.min(map.len());
        let start = range.start & !(PAGE - 1);
        if start >= end {
            return;
        }
        // SAFETY: a range of the whole mapping made by `open` (page-aligned, so is `start`);
        // it is only read, and a page touched again is read back from the file.
        unsafe { drop_pages(map.as_ptr().add(start), end - start) };
    }

    /// True when the text is a file mapping (its pages can be given back and read again).
    pub fn is_mapped(&self) -> bool {
        matches!(self.bytes, Bytes::Mapped(_))
    }

    /// The whole text.
    pub fn bytes(&self) -> &[u8] {
        match &self.bytes {
            Bytes::Mapped(m) => m,
            Bytes::Owned(v) => v,
        }
    }
}

/// Bytes a reader keeps resident behind its position: texts it compares against lie
/// mostly within them.
const READ_LAG: usize = 256 << 10;

/// Bytes a reader moves on between two drops of the pages behind it.
const READ_DROP_STEP: usize = 512 << 10;

/// The pages of a mapped text a sequential reader has passed, given back every
/// [`READ_DROP_STEP`] bytes: all of them from where it started, also those it read again
/// behind it (a block memo compares blocks with the first ones seen, anywhere before;
/// such pages would otherwise stay resident until the whole range is read).
pub(crate) struct ReadPages {
    base: *const u8,
    len: usize,
    /// Where the reader started (page-aligned from `base`).
    from: usize,
    /// Offset up to which pages were last given back (page-aligned from `base`).
    dropped_to: usize,
    enabled: bool,
}

impl ReadPages {
    /// For a reader of `text` starting at offset `from`; `enabled` only when `text` is a
    /// whole file mapping ([`ScriptText::is_mapped`]): other memory would read back as
    /// zeros.
    pub(crate) fn new(text: &[u8], from: usize, enabled: bool) -> ReadPages {
        const PAGE: usize = 4096;
        let from = from.next_multiple_of(PAGE);
        ReadPages {
            base: text.as_ptr(),
            len: text.len(),
            from,
            dropped_to: from,
            enabled: enabled && (text.as_ptr() as usize).is_multiple_of(PAGE),
        }
    }

    /// The reader is at offset `pos`: pages more than [`READ_LAG`] behind it go.
    pub(crate) fn read_to(&mut self, pos: usize) {
        const PAGE: usize = 4096;
        if !self.enabled {
            return;
        }
        let to = (pos.saturating_sub(READ_LAG) & !(PAGE - 1)).min(self.len & !(PAGE - 1));
        if to < self.dropped_to + READ_DROP_STEP {
            return;
        }
        // SAFETY: `[from, to)` lies in the file mapping `new` was given (enabled only for
        // one, starting page-aligned); both ends are page-aligned; the reader reads any
        // byte of it again from the page cache if it needs it.
        unsafe { drop_pages(self.base.add(self.from), to - self.from) };
        self.dropped_to = to;
    }
}

/// Drops the pages of the mapped range `[start, start + len)`, [`DROP_SLICE`] bytes at a
/// time (the range stays mapped; a file mapping reads its file again if touched).
///
/// # Safety
/// `start` is page-aligned, the range lies in one mapping of a file, and nothing that
/// reads it expects the bytes to stay in memory (they are read again from the file).
unsafe fn drop_pages(start: *const u8, len: usize) {
    let mut done = 0;
    while done < len {
        let n = DROP_SLICE.min(len - done);
        // SAFETY: the caller's promise (`DROP_SLICE` is a multiple of the page size, so
        // every slice starts on a page; the kernel rounds the last one's length up). A
        // failure leaves the pages mapped, nothing worse.
        unsafe {
            libc::madvise(start.add(done) as *mut libc::c_void, n, libc::MADV_DONTNEED);
        }
        done += n;
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

    /// The resident pages of the mapping of `path` in this process, in kB (`None` when it is
    /// not mapped).
    fn resident_kb(path: &Path) -> Option<u64> {
        let path = path.to_string_lossy();
        let rss = crate::perf_script::smaps_field(|_, header| header.ends_with(&*path), "Rss:")?;
        rss.split_whitespace().next()?.parse().ok()
    }

    /// Releasing drops every page of a mapping longer than one slice, the last, partial
    /// slice too, then unmaps it.
    #[test]
    fn release_drops_every_page_and_unmaps() {
        let dir = std::env::temp_dir().join(format!("script-release-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("big.perfscript");
        let len = 2 * DROP_SLICE as u64 + 12_345;
        File::create(&path).unwrap().set_len(len).unwrap();
        let text = ScriptText::open(&path).unwrap();
        assert_eq!(text.bytes().len() as u64, len);
        let touched: u64 = text
            .bytes()
            .iter()
            .step_by(4096)
            .map(|&b| u64::from(b))
            .sum();
        assert_eq!(touched, 0);
        let all_kb = len.div_ceil(4096) * 4;
        assert!(
            resident_kb(&path).unwrap() >= all_kb,
            "{:?}",
            resident_kb(&path)
        );
        // SAFETY: the text's whole mapping, page-aligned; its bytes are read again below
        // (from the file: zeros).
        unsafe { drop_pages(text.bytes().as_ptr(), text.bytes().len()) };
        assert_eq!(resident_kb(&path), Some(0), "pages left");
        assert_eq!(text.bytes()[len as usize - 1], 0);
        text.release();
        assert_eq!(resident_kb(&path), None, "the mapping is left");
        // Owned text has nothing to unmap.
        ScriptText::from_bytes("owned", b"\t 10\n".to_vec()).release();
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Dropping a range's pages gives back those of the range (from the page it starts in),
    /// and its bytes read the same afterwards; text in memory is left as it is.
    #[test]
    fn pages_of_a_range_are_given_back() {
        let dir = std::env::temp_dir().join(format!("script-range-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("range.perfscript");
        let bytes: Vec<u8> = (0..64 * 4096u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(&path, &bytes).unwrap();
        let text = ScriptText::open(&path).unwrap();
        assert_eq!(text.bytes(), &bytes[..]);
        assert_eq!(resident_kb(&path), Some(256));
        // Pages 3 (from its middle) to 9 (to its middle): seven pages at least (the
        // kernel may take more of a mapping read sequentially).
        text.drop_pages_of(3 * 4096 + 100..9 * 4096 + 100);
        let left = resident_kb(&path).unwrap();
        assert!(left <= 256 - 7 * 4, "{left} kB left");
        // Empty and past the end: nothing.
        text.drop_pages_of(5000..5000);
        text.drop_pages_of(1 << 30..(1 << 30) + 1);
        assert_eq!(resident_kb(&path), Some(left));
        assert_eq!(text.bytes(), &bytes[..]);
        let owned = ScriptText::from_bytes("owned", bytes.clone());
        owned.drop_pages_of(0..bytes.len());
        assert_eq!(owned.bytes(), &bytes[..]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
