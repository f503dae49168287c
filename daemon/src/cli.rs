//! The command line: one subcommand per job. Doc comments are the `--help` text.

use clap::{Parser, Subcommand};

/// pgo-agent turns hardware branch samples (Intel LBR + frame-pointer call stacks) into the
/// sample profiles clang's `-fprofile-sample-use` consumes, the way llvm-profgen does.
#[derive(Debug, Parser)]
#[command(name = "pgo-agent", version, about, long_about = None)]
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
    /// Convert LBR samples (perf script text, perf.data or an unsymbolized profile) into a
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
