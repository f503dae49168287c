//! [`FrameCache`]: the inline frames of each instruction, computed on first use and kept
//! (llvm-profgen's `getCachedFrameLocationStack`). Slots are allocated a chunk of
//! instructions at a time when an instruction of the chunk is first asked for, so a large
//! binary of which samples touch a few functions pays for those chunks only (a slot per
//! instruction up front would cost 24 bytes for every instruction of the file).

use std::sync::OnceLock;

use super::FrameLocation;

/// Instructions per chunk.
const CHUNK: usize = 1024;

type Slot = OnceLock<Box<[FrameLocation]>>;

/// Lazily filled per-instruction frame stacks; thread-safe.
pub(crate) struct FrameCache {
    chunks: Vec<OnceLock<Box<[Slot]>>>,
    len: usize,
}

impl FrameCache {
    /// A cache for `instructions` instructions, nothing allocated per instruction.
    pub(crate) fn new(instructions: usize) -> FrameCache {
        FrameCache {
            chunks: (0..instructions.div_ceil(CHUNK))
                .map(|_| OnceLock::new())
                .collect(),
            len: instructions,
        }
    }

    /// The frames of instruction `index`, computed by `init` the first time.
    pub(crate) fn get_or_init(
        &self,
        index: usize,
        init: impl FnOnce() -> Box<[FrameLocation]>,
    ) -> &[FrameLocation] {
        if index >= self.len {
            return &[];
        }
        let Some(chunk) = self.chunks.get(index / CHUNK) else {
            return &[];
        };
        let slots = chunk.get_or_init(|| (0..CHUNK).map(|_| OnceLock::new()).collect());
        slots[index % CHUNK].get_or_init(init)
    }

    /// Chunks allocated so far.
    #[cfg(test)]
    fn allocated_chunks(&self) -> usize {
        self.chunks.iter().filter(|c| c.get().is_some()).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(name: &str) -> Box<[FrameLocation]> {
        vec![FrameLocation {
            func_name: name.to_string(),
            line_offset: 1,
            discriminator: 0,
        }]
        .into_boxed_slice()
    }

    #[test]
    fn computes_once_and_allocates_only_touched_chunks() {
        let cache = FrameCache::new(10 * CHUNK + 1);
        assert_eq!(cache.allocated_chunks(), 0);
        assert_eq!(cache.get_or_init(5, || frame("a"))[0].func_name, "a");
        // Cached: the second init is not run.
        assert_eq!(cache.get_or_init(5, || frame("b"))[0].func_name, "a");
        assert_eq!(
            cache.get_or_init(10 * CHUNK, || frame("c"))[0].func_name,
            "c"
        );
        assert_eq!(cache.allocated_chunks(), 2);
        // Out of range: empty, nothing allocated.
        assert!(cache.get_or_init(10 * CHUNK + 1, || frame("d")).is_empty());
        assert_eq!(cache.allocated_chunks(), 2);
    }
}
