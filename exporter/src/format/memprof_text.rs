//! Human-readable heap profile listing (`pgo-agent heap --format text`): one block per
//! allocation context with its averages, full context id and per-frame stack ids (the values
//! clang prints in `!memprof` metadata).

use std::io::{self, Write};

use symbolizer::memprof::{full_stack_id, HeapProfile};

/// Writes `profile` as text, contexts by decreasing total size.
pub fn write_memprof_text(profile: &HeapProfile, out: &mut impl Write) -> io::Result<()> {
    let stats = profile.call_stack_stats();
    writeln!(
        out,
        "heap profile: build id {}, {} contexts from {} raw profiles ({} dropped unsymbolized)",
        profile
            .build_id()
            .map_or_else(|| "unknown".to_string(), |b| b.to_hex()),
        profile.len(),
        profile.profiles(),
        profile.dropped_contexts()
    )?;
    writeln!(
        out,
        "call stacks: {} frames flat, {} unique frames, {} trie nodes, dedup ratio {:.2}",
        stats.total_frames,
        stats.unique_frames,
        stats.trie_nodes,
        stats.dedup_ratio()
    )?;
    let mut contexts: Vec<_> = profile.contexts().collect();
    contexts.sort_by_key(|c| std::cmp::Reverse(c.1.total_size));
    for (frames, mib) in contexts {
        let n = u64::from(mib.alloc_count.max(1));
        writeln!(
            out,
            "context {:#018x}: allocs {} bytes {} avg size {} avg lifetime {} ms \
             avg lifetime access density {:.2}",
            full_stack_id(&frames),
            mib.alloc_count,
            mib.total_size,
            mib.total_size / n,
            mib.total_lifetime / n,
            mib.total_lifetime_access_density as f64 / n as f64 / 100.0
        )?;
        for f in &frames {
            writeln!(
                out,
                "    {}:{}:{}{} stack id {}",
                profile
                    .function_name(f.function)
                    .map_or_else(|| format!("{:#018x}", f.function), str::to_string),
                f.line_offset,
                f.column,
                if f.is_inline { " (inlined)" } else { "" },
                f.stack_id() as i64
            )?;
        }
    }
    Ok(())
}
