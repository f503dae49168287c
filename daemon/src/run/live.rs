//! Fresh reads: the HTTP store asks the workers for what they hold now
//! ([`service::store::LiveSource`]), so a binary's profile is served seconds after its
//! first samples, not after the next flush, and the state directory is still written only
//! every `flush_interval_secs`.
//!
//! ```text
//! HTTP (blocking pool) ──try_send Query──▶ worker (answered before its queued samples)
//!                      ◀──reply (≤ QUERY_TIMEOUT)── summaries / one unsymbolized profile
//! ```
//!
//! A worker's aggregate of a binary holds the windows restored from the state directory
//! and everything counted since, held samples fed first: it is exactly what the next flush
//! writes (replacing the files). The store serves it instead of the files, never on top of
//! them. A worker that does not answer within [`QUERY_TIMEOUT`] (loading a large binary)
//! or whose query queue is full is left out: its binaries are served from their files.

use std::sync::Arc;
use std::time::{Duration, Instant};

use collector::BuildId;
use crossbeam_channel::{bounded, Receiver, Sender};
use service::store::{LiveAggregate, LiveSource, StateMeta};

use super::router::worker_for;
use super::worker::{BinarySummary, WorkItem, Worker};

/// How long a request waits for a worker's answer.
pub const QUERY_TIMEOUT: Duration = Duration::from_secs(2);
/// Queries queued per worker; past it a query is not sent (served from the files).
pub const QUERY_QUEUE: usize = 16;

/// A question to one worker.
#[derive(Debug)]
pub enum Query {
    /// The summary of every aggregate the worker holds.
    List {
        /// Where the answer goes.
        reply: Sender<Vec<BinarySummary>>,
    },
    /// One aggregate: its summary and unsymbolized profile (`None`: not held).
    Profile {
        /// The binary.
        build_id: BuildId,
        /// Where the answer goes.
        reply: Sender<Option<(BinarySummary, Vec<u8>)>>,
    },
}

/// Answers `q` from `w` (a reply nobody waits for any more is dropped).
pub fn answer(w: &mut Worker, q: Query) {
    match q {
        Query::List { reply } => {
            let _ = reply.send(w.live_summaries());
        }
        Query::Profile { build_id, reply } => {
            let _ = reply.send(w.live_profile(&build_id));
        }
    }
}

/// A worker thread's loop: handles `items` until the router closes them, answering each
/// query before the next item (a request never waits behind queued samples).
pub fn serve(w: &mut Worker, items: Receiver<WorkItem>, queries: Receiver<Query>) {
    let mut queries_open = true;
    loop {
        while let Ok(q) = queries.try_recv() {
            answer(w, q);
        }
        let q = if queries_open {
            queries.clone()
        } else {
            crossbeam_channel::never()
        };
        crossbeam_channel::select! {
            recv(items) -> item => match item {
                Ok(item) => w.handle(item),
                Err(_) => return,
            },
            recv(q) -> q => match q {
                Ok(q) => answer(w, q),
                Err(_) => queries_open = false,
            },
        }
    }
}

/// The workers' query channels: one per worker, in worker order (a build id's worker is
/// [`worker_for`]).
pub fn query_channels(workers: usize) -> (Vec<Sender<Query>>, Vec<Receiver<Query>>) {
    (0..workers).map(|_| bounded(QUERY_QUEUE)).unzip()
}

/// [`LiveSource`] over the workers' query channels.
pub struct WorkerQueries {
    workers: Vec<Sender<Query>>,
    timeout: Duration,
}

impl WorkerQueries {
    /// Asks `workers` (in worker order), waiting up to `timeout` for each answer.
    pub fn new(workers: Vec<Sender<Query>>, timeout: Duration) -> Arc<WorkerQueries> {
        Arc::new(WorkerQueries { workers, timeout })
    }
}

/// The store's view of a worker's summary (as `<hex>.json` has it).
fn state_meta(s: BinarySummary) -> StateMeta {
    StateMeta {
        build_id: s.build_id,
        path: s.path,
        kind: s.kind.to_string(),
        samples: s.samples,
        unwind_errors: s
            .unwind_errors
            .into_iter()
            .map(|(r, n)| (r.to_string(), n))
            .collect(),
        stack_repairs: s
            .stack_repairs
            .into_iter()
            .map(|(r, n)| (r.to_string(), n))
            .collect(),
        names: Some(s.names),
        has_pseudo_probes: Some(s.has_pseudo_probes),
        counted: s.counted,
        sampled_secs: s.sampled_secs,
    }
}

impl LiveSource for WorkerQueries {
    fn list(&self) -> Vec<StateMeta> {
        let deadline = Instant::now() + self.timeout;
        // Every worker is asked first, then the answers are collected: they work at once.
        let answers: Vec<Receiver<Vec<BinarySummary>>> = self
            .workers
            .iter()
            .filter_map(|w| {
                let (reply, answer) = bounded(1);
                w.try_send(Query::List { reply }).ok()?;
                Some(answer)
            })
            .collect();
        answers
            .iter()
            .filter_map(|a| a.recv_deadline(deadline).ok())
            .flatten()
            .map(state_meta)
            .collect()
    }

    fn get(&self, id: &BuildId) -> Option<LiveAggregate> {
        let w = self.workers.get(worker_for(id, self.workers.len()))?;
        let (reply, answer) = bounded(1);
        w.try_send(Query::Profile {
            build_id: id.clone(),
            reply,
        })
        .ok()?;
        let (summary, bytes) = answer.recv_timeout(self.timeout).ok()??;
        Some(LiveAggregate {
            meta: state_meta(summary),
            unsymbolized: Arc::new(bytes),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::worker::WorkerSettings;
    use unwinder::shard::ShardInput;

    fn worker() -> Worker {
        Worker::new(WorkerSettings::unlimited(
            ShardInput::LeadingIp {
                has_callchain: true,
            },
            std::env::temp_dir(),
        ))
    }

    /// Queries are answered between items, and the loop ends when the items do; a worker
    /// that does not answer is left out after the timeout, and one whose queue is full is
    /// not waited for at all.
    #[test]
    fn workers_answer_queries_and_silent_ones_are_left_out() {
        let (items_tx, items_rx) = bounded::<WorkItem>(4);
        let (senders, mut receivers) = query_channels(2);
        let rx = receivers.remove(0);
        let thread = std::thread::spawn(move || serve(&mut worker(), items_rx, rx));
        // The second worker never answers (its receiver is held, not served).
        let silent = receivers.remove(0);
        let on = |worker: usize| {
            (0..=255u8)
                .map(|i| BuildId(vec![i, 1]))
                .find(|id| worker_for(id, 2) == worker)
                .unwrap()
        };
        let timeout = Duration::from_millis(300);
        let live = WorkerQueries::new(senders.clone(), timeout);
        items_tx.send(WorkItem::Flush { now_secs: 0 }).unwrap();
        // The first worker answers at once (it holds nothing), the second is waited for.
        let started = Instant::now();
        assert!(live.get(&on(0)).is_none());
        assert!(started.elapsed() < timeout);
        assert!(live.list().is_empty());
        assert!(started.elapsed() >= timeout);
        assert!(live.get(&on(1)).is_none());
        assert!(started.elapsed() >= 2 * timeout);
        // Its queue full, the second worker is not asked.
        while senders[1]
            .try_send(Query::List {
                reply: bounded(1).0,
            })
            .is_ok()
        {}
        let started = Instant::now();
        assert!(live.get(&on(1)).is_none());
        assert!(started.elapsed() < timeout);
        drop(silent);
        drop(items_tx);
        thread.join().unwrap();
    }
}
