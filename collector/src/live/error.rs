//! [`LiveError`]: what can go wrong opening events, mapping rings and reading them.

use std::path::PathBuf;

use crate::record::RecordParseError;

/// Errors of the live collector. Each names the CPU, file or byte offset it concerns.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LiveError {
    /// `perf_event_open` failed.
    #[error("perf_event_open({what}) on cpu {cpu}: {source}")]
    Open {
        /// Which event (e.g. `cpu-clock`, `r20c4`).
        what: String,
        /// The CPU (-1 for any).
        cpu: i32,
        /// The errno.
        source: std::io::Error,
    },
    /// `mmap` of a ring buffer failed.
    #[error("mmap of {pages} ring pages on cpu {cpu}: {source}")]
    Mmap {
        /// The CPU.
        cpu: i32,
        /// Data pages asked for (1 + this many are mapped).
        pages: usize,
        /// The errno.
        source: std::io::Error,
    },
    /// An ioctl on an event fd failed.
    #[error("ioctl {request} on cpu {cpu}: {source}")]
    Ioctl {
        /// The ioctl's name.
        request: &'static str,
        /// The CPU.
        cpu: i32,
        /// The errno.
        source: std::io::Error,
    },
    /// The ring's control page or sizes break the ABI (`data_size` not a power of two, a
    /// record header with a size below 8 or past `data_head`...).
    #[error("ring buffer corrupt at byte {offset}: {what}")]
    RingCorrupt {
        /// Free-running byte position (`data_tail` space) of the fault.
        offset: u64,
        /// What was wrong.
        what: &'static str,
    },
    /// A ring size that is not `2^n` pages, or too large.
    #[error("ring buffer of {pages} data pages: {what}")]
    RingSize {
        /// The requested data pages.
        pages: usize,
        /// Why it is refused.
        what: &'static str,
    },
    /// A record in the ring could not be parsed.
    #[error("record at ring byte {offset}: {source}")]
    Record {
        /// Free-running byte position of the record.
        offset: u64,
        /// The parser's error.
        source: RecordParseError,
    },
    /// Reading a /proc or /sys file failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// No sampling mode could be opened.
    #[error("no sampling mode could be opened: {tried}")]
    NoMode {
        /// Why each mode was ruled out or failed to open.
        tried: String,
        /// True when the kernel refused an open for want of privileges (EACCES, EPERM).
        permission_denied: bool,
    },
}

impl LiveError {
    /// True when the kernel refused the sampling for want of privileges: a
    /// `perf_event_open`, ring `mmap` (past `perf_event_mlock_kb`) or ioctl that failed with
    /// EACCES or EPERM (not a mode the CPU lacks).
    pub fn permission_denied(&self) -> bool {
        match self {
            LiveError::Open { source, .. }
            | LiveError::Mmap { source, .. }
            | LiveError::Ioctl { source, .. } => {
                source.kind() == std::io::ErrorKind::PermissionDenied
            }
            LiveError::NoMode {
                permission_denied, ..
            } => *permission_denied,
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn privileges_are_named_only_for_eacces_and_eperm() {
        let open = |errno| LiveError::Open {
            what: "cpu-clock".into(),
            cpu: 0,
            source: std::io::Error::from_raw_os_error(errno),
        };
        assert!(open(libc::EACCES).permission_denied());
        assert!(open(libc::EPERM).permission_denied());
        assert!(!open(libc::ENOENT).permission_denied());
        let mmap = LiveError::Mmap {
            cpu: 0,
            pages: 64,
            source: std::io::Error::from_raw_os_error(libc::EPERM),
        };
        assert!(mmap.permission_denied());
        let ruled_out = LiveError::NoMode {
            tried: "ruled out intel_lbr: no core PMU".into(),
            permission_denied: false,
        };
        assert!(!ruled_out.permission_denied());
    }
}
