//! LLVM extbinary sample profiles (`exporter::format::extbinary::reader::read`); a profile
//! read back is written again, which must not fail.
#![no_main]

use exporter::format::extbinary::reader::read;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(profile) = read(data) {
        let mut out = Vec::new();
        let _ = exporter::format::extbinary::write(&profile, &mut out);
    }
});
