//! `pgo-agent`: the command-line entry point. Wiring only: every subcommand lives in its own
//! module and calls into the library crates.

mod cli;
mod convert;
mod convert_pipeline;
mod progress;
mod record;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let mut argv: Vec<String> = std::env::args().collect();
    if argv.get(1).map(String::as_str) == Some("convert") {
        match convert::normalize_llvm_args(&argv[2..]) {
            Ok(rest) => argv.splice(2.., rest).for_each(drop),
            Err(err) => return fail(err),
        }
    }
    let cli = cli::Cli::parse_from(argv);
    let result = match cli.command {
        cli::Command::Record(args) => record::run(args),
        cli::Command::Convert(args) => convert::run(args),
    };
    result.unwrap_or_else(fail)
}

fn fail(err: anyhow::Error) -> ExitCode {
    eprintln!("pgo-agent: error: {err:#}");
    ExitCode::from(1)
}
