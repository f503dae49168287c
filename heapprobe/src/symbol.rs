//! The file offset of a function in an ELF file, the `config2` of a uprobe event.
//!
//! The uprobe PMU (kernel/trace/trace_uprobe.c, `create_local_trace_uprobe`) takes the
//! probed file's path (`config1`, a user pointer) and the probe's *file offset*
//! (`config2`). A symbol's `st_value` is a virtual address; the byte holding it lies in the
//! `PT_LOAD` segment with `p_vaddr ≤ st_value < p_vaddr + p_filesz`, at file offset
//! `st_value − p_vaddr + p_offset`.

use std::path::Path;

use object::{Object, ObjectSymbol, SymbolKind};
use symbolizer::elf_image::{program_headers, vaddr_to_file_offset, ProgramHeader};

use super::UprobeError;

/// Largest file read to find symbols.
pub const MAX_ELF_BYTES: u64 = 1 << 30;

/// The program headers of the ELF file `path` (its `PT_LOAD`s map file offsets to virtual
/// addresses: `symbolizer::elf_image::file_offset_to_vaddr`).
pub fn file_program_headers(path: &Path) -> Result<Vec<ProgramHeader>, UprobeError> {
    let data = read_elf(path)?;
    program_headers(&data).map_err(|what| UprobeError::Elf {
        path: path.to_path_buf(),
        what,
    })
}

fn read_elf(path: &Path) -> Result<Vec<u8>, UprobeError> {
    let io = |source| UprobeError::Io {
        path: path.to_path_buf(),
        source,
    };
    let len = std::fs::metadata(path).map_err(io)?.len();
    if len > MAX_ELF_BYTES {
        return Err(UprobeError::Elf {
            path: path.to_path_buf(),
            what: format!("{len} bytes, larger than {MAX_ELF_BYTES}"),
        });
    }
    std::fs::read(path).map_err(io)
}

/// File offsets of `functions` in the ELF file `path` (dynamic symbols first, then the
/// static table), in the order asked; `None` for a function without a defined `STT_FUNC`
/// symbol.
pub fn function_file_offsets(
    path: &Path,
    functions: &[&str],
) -> Result<Vec<Option<u64>>, UprobeError> {
    let data = read_elf(path)?;
    function_file_offsets_in(path, &data, functions)
}

/// [`function_file_offsets`] over the file's bytes.
pub fn function_file_offsets_in(
    path: &Path,
    data: &[u8],
    functions: &[&str],
) -> Result<Vec<Option<u64>>, UprobeError> {
    let file = object::File::parse(data).map_err(|e| UprobeError::Elf {
        path: path.to_path_buf(),
        what: e.to_string(),
    })?;
    let headers = program_headers(data).map_err(|what| UprobeError::Elf {
        path: path.to_path_buf(),
        what,
    })?;
    let mut out = vec![None; functions.len()];
    for sym in file.dynamic_symbols().chain(file.symbols()) {
        if sym.kind() != SymbolKind::Text || sym.is_undefined() || sym.address() == 0 {
            continue;
        }
        let Ok(name) = sym.name() else { continue };
        for (i, f) in functions.iter().enumerate() {
            if out[i].is_none() && name == *f {
                out[i] = vaddr_to_file_offset(&headers, sym.address());
            }
        }
    }
    Ok(out)
}

/// Function symbols of an ELF file from `.dynsym` and `.symtab` (a stripped shared library
/// such as the distribution's libc keeps only `.dynsym`), to name addresses that have no
/// debug info: the defined `STT_FUNC` symbol whose `[st_value, st_value + st_size)` holds
/// the address. Among aliases at one address the name with the fewest leading underscores,
/// then the shortest, is kept (`malloc` rather than `__libc_malloc`).
#[derive(Clone, Debug, Default)]
pub struct FunctionSymbols {
    /// `(start, end, name)`, sorted by start.
    ranges: Vec<(u64, u64, String)>,
}

impl FunctionSymbols {
    /// Reads the symbols of `path`.
    pub fn from_file(path: &Path) -> Result<FunctionSymbols, UprobeError> {
        let data = read_elf(path)?;
        let file = object::File::parse(&*data).map_err(|e| UprobeError::Elf {
            path: path.to_path_buf(),
            what: e.to_string(),
        })?;
        let mut best: std::collections::BTreeMap<u64, (u64, String)> = Default::default();
        for sym in file.dynamic_symbols().chain(file.symbols()) {
            if sym.kind() != SymbolKind::Text || sym.is_undefined() || sym.address() == 0 {
                continue;
            }
            let Ok(name) = sym.name() else { continue };
            let rank = |n: &str| (n.len() - n.trim_start_matches('_').len(), n.len());
            let end = sym.address().saturating_add(sym.size().max(1));
            match best.get_mut(&sym.address()) {
                Some((e, n)) => {
                    *e = (*e).max(end);
                    if rank(name) < rank(n) {
                        *n = name.to_string();
                    }
                }
                None => {
                    best.insert(sym.address(), (end, name.to_string()));
                }
            }
        }
        Ok(FunctionSymbols {
            ranges: best.into_iter().map(|(s, (e, n))| (s, e, n)).collect(),
        })
    }

    /// The function containing link-time address `vaddr`.
    pub fn name_at(&self, vaddr: u64) -> Option<&str> {
        let i = self
            .ranges
            .partition_point(|r| r.0 <= vaddr)
            .checked_sub(1)?;
        let (start, end, name) = &self.ranges[i];
        (vaddr >= *start && vaddr < *end).then_some(name.as_str())
    }

    /// Number of functions.
    pub fn len(&self) -> usize {
        self.ranges.len()
    }

    /// True when the file has no function symbol.
    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_malloc_in_this_process_libc() {
        // The libc this test runs on: its `malloc` symbol must sit in an executable load,
        // and the bytes there must be the same as the ones mapped in our process.
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let Some(libc) = maps
            .lines()
            .filter_map(|l| l.split_whitespace().nth(5))
            .find(|p| p.contains("/libc.so") || p.contains("/libc-"))
        else {
            return; // statically linked or musl: nothing to check
        };
        let path = Path::new(libc);
        let offs = function_file_offsets(path, &["malloc", "no_such_function_xyz"]).unwrap();
        let off = offs[0].expect("malloc has a symbol");
        assert_eq!(offs[1], None);
        let data = std::fs::read(path).unwrap();
        let file = object::File::parse(&*data).unwrap();
        let headers = program_headers(&data).unwrap();
        let va = symbolizer::elf_image::file_offset_to_vaddr(&headers, off).unwrap();
        let sym = file
            .dynamic_symbols()
            .find(|s| s.name() == Ok("malloc"))
            .unwrap();
        assert_eq!(va, sym.address());
        // The function's first bytes in the file equal the code at &malloc in memory.
        let p = libc::malloc as *const u8;
        // SAFETY: reading 4 bytes of mapped code of a live function.
        let live = unsafe { std::slice::from_raw_parts(p, 4) };
        assert_eq!(&data[off as usize..off as usize + 4], live);
        let syms = FunctionSymbols::from_file(path).unwrap();
        assert_eq!(syms.name_at(va), Some("malloc"));
        assert_eq!(syms.name_at(va + 1), Some("malloc"));
    }
}
