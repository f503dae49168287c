//! [`WindowedCounters`]: counters kept per time window (e.g. 10 minutes), merged on read,
//! old windows dropped by retention. Time is passed in (seconds on any monotonic clock),
//! so the behaviour is testable without waiting.

use std::cell::Cell;
use std::collections::{HashMap, HashSet, VecDeque};

use crate::{ContextCounters, ContextKey, CounterKind, CounterSet};

/// Window length and retention.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WindowSettings {
    /// Length of one window in seconds (at least 1).
    pub window_secs: u64,
    /// How many windows are kept, the current one included (at least 1).
    pub retained_windows: usize,
}

impl Default for WindowSettings {
    fn default() -> Self {
        WindowSettings {
            window_secs: 600,
            retained_windows: 6,
        }
    }
}

/// One window's counters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Window {
    /// Start time (a multiple of the window length).
    pub start_secs: u64,
    /// The counters added in this window.
    pub counters: CounterSet,
    /// Samples counted into it.
    pub samples: u64,
}

/// Counters of one binary, per window.
#[derive(Clone, Debug)]
pub struct WindowedCounters {
    settings: WindowSettings,
    kind: CounterKind,
    windows: VecDeque<Window>,
    /// [`Self::approx_bytes`] since the windows last changed (the memory budget asks
    /// every few thousand samples; most binaries' counters have not changed by then).
    bytes: Cell<Option<usize>>,
}

impl WindowedCounters {
    /// No windows yet.
    pub fn new(kind: CounterKind, settings: WindowSettings) -> Self {
        WindowedCounters {
            settings: WindowSettings {
                window_secs: settings.window_secs.max(1),
                retained_windows: settings.retained_windows.max(1),
            },
            kind,
            windows: VecDeque::new(),
            bytes: Cell::new(None),
        }
    }

    /// What the counters' keys mean.
    pub fn kind(&self) -> CounterKind {
        self.kind
    }

    /// Start of the window containing `now_secs`.
    pub fn window_start(&self, now_secs: u64) -> u64 {
        now_secs - now_secs % self.settings.window_secs
    }

    /// The current window (created at `now_secs` if needed); older windows beyond the
    /// retention are dropped.
    pub fn current(&mut self, now_secs: u64) -> &mut Window {
        self.bytes.set(None);
        let start = self.window_start(now_secs);
        if self.windows.back().is_none_or(|w| w.start_secs < start) {
            self.windows.push_back(Window {
                start_secs: start,
                counters: CounterSet::new(self.kind),
                samples: 0,
            });
        }
        self.expire(now_secs);
        self.windows.back_mut().expect("pushed above")
    }

    /// Adds `counters` standing for `samples` samples at `now_secs`.
    pub fn add(&mut self, now_secs: u64, counters: &CounterSet, samples: u64) {
        let w = self.current(now_secs);
        w.counters.merge(counters);
        w.samples += samples;
    }

    /// Drops windows that started before the retained range ending at `now_secs`.
    pub fn expire(&mut self, now_secs: u64) {
        let span = self.settings.window_secs * self.settings.retained_windows as u64;
        let oldest = self
            .window_start(now_secs)
            .saturating_sub(span - self.settings.window_secs);
        while self.windows.front().is_some_and(|w| w.start_secs < oldest) {
            self.windows.pop_front();
            self.bytes.set(None);
        }
    }

    /// Samples in the window containing `now_secs` (0 if it has none yet).
    pub fn samples_in_window(&self, now_secs: u64) -> u64 {
        let start = self.window_start(now_secs);
        self.windows
            .back()
            .filter(|w| w.start_secs == start)
            .map_or(0, |w| w.samples)
    }

    /// Every retained window merged (the sum of their counters) and their sample total.
    pub fn merged(&self) -> (CounterSet, u64) {
        let mut out = CounterSet::new(self.kind);
        let mut samples = 0;
        for w in &self.windows {
            out.merge(&w.counters);
            samples += w.samples;
        }
        (out, samples)
    }

    /// The samples of every retained window (what [`WindowedCounters::merged`] counts,
    /// without merging the counters).
    pub fn samples(&self) -> u64 {
        self.windows.iter().map(|w| w.samples).sum()
    }

    /// The retained windows, oldest first.
    pub fn windows(&self) -> impl Iterator<Item = &Window> {
        self.windows.iter()
    }

    /// A rough size of the counters in bytes (keys, map entries), for the memory budget.
    pub fn approx_bytes(&self) -> usize {
        if let Some(bytes) = self.bytes.get() {
            return bytes;
        }
        let bytes = self
            .windows
            .iter()
            .flat_map(|w| w.counters.contexts.iter())
            .map(|(k, c)| context_approx_bytes(k, c))
            .sum();
        self.bytes.set(Some(bytes));
        bytes
    }

    /// Inserts a window restored from a state file, keeping the windows ordered by start;
    /// a window with the same start is merged into. Retention applies at the next
    /// [`WindowedCounters::expire`] or [`WindowedCounters::current`].
    pub fn restore(&mut self, window: Window) {
        self.bytes.set(None);
        match self
            .windows
            .binary_search_by_key(&window.start_secs, |w| w.start_secs)
        {
            Ok(i) => {
                let w = &mut self.windows[i];
                w.counters.merge(&window.counters);
                w.samples += window.samples;
            }
            Err(i) => self.windows.insert(i, window),
        }
    }

    /// Heat of each context: the sum of its range and branch counts over the retained
    /// windows (what the memory budget evicts by, coldest first), with its approximate
    /// bytes.
    pub fn context_heat(&self) -> HashMap<&ContextKey, (u64, usize)> {
        let mut heat: HashMap<&ContextKey, (u64, usize)> = HashMap::new();
        for w in &self.windows {
            for (k, c) in &w.counters.contexts {
                let e = heat.entry(k).or_default();
                let n = c.ranges.values().chain(c.branches.values());
                e.0 = n.fold(e.0, |a, &v| a.saturating_add(v));
                e.1 += context_approx_bytes(k, c);
            }
        }
        heat
    }

    /// Removes the contexts `keys` from every window (memory budget); returns how many
    /// context entries were removed. The windows' sample counts are kept.
    pub fn evict_contexts(&mut self, keys: &HashSet<ContextKey>) -> usize {
        self.bytes.set(None);
        let mut removed = 0;
        for w in self.windows.iter_mut() {
            let before = w.counters.contexts.len();
            w.counters.contexts.retain(|k, _| !keys.contains(k));
            removed += before - w.counters.contexts.len();
        }
        removed
    }
}

/// The budget's size estimate of one context's counters, in heap bytes: the hash map slot
/// (key and value headers at the map's load factor, about 128 bytes), the key's heap
/// buffer (8 bytes a frame plus the allocator's 16), and each non-empty `BTreeMap`'s leaf
/// nodes (288 bytes for up to 11 entries; taken as 8 entries a node, the usual fill).
pub fn context_approx_bytes(key: &ContextKey, c: &ContextCounters) -> usize {
    let btree = |n: usize| n.div_ceil(8) * 288;
    128 + 16 + 8 * key.len() + btree(c.ranges.len()) + btree(c.branches.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(range: (u64, u64), n: u64) -> CounterSet {
        let mut c = CounterSet::new(CounterKind::Flat);
        c.context_mut(&[]).ranges.insert(range, n);
        c
    }

    /// Counters of `kind` in windows of 10 s, the last two retained.
    fn two_windows_of_ten_seconds(kind: CounterKind) -> WindowedCounters {
        WindowedCounters::new(
            kind,
            WindowSettings {
                window_secs: 10,
                retained_windows: 2,
            },
        )
    }

    /// The size the memory budget reads follows every change: adds, expiry, restores
    /// and evictions.
    #[test]
    fn approx_bytes_follow_every_change() {
        let mut w = two_windows_of_ten_seconds(CounterKind::Flat);
        assert_eq!(w.approx_bytes(), 0);
        let one_context = 144 + 288;
        w.add(0, &one((1, 2), 1), 1);
        assert_eq!(w.approx_bytes(), one_context);
        w.add(10, &one((3, 4), 1), 1);
        assert_eq!(w.approx_bytes(), 2 * one_context);
        // A second range in the same leaf of the B-tree, a ninth in a second leaf.
        w.add(10, &one((5, 6), 1), 1);
        assert_eq!(w.approx_bytes(), 2 * one_context);
        for r in 0..7 {
            w.add(10, &one((0x100 + r, 0x200), 1), 1);
        }
        assert_eq!(w.approx_bytes(), 2 * one_context + 288);
        w.expire(20);
        assert_eq!(w.approx_bytes(), one_context + 288);
        w.restore(Window {
            start_secs: 20,
            counters: one((7, 8), 1),
            samples: 1,
        });
        assert_eq!(w.approx_bytes(), 2 * one_context + 288);
        assert_eq!(w.evict_contexts(&HashSet::from([ContextKey::new()])), 2);
        assert_eq!(w.approx_bytes(), 0);
    }

    #[test]
    fn windows_merge_on_read_and_expire() {
        let mut w = two_windows_of_ten_seconds(CounterKind::Flat);
        w.add(3, &one((1, 1), 2), 2);
        w.add(9, &one((1, 1), 1), 1);
        w.add(12, &one((2, 2), 5), 5);
        assert_eq!(
            w.windows().map(|x| x.start_secs).collect::<Vec<_>>(),
            vec![0, 10]
        );
        assert_eq!(w.samples_in_window(15), 5);
        let (m, n) = w.merged();
        assert_eq!(n, 8);
        assert_eq!(w.samples(), 8);
        assert_eq!(m.contexts[&vec![]].ranges[&(1, 1)], 3);
        assert_eq!(m.contexts[&vec![]].ranges[&(2, 2)], 5);
        // At t=25 the window [0,10) falls out of the 2-window retention.
        w.add(25, &one((3, 3), 1), 1);
        assert_eq!(
            w.windows().map(|x| x.start_secs).collect::<Vec<_>>(),
            vec![10, 20]
        );
        assert_eq!(w.merged().1, 6);
        assert_eq!(w.samples(), 6);
        assert_eq!(w.samples_in_window(31), 0);
    }

    #[test]
    fn restored_windows_keep_their_starts_and_coldest_contexts_are_evicted() {
        let mut w = two_windows_of_ten_seconds(CounterKind::ProbeContext);
        w.add(25, &one((1, 1), 4), 4);
        let mut old = CounterSet::new(CounterKind::ProbeContext);
        old.context_mut(&[7]).ranges.insert((2, 2), 1);
        w.restore(Window {
            start_secs: 10,
            counters: old,
            samples: 1,
        });
        w.restore(Window {
            start_secs: 20,
            counters: one((1, 1), 2),
            samples: 2,
        });
        assert_eq!(
            w.windows()
                .map(|x| (x.start_secs, x.samples))
                .collect::<Vec<_>>(),
            vec![(10, 1), (20, 6)]
        );
        assert_eq!(w.merged().0.contexts[&vec![]].ranges[&(1, 1)], 6);
        let heat = w.context_heat();
        assert_eq!(heat[&vec![7]], (1, 144 + 8 + 288));
        assert_eq!(heat[&vec![]], (6, 144 + 288));
        let cold: HashSet<ContextKey> = [vec![7]].into_iter().collect();
        assert_eq!(w.evict_contexts(&cold), 1);
        assert_eq!(w.approx_bytes(), 144 + 288);
        // The restored window [10,20) expires normally at t=30.
        w.expire(30);
        assert_eq!(
            w.windows().map(|x| x.start_secs).collect::<Vec<_>>(),
            vec![20]
        );
    }
}
