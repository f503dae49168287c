//! The corpus of test programs (`tests/programs/`): built once into `target/corpus/`, and
//! recorded once per test process with the software LBR recorder.
//!
//! ```no_run
//! use e2e::corpus::{self, Variant};
//! let prog = corpus::program("loop_count", Variant::Probe).unwrap();
//! let rec = corpus::record(&prog).unwrap();
//! println!("{} {}", rec.perf_script.display(), rec.truth.totals.steps);
//! ```

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex, OnceLock};

use recorder::{GroundTruth, RecordOptions, RecordStats};

/// Every corpus program, in the order tests/programs/README.md lists them.
pub const PROGRAM_NAMES: &[&str] = &[
    "loop_count",
    "recursion",
    "inline_tail",
    "inlined_calls",
    "virtual_calls",
    "interp",
    "unroll",
    "shlib_user",
];

/// The compile flags `tests/programs/build.sh` gives both variants (the probe variant adds
/// `-fpseudo-probe-for-profiling`).
pub const CORPUS_CFLAGS: &[&str] = &[
    "-O2",
    "-g",
    "-fdebug-info-for-profiling",
    "-fno-omit-frame-pointer",
    "-mno-omit-leaf-frame-pointer",
];

/// The link flags `tests/programs/build.sh` gives a PIE program.
pub const PIE_LINK_FLAGS: &[&str] = &["-fPIE", "-pie", "-Wl,--as-needed", "-Wl,--build-id"];

/// The shared library built with the corpus (loaded by `shlib_user`).
pub const SHARED_LIBRARY: &str = "libpgoshared.so";

/// The sampling period the tests record with: a prime well below the default so even the
/// small programs give a few hundred samples.
pub const TEST_PERIOD: u64 = 97;

/// The two builds of each program.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Variant {
    /// `-fpseudo-probe-for-profiling` (CSSPGO probe profiles).
    Probe,
    /// Line tables and discriminators only (CSSPGO line-based profiles).
    Lines,
}

impl Variant {
    /// Both variants.
    pub const ALL: [Variant; 2] = [Variant::Probe, Variant::Lines];

    /// The sub-directory of the build output.
    pub fn dir_name(self) -> &'static str {
        match self {
            Variant::Probe => "probe",
            Variant::Lines => "lines",
        }
    }
}

impl fmt::Display for Variant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.dir_name())
    }
}

/// One built corpus program, in the run directory [`build`] returns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CorpusProgram {
    /// Program name (file name of the binary).
    pub name: &'static str,
    /// Which build.
    pub variant: Variant,
    /// Absolute path of the binary.
    pub binary: PathBuf,
    /// Arguments (none: every corpus program takes no input).
    pub args: Vec<String>,
}

/// A recorded corpus program: the files the recorder wrote and its exact truth.
#[derive(Clone, Debug)]
pub struct Recorded {
    /// The program.
    pub program: CorpusProgram,
    /// perf.data written by `collector::perf_data::write_perf_data`.
    pub perf_data: PathBuf,
    /// perf script text written by the recorder's own writer.
    pub perf_script: PathBuf,
    /// Ground truth JSON file.
    pub truth_json: PathBuf,
    /// The ground truth, parsed.
    pub truth: GroundTruth,
    /// The in-memory recording.
    pub recording: collector::Recording,
    /// Counters of the run.
    pub stats: RecordStats,
}

/// The workspace `target/` directory (honours `CARGO_TARGET_DIR`).
pub fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("..")
            .join("target"),
    }
}

/// Where the corpus is built: `target/corpus/{probe,lines}/`.
pub fn corpus_dir() -> PathBuf {
    target_dir().join("corpus")
}

/// `tests/programs/`.
pub fn sources_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("programs")
}

/// Finds an executable in `$PATH`.
pub fn find_tool(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// True when all `tools` are installed; otherwise prints which are missing (the caller
/// then skips its test with that message).
pub fn tools_available(test: &str, tools: &[&str]) -> bool {
    let missing: Vec<&str> = tools
        .iter()
        .copied()
        .filter(|t| find_tool(t).is_none())
        .collect();
    if missing.is_empty() {
        return true;
    }
    eprintln!(
        "SKIPPED {test}: missing {} (apt-get install clang-19 llvm-19 linux-perf)",
        missing.join(", ")
    );
    false
}

/// Builds the corpus (once per process; across processes a file lock serialises builds and
/// a stamp of the sources' contents skips a build that is up to date) and returns the
/// directory the programs run from: a copy of the build whose canonical path is
/// [`RUN_DIR_LENGTH`] bytes long whatever the checkout's path. A program's path is on its
/// initial stack and the loader expands `$ORIGIN` from it, so its length moves the stack and
/// the loader's work before `main`, and with them which branches the sampling period lands
/// on: run from there, every checkout records the same samples.
pub fn build() -> Result<PathBuf, String> {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BUILT
        .get_or_init(|| build_uncached().and_then(|out| fixed_length_copy(&out)))
        .clone()
}

/// Copies `out/{probe,lines}/` to the fixed-length run directory (files that differ only).
fn fixed_length_copy(out: &Path) -> Result<PathBuf, String> {
    let base = out
        .canonicalize()
        .map_err(|e| format!("{}: {e}", out.display()))?
        .join("run");
    let used = base.as_os_str().len() + 1;
    let run_dir = if used < RUN_DIR_LENGTH {
        base.join("p".repeat(RUN_DIR_LENGTH - used))
    } else {
        eprintln!(
            "note: {} is longer than {RUN_DIR_LENGTH} bytes; the recordings depend on its length",
            base.display()
        );
        base
    };
    for variant in Variant::ALL {
        let (from_dir, to_dir) = (
            out.join(variant.dir_name()),
            run_dir.join(variant.dir_name()),
        );
        std::fs::create_dir_all(&to_dir).map_err(|e| format!("{}: {e}", to_dir.display()))?;
        let entries =
            std::fs::read_dir(&from_dir).map_err(|e| format!("{}: {e}", from_dir.display()))?;
        for entry in entries {
            let from = entry
                .map_err(|e| format!("{}: {e}", from_dir.display()))?
                .path();
            let to = to_dir.join(from.file_name().unwrap_or_default());
            let bytes = std::fs::read(&from).map_err(|e| format!("{}: {e}", from.display()))?;
            if std::fs::read(&to).ok().as_deref() == Some(&bytes[..]) {
                continue;
            }
            // Copied then renamed: another test process running the old copy keeps its file.
            let partial = to.with_extension(format!("partial-{}", std::process::id()));
            std::fs::copy(&from, &partial)
                .and_then(|_| std::fs::rename(&partial, &to))
                .map_err(|e| format!("copying {} to {}: {e}", from.display(), to.display()))?;
        }
    }
    Ok(run_dir)
}

fn build_uncached() -> Result<PathBuf, String> {
    let out = corpus_dir();
    std::fs::create_dir_all(&out).map_err(|e| format!("creating {}: {e}", out.display()))?;
    let lock_path = out.join(".lock");
    let lock =
        std::fs::File::create(&lock_path).map_err(|e| format!("{}: {e}", lock_path.display()))?;
    lock.lock()
        .map_err(|e| format!("locking {}: {e}", lock_path.display()))?;
    let stamp = sources_stamp()?;
    let stamp_path = out.join(".stamp");
    let up_to_date = std::fs::read_to_string(&stamp_path).ok().as_deref() == Some(stamp.as_str())
        && Variant::ALL.iter().all(|v| {
            PROGRAM_NAMES
                .iter()
                .all(|p| out.join(v.dir_name()).join(p).is_file())
        });
    if !up_to_date {
        let script = sources_dir().join("build.sh");
        let output = Command::new("bash")
            .arg(&script)
            .arg(&out)
            .output()
            .map_err(|e| format!("running {}: {e}", script.display()))?;
        if !output.status.success() {
            return Err(format!(
                "{} {} failed ({}):\n{}",
                script.display(),
                out.display(),
                output.status,
                String::from_utf8_lossy(&output.stderr)
            ));
        }
        std::fs::write(&stamp_path, &stamp)
            .map_err(|e| format!("{}: {e}", stamp_path.display()))?;
    }
    Ok(out)
}

/// A digest of every file in `tests/programs/` (names and contents).
fn sources_stamp() -> Result<String, String> {
    use std::hash::{Hash, Hasher};
    let dir = sources_dir();
    let mut names: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file())
        .collect();
    names.sort();
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    for path in &names {
        path.file_name().hash(&mut hasher);
        std::fs::read(path)
            .map_err(|e| format!("{}: {e}", path.display()))?
            .hash(&mut hasher);
    }
    Ok(format!("{:016x}\n", hasher.finish()))
}

/// Every program in both variants (builds the corpus first).
pub fn programs() -> Result<Vec<CorpusProgram>, String> {
    let mut all = Vec::new();
    for variant in Variant::ALL {
        for name in PROGRAM_NAMES {
            all.push(program(name, variant)?);
        }
    }
    Ok(all)
}

/// One program (builds the corpus first).
pub fn program(name: &str, variant: Variant) -> Result<CorpusProgram, String> {
    let name = *PROGRAM_NAMES
        .iter()
        .find(|n| **n == name)
        .ok_or_else(|| format!("no corpus program `{name}`"))?;
    let dir = build()?;
    let binary = dir.join(variant.dir_name()).join(name);
    let binary = binary
        .canonicalize()
        .map_err(|e| format!("{}: {e}", binary.display()))?;
    Ok(CorpusProgram {
        name,
        variant,
        binary,
        args: Vec::new(),
    })
}

type RecordCell = Arc<OnceLock<Result<Recorded, String>>>;

/// Records `program` with [`TEST_PERIOD`] (once per process and program) and writes
/// perf.data, perf script text and the truth under `target/corpus/recordings/<pid>/`.
pub fn record(program: &CorpusProgram) -> Result<Recorded, String> {
    static CELLS: OnceLock<Mutex<HashMap<(String, Variant), RecordCell>>> = OnceLock::new();
    let cell = {
        let mut map = CELLS
            .get_or_init(Default::default)
            .lock()
            .map_err(|_| "poisoned lock".to_string())?;
        map.entry((program.name.to_string(), program.variant))
            .or_default()
            .clone()
    };
    cell.get_or_init(|| record_uncached(program)).clone()
}

/// The canonical length of the directory the corpus programs run from ([`build`]).
const RUN_DIR_LENGTH: usize = 160;

/// The environment variable that pads the recorded programs' environment by N bytes, to
/// record the corpus at another sampling phase (see `tests/programs/README.md`).
pub const ENV_PAD_VARIABLE: &str = "PGO_AGENT_CORPUS_ENV_PAD";

/// The recorded program's environment: empty, so the recordings do not depend on the shell
/// or harness running the tests; [`ENV_PAD_VARIABLE`] adds one entry of its length.
fn tracee_environment() -> Vec<std::ffi::OsString> {
    let pad = std::env::var(ENV_PAD_VARIABLE)
        .ok()
        .and_then(|n| n.parse::<usize>().ok());
    pad.map(|n| format!("PAD={}", "x".repeat(n)).into())
        .into_iter()
        .collect()
}

fn record_uncached(program: &CorpusProgram) -> Result<Recorded, String> {
    let dir = corpus_dir()
        .join("recordings")
        .join(std::process::id().to_string());
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let stem = format!("{}-{}", program.name, program.variant);
    let mut argv = vec![program.binary.to_string_lossy().into_owned()];
    argv.extend(program.args.iter().cloned());
    let options = RecordOptions {
        period: TEST_PERIOD,
        environment: Some(tracee_environment()),
        ..RecordOptions::default()
    };
    let outcome =
        recorder::record(&argv, &options).map_err(|e| format!("recording {stem}: {e}"))?;
    if outcome.exit != recorder::TraceeExit::Exited(0) {
        return Err(format!("{stem} ended with {:?}", outcome.exit));
    }
    let perf_data = dir.join(format!("{stem}.data"));
    collector::perf_data::write_perf_data(&perf_data, &outcome.recording)
        .map_err(|e| format!("writing {}: {e}", perf_data.display()))?;
    let perf_script = dir.join(format!("{stem}.perfscript"));
    let text = collector::perf_script::writer::perf_script_string(&outcome.recording);
    std::fs::write(&perf_script, text).map_err(|e| format!("{}: {e}", perf_script.display()))?;
    let truth_json = dir.join(format!("{stem}.json"));
    let json = serde_json::to_string_pretty(&outcome.truth).map_err(|e| e.to_string())?;
    std::fs::write(&truth_json, json).map_err(|e| format!("{}: {e}", truth_json.display()))?;
    eprintln!(
        "recorded {stem}: {} steps, {} taken branches, {} samples, {:.0} steps/s",
        outcome.stats.steps,
        outcome.stats.taken_branches,
        outcome.stats.samples,
        outcome.stats.steps_per_sec()
    );
    Ok(Recorded {
        program: program.clone(),
        perf_data,
        perf_script,
        truth_json,
        truth: outcome.truth,
        recording: outcome.recording,
        stats: outcome.stats,
    })
}
