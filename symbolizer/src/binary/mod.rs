//! [`ProfiledBinary`]: an x86-64 ELF binary loaded the way llvm-profgen 19's `ProfiledBinary`
//! loads it — preferred load layout, disassembled text (it implements the unwinder's
//! [`CodeLayout`]), functions from DWARF, inline frames per instruction, pseudo probes.
//!
//! Everything is decoded at [`ProfiledBinary::load`]; lookups never parse. A binary without
//! DWARF and without placed pseudo probes can instead be loaded with a [`LazyCode`] that
//! decodes its code on demand ([`ProfiledBinary::from_shared_bytes_with_lookup`]). Inline frames are
//! computed lazily per instruction and cached (thread-safe), like llvm-profgen's
//! `getCachedFrameLocationStack`.

mod address_memo;
pub mod branch;
mod debug_lookup;
pub mod disasm;
mod exports;
mod frame_cache;
pub mod frame_setup;
pub mod functions;
pub mod lazy_code;
pub mod name_source;
pub mod segments;
mod start_bits;
pub mod unwind_extents;
mod view;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use collector::BuildId;
use object::elf;
use object::read::elf::{ElfFile64, FileHeader, SectionHeader as _};
use object::{Endianness, Object, ObjectSection};
use unwinder::{CodeLayout, FrameSetup, RangeChecks};

pub use debug_lookup::lacks_names;
pub use disasm::CodeMap;
pub use functions::{BinaryFunction, FuncRange, FunctionTable};
pub use lazy_code::{LazyCode, SharedBytes};
pub use name_source::NameSource;
pub use segments::LoadSegments;

use crate::dwarf::sections::SectionBytes;
use crate::dwarf::{discriminator, DwarfInfo};
use crate::error::SymbolizerError;
use crate::probe::{
    desc::decode_desc_section, InlineNodeId, ProbeDesc, ProbeFrame, ProbeStore, PseudoProbe,
};
use crate::symtab::SymbolTable;

/// Largest binary accepted.
pub const MAX_BINARY_BYTES: u64 = 8 << 30;

/// The symbol whose presence in a data section marks flow-sensitive discriminators
/// (llvm-profgen `checkUseFSDiscriminator`).
pub const FS_DISCRIMINATOR_SYMBOL: &str = "__llvm_fs_discriminator__";

/// Options of [`ProfiledBinary::load_with`]. The default is llvm-profgen 19's behaviour.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LoadOptions {
    /// Also create functions from `STT_FUNC` symbols whose start no DWARF range covers (newer
    /// llvm-profgen's `--load-function-from-symbol`; llvm-profgen 19 has no such option and
    /// knows DWARF functions only).
    pub load_functions_from_symbols: bool,
    /// Functions from `STT_FUNC` symbols when neither the binary nor its debug file has
    /// DWARF functions or pseudo probes (a build without `-g`): its functions are named
    /// for pprof and flame graphs (the daemon's HTTP store). With `lazy_code`, an
    /// address-only binary (no symbol table anywhere) also keeps its exported `.dynsym`
    /// functions, which [`ProfiledBinary::function_label`] names its extents by. Counting
    /// and sample profiles are not for such binaries (no lines to key them by), so the
    /// counting paths leave it off and keep llvm-profgen 19's empty function table.
    pub symbol_functions_without_dwarf: bool,
    /// Ignore pseudo probes even when present (llvm-profgen `--use-dwarf-correlation`).
    pub use_dwarf_correlation: bool,
    /// The shared bytes given to [`ProfiledBinary::from_shared_bytes_with_lookup`] are a
    /// read-only mapping of the file: a [`LazyCode`] over them gives back the pages of each
    /// extent it decodes (`MADV_DONTNEED`; the kernel maps 64 KiB around each touched page
    /// of a cached file, so decoding the functions samples reach would otherwise keep
    /// tens of megabytes of a large library resident). Never set it for bytes on the heap:
    /// their pages would read back as zeros.
    pub release_decoded_pages: bool,
    /// Decode the code on demand whatever the binary has (DWARF, placed pseudo probes):
    /// the binary keeps a [`LazyCode`] over the file's memory map and answers every code
    /// query from it, exactly as the eager load would (`convert`: its memory and time grow
    /// with the code the samples reach, not with the file). Needs shared bytes
    /// ([`ProfiledBinary::load_split`] maps the file; [`ProfiledBinary::from_bytes`]
    /// ignores it). [`ProfiledBinary::code`] is then empty and
    /// [`ProfiledBinary::prolog_epilog_addresses`] unlisted.
    pub lazy_code: bool,
    /// With [`LoadOptions::lazy_code`]: a range check over more than
    /// [`lazy_code::MAX_RANGE_EXTENTS`] functions is answered `true` without decoding them
    /// (the daemon, which bounds the work one sample can cost); otherwise every answer is
    /// the eager one (the command-line tools, whose output must be llvm-profgen's).
    pub bounded_range_checks: bool,
    /// Where the split units of a `-gsplit-dwarf` binary are read from (llvm-profgen's
    /// `--dwp`; by default `<file>.dwp` beside the file the DWARF is read from, else the
    /// `.dwo` files its skeleton units name).
    pub split_dwarf: crate::dwarf::SplitDwarf,
}

/// One inline frame of an instruction, outermost first in a stack (llvm-profgen
/// `SampleContextFrame` as built by `ProfiledBinary::symbolize`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct FrameLocation {
    /// The DWARF linkage name (else short name), as llvm-profgen 19's cached frames hold it
    /// (`getFrameLocationStack` passes `UseCanonicalFnName = false`); see
    /// [`crate::canonical_function_name`].
    pub func_name: String,
    /// `(line - DW_AT_decl_line) & 0xffff`, or the probe index in probe-discriminator mode.
    pub line_offset: u32,
    /// The raw DWARF discriminator (0 in probe-discriminator mode).
    pub discriminator: u32,
}

/// A binary loaded for profiling; see the module docs.
pub struct ProfiledBinary {
    path: PathBuf,
    name: String,
    build_id: Option<BuildId>,
    names: NameSource,
    segments: LoadSegments,
    code: CodeMap,
    /// The code decoded on demand ([`LoadOptions::lazy_code`]); `code` is then empty.
    lazy: Option<Arc<LazyCode>>,
    functions: FunctionTable,
    prolog_epilog: Vec<u64>,
    dwarf: DwarfInfo,
    frame_cache: frame_cache::FrameCache,
    probes: ProbeStore,
    probe_descs: HashMap<u64, ProbeDesc>,
    has_pseudo_probes: bool,
    uses_fs_discriminator: bool,
    /// An address-only binary's exported functions, to name its extents
    /// ([`LoadOptions::symbol_functions_without_dwarf`] with `lazy_code`).
    exports: Option<exports::Exports>,
}

impl std::fmt::Debug for ProfiledBinary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProfiledBinary")
            .field("path", &self.path)
            .field("build_id", &self.build_id)
            .field("instructions", &self.code.len())
            .field("functions", &self.functions.functions().len())
            .field("probes", &self.probes.len())
            .finish()
    }
}

impl ProfiledBinary {
    /// Loads `path` with llvm-profgen 19's default behaviour.
    pub fn load(path: &Path) -> Result<ProfiledBinary, SymbolizerError> {
        Self::load_with(path, &LoadOptions::default())
    }

    /// Loads `path` with `options`.
    pub fn load_with(
        path: &Path,
        options: &LoadOptions,
    ) -> Result<ProfiledBinary, SymbolizerError> {
        Self::load_split(path, None, options)
    }

    /// Loads the binary `path` (the file that ran: code, segments, probes) with its names
    /// and DWARF from the separate `debug` file when one is given (llvm-profgen's
    /// `--debug-binary`; see [`name_source`]). Both files are memory-mapped, not copied.
    pub fn load_split(
        path: &Path,
        debug: Option<&Path>,
        options: &LoadOptions,
    ) -> Result<ProfiledBinary, SymbolizerError> {
        let data: Arc<memmap2::Mmap> = Arc::new(map_file(path)?);
        let shared: SharedBytes = data.clone();
        let debug_data = debug
            .map(|d| map_file(d).map(|m| (d, Arc::new(m))))
            .transpose()?;
        let debug_shared: Option<SharedBytes> = debug_data
            .as_ref()
            .map(|(_, m)| -> SharedBytes { m.clone() });
        Self::load_parts(
            path,
            &data,
            debug_data.as_ref().map(|(p, m)| DebugFileBytes {
                path: p,
                data: &m[..],
                shared: debug_shared.as_ref().filter(|_| options.lazy_code),
            }),
            options,
            options.lazy_code.then_some(&shared),
        )
        .map(|(binary, _)| binary)
    }

    /// Loads from bytes already in memory; `path` names the binary in errors and [`Self::name`].
    pub fn from_bytes(
        path: &Path,
        data: &[u8],
        options: &LoadOptions,
    ) -> Result<ProfiledBinary, SymbolizerError> {
        Self::from_parts(path, data, None, options)
    }

    /// Loads the binary `data` (named `path`) with its separate debug file, if any.
    pub fn from_parts(
        path: &Path,
        data: &[u8],
        debug: Option<DebugFileBytes<'_>>,
        options: &LoadOptions,
    ) -> Result<ProfiledBinary, SymbolizerError> {
        Self::load_parts(path, data, debug, options, None).map(|(binary, _)| binary)
    }

    /// Loads the binary `data` (named `path`, no debug file lookup) without decoding its
    /// code when a [`LazyCode`] can stand for it: see
    /// [`ProfiledBinary::from_shared_bytes_with_lookup`].
    pub fn from_shared_bytes(
        path: &Path,
        data: SharedBytes,
        options: &LoadOptions,
    ) -> Result<(ProfiledBinary, Option<Arc<LazyCode>>), SymbolizerError> {
        let bytes: &[u8] = (*data).as_ref();
        Self::load_parts(path, bytes, None, options, Some(&data))
    }

    /// [`ProfiledBinary::from_parts`]; with `shared` (the bytes `data` points into), a
    /// binary without DWARF and without placed pseudo probes is loaded with an empty
    /// [`CodeMap`] and returned with the [`LazyCode`] that decodes it on demand.
    fn load_parts(
        path: &Path,
        data: &[u8],
        debug: Option<DebugFileBytes<'_>>,
        options: &LoadOptions,
        shared: Option<&SharedBytes>,
    ) -> Result<(ProfiledBinary, Option<Arc<LazyCode>>), SymbolizerError> {
        let file = parse_elf(path, data)?;
        let endian = file.endian();
        let debug_shared = debug.and_then(|d| d.shared);
        let debug_file = match debug {
            Some(d) => Some((parse_elf(d.path, d.data)?, d.path)),
            None => None,
        };
        let build_id = file.build_id().ok().flatten().map(|b| BuildId(b.to_vec()));
        if let Some((d, dpath)) = &debug_file {
            let theirs = d.build_id().ok().flatten().map(|b| BuildId(b.to_vec()));
            if let (Some(ours), Some(theirs)) = (&build_id, theirs) {
                if *ours != theirs {
                    return Err(SymbolizerError::DebugFileMismatch {
                        path: path.to_path_buf(),
                        debug: dpath.to_path_buf(),
                        binary_id: ours.to_hex(),
                        debug_id: theirs.to_hex(),
                    });
                }
            }
        }

        // setPreferredTextSegmentAddresses.
        let headers = crate::elf_image::program_headers(data).map_err(|what| {
            SymbolizerError::InvalidElf {
                path: path.to_path_buf(),
                what,
            }
        })?;
        let segments = LoadSegments::from_program_headers(headers).ok_or_else(|| {
            SymbolizerError::NoExecutableSegment {
                path: path.to_path_buf(),
            }
        })?;
        let preferred_base = segments.preferred_base();

        // loadSymbolsFromDWARF: from the debug file when it has DWARF.
        let mut dwarf = match (&debug_file, debug_shared) {
            (Some((d, dpath)), owner) if d.section_by_name(".debug_info").is_some() => {
                DwarfInfo::load_split(
                    d,
                    dpath,
                    owner,
                    &options.split_dwarf,
                    options.release_decoded_pages,
                )?
            }
            _ => DwarfInfo::load_split(
                &file,
                path,
                shared.filter(|_| options.lazy_code),
                &options.split_dwarf,
                options.release_decoded_pages,
            )?,
        };
        let chosen =
            name_source::choose_symbols(&file, path, debug_file.as_ref().map(|(d, p)| (d, *p)))?;
        let symbols = chosen.table;
        let mut subprograms = dwarf.take_subprograms();
        let has_dwarf_functions = !subprograms.is_empty() || !dwarf.is_empty();
        // A probe binary with symbols but no DWARF anywhere (`strip --strip-debug`, no
        // debug file found): its probes are placed through the symbols, so the symbols'
        // extents are its functions too. (llvm-profgen 19 places probes at DWARF function
        // starts and writes an empty profile; with DWARF functions but no symbol extents a
        // probe would be counted in no function, and the profile would lose most of it.)
        let probes_by_symbols = !has_dwarf_functions
            && !options.use_dwarf_correlation
            && chosen.source.has_names()
            && [Some(&file), debug_file.as_ref().map(|(d, _)| d)]
                .into_iter()
                .flatten()
                .any(|f| f.section_by_name(".pseudo_probe").is_some());
        let names_without_dwarf = options.symbol_functions_without_dwarf
            && !has_dwarf_functions
            && chosen.source.has_names();
        if options.load_functions_from_symbols || probes_by_symbols || names_without_dwarf {
            add_symbol_functions(&mut subprograms, &symbols, &file);
        }
        if subprograms.is_empty() && !chosen.source.has_names() {
            // No names anywhere: the unwind table's extents are the functions, so prologs,
            // epilogs and function ranges are known for counting. (A binary with symbols
            // but no DWARF keeps llvm-profgen 19's behaviour: no functions, unless
            // `load_functions_from_symbols`.)
            add_symbol_functions(&mut subprograms, &symbols, &file);
            // Except the ELF entry point: `_start` (crt1.o) has an FDE but no DWARF, so the
            // unstripped build has no function there, and a sample in its first two
            // instructions is kept, not dropped as a prolog (it has no caller frame to
            // miss).
            let entry = file.entry();
            subprograms.retain(|(_, ranges)| ranges.first().is_none_or(|r| r.0 != entry));
        }
        let mut functions = FunctionTable::build(subprograms, preferred_base);

        // What the DWARF pass read (all of `.debug_info`, every line table once) is not
        // read again but per unit: its pages go now, not at the end of the load.
        let release_read = || {
            if options.release_decoded_pages {
                LazyCode::release(data);
                if let Some(d) = debug.filter(|d| d.shared.is_some()) {
                    LazyCode::release(d.data);
                }
            }
        };
        release_read();

        // checkPseudoProbe: the binary's probe sections, else the debug file's (`llvm-strip
        // -s` removes them from the binary; `objcopy --only-keep-debug` keeps them).
        let (desc_section, probe_section) = match (
            file.section_by_name(".pseudo_probe_desc"),
            file.section_by_name(".pseudo_probe"),
        ) {
            (Some(desc), Some(probe)) => (Some((desc, path)), Some((probe, path))),
            _ => match &debug_file {
                Some((d, dpath)) => (
                    d.section_by_name(".pseudo_probe_desc").map(|s| (s, *dpath)),
                    d.section_by_name(".pseudo_probe").map(|s| (s, *dpath)),
                ),
                None => (None, None),
            },
        };
        let has_pseudo_probes =
            !options.use_dwarf_correlation && desc_section.is_some() && probe_section.is_some();

        // disassemble: the decode extents, in section order.
        let mut extents: Vec<(&[u8], u64, u64, u64)> = Vec::new();
        let mut uses_fs_discriminator = false;
        for section in file.sections() {
            let header = section.elf_section_header();
            let flags = header.sh_flags(endian).0;
            let size = header.sh_size(endian);
            let name = section.name().unwrap_or("");
            let is_text = flags & elf::SHF_EXECINSTR.0 != 0;
            let is_data = header.sh_type(endian) == elf::SHT_PROGBITS
                && flags & elf::SHF_ALLOC.0 != 0
                && !is_text;
            if size == 0 {
                continue;
            }
            let sorted = symbols.sorted_in_section(section.index().0);
            if is_data && sorted.iter().any(|s| s.name == FS_DISCRIMINATOR_SYMBOL) {
                uses_fs_discriminator = true;
            }
            if !is_text || name == ".plt" {
                continue;
            }
            let bytes = section_bytes(&section, path)?;
            let section_addr = section.address();
            let section_end = section_addr.saturating_add(size);
            for (i, sym) in sorted.iter().enumerate() {
                let next = sorted.get(i + 1).map_or(section_end, |s| s.address);
                functions.note_text_symbol(sym.address, &sym.name);
                extents.push((bytes, section_addr, sym.address, next));
            }
        }

        // decodePseudoProbe.
        // Each function's first probe is placed relative to its symbol: without symbols
        // (address only) the probes cannot be placed, and only the descriptors are read.
        let (probes, probe_descs) = match (has_pseudo_probes, desc_section, probe_section) {
            (true, Some((desc, desc_path)), Some((probe, probe_path))) => {
                let malformed =
                    |path: &Path, section: &'static str, e: crate::probe::DecodeError| {
                        SymbolizerError::MalformedSection {
                            path: path.to_path_buf(),
                            section,
                            offset: e.offset,
                            what: e.what,
                        }
                    };
                let descs = decode_desc_section(section_bytes(&desc, desc_path)?)
                    .map_err(|e| malformed(desc_path, ".pseudo_probe_desc", e))?;
                let probes = if chosen.source.has_names() {
                    // Kept as a range of the file's map when there is one, else copied.
                    let owner = if probe_path == path {
                        shared
                    } else {
                        debug_shared
                    };
                    let bytes = SectionBytes::keep(section_bytes(&probe, probe_path)?, owner);
                    ProbeStore::index(bytes, symbols.guid_to_address())
                        .map_err(|e| malformed(probe_path, ".pseudo_probe", e))?
                        .releasing_decoded_pages(options.release_decoded_pages)
                } else {
                    ProbeStore::default()
                };
                (probes, descs)
            }
            _ => (ProbeStore::default(), HashMap::new()),
        };

        let lazy = match shared {
            Some(shared) if options.lazy_code || (!has_dwarf_functions && probes.is_empty()) => {
                lazy_layout(shared, data, &extents, &functions, has_pseudo_probes).map(|l| {
                    if options.release_decoded_pages {
                        // What loading read (headers, `.eh_frame`, symbol tables) is
                        // not read again.
                        LazyCode::release(data);
                    }
                    l.releasing_decoded_pages(options.release_decoded_pages)
                        .with_exact_ranges(!options.bounded_range_checks)
                })
            }
            _ => None,
        };
        let lazy = lazy.map(Arc::new);
        // With `lazy_code` the binary answers from it itself; otherwise it is returned
        // apart, for a binary that answers as one without code.
        let (internal, lazy) = match options.lazy_code {
            true => (lazy, None),
            false => (None, lazy),
        };
        let (code, prolog_epilog) = if lazy.is_some() || internal.is_some() {
            (CodeMap::default(), Vec::new())
        } else {
            let mut builder = disasm::CodeMapBuilder::default();
            builder.reserve_for_code_bytes(
                file.sections()
                    .filter(|s| {
                        s.elf_section_header().sh_flags(endian).0 & elf::SHF_EXECINSTR.0 != 0
                            && s.name() != Ok(".plt")
                    })
                    .map(|s| s.size())
                    .sum(),
            );
            for &(bytes, section_addr, start, end) in &extents {
                builder.disassemble(bytes, section_addr, start, end);
            }
            let code = builder.finish();
            let prolog_epilog = prolog_epilog_addresses(&code, &functions);
            (code, prolog_epilog)
        };
        drop(extents);

        let frame_cache = frame_cache::FrameCache::new(
            internal.as_ref().map_or(code.len(), |l| l.index_capacity()),
        );
        // The names are read from the mapped file the binary's own lazy code keeps.
        let exports = (options.symbol_functions_without_dwarf
            && internal.is_some()
            && chosen.source == NameSource::AddressOnly)
            .then(|| exports::Exports::of(&file))
            .flatten();
        let binary = ProfiledBinary {
            path: path.to_path_buf(),
            name: path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            build_id,
            names: chosen.source,
            segments,
            code,
            lazy: internal,
            functions,
            prolog_epilog,
            dwarf,
            frame_cache,
            probes,
            probe_descs,
            has_pseudo_probes,
            uses_fs_discriminator,
            exports,
        };
        Ok((binary, lazy))
    }

    /// The path the binary was loaded from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file name, which perf MMAP events are matched against (llvm-profgen `getName`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Where the binary's names come from (its own symbols, a debug file, or none).
    pub fn name_source(&self) -> &NameSource {
        &self.names
    }

    /// The GNU build id, if the binary has one.
    pub fn build_id(&self) -> Option<&BuildId> {
        self.build_id.as_ref()
    }

    /// Page-aligned vaddr of the first executable `PT_LOAD`.
    pub fn preferred_base(&self) -> u64 {
        self.segments.preferred_base()
    }

    /// Page-aligned vaddr of the first loadable segment (llvm-profgen's quirky rule, see
    /// [`segments`]).
    pub fn first_loadable_address(&self) -> u64 {
        self.segments.first_loadable_address
    }

    /// Page-aligned file offsets of the executable segments.
    pub fn text_segment_offsets(&self) -> &[u64] {
        &self.segments.text_segment_offsets
    }

    /// Page-aligned vaddrs of the executable segments.
    pub fn preferred_text_segment_addresses(&self) -> &[u64] {
        &self.segments.preferred_text_segment_addresses
    }

    /// The decoded instructions.
    pub fn code(&self) -> &CodeMap {
        &self.code
    }

    /// Instructions with `start <= addr <= end_inclusive`, as (address, byte size).
    pub fn instructions_in(
        &self,
        start: u64,
        end_inclusive: u64,
    ) -> impl Iterator<Item = (u64, u32)> + '_ {
        let (eager, lazy) = match &self.lazy {
            Some(lazy) => (None, Some(lazy.instructions_in(start, end_inclusive))),
            None => (Some(self.code.instructions_in(start, end_inclusive)), None),
        };
        eager
            .into_iter()
            .flatten()
            .chain(lazy.into_iter().flatten())
    }

    /// The byte size of the instruction at `addr`, if one starts there.
    pub fn instruction_size(&self, addr: u64) -> Option<u32> {
        match &self.lazy {
            Some(lazy) => lazy.size(addr),
            None => self.code.size(addr),
        }
    }

    /// The kind bits (`disasm::KIND_*`) of the instruction at `addr`; 0 when none starts
    /// there.
    pub fn instruction_kind(&self, addr: u64) -> u8 {
        match &self.lazy {
            Some(lazy) => lazy.kind(addr),
            None => self.code.kind(addr),
        }
    }

    /// True when the binary's DWARF (its own or its debug file's) has compilation units with
    /// code: inline frames and lines can be looked up.
    pub fn has_line_info(&self) -> bool {
        !self.dwarf.is_empty()
    }

    /// Skeleton units (`-gsplit-dwarf`) whose split unit no DWARF package or `.dwo` file
    /// held ([`DwarfInfo::missing_split_units`]).
    pub fn missing_split_units(&self) -> usize {
        self.dwarf.missing_split_units()
    }

    /// Compilation units whose line table has been read (all of them unless loaded with
    /// [`LoadOptions::lazy_code`]).
    pub fn dwarf_units_with_lines(&self) -> usize {
        self.dwarf.units_with_lines()
    }

    /// True when the DWARF subroutine DIEs (inline frames) are in memory: from load, or,
    /// with [`LoadOptions::lazy_code`], once inline frames were first asked for.
    pub fn dwarf_dies_read(&self) -> bool {
        self.dwarf.dies_read()
    }

    /// Bytes held by what this binary decoded on demand (its share of
    /// [`crate::decoded_bytes`]), given back when it is dropped.
    pub fn decoded_bytes(&self) -> crate::DecodedBytes {
        crate::DecodedBytes {
            code: self.lazy.as_ref().map_or(0, |l| l.held_bytes() as u64),
            probes: (self.probes.decoded() * std::mem::size_of::<crate::probe::PseudoProbe>())
                as u64,
            line_tables: self.dwarf.lazy_line_bytes() as u64,
        }
    }

    /// True when the binary has code to count samples in (decoded or to decode).
    pub fn has_code(&self) -> bool {
        match &self.lazy {
            Some(lazy) => !lazy.is_empty(),
            None => !self.code.is_empty(),
        }
    }

    /// The code decoded on demand, when the binary was loaded with
    /// [`LoadOptions::lazy_code`].
    pub fn lazy_code(&self) -> Option<&LazyCode> {
        self.lazy.as_deref()
    }

    /// The function range containing `addr` (`start <= addr < end`).
    pub fn func_range_at(&self, addr: u64) -> Option<&FuncRange> {
        self.functions.range_at(addr)
    }

    /// What pprof and flame graphs call the function at `addr`: its name; for a function
    /// known only by its extent (an address-only binary's `.eh_frame` FDEs), the hex
    /// address of its start, so that its addresses add up under one frame; outside every
    /// function, `addr` itself in hex.
    pub fn function_label(&self, addr: u64) -> String {
        match self.func_range_at(addr) {
            Some(r) if !r.name.is_empty() => r.name.clone(),
            Some(r) => self
                .exported_name_at(r.start)
                .unwrap_or_else(|| format!("0x{:x}", r.start)),
            None => format!("0x{addr:x}"),
        }
    }

    /// The `.dynsym` name of the function exported at `start`, when the binary was loaded
    /// to name an address-only binary's extents.
    fn exported_name_at(&self, start: u64) -> Option<String> {
        let exports = self.exports.as_ref()?;
        exports.name_at(self.lazy.as_ref()?.bytes(), start)
    }

    /// The range starting exactly at `addr`, entry or not (`findFuncRangeForStartAddr`).
    pub fn func_range_starting_at(&self, addr: u64) -> Option<&FuncRange> {
        self.functions.range_starting_at(addr)
    }

    /// The canonical name of the function whose entry is exactly `addr` (llvm-profgen
    /// `getCalleeNameForAddress`: a range starting there with `IsFuncEntry`).
    pub fn func_entry_name(&self, addr: u64) -> Option<&str> {
        self.functions
            .range_starting_at(addr)
            .filter(|r| r.is_func_entry)
            .map(|r| r.name.as_str())
    }

    /// All functions (name + ranges), in DWARF order.
    pub fn functions(&self) -> impl Iterator<Item = &BinaryFunction> {
        self.functions.functions().iter()
    }

    /// The function table (functions and sorted ranges).
    pub fn function_table(&self) -> &FunctionTable {
        &self.functions
    }

    /// The inline frames of the instruction at `addr`, outermost first, cached; empty when
    /// `addr` is not an instruction start or has no debug info (llvm-profgen
    /// `getCachedFrameLocationStack(addr)` without probe discriminators).
    pub fn inline_frames(&self, addr: u64) -> &[FrameLocation] {
        let index = match &self.lazy {
            Some(lazy) => lazy.dense_index(addr),
            None => self.code.index_of(addr),
        };
        let Some(i) = index else {
            return &[];
        };
        self.frame_cache
            .get_or_init(i, || self.symbolize(addr, false).into_boxed_slice())
    }

    /// `ProfiledBinary::symbolize` for any address, uncached: in probe-discriminator mode
    /// (llvm-profgen uses it for context sizes of probe binaries) each frame's line offset is
    /// the probe index extracted from its discriminator and the discriminator is 0.
    pub fn symbolize(&self, addr: u64, probe_discriminators: bool) -> Vec<FrameLocation> {
        let raw = self.dwarf.inlining_info(addr);
        let mut stack = Vec::with_capacity(raw.len());
        for frame in raw.iter().rev() {
            let Some(name) = frame.name.map(|id| self.dwarf.name(id)) else {
                break;
            };
            if name.is_empty() || name == "<invalid>" {
                break;
            }
            let (line_offset, disc) = if probe_discriminators {
                (discriminator::probe_index(frame.discriminator), 0)
            } else {
                (
                    (frame.line as u32).wrapping_sub(frame.start_line as u32) & 0xffff,
                    frame.discriminator,
                )
            };
            stack.push(FrameLocation {
                func_name: name.to_string(),
                line_offset,
                discriminator: disc,
            });
        }
        stack
    }

    /// True when the binary has both `.pseudo_probe_desc` and `.pseudo_probe`.
    pub fn has_pseudo_probes(&self) -> bool {
        self.has_pseudo_probes
    }

    /// All probes, sorted by address (decodes every function's probes; queries by
    /// address or node decode only the functions they reach).
    pub fn probes(&self) -> Vec<&PseudoProbe> {
        self.probes.all()
    }

    /// The probes of inline-tree node `node`, sorted by address.
    pub fn node_probes(&self, node: InlineNodeId) -> Vec<&PseudoProbe> {
        self.probes.node_probes(node)
    }

    /// The inline-tree nodes that own at least one probe, sorted.
    pub fn nodes_with_probes(&self) -> &[InlineNodeId] {
        self.probes.nodes_with_probes()
    }

    /// The probe store (counts of probes and of those decoded so far).
    pub fn probe_store(&self) -> &ProbeStore {
        &self.probes
    }

    /// The probes at `addr`, in decode order.
    pub fn probes_at(&self, addr: u64) -> &[PseudoProbe] {
        self.probes.probes_at(addr)
    }

    /// The first call probe at `addr` (`getCallProbeForAddr`).
    pub fn call_probe_at(&self, addr: u64) -> Option<&PseudoProbe> {
        self.probes_at(addr).iter().find(|p| p.kind.is_call())
    }

    /// The inline tree node of `probe`.
    pub fn probe_inline_node(&self, probe: &PseudoProbe) -> &crate::probe::InlineTreeNode {
        self.probes.tree().node(probe.node)
    }

    /// The probe inline forest.
    pub fn probe_inline_tree(&self) -> &crate::probe::ProbeInlineTree {
        self.probes.tree()
    }

    /// llvm-profgen `getInlineContextForProbe`: caller → callee frames (function name,
    /// call-site probe index), plus the probe's own (function, index) when `include_leaf`;
    /// a call site with index 0 before the last frame clears what came before it.
    pub fn probe_inline_context(
        &self,
        probe: &PseudoProbe,
        include_leaf: bool,
    ) -> Vec<ProbeFrame<'_>> {
        let mut raw = Vec::new();
        let tree = self.probes.tree();
        let mut node = tree.node(probe.node);
        while let Some(parent) = node.parent {
            let caller = tree.node(parent);
            raw.push(ProbeFrame {
                func_name: self.probe_func_name(caller.guid),
                probe_index: node.site,
            });
            node = caller;
        }
        raw.reverse();
        if include_leaf {
            raw.push(ProbeFrame {
                func_name: self.probe_func_name(probe.guid),
                probe_index: probe.index,
            });
        }
        let mut out = Vec::with_capacity(raw.len());
        let last = raw.len().saturating_sub(1);
        for (i, frame) in raw.into_iter().enumerate() {
            if frame.probe_index == 0 && i != last {
                out.clear();
                continue;
            }
            out.push(frame);
        }
        out
    }

    /// The `.pseudo_probe_desc` record of `guid`.
    pub fn probe_desc(&self, guid: u64) -> Option<&ProbeDesc> {
        self.probe_descs.get(&guid)
    }

    /// All `.pseudo_probe_desc` records.
    pub fn probe_descs(&self) -> &HashMap<u64, ProbeDesc> {
        &self.probe_descs
    }

    fn probe_func_name(&self, guid: u64) -> &str {
        self.probe_descs.get(&guid).map_or("", |d| d.name.as_str())
    }

    /// True when the binary uses flow-sensitive discriminators.
    pub fn uses_fs_discriminator(&self) -> bool {
        self.uses_fs_discriminator
    }

    /// The prolog/epilog heuristic set, sorted.
    pub fn prolog_epilog_addresses(&self) -> &[u64] {
        &self.prolog_epilog
    }
}

impl CodeLayout for ProfiledBinary {
    fn is_code(&self, addr: u64) -> bool {
        match &self.lazy {
            Some(lazy) => lazy.is_code(addr),
            None => self.code.contains(addr),
        }
    }

    fn is_code_each(&self, addrs: &[u64], out: &mut [bool]) {
        match &self.lazy {
            Some(lazy) => lazy.is_code_each(addrs, out),
            // A bit test of the start bitmap (`code_bitmap`) per address.
            None => {
                for (&a, o) in addrs.iter().zip(out) {
                    *o = self.code.contains(a);
                }
            }
        }
    }

    fn is_call(&self, addr: u64) -> bool {
        self.instruction_kind(addr) & disasm::KIND_CALL != 0
    }

    fn is_return(&self, addr: u64) -> bool {
        self.instruction_kind(addr) & disasm::KIND_RETURN != 0
    }

    fn range_crosses_uncond_branch(&self, start: u64, end: u64) -> bool {
        match &self.lazy {
            Some(lazy) => lazy.range_crosses_uncond_branch(start, end),
            None => self.code.range_crosses_uncond_branch(start, end),
        }
    }

    fn previous_instruction(&self, addr: u64) -> Option<u64> {
        match &self.lazy {
            Some(lazy) => lazy.previous_instruction(addr),
            None => self.code.previous_instruction(addr),
        }
    }

    fn is_prolog_or_epilog(&self, addr: u64) -> bool {
        match &self.lazy {
            Some(lazy) => lazy.is_prolog_or_epilog(addr),
            None => self.prolog_epilog.binary_search(&addr).is_ok(),
        }
    }

    fn has_pseudo_probes(&self) -> bool {
        self.has_pseudo_probes
    }

    fn inline_context_equal(&self, a: u64, b: u64) -> bool {
        if !self.has_line_info() {
            // No DWARF: no instruction has inline frames.
            return false;
        }
        let (fa, fb) = (self.inline_frames(a), self.inline_frames(b));
        if fa.len() != fb.len() || fa.is_empty() {
            return false;
        }
        fa[..fa.len() - 1] == fb[..fb.len() - 1]
    }

    fn has_inline_frames(&self) -> bool {
        self.has_line_info()
    }

    fn range_checks(&self) -> Option<&dyn RangeChecks> {
        Some(self)
    }

    fn call_before_return_address(&self, ret: u64) -> Option<u64> {
        if let Some(lazy) = &self.lazy {
            return lazy.call_before_return_address(ret);
        }
        if ret == unwinder::EXTERNAL_ADDR {
            return Some(unwinder::EXTERNAL_ADDR);
        }
        self.code.previous_call(ret)
    }

    fn frame_setup(&self, addr: u64) -> Option<FrameSetup> {
        if !self.is_code(addr) {
            return None;
        }
        let entry = match (self.func_range_at(addr), &self.lazy) {
            (Some(r), _) => r.is_func_entry.then_some(r.start),
            (None, Some(lazy)) => Some(lazy.function_range(addr)?.0),
            (None, None) => return None,
        };
        Some(frame_setup::frame_setup(
            addr,
            entry,
            |a| self.instruction_kind(a),
            |a| self.previous_instruction(a),
        ))
    }

    fn code_bitmap(&self) -> Option<unwinder::CodeBitmap<'_>> {
        if self.lazy.is_some() {
            return None;
        }
        let (base, words) = self.code.start_bitmap()?;
        Some(unwinder::CodeBitmap { base, words })
    }

    fn block_probe_anchor(&self, addr: u64) -> Option<u64> {
        if !self.has_pseudo_probes {
            return None;
        }
        let (start, _) = self.function_range(addr)?;
        self.probes.block_probe_at_or_before(addr, start)
    }
}

impl RangeChecks for ProfiledBinary {
    fn is_transfer(&self, addr: u64) -> bool {
        self.instruction_kind(addr)
            & (disasm::KIND_BRANCH | disasm::KIND_CALL | disasm::KIND_RETURN)
            != 0
    }

    fn function_range(&self, addr: u64) -> Option<(u64, u64)> {
        self.func_range_at(addr).map(|r| (r.start, r.end))
    }
}

/// A separate debug file's bytes, given with a binary to [`ProfiledBinary::from_parts`].
#[derive(Clone, Copy)]
pub struct DebugFileBytes<'a> {
    /// Its path (named in errors and in [`NameSource::DebugFile`]).
    pub path: &'a Path,
    /// Its contents.
    pub data: &'a [u8],
    /// The memory map `data` lies in, when the binary is loaded with
    /// [`LoadOptions::lazy_code`]: its line tables are then read when first used. With
    /// [`LoadOptions::release_decoded_pages`] it must be a read-only file mapping: the
    /// pages the load read are given back.
    pub shared: Option<&'a SharedBytes>,
}

impl std::fmt::Debug for DebugFileBytes<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DebugFileBytes")
            .field("path", &self.path)
            .field("len", &self.data.len())
            .field("shared", &self.shared.is_some())
            .finish()
    }
}

/// Maps `path` read-only. Only the pages the loader reads become resident (as page cache).
/// A file truncated while mapped would fault (SIGBUS) on access; binaries are replaced by
/// renaming a new file over them, which leaves a mapping of the old inode intact.
pub(crate) fn map_file(path: &Path) -> Result<memmap2::Mmap, SymbolizerError> {
    let io = |source| SymbolizerError::Io {
        path: path.to_path_buf(),
        source,
    };
    let file = std::fs::File::open(path).map_err(io)?;
    let meta = file.metadata().map_err(io)?;
    if !meta.is_file() {
        // A directory, a device, a pipe: no ELF file to map.
        return Err(SymbolizerError::InvalidElf {
            path: path.to_path_buf(),
            what: "not a regular file".to_string(),
        });
    }
    let len = meta.len();
    if len > MAX_BINARY_BYTES {
        return Err(SymbolizerError::TooLarge {
            path: path.to_path_buf(),
            what: "binary size",
            size: len,
            max: MAX_BINARY_BYTES,
        });
    }
    // SAFETY: the map is read-only and private to this loader, which copies what it keeps;
    // see the function docs for truncation.
    unsafe { memmap2::Mmap::map(&file) }.map_err(io)
}

/// Parses `data` as a 64-bit little-endian x86-64 ELF file.
pub(crate) fn parse_elf<'data>(
    path: &Path,
    data: &'data [u8],
) -> Result<ElfFile64<'data, Endianness>, SymbolizerError> {
    let invalid = |what: String| SymbolizerError::InvalidElf {
        path: path.to_path_buf(),
        what,
    };
    let kind = object::FileKind::parse(data).map_err(|e| invalid(e.to_string()))?;
    if kind != object::FileKind::Elf64 {
        return Err(match kind {
            object::FileKind::Elf32 => SymbolizerError::UnsupportedArchitecture {
                path: path.to_path_buf(),
                arch: "32-bit ELF".to_string(),
            },
            other => invalid(format!("file kind {other:?}")),
        });
    }
    let file = ElfFile64::<Endianness>::parse(data).map_err(|e| invalid(e.to_string()))?;
    let endian = file.endian();
    if file.elf_header().e_machine(endian) != elf::EM_X86_64 || !file.is_little_endian() {
        return Err(SymbolizerError::UnsupportedArchitecture {
            path: path.to_path_buf(),
            arch: format!("{:?}", file.architecture()),
        });
    }
    Ok(file)
}

fn section_bytes<'data>(
    section: &object::read::elf::ElfSection64<'data, '_, Endianness>,
    path: &Path,
) -> Result<&'data [u8], SymbolizerError> {
    section.data().map_err(|e| SymbolizerError::SectionData {
        path: path.to_path_buf(),
        section: crate::error::section_label(section),
        what: e.to_string(),
    })
}

/// The [`LazyCode`] of the decode `extents` (section bytes, section address, start, end)
/// of `data`; `None` when a section's bytes are not in `data` or [`LazyCode::new`] refuses.
fn lazy_layout(
    shared: &SharedBytes,
    data: &[u8],
    extents: &[(&[u8], u64, u64, u64)],
    functions: &FunctionTable,
    has_pseudo_probes: bool,
) -> Option<LazyCode> {
    let base = data.as_ptr() as usize;
    let mut plans = Vec::with_capacity(extents.len());
    for &(bytes, section_addr, start, end) in extents {
        let section_offset = (bytes.as_ptr() as usize).checked_sub(base)?;
        let bytes_end = section_offset.checked_add(bytes.len())?;
        if bytes_end > data.len() {
            return None;
        }
        // As `CodeMapBuilder::disassemble`: nothing before the section or past its bytes.
        let Some(first) = start.checked_sub(section_addr) else {
            continue;
        };
        let Some(first) = usize::try_from(first).ok().filter(|&f| f < bytes.len()) else {
            continue;
        };
        plans.push(lazy_code::ExtentPlan {
            start,
            end: end.min(section_addr + bytes.len() as u64),
            offset: section_offset + first,
            bytes_end,
        });
    }
    let ranges = functions
        .ranges()
        .iter()
        .map(|r| (r.start, r.end))
        .collect();
    LazyCode::new(shared.clone(), plans, ranges, has_pseudo_probes)
}

/// `PrologEpilogTracker`: each function-range start and the instruction after it (found as
/// `lower_bound(start) + 1`; llvm-profgen stops at the first range with no such instruction),
/// and each return with the instruction before it.
fn prolog_epilog_addresses(code: &CodeMap, functions: &FunctionTable) -> Vec<u64> {
    let mut set = Vec::new();
    for range in functions.ranges() {
        set.push(range.start);
        match code.address(code.lower_bound(range.start) + 1) {
            Some(next) => set.push(next),
            None => break,
        }
    }
    for ret in code.returns() {
        set.push(ret);
        if let Some(i) = code.index_of(ret).and_then(|i| i.checked_sub(1)) {
            set.extend(code.address(i));
        }
    }
    set.sort_unstable();
    set.dedup();
    set
}

/// The symbol-table fallback: `STT_FUNC` symbols with a size, in executable sections, whose
/// start no DWARF subprogram range covers, become functions named after the symbol.
fn add_symbol_functions(
    subprograms: &mut Vec<(String, Vec<(u64, u64)>)>,
    symbols: &SymbolTable,
    file: &ElfFile64<'_, Endianness>,
) {
    let endian = file.endian();
    let mut covered: Vec<(u64, u64)> = subprograms
        .iter()
        .flat_map(|(_, r)| r.iter().copied())
        .collect();
    covered.sort_unstable();
    let is_covered = |addr: u64| {
        let i = covered.partition_point(|r| r.0 <= addr);
        covered[..i].iter().rev().take(64).any(|r| addr < r.1)
    };
    let exec_sections: Vec<usize> = file
        .sections()
        .filter(|s| s.elf_section_header().sh_flags(endian).0 & elf::SHF_EXECINSTR.0 != 0)
        .map(|s| s.index().0)
        .collect();
    for sym in symbols.symbols() {
        let in_text = sym.section.is_some_and(|s| exec_sections.contains(&s));
        if sym.is_function && sym.size > 0 && in_text && !is_covered(sym.address) {
            // Unnamed extents (a stripped binary's unwind table) share the empty name.
            subprograms.push((
                sym.name.clone(),
                vec![(sym.address, sym.address + sym.size)],
            ));
        }
    }
}
