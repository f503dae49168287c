//! The HTTP API (`service::http::router`) on arbitrary request lines: the first input line
//! is the path and query, the following `name: value` lines are headers. The router is
//! driven with `tower::ServiceExt::oneshot` over a state directory holding one symbolizable
//! aggregate (the propeller fixture binary) and one whose binary is missing. No request may
//! get a 5xx: every such state is valid, so a 500 would be a handler fault.
#![no_main]

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use axum::body::Body;
use axum::http::Request;
use service::http::{router, AppState, RateLimiter};
use service::store::{ProfileStore, StoreSettings};
use libfuzzer_sys::fuzz_target;
use tower::ServiceExt;

struct Env {
    state: AppState,
    rt: tokio::runtime::Runtime,
}

fn env() -> &'static Env {
    static ENV: OnceLock<Env> = OnceLock::new();
    ENV.get_or_init(|| {
        let dir = PathBuf::from(format!("/tmp/pgo-fuzz-http-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let bin = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/fixtures/propeller_sample_1/propeller_sample_1.bin.gen");
        let bin = bin.canonicalize().unwrap();
        let loaded = symbolizer::ProfiledBinary::load(&bin).unwrap();
        let unsym = "2\n1-3:10\n5-9:4\n1\n3->5:7\n";
        let mut ids = vec!["0123456789abcdef".to_string()];
        if let Some(id) = loaded.build_id() {
            ids.push(id.to_hex());
        }
        for hex in ids {
            let meta = format!(
                "{{\"build_id\":\"{hex}\",\"path\":\"{}\",\"kind\":\"lbr_only\",\"samples\":5}}",
                bin.display()
            );
            std::fs::write(dir.join(format!("{hex}.json")), meta).unwrap();
            std::fs::write(dir.join(format!("{hex}.unsymbolized")), unsym).unwrap();
        }
        let mut state = AppState::new(Arc::new(ProfileStore::new(StoreSettings {
            state_dir: dir,
            debug_dirs: vec![],
            mode: "intel_lbr".into(),
            retained_secs: 3600,
        })));
        // Never rate-limited: the fuzzer sends far more than the default 2000/s.
        state.rate = Arc::new(RateLimiter::new(1_000_000_000, 1_000_000_000));
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        Env { state, rt }
    })
}

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let mut lines = text.split('\n');
    let uri = lines.next().unwrap_or_default();
    let mut req = Request::builder().uri(uri);
    for line in lines.take(8) {
        if let Some((k, v)) = line.split_once(':') {
            req = req.header(k.trim(), v.trim());
        }
    }
    let Ok(req) = req.body(Body::empty()) else {
        return;
    };
    let env = env();
    let resp = env
        .rt
        .block_on(router(env.state.clone()).oneshot(req))
        .unwrap();
    let status = resp.status();
    assert!(!status.is_server_error(), "{status} for {uri:?}");
    let _ = env
        .rt
        .block_on(axum::body::to_bytes(resp.into_body(), 64 << 20));
});
