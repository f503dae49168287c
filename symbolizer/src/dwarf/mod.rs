//! DWARF: subprograms (llvm-profgen's function list), inline frames with line offsets and
//! discriminators (what LLVMSymbolizer gives llvm-profgen), and the discriminator encodings.

pub mod discriminator;
pub mod info;
pub mod interval;
pub mod sections;
pub mod split;
pub(crate) mod unit_set;

pub use info::{DwarfInfo, RawFrame};
pub use split::SplitDwarf;
