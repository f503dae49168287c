//! [`FunctionSamples`]: the profile of one function in one context (LLVM's
//! `FunctionSamples`), with body samples, call targets and inlined callees.

use std::collections::BTreeMap;

use super::context::SampleContext;
use super::location::LineLocation;

/// Samples at one body location: the count and the call targets seen there.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct BodySample {
    /// Sample count of the location.
    pub count: u64,
    /// Callee name → call count (direct and indirect calls made at the location).
    pub call_targets: BTreeMap<String, u64>,
}

impl BodySample {
    /// Sum of all call-target counts (`SampleRecord::getCallTargetSum`).
    pub fn call_target_sum(&self) -> u64 {
        self.call_targets
            .values()
            .fold(0u64, |a, c| a.saturating_add(*c))
    }

    /// Call targets by count descending, then name ascending (`SortCallTargets`), the
    /// order both writers use.
    pub fn sorted_call_targets(&self) -> Vec<(&str, u64)> {
        let mut v: Vec<(&str, u64)> = self
            .call_targets
            .iter()
            .map(|(n, c)| (n.as_str(), *c))
            .collect();
        v.sort_by(|a, b| {
            b.1.cmp(&a.1)
                .then_with(|| a.0.as_bytes().cmp(b.0.as_bytes()))
        });
        v
    }

    /// Adds `other` into `self` (`SampleRecord::merge`).
    pub fn merge(&mut self, other: &BodySample) {
        self.count = self.count.saturating_add(other.count);
        for (name, c) in &other.call_targets {
            let e = self.call_targets.entry(name.clone()).or_default();
            *e = e.saturating_add(*c);
        }
    }
}

/// Inlined callees at one call site, by callee name.
pub type CalleeMap = BTreeMap<String, FunctionSamples>;

/// The profile of a function in a context. Counts add with saturation, as LLVM's
/// `SaturatingMultiplyAdd` does.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct FunctionSamples {
    /// The context (a single frame for flat profiles and inlined callees).
    pub context: SampleContext,
    /// Total samples of the function (and its inlinees) in this context.
    pub total: u64,
    /// Samples on entry (calls into the function); written only at top level in text.
    pub head: u64,
    /// Body samples per location.
    pub body: BTreeMap<LineLocation, BodySample>,
    /// Inlined callees per call-site location.
    pub callsites: BTreeMap<LineLocation, CalleeMap>,
    /// CFG checksum (`!CFGChecksum`, probe profiles), 0 when unknown.
    pub checksum: u64,
    /// Context attributes (`!Attributes`), bits [`super::CONTEXT_WAS_INLINED`] etc.
    pub attributes: u32,
}

impl FunctionSamples {
    /// An empty profile for `context`.
    pub fn new(context: SampleContext) -> FunctionSamples {
        FunctionSamples {
            context,
            ..FunctionSamples::default()
        }
    }

    /// The function's name (the leaf of the context).
    pub fn name(&self) -> &str {
        self.context.func()
    }

    /// `total += n`.
    pub fn add_total_samples(&mut self, n: u64) {
        self.total = self.total.saturating_add(n);
    }

    /// `head += n`.
    pub fn add_head_samples(&mut self, n: u64) {
        self.head = self.head.saturating_add(n);
    }

    /// Adds `n` to the body sample at `loc`, creating it (also for `n == 0`: an explicit
    /// zero means "not executed", an absent line means "unknown").
    pub fn add_body_samples(&mut self, loc: LineLocation, n: u64) {
        let e = self.body.entry(loc).or_default();
        e.count = e.count.saturating_add(n);
    }

    /// Adds `n` calls to `callee` at `loc` (creating the body entry with count 0).
    pub fn add_called_target_samples(&mut self, loc: LineLocation, callee: &str, n: u64) {
        let e = self.body.entry(loc).or_default();
        match e.call_targets.get_mut(callee) {
            Some(t) => *t = t.saturating_add(n),
            None => {
                e.call_targets.insert(callee.to_string(), n);
            }
        }
    }

    /// The body count at `loc`, if the location has a sample.
    pub fn samples_at(&self, loc: LineLocation) -> Option<u64> {
        self.body.get(&loc).map(|b| b.count)
    }

    /// The inlined callee `name` at `loc`, created empty (context = `name`) if missing.
    pub fn callee_mut(&mut self, loc: LineLocation, name: &str) -> &mut FunctionSamples {
        let callees = self.callsites.entry(loc).or_default();
        if !callees.contains_key(name) {
            callees.insert(
                name.to_string(),
                FunctionSamples::new(SampleContext::from_name(name)),
            );
        }
        callees.get_mut(name).expect("inserted above")
    }

    /// Raises every body count of this profile to at least the sum of its call targets
    /// (`FunctionSamples::updateCallsiteSamples`): some calls leave the binary and are not
    /// in the range counts. As in LLVM 19, the inlined callees' profiles are left as they
    /// are (the update does not walk the callsite samples).
    pub fn update_callsite_samples(&mut self) {
        for b in self.body.values_mut() {
            let sum = b.call_target_sum();
            if sum > b.count {
                b.count = sum;
            }
        }
    }

    /// `total = Σ body + Σ callee totals`, recursively (`--update-total-samples`).
    pub fn update_total_samples(&mut self) {
        let mut total = 0u64;
        for b in self.body.values() {
            total = total.saturating_add(b.count);
        }
        for callees in self.callsites.values_mut() {
            for callee in callees.values_mut() {
                callee.update_total_samples();
                total = total.saturating_add(callee.total);
            }
        }
        self.total = total;
    }

    /// Estimated entry count when no head samples exist (`getHeadSamplesEstimate`): the
    /// head samples for a CS profile that has them, else the first body sample or the
    /// first call site's callees (whichever location is smaller), at least 1 when
    /// total > 0.
    pub fn head_samples_estimate(&self, profile_is_cs: bool) -> u64 {
        if profile_is_cs && self.head > 0 {
            return self.head;
        }
        let first_body = self.body.iter().next();
        let first_site = self.callsites.iter().next();
        let mut count = 0u64;
        match (first_body, first_site) {
            (Some((bl, b)), Some((sl, _))) if bl < sl => count = b.count,
            (Some((_, b)), None) => count = b.count,
            (_, Some((_, callees))) => {
                for c in callees.values() {
                    count = count.saturating_add(c.head_samples_estimate(profile_is_cs));
                }
            }
            (None, None) => {}
        }
        if count > 0 {
            count
        } else {
            u64::from(self.total > 0)
        }
    }

    /// Merges `other` into `self` (`FunctionSamples::merge` with weight 1). Like LLVM,
    /// profiles with different non-zero checksums are not merged (returns false).
    pub fn merge(&mut self, other: &FunctionSamples) -> bool {
        if self.context.frames.is_empty() {
            // LLVM copies the whole `SampleContext`, attributes included.
            self.context = other.context.clone();
            self.attributes = other.attributes;
        }
        if self.checksum == 0 {
            self.checksum = other.checksum;
        } else if self.checksum != other.checksum {
            return false;
        }
        self.add_total_samples(other.total);
        self.add_head_samples(other.head);
        for (loc, b) in &other.body {
            self.body.entry(*loc).or_default().merge(b);
        }
        for (loc, callees) in &other.callsites {
            let mine = self.callsites.entry(*loc).or_default();
            for (name, callee) in callees {
                mine.entry(name.clone())
                    .or_insert_with(|| FunctionSamples::new(SampleContext::default()))
                    .merge(callee);
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loc(l: u32, d: u32) -> LineLocation {
        LineLocation::new(l, d)
    }

    #[test]
    fn call_targets_sort_by_count_then_name() {
        let mut b = BodySample::default();
        b.call_targets.insert("zed".into(), 5);
        b.call_targets.insert("bar".into(), 3);
        b.call_targets.insert("abc".into(), 5);
        assert_eq!(
            b.sorted_call_targets(),
            vec![("abc", 5), ("zed", 5), ("bar", 3)]
        );
        assert_eq!(b.call_target_sum(), 13);
    }

    #[test]
    fn callsite_update_raises_body_to_target_sum() {
        let mut f = FunctionSamples::new(SampleContext::from_name("main"));
        f.add_body_samples(loc(2, 0), 4);
        f.add_called_target_samples(loc(2, 0), "foo", 3);
        f.add_called_target_samples(loc(3, 0), "foo", 7);
        let inlined = f.callee_mut(loc(5, 0), "bar");
        inlined.add_body_samples(loc(1, 0), 2);
        inlined.add_called_target_samples(loc(1, 0), "baz", 9);
        f.update_callsite_samples();
        assert_eq!(f.samples_at(loc(2, 0)), Some(4));
        assert_eq!(f.samples_at(loc(3, 0)), Some(7));
        // The inlined callee's body is not raised (LLVM 19 does not walk callsites).
        assert_eq!(
            f.callee_mut(loc(5, 0), "bar").samples_at(loc(1, 0)),
            Some(2)
        );
    }

    #[test]
    fn head_estimate_uses_smaller_location() {
        let mut f = FunctionSamples::new(SampleContext::from_name("f"));
        f.total = 10;
        f.add_body_samples(loc(3, 0), 6);
        f.callee_mut(loc(1, 0), "g").add_body_samples(loc(0, 0), 4);
        // The call site at line 1 comes first; g has total 0 and body 4 → estimate 4.
        assert_eq!(f.head_samples_estimate(true), 4);
        let mut h = FunctionSamples::new(SampleContext::from_name("h"));
        h.total = 3;
        h.add_body_samples(loc(1, 0), 0);
        assert_eq!(h.head_samples_estimate(true), 1);
        h.head = 9;
        assert_eq!(h.head_samples_estimate(true), 9);
        assert_eq!(h.head_samples_estimate(false), 1);
    }

    #[test]
    fn merge_sums_and_refuses_checksum_mismatch() {
        let mut a = FunctionSamples::new(SampleContext::from_name("f"));
        a.checksum = 7;
        a.add_body_samples(loc(1, 0), 2);
        let mut b = a.clone();
        b.add_called_target_samples(loc(1, 0), "g", 1);
        b.head = 3;
        b.total = 5;
        assert!(a.merge(&b));
        assert_eq!(a.samples_at(loc(1, 0)), Some(4));
        assert_eq!(a.body[&loc(1, 0)].call_targets["g"], 1);
        assert_eq!((a.head, a.total), (3, 5));
        b.checksum = 8;
        assert!(!a.merge(&b));
        assert_eq!(a.total, 5);
    }
}
