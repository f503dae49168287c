//! Pseudo probes: the `.pseudo_probe_desc` function descriptors and the `.pseudo_probe`
//! inline forest of probes (LLVM 19 `MCPseudoProbeDecoder`). A binary's probes are checked
//! at load and decoded a function at a time as queries reach them ([`ProbeStore`]);
//! [`ProbeSection`] decodes a whole section at once.

pub mod desc;
pub mod inline_tree;
pub mod reader;
pub mod section;
pub mod store;

pub use desc::ProbeDesc;
pub use inline_tree::{InlineNodeId, InlineTreeNode, ProbeInlineTree};
pub use reader::DecodeError;
pub use section::{ProbeKind, ProbeSection, PseudoProbe};
pub use store::ProbeStore;

/// One frame of a probe's inline context: a function and a probe index in it (for callers,
/// the call-site probe; for the leaf, the probe itself).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProbeFrame<'a> {
    /// Function name from `.pseudo_probe_desc` (empty if the GUID has no descriptor).
    pub func_name: &'a str,
    /// Probe index.
    pub probe_index: u32,
}
