//! MemProf YAML: the text form of a heap profile that `llvm-profdata merge` (LLVM ≥ 21 layout;
//! LLVM 22 verified) turns into an indexed profile for `clang -fmemory-profile-use=`.
//! Schema: `llvm/include/llvm/ProfileData/MemProfYAML.h`; the leading `---` is required for
//! llvm-profdata to detect the format.
//!
//! Records are built the way LLVM's `RawMemProfReader::mapRawProfileToRecords` builds them
//! from a raw profile, so the indexed result matches what llvm-profdata would make of the raw
//! files themselves:
//! * an allocation context goes to the record of its leaf function and of every function it is
//!   inlined into, up to and including the first non-inlined frame;
//! * every other PC's inline chain (frames up to and including the first non-inline one) is a
//!   call site of each function on that chain (deduplicated per function).
//!
//! GUIDs are written in hex (LLVM rejects decimal ones); both `AllocSites` and `CallSites` are
//! always written (they are required before LLVM 22). A comment names each record's function.

use std::collections::BTreeMap;
use std::io::{self, Write};

use symbolizer::memprof::{HeapProfile, MemProfFrame};

#[derive(Default)]
struct Record<'a> {
    alloc_sites: Vec<(Vec<MemProfFrame>, &'a collector::memprof::MemInfoBlock)>,
    call_sites: Vec<Vec<MemProfFrame>>,
}

/// Splits a context (leaf first) into per-PC inline chains: each chain ends at the first frame
/// that is not inlined.
pub fn inline_chains(frames: &[MemProfFrame]) -> Vec<&[MemProfFrame]> {
    let mut out = Vec::new();
    let mut start = 0;
    for (i, f) in frames.iter().enumerate() {
        if !f.is_inline {
            out.push(&frames[start..=i]);
            start = i + 1;
        }
    }
    if start < frames.len() {
        out.push(&frames[start..]);
    }
    out
}

fn build_records(profile: &HeapProfile) -> BTreeMap<u64, Record<'_>> {
    let mut records: BTreeMap<u64, Record<'_>> = BTreeMap::new();
    for (frames, mib) in profile.contexts() {
        let chains = inline_chains(&frames);
        if let Some(first) = chains.first() {
            for f in *first {
                records
                    .entry(f.function)
                    .or_default()
                    .alloc_sites
                    .push((frames.clone(), mib));
            }
        }
        for (i, chain) in chains.iter().enumerate() {
            for (j, f) in chain.iter().enumerate() {
                if i == 0 && j == 0 {
                    continue;
                }
                let record = records.entry(f.function).or_default();
                if !record.call_sites.iter().any(|c| c.as_slice() == *chain) {
                    record.call_sites.push(chain.to_vec());
                }
            }
        }
    }
    records
}

fn write_frame(out: &mut impl Write, indent: &str, f: &MemProfFrame) -> io::Result<()> {
    writeln!(
        out,
        "{indent}- {{ Function: {:#018x}, LineOffset: {}, Column: {}, IsInlineFrame: {} }}",
        f.function, f.line_offset, f.column, f.is_inline
    )
}

/// Writes `profile` as MemProf YAML.
pub fn write_memprof_yaml(profile: &HeapProfile, out: &mut impl Write) -> io::Result<()> {
    writeln!(out, "---")?;
    let records = build_records(profile);
    if records.is_empty() {
        writeln!(out, "HeapProfileRecords: []")?;
        return writeln!(out, "...");
    }
    writeln!(out, "HeapProfileRecords:")?;
    for (guid, record) in &records {
        if let Some(name) = profile.function_name(*guid) {
            writeln!(out, "  # {name}")?;
        }
        writeln!(out, "  - GUID: {guid:#018x}")?;
        if record.alloc_sites.is_empty() {
            writeln!(out, "    AllocSites: []")?;
        } else {
            writeln!(out, "    AllocSites:")?;
            for (frames, mib) in &record.alloc_sites {
                writeln!(out, "      - Callstack:")?;
                for f in frames {
                    write_frame(out, "          ", f)?;
                }
                writeln!(out, "        MemInfoBlock:")?;
                for (name, value) in mib.fields() {
                    writeln!(out, "          {name}: {value}")?;
                }
            }
        }
        if record.call_sites.is_empty() {
            writeln!(out, "    CallSites: []")?;
        } else {
            writeln!(out, "    CallSites:")?;
            for chain in &record.call_sites {
                writeln!(out, "      - Frames:")?;
                for f in chain {
                    write_frame(out, "          ", f)?;
                }
            }
        }
    }
    writeln!(out, "...")
}

/// [`write_memprof_yaml`] into a string.
pub fn memprof_yaml_string(profile: &HeapProfile) -> String {
    let mut buf = Vec::new();
    // Writing to a Vec cannot fail.
    let _ = write_memprof_yaml(profile, &mut buf);
    String::from_utf8_lossy(&buf).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use collector::memprof::MemInfoBlock;
    use symbolizer::memprof::{memprof_guid, SymbolizedContext, SymbolizedProfile};

    fn f(name: &str, line_offset: u32, column: u32, is_inline: bool) -> MemProfFrame {
        MemProfFrame {
            function: memprof_guid(name),
            line_offset,
            column,
            is_inline,
        }
    }

    #[test]
    fn records_follow_raw_reader_rules() {
        let mut p = HeapProfile::new(None);
        // make_buf inlined into cold_path at one PC, then main's call.
        p.add(SymbolizedProfile {
            contexts: vec![SymbolizedContext {
                frames: vec![
                    f("_Z8make_bufm", 1, 10, true),
                    f("_Z9cold_pathv", 1, 10, false),
                    f("main", 8, 15, false),
                ],
                mib: MemInfoBlock {
                    alloc_count: 2,
                    total_size: 8192,
                    ..Default::default()
                },
            }],
            names: [(memprof_guid("main"), "main".to_string())].into(),
            dropped_contexts: 0,
        });
        let yaml = memprof_yaml_string(&p);
        let expected_main = "  # main
  - GUID: 0xdb956436e78dd5fa
    AllocSites: []
    CallSites:
      - Frames:
          - { Function: 0xdb956436e78dd5fa, LineOffset: 8, Column: 15, IsInlineFrame: false }
";
        assert!(yaml.starts_with("---\nHeapProfileRecords:\n"), "{yaml}");
        assert!(yaml.contains(expected_main), "{yaml}");
        // make_buf (leaf) and cold_path (first non-inline) both get the allocation site;
        // cold_path also gets the chain as a call site.
        assert_eq!(yaml.matches("      - Callstack:").count(), 2, "{yaml}");
        assert_eq!(yaml.matches("          AllocCount: 2").count(), 2);
        assert_eq!(yaml.matches("      - Frames:").count(), 2, "{yaml}");
        assert!(yaml.contains("  - GUID: 0x6e9c63fd26a12f0a\n    AllocSites:\n"));
        assert!(yaml.ends_with("...\n"));
    }

    #[test]
    fn chains_split_at_non_inline_frames() {
        let frames = [f("a", 0, 0, true), f("b", 0, 0, false), f("c", 0, 0, false)];
        let chains = inline_chains(&frames);
        assert_eq!(chains.len(), 2);
        assert_eq!(chains[0].len(), 2);
        assert_eq!(chains[1][0].function, memprof_guid("c"));
    }
}
