//! [`AddressMemo`]: a one-byte answer per address, remembered in a direct-mapped table of
//! atomic words.
//!
//! Preparing a sample asks [`LazyCode`](super::lazy_code::LazyCode) whether each of its
//! LBR addresses is an instruction and which call precedes each return address of its call
//! chain: about 80 questions a sample, each a walk from the extent to its decoded
//! instructions and their bitmap. A program asks the same few thousand addresses again
//! and again, so the answer of each is kept here: a hit is one load and a compare. Each
//! slot packs the address and its answer in one word, so the threads sharing a binary read
//! and write it without a lock and never see an address with another's answer.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

/// log2 of the slots (8 bytes each): 16 KiB a table.
const SLOT_BITS: u32 = 11;

/// Addresses at or above this are not remembered (the packed word keeps 56 bits of
/// address; user-space code lies far below).
const MAX_ADDRESS: u64 = (1 << 56) - 1;

/// See the module docs. The table is allocated on the first answer kept.
#[derive(Debug, Default)]
pub(crate) struct AddressMemo {
    slots: OnceLock<Box<[AtomicU64]>>,
}

#[inline]
fn slot(addr: u64) -> usize {
    (addr.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - SLOT_BITS)) as usize
}

impl AddressMemo {
    /// The answer kept for `addr`, if any.
    #[inline]
    pub(crate) fn get(&self, addr: u64) -> Option<u8> {
        AddressMemo::get_in(self.table()?, addr)
    }

    /// The table, once an answer was kept: fetched once to read the answers of many
    /// addresses ([`AddressMemo::get_in`]).
    #[inline]
    pub(crate) fn table(&self) -> Option<&[AtomicU64]> {
        self.slots.get().map(|t| &**t)
    }

    /// The answer `table` (an [`AddressMemo::table`]) keeps for `addr`, if any.
    #[inline]
    pub(crate) fn get_in(table: &[AtomicU64], addr: u64) -> Option<u8> {
        if addr >= MAX_ADDRESS {
            return None;
        }
        let word = table[slot(addr)].load(Ordering::Relaxed);
        // `addr + 1`: an empty slot (0) holds no address.
        (word >> 8 == addr + 1).then_some(word as u8)
    }

    /// Keeps `answer` for `addr` (in place of what its slot held). Returns the bytes it
    /// allocated for its table (the first answer kept), else 0.
    #[inline]
    pub(crate) fn put(&self, addr: u64, answer: u8) -> usize {
        if addr >= MAX_ADDRESS {
            return 0;
        }
        let mut allocated = 0;
        let slots = self.slots.get_or_init(|| {
            allocated = 8 << SLOT_BITS;
            (0..1 << SLOT_BITS).map(|_| AtomicU64::new(0)).collect()
        });
        slots[slot(addr)].store((addr + 1) << 8 | u64::from(answer), Ordering::Relaxed);
        allocated
    }

    /// Bytes the table takes (0 until an answer is kept).
    #[cfg(test)]
    fn heap_bytes(&self) -> usize {
        self.slots.get().map_or(0, |s| s.len() * 8)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whatever addresses share slots, an address reads back its own answer or none, never
    /// another's; addresses too high to pack are never kept.
    #[test]
    fn an_address_reads_its_own_answer_or_none() {
        let memo = AddressMemo::default();
        assert_eq!(memo.get(0x1000), None);
        assert_eq!(memo.heap_bytes(), 0, "nothing allocated before an answer");
        let answer = |a: u64| (a % 251) as u8;
        // Far more addresses than slots, written then read back; only the first put
        // allocates.
        let addrs: Vec<u64> = (0..20_000u64).map(|k| 0x40_0000 + 3 * k).collect();
        for (k, &a) in addrs.iter().enumerate() {
            let allocated = memo.put(a, answer(a));
            assert_eq!(allocated, if k == 0 { 8 << SLOT_BITS } else { 0 });
            assert_eq!(memo.get(a), Some(answer(a)), "{a:#x} just put");
        }
        let mut kept = 0;
        for &a in &addrs {
            if let Some(v) = memo.get(a) {
                assert_eq!(v, answer(a), "{a:#x}");
                kept += 1;
            }
        }
        assert!(kept > 0 && kept <= 1 << SLOT_BITS, "{kept} kept");
        assert_eq!(memo.heap_bytes(), 8 << SLOT_BITS);
        // Address 0 and the highest packable address are kept; higher ones are not.
        memo.put(0, 7);
        assert_eq!(memo.get(0), Some(7));
        memo.put(MAX_ADDRESS - 1, 9);
        assert_eq!(memo.get(MAX_ADDRESS - 1), Some(9));
        memo.put(MAX_ADDRESS, 5);
        assert_eq!(memo.get(MAX_ADDRESS), None);
        memo.put(u64::MAX, 5);
        assert_eq!(memo.get(u64::MAX), None);
    }
}
