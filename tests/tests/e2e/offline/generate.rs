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
//! The extbinary writer is checked on the same profiles: `llvm-profdata-19 merge --sample
//! --text` must read our extbinary file back to exactly our canonical text profile, and
//! our file must equal llvm-profgen's own extbinary byte for byte except for the order of
//! the FuncMetadata records (LLVM writes them in hash-map order), and
//! `clang -O2 -fprofile-sample-use=OURS.extbinary` must compile the program's source without
//! any diagnostic.

use std::path::{Path, PathBuf};
use std::process::Command;

use e2e::corpus::{self, Variant, PROGRAM_NAMES};
use e2e::support::{
    assert_no_mismatches, first_difference, try_canonical_profile as canonical, try_run as run,
};
use exporter::format::{extbinary, llvm_text, unsymbolized};
use symbolizer::generate::{generate_profile, GenerateOptions};
use symbolizer::profile::SampleProfile;
use symbolizer::ProfiledBinary;
use unwinder::{unwind_samples, CounterSet, UnwindOptions};

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
    e2e::support::suite_dir("generate")
}

fn llvm_profgen(script: &Path, binary: &Path, extra: &[&str], out: &Path) -> Result<(), String> {
    run(Command::new("llvm-profgen-19")
        .arg(format!("--perfscript={}", script.display()))
        .arg(format!("--binary={}", binary.display()))
        .arg(format!("--output={}", out.display()))
        .args(extra))
    .map(|_| ())
}

/// llvm-profgen's flags for the profile of `mode` in `format`, without the pre-inliner
/// and the nested profile (as our generator is run).
fn profile_flags(mode: Mode, format: &'static str) -> Vec<&'static str> {
    let mut flags = vec![
        format,
        "--csspgo-preinliner=false",
        "--gen-cs-nested-profile=false",
    ];
    if mode.flat() {
        flags.push("--ignore-stack-samples");
    }
    flags
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
            &binary.load_info(),
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
    let opts = GenerateOptions {
        preinliner: false,
        nested_profile: false,
        ..GenerateOptions::default()
    };
    let profile: SampleProfile = generate_profile(&binary, &set, &opts);

    let ours_file = stem.with_extension("ours.txt");
    std::fs::write(&ours_file, llvm_text::to_string(&profile)).map_err(|e| e.to_string())?;
    let theirs_file = stem.with_extension("theirs.txt");
    let extra = profile_flags(mode, "--format=text");
    llvm_profgen(&recorded.perf_script, &program.binary, &extra, &theirs_file)?;
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
    compare_extbinary(&recorded, mode, &ext_file, &stem)?;
    compile_with_profile(name, mode, &ext_file)
}

/// Our extbinary against llvm-profgen's (same flags, `--format=extbinary`): byte-identical
/// up to the FuncMetadata section, which LLVM writes in `SampleProfileMap` (hash map)
/// order; its records must be the same multiset.
fn compare_extbinary(
    recorded: &corpus::Recorded,
    mode: Mode,
    ours: &Path,
    stem: &Path,
) -> Result<(), String> {
    let theirs = stem.with_extension("theirs.extbinary");
    let extra = profile_flags(mode, "--format=extbinary");
    llvm_profgen(
        &recorded.perf_script,
        &recorded.program.binary,
        &extra,
        &theirs,
    )?;
    let a = std::fs::read(&theirs).map_err(|e| e.to_string())?;
    let b = std::fs::read(ours).map_err(|e| e.to_string())?;
    let (offset, size) = metadata_section(ours)?;
    let what = format!("{} {}", recorded.program.name, mode.tag());
    if a.len() != b.len() || a[..offset] != b[..offset] {
        return Err(format!(
            "{what}: extbinary differs before FuncMetadata ({} vs {})",
            theirs.display(),
            ours.display()
        ));
    }
    let probe = mode.variant() == Variant::Probe;
    let cs = !mode.flat();
    let records = |bytes: &[u8]| -> Result<Vec<Vec<u64>>, String> {
        let mut r = MetadataReader {
            data: &bytes[offset..offset + size],
            at: 0,
        };
        let mut out = Vec::new();
        while r.at < r.data.len() {
            let mut rec = Vec::new();
            r.record(probe, cs, &mut rec)?;
            out.push(rec);
        }
        out.sort();
        Ok(out)
    };
    if records(&a)? != records(&b)? {
        return Err(format!("{what}: FuncMetadata records differ"));
    }
    Ok(())
}

/// (offset, size) of the FuncMetadata section, from `llvm-profdata-19 show --sample
/// --show-sec-info-only`.
fn metadata_section(file: &Path) -> Result<(usize, usize), String> {
    let text = run(Command::new("llvm-profdata-19")
        .args(["show", "--sample", "--show-sec-info-only"])
        .arg(file))?;
    let line = text
        .lines()
        .find(|l| l.starts_with("FunctionMetadata"))
        .ok_or("no FunctionMetadata section")?;
    let field = |name: &str| -> Result<usize, String> {
        line.split(name)
            .nth(1)
            .and_then(|t| t.split(',').next())
            .and_then(|t| t.trim().parse().ok())
            .ok_or_else(|| format!("cannot parse `{line}`"))
    };
    Ok((field("Offset:")?, field("Size:")?))
}

/// Reads FuncMetadata records (`writeFuncMetadata`): name/context index, checksum (probe),
/// attributes (CS), and for non-CS profiles the inlined call sites recursively.
struct MetadataReader<'a> {
    data: &'a [u8],
    at: usize,
}

impl MetadataReader<'_> {
    fn uleb(&mut self) -> Result<u64, String> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = *self.data.get(self.at).ok_or("truncated FuncMetadata")?;
            self.at += 1;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err("ULEB too long".to_string())
    }

    fn record(&mut self, probe: bool, cs: bool, out: &mut Vec<u64>) -> Result<(), String> {
        out.push(self.uleb()?);
        if probe {
            out.push(self.uleb()?);
        }
        if cs {
            out.push(self.uleb()?);
            return Ok(());
        }
        let n = self.uleb()?;
        out.push(n);
        for _ in 0..n {
            out.push(self.uleb()?);
            out.push(self.uleb()?);
            self.record(probe, cs, out)?;
        }
        Ok(())
    }
}

/// `clang -O2 -fprofile-sample-use=OURS.extbinary` compiles the program's source without
/// any diagnostic (a malformed or mismatching profile makes clang warn).
fn compile_with_profile(name: &str, mode: Mode, profile: &Path) -> Result<(), String> {
    let src_dir = corpus::sources_dir();
    let (compiler, src) = if name == "virtual_calls" {
        ("clang++-19", src_dir.join("virtual_calls.cpp"))
    } else {
        ("clang-19", src_dir.join(format!("{name}.c")))
    };
    let object = profile.with_extension("o");
    let mut cmd = Command::new(compiler);
    cmd.args(["-O2", "-g", "-fdebug-info-for-profiling", "-c"])
        .arg(format!("-fprofile-sample-use={}", profile.display()))
        .arg(&src)
        .arg("-o")
        .arg(&object);
    if mode.variant() == Variant::Probe {
        cmd.arg("-fpseudo-probe-for-profiling");
    }
    let output = cmd.output().map_err(|e| format!("{compiler}: {e}"))?;
    let stderr = String::from_utf8_lossy(&output.stderr);
    if !output.status.success() || !stderr.trim().is_empty() {
        return Err(format!(
            "{name} {}: {compiler} -fprofile-sample-use={} reported: {stderr}",
            mode.tag(),
            profile.display()
        ));
    }
    Ok(())
}

fn run_all(mode: Mode) {
    if !corpus::tools_available(
        "generate",
        &[
            "clang-19",
            "clang++-19",
            "llvm-profgen-19",
            "llvm-profdata-19",
        ],
    ) {
        return;
    }
    let mut failures = Vec::new();
    for name in PROGRAM_NAMES {
        if let Err(e) = check(name, mode) {
            failures.push(e);
        }
    }
    assert_no_mismatches(&failures);
}

#[test]
fn flat_line_profiles_match_llvm_profgen() {
    let _machine = e2e::support::machine_share();
    run_all(Mode::FlatLine);
}

#[test]
fn flat_probe_profiles_match_llvm_profgen() {
    let _machine = e2e::support::machine_share();
    run_all(Mode::FlatProbe);
}

#[test]
fn cs_probe_profiles_match_llvm_profgen() {
    let _machine = e2e::support::machine_share();
    run_all(Mode::CsProbe);
}

#[test]
fn cs_line_profiles_match_llvm_profgen() {
    let _machine = e2e::support::machine_share();
    run_all(Mode::CsLine);
}
