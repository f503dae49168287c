//! The command line: one subcommand per job. Doc comments are the `--help` text.

use clap::{Parser, Subcommand};

/// pgo-agent turns samples (Intel LBR or AMD branch stacks, or cpu-clock call stacks) into
/// the sample profiles clang's `-fprofile-sample-use` reads, the way llvm-profgen does.
#[derive(Debug, Parser)]
#[command(name = "pgo-agent", version)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a program under the software LBR recorder (ptrace single-step) and write exact
    /// LBR + call-stack samples as perf.data, perf script text and ground-truth JSON.
    Record(crate::record::RecordArgs),
    /// Convert samples (perf script text, perf.data or an unsymbolized profile) into a
    /// sample profile, with llvm-profgen's flag spellings.
    Convert(crate::convert::ConvertArgs),
    /// Run the profiling daemon: sample every CPU (Intel LBR, AMD branch sampling, or
    /// cpu-clock), aggregate per binary build id, write the aggregates to the state dir.
    Run(crate::run::RunArgs),
    /// Fetch one build id's unsymbolized profile from many agents over HTTP, sum them, and
    /// write the sum or symbolize it with a local binary.
    Pull(crate::pull::PullArgs),
    /// Sum unsymbolized profiles already downloaded; write the sum or symbolize it with a
    /// local binary.
    Merge(crate::merge::MergeArgs),
    /// Aggregate raw MemProf heap profiles (clang -fmemory-profile) of one binary and write
    /// MemProf YAML for `llvm-profdata merge` / `clang -fmemory-profile-use`, or text.
    Heap(crate::heap::HeapArgs),
    /// Sample the allocations of a running process (`--pid`) or of a command (after `--`)
    /// with uprobes on malloc/calloc/realloc, by bytes (mean interval
    /// `--sample-interval-bytes`, default 512 KiB), and write a pprof heap profile
    /// (alloc_objects, alloc_space; unsampled estimates).
    HeapSample(crate::heap_sample::HeapSampleArgs),
    /// Check a sample profile against a binary (and the raw samples): stale checksums,
    /// dropped functions, flow consistency, density. Exit 3 when a check fails.
    Verify(crate::verify::VerifyArgs),
    /// ClickHouse fleet store: `clickhouse init` creates the tables the daemon's
    /// `[sink.clickhouse]` inserts into and `pull --clickhouse` reads.
    Clickhouse(crate::clickhouse_cmd::ClickHouseArgs),
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    /// The long help of `cmd` and of every subcommand under it, with their names.
    fn helps(cmd: &mut clap::Command, path: &str, out: &mut Vec<(String, String)>) {
        out.push((path.to_string(), cmd.render_long_help().to_string()));
        for sub in cmd.get_subcommands_mut() {
            let path = format!("{path} {}", sub.get_name());
            helps(sub, &path, out);
        }
    }

    #[test]
    fn help_has_no_rustdoc_syntax() {
        let mut all = Vec::new();
        helps(&mut Cli::command(), "pgo-agent", &mut all);
        assert!(all.len() > 10, "{} commands", all.len());
        for (path, help) in &all {
            // Intra-doc links (`[`name`]`, `[text](path)`) and Rust paths are rustdoc's, not
            // the user's.
            for bad in ["[`", "`]", "](", "crate::", "Self::"] {
                assert!(
                    !help.contains(bad),
                    "`{path} --help` shows rustdoc syntax {bad:?}:\n{help}"
                );
            }
        }
        let top = &all[0].1;
        assert!(top.starts_with("pgo-agent turns samples"), "{top}");
    }
}
