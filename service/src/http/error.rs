//! [`ApiError`]: every failure of the HTTP API as a status code and a short JSON body
//! (`{"error": "not_found", "message": "..."}`). Internal faults say only "internal error"
//! to the client; the detail goes to stderr (axum's error-handling example).

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;

use crate::store::StoreError;

/// See the module docs.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ApiError {
    /// No profile for this build id.
    #[error("no profile for build id {0}")]
    NotFound(String),
    /// No route has this path.
    #[error("no such route: {0}")]
    NoRoute(String),
    /// A path or query parameter is invalid.
    #[error("{0}")]
    BadRequest(String),
    /// Missing or wrong bearer token.
    #[error("missing or invalid bearer token")]
    Unauthorized,
    /// Over the request rate limit.
    #[error("too many requests")]
    TooManyRequests,
    /// A fault on the server side; the detail is logged, not sent.
    #[error("internal error")]
    Internal(String),
}

impl ApiError {
    /// The status code.
    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::NotFound(_) | ApiError::NoRoute(_) => StatusCode::NOT_FOUND,
            ApiError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ApiError::Unauthorized => StatusCode::UNAUTHORIZED,
            ApiError::TooManyRequests => StatusCode::TOO_MANY_REQUESTS,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The machine-readable code of the JSON body.
    pub fn code(&self) -> &'static str {
        match self {
            ApiError::NotFound(_) | ApiError::NoRoute(_) => "not_found",
            ApiError::BadRequest(_) => "bad_request",
            ApiError::Unauthorized => "unauthorized",
            ApiError::TooManyRequests => "too_many_requests",
            ApiError::Internal(_) => "internal",
        }
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::NotFound(id) => ApiError::NotFound(id),
            other => ApiError::Internal(other.to_string()),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if let ApiError::Internal(detail) = &self {
            eprintln!("pgo-agent: http: {detail}");
        }
        let body = serde_json::json!({ "error": self.code(), "message": self.to_string() });
        let mut r = (self.status(), Json(body)).into_response();
        if matches!(self, ApiError::Unauthorized) {
            r.headers_mut().insert(
                axum::http::header::WWW_AUTHENTICATE,
                axum::http::HeaderValue::from_static("Bearer"),
            );
        }
        r
    }
}
