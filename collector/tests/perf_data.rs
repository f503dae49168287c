//! perf.data reader and writer against the real thing: Debian's perf 6.1 as an oracle for the
//! writer, the Skylake LBR recording (tests/fixtures/propeller_sample_1) for the reader.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;

use collector::{
    BuildId, BuildIdEntry, CommEvent, EventDescription, LbrEntry, Mmap2Event, PerfEvent, Recording,
    Sample, SideBandEvent,
};

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("collector-perf-data-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

/// A recording of /usr/bin/true (real file, real build id) with two samples.
fn true_recording() -> Recording {
    let build_id = BuildId::from_hex("c89156ebdabf859f4ee70cb0c303004dccf1ae51").unwrap();
    let pid = 4242;
    let base = 0x5555_5555_6000u64;
    let mmap = Mmap2Event {
        pid,
        tid: pid,
        addr: base,
        len: 0x3000,
        pgoff: 0x2000,
        prot: 5,
        flags: 2,
        maj: 8,
        min: 1,
        ino: 1234,
        ino_generation: 0,
        build_id: None,
        filename: "/usr/bin/true".into(),
    };
    let sample = |time: u64, ip: u64| Sample {
        pid: pid as u32,
        tid: pid as u32,
        time,
        ip,
        callchain: vec![ip, base + 0x100, base + 0x200],
        lbr: (0..4u64)
            .map(|i| LbrEntry {
                from: base + 0x10 * i + 0x8,
                to: base + 0x10 * i,
                flags: 2,
            })
            .collect(),
        count: 1,
        // PERF_SAMPLE_REGS_USER (bp, sp, ip) and PERF_SAMPLE_STACK_USER: written and read
        // back, and perf reads them without a warning.
        user_stack: Some(collector::UserStack {
            ip,
            sp: 0x7fff_0000_1000 - time,
            bp: 0x7fff_0000_1010,
            words: [base + 0x100, 0x7fff_0000_1030],
            len: 2,
        }),
    };
    Recording {
        event: EventDescription::intel_taken_branches(1009, true),
        build_ids: vec![BuildIdEntry {
            pid,
            build_id,
            filename: "/usr/bin/true".into(),
        }],
        events: vec![
            PerfEvent::SideBand(SideBandEvent::Comm(CommEvent {
                pid: pid as u32,
                tid: pid as u32,
                comm: "true".into(),
                exec: true,
            })),
            PerfEvent::SideBand(SideBandEvent::Mmap2(mmap)),
            PerfEvent::Sample(sample(1000, base + 0x40)),
            PerfEvent::Sample(sample(2000, base + 0x80)),
        ],
        cmdline: vec![
            "pgo-agent".into(),
            "record".into(),
            "--".into(),
            "/usr/bin/true".into(),
        ],
    }
}

fn perf(args: &[&str]) -> Option<(String, String)> {
    let out = Command::new("perf").args(args).output().ok()?;
    Some((
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    ))
}

#[test]
fn perf_reads_what_we_write_without_warnings() {
    let path = tmp("true.data");
    collector::perf_data::write_perf_data(&path, &true_recording()).unwrap();
    let p = path.to_str().unwrap();
    let Some((stdout, stderr)) =
        perf(&["script", "-i", p, "-F", "ip,brstack", "--show-mmap-events"])
    else {
        eprintln!("perf not installed; skipping");
        return;
    };
    println!("{stdout}");
    assert_eq!(stderr, "", "perf script warned");
    let (report, stderr) = perf(&["report", "--stdio", "-i", p]).unwrap();
    println!("{report}");
    assert_eq!(stderr, "", "perf report warned");
}

#[allow(dead_code)]
fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures")
        .join(name)
}

const SKYLAKE_BIN: &str = "/build/work/11ef31a2a8be9640fa8d4c917e76f0db3923/google3/blaze-out/k8-opt/genfiles/devtools/crosstool/autofdo/testdata/propeller_sample_1.bin.gen";

/// The 5th sample's branch stack (the first four have none), newest first, as
/// `perf script -i perf.data -F ip,brstack | sed -n 5p` prints it: (from, to, cycles), all
/// predicted ("P"), none mispredicted.
#[rustfmt::skip]
const FIFTH_SAMPLE_LBR: [(u64, u64, u64); 32] = [
    (0x5629ec7428f4, 0x5629ec742901, 19), (0x5629ec742967, 0x5629ec7428d0, 1), (0x5629ec742a6e, 0x5629ec742957, 1),
    (0x5629ec742a60, 0x5629ec742a65, 1), (0x5629ec742a26, 0x5629ec742a60, 27), (0x5629ec742982, 0x5629ec7429da, 4),
    (0x5629ec742905, 0x5629ec74296c, 3), (0x5629ec7428f4, 0x5629ec742901, 33), (0x5629ec742967, 0x5629ec7428d0, 1),
    (0x5629ec742a6e, 0x5629ec742957, 1), (0x5629ec742a60, 0x5629ec742a65, 1), (0x5629ec742a26, 0x5629ec742a60, 12),
    (0x5629ec742982, 0x5629ec7429da, 1), (0x5629ec742905, 0x5629ec74296c, 1), (0x5629ec7428f4, 0x5629ec742901, 19),
    (0x5629ec742967, 0x5629ec7428d0, 1), (0x5629ec742a6e, 0x5629ec742957, 1), (0x5629ec742a60, 0x5629ec742a65, 1),
    (0x5629ec742a26, 0x5629ec742a60, 27), (0x5629ec742982, 0x5629ec7429da, 4), (0x5629ec742905, 0x5629ec74296c, 3),
    (0x5629ec7428f4, 0x5629ec742901, 35), (0x5629ec742967, 0x5629ec7428d0, 1), (0x5629ec742a6e, 0x5629ec742957, 1),
    (0x5629ec742a60, 0x5629ec742a65, 1), (0x5629ec742a26, 0x5629ec742a60, 8), (0x5629ec7429de, 0x5629ec742a12, 1),
    (0x5629ec742982, 0x5629ec7429da, 1), (0x5629ec742905, 0x5629ec74296c, 1), (0x5629ec7428e3, 0x5629ec7428f9, 8),
    (0x5629ec742967, 0x5629ec7428d0, 1), (0x5629ec742a6e, 0x5629ec742957, 1),
];

fn skylake() -> PathBuf {
    fixture("propeller_sample_1/perf.data")
}

fn samples(r: &Recording) -> Vec<&Sample> {
    r.events
        .iter()
        .filter_map(|e| {
            if let PerfEvent::Sample(s) = e {
                Some(s)
            } else {
                None
            }
        })
        .collect()
}

#[test]
fn skylake_samples_match_perf_script() {
    let r = collector::perf_data::read_perf_data(&skylake()).unwrap();
    let s = samples(&r);
    // perf script -i perf.data -F pid | wc -l
    assert_eq!(s.len(), 3740);
    // perf script -i perf.data -F brstack | awk '{print NF}' | sort | uniq -c
    assert_eq!(s.iter().filter(|s| s.lbr.len() == 32).count(), 3732);
    assert_eq!(s.iter().filter(|s| s.lbr.is_empty()).count(), 8);
    assert!(s.iter().all(|s| s.callchain.is_empty() && s.count == 1));
    // perf script -i perf.data -F pid,tid,time,ip --ns | head -1
    //  5595/5595  914937.301029299:      7f06d6a21e00
    assert_eq!(
        (s[0].pid, s[0].tid, s[0].time, s[0].ip),
        (5595, 5595, 914937301029299, 0x7f06d6a21e00)
    );
    // ... | sed -n 5p:  5595/5595  914937.301714548:      5629ec742901
    let fifth = s[4];
    assert_eq!(
        (fifth.pid, fifth.tid, fifth.time, fifth.ip),
        (5595, 5595, 914937301714548, 0x5629ec742901)
    );
    let got: Vec<(u64, u64, u64)> = fifth
        .lbr
        .iter()
        .map(|e| (e.from, e.to, (e.flags >> 4) & 0xffff))
        .collect();
    assert_eq!(got, FIFTH_SAMPLE_LBR);
    assert!(fifth.lbr.iter().all(|e| e.predicted() && !e.mispredicted()));
    // ... | tail -1:  5595/5595  914938.234331925:      5629ec74297e
    let last = s[s.len() - 1];
    assert_eq!((last.time, last.ip), (914938234331925, 0x5629ec74297e));
}

#[test]
fn skylake_metadata() {
    let r = collector::perf_data::read_perf_data(&skylake()).unwrap();
    // perf report --header-only: "event : name = cycles:u, ... sample_freq = 4000,
    // sample_type = IP|TID|TIME|PERIOD|BRANCH_STACK"
    assert_eq!(r.event.name, "cycles:u");
    assert_eq!(
        (r.event.attr_type, r.event.config, r.event.sample_period),
        (0, 0, 4000)
    );
    assert_eq!(
        (r.event.callchain, r.event.branch_stack, r.event.precise_ip),
        (false, true, 0)
    );
    assert_eq!(
        r.cmdline,
        [
            "/usr/bin/perf",
            "record",
            "-o",
            "propeller_sample_1.perfdata1.gen",
            "-e",
            "cycles",
            "-b",
            "--",
            "./propeller_sample_1.bin.gen"
        ]
    );
    // perf buildid-list -i perf.data (perf pads to 20 bytes; the file's id is 8 bytes)
    let ids: Vec<(String, &str)> = r
        .build_ids
        .iter()
        .map(|b| (b.build_id.to_hex(), b.filename.as_str()))
        .collect();
    assert_eq!(
        ids,
        [
            (
                "017da117dbd0f56426d3b2d13216284c6b413847".to_string(),
                "[accel_class]"
            ),
            ("572ac72487ae1966".to_string(), SKYLAKE_BIN),
            (
                "9f775610f3c5ce453f91501500d0181d91cc6a50".to_string(),
                "/usr/grte/v4/lib64/ld-2.19.so"
            ),
            (
                "a18cfd3da50ce0aeaa5390ca73bc480a7d7f3784".to_string(),
                "[vdso]"
            ),
        ]
        .iter()
        .map(|(a, b)| (a.clone(), *b))
        .collect::<Vec<_>>()
    );
    // perf script -i perf.data -F ip --show-mmap-events | grep MMAP | head -1
    // PERF_RECORD_MMAP2 5595/5595: [0x5629ec742000(0x1000) @ 0 00:6a 2006825049 1625258238]: r-xp .../propeller_sample_1.bin.gen
    let mmap = r
        .events
        .iter()
        .find_map(|e| match e {
            PerfEvent::SideBand(SideBandEvent::Mmap2(m))
                if m.filename.ends_with("propeller_sample_1.bin.gen") =>
            {
                Some(m)
            }
            _ => None,
        })
        .unwrap();
    assert_eq!(
        (
            mmap.pid,
            mmap.tid,
            mmap.addr,
            mmap.len,
            mmap.pgoff,
            mmap.maj,
            mmap.min,
            mmap.ino,
            mmap.ino_generation
        ),
        (
            5595,
            5595,
            0x5629ec742000,
            0x1000,
            0,
            0,
            0x6a,
            2006825049,
            1625258238
        )
    );
    assert_eq!(
        (mmap.prot, mmap.flags & 1, mmap.build_id.as_ref()),
        (5, 0, None)
    );
    assert_eq!(mmap.filename, SKYLAKE_BIN);
}

#[test]
fn streaming_reader_yields_the_same_events() {
    let all = collector::perf_data::read_perf_data(&skylake()).unwrap();
    let reader = collector::perf_data::PerfDataReader::open(&skylake()).unwrap();
    assert_eq!(reader.event(), &all.event);
    let streamed: Vec<PerfEvent> = reader.events().collect::<Result<_, _>>().unwrap();
    assert_eq!(streamed, all.events);
}

#[test]
fn write_then_read_round_trip() {
    let rec = true_recording();
    let path = tmp("round-trip.data");
    collector::perf_data::write_perf_data(&path, &rec).unwrap();
    let back = collector::perf_data::read_perf_data(&path).unwrap();
    assert_eq!(back.event, rec.event);
    assert_eq!(back.cmdline, rec.cmdline);
    assert_eq!(back.events, rec.events);
    // The writer stores every build id under the host machine (pid -1), as perf does.
    assert_eq!(
        back.build_ids,
        vec![BuildIdEntry {
            pid: -1,
            ..rec.build_ids[0].clone()
        }]
    );
}

#[test]
fn truncated_skylake_files_fail_with_file_and_offset() {
    let bytes = std::fs::read(skylake()).unwrap();
    let len = bytes.len();
    for cut in [
        0,
        8,
        50,
        103,
        104,
        200,
        232,
        1000,
        100_000,
        len / 2,
        len - 200,
        len - 1,
    ] {
        let path = tmp(&format!("cut-{cut}.data"));
        std::fs::write(&path, &bytes[..cut]).unwrap();
        let err = collector::perf_data::read_perf_data(&path).expect_err(&format!("cut at {cut}"));
        let msg = err.to_string();
        assert!(
            msg.starts_with(path.to_str().unwrap()),
            "cut at {cut}: {msg}"
        );
        assert!(msg.contains("offset"), "cut at {cut}: {msg}");
        println!("cut at {cut}: {msg}");
    }
}

#[test]
fn garbage_and_corrupt_headers() {
    let path = tmp("garbage.data");
    std::fs::write(&path, [0x5au8; 4096]).unwrap();
    let msg = collector::perf_data::read_perf_data(&path)
        .unwrap_err()
        .to_string();
    assert!(msg.contains("offset 0: bad magic"), "{msg}");

    let mut bytes = std::fs::read(skylake()).unwrap();
    // attr_size (offset 16) = 7
    bytes[16..24].copy_from_slice(&7u64.to_le_bytes());
    std::fs::write(&path, &bytes).unwrap();
    let msg = collector::perf_data::read_perf_data(&path)
        .unwrap_err()
        .to_string();
    assert!(msg.contains("offset 16: attr_size 7"), "{msg}");

    // A record whose size field is 0 in the data section (data offset 232, first record).
    let mut bytes = std::fs::read(skylake()).unwrap();
    bytes[232 + 6..232 + 8].copy_from_slice(&0u16.to_le_bytes());
    std::fs::write(&path, &bytes).unwrap();
    let msg = collector::perf_data::read_perf_data(&path)
        .unwrap_err()
        .to_string();
    assert!(msg.contains("offset"), "{msg}");

    // Random bytes over the data section: an error or a result, never a panic.
    let mut bytes = std::fs::read(skylake()).unwrap();
    let mut x = 0x2545f4914f6cdd1du64;
    for b in bytes[232..20_000].iter_mut() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = x as u8;
    }
    std::fs::write(&path, &bytes).unwrap();
    let _ = collector::perf_data::read_perf_data(&path);
}

/// A two-event file from `perf record` itself (software events, so no PMU needed):
/// samples are matched to their attr by PERF_SAMPLE_ID, and each (event, time, ip) equals
/// what `perf script -F event,time,ip -G --ns` prints.
#[test]
fn multi_attr_file_from_perf_record() {
    let path = tmp("multi.data");
    let p = path.to_str().unwrap();
    let workload = "i=0; while [ $i -lt 100000 ]; do i=$((i+1)); done";
    let Some((_, err)) = perf(&[
        "record",
        "-e",
        "cpu-clock,task-clock",
        "-g",
        "-o",
        p,
        "--",
        "sh",
        "-c",
        workload,
    ]) else {
        eprintln!("perf not installed; skipping");
        return;
    };
    if !path.exists() {
        eprintln!("perf record failed ({err}); skipping");
        return;
    }
    let (text, _) = perf(&["script", "-i", p, "-F", "event,time,ip", "-G", "--ns"]).unwrap();
    // " 1763.381688173:  cpu-clock:  ffffffff81b75d9a"
    let want = support::event_time_ip_samples(&text);
    assert!(want.len() > 10, "{text}");
    let mut reader = collector::perf_data::PerfDataReader::open(&path).unwrap();
    assert_eq!(reader.attr_count(), 2);
    let mut got = Vec::new();
    while let Some((attr, record)) = reader.next_record().unwrap() {
        if let collector::record::Record::Sample(s) = record {
            assert_ne!(s.id, 0);
            got.push((
                reader.attr_name(attr).unwrap().to_string(),
                s.sample.time,
                s.sample.ip,
            ));
        }
    }
    assert_eq!(got, want);
}
