//! How the command-line tools (`convert`, `verify`, `merge`, `pull`) load a binary: with the
//! debug file named on the command line, else with the one the debug-file lookup finds
//! when the binary lacks symbols or DWARF (`/usr/lib/debug`, `.gnu_debuglink`, and the
//! debuginfod servers of `DEBUGINFOD_URLS`, as gdb and perf find them). The daemon uses the
//! same lookup with its configured directories and servers.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use symbolizer::debug_file::DebugFileFinder;
use symbolizer::{LoadOptions, ProfiledBinary};

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

/// Loads `binary` with `debug` when given, else with the debug file the lookup finds when
/// it lacks symbols or DWARF (a note on stderr names the file used). With `need_names`, a
/// binary whose code nothing names (stripped, no debug file found) is an error that lists
/// what was tried.
pub fn load_binary(
    binary: &Path,
    debug: Option<&Path>,
    need_names: bool,
) -> anyhow::Result<ProfiledBinary> {
    load_binary_with(binary, debug, need_names, false, None)
}

/// [`load_binary`], with the pseudo probes of a probe binary ignored when
/// `use_dwarf_correlation` (llvm-profgen's `--use-dwarf-correlation`: the binary is read
/// as a line-table binary), and the split units of a `-gsplit-dwarf` binary from `dwp`
/// (llvm-profgen's `--dwp`; `None`: `<file>.dwp` beside the file the DWARF is read from,
/// else the `.dwo` files named in the binary).
pub fn load_binary_with(
    binary: &Path,
    debug: Option<&Path>,
    need_names: bool,
    use_dwarf_correlation: bool,
    dwp: Option<&Path>,
) -> anyhow::Result<ProfiledBinary> {
    // Code decoded as samples reach it, from the file's memory map: the tools' memory
    // and time grow with the code the profile touches, not with the binary.
    let options = LoadOptions {
        lazy_code: true,
        release_decoded_pages: true,
        use_dwarf_correlation,
        split_dwarf: symbolizer::dwarf::SplitDwarf {
            dwp: dwp.map(Path::to_path_buf),
        },
        ..LoadOptions::default()
    };
    let loaded = match debug {
        Some(d) => ProfiledBinary::load_split(binary, Some(d), &options)?,
        None => {
            let (b, lookup) =
                ProfiledBinary::load_with_lookup(binary, &cli_debug_file_finder(), &options)?;
            let found = lookup.as_ref().and_then(|l| l.found.as_ref());
            if let Some(f) = found {
                eprintln!(
                    "pgo-agent: note: names and DWARF of {} from {} (found by {})",
                    binary.display(),
                    f.path.display(),
                    f.route
                );
            }
            if need_names && !b.name_source().has_names() {
                let tried = lookup.map(|l| l.tried).unwrap_or_default();
                anyhow::bail!(
                    "{} has no symbol table and no debug file was found, so its functions \
                     cannot be named; give the unstripped build or its debug file with \
                     --debug-binary, put the debug file where it is looked for, or keep \
                     the counters by address with --skip-symbolization. Tried:\n  {}",
                    binary.display(),
                    tried.join("\n  ")
                );
            }
            b
        }
    };
    let missing = loaded.missing_split_units();
    if missing > 0 {
        eprintln!(
            "pgo-agent: warning: DWO debug information was not loaded for {missing} modules of \
             {}; their functions and inline frames are unknown. Give the DWARF package with \
             --dwp, put it at {}, or keep the .dwo files where the binary names them",
            binary.display(),
            symbolizer::dwarf::SplitDwarf::default()
                .package_path(debug.unwrap_or(binary))
                .display()
        );
    }
    Ok(loaded)
}

/// [`load_binary`] with the error context the tools print.
pub fn load_binary_for(
    binary: &Path,
    debug: Option<&Path>,
    need_names: bool,
) -> anyhow::Result<ProfiledBinary> {
    load_binary(binary, debug, need_names).context("loading the binary")
}
