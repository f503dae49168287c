//! Stack-only perf script samples ([`PerfScriptType::StackOnly`]) with the addresses the
//! kernel recorded.
//!
//! perf prints a user call-chain address that falls in a file-backed mapping (or `[vdso]`)
//! as the offset in that file (`map__map_ip`: `ip - start + pgoff`, "show binary offset for
//! userspace addr" in perf's util/evsel_fprintf.c), and names the file with `-F ip,dso`. A
//! sample's IP printed alone (a recording without call chains) stays absolute.
//! [`StackOnlyReader`] maps each frame back through the latest MMAP line of the file it
//! names: an address inside that mapping is taken as it is, an address inside the mapping's
//! file range as an offset (`addr - pgoff + start`). Frames without a file name, or naming a
//! file no MMAP line maps, are taken as printed. The samples are then what the perf.data
//! reader gives for the same recording (without pid, tid and time: the text has none).

use std::collections::HashMap;

use super::reader::{parse_mmap_line, PerfScriptError, PerfScriptStats, PerfScriptType};
use super::unit::{Unit, UnitCursor};
use crate::{Mmap2Event, PerfEvent, Sample, SideBandEvent};

/// The executable mappings of each file, as the MMAP lines so far describe them.
#[derive(Debug, Default)]
pub struct FileMappings {
    /// Per file name: (start, length, page offset), latest last.
    files: HashMap<String, Vec<(u64, u64, u64)>>,
}

/// Most mappings remembered per file (one per segment and process that mapped it; the
/// latest ones are the ones looked at).
const MAX_MAPPINGS_PER_FILE: usize = 64;

impl FileMappings {
    /// Notes a mapping.
    pub fn observe(&mut self, m: &Mmap2Event) {
        let maps = self.files.entry(m.filename.clone()).or_default();
        maps.retain(|&(_, len, pgoff)| pgoff != m.pgoff || len != m.len);
        if maps.len() >= MAX_MAPPINGS_PER_FILE {
            maps.remove(0);
        }
        maps.push((m.addr, m.len, m.pgoff));
    }

    /// The address perf printed as `addr` in a frame naming `dso`, as the kernel recorded
    /// it.
    pub fn absolute(&self, addr: u64, dso: &[u8]) -> u64 {
        let Some(maps) = std::str::from_utf8(dso)
            .ok()
            .and_then(|d| self.files.get(d))
        else {
            return addr;
        };
        if maps
            .iter()
            .any(|&(start, len, _)| addr.wrapping_sub(start) < len)
        {
            return addr;
        }
        maps.iter()
            .rev()
            .find(|&&(_, len, pgoff)| addr.wrapping_sub(pgoff) < len)
            .map_or(addr, |&(start, _, pgoff)| addr - pgoff + start)
    }
}

/// Reads the events of a stack-only perf script: [`Mmap2Event`]s for MMAP lines and
/// [`Sample`]s whose `ip` and `callchain` (leaf first; empty for a sample printed without
/// call chain) are absolute addresses, `count` from a count line, else 1.
#[derive(Debug)]
pub struct StackOnlyReader<'a> {
    units: UnitCursor<'a>,
    maps: FileMappings,
    stats: PerfScriptStats,
}

impl<'a> StackOnlyReader<'a> {
    /// Reads `text` (named `name` in errors), which must be a stack-only script.
    pub fn new(text: &'a [u8], name: impl Into<String>) -> Result<Self, PerfScriptError> {
        let name = name.into();
        let ty = PerfScriptType::of(text, &name)?;
        if ty != PerfScriptType::StackOnly {
            return Err(PerfScriptError::NotStackOnly { name, found: ty });
        }
        Ok(StackOnlyReader {
            units: UnitCursor::new(text, name, PerfScriptType::StackOnly, 0)?,
            maps: FileMappings::default(),
            stats: PerfScriptStats::default(),
        })
    }

    /// What was skipped so far.
    pub fn stats(&self) -> &PerfScriptStats {
        &self.stats
    }

    /// The next event, or `None` at the end of the input.
    pub fn next_event(&mut self) -> Result<Option<PerfEvent>, PerfScriptError> {
        let event = self.next_event_inner();
        self.stats.lines = self.units.lines();
        event
    }

    fn next_event_inner(&mut self) -> Result<Option<PerfEvent>, PerfScriptError> {
        while let Some(unit) = self.units.next_unit()? {
            match unit {
                Unit::Mmap(line) => match parse_mmap_line(line) {
                    Some(m) => {
                        self.maps.observe(&m);
                        return Ok(Some(PerfEvent::SideBand(SideBandEvent::Mmap2(m))));
                    }
                    None => self.stats.unparsed_mmap_lines += 1,
                },
                Unit::Skipped { dropped } => self.stats.dropped_samples += dropped,
                Unit::Sample(text) => {
                    let frames: Vec<u64> = text
                        .stack_frames()
                        .map(|f| match f.dso {
                            Some(dso) => self.maps.absolute(f.addr, dso),
                            None => f.addr,
                        })
                        .collect();
                    let Some(&ip) = frames.first() else {
                        continue;
                    };
                    let chain = text.block.starts_with(b"\t");
                    return Ok(Some(PerfEvent::Sample(Sample {
                        ip,
                        callchain: if chain { frames } else { Vec::new() },
                        count: text.count,
                        ..Sample::default()
                    })));
                }
            }
        }
        Ok(None)
    }
}

impl Iterator for StackOnlyReader<'_> {
    type Item = Result<PerfEvent, PerfScriptError>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_event().transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SCRIPT: &str = "\
PERF_RECORD_MMAP2 7/7: [0x555555554000(0x1000) @ 0x1000 fe:00 1 0]: r-xp /tmp/prog
PERF_RECORD_MMAP2 7/7: [0x7f0000026000(0x156000) @ 0x26000 fe:00 2 0]: r-xp /lib/libc.so.6

\t            117d (/tmp/prog)
\t            1169 (/tmp/prog)
\t           2724a (/lib/libc.so.6)
\t               0 ([unknown])

3
\t            1180 fib+0x20 (/tmp/prog)

     555555554190 (/tmp/prog)
     555555554194 (/tmp/prog)
";

    fn events(text: &str) -> Vec<PerfEvent> {
        StackOnlyReader::new(text.as_bytes(), "t")
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    }

    fn samples(events: &[PerfEvent]) -> Vec<(u64, Vec<u64>, u64)> {
        events
            .iter()
            .filter_map(|e| match e {
                PerfEvent::Sample(s) => Some((s.ip, s.callchain.clone(), s.count)),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn offsets_in_files_become_addresses() {
        let e = events(SCRIPT);
        assert_eq!(e.len() - samples(&e).len(), 2, "two MMAP events");
        assert_eq!(
            samples(&e),
            vec![
                (
                    0x5555_5555_417d,
                    vec![0x5555_5555_417d, 0x5555_5555_4169, 0x7f00_0002_724a, 0],
                    1
                ),
                (0x5555_5555_4180, vec![0x5555_5555_4180], 3),
                // Without call chain: one sample per line, absolute as printed.
                (0x5555_5555_4190, vec![], 1),
                (0x5555_5555_4194, vec![], 1),
            ]
        );
    }

    #[test]
    fn the_latest_mapping_of_a_file_is_used() {
        let text = "\
PERF_RECORD_MMAP2 7/7: [0x555555554000(0x1000) @ 0x1000 fe:00 1 0]: r-xp /tmp/prog
PERF_RECORD_MMAP2 8/8: [0x566666665000(0x1000) @ 0x1000 fe:00 1 0]: r-xp /tmp/prog
\t            117d (/tmp/prog)
\t            2000 (/tmp/prog)
\t            3000 (/tmp/other)
";
        assert_eq!(
            samples(&events(text)),
            vec![(
                0x5666_6666_517d,
                // Outside every mapping of the file, or of a file never mapped: as printed.
                vec![0x5666_6666_517d, 0x2000, 0x3000],
                1
            )]
        );
    }

    #[test]
    fn other_scripts_are_not_stack_only() {
        let err =
            StackOnlyReader::new(b"\t 10\n 0x1/0x2/P/-/-/0 0x3/0x4/P/-/-/0\n", "t").unwrap_err();
        assert_eq!(
            err.to_string(),
            "t: the perf script has samples with a branch stack (Hybrid), not stack-only samples"
        );
    }
}
