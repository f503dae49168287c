//! Function-name canonicalisation as in LLVM 19 `FunctionSamples::getCanonicalFnName` with the
//! default "selected" suffix-elision policy: strip a trailing `.llvm.<x>` and then `.part.<x>`
//! (in that order), each only when the suffix's own dot is the last dot of the remaining name.
//! `.__uniq.<x>` is kept because `FunctionSamples::HasUniqSuffix` defaults to true.

const LLVM_SUFFIX: &str = ".llvm.";
const PART_SUFFIX: &str = ".part.";

/// The canonical form of a (linkage) function name, e.g. `foo.llvm.123` → `foo`,
/// `foo.part.0` → `foo`, `foo.__uniq.42` unchanged, `foo.cold` unchanged.
pub fn canonical_function_name(name: &str) -> &str {
    let mut cand = name;
    for suffix in [LLVM_SUFFIX, PART_SUFFIX] {
        let Some(at) = cand.rfind(suffix) else {
            continue;
        };
        // getCanonicalFnName: strip only when the last '.' is the suffix's trailing dot.
        let last_dot = cand.rfind('.');
        if last_dot == Some(at + suffix.len() - 1) {
            cand = &cand[..at];
        }
    }
    cand
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strips_llvm_and_part_suffixes() {
        assert_eq!(canonical_function_name("foo.llvm.123"), "foo");
        assert_eq!(canonical_function_name("foo.part.0"), "foo");
        assert_eq!(canonical_function_name("foo.part.0.llvm.5"), "foo");
        assert_eq!(
            canonical_function_name("_Z3foov.llvm.9876543210"),
            "_Z3foov"
        );
    }

    #[test]
    fn keeps_uniq_cold_and_dotted_tails() {
        assert_eq!(
            canonical_function_name("foo.__uniq.1234"),
            "foo.__uniq.1234"
        );
        assert_eq!(canonical_function_name("foo.cold"), "foo.cold");
        // The last dot is not the suffix's own: nothing is stripped.
        assert_eq!(
            canonical_function_name("foo.llvm.1.cold"),
            "foo.llvm.1.cold"
        );
        assert_eq!(
            canonical_function_name("foo.__uniq.1.llvm.2"),
            "foo.__uniq.1"
        );
        assert_eq!(canonical_function_name("main"), "main");
    }
}
