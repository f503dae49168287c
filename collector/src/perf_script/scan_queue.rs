//! [`ScanQueue`]: the ranges of a text the scanning threads share, so that no thread
//! idles while another still has much to read.
//!
//! The text starts as one range per thread. Equal bytes are not equal work (a stretch of
//! repeated samples is read faster than one of new ones), so a thread that runs out of
//! work says it is hungry; a thread still scanning then gives the second half of what it
//! has left ([`ScanQueue::share`]) as a new range. Scanning ends when every thread is
//! hungry: no range is left and none can appear.

use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex};

/// Fewest bytes left worth giving away half of.
const MIN_SHARED: usize = 4 << 20;

/// Ranges waiting for a thread, and the threads waiting for a range.
pub(crate) struct ScanQueue {
    state: Mutex<State>,
    wake: Condvar,
    hungry: AtomicBool,
}

struct State {
    ranges: Vec<Range<usize>>,
    /// Threads waiting in `take`.
    idle: usize,
    /// Threads taking part (a thread that panics leaves).
    active: usize,
}

impl ScanQueue {
    /// A queue holding `ranges` for the threads that [`ScanQueue::join`] it.
    pub(crate) fn new(ranges: Vec<Range<usize>>) -> ScanQueue {
        ScanQueue {
            state: Mutex::new(State {
                ranges,
                idle: 0,
                active: 0,
            }),
            wake: Condvar::new(),
            hungry: AtomicBool::new(false),
        }
    }

    /// The next range to scan, waiting while other threads may still share one; `None`
    /// when all the work is done.
    pub(crate) fn take(&self) -> Option<Range<usize>> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.idle += 1;
        loop {
            if let Some(range) = state.ranges.pop() {
                state.idle -= 1;
                self.hungry.store(state.idle > 0, Ordering::Relaxed);
                return Some(range);
            }
            if state.idle >= state.active {
                self.wake.notify_all();
                return None;
            }
            self.hungry.store(true, Ordering::Relaxed);
            state = self.wake.wait(state).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// Makes the calling thread take part until the guard drops: a thread that unwinds
    /// from a panic leaves, so that the others do not wait for it to share. Threads join
    /// as they start (a thread that could not be started is not waited for); every range
    /// is queued before any thread starts, so one that finds the queue empty with no one
    /// scanning may end although others have not joined yet.
    pub(crate) fn join(&self) -> Member<'_> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.active += 1;
        Member(self)
    }

    /// Makes scanning threads give away work as if a thread were waiting for some.
    pub(crate) fn ask_for_work(&self) {
        self.hungry.store(true, Ordering::Relaxed);
    }

    /// True when a thread waits for work (a cheap check for scanning threads).
    pub(crate) fn is_hungry(&self) -> bool {
        self.hungry.load(Ordering::Relaxed)
    }

    /// Gives away the second half of `position..end` when it is large enough: the new end
    /// of the caller's range, `cut(middle)` (a position where scanning may start, at or
    /// after the middle and before `end`; `None` when there is none).
    pub(crate) fn share(
        &self,
        position: usize,
        end: usize,
        cut: impl FnOnce(usize) -> Option<usize>,
    ) -> Option<usize> {
        if end.saturating_sub(position) < MIN_SHARED {
            return None;
        }
        let at = cut(position + (end - position) / 2).filter(|&c| c > position && c < end)?;
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.ranges.push(at..end);
        self.hungry.store(false, Ordering::Relaxed);
        self.wake.notify_one();
        Some(at)
    }
}

/// A thread's part in a [`ScanQueue`] ([`ScanQueue::join`]).
pub(crate) struct Member<'q>(&'q ScanQueue);

impl Drop for Member<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let mut state = self.0.state.lock().unwrap_or_else(|e| e.into_inner());
            state.active -= 1;
            self.0.wake.notify_all();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_halves_go_to_hungry_threads_and_every_byte_is_scanned_once() {
        let len = 64 << 20;
        let queue = ScanQueue::new(vec![0..len / 8, len / 8..len]);
        let scanned: Mutex<Vec<Range<usize>>> = Mutex::new(Vec::new());
        std::thread::scope(|scope| {
            for _ in 0..2 {
                scope.spawn(|| {
                    let _member = queue.join();
                    while let Some(range) = queue.take() {
                        let mut end = range.end;
                        let mut pos = range.start;
                        while pos < end {
                            if queue.is_hungry() {
                                if let Some(cut) = queue.share(pos, end, |m| Some(m + 1)) {
                                    end = cut;
                                }
                            }
                            pos = (pos + 4096).min(end);
                            std::thread::yield_now();
                        }
                        scanned.lock().unwrap().push(range.start..end);
                    }
                });
            }
        });
        let mut ranges = scanned.into_inner().unwrap();
        ranges.sort_by_key(|r| r.start);
        assert!(ranges.len() > 2, "the long range was shared: {ranges:?}");
        assert_eq!(ranges[0].start, 0);
        assert_eq!(ranges.last().unwrap().end, len);
        assert!(
            ranges.windows(2).all(|w| w[0].end == w[1].start),
            "{ranges:?}"
        );
    }

    #[test]
    fn a_panicking_thread_leaves_and_the_others_end() {
        let queue = ScanQueue::new(vec![]);
        std::thread::scope(|scope| {
            let _member = queue.join();
            let failing = scope.spawn(|| {
                let _member = queue.join();
                panic!("scan failed");
            });
            assert!(failing.join().is_err());
            assert_eq!(queue.take(), None);
        });
    }

    #[test]
    fn small_remainders_are_kept() {
        let queue = ScanQueue::new(vec![]);
        let _member = queue.join();
        assert_eq!(queue.share(0, MIN_SHARED - 1, Some), None);
        assert_eq!(queue.share(0, MIN_SHARED, |_| None), None);
        assert_eq!(queue.share(0, MIN_SHARED, Some), Some(MIN_SHARED / 2));
        assert_eq!(queue.take(), Some(MIN_SHARED / 2..MIN_SHARED));
        assert_eq!(queue.take(), None);
    }
}
