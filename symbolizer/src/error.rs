//! [`SymbolizerError`]: why a binary could not be loaded or decoded. Every variant names the
//! file and, where it applies, the section and byte offset of the fault.

use std::path::PathBuf;

/// Errors from loading and decoding a profiled binary.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SymbolizerError {
    /// The file could not be read.
    #[error("{path}: cannot read: {source}")]
    Io {
        /// The binary's path.
        path: PathBuf,
        /// The underlying I/O error.
        source: std::io::Error,
    },
    /// The file is not an ELF object the symbolizer understands (or is malformed).
    #[error("{path}: not a valid ELF image: {what}")]
    InvalidElf {
        /// The binary's path.
        path: PathBuf,
        /// What the ELF parser reported.
        what: String,
    },
    /// Only 64-bit little-endian x86 ELF binaries are supported (llvm-profgen 19 disassembles
    /// the binary's own target; pgo-agent only knows x86-64).
    #[error("{path}: unsupported architecture {arch} (only x86-64 is supported)")]
    UnsupportedArchitecture {
        /// The binary's path.
        path: PathBuf,
        /// The ELF machine as `object` names it.
        arch: String,
    },
    /// No `PT_LOAD` segment with `PF_X` (llvm-profgen: "no executable segment found").
    #[error("{path}: no executable segment found")]
    NoExecutableSegment {
        /// The binary's path.
        path: PathBuf,
    },
    /// A section's contents could not be read (e.g. its file range lies past the end).
    #[error("{path}: section {section}: cannot read contents: {what}")]
    SectionData {
        /// The binary's path.
        path: PathBuf,
        /// The section as [`section_label`] names it: name, index, file range.
        section: String,
        /// What went wrong.
        what: String,
    },
    /// A pseudo-probe section (`.pseudo_probe` or `.pseudo_probe_desc`) is truncated or malformed.
    #[error("{path}: section {section}: malformed at byte offset {offset:#x}: {what}")]
    MalformedSection {
        /// The binary's path.
        path: PathBuf,
        /// Section name.
        section: &'static str,
        /// Byte offset inside the section where decoding failed.
        offset: usize,
        /// What was expected or what was wrong.
        what: &'static str,
    },
    /// DWARF debug information could not be parsed.
    #[error("{path}: DWARF: {what}")]
    Dwarf {
        /// The binary's path.
        path: PathBuf,
        /// What gimli reported, with the unit offset where known.
        what: String,
    },
    /// The debug file given for a binary belongs to another build.
    #[error("{path}: the debug file {debug} has build id {debug_id}, the binary {binary_id}")]
    DebugFileMismatch {
        /// The binary's path.
        path: PathBuf,
        /// The debug file's path.
        debug: PathBuf,
        /// The binary's build id, hex.
        binary_id: String,
        /// The debug file's build id, hex.
        debug_id: String,
    },
    /// A size that drives allocation exceeds its limit.
    #[error("{path}: {what} is {size}, over the limit of {max}")]
    TooLarge {
        /// The binary's path.
        path: PathBuf,
        /// What is too large.
        what: &'static str,
        /// The size found.
        size: u64,
        /// The limit.
        max: u64,
    },
}

/// How errors name an ELF section: its name (`(unnamed)` when the name cannot be read),
/// its index in the section header table and the file range its header claims, e.g.
/// `.debug_info (#28, file offset 0x3a20, size 0x1c5)`: a section that cannot be read
/// usually has a header pointing past the end of the file, and the range shows that.
pub(crate) fn section_label<'data>(section: &impl object::ObjectSection<'data>) -> String {
    let name = match section.name() {
        Ok(name) if !name.is_empty() => name,
        _ => "(unnamed)",
    };
    let index = section.index().0;
    match section.file_range() {
        Some((offset, size)) => {
            format!("{name} (#{index}, file offset {offset:#x}, size {size:#x})")
        }
        None => format!("{name} (#{index})"),
    }
}
