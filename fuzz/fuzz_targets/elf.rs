//! Whole ELF binaries (`symbolizer::ProfiledBinary::from_bytes`): headers, symbols, text
//! disassembly, DWARF, `.pseudo_probe` / `.pseudo_probe_desc`; then the lookups the
//! generators make on a loaded binary, for a bounded number of instruction addresses.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use symbolizer::binary::{LoadOptions, ProfiledBinary};

fuzz_target!(|data: &[u8]| {
    let Ok(binary) =
        ProfiledBinary::from_bytes(Path::new("fuzz.elf"), data, &LoadOptions::default())
    else {
        return;
    };
    let _ = binary.preferred_base();
    let addrs: Vec<u64> = binary
        .functions()
        .take(32)
        .flat_map(|f| f.ranges.iter().map(|r| r.0))
        .take(64)
        .collect();
    for addr in addrs {
        let _ = binary.symbolize(addr, binary.has_pseudo_probes());
        let _ = binary.inline_frames(addr);
        let _ = binary.func_range_at(addr);
        let _ = binary.instruction_size(addr);
        let _ = binary
            .instructions_in(addr, addr.saturating_add(64))
            .count();
    }
    for p in binary.probes().iter().take(64) {
        let _ = binary.symbolize(p.address, true);
    }
});
