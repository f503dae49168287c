//! Helpers shared by the end-to-end tests: building the corpus, running the daemon and the
//! LLVM oracles, locating tools.
//!
//! * [`corpus`]: build `tests/programs/` once into `target/corpus/` and record each program
//!   once per test process with the software LBR recorder.
//! * [`support`]: ports, scratch directories, polling, privilege checks, the `spin`
//!   workload, running `pgo-agent` and the oracles (canonical profiles).
//! * [`agent`]: a daemon started from a config, in a thread or a child process.
//! * [`http`]: GET with status and headers, and the exporter's router state.
#![deny(missing_docs)]

pub mod agent;
pub mod corpus;
pub mod http;
pub mod support;

/// Two `#[test]`s per named corpus program, one per build, each calling `check(name,
/// variant)`: `corpus_tests!(check; loop_count, recursion)` defines the tests
/// `loop_count::probe`, `loop_count::lines`, `recursion::probe` and `recursion::lines`.
#[macro_export]
macro_rules! corpus_tests {
    ($check:ident; $($name:ident),* $(,)?) => {
        $(
            mod $name {
                #[test]
                fn probe() {
                    super::$check(stringify!($name), $crate::corpus::Variant::Probe);
                }

                #[test]
                fn lines() {
                    super::$check(stringify!($name), $crate::corpus::Variant::Lines);
                }
            }
        )*
    };
}
