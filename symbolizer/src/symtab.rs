//! [`SymbolTable`]: the ELF `.symtab` as llvm-profgen 19 reads it through `ObjectFile::symbols()`:
//! every symbol after the null entry, with its `st_value` and the section it is defined in
//! (none for undefined, absolute, common and file symbols). The disassembler walks code from
//! symbol to symbol; pseudo-probe decoding maps symbol-name GUIDs to start addresses.

use object::{Object, ObjectSymbol, SymbolKind, SymbolSection};

use crate::guid::function_guid;

/// One `.symtab` entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ElfSymbol {
    /// The symbol name as stored (not demangled, not canonicalised).
    pub name: String,
    /// `st_value`: the symbol's address in an executable or shared object.
    pub address: u64,
    /// Index of the section the symbol is defined in, if any.
    pub section: Option<usize>,
    /// `st_size`.
    pub size: u64,
    /// True for `STT_FUNC` (and `STT_GNU_IFUNC`) symbols.
    pub is_function: bool,
}

/// The `.symtab` symbols of a binary, in table order.
#[derive(Clone, Debug, Default)]
pub struct SymbolTable {
    symbols: Vec<ElfSymbol>,
}

impl SymbolTable {
    /// Reads `.symtab` (not `.dynsym`: llvm-profgen only sees the static table).
    pub fn from_object<'data, O: Object<'data>>(file: &O) -> SymbolTable {
        let symbols = file
            .symbols()
            .map(|sym| ElfSymbol {
                name: String::from_utf8_lossy(sym.name_bytes().unwrap_or_default()).into_owned(),
                address: sym.address(),
                section: match sym.section() {
                    SymbolSection::Section(index) => Some(index.0),
                    _ => None,
                },
                size: sym.size(),
                is_function: sym.kind() == SymbolKind::Text,
            })
            .collect();
        SymbolTable { symbols }
    }

    /// Builds a table from a list (tests).
    pub fn from_symbols(symbols: Vec<ElfSymbol>) -> SymbolTable {
        SymbolTable { symbols }
    }

    /// All symbols in table order.
    pub fn symbols(&self) -> &[ElfSymbol] {
        &self.symbols
    }

    /// The symbols defined in `section`, sorted by (address, name) as llvm-profgen sorts a
    /// section's `SymbolInfoTy` list (all of type `STT_NOTYPE`, so type never breaks ties).
    pub fn sorted_in_section(&self, section: usize) -> Vec<&ElfSymbol> {
        let mut list: Vec<&ElfSymbol> = self
            .symbols
            .iter()
            .filter(|s| s.section == Some(section))
            .collect();
        list.sort_by(|a, b| (a.address, a.name.as_str()).cmp(&(b.address, b.name.as_str())));
        list
    }

    /// `SymbolStartAddrs` of llvm-profgen: GUID of each symbol name → its address; a later
    /// symbol with the same GUID overwrites an earlier one (DenseMap assignment in table order).
    pub fn guid_to_address(&self) -> std::collections::HashMap<u64, u64> {
        let mut map = std::collections::HashMap::with_capacity(self.symbols.len());
        for sym in &self.symbols {
            map.insert(function_guid(&sym.name), sym.address);
        }
        map
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sym(name: &str, address: u64, section: Option<usize>) -> ElfSymbol {
        ElfSymbol {
            name: name.to_string(),
            address,
            section,
            size: 0,
            is_function: true,
        }
    }

    #[test]
    fn sorted_in_section_orders_by_address_then_name() {
        let table = SymbolTable::from_symbols(vec![
            sym("b", 0x20, Some(1)),
            sym("z", 0x10, Some(1)),
            sym("a", 0x20, Some(1)),
            sym("other", 0x0, Some(2)),
            sym("undef", 0x0, None),
        ]);
        let names: Vec<&str> = table
            .sorted_in_section(1)
            .iter()
            .map(|s| s.name.as_str())
            .collect();
        assert_eq!(names, ["z", "a", "b"]);
    }

    #[test]
    fn guid_map_last_symbol_wins() {
        let table =
            SymbolTable::from_symbols(vec![sym("foo", 0x10, Some(1)), sym("foo", 0x30, Some(1))]);
        assert_eq!(table.guid_to_address()[&6699318081062747564], 0x30);
    }
}
