//! The sample profile model: FunctionSamples, line locations, context trie, summary.
