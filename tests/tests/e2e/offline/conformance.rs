//! The conformance suite: `pgo-agent convert` against llvm-profgen 19, end to end.
//!
//! Every corpus program (tests/programs/), both builds (pseudo probes, line tables), is
//! recorded once with the software LBR recorder. Then, for the context-sensitive path
//! (hybrid samples) and the LBR-only path (`--ignore-stack-samples`):
//!
//! * unsymbolized counters: `llvm-profgen-19 --perfscript S --skip-symbolization` and
//!   `pgo-agent convert --perfscript S --skip-symbolization` are byte-identical (both
//!   sort their output), and so is `pgo-agent convert --perfdata D --no-stack-repair` on
//!   the recorder's perf.data (no `perf` binary involved; the recorder's samples carry
//!   user registers, whose prologue/epilogue repair `--no-stack-repair` turns off);
//! * text profiles: `--format=text --csspgo-preinliner=false --gen-cs-nested-profile=false`
//!   from both tools are identical after `llvm-profdata-19 merge --sample --text`;
//! * default flags (CS pre-inliner, nested profile): `--format=text` with no other flag
//!   from both tools is identical after the same canonicalisation, our default extbinary
//!   reads back (`llvm-profdata-19`) to the same canonical text, and its sections carry the
//!   same flags as llvm-profgen's (`preInlined` on the summary, `attr` on the metadata).
//!
//! Each check runs the real command line (`daemon::parse_args` + `daemon::execute`), the
//! same code path as the `pgo-agent` binary.

use std::path::{Path, PathBuf};
use std::process::Command;

use e2e::corpus::{self, Variant};
use e2e::support::{
    assert_same, canonical_profile as canonical, llvm, pgo_agent, read_text, run_ok, section_flags,
};

const TOOLS: &[&str] = &["clang-19", "llvm-profgen-19", "llvm-profdata-19"];

fn out_dir(name: &str, variant: Variant) -> PathBuf {
    e2e::support::scratch_dir("conformance", &format!("{name}-{variant}"))
}

/// The whole conformance check of one corpus program and build.
fn conformance(name: &str, variant: Variant) {
    if !corpus::tools_available("conformance", TOOLS) {
        return;
    }
    let program = corpus::program(name, variant).expect("corpus builds");
    let rec = corpus::record(&program).expect("recorder runs");
    let dir = out_dir(name, variant);
    let binary = program.binary.to_str().unwrap();
    let script = rec.perf_script.to_str().unwrap();
    let data = rec.perf_data.to_str().unwrap();

    for (mode, extra) in [("cs", None), ("flat", Some("--ignore-stack-samples"))] {
        let with = |args: &[&str]| -> Vec<String> {
            let mut v: Vec<String> = args.iter().map(|s| s.to_string()).collect();
            v.extend(extra.map(str::to_string));
            v
        };
        let path = |stem: &str| dir.join(format!("{stem}.{mode}"));
        let (theirs_raw, ours_raw, ours_data_raw) = (
            path("llvm.raw"),
            path("ours.raw"),
            path("ours-perfdata.raw"),
        );
        let (theirs_txt, ours_txt) = (path("llvm.txt"), path("ours.txt"));
        let s = |p: &PathBuf| p.to_str().unwrap().to_string();

        let argv = with(&["--perfscript", script, "--binary", binary]);
        let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
        let raw_args = ["--skip-symbolization", "--output"];
        llvm(
            "llvm-profgen-19",
            &[&argv[..], &raw_args, &[&s(&theirs_raw)]].concat(),
        );
        pgo_agent(&[&["convert"], &argv[..], &raw_args, &[&s(&ours_raw)]].concat());
        assert_same(
            &format!("{name} ({variant}, {mode}) unsymbolized counters from perf script"),
            &read_text(&ours_raw),
            &read_text(&theirs_raw),
        );

        let data_argv = with(&["--perfdata", data, "--binary", binary, "--no-stack-repair"]);
        let data_argv: Vec<&str> = data_argv.iter().map(String::as_str).collect();
        pgo_agent(
            &[
                &["convert"],
                &data_argv[..],
                &raw_args,
                &[&s(&ours_data_raw)],
            ]
            .concat(),
        );
        assert_same(
            &format!("{name} ({variant}, {mode}) unsymbolized counters from perf.data"),
            &read_text(&ours_data_raw),
            &read_text(&theirs_raw),
        );

        let text_args = [
            "--format=text",
            "--csspgo-preinliner=false",
            "--gen-cs-nested-profile=false",
            "--output",
        ];
        llvm(
            "llvm-profgen-19",
            &[&argv[..], &text_args, &[&s(&theirs_txt)]].concat(),
        );
        pgo_agent(&[&["convert"], &argv[..], &text_args, &[&s(&ours_txt)]].concat());
        let theirs = canonical(&theirs_txt);
        assert!(
            !theirs.trim().is_empty(),
            "{name} ({variant}, {mode}): llvm-profgen-19 wrote an empty profile"
        );
        assert_same(
            &format!("{name} ({variant}, {mode}) text profile (llvm-profdata canonical)"),
            &canonical(&ours_txt),
            &theirs,
        );
        if (name, variant, mode) == ("inlined_calls", Variant::Lines, "flat") {
            // The case the program exists for is in the compared profile: an inlinee's
            // call line whose count is below its call targets' sum (left so by LLVM 19).
            let lines = inlinee_calls_below_their_targets(&theirs);
            assert!(!lines.is_empty(), "no such call line in:\n{theirs}");
        }

        // llvm-profgen's default flags: pre-inliner and nested profile for CS.
        let (theirs_def, ours_def) = (path("llvm.default.txt"), path("ours.default.txt"));
        let (theirs_ext, ours_ext) = (path("llvm.default.extbin"), path("ours.default.extbin"));
        let text_default = ["--format=text", "--output"];
        llvm(
            "llvm-profgen-19",
            &[&argv[..], &text_default, &[&s(&theirs_def)]].concat(),
        );
        pgo_agent(&[&["convert"], &argv[..], &text_default, &[&s(&ours_def)]].concat());
        let theirs = canonical(&theirs_def);
        assert_same(
            &format!("{name} ({variant}, {mode}) default-flags text profile"),
            &canonical(&ours_def),
            &theirs,
        );
        llvm(
            "llvm-profgen-19",
            &[&argv[..], &["--output"], &[&s(&theirs_ext)]].concat(),
        );
        pgo_agent(&[&["convert"], &argv[..], &["--output"], &[&s(&ours_ext)]].concat());
        assert_same(
            &format!("{name} ({variant}, {mode}) default-flags extbinary, read back"),
            &canonical(&ours_ext),
            &theirs,
        );
        assert_same(
            &format!("{name} ({variant}, {mode}) default-flags extbinary section flags"),
            &section_flags(&ours_ext),
            &section_flags(&theirs_ext),
        );
    }
}

/// The body lines of inlined callees (indented two spaces or more) in a canonical text
/// profile, `N: count target:n ...`, whose count is below the sum of their call targets.
fn inlinee_calls_below_their_targets(profile: &str) -> Vec<String> {
    profile
        .lines()
        .filter(|l| l.starts_with("  ") && !l.trim_start().starts_with('!'))
        .filter(|l| {
            let mut words = l.split_whitespace();
            let _location = words.next();
            let Some(Ok(count)) = words.next().map(str::parse::<u64>) else {
                return false;
            };
            let targets: Vec<u64> = words
                .filter_map(|w| w.rsplit_once(':').and_then(|(_, n)| n.parse().ok()))
                .collect();
            !targets.is_empty() && count < targets.iter().sum::<u64>()
        })
        .map(str::to_string)
        .collect()
}

/// The llvm-profgen 19 flags that shape contexts and totals, one at a time, on programs
/// with recursion and inlined tail calls, probe and line builds, CS and flat: the
/// unsymbolized counters are byte-identical and the text profiles (llvm-profdata canonical)
/// equal llvm-profgen 19's with the same flag.
#[test]
fn context_and_total_flags_match_llvm_profgen() {
    let _machine = e2e::support::machine_share();
    if !corpus::tools_available("conformance flags", TOOLS) {
        return;
    }
    let flags: &[&[&str]] = &[
        &["--compress-recursion=0"],
        &["--compress-recursion=1"],
        &["--csprof-max-context-depth=2"],
        &["--update-total-samples"],
        &["--update-total-samples=true", "--ignore-stack-samples"],
        &["--infer-missing-frames=false"],
    ];
    for (name, variant) in [
        ("recursion", Variant::Probe),
        ("recursion", Variant::Lines),
        ("inline_tail", Variant::Probe),
    ] {
        let program = corpus::program(name, variant).expect("corpus builds");
        let rec = corpus::record(&program).expect("recorder runs");
        let dir = out_dir(&format!("{name}-flags"), variant);
        let input = [
            "--perfscript",
            rec.perf_script.to_str().unwrap(),
            "--binary",
            program.binary.to_str().unwrap(),
        ];
        for (i, flag) in flags.iter().enumerate() {
            let what = format!("{name} ({variant}) {}", flag.join(" "));
            let out = |stem: &str| {
                dir.join(format!("{stem}.{i}"))
                    .to_str()
                    .unwrap()
                    .to_string()
            };
            let (theirs_raw, ours_raw) = (out("llvm.raw"), out("ours.raw"));
            let raw = ["--skip-symbolization", "--output"];
            llvm(
                "llvm-profgen-19",
                &[&input[..], flag, &raw, &[&theirs_raw]].concat(),
            );
            pgo_agent(&[&["convert"], &input[..], flag, &raw, &[&ours_raw]].concat());
            assert_same(
                &format!("{what}: unsymbolized counters"),
                &read_text(Path::new(&ours_raw)),
                &read_text(Path::new(&theirs_raw)),
            );
            let shapes: &[(&str, &[&str])] = if flag[0] == "--compress-recursion=0" {
                // Refused with the pre-inliner (see `convert --help`).
                &[(
                    "flat CS",
                    &["--csspgo-preinliner=false", "--gen-cs-nested-profile=false"],
                )]
            } else {
                &[
                    (
                        "flat CS",
                        &["--csspgo-preinliner=false", "--gen-cs-nested-profile=false"],
                    ),
                    ("default", &[]),
                ]
            };
            for &(kind, shape) in shapes {
                let (theirs, ours) = (out(&format!("llvm.{kind}")), out(&format!("ours.{kind}")));
                let text = ["--format=text", "--output"];
                llvm(
                    "llvm-profgen-19",
                    &[&input[..], flag, shape, &text, &[&theirs]].concat(),
                );
                pgo_agent(&[&["convert"], &input[..], flag, shape, &text, &[&ours]].concat());
                let theirs = canonical(Path::new(&theirs));
                assert!(!theirs.trim().is_empty(), "{what} ({kind}): empty profile");
                assert_same(
                    &format!("{what} ({kind}): text profile"),
                    &canonical(Path::new(&ours)),
                    &theirs,
                );
            }
        }
    }
}

/// `perf script -F ip,brstack` of LBR-only samples (a leading IP, then the branch stack on
/// one line) made from a hybrid perf script: each sample's leaf stack line is its IP.
fn leading_ip_script(hybrid: &Path, out: &Path) {
    let mut text = String::new();
    let mut leaf: Option<&str> = None;
    let hybrid = read_text(hybrid);
    for line in hybrid.lines() {
        if line.contains("PERF_RECORD_MMAP") {
            text.push_str(line);
            text.push('\n');
        } else if line.starts_with(" 0x") {
            if let Some(ip) = leaf.take() {
                text.push_str(&format!("{ip:>16} {}\n", line.trim_start()));
            }
        } else if line.trim().is_empty() {
            leaf = None;
        } else if leaf.is_none() {
            leaf = Some(line.trim());
        }
    }
    assert!(text.lines().count() > 10, "{}", out.display());
    std::fs::write(out, text).unwrap();
}

/// The LBR-only script `ip_script` with an event name before each sample, as `perf script
/// -F event,ip,brstack` prints it: `cycles:` and `branches:u:` in turn (so that a filter
/// on either keeps some samples and drops others).
fn event_script(ip_script: &Path, out: &Path) {
    let mut text = String::new();
    for (i, line) in read_text(ip_script).lines().enumerate() {
        if line.contains("PERF_RECORD_MMAP") {
            text.push_str(line);
        } else if i % 2 == 0 {
            text.push_str(&format!("          cycles: {line}"));
        } else {
            text.push_str(&format!("branches:u: {line}"));
        }
        text.push('\n');
    }
    std::fs::write(out, text).unwrap();
}

/// What [`input_and_output_flags_match_llvm_profgen`] compares: the unsymbolized counters,
/// the text profile (canonical), the extbinary profile's symbol list and section flags, the
/// `Mmap:` lines, the warnings (sorted: llvm-profgen prints invalid ranges in its hash
/// map's order).
#[derive(Clone, Copy, PartialEq)]
enum Check {
    Raw,
    Text,
    SymbolList,
    MmapLines,
    Warnings,
}

/// The llvm-profgen 19 flags that change what is read or written, one at a time, on probe
/// and line builds, CS and flat: unsymbolized counters byte-identical, text profiles
/// (llvm-profdata canonical) equal, the profile symbol list equal, and the reports on
/// stdout/stderr (`--show-mmap-events`, `--show-detailed-warning`) the same lines.
#[test]
fn input_and_output_flags_match_llvm_profgen() {
    let _machine = e2e::support::machine_share();
    if !corpus::tools_available("conformance input/output flags", TOOLS) {
        return;
    }
    use Check::*;
    // (input: hybrid `S`, leading-IP `L` or leading-IP with event names `E`, flags, check)
    let cases: &[(char, &[&str], Check)] = &[
        ('L', &["--leading-ip-only"], Raw),
        ('L', &["--leading-ip-only"], Text),
        (
            'L',
            &["--leading-ip-only=true", "--fill-zero-for-all-funcs"],
            Text,
        ),
        ('S', &["--leading-ip-only"], Text),
        ('S', &["--leading-ip-only", "--ignore-stack-samples"], Raw),
        (
            'S',
            &[
                "--leading-ip-only",
                "--csspgo-preinliner=false",
                "--gen-cs-nested-profile=false",
            ],
            Text,
        ),
        ('L', &[], Text),
        ('L', &["--fill-zero-for-all-funcs"], Text),
        (
            'S',
            &["--fill-zero-for-all-funcs", "--ignore-stack-samples"],
            Text,
        ),
        ('S', &["--use-first-loadable-segment-as-base"], Raw),
        ('L', &["-use-first-loadable-segment-as-base=1"], Raw),
        ('S', &["--populate-profile-symbol-list"], SymbolList),
        ('L', &["--populate-profile-symbol-list=true"], SymbolList),
        ('S', &["--show-mmap-events"], MmapLines),
        ('S', &["--show-detailed-warning"], Warnings),
        (
            'S',
            &["--show-detailed-warning", "--ignore-stack-samples"],
            Warnings,
        ),
        (
            'L',
            &["--show-detailed-warning", "--leading-ip-only"],
            Warnings,
        ),
        ('L', &["--sample-period=7"], Raw),
        ('L', &["--sample-period", "7", "--leading-ip-only"], Raw),
        ('L', &["-sample-period=7"], Text),
        ('S', &["--sample-period=7", "--ignore-stack-samples"], Raw),
        ('E', &[], Raw),
        ('E', &[], Warnings),
        ('E', &["--perf-event=cycles"], Raw),
        ('E', &["--perf-event=cycles"], Warnings),
        ('E', &["--perf-events=branches:u,other"], Text),
        (
            'E',
            &[
                "--perf-event=branches:u",
                "--perf-event",
                "cycles",
                "--sample-period=3",
            ],
            Raw,
        ),
        ('E', &["--perf-event=nope"], Raw),
        ('L', &["--perf-event=cycles"], Warnings),
    ];
    let (mut checked, mut detailed_warnings) = (0, 0);
    for (name, variant) in [
        ("recursion", Variant::Probe),
        ("recursion", Variant::Lines),
        ("inline_tail", Variant::Lines),
        // Not a PIE: its first loadable segment is not its first executable one.
        ("loop_count", Variant::Lines),
        ("loop_count", Variant::Probe),
    ] {
        let program = corpus::program(name, variant).expect("corpus builds");
        let rec = corpus::record(&program).expect("recorder runs");
        let dir = out_dir(&format!("{name}-io-flags"), variant);
        let ip_script = dir.join("leading-ip.perfscript");
        leading_ip_script(&rec.perf_script, &ip_script);
        let event_script_path = dir.join("events.perfscript");
        event_script(&ip_script, &event_script_path);
        for (i, &(input, flags, check)) in cases.iter().enumerate() {
            let what = format!("{name} ({variant}) {input} {}", flags.join(" "));
            let script = match input {
                'L' => &ip_script,
                'E' => &event_script_path,
                _ => &rec.perf_script,
            };
            let mut args = vec![
                format!("--perfscript={}", script.display()),
                format!("--binary={}", program.binary.display()),
            ];
            args.extend(flags.iter().map(|f| f.to_string()));
            match check {
                Raw => args.push("--skip-symbolization".into()),
                Text => args.push("--format=text".into()),
                _ => {}
            }
            let (theirs_out, ours_out) =
                (dir.join(format!("llvm.{i}")), dir.join(format!("ours.{i}")));
            let theirs = Command::new("llvm-profgen-19")
                .args(&args)
                .arg(format!("--output={}", theirs_out.display()))
                .output()
                .expect("llvm-profgen-19");
            assert!(theirs.status.success(), "{what}: {theirs:?}");
            let mut ours_args = vec!["convert".to_string()];
            ours_args.extend(args.iter().cloned());
            ours_args.push(format!("--output={}", ours_out.display()));
            let (code, ours) = e2e::support::cli_in_child(&ours_args);
            assert_eq!(code, Some(0), "{what}: {ours}");
            detailed_warnings +=
                compare_io_outputs(check, &what, (&ours_out, &ours), (&theirs_out, &theirs));
            checked += 1;
        }
    }
    assert_eq!(checked, 5 * cases.len());
    assert!(detailed_warnings > 0, "no per-range warning compared");
}

/// Compares one case's outputs as `check` says: (our output file, our stdout + stderr) with
/// (llvm-profgen's output file, its process output). The number of per-range warnings
/// compared.
fn compare_io_outputs(
    check: Check,
    what: &str,
    (ours_out, ours): (&Path, &str),
    (theirs_out, theirs): (&Path, &std::process::Output),
) -> usize {
    use Check::*;
    match check {
        Raw => assert_same(
            &format!("{what}: unsymbolized counters"),
            &read_text(ours_out),
            &read_text(theirs_out),
        ),
        Text => {
            let theirs = canonical(theirs_out);
            assert!(!theirs.trim().is_empty(), "{what}: empty profile");
            assert_same(
                &format!("{what}: text profile"),
                &canonical(ours_out),
                &theirs,
            );
        }
        SymbolList => {
            let theirs = symbol_list(theirs_out);
            assert!(theirs.contains("\nmain\n"), "{what}: {theirs}");
            assert_same(
                &format!("{what}: symbol list"),
                &symbol_list(ours_out),
                &theirs,
            );
            assert_same(
                &format!("{what}: section flags"),
                &section_flags(ours_out),
                &section_flags(theirs_out),
            );
            assert_same(
                &format!("{what}: profile"),
                &canonical(ours_out),
                &canonical(theirs_out),
            );
        }
        MmapLines => {
            let lines = |text: &str| -> Vec<String> {
                text.lines()
                    .filter_map(|l| l.find("Mmap: Binary").map(|i| l[i..].to_string()))
                    .collect()
            };
            let want = lines(&String::from_utf8_lossy(&theirs.stdout));
            assert!(want.len() >= 2, "{what}: {want:?}");
            assert_eq!(lines(ours), want, "{what}");
        }
        Warnings => {
            let lines = |text: &str| -> Vec<String> {
                let mut v: Vec<String> = text
                    .lines()
                    .filter_map(|l| l.find("warning: ").map(|i| l[i..].to_string()))
                    .collect();
                v.sort();
                v
            };
            let want = lines(&String::from_utf8_lossy(&theirs.stderr));
            let detailed = want.iter().filter(|l| l.contains("Range ")).count();
            let ours = e2e::support::warnings_as_llvm_profgen_19(ours);
            assert_eq!(lines(&ours), want, "{what}");
            return detailed;
        }
    }
    0
}

/// `llvm-profdata-19 show --sample --show-prof-sym-list`: the profile symbol list part.
fn symbol_list(profile: &Path) -> String {
    let text = run_ok(
        Command::new("llvm-profdata-19")
            .args(["show", "--sample", "--show-prof-sym-list"])
            .arg(profile),
    );
    let at = text
        .find("profile symbol list")
        .unwrap_or_else(|| panic!("{}: no symbol list in\n{text}", profile.display()));
    text[at..].to_string()
}

/// The density report (`--show-density` on stdout, the "Sample PGO is estimated to
/// optimize better with N× more samples" warning) equals llvm-profgen 19's on every corpus
/// program and build, CS (nested and flat) and flat, with default and other thresholds.
#[test]
fn density_report_matches_llvm_profgen() {
    let _machine = e2e::support::machine_share();
    if !corpus::tools_available("density report", TOOLS) {
        return;
    }
    // (The child's first line follows libtest's "test cli_process ... ".)
    let report = |text: &str| -> Vec<String> {
        text.lines()
            .filter_map(|l| {
                [
                    "Functions with density",
                    "warning: Sample PGO",
                    "warning: The output",
                ]
                .iter()
                .find_map(|m| l.find(m).map(|i| l[i..].to_string()))
            })
            .collect()
    };
    let flag_sets: &[&[&str]] = &[
        &[],
        &["--ignore-stack-samples"],
        &["--csspgo-preinliner=false", "--gen-cs-nested-profile=false"],
        &[
            "--profile-density-threshold=2000",
            "--profile-density-cutoff-hot=500000",
        ],
    ];
    let mut checked = 0;
    for variant in Variant::ALL {
        for name in corpus::PROGRAM_NAMES {
            let program = corpus::program(name, variant).expect("corpus builds");
            let rec = corpus::record(&program).expect("recorder runs");
            let dir = out_dir(&format!("{name}-density"), variant);
            for (i, flags) in flag_sets.iter().enumerate() {
                let mut args: Vec<String> = vec![
                    format!("--perfscript={}", rec.perf_script.display()),
                    format!("--binary={}", program.binary.display()),
                    "--show-density".into(),
                ];
                args.extend(flags.iter().map(|f| f.to_string()));
                let theirs = Command::new("llvm-profgen-19")
                    .args(&args)
                    .arg(format!(
                        "--output={}",
                        dir.join(format!("llvm.{i}")).display()
                    ))
                    .output()
                    .expect("llvm-profgen-19");
                assert!(theirs.status.success());
                let theirs = format!(
                    "{}{}",
                    String::from_utf8_lossy(&theirs.stdout),
                    String::from_utf8_lossy(&theirs.stderr)
                );
                let mut ours_args = vec!["convert".to_string()];
                ours_args.extend(args.iter().cloned());
                ours_args.push(format!(
                    "--output={}",
                    dir.join(format!("ours.{i}")).display()
                ));
                let (code, ours) = e2e::support::cli_in_child(&ours_args);
                assert_eq!(code, Some(0), "{ours}");
                let want = report(&theirs);
                assert!(!want.is_empty(), "{name} ({variant}) {flags:?}: {theirs}");
                assert_eq!(report(&ours), want, "{name} ({variant}) {flags:?}: {ours}");
                checked += 1;
            }
        }
    }
    assert_eq!(checked, 2 * corpus::PROGRAM_NAMES.len() * flag_sets.len());
}

e2e::corpus_tests!(conformance; loop_count, recursion, inline_tail, inlined_calls,
    virtual_calls, interp, unroll, shlib_user);

/// The shared Skylake LBR recording (tests/fixtures/propeller_sample_1): its perf.data, its
/// binary and an output directory `out`; `None` (after a SKIPPED message) without perf or
/// llvm-profgen-19.
fn skylake_recording(out: &str) -> Option<(PathBuf, PathBuf, PathBuf)> {
    if !corpus::tools_available("skylake", &["perf", "llvm-profgen-19"]) {
        return None;
    }
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/propeller_sample_1");
    Some((
        fixture.join("perf.data"),
        fixture.join("propeller_sample_1.bin.gen"),
        out_dir(out, Variant::Lines),
    ))
}

/// The real Intel Skylake LBR recording (tests/fixtures/propeller_sample_1): read as
/// perf.data directly, our unsymbolized counters equal llvm-profgen-19's from `perf script`
/// of the same file.
#[test]
fn skylake_perf_data_matches_llvm_profgen_on_perf_script() {
    let _machine = e2e::support::machine_share();
    let Some((data, binary, dir)) = skylake_recording("propeller_sample_1") else {
        return;
    };
    let script = dir.join("perf.script");
    let out = Command::new("perf")
        .args(["script", "-F", "ip,brstack", "--show-mmap-events", "-i"])
        .arg(&data)
        .output()
        .expect("perf");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::write(&script, &out.stdout).unwrap();
    let theirs = dir.join("llvm.raw");
    let ours = dir.join("ours.raw");
    let (b, s, d) = (
        binary.to_str().unwrap(),
        script.to_str().unwrap(),
        data.to_str().unwrap(),
    );
    llvm(
        "llvm-profgen-19",
        &[
            "--perfscript",
            s,
            "--binary",
            b,
            "--skip-symbolization",
            "--output",
            theirs.to_str().unwrap(),
        ],
    );
    pgo_agent(&[
        "convert",
        "--perfdata",
        d,
        "--binary",
        b,
        "--skip-symbolization",
        "--output",
        ours.to_str().unwrap(),
    ]);
    let theirs = read_text(&theirs);
    // 14 ranges and 13 branches of the program's hot loop (llvm-profgen-19, perf 6.1).
    assert!(
        theirs.lines().count() > 20,
        "llvm-profgen found too few counters:\n{theirs}"
    );
    assert_same(
        "propeller_sample_1 unsymbolized counters",
        &read_text(&ours),
        &theirs,
    );
}

/// `--perf-event` on perf.data input (the Skylake recording, LBR-only, one event
/// `cycles:u`): the samples of the named event kept, none of another, both equal to
/// llvm-profgen-19 `--perfdata` with the same filter (it filters `perf script -F
/// event,ip,brstack` lines by name); refused for samples with call stacks, whose lines
/// carry no event name in llvm-profgen's reading.
#[test]
fn perf_event_filter_on_perf_data_matches_llvm_profgen() {
    let _machine = e2e::support::machine_share();
    let Some((data, binary, dir)) = skylake_recording("propeller_sample_1-perf-event") else {
        return;
    };
    let (b, d) = (binary.to_str().unwrap(), data.to_str().unwrap());
    let mut kept = String::new();
    for filter in ["cycles:u", "nope"] {
        let flag = format!("--perf-event={filter}");
        let (theirs, ours) = (
            dir.join(format!("llvm.{filter}.raw")),
            dir.join(format!("ours.{filter}.raw")),
        );
        let args = |out: &Path| {
            [
                "--perfdata",
                d,
                "--binary",
                b,
                "--skip-symbolization",
                &flag,
                "--output",
                out.to_str().unwrap(),
            ]
            .map(str::to_string)
            .to_vec()
        };
        let theirs_args = args(&theirs);
        llvm(
            "llvm-profgen-19",
            &theirs_args.iter().map(String::as_str).collect::<Vec<_>>(),
        );
        let mut ours_args = vec!["convert".to_string()];
        ours_args.extend(args(&ours));
        pgo_agent(&ours_args.iter().map(String::as_str).collect::<Vec<_>>());
        let text = read_text(&ours);
        assert_same(
            &format!("propeller_sample_1 --perf-event={filter} from perf.data"),
            &text,
            &read_text(&theirs),
        );
        if filter == "nope" {
            assert_eq!(text, "0\n0\n");
        } else {
            kept = text;
        }
    }
    assert!(kept.lines().count() > 20, "{kept}");
    // A recording with call stacks is refused, naming the input.
    let program = corpus::program("loop_count", Variant::Probe).expect("corpus builds");
    let rec = corpus::record(&program).expect("recorder runs");
    let argv: Vec<String> = [
        "pgo-agent",
        "convert",
        "--perfdata",
        rec.perf_data.to_str().unwrap(),
        "--binary",
        program.binary.to_str().unwrap(),
        "--perf-event=br_inst_retired.near_taken:uppp",
        "--output",
        dir.join("refused.raw").to_str().unwrap(),
    ]
    .map(str::to_string)
    .to_vec();
    let err = daemon::execute(daemon::parse_args(argv).unwrap()).unwrap_err();
    let msg = format!("{err:#}");
    assert!(
        msg.contains("--perf-event filters LBR-only samples") && msg.contains(".data"),
        "{msg}"
    );
}

/// The stdout of `pgo-agent ARGS` run as a child (libtest's own lines before the command's
/// output cut off), with its exit code.
fn stdout_of_child(args: &[String]) -> (Option<i32>, String) {
    let out = e2e::support::cli_child_command(args).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let marker = "test cli_process ... ";
    let at = text.find(marker).map_or(0, |i| i + marker.len());
    (out.status.code(), text[at..].to_string())
}

/// llvm-profgen 19's listing of `binary` with `flags` (exit code, stdout).
fn llvm_listing(binary: &Path, out: &Path, flags: &[&str]) -> (Option<i32>, String) {
    let o = Command::new("llvm-profgen-19")
        .arg(format!("--binary={}", binary.display()))
        .arg(format!("--output={}", out.display()))
        .args(flags)
        .output()
        .expect("llvm-profgen-19");
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
    )
}

/// `pgo-agent convert`'s listing of `binary` with `flags` (exit code, stdout).
fn our_listing(binary: &Path, out: &Path, flags: &[&str]) -> (Option<i32>, String) {
    let mut args = vec![
        "convert".to_string(),
        format!("--binary={}", binary.display()),
        format!("--output={}", out.display()),
    ];
    args.extend(flags.iter().map(|f| f.to_string()));
    stdout_of_child(&args)
}

/// `    ADDR:TEXT` instruction lines: (address column with its colon, the rest).
fn instruction_line(line: &str) -> Option<(&str, &str)> {
    let colon = line.find(":\t")?;
    let addr = &line[..colon];
    (addr.len() >= 8 && addr.trim_start().chars().all(|c| c.is_ascii_hexdigit()))
        .then(|| (&line[..=colon], &line[colon + 1..]))
}

/// Splits a listing line with a source location into (instruction text, location), given
/// the same line of the listing without locations: llvm-profgen pads the instruction text
/// (tabs counted as one column) to 40 columns, no padding when it is longer.
fn split_location<'a>(with: &'a str, without: &str, what: &str) -> (String, &'a str) {
    let (_, text) = instruction_line(without).unwrap_or_else(|| panic!("{what}: {without:?}"));
    let prefix_len = without.len();
    assert!(
        with.starts_with(without),
        "{what}: {with:?} does not extend {without:?}"
    );
    let pad = 40usize.saturating_sub(text.chars().count());
    let rest = &with[prefix_len..];
    assert!(
        rest.len() >= pad && rest[..pad].bytes().all(|b| b == b' '),
        "{what}: padding of {with:?}"
    );
    (text.to_string(), &rest[pad..])
}

/// Compares our listing with llvm-profgen 19's: the same lines in the same order; every
/// line that is not an instruction (probe-description block, file, section and symbol
/// headers, `[Probe]:` lines, blank lines) byte-identical; on instruction lines the address
/// column and the mnemonic (first word of the instruction text) identical. The operands are
/// not compared here (iced-x86's AT&T spelling may differ from LLVM MC's); the number of
/// instruction texts that differ is returned.
fn compare_listing(ours: &str, theirs: &str, what: &str) -> usize {
    let ours: Vec<&str> = ours.lines().collect();
    let theirs: Vec<&str> = theirs.lines().collect();
    assert_eq!(ours.len(), theirs.len(), "{what}: line count");
    let mut text_differs = 0;
    for (i, (o, t)) in ours.iter().zip(&theirs).enumerate() {
        match (instruction_line(o), instruction_line(t)) {
            (Some((oa, ot)), Some((ta, tt))) => {
                assert_eq!(oa, ta, "{what}: line {}", i + 1);
                let mnemonic = |s: &str| s.split(['\t', ' ']).nth(1).map(str::to_string);
                assert_eq!(
                    mnemonic(ot),
                    mnemonic(tt),
                    "{what}: line {}: {o:?} vs {t:?}",
                    i + 1
                );
                if ot.trim_end() != tt.trim_end() {
                    text_differs += 1;
                }
            }
            _ => assert_eq!(o, t, "{what}: line {}", i + 1),
        }
    }
    text_differs
}

/// `--show-disassembly-only` and its companions print llvm-profgen 19's listing on every
/// corpus program of both builds: see [`compare_listing`] for what is compared; the source
/// locations (`--show-source-locations`, with and without `--show-pseudo-probe` and
/// `--show-canonical-fname`) are compared exactly, cut off at llvm-profgen's 40-column
/// padding, which is checked on both sides. `--disassemble-functions` restricts both
/// listings to the same symbols; naming no known function lists headers only and exits
/// 0, as llvm-profgen 19 does. No profile is written.
#[test]
fn disassembly_listing_matches_llvm_profgen() {
    let _machine = e2e::support::machine_share();
    if !corpus::tools_available("disassembly listing", TOOLS) {
        return;
    }
    let mut instructions = 0usize;
    let mut text_differs = 0usize;
    let mut probe_lines = 0usize;
    for variant in Variant::ALL {
        for name in corpus::PROGRAM_NAMES {
            let program = corpus::program(name, variant).expect("corpus builds");
            let dir = out_dir(&format!("{name}-listing"), variant);
            let bin = &program.binary;
            let (their_out, our_out) = (dir.join("llvm.prof"), dir.join("ours.prof"));
            for extra in [
                &["--show-pseudo-probe"][..],
                &[],
                &["--show-canonical-fname"],
                &["--show-pseudo-probe", "--show-canonical-fname"],
            ] {
                let what = format!("{name} ({variant}) {extra:?}");
                let mut plain = vec!["--show-disassembly-only"];
                plain.extend_from_slice(extra);
                let mut located = plain.clone();
                located.push("--show-source-locations");
                let (tc, theirs) = llvm_listing(bin, &their_out, &plain);
                let (oc, ours) = our_listing(bin, &our_out, &plain);
                assert_eq!((oc, tc), (Some(0), Some(0)), "{what}");
                text_differs += compare_listing(&ours, &theirs, &what);
                let (_, theirs_loc) = llvm_listing(bin, &their_out, &located);
                let (oc, ours_loc) = our_listing(bin, &our_out, &located);
                assert_eq!(oc, Some(0), "{what}");
                compare_listing(&ours_loc, &theirs_loc, &what);
                let pairs = ours
                    .lines()
                    .zip(ours_loc.lines())
                    .zip(theirs.lines().zip(theirs_loc.lines()));
                for ((o, o_loc), (t, t_loc)) in pairs {
                    if instruction_line(t).is_none() {
                        probe_lines += usize::from(t.starts_with(" [Probe]:"));
                        continue;
                    }
                    instructions += 1;
                    let (_, ours_at) = split_location(o_loc, o, &what);
                    let (_, theirs_at) = split_location(t_loc, t, &what);
                    assert_eq!(ours_at, theirs_at, "{what}: location of {t:?}");
                }
                assert!(
                    !their_out.exists() && !our_out.exists(),
                    "{what}: a profile was written"
                );
            }
            // Only the named functions; an unknown name is ignored.
            let only = [
                "--show-disassembly-only",
                "--show-pseudo-probe",
                "--show-source-locations",
                "--disassemble-functions=main,no_such_function",
            ];
            let (_, theirs) = llvm_listing(bin, &their_out, &only);
            let (oc, ours) = our_listing(bin, &our_out, &only);
            assert_eq!(oc, Some(0));
            let headers = |s: &str| -> Vec<String> {
                s.lines()
                    .filter(|l| l.starts_with('<'))
                    .map(str::to_string)
                    .collect()
            };
            assert_eq!(
                headers(&theirs),
                vec!["<main>:".to_string()],
                "{name} ({variant})"
            );
            assert_eq!(headers(&ours), headers(&theirs), "{name} ({variant})");
            compare_listing(&ours, &theirs, &format!("{name} ({variant}) main only"));
            // Nothing known: headers of the file and sections only, exit 0.
            let none = [
                "--show-disassembly-only",
                "--disassemble-functions=no_such_function",
            ];
            let (tc, theirs) = llvm_listing(bin, &their_out, &none);
            let (oc, ours) = our_listing(bin, &our_out, &none);
            assert_eq!((oc, tc), (Some(0), Some(0)));
            assert!(headers(&theirs).is_empty() && theirs.contains("Disassembly of section .text"));
            assert_eq!(ours, theirs, "{name} ({variant}) unknown function");
        }
    }
    eprintln!(
        "listing: {instructions} instruction lines with locations compared, {probe_lines} probe \
         lines, {text_differs} instruction texts spelled differently from LLVM MC"
    );
    assert!(
        instructions > 1000 && probe_lines > 100,
        "{instructions} {probe_lines}"
    );
}

/// `--show-pseudo-probe` while converting (no listing): the `Pseudo Probe Desc:` block on
/// stdout equals llvm-profgen 19's, and the profile is unchanged by the flag.
#[test]
fn probe_desc_report_matches_llvm_profgen() {
    let _machine = e2e::support::machine_share();
    if !corpus::tools_available("probe desc report", TOOLS) {
        return;
    }
    let program = corpus::program("inline_tail", Variant::Probe).expect("corpus builds");
    let rec = corpus::record(&program).expect("recorder runs");
    let dir = out_dir("inline_tail-probe-desc", Variant::Probe);
    let args = [
        format!("--perfscript={}", rec.perf_script.display()),
        format!("--binary={}", program.binary.display()),
        "--format=text".to_string(),
        "--show-pseudo-probe".to_string(),
    ];
    let (theirs_prof, ours_prof) = (dir.join("llvm.txt"), dir.join("ours.txt"));
    let theirs = Command::new("llvm-profgen-19")
        .args(&args)
        .arg(format!("--output={}", theirs_prof.display()))
        .output()
        .expect("llvm-profgen-19");
    assert!(theirs.status.success());
    let theirs = String::from_utf8_lossy(&theirs.stdout).into_owned();
    let mut ours_args = vec!["convert".to_string()];
    ours_args.extend(args.iter().cloned());
    ours_args.push(format!("--output={}", ours_prof.display()));
    let (code, ours) = stdout_of_child(&ours_args);
    assert_eq!(code, Some(0), "{ours}");
    let block = |s: &str| -> Vec<String> {
        s.lines()
            .filter(|l| {
                l.starts_with("Pseudo Probe Desc:")
                    || l.starts_with("GUID: ")
                    || l.starts_with("Hash: ")
            })
            .map(str::to_string)
            .collect()
    };
    assert!(block(&theirs).len() > 10, "{theirs}");
    assert_eq!(block(&ours), block(&theirs));
    assert_same(
        "inline_tail (probe) --show-pseudo-probe profile",
        &canonical(&ours_prof),
        &canonical(&theirs_prof),
    );
}

/// The note quoting llvm-profgen 19's leaf-external-frame figure (its perf script reader's
/// doubled sample count) is printed for perf script input only: llvm-profgen reads a
/// perf.data through `perf script`, whose samples can differ from the file's, so no figure
/// of ours is its figure there.
#[test]
fn llvm_profgen_s_figures_are_quoted_for_perf_script_input_only() {
    let _machine = e2e::support::machine_share();
    if !corpus::tools_available("llvm_profgen_s_figures_are_quoted", &["clang-19"]) {
        return;
    }
    let program = corpus::program("recursion", Variant::Probe).expect("corpus builds");
    let rec = corpus::record(&program).expect("recorder runs");
    let dir = out_dir("recursion-notes", Variant::Probe);
    let convert = |input: &str, path: &Path| -> String {
        let args: Vec<String> = [
            "convert",
            input,
            path.to_str().unwrap(),
            "--binary",
            program.binary.to_str().unwrap(),
            "-o",
            dir.join("notes.prof").to_str().unwrap(),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let (code, text) = e2e::support::cli_in_child(&args);
        assert_eq!(code, Some(0), "{text}");
        text
    };
    const NOTE: &str = "note: llvm-profgen 19 prints the leaf external frame share";
    let script = convert("--perfscript", &rec.perf_script);
    assert!(
        script.contains("of samples have leaf external frame") && script.contains(NOTE),
        "{script}"
    );
    let data = convert("--perfdata", &rec.perf_data);
    assert!(
        data.contains("of samples have leaf external frame"),
        "{data}"
    );
    assert!(!data.contains(NOTE), "{data}");
}
