//! Section types, flags and the header-table layout of the extbinary format
//! (`SampleProf.h` `SecType`, `Sec*Flags`; `SampleProfWriter.h` DefaultLayout).

/// `SPMagic(SPF_Ext_Binary)`: "SPROF42" followed by format byte 4.
pub const MAGIC: u64 = 0x5350524f46343204;
/// `SPVersion()`; the reader rejects any other version.
pub const VERSION: u64 = 103;

/// Section types (`SecType`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u64)]
pub enum SecType {
    /// Profile summary.
    ProfSummary = 1,
    /// Function-name table.
    NameTable = 2,
    /// Profile symbol list.
    ProfileSymbolList = 3,
    /// Context/name → profile offset table.
    FuncOffsetTable = 4,
    /// Checksums and attributes.
    FuncMetadata = 5,
    /// Context table of CS profiles.
    CsNameTable = 6,
    /// Function profiles (`SecLBRProfile = SecFuncProfileFirst`).
    LbrProfile = 32,
}

/// The DefaultLayout header order (the order the reader processes sections).
pub const DEFAULT_LAYOUT: [SecType; 7] = [
    SecType::ProfSummary,
    SecType::NameTable,
    SecType::CsNameTable,
    SecType::FuncOffsetTable,
    SecType::LbrProfile,
    SecType::ProfileSymbolList,
    SecType::FuncMetadata,
];

/// Section-specific flags live in the high 32 bits (`addSecFlag` shifts them by 32).
const fn specific(bit: u32) -> u64 {
    1u64 << (32 + bit)
}

/// NameTable: names are MD5 hashes (`SecFlagMD5Name`).
pub const FLAG_MD5_NAME: u64 = specific(0);
/// NameTable: the MD5 hashes are fixed-length 8-byte words (`SecFlagFixedLengthMD5`).
pub const FLAG_FIXED_LENGTH_MD5: u64 = specific(1);
/// NameTable: names containing `.__uniq.` (`SecFlagUniqSuffix`).
pub const FLAG_UNIQ_SUFFIX: u64 = specific(2);
/// ProfSummary: flat context-sensitive profile (`SecFlagFullContext`).
pub const FLAG_FULL_CONTEXT: u64 = specific(1);
/// ProfSummary: flow-sensitive discriminators (`SecFlagFSDiscriminator`).
pub const FLAG_FS_DISCRIMINATOR: u64 = specific(2);
/// ProfSummary: pre-inlined profile (`SecFlagIsPreInlined`).
pub const FLAG_IS_PREINLINED: u64 = specific(4);
/// FuncMetadata: checksums present (`SecFlagIsProbeBased`).
pub const FLAG_IS_PROBE_BASED: u64 = specific(0);
/// FuncMetadata: attributes present (`SecFlagHasAttribute`).
pub const FLAG_HAS_ATTRIBUTE: u64 = specific(1);
/// FuncOffsetTable: entries sorted by context (`SecFlagOrdered`).
pub const FLAG_ORDERED: u64 = specific(0);

/// One header-table entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SecHdrEntry {
    /// Section type.
    pub ty: SecType,
    /// Common (low 32 bits) and section-specific (high 32 bits) flags.
    pub flags: u64,
    /// Offset from the start of the file.
    pub offset: u64,
    /// Size in bytes.
    pub size: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flag_bits_match_llvm() {
        assert_eq!(FLAG_FULL_CONTEXT, 0x2_0000_0000);
        assert_eq!(FLAG_IS_PREINLINED, 0x10_0000_0000);
        assert_eq!(FLAG_UNIQ_SUFFIX, 0x4_0000_0000);
        assert_eq!(SecType::LbrProfile as u64, 32);
    }
}
