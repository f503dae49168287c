//! The HTTP service inside `pgo-agent run`: a small tokio runtime built explicitly on its
//! own thread (only HTTP is async), serving [`service::http::router`] over the state
//! directory and, with a live source, the workers' current aggregates ([`super::live`])
//! until [`HttpServer::stop`].

use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use collector::live::{ReaderStats, SamplingMode};
use service::http::{check_listen, AppState};
use service::metrics::DaemonCounters;
use service::store::{ProfileStore, StoreSettings};

use super::router::RouterStats;
use crate::config::Config;

/// How long in-flight requests may hold up shutdown.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);
/// How often the store is asked to forget the binaries it has not used for
/// [`service::loaded_binaries::BINARY_IDLE`].
const IDLE_BINARY_CHECK: Duration = Duration::from_secs(30);

/// A running server; [`HttpServer::stop`] shuts it down.
pub struct HttpServer {
    /// The bound address (the port is resolved when 0 was asked for).
    pub local_addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// Reads the token file: its first line, trimmed; empty is an error.
pub fn read_token(path: &std::path::Path) -> anyhow::Result<String> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading token file {}", path.display()))?;
    let token = text.lines().next().unwrap_or("").trim().to_string();
    anyhow::ensure!(!token.is_empty(), "token file {} is empty", path.display());
    Ok(token)
}

/// The live pipeline's counters that `/metrics` reads.
#[derive(Clone, Default)]
pub struct LiveCounters {
    /// The per-CPU readers'.
    pub readers: Arc<ReaderStats>,
    /// The router's, as of its last batch.
    pub routing: Arc<Mutex<RouterStats>>,
}

/// The API's socket, bound before sampling starts (a wrong address or a port in use stops
/// the daemon before it opens any perf event), with the bearer token.
pub struct BoundListener {
    listener: TcpListener,
    token: Option<String>,
}

/// Binds `listen`, refusing a non-loopback address without `output.token_file`.
pub fn bind(listen: &str, config: &Config) -> anyhow::Result<BoundListener> {
    let addr: SocketAddr = listen
        .parse()
        .with_context(|| format!("listen address {listen:?}: expected IP:PORT"))?;
    let token = match &config.output.token_file {
        Some(p) => Some(read_token(p)?),
        None => None,
    };
    check_listen(addr, token.as_deref())?;
    let listener = TcpListener::bind(addr).with_context(|| format!("binding {addr}"))?;
    listener.set_nonblocking(true)?;
    Ok(BoundListener { listener, token })
}

/// Starts serving on `bound`.
pub fn start(
    bound: BoundListener,
    config: &Config,
    state_dir: PathBuf,
    debug_files: symbolizer::debug_file::DebugFileFinder,
    mode: SamplingMode,
    counters: LiveCounters,
    live: Option<Arc<dyn service::store::LiveSource>>,
) -> anyhow::Result<HttpServer> {
    let BoundListener { listener, token } = bound;
    let local_addr = listener.local_addr()?;
    let agg = &config.aggregation;
    let mut store = ProfileStore::new(StoreSettings {
        debug_files,
        state_dir,
        mode: mode.name().to_string(),
        retained_secs: agg.window_secs.saturating_mul(agg.retained_windows as u64),
    });
    if let Some(live) = live {
        store = store.with_live(live);
    }
    let store = Arc::new(store);
    let idle_store = store.clone();
    let mut state = AppState::new(store);
    state.token = token.map(Arc::from);
    let mode_name = mode.name();
    let branch_stack = mode != SamplingMode::CpuClock;
    state.daemon = Some(Arc::new(move || {
        let r = counters.readers.snapshot();
        let routed = counters
            .routing
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        DaemonCounters {
            mode: mode_name,
            branch_stack,
            samples: r.samples,
            records_lost: r.lost_events,
            samples_lost: r.lost_samples,
            events_dropped: r.events_dropped,
            parse_errors: r.parse_errors,
            not_routed: routed.not_routed(),
        }
    }));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .max_blocking_threads(4)
        .thread_name("pgo-http")
        .enable_io()
        .enable_time()
        .build()
        .context("building the HTTP runtime")?;
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let thread = std::thread::Builder::new()
        .name("pgo-http-main".into())
        .spawn(move || {
            runtime.block_on(async move {
                let listener = match tokio::net::TcpListener::from_std(listener) {
                    Ok(l) => l,
                    Err(e) => {
                        tracing::error!("http: {e}");
                        return;
                    }
                };
                // The binaries loaded to render profiles go once unused (the store keeps
                // none while nobody asks).
                tokio::spawn(async move {
                    let mut tick = tokio::time::interval(IDLE_BINARY_CHECK);
                    loop {
                        tick.tick().await;
                        if idle_store.forget_idle_binaries() > 0 {
                            collector::freed_memory::give_back_freed_memory();
                        }
                    }
                });
                let (graceful_tx, graceful_rx) = tokio::sync::oneshot::channel::<()>();
                let server = tokio::spawn(service::http::serve(listener, state, async move {
                    let _ = graceful_rx.await;
                }));
                let _ = stop_rx.await;
                let _ = graceful_tx.send(());
                match tokio::time::timeout(SHUTDOWN_GRACE, server).await {
                    Ok(Ok(Err(e))) => tracing::error!("http: {e}"),
                    Err(_) => tracing::warn!("http: in-flight requests cut at shutdown"),
                    _ => {}
                }
            });
            runtime.shutdown_timeout(Duration::from_secs(1));
        })?;
    tracing::info!("serving HTTP on http://{local_addr}");
    Ok(HttpServer {
        local_addr,
        stop: Some(stop_tx),
        thread: Some(thread),
    })
}

impl HttpServer {
    /// Stops accepting, lets in-flight requests finish (up to [`SHUTDOWN_GRACE`]), joins.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        self.shutdown();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("pgo-http-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn non_loopback_without_token_is_refused_and_loopback_serves() {
        let dir = temp("listen");
        let config = Config::embedded();
        let counters = LiveCounters::default();
        let err = bind("0.0.0.0:0", &config).err().unwrap();
        assert!(
            format!("{err:#}").contains("without a token file"),
            "{err:#}"
        );
        let err = bind("localhost", &config).err().unwrap();
        assert!(format!("{err:#}").contains("expected IP:PORT"), "{err:#}");

        // With a token file, a wildcard address is allowed; requests need the token.
        std::fs::write(dir.join("token"), "s3cret\n").unwrap();
        let mut config = Config::embedded();
        config.output.token_file = Some(dir.join("token"));
        let server = start(
            bind("0.0.0.0:0", &config).unwrap(),
            &config,
            dir.clone(),
            Default::default(),
            SamplingMode::CpuClock,
            counters,
            None,
        )
        .unwrap();
        let port = server.local_addr.port();
        let url = format!("http://127.0.0.1:{port}/api/v1/profiles");
        match ureq::get(&url).call() {
            Err(ureq::Error::Status(code, _)) => assert_eq!(code, 401),
            other => panic!("expected 401, got {other:?}"),
        }
        let body = ureq::get(&url)
            .set("Authorization", "Bearer s3cret")
            .call()
            .unwrap()
            .into_string()
            .unwrap();
        assert_eq!(body, r#"{"hidden":0,"profiles":[]}"#);
        server.stop();
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn token_file_first_line() {
        let dir = temp("token");
        let p = dir.join("t");
        std::fs::write(&p, "  abc  \nsecond\n").unwrap();
        assert_eq!(read_token(&p).unwrap(), "abc");
        std::fs::write(&p, "\n").unwrap();
        assert!(read_token(&p).is_err());
        let _ = std::fs::remove_dir_all(dir);
    }
}
