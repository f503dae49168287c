//! The HTTP API, served by the daemon (axum): [`router`] builds it over an [`AppState`], as
//! axum's `app()` testing example does, so tests drive it with `oneshot` and the daemon
//! with [`serve`].
//!
//! | route | what |
//! |---|---|
//! | `GET /healthz` | `ok` (no token needed) |
//! | `GET /metrics` | Prometheus text exposition ([`crate::metrics`]) |
//! | `GET /api/v1/profiles` | JSON list of the aggregates ([`crate::store::ProfileSummary`]) |
//! | `GET /api/v1/profiles/{build_id}?format=extbinary\|text\|unsymbolized\|pprof&window=all` | one profile |
//! | `GET /api/v1/profiles/{build_id}/flamegraph.svg` | inferno flame graph |
//! | `GET /api/v1/heap` | JSON list of the heap (MemProf) aggregates ([`heap::HeapSummary`]) |
//! | `GET /api/v1/heap/{build_id}?format=yaml\|text\|pprof` | one heap aggregate |
//!
//! Profiles carry a strong ETag (304 on `If-None-Match`), a `Content-Disposition` file name
//! `<build-id>.window-all.<ext>`, and `X-Pgo-Profile-Format` (the format served: the
//! unsymbolized profile when the host cannot symbolize). Responses are gzip-compressed when
//! the client sends `Accept-Encoding: gzip`. Errors are JSON ([`ApiError`]).
//!
//! Fresh reads: in the daemon, the list, the profiles and the flame graphs serve what the
//! workers hold now (a snapshot at most [`crate::store::LIVE_SNAPSHOT_TTL`] old, restored
//! counts included), not what the last flush wrote; list entries say so (`source`:
//! `workers` or `state_dir`, `updated_unix_secs`, `age_secs`), profiles in
//! `X-Pgo-Profile-Source` and `X-Pgo-Profile-Age`. See [`crate::store`].
//!
//! Limits ([`HttpLimits`]): request body size, a per-request timeout, a global token-bucket
//! request rate (429 over it); with a token, every route but `/healthz` needs
//! `Authorization: Bearer <token>`.

pub mod connections;
pub mod error;
pub mod heap;
pub mod middleware;
pub mod query;
pub mod routes;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::routing::get;
use axum::Router;
use tower_http::compression::CompressionLayer;
use tower_http::limit::RequestBodyLimitLayer;
use tower_http::timeout::TimeoutLayer;

pub use error::ApiError;
pub use middleware::RateLimiter;
pub use query::ProfileQuery;

use crate::metrics::{DaemonCounters, Metrics};
use crate::store::ProfileStore;

/// Default largest request body (bytes): the API takes no bodies.
pub const DEFAULT_MAX_REQUEST_BODY_BYTES: usize = 16 << 10;
/// Default per-request timeout.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Default sustained request rate (per second, all clients).
pub const DEFAULT_REQUESTS_PER_SEC: u32 = 2000;
/// Default burst above the rate.
pub const DEFAULT_REQUEST_BURST: u32 = 1000;
/// Default time a connection has to send a request's headers.
pub const DEFAULT_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Request limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HttpLimits {
    /// Largest request body (413 over it).
    pub max_request_body_bytes: usize,
    /// Per-request timeout (408 over it).
    pub request_timeout: Duration,
    /// Sustained requests per second (429 over it).
    pub requests_per_sec: u32,
    /// Burst size of the token bucket.
    pub request_burst: u32,
    /// How long a connection may take to send a request's headers, and how long an idle
    /// connection is kept open (the connection is closed past it).
    pub header_read_timeout: Duration,
}

impl Default for HttpLimits {
    fn default() -> Self {
        HttpLimits {
            max_request_body_bytes: DEFAULT_MAX_REQUEST_BODY_BYTES,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            requests_per_sec: DEFAULT_REQUESTS_PER_SEC,
            request_burst: DEFAULT_REQUEST_BURST,
            header_read_timeout: DEFAULT_HEADER_READ_TIMEOUT,
        }
    }
}

/// Reads the daemon's live counters at scrape time.
pub type DaemonCountersFn = Arc<dyn Fn() -> DaemonCounters + Send + Sync>;

/// What the handlers share.
#[derive(Clone)]
pub struct AppState {
    /// The read model over the state directory.
    pub store: Arc<ProfileStore>,
    /// The metric families.
    pub metrics: Arc<Metrics>,
    /// The daemon's live counters (`None` in tests without a daemon).
    pub daemon: Option<DaemonCountersFn>,
    /// Bearer token required on every route but `/healthz`.
    pub token: Option<Arc<str>>,
    /// The request rate limiter.
    pub rate: Arc<RateLimiter>,
    /// Limits.
    pub limits: HttpLimits,
}

impl AppState {
    /// A state with default limits, no daemon counters and no token.
    pub fn new(store: Arc<ProfileStore>) -> AppState {
        let limits = HttpLimits::default();
        AppState {
            store,
            metrics: Arc::new(Metrics::new()),
            daemon: None,
            token: None,
            rate: Arc::new(RateLimiter::new(
                limits.requests_per_sec,
                limits.request_burst,
            )),
            limits,
        }
    }
}

/// The API (see the module docs).
pub fn router(state: AppState) -> Router {
    let limits = state.limits;
    Router::new()
        .route("/healthz", get(routes::healthz))
        .route("/metrics", get(routes::metrics))
        .route("/api/v1/profiles", get(routes::list_profiles))
        .route("/api/v1/profiles/{build_id}", get(routes::get_profile))
        .route(
            "/api/v1/profiles/{build_id}/flamegraph.svg",
            get(routes::flamegraph),
        )
        .route("/api/v1/heap", get(heap::list))
        .route("/api/v1/heap/{build_id}", get(heap::get))
        .fallback(routes::not_found)
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            middleware::authorize,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            middleware::rate_limit,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            middleware::record_request,
        ))
        // The router's and extractors' errors before they are compressed, then those of
        // the outer layers (413, 408).
        .layer(axum::middleware::map_response(
            middleware::json_error_bodies,
        ))
        .layer(CompressionLayer::new().gzip(true))
        .layer(RequestBodyLimitLayer::new(limits.max_request_body_bytes))
        .layer(TimeoutLayer::with_status_code(
            axum::http::StatusCode::REQUEST_TIMEOUT,
            limits.request_timeout,
        ))
        .layer(axum::middleware::map_response(
            middleware::json_error_bodies,
        ))
        .with_state(state)
}

/// Why a listen address was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ListenError {
    /// A non-loopback address without a bearer token.
    #[error("refusing to listen on non-loopback {0} without a token file (output.token_file)")]
    RemoteWithoutToken(SocketAddr),
}

/// Remote access needs a token: a non-loopback `addr` without one is refused.
pub fn check_listen(addr: SocketAddr, token: Option<&str>) -> Result<(), ListenError> {
    if !addr.ip().is_loopback() && token.is_none_or(str::is_empty) {
        return Err(ListenError::RemoteWithoutToken(addr));
    }
    Ok(())
}

/// Serves [`router`] on `listener` until `shutdown` resolves (in-flight requests are
/// bounded by the request timeout, headers by [`HttpLimits::header_read_timeout`]; see
/// [`connections`]).
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let header_read_timeout = state.limits.header_read_timeout;
    connections::serve(listener, router(state), header_read_timeout, shutdown).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remote_needs_a_token() {
        let local: SocketAddr = "127.0.0.1:9464".parse().unwrap();
        let local6: SocketAddr = "[::1]:9464".parse().unwrap();
        let remote: SocketAddr = "0.0.0.0:9464".parse().unwrap();
        assert!(check_listen(local, None).is_ok());
        assert!(check_listen(local6, None).is_ok());
        assert!(matches!(
            check_listen(remote, None),
            Err(ListenError::RemoteWithoutToken(a)) if a == remote
        ));
        assert!(check_listen(remote, Some("")).is_err());
        assert!(check_listen(remote, Some("s3cret")).is_ok());
    }
}
