//! [`large_writer`]: the buffered writer of large outputs (recordings, perf scripts), which
//! writes them a mebibyte at a time.
//!
//! Where the page cache holds files in large folios (ext4 from Linux 6.16, xfs), the size
//! of the writes decides the size of the folios a new file is cached in: 8 KiB writes (the
//! standard buffered writer's) leave it in small ones, 1 MiB writes in large ones, which a
//! reader that maps the file (`convert`, llvm-profgen) maps 2 MiB at a time, and touches and
//! unmaps it faster (figures in bench/README.md, "Page cache").

use std::io::{BufWriter, Write};

/// Bytes buffered before each write.
pub const LARGE_WRITE: usize = 1 << 20;

/// `inner` buffered in [`LARGE_WRITE`] bytes.
pub fn large_writer<W: Write>(inner: W) -> BufWriter<W> {
    BufWriter::with_capacity(LARGE_WRITE, inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Writes reach the inner writer a mebibyte at a time, however small the pieces.
    #[test]
    fn small_pieces_are_written_in_large_writes() {
        struct Sizes(Vec<usize>);
        impl Write for Sizes {
            fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
                self.0.push(buf.len());
                Ok(buf.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let mut w = large_writer(Sizes(Vec::new()));
        let pieces = (LARGE_WRITE * 2 + 150) / 100;
        for _ in 0..pieces {
            w.write_all(&[7u8; 100]).unwrap();
        }
        w.flush().unwrap();
        let sizes = &w.get_ref().0;
        assert_eq!(sizes.iter().sum::<usize>(), pieces * 100);
        // Two full buffers (but for the piece that did not fit), then the rest at the flush.
        assert_eq!(sizes.len(), 3, "{sizes:?}");
        assert!(
            sizes[..2].iter().all(|&n| n > LARGE_WRITE - 100),
            "{sizes:?}"
        );
    }
}
