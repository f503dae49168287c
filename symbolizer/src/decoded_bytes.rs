//! [`decoded_bytes`]: the memory this process holds in what binaries decode on demand (code
//! extents, probe groups, line tables), counted as it is decoded and given back when its
//! binary is dropped. The daemon exports it as `pgo_agent_decoded_bytes{cache=...}`.

use std::sync::atomic::{AtomicU64, Ordering};

static CODE: AtomicU64 = AtomicU64::new(0);
static PROBES: AtomicU64 = AtomicU64::new(0);
static LINE_TABLES: AtomicU64 = AtomicU64::new(0);

/// Bytes held by on-demand decoding, per cache.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DecodedBytes {
    /// Decoded instructions ([`crate::LazyCode`]).
    pub code: u64,
    /// Decoded pseudo probes ([`crate::probe::ProbeStore`]).
    pub probes: u64,
    /// Line tables read on first use ([`crate::dwarf::DwarfInfo::load_lazy_lines`]).
    pub line_tables: u64,
}

impl DecodedBytes {
    /// The bytes of the three caches together.
    pub fn total(&self) -> u64 {
        self.code + self.probes + self.line_tables
    }
}

/// The bytes held now, over every binary of the process.
pub fn decoded_bytes() -> DecodedBytes {
    DecodedBytes {
        code: CODE.load(Ordering::Relaxed),
        probes: PROBES.load(Ordering::Relaxed),
        line_tables: LINE_TABLES.load(Ordering::Relaxed),
    }
}

/// The caches counted.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Cache {
    Code,
    Probes,
    LineTables,
}

impl Cache {
    fn counter(self) -> &'static AtomicU64 {
        match self {
            Cache::Code => &CODE,
            Cache::Probes => &PROBES,
            Cache::LineTables => &LINE_TABLES,
        }
    }

    /// `bytes` more are held.
    pub(crate) fn add(self, bytes: usize) {
        self.counter().fetch_add(bytes as u64, Ordering::Relaxed);
    }

    /// `bytes` were given back.
    pub(crate) fn sub(self, bytes: usize) {
        let _ = self
            .counter()
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
                Some(v.saturating_sub(bytes as u64))
            });
    }
}
