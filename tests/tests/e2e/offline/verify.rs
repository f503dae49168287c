//! `pgo-agent verify` end to end, on corpus programs recorded by the software LBR recorder
//! and converted by `pgo-agent convert` with default flags (pre-inlined nested CS profiles),
//! with `--ignore-stack-samples` (flat), and, where a test edits a profile, with the
//! pre-inliner and nesting off (one CS profile per context, see [`Shape::Contexts`]):
//!
//! * every corpus probe profile passes the stale, dropped and consistency checks with
//!   tolerance 0; `virtual_calls`' passes every check through the command line (exit 0);
//! * a profile from an old build (the program's source changed in two functions, both
//!   builds compiled from one scratch path with the corpus flags) checked against the new
//!   binary is stale in exactly the two changed functions;
//! * a profile with one function removed is reported dropped, exactly that function;
//! * a profile with one count changed fails the consistency check (exit 3).
//!
//! Each check runs the real command line (`daemon::parse_args` + `daemon::execute`) or the
//! function behind it (`daemon::verify::verify_files`).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use daemon::verify::{report_json, verify_files, VerifyArgs, EXIT_CHECK_FAILED};
use e2e::corpus::{self, CorpusProgram, Recorded, Variant};
use e2e::support::pgo_agent;
use exporter::format::{llvm_text, llvm_text_reader};
use symbolizer::profile::{FunctionSamples, SampleProfile};
use symbolizer::verify::{IssueKind, VerifyReport};

const TOOLS: &[&str] = &["clang-19"];

/// Runs `pgo-agent <args>` in-process; panics on an error, returns the exit code.
fn s(path: &Path) -> String {
    path.to_str().unwrap().to_string()
}

fn out_dir(name: &str) -> PathBuf {
    let dir = corpus::target_dir()
        .join("verify")
        .join(std::process::id().to_string())
        .join(name);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Which profile `convert` makes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Shape {
    /// Default flags: context-sensitive, pre-inlined and nested.
    PreInlined,
    /// `--csspgo-preinliner=false --gen-cs-nested-profile=false`: one profile per context.
    /// Unlike the pre-inlined output, what it holds does not hang on the pre-inliner's
    /// decisions, which flip with a few samples' difference between recordings (a call
    /// target whose call-site count sits at the hot threshold).
    Contexts,
    /// `--ignore-stack-samples`: flat.
    Flat,
}

impl Shape {
    fn file_name(self) -> &'static str {
        match self {
            Shape::PreInlined => "cs.txt",
            Shape::Contexts => "contexts.txt",
            Shape::Flat => "flat.txt",
        }
    }
}

/// `pgo-agent convert --format=text` of `perf_script` for `binary`, as `shape` says.
fn convert(samples: &Path, binary: &Path, output: &Path, shape: Shape) {
    // The recorder's perf.data (`.data`) or perf script text.
    let input = if samples.extension().is_some_and(|e| e == "data") {
        "--perfdata"
    } else {
        "--perfscript"
    };
    let mut args: Vec<String> = [
        "convert",
        input,
        &s(samples),
        "--binary",
        &s(binary),
        "--format=text",
        "--output",
        &s(output),
    ]
    .iter()
    .map(|a| a.to_string())
    .collect();
    match shape {
        Shape::PreInlined => {}
        Shape::Contexts => args.extend([
            "--csspgo-preinliner=false".to_string(),
            "--gen-cs-nested-profile=false".to_string(),
        ]),
        Shape::Flat => args.push("--ignore-stack-samples".into()),
    }
    assert_eq!(pgo_agent(&args), ExitCode::SUCCESS);
}

/// `virtual_calls` (probe variant), recorded and converted as `shape` into a directory of
/// the test's (`name`): the program, its recording and the profile's path.
fn virtual_calls_converted(name: &str, shape: Shape) -> (CorpusProgram, Recorded, PathBuf) {
    let program = corpus::program("virtual_calls", Variant::Probe).expect("corpus builds");
    let rec = corpus::record(&program).expect("recorder runs");
    let profile = out_dir(name).join(shape.file_name());
    convert(&rec.perf_script, &program.binary, &profile, shape);
    (program, rec, profile)
}

/// The verify arguments, parsed as the command line parses them.
fn verify_args(
    profile: &Path,
    binary: &Path,
    samples: Option<&Path>,
    extra: &[&str],
) -> Vec<String> {
    let mut v = vec![
        "verify".to_string(),
        "--profile".into(),
        s(profile),
        "--binary".into(),
        s(binary),
    ];
    if let Some(samples) = samples {
        v.extend(["--samples".to_string(), s(samples)]);
    }
    v.extend(extra.iter().map(|a| a.to_string()));
    v
}

/// Runs the checks as `pgo-agent verify <args>` does and returns the report.
fn verify(args: &[String]) -> VerifyReport {
    let mut argv = vec!["pgo-agent".to_string()];
    argv.extend(args.iter().cloned());
    let cli = daemon::parse_args(argv).unwrap();
    let daemon::cli::Command::Verify(args) = cli.command else {
        unreachable!("a verify command line")
    };
    let report = verify_files(&args).unwrap_or_else(|e| panic!("verify: {e:#}"));
    print_report(&args, &report);
    report
}

fn print_report(args: &VerifyArgs, report: &VerifyReport) {
    eprint!("{}", daemon::verify::human_report(args, report));
    let json = report_json(args, report);
    assert_eq!(json["passed"], report.passed());
}

fn read_profile(path: &Path) -> SampleProfile {
    let text = std::fs::read_to_string(path).unwrap();
    llvm_text_reader::read(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn write_profile(profile: &SampleProfile, path: &Path) {
    std::fs::write(path, llvm_text::to_string(profile)).unwrap();
}

/// Every function name of a profile, with how often it appears (as a profile or a
/// context frame).
fn name_uses(profile: &SampleProfile) -> std::collections::BTreeMap<String, usize> {
    fn walk(fs: &FunctionSamples, out: &mut std::collections::BTreeMap<String, usize>) {
        *out.entry(fs.name().to_string()).or_default() += 1;
        for callees in fs.callsites.values() {
            for c in callees.values() {
                walk(c, out);
            }
        }
    }
    let mut out = std::collections::BTreeMap::new();
    for fs in profile.profiles.values() {
        for f in &fs.context.frames[..fs.context.frames.len().saturating_sub(1)] {
            *out.entry(f.func.clone()).or_default() += 1;
        }
        walk(fs, &mut out);
    }
    out
}

#[test]
fn corpus_profiles_pass_stale_dropped_and_consistency() {
    let _machine = e2e::support::machine_share();
    if !corpus::tools_available("verify", TOOLS) {
        return;
    }
    for name in corpus::PROGRAM_NAMES {
        let program = corpus::program(name, Variant::Probe).expect("corpus builds");
        let rec = corpus::record(&program).expect("recorder runs");
        let dir = out_dir(name);
        for shape in [Shape::PreInlined, Shape::Flat] {
            // Each profile is checked against the samples it was made from: the perf.data's
            // samples taken in a prologue are repaired and counted (is_even and is_odd in
            // `recursion`), the perf script's dropped as llvm-profgen drops them.
            for samples in [&rec.perf_script, &rec.perf_data] {
                let profile = dir.join(shape.file_name());
                convert(samples, &program.binary, &profile, shape);
                let r = verify(&verify_args(
                    &profile,
                    &program.binary,
                    Some(samples),
                    &["--tolerance", "0"],
                ));
                let what = format!("{name} {}", profile.display());
                assert!(
                    r.stale.passed() && r.stale.checked > 0,
                    "{what}: {:?}",
                    r.stale
                );
                assert!(r.stale.not_in_binary.is_empty(), "{what}: {:?}", r.stale);
                let dropped = r.dropped.as_ref().unwrap();
                assert!(
                    dropped.passed() && dropped.sampled > 0,
                    "{what}: {dropped:?}"
                );
                assert!(r.consistency.passed(), "{what}: {:?}", r.consistency);
                assert!(r.consistency.checked > 0, "{what}: {:?}", r.consistency);
                assert_eq!(r.consistency.skipped_line_based, 0, "{what}");
            }
        }
    }
}

#[test]
fn unmodified_profile_passes_every_check() {
    let _machine = e2e::support::machine_share();
    if !corpus::tools_available("verify", TOOLS) {
        return;
    }
    let (program, rec, profile) = virtual_calls_converted("unmodified", Shape::PreInlined);
    for samples in [&rec.perf_script, &rec.perf_data] {
        let args = verify_args(&profile, &program.binary, Some(samples), &[]);
        let r = verify(&args);
        assert!(r.passed(), "{r:?}");
        assert!(r.density.density >= 50.0, "{:?}", r.density);
        // LBR samples: no shortfall, and not stack-only though every call of this
        // pre-inlined profile is inlined (no call targets): the samples decide.
        assert_eq!(r.density.more_samples_factor(), None);
        assert!(!r.density.stack_samples_only, "{:?}", r.density);
        assert_eq!((r.stale_count(), r.dropped_count()), (0, 0));
        assert_eq!(pgo_agent(&args), ExitCode::SUCCESS);
    }
    // The unsymbolized counters are read as `convert` reads them, too.
    let raw = profile.with_extension("raw");
    assert_eq!(
        pgo_agent(&[
            "convert".into(),
            "--perfscript".into(),
            s(&rec.perf_script),
            "--binary".into(),
            s(&program.binary),
            "--skip-symbolization".into(),
            "--output".into(),
            s(&raw),
        ]),
        ExitCode::SUCCESS
    );
    let args = verify_args(&profile, &program.binary, Some(&raw), &["--json"]);
    let r = verify(&args);
    assert!(
        r.passed() && r.dropped.as_ref().unwrap().sampled > 0,
        "{r:?}"
    );
    assert_eq!(pgo_agent(&args), ExitCode::SUCCESS);
}

/// A probe-based profile checked against a build without pseudo probes (the line-table
/// build of the same program) fails the stale check: clang ignores such a profile whole,
/// though each function is in the binary.
#[test]
fn probe_profile_against_a_build_without_probes_fails_stale() {
    let _machine = e2e::support::machine_share();
    if !corpus::tools_available("verify", TOOLS) {
        return;
    }
    let (_, _, profile) = virtual_calls_converted("probeless", Shape::PreInlined);
    let lines = corpus::program("virtual_calls", Variant::Lines).expect("corpus builds");
    let r = verify(&verify_args(&profile, &lines.binary, None, &[]));
    assert!(r.stale.binary_without_probes && !r.stale.passed(), "{r:?}");
    assert!(!r.passed());
}

#[test]
fn removed_function_is_reported_dropped() {
    let _machine = e2e::support::machine_share();
    if !corpus::tools_available("verify", TOOLS) {
        return;
    }
    let (program, rec, original) = virtual_calls_converted("dropped", Shape::Contexts);
    let mut profile = read_profile(&original);
    // The hottest top-level function that appears nowhere else in the profile and has no
    // inlined callees (which would go with it).
    let uses = name_uses(&profile);
    let victim = profile
        .sorted_profiles()
        .into_iter()
        .find(|fs| uses[fs.name()] == 1 && fs.callsites.is_empty())
        .map(|fs| fs.context.clone())
        .expect("a function profiled once");
    let victim_name = victim.func().to_string();
    profile.profiles.remove(&victim);
    let edited = original.with_file_name("without-one.txt");
    write_profile(&profile, &edited);

    let args = verify_args(&edited, &program.binary, Some(&rec.perf_script), &[]);
    let r = verify(&args);
    let dropped: Vec<&str> = r
        .dropped
        .as_ref()
        .unwrap()
        .dropped
        .iter()
        .map(|d| d.name.as_str())
        .collect();
    assert_eq!(dropped, vec![victim_name.as_str()]);
    assert_eq!(r.dropped_count(), 1);
    assert!(r.stale.passed() && r.consistency.passed(), "{r:?}");
    assert_eq!(pgo_agent(&args), ExitCode::from(EXIT_CHECK_FAILED));
    // Without samples the check cannot run, and the rest passes.
    let args = verify_args(&edited, &program.binary, None, &[]);
    assert!(verify(&args).dropped.is_none());
}

#[test]
fn perturbed_count_fails_consistency() {
    let _machine = e2e::support::machine_share();
    if !corpus::tools_available("verify", TOOLS) {
        return;
    }
    let program = corpus::program("virtual_calls", Variant::Probe).expect("corpus builds");
    let rec = corpus::record(&program).expect("recorder runs");
    let dir = out_dir("perturbed");
    for shape in [Shape::PreInlined, Shape::Flat] {
        let original = dir.join(shape.file_name());
        convert(&rec.perf_script, &program.binary, &original, shape);
        let profile = read_profile(&original);
        // The hottest top-level profile's hottest block (an entry without call targets),
        // counted half.
        let top = profile.sorted_profiles()[0].context.clone();
        let (&loc, block) = profile.profiles[&top]
            .body
            .iter()
            .filter(|(_, b)| b.call_targets.is_empty())
            .max_by_key(|(_, b)| b.count)
            .unwrap();
        let (old, new) = (block.count, block.count / 2);
        let mut perturbed = profile.clone();
        perturbed
            .profiles
            .get_mut(&top)
            .unwrap()
            .body
            .get_mut(&loc)
            .unwrap()
            .count = new;
        let edited = dir.join(format!(
            "perturbed-{}",
            original.file_name().unwrap().to_str().unwrap()
        ));
        write_profile(&perturbed, &edited);

        // Tolerance 0: the unperturbed profile passes with it (the corpus test), so the
        // issues are the perturbation's alone, however small the block is in its function.
        let args = verify_args(
            &edited,
            &program.binary,
            Some(&rec.perf_script),
            &["--tolerance", "0"],
        );
        let r = verify(&args);
        let fs = &profile.profiles[&top];
        let sum = |f: &FunctionSamples| -> u64 {
            f.body.values().map(|b| b.count).sum::<u64>()
                + f.callsites
                    .values()
                    .flat_map(|c| c.values())
                    .map(|c| c.total)
                    .sum::<u64>()
        };
        let context = fs.context.to_string();
        let issues = &r.consistency.issues;
        assert!(!issues.is_empty(), "block {loc}: {old} → {new} passed");
        assert!(issues.iter().all(|i| i.context == context), "{issues:?}");
        match &issues[0].kind {
            IssueKind::Total {
                total, sum: got, ..
            } => assert_eq!((*total, *got), (fs.total, sum(fs) - (old - new))),
            other => panic!("block {loc}: {old} → {new}: {other:?}"),
        }
        let entry = IssueKind::Entry {
            head: fs.head,
            entry_count: new,
        };
        if loc.line_offset == 1 {
            assert_eq!(issues.len(), 2);
            assert_eq!(issues[1].kind, entry);
        } else {
            assert_eq!(issues.len(), 1, "{issues:?}");
        }
        assert!(r.stale.passed() && r.dropped.as_ref().unwrap().passed());
        assert_eq!(pgo_agent(&args), ExitCode::from(EXIT_CHECK_FAILED));

        // The unperturbed profile passes.
        let args = verify_args(
            &original,
            &program.binary,
            Some(&rec.perf_script),
            &["--tolerance", "0"],
        );
        assert!(verify(&args).consistency.passed());
    }
}

/// A call-site perturbation in the exact (CS) relations: one call target counted twice.
#[test]
fn perturbed_call_target_fails_consistency() {
    let _machine = e2e::support::machine_share();
    if !corpus::tools_available("verify", TOOLS) {
        return;
    }
    let (program, _, original) = virtual_calls_converted("perturbed-call", Shape::Contexts);
    let mut profile = read_profile(&original);
    assert!(
        profile.is_cs && !profile.is_preinlined,
        "one profile per context"
    );
    let (context, loc) = profile
        .profiles
        .values()
        .find_map(|fs| {
            fs.body
                .iter()
                .find(|(_, b)| !b.call_targets.is_empty())
                .map(|(loc, _)| (fs.context.clone(), *loc))
        })
        .expect("a call site with targets");
    let body = profile
        .profiles
        .get_mut(&context)
        .unwrap()
        .body
        .get_mut(&loc)
        .unwrap();
    let (count, target) = (body.count, body.call_targets.keys().next().unwrap().clone());
    *body.call_targets.get_mut(&target).unwrap() *= 2;
    let targets = body.call_target_sum();
    let edited = original.with_file_name("perturbed-call.txt");
    write_profile(&profile, &edited);
    let r = verify(&verify_args(&edited, &program.binary, None, &[]));
    assert_eq!(
        r.consistency
            .issues
            .iter()
            .map(|i| (i.context.as_str(), &i.kind))
            .collect::<Vec<_>>(),
        vec![(
            context.to_string().as_str(),
            &IssueKind::CallSite {
                location: loc,
                count,
                targets
            }
        )]
    );
}

/// Extra lines that add one branch to each function (values never taken at run time).
const CHANGES: [(&str, &str); 2] = [
    (
        "__attribute__((noinline)) int fib(int n) { return",
        "__attribute__((noinline)) int fib(int n) { if (n == 1000) return 7; return",
    ),
    (
        "  if (!n) return 0;\n",
        "  if (!n) return 0;\n  if (n->value < -5) return -1;\n",
    ),
];

/// Compiles `source` as `tests/programs/build.sh` compiles a probe PIE.
fn compile(source: &Path, output: &Path) {
    let out = Command::new("clang-19")
        .args(corpus::CORPUS_CFLAGS)
        .arg("-fpseudo-probe-for-profiling")
        .args(corpus::PIE_LINK_FLAGS)
        .arg("-o")
        .arg(output)
        .arg(source)
        .output()
        .expect("clang-19");
    assert!(
        out.status.success(),
        "clang-19 {}: {}",
        source.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn profile_of_an_old_build_is_stale_in_the_changed_functions() {
    let _machine = e2e::support::machine_share();
    if !corpus::tools_available("verify", TOOLS) {
        return;
    }
    corpus::build().expect("corpus builds");
    let dir = out_dir("stale");
    // Both builds from one path: static functions' `.__uniq.` suffixes hash the path.
    let source = dir.join("recursion.c");
    let original = std::fs::read_to_string(corpus::sources_dir().join("recursion.c")).unwrap();
    std::fs::write(&source, &original).unwrap();
    let old_binary = dir.join("recursion-old");
    compile(&source, &old_binary);
    let mut changed = original.clone();
    for (from, to) in CHANGES {
        assert_eq!(changed.matches(from).count(), 1, "{from}");
        changed = changed.replace(from, to);
    }
    std::fs::write(&source, &changed).unwrap();
    let new_binary = dir.join("recursion-new");
    compile(&source, &new_binary);

    // Record the old build and convert its samples (CS default and flat).
    let options = recorder::RecordOptions {
        period: corpus::TEST_PERIOD,
        environment: Some(Vec::new()),
        ..Default::default()
    };
    let outcome = recorder::record(&[s(&old_binary)], &options).expect("records");
    let script = dir.join("old.perfscript");
    std::fs::write(
        &script,
        collector::perf_script::writer::perf_script_string(&outcome.recording),
    )
    .unwrap();
    for shape in [Shape::PreInlined, Shape::Flat] {
        let profile = dir.join(format!("old.{}", shape.file_name()));
        convert(&script, &old_binary, &profile, shape);

        let r = verify(&verify_args(&profile, &new_binary, None, &[]));
        let stale: BTreeSet<&str> = r.stale.stale.iter().map(|f| f.name.as_str()).collect();
        // Both changed functions that the profile has: `fib` always (most of the samples);
        // `sum_tree` runs briefly, and at some sampling phases (they move with the
        // recording's path and the host's libc routines) its few samples fall below the
        // cold threshold and the profile has no `sum_tree`.
        let text = std::fs::read_to_string(&profile).unwrap();
        // A profile of `f`: top-level `f:total:head`, or nested `site: f:total` (not a
        // call target, `site: count f:count`).
        let has = |f: &str| {
            let head = format!("{f}:");
            text.lines().map(str::trim_start).any(|l| {
                l.starts_with(&head)
                    || l.split_once(": ").is_some_and(|(site, rest)| {
                        site.chars().all(|c| c.is_ascii_digit() || c == '.')
                            && rest.starts_with(&head)
                    })
            })
        };
        assert!(has("fib"), "{text}");
        let changed: BTreeSet<&str> = ["fib", "sum_tree"].into_iter().filter(|f| has(f)).collect();
        assert_eq!(stale, changed, "{:?}", r.stale);
        assert!(r.stale.not_in_binary.is_empty(), "{:?}", r.stale);
        assert_eq!(r.stale_count(), changed.len());
        for f in &r.stale.stale {
            assert_eq!(f.profile_checksums.len(), 1);
            assert_ne!(f.profile_checksums[0], f.binary_checksum);
        }
        let args = verify_args(&profile, &new_binary, None, &["--density-threshold", "0"]);
        assert_eq!(pgo_agent(&args), ExitCode::from(EXIT_CHECK_FAILED));

        // Against the binary it came from, nothing is stale (and, with a density threshold
        // this program's few samples reach, everything passes).
        let args = verify_args(
            &profile,
            &old_binary,
            Some(&script),
            &["--density-threshold", "0"],
        );
        let r = verify(&args);
        assert!(r.passed(), "{r:?}");
        assert_eq!(pgo_agent(&args), ExitCode::SUCCESS);
    }
}

/// The verifier reads extbinary profiles: pgo-agent's and llvm-profgen-19's default output
/// read back as the same profile as their text output, and verify the same way (with the
/// exact relations, which extbinary's pre-inlined summary flag selects).
#[test]
fn extbinary_profiles_verify_like_their_text() {
    let _machine = e2e::support::machine_share();
    if !corpus::tools_available("verify", TOOLS) {
        return;
    }
    let program = corpus::program("virtual_calls", Variant::Probe).expect("corpus builds");
    let rec = corpus::record(&program).expect("recorder runs");
    let dir = out_dir("extbinary");
    let mut pairs = Vec::new();
    for (tool, available) in [
        ("pgo-agent", true),
        (
            "llvm-profgen-19",
            corpus::tools_available("verify (llvm-profgen)", &["llvm-profgen-19"]),
        ),
    ] {
        if !available {
            continue;
        }
        let (text, ext) = (
            dir.join(format!("{tool}.txt")),
            dir.join(format!("{tool}.prof")),
        );
        for (output, format) in [(&text, "--format=text"), (&ext, "--format=extbinary")] {
            let args: Vec<String> = [
                "--perfscript",
                &s(&rec.perf_script),
                "--binary",
                &s(&program.binary),
                format,
                "--output",
                &s(output),
            ]
            .iter()
            .map(|a| a.to_string())
            .collect();
            if tool == "pgo-agent" {
                let mut argv = vec!["convert".to_string()];
                argv.extend(args);
                assert_eq!(pgo_agent(&argv), ExitCode::SUCCESS);
            } else {
                let out = Command::new(tool).args(&args).output().unwrap();
                assert!(
                    out.status.success(),
                    "{}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
        }
        pairs.push((text, ext));
    }
    for (text, ext) in pairs {
        let from_text = daemon::verify::read_profile(&text).unwrap();
        let from_ext = daemon::verify::read_profile(&ext).unwrap();
        assert_eq!(
            llvm_text::to_string(&from_ext),
            llvm_text::to_string(&from_text),
            "{}",
            ext.display()
        );
        assert!(from_ext.is_preinlined && from_ext.is_probe_based && !from_ext.is_cs);
        let args = verify_args(
            &ext,
            &program.binary,
            Some(&rec.perf_script),
            &["--tolerance", "0"],
        );
        let r = verify(&args);
        assert!(
            r.passed() && r.consistency.exact && r.consistency.checked > 0,
            "{r:?}"
        );
        assert_eq!(pgo_agent(&args), ExitCode::SUCCESS);
    }
}
