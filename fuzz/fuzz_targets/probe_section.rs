//! `.pseudo_probe` and `.pseudo_probe_desc` section bytes (`symbolizer::probe`), decoded
//! directly (no ELF around them). The first byte picks the section; the probe decoder gets a
//! few function starts so sentinel and GUID-keyed paths run.
#![no_main]

use std::collections::HashMap;

use libfuzzer_sys::fuzz_target;
use symbolizer::probe::desc::decode_desc_section;
use symbolizer::probe::ProbeSection;

fuzz_target!(|data: &[u8]| {
    let Some((&which, body)) = data.split_first() else {
        return;
    };
    if which & 1 == 0 {
        let _ = decode_desc_section(body);
        return;
    }
    // GUIDs from the input's own first words map to function starts.
    let mut starts = HashMap::new();
    for (i, w) in body.chunks_exact(8).take(4).enumerate() {
        starts.insert(
            u64::from_le_bytes(w.try_into().unwrap()),
            0x1000 * (i as u64 + 1),
        );
    }
    if let Ok(section) = ProbeSection::decode(body, &starts) {
        for p in section.probes.iter().take(64) {
            let _ = section.probes_at(p.address);
        }
    }
});
