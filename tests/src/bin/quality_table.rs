//! Prints the profile-quality table of docs/correctness.md: per corpus program (probe build), the
//! weighted relative block-count delta (`symbolizer::quality`) of llvm-profgen-19's and
//! pgo-agent's profiles against the recorder's ground truth, both with llvm-profgen's
//! default flags (CS: pre-inlined nested profile) and flat (`--ignore-stack-samples`), plus
//! what `pgo-agent verify` says of pgo-agent's CS profile.
//!
//! Run by `scripts/quality_table.sh`; needs clang-19 and llvm-profgen-19. Arguments: the
//! programs to measure (default: every corpus program).

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use e2e::corpus::{self, Variant};
use exporter::format::llvm_text_reader;
use symbolizer::quality;
use symbolizer::ProfiledBinary;

fn s(path: &Path) -> String {
    path.to_str().expect("UTF-8 path").to_string()
}

/// Runs `pgo-agent <args>` in-process.
fn pgo_agent(args: &[String]) -> Result<ExitCode, String> {
    let mut argv = vec!["pgo-agent".to_string()];
    argv.extend(args.iter().cloned());
    let cli = daemon::parse_args(argv).map_err(|e| e.to_string())?;
    daemon::execute(cli).map_err(|e| format!("{e:#}"))
}

fn llvm_profgen(args: &[String]) -> Result<(), String> {
    let out = Command::new("llvm-profgen-19")
        .args(args)
        .output()
        .map_err(|e| format!("llvm-profgen-19: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "llvm-profgen-19 {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(())
}

struct Row {
    name: String,
    samples: u64,
    blocks: usize,
    /// (llvm-profgen-19, pgo-agent) per mode: CS default flags, flat.
    deltas: [(f64, f64); 2],
    verify: String,
}

fn measure(name: &str, dir: &Path) -> Result<Row, String> {
    let program = corpus::program(name, Variant::Probe)?;
    let rec = corpus::record(&program)?;
    let binary = ProfiledBinary::load(&program.binary).map_err(|e| e.to_string())?;
    let file_name = program
        .binary
        .file_name()
        .and_then(|f| f.to_str())
        .unwrap_or_default();
    let truth = rec
        .truth
        .binary(file_name)
        .ok_or_else(|| format!("no ground truth for {file_name}"))?;
    let mut deltas = [(0.0, 0.0); 2];
    let mut blocks = 0;
    let mut ours_cs = PathBuf::new();
    for (i, flat) in [false, true].into_iter().enumerate() {
        let mode = if flat { "flat" } else { "cs" };
        let mut delta = |tool: &str| -> Result<f64, String> {
            let output = dir.join(format!("{name}.{tool}.{mode}.txt"));
            let mut args = vec![
                "--perfscript".to_string(),
                s(&rec.perf_script),
                "--binary".into(),
                s(&program.binary),
                "--format=text".into(),
                "--output".into(),
                s(&output),
            ];
            if flat {
                args.push("--ignore-stack-samples".into());
            }
            if tool == "llvm" {
                llvm_profgen(&args)?;
            } else {
                args.insert(0, "convert".into());
                pgo_agent(&args)?;
                if !flat {
                    ours_cs = output.clone();
                }
            }
            let text = std::fs::read_to_string(&output).map_err(|e| e.to_string())?;
            let profile = llvm_text_reader::read(&text).map_err(|e| e.to_string())?;
            let report = quality::block_count_quality(&binary, truth, &profile)
                .map_err(|e| e.to_string())?;
            blocks = report.blocks;
            Ok(report.delta)
        };
        deltas[i] = (delta("llvm")?, delta("ours")?);
    }
    let argv = vec![
        "pgo-agent".to_string(),
        "verify".into(),
        "--profile".into(),
        s(&ours_cs),
        "--binary".into(),
        s(&program.binary),
        "--samples".into(),
        s(&rec.perf_script),
    ];
    let daemon::cli::Command::Verify(args) =
        daemon::parse_args(argv).map_err(|e| e.to_string())?.command
    else {
        return Err("not a verify command line".into());
    };
    let r = daemon::verify::verify_files(&args).map_err(|e| format!("{e:#}"))?;
    let mut failed = Vec::new();
    if !r.stale.passed() {
        failed.push(format!("{} stale", r.stale_count()));
    }
    if r.dropped_count() > 0 {
        failed.push(format!("{} dropped", r.dropped_count()));
    }
    if !r.consistency.passed() {
        failed.push(format!("{} inconsistent", r.consistency.issues.len()));
    }
    if !r.density.passed() {
        failed.push(format!(
            "density {:.1} < {}",
            r.density.density, r.density.threshold
        ));
    }
    let verify = if failed.is_empty() {
        format!("pass (density {:.0})", r.density.density)
    } else {
        failed.join(", ")
    };
    Ok(Row {
        name: name.to_string(),
        samples: rec.truth.totals.samples,
        blocks,
        deltas,
        verify,
    })
}

fn main() -> ExitCode {
    let names: Vec<String> = std::env::args().skip(1).collect();
    let names: Vec<&str> = if names.is_empty() {
        corpus::PROGRAM_NAMES.to_vec()
    } else {
        names.iter().map(String::as_str).collect()
    };
    let dir = corpus::target_dir()
        .join("quality-table")
        .join(std::process::id().to_string());
    if let Err(e) = std::fs::create_dir_all(&dir) {
        eprintln!("quality_table: {}: {e}", dir.display());
        return ExitCode::FAILURE;
    }
    println!(
        "| program | samples | blocks | CS: llvm-profgen-19 | CS: pgo-agent | \
         flat: llvm-profgen-19 | flat: pgo-agent | `pgo-agent verify` (CS) |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---|");
    let mut status = ExitCode::SUCCESS;
    for name in names {
        match measure(name, &dir) {
            Ok(r) => println!(
                "| `{}` | {} | {} | {:.4} | {:.4} | {:.4} | {:.4} | {} |",
                r.name,
                r.samples,
                r.blocks,
                r.deltas[0].0,
                r.deltas[0].1,
                r.deltas[1].0,
                r.deltas[1].1,
                r.verify
            ),
            Err(e) => {
                eprintln!("quality_table: {name}: {e}");
                status = ExitCode::FAILURE;
            }
        }
    }
    status
}
