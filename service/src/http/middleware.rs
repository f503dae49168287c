//! Middleware: bearer-token check, global token-bucket rate limit, request metrics labelled
//! by route template (axum's prometheus-metrics example: `MatchedPath`, bounded labels),
//! and JSON bodies for the errors axum and tower-http answer themselves.

use std::sync::Mutex;
use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::{ApiError, AppState};

/// A token bucket shared by all requests: `per_sec` tokens a second, at most `burst` saved.
#[derive(Debug)]
pub struct RateLimiter {
    per_sec: f64,
    burst: f64,
    bucket: Mutex<(f64, Instant)>,
}

impl RateLimiter {
    /// A full bucket.
    pub fn new(per_sec: u32, burst: u32) -> RateLimiter {
        RateLimiter {
            per_sec: f64::from(per_sec),
            burst: f64::from(burst.max(1)),
            bucket: Mutex::new((f64::from(burst.max(1)), Instant::now())),
        }
    }

    /// Takes one token at `now`; false when the bucket is empty.
    pub fn try_acquire_at(&self, now: Instant) -> bool {
        let Ok(mut b) = self.bucket.lock() else {
            return true;
        };
        let (tokens, last) = *b;
        let refill = now.saturating_duration_since(last).as_secs_f64() * self.per_sec;
        let tokens = (tokens + refill).min(self.burst);
        if tokens >= 1.0 {
            *b = (tokens - 1.0, now.max(last));
            true
        } else {
            *b = (tokens, now.max(last));
            false
        }
    }
}

/// 401 unless the request carries `Authorization: Bearer <token>` (when a token is set);
/// `/healthz` is always open.
pub async fn authorize(State(state): State<AppState>, req: Request, next: Next) -> Response {
    if let Some(token) = &state.token {
        if req.uri().path() != "/healthz" {
            let given = req
                .headers()
                .get(axum::http::header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.strip_prefix("Bearer "));
            if !given.is_some_and(|g| constant_time_eq(g.as_bytes(), token.as_bytes())) {
                return ApiError::Unauthorized.into_response();
            }
        }
    }
    next.run(req).await
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// 429 when the global request rate is exceeded.
pub async fn rate_limit(State(state): State<AppState>, req: Request, next: Next) -> Response {
    if !state.rate.try_acquire_at(Instant::now()) {
        return ApiError::TooManyRequests.into_response();
    }
    next.run(req).await
}

/// Counts every request in `pgo_agent_http_requests_total{route,method,status}`.
pub async fn record_request(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let start = Instant::now();
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or("unmatched", |m| match m.as_str() {
            "/healthz" => "/healthz",
            "/metrics" => "/metrics",
            "/api/v1/profiles" => "/api/v1/profiles",
            "/api/v1/profiles/{build_id}" => "/api/v1/profiles/{build_id}",
            "/api/v1/profiles/{build_id}/flamegraph.svg" => {
                "/api/v1/profiles/{build_id}/flamegraph.svg"
            }
            "/api/v1/heap" => "/api/v1/heap",
            "/api/v1/heap/{build_id}" => "/api/v1/heap/{build_id}",
            _ => "other",
        });
    let method = match *req.method() {
        axum::http::Method::GET => "GET",
        axum::http::Method::HEAD => "HEAD",
        _ => "other",
    };
    let resp = next.run(req).await;
    state
        .metrics
        .observe_http(route, method, resp.status().as_u16(), start.elapsed());
    resp
}

/// Largest error body read to be wrapped in JSON (axum's and tower-http's are a line).
const MAX_ERROR_BODY: usize = 4096;

/// Every error the API answers has the JSON body of [`ApiError`]: those axum and tower-http
/// answer themselves (405 wrong method, 400 query rejections, 413 body too large, 408
/// timeout) are given one, their text as the message (else the status's reason). Bodies
/// already JSON, or compressed, are left as they are.
pub async fn json_error_bodies(resp: Response) -> Response {
    use axum::http::header;
    let status = resp.status();
    let headers = resp.headers();
    let is_json = headers
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    if !(status.is_client_error() || status.is_server_error())
        || is_json
        || headers.contains_key(header::CONTENT_ENCODING)
    {
        return resp;
    }
    let (mut parts, body) = resp.into_parts();
    let text = axum::body::to_bytes(body, MAX_ERROR_BODY)
        .await
        .unwrap_or_default();
    let text = String::from_utf8_lossy(&text).trim().to_string();
    let reason = status.canonical_reason().unwrap_or("error");
    let message = if text.is_empty() {
        reason.to_string()
    } else {
        text
    };
    let code = reason.to_ascii_lowercase().replace([' ', '-'], "_");
    let body = serde_json::json!({ "error": code, "message": message }).to_string();
    parts.headers.remove(header::CONTENT_LENGTH);
    parts.headers.insert(
        header::CONTENT_TYPE,
        axum::http::HeaderValue::from_static("application/json"),
    );
    Response::from_parts(parts, axum::body::Body::from(body))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn bucket_refills_at_the_rate() {
        let r = RateLimiter::new(10, 2);
        let t0 = Instant::now();
        assert!(r.try_acquire_at(t0));
        assert!(r.try_acquire_at(t0));
        assert!(!r.try_acquire_at(t0));
        // 100 ms at 10/s: one token.
        assert!(r.try_acquire_at(t0 + Duration::from_millis(100)));
        assert!(!r.try_acquire_at(t0 + Duration::from_millis(100)));
    }

    #[test]
    fn token_comparison() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"ab"));
    }
}
