//! OS signals mapped to one enum in one place: SIGINT/SIGTERM → shutdown (a second one
//! exits at once), SIGHUP → reload the filters. The handlers only set atomics.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal as NixSignal};

/// What a signal asks the daemon to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Signal {
    /// SIGINT or SIGTERM: final flush, then exit.
    Shutdown,
    /// SIGHUP: re-read the filters.
    Reload,
}

static SHUTDOWNS: AtomicU32 = AtomicU32::new(0);
static RELOAD: AtomicBool = AtomicBool::new(false);

extern "C" fn on_shutdown(_: libc::c_int) {
    if SHUTDOWNS.fetch_add(1, Ordering::SeqCst) >= 1 {
        // A second request while shutting down: exit now (async-signal-safe).
        // SAFETY: _exit may be called from a signal handler.
        unsafe { libc::_exit(130) };
    }
}

extern "C" fn on_reload(_: libc::c_int) {
    RELOAD.store(true, Ordering::SeqCst);
}

/// Installs the handlers.
pub fn install() -> anyhow::Result<()> {
    let shutdown = SigAction::new(
        SigHandler::Handler(on_shutdown),
        SaFlags::SA_RESTART,
        SigSet::empty(),
    );
    let reload = SigAction::new(
        SigHandler::Handler(on_reload),
        SaFlags::SA_RESTART,
        SigSet::empty(),
    );
    // SAFETY: the handlers only touch atomics (and _exit).
    unsafe {
        sigaction(NixSignal::SIGINT, &shutdown)?;
        sigaction(NixSignal::SIGTERM, &shutdown)?;
        sigaction(NixSignal::SIGHUP, &reload)?;
    }
    Ok(())
}

/// The pending request, if any (a shutdown wins over a reload; a reload is consumed).
pub fn pending() -> Option<Signal> {
    if SHUTDOWNS.load(Ordering::SeqCst) > 0 {
        Some(Signal::Shutdown)
    } else if RELOAD.swap(false, Ordering::SeqCst) {
        Some(Signal::Reload)
    } else {
        None
    }
}
