//! Conformance of the unsymbolized counters (`--skip-symbolization`) with llvm-profgen 19.
//!
//! Every corpus program, both variants, is recorded once with the software LBR recorder;
//! llvm-profgen-19 converts the recorder's perf script text, we convert the same recording
//! (its events, in order, exactly what the text was written from), and the two
//! unsymbolized profiles must be byte-identical:
//!
//! * context-sensitive (hybrid samples, default options): address contexts
//!   `[0x7f4 @ 0x7bf]` for probe binaries, symbolized contexts `[main:1 @ foo]` for
//!   line-table binaries (the symbolizer's `expand_line_context` prints them);
//! * flat (`--ignore-stack-samples`) for both variants;
//! * LBR-only input (the recording without call chains) for both variants.
//!
//! Each comparison uses the symbolizer's `ProfiledBinary` as the code layout (the product
//! path; tests/symbolizer checks its decoding against llvm-profgen's disassembly). The warning
//! summary ([`unwinder::UnwindStats::warnings`]) must equal llvm-profgen's stderr warnings. On a mismatch
//! our output is written next to llvm-profgen's under `target/corpus/recordings/`.

use std::path::Path;
use std::process::Command;

use collector::PerfEvent;
use e2e::corpus::{self, Variant, PROGRAM_NAMES};
use e2e::support::{
    assert_no_mismatches, canonical_profile as canonical, first_difference, pgo_agent,
};
use exporter::format::unsymbolized::{write_unsymbolized, LineContextFormatter};
use symbolizer::generate::cs::expand_line_context;
use symbolizer::generate::GenerateOptions;
use symbolizer::profile::SampleContext;
use symbolizer::ProfiledBinary;
use unwinder::{unwind_samples, BinaryLoadInfo, CodeLayout, CounterKind, UnwindOptions};

/// Runs llvm-profgen-19; returns the unsymbolized profile and its warnings (stderr lines
/// without the "warning: " prefix).
fn llvm_profgen(script: &Path, binary: &Path, extra: &[&str], out: &Path) -> (String, Vec<String>) {
    let output = Command::new("llvm-profgen-19")
        .arg(format!("--perfscript={}", script.display()))
        .arg(format!("--binary={}", binary.display()))
        .arg("--skip-symbolization")
        .arg(format!("--output={}", out.display()))
        .args(extra)
        .output()
        .expect("llvm-profgen-19");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "llvm-profgen-19 failed: {stderr}");
    let warnings = stderr
        .lines()
        .filter_map(|l| l.strip_prefix("warning: "))
        .map(str::to_string)
        .collect();
    (std::fs::read_to_string(out).unwrap(), warnings)
}

/// Our unsymbolized profile of `recorded` with the binary described by `layout`/`load`,
/// and our warning summary.
fn ours(
    events: &[PerfEvent],
    layout: &dyn CodeLayout,
    load: &BinaryLoadInfo,
    ignore_stack: bool,
    line_context: Option<LineContextFormatter<'_>>,
) -> Result<(String, Vec<String>), String> {
    let options = UnwindOptions {
        ignore_stack_samples: ignore_stack,
        ..UnwindOptions::default()
    };
    let (counters, mut stats) = unwind_samples(events.iter().cloned(), layout, load, &options)
        .map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    write_unsymbolized(&mut out, &counters, load.preferred_base, line_context)
        .map_err(|e| e.to_string())?;
    let text = String::from_utf8(out).unwrap();
    let cs = counters.kind != CounterKind::Flat;
    // llvm-profgen counts symbolized line contexts: the printed ones.
    stats.contexts = text.lines().filter(|l| l.starts_with('[')).count() as u64;
    // llvm-profgen 19's leaf-external-frame share divides by its own sample count.
    let warnings = stats.warnings(cs).into_iter().map(|w| {
        if w.ends_with(unwinder::stats::LEAF_EXTERNAL_FRAME) {
            let theirs = (stats.leaf_external_frames, stats.total_samples);
            unwinder::stats::warning_summary(
                theirs.0,
                theirs.1,
                unwinder::stats::LEAF_EXTERNAL_FRAME,
            )
            .unwrap_or(w)
        } else {
            w
        }
    });
    Ok((text, warnings.collect()))
}

fn compare(theirs: &str, ours: &str, what: &str, raw: &Path) -> Result<(), String> {
    if ours == theirs {
        return Ok(());
    }
    let mine = raw.with_extension(format!("{}.ours", what.replace('/', "-")));
    std::fs::write(&mine, ours).unwrap();
    Err(format!(
        "{what}: {} ({} vs {})",
        first_difference(theirs, ours),
        raw.display(),
        mine.display()
    ))
}

fn check(name: &str, variant: Variant, ignore_stack: bool) -> Result<(), String> {
    let program = corpus::program(name, variant)?;
    let recorded = corpus::record(&program)?;
    let raw = recorded
        .perf_script
        .with_extension(if ignore_stack { "flat.raw" } else { "cs.raw" });
    let extra: &[&str] = if ignore_stack {
        &["--ignore-stack-samples"]
    } else {
        &[]
    };
    let (theirs, their_warnings) =
        llvm_profgen(&recorded.perf_script, &program.binary, extra, &raw);
    let what = format!(
        "{name}/{variant}/{}",
        if ignore_stack { "flat" } else { "cs" }
    );

    // The product path: the symbolizer's binary model and context strings.
    let binary = ProfiledBinary::load(&program.binary).map_err(|e| format!("{what}: {e}"))?;
    let generate = GenerateOptions::default();
    let format = |key: &[u64]| {
        SampleContext::from_frames(expand_line_context(&binary, key, &generate).0).to_string()
    };
    let (mine, warnings) = ours(
        &recorded.recording.events,
        &binary,
        &binary.load_info(),
        ignore_stack,
        Some(&format),
    )
    .map_err(|e| format!("{what}: {e}"))?;
    compare(&theirs, &mine, &what, &raw)?;
    compare_warnings(&their_warnings, &warnings, &what)
}

fn compare_warnings(theirs: &[String], ours: &[String], what: &str) -> Result<(), String> {
    if ours != theirs {
        return Err(format!(
            "{what}: warnings differ:\n  llvm-profgen {theirs:?}\n  ours         {ours:?}"
        ));
    }
    Ok(())
}

/// LBR-only input: the recording without call chains, written by the collector's perf
/// script writer (no leading IP: llvm-profgen then takes every token as a branch).
fn check_lbr_only(name: &str, variant: Variant) -> Result<(), String> {
    let program = corpus::program(name, variant)?;
    let recorded = corpus::record(&program)?;
    let mut recording = recorded.recording.clone();
    for event in &mut recording.events {
        if let PerfEvent::Sample(s) = event {
            s.callchain.clear();
        }
    }
    let script = recorded.perf_script.with_extension("lbr.perfscript");
    std::fs::write(
        &script,
        collector::perf_script::writer::perf_script_string(&recording),
    )
    .unwrap();
    let raw = script.with_extension("raw");
    let (theirs, their_warnings) = llvm_profgen(&script, &program.binary, &[], &raw);
    let what = format!("{name}/{variant}/lbr-only");
    let binary = ProfiledBinary::load(&program.binary).map_err(|e| format!("{what}: {e}"))?;
    let (mine, warnings) = ours(&recording.events, &binary, &binary.load_info(), false, None)
        .map_err(|e| format!("{what}: {e}"))?;
    compare(&theirs, &mine, &what, &raw)?;
    compare_warnings(&their_warnings, &warnings, &what)
}

fn run_all(variants: &[Variant], ignore_stack: bool) {
    if !corpus::tools_available(
        "unsymbolized",
        &["clang-19", "llvm-profgen-19", "llvm-readelf-19"],
    ) {
        return;
    }
    let mut failures = Vec::new();
    for &variant in variants {
        for name in PROGRAM_NAMES {
            if let Err(e) = check(name, variant, ignore_stack) {
                failures.push(e);
            }
        }
    }
    assert_no_mismatches(&failures);
}

#[test]
fn probe_context_sensitive_counters_match_llvm_profgen() {
    let _machine = e2e::support::machine_share();
    run_all(&[Variant::Probe], false);
}

#[test]
fn line_context_sensitive_counters_match_llvm_profgen() {
    let _machine = e2e::support::machine_share();
    run_all(&[Variant::Lines], false);
}

#[test]
fn flat_counters_match_llvm_profgen() {
    let _machine = e2e::support::machine_share();
    run_all(&Variant::ALL, true);
}

#[test]
fn lbr_only_counters_match_llvm_profgen() {
    let _machine = e2e::support::machine_share();
    if !corpus::tools_available("unsymbolized", &["clang-19", "llvm-profgen-19"]) {
        return;
    }
    let failures: Vec<String> = Variant::ALL
        .iter()
        .flat_map(|&v| PROGRAM_NAMES.iter().map(move |n| (*n, v)))
        .filter_map(|(n, v)| check_lbr_only(n, v).err())
        .collect();
    assert_no_mismatches(&failures);
}

/// The two-step flow with llvm-profgen on the host: its `--skip-symbolization` output of
/// every corpus program (probe contexts, and line contexts `[main:7 @ quick]` for the
/// line-table builds; CS and flat) becomes, through `convert --unsymbolized-profile`, the
/// profile llvm-profgen 19 makes from that file (default flags and flat CS contexts,
/// llvm-profdata canonical text). That equals its profile made from the samples directly
/// but for `ContextWasInlined` attributes of line contexts, which the text does not carry.
/// (For probe builds, which llvm-profgen 19 cannot read back, the profile from the samples.)
#[test]
fn llvm_profgen_unsymbolized_profiles_round_trip_to_its_symbolized_output() {
    let _machine = e2e::support::machine_share();
    if !corpus::tools_available(
        "unsymbolized round trip",
        &["clang-19", "llvm-profgen-19", "llvm-profdata-19"],
    ) {
        return;
    }
    let mut failures = Vec::new();
    for variant in Variant::ALL {
        for name in PROGRAM_NAMES {
            let program = corpus::program(name, variant).expect("corpus builds");
            let recorded = corpus::record(&program).expect("recorder runs");
            let script = &recorded.perf_script;
            for (mode, stack) in [("cs", None), ("flat", Some("--ignore-stack-samples"))] {
                let raw = script.with_extension(format!("{mode}.roundtrip.raw"));
                llvm_profgen(
                    script,
                    &program.binary,
                    &stack.into_iter().collect::<Vec<_>>(),
                    &raw,
                );
                for (shape, flags) in [
                    ("default", &[][..]),
                    (
                        "flat-cs",
                        &["--csspgo-preinliner=false", "--gen-cs-nested-profile=false"][..],
                    ),
                ] {
                    let direct =
                        script.with_extension(format!("{mode}.{shape}.llvm-roundtrip.txt"));
                    // llvm-profgen 19 crashes reading its own probe-binary counters
                    // (SIGSEGV): for those the oracle is its profile from the samples.
                    let input = match variant {
                        Variant::Lines => vec![format!("--unsymbolized-profile={}", raw.display())],
                        Variant::Probe => {
                            std::iter::once(format!("--perfscript={}", script.display()))
                                .chain(stack.map(str::to_string))
                                .collect()
                        }
                    };
                    let status = Command::new("llvm-profgen-19")
                        .args(&input)
                        .arg(format!("--binary={}", program.binary.display()))
                        .args(flags)
                        .args(["--format=text", "--output"])
                        .arg(&direct)
                        .status()
                        .expect("llvm-profgen-19");
                    assert!(status.success());
                    let ours = script.with_extension(format!("{mode}.{shape}.roundtrip.txt"));
                    let mut argv = vec![
                        "convert".to_string(),
                        format!("--unsymbolized-profile={}", raw.display()),
                        format!("--binary={}", program.binary.display()),
                    ];
                    argv.extend(flags.iter().map(|f| f.to_string()));
                    argv.extend(["--format=text".to_string(), "--output".to_string()]);
                    argv.push(ours.display().to_string());
                    pgo_agent(&argv);
                    let what = format!("{name} ({variant}, {mode}, {shape})");
                    let (theirs, mine) = (canonical(&direct), canonical(&ours));
                    assert!(
                        !theirs.trim().is_empty(),
                        "{what}: llvm-profgen wrote nothing"
                    );
                    if theirs != mine {
                        failures.push(format!("{what}: {}", first_difference(&theirs, &mine)));
                    }
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
