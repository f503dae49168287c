//! [`MemProfFrame`]: one frame of a MemProf call stack, identified the way LLVM's MemProf
//! identifies it: function GUID (MD5 low 64 bits of the canonical linkage name,
//! `memprof::getGUID`), line offset from the function's declaration line, column, and whether
//! the frame was inlined into its caller. Stack ids as clang computes them for `!memprof` /
//! `!callsite` metadata (`computeStackId` in `llvm/lib/Transforms/Instrumentation/MemProfUse.cpp`,
//! `computeFullStackId` in `llvm/lib/ProfileData/MemProfCommon.cpp`).

use crate::guid::function_guid;
use crate::name::canonical_function_name;

/// One MemProf frame (LLVM `memprof::Frame`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MemProfFrame {
    /// Function GUID ([`memprof_guid`]).
    pub function: u64,
    /// Source line minus the function's `DW_AT_decl_line`.
    pub line_offset: u32,
    /// Source column (0 when unknown).
    pub column: u32,
    /// True when this frame is inlined into the next one (same PC).
    pub is_inline: bool,
}

/// `memprof::getGUID`: the GUID of the canonical form of a linkage name.
pub fn memprof_guid(linkage_name: &str) -> u64 {
    function_guid(canonical_function_name(linkage_name))
}

/// The 16 bytes LLVM hashes for one frame: `LE64(GUID) ‖ LE32(LineOffset) ‖ LE32(Column)`
/// (`HashBuilder` adds integers as raw little-endian bytes with no length prefix).
fn frame_bytes(frame: &MemProfFrame) -> [u8; 16] {
    let mut b = [0u8; 16];
    b[..8].copy_from_slice(&frame.function.to_le_bytes());
    b[8..12].copy_from_slice(&frame.line_offset.to_le_bytes());
    b[12..].copy_from_slice(&frame.column.to_le_bytes());
    b
}

fn truncated_blake3(hasher: &blake3::Hasher) -> u64 {
    let mut out = [0u8; 8];
    hasher.finalize_xof().fill(&mut out);
    u64::from_le_bytes(out)
}

impl MemProfFrame {
    /// The frame's stack id: the first 8 bytes (little-endian) of BLAKE3 of [`frame_bytes`]
    /// (`HashBuilder<TruncatedBLAKE3<8>, little>`). IR prints it as a signed i64.
    pub fn stack_id(&self) -> u64 {
        let mut h = blake3::Hasher::new();
        h.update(&frame_bytes(self));
        truncated_blake3(&h)
    }
}

/// `computeFullStackId`: the same hash over all frames' 16-byte tuples, leaf first; identifies
/// a whole allocation context in `-memprof-print-match-info` output and summaries.
pub fn full_stack_id(frames: &[MemProfFrame]) -> u64 {
    let mut h = blake3::Hasher::new();
    for f in frames {
        h.update(&frame_bytes(f));
    }
    truncated_blake3(&h)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(name: &str, line_offset: u32, column: u32) -> MemProfFrame {
        MemProfFrame {
            function: memprof_guid(name),
            line_offset,
            column,
            is_inline: false,
        }
    }

    #[test]
    fn guids_match_clang22() {
        assert_eq!(memprof_guid("_Z8make_bufm"), 0x6e9c63fd26a12f0a);
        assert_eq!(memprof_guid("_Z9cold_pathv"), 0xfbb72392fd6468f1);
        assert_eq!(memprof_guid("_Z8hot_pathv"), 0xb9a872cafb6ad884);
        assert_eq!(memprof_guid("main"), 0xdb956436e78dd5fa);
        assert_eq!(memprof_guid("_Z8make_bufm.llvm.42"), 0x6e9c63fd26a12f0a);
    }

    #[test]
    fn stack_ids_match_clang22_ir() {
        // Values read from clang-22 `!memprof` / `!callsite` metadata (reference memprof.md §3.3).
        assert_eq!(frame("_Z8make_bufm", 1, 10).stack_id(), 0xd69c447e06837e09);
        assert_eq!(frame("_Z9cold_pathv", 1, 10).stack_id(), 0x007cd6af1c366da5);
        assert_eq!(frame("_Z8hot_pathv", 1, 10).stack_id(), 0x285924c0f04a502b);
        assert_eq!(frame("main", 1, 13).stack_id(), 0x77cc928ecf2a1616);
        assert_eq!(frame("main", 5, 15).stack_id() as i64, -7523973050549667749);
        let context = [
            frame("_Z8make_bufm", 1, 10),
            frame("_Z9cold_pathv", 1, 10),
            frame("main", 1, 13),
        ];
        assert_eq!(full_stack_id(&context), 12843437082920228479);
    }
}
