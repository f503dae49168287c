//! Pipe-mode perf.data (`perf record -o - > FILE`, `perf inject -o -`) reads as the file-mode
//! recording of the same data: the fixtures of tests/fixtures/pipe_mode/ (made by Debian's
//! perf 6.1, see the README there) and, when perf is installed, the Skylake LBR recording
//! converted by `perf inject` and a fresh two-event recording.

mod support;

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use collector::perf_data::{read_perf_data, PerfDataReader};
use collector::record::Record;
use collector::{Mmap2Event, PerfEvent, Recording, Sample, SideBandEvent};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/pipe_mode")
        .join(name)
}

fn skylake() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/propeller_sample_1/perf.data")
}

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("collector-pipe-mode-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

/// Runs perf with its standard output in `out`; `None` when perf is not installed or fails.
fn perf_to(out: &Path, args: &[&str]) -> Option<()> {
    let status = Command::new("perf")
        .args(args)
        .stdout(File::create(out).unwrap())
        .stderr(Stdio::null())
        .status();
    match status {
        Ok(s) if s.success() => Some(()),
        Ok(s) => {
            eprintln!("perf {args:?} failed ({s}); skipping");
            None
        }
        Err(e) => {
            eprintln!("perf not runnable ({e}); skipping");
            None
        }
    }
}

fn samples(r: &Recording) -> Vec<&Sample> {
    r.events
        .iter()
        .filter_map(|e| match e {
            PerfEvent::Sample(s) => Some(s),
            _ => None,
        })
        .collect()
}

fn mmaps(r: &Recording) -> Vec<&Mmap2Event> {
    r.events
        .iter()
        .filter_map(|e| match e {
            PerfEvent::SideBand(SideBandEvent::Mmap2(m)) => Some(m),
            _ => None,
        })
        .collect()
}

/// `pipe` reads to the same event description, samples and side-band events as `file`, in
/// the same order. (`perf inject` writes its own command line as the CMDLINE feature.)
fn assert_reads_alike(file: &Recording, pipe: &Recording) {
    assert_eq!(pipe.event, file.event);
    let (s, f) = (samples(pipe), samples(file));
    assert_eq!(s.len(), f.len());
    assert_eq!(s.first(), f.first());
    assert_eq!(s.last(), f.last());
    assert_eq!(mmaps(pipe), mmaps(file));
    assert_eq!(pipe.events, file.events);
}

/// (hex build id, filename) of each entry.
fn build_ids(r: &Recording) -> Vec<(String, &str)> {
    r.build_ids
        .iter()
        .map(|b| (b.build_id.to_hex(), b.filename.as_str()))
        .collect()
}

const DASH: &str = "/usr/bin/dash";
const LD: &str = "/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2";
const LIBC: &str = "/usr/lib/x86_64-linux-gnu/libc.so.6";

#[test]
fn injected_pipe_reads_as_its_file_mode_original() {
    let file = read_perf_data(&fixture("sh_loop.data")).unwrap();
    let pipe = read_perf_data(&fixture("sh_loop.pipe.data")).unwrap();
    assert_reads_alike(&file, &pipe);
    let s = samples(&pipe);
    // perf record: "Captured and wrote 0.004 MB sh_loop.data (36 samples)"
    assert_eq!(s.len(), 36);
    // perf script -F pid,tid,time,ip -G --ns | sed -n '1p;$p'
    //   23794/23794 32559.924804023:      7ff5dd96cdd6
    //   23794/23794 32559.959835522:      55abd0ea3e4e
    assert_eq!(
        (s[0].pid, s[0].tid, s[0].time, s[0].ip),
        (23794, 23794, 32559924804023, 0x7ff5dd96cdd6)
    );
    let last = s[s.len() - 1];
    assert_eq!((last.time, last.ip), (32559959835522, 0x55abd0ea3e4e));
    assert!(s.iter().all(|s| !s.callchain.is_empty()));
    // perf script -F ip --show-mmap-events -G | grep MMAP2 | head -1
    //   PERF_RECORD_MMAP2 23794/23794: [0x55abd0e99000(0x13000) @ 0x4000 fe:00 247076 0]: r-xp /usr/bin/dash
    let dash = mmaps(&pipe)
        .into_iter()
        .find(|m| m.filename == DASH)
        .unwrap();
    assert_eq!(
        (dash.pid, dash.addr, dash.len, dash.pgoff),
        (23794, 0x55abd0e99000, 0x13000, 0x4000)
    );
    assert_eq!(
        (dash.maj, dash.min, dash.ino, dash.prot),
        (0xfe, 0, 247076, 5)
    );
    // perf report --header-only: "cmdline : /usr/bin/perf inject -i sh_loop.data -o -"
    assert_eq!(
        pipe.cmdline,
        ["/usr/bin/perf", "inject", "-i", "sh_loop.data", "-o", "-"]
    );
    assert_eq!(file.cmdline[1], "record");
    // perf buildid-list -i sh_loop.data: 4 entries; `perf inject -o -` writes none.
    assert_eq!(file.build_ids.len(), 4);
    assert_eq!(pipe.build_ids, []);
}

#[test]
fn build_id_records_give_the_file_modes_build_ids() {
    let file = read_perf_data(&fixture("sh_loop.data")).unwrap();
    // `perf inject -b` re-sorts the records by time: the reader's order is the same.
    let pipe = read_perf_data(&fixture("sh_loop.buildid.pipe.data")).unwrap();
    assert_reads_alike(&file, &pipe);
    // perf buildid-list -i sh_loop.buildid.pipe.data (stream order)
    assert_eq!(
        build_ids(&pipe),
        [
            ("7ebc65e52f2bbea498b4040fa92f7238377aaba9".to_string(), LD),
            ("be6397ddffc3e384c505d7deab3bed190c884df9".to_string(), DASH),
            ("93ac61ec5a8eb1396f9fbd350e3169a558528a40".to_string(), LIBC),
        ]
    );
    // Each is the file-mode entry of its DSO; the file's fourth is [vdso], for which
    // perf inject writes none.
    for entry in &pipe.build_ids {
        assert!(file.build_ids.contains(entry), "{entry:?}");
    }
    let only_in_file: Vec<&str> = file
        .build_ids
        .iter()
        .filter(|b| !pipe.build_ids.contains(b))
        .map(|b| b.filename.as_str())
        .collect();
    assert_eq!(only_in_file, ["[vdso]"]);
}

/// A pipe-mode file as `perf record -o -` writes it (EVENT_UPDATE, ID_INDEX, THREAD_MAP,
/// CPU_MAP, FINISHED_INIT records; tracing data after HEADER_TRACING_DATA; two events told
/// apart by their ids) against `perf script -F event,pid,tid,time,ip -G --ns`.
#[test]
fn recorded_pipe_matches_perf_script() {
    let path = fixture("tracepoint.pipe.data");
    let mut reader = PerfDataReader::open(&path).unwrap();
    assert_eq!(reader.attr_count(), 2);
    assert_eq!(reader.attr_name(0), Some("sched:sched_process_exec"));
    assert_eq!(reader.attr_name(1), Some("cpu-clock"));
    assert_eq!(reader.event().name, "sched:sched_process_exec");
    assert_eq!(
        reader.cmdline(),
        [
            "/usr/bin/perf",
            "record",
            "-e",
            "sched:sched_process_exec",
            "-e",
            "cpu-clock",
            "-g",
            "-o",
            "-",
            "--",
            "/bin/true"
        ]
    );
    let mut got = Vec::new();
    while let Some((attr, record)) = reader.next_record().unwrap() {
        if let Record::Sample(s) = record {
            let s = s.sample;
            assert_eq!((s.pid, s.tid), (23799, 23799));
            got.push((attr, s.time, s.ip));
        }
    }
    #[rustfmt::skip]
    let want = [
        (0, 32561096108821, 0xffffffff8139be59),
        (1, 32561096271864, 0xffffffff81c3bf2a),
        (1, 32561096511376, 0x7f8368b4a3e2),
        (1, 32561096764605, 0x7f8368b49f38),
        (1, 32561097011941, 0x7f8368b49f02),
        (1, 32561097262565, 0xffffffff8162f3bc),
        (1, 32561097519410, 0xffffffff8168e06d),
        (1, 32561097763979, 0xffffffff8158e3f5),
    ];
    assert_eq!(got, want);
    // perf script -F ip --show-mmap-events -G | grep MMAP2
    let r = read_perf_data(&path).unwrap();
    let got: Vec<(u64, u64, u64, u64, &str)> = mmaps(&r)
        .iter()
        .filter(|m| m.pid == 23799)
        .map(|m| (m.addr, m.len, m.pgoff, m.ino, m.filename.as_str()))
        .collect();
    assert_eq!(
        got,
        [
            (0x562dadd1f000, 0x4000, 0x2000, 247857, "/usr/bin/true"),
            (0x7f8368b36000, 0x26000, 0x1000, 325843, LD),
            (0x7f8368b33000, 0x2000, 0, 0, "[vdso]"),
            (0x7f8368965000, 0x156000, 0x26000, 326279, LIBC),
        ]
    );
    assert_eq!(r.build_ids, []);
}

/// (start, end) of each record of a pipe-mode file, the data that follows a
/// HEADER_TRACING_DATA record included in its end.
fn records(bytes: &[u8]) -> Vec<(usize, usize, usize)> {
    let mut out = Vec::new();
    let mut pos = 16;
    while pos < bytes.len() {
        let kind = u32::from_le_bytes(bytes[pos..pos + 4].try_into().unwrap());
        let size = u16::from_le_bytes([bytes[pos + 6], bytes[pos + 7]]) as usize;
        let trailing = if kind == 66 {
            u32::from_le_bytes(bytes[pos + 8..pos + 12].try_into().unwrap()) as usize
        } else {
            0
        };
        out.push((pos, pos + size, pos + size + trailing));
        pos += size + trailing;
    }
    assert_eq!(pos, bytes.len());
    out
}

/// Cuts of the file inside each record (in its header, after it, in the middle, one byte
/// short, in the data after it) fail naming the file and the record's offset (for the data
/// after HEADER_TRACING_DATA: the offset of its record's body); a cut between two records
/// reads as the records before it, as perf reads it.
fn assert_cuts_fail_with_offset(bytes: &[u8], name: &str) {
    let path = tmp(name);
    let prefix = path.to_str().unwrap().to_string();
    let full = read_perf_data(&fixture(name)).unwrap().events.len();
    let records = records(bytes);
    let mut cuts: Vec<usize> = records
        .iter()
        .flat_map(|&(start, end, trailing_end)| {
            [
                start,
                start + 1,
                start + 7,
                start + 8,
                (start + end) / 2,
                end - 1,
            ]
            .into_iter()
            .chain(
                (end < trailing_end)
                    .then_some([end + 1, trailing_end - 1])
                    .into_iter()
                    .flatten(),
            )
        })
        .collect();
    cuts.dedup();
    let mut failed = 0;
    for cut in cuts {
        std::fs::write(&path, &bytes[..cut]).unwrap();
        let result = read_perf_data(&path);
        let within = records.iter().find(|r| r.0 < cut && cut < r.2);
        match (within, result) {
            (None, Ok(r)) => assert!(r.events.len() <= full, "cut at {cut}"),
            (None, Err(e)) => {
                // Before the end of the first HEADER_ATTR: no attrs.
                let msg = e.to_string();
                assert!(cut <= records[0].1, "cut at {cut}: {msg}");
                assert!(msg.starts_with(&prefix) && msg.contains("offset"), "{msg}");
            }
            (Some(r), Err(e)) => {
                let msg = e.to_string();
                let at = if cut < r.1 { r.0 } else { r.0 + 8 };
                let want = format!("{prefix}: offset {at}: ");
                assert!(msg.starts_with(&want), "cut at {cut}: {msg}");
                assert!(msg.ends_with("truncated"), "cut at {cut}: {msg}");
                failed += 1;
            }
            (Some(_), Ok(_)) => panic!("cut at {cut}, inside a record, read without error"),
        }
    }
    assert!(failed > 0);
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn truncated_pipe_files_fail_with_file_and_offset() {
    for name in ["sh_loop.buildid.pipe.data", "tracepoint.pipe.data"] {
        let bytes = std::fs::read(fixture(name)).unwrap();
        // Below 16 bytes: the header itself is cut.
        for cut in 0..16 {
            let path = tmp(&format!("head-{cut}.data"));
            std::fs::write(&path, &bytes[..cut]).unwrap();
            let msg = read_perf_data(&path).unwrap_err().to_string();
            assert!(
                msg.starts_with(&format!("{}: offset {cut}: ", path.display())),
                "{msg}"
            );
            std::fs::remove_file(&path).unwrap();
        }
        assert_cuts_fail_with_offset(&bytes, name);
    }
}

/// The Skylake LBR recording converted by perf itself: `perf inject -o -` (records in file
/// order, no build ids) and `perf inject -b -o -` (re-sorted, build ids of the DSOs with
/// samples).
#[test]
fn skylake_in_pipe_mode_reads_as_the_file() {
    let file = read_perf_data(&skylake()).unwrap();
    let sky = skylake();
    let sky = sky.to_str().unwrap();
    let plain = tmp("skylake.pipe.data");
    if perf_to(&plain, &["inject", "-i", sky, "-o", "-"]).is_none() {
        return;
    }
    let pipe = read_perf_data(&plain).unwrap();
    assert_reads_alike(&file, &pipe);
    // perf report --header-only: "event : name = cycles:u, ..." (the EVENT_DESC of perf
    // 4.13 has no ids: perf names the only attr).
    assert_eq!(pipe.event.name, "cycles:u");
    assert_eq!(pipe.cmdline[1], "inject");
    assert_eq!(samples(&pipe).len(), 3740);
    assert_eq!(pipe.build_ids, []);

    let with_ids = tmp("skylake.buildid.pipe.data");
    perf_to(&with_ids, &["inject", "-b", "-i", sky, "-o", "-"]).unwrap();
    let pipe = read_perf_data(&with_ids).unwrap();
    assert_reads_alike(&file, &pipe);
    // perf buildid-list -i skylake.buildid.pipe.data
    let names: Vec<&str> = pipe
        .build_ids
        .iter()
        .map(|b| b.filename.rsplit('/').next().unwrap())
        .collect();
    assert_eq!(names, ["ld-2.19.so", "propeller_sample_1.bin.gen"]);
    for entry in &pipe.build_ids {
        assert!(file.build_ids.contains(entry), "{entry:?}");
    }

    // Cut inside the data: the records are about 800 bytes (32-entry branch stacks).
    let bytes = std::fs::read(&plain).unwrap();
    let records = records(&bytes);
    for cut in [bytes.len() / 2, bytes.len() - 100, bytes.len() - 1] {
        let r = records.iter().find(|r| r.0 < cut && cut < r.1).unwrap();
        std::fs::write(&plain, &bytes[..cut]).unwrap();
        let msg = read_perf_data(&plain).unwrap_err().to_string();
        assert!(
            msg.starts_with(&format!("{}: offset {}: ", plain.display(), r.0)),
            "{msg}"
        );
    }
    std::fs::remove_file(&plain).unwrap();
    std::fs::remove_file(&with_ids).unwrap();
}

/// A fresh two-event recording straight to a pipe (software events, no PMU needed): each
/// sample's (event, time, ip) is what `perf script -F event,time,ip -G --ns` prints.
#[test]
fn two_event_recording_to_a_pipe_matches_perf_script() {
    recording_to_a_pipe_matches_perf_script("multi.pipe.data", &["-e", "cpu-clock,task-clock"]);
}

/// The same with zstd-compressed records (`perf record -z`: PERF_RECORD_COMPRESSED).
#[test]
fn compressed_recording_to_a_pipe_matches_perf_script() {
    recording_to_a_pipe_matches_perf_script("compressed.pipe.data", &["-z", "-e", "cpu-clock"]);
}

/// `perf record OPTIONS -g -o - -- sh -c LOOP`, the last option naming the events.
fn recording_to_a_pipe_matches_perf_script(name: &str, options: &[&str]) {
    let path = tmp(name);
    let workload = "i=0; while [ $i -lt 100000 ]; do i=$((i+1)); done";
    let args = [
        &["record"][..],
        options,
        &["-g", "-o", "-", "--", "sh", "-c", workload],
    ]
    .concat();
    if perf_to(&path, &args).is_none() {
        return;
    }
    let p = path.to_str().unwrap();
    let out = Command::new("perf")
        .args(["script", "-i", p, "-F", "event,time,ip", "-G", "--ns"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    // " 1763.381688173:  cpu-clock:  ffffffff81b75d9a"
    let want = support::event_time_ip_samples(&text);
    assert!(want.len() > 10, "{text}");
    let mut reader = PerfDataReader::open(&path).unwrap();
    let events = options[options.len() - 1].split(',').count();
    assert_eq!(reader.attr_count(), events);
    let mut got = Vec::new();
    while let Some((attr, record)) = reader.next_record().unwrap() {
        if let Record::Sample(s) = record {
            got.push((
                reader.attr_name(attr).unwrap().to_string(),
                s.sample.time,
                s.sample.ip,
            ));
        }
    }
    assert_eq!(got, want);
    std::fs::remove_file(&path).unwrap();
}
