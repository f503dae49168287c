//! The `pgo-agent` command line as a library: [`run_cli`] parses arguments and runs a
//! subcommand, so the end-to-end tests drive exactly what users run. Every subcommand lives
//! in its own module and calls into the pipeline crates: `convert` maps its arguments into
//! [`profgen::ConvertOptions`] and calls [`profgen::convert`]; [`run`] strings the crates
//! together for the daemon.

pub mod atomic_file;
pub mod binary_loading;
pub mod cli;
pub mod clickhouse_cmd;
pub mod config;
pub mod convert;
pub mod debuginfod;
pub mod error_chain;
pub mod heap;
pub mod heap_sample;
pub mod logging;
pub mod merge;
pub mod notify;
pub mod pull;
pub mod record;
pub mod run;
pub mod signals;
pub mod sink;
pub mod verify;

use std::process::ExitCode;

use clap::Parser;

use crate::error_chain::ErrorChain;

/// Parses `argv` (including the program name) and runs the subcommand. Errors are printed
/// to stderr and turn into exit code 1; usage errors exit through clap (code 2).
pub fn run_cli(argv: Vec<String>) -> ExitCode {
    // Every command (the daemon beside the services it profiles, `convert` of a large
    // input) keeps its resident set near what it uses.
    collector::freed_memory::limit_resident_memory();
    let cli = match parse_args(argv) {
        Ok(cli) => cli,
        Err(ArgsError::Llvm(err)) => return fail(err),
        Err(ArgsError::Clap(err)) => {
            let _ = err.print();
            return if err.use_stderr() {
                ExitCode::from(2)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    execute(cli).unwrap_or_else(fail)
}

/// Why the command line was rejected.
#[derive(Debug)]
pub enum ArgsError {
    /// An llvm-profgen option `convert` does not implement.
    Llvm(anyhow::Error),
    /// clap's usage error (or a `--help`/`--version` request).
    Clap(clap::Error),
}

impl std::fmt::Display for ArgsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ArgsError::Llvm(e) => write!(f, "{}", ErrorChain(e.as_ref())),
            ArgsError::Clap(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for ArgsError {}

/// Parses `argv` (including the program name), accepting llvm-profgen's spellings for
/// `convert`.
pub fn parse_args(mut argv: Vec<String>) -> Result<cli::Cli, ArgsError> {
    if argv.get(1).map(String::as_str) == Some("convert") {
        let rest = convert::normalize_llvm_args(&argv[2..]).map_err(ArgsError::Llvm)?;
        argv.splice(2.., rest).for_each(drop);
    }
    cli::Cli::try_parse_from(argv).map_err(ArgsError::Clap)
}

/// Runs a parsed command line.
pub fn execute(cli: cli::Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        cli::Command::Record(args) => record::run(args),
        cli::Command::Convert(args) => convert::run(args),
        cli::Command::Run(args) => run::run(args),
        cli::Command::Pull(args) => pull::run(args),
        cli::Command::Merge(args) => merge::run(args),
        cli::Command::Heap(args) => heap::run(args),
        cli::Command::HeapSample(args) => heap_sample::run(args),
        cli::Command::Verify(args) => verify::run(args),
        cli::Command::Clickhouse(args) => clickhouse_cmd::run(args),
    }
}

fn fail(err: anyhow::Error) -> ExitCode {
    eprintln!("pgo-agent: error: {}", ErrorChain(err.as_ref()));
    ExitCode::from(1)
}
