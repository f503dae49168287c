//! [`SampleContext`]: the calling context a profile belongs to (`main:1 @ foo:3 @ bar`).

use std::cmp::Ordering;
use std::fmt;

use super::location::LineLocation;

/// Attribute bit: the context's leaf was inlined in the profiled binary
/// (`ContextWasInlined`).
pub const CONTEXT_WAS_INLINED: u32 = 1;
/// Attribute bit: the pre-inliner decided the context should be inlined
/// (`ContextShouldBeInlined`).
pub const CONTEXT_SHOULD_BE_INLINED: u32 = 2;
/// Attribute bit: the profile was also merged into its base profile
/// (`ContextDuplicatedIntoBase`); the summary does not count it twice.
pub const CONTEXT_DUPLICATED_INTO_BASE: u32 = 4;

/// One frame of a context: a function and the location of the call it makes to the next
/// frame (0:0 for the leaf).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct ContextFrame {
    /// Function name (canonical linkage name or probe-descriptor name).
    pub func: String,
    /// Call-site location in `func`; 0:0 for the leaf frame.
    pub location: LineLocation,
}

impl ContextFrame {
    /// A frame from its parts.
    pub fn new(func: impl Into<String>, location: LineLocation) -> ContextFrame {
        ContextFrame {
            func: func.into(),
            location,
        }
    }
}

/// The context of a [`super::FunctionSamples`]: outermost caller first, leaf last.
///
/// A flat (non-CS) profile and an inlined callee have a single frame. Ordered like
/// LLVM's `SampleContext::operator<`: frame by frame (name bytes, then location), a
/// shorter context first when one is a prefix of the other. For single frames this is
/// the name order.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct SampleContext {
    /// The frames, outermost first; never empty for a profile in a map.
    pub frames: Vec<ContextFrame>,
}

impl SampleContext {
    /// The context of a flat profile or inlined callee: just a name.
    pub fn from_name(name: impl Into<String>) -> SampleContext {
        SampleContext {
            frames: vec![ContextFrame::new(name, LineLocation::default())],
        }
    }

    /// A full context from its frames (leaf location should be 0:0).
    pub fn from_frames(frames: Vec<ContextFrame>) -> SampleContext {
        SampleContext { frames }
    }

    /// The leaf function's name ("" for an empty context).
    pub fn func(&self) -> &str {
        self.frames.last().map(|f| f.func.as_str()).unwrap_or("")
    }
}

impl Ord for SampleContext {
    fn cmp(&self, other: &SampleContext) -> Ordering {
        for (a, b) in self.frames.iter().zip(other.frames.iter()) {
            let by_name = a.func.as_bytes().cmp(b.func.as_bytes());
            if by_name != Ordering::Equal {
                return by_name;
            }
            if a.location != b.location {
                return a.location.cmp(&b.location);
            }
        }
        self.frames.len().cmp(&other.frames.len())
    }
}

impl PartialOrd for SampleContext {
    fn partial_cmp(&self, other: &SampleContext) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// `main:1 @ foo:3.2 @ bar` — every frame but the leaf with its location, as
/// `SampleContext::getContextString` (the text inside the brackets of a CS header).
impl fmt::Display for SampleContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let last = self.frames.len().saturating_sub(1);
        for (i, frame) in self.frames.iter().enumerate() {
            if i > 0 {
                f.write_str(" @ ")?;
            }
            f.write_str(&frame.func)?;
            if i != last {
                write!(f, ":{}", frame.location)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx(frames: &[(&str, u32, u32)]) -> SampleContext {
        SampleContext::from_frames(
            frames
                .iter()
                .map(|(n, l, d)| ContextFrame::new(*n, LineLocation::new(*l, *d)))
                .collect(),
        )
    }

    #[test]
    fn prints_like_llvm_context_strings() {
        let c = ctx(&[("main", 1, 0), ("foo", 3, 2), ("bar", 0, 0)]);
        assert_eq!(c.to_string(), "main:1 @ foo:3.2 @ bar");
        assert_eq!(SampleContext::from_name("foo").to_string(), "foo");
    }

    #[test]
    fn orders_frame_wise_then_shorter_first() {
        let a = ctx(&[("main", 1, 0), ("foo", 0, 0)]);
        let b = ctx(&[("main", 1, 0), ("foo", 3, 0), ("bar", 0, 0)]);
        let c = ctx(&[("main", 2, 0), ("foo", 0, 0)]);
        let d = ctx(&[("main", 0, 0)]);
        // Same names: location decides (foo 0:0 < foo 3:0), main:1 < main:2, prefix first.
        assert!(a < b);
        assert!(b < c);
        assert!(d < a);
        // Names compare as bytes: "Z" < "a".
        assert!(SampleContext::from_name("Zed") < SampleContext::from_name("abc"));
    }
}
