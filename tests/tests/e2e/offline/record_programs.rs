//! `pgo-agent record` on programs that do what real programs do besides computing: trap
//! and signal themselves, copy with `rep` string instructions, fork, wait in a system call,
//! run 32-bit code; and on outputs that cannot be written. Small static C programs
//! (clang-19), so each recording is a few thousand steps.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use collector::PerfEvent;
use recorder::{RecordOptions, RecorderError, TraceeExit};

fn scratch(name: &str) -> PathBuf {
    e2e::support::scratch_dir("record_programs", name)
}

/// `source` built static with clang-19 (`flags` added) as `dir/name`.
fn build(dir: &Path, name: &str, source: &str, flags: &[&str]) -> PathBuf {
    let src = dir.join(format!("{name}.c"));
    std::fs::write(&src, source).unwrap();
    let out = dir.join(name);
    let status = std::process::Command::new("clang-19")
        .args(["-O1", "-static", "-fno-omit-frame-pointer"])
        .args(flags)
        .arg("-o")
        .arg(&out)
        .arg(&src)
        .status()
        .expect("running clang-19");
    assert!(status.success(), "building {name}");
    out
}

/// `source` built for `test` (see [`build`]) in a scratch directory of its own; `None`
/// (after a SKIPPED message) without clang-19.
fn program(test: &str, name: &str, source: &str, flags: &[&str]) -> Option<PathBuf> {
    if !e2e::corpus::tools_available(test, &["clang-19"]) {
        return None;
    }
    Some(build(&scratch(name), name, source, flags))
}

/// A static program that waits in `pause()` for ever, built for `test` as `name`.
fn pause_program(test: &str, name: &str) -> Option<PathBuf> {
    program(
        test,
        name,
        "#include <unistd.h>\nint main(void) { pause(); return 0; }\n",
        &[],
    )
}

/// `pgo-agent record [extra] --period 7 --output <program>.data -- <program>`: the
/// arguments and the perf.data path.
fn record_args(program: &Path, extra: &[&str]) -> (Vec<String>, PathBuf) {
    let data = program.with_extension("data");
    let mut cli_args: Vec<String> = vec!["record".into()];
    cli_args.extend(extra.iter().map(|s| s.to_string()));
    cli_args.extend(
        ["--period", "7", "--output", data.to_str().unwrap(), "--"]
            .iter()
            .map(|s| s.to_string()),
    );
    cli_args.push(program.display().to_string());
    (cli_args, data)
}

/// The samples of the perf.data at `path`.
fn samples_in(path: &Path) -> usize {
    let mut reader = collector::perf_data::PerfDataReader::open(path).unwrap();
    let mut n = 0;
    while let Some(event) = reader.next_event().unwrap() {
        n += usize::from(matches!(event, PerfEvent::Sample(_)));
    }
    n
}

fn options(period: u64) -> RecordOptions {
    RecordOptions {
        period,
        environment: Some(Vec::new()),
        ..RecordOptions::default()
    }
}

fn args(program: &Path, rest: &[&str]) -> Vec<String> {
    std::iter::once(program.display().to_string())
        .chain(rest.iter().map(|s| s.to_string()))
        .collect()
}

fn samples(recording: &collector::Recording) -> usize {
    recording
        .events
        .iter()
        .filter(|e| matches!(e, PerfEvent::Sample(_)))
        .count()
}

/// A program's own SIGTRAP (an `int3`, `raise(SIGTRAP)`) is delivered to it as it is
/// without the recorder: its handler runs, and without one it dies of the signal.
#[test]
fn the_program_s_own_sigtraps_reach_it() {
    let _machine = e2e::support::machine_share();
    let Some(trap) = program(
        "the_program_s_own_sigtraps_reach_it",
        "trap",
        r#"#include <signal.h>
static volatile int got;
static void on_trap(int s) { (void)s; got++; }
int main(int argc, char **argv) {
  if (argv[1][0] == 'h') signal(SIGTRAP, on_trap);
  if (argv[2][0] == 'i') __asm__ volatile("int3");
  else raise(SIGTRAP);
  return 40 + got;
}
"#,
        &[],
    ) else {
        return;
    };
    for how in ["int3", "raise"] {
        let handled = recorder::record(&args(&trap, &["h", how]), &options(97)).unwrap();
        assert_eq!(handled.exit, TraceeExit::Exited(41), "{how}: handled");
        let unhandled = recorder::record(&args(&trap, &["-", how]), &options(97)).unwrap();
        assert_eq!(unhandled.exit, TraceeExit::Killed(libc::SIGTRAP), "{how}");
    }
}

/// A `rep` string instruction is one instruction in the ground truth, executed once, not
/// once per element it copies.
#[test]
fn a_rep_string_instruction_counts_once_per_execution() {
    let _machine = e2e::support::machine_share();
    let Some(rep) = program(
        "a_rep_string_instruction_counts_once",
        "rep",
        r#"char a[4096], b[4096];
__attribute__((noinline)) void copy(void) {
  void *d = b, *s = a; unsigned long n = 100;
  __asm__ volatile(".globl rep_at\nrep_at: rep movsb" : "+D"(d), "+S"(s), "+c"(n) :: "memory");
}
int main(void) { for (int k = 0; k < 3; k++) copy(); return b[5]; }
"#,
        &[],
    ) else {
        return;
    };
    let outcome = recorder::record(&args(&rep, &[]), &options(97)).unwrap();
    assert_eq!(outcome.exit, TraceeExit::Exited(0));
    let file = std::fs::read(&rep).unwrap();
    let elf = object::File::parse(&*file).unwrap();
    use object::{Object, ObjectSymbol};
    let at = elf
        .symbols()
        .find(|s| s.name() == Ok("rep_at"))
        .expect("the rep_at label")
        .address();
    let name = rep.file_name().unwrap().to_str().unwrap();
    let truth = outcome.truth.binary(name).expect("the program's truth");
    assert_eq!(truth.instructions[&collector::ground_truth::hex(at)], 3);
}

/// A program that forks is stopped there: what was recorded until then is kept, and the
/// message names both processes.
#[test]
fn a_fork_stops_the_recording_and_keeps_what_was_recorded() {
    let _machine = e2e::support::machine_share();
    let Some(fork) = program(
        "a_fork_stops_the_recording",
        "fork",
        "#include <unistd.h>\nint main(void) { fork(); return 0; }\n",
        &[],
    ) else {
        return;
    };
    let outcome = recorder::record(&args(&fork, &[]), &options(7)).unwrap();
    let TraceeExit::Refused(why) = &outcome.exit else {
        panic!("{:?}", outcome.exit);
    };
    assert!(why.contains("forked (new pid"), "{why}");
    assert!(samples(&outcome.recording) > 10);
    assert_eq!(
        outcome.truth.totals.samples as usize,
        samples(&outcome.recording)
    );
}

/// 32-bit code is refused before anything is recorded (the recorder decodes x86-64).
#[test]
fn a_32_bit_program_is_refused() {
    let _machine = e2e::support::machine_share();
    let Some(m32) = program(
        "a_32_bit_program_is_refused",
        "m32",
        "void _start(void) { __asm__ volatile(\"movl $1, %eax\\nmovl $44, %ebx\\nint $0x80\"); }\n",
        &["-m32", "-nostdlib", "-ffreestanding"],
    ) else {
        return;
    };
    match recorder::record(&args(&m32, &[]), &options(7)) {
        Err(RecorderError::Not64Bit { .. }) => {}
        other => panic!("{:?}", other.map(|o| o.exit)),
    }
}

/// SIGTERM stops a recording whose program waits in a system call (`pause`), within a
/// moment, and the samples until then are written.
#[test]
fn sigterm_stops_a_program_waiting_in_a_system_call() {
    let _machine = e2e::support::machine_share();
    let Some(pause) = pause_program("sigterm_stops_a_program_waiting", "pause") else {
        return;
    };
    let (cli_args, data) = record_args(&pause, &[]);
    let child = e2e::support::cli_child_command(&cli_args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // A static program reaches pause() within a few thousand steps: well within this.
    std::thread::sleep(Duration::from_secs(4));
    // SAFETY: kill(2) on the child this test spawned and has not reaped.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
    let signalled = Instant::now();
    let out = child.wait_with_output().unwrap();
    let report = String::from_utf8_lossy(&out.stderr);
    assert!(
        signalled.elapsed() < Duration::from_secs(3),
        "{:?}: {report}",
        signalled.elapsed()
    );
    assert!(report.contains("stopped by a signal"), "{report}");
    let n = samples_in(&data);
    assert!(n > 10, "{n} samples: {report}");
}

/// Outputs are checked before the program runs: one that cannot be created, `-`, or two
/// outputs naming one file stop `record` at once, and no program is run.
#[test]
fn outputs_that_cannot_be_written_are_refused_before_the_program_runs() {
    let _machine = e2e::support::machine_share();
    let dir = scratch("outputs");
    let marker = dir.join("ran");
    let script = dir.join("touch.sh");
    std::fs::write(
        &script,
        format!("#!/bin/sh\ntouch '{}'\n", marker.display()),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let same = dir.join("same");
    for (outputs, want) in [
        (
            vec!["--output", "/nonexistent-dir/x.data"],
            "--output /nonexistent-dir/x.data: cannot be created",
        ),
        (vec!["--script", "-"], "--script -: `record` writes files"),
        (
            vec![
                "--output",
                same.to_str().unwrap(),
                "--truth",
                same.to_str().unwrap(),
            ],
            "--output and --truth are the same file",
        ),
    ] {
        let mut cli_args: Vec<String> = vec!["record".into()];
        cli_args.extend(outputs.iter().map(|s| s.to_string()));
        cli_args.extend(["--".into(), script.display().to_string()]);
        let (code, text) = e2e::support::cli_in_child(&cli_args);
        assert_eq!(code, Some(1), "{outputs:?}: {text}");
        assert!(text.contains(want), "{outputs:?}: {text}");
        assert!(!marker.exists(), "{outputs:?}: the program ran");
    }
}

/// `--max-secs` bounds a recording, also of a program that waits in a system call: what
/// was recorded is written and the exit status is 0.
#[test]
fn max_secs_bounds_a_recording() {
    let _machine = e2e::support::machine_share();
    let Some(pause) = pause_program("max_secs_bounds_a_recording", "pause2") else {
        return;
    };
    let (cli_args, data) = record_args(&pause, &["--max-secs", "3"]);
    let started = Instant::now();
    let (code, text) = e2e::support::cli_in_child(&cli_args);
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("stopped after --max-secs 3"), "{text}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    let n = samples_in(&data);
    assert!(n > 10, "{n} samples: {text}");
}
