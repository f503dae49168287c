//! MemProf raw heap profiles (`collector::memprof::RawMemProfile::parse`), as binaries built
//! with `-fmemory-profile` drop them in the spool.
#![no_main]

use std::path::Path;

use collector::memprof::RawMemProfile;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(profile) = RawMemProfile::parse(Path::new("fuzz.memprofraw"), data) {
        let _ = profile.main_build_id();
    }
});
