//! [`Spool`]: closed windows waiting for delivery, one file each (`<seq>.window`, written
//! with [`write_atomic`], so a crash leaves whole files only), delivered oldest first.
//! Bounded by bytes: when a new window does not fit, the oldest are deleted and counted as
//! dropped, never silently. A spool dir survives restarts: [`Spool::open`] picks up the
//! files left, in order.
//!
//! File layout: the header line `pgo-agent-window 1 <contexts> <counters> <marker>` (byte
//! lengths), then the three TabSeparated bodies of [`EncodedWindow`] back to back.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};

use super::clickhouse::EncodedWindow;
use crate::atomic_file::write_atomic;
use crate::error_chain::ErrorChain;

const MAGIC: &str = "pgo-agent-window 1";
const SUFFIX: &str = ".window";

/// See the module docs.
#[derive(Debug)]
pub struct Spool {
    dir: PathBuf,
    max_bytes: u64,
    files: VecDeque<(u64, u64)>,
    bytes: u64,
    next_seq: u64,
    dropped: u64,
}

/// The bytes of one spooled window.
pub fn serialize(w: &EncodedWindow) -> Vec<u8> {
    let mut out = format!(
        "{MAGIC} {} {} {}\n",
        w.contexts.len(),
        w.counters.len(),
        w.marker.len()
    )
    .into_bytes();
    out.extend_from_slice(w.contexts.as_bytes());
    out.extend_from_slice(w.counters.as_bytes());
    out.extend_from_slice(w.marker.as_bytes());
    out
}

/// Reads a spooled window back; `name` names it in errors.
pub fn deserialize(bytes: &[u8], name: &str) -> anyhow::Result<EncodedWindow> {
    let nl = bytes
        .iter()
        .position(|b| *b == b'\n')
        .with_context(|| format!("{name}: no header line"))?;
    let header = std::str::from_utf8(&bytes[..nl])
        .ok()
        .and_then(|h| h.strip_prefix(MAGIC))
        .with_context(|| format!("{name}: not a spooled window (bad header)"))?;
    let lens: Vec<usize> = header
        .split_whitespace()
        .map(|x| x.parse::<usize>())
        .collect::<Result<_, _>>()
        .with_context(|| format!("{name}: bad lengths in the header"))?;
    let [a, b, c] = lens[..] else {
        bail!("{name}: expected 3 lengths in the header");
    };
    let body = &bytes[nl + 1..];
    let total = a.checked_add(b).and_then(|x| x.checked_add(c));
    if total != Some(body.len()) {
        bail!(
            "{name}: header says {a}+{b}+{c} bytes, the file has {}",
            body.len()
        );
    }
    let text = |r: std::ops::Range<usize>| {
        String::from_utf8(body[r].to_vec()).with_context(|| format!("{name}: not UTF-8"))
    };
    Ok(EncodedWindow {
        contexts: text(0..a)?,
        counters: text(a..a + b)?,
        marker: text(a + b..a + b + c)?,
    })
}

impl Spool {
    /// Opens (creating) `dir`, picking up the windows already spooled there, and drops the
    /// oldest when they exceed `max_bytes`.
    pub fn open(dir: &Path, max_bytes: u64) -> anyhow::Result<Spool> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let mut files = Vec::new();
        for e in std::fs::read_dir(dir).with_context(|| format!("listing {}", dir.display()))? {
            let e = e.with_context(|| format!("listing {}", dir.display()))?;
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') && name.ends_with(".tmp") {
                // A write interrupted by a crash: never renamed, never delivered.
                let _ = std::fs::remove_file(e.path());
                continue;
            }
            let Some(seq) = name
                .strip_suffix(SUFFIX)
                .and_then(|s| s.parse::<u64>().ok())
            else {
                continue;
            };
            let len = e.metadata().map(|m| m.len()).unwrap_or(0);
            files.push((seq, len));
        }
        files.sort_unstable();
        let mut spool = Spool {
            dir: dir.to_path_buf(),
            max_bytes,
            next_seq: files.last().map_or(0, |f| f.0 + 1),
            bytes: files.iter().map(|f| f.1).sum(),
            files: files.into(),
            dropped: 0,
        };
        spool.make_room(0);
        Ok(spool)
    }

    fn path(&self, seq: u64) -> PathBuf {
        self.dir.join(format!("{seq:020}{SUFFIX}"))
    }

    /// Deletes the oldest windows until `incoming` more bytes fit.
    fn make_room(&mut self, incoming: u64) {
        while self.bytes + incoming > self.max_bytes {
            let Some((seq, len)) = self.files.pop_front() else {
                break;
            };
            let _ = std::fs::remove_file(self.path(seq));
            self.bytes -= len;
            self.dropped += 1;
        }
    }

    /// Appends a window (dropping the oldest when full; a window larger than the whole
    /// spool is itself dropped and counted). Returns how many windows were dropped.
    pub fn push(&mut self, w: &EncodedWindow) -> anyhow::Result<u64> {
        let before = self.dropped;
        let bytes = serialize(w);
        let len = bytes.len() as u64;
        if len > self.max_bytes {
            self.dropped += 1;
            return Ok(self.dropped - before);
        }
        self.make_room(len);
        let seq = self.next_seq;
        write_atomic(&self.path(seq), |out| {
            out.write_all(&bytes)?;
            Ok(())
        })?;
        self.next_seq += 1;
        self.files.push_back((seq, len));
        self.bytes += len;
        Ok(self.dropped - before)
    }

    /// The oldest window, read back. A file that cannot be read or parsed is deleted and
    /// counted as dropped (it would block the queue forever), and the next one is tried.
    pub fn front(&mut self) -> Option<EncodedWindow> {
        while let Some(&(seq, _)) = self.files.front() {
            let path = self.path(seq);
            let read = std::fs::read(&path)
                .with_context(|| format!("reading {}", path.display()))
                .and_then(|b| deserialize(&b, &path.display().to_string()));
            match read {
                Ok(w) => return Some(w),
                Err(e) => {
                    tracing::warn!(
                        "sink: dropping a bad spool file: {chain}",
                        chain = ErrorChain(e.as_ref())
                    );
                    self.pop_front();
                    self.dropped += 1;
                }
            }
        }
        None
    }

    /// The `i`-th oldest window (0 is [`Spool::front`]), read back; `None` past the end.
    pub fn get(&self, i: usize) -> Option<anyhow::Result<EncodedWindow>> {
        let &(seq, _) = self.files.get(i)?;
        let path = self.path(seq);
        Some(
            std::fs::read(&path)
                .with_context(|| format!("reading {}", path.display()))
                .and_then(|b| deserialize(&b, &path.display().to_string())),
        )
    }

    /// Deletes the oldest window (after its delivery).
    pub fn pop_front(&mut self) {
        if let Some((seq, len)) = self.files.pop_front() {
            let _ = std::fs::remove_file(self.path(seq));
            self.bytes -= len;
        }
    }

    /// Windows waiting.
    pub fn depth(&self) -> usize {
        self.files.len()
    }

    /// Bytes of the windows waiting.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Windows dropped since this spool was opened.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(n: usize) -> EncodedWindow {
        EncodedWindow {
            contexts: "ab\tflat\t1\t[]\n".into(),
            counters: "ab\th\t0\t1\t0\t1\t2\t3\n".repeat(n),
            marker: format!("ab\th\t{n}\tflat\t1\t{n}"),
        }
    }

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("pgo-spool-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn round_trip_and_bad_headers() {
        let x = w(2);
        assert_eq!(deserialize(&serialize(&x), "x").unwrap(), x);
        let mut b = serialize(&x);
        b.pop();
        let e = deserialize(&b, "f").unwrap_err();
        assert!(format!("{e:#}").contains("the file has"), "{e:#}");
        assert!(deserialize(b"nope 1 2 3\n", "f").is_err());
        assert!(deserialize(b"pgo-agent-window 1 1 2\n", "f").is_err());
        assert!(deserialize(b"pgo-agent-window 1 18446744073709551615 2 0\n", "f").is_err());
    }

    #[test]
    fn in_order_and_oldest_dropped_when_full() {
        let d = dir("order");
        let one = serialize(&w(1)).len() as u64;
        // Room for exactly three windows of this size.
        let mut s = Spool::open(&d, 3 * one).unwrap();
        for i in 0..3 {
            // Markers of equal length, so every window has `one` bytes.
            let mut x = w(1);
            x.marker = format!("{:width$}", i, width = w(1).marker.len());
            assert_eq!(s.push(&x).unwrap(), 0);
        }
        assert_eq!((s.depth(), s.bytes()), (3, 3 * one));
        let mut x = w(1);
        x.marker = format!("{:width$}", 3, width = w(1).marker.len());
        assert_eq!(s.push(&x).unwrap(), 1);
        assert_eq!(s.dropped(), 1);
        // Reopened from disk: windows 1, 2, 3 in order.
        drop(s);
        let mut s = Spool::open(&d, 3 * one).unwrap();
        let mut seen = Vec::new();
        while let Some(x) = s.front() {
            seen.push(x.marker.trim().to_string());
            s.pop_front();
        }
        assert_eq!(seen, vec!["1", "2", "3"]);
        assert_eq!((s.depth(), s.bytes()), (0, 0));
        // A window larger than the spool is dropped and counted.
        let mut s = Spool::open(&d, one - 1).unwrap();
        assert_eq!(s.push(&w(1)).unwrap(), 1);
        assert_eq!(s.depth(), 0);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn leftover_temp_and_corrupt_files() {
        let d = dir("corrupt");
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join(".00000000000000000000.window.tmp"), b"half").unwrap();
        std::fs::write(d.join("00000000000000000000.window"), b"garbage").unwrap();
        let mut s = Spool::open(&d, 1 << 20).unwrap();
        assert_eq!(s.depth(), 1);
        s.push(&w(1)).unwrap();
        assert_eq!(s.front().unwrap(), w(1));
        assert_eq!(s.dropped(), 1);
        assert!(!d.join(".00000000000000000000.window.tmp").exists());
        let _ = std::fs::remove_dir_all(&d);
    }
}
