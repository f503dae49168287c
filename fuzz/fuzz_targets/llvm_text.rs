//! LLVM text sample profiles (`exporter::format::llvm_text_reader::read`), the input of
//! `pgo-agent merge`.
#![no_main]

use exporter::format::llvm_text_reader::read;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = read(text);
    }
});
