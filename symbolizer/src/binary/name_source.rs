//! [`NameSource`]: where a binary's names come from, and the symbol list the disassembler
//! walks.
//!
//! A binary is loaded from the file that ran (its code, segments and probe sections) and,
//! optionally, a separate debug file (`objcopy --only-keep-debug`, found by build id or
//! `.gnu_debuglink`, or llvm-profgen's `--debug-binary`). The debug file's allocated sections
//! are `SHT_NOBITS` (same addresses and sizes, no bytes), so code is always read from the
//! binary; the names are taken where they are:
//!
//! * symbols: the binary's `.symtab` when it names any code (llvm-profgen 19 reads only the
//!   binary's), else the debug file's, with its section indices mapped onto the binary's
//!   sections of the same name and address;
//! * neither (a `strip -s` binary without its debug file): one unnamed entry per function
//!   extent from `.eh_frame` FDEs and `.dynsym` ([`super::unwind_extents`]), so the code is
//!   still decoded from function start to function start as llvm-profgen decodes it from
//!   symbol to symbol; pseudo probes cannot be placed then (each function's first probe is
//!   relative to its symbol) and the binary is counted by address only.

use std::path::{Path, PathBuf};

use object::read::elf::{ElfFile64, SectionHeader as _};
use object::{elf, Endianness, Object, ObjectSection};

use super::unwind_extents::function_extents;
use crate::error::SymbolizerError;
use crate::symtab::{ElfSymbol, SymbolTable};

/// Where a loaded binary's function names, symbols and line tables come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NameSource {
    /// The binary's own `.symtab` (and its DWARF, if any).
    Binary,
    /// A separate debug file: its DWARF, and its `.symtab` when the binary has none.
    DebugFile(PathBuf),
    /// No symbol table anywhere: functions are known by their `.eh_frame`/`.dynsym`
    /// extents, unnamed; counters can be kept by address, not symbolized.
    AddressOnly,
}

impl NameSource {
    /// True when function names are known (the profile can be symbolized).
    pub fn has_names(&self) -> bool {
        !matches!(self, NameSource::AddressOnly)
    }
}

/// The symbol list chosen for a binary.
pub(crate) struct ChosenSymbols {
    /// Symbols, section indices in the binary's section table.
    pub table: SymbolTable,
    /// Where they came from.
    pub source: NameSource,
}

/// True when some function or named symbol of `table` lies in an executable section of
/// `file`.
fn names_code(table: &SymbolTable, file: &ElfFile64<'_, Endianness>) -> bool {
    let endian = file.endian();
    table.symbols().iter().any(|s| {
        s.section.is_some_and(|i| {
            file.section_by_index(object::SectionIndex(i))
                .is_ok_and(|sec| {
                    sec.elf_section_header().sh_flags(endian).0 & elf::SHF_EXECINSTR.0 != 0
                })
        })
    })
}

/// Chooses the symbols of `binary` (see the module docs). `debug` is the separate debug
/// file, if one was given or found.
pub(crate) fn choose_symbols(
    binary: &ElfFile64<'_, Endianness>,
    binary_path: &Path,
    debug: Option<(&ElfFile64<'_, Endianness>, &Path)>,
) -> Result<ChosenSymbols, SymbolizerError> {
    let own = SymbolTable::from_object(binary);
    if names_code(&own, binary) {
        let source = match debug {
            Some((_, path)) => NameSource::DebugFile(path.to_path_buf()),
            None => NameSource::Binary,
        };
        return Ok(ChosenSymbols { table: own, source });
    }
    if let Some((file, path)) = debug {
        let theirs = remap_sections(&SymbolTable::from_object(file), file, binary);
        if names_code(&theirs, binary) {
            return Ok(ChosenSymbols {
                table: theirs,
                source: NameSource::DebugFile(path.to_path_buf()),
            });
        }
    }
    Ok(ChosenSymbols {
        table: extent_symbols(binary, binary_path)?,
        source: NameSource::AddressOnly,
    })
}

/// `table`'s symbols (section indices of `from`) with section indices of `to`: a section
/// maps to the one of `to` with the same name and address; symbols of sections `to` lacks
/// lose their section.
fn remap_sections(
    table: &SymbolTable,
    from: &ElfFile64<'_, Endianness>,
    to: &ElfFile64<'_, Endianness>,
) -> SymbolTable {
    let target: Vec<(&[u8], u64, usize)> = to
        .sections()
        .filter_map(|s| Some((s.name_bytes().ok()?, s.address(), s.index().0)))
        .collect();
    let map: std::collections::HashMap<usize, usize> = from
        .sections()
        .filter_map(|s| {
            let name = s.name_bytes().ok()?;
            let addr = s.address();
            let j = target.iter().find(|(n, a, _)| *n == name && *a == addr)?.2;
            Some((s.index().0, j))
        })
        .collect();
    SymbolTable::from_symbols(
        table
            .symbols()
            .iter()
            .map(|s| ElfSymbol {
                section: s.section.and_then(|i| map.get(&i).copied()),
                ..s.clone()
            })
            .collect(),
    )
}

/// One unnamed function symbol per `.eh_frame` FDE or sized `.dynsym` function in an
/// executable section other than the PLT (llvm-profgen does not decode `.plt`, and the
/// `.plt.got`/`.plt.sec` stubs have no `.symtab` symbol in an unstripped file), and one at
/// the start of each such section, all unnamed.
fn extent_symbols(
    file: &ElfFile64<'_, Endianness>,
    path: &Path,
) -> Result<SymbolTable, SymbolizerError> {
    let endian = file.endian();
    let code_sections: Vec<(u64, u64, usize)> = file
        .sections()
        .filter(|s| {
            let h = s.elf_section_header();
            h.sh_flags(endian).0 & elf::SHF_EXECINSTR.0 != 0
                && !s.name().unwrap_or("").starts_with(".plt")
        })
        .map(|s| {
            (
                s.address(),
                s.address().saturating_add(s.size()),
                s.index().0,
            )
        })
        .collect();
    let mut symbols: Vec<ElfSymbol> = function_extents(file, path)?
        .into_iter()
        .filter_map(|e| {
            let section = code_sections
                .iter()
                .find(|(lo, hi, _)| *lo <= e.start && e.start < *hi)?
                .2;
            // Unnamed: nothing is named from an address-only binary, and a name per
            // function (a library exports tens of thousands) would cost megabytes.
            Some(ElfSymbol {
                name: String::new(),
                address: e.start,
                section: Some(section),
                size: e.end - e.start,
                is_function: true,
            })
        })
        .collect();
    // `.init` and `.fini` hold `_init` and `_fini`, which have no FDE: each code section is
    // decoded from its start, as from the symbol an unstripped file has there.
    for &(lo, hi, index) in &code_sections {
        if hi > lo && !symbols.iter().any(|s| s.address == lo) {
            symbols.push(ElfSymbol {
                name: String::new(),
                address: lo,
                section: Some(index),
                size: 0,
                is_function: true,
            });
        }
    }
    Ok(SymbolTable::from_symbols(symbols))
}
