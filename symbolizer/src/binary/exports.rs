//! [`Exports`]: the functions a binary exports in `.dynsym`, by address, to name the
//! extents of an address-only binary (stripped, no debug file) in pprof profiles and flame
//! graphs.
//!
//! Only addresses and string-table offsets are kept (16 bytes a function: a library such as
//! libLLVM exports about 40,000, with 4 MB of names); a name is read from the mapped file
//! when a profile asks for it.

use object::elf;
use object::read::elf::{ElfFile64, Sym as _};
use object::{Endianness, Object, ObjectSection};

/// See the module docs.
#[derive(Debug)]
pub(crate) struct Exports {
    /// `(address, offset of the name in .dynstr)`, sorted by address, one per address (a
    /// global symbol where aliases share one).
    by_address: Vec<(u64, u32)>,
    /// `.dynstr`'s bytes in the file: `(offset, size)`.
    strings: (usize, usize),
}

impl Exports {
    /// The defined `STT_FUNC` and `STT_GNU_IFUNC` symbols of `file`'s `.dynsym`; `None`
    /// when it has none.
    pub(crate) fn of(file: &ElfFile64<'_, Endianness>) -> Option<Exports> {
        let endian = file.endian();
        let (offset, size) = file.section_by_name(".dynstr")?.file_range()?;
        let table = file.elf_dynamic_symbol_table();
        let mut named: Vec<(u64, bool, u32)> = table
            .symbols()
            .iter()
            .filter(|s| {
                matches!(s.st_type(), elf::STT_FUNC | elf::STT_GNU_IFUNC)
                    && s.st_shndx(endian) != elf::SHN_UNDEF
                    && s.st_value(endian) != 0
                    && s.st_name(endian) != 0
            })
            .map(|s| {
                (
                    s.st_value(endian),
                    s.st_bind() != elf::STB_GLOBAL,
                    s.st_name(endian),
                )
            })
            .collect();
        if named.is_empty() {
            return None;
        }
        // Globals first among the symbols of one address, then the first listed.
        named.sort();
        named.dedup_by_key(|e| e.0);
        Some(Exports {
            by_address: named.into_iter().map(|(a, _, n)| (a, n)).collect(),
            strings: (usize::try_from(offset).ok()?, usize::try_from(size).ok()?),
        })
    }

    /// The name of the function exported at exactly `addr`, read from `data` (the file
    /// [`Exports::of`] was made from).
    pub(crate) fn name_at(&self, data: &[u8], addr: u64) -> Option<String> {
        let i = self.by_address.binary_search_by_key(&addr, |e| e.0).ok()?;
        let (offset, size) = self.strings;
        let strings = data.get(offset..offset.checked_add(size)?)?;
        let name = strings.get(self.by_address[i].1 as usize..)?;
        let end = name.iter().position(|&b| b == 0)?;
        Some(String::from_utf8_lossy(&name[..end]).into_owned())
    }
}
