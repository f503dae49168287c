//! perf record bodies (`collector::record::parse_record`) under every attr layout: the first
//! 45 bytes choose the record type, `misc` and the `perf_event_attr` fields that shape the
//! body (sample_type, branch_sample_type, read_format, register masks, sample_id_all); the
//! rest is the body.
#![no_main]

use collector::record::{parse_record, parse_sample_id, record_type, sample_type, SampleLayout};
use libfuzzer_sys::fuzz_target;

const TYPES: [u32; 8] = [
    record_type::SAMPLE,
    record_type::MMAP,
    record_type::MMAP2,
    record_type::COMM,
    record_type::FORK,
    record_type::EXIT,
    record_type::LOST,
    record_type::LOST_SAMPLES,
];

fn u64_at(d: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(d[at..at + 8].try_into().unwrap())
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 44 {
        return;
    }
    let selector = data[0];
    let ty = TYPES[(selector & 7) as usize];
    let misc = u16::from_le_bytes([data[1], data[2]]);
    // Mostly bits we accept (so the fuzzer explores their combinations), sometimes any bit
    // (the unsupported-bit error path).
    let raw_type = u64_at(data, 3);
    let st = if selector & 0x80 != 0 {
        raw_type
    } else {
        raw_type & sample_type::SUPPORTED
    };
    let layout = SampleLayout::new(
        st,
        u64_at(data, 11),
        u64_at(data, 19) & 0x1f,
        data[27] & 1 != 0,
    )
    .with_regs(u64_at(data, 28), u64_at(data, 36));
    let body = &data[44..];
    let _ = parse_record(ty, misc, body, &layout);
    let _ = parse_sample_id(body, &layout);
});
