//! [`write`]: a [`SampleProfile`] as an extbinary file (LLVM 19's
//! `SampleProfileWriterExtBinary` with the DefaultLayout, no compression, string name
//! table).
//!
//! Data is written in the order Summary, NameTable, CSNameTable, LBRProfile,
//! ProfileSymbolList, FuncOffsetTable, FuncMetadata (the offset table needs the profile
//! offsets); the header table lists them in [`DEFAULT_LAYOUT`] order.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{self, Write};

use symbolizer::profile::{FunctionSamples, ProfileSummary, SampleContext, SampleProfile};

use super::leb128::write_uleb;
use super::section::*;

/// Writes `profile` as extbinary to `out`.
pub fn write(profile: &SampleProfile, out: &mut dyn Write) -> io::Result<()> {
    out.write_all(&to_bytes(profile))
}

/// Writes `profile` as extbinary to `out` with `symbols` in its ProfileSymbolList section
/// (llvm-profgen's `--populate-profile-symbol-list`: the names the compiler may treat as
/// cold when they have no profile).
pub fn write_with_symbol_list(
    profile: &SampleProfile,
    symbols: &BTreeSet<String>,
    out: &mut dyn Write,
) -> io::Result<()> {
    out.write_all(&to_bytes_with_symbol_list(profile, symbols))
}

/// What [`write_with`] writes besides the profile (llvm-profgen's output options).
#[derive(Clone, Copy, Debug, Default)]
pub struct WriteOptions<'a> {
    /// The ProfileSymbolList section's names (`--populate-profile-symbol-list`); empty
    /// when `None`.
    pub symbol_list: Option<&'a BTreeSet<String>>,
    /// An MD5 name table (`--use-md5`, `setUseMD5`): each name as the 8 little-endian
    /// bytes of its `MD5Hash`, in the order of the names, the NameTable section flagged
    /// `SecFlagMD5Name | SecFlagFixedLengthMD5` (and never `SecFlagUniqSuffix`).
    pub use_md5: bool,
    /// `--profile-summary-contextless` when given: whether the summary of a CS profile
    /// merges its contexts (LLVM's default for CS, `None`) or counts each context.
    pub contextless_summary: Option<bool>,
}

/// Writes `profile` as extbinary to `out` with the sections and name table `options` ask
/// for.
pub fn write_with(
    profile: &SampleProfile,
    options: &WriteOptions<'_>,
    out: &mut dyn Write,
) -> io::Result<()> {
    out.write_all(&to_bytes_with(profile, options))
}

/// Name → index tables built before the sections that refer to them.
struct Tables {
    names: BTreeMap<String, u64>,
    contexts: BTreeMap<SampleContext, u64>,
}

impl Tables {
    fn build(profile: &SampleProfile) -> Tables {
        let mut names = BTreeSet::new();
        let mut contexts = BTreeSet::new();
        fn add_names(fs: &FunctionSamples, names: &mut BTreeSet<String>) {
            for b in fs.body.values() {
                for t in b.call_targets.keys() {
                    names.insert(t.clone());
                }
            }
            for callees in fs.callsites.values() {
                for c in callees.values() {
                    names.insert(c.name().to_string());
                    add_names(c, names);
                }
            }
        }
        for fs in profile.profiles.values() {
            if profile.is_cs {
                for f in &fs.context.frames {
                    names.insert(f.func.clone());
                }
                contexts.insert(fs.context.clone());
            } else {
                names.insert(fs.name().to_string());
            }
            add_names(fs, &mut names);
        }
        // String order is byte order, FunctionId's order for names.
        Tables {
            names: names.into_iter().zip(0u64..).collect(),
            contexts: contexts.into_iter().zip(0u64..).collect(),
        }
    }

    fn name_idx(&self, name: &str) -> u64 {
        // Every name was added by `build`; a miss is an internal invariant violation.
        self.names.get(name).copied().unwrap_or(0)
    }

    fn context_idx(&self, profile: &SampleProfile, fs: &FunctionSamples) -> u64 {
        if profile.is_cs {
            self.contexts.get(&fs.context).copied().unwrap_or(0)
        } else {
            self.name_idx(fs.name())
        }
    }
}

/// The magic of LLVM's raw binary sample profile (`SPMagic(SPF_Binary)`).
pub const RAW_BINARY_MAGIC: u64 = 0x5350524f463432ff;

/// Writes `profile` in LLVM's older raw binary sample-profile format (`--format=binary`,
/// `SampleProfileWriterRawBinary`): magic and version, the summary, the name table (names
/// in byte order, each ended by a NUL), then each function's head samples and body in
/// extbinary's function order, with no section table. Like LLVM, it cannot hold
/// probe-based profiles nor flat context-sensitive ones (an `InvalidInput` error).
pub fn write_raw_binary(profile: &SampleProfile, out: &mut dyn Write) -> io::Result<()> {
    if profile.is_probe_based || profile.is_cs {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "Profile encoding format unsupported for writing operations",
        ));
    }
    let tables = Tables::build(profile);
    let mut data = Vec::new();
    write_uleb(&mut data, RAW_BINARY_MAGIC);
    write_uleb(&mut data, VERSION);
    data.extend_from_slice(&summary_bytes(&ProfileSummary::compute(profile)));
    write_uleb(&mut data, tables.names.len() as u64);
    for name in tables.names.keys() {
        data.extend_from_slice(name.as_bytes());
        data.push(0);
    }
    for fs in profile.sorted_profiles() {
        write_uleb(&mut data, fs.head);
        write_body(profile, &tables, fs, true, &mut data);
    }
    out.write_all(&data)
}

/// The extbinary bytes of `profile`.
pub fn to_bytes(profile: &SampleProfile) -> Vec<u8> {
    to_bytes_with_symbol_list(profile, &BTreeSet::new())
}

/// The extbinary bytes of `profile` with `symbols` as its profile symbol list
/// (`ProfileSymbolList::write`: the names sorted, each ended by a NUL; empty when none).
pub fn to_bytes_with_symbol_list(profile: &SampleProfile, symbols: &BTreeSet<String>) -> Vec<u8> {
    to_bytes_with(
        profile,
        &WriteOptions {
            symbol_list: Some(symbols),
            ..WriteOptions::default()
        },
    )
}

/// The extbinary bytes of `profile` with what `options` ask for.
pub fn to_bytes_with(profile: &SampleProfile, options: &WriteOptions<'_>) -> Vec<u8> {
    let empty = BTreeSet::new();
    let symbols = options.symbol_list.unwrap_or(&empty);
    let tables = Tables::build(profile);
    let mut out = Vec::new();
    write_uleb(&mut out, MAGIC);
    write_uleb(&mut out, VERSION);
    out.extend_from_slice(&(DEFAULT_LAYOUT.len() as u64).to_le_bytes());
    let table_offset = out.len();
    out.resize(table_offset + DEFAULT_LAYOUT.len() * 32, 0xff);

    let mut entries: Vec<Option<SecHdrEntry>> = vec![None; DEFAULT_LAYOUT.len()];
    let mut section = |out: &mut Vec<u8>, layout_idx: usize, flags: u64, data: &[u8]| {
        let offset = out.len() as u64;
        out.extend_from_slice(data);
        entries[layout_idx] = Some(SecHdrEntry {
            ty: DEFAULT_LAYOUT[layout_idx],
            flags,
            offset,
            size: data.len() as u64,
        });
    };

    // Summary.
    let mut flags = 0;
    if profile.is_cs {
        flags |= FLAG_FULL_CONTEXT;
    }
    if profile.is_preinlined {
        flags |= FLAG_IS_PREINLINED;
    }
    if profile.is_fs {
        flags |= FLAG_FS_DISCRIMINATOR;
    }
    section(
        &mut out,
        0,
        flags,
        &summary_bytes(&ProfileSummary::compute_with(
            profile,
            options.contextless_summary,
        )),
    );

    // NameTable: the names in index order, as strings or as their MD5 hashes.
    let mut data = Vec::new();
    write_uleb(&mut data, tables.names.len() as u64);
    let flags = if options.use_md5 {
        for name in tables.names.keys() {
            data.extend_from_slice(&symbolizer::guid::function_guid(name).to_le_bytes());
        }
        FLAG_MD5_NAME | FLAG_FIXED_LENGTH_MD5
    } else {
        for name in tables.names.keys() {
            data.extend_from_slice(name.as_bytes());
            data.push(0);
        }
        let uniq = tables.names.keys().any(|n| n.contains(".__uniq."));
        if uniq {
            FLAG_UNIQ_SUFFIX
        } else {
            0
        }
    };
    section(&mut out, 1, flags, &data);

    // CSNameTable.
    let mut data = Vec::new();
    write_uleb(&mut data, tables.contexts.len() as u64);
    for ctx in tables.contexts.keys() {
        write_uleb(&mut data, ctx.frames.len() as u64);
        for f in &ctx.frames {
            write_uleb(&mut data, tables.name_idx(&f.func));
            write_uleb(&mut data, u64::from(f.location.line_offset));
            write_uleb(&mut data, u64::from(f.location.discriminator));
        }
    }
    section(&mut out, 2, 0, &data);

    // LBRProfile, remembering each record's offset in the section.
    let mut data = Vec::new();
    let mut offsets: Vec<(&FunctionSamples, u64)> = Vec::new();
    for fs in profile.sorted_profiles() {
        offsets.push((fs, data.len() as u64));
        write_uleb(&mut data, fs.head);
        write_body(profile, &tables, fs, true, &mut data);
    }
    section(&mut out, 4, 0, &data);

    // ProfileSymbolList (empty without `--populate-profile-symbol-list`).
    let mut data = Vec::new();
    for name in symbols {
        data.extend_from_slice(name.as_bytes());
        data.push(0);
    }
    section(&mut out, 5, 0, &data);

    // FuncOffsetTable: sorted by context for CS (Ordered), else in writing order.
    let mut data = Vec::new();
    let mut flags = 0;
    if profile.is_cs {
        offsets.sort_by(|a, b| a.0.context.cmp(&b.0.context));
        flags |= FLAG_ORDERED;
    }
    write_uleb(&mut data, offsets.len() as u64);
    for (fs, off) in &offsets {
        write_uleb(&mut data, tables.context_idx(profile, fs));
        write_uleb(&mut data, *off);
    }
    section(&mut out, 3, flags, &data);

    // FuncMetadata.
    let mut data = Vec::new();
    let mut flags = 0;
    if profile.is_probe_based {
        flags |= FLAG_IS_PROBE_BASED;
    }
    if profile.is_cs || profile.is_preinlined {
        flags |= FLAG_HAS_ATTRIBUTE;
    }
    if profile.is_probe_based || profile.is_cs || profile.is_preinlined {
        for fs in profile.profiles.values() {
            write_metadata(profile, &tables, fs, true, &mut data);
        }
    }
    section(&mut out, 6, flags, &data);

    for (i, e) in entries.iter().enumerate() {
        // Every layout index is written above.
        let Some(e) = e else { continue };
        let at = table_offset + i * 32;
        out[at..at + 8].copy_from_slice(&(e.ty as u64).to_le_bytes());
        out[at + 8..at + 16].copy_from_slice(&e.flags.to_le_bytes());
        out[at + 16..at + 24].copy_from_slice(&e.offset.to_le_bytes());
        out[at + 24..at + 32].copy_from_slice(&e.size.to_le_bytes());
    }
    out
}

fn summary_bytes(s: &ProfileSummary) -> Vec<u8> {
    let mut d = Vec::new();
    for v in [
        s.total_count,
        s.max_count,
        s.max_function_count,
        s.num_counts,
        s.num_functions,
        s.detailed.len() as u64,
    ] {
        write_uleb(&mut d, v);
    }
    for e in &s.detailed {
        write_uleb(&mut d, u64::from(e.cutoff));
        write_uleb(&mut d, e.min_count);
        write_uleb(&mut d, e.num_counts);
    }
    d
}

/// `writeBody`: context index, total, body records, call sites (nested bodies use the
/// callee's name index).
fn write_body(
    profile: &SampleProfile,
    tables: &Tables,
    fs: &FunctionSamples,
    top_level: bool,
    d: &mut Vec<u8>,
) {
    let idx = if top_level {
        tables.context_idx(profile, fs)
    } else {
        tables.name_idx(fs.name())
    };
    write_uleb(d, idx);
    write_uleb(d, fs.total);
    write_uleb(d, fs.body.len() as u64);
    for (loc, b) in &fs.body {
        write_uleb(d, u64::from(loc.line_offset));
        write_uleb(d, u64::from(loc.discriminator));
        write_uleb(d, b.count);
        write_uleb(d, b.call_targets.len() as u64);
        for (name, count) in b.sorted_call_targets() {
            write_uleb(d, tables.name_idx(name));
            write_uleb(d, count);
        }
    }
    let n: usize = fs.callsites.values().map(|c| c.len()).sum();
    write_uleb(d, n as u64);
    for (loc, callees) in &fs.callsites {
        for callee in callees.values() {
            write_uleb(d, u64::from(loc.line_offset));
            write_uleb(d, u64::from(loc.discriminator));
            write_body(profile, tables, callee, false, d);
        }
    }
}

/// `writeFuncMetadata`: context index, checksum (probe), attributes (CS or pre-inlined),
/// and for nested profiles the call sites recursively.
fn write_metadata(
    profile: &SampleProfile,
    tables: &Tables,
    fs: &FunctionSamples,
    top_level: bool,
    d: &mut Vec<u8>,
) {
    let idx = if top_level {
        tables.context_idx(profile, fs)
    } else {
        tables.name_idx(fs.name())
    };
    write_uleb(d, idx);
    if profile.is_probe_based {
        write_uleb(d, fs.checksum);
    }
    if profile.is_cs || profile.is_preinlined {
        write_uleb(d, u64::from(fs.attributes));
    }
    if !profile.is_cs {
        let n: usize = fs.callsites.values().map(|c| c.len()).sum();
        write_uleb(d, n as u64);
        for (loc, callees) in &fs.callsites {
            for callee in callees.values() {
                write_uleb(d, u64::from(loc.line_offset));
                write_uleb(d, u64::from(loc.discriminator));
                write_metadata(profile, tables, callee, false, d);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::llvm_text;
    use crate::format::llvm_text::tests::{cs_probe_profile, nested_profile};
    use std::process::Command;
    use symbolizer::profile::LineLocation;

    /// Runs `llvm-profdata-19 ARGS FILE -o -` on `bytes`; None when the tool is missing.
    fn profdata(args: &[&str], bytes: &[u8], tag: &str) -> Option<String> {
        let path = std::env::temp_dir().join(format!(
            "pgo-agent-extbinary-{}-{tag}.prof",
            std::process::id()
        ));
        std::fs::write(&path, bytes).unwrap();
        let out = Command::new("llvm-profdata-19")
            .args(args)
            .arg(&path)
            .output()
            .ok()?;
        let _ = std::fs::remove_file(&path);
        assert!(
            out.status.success(),
            "llvm-profdata failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Some(String::from_utf8(out.stdout).unwrap())
    }

    fn round_trip(p: &SampleProfile, tag: &str) {
        let bytes = to_bytes(p);
        let Some(text) = profdata(&["merge", "--sample", "--text", "-o", "-"], &bytes, tag) else {
            eprintln!("llvm-profdata-19 not installed; skipping");
            return;
        };
        assert_eq!(text, llvm_text::to_string(p));
    }

    fn flat_line_profile() -> SampleProfile {
        let mut p = SampleProfile::default();
        let m = p.profile_mut(&SampleContext::from_name("main"));
        m.total = 1200;
        m.head = 3;
        m.add_body_samples(LineLocation::new(1, 0), 100);
        m.add_body_samples(LineLocation::new(2, 3), 0);
        m.add_called_target_samples(LineLocation::new(1, 0), "foo", 60);
        m.add_called_target_samples(LineLocation::new(1, 0), "bar", 60);
        let inl = m.callee_mut(LineLocation::new(4, 0), "baz");
        inl.total = 300;
        inl.add_body_samples(LineLocation::new(65533, 0), 300);
        let f = p.profile_mut(&SampleContext::from_name("foo"));
        f.total = 70;
        f.head = 60;
        f.add_body_samples(LineLocation::new(0, 0), 60);
        p
    }

    #[test]
    fn header_and_section_table_layout() {
        let bytes = to_bytes(&flat_line_profile());
        assert_eq!(
            &bytes[..10],
            &[0x84, 0xe4, 0xd0, 0xb1, 0xf4, 0xc9, 0x94, 0xa8, 0x53, 0x67]
        );
        assert_eq!(&bytes[10..18], &7u64.to_le_bytes());
        let entry = |i: usize| -> [u64; 4] {
            let at = 18 + i * 32;
            let r = |k: usize| {
                u64::from_le_bytes(bytes[at + k * 8..at + k * 8 + 8].try_into().unwrap())
            };
            [r(0), r(1), r(2), r(3)]
        };
        let types: Vec<u64> = (0..7).map(|i| entry(i)[0]).collect();
        assert_eq!(types, vec![1, 2, 6, 4, 32, 3, 5]);
        // Summary data starts right after the table; sections follow in write order:
        // CSNameTable (1 byte, `00`) is directly followed by the profiles.
        assert_eq!(entry(0)[2], 18 + 7 * 32);
        assert_eq!(entry(2)[3], 1);
        assert_eq!(entry(4)[2], entry(2)[2] + 1);
        assert_eq!(entry(3)[2], entry(4)[2] + entry(4)[3]);
        // Name table: "bar", "baz", "foo", "main", NUL-terminated, in byte order.
        let nt = entry(1);
        assert_eq!(
            &bytes[nt[2] as usize..(nt[2] + nt[3]) as usize],
            b"\x04bar\0baz\0foo\0main\0"
        );
        // Non-probe, non-CS: FuncMetadata empty.
        assert_eq!(entry(6)[3], 0);
    }

    #[test]
    fn md5_name_table_holds_each_name_hash_in_name_order() {
        let options = WriteOptions {
            use_md5: true,
            ..WriteOptions::default()
        };
        let bytes = to_bytes_with(&flat_line_profile(), &options);
        let at = 18 + 32;
        let word =
            |k: usize| u64::from_le_bytes(bytes[at + k * 8..at + k * 8 + 8].try_into().unwrap());
        assert_eq!(word(0), SecType::NameTable as u64);
        assert_eq!(word(1), FLAG_MD5_NAME | FLAG_FIXED_LENGTH_MD5);
        let mut expected = vec![4u8];
        for name in ["bar", "baz", "foo", "main"] {
            expected.extend_from_slice(&symbolizer::guid::function_guid(name).to_le_bytes());
        }
        assert_eq!(
            &bytes[word(2) as usize..(word(2) + word(3)) as usize],
            &expected[..]
        );
        // The profile records are the string table's: the same indices.
        assert_eq!(bytes.len(), to_bytes(&flat_line_profile()).len() - 17 + 32);
    }

    #[test]
    fn profile_symbol_list_reads_back_sorted() {
        let symbols: BTreeSet<String> = ["zeta", "main", "_Z3fooi"]
            .into_iter()
            .map(String::from)
            .collect();
        let bytes = to_bytes_with_symbol_list(&flat_line_profile(), &symbols);
        let Some(text) = profdata(&["show", "--sample", "--show-prof-sym-list"], &bytes, "psl")
        else {
            eprintln!("llvm-profdata-19 not installed; skipping");
            return;
        };
        let list = text.split("profile symbol list").nth(1).unwrap_or_default();
        assert_eq!(
            list.lines()
                .filter(|l| !l.contains("="))
                .collect::<Vec<_>>(),
            vec!["_Z3fooi", "main", "zeta"],
            "{text}"
        );
    }

    #[test]
    fn flat_line_profile_round_trips_through_llvm_profdata() {
        round_trip(&flat_line_profile(), "flat");
    }

    #[test]
    fn cs_probe_profile_round_trips_through_llvm_profdata() {
        round_trip(&cs_probe_profile(), "csprobe");
    }

    #[test]
    fn preinlined_nested_profile_round_trips_through_llvm_profdata() {
        let mut p = nested_profile();
        p.is_preinlined = true;
        round_trip(&p, "nested");
        if let Some(info) = profdata(
            &["show", "--sample", "--show-sec-info-only"],
            &to_bytes(&p),
            "secinfo",
        ) {
            assert!(info.contains("preInlined"), "{info}");
        }
    }

    #[test]
    fn cs_summary_flags_are_reported() {
        let Some(info) = profdata(
            &["show", "--sample", "--show-sec-info-only"],
            &to_bytes(&cs_probe_profile()),
            "csinfo",
        ) else {
            return;
        };
        assert!(info.contains("Flags: {context}"), "{info}");
        assert!(info.contains("{probe,attr}"), "{info}");
    }
}
