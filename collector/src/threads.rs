//! [`on_threads`]: jobs run on scoped threads, the caller taking one of them.

/// Runs the jobs, the first on the calling thread and each other one on a scoped thread of
/// its own, and returns their results in order (a panicking job panics the caller). The
/// caller works rather than waits: a thread that sleeps in `join` leaves its CPU idle
/// while the scheduler may have put two new threads on another one.
pub fn on_threads<T: Send, F: FnOnce() -> T + Send>(jobs: impl IntoIterator<Item = F>) -> Vec<T> {
    let mut jobs = jobs.into_iter();
    let Some(first) = jobs.next() else {
        return Vec::new();
    };
    std::thread::scope(|scope| {
        let handles: Vec<_> = jobs.map(|job| scope.spawn(job)).collect();
        let mut results = vec![first()];
        results.extend(handles.into_iter().map(|h| match h.join() {
            Ok(result) => result,
            Err(panic) => std::panic::resume_unwind(panic),
        }));
        results
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_in_order_and_the_first_on_the_caller() {
        let caller = std::thread::current().id();
        let ran: Vec<(usize, bool)> =
            on_threads((0..4).map(|k| move || (k, std::thread::current().id() == caller)));
        assert_eq!(ran, [(0, true), (1, false), (2, false), (3, false)]);
        assert!(on_threads(Vec::<fn() -> u8>::new()).is_empty());
    }
}
