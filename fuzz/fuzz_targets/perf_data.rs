//! perf.data files (`collector::perf_data::PerfDataReader`): the bytes go to a scratch file
//! (the reader takes a path) and every record is read.
#![no_main]

use std::path::PathBuf;
use std::sync::OnceLock;

use collector::perf_data::PerfDataReader;
use libfuzzer_sys::fuzz_target;

fn scratch() -> &'static PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        let dir = if std::path::Path::new("/dev/shm").is_dir() {
            "/dev/shm"
        } else {
            "/tmp"
        };
        PathBuf::from(format!(
            "{dir}/pgo-fuzz-perf-data-{}.data",
            std::process::id()
        ))
    })
}

fuzz_target!(|data: &[u8]| {
    let path = scratch();
    std::fs::write(path, data).unwrap();
    if let Ok(mut reader) = PerfDataReader::open(path) {
        let _ = reader.event();
        for i in 0..reader.attr_count() {
            let _ = reader.attr_name(i);
        }
        // Bounded: a fuzz input is small, so is its record count.
        for _ in 0..1_000_000 {
            match reader.next_event() {
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => break,
            }
        }
    }
});
