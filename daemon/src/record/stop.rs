//! Stopping a recording: [`StopRequest`] (SIGINT/SIGTERM or the `--max-secs` deadline),
//! asked by the recorder between steps, and [`StopWatcher`], which kills a program that
//! waits in a system call so that the recording ends and what was recorded is written.

/// How long the recording has to stop by itself after SIGINT/SIGTERM before the program,
/// blocked in a system call (the recorder waits for its next step), is killed.
const STOP_GRACE: std::time::Duration = std::time::Duration::from_millis(300);

/// What asks the recording to stop: SIGINT/SIGTERM, or the `--max-secs` deadline.
#[derive(Clone, Copy)]
pub(super) struct StopRequest {
    pub(super) deadline: Option<std::time::Instant>,
}

impl StopRequest {
    /// SIGINT or SIGTERM arrived.
    pub(super) fn signalled() -> bool {
        crate::signals::pending() == Some(crate::signals::Signal::Shutdown)
    }

    /// The `--max-secs` deadline passed.
    pub(super) fn past_deadline(self) -> bool {
        self.deadline
            .is_some_and(|d| std::time::Instant::now() >= d)
    }

    /// Either.
    pub(super) fn asked(self) -> bool {
        Self::signalled() || self.past_deadline()
    }
}

/// Stops a recording whose program waits in a system call: the recorder asks for a stop
/// between steps only, and a step that does not end (a `read`, a `sleep`) would hold the
/// first SIGINT/SIGTERM until it does. [`STOP_GRACE`] after the signal, the program is
/// killed, which ends the step; what was recorded is written as for any stop.
pub(super) struct StopWatcher {
    done: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// Returns whether it killed the program.
    thread: std::thread::JoinHandle<bool>,
}

/// The recorded program, as the [`StopWatcher`] signals it: a pidfd opened while the
/// program is traced and not yet reaped, so a SIGKILL sent after the recorder reaped it
/// finds no process (`ESRCH`) rather than another one that reused its pid. Without pidfds
/// (kernels before 5.3) the pid itself.
#[derive(Default)]
pub(super) struct ProgramHandle(std::sync::Mutex<Option<ProgramRef>>);

enum ProgramRef {
    PidFd(std::os::fd::OwnedFd),
    Pid(i32),
}

impl ProgramHandle {
    /// Refers to process `pid`, which must not have been reaped.
    pub(super) fn set(&self, pid: i32) {
        use std::os::fd::FromRawFd;
        // SAFETY: pidfd_open takes a pid and flags and returns a new file descriptor or -1.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        let program = if fd >= 0 {
            // SAFETY: the descriptor was just opened and is owned by nothing else.
            ProgramRef::PidFd(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd as i32) })
        } else {
            ProgramRef::Pid(pid)
        };
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(program);
    }

    /// Sends SIGKILL to the program; false when none was started.
    fn kill(&self) -> bool {
        use std::os::fd::AsRawFd;
        match &*self.0.lock().unwrap_or_else(|e| e.into_inner()) {
            Some(ProgramRef::PidFd(fd)) => {
                // SAFETY: pidfd_send_signal with a pidfd we own, no siginfo, no flags.
                unsafe {
                    libc::syscall(
                        libc::SYS_pidfd_send_signal,
                        fd.as_raw_fd(),
                        libc::SIGKILL,
                        std::ptr::null::<libc::siginfo_t>(),
                        0,
                    )
                };
                true
            }
            Some(ProgramRef::Pid(pid)) => {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(*pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
                true
            }
            None => false,
        }
    }
}

impl StopWatcher {
    pub(super) fn start(program: std::sync::Arc<ProgramHandle>, stop: StopRequest) -> StopWatcher {
        use std::sync::atomic::Ordering;
        let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let thread = {
            let done = done.clone();
            std::thread::spawn(move || {
                let mut asked: Option<std::time::Instant> = None;
                while !done.load(Ordering::SeqCst) {
                    std::thread::sleep(std::time::Duration::from_millis(20));
                    if !stop.asked() {
                        continue;
                    }
                    let since = *asked.get_or_insert_with(std::time::Instant::now);
                    if since.elapsed() >= STOP_GRACE
                        && !done.load(Ordering::SeqCst)
                        && program.kill()
                    {
                        return true;
                    }
                }
                false
            })
        };
        StopWatcher { done, thread }
    }

    /// Ends the watch: whether it killed the program.
    pub(super) fn finish(self) -> bool {
        self.done.store(true, std::sync::atomic::Ordering::SeqCst);
        self.thread.join().unwrap_or(false)
    }
}
