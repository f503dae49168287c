//! The `convert` pipeline: input reader → unwinder → symbolizer → format writer.

use crate::convert::ConvertArgs;

/// Converts the input named in `args` into the requested output.
pub fn convert(_args: &ConvertArgs) -> anyhow::Result<()> {
    anyhow::bail!("the conversion pipeline is being wired")
}
