//! [`BackgroundFetches`]: the workers' debuginfod source, which never makes a worker wait
//! for a server.
//!
//! A download can take as long as the request timeout, and a debug file of a large
//! service hundreds of megabytes. A worker that waited for it would hold every sample of
//! its shard (all binaries routed to it) meanwhile. So the workers' [`DebugFileFinder`]
//! asks this source, which answers from the client's cache (a cached file, a remembered
//! miss) and otherwise queues the build id for its fetch thread and answers at once that
//! the file is being fetched. The worker loads the binary without it (counted by address,
//! as a binary whose debug file is not found) and, once [`BackgroundFetches::in_flight`]
//! says the fetch is over, loads it again with the file and keeps counting into the same
//! windows (`Worker::settle_debug_fetches`).
//!
//! [`DebugFileFinder`]: symbolizer::debug_file::DebugFileFinder

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use collector::BuildId;
use crossbeam_channel::{unbounded, Sender};
use symbolizer::RemoteDebugSource;

use crate::debuginfod::DebuginfodClient;

/// The [`DebugLookup::tried`](symbolizer::debug_file::DebugLookup::tried) answer of a
/// build id whose fetch is under way.
pub const FETCHING: &str = "being fetched in the background; counted by address until it arrives";

/// A remote debug source that can answer from what it already holds, without a request.
pub trait CachingRemote: RemoteDebugSource {
    /// The answer [`RemoteDebugSource::fetch_debuginfo`] would give from the cache alone
    /// (`None`: only a server can tell).
    fn answer_from_cache(&self, id: &BuildId) -> Option<Result<Option<PathBuf>, String>>;
}

impl CachingRemote for DebuginfodClient {
    fn answer_from_cache(&self, id: &BuildId) -> Option<Result<Option<PathBuf>, String>> {
        DebuginfodClient::answer_from_cache(self, id)
    }
}

/// See the [module documentation](self).
pub struct BackgroundFetches {
    remote: Arc<dyn CachingRemote>,
    queue: Sender<BuildId>,
    in_flight: Arc<Mutex<HashSet<BuildId>>>,
}

impl std::fmt::Debug for BackgroundFetches {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BackgroundFetches")
            .field("remote", &self.remote.describe())
            .field("in_flight", &self.lock().len())
            .finish()
    }
}

impl BackgroundFetches {
    /// Fetches through `remote` on a thread of its own (`pgo-debuginfod`), one build id at a
    /// time; the thread ends when the last handle is dropped.
    pub fn start(remote: Arc<dyn CachingRemote>) -> std::io::Result<Arc<BackgroundFetches>> {
        let (queue, requests) = unbounded::<BuildId>();
        let in_flight: Arc<Mutex<HashSet<BuildId>>> = Arc::default();
        let (fetcher, done) = (remote.clone(), in_flight.clone());
        std::thread::Builder::new()
            .name("pgo-debuginfod".into())
            .spawn(move || {
                for id in requests {
                    // The client caches the file or remembers the miss; the worker asks
                    // again and gets that answer from the cache.
                    match fetcher.fetch_debuginfo(&id) {
                        Ok(Some(path)) => {
                            tracing::info!("debuginfod: fetched {id} into {}", path.display())
                        }
                        Ok(None) => tracing::info!("debuginfod: no server has {id}"),
                        Err(e) => tracing::warn!("debuginfod: {id}: {e}"),
                    }
                    done.lock().unwrap_or_else(|e| e.into_inner()).remove(&id);
                }
            })?;
        Ok(Arc::new(BackgroundFetches {
            remote,
            queue,
            in_flight,
        }))
    }

    /// Whether the fetch of `id` is queued or under way.
    pub fn in_flight(&self, id: &BuildId) -> bool {
        self.lock().contains(id)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashSet<BuildId>> {
        self.in_flight.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl RemoteDebugSource for BackgroundFetches {
    fn fetch_debuginfo(&self, id: &BuildId) -> Result<Option<PathBuf>, String> {
        if let Some(answer) = self.remote.answer_from_cache(id) {
            return answer;
        }
        let mut in_flight = self.lock();
        if in_flight.insert(id.clone()) && self.queue.send(id.clone()).is_err() {
            in_flight.remove(id);
            return Err("the background fetch thread is gone".into());
        }
        Err(FETCHING.into())
    }

    fn describe(&self) -> String {
        self.remote.describe()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;
    use std::time::{Duration, Instant};

    use super::*;

    /// A server that answers each request when the test lets it: `release` sends the
    /// answer; the answer is then what the cache holds.
    struct HeldServer {
        answers: Mutex<mpsc::Receiver<Option<PathBuf>>>,
        cache: Mutex<Option<Option<PathBuf>>>,
        requests: Mutex<u32>,
    }

    impl RemoteDebugSource for HeldServer {
        fn fetch_debuginfo(&self, _id: &BuildId) -> Result<Option<PathBuf>, String> {
            *self.requests.lock().unwrap() += 1;
            let answer = self.answers.lock().unwrap().recv().unwrap();
            *self.cache.lock().unwrap() = Some(answer.clone());
            Ok(answer)
        }
        fn describe(&self) -> String {
            "debuginfod http://held".into()
        }
    }

    impl CachingRemote for HeldServer {
        fn answer_from_cache(&self, _id: &BuildId) -> Option<Result<Option<PathBuf>, String>> {
            self.cache.lock().unwrap().clone().map(Ok)
        }
    }

    fn wait_until(what: &str, done: impl Fn() -> bool) {
        let start = Instant::now();
        while !done() {
            assert!(start.elapsed() < Duration::from_secs(10), "{what}");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// A held server, the fetches through it, and the sender that releases its answers.
    fn held() -> (
        mpsc::Sender<Option<PathBuf>>,
        Arc<HeldServer>,
        Arc<BackgroundFetches>,
    ) {
        let (release, answers) = mpsc::channel();
        let server = Arc::new(HeldServer {
            answers: Mutex::new(answers),
            cache: Mutex::new(None),
            requests: Mutex::new(0),
        });
        let fetches = BackgroundFetches::start(server.clone()).unwrap();
        (release, server, fetches)
    }

    #[test]
    fn a_fetch_answers_at_once_and_the_file_arrives_later() {
        let (release, server, fetches) = held();
        let id = BuildId(vec![0xab; 20]);

        // The server holds its answer: the source does not wait for it.
        assert_eq!(fetches.fetch_debuginfo(&id), Err(FETCHING.to_string()));
        assert!(fetches.in_flight(&id));
        // Asked again meanwhile: one request, still in flight.
        assert_eq!(fetches.fetch_debuginfo(&id), Err(FETCHING.to_string()));
        wait_until("the request reaches the server", || {
            *server.requests.lock().unwrap() == 1
        });

        let file = PathBuf::from("/cache/abab/debuginfo");
        release.send(Some(file.clone())).unwrap();
        wait_until("the fetch ends", || !fetches.in_flight(&id));
        assert_eq!(fetches.fetch_debuginfo(&id), Ok(Some(file)));
        assert_eq!(*server.requests.lock().unwrap(), 1);
        assert_eq!(fetches.describe(), "debuginfod http://held");
    }

    #[test]
    fn a_miss_is_answered_from_the_cache_once_known() {
        let (release, server, fetches) = held();
        let id = BuildId(vec![0xcd; 20]);
        assert_eq!(fetches.fetch_debuginfo(&id), Err(FETCHING.to_string()));
        release.send(None).unwrap();
        wait_until("the fetch ends", || !fetches.in_flight(&id));
        assert_eq!(fetches.fetch_debuginfo(&id), Ok(None));
        assert_eq!(*server.requests.lock().unwrap(), 1);
    }
}
