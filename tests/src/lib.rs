//! Helpers shared by the end-to-end tests: building the corpus and locating tools.
//!
//! * [`corpus`]: build `tests/programs/` once into `target/corpus/` and record each program
//!   once per test process with the software LBR recorder.
#![deny(missing_docs)]

pub mod corpus;
