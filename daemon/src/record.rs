//! `pgo-agent record`: run a program under the software LBR recorder and write what
//! `perf record -e BR_INST_RETIRED.NEAR_TAKEN:uppp -c N -b -g` would have recorded on an
//! Intel machine, plus the exact ground truth.

use std::fs::File;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use collector::recorder::{self, RecordOptions, TraceeExit};

/// Arguments of `pgo-agent record`.
///
/// Runs PROG under ptrace, one instruction at a time, and records every taken near branch
/// (jumps, taken conditional jumps, calls, returns). Every N-th taken branch becomes a sample
/// exactly as Intel PEBS + LBR would produce it: the IP is the branch target, the branch
/// stack holds the last D taken branches newest first, and the call chain is the kernel's
/// frame-pointer walk (with its blind spot in function prologues). Build PROG with
/// `-fno-omit-frame-pointer -mno-omit-leaf-frame-pointer` for useful call chains.
///
/// Slow by design (every instruction is a ptrace stop, roughly 10^5–10^6 instructions per
/// second): meant for test programs of a few million instructions. Only the main thread is
/// followed; a program that creates threads, forks or execs again is refused.
///
/// Example: `pgo-agent record --script out.perfscript --truth truth.json -- ./prog arg`
#[derive(Debug, clap::Args)]
pub struct RecordArgs {
    /// Sample every N-th taken branch (`perf record -c N`). A prime avoids locking onto
    /// loop periods.
    #[arg(long, value_name = "N", default_value_t = recorder::DEFAULT_PERIOD)]
    pub period: u64,
    /// LBR entries per sample (1..=32; Intel Arch LBR has up to 32).
    #[arg(long = "lbr-depth", value_name = "D", default_value_t = recorder::DEFAULT_LBR_DEPTH)]
    pub lbr_depth: usize,
    /// Write a perf.data file that `perf script` and `llvm-profgen --perfdata` read.
    #[arg(long, value_name = "FILE.data")]
    pub output: Option<PathBuf>,
    /// Write the samples as `perf script -F ip,brstack --show-mmap-events` text with call
    /// stacks (llvm-profgen `--perfscript` input).
    #[arg(long, value_name = "FILE.perfscript")]
    pub script: Option<PathBuf>,
    /// Write the exact execution counts (per instruction and per taken branch edge, in
    /// binary-relative addresses) as JSON.
    #[arg(long, value_name = "FILE.json")]
    pub truth: Option<PathBuf>,
    /// Keep address-space randomisation on (by default it is disabled for the tracee, so
    /// repeated recordings of the same program give the same addresses).
    #[arg(long)]
    pub aslr: bool,
    /// The program and its arguments (after `--`).
    #[arg(required = true, last = true, value_name = "PROG [ARGS...]")]
    pub command: Vec<String>,
}

/// Runs `pgo-agent record`.
pub fn run(args: RecordArgs) -> anyhow::Result<ExitCode> {
    if args.output.is_none() && args.script.is_none() && args.truth.is_none() {
        anyhow::bail!("nothing to write: give at least one of --output, --script, --truth");
    }
    let options = RecordOptions {
        period: args.period,
        lbr_depth: args.lbr_depth,
        disable_aslr: !args.aslr,
        ..RecordOptions::default()
    };
    let outcome = recorder::record(&args.command, &options)
        .with_context(|| format!("recording `{}`", args.command.join(" ")))?;

    if let Some(path) = &args.output {
        collector::perf_data::write_perf_data(path, &outcome.recording)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if let Some(path) = &args.script {
        let file = File::create(path).with_context(|| format!("creating {}", path.display()))?;
        // In large writes: the script is then cached in large folios, cheap to map for the
        // `convert` that reads it (see `collector::large_writes`).
        let mut out = collector::large_writes::large_writer(file);
        collector::perf_script::writer::write_perf_script(&mut out, &outcome.recording)
            .and_then(|()| out.flush())
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if let Some(path) = &args.truth {
        let mut json = serde_json::to_string_pretty(&outcome.truth)?;
        json.push('\n');
        std::fs::write(path, json).with_context(|| format!("writing {}", path.display()))?;
    }

    let s = &outcome.stats;
    eprintln!(
        "pgo-agent record: {} steps, {} taken branches, {} samples, {:.3} s, {:.0} steps/s",
        s.steps,
        s.taken_branches,
        s.samples,
        s.wall.as_secs_f64(),
        s.steps_per_sec()
    );
    Ok(match outcome.exit {
        TraceeExit::Exited(code) => ExitCode::from(u8::try_from(code & 0xff).unwrap_or(1)),
        TraceeExit::Killed(sig) => {
            eprintln!("pgo-agent record: the program was killed by signal {sig}");
            ExitCode::from(u8::try_from(128 + (sig & 0x7f)).unwrap_or(1))
        }
    })
}
