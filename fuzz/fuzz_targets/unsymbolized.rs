//! Unsymbolized profiles (llvm-profgen `--skip-symbolization` text,
//! `exporter::format::unsymbolized`): read, then written back and converted to counters.
#![no_main]

use exporter::format::unsymbolized::read_unsymbolized;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    for base in [0u64, 0x40_0000] {
        if let Ok(profile) = read_unsymbolized(text, base) {
            let mut out = Vec::new();
            let _ = profile.write(&mut out, base);
            let _ = profile.to_counter_set(base);
        }
    }
});
