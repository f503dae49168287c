//! systemd's readiness protocol (sd_notify(3)) without libsystemd: one datagram per state
//! change to the unix socket named by `$NOTIFY_SOCKET` (a path, or an abstract name written
//! with a leading `@`). The daemon sends `READY=1` once its perf rings are open and
//! enabled, `WATCHDOG=1` every `$WATCHDOG_USEC / 2` from its main loop (so a hung main loop
//! is restarted by `WatchdogSec=`), and `STOPPING=1` when it begins its shutdown. Without
//! `$NOTIFY_SOCKET` (not started by systemd) every call does nothing.

use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::time::{Duration, Instant};

use crate::error_chain::ErrorChain;

use anyhow::Context;

/// A connection to the service manager (or nothing, when not run by one).
#[derive(Debug)]
pub struct Notifier {
    target: Option<(UnixDatagram, SocketAddr)>,
    watchdog_every: Option<Duration>,
    next_watchdog: Option<Instant>,
}

/// The socket address `$NOTIFY_SOCKET` names: `/path` or `@abstract-name`.
pub fn notify_address(value: &str) -> anyhow::Result<SocketAddr> {
    if let Some(name) = value.strip_prefix('@') {
        use std::os::linux::net::SocketAddrExt;
        SocketAddr::from_abstract_name(name.as_bytes())
            .with_context(|| format!("abstract socket name {value:?}"))
    } else {
        anyhow::ensure!(
            value.starts_with('/'),
            "NOTIFY_SOCKET={value:?} is neither an absolute path nor @name"
        );
        SocketAddr::from_pathname(value).with_context(|| format!("socket path {value:?}"))
    }
}

/// The watchdog ping interval for `WATCHDOG_USEC` / `WATCHDOG_PID` (half the timeout, as
/// sd_watchdog_enabled(3) advises), or none when the watchdog is off or meant for another
/// process.
pub fn watchdog_interval(usec: Option<&str>, pid: Option<&str>, own_pid: u32) -> Option<Duration> {
    if let Some(pid) = pid {
        if pid.trim().parse::<u32>().ok() != Some(own_pid) {
            return None;
        }
    }
    let usec: u64 = usec?.trim().parse().ok().filter(|&u| u > 0)?;
    Some(Duration::from_micros(usec / 2))
}

impl Notifier {
    /// From `$NOTIFY_SOCKET`, `$WATCHDOG_USEC`, `$WATCHDOG_PID`. A malformed socket name is
    /// reported on stderr and notification is off.
    pub fn from_env() -> Notifier {
        let socket = std::env::var("NOTIFY_SOCKET").ok();
        let usec = std::env::var("WATCHDOG_USEC").ok();
        let pid = std::env::var("WATCHDOG_PID").ok();
        let watchdog = watchdog_interval(usec.as_deref(), pid.as_deref(), std::process::id());
        match socket.as_deref().map(Notifier::to_socket) {
            None => Notifier::disabled(),
            Some(Ok(n)) => Notifier {
                watchdog_every: watchdog,
                ..n
            },
            Some(Err(e)) => {
                tracing::warn!(
                    "not notifying systemd: {chain}",
                    chain = ErrorChain(e.as_ref())
                );
                Notifier::disabled()
            }
        }
    }

    /// A notifier that sends nothing.
    pub fn disabled() -> Notifier {
        Notifier {
            target: None,
            watchdog_every: None,
            next_watchdog: None,
        }
    }

    /// A notifier sending to `socket` (`/path` or `@name`), no watchdog.
    pub fn to_socket(socket: &str) -> anyhow::Result<Notifier> {
        let addr = notify_address(socket)?;
        let sock = UnixDatagram::unbound().context("creating a unix datagram socket")?;
        Ok(Notifier {
            target: Some((sock, addr)),
            watchdog_every: None,
            next_watchdog: None,
        })
    }

    /// Sets the watchdog interval (tests; [`Notifier::from_env`] reads it).
    pub fn with_watchdog(mut self, every: Option<Duration>) -> Notifier {
        self.watchdog_every = every;
        self
    }

    /// True when a service manager listens.
    pub fn enabled(&self) -> bool {
        self.target.is_some()
    }

    /// The watchdog interval, when the watchdog is on.
    pub fn watchdog_every(&self) -> Option<Duration> {
        self.watchdog_every
    }

    /// Sends `state` (newline-separated `KEY=value` lines); errors are reported on stderr
    /// and otherwise ignored (the service manager may be restarting).
    pub fn send(&self, state: &str) {
        if let Some((sock, addr)) = &self.target {
            if let Err(e) = sock.send_to_addr(state.as_bytes(), addr) {
                tracing::warn!("sd_notify {:?}: {e}", state.lines().next());
            }
        }
    }

    /// `READY=1` with a status line; starts the watchdog clock.
    pub fn ready(&mut self, status: &str) {
        self.send(&format!("READY=1\nSTATUS={status}"));
        self.next_watchdog = self.watchdog_every.map(|e| Instant::now() + e);
    }

    /// Sends `WATCHDOG=1` when the interval has passed since the last one (call from the
    /// main loop, more often than the interval).
    pub fn tick(&mut self, now: Instant) {
        let (Some(every), Some(next)) = (self.watchdog_every, self.next_watchdog) else {
            return;
        };
        if now >= next {
            self.send("WATCHDOG=1");
            self.next_watchdog = Some(now + every);
        }
    }

    /// `STOPPING=1`.
    pub fn stopping(&self) {
        self.send("STOPPING=1");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recv(sock: &UnixDatagram) -> String {
        let mut buf = [0u8; 512];
        let n = sock.recv(&mut buf).unwrap();
        String::from_utf8_lossy(&buf[..n]).into_owned()
    }

    #[test]
    fn path_and_abstract_sockets_receive_the_states() {
        let dir = std::env::temp_dir().join(format!("pgo-notify-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("notify.sock");
        let listener = UnixDatagram::bind(&path).unwrap();
        let mut n = Notifier::to_socket(path.to_str().unwrap())
            .unwrap()
            .with_watchdog(Some(Duration::from_secs(5)));
        n.ready("sampling 2 CPUs");
        assert_eq!(recv(&listener), "READY=1\nSTATUS=sampling 2 CPUs");
        // Not due yet: nothing sent; due: one WATCHDOG=1.
        let t0 = Instant::now();
        n.tick(t0);
        n.tick(t0 + Duration::from_secs(6));
        n.stopping();
        assert_eq!(recv(&listener), "WATCHDOG=1");
        assert_eq!(recv(&listener), "STOPPING=1");

        use std::os::linux::net::SocketAddrExt;
        let name = format!("pgo-notify-test-{}", std::process::id());
        let addr = SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let abstract_listener = UnixDatagram::bind_addr(&addr).unwrap();
        Notifier::to_socket(&format!("@{name}")).unwrap().stopping();
        assert_eq!(recv(&abstract_listener), "STOPPING=1");
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn watchdog_interval_is_half_the_timeout_for_this_process_only() {
        assert_eq!(
            watchdog_interval(Some("30000000"), None, 7),
            Some(Duration::from_secs(15))
        );
        assert_eq!(
            watchdog_interval(Some("30000000"), Some("7"), 7),
            Some(Duration::from_secs(15))
        );
        assert_eq!(watchdog_interval(Some("30000000"), Some("8"), 7), None);
        assert_eq!(watchdog_interval(Some("0"), None, 7), None);
        assert_eq!(watchdog_interval(None, None, 7), None);
        assert!(notify_address("relative").is_err());
        assert!(Notifier::disabled().watchdog_every().is_none());
    }
}
