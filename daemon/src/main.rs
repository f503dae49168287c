//! `pgo-agent`: the command-line entry point. Wiring only: every subcommand lives in its own
//! module and calls into the library crates.

mod cli;
mod convert;
mod record;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    let result = match cli.command {
        cli::Command::Record(args) => record::run(args),
        cli::Command::Convert(args) => convert::run(args),
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            eprintln!("pgo-agent: error: {err:#}");
            ExitCode::from(1)
        }
    }
}
