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
pub fn load_binary(
    binary: &Path,
    debug: Option<&Path>,
    finder: &DebugFileFinder,
    need_names: bool,
    use_dwarf_correlation: bool,
) -> Result<ProfiledBinary, LoadBinaryError> {
    // Code decoded as samples reach it, from the file's memory map: the tools' memory
    // and time grow with the code the profile touches, not with the binary.
    let options = LoadOptions {
        lazy_code: true,
        release_decoded_pages: true,
        use_dwarf_correlation,
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
            b
        }
    };
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
    )
    .map_err(crate::ConvertError::LoadBinary)
}
