//! A `pgo-agent` daemon run by a test, started from a config:
//!
//! * [`RunningDaemon`]: `run_daemon` in a thread of this process, for a fixed time or until
//!   stopped, serving HTTP on a free loopback port when asked; its [`RunSummary`] at the
//!   end;
//! * [`DaemonProcess`]: `pgo-agent run` in a child process (this test executable
//!   re-executed on `cli_process`), for a log file, signals, a wrapper such as `setpriv`, or
//!   an environment of its own.
//!
//! Both are stopped when dropped (a failed assertion does not leave a daemon sampling).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use daemon::config::Config;
use daemon::run::{run_daemon, RunArgs, RunControl, RunSummary};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::http::{http_get, HttpResponse};
use crate::support::{cli_child_command, free_port, wait_for};

/// The cpu-clock sampling frequency of [`cpu_clock_config`]: a prime, so the samples do
/// not beat with the workloads' loops.
pub const CPU_CLOCK_HZ: u64 = 997;

/// The text of a cpu-clock config at [`CPU_CLOCK_HZ`] (no PMU needed) with `extra` after
/// its `[sampling]` table.
pub fn cpu_clock_config_text(extra: &str) -> String {
    format!("[sampling]\nmodes = [\"cpu_clock\"]\ncpu_clock_frequency_hz = {CPU_CLOCK_HZ}\n{extra}")
}

/// [`cpu_clock_config_text`], parsed over the embedded default.
pub fn cpu_clock_config(extra: &str) -> Config {
    let text = cpu_clock_config_text(extra);
    Config::parse(&text, Path::new("test.toml")).unwrap_or_else(|e| panic!("{e:#}:\n{text}"))
}

/// A daemon run in a thread of this process.
pub struct RunningDaemon {
    base: Option<String>,
    control: Arc<RunControl>,
    thread: Option<JoinHandle<Result<RunSummary, String>>>,
}

impl RunningDaemon {
    /// Starts `config` over `state` for `secs` seconds, not serving HTTP.
    pub fn start(config: &Config, state: &Path, secs: u64) -> RunningDaemon {
        RunningDaemon::start_with(config, state, secs, Arc::new(RunControl::default()))
    }

    /// [`RunningDaemon::start`] with the test's own `control` (e.g. `hold_after_scan`).
    pub fn start_with(
        config: &Config,
        state: &Path,
        secs: u64,
        control: Arc<RunControl>,
    ) -> RunningDaemon {
        RunningDaemon::spawn(config, state, secs, None, control)
    }

    /// Starts `config` over `state` for at most `secs` seconds, serving HTTP on a free
    /// loopback port, and waits until it answers `/healthz`.
    pub fn serve(config: &Config, state: &Path, secs: u64) -> RunningDaemon {
        let port = free_port();
        let d = RunningDaemon::spawn(
            config,
            state,
            secs,
            Some(port),
            Arc::new(RunControl::default()),
        );
        let up = wait_for(Duration::from_secs(30), || {
            d.get("/healthz").ok().filter(|r| r.status == 200)
        });
        assert!(up.is_some(), "the daemon never served /healthz");
        d
    }

    fn spawn(
        config: &Config,
        state: &Path,
        secs: u64,
        port: Option<u16>,
        control: Arc<RunControl>,
    ) -> RunningDaemon {
        let args = RunArgs {
            config: None,
            state_dir: Some(state.to_path_buf()),
            duration_secs: Some(secs),
            listen: port.map(|p| format!("127.0.0.1:{p}")),
        };
        let thread = std::thread::spawn({
            let (config, control) = (config.clone(), control.clone());
            move || run_daemon(&config, &args, &control).map_err(|e| format!("{e:#}"))
        });
        RunningDaemon {
            base: port.map(|p| format!("http://127.0.0.1:{p}")),
            control,
            thread: Some(thread),
        }
    }

    /// `http://127.0.0.1:PORT` (panics when it does not serve HTTP).
    pub fn base(&self) -> &str {
        self.base.as_deref().expect("a daemon serving HTTP")
    }

    /// The URL of `path` (`/metrics`, `/api/v1/profiles`, ...).
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base())
    }

    /// GET `path`: its answer whatever the status, an error when there is none.
    pub fn get(&self, path: &str) -> Result<HttpResponse, String> {
        http_get(&self.url(path))
    }

    /// Waits for the run to end by itself (its duration) and returns what it did.
    pub fn join(mut self) -> RunSummary {
        let thread = self.thread.take().expect("running");
        thread
            .join()
            .expect("the daemon thread")
            .unwrap_or_else(|e| panic!("the daemon failed: {e}"))
    }

    /// Stops it (final flush) and returns what it did.
    pub fn stop(self) -> RunSummary {
        self.control.stop.store(true, Ordering::SeqCst);
        self.join()
    }
}

impl Drop for RunningDaemon {
    fn drop(&mut self) {
        self.control.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// `run_daemon` of `config` over `state` for `secs` seconds in this thread, no HTTP.
pub fn run_for(config: &Config, secs: u64, state: &Path) -> RunSummary {
    RunningDaemon::start(config, state, secs).join()
}

/// The arguments of `pgo-agent run` with the config file `config` over `state` for at most
/// `secs` seconds, serving HTTP on 127.0.0.1:`port` (a free port when `None`: never the
/// default one, which another daemon may hold).
pub fn run_args(config: &Path, state: &Path, port: Option<u16>, secs: u64) -> Vec<String> {
    vec![
        "run".to_string(),
        "--config".into(),
        config.display().to_string(),
        "--state-dir".into(),
        state.display().to_string(),
        "--duration-secs".into(),
        secs.to_string(),
        "--listen".into(),
        format!("127.0.0.1:{}", port.unwrap_or_else(free_port)),
    ]
}

/// A `pgo-agent` child process writing its stderr (the log) to a file.
pub struct DaemonProcess {
    child: Child,
    log: PathBuf,
}

impl DaemonProcess {
    /// Starts `pgo-agent <args>` (e.g. [`run_args`]) as a child, its log in `log`.
    pub fn spawn(args: &[String], log: &Path) -> DaemonProcess {
        DaemonProcess::spawn_with(args, &[], log, &[])
    }

    /// [`DaemonProcess::spawn`] under `wrapper` (e.g. setpriv and its arguments) when not
    /// empty, with environment variables set (`None`: removed).
    pub fn spawn_with(
        args: &[String],
        wrapper: &[String],
        log: &Path,
        env: &[(&str, Option<String>)],
    ) -> DaemonProcess {
        let inner = cli_child_command(args);
        let mut cmd = match wrapper.split_first() {
            Some((w, rest)) => {
                let mut c = Command::new(w);
                c.args(rest).arg(inner.get_program()).args(inner.get_args());
                for (k, v) in inner.get_envs() {
                    if let Some(v) = v {
                        c.env(k, v);
                    }
                }
                c
            }
            None => inner,
        };
        cmd.stdout(Stdio::null()).stderr(
            std::fs::File::create(log).unwrap_or_else(|e| panic!("{}: {e}", log.display())),
        );
        for (name, value) in env {
            match value {
                Some(v) => cmd.env(name, v),
                None => cmd.env_remove(name),
            };
        }
        DaemonProcess {
            child: cmd.spawn().expect("starting the daemon child"),
            log: log.to_path_buf(),
        }
    }

    /// Its log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Whether it is still running.
    pub fn is_running(&mut self) -> bool {
        self.child
            .try_wait()
            .expect("waiting for the daemon")
            .is_none()
    }

    /// Waits until the log holds `what`; panics with the log when the child exits first or
    /// a minute passes.
    pub fn wait_for_log(&mut self, what: &str) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !self.log().contains(what) {
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!("daemon exited ({status}) before {what:?}:\n{}", self.log());
            }
            assert!(Instant::now() < deadline, "no {what:?} in:\n{}", self.log());
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGKILL; its log.
    pub fn sigkill(mut self) -> String {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.log()
    }

    /// Waits for it to exit by itself (`--duration-secs`): whether it succeeded, and its
    /// log.
    pub fn wait(mut self) -> (bool, String) {
        let ok = self.child.wait().unwrap().success();
        (ok, self.log())
    }

    /// SIGTERM, then whether it exited successfully, and its log.
    pub fn stop(self) -> (bool, String) {
        let pid = Pid::from_raw(self.child.id() as i32);
        kill(pid, Signal::SIGTERM).expect("SIGTERM to the daemon");
        self.wait()
    }

    /// A `/proc/PID/status` field in bytes (`VmRSS:`, `VmHWM:`); 0 when unreadable.
    pub fn status_bytes(&self, field: &str) -> u64 {
        let s = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .unwrap_or_default();
        s.lines()
            .find(|l| l.starts_with(field))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<u64>().ok())
            .map_or(0, |kb| kb * 1024)
    }
}

impl Drop for DaemonProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
