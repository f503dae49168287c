//! `symbolizer::decoded_bytes` (exported as `pgo_agent_decoded_bytes`): the bytes a binary
//! loaded with `LoadOptions::lazy_code` holds grow as queries decode its code, probes and
//! line tables, and go back to zero when it is dropped. One test in this binary: the
//! counts are process-wide.

use std::process::Command;

use symbolizer::{decoded_bytes, DecodedBytes, LoadOptions, ProfiledBinary};

#[test]
fn decoded_bytes_grow_with_queries_and_return_when_the_binary_goes() {
    let dir = std::env::temp_dir().join(format!("decoded-bytes-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("p.c");
    std::fs::write(
        &src,
        "__attribute__((noinline)) int f(int x) { return x > 3 ? x * 7 : x + 1; }\n\
         int main(int argc, char **argv) { (void)argv; return f(argc); }\n",
    )
    .unwrap();
    let bin = dir.join("p");
    let Ok(status) = Command::new("clang-19")
        .args(["-O2", "-g", "-fpseudo-probe-for-profiling"])
        .arg(&src)
        .arg("-o")
        .arg(&bin)
        .status()
    else {
        eprintln!("SKIPPED: clang-19 not found");
        return;
    };
    assert!(status.success());

    assert_eq!(decoded_bytes(), DecodedBytes::default());
    let options = LoadOptions {
        lazy_code: true,
        ..LoadOptions::default()
    };
    let binary = ProfiledBinary::load_split(&bin, None, &options).unwrap();
    assert_eq!(
        decoded_bytes(),
        DecodedBytes::default(),
        "nothing decoded at load"
    );
    assert_eq!(binary.decoded_bytes(), DecodedBytes::default());

    let f = binary
        .functions()
        .find(|f| f.name == "f")
        .and_then(|f| f.ranges.first().copied())
        .expect("f has a range");
    assert!(!binary.inline_frames(f.0).is_empty());
    assert!(!binary.probes_at(f.0).is_empty() || !binary.node_probes(0).is_empty());
    let held = decoded_bytes();
    let code = binary.lazy_code().unwrap();
    assert!(
        held.code > 0 && held.probes > 0 && held.line_tables > 0,
        "{held:?}"
    );
    // At least the 4-byte offset, size and kind of each decoded instruction.
    assert!(
        held.code >= 6 * code.decoded_instructions() as u64,
        "{held:?}"
    );
    assert_eq!(
        held.probes,
        (binary.probe_store().decoded() * std::mem::size_of::<symbolizer::PseudoProbe>()) as u64
    );

    // One binary: its own figure is the process's.
    assert_eq!(binary.decoded_bytes(), held);
    assert_eq!(held.total(), held.code + held.probes + held.line_tables);

    drop(binary);
    assert_eq!(
        decoded_bytes(),
        DecodedBytes::default(),
        "given back with the binary"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
