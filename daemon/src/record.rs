//! `pgo-agent record` (being written).

use std::process::ExitCode;

/// Arguments of `pgo-agent record`.
#[derive(Debug, clap::Args)]
pub struct RecordArgs {}

/// Runs `pgo-agent record`.
pub fn run(_args: RecordArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("record is not implemented yet")
}
