//! [`DebugSections`]: the debug sections of an object file, decompressed, as gimli reads them.
//! Both DWARF loaders ([`super::DwarfInfo`] for sample profiles, `memprof::dwarf` for MemProf)
//! start here.

use std::borrow::Cow;
use std::collections::HashMap;
use std::path::Path;

use gimli::{EndianSlice, RunTimeEndian, SectionId};
use object::{Object, ObjectSection};

use crate::binary::SharedBytes;
use crate::error::SymbolizerError;

/// A debug section's bytes kept past loading: a range of the file's shared memory map, or
/// (decompressed, or not in the map) a copy.
#[derive(Clone)]
pub(crate) enum SectionBytes {
    /// `bytes[range]`.
    Mapped(SharedBytes, std::ops::Range<usize>),
    /// Owned.
    Owned(std::sync::Arc<[u8]>),
}

impl SectionBytes {
    /// `data` kept: a range of `owner` when it lies in it, else a copy.
    pub(crate) fn keep(data: &[u8], owner: Option<&SharedBytes>) -> SectionBytes {
        match owner.and_then(|owner| Some((owner, range_in(data, owner)?))) {
            Some((owner, range)) => SectionBytes::Mapped(owner.clone(), range),
            None => SectionBytes::Owned(std::sync::Arc::from(data)),
        }
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        match self {
            SectionBytes::Mapped(map, range) => &(**map).as_ref()[range.clone()],
            SectionBytes::Owned(bytes) => bytes,
        }
    }

    /// Gives back the pages of the windows a fault may map around `within` (a range of the
    /// section; see [`crate::binary::LazyCode::release_around`]) when the section is a range
    /// of the owner's bytes, which must then be a read-only file mapping; a copy is left
    /// alone.
    pub(crate) fn release_around(&self, within: std::ops::Range<usize>) {
        if let SectionBytes::Mapped(map, range) = self {
            let start = range.start.saturating_add(within.start).min(range.end);
            let end = range.start.saturating_add(within.end).min(range.end);
            crate::binary::LazyCode::release_around((**map).as_ref(), start..end);
        }
    }
}

/// Where `data` lies in `owner`'s bytes, if it does.
fn range_in(data: &[u8], owner: &SharedBytes) -> Option<std::ops::Range<usize>> {
    let map: &[u8] = (**owner).as_ref();
    let (base, ptr) = (map.as_ptr() as usize, data.as_ptr() as usize);
    (ptr >= base && ptr + data.len() <= base + map.len())
        .then(|| ptr - base..ptr - base + data.len())
}

impl std::fmt::Debug for SectionBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SectionBytes::Mapped(_, range) => write!(f, "Mapped({range:?})"),
            SectionBytes::Owned(bytes) => write!(f, "Owned({} bytes)", bytes.len()),
        }
    }
}

/// The byte slices gimli reads the sections through.
pub(crate) type Slice<'a> = EndianSlice<'a, RunTimeEndian>;

/// Largest uncompressed size a compressed debug section may claim per compressed byte
/// (zlib's ratio cannot pass 1032:1, zstd's stays below 2^15:1 per 128 KiB block of one
/// repeated byte): the size drives one allocation before any data is decompressed.
pub const MAX_DECOMPRESSION_RATIO: u64 = 1 << 15;

/// Largest uncompressed debug section.
pub const MAX_DEBUG_SECTION_BYTES: u64 = 4 << 30;

/// The sections read (those gimli's `Dwarf` knows; absent ones read as empty).
const SECTIONS: [SectionId; 14] = [
    SectionId::DebugAbbrev,
    SectionId::DebugAddr,
    SectionId::DebugAranges,
    SectionId::DebugInfo,
    SectionId::DebugLine,
    SectionId::DebugLineStr,
    SectionId::DebugLoc,
    SectionId::DebugLocLists,
    SectionId::DebugRanges,
    SectionId::DebugRngLists,
    SectionId::DebugStr,
    SectionId::DebugStrOffsets,
    SectionId::DebugTypes,
    SectionId::DebugMacro,
];

/// The sections read from a `.dwo` file or a DWARF package, by their `.dwo` names.
const DWO_SECTIONS: [SectionId; 12] = [
    SectionId::DebugAbbrev,
    SectionId::DebugCuIndex,
    SectionId::DebugInfo,
    SectionId::DebugLine,
    SectionId::DebugLoc,
    SectionId::DebugLocLists,
    SectionId::DebugRngLists,
    SectionId::DebugStr,
    SectionId::DebugStrOffsets,
    SectionId::DebugTuIndex,
    SectionId::DebugTypes,
    SectionId::DebugMacro,
];

/// The (decompressed) debug sections of one file.
pub(crate) struct DebugSections<'data> {
    data: HashMap<SectionId, Cow<'data, [u8]>>,
    endian: RunTimeEndian,
}

impl<'data> DebugSections<'data> {
    /// Reads the debug sections of `file`; compressed ones are decompressed (within
    /// [`MAX_DECOMPRESSION_RATIO`] and [`MAX_DEBUG_SECTION_BYTES`]).
    pub(crate) fn load(
        file: &impl Object<'data>,
        path: &Path,
    ) -> Result<DebugSections<'data>, SymbolizerError> {
        Self::load_named(file, path, &SECTIONS, |id| Some(id.name()))
    }

    /// Reads the split DWARF sections of `file`, a `.dwo` file or a DWARF package (`.dwp`):
    /// `.debug_info.dwo` and the others, and a package's unit indexes.
    pub(crate) fn load_dwo(
        file: &impl Object<'data>,
        path: &Path,
    ) -> Result<DebugSections<'data>, SymbolizerError> {
        Self::load_named(file, path, &DWO_SECTIONS, SectionId::dwo_name)
    }

    fn load_named(
        file: &impl Object<'data>,
        path: &Path,
        ids: &[SectionId],
        name: impl Fn(SectionId) -> Option<&'static str>,
    ) -> Result<DebugSections<'data>, SymbolizerError> {
        let endian = if file.is_little_endian() {
            RunTimeEndian::Little
        } else {
            RunTimeEndian::Big
        };
        let mut data = HashMap::new();
        for &id in ids {
            if let Some(section) = name(id).and_then(|n| file.section_by_name(n)) {
                data.insert(id, debug_section_data(&section, path)?);
            }
        }
        Ok(DebugSections { data, endian })
    }

    /// The byte order of the sections.
    pub(crate) fn endian(&self) -> RunTimeEndian {
        self.endian
    }

    /// Section `id` kept past loading: a range of `owner` when its bytes lie in it (an
    /// uncompressed section of the file `owner` maps), else a copy; `None` when absent.
    pub(crate) fn keep(&self, id: SectionId, owner: &SharedBytes) -> Option<SectionBytes> {
        Some(SectionBytes::keep(self.data.get(&id)?, Some(owner)))
    }

    /// True when section `id` is present and its bytes lie in `owner` (an uncompressed
    /// section of the file `owner` maps).
    pub(crate) fn lies_in(&self, id: SectionId, owner: &SharedBytes) -> bool {
        self.data
            .get(&id)
            .is_some_and(|data| range_in(data, owner).is_some())
    }

    /// Section `id` as gimli reads it (empty when absent).
    fn slice(&self, id: SectionId) -> Slice<'_> {
        EndianSlice::new(self.data.get(&id).map_or(&[][..], |c| &c[..]), self.endian)
    }

    /// gimli's view of the sections.
    pub(crate) fn dwarf(&self) -> Result<gimli::Dwarf<Slice<'_>>, gimli::Error> {
        gimli::Dwarf::load(|id| -> Result<Slice<'_>, gimli::Error> { Ok(self.slice(id)) })
    }

    /// gimli's view of the sections as a DWARF package (read with [`DebugSections::load_dwo`]).
    pub(crate) fn package(&self) -> Result<gimli::DwarfPackage<Slice<'_>>, gimli::Error> {
        gimli::DwarfPackage::load(
            |id| -> Result<Slice<'_>, gimli::Error> { Ok(self.slice(id)) },
            EndianSlice::new(&[][..], self.endian),
        )
    }

    /// True when the file has a unit index (`.debug_cu_index`): a DWARF package.
    pub(crate) fn has_cu_index(&self) -> bool {
        self.data.contains_key(&SectionId::DebugCuIndex)
    }
}

/// The (decompressed) contents of a debug section, refusing compressed sections whose
/// claimed uncompressed size exceeds [`MAX_DECOMPRESSION_RATIO`] times their compressed
/// size or [`MAX_DEBUG_SECTION_BYTES`].
fn debug_section_data<'data>(
    section: &impl ObjectSection<'data>,
    path: &Path,
) -> Result<Cow<'data, [u8]>, SymbolizerError> {
    let error = |what: String| SymbolizerError::SectionData {
        path: path.to_path_buf(),
        section: crate::error::section_label(section),
        what,
    };
    let compressed = section
        .compressed_data()
        .map_err(|e| error(e.to_string()))?;
    if compressed.format != object::CompressionFormat::None {
        let max = (compressed.data.len() as u64)
            .saturating_mul(MAX_DECOMPRESSION_RATIO)
            .min(MAX_DEBUG_SECTION_BYTES);
        if compressed.uncompressed_size > max {
            return Err(error(format!(
                "claims {} uncompressed bytes from {} compressed, over the limit of {max}",
                compressed.uncompressed_size,
                compressed.data.len()
            )));
        }
    }
    section
        .uncompressed_data()
        .map_err(|e| error(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resident_pages::{resident_kb, temp_file};
    use std::sync::Arc;

    /// A mapped section gives back the pages of the windows around what is released (here
    /// the whole section), and reads the same after; a copy is left alone.
    #[test]
    fn a_mapped_section_gives_back_the_windows_around_a_range() {
        let bytes: Vec<u8> = (0..40 * 4096u32).map(|i| (i % 253) as u8).collect();
        let path = temp_file("section-release", &bytes);
        let map: SharedBytes = Arc::new(crate::binary::map_file(&path).unwrap());
        let section = SectionBytes::keep(&(*map).as_ref()[10_000..90_000], Some(&map));
        assert!(matches!(section, SectionBytes::Mapped(..)));
        let sum = |b: &[u8]| b.iter().map(|&x| u64::from(x)).sum::<u64>();
        // Only the section is read: the pages its faults map (the kernel maps pages around
        // a fault within the same 2 MiB window) lie in the windows around it, wherever a
        // window boundary falls in the map. Pages of the file outside those windows, read
        // by someone else, are not the section's to give back.
        let in_section = sum(section.bytes());
        assert!(
            resident_kb(&path).unwrap() >= 80,
            "{:?}",
            resident_kb(&path)
        );
        section.release_around(0..80_000);
        assert_eq!(resident_kb(&path), Some(0));
        assert_eq!(section.bytes(), &bytes[10_000..90_000]);
        assert_eq!(sum(section.bytes()), in_section);
        assert_eq!(sum((*map).as_ref()), sum(&bytes));
        // Past the section's end: clamped to it, nothing panics.
        section.release_around(70_000..usize::MAX);
        let copy = SectionBytes::keep(&bytes[..100], None);
        copy.release_around(0..100);
        assert_eq!(copy.bytes(), &bytes[..100]);
        drop((section, map));
        std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
    }
}
