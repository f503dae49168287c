//! [`Tracee`]: a child process started under ptrace and driven one instruction at a time.
//!
//! The child calls `PTRACE_TRACEME`, optionally disables ASLR with
//! `personality(ADDR_NO_RANDOMIZE)`, and execs the program; the parent receives the exec
//! `SIGTRAP` with the new image mapped and RIP at the dynamic loader's (or the static
//! binary's) entry point. Options: `PTRACE_O_EXITKILL` (the tracee dies with us),
//! `PTRACE_O_TRACECLONE|TRACEFORK|TRACEVFORK|TRACEEXEC` (so a new thread, a child process or a
//! second exec stops the tracee and the recorder can refuse it instead of silently
//! recording a partial run).

use std::ffi::CString;
use std::io::IoSliceMut;
use std::path::{Path, PathBuf};

use nix::sys::personality::{self, Persona};
use nix::sys::ptrace::{self, Options};
use nix::sys::signal::Signal;
use nix::sys::uio::{process_vm_readv, RemoteIoVec};
use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::{execv, execve, fork, ForkResult, Pid};

use super::RecorderError;

/// The user registers the recorder reads after each step.
pub type Regs = libc::user_regs_struct;

/// What a single step ended in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StepOutcome {
    /// The instruction executed; the tracee stopped after it.
    Stepped,
    /// A signal is to be delivered: it arrived before the instruction executed, or the
    /// instruction raised it (an `int3`, a system call that signalled the program itself;
    /// the IP then moved past it). The signal is delivered with the next step.
    Signal(Signal),
    /// The tracee exited with this status.
    Exited(i32),
    /// The tracee was killed by this signal.
    Killed(Signal),
}

/// A traced child process stopped at a ptrace stop.
#[derive(Debug)]
pub struct Tracee {
    pid: Pid,
    pending_signal: Option<Signal>,
    alive: bool,
    /// Threads or processes auto-attached by a clone/fork event, reaped on drop.
    attached: Vec<Pid>,
}

/// Finds `program` the way `execvp` would: as given when it contains `/`, else in `$PATH`.
pub fn resolve_program(program: &str) -> Result<PathBuf, RecorderError> {
    let not_found = || RecorderError::ProgramNotFound {
        program: program.to_string(),
    };
    if program.contains('/') {
        let p = Path::new(program);
        return if p.is_file() {
            check_runnable(p)?;
            Ok(p.to_path_buf())
        } else if p.is_dir() {
            Err(RecorderError::NotAProgram {
                program: program.to_string(),
                why: "is a directory",
            })
        } else {
            Err(not_found())
        };
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    let found = std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|p| p.is_file())
        .ok_or_else(not_found)?;
    check_runnable(&found)?;
    Ok(found)
}

/// Why exec would refuse `path`, said before the program is started (the child's exec
/// failure is only an exit status): no execute permission, or neither an ELF file nor a
/// `#!` script.
fn check_runnable(path: &Path) -> Result<(), RecorderError> {
    use std::io::Read;
    use std::os::unix::fs::PermissionsExt;
    let refuse = |why| {
        Err(RecorderError::NotAProgram {
            program: path.display().to_string(),
            why,
        })
    };
    let Ok(meta) = std::fs::metadata(path) else {
        return Ok(());
    };
    if meta.permissions().mode() & 0o111 == 0 {
        return refuse("is not executable (permission denied)");
    }
    let mut magic = [0u8; 4];
    let read = std::fs::File::open(path).and_then(|mut f| f.read(&mut magic));
    match read {
        Ok(n) if n >= 2 && (magic[..n.min(4)] == *b"\x7fELF" || magic.starts_with(b"#!")) => Ok(()),
        Ok(_) => refuse("is neither an ELF program nor a `#!` script (exec format error)"),
        // Unreadable but executable: exec may still run it.
        Err(_) => Ok(()),
    }
}

impl Tracee {
    /// Forks, execs `program` with `args` (`args[0]` is argv[0]) and `environment` (`None`:
    /// this process's) under ptrace and waits for the exec stop.
    pub fn spawn(
        program: &Path,
        args: &[String],
        environment: Option<&[std::ffi::OsString]>,
        disable_aslr: bool,
    ) -> Result<Tracee, RecorderError> {
        let path = CString::new(program.as_os_str().as_encoded_bytes())
            .map_err(|_| RecorderError::NulInArgument { index: 0 })?;
        let argv = args
            .iter()
            .enumerate()
            .map(|(index, a)| {
                CString::new(a.as_bytes()).map_err(|_| RecorderError::NulInArgument { index })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let envp = environment
            .map(|entries| {
                entries
                    .iter()
                    .map(|e| {
                        CString::new(e.as_encoded_bytes()).map_err(|_| {
                            RecorderError::NulInEnvironment {
                                entry: e.to_string_lossy().replace('\0', "\\0"),
                            }
                        })
                    })
                    .collect::<Result<Vec<_>, _>>()
            })
            .transpose()?;
        // SAFETY: the child only calls async-signal-safe functions (ptrace, personality,
        // prctl, execv, _exit) on memory prepared before the fork.
        match unsafe { fork() } {
            Err(source) => Err(RecorderError::Ptrace {
                operation: "fork",
                pid: 0,
                source,
            }),
            Ok(ForkResult::Child) => {
                let _ = ptrace::traceme();
                // The program runs with the system's huge-page policy, not the recorder's
                // (`collector::freed_memory::limit_resident_memory`, which a child inherits).
                // SAFETY: prctl is a system call on this process's flag; nothing is shared.
                unsafe {
                    libc::prctl(libc::PR_SET_THP_DISABLE, 0, 0, 0, 0);
                }
                if disable_aslr {
                    if let Ok(p) = personality::get() {
                        let _ = personality::set(p | Persona::ADDR_NO_RANDOMIZE);
                    }
                }
                let _ = match &envp {
                    Some(envp) => execve(&path, &argv, envp),
                    None => execv(&path, &argv),
                };
                // SAFETY: _exit is always safe; exec failed.
                unsafe { libc::_exit(127) }
            }
            Ok(ForkResult::Parent { child }) => {
                let tracee = Tracee {
                    pid: child,
                    pending_signal: None,
                    alive: true,
                    attached: Vec::new(),
                };
                tracee.wait_exec(program)?;
                let options = Options::PTRACE_O_EXITKILL
                    | Options::PTRACE_O_TRACECLONE
                    | Options::PTRACE_O_TRACEFORK
                    | Options::PTRACE_O_TRACEVFORK
                    | Options::PTRACE_O_TRACEEXEC;
                ptrace::setoptions(child, options)
                    .map_err(|source| tracee.err("PTRACE_SETOPTIONS", source))?;
                Ok(tracee)
            }
        }
    }

    fn wait_exec(&self, program: &Path) -> Result<(), RecorderError> {
        match waitpid(self.pid, None) {
            Ok(WaitStatus::Stopped(_, Signal::SIGTRAP)) => Ok(()),
            Ok(WaitStatus::Exited(_, status)) => Err(RecorderError::ExecFailed {
                program: program.display().to_string(),
                status,
            }),
            Ok(_) => Err(RecorderError::ExecFailed {
                program: program.display().to_string(),
                status: -1,
            }),
            Err(source) => Err(self.err("waitpid", source)),
        }
    }

    fn err(&self, operation: &'static str, source: nix::Error) -> RecorderError {
        RecorderError::Ptrace {
            operation,
            pid: self.pid.as_raw(),
            source,
        }
    }

    /// The tracee's pid.
    pub fn pid(&self) -> i32 {
        self.pid.as_raw()
    }

    /// Reads all user registers (one `PTRACE_GETREGS`).
    pub fn regs(&self) -> Result<Regs, RecorderError> {
        ptrace::getregs(self.pid).map_err(|e| self.err("PTRACE_GETREGS", e))
    }

    /// Executes one instruction (`PTRACE_SINGLESTEP`) and waits for the stop.
    pub fn step(&mut self) -> Result<StepOutcome, RecorderError> {
        let sig = self.pending_signal.take();
        ptrace::step(self.pid, sig).map_err(|e| self.err("PTRACE_SINGLESTEP", e))?;
        match waitpid(self.pid, None).map_err(|e| self.err("waitpid", e))? {
            WaitStatus::Stopped(_, Signal::SIGTRAP) => {
                // The step's own trap has a positive `si_code` (`TRAP_TRACE`; `TRAP_BRKPT`
                // when the step ended a system call; `SIGTRAP` itself when it entered a
                // signal handler, `ptrace_notify`). The program's own SIGTRAPs have
                // `SI_KERNEL` (an `int3`) or a code of 0 or less (`kill`, `raise`,
                // `sigqueue`): they are delivered to it with the next step.
                match ptrace::getsiginfo(self.pid) {
                    Ok(info) if info.si_code == libc::SI_KERNEL || info.si_code <= 0 => {
                        self.pending_signal = Some(Signal::SIGTRAP);
                        Ok(StepOutcome::Signal(Signal::SIGTRAP))
                    }
                    _ => Ok(StepOutcome::Stepped),
                }
            }
            WaitStatus::Stopped(_, sig) => {
                self.pending_signal = Some(sig);
                Ok(StepOutcome::Signal(sig))
            }
            WaitStatus::PtraceEvent(_, _, event) => {
                let mut new_pid = None;
                if matches!(
                    event,
                    libc::PTRACE_EVENT_CLONE | libc::PTRACE_EVENT_FORK | libc::PTRACE_EVENT_VFORK
                ) {
                    // The new thread or process is traced by us too; drop kills and reaps it.
                    if let Ok(new) = ptrace::getevent(self.pid) {
                        self.attached.push(Pid::from_raw(new as i32));
                        new_pid = Some(new as i32);
                    }
                }
                let what = match event {
                    libc::PTRACE_EVENT_CLONE => "created a thread",
                    libc::PTRACE_EVENT_FORK | libc::PTRACE_EVENT_VFORK => "forked",
                    libc::PTRACE_EVENT_EXEC => "called exec again",
                    _ => "stopped at an unexpected ptrace event",
                };
                Err(RecorderError::Unsupported {
                    what,
                    pid: self.pid(),
                    new_pid,
                })
            }
            WaitStatus::Exited(_, status) => {
                self.alive = false;
                Ok(StepOutcome::Exited(status))
            }
            WaitStatus::Signaled(_, sig, _) => {
                self.alive = false;
                Ok(StepOutcome::Killed(sig))
            }
            _ => Ok(StepOutcome::Stepped),
        }
    }

    /// The signal that killed the tracee, if it was killed (reaping it; `None` while it
    /// lives or when it exited).
    pub fn killed_by(&mut self) -> Option<Signal> {
        if !self.alive {
            return None;
        }
        // A killed tracee is a zombie until reaped: wait for it a moment.
        for _ in 0..50 {
            match waitpid(self.pid, Some(nix::sys::wait::WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::Signaled(_, sig, _)) => {
                    self.alive = false;
                    return Some(sig);
                }
                Ok(WaitStatus::Exited(..)) | Err(_) => return None,
                Ok(WaitStatus::StillAlive) => {
                    std::thread::sleep(std::time::Duration::from_millis(2));
                }
                Ok(_) => return None,
            }
        }
        None
    }

    /// Reads up to `buf.len()` bytes of tracee memory at `addr`; returns how many bytes were
    /// readable (a read stops at the first unmapped page).
    pub fn read_memory(&self, addr: u64, buf: &mut [u8]) -> usize {
        // Split at the page boundary so a partial read returns the readable first part.
        let first = (0x1000 - (addr & 0xfff) as usize).min(buf.len());
        let (a, b) = buf.split_at_mut(first);
        let mut local = [IoSliceMut::new(a), IoSliceMut::new(b)];
        let remote = [
            RemoteIoVec {
                base: addr as usize,
                len: first,
            },
            RemoteIoVec {
                base: addr.wrapping_add(first as u64) as usize,
                len: local[1].len(),
            },
        ];
        let n = if remote[1].len == 0 { 1 } else { 2 };
        process_vm_readv(self.pid, &mut local[..n], &remote[..n]).unwrap_or(0)
    }

    /// Reads one little-endian u64, `None` when unreadable.
    pub fn read_u64(&self, addr: u64) -> Option<u64> {
        let mut buf = [0u8; 8];
        (self.read_memory(addr, &mut buf) == 8).then(|| u64::from_le_bytes(buf))
    }
}

impl Drop for Tracee {
    fn drop(&mut self) {
        if self.alive {
            // Error paths: do not leave a stopped child (or its auto-attached new thread or
            // child process) behind. SIGKILL works in every ptrace stop; then reap the
            // process (__WALL: its threads are traced too).
            let _ = nix::sys::signal::kill(self.pid, Signal::SIGKILL);
            for &pid in &self.attached {
                let _ = nix::sys::signal::kill(pid, Signal::SIGKILL);
            }
            // A thread group leader is reaped only after its other threads: reap those first.
            for &pid in self.attached.iter().chain(std::iter::once(&self.pid)) {
                loop {
                    match waitpid(pid, Some(nix::sys::wait::WaitPidFlag::__WALL)) {
                        Ok(WaitStatus::Exited(..)) | Ok(WaitStatus::Signaled(..)) | Err(_) => break,
                        Ok(_) => {}
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `THP_enabled` of process `pid` (`/proc/PID/status`), `None` where the kernel does not
    /// report it.
    fn thp_enabled(pid: i32) -> Option<u32> {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        let line = status.lines().find(|l| l.starts_with("THP_enabled:"))?;
        line.split_whitespace().nth(1)?.parse().ok()
    }

    /// A process that limits its resident memory (no huge pages, as every pgo-agent command
    /// does) records a program that runs with the system's policy.
    #[test]
    fn the_program_does_not_inherit_the_recorders_huge_page_flag() {
        collector::freed_memory::limit_resident_memory();
        let Some(own) = thp_enabled(std::process::id() as i32) else {
            eprintln!("SKIPPED: the kernel reports no THP_enabled");
            return;
        };
        assert_eq!(own, 0, "the recorder's own flag is set");
        let true_ = resolve_program("true").unwrap();
        let tracee = Tracee::spawn(&true_, &["true".to_string()], None, false).unwrap();
        // Stopped at its exec: the flag is what the program starts with.
        assert_eq!(thp_enabled(tracee.pid()), Some(1));
    }
}
