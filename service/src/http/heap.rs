//! Heap (MemProf) routes: `GET /api/v1/heap` and `GET /api/v1/heap/{build_id}?format=`.
//!
//! The daemon's heap spool (`daemon::run::heap_spool`) writes, per build id, with
//! temp file + rename, [`heap_file_name`]s: `<hex>.memprof.json` (a [`HeapSummary`]),
//! `<hex>.memprof.yaml` (MemProf YAML for `llvm-profdata merge`), `<hex>.memprof.txt` (text
//! listing) and `<hex>.memprof.pb.gz` (pprof). These handlers only read those files, so a
//! request never waits on an ingest.

use std::path::{Path, PathBuf};

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path as UrlPath, Query, State};
use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::Json;
use collector::BuildId;
use serde::{Deserialize, Serialize};

use super::query::parse_build_id;
use super::{ApiError, AppState};
use crate::store::MAX_STATE_FILE_BYTES;

/// The formats of one heap aggregate.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum HeapFormat {
    /// MemProf YAML (input of `llvm-profdata merge`).
    #[default]
    Yaml,
    /// Text listing with averages and stack ids.
    Text,
    /// pprof heap profile (gzip-compressed protobuf).
    Pprof,
}

impl HeapFormat {
    /// Every format, in the order the daemon writes them.
    pub const ALL: [HeapFormat; 3] = [HeapFormat::Yaml, HeapFormat::Text, HeapFormat::Pprof];

    /// File extension after `<hex>.memprof.`.
    pub fn extension(self) -> &'static str {
        match self {
            HeapFormat::Yaml => "yaml",
            HeapFormat::Text => "txt",
            HeapFormat::Pprof => "pb.gz",
        }
    }

    /// The response `Content-Type`.
    pub fn content_type(self) -> &'static str {
        match self {
            HeapFormat::Yaml => "application/yaml",
            HeapFormat::Text => "text/plain; charset=utf-8",
            HeapFormat::Pprof => "application/octet-stream",
        }
    }
}

/// `?format=yaml|text|pprof` (default yaml); unknown parameters are a 400.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HeapQuery {
    /// Output format.
    #[serde(default)]
    pub format: HeapFormat,
}

/// One heap aggregate, as listed by `GET /api/v1/heap` (the `<hex>.memprof.json` file).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
pub struct HeapSummary {
    /// GNU build id of the profiled binary, hex.
    pub build_id: String,
    /// Path of the binary the profiles were symbolized with.
    pub binary_path: String,
    /// Raw profiles merged.
    pub profiles_merged: u64,
    /// Distinct allocation contexts.
    pub contexts: u64,
    /// Raw MIBs dropped because none of their PCs symbolized.
    pub dropped_contexts: u64,
    /// Unix time of the last ingest.
    pub last_ingest_unix_secs: u64,
}

/// The summary file (`Some(format)`: that format's file) of `build_id` in `state_dir`.
pub fn heap_file_name(build_id: &BuildId, format: Option<HeapFormat>) -> String {
    let ext = format.map_or("json", HeapFormat::extension);
    format!("{}.memprof.{ext}", build_id.to_hex())
}

fn read_bounded(path: &Path, hex: &str) -> Result<Vec<u8>, ApiError> {
    let meta = std::fs::metadata(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => ApiError::NotFound(hex.to_string()),
        _ => ApiError::Internal(format!("{}: {e}", path.display())),
    })?;
    if meta.len() > MAX_STATE_FILE_BYTES {
        return Err(ApiError::Internal(format!(
            "{}: {} bytes exceeds the limit of {MAX_STATE_FILE_BYTES}",
            path.display(),
            meta.len()
        )));
    }
    std::fs::read(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => ApiError::NotFound(hex.to_string()),
        _ => ApiError::Internal(format!("{}: {e}", path.display())),
    })
}

/// Every heap summary in `state_dir`, most raw profiles first.
pub fn list_heap(state_dir: &Path) -> Result<Vec<HeapSummary>, ApiError> {
    let rd = std::fs::read_dir(state_dir)
        .map_err(|e| ApiError::Internal(format!("{}: {e}", state_dir.display())))?;
    let mut out = Vec::new();
    for entry in rd.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(hex) = name.strip_suffix(".memprof.json") else {
            continue;
        };
        if BuildId::from_hex(hex).is_none_or(|id| id.to_hex() != hex) {
            continue;
        }
        let Ok(bytes) = read_bounded(&entry.path(), hex) else {
            continue;
        };
        if let Ok(s) = serde_json::from_slice::<HeapSummary>(&bytes) {
            out.push(s);
        }
    }
    out.sort_by(|a, b| {
        b.profiles_merged
            .cmp(&a.profiles_merged)
            .then(a.build_id.cmp(&b.build_id))
    });
    Ok(out)
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ApiError::Internal(format!("blocking task failed: {e}")))?
}

fn state_dir(state: &AppState) -> PathBuf {
    state.store.settings().state_dir.clone()
}

/// `GET /api/v1/heap`.
pub async fn list(State(state): State<AppState>) -> Result<Response, ApiError> {
    let dir = state_dir(&state);
    let list = blocking(move || list_heap(&dir)).await?;
    Ok(Json(serde_json::json!({ "heap": list })).into_response())
}

/// `GET /api/v1/heap/{build_id}?format=yaml|text|pprof`.
pub async fn get(
    State(state): State<AppState>,
    UrlPath(build_id): UrlPath<String>,
    query: Result<Query<HeapQuery>, QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::BadRequest(e.body_text()))?;
    let id = parse_build_id(&build_id)?;
    let hex = id.to_hex();
    let path = state_dir(&state).join(heap_file_name(&id, Some(query.format)));
    let bytes = blocking({
        let hex = hex.clone();
        move || read_bounded(&path, &hex)
    })
    .await?;
    let file_name = format!("{hex}.memprof.{}", query.format.extension());
    let disposition = HeaderValue::from_str(&format!("attachment; filename=\"{file_name}\""))
        .map_err(|e| ApiError::Internal(format!("content-disposition: {e}")))?;
    Ok((
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static(query.format.content_type()),
            ),
            (header::CONTENT_DISPOSITION, disposition),
        ],
        bytes,
    )
        .into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_and_list_order() {
        let id = BuildId::from_hex("abcd").unwrap();
        assert_eq!(heap_file_name(&id, None), "abcd.memprof.json");
        assert_eq!(
            heap_file_name(&id, Some(HeapFormat::Pprof)),
            "abcd.memprof.pb.gz"
        );
        let dir = std::env::temp_dir().join(format!("pgo-heap-list-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        for (hex, n) in [("aa01", 2u64), ("bb02", 5)] {
            let s = HeapSummary {
                build_id: hex.into(),
                profiles_merged: n,
                ..Default::default()
            };
            std::fs::write(
                dir.join(format!("{hex}.memprof.json")),
                serde_json::to_vec(&s).unwrap(),
            )
            .unwrap();
        }
        // Not heap summaries: a CPU profile's metadata and a junk name.
        std::fs::write(dir.join("cc03.json"), b"{}").unwrap();
        std::fs::write(dir.join("zz.memprof.json"), b"{}").unwrap();
        let l = list_heap(&dir).unwrap();
        assert_eq!(
            l.iter()
                .map(|s| (s.build_id.as_str(), s.profiles_merged))
                .collect::<Vec<_>>(),
            vec![("bb02", 5), ("aa01", 2)]
        );
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn query_formats() {
        let q: HeapQuery = serde_json::from_str(r#"{"format":"pprof"}"#).unwrap();
        assert_eq!(q.format, HeapFormat::Pprof);
        assert!(serde_json::from_str::<HeapQuery>(r#"{"format":"svg"}"#).is_err());
        assert!(serde_json::from_str::<HeapQuery>(r#"{"window":"all"}"#).is_err());
    }
}
