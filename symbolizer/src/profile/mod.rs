//! The sample profile model: FunctionSamples, line locations, contexts, context trie,
//! summary — LLVM's `llvm/ProfileData/SampleProf.h` model as llvm-profgen 19 fills it.

pub mod context;
pub mod context_trie;
pub mod function_samples;
pub mod location;
pub mod sample_profile;
pub mod summary;

pub use context::{
    ContextFrame, SampleContext, CONTEXT_DUPLICATED_INTO_BASE, CONTEXT_SHOULD_BE_INLINED,
    CONTEXT_WAS_INLINED,
};
pub use context_trie::{ContextTrie, TrieNodeId};
pub use function_samples::{BodySample, CalleeMap, FunctionSamples};
pub use location::LineLocation;
pub use sample_profile::SampleProfile;
pub use summary::{ProfileSummary, SummaryEntry, ThresholdRule, DEFAULT_CUTOFFS};
