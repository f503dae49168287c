//! `perf script` text (`collector::perf_script::PerfScriptReader`), LBR-only and hybrid.
#![no_main]

use collector::perf_script::PerfScriptReader;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(mut reader) = PerfScriptReader::new(data, "fuzz.perfscript") {
        let _ = reader.script_type();
        for _ in 0..1_000_000 {
            match reader.next_event() {
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => break,
            }
        }
        let _ = reader.stats();
    }
});
