//! [`DebuginfodClient`]: fetches debug files by build id from debuginfod servers (elfutils'
//! web API, `GET {url}/buildid/{hex}/debuginfo`, 404 when the server does not know the
//! build id) into a cache directory laid out as the elfutils client lays out its own:
//! `<cache_dir>/<hex>/debuginfo`.
//!
//! It differs from elfutils' client where that suits a daemon:
//! * a miss (every server answered 404) is remembered in memory for
//!   [`DebuginfodClient::with_miss_ttl`] (default [`DEFAULT_MISS_TTL`], elfutils'
//!   `cache_miss_s`); no 0-byte file is written, and a 0-byte file found in the cache (what
//!   elfutils leaves for a miss) is not taken as a hit;
//! * a download is written to `<hex>/debuginfo.tmp` and renamed into place once complete, so
//!   a cached file is always whole; one larger than the file bound is abandoned and removed;
//! * the cache has a size bound: before a file is added, the least recently used files (by
//!   modification time, which a cache hit renews) are removed until it fits. Only files in
//!   subdirectories named by a hex build id count and are removed, so a cache directory set
//!   to a directory holding other files leaves them alone.
//!
//! Servers are asked in order until one has the file. The answer is `Ok(None)` only when
//! every server answered 404; when one failed otherwise (timeout, refused connection, 5xx)
//! the errors are returned and nothing is remembered. Downloads are serialised within the
//! process (one `debuginfo.tmp` per build id).

use std::collections::HashMap;
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use collector::BuildId;
use symbolizer::RemoteDebugSource;

/// How long a miss is remembered by default: elfutils' `cache_miss_s` default, 600 s.
pub const DEFAULT_MISS_TTL: Duration = Duration::from_secs(600);

/// A debuginfod client with a bounded on-disk cache (see the [module documentation](self)).
pub struct DebuginfodClient {
    urls: Vec<String>,
    cache_dir: PathBuf,
    max_cache_bytes: u64,
    max_file_bytes: u64,
    miss_ttl: Duration,
    agent: ureq::Agent,
    misses: Mutex<HashMap<BuildId, (Instant, Miss)>>,
    downloads: Mutex<()>,
}

impl std::fmt::Debug for DebuginfodClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DebuginfodClient")
            .field("urls", &self.urls)
            .field("cache_dir", &self.cache_dir)
            .field("max_cache_bytes", &self.max_cache_bytes)
            .field("max_file_bytes", &self.max_file_bytes)
            .field("miss_ttl", &self.miss_ttl)
            .finish_non_exhaustive()
    }
}

/// A remembered answer that is not a file.
#[derive(Clone)]
enum Miss {
    /// Every server answered 404.
    NotFound,
    /// A server had it but it was refused (larger than the bound).
    Refused(String),
}

/// Why one server gave no file.
enum Failure {
    /// 404.
    NotFound,
    /// The file exceeds the size bound: the same from every server.
    TooLarge(String),
    /// Anything else (status, transport, local I/O): another server may still answer.
    Other(String),
}

/// The URL prefixes in `DEBUGINFOD_URLS` (space- or comma-separated), empty when unset.
pub fn urls_from_env() -> Vec<String> {
    std::env::var("DEBUGINFOD_URLS")
        .map(|s| split_urls(&s))
        .unwrap_or_default()
}

/// Splits a server list on spaces and commas, as `DEBUGINFOD_URLS` is read; drops empty
/// entries and a trailing `/` (the client appends `/buildid/…`).
fn split_urls(s: &str) -> Vec<String> {
    s.split(|c: char| c.is_whitespace() || c == ',')
        .map(|u| u.trim_end_matches('/'))
        .filter(|u| !u.is_empty())
        .map(str::to_string)
        .collect()
}

impl DebuginfodClient {
    /// A client of the servers `urls` (each entry may itself list several, space- or
    /// comma-separated), caching under `cache_dir` at most `max_cache_bytes`, each request
    /// (connection, headers and body) bounded by `timeout`. `None` when `urls` names no
    /// server. A single file may use the whole cache ([`Self::with_max_file_bytes`] lowers
    /// that).
    pub fn from_config(
        urls: &[String],
        cache_dir: PathBuf,
        max_cache_bytes: u64,
        timeout: Duration,
    ) -> Option<DebuginfodClient> {
        let urls: Vec<String> = urls.iter().flat_map(|u| split_urls(u)).collect();
        if urls.is_empty() {
            return None;
        }
        Some(DebuginfodClient {
            urls,
            cache_dir,
            max_cache_bytes,
            max_file_bytes: max_cache_bytes,
            miss_ttl: DEFAULT_MISS_TTL,
            agent: ureq::AgentBuilder::new().timeout(timeout).build(),
            misses: Mutex::new(HashMap::new()),
            downloads: Mutex::new(()),
        })
    }

    /// Bounds each downloaded file to `bytes` (and to the cache bound): a larger one is
    /// abandoned and removed.
    pub fn with_max_file_bytes(mut self, bytes: u64) -> DebuginfodClient {
        self.max_file_bytes = bytes;
        self
    }

    /// Remembers a miss for `ttl`: within it the servers are not asked again.
    pub fn with_miss_ttl(mut self, ttl: Duration) -> DebuginfodClient {
        self.miss_ttl = ttl;
        self
    }

    /// The servers, in the order they are asked.
    pub fn urls(&self) -> &[String] {
        &self.urls
    }

    /// Where the fetched files are kept.
    pub fn cache_dir(&self) -> &Path {
        &self.cache_dir
    }

    /// Where the debug file of `id` is kept: `<cache_dir>/<hex>/debuginfo`.
    pub fn cache_path(&self, id: &BuildId) -> PathBuf {
        self.cache_dir.join(id.to_hex()).join("debuginfo")
    }

    fn remembered(&self, id: &BuildId) -> Option<Miss> {
        let mut misses = self.misses.lock().unwrap_or_else(|e| e.into_inner());
        match misses.get(id) {
            Some((at, miss)) if at.elapsed() < self.miss_ttl => Some(miss.clone()),
            Some(_) => {
                misses.remove(id);
                None
            }
            None => None,
        }
    }

    fn remember(&self, id: &BuildId, miss: Miss) {
        if self.miss_ttl.is_zero() {
            return;
        }
        let mut misses = self.misses.lock().unwrap_or_else(|e| e.into_inner());
        misses.retain(|_, (at, _)| at.elapsed() < self.miss_ttl);
        misses.insert(id.clone(), (Instant::now(), miss));
    }

    /// Downloads `id`'s debug file from `url` into the cache.
    fn download(&self, url: &str, hex: &str, slot: &Path) -> Result<(), Failure> {
        let request = format!("{url}/buildid/{hex}/debuginfo");
        let response = match self.agent.get(&request).call() {
            Ok(r) => r,
            Err(ureq::Error::Status(404, _)) => return Err(Failure::NotFound),
            Err(ureq::Error::Status(code, r)) => {
                return Err(Failure::Other(format!("HTTP {code} {}", r.status_text())))
            }
            Err(ureq::Error::Transport(t)) => return Err(Failure::Other(t.to_string())),
        };
        let limit = self.max_file_bytes.min(self.max_cache_bytes);
        let too_large = |size: &str| {
            Failure::TooLarge(format!(
                "{request}: {size} bytes, larger than the bound of {limit} bytes; discarded"
            ))
        };
        let declared = response
            .header("Content-Length")
            .and_then(|v| v.trim().parse::<u64>().ok());
        if let Some(len) = declared.filter(|&len| len > limit) {
            return Err(too_large(&len.to_string()));
        }

        fs::create_dir_all(slot)
            .map_err(|e| Failure::Other(format!("creating {}: {e}", slot.display())))?;
        let tmp = slot.join("debuginfo.tmp");
        let discard = |failure: Failure| {
            let _ = fs::remove_file(&tmp);
            let _ = fs::remove_dir(slot);
            failure
        };
        let mut file = fs::File::create(&tmp)
            .map_err(|e| discard(Failure::Other(format!("creating {}: {e}", tmp.display()))))?;
        let mut body = response.into_reader().take(limit.saturating_add(1));
        let written = std::io::copy(&mut body, &mut file)
            .map_err(|e| discard(Failure::Other(format!("{request}: {e}"))))?;
        drop(file);
        if written > limit {
            return Err(discard(too_large(&format!("more than {limit}"))));
        }
        if written == 0 {
            return Err(discard(Failure::Other(format!("{request}: empty body"))));
        }
        self.make_room(written, &tmp);
        fs::rename(&tmp, slot.join("debuginfo")).map_err(|e| {
            discard(Failure::Other(format!(
                "renaming {} into place: {e}",
                tmp.display()
            )))
        })
    }

    /// Removes the least recently used cached files until `incoming` more bytes fit the
    /// cache bound (`keep`, the file being added, is neither counted nor removed).
    fn make_room(&self, incoming: u64, keep: &Path) {
        let mut files = cached_files(&self.cache_dir);
        files.retain(|f| f.path != keep);
        let mut total: u64 = files.iter().map(|f| f.len).sum();
        if total.saturating_add(incoming) <= self.max_cache_bytes {
            return;
        }
        files.sort_by_key(|f| f.used);
        for f in files {
            if total.saturating_add(incoming) <= self.max_cache_bytes {
                break;
            }
            if fs::remove_file(&f.path).is_ok() {
                total -= f.len;
                if let Some(dir) = f.path.parent() {
                    let _ = fs::remove_dir(dir);
                }
            }
        }
    }
}

/// A file in the cache.
struct CachedFile {
    path: PathBuf,
    len: u64,
    used: SystemTime,
}

/// The regular files in `<cache_dir>/<hex>/` directories.
fn cached_files(cache_dir: &Path) -> Vec<CachedFile> {
    let mut out = Vec::new();
    let Ok(slots) = fs::read_dir(cache_dir) else {
        return out;
    };
    for slot in slots.flatten() {
        let is_slot = slot.file_type().is_ok_and(|t| t.is_dir())
            && slot
                .file_name()
                .to_str()
                .and_then(BuildId::from_hex)
                .is_some();
        let Some(entries) = is_slot.then(|| fs::read_dir(slot.path()).ok()).flatten() else {
            continue;
        };
        for entry in entries.flatten() {
            let Ok(meta) = entry.metadata() else { continue };
            if meta.is_file() {
                out.push(CachedFile {
                    path: entry.path(),
                    len: meta.len(),
                    used: meta.modified().unwrap_or(SystemTime::UNIX_EPOCH),
                });
            }
        }
    }
    out
}

/// `path` when it is a cached file (not an elfutils 0-byte miss), its use time renewed.
fn cache_hit(path: &Path) -> Option<PathBuf> {
    let meta = fs::metadata(path).ok()?;
    if !meta.is_file() || meta.len() == 0 {
        return None;
    }
    if let Ok(f) = fs::File::open(path) {
        let _ = f.set_modified(SystemTime::now());
    }
    Some(path.to_path_buf())
}

impl DebuginfodClient {
    /// What [`RemoteDebugSource::fetch_debuginfo`] answers without asking a server: the
    /// cached file (its use renewed), a remembered miss, or `None` when only a server can
    /// tell.
    pub fn answer_from_cache(&self, id: &BuildId) -> Option<Result<Option<PathBuf>, String>> {
        if id.is_empty() {
            return Some(Ok(None));
        }
        if let Some(hit) = cache_hit(&self.cache_path(id)) {
            return Some(Ok(Some(hit)));
        }
        self.remembered(id).map(|miss| match miss {
            Miss::NotFound => Ok(None),
            Miss::Refused(why) => Err(why),
        })
    }
}

impl RemoteDebugSource for DebuginfodClient {
    fn fetch_debuginfo(&self, id: &BuildId) -> Result<Option<PathBuf>, String> {
        if let Some(answer) = self.answer_from_cache(id) {
            return answer;
        }
        let _one_at_a_time = self.downloads.lock().unwrap_or_else(|e| e.into_inner());
        // Another thread may have fetched it, or learnt it is missing, meanwhile.
        if let Some(answer) = self.answer_from_cache(id) {
            return answer;
        }
        let hex = id.to_hex();
        let slot = self.cache_dir.join(&hex);
        let path = slot.join("debuginfo");
        let mut failures = Vec::new();
        for url in &self.urls {
            match self.download(url, &hex, &slot) {
                Ok(()) => return Ok(Some(path)),
                Err(Failure::NotFound) => {}
                Err(Failure::TooLarge(why)) => {
                    self.remember(id, Miss::Refused(why.clone()));
                    return Err(why);
                }
                Err(Failure::Other(why)) => failures.push(format!("{url}: {why}")),
            }
        }
        if failures.is_empty() {
            self.remember(id, Miss::NotFound);
            Ok(None)
        } else {
            Err(failures.join("; "))
        }
    }

    fn describe(&self) -> String {
        format!("debuginfod {}", self.urls.join(" "))
    }
}

#[cfg(test)]
mod tests {
    use std::net::TcpListener;
    use std::process::{Child, Command, Stdio};

    use super::*;

    /// The build id the test program is linked with (`-Wl,--build-id=0x…`).
    const HEX: &str = "5eed0123456789abcdef0123456789abcdef0042";
    /// A build id no server has.
    const UNKNOWN: &str = "00112233445566778899aabbccddeeff00112233";

    fn on_path(tool: &str) -> bool {
        std::env::var_os("PATH")
            .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(tool).is_file()))
    }

    fn tools_available(test: &str) -> bool {
        let missing: Vec<&str> = ["debuginfod", "clang-19", "objcopy"]
            .into_iter()
            .filter(|t| !on_path(t))
            .collect();
        if missing.is_empty() {
            return true;
        }
        eprintln!(
            "SKIPPED {test}: missing {} (apt-get install debuginfod clang-19 binutils)",
            missing.join(", ")
        );
        false
    }

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("pgo-debuginfod-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        d
    }

    fn run(cmd: &mut Command) {
        let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
        assert!(
            out.status.success(),
            "{cmd:?}: {}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Builds a program with build id [`HEX`] and writes its `objcopy --only-keep-debug`
    /// file to `dir/served/prog.debug`, the only file the server indexes.
    fn debug_file(dir: &Path) -> PathBuf {
        let src = dir.join("src");
        fs::create_dir_all(&src).unwrap();
        fs::create_dir_all(dir.join("served")).unwrap();
        fs::write(
            src.join("prog.c"),
            "#include <stdio.h>\nint main(void) { puts(\"debuginfod\"); return 0; }\n",
        )
        .unwrap();
        run(Command::new("clang-19").current_dir(&src).args([
            "-g",
            &format!("-Wl,--build-id=0x{HEX}"),
            "-o",
            "prog",
            "prog.c",
        ]));
        let debug = dir.join("served/prog.debug");
        run(Command::new("objcopy")
            .arg("--only-keep-debug")
            .arg(src.join("prog"))
            .arg(&debug));
        debug
    }

    /// A `debuginfod` of the test's own, killed (by its pid) when dropped.
    struct Server {
        child: Child,
        url: String,
    }

    impl Drop for Server {
        fn drop(&mut self) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }

    impl Server {
        /// Starts `debuginfod` over `dir` on a free port and waits (up to 30 s) until it
        /// serves [`HEX`]'s debug file.
        fn start(dir: &Path, log: &Path) -> Server {
            for _attempt in 0..3 {
                let port = TcpListener::bind("127.0.0.1:0")
                    .unwrap()
                    .local_addr()
                    .unwrap()
                    .port();
                let log_file = fs::File::create(log).unwrap();
                let child = Command::new("debuginfod")
                    .args(["-F", "-d", ":memory:", "-p", &port.to_string()])
                    .args(["-t", "0", "-g", "0"])
                    .arg(dir)
                    .stdin(Stdio::null())
                    .stdout(log_file.try_clone().unwrap())
                    .stderr(log_file)
                    .spawn()
                    .expect("starting debuginfod");
                let mut server = Server {
                    child,
                    url: format!("http://127.0.0.1:{port}"),
                };
                if server.wait_until_served(log) {
                    return server;
                }
            }
            panic!(
                "debuginfod did not start; its log:\n{}",
                fs::read_to_string(log).unwrap_or_default()
            );
        }

        /// True once the artifact is served; false when the server exited (port taken).
        fn wait_until_served(&mut self, log: &Path) -> bool {
            let agent = ureq::AgentBuilder::new()
                .timeout(Duration::from_secs(2))
                .build();
            let url = format!("{}/buildid/{HEX}/debuginfo", self.url);
            let deadline = Instant::now() + Duration::from_secs(30);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = self.child.try_wait() {
                    return false;
                }
                if agent.get(&url).call().is_ok() {
                    return true;
                }
                std::thread::sleep(Duration::from_millis(200));
            }
            panic!(
                "debuginfod did not serve {url} within 30 s; its log:\n{}",
                fs::read_to_string(log).unwrap_or_default()
            );
        }
    }

    fn client(urls: &str, cache: &Path, max_cache_bytes: u64) -> DebuginfodClient {
        DebuginfodClient::from_config(
            &[urls.to_string()],
            cache.to_path_buf(),
            max_cache_bytes,
            Duration::from_secs(10),
        )
        .unwrap()
    }

    fn id(hex: &str) -> BuildId {
        BuildId::from_hex(hex).unwrap()
    }

    #[test]
    fn server_lists_split_like_debuginfod_urls() {
        assert_eq!(
            split_urls(" http://a:8002/ http://b:1,http://c\thttps://d/x//,, "),
            ["http://a:8002", "http://b:1", "http://c", "https://d/x"]
        );
        let dir = Path::new("/nonexistent");
        assert!(DebuginfodClient::from_config(&[], dir.into(), 1, Duration::ZERO).is_none());
        assert!(
            DebuginfodClient::from_config(&[" , ".into()], dir.into(), 1, Duration::ZERO).is_none()
        );
        let c = DebuginfodClient::from_config(
            &["http://a:1 http://b:2".into(), "http://c:3".into()],
            dir.into(),
            1,
            Duration::ZERO,
        )
        .unwrap();
        assert_eq!(c.urls(), ["http://a:1", "http://b:2", "http://c:3"]);
        assert_eq!(c.describe(), "debuginfod http://a:1 http://b:2 http://c:3");
        assert_eq!(
            c.cache_path(&id(HEX)),
            Path::new("/nonexistent").join(HEX).join("debuginfo")
        );
    }

    #[test]
    fn eviction_removes_least_recently_used_files_first() {
        let cache = scratch("evict");
        let file = |hex: &str, len: usize, age_s: u64| {
            let slot = cache.join(hex);
            fs::create_dir_all(&slot).unwrap();
            let path = slot.join("debuginfo");
            fs::write(&path, vec![1u8; len]).unwrap();
            let f = fs::File::options().write(true).open(&path).unwrap();
            f.set_modified(SystemTime::now() - Duration::from_secs(age_s))
                .unwrap();
            path
        };
        let oldest = file("aa01", 400, 300);
        let middle = file("aa02", 400, 200);
        let newest = file("aa03", 400, 100);
        // Not a build-id directory: neither counted nor removed.
        fs::create_dir_all(cache.join("other")).unwrap();
        fs::write(cache.join("other/keep"), vec![0u8; 5000]).unwrap();
        let c = client("http://127.0.0.1:1", &cache, 1000);
        // A hit renews the oldest file's use time: it becomes the most recent.
        assert_eq!(cache_hit(&oldest), Some(oldest.clone()));
        c.make_room(300, &cache.join("aa04/debuginfo.tmp"));
        // 1200 + 300 > 1000: remove `middle` (1100), then `newest` (700 ≤ 1000).
        assert!(oldest.exists());
        assert!(!middle.exists() && !cache.join("aa02").exists());
        assert!(!newest.exists());
        assert!(cache.join("other/keep").exists());
        c.make_room(600, &cache.join("aa04/debuginfo.tmp"));
        assert!(oldest.exists(), "400 + 600 fits 1000");
    }

    #[test]
    fn fetches_caches_and_remembers_misses() {
        let test = "fetches_caches_and_remembers_misses";
        if !tools_available(test) {
            return;
        }
        let dir = scratch("fetch");
        let debug = debug_file(&dir);
        let server = Server::start(&dir.join("served"), &dir.join("debuginfod.log"));
        let cache = dir.join("cache");
        let c = client(&server.url, &cache, 1 << 30);
        assert_eq!(c.describe(), format!("debuginfod {}", server.url));

        let fetched = c.fetch_debuginfo(&id(HEX)).unwrap().unwrap();
        assert_eq!(fetched, cache.join(HEX).join("debuginfo"));
        assert_eq!(fs::read(&fetched).unwrap(), fs::read(&debug).unwrap());
        assert!(!cache.join(HEX).join("debuginfo.tmp").exists());

        assert_eq!(c.fetch_debuginfo(&id(UNKNOWN)), Ok(None));
        assert!(
            !cache.join(UNKNOWN).exists(),
            "a miss leaves nothing on disk"
        );

        drop(server);
        // The server is gone: the file comes from the cache, the miss from memory.
        assert_eq!(c.fetch_debuginfo(&id(HEX)), Ok(Some(fetched.clone())));
        assert_eq!(c.fetch_debuginfo(&id(UNKNOWN)), Ok(None));
        // A client that remembers nothing asks the dead server and says so.
        let forgetful = client(&c.urls()[0], &cache, 1 << 30).with_miss_ttl(Duration::ZERO);
        let err = forgetful.fetch_debuginfo(&id(UNKNOWN)).unwrap_err();
        assert!(err.starts_with(&format!("{}: ", c.urls()[0])), "{err}");
        assert_eq!(forgetful.fetch_debuginfo(&id(HEX)), Ok(Some(fetched)));
    }

    #[test]
    fn a_file_over_the_size_bound_is_discarded() {
        let test = "a_file_over_the_size_bound_is_discarded";
        if !tools_available(test) {
            return;
        }
        let dir = scratch("too-large");
        let debug = debug_file(&dir);
        let size = fs::metadata(&debug).unwrap().len();
        let server = Server::start(&dir.join("served"), &dir.join("debuginfod.log"));
        let cache = dir.join("cache");

        let small = client(&server.url, &cache, 1 << 30).with_max_file_bytes(size - 1);
        let err = small.fetch_debuginfo(&id(HEX)).unwrap_err();
        assert_eq!(
            err,
            format!(
                "{}/buildid/{HEX}/debuginfo: {size} bytes, larger than the bound of {} bytes; \
                 discarded",
                server.url,
                size - 1
            )
        );
        assert!(!cache.join(HEX).exists(), "nothing is left in the cache");
        // Remembered: the same answer without downloading again.
        assert_eq!(small.fetch_debuginfo(&id(HEX)), Err(err));

        // The cache bound bounds a file too, and evicts older files to make room.
        let tiny_cache = client(&server.url, &cache, size - 1);
        assert!(tiny_cache.fetch_debuginfo(&id(HEX)).is_err());
        let old = cache.join("aa01/debuginfo");
        fs::create_dir_all(old.parent().unwrap()).unwrap();
        fs::write(&old, vec![0u8; 100]).unwrap();
        let exact = client(&server.url, &cache, size + 50);
        let fetched = exact.fetch_debuginfo(&id(HEX)).unwrap().unwrap();
        assert_eq!(fs::read(&fetched).unwrap(), fs::read(&debug).unwrap());
        assert!(!old.exists(), "the older file made room");
    }
}
