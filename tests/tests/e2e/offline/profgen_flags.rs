//! llvm-profgen 19 options of `pgo-agent convert` beyond the conformance suite's, each
//! against llvm-profgen-19 with the same flag on corpus programs (probe and line-table
//! builds, CS and flat where the flag applies): the canonical text (`llvm-profdata-19
//! merge --sample --text`) of both outputs is byte-identical, and so are the unsymbolized
//! counters where the flag shapes them. Each check also asserts that the flag changes the
//! output on at least one program, so a flag read and ignored fails.
//!
//! `--time-profgen` is not an llvm-profgen 19 option (it rejects it): its report is ours,
//! checked for its phases, and the profile written with it equals the one without.

use std::path::{Path, PathBuf};
use std::process::Command;

use e2e::corpus::{self, Variant};
use e2e::support::{
    assert_same, canonical_profile as canonical, llvm, pgo_agent, read_text, run_ok, section_flags,
};

const TOOLS: &[&str] = &["clang-19", "llvm-profgen-19", "llvm-profdata-19"];

/// `llvm-profdata-19 show --sample` of `profile` (every function's records, as LLVM reads
/// them).
fn show(profile: &Path) -> String {
    profdata_stdout(&["show", "--sample"], profile)
}

fn profdata_stdout(args: &[&str], profile: &Path) -> String {
    run_ok(Command::new("llvm-profdata-19").args(args).arg(profile))
}

/// A fresh output directory of this test process for `name`.
fn out_dir(name: &str) -> PathBuf {
    e2e::support::scratch_dir("profgen_flags", name)
}

/// One recorded corpus program: its perf script input arguments.
struct Input {
    what: String,
    dir: PathBuf,
    args: Vec<String>,
}

impl Input {
    fn record(name: &str, variant: Variant, test: &str) -> Input {
        let program = corpus::program(name, variant).expect("corpus builds");
        let rec = corpus::record(&program).expect("recorder runs");
        Input {
            what: format!("{name} ({variant})"),
            dir: out_dir(&format!("{test}/{name}-{variant}")),
            args: vec![
                "--perfscript".into(),
                rec.perf_script.to_str().unwrap().into(),
                "--binary".into(),
                program.binary.to_str().unwrap().into(),
            ],
        }
    }

    /// Runs llvm-profgen-19 and `pgo-agent convert` with `flags` into `<stem>.llvm` and
    /// `<stem>.ours`; returns both paths.
    fn run_both(&self, stem: &str, flags: &[&str]) -> (PathBuf, PathBuf) {
        let (theirs, ours) = (
            self.dir.join(format!("{stem}.llvm")),
            self.dir.join(format!("{stem}.ours")),
        );
        let args: Vec<&str> = self.args.iter().map(String::as_str).collect();
        let output = |p: &PathBuf| p.to_str().unwrap().to_string();
        llvm(
            "llvm-profgen-19",
            &[&args[..], flags, &["--output", &output(&theirs)]].concat(),
        );
        pgo_agent(
            &[
                &["convert"],
                &args[..],
                flags,
                &["--output", &output(&ours)],
            ]
            .concat(),
        );
        (theirs, ours)
    }

    /// The profiles of both tools with `flags` are the same after canonicalisation (and
    /// not empty); returns the canonical text.
    fn same_profile(&self, stem: &str, flags: &[&str]) -> String {
        let (theirs, ours) = self.run_both(stem, flags);
        let theirs = canonical(&theirs);
        assert!(
            !theirs.trim().is_empty(),
            "{} {}: llvm-profgen-19 wrote an empty profile",
            self.what,
            flags.join(" ")
        );
        assert_same(
            &format!("{} {}: profile", self.what, flags.join(" ")),
            &canonical(&ours),
            &theirs,
        );
        theirs
    }

    /// The unsymbolized counters of both tools with `flags` are byte-identical; returns
    /// them.
    fn same_unsymbolized(&self, stem: &str, flags: &[&str]) -> String {
        let flags = [flags, &["--skip-symbolization"]].concat();
        let (theirs, ours) = self.run_both(stem, &flags);
        let theirs = read_text(&theirs);
        assert_same(
            &format!("{} {}: unsymbolized counters", self.what, flags.join(" ")),
            &read_text(&ours),
            &theirs,
        );
        theirs
    }
}

/// The profile shapes a flag is checked in: CS with llvm-profgen's defaults (pre-inliner,
/// nested profile), flat CS, and flat (`--ignore-stack-samples`).
const SHAPES: &[(&str, &[&str])] = &[
    ("cs", &["--format=text"]),
    (
        "flatcs",
        &[
            "--format=text",
            "--csspgo-preinliner=false",
            "--gen-cs-nested-profile=false",
        ],
    ),
    ("flat", &["--format=text", "--ignore-stack-samples"]),
];

/// `--use-dwarf-correlation`: a probe binary is read as a line-table binary (its probes
/// ignored); on a line-table binary it changes nothing.
#[test]
fn use_dwarf_correlation_matches_llvm_profgen() {
    let _machine = e2e::support::machine_share();
    if !corpus::tools_available("use-dwarf-correlation", TOOLS) {
        return;
    }
    let flag = "--use-dwarf-correlation";
    for (name, variant) in [
        ("recursion", Variant::Probe),
        ("inline_tail", Variant::Probe),
        ("inlined_calls", Variant::Probe),
        ("recursion", Variant::Lines),
    ] {
        let input = Input::record(name, variant, "dwarf_correlation");
        for &(shape, args) in SHAPES {
            let with = input.same_profile(&format!("{shape}.dwarf"), &[args, &[flag]].concat());
            let without = input.same_profile(&format!("{shape}.default"), args);
            if variant == Variant::Probe {
                // Probe profiles carry checksums; line-based ones do not.
                assert!(
                    without.contains("!CFGChecksum"),
                    "{}:\n{without}",
                    input.what
                );
                assert!(!with.contains("!CFGChecksum"), "{}:\n{with}", input.what);
            } else {
                assert_eq!(with, without, "{}: {flag} on a line binary", input.what);
            }
        }
        for (mode, args) in [("cs", &[][..]), ("flat", &["--ignore-stack-samples"][..])] {
            let raw =
                input.same_unsymbolized(&format!("{mode}.dwarf.raw"), &[args, &[flag]].concat());
            if variant == Variant::Probe && mode == "cs" {
                // Line contexts (`[main:7 @ fib]`), not probe call-site addresses.
                assert!(raw.contains('['), "{}:\n{raw}", input.what);
            }
        }
    }
}

/// `--max-search-depth=N`: missing-frame inference (CS probe profiles) searches tail-call
/// chains through at most N functions. On `inline_tail`, depth 0 loses the frame the
/// default infers.
#[test]
fn max_search_depth_matches_llvm_profgen() {
    let _machine = e2e::support::machine_share();
    if !corpus::tools_available("max-search-depth", TOOLS) {
        return;
    }
    let mut changed = false;
    for (name, variant) in [
        ("inline_tail", Variant::Probe),
        ("recursion", Variant::Probe),
        ("inline_tail", Variant::Lines),
    ] {
        let input = Input::record(name, variant, "max_search_depth");
        for &(shape, args) in &SHAPES[..2] {
            let default = input.same_profile(&format!("{shape}.default"), args);
            for depth in [
                "--max-search-depth=0",
                "--max-search-depth=1",
                "--max-search-depth=4294967294",
            ] {
                let stem = format!("{shape}.{}", depth.rsplit('=').next().unwrap());
                let with = input.same_profile(&stem, &[args, &[depth]].concat());
                changed |= with != default;
            }
        }
    }
    assert!(
        changed,
        "--max-search-depth changed no profile: the check proves nothing"
    );
}

/// `--csspgo-replay-preinline`: the pre-inliner inlines exactly the contexts the profiled
/// binary inlined.
#[test]
fn csspgo_replay_preinline_matches_llvm_profgen() {
    let _machine = e2e::support::machine_share();
    if !corpus::tools_available("csspgo-replay-preinline", TOOLS) {
        return;
    }
    let flag = "--csspgo-replay-preinline";
    let mut changed = false;
    for (name, variant) in [
        ("recursion", Variant::Probe),
        ("recursion", Variant::Lines),
        ("inline_tail", Variant::Probe),
        ("inline_tail", Variant::Lines),
        ("inlined_calls", Variant::Probe),
        ("inlined_calls", Variant::Lines),
    ] {
        let input = Input::record(name, variant, "replay_preinline");
        let default = input.same_profile("cs.default", &["--format=text"]);
        let with = input.same_profile("cs.replay", &["--format=text", flag]);
        changed |= with != default;
        // Extbinary: the same profile read back, the same section flags (`preInlined`).
        let (theirs, ours) = input.run_both("cs.replay.extbin", &[flag]);
        assert_same(
            &format!("{} {flag}: extbinary", input.what),
            &canonical(&ours),
            &with,
        );
        assert_same(
            &format!("{} {flag}: extbinary section flags", input.what),
            &section_flags(&ours),
            &section_flags(&theirs),
        );
    }
    assert!(
        changed,
        "{flag} changed no profile: the check proves nothing"
    );
}

/// `--use-md5`: extbinary with a fixed-length MD5 name table (`{fixlenmd5}`); the same
/// records (names as hashes) and section flags as llvm-profgen 19's. With `--format=text`
/// the flag is ignored, as by llvm-profgen.
#[test]
fn use_md5_matches_llvm_profgen() {
    let _machine = e2e::support::machine_share();
    if !corpus::tools_available("use-md5", TOOLS) {
        return;
    }
    let flag = "--use-md5";
    for (name, variant) in [
        ("recursion", Variant::Probe),
        ("recursion", Variant::Lines),
        ("inline_tail", Variant::Probe),
        ("inline_tail", Variant::Lines),
    ] {
        let input = Input::record(name, variant, "use_md5");
        for (mode, args) in [
            ("cs", &[][..]),
            (
                "flatcs",
                &["--csspgo-preinliner=false", "--gen-cs-nested-profile=false"][..],
            ),
            ("flat", &["--ignore-stack-samples"][..]),
        ] {
            let what = format!("{} {mode} {flag}", input.what);
            let (theirs, ours) = input.run_both(&format!("{mode}.md5"), &[args, &[flag]].concat());
            let text = canonical(&theirs);
            assert_same(&format!("{what}: canonical text"), &canonical(&ours), &text);
            assert_same(&format!("{what}: show"), &show(&ours), &show(&theirs));
            let flags = section_flags(&ours);
            assert_same(
                &format!("{what}: section flags"),
                &flags,
                &section_flags(&theirs),
            );
            assert!(
                flags.contains("NameTableSection {fixlenmd5}"),
                "{what}:\n{flags}"
            );
            // Names are the MD5 hashes of the names without the flag.
            let (plain, _) = input.run_both(&format!("{mode}.plain"), args);
            let hashed: std::collections::BTreeSet<String> = top_level_names(&canonical(&plain))
                .iter()
                .map(|n| symbolizer::guid::function_guid(n).to_string())
                .collect();
            assert_eq!(top_level_names(&text), hashed, "{what}:\n{text}");
        }
        // Text output: the flag is ignored.
        let with = input.same_profile("text.md5", &["--format=text", flag]);
        let without = input.same_profile("text", &["--format=text"]);
        assert_eq!(with, without, "{}: {flag} with --format=text", input.what);
    }
}

/// `--llvm-sample-profile`: llvm-profgen 19's own profiles (nested extbinary, flat text)
/// post-processed again, with and without `--trim-cold-profile`, into text and
/// extbinary: the same profile and section flags as llvm-profgen 19's. A flat CS profile is
/// refused with a message naming the flag.
#[test]
fn llvm_sample_profile_matches_llvm_profgen() {
    let _machine = e2e::support::machine_share();
    if !corpus::tools_available("llvm-sample-profile", TOOLS) {
        return;
    }
    let mut trimmed = false;
    for (name, variant) in [
        ("recursion", Variant::Probe),
        ("recursion", Variant::Lines),
        ("inline_tail", Variant::Probe),
        ("inline_tail", Variant::Lines),
    ] {
        let sample = Input::record(name, variant, "llvm_sample_profile");
        let binary = sample.args[3].clone();
        let inputs = [
            ("nested", &[][..]),
            ("flat", &["--format=text", "--ignore-stack-samples"][..]),
        ];
        for (kind, args) in inputs {
            // The input: llvm-profgen 19's profile of the samples.
            let made = sample.dir.join(format!("{kind}.input"));
            let sample_args: Vec<&str> = sample.args.iter().map(String::as_str).collect();
            llvm(
                "llvm-profgen-19",
                &[
                    &sample_args[..],
                    args,
                    &["--output", made.to_str().unwrap()],
                ]
                .concat(),
            );
            let input = Input {
                what: format!("{} {kind} profile", sample.what),
                dir: sample.dir.clone(),
                args: vec![
                    "--llvm-sample-profile".into(),
                    made.to_str().unwrap().into(),
                    "--binary".into(),
                    binary.clone(),
                ],
            };
            let plain = input.same_profile(&format!("{kind}.re"), &["--format=text"]);
            let trim = input.same_profile(
                &format!("{kind}.re.trim"),
                &["--format=text", "--trim-cold-profile"],
            );
            trimmed |= trim != plain;
            let (theirs, ours) = input.run_both(&format!("{kind}.re.extbin"), &[]);
            assert_same(
                &format!("{}: extbinary", input.what),
                &canonical(&ours),
                &plain,
            );
            assert_same(
                &format!("{}: extbinary section flags", input.what),
                &section_flags(&ours),
                &section_flags(&theirs),
            );
        }
        // A flat CS profile is refused, naming the flag.
        let flat_cs = sample.dir.join("flatcs.input");
        let sample_args: Vec<&str> = sample.args.iter().map(String::as_str).collect();
        llvm(
            "llvm-profgen-19",
            &[
                &sample_args[..],
                &[
                    "--format=text",
                    "--csspgo-preinliner=false",
                    "--gen-cs-nested-profile=false",
                    "--output",
                    flat_cs.to_str().unwrap(),
                ],
            ]
            .concat(),
        );
        let out = sample.dir.join("flatcs.re");
        let (code, text) = e2e::support::cli_in_child(&[
            "convert".to_string(),
            "--llvm-sample-profile".into(),
            flat_cs.to_str().unwrap().into(),
            "--binary".into(),
            binary.clone(),
            "--output".into(),
            out.to_str().unwrap().into(),
        ]);
        assert_eq!(code, Some(1), "{}: flat CS input:\n{text}", sample.what);
        assert!(
            text.contains("flat context-sensitive profile")
                && text.contains("--llvm-sample-profile"),
            "{}:\n{text}",
            sample.what
        );
    }
    assert!(
        trimmed,
        "--trim-cold-profile changed no re-processed profile"
    );
}

/// The function names of the top-level profiles of a canonical text profile (every frame
/// of a context `[main:5 @ fib]`).
fn top_level_names(text: &str) -> std::collections::BTreeSet<String> {
    text.lines()
        .filter(|l| !l.starts_with(' '))
        .filter_map(|l| l.rsplitn(3, ':').nth(2))
        .flat_map(|head| {
            let frames = head.trim_start_matches('[').trim_end_matches(']');
            frames
                .split(" @ ")
                .map(|f| f.split(':').next().unwrap_or(f).to_string())
                .collect::<Vec<_>>()
        })
        .collect()
}

/// `--time-profgen`: the phase report on stderr (each phase of the conversion and the
/// total), and the same profile as without the flag, for perf script input (CS and flat),
/// `--skip-symbolization`, and an unsymbolized profile of line contexts.
#[test]
fn time_profgen_prints_phase_report() {
    let _machine = e2e::support::machine_share();
    if !corpus::tools_available("time-profgen", TOOLS) {
        return;
    }
    for variant in [Variant::Probe, Variant::Lines] {
        let input = Input::record("recursion", variant, "time_profgen");
        let unsymbolized = input.dir.join("unsymbolized.raw");
        // llvm-profgen 19 unsymbolized profile (line contexts of the line binary).
        llvm(
            "llvm-profgen-19",
            &[
                &input.args.iter().map(String::as_str).collect::<Vec<_>>()[..],
                &[
                    "--skip-symbolization",
                    "--output",
                    unsymbolized.to_str().unwrap(),
                ],
            ]
            .concat(),
        );
        let binary = input.args[3].clone();
        let cases: Vec<(&str, Vec<String>, &[&str])> = vec![
            (
                "cs",
                input.args.clone(),
                &[
                    "Load binary",
                    "Read and unwind samples",
                    "Generate profile",
                    "Write profile",
                ],
            ),
            (
                "flat",
                [&input.args[..], &["--ignore-stack-samples".to_string()]].concat(),
                &[
                    "Load binary",
                    "Read and unwind samples",
                    "Generate profile",
                    "Write profile",
                ],
            ),
            (
                "raw",
                [&input.args[..], &["--skip-symbolization".to_string()]].concat(),
                &[
                    "Load binary",
                    "Read and unwind samples",
                    "Write unsymbolized profile",
                ],
            ),
            (
                "up",
                vec![
                    "--unsymbolized-profile".into(),
                    unsymbolized.to_str().unwrap().into(),
                    "--binary".into(),
                    binary,
                ],
                if variant == Variant::Lines {
                    &["Load binary", "Generate profile", "Write profile"]
                } else {
                    &[
                        "Load binary",
                        "Read and unwind samples",
                        "Generate profile",
                        "Write profile",
                    ]
                },
            ),
        ];
        for (case, args, phases) in cases {
            let what = format!("{} {case} --time-profgen", input.what);
            let (timed, plain) = (
                input.dir.join(format!("{case}.timed")),
                input.dir.join(format!("{case}.plain")),
            );
            let run = |out: &Path, extra: &[&str]| {
                let mut argv = vec!["convert".to_string()];
                argv.extend(args.iter().cloned());
                argv.extend(extra.iter().map(|s| s.to_string()));
                argv.extend(["--output".to_string(), out.to_str().unwrap().to_string()]);
                e2e::support::cli_in_child(&argv)
            };
            let (code, report) = run(&timed, &["--time-profgen"]);
            assert_eq!(code, Some(0), "{what}:\n{report}");
            let (code, quiet) = run(&plain, &[]);
            assert_eq!(code, Some(0), "{what} (without):\n{quiet}");
            assert!(!quiet.contains("Total Execution Time"), "{what}:\n{quiet}");
            assert!(
                report.contains("  Total Execution Time: ") && report.contains("  Total\n"),
                "{what}:\n{report}"
            );
            let mut at = 0;
            for phase in phases {
                let line = format!("%)  {phase}\n");
                let found = report[at..].find(&line).unwrap_or_else(|| {
                    panic!("{what}: no phase `{phase}` (in order) in:\n{report}")
                });
                at += found + line.len();
            }
            assert_eq!(
                std::fs::read(&timed).unwrap(),
                std::fs::read(&plain).unwrap(),
                "{what}: the profile differs from the one without the flag"
            );
        }
    }
}

/// A corpus recording as the kernel's: the binary's MMAP2 line becomes perf's kernel
/// image line (`PERF_RECORD_MMAP -1/0: [addr(len) @ addr]: x [kernel.kallsyms]_text`) and
/// every address inside the mapping moves by `shift`; without `image`, the line is dropped.
fn kernel_input(name: &str, variant: Variant, shift: u64, image: Option<&str>) -> Input {
    let program = corpus::program(name, variant).expect("corpus builds");
    let rec = corpus::record(&program).expect("recorder runs");
    let text = read_text(&rec.perf_script);
    let path = program.binary.to_str().unwrap();
    let mapping = text
        .lines()
        .find(|l| l.starts_with("PERF_RECORD_MMAP2") && l.ends_with(&format!(" {path}")))
        .expect("the binary's mmap line");
    let hex = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap();
    let (addr, len) = mapping
        .split_once('[')
        .and_then(|(_, r)| r.split_once(')'))
        .and_then(|(r, _)| r.split_once('('))
        .map(|(a, l)| (hex(a), hex(l)))
        .expect("address and length");
    let moved = |a: u64| {
        if (addr..addr + len).contains(&a) {
            a + shift
        } else {
            a
        }
    };
    let mut out = String::new();
    for line in text.lines() {
        if line == mapping {
            if let Some(image) = image {
                out += &format!(
                    "PERF_RECORD_MMAP -1/0: [{:#x}({len:#x}) @ {:#x}]: x {image}\n",
                    addr + shift,
                    addr + shift
                );
            }
        } else if line.starts_with("PERF_RECORD") {
            out += line;
            out.push('\n');
        } else if let Some(stack) = line.strip_prefix('\t') {
            let frame = stack.trim_start();
            let pad = &stack[..stack.len() - frame.len()];
            out += &format!("\t{pad}{:x}\n", moved(hex(frame)));
        } else {
            // The branch stack: ` 0xFROM/0xTO/flags… ` tokens.
            let tokens: Vec<String> = line
                .split(' ')
                .map(|t| match t.split_once('/') {
                    Some((from, rest)) if from.starts_with("0x") => {
                        let (to, flags) = rest.split_once('/').unwrap_or((rest, ""));
                        format!("{:#x}/{:#x}/{flags}", moved(hex(from)), moved(hex(to)))
                    }
                    _ => t.to_string(),
                })
                .collect();
            out += &tokens.join(" ");
            out.push('\n');
        }
    }
    let label = format!(
        "{shift:x}-{}",
        image.unwrap_or("none").replace(['[', ']', '.'], "")
    );
    let dir = out_dir(&format!("kernel/{name}-{variant}-{label}"));
    let script = dir.join("kernel.perfscript");
    std::fs::write(&script, out).unwrap();
    Input {
        what: format!("{name} ({variant}) as the kernel, moved {shift:#x}, {image:?}"),
        dir,
        args: vec![
            "--perfscript".into(),
            script.to_str().unwrap().into(),
            "--binary".into(),
            path.into(),
        ],
    }
}

/// `--kernel`: the binary is placed by perf's kernel image mmap lines (any of its three
/// names, whatever the offset), not by its file name; a recording without one is an error
/// in both tools. Checked by turning corpus recordings into kernel-style ones, at their
/// own addresses and moved by 256 MiB (which only the kernel line can place).
#[test]
fn kernel_matches_llvm_profgen() {
    let _machine = e2e::support::machine_share();
    if !corpus::tools_available("kernel", TOOLS) {
        return;
    }
    const MOVED: u64 = 0x1000_0000;
    for (name, variant) in [
        ("loop_count", Variant::Lines),
        ("loop_count", Variant::Probe),
        ("recursion", Variant::Probe),
    ] {
        let at_home = kernel_input(name, variant, 0, Some("[kernel.kallsyms]_text"));
        for (image, moved) in [("[kernel.kallsyms]_text", MOVED), ("[kernel.kallsyms]", 0)] {
            let input = kernel_input(name, variant, moved, Some(image));
            for &(shape, args) in SHAPES {
                let kernel = input.same_profile(shape, &[args, &["--kernel"]].concat());
                assert_eq!(
                    kernel,
                    at_home.same_profile(shape, &[args, &["--kernel"]].concat()),
                    "{}: {shape} differs from the profile at the recorded addresses",
                    input.what
                );
            }
            for (mode, args) in [("cs", &[][..]), ("flat", &["--ignore-stack-samples"][..])] {
                input.same_unsymbolized(&format!("{mode}.raw"), &[args, &["--kernel"]].concat());
            }
            if moved != 0 {
                // Without --kernel the kernel line is not the binary's: nothing is placed.
                let ours = input.dir.join("user.ours");
                let mut argv = vec![
                    "convert",
                    "--format=text",
                    "--output",
                    ours.to_str().unwrap(),
                ];
                argv.extend(input.args.iter().map(String::as_str));
                pgo_agent(&argv);
                assert_ne!(
                    e2e::support::try_canonical_profile(&ours).unwrap_or_default(),
                    at_home.same_profile("cs", &["--format=text", "--kernel"]),
                    "{}: the kernel line placed a user binary",
                    input.what
                );
            }
        }
        kernel_perf_data_reads_every_process(name, variant, &at_home);
        // No kernel image line: llvm-profgen-19 and pgo-agent both stop.
        let input = kernel_input(name, variant, 0, None);
        let out = input.dir.join("missing.llvm");
        let theirs = Command::new("llvm-profgen-19")
            .args(&input.args)
            .args(["--kernel", "--output", out.to_str().unwrap()])
            .output()
            .unwrap();
        let message = "Kernel is requested, but no kernel is found in mmap events.";
        assert!(!theirs.status.success(), "{}", input.what);
        assert!(
            String::from_utf8_lossy(&theirs.stderr).contains(message),
            "{}: {}",
            input.what,
            String::from_utf8_lossy(&theirs.stderr)
        );
        let mut argv = vec!["convert".to_string()];
        argv.extend(input.args.iter().cloned());
        argv.extend(["--kernel".into(), "--output".into()]);
        argv.push(input.dir.join("missing.ours").to_str().unwrap().into());
        let (code, log) = e2e::support::cli_in_child(&argv);
        assert_eq!(code, Some(1), "{}:\n{log}", input.what);
        assert!(log.contains(message), "{}:\n{log}", input.what);
    }
}

/// perf.data with `--kernel`: the recording written with the binary's MMAP2 event as the
/// kernel image's (pid -1) converts to the profile its perf script does (no pass that
/// keeps only the processes mapping the binary: the kernel's samples come from every
/// process).
fn kernel_perf_data_reads_every_process(name: &str, variant: Variant, script: &Input) {
    let program = corpus::program(name, variant).expect("corpus builds");
    let rec = corpus::record(&program).expect("recorder runs");
    let mut recording = rec.recording.clone();
    let path = program.binary.to_str().unwrap();
    for event in &mut recording.events {
        if let collector::PerfEvent::SideBand(collector::SideBandEvent::Mmap2(m)) = event {
            if m.filename == path {
                (m.pid, m.tid, m.pgoff, m.build_id) = (-1, 0, m.addr, None);
                m.filename = "[kernel.kallsyms]_text".into();
            }
        }
    }
    let data = script.dir.join("kernel.data");
    collector::perf_data::write_perf_data(&data, &recording).unwrap();
    let out = |from: &str| script.dir.join(format!("{from}.kernel.txt"));
    let convert = |input: &[&str], output: &Path| {
        let mut argv = vec!["convert", "--kernel", "--no-stack-repair", "--format=text"];
        argv.extend(input);
        argv.extend(["--binary", path, "--output", output.to_str().unwrap()]);
        pgo_agent(&argv);
    };
    convert(&["--perfdata", data.to_str().unwrap()], &out("data"));
    let script_args: Vec<&str> = script.args[..2].iter().map(String::as_str).collect();
    convert(&script_args, &out("script"));
    assert_same(
        &format!(
            "{} as the kernel: perf.data against its perf script",
            script.what
        ),
        &canonical(&out("data")),
        &canonical(&out("script")),
    );
}

/// `--csspgo-preinliner-multiplier-for-previous-inlining=N`: the pre-inliner's size
/// threshold for contexts the binary already inlined is multiplied by N (100 by default).
#[test]
fn previous_inlining_multiplier_matches_llvm_profgen() {
    let _machine = e2e::support::machine_share();
    if !corpus::tools_available("previous-inlining multiplier", TOOLS) {
        return;
    }
    let mut changed = false;
    for name in ["inlined_calls", "inline_tail", "recursion", "virtual_calls"] {
        let input = Input::record(name, Variant::Probe, "previous_inlining");
        let default = input.same_profile("default", &["--format=text"]);
        for n in ["0", "1", "1000"] {
            let flag = format!("--csspgo-preinliner-multiplier-for-previous-inlining={n}");
            let with = input.same_profile(&format!("x{n}"), &["--format=text", &flag]);
            changed |= with != default;
        }
    }
    assert!(changed, "the multiplier changed no pre-inlined profile");
}

/// The remaining options that shape what is counted or kept: `--pid` (the right process and
/// another), `--use-offset=false`, `--trim-cold-profile`, `--csprof-merge-cold-context`,
/// `--csprof-max-cold-context-depth` and the summary's `--profile-summary-hot-count` /
/// `--profile-summary-cold-count`, each against llvm-profgen-19.
#[test]
fn pid_offset_and_cold_flags_match_llvm_profgen() {
    let _machine = e2e::support::machine_share();
    if !corpus::tools_available("pid, offset and cold flags", TOOLS) {
        return;
    }
    let (mut pid_changed, mut offset_changed, mut cold_changed) = (false, false, false);
    for (name, variant) in [
        ("recursion", Variant::Probe),
        ("inline_tail", Variant::Probe),
        ("recursion", Variant::Lines),
    ] {
        let input = Input::record(name, variant, "pid_cold");
        let script = read_text(Path::new(&input.args[1]));
        let pid = script
            .lines()
            .find_map(|l| l.strip_prefix("PERF_RECORD_MMAP2 "))
            .and_then(|l| l.split('/').next())
            .expect("a pid in the mmap lines")
            .to_string();
        let raw = input.same_unsymbolized("raw", &[]);
        let right = input.same_unsymbolized("pid", &[&format!("--pid={pid}")]);
        assert_eq!(right, raw, "{}: --pid of the recorded process", input.what);
        let other = input.same_unsymbolized("otherpid", &["--pid=1"]);
        pid_changed |= other != raw;
        let absolute = input.same_unsymbolized("absolute", &["--use-offset=false"]);
        offset_changed |= absolute != raw;
        let default = input.same_profile("cold.default", &["--format=text"]);
        for (stem, flags) in [
            (
                "trim",
                &["--trim-cold-profile", "--profile-summary-cold-count=1000"][..],
            ),
            (
                "flat.trim",
                &["--ignore-stack-samples", "--trim-cold-profile"][..],
            ),
            (
                "merge",
                &[
                    "--csspgo-preinliner=false",
                    "--csprof-merge-cold-context",
                    "--profile-summary-cold-count=1000",
                ][..],
            ),
            (
                "merge.depth",
                &[
                    "--csspgo-preinliner=false",
                    "--csprof-merge-cold-context",
                    "--csprof-max-cold-context-depth=2",
                    "--profile-summary-cold-count=1000",
                ][..],
            ),
            ("hot", &["--profile-summary-hot-count=1"][..]),
        ] {
            let with = input.same_profile(stem, &[&["--format=text"], flags].concat());
            cold_changed |= with != default;
        }
    }
    assert!(pid_changed, "--pid of another process changed no counters");
    assert!(offset_changed, "--use-offset=false changed no counters");
    assert!(
        cold_changed,
        "no cold-context or summary flag changed a profile"
    );
}

/// `--format=binary`: LLVM's older raw binary sample profile, for line-based profiles (CS
/// nested and flat); a probe-based profile is refused by both tools.
#[test]
fn binary_format_matches_llvm_profgen() {
    let _machine = e2e::support::machine_share();
    if !corpus::tools_available("binary format", TOOLS) {
        return;
    }
    for name in ["loop_count", "recursion", "inlined_calls"] {
        let input = Input::record(name, Variant::Lines, "binary_format");
        for (shape, flags) in [
            ("cs", &["--format=binary"][..]),
            ("flat", &["--format=binary", "--ignore-stack-samples"][..]),
        ] {
            let binary = input.same_profile(&format!("{shape}.bin"), flags);
            // The same profile as the text format's, less the attributes (pre-inlined
            // contexts) the raw binary format has no place for.
            let text = &[&flags[1..], &["--format=text"]].concat();
            let text = input.same_profile(&format!("{shape}.txt"), text);
            let without_attributes: String = text
                .lines()
                .filter(|l| !l.trim_start().starts_with("!Attributes"))
                .map(|l| format!("{l}\n"))
                .collect();
            assert_eq!(
                binary, without_attributes,
                "{}: the binary profile is not the text one",
                input.what
            );
        }
    }
    let input = Input::record("recursion", Variant::Probe, "binary_format");
    let out = input.dir.join("probe.bin");
    let theirs = Command::new("llvm-profgen-19")
        .args(&input.args)
        .args(["--format=binary", "--output", out.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        !theirs.status.success(),
        "llvm-profgen-19 wrote a binary probe profile"
    );
    let mut argv = vec!["convert".to_string(), "--format=binary".into()];
    argv.extend(input.args.iter().cloned());
    argv.extend(["--output".into(), out.to_str().unwrap().into()]);
    let (code, log) = e2e::support::cli_in_child(&argv);
    assert_eq!(code, Some(1), "{log}");
    assert!(
        log.contains("Profile encoding format unsupported for writing operations"),
        "{log}"
    );
}

/// LLVM's pre-inliner size limits read by llvm-profgen 19's pre-inliner:
/// `--sample-profile-inline-growth-limit`, `--sample-profile-inline-limit-min` and
/// `--sort-profiled-scc-member`.
#[test]
fn preinliner_size_limits_match_llvm_profgen() {
    let _machine = e2e::support::machine_share();
    if !corpus::tools_available("pre-inliner size limits", TOOLS) {
        return;
    }
    let mut changed = false;
    for (name, variant) in [
        ("inlined_calls", Variant::Probe),
        ("recursion", Variant::Probe),
        ("inline_tail", Variant::Lines),
    ] {
        let input = Input::record(name, variant, "preinliner_limits");
        let default = input.same_profile("default", &["--format=text"]);
        for (stem, flag) in [
            ("growth1", "--sample-profile-inline-growth-limit=1"),
            ("growth100", "--sample-profile-inline-growth-limit=100"),
            ("min1", "--sample-profile-inline-limit-min=1"),
            ("min0", "--sample-profile-inline-limit-min=0"),
            ("unsorted", "--sort-profiled-scc-member=false"),
        ] {
            let with = input.same_profile(stem, &["--format=text", flag]);
            changed |= with != default;
        }
    }
    assert!(changed, "no pre-inliner limit changed a profile");
}

/// `--generate-merged-base-profiles` (nested CS profiles: every inlined context also merged
/// into its function's base profile) and the summary cutoffs `--profile-summary-cutoff-hot`
/// / `-cold` (the hot and cold count thresholds of trimming, cold-context merging and the
/// pre-inliner), in text and extbinary, against llvm-profgen-19. A cutoff above the largest
/// the summary computes is refused (llvm-profgen stops with a fatal error).
#[test]
fn merged_base_profiles_and_summary_cutoffs_match_llvm_profgen() {
    let _machine = e2e::support::machine_share();
    if !corpus::tools_available("merged base profiles and cutoffs", TOOLS) {
        return;
    }
    let (mut merged_changed, mut cutoff_changed) = (false, false);
    for (name, variant) in [
        ("recursion", Variant::Probe),
        ("inline_tail", Variant::Probe),
        ("inline_tail", Variant::Lines),
        ("virtual_calls", Variant::Probe),
    ] {
        let input = Input::record(name, variant, "merged_base");
        let default = input.same_profile("default", &["--format=text"]);
        let merged_flag = "--generate-merged-base-profiles";
        for (stem, flags) in [
            ("merged", &[][..]),
            ("merged.nopreinline", &["--csspgo-preinliner=false"][..]),
        ] {
            let text = [&["--format=text", merged_flag], flags].concat();
            let merged = input.same_profile(stem, &text);
            merged_changed |= merged != default;
            let (theirs, ours) =
                input.run_both(&format!("{stem}.extbin"), &[&[merged_flag], flags].concat());
            assert_same(
                &format!("{} {merged_flag}: extbinary", input.what),
                &canonical(&ours),
                &canonical(&theirs),
            );
            assert_same(
                &format!("{} {merged_flag}: extbinary section flags", input.what),
                &section_flags(&ours),
                &section_flags(&theirs),
            );
        }
        for (stem, flags) in [
            (
                "trim",
                &[
                    "--trim-cold-profile",
                    "--profile-summary-cutoff-cold=900000",
                ][..],
            ),
            (
                "flat.trim",
                &[
                    "--ignore-stack-samples",
                    "--trim-cold-profile",
                    "--profile-summary-cutoff-cold=500000",
                ][..],
            ),
            (
                "merge",
                &[
                    "--csspgo-preinliner=false",
                    "--csprof-merge-cold-context",
                    "--profile-summary-cutoff-hot=500000",
                ][..],
            ),
            ("preinline", &["--profile-summary-cutoff-cold=200000"][..]),
            (
                "hot.count.wins",
                &[
                    "--profile-summary-cutoff-hot=10000",
                    "--profile-summary-hot-count=1",
                ][..],
            ),
        ] {
            let with = input.same_profile(
                &format!("cutoff.{stem}"),
                &[&["--format=text"], flags].concat(),
            );
            cutoff_changed |= with != default;
        }
    }
    assert!(
        merged_changed,
        "{} changed no profile",
        "--generate-merged-base-profiles"
    );
    assert!(cutoff_changed, "no summary cutoff changed a profile");

    let too_large = daemon::parse_args(
        [
            "pgo-agent",
            "convert",
            "--perfscript=x",
            "--binary=y",
            "--profile-summary-cutoff-hot=1000000",
        ]
        .map(String::from)
        .to_vec(),
    )
    .expect_err("a cutoff above 999999 is refused");
    let message = too_large.to_string();
    assert!(
        message.contains("--profile-summary-cutoff-hot") && message.contains("999999"),
        "{message}"
    );
}

/// `--profile-summary-contextless` (LLVM's): the summary an extbinary flat CS profile
/// carries merges each function's contexts (the default for CS) or, with `=false`, counts
/// each context on its own; `llvm-profdata show --detailed-summary` of both tools' files
/// are the same.
#[test]
fn summary_contextless_matches_llvm_profgen() {
    let _machine = e2e::support::machine_share();
    if !corpus::tools_available("profile-summary-contextless", TOOLS) {
        return;
    }
    let flat_cs = ["--csspgo-preinliner=false", "--gen-cs-nested-profile=false"];
    let mut changed = false;
    for (name, variant) in [
        ("recursion", Variant::Probe),
        ("inline_tail", Variant::Lines),
    ] {
        let input = Input::record(name, variant, "summary_contextless");
        let mut summaries = Vec::new();
        for value in ["true", "false"] {
            let flag = format!("--profile-summary-contextless={value}");
            let (theirs, ours) = input.run_both(
                &format!("contextless.{value}"),
                &[&flat_cs[..], &[&flag]].concat(),
            );
            let summary =
                |p: &Path| profdata_stdout(&["show", "--sample", "--detailed-summary"], p);
            let theirs = summary(&theirs);
            assert!(theirs.contains("Detailed summary"), "{theirs}");
            assert_same(
                &format!("{} {flag}: detailed summary", input.what),
                &summary(&ours),
                &theirs,
            );
            summaries.push(theirs);
        }
        changed |= summaries[0] != summaries[1];
    }
    assert!(
        changed,
        "--profile-summary-contextless=false changed no summary"
    );
}
