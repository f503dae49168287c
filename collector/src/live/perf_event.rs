//! [`PerfEventFd`]: an open perf event (an owned fd) and the ioctls the collector uses.
//!
//! Not used: `PERF_EVENT_IOC_PERIOD`. perf-event-open-sys 7.1's `ioctls::PERIOD` passes the
//! u64 by value where the kernel wants a pointer to it (crates-and-abi.md §1.1); were it
//! needed, call `libc::ioctl(fd, PERIOD, &value)` directly.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use perf_event_open_sys::bindings;

use super::{EventAttr, LiveError};

/// An open perf event; closed on drop.
#[derive(Debug)]
pub struct PerfEventFd {
    fd: OwnedFd,
    cpu: i32,
}

impl PerfEventFd {
    /// `perf_event_open(attr, pid, cpu, group_fd = -1, PERF_FLAG_FD_CLOEXEC)`.
    /// `pid = -1, cpu = N` samples every task on CPU N (CAP_PERFMON or root, or paranoid < 1).
    pub fn open(attr: &EventAttr, pid: i32, cpu: i32) -> Result<PerfEventFd, LiveError> {
        let mut raw = attr.to_kernel();
        // SAFETY: `raw` is a fully initialised attr that lives across the call.
        let fd = unsafe {
            perf_event_open_sys::perf_event_open(
                &mut raw,
                pid,
                cpu,
                -1,
                bindings::PERF_FLAG_FD_CLOEXEC as libc::c_ulong,
            )
        };
        if fd < 0 {
            return Err(LiveError::Open {
                what: attr.label.clone(),
                cpu,
                source: io::Error::last_os_error(),
            });
        }
        // SAFETY: a fresh fd returned by the kernel, owned from here on.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(PerfEventFd { fd, cpu })
    }

    /// `perf_event_open` of an attr built by the caller (e.g. the uprobe sampler, whose
    /// `config1` is a pointer to a path that must stay alive across this call); `label`
    /// names it in errors.
    pub fn open_raw(
        raw: &mut bindings::perf_event_attr,
        label: &str,
        pid: i32,
        cpu: i32,
    ) -> Result<PerfEventFd, LiveError> {
        // SAFETY: `raw` is a fully initialised attr that lives across the call; any pointer
        // it holds is the caller's to keep valid.
        let fd = unsafe {
            perf_event_open_sys::perf_event_open(
                raw,
                pid,
                cpu,
                -1,
                bindings::PERF_FLAG_FD_CLOEXEC as libc::c_ulong,
            )
        };
        if fd < 0 {
            return Err(LiveError::Open {
                what: label.to_string(),
                cpu,
                source: io::Error::last_os_error(),
            });
        }
        // SAFETY: a fresh fd returned by the kernel, owned from here on.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(PerfEventFd { fd, cpu })
    }

    /// The CPU the event was opened on.
    pub fn cpu(&self) -> i32 {
        self.cpu
    }

    fn ioctl(&self, name: &'static str, result: libc::c_int) -> Result<(), LiveError> {
        if result < 0 {
            return Err(LiveError::Ioctl {
                request: name,
                cpu: self.cpu,
                source: io::Error::last_os_error(),
            });
        }
        Ok(())
    }

    /// `PERF_EVENT_IOC_ENABLE`.
    pub fn enable(&self) -> Result<(), LiveError> {
        // SAFETY: a valid perf fd; the argument is a flag word.
        let r = unsafe { perf_event_open_sys::ioctls::ENABLE(self.fd.as_raw_fd(), 0) };
        self.ioctl("ENABLE", r)
    }

    /// `PERF_EVENT_IOC_DISABLE`.
    pub fn disable(&self) -> Result<(), LiveError> {
        // SAFETY: a valid perf fd; the argument is a flag word.
        let r = unsafe { perf_event_open_sys::ioctls::DISABLE(self.fd.as_raw_fd(), 0) };
        self.ioctl("DISABLE", r)
    }

    /// `PERF_EVENT_IOC_ID`: the id records carry in PERF_SAMPLE_IDENTIFIER.
    pub fn id(&self) -> Result<u64, LiveError> {
        let mut id = 0u64;
        // SAFETY: a valid perf fd and a pointer to a live u64.
        let r = unsafe { perf_event_open_sys::ioctls::ID(self.fd.as_raw_fd(), &mut id) };
        self.ioctl("ID", r).map(|()| id)
    }

    /// `PERF_EVENT_IOC_SET_OUTPUT`: send this event's records into `target`'s ring (same
    /// CPU; this event must not be mapped itself).
    pub fn set_output(&self, target: &PerfEventFd) -> Result<(), LiveError> {
        // SAFETY: both fds are valid perf fds.
        let r = unsafe {
            perf_event_open_sys::ioctls::SET_OUTPUT(self.fd.as_raw_fd(), target.fd.as_raw_fd())
        };
        self.ioctl("SET_OUTPUT", r)
    }
}

impl AsFd for PerfEventFd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}
