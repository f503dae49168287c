//! End-to-end tests that read and write files: recordings of the corpus, llvm-profgen
//! conformance, accuracy against the recorder's ground truth, bad input, `record`, `verify`.
//! One test binary, one module per area, so the corpus is built and each corpus program
//! recorded once per run (`e2e::corpus` caches both per process).
//!
//! One area: `cargo test -p e2e --release --test offline -- conformance::`.

mod accuracy;
mod bad_input;
mod conformance;
mod generate;
mod heap_spool;
mod memprof;
mod profgen_flags;
mod pull_merge;
mod record;
mod split_debug;
mod split_dwarf;
mod unsymbolized;
mod verify;

/// Not a test of its own: `pgo-agent` when this executable is re-executed by
/// [`e2e::support::cli_in_child`] (a no-op otherwise).
#[test]
fn cli_process() {
    e2e::support::cli_child();
}
