//! [`SampleRecycler`]: samples handed back by the pipeline's last stage (the workers) to
//! the readers, so the reader parses each record into a sample whose call chain and branch
//! stack vectors are already allocated: no malloc/free pair per sample and vector.
//!
//! The pool is one mutex-guarded stack, locked once per batch (a reader takes a batch's
//! worth of samples, a worker gives back a whole fed group), never per sample. It is
//! bounded: past `max_samples` given samples are simply dropped, and a sample whose
//! vectors grew past [`MAX_RECYCLED_CALLCHAIN`] / [`MAX_RECYCLED_LBR`] entries is not kept,
//! so the pool holds at most about `max_samples` × 2.3 KiB.

use std::sync::{Arc, Mutex, PoisonError};

use crate::Sample;

/// Largest call chain capacity a recycled sample keeps (deeper chains are rare).
pub const MAX_RECYCLED_CALLCHAIN: usize = 128;
/// Largest branch stack capacity a recycled sample keeps (32: Intel arch LBR's maximum).
pub const MAX_RECYCLED_LBR: usize = 32;

/// The daemon's pool size: 8192 samples (about 8 MiB of 32-entry LBR samples when full),
/// room for a fed coalesced worker group (4096 samples and the batch that completed it)
/// while the readers still hold a batch or two.
pub const DEFAULT_RECYCLED_SAMPLES: usize = 8192;

/// A shared, bounded pool of used samples (cheap to clone: one `Arc`).
#[derive(Clone, Debug)]
pub struct SampleRecycler {
    pool: Arc<Mutex<Vec<Sample>>>,
    max_samples: usize,
}

impl SampleRecycler {
    /// A pool keeping at most `max_samples` samples (0: keeps nothing).
    pub fn new(max_samples: usize) -> SampleRecycler {
        SampleRecycler {
            pool: Arc::new(Mutex::new(Vec::new())),
            max_samples,
        }
    }

    /// Takes back the samples of `samples` (left empty) that fit: their contents are
    /// stale, only their allocations are reused. The rest are dropped.
    pub fn give(&self, samples: &mut Vec<Sample>) {
        if self.max_samples == 0 {
            samples.clear();
            return;
        }
        let keep = |s: &Sample| {
            s.callchain.capacity() <= MAX_RECYCLED_CALLCHAIN && s.lbr.capacity() <= MAX_RECYCLED_LBR
        };
        {
            let mut pool = self.pool.lock().unwrap_or_else(PoisonError::into_inner);
            let room = self.max_samples.saturating_sub(pool.len());
            if room == 0 {
                drop(pool);
                samples.clear();
                return;
            }
            let start = samples.len().saturating_sub(room);
            pool.extend(samples.drain(start..).filter(keep));
        }
        // Dropped outside the lock.
        samples.clear();
    }

    /// Moves up to `n` pooled samples to the end of `out`.
    pub fn take(&self, out: &mut Vec<Sample>, n: usize) {
        if self.max_samples == 0 || n == 0 {
            return;
        }
        let mut pool = self.pool.lock().unwrap_or_else(PoisonError::into_inner);
        let start = pool.len().saturating_sub(n);
        out.extend(pool.drain(start..));
    }

    /// Samples in the pool now.
    pub fn len(&self) -> usize {
        self.pool
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// True when the pool holds no sample.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Default for SampleRecycler {
    /// A pool of [`DEFAULT_RECYCLED_SAMPLES`].
    fn default() -> Self {
        SampleRecycler::new(DEFAULT_RECYCLED_SAMPLES)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::LbrEntry;

    fn sample(chain: usize, lbr: usize) -> Sample {
        Sample {
            callchain: vec![7; chain],
            lbr: vec![LbrEntry::default(); lbr],
            count: 1,
            ..Sample::default()
        }
    }

    #[test]
    fn gives_back_up_to_the_bound_and_takes_in_batches() {
        let r = SampleRecycler::new(3);
        let mut given = vec![sample(4, 32), sample(200, 32), sample(4, 64), sample(2, 16)];
        let kept_chain = given[3].callchain.as_ptr();
        r.give(&mut given);
        // Room for 3: the last 3 are offered; the 200-deep chain and the 64-entry stack
        // are over the per-sample bounds.
        assert!(given.is_empty());
        assert_eq!(r.len(), 1);
        r.give(&mut vec![sample(1, 1), sample(1, 1), sample(1, 1)]);
        assert_eq!(r.len(), 3);
        let mut out = Vec::new();
        r.take(&mut out, 2);
        assert_eq!((out.len(), r.len()), (2, 1));
        r.take(&mut out, 5);
        assert_eq!((out.len(), r.len()), (3, 0));
        assert_eq!(out[2].callchain.as_ptr(), kept_chain);
        r.take(&mut out, 5);
        assert_eq!(out.len(), 3);
    }

    #[test]
    fn a_zero_pool_keeps_nothing_and_clones_share_the_pool() {
        let none = SampleRecycler::new(0);
        let mut given = vec![sample(1, 1)];
        none.give(&mut given);
        assert!(given.is_empty() && none.is_empty());
        let a = SampleRecycler::default();
        let b = a.clone();
        a.give(&mut vec![sample(1, 1)]);
        assert_eq!(b.len(), 1);
    }
}
