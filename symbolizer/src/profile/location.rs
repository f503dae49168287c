//! [`LineLocation`]: where a sample sits inside a function (line offset, discriminator).

use std::fmt;

/// A location inside a function: the line offset from the function's declaration line
/// (`(line − DW_AT_decl_line) & 0xffff`) or a pseudo-probe index, plus a discriminator.
///
/// Ordered by line offset, then discriminator, as LLVM's `LineLocation::operator<`: the
/// order body lines and call sites are written in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct LineLocation {
    /// Line offset (DWARF profiles) or probe index (probe profiles).
    pub line_offset: u32,
    /// Base (or FS) discriminator; probe discriminator for probe profiles.
    pub discriminator: u32,
}

impl LineLocation {
    /// A location from its two parts.
    pub fn new(line_offset: u32, discriminator: u32) -> LineLocation {
        LineLocation {
            line_offset,
            discriminator,
        }
    }
}

/// `LINE` or `LINE.DISC` (the discriminator only when non-zero), as `LineLocation::print`.
impl fmt::Display for LineLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.line_offset)?;
        if self.discriminator > 0 {
            write!(f, ".{}", self.discriminator)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prints_discriminator_only_when_set() {
        assert_eq!(LineLocation::new(3, 0).to_string(), "3");
        assert_eq!(LineLocation::new(3, 2).to_string(), "3.2");
        assert_eq!(LineLocation::new(65526, 0).to_string(), "65526");
    }

    #[test]
    fn orders_by_line_then_discriminator() {
        let mut v = vec![
            LineLocation::new(3, 2),
            LineLocation::new(2, 9),
            LineLocation::new(3, 0),
        ];
        v.sort();
        assert_eq!(
            v,
            vec![
                LineLocation::new(2, 9),
                LineLocation::new(3, 0),
                LineLocation::new(3, 2)
            ]
        );
    }
}
