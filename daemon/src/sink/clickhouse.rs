//! ClickHouse over its HTTP interface (`POST /?query=...`, body in TabSeparated): the
//! schema, the row encoding of one closed window, its insertion, and the fleet-merge query
//! `pgo-agent pull --clickhouse` asks.
//!
//! Written for ClickHouse 18.16 (Debian's package) and newer: only `ReplacingMergeTree`,
//! `Distributed`, TabSeparated in and out, `IN (subquery)` on tuples, HTTP basic auth.
//!
//! # Schema (one database, default `pgo`)
//!
//! * `counters`: one row per (build id, host, window start, context, kind of counter,
//!   from, to) with its count in that window. Addresses are offsets from the binary's
//!   preferred base (as in the unsymbolized profile), so hosts that load the binary at
//!   different addresses agree. `ReplacingMergeTree(count)` ordered by the whole key: a
//!   window inserted twice (a retry after a timeout whose first attempt did land)
//!   collapses to one row per key, the one with the largest count.
//! * `contexts`: the frames of each context hash (call-site offsets, outermost first; for
//!   line contexts the frame addresses), per build id, with the counter kind and the
//!   preferred base (so a pull without the binary can order and print the counters
//!   exactly as llvm-profgen does: sorted by address, offsets printed).
//! * `windows`: one row per delivered (build id, host, window start), inserted after all
//!   the window's counter rows: the delivery marker.
//!
//! # Idempotency per (host, window)
//!
//! Non-replicated tables in 18.16 have no insert deduplication, and parts merge when they
//! like, so the pull query does not wait for merges: it reads `FINAL`, which collapses
//! duplicate keys at read time (a streaming merge of the sorted parts, keeping the row
//! with the largest count: a window's rows are identical in every retry, and a window
//! handed again later only has grown), then sums over hosts and windows, and only counts
//! windows whose marker is present (a window half inserted when the connection broke is
//! invisible until its retry completes). A retry therefore never counts twice and a
//! partial window never counts at all. (A `GROUP BY host, window, key` with `max` gives
//! the same answer but needs a hash table of every row, which outgrows the server's memory
//! on a fleet's tables.)

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Read;
use std::time::Duration;

use collector::BuildId;
use unwinder::{CounterKind, CounterSet};

/// Largest response body read from ClickHouse (bytes).
pub const MAX_RESPONSE_BYTES: u64 = 1 << 30;

/// Most frames a context row may carry when read back (a hostile server cannot make the
/// reader allocate without bound beyond the response limit anyway; this bounds one key).
pub const MAX_CONTEXT_FRAMES: usize = 4096;

/// Why a ClickHouse request failed. [`ClickHouseError::reason`] is the bounded metrics label.
#[derive(Debug)]
#[non_exhaustive]
pub enum ClickHouseError {
    /// The server could not be reached (connection refused, DNS).
    Connect {
        /// The request (`INSERT INTO pgo.counters`, or the first words of a query).
        what: String,
        /// The transport's message.
        message: String,
    },
    /// The request timed out or the connection broke mid-way.
    Timeout {
        /// The request.
        what: String,
        /// The transport's message.
        message: String,
    },
    /// The server answered with an HTTP error status (its exception text in `body`).
    Status {
        /// The request.
        what: String,
        /// HTTP status.
        status: u16,
        /// The first 1000 bytes of the body.
        body: String,
    },
    /// The response was not what the query's format promises.
    BadResponse {
        /// The request.
        what: String,
        /// 1-based line of the response.
        line: usize,
        /// What was wrong.
        reason: &'static str,
    },
}

impl ClickHouseError {
    /// A bounded label for `pgo_agent_sink_insert_errors_total{reason}`.
    pub fn reason(&self) -> &'static str {
        match self {
            ClickHouseError::Connect { .. } => "connect",
            ClickHouseError::Timeout { .. } => "timeout",
            ClickHouseError::Status { status, .. } if *status >= 500 => "server_error",
            ClickHouseError::Status { .. } => "rejected",
            ClickHouseError::BadResponse { .. } => "bad_response",
        }
    }
}

impl std::fmt::Display for ClickHouseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ClickHouseError::Connect { what, message } => {
                write!(f, "{what}: cannot connect to ClickHouse: {message}")
            }
            ClickHouseError::Timeout { what, message } => {
                write!(
                    f,
                    "{what}: ClickHouse timed out or broke the connection: {message}"
                )
            }
            ClickHouseError::Status { what, status, body } => {
                write!(
                    f,
                    "{what}: ClickHouse answered HTTP {status}: {}",
                    body.trim()
                )
            }
            ClickHouseError::BadResponse { what, line, reason } => {
                write!(f, "{what}: ClickHouse response line {line}: {reason}")
            }
        }
    }
}

impl std::error::Error for ClickHouseError {}

/// Where and as whom to connect.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClickHouseTarget {
    /// HTTP base URL, e.g. `http://127.0.0.1:8123`.
    pub url: String,
    /// Database holding the tables.
    pub database: String,
    /// User (HTTP basic auth) when set.
    pub user: Option<String>,
    /// Password (HTTP basic auth).
    pub password: Option<String>,
    /// Per-request timeout.
    pub timeout: Duration,
    /// Insert into / read from the `Distributed` tables (`<table>_dist`) of a cluster.
    pub distributed: bool,
}

/// Checks a database or cluster name: ASCII letters, digits and `_`, not empty (they are
/// spliced into SQL).
pub fn check_identifier(what: &str, name: &str) -> anyhow::Result<()> {
    anyhow::ensure!(
        !name.is_empty()
            && name.len() <= 64
            && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'),
        "{what} {name:?} must be 1-64 ASCII letters, digits or '_'"
    );
    Ok(())
}

/// A blocking ClickHouse HTTP client.
pub struct ClickHouseClient {
    target: ClickHouseTarget,
    agent: ureq::Agent,
    auth: Option<String>,
}

impl ClickHouseClient {
    /// A client for `target` (no request is made).
    pub fn new(target: ClickHouseTarget) -> anyhow::Result<ClickHouseClient> {
        check_identifier("database", &target.database)?;
        let agent = ureq::AgentBuilder::new().timeout(target.timeout).build();
        let auth = target.user.as_ref().map(|u| {
            let pair = format!("{u}:{}", target.password.as_deref().unwrap_or(""));
            format!("Basic {}", base64(pair.as_bytes()))
        });
        Ok(ClickHouseClient {
            target,
            agent,
            auth,
        })
    }

    /// The target.
    pub fn target(&self) -> &ClickHouseTarget {
        &self.target
    }

    /// `database.table`, or its `Distributed` twin when the target says so.
    pub fn table(&self, name: &str) -> String {
        if self.target.distributed {
            format!("{}.{name}_dist", self.target.database)
        } else {
            format!("{}.{name}", self.target.database)
        }
    }

    fn post(&self, what: &str, query: &str, body: &[u8]) -> Result<String, ClickHouseError> {
        let url = format!("{}/", self.target.url.trim_end_matches('/'));
        let mut req = self.agent.post(&url).query("query", query);
        if let Some(a) = &self.auth {
            req = req.set("Authorization", a);
        }
        let resp = match req.send_bytes(body) {
            Ok(r) => r,
            Err(ureq::Error::Status(status, r)) => {
                let mut body = String::new();
                let _ = r.into_reader().take(1000).read_to_string(&mut body);
                return Err(ClickHouseError::Status {
                    what: what.to_string(),
                    status,
                    body,
                });
            }
            Err(ureq::Error::Transport(t)) => {
                let message = t.to_string();
                return Err(match t.kind() {
                    ureq::ErrorKind::ConnectionFailed | ureq::ErrorKind::Dns => {
                        ClickHouseError::Connect {
                            what: what.to_string(),
                            message,
                        }
                    }
                    _ => ClickHouseError::Timeout {
                        what: what.to_string(),
                        message,
                    },
                });
            }
        };
        let mut text = String::new();
        let read = resp
            .into_reader()
            .take(MAX_RESPONSE_BYTES + 1)
            .read_to_string(&mut text);
        if let Err(e) = read {
            return Err(ClickHouseError::Timeout {
                what: what.to_string(),
                message: e.to_string(),
            });
        }
        if text.len() as u64 > MAX_RESPONSE_BYTES {
            return Err(ClickHouseError::BadResponse {
                what: what.to_string(),
                line: 1,
                reason: "response exceeds MAX_RESPONSE_BYTES",
            });
        }
        Ok(text)
    }

    /// Runs `sql` (DDL or a SELECT with its FORMAT) and returns the response body.
    pub fn query(&self, sql: &str) -> Result<String, ClickHouseError> {
        let what: String = sql.split_whitespace().take(4).collect::<Vec<_>>().join(" ");
        self.post(&what, sql, &[])
    }

    /// `INSERT INTO <table> FORMAT TabSeparated` with `rows` as the body (one block).
    pub fn insert_tsv(&self, table: &str, rows: &[u8]) -> Result<(), ClickHouseError> {
        let query = format!("INSERT INTO {table} FORMAT TabSeparated");
        self.post(&format!("INSERT INTO {table}"), &query, rows)
            .map(|_| ())
    }
}

/// Standard base64 with padding (HTTP basic auth).
fn base64(bytes: &[u8]) -> String {
    const ABC: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ABC[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// The enum values of the `kind` columns, as [`CounterKind`] names them in the state dir.
pub fn kind_name(kind: CounterKind) -> &'static str {
    match kind {
        CounterKind::Flat => "flat",
        CounterKind::ProbeContext => "probe_context",
        CounterKind::LineContext => "line_context",
    }
}

fn kind_from_name(name: &str) -> Option<CounterKind> {
    match name {
        "flat" => Some(CounterKind::Flat),
        "probe_context" => Some(CounterKind::ProbeContext),
        "line_context" => Some(CounterKind::LineContext),
        _ => None,
    }
}

const KIND_ENUM: &str = "Enum8('flat' = 0, 'probe_context' = 1, 'line_context' = 2)";

/// The `CREATE` statements of the schema: the database, the three local tables and, with
/// `cluster`, their `Distributed` twins (`<table>_dist`, sharded by `cityHash64(build_id)`
/// so one build id's rows — and its pull query — stay on one shard). On a cluster, run the
/// local statements on every node and the `Distributed` ones where clients connect.
pub fn schema_sql(database: &str, cluster: Option<&str>) -> Vec<String> {
    let db = database;
    let mut v = vec![
        format!("CREATE DATABASE IF NOT EXISTS {db}"),
        format!(
            "CREATE TABLE IF NOT EXISTS {db}.counters (build_id String, host String, \
             window_start UInt64, context UInt64, is_branch UInt8, addr_from UInt64, \
             addr_to UInt64, count UInt64) ENGINE = ReplacingMergeTree(count) \
             PARTITION BY toYYYYMM(toDateTime(window_start)) \
             ORDER BY (build_id, host, window_start, context, is_branch, addr_from, addr_to)"
        ),
        format!(
            "CREATE TABLE IF NOT EXISTS {db}.contexts (build_id String, kind {KIND_ENUM}, \
             preferred_base UInt64, context UInt64, frames Array(UInt64)) \
             ENGINE = ReplacingMergeTree() \
             ORDER BY (build_id, context)"
        ),
        format!(
            "CREATE TABLE IF NOT EXISTS {db}.windows (build_id String, host String, \
             window_start UInt64, kind {KIND_ENUM}, samples UInt64, rows UInt64, \
             inserted_at UInt64) ENGINE = ReplacingMergeTree(inserted_at) \
             ORDER BY (build_id, host, window_start)"
        ),
    ];
    if let Some(c) = cluster {
        for t in ["counters", "contexts", "windows"] {
            v.push(format!(
                "CREATE TABLE IF NOT EXISTS {db}.{t}_dist AS {db}.{t} \
                 ENGINE = Distributed({c}, {db}, {t}, cityHash64(build_id))"
            ));
        }
    }
    v
}

/// A stable 64-bit hash of a context (FNV-1a over the kind and the frame offsets), the
/// `context` column. Collisions are detected when reading (two frame lists for one hash).
pub fn context_hash(kind: CounterKind, frames: &[u64]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |b: u8| {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    };
    eat(kind as u8);
    for f in frames {
        for b in f.to_le_bytes() {
            eat(b);
        }
    }
    h
}

/// One closed window of one binary on one host, as handed to the sink. Counters are in
/// the binary's preferred addresses (as the shards keep them).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClosedWindow {
    /// The binary.
    pub build_id: BuildId,
    /// The binary's preferred base (subtracted from every address).
    pub preferred_base: u64,
    /// Window start, Unix seconds.
    pub window_start: u64,
    /// Samples counted in the window.
    pub samples: u64,
    /// The window's counters.
    pub counters: CounterSet,
}

/// A window as TabSeparated bodies, ready to insert (and to spool).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EncodedWindow {
    /// `contexts` rows.
    pub contexts: String,
    /// `counters` rows, sorted by key.
    pub counters: String,
    /// The one `windows` row without its `inserted_at` column.
    pub marker: String,
}

impl EncodedWindow {
    /// Counter rows (lines of `counters`).
    pub fn counter_rows(&self) -> u64 {
        self.counters.bytes().filter(|b| *b == b'\n').count() as u64
    }
}

/// Escapes a value for TabSeparated (`\\`, `\t`, `\n`).
fn tsv_escape(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('\t', "\\t")
        .replace('\n', "\\n")
}

/// Encodes `w` from `host` (deterministically: the same window encodes to the same bytes).
pub fn encode_window(w: &ClosedWindow, host: &str) -> EncodedWindow {
    let id = w.build_id.to_hex();
    let host = tsv_escape(host);
    let kind = w.counters.kind;
    let base = w.preferred_base;
    let mut by_hash: BTreeMap<u64, (Vec<u64>, &unwinder::ContextCounters)> = BTreeMap::new();
    for (key, c) in &w.counters.contexts {
        let frames: Vec<u64> = key.iter().map(|a| a.wrapping_sub(base)).collect();
        by_hash.insert(context_hash(kind, &frames), (frames, c));
    }
    let (mut contexts, mut counters) = (String::new(), String::new());
    let mut rows = 0u64;
    for (hash, (frames, c)) in &by_hash {
        let list: Vec<String> = frames.iter().map(u64::to_string).collect();
        let _ = writeln!(
            contexts,
            "{id}\t{}\t{base}\t{hash}\t[{}]",
            kind_name(kind),
            list.join(",")
        );
        for (is_branch, map) in [(0, &c.ranges), (1, &c.branches)] {
            for (&(a, b), n) in map {
                let _ = writeln!(
                    counters,
                    "{id}\t{host}\t{}\t{hash}\t{is_branch}\t{}\t{}\t{n}",
                    w.window_start,
                    a.wrapping_sub(base),
                    b.wrapping_sub(base)
                );
                rows += 1;
            }
        }
    }
    let marker = format!(
        "{id}\t{host}\t{}\t{}\t{}\t{rows}",
        w.window_start,
        kind_name(kind),
        w.samples
    );
    EncodedWindow {
        contexts,
        counters,
        marker,
    }
}

/// Inserts one encoded window; see [`insert_windows`].
pub fn insert_window(
    client: &ClickHouseClient,
    w: &EncodedWindow,
    batch_rows: usize,
    now_unix: u64,
) -> Result<u64, ClickHouseError> {
    insert_windows(client, &[w], batch_rows, now_unix)
}

/// Inserts encoded windows together: their contexts (one INSERT), their counters in
/// blocks of at most `batch_rows` rows, then their markers (one INSERT). Few, large
/// INSERTs: every INSERT makes a part on the server. Any failure leaves the windows to be
/// retried whole; see the module docs for why a retry never counts twice. Returns the
/// counter rows inserted.
pub fn insert_windows(
    client: &ClickHouseClient,
    ws: &[&EncodedWindow],
    batch_rows: usize,
    now_unix: u64,
) -> Result<u64, ClickHouseError> {
    let contexts: String = ws.iter().map(|w| w.contexts.as_str()).collect();
    if !contexts.is_empty() {
        client.insert_tsv(&client.table("contexts"), contexts.as_bytes())?;
    }
    let table = client.table("counters");
    let mut block = String::new();
    let mut in_block = 0usize;
    let mut rows = 0u64;
    for line in ws.iter().flat_map(|w| w.counters.lines()) {
        block.push_str(line);
        block.push('\n');
        in_block += 1;
        if in_block >= batch_rows.max(1) {
            client.insert_tsv(&table, block.as_bytes())?;
            rows += in_block as u64;
            block.clear();
            in_block = 0;
        }
    }
    if in_block > 0 {
        client.insert_tsv(&table, block.as_bytes())?;
        rows += in_block as u64;
    }
    let markers: String = ws
        .iter()
        .map(|w| format!("{}\t{now_unix}\n", w.marker))
        .collect();
    client.insert_tsv(&client.table("windows"), markers.as_bytes())?;
    Ok(rows)
}

/// The fleet-merged counters of one build id, as offsets from the preferred base.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FleetCounters {
    /// The counters (keys and addresses are offsets from the preferred base; see
    /// [`rebase`]).
    pub counters: CounterSet,
    /// The binary's preferred base, as the agents reported it.
    pub preferred_base: u64,
    /// Delivered windows counted.
    pub windows: u64,
    /// Their samples.
    pub samples: u64,
}

fn bad(what: &str, line: usize, reason: &'static str) -> ClickHouseError {
    ClickHouseError::BadResponse {
        what: what.to_string(),
        line,
        reason,
    }
}

fn parse_u64(s: &str, what: &str, line: usize) -> Result<u64, ClickHouseError> {
    s.parse()
        .map_err(|_| bad(what, line, "expected an unsigned integer"))
}

/// Queries the fleet-merged counters of `build_id` (windows starting at or after
/// `since`): the contexts, the delivered windows, and one aggregate query over the counter
/// rows (`FINAL`: one row per host, window and key, then the sum). `None` when nothing
/// was delivered.
pub fn fetch_fleet_counters(
    client: &ClickHouseClient,
    build_id: &BuildId,
    since: u64,
) -> Result<Option<FleetCounters>, ClickHouseError> {
    let id = build_id.to_hex();
    let (counters_t, contexts_t, windows_t) = (
        client.table("counters"),
        client.table("contexts"),
        client.table("windows"),
    );
    // The marker subquery reads the local table: one build id lives on one shard, and a
    // Distributed subquery inside a Distributed query needs GLOBAL IN.
    let local_windows = format!("{}.windows", client.target().database);
    let what = "SELECT windows";
    let text = client.query(&format!(
        "SELECT count(), sum(s) FROM (SELECT host, window_start, max(samples) AS s \
         FROM {windows_t} WHERE build_id = '{id}' AND window_start >= {since} \
         GROUP BY host, window_start) FORMAT TabSeparated"
    ))?;
    let line = text.lines().next().unwrap_or("");
    let (n, s) = line
        .split_once('\t')
        .ok_or_else(|| bad(what, 1, "expected 2 columns"))?;
    let windows = parse_u64(n, what, 1)?;
    let samples = parse_u64(s, what, 1)?;
    if windows == 0 {
        return Ok(None);
    }

    let what = "SELECT contexts";
    let text = client.query(&format!(
        "SELECT DISTINCT context, kind, preferred_base, frames FROM {contexts_t} \
         WHERE build_id = '{id}' FORMAT TabSeparated"
    ))?;
    let mut kind = None;
    let mut base = None;
    let mut frames_of: std::collections::HashMap<u64, Vec<u64>> = Default::default();
    for (i, l) in text.lines().enumerate() {
        let cols: Vec<&str> = l.split('\t').collect();
        let [h, k, b, f] = cols[..] else {
            return Err(bad(what, i + 1, "expected 4 columns"));
        };
        let b = parse_u64(b, what, i + 1)?;
        if base.is_some_and(|have| have != b) {
            return Err(bad(what, i + 1, "two preferred bases for one build id"));
        }
        base = Some(b);
        let h = parse_u64(h, what, i + 1)?;
        let k = kind_from_name(k).ok_or_else(|| bad(what, i + 1, "unknown kind"))?;
        if kind.is_some_and(|have| have != k) {
            return Err(bad(
                what,
                i + 1,
                "contexts of different kinds for one build id",
            ));
        }
        kind = Some(k);
        let inner = f
            .strip_prefix('[')
            .and_then(|f| f.strip_suffix(']'))
            .ok_or_else(|| bad(what, i + 1, "expected an array"))?;
        let mut frames = Vec::new();
        if !inner.is_empty() {
            for x in inner.split(',') {
                if frames.len() >= MAX_CONTEXT_FRAMES {
                    return Err(bad(what, i + 1, "context exceeds MAX_CONTEXT_FRAMES"));
                }
                frames.push(parse_u64(x, what, i + 1)?);
            }
        }
        if frames_of.insert(h, frames).is_some() {
            return Err(bad(what, i + 1, "two contexts share one hash"));
        }
    }
    let kind = kind.unwrap_or_default();

    let what = "SELECT counters";
    let text = client.query(&format!(
        "SELECT context, is_branch, addr_from, addr_to, sum(count) \
         FROM {counters_t} FINAL WHERE build_id = '{id}' AND window_start >= {since} \
         AND (host, window_start) IN (SELECT host, window_start FROM {local_windows} \
         WHERE build_id = '{id}' AND window_start >= {since}) \
         GROUP BY context, is_branch, addr_from, addr_to FORMAT TabSeparated"
    ))?;
    let mut counters = CounterSet::new(kind);
    for (i, l) in text.lines().enumerate() {
        let cols: Vec<&str> = l.split('\t').collect();
        if cols.len() != 5 {
            return Err(bad(what, i + 1, "expected 5 columns"));
        }
        let h = parse_u64(cols[0], what, i + 1)?;
        let is_branch = cols[1] == "1";
        let a = parse_u64(cols[2], what, i + 1)?;
        let b = parse_u64(cols[3], what, i + 1)?;
        let n = parse_u64(cols[4], what, i + 1)?;
        let frames = frames_of
            .get(&h)
            .ok_or_else(|| bad(what, i + 1, "counter of an unknown context"))?;
        let c = counters.context_mut(frames);
        let map = if is_branch {
            &mut c.branches
        } else {
            &mut c.ranges
        };
        let e = map.entry((a, b)).or_default();
        *e = e.wrapping_add(n);
    }
    Ok(Some(FleetCounters {
        counters,
        preferred_base: base.unwrap_or(0),
        windows,
        samples,
    }))
}

/// `counters` (offsets) with `base` added to every address: back in the binary's
/// preferred addresses, as the generators expect.
pub fn rebase(counters: &CounterSet, base: u64) -> CounterSet {
    let mut out = CounterSet::new(counters.kind);
    for (key, c) in &counters.contexts {
        let key: Vec<u64> = key.iter().map(|a| a.wrapping_add(base)).collect();
        let dst = out.context_mut(&key);
        for (&(a, b), n) in &c.ranges {
            dst.ranges
                .insert((a.wrapping_add(base), b.wrapping_add(base)), *n);
        }
        for (&(a, b), n) in &c.branches {
            dst.branches
                .insert((a.wrapping_add(base), b.wrapping_add(base)), *n);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use unwinder::EXTERNAL_ADDR;

    fn window() -> ClosedWindow {
        let mut c = CounterSet::new(CounterKind::ProbeContext);
        let x = c.context_mut(&[0x4007f4]);
        x.ranges.insert((0x400640, 0x400645), 3);
        x.branches.insert((EXTERNAL_ADDR, 0x400540), 2);
        ClosedWindow {
            build_id: BuildId(vec![0xab, 0xcd]),
            preferred_base: 0x400000,
            window_start: 600,
            samples: 5,
            counters: c,
        }
    }

    #[test]
    fn window_rows_are_offsets_keyed_by_context_hash() {
        let e = encode_window(&window(), "web\t1");
        let h = context_hash(CounterKind::ProbeContext, &[0x7f4]);
        assert_eq!(
            e.contexts,
            format!("abcd\tprobe_context\t4194304\t{h}\t[2036]\n")
        );
        // EXTERNAL_ADDR (1) - 0x400000 wraps, as in the unsymbolized profile.
        assert_eq!(
            e.counters,
            format!(
                "abcd\tweb\\t1\t600\t{h}\t0\t1600\t1605\t3\n\
                 abcd\tweb\\t1\t600\t{h}\t1\t18446744073705357313\t1344\t2\n"
            )
        );
        assert_eq!(e.marker, "abcd\tweb\\t1\t600\tprobe_context\t5\t2");
        assert_eq!(e.counter_rows(), 2);
        assert_eq!(encode_window(&window(), "web\t1"), e);
    }

    #[test]
    fn rebase_restores_preferred_addresses() {
        let w = window();
        let mut off = CounterSet::new(CounterKind::ProbeContext);
        let x = off.context_mut(&[0x7f4]);
        x.ranges.insert((0x640, 0x645), 3);
        x.branches
            .insert((EXTERNAL_ADDR.wrapping_sub(0x400000), 0x540), 2);
        assert_eq!(rebase(&off, 0x400000), w.counters);
    }

    #[test]
    fn context_hash_depends_on_kind_and_frames() {
        let a = context_hash(CounterKind::ProbeContext, &[1, 2]);
        assert_ne!(a, context_hash(CounterKind::ProbeContext, &[2, 1]));
        assert_ne!(a, context_hash(CounterKind::LineContext, &[1, 2]));
        // FNV-1a of the single byte 0 (Flat, no frames): offset basis ^ 0, times the prime.
        assert_eq!(
            context_hash(CounterKind::Flat, &[]),
            0xcbf2_9ce4_8422_2325u64.wrapping_mul(0x0100_0000_01b3)
        );
    }

    #[test]
    fn base64_and_identifiers() {
        assert_eq!(base64(b"default:"), "ZGVmYXVsdDo=");
        assert_eq!(base64(b"ab"), "YWI=");
        assert_eq!(base64(b"abc"), "YWJj");
        assert!(check_identifier("database", "pgo_1").is_ok());
        assert!(check_identifier("database", "pgo; DROP").is_err());
        assert!(check_identifier("database", "").is_err());
    }

    #[test]
    fn errors_have_bounded_reasons() {
        let e = ClickHouseError::Status {
            what: "INSERT INTO pgo.counters".into(),
            status: 500,
            body: "Code: 1".into(),
        };
        assert_eq!(e.reason(), "server_error");
        assert_eq!(
            e.to_string(),
            "INSERT INTO pgo.counters: ClickHouse answered HTTP 500: Code: 1"
        );
    }
}
