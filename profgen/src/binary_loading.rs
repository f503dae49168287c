//! Loading the profiled binary: with the debug file given, else with the one a
//! [`DebugFileFinder`] finds when the binary lacks symbols or DWARF.

use std::path::Path;

use symbolizer::debug_file::DebugFileFinder;
use symbolizer::{LoadOptions, ProfiledBinary};

use crate::error::LoadBinaryError;

/// Loads `binary` with `debug` when given, else with the debug file `finder` finds when it
/// lacks symbols or DWARF (a note on stderr names the file used). With `need_names`, a
/// binary whose code nothing names (stripped, no debug file found) is an error that lists
/// what was tried. With `use_dwarf_correlation` the pseudo probes of a probe binary are
/// ignored (llvm-profgen's `--use-dwarf-correlation`: it is read as a line-table binary).
/// The split units of a `-gsplit-dwarf` binary come from `dwp` (llvm-profgen's `--dwp`;
/// `None`: `<file>.dwp` beside the file the DWARF is read from, else the `.dwo` files
/// named in the binary); a warning says how many were not found.
pub fn load_binary(
    binary: &Path,
    debug: Option<&Path>,
    finder: &DebugFileFinder,
    need_names: bool,
    use_dwarf_correlation: bool,
    dwp: Option<&Path>,
) -> Result<ProfiledBinary, LoadBinaryError> {
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
            let (b, lookup) = ProfiledBinary::load_with_lookup(binary, finder, &options)?;
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
                return Err(LoadBinaryError::NoNames {
                    binary: binary.to_path_buf(),
                    tried: lookup.map(|l| l.tried).unwrap_or_default(),
                });
            }
            if let Some(lookup) = lookup.filter(|l| need_names && l.found.is_none()) {
                if !b.has_line_info() {
                    eprintln!(
                        "pgo-agent: warning: {}",
                        no_dwarf_note(binary, &b, &lookup.tried)
                    );
                }
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

/// [`load_binary`] of the options' binary, its error in a [`crate::ConvertError`].
pub(crate) fn load_for(
    options: &crate::ConvertOptions,
    need_names: bool,
) -> Result<ProfiledBinary, crate::ConvertError> {
    load_binary(
        &options.binary,
        options.debug_binary.as_deref(),
        &options.debug_file_finder,
        need_names,
        options.use_dwarf_correlation,
        options.dwp.as_deref(),
    )
    .map_err(crate::ConvertError::LoadBinary)
}

/// What a binary with symbols but no DWARF (`strip --strip-debug`), whose debug file was
/// not found, gives: a probe profile from the symbols, or no line-based profile at all.
fn no_dwarf_note(binary: &Path, loaded: &ProfiledBinary, tried: &[String]) -> String {
    let what = if loaded.has_pseudo_probes() {
        "its functions are taken from its symbol table (llvm-profgen 19 writes an empty \
         profile for it)"
    } else {
        "a line-based profile names lines from DWARF, so the profile will be empty"
    };
    format!(
        "{} has no DWARF and no debug file was found: {what}. Give the unstripped build or its \
         debug file with --debug-binary, or put the debug file where it is looked for. \
         Tried:\n  {}",
        binary.display(),
        tried.join("\n  ")
    )
}
