//! How the command-line tools (`convert`, `verify`, `merge`, `pull`) load a binary: with the
//! debug file named on the command line, else with the one the debug-file lookup finds
//! when the binary lacks symbols or DWARF (`/usr/lib/debug`, `.gnu_debuglink`, and the
//! debuginfod servers of `DEBUGINFOD_URLS`, as gdb and perf find them). The daemon uses the
//! same lookup with its configured directories and servers.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use symbolizer::debug_file::DebugFileFinder;
use symbolizer::ProfiledBinary;

/// gdb's default debug directory.
pub const DEFAULT_DEBUG_DIR: &str = "/usr/lib/debug";
/// Bytes the command-line tools' debuginfod cache may hold.
const CLI_CACHE_BYTES: u64 = 4 << 30;
/// Seconds one debuginfod request of a command-line tool may take (elfutils' default).
const CLI_TIMEOUT_SECS: u64 = 90;

/// The command-line tools' debuginfod cache: `DEBUGINFOD_CACHE_PATH`, else
/// `$XDG_CACHE_HOME/pgo-agent/debuginfod`, else `~/.cache/pgo-agent/debuginfod`.
fn cli_cache_dir() -> PathBuf {
    if let Some(p) = std::env::var_os("DEBUGINFOD_CACHE_PATH") {
        return PathBuf::from(p);
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(std::env::temp_dir);
    base.join("pgo-agent").join("debuginfod")
}

/// The command-line tools' finder: [`DEFAULT_DEBUG_DIR`], `.gnu_debuglink`, and the
/// servers of `DEBUGINFOD_URLS` when set.
pub fn cli_debug_file_finder() -> DebugFileFinder {
    let finder = DebugFileFinder::new(vec![PathBuf::from(DEFAULT_DEBUG_DIR)]);
    match crate::debuginfod::DebuginfodClient::from_config(
        &crate::debuginfod::urls_from_env(),
        cli_cache_dir(),
        CLI_CACHE_BYTES,
        Duration::from_secs(CLI_TIMEOUT_SECS),
    ) {
        Some(client) => finder.with_remote(std::sync::Arc::new(client)),
        None => finder,
    }
}

/// Loads `binary` with `debug` when given, else with the debug file the command-line
/// tools' lookup finds when it lacks symbols or DWARF
/// ([`profgen::binary_loading::load_binary`] with [`cli_debug_file_finder`]). With
/// `need_names`, a binary whose code nothing names (stripped, no debug file found) is an
/// error that lists what was tried.
pub fn load_binary(
    binary: &Path,
    debug: Option<&Path>,
    need_names: bool,
) -> anyhow::Result<ProfiledBinary> {
    Ok(profgen::binary_loading::load_binary(
        binary,
        debug,
        &cli_debug_file_finder(),
        need_names,
        false,
        None,
    )?)
}

/// [`load_binary`] with the error context the tools print.
pub fn load_binary_for(
    binary: &Path,
    debug: Option<&Path>,
    need_names: bool,
) -> anyhow::Result<ProfiledBinary> {
    load_binary(binary, debug, need_names).context("loading the binary")
}
