//! [`LoadedBinaries`]: the binaries the store loaded to render profiles, a few at a time.
//!
//! A loaded binary holds its symbol and function tables and what it decoded (tens of
//! megabytes for a large library), so the store keeps only the [`LOADED_BINARIES`] it used
//! last, and forgets any it has not used for [`BINARY_IDLE`] (the daemon asks it to,
//! [`crate::store::ProfileStore::forget_idle_binaries`], so an idle store holds none). A
//! lookup that found nothing is remembered as long, so a binary that appears later (a debug
//! file installed, a file fetched) is found then.

use std::time::{Duration, Instant};

use collector::BuildId;

/// Loaded binaries kept at most: the binaries whose quality `/metrics` and the list
/// compute after each flush ([`crate::metrics::QUALITY_BINARIES`]) and one to render a
/// profile with, so that a flush does not load them all again.
pub const LOADED_BINARIES: usize = crate::metrics::QUALITY_BINARIES + 1;
/// A binary (or a lookup that found nothing) not used for this long is forgotten.
pub const BINARY_IDLE: Duration = Duration::from_secs(120);

/// Lookups by build id, most recently used last; `T` is what a lookup found.
#[derive(Debug)]
pub struct LoadedBinaries<T> {
    capacity: usize,
    idle: Duration,
    entries: Vec<(BuildId, Option<T>, Instant)>,
}

impl<T: Clone> LoadedBinaries<T> {
    /// At most `capacity` found binaries, each forgotten after `idle` unused.
    pub fn new(capacity: usize, idle: Duration) -> LoadedBinaries<T> {
        LoadedBinaries {
            capacity,
            idle,
            entries: Vec::new(),
        }
    }

    /// What the lookup of `id` found (`Some(None)`: nothing), if it is remembered; marks
    /// it used now.
    pub fn get(&mut self, id: &BuildId, now: Instant) -> Option<Option<T>> {
        let i = self.entries.iter().position(|(e, _, _)| e == id)?;
        let mut entry = self.entries.remove(i);
        entry.2 = now;
        let found = entry.1.clone();
        self.entries.push(entry);
        Some(found)
    }

    /// What `id`'s binary is, if it is remembered, without marking it used.
    pub fn peek(&self, id: &BuildId) -> Option<&Option<T>> {
        self.entries
            .iter()
            .find(|(e, _, _)| e == id)
            .map(|(_, found, _)| found)
    }

    /// Remembers what the lookup of `id` found; past the capacity, the found binary used
    /// longest ago is forgotten.
    pub fn insert(&mut self, id: BuildId, found: Option<T>, now: Instant) {
        self.entries.retain(|(e, _, _)| *e != id);
        self.entries.push((id, found, now));
        while self.loaded() > self.capacity {
            let Some(oldest) = self.entries.iter().position(|(_, f, _)| f.is_some()) else {
                break;
            };
            self.entries.remove(oldest);
        }
        // Misses are small, but not kept without end.
        let misses = self.entries.len() - self.loaded();
        if misses > 64 * self.capacity.max(1) {
            if let Some(oldest) = self.entries.iter().position(|(_, f, _)| f.is_none()) {
                self.entries.remove(oldest);
            }
        }
    }

    /// Forgets what was not used since `now - idle`; how many found binaries went.
    pub fn forget_idle(&mut self, now: Instant) -> usize {
        let before = self.loaded();
        let idle = self.idle;
        self.entries
            .retain(|(_, _, used)| now.saturating_duration_since(*used) < idle);
        before - self.loaded()
    }

    /// The found binaries held.
    pub fn loaded(&self) -> usize {
        self.entries.iter().filter(|(_, f, _)| f.is_some()).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: u8) -> BuildId {
        BuildId::from_hex(&format!("{n:02x}{}", "ab".repeat(19))).unwrap()
    }

    #[test]
    fn past_the_capacity_the_binary_used_longest_ago_goes() {
        let t0 = Instant::now();
        let mut b = LoadedBinaries::new(2, Duration::from_secs(60));
        b.insert(id(1), Some("one"), t0);
        b.insert(id(2), Some("two"), t0);
        b.insert(id(9), None, t0);
        // 1 is used again: 2 is now the one used longest ago.
        assert_eq!(b.get(&id(1), t0), Some(Some("one")));
        b.insert(id(3), Some("three"), t0);
        assert_eq!(b.loaded(), 2);
        assert_eq!(b.peek(&id(2)), None);
        assert_eq!(b.peek(&id(1)), Some(&Some("one")));
        assert_eq!(b.peek(&id(3)), Some(&Some("three")));
        // A miss does not count against the capacity, and is remembered.
        assert_eq!(b.get(&id(9), t0), Some(None));
    }

    #[test]
    fn what_was_not_used_for_the_idle_time_is_forgotten() {
        let t0 = Instant::now();
        let mut b = LoadedBinaries::new(4, Duration::from_secs(60));
        b.insert(id(1), Some(1), t0);
        b.insert(id(2), Some(2), t0);
        b.insert(id(3), None, t0);
        let later = t0 + Duration::from_secs(45);
        assert_eq!(b.get(&id(2), later), Some(Some(2)));
        assert_eq!(b.forget_idle(t0 + Duration::from_secs(61)), 1);
        assert_eq!(b.peek(&id(1)), None);
        assert_eq!(b.peek(&id(3)), None, "a miss is looked up again");
        assert_eq!(b.peek(&id(2)), Some(&Some(2)));
        assert_eq!(b.forget_idle(t0 + Duration::from_secs(106)), 1);
        assert_eq!(b.loaded(), 0);
    }
}
