//! [`AllocProfile`]: sampled allocation calls aggregated per (process, call chain), with
//! unsampled estimates, and the exact totals of every call seen.
//!
//! Free matching (with the kernel filter's lifetime probes): a sampled call is followed,
//! in its thread's ring, by the record of its return (the pointer); a `free` record comes
//! only for a live sampled pointer. Returns and frees are kept and matched by time at
//! [`AllocProfile::match_frees`] (a free of another thread may be drained from its ring
//! before the return it follows); a matched free takes the allocation's weight off its
//! context's in-use estimate.

use std::collections::HashMap;

use super::call::{AllocCall, PointerEvent};
use super::sampler::{unsampling_weight, ByteSampler};

/// One allocation context's counts.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AllocContext {
    /// Sampled allocations.
    pub sampled_objects: u64,
    /// Bytes of the sampled allocations.
    pub sampled_bytes: u64,
    /// Estimated allocations: Σ 1/p(s) over the samples.
    pub alloc_objects: f64,
    /// Estimated bytes: Σ s/p(s) over the samples.
    pub alloc_space: f64,
    /// Estimated allocations freed: Σ 1/p(s) over the sampled allocations whose free was
    /// matched.
    pub freed_objects: f64,
    /// Estimated bytes freed.
    pub freed_space: f64,
}

impl AllocContext {
    /// Estimated allocations still in use (allocated, not freed).
    pub fn inuse_objects(&self) -> f64 {
        (self.alloc_objects - self.freed_objects).max(0.0)
    }

    /// Estimated bytes still in use.
    pub fn inuse_space(&self) -> f64 {
        (self.alloc_space - self.freed_space).max(0.0)
    }
}

type ContextKey = (u32, Vec<u64>);

/// A sampled allocation whose pointer is known.
#[derive(Clone, Debug)]
struct Returned {
    time: u64,
    ptr: u64,
    key: ContextKey,
    size: u64,
}

/// Free matching state.
#[derive(Clone, Debug, Default)]
struct Lifetimes {
    /// Per thread: the sampled call waiting for its return.
    pending: HashMap<u32, (ContextKey, u64)>,
    returned: Vec<Returned>,
    frees: Vec<(u64, u64)>,
    matched: u64,
}

/// Allocation contexts of a sampling session.
#[derive(Clone, Debug)]
pub struct AllocProfile {
    sampler: ByteSampler,
    presampled: bool,
    lifetimes: Option<Lifetimes>,
    contexts: HashMap<(u32, Vec<u64>), AllocContext>,
    calls: u64,
    bytes: u64,
}

impl AllocProfile {
    /// An empty profile sampling with mean interval `interval` bytes (0: every call).
    pub fn new(interval: u64, seed: u64) -> AllocProfile {
        AllocProfile {
            sampler: ByteSampler::new(interval, seed),
            presampled: false,
            lifetimes: None,
            contexts: HashMap::new(),
            calls: 0,
            bytes: 0,
        }
    }

    /// An empty profile for calls the kernel already sampled with mean interval `interval`
    /// (the in-kernel filter): every recorded call is a sample, weighted as such, and is
    /// not sampled a second time. [`AllocProfile::calls`] then counts the samples only.
    pub fn presampled(interval: u64) -> AllocProfile {
        AllocProfile {
            presampled: true,
            ..AllocProfile::new(interval, 1)
        }
    }

    /// Keeps what free matching needs: call before recording anything.
    pub fn track_lifetimes(&mut self) {
        self.lifetimes = Some(Lifetimes::default());
    }

    /// True when frees are matched.
    pub fn tracks_lifetimes(&self) -> bool {
        self.lifetimes.is_some()
    }

    /// The pointer returned to thread `e.tid` by its last sampled call.
    pub fn record_return(&mut self, e: &PointerEvent) {
        let Some(l) = self.lifetimes.as_mut() else {
            return;
        };
        if let Some((key, size)) = l.pending.remove(&e.tid) {
            if e.ptr != 0 {
                l.returned.push(Returned {
                    time: e.time,
                    ptr: e.ptr,
                    key,
                    size,
                });
            }
        }
    }

    /// A free of a sampled pointer.
    pub fn record_free(&mut self, e: &PointerEvent) {
        if let Some(l) = self.lifetimes.as_mut() {
            l.frees.push((e.time, e.ptr));
        }
    }

    /// Matches the frees recorded so far with the returns before them (in time) and
    /// moves the matched allocations' weights to their contexts' freed estimates.
    /// Returns the frees matched in total.
    pub fn match_frees(&mut self) -> u64 {
        let interval = self.sampler.interval();
        let Some(l) = self.lifetimes.as_mut() else {
            return 0;
        };
        // Returns before frees at equal times: a free follows its allocation's return.
        let mut events: Vec<(u64, u8, usize)> = l
            .returned
            .iter()
            .enumerate()
            .map(|(i, r)| (r.time, 0, i))
            .chain(l.frees.iter().enumerate().map(|(i, f)| (f.0, 1, i)))
            .collect();
        events.sort_unstable();
        let mut live: HashMap<u64, usize> = HashMap::new();
        let mut freed: Vec<usize> = Vec::new();
        for (_, kind, i) in events {
            if kind == 0 {
                live.insert(l.returned[i].ptr, i);
            } else if let Some(r) = live.remove(&l.frees[i].1) {
                freed.push(r);
            }
        }
        for &r in &freed {
            let r = &l.returned[r];
            if let Some(c) = self.contexts.get_mut(&r.key) {
                let w = unsampling_weight(r.size, interval);
                c.freed_objects += w;
                c.freed_space += w * r.size as f64;
            }
        }
        l.matched += freed.len() as u64;
        // Keep the allocations still live for later frees.
        let mut still: Vec<Returned> = live.into_values().map(|i| l.returned[i].clone()).collect();
        still.sort_by_key(|r| r.time);
        l.returned = still;
        l.frees.clear();
        l.matched
    }

    /// True when the calls recorded were sampled by the kernel.
    pub fn is_presampled(&self) -> bool {
        self.presampled
    }

    /// The mean sampling interval in bytes.
    pub fn interval(&self) -> u64 {
        self.sampler.interval()
    }

    /// Counts `call` and, when the sampler picks it (always, for a presampled profile),
    /// adds it to its context.
    pub fn record(&mut self, call: &AllocCall) {
        self.calls += 1;
        self.bytes = self.bytes.saturating_add(call.size);
        if !self.presampled && !self.sampler.sample(call.size) {
            return;
        }
        let w = unsampling_weight(call.size, self.sampler.interval());
        if let Some(l) = self.lifetimes.as_mut() {
            l.pending
                .insert(call.tid, ((call.pid, call.stack.clone()), call.size));
        }
        let c = self
            .contexts
            .entry((call.pid, call.stack.clone()))
            .or_default();
        c.sampled_objects += 1;
        c.sampled_bytes = c.sampled_bytes.saturating_add(call.size);
        c.alloc_objects += w;
        c.alloc_space += w * call.size as f64;
    }

    /// `((pid, stack leaf first), counts)` of every context, in no particular order.
    pub fn contexts(&self) -> impl Iterator<Item = (u32, &[u64], &AllocContext)> {
        self.contexts
            .iter()
            .map(|((pid, stack), c)| (*pid, stack.as_slice(), c))
    }

    /// Number of contexts.
    pub fn len(&self) -> usize {
        self.contexts.len()
    }

    /// True when nothing was sampled.
    pub fn is_empty(&self) -> bool {
        self.contexts.is_empty()
    }

    /// Allocation calls seen (sampled or not).
    pub fn calls(&self) -> u64 {
        self.calls
    }

    /// Bytes requested by all calls seen.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::AllocFn;

    fn call(size: u64, stack: &[u64]) -> AllocCall {
        AllocCall {
            function: AllocFn::Malloc,
            pid: 1,
            tid: 1,
            time: 0,
            size,
            stack: stack.to_vec(),
        }
    }

    #[test]
    fn every_call_at_interval_zero_is_exact() {
        let mut p = AllocProfile::new(0, 7);
        for _ in 0..3 {
            p.record(&call(100, &[1, 2]));
        }
        p.record(&call(5, &[1, 3]));
        assert_eq!((p.calls(), p.bytes(), p.len()), (4, 305, 2));
        let mut got: Vec<_> = p
            .contexts()
            .map(|(_, s, c)| (s.to_vec(), c.sampled_objects, c.alloc_space))
            .collect();
        got.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(got, vec![(vec![1, 2], 3, 300.0), (vec![1, 3], 1, 5.0)]);
    }

    #[test]
    fn presampled_calls_are_all_kept_with_their_weight() {
        // 64 B at I = 512 KiB: weight 1/(1 − e^(−64/524288)) = 8192.500010...; a user-space
        // sampler would keep ≈ 1 in 8192 of these.
        let mut p = AllocProfile::presampled(512 * 1024);
        for _ in 0..10 {
            p.record(&call(64, &[1, 2]));
        }
        assert!(p.is_presampled());
        let (_, _, c) = p.contexts().next().unwrap();
        assert_eq!(c.sampled_objects, 10);
        assert!(
            (c.alloc_objects - 81_925.0).abs() < 0.01,
            "{}",
            c.alloc_objects
        );
        assert!((c.alloc_space - 81_925.0 * 64.0).abs() < 1.0);
        assert_eq!(p.calls(), 10);
    }

    #[test]
    fn frees_matched_in_time_order_leave_the_kept_context_in_use() {
        let mut p = AllocProfile::presampled(0);
        p.track_lifetimes();
        let ptr = |tid, time, ptr| PointerEvent {
            pid: 1,
            tid,
            time,
            ptr,
        };
        // Thread 1: context [1, 2] allocates 0x10 (freed later by thread 2) and 0x20 (kept).
        p.record(&call(100, &[1, 2]));
        p.record_return(&ptr(1, 10, 0x10));
        p.record(&call(100, &[1, 2]));
        p.record_return(&ptr(1, 20, 0x20));
        // Thread 1: context [1, 3] allocates 0x30, freed; then a NULL return is ignored.
        p.record(&call(8, &[1, 3]));
        p.record_return(&ptr(1, 30, 0x30));
        p.record(&call(8, &[1, 3]));
        p.record_return(&ptr(1, 31, 0));
        // Drained out of order: the free of 0x30 at 40 and of 0x10 at 50, and a free of
        // 0x20 *before* its return (a reused address of an earlier block): not matched.
        p.record_free(&ptr(2, 50, 0x10));
        p.record_free(&ptr(2, 40, 0x30));
        p.record_free(&ptr(2, 5, 0x20));
        assert_eq!(p.match_frees(), 2);
        let mut got: Vec<_> = p
            .contexts()
            .map(|(_, s, c)| (s.to_vec(), c.inuse_objects(), c.inuse_space()))
            .collect();
        got.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(got, vec![(vec![1, 2], 1.0, 100.0), (vec![1, 3], 1.0, 8.0)]);
        // 0x20 is freed in a later batch.
        p.record_free(&ptr(2, 60, 0x20));
        assert_eq!(p.match_frees(), 3);
        let c = p.contexts().find(|(_, s, _)| *s == [1, 2]).unwrap().2;
        assert_eq!((c.inuse_objects(), c.freed_space), (0.0, 200.0));
    }

    #[test]
    fn sampled_calls_are_weighted() {
        // A 1 MiB allocation at I = 4 KiB is always sampled, weight 1/(1-e^-256) = 1.
        let mut p = AllocProfile::new(4096, 7);
        p.record(&call(1 << 20, &[9]));
        let (_, _, c) = p.contexts().next().unwrap();
        assert_eq!(
            (c.sampled_objects, c.alloc_objects, c.alloc_space),
            (1, 1.0, 1048576.0)
        );
    }
}
