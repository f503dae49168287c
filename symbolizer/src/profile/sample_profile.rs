//! [`SampleProfile`]: all function profiles of a binary plus the profile-wide flags the
//! writers need (LLVM's `SampleProfileMap` with `FunctionSamples::ProfileIsCS` etc.).

use std::collections::BTreeMap;

use super::context::SampleContext;
use super::function_samples::FunctionSamples;

/// Function-name prefixes whose profiles llvm-profgen drops (`FuncPrefixsToFilter`): such
/// compiler-generated initialisers exist in several versions that canonicalise to one
/// name, so their merged profile is ambiguous.
pub const AMBIGUOUS_PREFIXES: [&str; 2] = ["__cxx_global_var_init", "__tls_init"];

/// A set of top-level function profiles keyed by context.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct SampleProfile {
    /// Top-level profiles by context (a single-frame context for flat profiles).
    pub profiles: BTreeMap<SampleContext, FunctionSamples>,
    /// Flat context-sensitive profile (`ProfileIsCS`): bracketed contexts in text,
    /// CSNameTable in extbinary, context-less summary.
    pub is_cs: bool,
    /// Pseudo-probe based (`ProfileIsProbeBased`): `!CFGChecksum` lines, FuncMetadata.
    pub is_probe_based: bool,
    /// Flow-sensitive discriminators (`ProfileIsFS`).
    pub is_fs: bool,
    /// Pre-inlined (`ProfileIsPreInlined`): attributes are written in FuncMetadata.
    pub is_preinlined: bool,
}

impl SampleProfile {
    /// The top-level profile of `context`, created empty if missing.
    pub fn profile_mut(&mut self, context: &SampleContext) -> &mut FunctionSamples {
        if !self.profiles.contains_key(context) {
            self.profiles
                .insert(context.clone(), FunctionSamples::new(context.clone()));
        }
        self.profiles.get_mut(context).expect("inserted above")
    }

    /// Profiles in writing order (`sortFuncProfiles`): total samples descending, then
    /// context ascending.
    pub fn sorted_profiles(&self) -> Vec<&FunctionSamples> {
        let mut v: Vec<&FunctionSamples> = self.profiles.values().collect();
        v.sort_by(|a, b| {
            b.total
                .cmp(&a.total)
                .then_with(|| a.context.cmp(&b.context))
        });
        v
    }

    /// Drops profiles (top-level and inlined) of ambiguous compiler-generated functions
    /// (`ProfileGeneratorBase::filterAmbiguousProfile`).
    pub fn filter_ambiguous_profiles(&mut self) {
        fn is_ambiguous(name: &str) -> bool {
            AMBIGUOUS_PREFIXES.iter().any(|p| name.starts_with(p))
        }
        fn filter_callees(fs: &mut FunctionSamples) {
            for callees in fs.callsites.values_mut() {
                callees.retain(|name, _| !is_ambiguous(name));
                for c in callees.values_mut() {
                    filter_callees(c);
                }
            }
        }
        self.profiles.retain(|_, fs| !is_ambiguous(fs.name()));
        for fs in self.profiles.values_mut() {
            filter_callees(fs);
        }
    }

    /// Context-less profiles: every profile merged into one per leaf function name
    /// (`ProfileConverter::flattenProfile` for CS profiles,
    /// `SampleContextTracker::createContextLessProfileMap`).
    pub fn context_less(&self) -> BTreeMap<String, FunctionSamples> {
        let mut out: BTreeMap<String, FunctionSamples> = BTreeMap::new();
        for fs in self.profiles.values() {
            let name = fs.name().to_string();
            out.entry(name.clone())
                .or_insert_with(|| FunctionSamples::new(SampleContext::from_name(name)))
                .merge(fs);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::{ContextFrame, LineLocation};

    #[test]
    fn sorts_by_total_then_context() {
        let mut p = SampleProfile::default();
        for (n, t) in [("b", 5), ("a", 5), ("c", 9)] {
            p.profile_mut(&SampleContext::from_name(n)).total = t;
        }
        let names: Vec<&str> = p.sorted_profiles().iter().map(|f| f.name()).collect();
        assert_eq!(names, vec!["c", "a", "b"]);
    }

    #[test]
    fn filters_ambiguous_names_recursively() {
        let mut p = SampleProfile::default();
        p.profile_mut(&SampleContext::from_name("__cxx_global_var_init.1"));
        let main = p.profile_mut(&SampleContext::from_name("main"));
        main.callee_mut(LineLocation::new(1, 0), "__tls_init");
        main.callee_mut(LineLocation::new(1, 0), "foo");
        p.filter_ambiguous_profiles();
        assert_eq!(p.profiles.len(), 1);
        let callees =
            &p.profiles[&SampleContext::from_name("main")].callsites[&LineLocation::new(1, 0)];
        assert_eq!(callees.keys().collect::<Vec<_>>(), vec!["foo"]);
    }

    #[test]
    fn context_less_merges_by_leaf() {
        let mut p = SampleProfile {
            is_cs: true,
            ..SampleProfile::default()
        };
        for l in [1, 2] {
            let ctx = SampleContext::from_frames(vec![
                ContextFrame::new("main", LineLocation::new(l, 0)),
                ContextFrame::new("foo", LineLocation::default()),
            ]);
            let f = p.profile_mut(&ctx);
            f.total = 3;
            f.add_body_samples(LineLocation::new(1, 0), 3);
        }
        let flat = p.context_less();
        assert_eq!(flat.len(), 1);
        assert_eq!(flat["foo"].total, 6);
        assert_eq!(flat["foo"].samples_at(LineLocation::new(1, 0)), Some(6));
        assert_eq!(flat["foo"].context, SampleContext::from_name("foo"));
    }
}
