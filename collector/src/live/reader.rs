//! Per-CPU reader threads: drain a [`RingBuffer`], parse each record with the one record
//! parser ([`crate::record::parse_record`], the one `convert` uses for perf.data), and hand
//! the events on in [`EventBatch`]es through a bounded crossbeam channel with `try_send`.
//! A full channel never blocks the reader: the batch is dropped and counted.
//!
//! Samples are parsed into recycled samples when the pipeline hands them back
//! ([`SampleRecycler`], [`run_reader_recycling`]): no allocation per sample.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::{Sender, TrySendError};

use super::recycle::SampleRecycler;
use super::ring::{RecordHeader, RingBuffer};
use crate::record::{
    parse_record, parse_sample_record_into, record_type, Record, SampleLayout, SampleRecord,
};
use crate::{PerfEvent, Sample};

/// Events drained from one CPU's ring, in ring order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventBatch {
    /// The CPU whose ring they came from.
    pub cpu: u32,
    /// Samples and side-band events.
    pub events: Vec<PerfEvent>,
}

/// Counters shared by all readers (atomics; read with [`ReaderStats::snapshot`]).
#[derive(Debug, Default)]
pub struct ReaderStats {
    records: AtomicU64,
    samples: AtomicU64,
    side_band: AtomicU64,
    lost_records: AtomicU64,
    lost_events: AtomicU64,
    lost_samples: AtomicU64,
    parse_errors: AtomicU64,
    ring_resyncs: AtomicU64,
    wrapped_records: AtomicU64,
    batches_sent: AtomicU64,
    batches_dropped: AtomicU64,
    events_dropped: AtomicU64,
}

/// A copy of [`ReaderStats`] at one moment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReaderCounts {
    /// Records read from the rings.
    pub records: u64,
    /// PERF_RECORD_SAMPLEs parsed.
    pub samples: u64,
    /// MMAP/MMAP2/COMM/FORK/EXIT records parsed.
    pub side_band: u64,
    /// PERF_RECORD_LOST records seen (the ring was full).
    pub lost_records: u64,
    /// Sum of their `lost` fields: records the kernel could not write.
    pub lost_events: u64,
    /// Sum of PERF_RECORD_LOST_SAMPLES `lost` fields (dropped inside the kernel/PMU).
    pub lost_samples: u64,
    /// Records that did not parse.
    pub parse_errors: u64,
    /// Ring corruptions that forced a resynchronisation.
    pub ring_resyncs: u64,
    /// Records that wrapped the end of a ring.
    pub wrapped_records: u64,
    /// Batches handed to the pipeline.
    pub batches_sent: u64,
    /// Batches dropped because the channel was full.
    pub batches_dropped: u64,
    /// Events in those batches.
    pub events_dropped: u64,
}

impl ReaderStats {
    /// The current values.
    pub fn snapshot(&self) -> ReaderCounts {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        ReaderCounts {
            records: g(&self.records),
            samples: g(&self.samples),
            side_band: g(&self.side_band),
            lost_records: g(&self.lost_records),
            lost_events: g(&self.lost_events),
            lost_samples: g(&self.lost_samples),
            parse_errors: g(&self.parse_errors),
            ring_resyncs: g(&self.ring_resyncs),
            wrapped_records: g(&self.wrapped_records),
            batches_sent: g(&self.batches_sent),
            batches_dropped: g(&self.batches_dropped),
            events_dropped: g(&self.events_dropped),
        }
    }
}

fn add(a: &AtomicU64, n: u64) {
    a.fetch_add(n, Ordering::Relaxed);
}

/// Turns ring records into [`PerfEvent`]s for one attr layout, counting LOST records.
#[derive(Clone, Copy, Debug)]
pub struct RecordDecoder {
    layout: SampleLayout,
}

impl RecordDecoder {
    /// A decoder for records of an attr with `layout`.
    pub fn new(layout: SampleLayout) -> Self {
        RecordDecoder { layout }
    }

    /// Decodes one record; LOST/LOST_SAMPLES and parse failures are counted in `stats`.
    pub fn decode(
        &self,
        header: RecordHeader,
        body: &[u8],
        stats: &ReaderStats,
    ) -> Option<PerfEvent> {
        let mut counts = DecodeCounts::default();
        let e = self.decode_counted(header, body, &mut Vec::new(), &mut counts);
        counts.publish(stats);
        e
    }

    /// Decodes one record; a SAMPLE is parsed into a sample of `spare` when there is one.
    fn decode_counted(
        &self,
        header: RecordHeader,
        body: &[u8],
        spare: &mut Vec<Sample>,
        counts: &mut DecodeCounts,
    ) -> Option<PerfEvent> {
        counts.records += 1;
        if header.record_type == record_type::SAMPLE {
            // The one SAMPLE parser (`parse_record` calls it too), into a reused sample.
            let mut r = SampleRecord {
                sample: spare.pop().unwrap_or_default(),
                ..SampleRecord::default()
            };
            return match parse_sample_record_into(body, &self.layout, &mut r) {
                Ok(()) => {
                    counts.samples += 1;
                    Some(PerfEvent::Sample(r.sample))
                }
                Err(_) => {
                    counts.parse_errors += 1;
                    spare.push(r.sample);
                    None
                }
            };
        }
        match parse_record(header.record_type, header.misc, body, &self.layout) {
            Ok(Record::Lost(l)) => {
                counts.lost_records += 1;
                counts.lost_events += l.lost;
                None
            }
            Ok(Record::LostSamples(l)) => {
                counts.lost_samples += l.lost;
                None
            }
            Ok(r @ Record::Sample(_)) => {
                counts.samples += 1;
                r.into_perf_event()
            }
            Ok(r) => {
                let e = r.into_perf_event();
                if e.is_some() {
                    counts.side_band += 1;
                }
                e
            }
            Err(_) => {
                counts.parse_errors += 1;
                None
            }
        }
    }

    /// Drains `ring` (at most `max_bytes`) into `out`. The shared counters are updated
    /// once per drain, not per record (atomic adds showed in the throughput profile).
    pub fn drain(
        &self,
        ring: &mut RingBuffer,
        scratch: &mut Vec<u8>,
        max_bytes: u64,
        out: &mut Vec<PerfEvent>,
        stats: &ReaderStats,
    ) -> u64 {
        let limit = DrainLimit {
            bytes: max_bytes,
            events: usize::MAX,
        };
        self.drain_recycling(ring, scratch, limit, out, &mut Vec::new(), stats)
    }

    /// [`RecordDecoder::drain`] within `limit`, parsing samples into the samples of `spare`
    /// (taken from its end) while it has some, so their vectors' allocations are reused.
    pub fn drain_recycling(
        &self,
        ring: &mut RingBuffer,
        scratch: &mut Vec<u8>,
        limit: DrainLimit,
        out: &mut Vec<PerfEvent>,
        spare: &mut Vec<Sample>,
        stats: &ReaderStats,
    ) -> u64 {
        let mut counts = DecodeCounts::default();
        let full = out.len().saturating_add(limit.events);
        let result = ring.drain_while(scratch, limit.bytes, |h, body| {
            if let Some(e) = self.decode_counted(h, body, spare, &mut counts) {
                out.push(e);
            }
            out.len() < full
        });
        counts.publish(stats);
        match result {
            Ok(d) => {
                add(&stats.wrapped_records, d.wrapped);
                d.bytes
            }
            Err(_) => {
                add(&stats.ring_resyncs, 1);
                1
            }
        }
    }
}

/// How much one drain reads at most: the ring's bytes, and the events it adds (a reader
/// fills a batch allocated for its events without growing it: a batch of samples is
/// tens of kilobytes, and growing one copies them all).
#[derive(Clone, Copy, Debug)]
pub struct DrainLimit {
    /// Bytes of the ring.
    pub bytes: u64,
    /// Events added to the output.
    pub events: usize,
}

/// Per-drain tallies, added to [`ReaderStats`] at the end of the drain.
#[derive(Default)]
struct DecodeCounts {
    records: u64,
    samples: u64,
    side_band: u64,
    lost_records: u64,
    lost_events: u64,
    lost_samples: u64,
    parse_errors: u64,
}

impl DecodeCounts {
    fn publish(&self, stats: &ReaderStats) {
        for (a, n) in [
            (&stats.records, self.records),
            (&stats.samples, self.samples),
            (&stats.side_band, self.side_band),
            (&stats.lost_records, self.lost_records),
            (&stats.lost_events, self.lost_events),
            (&stats.lost_samples, self.lost_samples),
            (&stats.parse_errors, self.parse_errors),
        ] {
            if n != 0 {
                add(a, n);
            }
        }
    }
}

/// Reader thread settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReaderSettings {
    /// Events per batch (a batch is also sent when the ring is empty).
    pub batch_events: usize,
    /// Longest wait between drains when the ring was empty (a ring whose event has a
    /// `wakeup_watermark` wakes its reader sooner once that much is unread).
    pub poll_interval: Duration,
    /// Bytes drained before the tail is released and the batch considered.
    pub max_drain_bytes: u64,
}

impl Default for ReaderSettings {
    fn default() -> Self {
        ReaderSettings {
            batch_events: 512,
            poll_interval: Duration::from_millis(20),
            max_drain_bytes: 256 * 1024,
        }
    }
}

/// Sends `batch` without blocking; a full channel drops it (counted). False when the
/// receiver is gone.
pub fn offer_batch(tx: &Sender<EventBatch>, batch: EventBatch, stats: &ReaderStats) -> bool {
    let n = batch.events.len() as u64;
    match tx.try_send(batch) {
        Ok(()) => {
            add(&stats.batches_sent, 1);
            true
        }
        Err(TrySendError::Full(_)) => {
            add(&stats.batches_dropped, 1);
            add(&stats.events_dropped, n);
            true
        }
        Err(TrySendError::Disconnected(_)) => false,
    }
}

/// The reader loop of one CPU: drain, batch, offer; sleep when idle; after `stop` is set,
/// one last drain, then return.
pub fn run_reader(
    cpu: u32,
    ring: RingBuffer,
    decoder: RecordDecoder,
    tx: Sender<EventBatch>,
    stats: Arc<ReaderStats>,
    stop: Arc<AtomicBool>,
    settings: ReaderSettings,
) {
    let recycler = SampleRecycler::new(0);
    run_reader_recycling(cpu, ring, decoder, tx, stats, stop, settings, recycler);
}

/// [`run_reader`] parsing samples into the samples the pipeline gives back to `recycler`
/// (up to a batch's worth taken at a time).
#[allow(clippy::too_many_arguments)]
pub fn run_reader_recycling(
    cpu: u32,
    mut ring: RingBuffer,
    decoder: RecordDecoder,
    tx: Sender<EventBatch>,
    stats: Arc<ReaderStats>,
    stop: Arc<AtomicBool>,
    settings: ReaderSettings,
    recycler: SampleRecycler,
) {
    let mut scratch = Vec::new();
    let mut events = Vec::with_capacity(settings.batch_events);
    let mut spare: Vec<Sample> = Vec::new();
    loop {
        let stopping = stop.load(Ordering::Acquire);
        if spare.is_empty() {
            recycler.take(&mut spare, settings.batch_events);
        }
        let limit = DrainLimit {
            bytes: settings.max_drain_bytes,
            events: settings.batch_events.saturating_sub(events.len()).max(1),
        };
        let bytes = decoder.drain_recycling(
            &mut ring,
            &mut scratch,
            limit,
            &mut events,
            &mut spare,
            &stats,
        );
        if events.len() >= settings.batch_events || (bytes == 0 && !events.is_empty()) || stopping {
            let batch = EventBatch {
                cpu,
                events: std::mem::replace(&mut events, Vec::with_capacity(settings.batch_events)),
            };
            if !batch.events.is_empty() && !offer_batch(&tx, batch, &stats) {
                return;
            }
        }
        if stopping && bytes == 0 {
            return;
        }
        if bytes == 0 {
            ring.wait(settings.poll_interval);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{sample_type as st, LostEvent, RecordWriter, SampleId, SampleRecord};
    use crate::{Sample, SideBandEvent};

    #[test]
    fn lost_records_are_counted_and_samples_decoded() {
        let layout = SampleLayout::new(
            st::IDENTIFIER | st::IP | st::TID | st::CALLCHAIN,
            0,
            0,
            true,
        );
        let w = RecordWriter::new(layout);
        let mut bytes = Vec::new();
        let sample = SampleRecord {
            sample: Sample {
                pid: 7,
                tid: 8,
                ip: 0x401000,
                callchain: vec![0x401000, 0x401234],
                count: 1,
                ..Sample::default()
            },
            id: 42,
            ..SampleRecord::default()
        };
        w.write_sample(&mut bytes, 2, &sample).unwrap();
        w.write_lost(
            &mut bytes,
            &LostEvent { id: 42, lost: 17 },
            &SampleId::default(),
        )
        .unwrap();
        w.write_comm(
            &mut bytes,
            &crate::CommEvent {
                pid: 7,
                tid: 7,
                comm: "spin".into(),
                exec: true,
            },
            &SampleId::default(),
        )
        .unwrap();
        let mut ring = RingBuffer::in_memory(1, 4096).unwrap();
        assert!(ring.reset_position(4096 - 8));
        assert_eq!(ring.write_as_kernel(&bytes), bytes.len());
        let stats = ReaderStats::default();
        let mut out = Vec::new();
        RecordDecoder::new(layout).drain(&mut ring, &mut Vec::new(), u64::MAX, &mut out, &stats);
        assert_eq!(out.len(), 2);
        assert_eq!(out[0], PerfEvent::Sample(sample.sample));
        assert!(
            matches!(&out[1], PerfEvent::SideBand(SideBandEvent::Comm(c)) if c.comm == "spin" && c.exec)
        );
        let s = stats.snapshot();
        assert_eq!(
            (
                s.records,
                s.samples,
                s.side_band,
                s.lost_records,
                s.lost_events
            ),
            (3, 1, 1, 1, 17)
        );
        assert_eq!(s.wrapped_records, 1);
    }

    #[test]
    fn samples_are_parsed_into_recycled_samples() {
        let layout = SampleLayout::new(
            st::IP | st::TID | st::CALLCHAIN | st::BRANCH_STACK,
            0,
            0,
            true,
        );
        let w = RecordWriter::new(layout);
        let mut bytes = Vec::new();
        let sample = |ip: u64| Sample {
            pid: 7,
            tid: 7,
            ip,
            callchain: vec![ip, 0x401234],
            lbr: vec![crate::LbrEntry {
                from: 0x401000,
                to: ip,
                flags: 2,
            }],
            count: 1,
            ..Sample::default()
        };
        for ip in [0x401100, 0x401200] {
            let r = SampleRecord {
                sample: sample(ip),
                ..SampleRecord::default()
            };
            w.write_sample(&mut bytes, 2, &r).unwrap();
        }
        let mut ring = RingBuffer::in_memory(1, 4096).unwrap();
        assert_eq!(ring.write_as_kernel(&bytes), bytes.len());
        // One used sample (stale contents, a longer chain): the second record reuses it
        // (taken from the end), the first gets a new one.
        let mut used = sample(0x999);
        used.callchain.extend([1, 2, 3]);
        let reused_chain = used.callchain.as_ptr();
        let mut spare = vec![used];
        let stats = ReaderStats::default();
        let mut out = Vec::new();
        let all = DrainLimit {
            bytes: u64::MAX,
            events: usize::MAX,
        };
        RecordDecoder::new(layout).drain_recycling(
            &mut ring,
            &mut Vec::new(),
            all,
            &mut out,
            &mut spare,
            &stats,
        );
        assert!(spare.is_empty());
        assert_eq!(
            out,
            vec![
                PerfEvent::Sample(sample(0x401100)),
                PerfEvent::Sample(sample(0x401200))
            ]
        );
        match &out[0] {
            PerfEvent::Sample(s) => assert_eq!(s.callchain.as_ptr(), reused_chain),
            other => panic!("{other:?}"),
        }
        assert_eq!(stats.snapshot().samples, 2);
    }

    #[test]
    fn a_drain_stops_at_its_event_limit_and_the_next_goes_on() {
        let layout = SampleLayout::new(st::IP | st::TID, 0, 0, true);
        let w = RecordWriter::new(layout);
        let mut bytes = Vec::new();
        for ip in [0x401100, 0x401200, 0x401300] {
            let r = SampleRecord {
                sample: Sample {
                    pid: 7,
                    tid: 7,
                    ip,
                    count: 1,
                    ..Sample::default()
                },
                ..SampleRecord::default()
            };
            w.write_sample(&mut bytes, 2, &r).unwrap();
        }
        let record = bytes.len() as u64 / 3;
        let mut ring = RingBuffer::in_memory(1, 4096).unwrap();
        assert_eq!(ring.write_as_kernel(&bytes), bytes.len());
        let stats = ReaderStats::default();
        let decoder = RecordDecoder::new(layout);
        let ips = |out: &[PerfEvent]| -> Vec<u64> {
            out.iter()
                .map(|e| match e {
                    PerfEvent::Sample(s) => s.ip,
                    other => panic!("{other:?}"),
                })
                .collect()
        };
        // One event already in the batch, room for one more: the drain reads one record
        // and leaves the other two in the ring.
        let mut out = vec![PerfEvent::Sample(Sample::default())];
        let limit = DrainLimit {
            bytes: u64::MAX,
            events: 1,
        };
        let drained = decoder.drain_recycling(
            &mut ring,
            &mut Vec::new(),
            limit,
            &mut out,
            &mut Vec::new(),
            &stats,
        );
        assert_eq!((drained, ips(&out)), (record, vec![0, 0x401100]));
        let mut out = Vec::new();
        let drained = decoder.drain(&mut ring, &mut Vec::new(), u64::MAX, &mut out, &stats);
        assert_eq!((drained, ips(&out)), (2 * record, vec![0x401200, 0x401300]));
        assert_eq!(stats.snapshot().samples, 3);
    }

    #[test]
    fn full_channel_drops_and_counts() {
        let (tx, rx) = crossbeam_channel::bounded(1);
        let stats = ReaderStats::default();
        let batch = |n| EventBatch {
            cpu: 0,
            events: vec![PerfEvent::Sample(Sample::default()); n],
        };
        assert!(offer_batch(&tx, batch(3), &stats));
        assert!(offer_batch(&tx, batch(5), &stats));
        let s = stats.snapshot();
        assert_eq!(
            (s.batches_sent, s.batches_dropped, s.events_dropped),
            (1, 1, 5)
        );
        drop(rx);
        assert!(!offer_batch(&tx, batch(1), &stats));
    }
}
