//! `collector::perf_script::tally_samples` against the sequential reader: on any input,
//! on 1 to 4 threads, the same error or the same statistics and, per piece, the same
//! samples (LBR flags cleared: the tally leaves them out) with the same total counts and
//! occurrences.
#![no_main]

use std::collections::HashMap;

use collector::perf_script::{tally_samples, ParsedPiece, PerfScriptReader};
use collector::{PerfEvent, Sample, SideBandEvent};
use libfuzzer_sys::fuzz_target;

/// Per piece: samples (count and LBR flags zeroed) → (count sum, occurrences); `None` for
/// an MMAP event.
type Folded = Vec<Option<HashMap<Sample, (u64, u64)>>>;

fn add(pieces: &mut Folded, sample: &Sample, count: u64, occurrences: u64) {
    if !matches!(pieces.last(), Some(Some(_))) {
        pieces.push(Some(HashMap::new()));
    }
    let Some(Some(map)) = pieces.last_mut() else { unreachable!() };
    let mut key = Sample { count: 0, ..sample.clone() };
    for e in &mut key.lbr {
        e.flags = 0;
    }
    let e = map.entry(key).or_default();
    e.0 = e.0.wrapping_add(count);
    e.1 += occurrences;
}

fuzz_target!(|data: &[u8]| {
    let reader = match PerfScriptReader::new(data, "fuzz") {
        Ok(r) => r,
        Err(e) => {
            let t = tally_samples(data, "fuzz", 2, &|_| {});
            assert_eq!(t.err().map(|e| e.to_string()), Some(e.to_string()));
            return;
        }
    };
    let mut reader = reader;
    let mut expected: Folded = Vec::new();
    let mut error = None;
    loop {
        match reader.next_event() {
            Ok(Some(PerfEvent::Sample(s))) => add(&mut expected, &s, s.count, 1),
            Ok(Some(PerfEvent::SideBand(SideBandEvent::Mmap2(_)))) => expected.push(None),
            Ok(Some(_)) => {}
            Ok(None) => break,
            Err(e) => {
                error = Some(e.to_string());
                break;
            }
        }
    }
    for threads in 1..=4 {
        match tally_samples(data, "fuzz", threads, &|_| {}) {
            Err(e) => assert_eq!(Some(e.to_string()), error, "{threads} threads"),
            Ok(t) => {
                assert_eq!(error, None, "{threads} threads");
                let (pieces, stats) = t.parse_all();
                assert_eq!(&stats, reader.stats(), "{threads} threads");
                let mut got: Folded = Vec::new();
                for piece in &pieces {
                    match piece {
                        ParsedPiece::Mmap(_) => got.push(None),
                        ParsedPiece::Samples(samples) => {
                            for s in samples {
                                add(&mut got, &s.sample, s.sample.count, s.occurrences);
                            }
                        }
                    }
                }
                assert_eq!(got, expected, "{threads} threads");
            }
        }
    }
});
