//! Helpers shared by the end-to-end tests: building the corpus and locating tools.
//!
//! * [`corpus`]: build `tests/programs/` once into `target/corpus/` and record each program
//!   once per test process with the software LBR recorder.
//! * [`support`]: ports, scratch directories, polling and the `spin` workload for the tests
//!   that run the daemon or a server.
#![deny(missing_docs)]

pub mod corpus;
pub mod support;
