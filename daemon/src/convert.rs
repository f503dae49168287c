//! `pgo-agent convert` (being written).

use std::process::ExitCode;

/// Arguments of `pgo-agent convert`.
#[derive(Debug, clap::Args)]
pub struct ConvertArgs {}

/// Runs `pgo-agent convert`.
pub fn run(_args: ConvertArgs) -> anyhow::Result<ExitCode> {
    anyhow::bail!("convert is not implemented yet")
}
