//! End-to-end tests of `pgo-agent record` (the software LBR recorder) on the corpus:
//! perf reads our perf.data (the user registers of every sample, and, from the same
//! recording written without the stack fields, the same samples as our perf script text),
//! llvm-profgen-19 turns our text into a context-sensitive profile, and the ground truth
//! equals the arithmetic of a loop with a known trip count.
//!
//! Each test records its program once per test process (see `e2e::corpus::record`); the
//! corpus build is cached in `target/corpus/`. Tests skip with a message only when clang-19,
//! perf or llvm-profgen-19 are not installed.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use collector::{Mmap2Event, PerfEvent, SideBandEvent};
use e2e::corpus::{self, CorpusProgram, Recorded, Variant};
use object::{Object, ObjectSymbol};

const TOOLS: &[&str] = &["clang-19", "clang++-19", "perf", "llvm-profgen-19"];

fn recorded(test: &str, name: &str, variant: Variant) -> Option<Recorded> {
    if !corpus::tools_available(test, TOOLS) {
        return None;
    }
    let program: CorpusProgram = corpus::program(name, variant).unwrap_or_else(|e| panic!("{e}"));
    Some(corpus::record(&program).unwrap_or_else(|e| panic!("{e}")))
}

/// perf 6.1 prints a user call-chain address that falls in a file-backed (or `[vdso]`)
/// mapping as the address inside that file (`map__map_ip`: `ip - start + pgoff`, "show
/// binary offset for userspace addr" in util/evsel_fprintf.c), while the branch stack and
/// our text keep the absolute addresses the kernel recorded (the form llvm-profgen's
/// inputs use). This is the one normalisation applied before comparing.
fn perf_style_stack_line(line: &str, maps: &[Mmap2Event]) -> String {
    let Ok(addr) = u64::from_str_radix(line.trim(), 16) else {
        return line.to_string();
    };
    match maps
        .iter()
        .rev()
        .find(|m| addr >= m.addr && addr - m.addr < m.len)
    {
        Some(m) => format!("\t{:16x}", addr - m.addr + m.pgoff),
        None => line.to_string(),
    }
}

fn normalise_like_perf(ours: &str, recording: &collector::Recording) -> String {
    let maps: Vec<Mmap2Event> = recording
        .events
        .iter()
        .filter_map(|e| match e {
            PerfEvent::SideBand(SideBandEvent::Mmap2(m)) if m.is_executable() => Some(m.clone()),
            _ => None,
        })
        .collect();
    let mut out = String::with_capacity(ours.len());
    for line in ours.lines() {
        if line.starts_with('\t') {
            out.push_str(&perf_style_stack_line(line, &maps));
        } else {
            out.push_str(line);
        }
        out.push('\n');
    }
    out
}

/// `perf script ARGS -i DATA`: its stdout, after asserting it ran without a warning.
fn perf_script(args: &[&str], data: &Path) -> String {
    let output = Command::new("perf")
        .arg("script")
        .args(args)
        .arg("-i")
        .arg(data)
        .output()
        .expect("running perf");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "perf script failed on {}: {stderr}",
        data.display()
    );
    assert!(
        stderr.trim().is_empty(),
        "perf script warned on {}:\n{stderr}",
        data.display()
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The recording without the user registers and stack bytes: what the recorder writes
/// minus `PERF_SAMPLE_REGS_USER | PERF_SAMPLE_STACK_USER`. perf 6.1 unwinds every sample
/// of a perf.data with both fields with DWARF from those 16 stack bytes and appends the
/// frames it finds to the kernel's call chain (`callchain_param_setup` switches to
/// `CALLCHAIN_DWARF`; perf script has no option to keep the frame-pointer chain alone),
/// so the call-chain comparison runs on this copy, written by the same perf.data writer.
fn without_user_stack(recording: &collector::Recording) -> collector::Recording {
    let mut fp = recording.clone();
    fp.event.user_stack = false;
    for e in &mut fp.events {
        if let PerfEvent::Sample(s) = e {
            s.user_stack = None;
        }
    }
    fp
}

/// What `perf script -F uregs` prints for the recorder's samples: the abi and the bp, sp,
/// ip registers of each (`print_sample_uregs` in perf's builtin-script.c: `" ABI:%lu "`,
/// then `"%5s:0x%lx "` per register of the mask in bit order).
fn expected_uregs(recording: &collector::Recording) -> String {
    let mut out = String::new();
    for e in &recording.events {
        if let PerfEvent::Sample(s) = e {
            let u = s.user_stack.expect("the recorder writes user registers");
            out.push_str(&format!(
                " ABI:2 {:>5}:0x{:x} {:>5}:0x{:x} {:>5}:0x{:x} \n",
                "BP", u.bp, "SP", u.sp, "IP", u.ip
            ));
        }
    }
    out
}

fn check_perf_script(rec: &Recorded) {
    // The recorder's perf.data: perf reads the user registers we wrote.
    assert!(rec.recording.event.user_stack);
    let uregs = perf_script(&["-F", "uregs"], &rec.perf_data);
    assert_eq!(
        uregs,
        expected_uregs(&rec.recording),
        "perf script -F uregs of {}",
        rec.perf_data.display()
    );

    // The same recording without the stack fields: perf prints our call chains, branch
    // stacks and mmap events exactly as our perf script text does.
    let fp_data = rec.perf_data.with_extension("fp.data");
    collector::perf_data::write_perf_data(&fp_data, &without_user_stack(&rec.recording)).unwrap();
    let theirs = perf_script(&["-F", "ip,brstack", "--show-mmap-events"], &fp_data);
    let ours = std::fs::read_to_string(&rec.perf_script).unwrap();
    let expected = normalise_like_perf(&ours, &rec.recording);
    if expected != theirs {
        let first = expected
            .lines()
            .zip(theirs.lines())
            .position(|(a, b)| a != b);
        panic!(
            "perf script output differs from {} (after normalising stack lines); first differing line {:?}; \
             lines ours={} perf={}\nours:  {:?}\nperf:  {:?}",
            rec.perf_script.display(),
            first.map(|i| i + 1),
            expected.lines().count(),
            theirs.lines().count(),
            first.and_then(|i| expected.lines().nth(i)),
            first.and_then(|i| theirs.lines().nth(i)),
        );
    }
    let samples = ours.lines().filter(|l| l.starts_with(" 0x")).count() as u64;
    assert_eq!(samples, rec.stats.samples);
    assert!(samples > 0);
}

fn check_llvm_profgen(rec: &Recorded) {
    let out = rec.perf_script.with_extension("prof.txt");
    let output = Command::new("llvm-profgen-19")
        .arg(format!("--perfscript={}", rec.perf_script.display()))
        .arg(format!("--binary={}", rec.program.binary.display()))
        .arg(format!("--output={}", out.display()))
        .args([
            "--format=text",
            "--csspgo-preinliner=false",
            "--gen-cs-nested-profile=false",
        ])
        .output()
        .expect("running llvm-profgen-19");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "llvm-profgen-19 failed on {}: {stderr}",
        rec.perf_script.display()
    );
    let profile = std::fs::read_to_string(&out).unwrap();
    let contexts: Vec<&str> = profile.lines().filter(|l| l.starts_with('[')).collect();
    assert!(
        !contexts.is_empty(),
        "no context-sensitive profile from {}:\n{profile}\n{stderr}",
        rec.perf_script.display()
    );
    // Call chains reach main: some context is a call from main into the program's code
    // (shlib_user's calls from main go into the library, whose frames are external here).
    if rec.program.name == "shlib_user" {
        assert!(
            contexts
                .iter()
                .any(|c| c.starts_with("[_ZL8callbacki") || c.starts_with("[callback")),
            "{contexts:?}"
        );
        return;
    }
    assert!(
        contexts.iter().any(|c| c.starts_with("[main:")),
        "no context rooted at main from {}:\n{}",
        rec.perf_script.display(),
        contexts.join("\n")
    );
}

fn check_samples(rec: &Recorded) {
    let t = &rec.truth.totals;
    assert_eq!(
        (t.steps, t.taken_branches, t.samples),
        (rec.stats.steps, rec.stats.taken_branches, rec.stats.samples)
    );
    assert_eq!(t.samples, t.taken_branches / corpus::TEST_PERIOD);
    let total: u64 = rec
        .truth
        .binaries
        .iter()
        .flat_map(|b| b.instructions.values())
        .sum::<u64>()
        + rec.truth.unmapped.instructions.values().sum::<u64>();
    assert_eq!(total, t.steps, "every executed instruction is attributed");
    for e in &rec.recording.events {
        if let PerfEvent::Sample(s) = e {
            assert_eq!(s.lbr[0].to, s.ip, "PEBS IP is the newest branch's target");
            assert_eq!(s.callchain[0], s.ip);
            assert!(s.lbr.len() <= 32);
        }
    }
    // The program's own binary has a build id and counted instructions.
    let bin = rec
        .truth
        .binary(rec.program.name)
        .expect("program binary in truth");
    assert_eq!(bin.build_id.len(), 40, "SHA-1 build id of {}", bin.path);
    assert!(!bin.instructions.is_empty());
}

fn check_program(test: &str, name: &str, variant: Variant) {
    let Some(rec) = recorded(test, name, variant) else {
        return;
    };
    check_samples(&rec);
    check_perf_script(&rec);
    check_llvm_profgen(&rec);
}

macro_rules! corpus_tests {
    ($($test:ident: $name:literal, $variant:expr;)*) => {
        $(
            #[test]
            fn $test() {
                let _machine = e2e::support::machine_share();
                check_program(stringify!($test), $name, $variant);
            }
        )*
    };
}

corpus_tests! {
    loop_count_probe: "loop_count", Variant::Probe;
    loop_count_lines: "loop_count", Variant::Lines;
    recursion_probe: "recursion", Variant::Probe;
    recursion_lines: "recursion", Variant::Lines;
    inline_tail_probe: "inline_tail", Variant::Probe;
    inline_tail_lines: "inline_tail", Variant::Lines;
    virtual_calls_probe: "virtual_calls", Variant::Probe;
    virtual_calls_lines: "virtual_calls", Variant::Lines;
    interp_probe: "interp", Variant::Probe;
    interp_lines: "interp", Variant::Lines;
    unroll_probe: "unroll", Variant::Probe;
    unroll_lines: "unroll", Variant::Lines;
    shlib_user_probe: "shlib_user", Variant::Probe;
    shlib_user_lines: "shlib_user", Variant::Lines;
}

/// `TRIP_COUNT` in tests/programs/loop_count.c.
const TRIP_COUNT: u64 = 12345;

fn symbol_range(binary: &Path, name: &str) -> (u64, u64) {
    let data = std::fs::read(binary).unwrap();
    let file = object::File::parse(&*data).unwrap();
    let sym = file
        .symbols()
        .find(|s| s.name() == Ok(name))
        .unwrap_or_else(|| panic!("no symbol {name}"));
    assert!(sym.size() > 0);
    (sym.address(), sym.address() + sym.size())
}

fn check_loop_truth(variant: Variant) {
    let Some(rec) = recorded("ground_truth_loop_count", "loop_count", variant) else {
        return;
    };
    let bin = rec.truth.binary("loop_count").unwrap();
    assert_eq!(bin.load_bias, "0x0", "loop_count is built non-PIE");
    let (lo, hi) = symbol_range(&rec.program.binary, "count_loop");
    let counts: BTreeMap<u64, u64> = bin
        .instructions
        .iter()
        .map(|(a, c)| (collector::ground_truth::parse_hex(a).unwrap(), *c))
        .filter(|(a, _)| (lo..hi).contains(a))
        .collect();
    // count_loop is called once: its first instruction runs once.
    assert_eq!(counts.get(&lo), Some(&1), "entry of count_loop");
    // The loop's back-edge: the only backward taken branch inside count_loop. The loop is
    // rotated (the guard `n > 0` is tested once before it), so the bottom test runs
    // TRIP_COUNT times and jumps back TRIP_COUNT - 1 times.
    let back_edges: Vec<(u64, u64, u64)> = bin
        .branches
        .iter()
        .filter(|e| !e.to_absolute)
        .map(|e| {
            let p = collector::ground_truth::parse_hex;
            (p(&e.from).unwrap(), p(&e.to).unwrap(), e.count)
        })
        .filter(|&(f, t, _)| (lo..hi).contains(&f) && (lo..hi).contains(&t) && t <= f)
        .collect();
    assert_eq!(back_edges.len(), 1, "{back_edges:x?}");
    let (latch, header, taken) = back_edges[0];
    assert_eq!(taken, TRIP_COUNT - 1);
    // Every instruction of the loop body, header to latch, executes exactly TRIP_COUNT times;
    // every other instruction of count_loop at most once.
    for (&addr, &count) in &counts {
        if (header..=latch).contains(&addr) {
            assert_eq!(count, TRIP_COUNT, "loop body instruction {addr:#x}");
        } else {
            assert!(
                count <= 1,
                "instruction {addr:#x} outside the loop ran {count} times"
            );
        }
    }
    let body = counts.range(header..=latch).count();
    assert!(body >= 3, "loop body has {body} instructions");
}

#[test]
fn ground_truth_loop_count_probe() {
    let _machine = e2e::support::machine_share();
    check_loop_truth(Variant::Probe);
}

#[test]
fn ground_truth_loop_count_lines() {
    let _machine = e2e::support::machine_share();
    check_loop_truth(Variant::Lines);
}

/// `pgo-agent record` of a program that runs far longer than the test: SIGTERM stops it,
/// and the perf.data written holds the samples recorded until then (as many as the final
/// report says), readable by our reader and by perf.
#[test]
fn sigterm_stops_record_and_writes_what_it_recorded() {
    let _machine = e2e::support::machine_share();
    use std::io::BufRead;
    if !corpus::tools_available("sigterm_stops_record", &["clang-19", "perf"]) {
        return;
    }
    let dir = e2e::support::scratch_dir("record", "sigterm");
    let spin = e2e::support::build_spin(&dir);
    let data = dir.join("stopped.data");
    let args = [
        "record",
        "--progress",
        "--period",
        "31",
        "--output",
        data.to_str().unwrap(),
        "--",
        spin.to_str().unwrap(),
        // Hours under the single-step recorder.
        "60",
    ];
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["cli_process", "--exact", "--nocapture", "--test-threads=1"])
        .env(e2e::support::CLI_ENV, args.join("\u{1f}"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(child.stderr.take().unwrap()).lines();
    // The progress lines: "pgo-agent record: N steps, M samples, R steps/s".
    let samples_in = |line: &str| -> Option<u64> {
        let rest = line.strip_prefix("pgo-agent record: ")?;
        let (_, samples) = rest.split_once(" steps, ")?;
        samples.split(' ').next()?.parse().ok()
    };
    let mut seen = Vec::new();
    for line in lines.by_ref() {
        let line = line.unwrap();
        seen.push(line.clone());
        if samples_in(&line).is_some_and(|n| n > 0) {
            break;
        }
        assert!(
            seen.len() < 600,
            "no samples reported:\n{}",
            seen.join("\n")
        );
    }
    // SAFETY: kill(2) on the child this test spawned and has not reaped.
    let rc = unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    assert_eq!(rc, 0);
    let rest: Vec<String> = lines.map(|l| l.unwrap()).collect();
    let status = child.wait().unwrap();
    let report = rest.join("\n");
    // Exited (cli_child maps the non-zero status 130 to 1), not killed by the signal.
    assert_eq!(status.code(), Some(1), "{status:?}\n{report}");
    assert!(report.contains("stopped by a signal"), "{report}");
    // "pgo-agent record: S steps, T taken branches, N samples, ..." after the stop.
    let reported: u64 = rest
        .iter()
        .find_map(|l| {
            let (_, after) = l.split_once(" taken branches, ")?;
            after.split(' ').next()?.parse().ok()
        })
        .unwrap_or_else(|| panic!("no final report:\n{report}"));
    assert!(reported > 0, "{report}");

    let mut reader = collector::perf_data::PerfDataReader::open(&data).unwrap();
    let mut samples = 0u64;
    while let Some(event) = reader.next_event().unwrap() {
        if let PerfEvent::Sample(s) = event {
            assert!(!s.lbr.is_empty());
            samples += 1;
        }
    }
    assert_eq!(samples, reported, "{report}");
    let out = Command::new("perf")
        .args(["script", "-F", "ip,brstack", "-i"])
        .arg(&data)
        .output()
        .expect("running perf");
    assert!(
        out.status.success(),
        "perf script: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let perf_samples = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with(" 0x"))
        .count() as u64;
    assert_eq!(perf_samples, reported);
}

/// `record --clear-env` records the same samples whatever the environment it is run from
/// (the environment sits on the program's stack and changes the loader's work before
/// `main`); without it, a longer environment changes them.
#[test]
fn clear_env_records_the_same_samples_from_any_environment() {
    let _machine = e2e::support::machine_share();
    if !corpus::tools_available("clear_env_records", &["clang-19"]) {
        return;
    }
    let program = corpus::program("recursion", Variant::Lines).expect("corpus builds");
    let dir = e2e::support::scratch_dir("record", "clear_env");
    let run = |stem: &str, clear: bool, pad: usize| {
        let script = dir.join(format!("{stem}.perfscript"));
        let mut args = vec!["record".to_string(), "--period".into(), "97".into()];
        if clear {
            args.push("--clear-env".into());
        }
        args.extend([
            "--script".into(),
            script.to_str().unwrap().into(),
            "--".into(),
        ]);
        args.push(program.binary.to_str().unwrap().into());
        let out = e2e::support::cli_child_command(&args)
            .env("PGO_AGENT_TEST_PAD", "x".repeat(pad))
            .output()
            .unwrap();
        assert!(out.status.success(), "{stem}: {out:?}");
        // The samples, without the process ids of the MMAP2 lines.
        std::fs::read_to_string(&script)
            .unwrap()
            .lines()
            .map(|l| match l.split_once(": [") {
                Some((_, rest)) if l.starts_with("PERF_RECORD_MMAP2") => format!("mmap [{rest}"),
                _ => l.to_string(),
            })
            .collect::<Vec<_>>()
            .join("\n")
    };
    let recordings = std::thread::scope(|s| {
        let runs = [
            ("short", true, 1),
            ("long", true, 3000),
            ("inherited", false, 3000),
        ]
        .map(|(stem, clear, pad)| s.spawn(move || run(stem, clear, pad)));
        runs.map(|r| r.join().unwrap())
    });
    let [short, long, inherited] = recordings;
    assert!(short.lines().count() > 100, "{short}");
    assert!(
        short == long,
        "--clear-env recordings differ with the environment"
    );
    assert!(
        inherited != long,
        "a 3000-byte longer environment changed no sample without --clear-env"
    );
}
