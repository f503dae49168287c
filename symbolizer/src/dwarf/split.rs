//! Split DWARF (`-gsplit-dwarf`): a skeleton unit in the binary (`DW_AT_dwo_id` in DWARF 5,
//! `DW_AT_GNU_dwo_id` in DWARF 4) keeps the line table and the address ranges; its full
//! unit, with the subprograms and inline frames, is in a DWARF package (`.dwp`) or in the
//! `.dwo` file the skeleton names. They are found as LLVM 19's
//! `DWARFContext::getDWOContext` finds them: the package given (llvm-profgen's `--dwp`),
//! else `<file>.dwp` beside the file the DWARF is read from, when it opens; otherwise each
//! skeleton's `DW_AT_dwo_name` (`DW_AT_GNU_dwo_name`), relative to its `DW_AT_comp_dir`.
//! A package or `.dwo` file that opens but cannot be read is an error naming it; a split
//! unit found nowhere is counted (LLVM warns and keeps the skeleton alone).
//!
//! The files are mapped while the DWARF is loaded and unmapped after: what is kept of the
//! split units is what [`super::DwarfInfo`] keeps of any unit.

use std::collections::HashMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use super::sections::{DebugSections, Slice};
use super::unit_set::{dwarf_error, units_of, UnitSet};
use crate::error::SymbolizerError;

/// Where split units are looked for (llvm-profgen's `--dwp`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SplitDwarf {
    /// The DWARF package; `None`: `<file>.dwp` beside the file the DWARF is read from.
    pub dwp: Option<PathBuf>,
}

impl SplitDwarf {
    /// The package looked for when `path` is the file the DWARF is read from.
    pub fn package_path(&self, path: &Path) -> PathBuf {
        self.dwp.clone().unwrap_or_else(|| {
            let mut p = OsString::from(path.as_os_str());
            p.push(".dwp");
            PathBuf::from(p)
        })
    }
}

/// The files holding the split units of one binary's skeletons, mapped.
#[derive(Default)]
pub(crate) struct SplitFiles {
    package: Option<(PathBuf, memmap2::Mmap)>,
    dwo: Vec<(PathBuf, memmap2::Mmap)>,
}

/// The `.dwo` file a skeleton unit names (LLVM `DWARFUnit::parseDWO`): `DW_AT_dwo_name`
/// (`DW_AT_GNU_dwo_name` before DWARF 5), under `DW_AT_comp_dir` when relative.
pub(crate) fn dwo_path(
    dwarf: &gimli::Dwarf<Slice<'_>>,
    unit: &gimli::Unit<Slice<'_>>,
) -> Option<PathBuf> {
    let name = unit.dwo_name().ok()??;
    let name = dwarf.attr_string(unit, name).ok()?;
    let name = PathBuf::from(name.to_string_lossy().into_owned());
    match &unit.comp_dir {
        Some(dir) if name.is_relative() && !dir.is_empty() => {
            Some(Path::new(&*dir.to_string_lossy()).join(name))
        }
        _ => Some(name),
    }
}

impl SplitFiles {
    /// Maps the package, else the `.dwo` files, of the skeleton units of `units` (read
    /// from `path`); nothing when no unit is a skeleton.
    pub(crate) fn open(
        units: &UnitSet<'_, '_>,
        path: &Path,
        split: &SplitDwarf,
    ) -> Result<SplitFiles, SymbolizerError> {
        let mut dwo_paths: Vec<PathBuf> = Vec::new();
        let mut skeletons = 0usize;
        for unit in units.skeletons() {
            skeletons += 1;
            if let Some(p) = dwo_path(units.dwarf(), unit) {
                if !dwo_paths.contains(&p) {
                    dwo_paths.push(p);
                }
            }
        }
        if skeletons == 0 {
            return Ok(SplitFiles::default());
        }
        let package_path = split.package_path(path);
        if let Ok(map) = crate::binary::map_file(&package_path) {
            return Ok(SplitFiles {
                package: Some((package_path, map)),
                dwo: Vec::new(),
            });
        }
        let dwo = dwo_paths
            .into_iter()
            .filter_map(|p| crate::binary::map_file(&p).ok().map(|m| (p, m)))
            .collect();
        Ok(SplitFiles { package: None, dwo })
    }
}

/// The split DWARF sections of the file `path` mapped at `map`.
fn load<'f>(path: &Path, map: &'f memmap2::Mmap) -> Result<DebugSections<'f>, SymbolizerError> {
    let file = crate::binary::parse_elf(path, map)?;
    DebugSections::load_dwo(&file, path)
}

impl SplitFiles {
    /// The debug sections of the mapped files.
    pub(crate) fn sections(&self) -> Result<SplitSections<'_>, SymbolizerError> {
        let package = match &self.package {
            Some((path, map)) => {
                let sections = load(path, map)?;
                if !sections.has_cu_index() {
                    return Err(SymbolizerError::Dwarf {
                        path: path.clone(),
                        what: "not a DWARF package: no .debug_cu_index section".into(),
                    });
                }
                Some((path.as_path(), sections))
            }
            None => None,
        };
        let mut dwo = HashMap::new();
        for (path, map) in &self.dwo {
            dwo.insert(path.as_path(), load(path, map)?);
        }
        Ok(SplitSections { package, dwo })
    }
}

/// The debug sections of [`SplitFiles`].
pub(crate) struct SplitSections<'f> {
    package: Option<(&'f Path, DebugSections<'f>)>,
    dwo: HashMap<&'f Path, DebugSections<'f>>,
}

impl<'f> SplitSections<'f> {
    /// The lookup of split units over these sections (a package's indexes are read here).
    pub(crate) fn units(&self) -> Result<SplitUnits<'_>, SymbolizerError> {
        let package = match &self.package {
            Some((path, sections)) => Some((
                *path,
                sections.package().map_err(|e| dwarf_error(path, e, None))?,
            )),
            None => None,
        };
        Ok(SplitUnits {
            package,
            dwo: &self.dwo,
        })
    }
}

/// Finds the split unit of a skeleton unit.
pub(crate) struct SplitUnits<'s> {
    package: Option<(&'s Path, gimli::DwarfPackage<Slice<'s>>)>,
    dwo: &'s HashMap<&'s Path, DebugSections<'s>>,
}

/// A split unit with the DWARF it is read through (its file's sections, and the
/// `.debug_addr` and `.debug_ranges` of the binary).
pub(crate) type SplitUnit<'s> = (gimli::Dwarf<Slice<'s>>, gimli::Unit<Slice<'s>>);

impl<'s> SplitUnits<'s> {
    /// The split unit of `skeleton` (a unit of `parent` with a DWO id), its relocated
    /// attributes (`DW_AT_low_pc`, `DW_AT_addr_base`, DWARF 4's ranges base) from the
    /// skeleton; `None` when no file holds it.
    pub(crate) fn find(
        &self,
        parent: &gimli::Dwarf<Slice<'s>>,
        skeleton: &gimli::Unit<Slice<'s>>,
    ) -> Result<Option<SplitUnit<'s>>, SymbolizerError> {
        let Some(id) = skeleton.dwo_id else {
            return Ok(None);
        };
        let (path, dwarf) = match &self.package {
            Some((path, package)) => match package
                .find_cu(id, parent)
                .map_err(|e| dwarf_error(path, e, None))?
            {
                Some(dwarf) => (*path, dwarf),
                None => return Ok(None),
            },
            None => {
                let Some(p) = dwo_path(parent, skeleton) else {
                    return Ok(None);
                };
                let Some((path, sections)) = self.dwo.get_key_value(p.as_path()) else {
                    return Ok(None);
                };
                let mut dwarf = sections.dwarf().map_err(|e| dwarf_error(path, e, None))?;
                dwarf.make_dwo(parent);
                (*path, dwarf)
            }
        };
        let found = units_of(&dwarf, path)
            .find(|unit| unit.as_ref().map_or(true, |u| u.dwo_id == Some(id)))
            .transpose()?;
        Ok(found.map(|mut unit| {
            unit.copy_relocated_attributes(skeleton);
            (dwarf, unit)
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn package_defaults_to_the_file_with_dwp_appended() {
        let split = SplitDwarf::default();
        assert_eq!(
            split.package_path(Path::new("/srv/app.v2")),
            PathBuf::from("/srv/app.v2.dwp")
        );
        let given = SplitDwarf {
            dwp: Some(PathBuf::from("/pkgs/app.dwp")),
        };
        assert_eq!(
            given.package_path(Path::new("/srv/app")),
            PathBuf::from("/pkgs/app.dwp")
        );
    }

    /// An ELF file without a unit index given as the package is an error naming it.
    #[test]
    fn a_package_without_a_unit_index_is_refused() {
        let exe = std::env::current_exe().unwrap();
        let files = SplitFiles {
            package: Some((exe.clone(), crate::binary::map_file(&exe).unwrap())),
            dwo: Vec::new(),
        };
        let err = files.sections().err().expect("refused");
        assert_eq!(
            err.to_string(),
            format!(
                "{}: DWARF: not a DWARF package: no .debug_cu_index section",
                exe.display()
            )
        );
    }
}
