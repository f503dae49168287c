//! The disassembly listing of llvm-profgen 19's diagnostic flags (`--show-disassembly-only`,
//! `--disassemble-functions`, `--show-source-locations`, `--show-canonical-fname`,
//! `--show-pseudo-probe`): every text section of the binary, symbol by symbol, each
//! instruction with its address, optionally its probes and its symbolized inline frames, in
//! llvm-profgen's layout.
//!
//! Everything but the instruction text is llvm-profgen's byte for byte: the `Pseudo Probe
//! Desc:` block, the section and symbol headers, the address column, the `[Probe]:` lines,
//! the source-location column (the instruction text padded to 40 columns, tabs counting
//! one). The instruction text comes from iced-x86's GAS (AT&T) formatter set as close to
//! LLVM MC as its options allow (size suffixes, decimal immediates and displacements,
//! branch targets as `0x…`); its spelling can differ from LLVM MC's for some instructions.

use std::collections::HashSet;
use std::io::{self, Write};

use iced_x86::{
    Code, Decoder, DecoderOptions, Formatter, FormatterOperandOptions, FormatterOptionsProvider,
    GasFormatter, Instruction, Mnemonic, NumberBase, NumberFormattingOptions, OpKind, Register,
};
use object::read::elf::ElfFile64;
use object::read::elf::SectionHeader as _;
use object::{Endianness, Object, ObjectSection};

use crate::binary::{FrameLocation, ProfiledBinary};
use crate::guid::function_guid;
use crate::name::canonical_function_name;
use crate::probe::{ProbeKind, PseudoProbe};
use crate::symtab::SymbolTable;

/// Column (counted from just after `ADDR:`) where the source location starts.
const LOCATION_COLUMN: usize = 40;

/// What the listing shows (llvm-profgen 19's flags of the same names).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ListingOptions {
    /// `--disassemble-functions`: only symbols with these names (after canonicalisation
    /// with [`ListingOptions::canonical_names`]); empty lists every symbol.
    pub functions: Vec<String>,
    /// `--show-source-locations`: each instruction's inline frames, innermost first.
    pub source_locations: bool,
    /// `--show-canonical-fname`: symbol headers and source locations use canonical names.
    pub canonical_names: bool,
    /// `--show-pseudo-probe`: `[Probe]:` lines before the instruction at their address,
    /// and source locations with probe indices (from the probe discriminators).
    pub pseudo_probes: bool,
}

/// Why the listing could not be written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ListingError {
    /// The binary's ELF could not be read.
    #[error("{path}: {what}")]
    Elf {
        /// The binary's path as given.
        path: String,
        /// What the ELF reader reported.
        what: String,
    },
    /// Writing the listing failed.
    #[error("writing the disassembly listing: {0}")]
    Write(#[from] io::Error),
}

/// Writes llvm-profgen's `Pseudo Probe Desc:` block: every `.pseudo_probe_desc` record by
/// ascending GUID. Nothing for a binary without pseudo probes.
pub fn write_probe_descs(binary: &ProfiledBinary, out: &mut dyn Write) -> io::Result<()> {
    if !binary.has_pseudo_probes() {
        return Ok(());
    }
    let mut descs: Vec<_> = binary.probe_descs().values().collect();
    descs.sort_by_key(|d| d.guid);
    writeln!(out, "Pseudo Probe Desc:")?;
    for d in descs {
        writeln!(out, "GUID: {} Name: {}", d.guid, d.name)?;
        writeln!(out, "Hash: {}", d.hash)?;
    }
    Ok(())
}

/// Writes the listing of `elf` (the bytes of the file at `path`, which `binary` was loaded
/// from) to `out`, as llvm-profgen 19's `--show-disassembly-only` does (the probe
/// description block of [`write_probe_descs`] comes first with
/// [`ListingOptions::pseudo_probes`]).
pub fn write_listing(
    binary: &ProfiledBinary,
    path: &str,
    elf: &[u8],
    options: &ListingOptions,
    out: &mut dyn Write,
) -> Result<(), ListingError> {
    let file = ElfFile64::<Endianness>::parse(elf).map_err(|e| ListingError::Elf {
        path: path.to_string(),
        what: e.to_string(),
    })?;
    if options.pseudo_probes {
        write_probe_descs(binary, out)?;
    }
    let endian = file.endian();
    let symbols = SymbolTable::from_object(&file);
    let wanted: HashSet<&str> = options.functions.iter().map(String::as_str).collect();
    let probe_roots = probe_roots(binary, &symbols, &wanted);
    let mut printer = InstructionPrinter::new();
    writeln!(out, "\nDisassembly of {path}:")?;
    for section in file.sections() {
        let sh_flags = section.elf_section_header().sh_flags(endian).0;
        let executable = sh_flags & object::elf::SHF_EXECINSTR.0 != 0;
        if !executable || section.size() == 0 {
            continue;
        }
        let name = section.name().unwrap_or("");
        let start = section.address();
        let end = start + section.size();
        writeln!(
            out,
            "\nDisassembly of section {name} [{start:#x}, {end:#x}]:\n"
        )?;
        if name == ".plt" {
            continue;
        }
        let bytes = section.data().map_err(|e| ListingError::Elf {
            path: path.to_string(),
            what: format!("section {name}: {e}"),
        })?;
        let list = symbols.sorted_in_section(section.index().0);
        for (i, sym) in list.iter().enumerate() {
            let next = list.get(i + 1).map_or(end, |s| s.address);
            let shown = if options.canonical_names {
                canonical_function_name(&sym.name)
            } else {
                sym.name.as_str()
            };
            if !wanted.is_empty() && !wanted.contains(shown) {
                continue;
            }
            writeln!(out, "<{shown}>:")?;
            let mut addr = sym.address;
            while addr < next {
                let offset = (addr - start) as usize;
                let code = bytes.get(offset..).unwrap_or_default();
                let decoded = decode_one(code, addr);
                if options.pseudo_probes {
                    for probe in binary.probes_at(addr) {
                        if probe_roots
                            .as_ref()
                            .is_none_or(|roots| roots.contains(&root_guid(binary, probe)))
                        {
                            write_probe(binary, probe, out)?;
                        }
                    }
                }
                let text = match &decoded {
                    Some(instr) => printer.format(instr),
                    None => "\t<unknown>".to_string(),
                };
                write!(out, "{addr:8x}:{text}")?;
                if options.source_locations {
                    let width = text.chars().count();
                    if width < LOCATION_COLUMN {
                        write!(out, "{:1$}", "", LOCATION_COLUMN - width)?;
                    }
                    let frames = binary.symbolize(addr, options.pseudo_probes);
                    write_location(&frames, options.canonical_names, out)?;
                }
                writeln!(out)?;
                addr += decoded.map_or(1, |instr| instr.len() as u64);
            }
            writeln!(out)?;
        }
    }
    out.flush()?;
    Ok(())
}

/// The instruction at the start of `code`, `None` where it does not decode.
fn decode_one(code: &[u8], addr: u64) -> Option<Instruction> {
    if code.is_empty() {
        return None;
    }
    let mut decoder = Decoder::with_ip(64, code, addr, DecoderOptions::NONE);
    let instr = decoder.decode();
    (!instr.is_invalid()).then_some(instr)
}

/// With `--disassemble-functions`, the GUIDs of the DWARF functions starting at the listed
/// symbols: llvm-profgen decodes only the probes of those top-level functions.
fn probe_roots(
    binary: &ProfiledBinary,
    symbols: &SymbolTable,
    wanted: &HashSet<&str>,
) -> Option<HashSet<u64>> {
    if wanted.is_empty() {
        return None;
    }
    let starts = symbols.guid_to_address();
    let roots = wanted
        .iter()
        .filter_map(|name| starts.get(&function_guid(name)))
        .filter_map(|&addr| binary.func_range_starting_at(addr))
        .filter_map(|range| binary.function_table().functions().get(range.func_index))
        .map(|func| function_guid(&func.name))
        .collect();
    Some(roots)
}

/// The GUID of the top-level function of `probe`'s inline tree.
fn root_guid(binary: &ProfiledBinary, probe: &PseudoProbe) -> u64 {
    let tree = binary.probe_inline_tree();
    let mut node = tree.node(probe.node);
    while let Some(parent) = node.parent {
        node = tree.node(parent);
    }
    node.guid
}

/// One ` [Probe]:` line (LLVM `MCDecodedPseudoProbe::print` with names).
fn write_probe(
    binary: &ProfiledBinary,
    probe: &PseudoProbe,
    out: &mut dyn Write,
) -> io::Result<()> {
    let name = |guid: u64| binary.probe_desc(guid).map_or("", |d| d.name.as_str());
    write!(
        out,
        " [Probe]:\tFUNC: {} Index: {}  ",
        name(probe.guid),
        probe.index
    )?;
    if probe.discriminator != 0 {
        write!(out, "Discriminator: {}  ", probe.discriminator)?;
    }
    let kind = match probe.kind {
        ProbeKind::Block => "Block",
        ProbeKind::IndirectCall => "IndirectCall",
        ProbeKind::DirectCall => "DirectCall",
        ProbeKind::Other(_) => "",
    };
    write!(out, "Type: {kind}  ")?;
    // The call sites from the outermost caller in.
    let tree = binary.probe_inline_tree();
    let mut sites = Vec::new();
    let mut node = tree.node(probe.node);
    while let Some(parent) = node.parent {
        let caller = tree.node(parent);
        sites.push((name(caller.guid), node.site));
        node = caller;
    }
    if !sites.is_empty() {
        write!(out, "Inlined: @ ")?;
        for (i, (func, site)) in sites.iter().rev().enumerate() {
            if i > 0 {
                write!(out, " @ ")?;
            }
            write!(out, "{func}:{site}")?;
        }
    }
    writeln!(out)
}

/// The source-location column: frames innermost first, `FUNC:LINE[.DISC]` joined by ` @ `
/// (llvm-profgen `getReversedLocWithContext`).
fn write_location(
    frames: &[FrameLocation],
    canonical: bool,
    out: &mut dyn Write,
) -> io::Result<()> {
    for (i, frame) in frames.iter().rev().enumerate() {
        if i > 0 {
            write!(out, " @ ")?;
        }
        let name = if canonical {
            canonical_function_name(&frame.func_name)
        } else {
            frame.func_name.as_str()
        };
        write!(out, "{name}:{}", frame.line_offset)?;
        if frame.discriminator != 0 {
            write!(out, ".{}", frame.discriminator)?;
        }
    }
    Ok(())
}

/// The rotate and shift forms whose count 1 is implicit in the opcode (`D0 /r`, `D1 /r`).
fn is_shift_by_one(instr: &Instruction) -> bool {
    instr.op_count() == 2
        && instr.op1_kind() == OpKind::Immediate8
        && instr.immediate8() == 1
        && format!("{:?}", instr.code()).ends_with("_1")
}

/// iced's GAS formatter set up like LLVM MC's AT&T printer: `\tMNEMONIC\tOPERANDS`.
struct InstructionPrinter {
    formatter: GasFormatter,
    mnemonic: String,
    operands: String,
}

/// Branch targets in hex (`0x1190`), every other number in decimal, as LLVM MC prints them.
struct BranchTargetsInHex;

impl FormatterOptionsProvider for BranchTargetsInHex {
    fn operand_options(
        &mut self,
        instruction: &Instruction,
        _operand: u32,
        instruction_operand: Option<u32>,
        _options: &mut FormatterOperandOptions,
        number_options: &mut NumberFormattingOptions<'_>,
    ) {
        let Some(op) = instruction_operand else {
            return;
        };
        // LLVM MC prints sign-extended and 64-bit immediates signed, the others unsigned.
        match instruction.op_kind(op) {
            OpKind::Immediate8to16
            | OpKind::Immediate8to32
            | OpKind::Immediate8to64
            | OpKind::Immediate32to64
            | OpKind::Immediate64 => number_options.signed_number = true,
            OpKind::Immediate8 | OpKind::Immediate16 | OpKind::Immediate32 => {
                number_options.signed_number = false
            }
            _ => {}
        }
        if matches!(
            instruction.op_kind(op),
            OpKind::NearBranch16 | OpKind::NearBranch32 | OpKind::NearBranch64
        ) {
            number_options.number_base = NumberBase::Hexadecimal;
            number_options.prefix = "0x";
            number_options.suffix = "";
        }
    }
}

impl InstructionPrinter {
    fn new() -> InstructionPrinter {
        let mut formatter = GasFormatter::with_options(None, Some(Box::new(BranchTargetsInHex)));
        let o = formatter.options_mut();
        o.set_gas_show_mnemonic_size_suffix(true);
        o.set_space_after_operand_separator(true);
        o.set_number_base(NumberBase::Decimal);
        o.set_hex_prefix("0x");
        o.set_hex_suffix("");
        o.set_uppercase_hex(false);
        o.set_leading_zeros(false);
        o.set_branch_leading_zeros(false);
        o.set_displacement_leading_zeros(false);
        o.set_signed_immediate_operands(false);
        o.set_signed_memory_displacements(true);
        o.set_rip_relative_addresses(true);
        o.set_show_branch_size(false);
        o.set_small_hex_numbers_in_decimal(false);
        o.set_show_useless_prefixes(true);
        InstructionPrinter {
            formatter,
            mnemonic: String::new(),
            operands: String::new(),
        }
    }

    fn format(&mut self, instr: &Instruction) -> String {
        self.mnemonic.clear();
        self.operands.clear();
        if matches!(instr.code(), Code::Nopw | Code::Nopd)
            || (instr.code() == Code::Xchg_r16_AX && instr.op0_register() == Register::AX)
        {
            // `66 90`: LLVM MC prints the data16 no-op as `nop`.
            return "\tnop".to_string();
        }
        self.formatter.format_mnemonic(instr, &mut self.mnemonic);
        self.formatter
            .format_all_operands(instr, &mut self.operands);
        if instr.mnemonic() == Mnemonic::Imul
            && instr.op_count() == 3
            && self.formatter.operand_count(instr) == 2
        {
            // `imul $imm, %r, %r`: iced folds the repeated register, LLVM MC prints it.
            let reg = self.formatter.format_register(instr.op0_register());
            self.operands.push_str(", %");
            self.operands.push_str(reg.trim_start_matches('%'));
        }
        if format!("{:?}", instr.mnemonic()).starts_with("Set") {
            // LLVM MC prints `setCC` without a size suffix.
            if let Some(m) = self.mnemonic.strip_suffix('b') {
                self.mnemonic = m.to_string();
            }
        }
        if is_shift_by_one(instr) {
            // The `D0`/`D1` shift-by-one forms: LLVM MC leaves the implicit count out.
            if let Some(rest) = self.operands.strip_prefix("$1, ") {
                self.operands = rest.to_string();
            }
        }
        if self.operands.is_empty() {
            format!("\t{}", self.mnemonic)
        } else {
            format!("\t{}\t{}", self.mnemonic, self.operands)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `bytes` at `addr` as the listing prints them.
    fn text(bytes: &[u8], addr: u64) -> String {
        let instr = decode_one(bytes, addr).expect("decodes");
        InstructionPrinter::new().format(&instr)
    }

    /// Expected texts are llvm-profgen 19's (LLVM MC) for the same bytes in the corpus.
    #[test]
    fn instruction_text_is_llvm_mc_spelling() {
        assert_eq!(text(&[0x48, 0x83, 0xec, 0x08], 0x1000), "\tsubq\t$8, %rsp");
        assert_eq!(
            text(&[0x48, 0x83, 0xe4, 0xf0], 0x1059),
            "\tandq\t$-16, %rsp"
        );
        assert_eq!(text(&[0x74, 0x02], 0x100e), "\tje\t0x1012");
        assert_eq!(text(&[0xff, 0xd0], 0x1010), "\tcallq\t*%rax");
        assert_eq!(text(&[0xc3], 0x1016), "\tretq");
        assert_eq!(
            text(&[0x48, 0x8b, 0x05, 0xc5, 0x2f, 0x00, 0x00], 0x1004),
            "\tmovq\t12229(%rip), %rax"
        );
        assert_eq!(
            text(&[0x66, 0x2e, 0x0f, 0x1f, 0x84, 0, 0, 0, 0, 0], 0x1072),
            "\tnopw\t%cs:(%rax,%rax)"
        );
        assert_eq!(text(&[0x48, 0xd1, 0xfe], 0x10cf), "\tsarq\t%rsi");
        assert_eq!(text(&[0x66, 0x90], 0x11be), "\tnop");
        assert_eq!(
            text(&[0x66, 0x0f, 0x70, 0xc8, 0xee], 0x1249),
            "\tpshufd\t$238, %xmm0, %xmm1"
        );
        assert_eq!(
            text(&[0x69, 0xc9, 0xe8, 0x03, 0, 0], 0x11eb),
            "\timull\t$1000, %ecx, %ecx"
        );
        assert_eq!(text(&[0x0f, 0x93, 0xc2], 0x11b1), "\tsetae\t%dl");
    }

    #[test]
    fn locations_are_innermost_first_with_discriminators() {
        let frames = [
            FrameLocation {
                func_name: "main".into(),
                line_offset: 5,
                discriminator: 0,
            },
            FrameLocation {
                func_name: "inner.llvm.42".into(),
                line_offset: 3,
                discriminator: 2,
            },
        ];
        let mut out = Vec::new();
        write_location(&frames, false, &mut out).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "inner.llvm.42:3.2 @ main:5"
        );
        let mut out = Vec::new();
        write_location(&frames, true, &mut out).unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), "inner:3.2 @ main:5");
    }
}
