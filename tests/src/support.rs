//! Set-up shared by the end-to-end tests: ports, scratch directories, polling, the `spin`
//! workload and MemProf build flags, and running `pgo-agent` and the LLVM oracles.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::{Duration, Instant};

use crate::corpus;

/// clang-19 flags of the MemProf test programs: a `-fmemory-profile` build whose raw
/// profile frames symbolize (line tables, frame pointers, no tail calls folding a frame)
/// and carry a GNU build id.
pub const MEMPROF_CFLAGS: &[&str] = &[
    "-O1",
    "-fmemory-profile",
    "-gmlt",
    "-fdebug-info-for-profiling",
    "-fno-omit-frame-pointer",
    "-mno-omit-leaf-frame-pointer",
    "-fno-optimize-sibling-calls",
    "-Wl,--build-id",
];

/// Whether this process runs as root (perf events system-wide, uprobes, ptrace of others,
/// mounts).
pub fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// Whether a test that samples this host can run: root (system-wide perf events) and
/// `tools`; otherwise prints `SKIPPED <test>: ...` (the caller then returns).
pub fn can_sample(test: &str, tools: &[&str]) -> bool {
    if !is_root() {
        eprintln!("SKIPPED {test}: needs root for system-wide perf events");
        return false;
    }
    corpus::tools_available(test, tools)
}

/// The GNU build id of the ELF file `path`, in hex.
pub fn build_id_hex(path: &Path) -> String {
    use object::Object;
    let data = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let file = object::File::parse(&*data).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let id = file
        .build_id()
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .unwrap_or_else(|| panic!("{}: no GNU build id", path.display()));
    id.iter().map(|b| format!("{b:02x}")).collect()
}

/// A TCP port on 127.0.0.1 that was free a moment ago.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .expect("binding an ephemeral port")
        .local_addr()
        .expect("local address")
        .port()
}

/// A fresh, empty directory `target/corpus/<suite>/<name>-<pid>`, canonical (the daemon
/// logs the paths the kernel reports, which are canonical).
pub fn scratch_dir(suite: &str, name: &str) -> PathBuf {
    let dir = corpus::target_dir()
        .join(suite)
        .join(format!("{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("creating {}: {e}", dir.display()));
    dir.canonicalize().expect("canonical scratch directory")
}

/// The directory `target/corpus/<suite>/shared-<pid>`, made (empty) once per process and
/// shared by the suite's tests, which write files of distinct names in it.
pub fn suite_dir(suite: &'static str) -> PathBuf {
    static DIRS: Mutex<Vec<(&'static str, PathBuf)>> = Mutex::new(Vec::new());
    let mut dirs = DIRS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, d)) = dirs.iter().find(|(s, _)| *s == suite) {
        return d.clone();
    }
    let d = scratch_dir(suite, "shared");
    dirs.push((suite, d.clone()));
    d
}

/// Calls `f` every 250 ms until it gives a value or `limit` has passed.
pub fn wait_for<T>(limit: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let end = Instant::now() + limit;
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if Instant::now() > end {
            return None;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// Builds `tests/programs/memprof/heap_contexts.cc` with `clang` ([`MEMPROF_CFLAGS`] and
/// `extra`) into `dir` and runs it once per `(hot, cold)` allocation count of `runs`; the
/// binary and the raw profiles, in run order.
pub fn build_and_run_heap_contexts(
    clang: &str,
    extra: &[&str],
    dir: &Path,
    runs: &[(u32, u32)],
) -> (PathBuf, Vec<PathBuf>) {
    let binary = dir.join("heap_contexts");
    run_ok(
        Command::new(clang)
            .args(MEMPROF_CFLAGS)
            .args(extra)
            .arg(corpus::sources_dir().join("memprof/heap_contexts.cc"))
            .arg("-o")
            .arg(&binary),
    );
    let mut raws = Vec::new();
    for (i, (hot, cold)) in runs.iter().enumerate() {
        let prefix = dir.join(format!("run{i}"));
        run_ok(
            Command::new(&binary)
                .args([hot.to_string(), cold.to_string(), "5".to_string()])
                .env("MEMPROF_OPTIONS", format!("log_path={}", prefix.display())),
        );
        let raw = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with(&format!("run{i}.")))
            })
            .expect("raw profile written");
        raws.push(raw);
    }
    (binary, raws)
}

/// Builds `tests/programs/live/spin.c` (the live tests' workload) with [`build_program`]
/// into `dir/spin`.
pub fn build_spin(dir: &Path) -> PathBuf {
    build_program(
        &corpus::sources_dir().join("live/spin.c"),
        &dir.join("spin"),
        &[],
    )
}

/// Builds the C program `src` with clang-19 into `out` as the live tests want it (frame
/// pointers, pseudo probes, a PIE with a GNU build id), with `extra` flags; `out`'s
/// canonical path.
pub fn build_program(src: &Path, out: &Path, extra: &[&str]) -> PathBuf {
    let status = Command::new("clang-19")
        .args([
            "-O2",
            "-g",
            "-fno-omit-frame-pointer",
            "-mno-omit-leaf-frame-pointer",
        ])
        .args(extra)
        .args([
            "-fpseudo-probe-for-profiling",
            "-fPIE",
            "-pie",
            "-Wl,--build-id",
            "-o",
        ])
        .arg(out)
        .arg(src)
        .status()
        .expect("running clang-19");
    assert!(status.success(), "building {}", src.display());
    out.canonicalize().expect("canonical program path")
}

/// Runs `pgo-agent ARGS` in this process (argument parsing, then the command); panics with
/// the command line on an argument or command error, else returns the exit code.
pub fn pgo_agent<S: AsRef<str>>(args: &[S]) -> std::process::ExitCode {
    let mut argv = vec!["pgo-agent".to_string()];
    argv.extend(args.iter().map(|a| a.as_ref().to_string()));
    let line = argv[1..].join(" ");
    let cli = daemon::parse_args(argv).unwrap_or_else(|e| panic!("pgo-agent {line}: {e}"));
    daemon::execute(cli).unwrap_or_else(|e| panic!("pgo-agent {line}: {e:#}"))
}

/// The environment variable that carries `pgo-agent`'s arguments (separated by U+001F) to
/// a re-executed test binary.
pub const CLI_ENV: &str = "PGO_AGENT_E2E_CLI_ARGS";

/// The child half of [`cli_in_child`]: when this test executable was re-executed with
/// [`CLI_ENV`] set, runs `pgo-agent` with the arguments it holds as the binary's `main` does
/// and exits with its status; a no-op otherwise. Call it from the test binary's top-level
/// `#[test] fn cli_process()`.
pub fn cli_child() {
    let Ok(args) = std::env::var(CLI_ENV) else {
        return;
    };
    let mut argv = vec!["pgo-agent".to_string()];
    argv.extend(args.split('\u{1f}').map(str::to_string));
    let code = daemon::run_cli(argv);
    std::process::exit(if code == std::process::ExitCode::SUCCESS {
        0
    } else {
        1
    });
}

/// The command that runs `pgo-agent ARGS` in a child process: this test executable
/// re-executed on its `cli_process` test, which calls [`cli_child`]. libtest prints its own
/// lines on the child's stdout before the command's output.
pub fn cli_child_command(args: &[String]) -> Command {
    let mut cmd = Command::new(std::env::current_exe().expect("the test executable"));
    cmd.args(["cli_process", "--exact", "--nocapture", "--test-threads=1"])
        .env(CLI_ENV, args.join("\u{1f}"));
    cmd
}

/// Runs `pgo-agent ARGS` in a child process (this test executable re-executed, its
/// `cli_process` test calling [`cli_child`]): (exit code, stdout + stderr).
pub fn cli_in_child(args: &[String]) -> (Option<i32>, String) {
    let out = cli_child_command(args).output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code(), text)
}

/// Runs `pgo-agent ARGS` as the binary's `main` does (its own error reporting) and asserts
/// it succeeded.
pub fn cli<S: AsRef<str>>(args: &[S]) {
    let mut argv = vec!["pgo-agent".to_string()];
    argv.extend(args.iter().map(|a| a.as_ref().to_string()));
    let code = daemon::run_cli(argv.clone());
    assert_eq!(code, std::process::ExitCode::SUCCESS, "{argv:?}");
}

/// Runs an LLVM oracle (`llvm-profgen-19`, `llvm-profdata-19`, ...) or another tool
/// (`strip`, `objcopy`); panics with its stderr on failure.
pub fn llvm<S: AsRef<std::ffi::OsStr>>(tool: &str, args: &[S]) {
    run_ok(Command::new(tool).args(args));
}

/// Runs `cmd` to its end: its stdout, or an error with the command line and its stderr.
pub fn try_run(cmd: &mut Command) -> Result<String, String> {
    let out = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{cmd:?} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// [`try_run`], panicking on failure.
pub fn run_ok(cmd: &mut Command) -> String {
    try_run(cmd).unwrap_or_else(|e| panic!("{e}"))
}

/// `llvm-profdata-19 merge --sample --text` of `profile` (any format it reads): LLVM's
/// canonical text of a sample profile, also written beside it as `<file>.canonical.txt`;
/// an error with llvm-profdata's stderr when it cannot read the file.
pub fn try_canonical_profile(profile: &Path) -> Result<String, String> {
    let mut name = profile.file_name().unwrap_or_default().to_os_string();
    name.push(".canonical.txt");
    let out = profile.with_file_name(name);
    try_run(
        Command::new("llvm-profdata-19")
            .args(["merge", "--sample", "--text"])
            .arg(profile)
            .arg("-o")
            .arg(&out),
    )?;
    std::fs::read_to_string(&out).map_err(|e| format!("{}: {e}", out.display()))
}

/// [`try_canonical_profile`], panicking on failure.
pub fn canonical_profile(profile: &Path) -> String {
    try_canonical_profile(profile).unwrap_or_else(|e| panic!("{e}"))
}

/// Fails listing every mismatch of `failures` (checks over the whole corpus report all
/// their mismatches at once).
pub fn assert_no_mismatches(failures: &[String]) {
    assert!(
        failures.is_empty(),
        "{} mismatches:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// `convert`'s stderr with its warnings as llvm-profgen 19 prints them: the leaf-external-
/// frame share replaced by the figure its note quotes for llvm-profgen 19 (whose
/// denominator counts each sample with a call stack twice).
pub fn warnings_as_llvm_profgen_19(stderr: &str) -> String {
    const NOTE: &str = "note: llvm-profgen 19 prints the leaf external frame share as \"";
    let theirs = stderr.lines().find_map(|l| {
        let quoted = &l[l.find(NOTE)? + NOTE.len()..];
        Some(quoted[..quoted.find("\":")?].to_string())
    });
    let mut out = String::new();
    for line in stderr.lines() {
        match (&theirs, line.find("warning: ")) {
            (Some(t), Some(i)) if line.ends_with(unwinder::stats::LEAF_EXTERNAL_FRAME) => {
                out.push_str(&line[..i + "warning: ".len()]);
                out.push_str(t);
            }
            _ => out.push_str(line),
        }
        out.push('\n');
    }
    out
}

/// Where two texts first differ, for a failure message: `line N: llvm-profgen `..` vs
/// ours `..``, or their line counts when one is a prefix of the other.
pub fn first_difference(theirs: &str, ours: &str) -> String {
    for (i, (x, y)) in theirs.lines().zip(ours.lines()).enumerate() {
        if x != y {
            return format!("line {}: llvm-profgen `{x}` vs ours `{y}`", i + 1);
        }
    }
    format!(
        "lengths differ: {} vs {} lines",
        theirs.lines().count(),
        ours.lines().count()
    )
}

/// Prints both texts in full and fails when they differ (pgo-agent's `ours` against
/// llvm-profgen-19's `theirs`), naming the first differing line.
pub fn assert_same(what: &str, ours: &str, theirs: &str) {
    if ours != theirs {
        let first = ours
            .lines()
            .zip(theirs.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(ours.lines().count().min(theirs.lines().count()));
        panic!(
            "{what}: pgo-agent and llvm-profgen-19 differ (first at line {}):\n\
             --- llvm-profgen-19\n{theirs}\n--- pgo-agent\n{ours}",
            first + 1
        );
    }
}

/// `llvm-profdata-19 show --sample --show-sec-info-only` of an extbinary profile, one
/// `Section {flags}` per line (offsets and sizes left out).
pub fn section_flags(profile: &Path) -> String {
    run_ok(
        Command::new("llvm-profdata-19")
            .args(["show", "--sample", "--show-sec-info-only"])
            .arg(profile),
    )
    .lines()
    .filter_map(|l| {
        let (section, rest) = l.split_once(" - Offset:")?;
        let flags = rest.split_once("Flags: ")?.1;
        Some(format!("{section} {flags}\n"))
    })
    .collect()
}

/// The text of `path`; panics naming it.
pub fn read_text(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The machine, shared by the end-to-end tests: [`machine_lock`] and [`machine_share`].
static MACHINE: RwLock<()> = RwLock::new(());

/// Taken first by every test that samples this host (perf events, uprobes, a running
/// daemon, ClickHouse): side by side with any other test they would see its processes
/// (a daemon samples every process of the host, its memory grows with theirs) and compete
/// for the CPUs their timing assumes, so they run alone. Linux's `RwLock` lets no new
/// reader in while a writer waits, so they are not starved.
pub fn machine_lock() -> RwLockWriteGuard<'static, ()> {
    MACHINE.write().unwrap_or_else(|e| e.into_inner())
}

/// Taken first by every test that only reads and writes files (corpus recordings,
/// conversions, llvm-profgen): they run side by side, never beside a [`machine_lock`] test.
pub fn machine_share() -> RwLockReadGuard<'static, ()> {
    MACHINE.read().unwrap_or_else(|e| e.into_inner())
}
