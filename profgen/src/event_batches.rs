//! [`EventBatches`]: events read on a thread of their own and handed over in batches, so
//! that reading overlaps with unwinding.

use collector::PerfEvent;

/// Events read on a scoped thread and handed over in batches through a bounded channel, so
/// that reading (parsing) overlaps with sample preparation and unwinding on the caller's
/// thread. In input order; the reader's first error ends the stream after the events
/// before it. Dropping the iterator stops the reader at its next batch.
pub(crate) struct EventBatches<E> {
    rx: crossbeam_channel::Receiver<Result<Vec<PerfEvent>, E>>,
    current: std::vec::IntoIter<PerfEvent>,
}

/// Events per batch: large enough that channel traffic is negligible, small enough that
/// the two threads start overlapping at once.
const EVENT_BATCH: usize = 512;

impl<E: Send> EventBatches<E> {
    /// Starts `next(&mut reader)` on a thread of `scope` until it returns `Ok(None)` or an
    /// error.
    pub(crate) fn spawn<'scope, R: Send + 'scope>(
        scope: &'scope std::thread::Scope<'scope, '_>,
        mut reader: R,
        mut next: impl FnMut(&mut R) -> Result<Option<PerfEvent>, E> + Send + 'scope,
    ) -> EventBatches<E>
    where
        E: 'scope,
    {
        let (tx, rx) = crossbeam_channel::bounded(16);
        scope.spawn(move || {
            let mut batch = Vec::with_capacity(EVENT_BATCH);
            loop {
                match next(&mut reader) {
                    Ok(Some(event)) => {
                        batch.push(event);
                        if batch.len() == EVENT_BATCH {
                            let full =
                                std::mem::replace(&mut batch, Vec::with_capacity(EVENT_BATCH));
                            if tx.send(Ok(full)).is_err() {
                                return;
                            }
                        }
                    }
                    Ok(None) => {
                        let _ = tx.send(Ok(batch));
                        return;
                    }
                    Err(e) => {
                        if tx.send(Ok(batch)).is_ok() {
                            let _ = tx.send(Err(e));
                        }
                        return;
                    }
                }
            }
        });
        EventBatches {
            rx,
            current: Vec::new().into_iter(),
        }
    }
}

impl<E> Iterator for EventBatches<E> {
    type Item = Result<PerfEvent, E>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(event) = self.current.next() {
                return Some(Ok(event));
            }
            match self.rx.recv().ok()? {
                Ok(batch) => self.current = batch.into_iter(),
                Err(e) => return Some(Err(e)),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use collector::{Sample, SideBandEvent};

    fn sample(ip: u64) -> PerfEvent {
        PerfEvent::Sample(Sample {
            ip,
            ..Sample::default()
        })
    }

    fn ips(events: &[Result<PerfEvent, String>]) -> Vec<Result<u64, String>> {
        events
            .iter()
            .map(|e| match e {
                Ok(PerfEvent::Sample(s)) => Ok(s.ip),
                Ok(PerfEvent::SideBand(_)) => Ok(u64::MAX),
                Err(e) => Err(e.clone()),
            })
            .collect()
    }

    #[test]
    fn batches_keep_order_across_batch_boundaries() {
        let n = EVENT_BATCH as u64 * 2 + 3;
        let got: Vec<_> = std::thread::scope(|scope| {
            EventBatches::spawn(scope, 0u64, |i: &mut u64| {
                *i += 1;
                Ok::<_, String>((*i <= n).then(|| sample(*i)))
            })
            .collect()
        });
        assert_eq!(ips(&got), (1..=n).map(Ok).collect::<Vec<_>>());
    }

    #[test]
    fn error_ends_the_stream_after_the_events_before_it() {
        let got: Vec<_> = std::thread::scope(|scope| {
            EventBatches::spawn(scope, 0u64, |i: &mut u64| {
                *i += 1;
                match *i {
                    1 => Ok(Some(sample(7))),
                    2 => Ok(Some(PerfEvent::SideBand(SideBandEvent::Mmap2(
                        Default::default(),
                    )))),
                    3 => Err("line 3: bad".to_string()),
                    _ => unreachable!("the reader stops at its first error"),
                }
            })
            .collect()
        });
        assert_eq!(
            ips(&got),
            vec![Ok(7), Ok(u64::MAX), Err("line 3: bad".into())]
        );
    }

    #[test]
    fn dropping_the_iterator_stops_the_reader() {
        use std::sync::atomic::{AtomicU64, Ordering};
        let reads = AtomicU64::new(0);
        std::thread::scope(|scope| {
            let mut events = EventBatches::spawn(scope, &reads, |c: &mut &AtomicU64| {
                let i = c.fetch_add(1, Ordering::Relaxed);
                Ok::<_, String>(Some(sample(i)))
            });
            assert!(matches!(events.next(), Some(Ok(PerfEvent::Sample(s))) if s.ip == 0));
            drop(events);
            // The scope joins the endless reader: it returns only because its send failed.
        });
        // At most the channel's batches, the one taken and the one being filled.
        assert!(reads.load(Ordering::Relaxed) <= 18 * EVENT_BATCH as u64 + 1);
    }
}
