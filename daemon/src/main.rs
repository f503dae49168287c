//! `pgo-agent`: see [`daemon::run_cli`].

use std::process::ExitCode;

fn main() -> ExitCode {
    daemon::run_cli(std::env::args().collect())
}
