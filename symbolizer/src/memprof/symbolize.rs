//! [`MemProfBinary`]: a profiled binary loaded for MemProf symbolization, and
//! [`MemProfBinary::symbolize`], which turns a [`RawMemProfile`] into allocation contexts of
//! [`MemProfFrame`]s exactly as LLVM's `RawMemProfReader` (`symbolizeAndFilterStackFrames`,
//! `mapRawProfileToRecords` in `llvm/lib/ProfileData/MemProfReader.cpp`) does:
//!
//! * only the segment whose build id is the binary's is symbolized; PCs of other modules
//!   (shared libraries, the vdso) are dropped;
//! * `vaddr = pc − segment.start + p_vaddr` of the binary's single executable `PT_LOAD`;
//! * each PC expands to its DWARF inline chain (linkage names), innermost first:
//!   `Frame{GUID(name), line − decl_line, column, is_inline = not the last of the chain}`;
//! * a PC is dropped when its innermost frame has no name or lies in one of the runtime's
//!   interceptor files (`memprof_malloc_linux.cpp`, `memprof_interceptors.cpp`,
//!   `memprof_new_delete.cpp`);
//! * a context left with no frame is dropped.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use collector::memprof::{MemInfoBlock, RawMemProfile};
use collector::BuildId;
use object::read::elf::ElfFile64;
use object::{Endianness, Object};

use super::dwarf::MemProfDwarf;
use super::error::MemProfSymbolizeError;
use super::frame::{memprof_guid, MemProfFrame};
use crate::error::SymbolizerError;

/// Largest binary accepted (read whole into memory).
pub const MAX_BINARY_BYTES: u64 = 8 << 30;

/// Runtime source files whose frames LLVM drops (`isRuntimePath`).
const RUNTIME_FILES: [&str; 3] = [
    "memprof_malloc_linux.cpp",
    "memprof_interceptors.cpp",
    "memprof_new_delete.cpp",
];

/// One symbolized allocation context: frames leaf first, and its statistics.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SymbolizedContext {
    /// Frames, leaf (allocation call) first.
    pub frames: Vec<MemProfFrame>,
    /// Statistics of the context.
    pub mib: MemInfoBlock,
}

/// A raw profile after symbolization: what [`super::HeapProfile::add`] folds in.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SymbolizedProfile {
    /// Contexts in raw file order (several raw stacks may give the same frames).
    pub contexts: Vec<SymbolizedContext>,
    /// GUID → linkage name of every function seen.
    pub names: HashMap<u64, String>,
    /// MIBs whose every PC was dropped.
    pub dropped_contexts: usize,
}

/// A binary loaded for MemProf; see the module docs.
pub struct MemProfBinary {
    path: PathBuf,
    build_id: BuildId,
    exec_vaddr: u64,
    dwarf: MemProfDwarf,
    cache: Mutex<HashMap<u64, Vec<(MemProfFrame, String)>>>,
}

impl std::fmt::Debug for MemProfBinary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemProfBinary")
            .field("path", &self.path)
            .field("build_id", &self.build_id)
            .field("exec_vaddr", &self.exec_vaddr)
            .finish()
    }
}

impl MemProfBinary {
    /// Maps and loads `path`.
    pub fn load(path: &Path) -> Result<MemProfBinary, MemProfSymbolizeError> {
        let data = crate::binary::map_file(path)?;
        Self::from_bytes(path, &data)
    }

    /// Loads from bytes; `path` names the binary in errors.
    pub fn from_bytes(path: &Path, data: &[u8]) -> Result<MemProfBinary, MemProfSymbolizeError> {
        let invalid = |what: String| SymbolizerError::InvalidElf {
            path: path.to_path_buf(),
            what,
        };
        let file = ElfFile64::<Endianness>::parse(data).map_err(|e| invalid(e.to_string()))?;
        if file.architecture() != object::Architecture::X86_64 {
            return Err(SymbolizerError::UnsupportedArchitecture {
                path: path.to_path_buf(),
                arch: format!("{:?}", file.architecture()),
            }
            .into());
        }
        let headers = crate::elf_image::program_headers(data).map_err(invalid)?;
        let exec: Vec<u64> = headers
            .iter()
            .filter(|h| h.is_executable_load())
            .map(|h| h.p_vaddr)
            .collect();
        if exec.len() != 1 {
            return Err(MemProfSymbolizeError::ExecutableSegments {
                path: path.to_path_buf(),
                count: exec.len(),
            });
        }
        let build_id = match file.build_id() {
            Ok(Some(id)) if !id.is_empty() => BuildId(id.to_vec()),
            _ => {
                return Err(MemProfSymbolizeError::NoBuildId {
                    path: path.to_path_buf(),
                })
            }
        };
        let dwarf = MemProfDwarf::load(&file, path)?;
        Ok(MemProfBinary {
            path: path.to_path_buf(),
            build_id,
            exec_vaddr: exec[0],
            dwarf,
            cache: Mutex::new(HashMap::new()),
        })
    }

    /// The binary's GNU build id.
    pub fn build_id(&self) -> &BuildId {
        &self.build_id
    }

    /// The binary's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Frames (with linkage names) of one binary address, innermost first; empty when the
    /// address is dropped (no name, or in a runtime interceptor file).
    pub fn frames_at(&self, vaddr: u64) -> Vec<(MemProfFrame, String)> {
        if let Ok(cache) = self.cache.lock() {
            if let Some(f) = cache.get(&vaddr) {
                return f.clone();
            }
        }
        let raw = self.dwarf.frames(vaddr);
        let keep = raw.first().is_some_and(|f| {
            f.name.is_some() && !RUNTIME_FILES.iter().any(|r| f.file.ends_with(r))
        });
        let n = raw.len();
        let frames: Vec<(MemProfFrame, String)> = if keep {
            raw.into_iter()
                .enumerate()
                .map(|(i, f)| {
                    let name = f.name.unwrap_or_default();
                    let frame = MemProfFrame {
                        function: memprof_guid(&name),
                        line_offset: f.line.wrapping_sub(f.start_line),
                        column: f.column,
                        is_inline: i + 1 != n,
                    };
                    (frame, name)
                })
                .collect()
        } else {
            Vec::new()
        };
        if let Ok(mut cache) = self.cache.lock() {
            cache.insert(vaddr, frames.clone());
        }
        frames
    }

    /// Symbolizes every MIB of `raw` (read from `profile_path`, which names it in errors).
    pub fn symbolize(
        &self,
        profile_path: &Path,
        raw: &RawMemProfile,
    ) -> Result<SymbolizedProfile, MemProfSymbolizeError> {
        let Some(segment) = raw.segments.iter().find(|s| s.build_id == self.build_id) else {
            return Err(MemProfSymbolizeError::BuildIdMismatch {
                profile_path: profile_path.to_path_buf(),
                binary_path: self.path.clone(),
                binary: self.build_id.to_hex(),
                profile: raw
                    .segments
                    .iter()
                    .map(|s| s.build_id.to_hex())
                    .collect::<Vec<_>>()
                    .join(", "),
            });
        };
        let mut out = SymbolizedProfile::default();
        for (stack_id, mib) in &raw.mibs {
            let pcs = raw.stacks.get(stack_id).map_or(&[][..], Vec::as_slice);
            let mut frames = Vec::new();
            for &pc in pcs {
                if !(segment.start < pc && pc <= segment.end) {
                    continue;
                }
                let vaddr = pc - segment.start + self.exec_vaddr;
                for (frame, name) in self.frames_at(vaddr) {
                    out.names.entry(frame.function).or_insert(name);
                    frames.push(frame);
                }
            }
            if frames.is_empty() {
                out.dropped_contexts += 1;
                continue;
            }
            out.contexts.push(SymbolizedContext {
                frames,
                mib: mib.clone(),
            });
        }
        Ok(out)
    }
}
