//! [`HeldChild`]: a command forked and held before its `execvp` until the probes are
//! attached (they are opened on the child's pid with `enable_on_exec`, so they start with
//! the new program image; the program's later threads are not followed, see
//! [`super::ProbeTarget::to_kernel`]).
//!
//! Between `fork` and `execvp` the child only calls async-signal-safe functions (`read`,
//! `close`, `execvp`, `_exit`); every argument is prepared before the fork.

use std::ffi::CString;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use super::UprobeError;

/// A forked child blocked before exec.
#[derive(Debug)]
pub struct HeldChild {
    pid: i32,
    go: Option<OwnedFd>,
}

impl HeldChild {
    /// Forks `argv` (argv[0] looked up in `PATH`); the child waits for [`HeldChild::release`].
    pub fn spawn(argv: &[String]) -> Result<HeldChild, UprobeError> {
        let bad = |what: &'static str| UprobeError::NoSymbol {
            path: argv.first().cloned().unwrap_or_default().into(),
            function: String::new(),
            what,
        };
        if argv.is_empty() {
            return Err(bad("empty command"));
        }
        let args: Vec<CString> = argv
            .iter()
            .map(|a| CString::new(a.as_bytes()))
            .collect::<Result<_, _>>()
            .map_err(|_| bad("argument contains a NUL byte"))?;
        let mut ptrs: Vec<*const libc::c_char> = args.iter().map(|a| a.as_ptr()).collect();
        ptrs.push(std::ptr::null());
        let mut fds = [0; 2];
        // SAFETY: a two-int array for pipe2.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
            return Err(UprobeError::Io {
                path: "pipe2".into(),
                source: std::io::Error::last_os_error(),
            });
        }
        // SAFETY: fresh fds from pipe2, owned from here on.
        let (rd, wr) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        // SAFETY: the child runs only async-signal-safe calls on memory prepared above.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(UprobeError::Io {
                path: "fork".into(),
                source: std::io::Error::last_os_error(),
            });
        }
        if pid == 0 {
            // SAFETY: child side of fork, async-signal-safe calls only.
            unsafe {
                libc::close(wr.as_raw_fd());
                let mut b = 0u8;
                let n = libc::read(rd.as_raw_fd(), (&mut b as *mut u8).cast(), 1);
                if n == 1 {
                    libc::execvp(ptrs[0], ptrs.as_ptr());
                }
                libc::_exit(127);
            }
        }
        drop(rd);
        Ok(HeldChild { pid, go: Some(wr) })
    }

    /// The child's pid.
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Lets the child exec.
    pub fn release(&mut self) -> Result<(), UprobeError> {
        if let Some(fd) = self.go.take() {
            let b = [1u8];
            // SAFETY: a valid pipe fd and a 1-byte buffer.
            let n = unsafe { libc::write(fd.as_raw_fd(), b.as_ptr().cast(), 1) };
            if n != 1 {
                return Err(UprobeError::Io {
                    path: "release pipe".into(),
                    source: std::io::Error::last_os_error(),
                });
            }
        }
        Ok(())
    }

    /// `waitpid(WNOHANG)`: the exit status once the child has ended (a signal number `s`
    /// is reported as `128 + s`).
    pub fn try_wait(&self) -> Option<i32> {
        let mut status = 0;
        // SAFETY: our own child's pid and a status int.
        let r = unsafe { libc::waitpid(self.pid, &mut status, libc::WNOHANG) };
        if r != self.pid {
            return None;
        }
        if libc::WIFEXITED(status) {
            Some(libc::WEXITSTATUS(status))
        } else {
            Some(128 + libc::WTERMSIG(status))
        }
    }
}

impl Drop for HeldChild {
    fn drop(&mut self) {
        // A child never released exits (its read sees EOF) when the pipe closes here.
        self.go.take();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn held_child_runs_after_release_and_reports_status() {
        let mut c = HeldChild::spawn(&["sh".into(), "-c".into(), "exit 3".into()]).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert_eq!(c.try_wait(), None, "held before release");
        c.release().unwrap();
        let status = loop {
            if let Some(s) = c.try_wait() {
                break s;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        };
        assert_eq!(status, 3);
        // Dropped without release: the child exits 127 without exec.
        let c = HeldChild::spawn(&["true".into()]).unwrap();
        let pid = c.pid();
        drop(c);
        let mut st = 0;
        // SAFETY: our child.
        assert_eq!(unsafe { libc::waitpid(pid, &mut st, 0) }, pid);
        assert_eq!(libc::WEXITSTATUS(st), 127);
    }
}
