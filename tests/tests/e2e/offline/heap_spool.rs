//! The daemon's MemProf spool (issue 7, part 2): raw profiles of several runs of the corpus
//! program `tests/programs/memprof/heap_contexts.cc` (built with clang-19 `-fmemory-profile`)
//! and one truncated file are dropped into a spool directory and ingested by
//! `daemon::run::heap_spool::HeapSpool::scan` (what the daemon's spool thread runs); then,
//! through the axum router (`oneshot`):
//! * `GET /api/v1/heap/{id}` (YAML) equals `pgo-agent heap` of the same good files, also
//!   after a restart (the aggregate reloaded from the state directory);
//! * the truncated file is in `rejected/` with its reason, counted in `/metrics`;
//! * `GET /api/v1/heap` lists the aggregate; unknown id → 404, bad format → 400;
//! * the pprof rendering decodes and sums to the runs' allocations.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use daemon::heap::{HeapArgs, HeapFormat};
use daemon::run::heap_spool::{HeapSpool, HeapSpoolSettings, RejectReason};
use e2e::corpus::{target_dir, tools_available};
use e2e::support::build_and_run_heap_contexts;
use service::http::{router, AppState};
use service::store::{ProfileStore, StoreSettings};
use symbolizer::memprof::MemProfBinary;
use tower::ServiceExt;

/// (hot allocations of 64 bytes, cold allocations of 4096 bytes) per run.
const RUNS: [(u32, u32); 3] = [(10, 1), (20, 2), (30, 3)];

async fn get(state: &AppState, uri: &str) -> (StatusCode, Vec<u8>) {
    let resp = router(state.clone())
        .oneshot(Request::builder().uri(uri).body(Body::empty()).unwrap())
        .await
        .unwrap();
    let status = resp.status();
    let body = axum::body::to_bytes(resp.into_body(), 64 << 20)
        .await
        .unwrap()
        .to_vec();
    (status, body)
}

fn json(body: &[u8]) -> serde_json::Value {
    serde_json::from_slice(body)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(body)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spooled_raw_profiles_aggregate_and_are_served() {
    let test = "spooled_raw_profiles_aggregate_and_are_served";
    if !tools_available(test, &["clang++-19"]) {
        return;
    }
    let dir = target_dir().join("heap-spool-e2e");
    let _ = std::fs::remove_dir_all(&dir);
    let build = dir.join("build");
    std::fs::create_dir_all(&build).unwrap();
    let (binary, raws) = build_and_run_heap_contexts("clang++-19", &[], &build, &RUNS);
    let hex = MemProfBinary::load(&binary).unwrap().build_id().to_hex();

    // The binary is found by build id in a debug directory (`<dir>/<hex>`).
    let debug = dir.join("debug");
    std::fs::create_dir_all(&debug).unwrap();
    std::fs::copy(&binary, debug.join(&hex)).unwrap();

    let (spool, good) = fill_spool(&dir, &raws);
    let expected_yaml = offline_yaml(&dir, &good, &binary);
    let state_dir = dir.join("state");
    let settings = HeapSpoolSettings {
        spool_dir: spool.clone(),
        state_dir: state_dir.clone(),
        max_raw_file_bytes: 64 << 20,
        binaries: vec![],
        debug_dirs: vec![debug.clone()],
        scan_interval: Duration::from_secs(10),
    };
    let mut heap = HeapSpool::open(settings.clone()).unwrap();
    first_scan_ingests_and_sets_aside(&mut heap, &spool, &hex);
    let state = AppState::new(Arc::new(ProfileStore::new(StoreSettings {
        state_dir: state_dir.clone(),
        debug_files: Default::default(),
        mode: "cpu_clock".into(),
        retained_secs: 3600,
    })));

    served_formats(&state, &hex, &debug, &expected_yaml).await;
    errors_and_metrics(&state, &hex).await;

    // Restart: the aggregate is reloaded; a file that was folded in but whose move was cut
    // short (simulated by putting it back) is not counted twice; a new run adds to it.
    drop(heap);
    std::fs::copy(spool.join("ingested/run1.raw"), spool.join("run1.raw")).unwrap();
    let mut heap = HeapSpool::open(settings).unwrap();
    let id = collector::BuildId::from_hex(&hex).unwrap();
    let restored = exporter::format::memprof_yaml::memprof_yaml_string(heap.profile(&id).unwrap());
    assert_eq!(restored.as_bytes(), expected_yaml.as_slice());
    assert_eq!(heap.profile(&id).unwrap().profiles(), 3);
    let report = heap.scan();
    assert_eq!(report.ingested.len(), 1);
    assert!(spool.join("ingested/run1.raw.1").is_file());
    let (_, yaml3) = get(&state, &format!("/api/v1/heap/{hex}")).await;
    assert_eq!(yaml3, expected_yaml);
    assert_eq!(heap.profile(&id).unwrap().profiles(), 3);
    // A new file (another name) is folded in.
    std::fs::copy(&raws[2], spool.join("run3.raw")).unwrap();
    let report = heap.scan();
    assert_eq!(report.ingested.len(), 1);
    assert_eq!(heap.profile(&id).unwrap().profiles(), 4);
    let (_, body) = get(&state, "/api/v1/heap").await;
    assert_eq!(json(&body)["heap"][0]["profiles_merged"], 4);
}

/// The spool under `dir`: the three good raw profiles, one truncated file, and two
/// incomplete names; the spool and the good files.
fn fill_spool(dir: &Path, raws: &[PathBuf]) -> (PathBuf, Vec<PathBuf>) {
    let spool = dir.join("spool");
    std::fs::create_dir_all(&spool).unwrap();
    let mut good = Vec::new();
    for (i, raw) in raws.iter().enumerate() {
        let p = spool.join(format!("run{i}.raw"));
        std::fs::copy(raw, &p).unwrap();
        good.push(p);
    }
    let first = std::fs::read(&raws[0]).unwrap();
    std::fs::write(spool.join("bad.raw"), &first[..first.len() / 2]).unwrap();
    std::fs::write(spool.join(".run9.raw"), &first).unwrap();
    std::fs::write(spool.join("run8.raw.tmp"), &first).unwrap();
    (spool, good)
}

/// The offline oracle: `pgo-agent heap` over the same good files, in YAML.
fn offline_yaml(dir: &Path, good: &[PathBuf], binary: &Path) -> Vec<u8> {
    let expected_yaml = dir.join("expected.yaml");
    let code = daemon::heap::run(HeapArgs {
        profraw: good.to_vec(),
        binary: binary.to_path_buf(),
        output: expected_yaml.clone(),
        format: HeapFormat::Yaml,
        strict: true,
    })
    .unwrap();
    assert_eq!(code, ExitCode::SUCCESS);
    std::fs::read(&expected_yaml).unwrap()
}

/// The first scan folds the good files in (all of `hex`), moves them to `ingested/`, sets
/// the truncated one aside in `rejected/` with its reason, and leaves incomplete names.
fn first_scan_ingests_and_sets_aside(heap: &mut HeapSpool, spool: &Path, hex: &str) {
    let report = heap.scan();
    let names = |v: Vec<&PathBuf>| -> Vec<String> {
        v.into_iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect()
    };
    assert_eq!(
        names(report.ingested.iter().map(|(p, _)| p).collect()),
        ["run0.raw", "run1.raw", "run2.raw"]
    );
    assert!(report.ingested.iter().all(|(_, id)| *id == hex));
    assert_eq!(report.rejected.len(), 1, "{:?}", report.rejected);
    assert_eq!(report.rejected[0].0, spool.join("bad.raw"));
    assert_eq!(report.rejected[0].1, RejectReason::Truncated);
    assert!(report.retried.is_empty());

    // Files moved: good ones to ingested/, the bad one to rejected/ with its reason.
    for i in 0..3 {
        assert!(spool.join(format!("ingested/run{i}.raw")).is_file());
        assert!(!spool.join(format!("run{i}.raw")).exists());
    }
    assert!(spool.join("rejected/bad.raw").is_file());
    let reason = std::fs::read_to_string(spool.join("rejected/bad.raw.reason")).unwrap();
    let bad = spool.join("bad.raw").display().to_string();
    assert!(
        reason.starts_with(&format!(
            "input: {bad}\nreason: truncated\nerror: {bad}: offset "
        )),
        "{reason}"
    );
    assert!(reason.contains("truncated:"), "{reason}");
    // Incomplete names are left alone.
    assert!(spool.join(".run9.raw").is_file() && spool.join("run8.raw.tmp").is_file());
}

/// YAML (equal to the offline command's), the list, text and pprof.
async fn served_formats(state: &AppState, hex: &str, debug: &Path, expected_yaml: &[u8]) {
    // YAML (the default format) equals the offline command's output.
    let (status, yaml) = get(state, &format!("/api/v1/heap/{hex}")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        String::from_utf8_lossy(&yaml),
        String::from_utf8_lossy(expected_yaml)
    );
    let (status, yaml2) = get(state, &format!("/api/v1/heap/{hex}?format=yaml")).await;
    assert_eq!((status, &yaml2), (StatusCode::OK, &yaml));

    // The list.
    let (status, body) = get(state, "/api/v1/heap").await;
    assert_eq!(status, StatusCode::OK);
    let list = json(&body);
    let entries = list["heap"].as_array().unwrap();
    assert_eq!(entries.len(), 1, "{list}");
    assert_eq!(entries[0]["build_id"], hex);
    assert_eq!(
        entries[0]["binary_path"],
        debug.join(hex).display().to_string().as_str()
    );
    assert_eq!(entries[0]["profiles_merged"], 3);
    assert_eq!(entries[0]["contexts"], 2);

    // Text.
    let (status, text) = get(state, &format!("/api/v1/heap/{hex}?format=text")).await;
    assert_eq!(status, StatusCode::OK);
    let text = String::from_utf8_lossy(&text);
    assert!(
        text.starts_with(&format!(
            "heap profile: build id {hex}, 2 contexts from 3 raw profiles"
        )),
        "{text}"
    );

    // pprof: two samples summing to the runs' allocations.
    let (status, pb) = get(state, &format!("/api/v1/heap/{hex}?format=pprof")).await;
    assert_eq!(status, StatusCode::OK);
    let profile = exporter::format::pprof::from_bytes(&pb).unwrap();
    assert_eq!(profile.sample.len(), 2);
    let hot: i64 = RUNS.iter().map(|r| i64::from(r.0)).sum();
    let cold: i64 = RUNS.iter().map(|r| i64::from(r.1)).sum();
    let objects: i64 = profile.sample.iter().map(|s| s.value[0]).sum();
    let space: i64 = profile.sample.iter().map(|s| s.value[1]).sum();
    assert_eq!(objects, hot + cold);
    assert_eq!(space, 64 * hot + 4096 * cold);
    let mut sizes: Vec<i64> = profile.sample.iter().map(|s| s.value[1]).collect();
    sizes.sort();
    assert_eq!(sizes, vec![64 * hot, 4096 * cold]);
}

/// Errors as JSON with a code, and the ingestion counters in `/metrics`.
async fn errors_and_metrics(state: &AppState, hex: &str) {
    // Errors.
    let (status, body) = get(state, "/api/v1/heap/00112233445566778899").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(json(&body)["error"], "not_found");
    let (status, body) = get(state, &format!("/api/v1/heap/{hex}?format=svg")).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(json(&body)["error"], "bad_request");
    let (status, _) = get(state, &format!("/api/v1/heap/{hex}?window=all")).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (status, _) = get(state, "/api/v1/heap/xyz").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);

    // Metrics (process-wide counters: this is the only test of this binary that ingests).
    let (status, body) = get(state, "/metrics").await;
    assert_eq!(status, StatusCode::OK);
    let metrics = String::from_utf8_lossy(&body);
    assert!(
        metrics
            .lines()
            .any(|l| l == "pgo_agent_heap_profiles_ingested_total 3"),
        "{metrics}"
    );
    assert!(
        metrics
            .lines()
            .any(|l| l == "pgo_agent_heap_profiles_rejected_total{reason=\"truncated\"} 1"),
        "{metrics}"
    );
}
