//! Debug directories searched by build id. `D/.build-id/ab/cdef….debug` (the first byte's
//! two hex digits as a directory, the rest as the file name) is the layout of Debian's and
//! Fedora's `-dbgsym`/`-debuginfo` packages under `/usr/lib/debug`, which gdb, perf and
//! systemd-coredump read. `D/<full hex>` is pgo-agent's own flat layout.

use std::path::PathBuf;

use collector::BuildId;

/// The candidates for build id `id` in `debug_dirs`, in search order: for each directory,
/// `.build-id/ab/cdef….debug`, then `<full hex>`. None for an empty build id; only the flat
/// name for a one-byte id (the `.build-id` layout needs a second byte).
pub fn build_id_candidates(debug_dirs: &[PathBuf], id: &BuildId) -> Vec<PathBuf> {
    let hex = id.to_hex();
    if hex.is_empty() {
        return Vec::new();
    }
    let mut out = Vec::with_capacity(2 * debug_dirs.len());
    for dir in debug_dirs {
        if hex.len() > 2 {
            out.push(
                dir.join(".build-id")
                    .join(&hex[..2])
                    .join(format!("{}.debug", &hex[2..])),
            );
        }
        out.push(dir.join(&hex));
    }
    out
}
