//! `pgo-agent verify`: is a sample profile still good for a binary? Runs the checks of
//! `symbolizer::verify` (stale checksums, dropped functions, flow consistency, density)
//! and prints a report (`--json` for machines). Exit code 0 when every check passes,
//! [`EXIT_CHECK_FAILED`] when one fails (1 stays "could not run", 2 a usage error).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, FromArgMatches};
use serde_json::{json, Value};
use symbolizer::binary::ProfiledBinary;
use symbolizer::profile::SampleProfile;
use symbolizer::verify::{
    self, ConsistencyReport, DensityReport, DroppedReport, IssueKind, StaleReport, VerifyOptions,
    VerifyReport,
};
use unwinder::CounterSet;

use crate::convert::ConvertArgs;

/// The exit code when a check fails.
pub const EXIT_CHECK_FAILED: u8 = 3;

/// Arguments of `pgo-agent verify`.
#[derive(Debug, clap::Args)]
#[command(after_help = AFTER_HELP)]
pub struct VerifyArgs {
    /// The sample profile to check (LLVM text or extbinary format).
    #[arg(long, value_name = "FILE")]
    pub profile: PathBuf,
    /// The binary the profile will be used with (probe checksums, symbols).
    #[arg(long, value_name = "FILE")]
    pub binary: PathBuf,
    /// Raw samples of the profiled run (perf script text, perf.data or an unsymbolized
    /// profile), read as `convert` reads them; enables the dropped-functions check.
    #[arg(long, value_name = "FILE")]
    pub samples: Option<PathBuf>,
    /// What `--samples` is (auto: perf.data by its magic, an unsymbolized profile by its
    /// first lines, else perf script text).
    #[arg(long, value_enum, default_value = "auto")]
    pub samples_format: SamplesFormat,
    /// Only MMAP2 events of this process id place the binary (0: any), as for `convert`.
    #[arg(long, value_name = "PID", default_value_t = 0)]
    pub pid: u32,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    /// Relative tolerance of the consistency check (0: exact).
    #[arg(long, value_name = "FRACTION", default_value_t = VerifyOptions::default().tolerance)]
    pub tolerance: f64,
    /// Density below which the density check fails (llvm-profgen's
    /// --profile-density-threshold).
    #[arg(long, value_name = "N", default_value_t = verify::DENSITY_THRESHOLD)]
    pub density_threshold: f64,
    /// Share of samples, per million, the density is taken over (llvm-profgen's
    /// --profile-density-cutoff-hot).
    #[arg(long, value_name = "N", default_value_t = verify::DENSITY_CUTOFF_HOT)]
    pub density_cutoff_hot: u32,
    /// Raw samples a function needs to be reported as dropped.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub min_dropped_samples: u64,
}

const AFTER_HELP: &str = "\
Checks:
  stale        probe-based functions whose !CFGChecksum differs from the binary's
               .pseudo_probe_desc (the compiler ignores their profiles)
  dropped      functions with samples in --samples that the profile lacks
  consistency  per probe-based function: call-site counts vs call targets, total vs
               block counts + inlinee totals, head vs entry-probe count
  density      llvm-profgen's profile density below --density-threshold

Exit status: 0 every check passed, 3 a check failed, 1 error, 2 usage.

Examples:
  pgo-agent verify --profile app.txt --binary ./app
  pgo-agent verify --profile app.txt --binary ./app --samples perf.data --json";

/// What a `--samples` file is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SamplesFormat {
    /// Decide from the contents.
    Auto,
    /// perf script text.
    Perfscript,
    /// perf.data.
    Perfdata,
    /// An unsymbolized profile (`convert --skip-symbolization`).
    Unsymbolized,
}

/// Runs `pgo-agent verify`.
pub fn run(args: VerifyArgs) -> anyhow::Result<ExitCode> {
    let report = verify_files(&args)?;
    let out = if args.json {
        serde_json::to_string_pretty(&report_json(&args, &report))? + "\n"
    } else {
        human_report(&args, &report)
    };
    print!("{out}");
    Ok(if report.passed() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(EXIT_CHECK_FAILED)
    })
}

/// Reads the profile, the binary and the samples named in `args` and runs every check.
pub fn verify_files(args: &VerifyArgs) -> anyhow::Result<VerifyReport> {
    let profile = read_profile(&args.profile)?;
    let binary = crate::binary_loading::load_binary_for(&args.binary, None, true)?;
    let counters = match &args.samples {
        Some(path) => Some(read_samples(args, path, &binary)?),
        None => None,
    };
    let options = VerifyOptions {
        tolerance: args.tolerance,
        density_threshold: args.density_threshold,
        density_cutoff_hot: args.density_cutoff_hot,
        min_dropped_samples: args.min_dropped_samples,
    };
    Ok(verify::verify(
        &profile,
        &binary,
        counters.as_ref(),
        &options,
    ))
}

/// Reads a sample profile: extbinary (recognised by its magic) or text.
pub fn read_profile(path: &Path) -> anyhow::Result<SampleProfile> {
    Ok(profgen::read_sample_profile(path)?)
}

/// Reads `--samples` through `convert`'s pipeline.
fn read_samples(
    args: &VerifyArgs,
    path: &Path,
    binary: &ProfiledBinary,
) -> anyhow::Result<CounterSet> {
    let format = match args.samples_format {
        SamplesFormat::Auto => detect_samples_format(path)?,
        f => f,
    };
    let flag = match format {
        SamplesFormat::Perfdata => "--perfdata",
        SamplesFormat::Unsymbolized => "--unsymbolized-profile",
        _ => "--perfscript",
    };
    let argv = [
        "verify-samples".to_string(),
        flag.to_string(),
        path.display().to_string(),
        "--binary".to_string(),
        args.binary.display().to_string(),
        "--output".to_string(),
        "-".to_string(),
        format!("--pid={}", args.pid),
    ];
    let matches = ConvertArgs::augment_args(clap::Command::new("verify-samples"))
        .try_get_matches_from(argv)
        .context("building the sample-reading options")?;
    let convert_args = ConvertArgs::from_arg_matches(&matches)?;
    Ok(profgen::read_counters(&convert_args.to_options(), binary)?)
}

/// perf.data by its magic; an unsymbolized profile when the first line is a context
/// (`[...]`) or a count followed by a range line (`a-b:n`); else perf script.
fn detect_samples_format(path: &Path) -> anyhow::Result<SamplesFormat> {
    use std::io::Read;
    let mut head = Vec::with_capacity(4096);
    std::fs::File::open(path)
        .with_context(|| format!("opening {}", path.display()))?
        .take(4096)
        .read_to_end(&mut head)
        .with_context(|| format!("reading {}", path.display()))?;
    if head.starts_with(b"PERFILE2") {
        return Ok(SamplesFormat::Perfdata);
    }
    let text = String::from_utf8_lossy(&head);
    let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
    let first = lines.next().unwrap_or("");
    let second = lines.next().unwrap_or("");
    let is_range = |l: &str| {
        l.split_once('-').is_some_and(|(a, rest)| {
            rest.split_once(':').is_some_and(|(b, n)| {
                [a, b].iter().all(|x| u64::from_str_radix(x, 16).is_ok())
                    && n.parse::<u64>().is_ok()
            })
        })
    };
    let unsymbolized = (first.starts_with('[') && first.ends_with(']'))
        || (!first.is_empty() && first.bytes().all(|b| b.is_ascii_digit()) && is_range(second));
    Ok(if unsymbolized {
        SamplesFormat::Unsymbolized
    } else {
        SamplesFormat::Perfscript
    })
}

fn verdict(passed: bool) -> &'static str {
    if passed {
        "PASS"
    } else {
        "FAIL"
    }
}

/// The human-readable report.
pub fn human_report(args: &VerifyArgs, r: &VerifyReport) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "verify {} against {}",
        args.profile.display(),
        args.binary.display()
    );
    let st = &r.stale;
    let _ = writeln!(
        s,
        "stale        {}  {} of {} probe-based functions have a CFG checksum other than the binary's",
        verdict(st.passed()),
        st.stale.len(),
        st.checked
    );
    for f in &st.stale {
        let profile: Vec<String> = f
            .profile_checksums
            .iter()
            .map(|c| format!("{c:#x}"))
            .collect();
        let _ = writeln!(
            s,
            "    {}  profile {}  binary {:#x}",
            f.name,
            profile.join(","),
            f.binary_checksum
        );
    }
    if st.binary_without_probes {
        let _ = writeln!(
            s,
            "    the profile is probe-based and the binary has no pseudo probes (built \
             without -fpseudo-probe-for-profiling): clang ignores the whole profile for it"
        );
    } else if !st.not_in_binary.is_empty() {
        let _ = writeln!(
            s,
            "    (no probe descriptor in the binary, ignored: {})",
            st.not_in_binary.join(", ")
        );
    }
    match &r.dropped {
        None => {
            let _ = writeln!(s, "dropped      SKIP  no --samples given");
        }
        Some(d) => {
            let _ = writeln!(
                s,
                "dropped      {}  {} of {} sampled functions are missing from the profile",
                verdict(d.passed()),
                d.dropped.len(),
                d.sampled
            );
            for f in &d.dropped {
                let _ = writeln!(s, "    {}  {} samples", f.name, f.samples);
            }
        }
    }
    let c = &r.consistency;
    let _ = writeln!(
        s,
        "consistency  {}  {} issues in {} probe-based function profiles ({} relations, tolerance {}){}",
        verdict(c.passed()),
        c.issues.len(),
        c.checked,
        if c.exact { "exact CS" } else { "flat" },
        args.tolerance,
        if c.skipped_line_based > 0 {
            format!(", {} line-based skipped", c.skipped_line_based)
        } else {
            String::new()
        }
    );
    for i in &c.issues {
        let what = match &i.kind {
            IssueKind::CallSite {
                location,
                count,
                targets,
            } => format!("call site {location}: count {count}, call targets {targets}"),
            IssueKind::Total {
                total,
                sum,
                lower_bound,
            } if lower_bound == sum => {
                format!("total {total}, body + inlinee totals {sum}")
            }
            IssueKind::Total {
                total,
                sum,
                lower_bound,
            } => format!("total {total}, expected {lower_bound}..={sum}"),
            IssueKind::Entry { head, entry_count } => {
                format!("head {head}, entry probe count {entry_count}")
            }
        };
        let _ = writeln!(s, "    [{}] {what}", i.context);
    }
    let d = &r.density;
    let _ = writeln!(
        s,
        "density      {}  {:.1} (threshold {}, hot count threshold {})",
        verdict(d.passed()),
        d.density,
        d.threshold,
        d.hot_count_threshold
    );
    for line in density_advice(d) {
        let _ = writeln!(s, "             {line}");
    }
    let _ = writeln!(s, "result: {}", verdict(r.passed()));
    s
}

fn stale_json(r: &StaleReport) -> Value {
    json!({
        "passed": r.passed(),
        "checked": r.checked,
        "functions": r.stale.iter().map(|f| json!({
            "name": f.name,
            "profile_checksums": f.profile_checksums,
            "binary_checksum": f.binary_checksum,
        })).collect::<Vec<_>>(),
        "not_in_binary": r.not_in_binary,
        "binary_without_probes": r.binary_without_probes,
    })
}

fn dropped_json(r: &DroppedReport) -> Value {
    json!({
        "passed": r.passed(),
        "sampled": r.sampled,
        "functions": r.dropped.iter().map(|f| json!({
            "name": f.name,
            "samples": f.samples,
        })).collect::<Vec<_>>(),
    })
}

fn consistency_json(r: &ConsistencyReport) -> Value {
    let issues: Vec<Value> = r
        .issues
        .iter()
        .map(|i| match &i.kind {
            IssueKind::CallSite {
                location,
                count,
                targets,
            } => json!({"context": i.context, "kind": "call_site",
                        "location": location.to_string(), "count": count, "targets": targets}),
            IssueKind::Total {
                total,
                sum,
                lower_bound,
            } => json!({"context": i.context, "kind": "total",
                        "total": total, "sum": sum, "lower_bound": lower_bound}),
            IssueKind::Entry { head, entry_count } => json!({"context": i.context,
                        "kind": "entry", "head": head, "entry_count": entry_count}),
        })
        .collect();
    json!({
        "passed": r.passed(),
        "exact": r.exact,
        "checked": r.checked,
        "skipped_line_based": r.skipped_line_based,
        "issues": issues,
    })
}

/// What a failed density check means and what to do, one line each (none when it
/// passed or the profile is empty).
pub fn density_advice(d: &DensityReport) -> Vec<String> {
    let Some(factor) = d.more_samples_factor() else {
        return Vec::new();
    };
    let mut lines = vec![format!(
        "about {factor:.1}x the samples reach the threshold: sampling at the same rate, \
         {factor:.1}x the time sampled so far (docs/operations.md#profile-density)"
    )];
    if d.stack_samples_only {
        lines.push(
            "no call targets: samples without branch stack (cpu-clock call \
             stacks counted by leading IP). Below the threshold such a profile still guides \
             clang (hot blocks, inlining, layout); more samples make it better: sample longer, \
             or raise sampling.cpu_clock_frequency_hz"
                .to_string(),
        );
    }
    lines
}

fn density_json(r: &DensityReport) -> Value {
    json!({
        "passed": r.passed(),
        "density": r.density,
        "threshold": r.threshold,
        "hot_count_threshold": r.hot_count_threshold,
        "more_samples_factor": r.more_samples_factor(),
        "stack_samples_only": r.stack_samples_only,
    })
}

/// The JSON report.
pub fn report_json(args: &VerifyArgs, r: &VerifyReport) -> Value {
    json!({
        "profile": args.profile.display().to_string(),
        "binary": args.binary.display().to_string(),
        "passed": r.passed(),
        "stale": stale_json(&r.stale),
        "dropped": r.dropped.as_ref().map(dropped_json),
        "consistency": consistency_json(&r.consistency),
        "density": density_json(&r.density),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use profgen::sample_profile::is_extbinary;

    #[test]
    fn extbinary_magic_is_recognised() {
        let mut bytes = Vec::new();
        let mut v = exporter::format::extbinary::section::MAGIC;
        loop {
            let b = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                bytes.push(b);
                break;
            }
            bytes.push(b | 0x80);
        }
        // The first bytes of an extbinary file llvm-profgen-19 writes.
        assert_eq!(bytes[..4], [0x84, 0xe4, 0xd0, 0xb1]);
        assert!(is_extbinary(&bytes));
        assert!(!is_extbinary(b"main:10:1\n 1: 10\n"));
    }

    #[test]
    fn samples_format_is_detected_from_the_first_lines() {
        let dir = std::env::temp_dir().join(format!("verify-detect-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let cases: [(&str, &[u8], SamplesFormat); 4] = [
            ("data", b"PERFILE2\x00\x00", SamplesFormat::Perfdata),
            ("cs", b"[]\n  2\n  50-6b:1\n", SamplesFormat::Unsymbolized),
            (
                "flat",
                b"21\n50-6b:1\n140-14f:546\n",
                SamplesFormat::Unsymbolized,
            ),
            (
                "script",
                b"PERF_RECORD_MMAP2 1/1: [0x1000(0x1000) @ 0 0:0 0 0]: r-xp /a\n\n\t    401136\n",
                SamplesFormat::Perfscript,
            ),
        ];
        for (name, bytes, want) in cases {
            let path = dir.join(name);
            std::fs::write(&path, bytes).unwrap();
            assert_eq!(detect_samples_format(&path).unwrap(), want, "{name}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
