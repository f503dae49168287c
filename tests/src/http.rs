//! HTTP for the tests that talk to a daemon, a debuginfod or a Prometheus on loopback: one
//! GET that returns the status, headers and body of any answer, and the exporter's router
//! state over a state directory.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use service::http::AppState;
use service::store::{ProfileStore, StoreSettings};

/// How long [`http_get`] waits for an answer.
pub const HTTP_TIMEOUT: Duration = Duration::from_secs(30);

/// An HTTP answer, whatever its status.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpResponse {
    /// The status code.
    pub status: u16,
    /// The headers, names in lower case.
    pub headers: Vec<(String, String)>,
    /// The body as text.
    pub body: String,
}

impl HttpResponse {
    /// The value of header `name` ("" when absent).
    pub fn header(&self, name: &str) -> &str {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(n, _)| *n == name)
            .map_or("", |(_, v)| v.as_str())
    }

    /// The body of a `200 OK`; an error naming the status and body otherwise.
    pub fn ok(self) -> Result<String, String> {
        if self.status == 200 {
            Ok(self.body)
        } else {
            Err(format!("HTTP {}: {}", self.status, self.body))
        }
    }
}

/// GET `url` within [`HTTP_TIMEOUT`]: the answer whatever its status; an error when there
/// is none (no connection, a timeout, a body that is not text).
pub fn http_get(url: &str) -> Result<HttpResponse, String> {
    http_get_within(url, HTTP_TIMEOUT)
}

/// [`http_get`] with its own timeout.
pub fn http_get_within(url: &str, timeout: Duration) -> Result<HttpResponse, String> {
    let read = |r: ureq::Response| {
        let headers = r
            .headers_names()
            .into_iter()
            .map(|n| {
                let v = r.header(&n).unwrap_or("").to_string();
                (n.to_ascii_lowercase(), v)
            })
            .collect();
        (r.status(), headers, r.into_string())
    };
    let (status, headers, body) = match ureq::get(url).timeout(timeout).call() {
        Ok(r) => {
            let (status, headers, body) = read(r);
            (
                status,
                headers,
                body.map_err(|e| format!("GET {url}: {e}"))?,
            )
        }
        Err(ureq::Error::Status(_, r)) => {
            let (status, headers, body) = read(r);
            (status, headers, body.unwrap_or_default())
        }
        Err(e) => return Err(format!("GET {url}: {e}")),
    };
    Ok(HttpResponse {
        status,
        headers,
        body,
    })
}

/// The body of a `200 OK` answer to GET `url`; an error otherwise.
pub fn http_get_ok(url: &str) -> Result<String, String> {
    http_get(url)?.ok()
}

/// The exporter's router state over `state_dir` as the daemon serves it in LBR mode, an
/// hour of windows retained.
pub fn store_app(state_dir: &Path) -> AppState {
    AppState::new(Arc::new(ProfileStore::new(StoreSettings {
        state_dir: state_dir.to_path_buf(),
        debug_files: Default::default(),
        mode: "intel_lbr".into(),
        retained_secs: 3600,
    })))
}
