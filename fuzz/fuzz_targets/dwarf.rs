//! DWARF line and inline lookups (`symbolizer::dwarf::DwarfInfo`): the input is a list of
//! DWARF sections (`u8 section index, u32 length, bytes`), wrapped into a minimal x86-64 ELF
//! with `object::write`, so the fuzzer mutates DWARF rather than ELF headers. Then
//! `inlining_info` runs on the start, middle and end of each subprogram range (bounded).
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use object::write::Object as WriteObject;
use object::{Architecture, BinaryFormat, Endianness, SectionKind};
use symbolizer::dwarf::DwarfInfo;

/// The sections the loader reads; seeds use these indices (scripts/fuzz.sh).
const SECTIONS: [&str; 10] = [
    ".debug_info",
    ".debug_abbrev",
    ".debug_line",
    ".debug_str",
    ".debug_line_str",
    ".debug_ranges",
    ".debug_rnglists",
    ".debug_addr",
    ".debug_str_offsets",
    ".debug_aranges",
];

fuzz_target!(|data: &[u8]| {
    let mut obj = WriteObject::new(BinaryFormat::Elf, Architecture::X86_64, Endianness::Little);
    let mut rest = data;
    let mut seen = [false; SECTIONS.len()];
    while rest.len() >= 5 {
        let index = rest[0] as usize % SECTIONS.len();
        let len = (u32::from_le_bytes(rest[1..5].try_into().unwrap()) as usize).min(rest.len() - 5);
        let bytes = &rest[5..5 + len];
        rest = &rest[5 + len..];
        if std::mem::replace(&mut seen[index], true) {
            continue;
        }
        let id = obj.add_section(
            Vec::new(),
            SECTIONS[index].as_bytes().to_vec(),
            SectionKind::Debug,
        );
        obj.append_section_data(id, bytes, 1);
    }
    let Ok(elf) = obj.write() else { return };
    let Ok(file) = object::File::parse(&*elf) else {
        return;
    };
    let Ok(info) = DwarfInfo::load(&file, Path::new("fuzz.dwarf")) else {
        return;
    };
    let mut lookups = 0;
    for (_, ranges) in info.subprograms() {
        for &(lo, hi) in ranges {
            for addr in [lo, lo + (hi.saturating_sub(lo)) / 2, hi.saturating_sub(1)] {
                let _ = info.inlining_info(addr);
                lookups += 1;
                if lookups > 256 {
                    return;
                }
            }
        }
    }
});
