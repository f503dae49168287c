//! ELF images read by their program headers: the one reader of `PT_LOAD` segments and of
//! the GNU build-id note that every part of pgo-agent uses (the symbolizer's load rules, the
//! recorder and the daemon's load bias, uprobe file offsets, the MemProf symbolizer).
//!
//! * [`program_headers`]: the headers of a 32- or 64-bit image of either byte order
//!   ([`ProgramHeader`]), and the address/offset arithmetic of its `PT_LOAD`s;
//! * [`facts`]: what the recorder and the daemon need of a mapped image ([`ElfFacts`]: build
//!   id and load bias), read from a file within [`MAX_ELF_BYTES`] or from memory (the vdso).

pub mod facts;
pub mod program_headers;

pub use facts::{ElfFacts, MAX_ELF_BYTES};
pub use program_headers::{
    build_id_from_program_headers, build_id_of_file_head, file_offset_to_vaddr, program_headers,
    vaddr_to_file_offset, ProgramHeader, PF_X, PT_LOAD,
};
