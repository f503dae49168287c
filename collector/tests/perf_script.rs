//! The perf script reader against Debian's perf 6.1 output: `perf script -F ip,brstack
//! --show-mmap-events` of a perf.data must give the same samples and mappings as our perf.data
//! reader gives from the file itself.

use std::path::{Path, PathBuf};
use std::process::Command;

use collector::perf_script::{PerfScriptReader, PerfScriptType};
use collector::{PerfEvent, SideBandEvent};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures")
        .join(name)
}

/// `perf script -F ip,brstack --show-mmap-events -i <path>`, or `None` without perf.
fn perf_script(path: &Path) -> Option<String> {
    let out = Command::new("perf")
        .args(["script", "-F", "ip,brstack", "--show-mmap-events", "-i"])
        .arg(path)
        .output()
        .ok()?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(String::from_utf8(out.stdout).unwrap())
}

/// (ip, callchain, [(from, to, mispred|pred|cycles)]) of each sample with a branch stack.
type Key = (u64, Vec<u64>, Vec<(u64, u64, u64)>);

/// (pid, addr, len, pgoff, path) of each mapping.
type MmapKey = (i32, u64, u64, u64, String);

fn keys(events: &[PerfEvent]) -> (Vec<Key>, Vec<MmapKey>) {
    let mut samples = Vec::new();
    let mut mmaps = Vec::new();
    for e in events {
        match e {
            PerfEvent::Sample(s) if !s.lbr.is_empty() => samples.push((
                s.ip,
                s.callchain.clone(),
                s.lbr
                    .iter()
                    .map(|e| (e.from, e.to, e.flags & 0xffff3))
                    .collect(),
            )),
            PerfEvent::SideBand(SideBandEvent::Mmap2(m)) => {
                mmaps.push((m.pid, m.addr, m.len, m.pgoff, m.filename.clone()))
            }
            _ => {}
        }
    }
    (samples, mmaps)
}

#[test]
fn skylake_perf_script_matches_perf_data() {
    let data = fixture("propeller_sample_1/perf.data");
    let Some(text) = perf_script(&data) else {
        return;
    };
    let reader = PerfScriptReader::new(text.as_bytes(), "skylake.perfscript").unwrap();
    assert_eq!(reader.script_type(), PerfScriptType::LbrOnly);
    let from_text: Vec<PerfEvent> = reader.collect::<Result<_, _>>().unwrap();
    let from_data = collector::perf_data::read_perf_data(&data).unwrap();
    let (text_samples, text_mmaps) = keys(&from_text);
    let (data_samples, data_mmaps) = keys(&from_data.events);
    assert_eq!(text_samples.len(), 3732);
    assert_eq!(text_samples, data_samples);
    assert_eq!(text_mmaps, data_mmaps);
}

#[test]
fn hybrid_perf_script_of_our_perf_data_matches() {
    // A recording with call chains, written by our writer, printed by perf, read back.
    let dir = std::env::temp_dir().join(format!("collector-perf-script-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("hybrid.data");
    let base = 0x7f00_0000_0000u64;
    let mut events = vec![PerfEvent::SideBand(SideBandEvent::Mmap2(
        collector::Mmap2Event {
            pid: 77,
            tid: 77,
            addr: base,
            len: 0x10000,
            pgoff: 0,
            prot: 5,
            flags: 2,
            filename: "/nonexistent/libhybrid.so".into(),
            ..Default::default()
        },
    ))];
    for i in 0..50u64 {
        events.push(PerfEvent::Sample(collector::Sample {
            pid: 77,
            tid: 77,
            time: 1000 + i,
            ip: base + 0x100 + i,
            callchain: vec![base + 0x100 + i, base + 0x2000, base + 0x3000 + i],
            lbr: (0..(1 + i % 32))
                .map(|j| collector::LbrEntry {
                    from: base + 0x40 * j + 8,
                    to: base + 0x40 * j,
                    flags: 2 | (j << 4),
                })
                .collect(),
            count: 1,
            user_stack: None,
        }));
    }
    let rec = collector::Recording {
        event: collector::EventDescription::intel_taken_branches(1009, false),
        build_ids: vec![],
        events,
        cmdline: vec![],
    };
    collector::perf_data::write_perf_data(&path, &rec).unwrap();
    let Some(text) = perf_script(&path) else {
        return;
    };
    let reader = PerfScriptReader::new(text.as_bytes(), "hybrid.perfscript").unwrap();
    assert_eq!(reader.script_type(), PerfScriptType::Hybrid);
    let from_text: Vec<PerfEvent> = reader.collect::<Result<_, _>>().unwrap();
    let (text_samples, text_mmaps) = keys(&from_text);
    let (mut want_samples, want_mmaps) = keys(&rec.events);
    // perf 6.1 prints the call chain entries of a user-space mapping as binary offsets
    // (`map__map_ip`: ip - map start + pgoff; pgoff is 0 here), the branch stack as is.
    for (ip, chain, _) in &mut want_samples {
        *ip -= base;
        chain.iter_mut().for_each(|a| *a -= base);
    }
    assert_eq!(text_mmaps, want_mmaps);
    assert_eq!(text_samples, want_samples);
}

/// Throughput check (not a test of speed: nothing is asserted about time). Run with
/// `cargo test -p collector --release --test perf_script -- --ignored --nocapture`.
#[test]
#[ignore]
fn hybrid_200k_samples_throughput() {
    use std::fmt::Write as _;
    let mut text = String::new();
    text.push_str(
        "PERF_RECORD_MMAP2 1/1: [0x555555554000(0x100000) @ 0 08:01 1234 0]: r-xp /usr/bin/prog\n",
    );
    for i in 0..200_000u64 {
        text.push('\n');
        for d in 0..12u64 {
            writeln!(text, "\t{:16x}", 0x555555554000 + i % 4096 + d * 0x100).unwrap();
        }
        for j in 0..32u64 {
            write!(
                text,
                " 0x{:x}/0x{:x}/P/-/-/{}/COND ",
                0x555555554000 + j * 16 + 8,
                0x555555554000 + j * 16,
                j
            )
            .unwrap();
        }
        text.push('\n');
    }
    let start = std::time::Instant::now();
    let reader = PerfScriptReader::new(text.as_bytes(), "bench").unwrap();
    let mut n = 0u64;
    let mut entries = 0usize;
    for e in reader {
        if let PerfEvent::Sample(s) = e.unwrap() {
            n += 1;
            entries += s.lbr.len();
        }
    }
    let secs = start.elapsed().as_secs_f64();
    assert_eq!((n, entries), (200_000, 200_000 * 32));
    println!(
        "{} MB, {n} samples in {secs:.3} s: {:.0} MB/s",
        text.len() >> 20,
        text.len() as f64 / secs / 1e6
    );
}
