//! Tests that read and write files: recordings of the corpus, llvm-profgen conformance,
//! accuracy against the recorder's ground truth, bad input, `record`, `verify`. Each holds
//! [`e2e::support::machine_share`]: they run side by side, but never beside a test that
//! samples the host.
//!
//! One area: `cargo test -p e2e --release --test e2e -- offline::conformance::`.

mod accuracy;
mod bad_input;
mod conformance;
mod generate;
mod heap_spool;
mod memprof;
mod profgen_flags;
mod pull_merge;
mod record;
mod record_programs;
mod split_debug;
mod split_dwarf;
mod unsymbolized;
mod verify;
