//! [`AllocProfile`]: sampled allocation calls aggregated per (process, call chain), with
//! unsampled estimates, and the exact totals of every call seen.

use std::collections::HashMap;

use super::call::AllocCall;
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
}

/// Allocation contexts of a sampling session.
#[derive(Clone, Debug)]
pub struct AllocProfile {
    sampler: ByteSampler,
    contexts: HashMap<(u32, Vec<u64>), AllocContext>,
    calls: u64,
    bytes: u64,
}

impl AllocProfile {
    /// An empty profile sampling with mean interval `interval` bytes (0: every call).
    pub fn new(interval: u64, seed: u64) -> AllocProfile {
        AllocProfile {
            sampler: ByteSampler::new(interval, seed),
            contexts: HashMap::new(),
            calls: 0,
            bytes: 0,
        }
    }

    /// The mean sampling interval in bytes.
    pub fn interval(&self) -> u64 {
        self.sampler.interval()
    }

    /// Counts `call` and, when the sampler picks it, adds it to its context.
    pub fn record(&mut self, call: &AllocCall) {
        self.calls += 1;
        self.bytes = self.bytes.saturating_add(call.size);
        if !self.sampler.sample(call.size) {
            return;
        }
        let w = unsampling_weight(call.size, self.sampler.interval());
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
    use crate::uprobe::AllocFn;

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
