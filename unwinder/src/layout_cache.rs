//! [`LayoutCache`]: the [`CodeLayout`] answers the unwinder asks again and again.
//!
//! Every LBR entry of every sample asks whether its source is a call or a return and
//! whether the range before it is a valid fall-through, and each return which call
//! precedes its target, each a search in the binary's instruction tables; a program takes
//! few distinct branches, so the same questions come back in sample after sample. Line-context unwinding also walks each range back one
//! instruction at a time ([`CodeLayout::previous_instruction`] and
//! [`CodeLayout::inline_context_equal`] of each instruction and the one before it), over
//! the same hot ranges again and again. Direct-mapped tables keyed by the address (or the
//! pair of addresses) keep the last answer per slot: a hit is a compare, a miss asks the
//! layout.

use crate::CodeLayout;

/// log2 of the slots of each table.
const SLOT_BITS: u32 = 12;

/// Sentinel for an empty slot (no instruction lives at the top of the address space).
const EMPTY: u64 = u64::MAX;

#[derive(Clone, Copy)]
struct Branch {
    source: u64,
    call: bool,
    ret: bool,
}

#[derive(Clone, Copy)]
struct Range {
    start: u64,
    end: u64,
    valid: bool,
}

/// An instruction (or call) found before an address.
#[derive(Clone, Copy)]
struct Before {
    addr: u64,
    before: Option<u64>,
}

/// A [`CodeLayout`] with its answers about branch sources, ranges, previous instructions,
/// calls before return addresses and inline contexts cached.
pub struct LayoutCache<'a> {
    layout: &'a dyn CodeLayout,
    tables: LayoutTables,
}

/// The tables of a [`LayoutCache`], apart from its layout: what an owner of the layout
/// keeps between the caches it makes over it ([`LayoutCache::with_tables`]).
pub struct LayoutTables {
    /// The layout the answers are of (its address), `None` while empty.
    layout: Option<usize>,
    branches: Box<[Branch]>,
    ranges: Box<[Range]>,
    previous: Box<[Before]>,
    /// [`CodeLayout::call_before_return_address`] by return address.
    calls: Box<[Before]>,
    /// [`CodeLayout::inline_context_equal`] by address pair (`valid` holds the answer).
    inline: Box<[Range]>,
}

#[inline]
fn slot(a: u64, b: u64) -> usize {
    let h = (a ^ b.rotate_left(29)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    (h >> (64 - SLOT_BITS)) as usize
}

/// The answer `table` keeps for `addr`, asked of `ask` when its slot holds another's.
#[inline]
fn before_in(table: &mut [Before], addr: u64, ask: impl FnOnce(u64) -> Option<u64>) -> Option<u64> {
    let s = &mut table[slot(addr, 0)];
    if s.addr != addr || addr == EMPTY {
        *s = Before {
            addr,
            before: ask(addr),
        };
    }
    s.before
}

/// The address of `layout`: what tells two layouts apart.
fn identity(layout: &dyn CodeLayout) -> usize {
    (layout as *const dyn CodeLayout).cast::<()>() as usize
}

impl Default for LayoutTables {
    fn default() -> Self {
        LayoutTables::new()
    }
}

impl LayoutTables {
    /// Empty tables.
    pub fn new() -> LayoutTables {
        LayoutTables {
            layout: None,
            branches: vec![
                Branch {
                    source: EMPTY,
                    call: false,
                    ret: false,
                };
                1 << SLOT_BITS
            ]
            .into_boxed_slice(),
            ranges: vec![
                Range {
                    start: EMPTY,
                    end: EMPTY,
                    valid: false,
                };
                1 << SLOT_BITS
            ]
            .into_boxed_slice(),
            previous: vec![
                Before {
                    addr: EMPTY,
                    before: None,
                };
                1 << SLOT_BITS
            ]
            .into_boxed_slice(),
            calls: vec![
                Before {
                    addr: EMPTY,
                    before: None,
                };
                1 << SLOT_BITS
            ]
            .into_boxed_slice(),
            inline: vec![
                Range {
                    start: EMPTY,
                    end: EMPTY,
                    valid: false,
                };
                1 << SLOT_BITS
            ]
            .into_boxed_slice(),
        }
    }

    /// Forgets every answer.
    fn clear(&mut self) {
        *self = LayoutTables::new();
    }
}

impl<'a> LayoutCache<'a> {
    /// An empty cache over `layout`.
    pub fn new(layout: &'a dyn CodeLayout) -> LayoutCache<'a> {
        LayoutCache::with_tables(layout, LayoutTables::new())
    }

    /// A cache over `layout` with `tables`: their answers are kept when they are of this
    /// layout (a layout answers the same questions the same way all its life), forgotten
    /// otherwise.
    pub fn with_tables(layout: &'a dyn CodeLayout, mut tables: LayoutTables) -> LayoutCache<'a> {
        let id = identity(layout);
        if tables.layout.is_some_and(|l| l != id) {
            tables.clear();
        }
        tables.layout = Some(id);
        LayoutCache { layout, tables }
    }

    /// The tables, for a later [`LayoutCache::with_tables`] over the same layout.
    pub fn into_tables(self) -> LayoutTables {
        self.tables
    }

    /// The layout itself, for the questions not cached.
    pub fn layout(&self) -> &'a dyn CodeLayout {
        self.layout
    }

    #[inline]
    fn branch(&mut self, source: u64) -> Branch {
        let s = &mut self.tables.branches[slot(source, 0)];
        if s.source != source || source == EMPTY {
            *s = Branch {
                source,
                call: self.layout.is_call(source),
                ret: self.layout.is_return(source),
            };
        }
        *s
    }

    /// Whether the instruction at `addr` is a call and whether it is a return
    /// ([`CodeLayout::is_call`], [`CodeLayout::is_return`]): one slot for both.
    #[inline]
    pub fn call_or_return(&mut self, addr: u64) -> (bool, bool) {
        let b = self.branch(addr);
        (b.call, b.ret)
    }

    /// [`CodeLayout::previous_instruction`].
    #[inline]
    pub fn previous_instruction(&mut self, addr: u64) -> Option<u64> {
        let layout = self.layout;
        before_in(&mut self.tables.previous, addr, |a| {
            layout.previous_instruction(a)
        })
    }

    /// [`CodeLayout::call_before_return_address`].
    #[inline]
    pub fn call_before_return_address(&mut self, addr: u64) -> Option<u64> {
        let layout = self.layout;
        before_in(&mut self.tables.calls, addr, |a| {
            layout.call_before_return_address(a)
        })
    }

    /// [`CodeLayout::inline_context_equal`].
    #[inline]
    pub fn inline_context_equal(&mut self, a: u64, b: u64) -> bool {
        let s = &mut self.tables.inline[slot(a, b)];
        if s.start != a || s.end != b || a == EMPTY {
            *s = Range {
                start: a,
                end: b,
                valid: self.layout.inline_context_equal(a, b),
            };
        }
        s.valid
    }

    /// [`CodeLayout::is_valid_fall_through_range`].
    #[inline]
    pub fn is_valid_fall_through_range(&mut self, start: u64, end: u64) -> bool {
        let s = &mut self.tables.ranges[slot(start, end)];
        if s.start != start || s.end != end || start == EMPTY {
            *s = Range {
                start,
                end,
                valid: self.layout.is_valid_fall_through_range(start, end),
            };
        }
        s.valid
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{FakeLayout, Inst};

    #[test]
    fn answers_equal_the_layout_on_hits_and_collisions() {
        use Inst::*;
        let layout = FakeLayout::new(
            &[
                (0x10, Other),
                (0x12, Call),
                (0x17, CondBranch),
                (0x19, Jump),
                (0x1b, Other),
                (0x1c, Return),
            ],
            &[0x10],
        )
        .with_inline(0x10, 0x17, &[1, 2])
        .with_inline(0x17, 0x1d, &[4, 3]);
        let mut cache = LayoutCache::new(&layout);
        assert!(
            layout.inline_context_equal(0x10, 0x12) && !layout.inline_context_equal(0x12, 0x1b)
        );
        // Twice over many addresses, so that slots are hit, reused and overwritten.
        for _ in 0..2 {
            for a in (0..0x20u64).chain((0..20_000).map(|k| 0x1000 + 7 * k)) {
                assert_eq!(
                    cache.call_or_return(a),
                    (layout.is_call(a), layout.is_return(a)),
                    "{a:#x}"
                );
                assert_eq!(
                    cache.previous_instruction(a),
                    layout.previous_instruction(a),
                    "{a:#x}"
                );
                assert_eq!(
                    cache.call_before_return_address(a),
                    layout.call_before_return_address(a),
                    "{a:#x}"
                );
                for b in [a, a + 3, a + 9, 0x1b, EMPTY] {
                    assert_eq!(
                        cache.is_valid_fall_through_range(a, b),
                        layout.is_valid_fall_through_range(a, b),
                        "{a:#x} {b:#x}"
                    );
                    assert_eq!(
                        cache.inline_context_equal(a, b),
                        layout.inline_context_equal(a, b),
                        "{a:#x} {b:#x}"
                    );
                }
            }
        }
        assert_eq!(cache.call_or_return(EMPTY), (false, false));
        assert_eq!(
            cache.previous_instruction(EMPTY),
            layout.previous_instruction(EMPTY)
        );
        assert_eq!(
            cache.call_before_return_address(EMPTY),
            layout.call_before_return_address(EMPTY)
        );
    }
}
