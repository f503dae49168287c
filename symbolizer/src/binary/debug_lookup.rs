//! Loading a binary together with the debug file a [`DebugFileFinder`] finds for it: the
//! one way the daemon's workers, its HTTP store, `pull`, `merge`, `verify` and `convert`
//! (without `--debug-binary`) get the names of a stripped binary.

use std::path::Path;
use std::sync::Arc;

use object::{Object, ObjectSection};

use super::{map_file, DebugFileBytes, LazyCode, LoadOptions, ProfiledBinary, SharedBytes};
use crate::debug_file::{DebugFileFinder, DebugLookup};
use crate::error::SymbolizerError;

/// True when the ELF `data` lacks what a profile is named with: a `.symtab` naming code
/// (function names, probe placement) or `.debug_info` (function ranges, lines, inline
/// frames). Such a binary's debug file is looked for.
pub fn lacks_names(data: &[u8]) -> bool {
    object::File::parse(data).is_ok_and(|file| file_lacks_names(&file))
}

/// [`lacks_names`] of a parsed file.
fn file_lacks_names(file: &object::File<'_>) -> bool {
    let has_dwarf = file
        .section_by_name(".debug_info")
        .is_some_and(|s| s.size() > 0 && s.file_range().is_some());
    let has_symbols = file.symbols().any(|s| {
        use object::ObjectSymbol;
        s.kind() == object::SymbolKind::Text
    });
    !(has_dwarf && has_symbols)
}

impl ProfiledBinary {
    /// Loads the binary `data` (named `path`); when it [`lacks_names`] and has a build id,
    /// with the debug file `finder` finds for it. Returns the lookup when one was made (its
    /// [`DebugLookup::tried`] says why none was found). A debug file that fails to load is
    /// noted in the lookup and the binary loaded on its own.
    pub fn from_bytes_with_lookup(
        path: &Path,
        data: &[u8],
        finder: &DebugFileFinder,
        options: &LoadOptions,
    ) -> Result<(ProfiledBinary, Option<DebugLookup>), SymbolizerError> {
        Self::lookup_and_load(path, data, finder, options, None)
            .map(|(binary, lookup, _)| (binary, lookup))
    }

    /// [`ProfiledBinary::from_bytes_with_lookup`] of shared bytes (a memory map), without
    /// decoding the code of a binary that has, after the debug file lookup, no DWARF and
    /// no placed pseudo probes: that binary is returned with an empty [`super::CodeMap`]
    /// (its own [`unwinder::CodeLayout`] answers are those of a binary without code) and
    /// the [`LazyCode`] that holds `data` and decodes each function extent on its first
    /// query, answering as the eager load would. Any other binary is loaded as
    /// [`ProfiledBinary::from_bytes_with_lookup`] loads it, with `None`.
    #[allow(clippy::type_complexity)]
    pub fn from_shared_bytes_with_lookup(
        path: &Path,
        data: SharedBytes,
        finder: &DebugFileFinder,
        options: &LoadOptions,
    ) -> Result<(ProfiledBinary, Option<DebugLookup>, Option<Arc<LazyCode>>), SymbolizerError> {
        let bytes: &[u8] = (*data).as_ref();
        Self::lookup_and_load(path, bytes, finder, options, Some(&data))
    }

    #[allow(clippy::type_complexity)]
    fn lookup_and_load(
        path: &Path,
        data: &[u8],
        finder: &DebugFileFinder,
        options: &LoadOptions,
        shared: Option<&SharedBytes>,
    ) -> Result<(ProfiledBinary, Option<DebugLookup>, Option<Arc<LazyCode>>), SymbolizerError> {
        // Parsed once for both questions: which build id, and whether names are missing.
        let id = object::File::parse(data)
            .ok()
            .filter(file_lacks_names)
            .and_then(|f| {
                f.build_id()
                    .ok()
                    .flatten()
                    .map(|b| collector::BuildId(b.to_vec()))
            });
        let Some(id) = id else {
            let (binary, lazy) = Self::load_parts(path, data, None, options, shared)?;
            return Ok((binary, None, lazy));
        };
        let mut lookup = finder.find(&id, path, data);
        if let Some(found) = &lookup.found {
            match Self::load_with_debug_file(path, data, &found.path, options, shared) {
                Ok((binary, lazy)) => return Ok((binary, Some(lookup), lazy)),
                Err(e) => {
                    lookup.tried.push(format!("{}: {e}", found.path.display()));
                    lookup.found = None;
                }
            }
        }
        let (binary, lazy) = Self::load_parts(path, data, None, options, shared)?;
        Ok((binary, Some(lookup), lazy))
    }

    /// [`ProfiledBinary::from_shared_bytes_with_lookup`] without the lookup: the binary
    /// `data` (named `path`) with the debug file at `debug` (one a lookup found before),
    /// or alone. Loading a binary again this way checks no candidate and reads no file
    /// for its CRC.
    #[allow(clippy::type_complexity)]
    pub fn from_shared_bytes_with_debug_file(
        path: &Path,
        data: SharedBytes,
        debug: Option<&Path>,
        options: &LoadOptions,
    ) -> Result<(ProfiledBinary, Option<Arc<LazyCode>>), SymbolizerError> {
        match debug {
            Some(debug) => {
                let bytes: &[u8] = (*data).as_ref();
                Self::load_with_debug_file(path, bytes, debug, options, Some(&data))
            }
            None => Self::from_shared_bytes(path, data, options),
        }
    }

    #[allow(clippy::type_complexity)]
    fn load_with_debug_file(
        path: &Path,
        data: &[u8],
        debug: &Path,
        options: &LoadOptions,
        shared: Option<&SharedBytes>,
    ) -> Result<(ProfiledBinary, Option<Arc<LazyCode>>), SymbolizerError> {
        let mapped = Arc::new(map_file(debug)?);
        let debug_shared: SharedBytes = mapped.clone();
        Self::load_parts(
            path,
            data,
            Some(DebugFileBytes {
                path: debug,
                data: &mapped,
                shared: Some(&debug_shared).filter(|_| options.lazy_code),
            }),
            options,
            shared,
        )
    }

    /// [`ProfiledBinary::from_bytes_with_lookup`] of the file at `path` (memory-mapped).
    pub fn load_with_lookup(
        path: &Path,
        finder: &DebugFileFinder,
        options: &LoadOptions,
    ) -> Result<(ProfiledBinary, Option<DebugLookup>), SymbolizerError> {
        let data: Arc<memmap2::Mmap> = Arc::new(map_file(path)?);
        let shared: SharedBytes = data.clone();
        // Shared bytes make `lookup_and_load` return a no-DWARF binary's code apart from
        // it; only with `lazy_code` does the binary keep that code itself.
        Self::lookup_and_load(
            path,
            &data,
            finder,
            options,
            options.lazy_code.then_some(&shared),
        )
        .map(|(binary, lookup, _)| (binary, lookup))
    }
}
