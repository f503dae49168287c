//! The perf.data file header, section descriptors and the `perf_event_attr` bytes (as far as
//! this crate writes and checks them). Layout: tools/perf/Documentation/perf.data-file-format.txt.

/// `"PERFILE2"`: the magic of a little-endian perf.data file (version 2).
pub const MAGIC: [u8; 8] = *b"PERFILE2";
/// The magic as a big-endian writer leaves it.
pub const MAGIC_BIG_ENDIAN: [u8; 8] = *b"2ELIFREP";
/// Size of `struct perf_file_header`: magic, size, attr_size, attrs, data, event_types
/// sections (16 bytes each) and the 256-bit feature bitmap.
pub const FILE_HEADER_SIZE: u64 = 104;
/// `PERF_ATTR_SIZE_VER7` (128): the `perf_event_attr` size perf 6.1 writes and we write.
pub const ATTR_SIZE: usize = 128;

/// Feature bit numbers (`HEADER_*` in tools/perf/util/header.h) this crate writes.
pub mod feature {
    /// HEADER_BUILD_ID.
    pub const BUILD_ID: u32 = 2;
    /// HEADER_HOSTNAME.
    pub const HOSTNAME: u32 = 3;
    /// HEADER_OSRELEASE.
    pub const OSRELEASE: u32 = 4;
    /// HEADER_VERSION.
    pub const VERSION: u32 = 5;
    /// HEADER_ARCH.
    pub const ARCH: u32 = 6;
    /// HEADER_NRCPUS.
    pub const NRCPUS: u32 = 7;
    /// HEADER_CPUDESC.
    pub const CPUDESC: u32 = 8;
    /// HEADER_CPUID.
    pub const CPUID: u32 = 9;
    /// HEADER_TOTAL_MEM.
    pub const TOTAL_MEM: u32 = 10;
    /// HEADER_CMDLINE.
    pub const CMDLINE: u32 = 11;
    /// HEADER_EVENT_DESC.
    pub const EVENT_DESC: u32 = 12;
    /// HEADER_BRANCH_STACK (a flag; empty section).
    pub const BRANCH_STACK: u32 = 15;
}

/// `{u64 offset; u64 size}`: where a section lies in the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct FileSection {
    /// Byte offset from the start of the file.
    pub offset: u64,
    /// Length in bytes.
    pub size: u64,
}

impl FileSection {
    /// One past the last byte (saturating, so hostile values cannot overflow).
    pub fn end(&self) -> u64 {
        self.offset.saturating_add(self.size)
    }

    pub(crate) fn parse(b: &[u8]) -> FileSection {
        FileSection {
            offset: le64(&b[0..8]),
            size: le64(&b[8..16]),
        }
    }

    pub(crate) fn write(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.offset.to_le_bytes());
        out.extend_from_slice(&self.size.to_le_bytes());
    }
}

/// `struct perf_file_header`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct FileHeader {
    /// `attr_size`: bytes per attrs entry (`perf_event_attr` + the ids section descriptor).
    pub attr_size: u64,
    /// The attrs array.
    pub attrs: FileSection,
    /// The record stream.
    pub data: FileSection,
    /// Legacy event types (ignored).
    pub event_types: FileSection,
    /// The 256-bit feature bitmap.
    pub features: [u64; 4],
}

impl FileHeader {
    /// Parses the 104 header bytes (little-endian; the caller checked the magic).
    pub fn parse(b: &[u8; FILE_HEADER_SIZE as usize]) -> FileHeader {
        FileHeader {
            attr_size: le64(&b[16..24]),
            attrs: FileSection::parse(&b[24..40]),
            data: FileSection::parse(&b[40..56]),
            event_types: FileSection::parse(&b[56..72]),
            features: [
                le64(&b[72..80]),
                le64(&b[80..88]),
                le64(&b[88..96]),
                le64(&b[96..104]),
            ],
        }
    }

    /// Encodes the header, magic included.
    pub fn write(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&FILE_HEADER_SIZE.to_le_bytes());
        out.extend_from_slice(&self.attr_size.to_le_bytes());
        self.attrs.write(out);
        self.data.write(out);
        self.event_types.write(out);
        for w in self.features {
            out.extend_from_slice(&w.to_le_bytes());
        }
    }

    /// True when feature bit `bit` is set.
    pub fn has_feature(&self, bit: u32) -> bool {
        bit < 256 && self.features[(bit / 64) as usize] & (1 << (bit % 64)) != 0
    }

    /// The set feature bits, ascending (the order of the feature section table).
    pub fn feature_bits(&self) -> impl Iterator<Item = u32> + '_ {
        (0..256).filter(|&b| self.has_feature(b))
    }
}

/// The `perf_event_attr` fields this crate writes and reads back; the rest are 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct RawAttr {
    /// `type` (PERF_TYPE_RAW = 4, ...).
    pub type_: u32,
    /// `size` as found in the file (we write [`ATTR_SIZE`]).
    pub size: u32,
    /// `config`.
    pub config: u64,
    /// `sample_period` (or `sample_freq` with the freq flag).
    pub sample_period: u64,
    /// `sample_type`.
    pub sample_type: u64,
    /// `read_format`.
    pub read_format: u64,
    /// The flag bits at offset 40 (disabled, inherit, ..., precise_ip at 15-16, ...).
    pub flags: u64,
    /// `branch_sample_type` (0 when the attr is older than VER2).
    pub branch_sample_type: u64,
    /// `sample_regs_user` (offset 80; 0 when the attr is older than VER3).
    pub sample_regs_user: u64,
    /// `sample_stack_user` (offset 88; 0 when the attr is older than VER3).
    pub sample_stack_user: u32,
}

/// Bits of the attr flag word (offset 40) this crate sets.
pub mod attr_flag {
    /// `disabled`.
    pub const DISABLED: u64 = 1 << 0;
    /// `inherit`.
    pub const INHERIT: u64 = 1 << 1;
    /// `exclude_kernel`.
    pub const EXCLUDE_KERNEL: u64 = 1 << 5;
    /// `exclude_hv`.
    pub const EXCLUDE_HV: u64 = 1 << 6;
    /// `mmap`.
    pub const MMAP: u64 = 1 << 8;
    /// `comm`.
    pub const COMM: u64 = 1 << 9;
    /// `freq`.
    pub const FREQ: u64 = 1 << 10;
    /// `enable_on_exec`.
    pub const ENABLE_ON_EXEC: u64 = 1 << 12;
    /// `task`.
    pub const TASK: u64 = 1 << 13;
    /// Shift of the 2-bit `precise_ip`.
    pub const PRECISE_IP_SHIFT: u32 = 15;
    /// `sample_id_all`.
    pub const SAMPLE_ID_ALL: u64 = 1 << 18;
    /// `exclude_guest`.
    pub const EXCLUDE_GUEST: u64 = 1 << 20;
    /// `mmap2`.
    pub const MMAP2: u64 = 1 << 23;
    /// `comm_exec`.
    pub const COMM_EXEC: u64 = 1 << 24;
}

impl RawAttr {
    /// `precise_ip` (flag bits 15-16).
    pub fn precise_ip(&self) -> u8 {
        ((self.flags >> attr_flag::PRECISE_IP_SHIFT) & 3) as u8
    }

    /// Parses an attr of `b.len()` bytes (at least `PERF_ATTR_SIZE_VER0` = 64).
    pub fn parse(b: &[u8]) -> Option<RawAttr> {
        if b.len() < 64 {
            return None;
        }
        Some(RawAttr {
            type_: le32(&b[0..4]),
            size: le32(&b[4..8]),
            config: le64(&b[8..16]),
            sample_period: le64(&b[16..24]),
            sample_type: le64(&b[24..32]),
            read_format: le64(&b[32..40]),
            flags: le64(&b[40..48]),
            branch_sample_type: if b.len() >= 80 { le64(&b[72..80]) } else { 0 },
            sample_regs_user: if b.len() >= 96 { le64(&b[80..88]) } else { 0 },
            sample_stack_user: if b.len() >= 96 { le32(&b[88..92]) } else { 0 },
        })
    }

    /// Encodes the attr as [`ATTR_SIZE`] bytes (`size` is written as [`ATTR_SIZE`]).
    pub fn write(&self, out: &mut Vec<u8>) {
        let start = out.len();
        out.resize(start + ATTR_SIZE, 0);
        let b = &mut out[start..];
        b[0..4].copy_from_slice(&self.type_.to_le_bytes());
        b[4..8].copy_from_slice(&(ATTR_SIZE as u32).to_le_bytes());
        b[8..16].copy_from_slice(&self.config.to_le_bytes());
        b[16..24].copy_from_slice(&self.sample_period.to_le_bytes());
        b[24..32].copy_from_slice(&self.sample_type.to_le_bytes());
        b[32..40].copy_from_slice(&self.read_format.to_le_bytes());
        b[40..48].copy_from_slice(&self.flags.to_le_bytes());
        b[72..80].copy_from_slice(&self.branch_sample_type.to_le_bytes());
        b[80..88].copy_from_slice(&self.sample_regs_user.to_le_bytes());
        b[88..92].copy_from_slice(&self.sample_stack_user.to_le_bytes());
    }
}

pub(crate) fn le64(b: &[u8]) -> u64 {
    u64::from_le_bytes(b[..8].try_into().expect("8 bytes"))
}

pub(crate) fn le32(b: &[u8]) -> u32 {
    u32::from_le_bytes(b[..4].try_into().expect("4 bytes"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trip() {
        let h = FileHeader {
            attr_size: 144,
            attrs: FileSection {
                offset: 112,
                size: 144,
            },
            data: FileSection {
                offset: 256,
                size: 1000,
            },
            event_types: FileSection::default(),
            features: [(1 << 2) | (1 << 12), 0, 0, 0],
        };
        let mut out = Vec::new();
        h.write(&mut out);
        assert_eq!(out.len(), 104);
        assert_eq!(&out[..8], b"PERFILE2");
        assert_eq!(FileHeader::parse(out[..].try_into().unwrap()), h);
        assert_eq!(h.feature_bits().collect::<Vec<_>>(), vec![2, 12]);
    }

    #[test]
    fn attr_round_trip() {
        let a = RawAttr {
            type_: 4,
            size: 128,
            config: 0x20c4,
            sample_period: 1009,
            sample_type: 0x827,
            read_format: 0,
            flags: 3 << attr_flag::PRECISE_IP_SHIFT | attr_flag::EXCLUDE_KERNEL,
            branch_sample_type: 9,
            sample_regs_user: 0x1c0,
            sample_stack_user: 16,
        };
        let mut out = Vec::new();
        a.write(&mut out);
        assert_eq!(out.len(), 128);
        // perf_event_attr: sample_regs_user at 80, sample_stack_user at 88 (VER3).
        assert_eq!(out[80..88], 0x1c0u64.to_le_bytes());
        assert_eq!(out[88..92], 16u32.to_le_bytes());
        let ver2 = RawAttr::parse(&out[..80]).unwrap();
        assert_eq!((ver2.sample_regs_user, ver2.sample_stack_user), (0, 0));
        assert_eq!(RawAttr::parse(&out), Some(a));
        assert_eq!(a.precise_ip(), 3);
        assert_eq!(RawAttr::parse(&out[..63]), None);
    }
}
