//! `pgo-agent record`: run a program under the software LBR recorder and write what
//! `perf record -e BR_INST_RETIRED.NEAR_TAKEN:uppp -c N -b -g` would have recorded on an
//! Intel machine, plus the exact ground truth.

use std::collections::HashSet;
use std::ffi::OsString;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use recorder::{RecordOptions, TraceeExit};

mod stop;

use stop::{ProgramHandle, StopRequest, StopWatcher};

/// Arguments of `pgo-agent record`.
///
/// Runs PROG under ptrace, one instruction at a time, and records every taken near branch
/// (jumps, taken conditional jumps, calls, returns). Every N-th taken branch becomes a sample
/// exactly as Intel PEBS + LBR would produce it: the IP is the branch target, the branch
/// stack holds the last D taken branches newest first, and the call chain is the kernel's
/// frame-pointer walk (with its blind spot in function prologues). Build PROG with
/// `-fno-omit-frame-pointer -mno-omit-leaf-frame-pointer` for useful call chains.
///
/// Slow by design (every instruction is a ptrace stop, roughly 10^4 instructions per
/// second): meant for test programs of a few hundred thousand instructions. Only the main thread is
/// followed; a program that creates threads, forks or execs again is stopped there (what
/// was recorded until then is written, exit status 1). x86-64 programs only.
///
/// A progress line (steps, samples, steps/s) is shown while it runs when stderr is a
/// terminal (or with `--progress`). SIGINT or SIGTERM stops the recording, also while the
/// program waits in a system call: the program is killed and what was recorded until then
/// is written (exit status 130); a second signal exits at once. The output files are
/// created before the program starts.
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
    /// Run PROG with an empty environment (plus the `--env` entries), so a recording does
    /// not depend on the shell it is made from: the environment sits on PROG's initial
    /// stack, and its size changes the loader's work and so which branches the period
    /// lands on.
    #[arg(long)]
    pub clear_env: bool,
    /// Set NAME=VALUE in PROG's environment (repeatable; overrides an inherited NAME).
    #[arg(long = "env", value_name = "NAME=VALUE", value_parser = parse_env_entry)]
    pub env: Vec<String>,
    /// Print the progress line every second even when stderr is not a terminal (one line
    /// each time).
    #[arg(long)]
    pub progress: bool,
    /// Stop after this many seconds as SIGINT stops it (the program is killed, what was
    /// recorded is written), with exit status 0: a bounded recording of a long-running
    /// program.
    #[arg(long, value_name = "SECS")]
    pub max_secs: Option<u64>,
    /// The program and its arguments (after `--`).
    #[arg(required = true, last = true, value_name = "PROG [ARGS...]")]
    pub command: Vec<String>,
}

fn parse_env_entry(entry: &str) -> Result<String, String> {
    match entry.split_once('=') {
        Some((name, _)) if !name.is_empty() => Ok(entry.to_string()),
        _ => Err(format!("`{entry}` is not NAME=VALUE")),
    }
}

/// The tracee's environment: `None` (inherit this process's) unless `--clear-env` or an
/// `--env` entry asks otherwise.
fn tracee_environment(clear: bool, set: &[String]) -> Option<Vec<OsString>> {
    if !clear && set.is_empty() {
        return None;
    }
    let overridden: HashSet<&str> = set
        .iter()
        .filter_map(|e| e.split_once('='))
        .map(|(n, _)| n)
        .collect();
    let inherited = std::env::vars_os()
        .filter(|_| !clear)
        .filter(|(name, _)| !name.to_str().is_some_and(|n| overridden.contains(n)))
        .map(|(name, value)| {
            let mut entry = name;
            entry.push("=");
            entry.push(value);
            entry
        });
    Some(inherited.chain(set.iter().map(OsString::from)).collect())
}

/// Runs `pgo-agent record`.
pub fn run(args: RecordArgs) -> anyhow::Result<ExitCode> {
    if args.output.is_none() && args.script.is_none() && args.truth.is_none() {
        anyhow::bail!("nothing to write: give at least one of --output, --script, --truth");
    }
    let outputs = [
        ("--output", &args.output),
        ("--script", &args.script),
        ("--truth", &args.truth),
    ];
    check_outputs(&outputs)?;
    let options = RecordOptions {
        period: args.period,
        lbr_depth: args.lbr_depth,
        disable_aslr: !args.aslr,
        environment: tracee_environment(args.clear_env, &args.env),
        ..RecordOptions::default()
    };
    crate::signals::install()?;
    let stop = StopRequest {
        deadline: args
            .max_secs
            .map(|secs| std::time::Instant::now() + std::time::Duration::from_secs(secs)),
    };
    let mut control = Control::new(args.progress, stop);
    let watcher = StopWatcher::start(control.program.clone(), stop);
    let recorded = recorder::record_with(&args.command, &options, &mut control);
    let killed_for_stop = watcher.finish();
    // Why it stopped, as of now (the outputs take a while to write): a signal wins.
    let past_deadline = !StopRequest::signalled() && stop.past_deadline();
    let outcome = recorded.with_context(|| format!("recording `{}`", args.command.join(" ")))?;
    control.end_line();

    // Every file is written, whatever another one's error.
    let failed: Vec<anyhow::Error> = [
        args.output
            .as_ref()
            .map(|path| write_perf_data(path, &outcome.recording)),
        args.script
            .as_ref()
            .map(|path| write_script(path, &outcome.recording)),
        args.truth
            .as_ref()
            .map(|path| write_truth(path, &outcome.truth)),
    ]
    .into_iter()
    .flatten()
    .filter_map(Result::err)
    .collect();

    let s = &outcome.stats;
    eprintln!(
        "pgo-agent record: {} steps, {} taken branches, {} samples, {:.3} s, {:.0} steps/s",
        s.steps,
        s.taken_branches,
        s.samples,
        s.wall.as_secs_f64(),
        s.steps_per_sec()
    );
    if s.samples == 0 && s.taken_branches > 0 {
        eprintln!(
            "pgo-agent record: warning: no sample: the program took {} taken branches, fewer \
             than --period {}",
            s.taken_branches, args.period
        );
    }
    let status = match (&outcome.exit, killed_for_stop) {
        (TraceeExit::Stopped, _) | (TraceeExit::Killed(libc::SIGKILL), true) if past_deadline => {
            eprintln!(
                "pgo-agent record: stopped after --max-secs {}; the program was killed, the \
                 samples until then are written",
                args.max_secs.unwrap_or_default()
            );
            ExitCode::SUCCESS
        }
        (TraceeExit::Stopped, _) | (TraceeExit::Killed(libc::SIGKILL), true) => {
            eprintln!(
                "pgo-agent record: stopped by a signal; the program was killed, the samples \
                 until then are written"
            );
            ExitCode::from(130)
        }
        (TraceeExit::Exited(code), _) => ExitCode::from(u8::try_from(code & 0xff).unwrap_or(1)),
        (TraceeExit::Killed(sig), _) => {
            eprintln!("pgo-agent record: the program was killed by signal {sig}");
            ExitCode::from(u8::try_from(128 + (sig & 0x7f)).unwrap_or(1))
        }
        (TraceeExit::Refused(why), _) => {
            eprintln!(
                "pgo-agent record: error: {why}; the program was killed, the samples until \
                 then are written"
            );
            ExitCode::from(1)
        }
    };
    // The first write error is the command's; the others are said before it.
    let mut failed = failed.into_iter();
    if let Some(first) = failed.next() {
        for e in failed {
            eprintln!("pgo-agent record: error: {e:#}");
        }
        return Err(first);
    }
    Ok(status)
}

/// Writes the perf.data at `path`.
fn write_perf_data(path: &Path, recording: &collector::Recording) -> anyhow::Result<()> {
    collector::perf_data::write_perf_data(path, recording)
        .with_context(|| format!("writing {}", path.display()))
}

/// Writes the perf script text at `path`, in large writes: the script is then cached in
/// large folios, cheap to map for the `convert` that reads it (see
/// `collector::large_writes`).
fn write_script(path: &Path, recording: &collector::Recording) -> anyhow::Result<()> {
    let file = File::create(path).with_context(|| format!("creating {}", path.display()))?;
    let mut out = collector::large_writes::large_writer(file);
    collector::perf_script::writer::write_perf_script(&mut out, recording)
        .and_then(|()| out.flush())
        .with_context(|| format!("writing {}", path.display()))
}

/// Writes the ground truth at `path` as JSON.
fn write_truth(path: &Path, truth: &collector::ground_truth::GroundTruth) -> anyhow::Result<()> {
    let mut json = serde_json::to_string_pretty(truth)?;
    json.push('\n');
    std::fs::write(path, json).with_context(|| format!("writing {}", path.display()))
}

/// Checks before the program runs (a recording can take minutes) that every output can be
/// written (an existing file is left as it is until the recording is written), and that no
/// two are one file: `-` (standard output) is refused, since the
/// outputs are files of their own kinds.
fn check_outputs(outputs: &[(&str, &Option<PathBuf>)]) -> anyhow::Result<()> {
    let given: Vec<(&str, &PathBuf)> = outputs
        .iter()
        .filter_map(|(flag, path)| path.as_ref().map(|p| (*flag, p)))
        .collect();
    for (i, (flag, path)) in given.iter().enumerate() {
        anyhow::ensure!(
            path.as_os_str() != "-",
            "{flag} -: `record` writes files, not the standard output; give a file name"
        );
        if let Some((other, _)) = given[..i].iter().find(|(_, p)| p == path) {
            anyhow::bail!("{other} and {flag} are the same file {}", path.display());
        }
        // Opened for writing without truncating (a failure later keeps the file's
        // contents); a file that was not there is removed again.
        let existed = path.exists();
        std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .with_context(|| format!("{flag} {}: cannot be created", path.display()))?;
        if !existed {
            let _ = std::fs::remove_file(path);
        }
    }
    Ok(())
}

/// The recorder's control: stops at SIGINT/SIGTERM, draws the progress line.
struct Control {
    /// The program once started, for [`StopWatcher`].
    program: std::sync::Arc<ProgramHandle>,
    /// What stops the recording.
    stop: StopRequest,
    /// How the progress line is drawn, if at all.
    progress: Option<ProgressLine>,
    /// When the line was last drawn.
    last: std::time::Instant,
    /// Whether a line is drawn that ends without a newline yet.
    open: bool,
}

/// Where the progress line goes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum ProgressLine {
    /// Redrawn in place on a terminal.
    InPlace,
    /// One line each time (`--progress` without a terminal).
    Lines,
}

/// Time between two progress lines.
const PROGRESS_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

impl Control {
    fn new(forced: bool, stop: StopRequest) -> Control {
        use std::io::IsTerminal;
        let progress = if std::io::stderr().is_terminal() {
            Some(ProgressLine::InPlace)
        } else {
            forced.then_some(ProgressLine::Lines)
        };
        Control {
            program: Default::default(),
            stop,
            progress,
            last: std::time::Instant::now(),
            open: false,
        }
    }

    /// Ends a line drawn in place.
    fn end_line(&mut self) {
        if self.open {
            eprintln!();
            self.open = false;
        }
    }
}

impl recorder::RecordControl for Control {
    fn started(&mut self, pid: i32) {
        self.program.set(pid);
    }

    fn poll(&mut self, stats: &recorder::RecordStats) -> bool {
        if self.stop.asked() {
            return true;
        }
        if let Some(line) = self.progress {
            if self.last.elapsed() >= PROGRESS_EVERY {
                self.last = std::time::Instant::now();
                let text = format!(
                    "pgo-agent record: {} steps, {} samples, {:.0} steps/s",
                    stats.steps,
                    stats.samples,
                    stats.steps_per_sec()
                );
                match line {
                    ProgressLine::InPlace => {
                        eprint!("\r{text}\x1b[K");
                        self.open = true;
                    }
                    ProgressLine::Lines => eprintln!("{text}"),
                }
            }
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_entries_need_a_name_and_an_equals_sign() {
        assert_eq!(parse_env_entry("A=b=c").unwrap(), "A=b=c");
        assert_eq!(parse_env_entry("EMPTY=").unwrap(), "EMPTY=");
        assert!(parse_env_entry("=x").unwrap_err().contains("`=x`"));
        assert!(parse_env_entry("NOVALUE").is_err());
    }

    #[test]
    fn the_tracee_environment_is_inherited_cleared_or_overridden() {
        assert_eq!(tracee_environment(false, &[]), None);
        let set = ["PGO_AGENT_A=1".to_string(), "PATH=/x".to_string()];
        assert_eq!(
            tracee_environment(true, &set),
            Some(vec![
                OsString::from("PGO_AGENT_A=1"),
                OsString::from("PATH=/x")
            ])
        );
        // Inherited, with PATH overridden (once, at the end) and the new entry added.
        let env = tracee_environment(false, &set).unwrap();
        let paths: Vec<&OsString> = env
            .iter()
            .filter(|e| e.to_string_lossy().starts_with("PATH="))
            .collect();
        assert_eq!(paths, [&OsString::from("PATH=/x")]);
        let kept = std::env::vars_os()
            .filter(|(name, _)| name != "PATH" && name != "PGO_AGENT_A")
            .count();
        assert_eq!(env.len(), kept + 2);
        assert_eq!(env.last(), Some(&OsString::from("PATH=/x")));
    }
}
