//! The handlers. Store access (file reads, symbolization) runs on the blocking pool.

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;

use super::query::{parse_build_id, ListQuery, ProfileQuery};
use super::{ApiError, AppState};
use crate::metrics::QUALITY_BINARIES;
use crate::store::{AggregateSource, Symbolization};

/// `GET /healthz`.
pub async fn healthz() -> &'static str {
    "ok\n"
}

/// Unknown routes: 404 with a JSON body naming the path (cut to 200 characters).
pub async fn not_found(uri: axum::http::Uri) -> ApiError {
    ApiError::NoRoute(uri.path().chars().take(200).collect())
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ApiError::Internal(format!("blocking task failed: {e}")))?
}

/// `GET /metrics`: the daemon's counters and the store's gauges, copied in at scrape time.
pub async fn metrics(State(state): State<AppState>) -> Result<Response, ApiError> {
    let text = blocking(move || {
        if let Some(daemon) = &state.daemon {
            state.metrics.observe_daemon(&daemon());
        }
        if let Ok(list) = state.store.list() {
            state.metrics.observe_store(&list);
            let quality: Vec<_> = list
                .iter()
                .filter(|p| p.symbolization == Symbolization::Symbolized)
                .take(QUALITY_BINARIES)
                .filter_map(|p| {
                    let id = collector::BuildId::from_hex(&p.build_id)?;
                    let q = state.store.quality(&id).ok()??;
                    let g = state.store.density_guidance(&id).ok()??;
                    Some((p.build_id.clone(), q, g))
                })
                .collect();
            state.metrics.observe_quality(&quality);
        }
        Ok(state.metrics.encode())
    })
    .await?;
    Ok((
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
        )],
        text,
    )
        .into_response())
}

/// Why `GET /api/v1/profiles` leaves some aggregates out (in its `hidden_why`).
pub const HIDDEN_WHY: &str = "aggregates with no counted sample in the retained windows: \
    every sample offered to them was dropped (each one's unwind_errors says why, e.g. \
    ip_not_code or bad_stack); GET /api/v1/profiles?all=true lists them";

/// `GET /api/v1/profiles[?all=true]`: the aggregates with counted samples, most first;
/// `hidden` counts the others (listed with `all=true`). Each entry is what the workers hold
/// now (`"source": "workers"`, a snapshot at most [`crate::store::LIVE_SNAPSHOT_TTL`] old)
/// or, for a binary no worker holds, its last flush (`"source": "state_dir"`), with
/// `updated_unix_secs` (when its counts were taken) and `age_secs` (how old they are).
pub async fn list_profiles(
    State(state): State<AppState>,
    query: Result<Query<ListQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::BadRequest(e.body_text()))?;
    let list = blocking(move || {
        let mut list = state.store.list()?;
        // The density guidance of the first symbolizable binaries with samples (each
        // profile generated once per flush, as for `/metrics`).
        for p in list
            .iter_mut()
            .filter(|p| p.samples > 0 && p.symbolization == Symbolization::Symbolized)
            .take(QUALITY_BINARIES)
        {
            if let Some(id) = collector::BuildId::from_hex(&p.build_id) {
                p.density = state.store.density_guidance(&id).ok().flatten();
            }
        }
        Ok(list)
    })
    .await?;
    let (shown, hidden): (Vec<_>, Vec<_>) =
        list.into_iter().partition(|p| query.all || p.samples > 0);
    let mut body = serde_json::json!({ "profiles": shown, "hidden": hidden.len() });
    if !hidden.is_empty() {
        body["hidden_why"] = HIDDEN_WHY.into();
    }
    Ok(Json(body).into_response())
}

/// `GET /api/v1/profiles/{build_id}?format=..&window=..`: the aggregate the list entry
/// describes (the workers' snapshot, else the last flush); `X-Pgo-Profile-Source`
/// (`workers`, `state_dir`) and `X-Pgo-Profile-Age` (seconds) say which and how old.
pub async fn get_profile(
    State(state): State<AppState>,
    Path(build_id): Path<String>,
    query: Result<Query<ProfileQuery>, QueryRejection>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::BadRequest(e.body_text()))?;
    let id = parse_build_id(&build_id)?;
    let hex = id.to_hex();
    let rendered = blocking(move || Ok(state.store.render(&id, query.format)?)).await?;
    let etag = HeaderValue::from_str(&rendered.etag)
        .map_err(|e| ApiError::Internal(format!("etag: {e}")))?;
    let matches = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            // If-None-Match compares weakly (RFC 9110 13.1.2): `W/"x"` matches `"x"`.
            v.split(',').map(str::trim).any(|t| {
                t == "*"
                    || t.strip_prefix("W/").unwrap_or(t) == rendered.etag.trim_start_matches("W/")
            })
        });
    if matches {
        return Ok((StatusCode::NOT_MODIFIED, [(header::ETAG, etag)]).into_response());
    }
    let file_name = format!("{hex}.window-all.{}", rendered.format.extension());
    let disposition = HeaderValue::from_str(&format!("attachment; filename=\"{file_name}\""))
        .map_err(|e| ApiError::Internal(format!("content-disposition: {e}")))?;
    let served = serde_json::to_value(rendered.format)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default();
    let mut resp = (
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static(rendered.format.content_type()),
            ),
            (header::ETAG, etag),
            (header::CONTENT_DISPOSITION, disposition),
        ],
        rendered.bytes.to_vec(),
    )
        .into_response();
    if let Ok(v) = HeaderValue::from_str(&served) {
        resp.headers_mut().insert("x-pgo-profile-format", v);
    }
    let source = match rendered.freshness.source {
        AggregateSource::Workers => "workers",
        AggregateSource::StateDir => "state_dir",
    };
    let headers = resp.headers_mut();
    headers.insert("x-pgo-profile-source", HeaderValue::from_static(source));
    headers.insert(
        "x-pgo-profile-age",
        HeaderValue::from(rendered.freshness.age_secs),
    );
    Ok(resp)
}

/// `GET /api/v1/profiles/{build_id}/flamegraph.svg`.
pub async fn flamegraph(
    State(state): State<AppState>,
    Path(build_id): Path<String>,
) -> Result<Response, ApiError> {
    let id = parse_build_id(&build_id)?;
    let svg = blocking(move || Ok(state.store.flamegraph(&id)?)).await?;
    Ok((
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("image/svg+xml"),
        )],
        svg,
    )
        .into_response())
}
