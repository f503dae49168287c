//! MemProf end to end (issue 7): the corpus program `tests/programs/memprof/heap_contexts.cc`
//! (one `new[]` site in `make_buf` reached from a hot short-lived context via `hot_path` and a
//! cold long-lived one via `cold_path`) is built with clang-19 (raw v4) and clang-22 (raw v5)
//! `-fmemory-profile`, run several times, and its raw profiles are ingested by pgo-agent:
//! * aggregated counts equal the sums over runs;
//! * the YAML is accepted by `llvm-profdata-22 merge`, `clang-22 -fmemory-profile-use` puts
//!   `!memprof` on the allocation call, and the stack ids there equal ours;
//! * truncated, bit-flipped and wrong-version files are rejected with their reason and leave
//!   the aggregate exactly as the good files make it.
//!
//! Oracles (clang, llvm-profdata) are only run here, never by the product.

use std::path::{Path, PathBuf};
use std::process::Command;

use collector::memprof::{MemProfRawError, RawMemProfile};
use daemon::heap::{ingest, HeapArgs, HeapFormat};
use e2e::corpus::{target_dir, tools_available};
use e2e::support::{build_and_run_heap_contexts, run_ok};
use exporter::format::memprof_yaml::memprof_yaml_string;
use symbolizer::memprof::{memprof_guid, HeapProfile, MemProfBinary, MemProfFrame};

/// (hot allocations, cold allocations) per run.
const RUNS: [(u32, u32); 3] = [(10, 1), (20, 2), (30, 3)];

/// Builds the program with `clang` (extra flags appended) into a fresh directory and runs it
/// once per [`RUNS`] entry; returns the binary and the raw profiles in run order.
fn build_and_run(clang: &str, tag: &str, extra: &[&str]) -> (PathBuf, Vec<PathBuf>) {
    let dir = target_dir().join("memprof-e2e").join(tag);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    build_and_run_heap_contexts(clang, extra, &dir, &RUNS)
}

fn frame(name: &str, line_offset: u32, column: u32) -> MemProfFrame {
    MemProfFrame {
        function: memprof_guid(name),
        line_offset,
        column,
        is_inline: false,
    }
}

/// The two contexts as clang-19 and clang-22 symbolize them from this source (make_buf's
/// `new[]` is line 14, one below its declaration; main's calls are 8 and 12 lines below).
fn hot_context() -> Vec<MemProfFrame> {
    vec![
        frame("_Z8make_bufm", 1, 10),
        frame("_Z8hot_pathv", 1, 10),
        frame("main", 12, 15),
    ]
}

fn cold_context() -> Vec<MemProfFrame> {
    vec![
        frame("_Z8make_bufm", 1, 10),
        frame("_Z9cold_pathv", 1, 10),
        frame("main", 8, 15),
    ]
}

fn context(p: &HeapProfile, frames: &[MemProfFrame]) -> collector::memprof::MemInfoBlock {
    p.contexts()
        .find(|(f, _)| f == frames)
        .map(|(_, m)| m.clone())
        .unwrap_or_else(|| panic!("context {frames:?} missing"))
}

fn check_aggregate(clang: &str, version: u64, tag: &str, extra: &[&str]) -> (PathBuf, HeapProfile) {
    let (binary, raws) = build_and_run(clang, tag, extra);
    let bin = MemProfBinary::load(&binary).unwrap();
    for raw in &raws {
        let parsed = RawMemProfile::read(raw).unwrap();
        assert_eq!(parsed.version, version, "{}", raw.display());
        assert_eq!(parsed.main_build_id(), Some(bin.build_id()));
    }
    let ingested = ingest(&bin, &raws);
    assert!(ingested.rejected.is_empty(), "{:?}", ingested.rejected);
    let p = ingested.profile;
    assert_eq!(p.profiles(), 3);
    assert_eq!(p.len(), 2, "{}", memprof_yaml_string(&p));
    let hot: u32 = RUNS.iter().map(|r| r.0).sum();
    let cold: u32 = RUNS.iter().map(|r| r.1).sum();
    let h = context(&p, &hot_context());
    assert_eq!(h.alloc_count, hot);
    assert_eq!(h.total_size, 64 * u64::from(hot));
    assert_eq!((h.min_size, h.max_size), (64, 64));
    let c = context(&p, &cold_context());
    assert_eq!(c.alloc_count, cold);
    assert_eq!(c.total_size, 4096 * u64::from(cold));
    // Cold buffers live at least the 5 ms sleep; hot ones are freed right away, so on
    // average they stay well under it (a preempted run can stretch a few of them: the
    // maximum is not bounded on a loaded machine).
    assert!(c.min_lifetime >= 5, "{c:?}");
    assert!(
        h.total_lifetime < 5 * u64::from(h.alloc_count),
        "mean hot lifetime >= 5 ms: {h:?}"
    );
    (binary, p)
}

#[test]
fn clang19_v4_runs_aggregate_to_the_sum() {
    let _machine = e2e::support::machine_share();
    if !tools_available("clang19_v4_runs_aggregate_to_the_sum", &["clang++-19"]) {
        return;
    }
    check_aggregate("clang++-19", 4, "c19", &[]);
}

#[test]
fn clang22_v5_runs_aggregate_to_the_sum() {
    let _machine = e2e::support::machine_share();
    if !tools_available("clang22_v5_runs_aggregate_to_the_sum", &["clang++-22"]) {
        return;
    }
    check_aggregate("clang++-22", 5, "c22", &[]);
}

#[test]
fn histogram_builds_parse_for_v4_and_v5() {
    let _machine = e2e::support::machine_share();
    let hist = [
        "-mllvm",
        "-memprof-histogram",
        "-mllvm",
        "-memprof-use-callbacks=true",
    ];
    for (clang, version, tag) in [("clang++-19", 4, "h19"), ("clang++-22", 5, "h22")] {
        if !tools_available("histogram_builds_parse_for_v4_and_v5", &[clang]) {
            continue;
        }
        let (_, p) = check_aggregate(clang, version, tag, &hist);
        // One histogram entry per 8 bytes; the hot buffer is written and read in full.
        let h = context(&p, &hot_context());
        assert_eq!(h.access_histogram.len(), 8, "{h:?}");
        assert!(h.access_histogram.iter().all(|&c| c > 0), "{h:?}");
        let c = context(&p, &cold_context());
        assert_eq!(c.access_histogram.len(), 512, "{c:?}");
        assert!(c.access_histogram[0] > 0, "{c:?}");
    }
}

/// `(stack ids, "cold"/"notcold")` of every MIB in the `!memprof` of the `_Znam` call.
fn ir_memprof_contexts(ir: &str) -> Vec<(Vec<i64>, String)> {
    let node = |id: &str| -> String {
        let prefix = format!("{id} = ");
        ir.lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .unwrap_or_else(|| panic!("metadata {id} not found"))
            .to_string()
    };
    let call = ir
        .lines()
        .find(|l| l.contains("@_Znam(") && l.contains("!memprof"))
        .expect("new[] call with !memprof");
    let list = call.split("!memprof ").nth(1).unwrap();
    let list_id = list.split(',').next().unwrap().trim();
    let refs = |body: &str| -> Vec<String> {
        body.split(['{', '}', ','])
            .map(str::trim)
            .filter(|t| t.len() > 1 && t.starts_with('!') && !t.starts_with("!\""))
            .map(str::to_string)
            .collect()
    };
    let mut out = Vec::new();
    for mib in refs(&node(list_id)) {
        let body = node(&mib);
        let stack = refs(&body)[0].clone();
        let kind = body
            .split("!\"")
            .nth(1)
            .unwrap()
            .trim_end_matches(['"', '}', ' ']);
        let ids = node(&stack)
            .split("i64 ")
            .skip(1)
            .map(|t| t.trim_end_matches(['}', ',', ' ']).parse::<i64>().unwrap())
            .collect();
        out.push((ids, kind.to_string()));
    }
    out.sort();
    out
}

fn check_yaml_through_clang22(tag: &str, binary: &Path, profile: &HeapProfile) {
    let dir = binary.parent().unwrap();
    let yaml = dir.join("heap.yaml");
    std::fs::write(&yaml, memprof_yaml_string(profile)).unwrap();
    let indexed = dir.join("heap.memprofdata");
    run_ok(
        Command::new("llvm-profdata-22")
            .arg("merge")
            .arg(&yaml)
            .arg("-o")
            .arg(&indexed),
    );
    let ir = dir.join("use.ll");
    // Cold threshold 0 s: the 5 ms cold buffers (sparse accesses) count as cold, the hot ones
    // (dense accesses) as not cold, so !memprof must keep both contexts apart.
    run_ok(
        Command::new("clang++-22")
            .args([
                "-O1",
                "-gmlt",
                "-fdebug-info-for-profiling",
                "-S",
                "-emit-llvm",
            ])
            .arg(format!("-fmemory-profile-use={}", indexed.display()))
            .args(["-mllvm", "-memprof-ave-lifetime-cold-threshold=0"])
            .arg(e2e::corpus::sources_dir().join("memprof/heap_contexts.cc"))
            .arg("-o")
            .arg(&ir),
    );
    let ir = std::fs::read_to_string(&ir).unwrap();
    let ids = |c: &[MemProfFrame]| -> Vec<i64> { c.iter().map(|f| f.stack_id() as i64).collect() };
    // Contexts are trimmed to the frames that tell cold from not cold: make_buf + caller.
    let mut expected = vec![
        (ids(&cold_context()[..2]), "cold".to_string()),
        (ids(&hot_context()[..2]), "notcold".to_string()),
    ];
    expected.sort();
    assert_eq!(ir_memprof_contexts(&ir), expected, "{tag}");
    // The callers' !callsite ids are ours too.
    for f in [cold_context()[2], hot_context()[2], cold_context()[1]] {
        let id = format!("!{{i64 {}}}", f.stack_id() as i64);
        assert!(ir.contains(&id), "{tag}: callsite {id} missing");
    }
}

#[test]
fn yaml_from_clang19_and_clang22_profiles_drives_clang22_memprof_use() {
    let _machine = e2e::support::machine_share();
    let test = "yaml_from_clang19_and_clang22_profiles_drives_clang22_memprof_use";
    if !tools_available(test, &["clang++-22", "llvm-profdata-22"]) {
        return;
    }
    let (b22, p22) = check_aggregate("clang++-22", 5, "use22", &[]);
    check_yaml_through_clang22("clang-22 profile", &b22, &p22);
    if tools_available(test, &["clang++-19"]) {
        let (b19, p19) = check_aggregate("clang++-19", 4, "use19", &[]);
        check_yaml_through_clang22("clang-19 profile", &b19, &p19);
    }
}

#[test]
fn corrupt_raw_files_are_rejected_and_leave_the_aggregate_intact() {
    let _machine = e2e::support::machine_share();
    let test = "corrupt_raw_files_are_rejected_and_leave_the_aggregate_intact";
    if !tools_available(test, &["clang++-22"]) {
        return;
    }
    let (binary, raws) = build_and_run("clang++-22", "corrupt", &[]);
    let dir = binary.parent().unwrap();
    let good = std::fs::read(&raws[0]).unwrap();
    let write = |name: &str, bytes: &[u8]| {
        let p = dir.join(name);
        std::fs::write(&p, bytes).unwrap();
        p
    };
    let truncated = write("truncated.raw", &good[..good.len() / 2]);
    let mut b = good.clone();
    b[16 + 5] ^= 0x10; // a bit of the header's TotalSize
    let flipped = write("flipped.raw", &b);
    let mut b = good.clone();
    b[8] = 3;
    let wrong_version = write("v3.raw", &b);

    let bin = MemProfBinary::load(&binary).unwrap();
    let files = vec![
        raws[0].clone(),
        truncated.clone(),
        raws[1].clone(),
        flipped.clone(),
        wrong_version.clone(),
        raws[2].clone(),
    ];
    let got = ingest(&bin, &files);
    let reasons: Vec<(PathBuf, String)> = got.rejected.clone();
    assert_eq!(reasons.len(), 3, "{reasons:?}");
    assert_eq!(reasons[0].0, truncated);
    assert!(reasons[0].1.contains("truncated"), "{}", reasons[0].1);
    assert!(reasons[0].1.starts_with(&truncated.display().to_string()));
    assert_eq!(reasons[1].0, flipped);
    assert!(
        reasons[1]
            .1
            .contains("offset 0: truncated: dump (header TotalSize)"),
        "{}",
        reasons[1].1
    );
    assert_eq!(reasons[2].0, wrong_version);
    assert!(
        reasons[2]
            .1
            .contains("offset 8: unsupported raw MemProf version 3"),
        "{}",
        reasons[2].1
    );
    // Exactly what the good files alone give.
    let clean = ingest(&bin, &raws).profile;
    assert_eq!(
        memprof_yaml_string(&got.profile),
        memprof_yaml_string(&clean)
    );
    assert_eq!(got.profile.profiles(), 3);

    // Every single-bit flip of the 48-byte header, and of each section count, is rejected.
    let header = RawMemProfile::parse(Path::new("good"), &good).unwrap();
    assert_eq!(header.dumps, 1);
    let word = |i: usize| u64::from_le_bytes(good[i * 8..i * 8 + 8].try_into().unwrap()) as usize;
    let count_fields = [word(3), word(4), word(5)];
    let positions: Vec<usize> = (0..48)
        .chain(count_fields.iter().flat_map(|&o| o..o + 8))
        .collect();
    for at in positions {
        for bit in 0..8 {
            let mut b = good.clone();
            b[at] ^= 1 << bit;
            let version = u64::from_le_bytes(b[8..16].try_into().unwrap());
            if (8..16).contains(&at) && [4, 5].contains(&version) {
                // 5 -> 4 without histograms is a valid v4 file with the same content.
                continue;
            }
            match RawMemProfile::parse(Path::new("flip"), &b) {
                Err(e) => {
                    let msg = e.to_string();
                    assert!(msg.starts_with("flip: offset "), "{msg}");
                    assert!(!matches!(e, MemProfRawError::Io { .. }));
                }
                Ok(_) => panic!("bit {bit} of byte {at} flipped but accepted"),
            }
        }
    }

    // The CLI writes the good files' aggregate and names the bad ones; --strict refuses.
    let out = dir.join("cli.yaml");
    let args = HeapArgs {
        profraw: files.clone(),
        binary: binary.clone(),
        output: out.clone(),
        format: HeapFormat::Yaml,
        strict: false,
    };
    daemon::heap::run(args.clone()).unwrap();
    assert_eq!(
        std::fs::read_to_string(&out).unwrap(),
        memprof_yaml_string(&clean)
    );
    let strict = HeapArgs {
        strict: true,
        output: dir.join("strict.yaml"),
        ..args
    };
    let err = daemon::heap::run(strict).unwrap_err().to_string();
    assert_eq!(err, "3 of 6 raw profiles rejected");
    assert!(!dir.join("strict.yaml").exists());
}
