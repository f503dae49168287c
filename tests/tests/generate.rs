//! Conformance of the profile generators with llvm-profgen 19 on real binaries.
//!
//! Every corpus program is recorded once with the software LBR recorder. llvm-profgen-19
//! writes the text profile (`--csspgo-preinliner=false --gen-cs-nested-profile=false`);
//! we generate ours from counters and write it with the exporter's text writer; both are
//! canonicalised with `llvm-profdata-19 merge --sample --text` and must be identical.
//!
//! The counters that drive our generators:
//! * flat line (lines build), flat probe (probe build) and CS probe (probe build):
//!   llvm-profgen's own unsymbolized counters (`--skip-symbolization`), read back with the
//!   exporter's reader, so a difference points at the generators alone;
//! * CS line (lines build): our unwinder's counters (llvm-profgen's unsymbolized line
//!   contexts are already symbolized strings), with the symbolizer's `ProfiledBinary` as
//!   the code layout.
//!
//! The extbinary writer is checked on the same profiles: `llvm-profdata-19 show --sample`
//! must read our extbinary file and dump exactly our text profile.

use std::path::{Path, PathBuf};
use std::process::Command;

use e2e::corpus::{self, Variant, PROGRAM_NAMES};
use exporter::format::{extbinary, llvm_text, unsymbolized};
use symbolizer::generate::{generate_profile, GenerateOptions};
use symbolizer::profile::SampleProfile;
use symbolizer::ProfiledBinary;
use unwinder::{unwind_samples, BinaryLoadInfo, CounterSet, UnwindOptions};

/// Which profile kind a check produces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    FlatLine,
    FlatProbe,
    CsProbe,
    CsLine,
}

impl Mode {
    fn variant(self) -> Variant {
        match self {
            Mode::FlatLine | Mode::CsLine => Variant::Lines,
            Mode::FlatProbe | Mode::CsProbe => Variant::Probe,
        }
    }

    fn flat(self) -> bool {
        matches!(self, Mode::FlatLine | Mode::FlatProbe)
    }

    fn tag(self) -> &'static str {
        match self {
            Mode::FlatLine => "flat-line",
            Mode::FlatProbe => "flat-probe",
            Mode::CsProbe => "cs-probe",
            Mode::CsLine => "cs-line",
        }
    }
}

fn out_dir() -> PathBuf {
    let dir = corpus::corpus_dir()
        .join("generate")
        .join(std::process::id().to_string());
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn run(cmd: &mut Command) -> Result<Vec<u8>, String> {
    let output = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "{cmd:?} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    Ok(output.stdout)
}

fn llvm_profgen(script: &Path, binary: &Path, extra: &[&str], out: &Path) -> Result<(), String> {
    run(Command::new("llvm-profgen-19")
        .arg(format!("--perfscript={}", script.display()))
        .arg(format!("--binary={}", binary.display()))
        .arg(format!("--output={}", out.display()))
        .args(extra))
    .map(|_| ())
}

/// `llvm-profdata-19 merge --sample --text FILE -o -`.
fn canonical(file: &Path) -> Result<String, String> {
    run(Command::new("llvm-profdata-19")
        .args(["merge", "--sample", "--text"])
        .arg(file)
        .args(["-o", "-"]))
    .map(|o| String::from_utf8_lossy(&o).into_owned())
}

fn load_info(binary: &ProfiledBinary) -> BinaryLoadInfo {
    BinaryLoadInfo {
        name: binary.name().to_string(),
        preferred_base: binary.preferred_base(),
        text_segment_offsets: binary.text_segment_offsets().to_vec(),
        preferred_text_segment_addresses: binary.preferred_text_segment_addresses().to_vec(),
    }
}

fn first_difference(a: &str, b: &str) -> String {
    for (i, (x, y)) in a.lines().zip(b.lines()).enumerate() {
        if x != y {
            return format!("line {}: llvm-profgen `{x}` vs ours `{y}`", i + 1);
        }
    }
    format!(
        "lengths differ: {} vs {} lines",
        a.lines().count(),
        b.lines().count()
    )
}

/// The counters our generator consumes for `mode`.
fn counters(
    mode: Mode,
    recorded: &corpus::Recorded,
    binary: &ProfiledBinary,
    stem: &Path,
) -> Result<CounterSet, String> {
    if mode == Mode::CsLine {
        let options = UnwindOptions::default();
        let (set, _) = unwind_samples(
            recorded.recording.events.iter().cloned(),
            binary,
            &load_info(binary),
            &options,
        )
        .map_err(|e| e.to_string())?;
        return Ok(set);
    }
    let raw = stem.with_extension("raw");
    let mut extra = vec!["--skip-symbolization"];
    if mode.flat() {
        extra.push("--ignore-stack-samples");
    }
    llvm_profgen(
        &recorded.perf_script,
        &recorded.program.binary,
        &extra,
        &raw,
    )?;
    let text = std::fs::read_to_string(&raw).map_err(|e| e.to_string())?;
    let base = binary.preferred_base();
    let profile = unsymbolized::read_unsymbolized(&text, base).map_err(|e| e.to_string())?;
    profile
        .to_counter_set(base)
        .ok_or_else(|| "unsymbolized profile has symbolized contexts".to_string())
}

/// Generates our profile for `mode` and compares it with llvm-profgen's.
fn check(name: &str, mode: Mode) -> Result<(), String> {
    let program = corpus::program(name, mode.variant())?;
    let recorded = corpus::record(&program)?;
    let binary = ProfiledBinary::load(&program.binary).map_err(|e| e.to_string())?;
    let stem = out_dir().join(format!("{name}-{}", mode.tag()));
    let set = counters(mode, &recorded, &binary, &stem)?;
    let profile: SampleProfile = generate_profile(&binary, &set, &GenerateOptions::default());

    let ours_file = stem.with_extension("ours.txt");
    std::fs::write(&ours_file, llvm_text::to_string(&profile)).map_err(|e| e.to_string())?;
    let theirs_file = stem.with_extension("theirs.txt");
    let mut extra = vec![
        "--format=text",
        "--csspgo-preinliner=false",
        "--gen-cs-nested-profile=false",
    ];
    if mode.flat() {
        extra.push("--ignore-stack-samples");
    }
    llvm_profgen(
        &recorded.perf_script,
        &program.binary,
        &extra,
        &theirs_file,
    )?;
    let theirs = canonical(&theirs_file)?;
    let ours = canonical(&ours_file)?;
    if theirs != ours {
        return Err(format!(
            "{name} {}: {} ({} vs {})",
            mode.tag(),
            first_difference(&theirs, &ours),
            theirs_file.display(),
            ours_file.display()
        ));
    }

    // extbinary: llvm-profdata reads it back to the same canonical text.
    let ext_file = stem.with_extension("extbinary");
    std::fs::write(&ext_file, extbinary::to_bytes(&profile)).map_err(|e| e.to_string())?;
    let from_ext = canonical(&ext_file)?;
    if from_ext != ours {
        return Err(format!(
            "{name} {} extbinary: {} ({})",
            mode.tag(),
            first_difference(&ours, &from_ext),
            ext_file.display()
        ));
    }
    Ok(())
}

fn run_all(mode: Mode) {
    if !corpus::tools_available(
        "generate",
        &["clang-19", "llvm-profgen-19", "llvm-profdata-19"],
    ) {
        return;
    }
    let mut failures = Vec::new();
    for name in PROGRAM_NAMES {
        if let Err(e) = check(name, mode) {
            failures.push(e);
        }
    }
    assert!(
        failures.is_empty(),
        "{} mismatches:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn flat_line_profiles_match_llvm_profgen() {
    run_all(Mode::FlatLine);
}

#[test]
fn flat_probe_profiles_match_llvm_profgen() {
    run_all(Mode::FlatProbe);
}

#[test]
fn cs_probe_profiles_match_llvm_profgen() {
    run_all(Mode::CsProbe);
}

#[test]
fn cs_line_profiles_match_llvm_profgen() {
    run_all(Mode::CsLine);
}
