//! Checks of the counts and sizes in perf.data metadata that linux-perf-data trusts: it
//! sizes vectors from them, or loses its place in the bytes, before it finds them wrong.
//! File mode and pipe mode run the same checks on the same structures (attrs, the
//! EVENT_DESC and CMDLINE features). Errors are (offset in the checked bytes, what).

use super::header::{le32, le64, RawAttr};

/// Checks one `perf_event_attr` of `bytes.len()` bytes (an attrs section entry without its
/// ids section, or a HEADER_ATTR record body without its ids): its `size` field is a
/// `perf_event_attr` version size between 64 and `bytes.len()`. Returns our parse of it.
pub(super) fn check_attr(bytes: &[u8]) -> Result<RawAttr, (u64, String)> {
    let len = bytes.len();
    let attr =
        RawAttr::parse(bytes).ok_or_else(|| (0, format!("attr of {len} bytes is too short")))?;
    if attr.size as usize > len || attr.size < 64 {
        return Err((
            4,
            format!("attr size {} out of range [64, {len}]", attr.size),
        ));
    }
    if !is_attr_version_size(u64::from(attr.size)) {
        return Err((4, attr_version_error(attr.size.into())));
    }
    Ok(attr)
}

/// An event of a HEADER_EVENT_DESC section, as far as [`check_event_desc`] reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct EventDescEntry {
    /// The event's name (`None` when it is not UTF-8, as linux-perf-data reads it).
    pub name: Option<String>,
    /// The first of its event ids, `None` without ids.
    pub first_id: Option<u64>,
}

/// Walks a HEADER_EVENT_DESC section (`u32 nr, attr_size; { attr[attr_size]; u32 nr_ids;
/// perf_header_string name; u64 ids[nr_ids] }[nr]`): every count must fit in the section.
/// Returns each event's name and first id. Errors are (offset in the section, what).
pub(super) fn check_event_desc(data: &[u8]) -> Result<Vec<EventDescEntry>, (u64, String)> {
    let len = data.len() as u64;
    let u32_at = |at: u64, what: &str| -> Result<u64, (u64, String)> {
        data.get(at as usize..at as usize + 4)
            .map(|b| le32(b) as u64)
            .ok_or_else(|| {
                (
                    at,
                    format!("event_desc {what} past the end of the {len}-byte section"),
                )
            })
    };
    let nr = u32_at(0, "nr")?;
    let attr_size = u32_at(4, "attr_size")?;
    if !(64..=4096).contains(&attr_size) {
        return Err((
            4,
            format!("event_desc attr_size {attr_size} out of range [64, 4096]"),
        ));
    }
    let mut pos = 8u64;
    let mut events = Vec::new();
    for i in 0..nr {
        if pos + attr_size + 8 > len {
            return Err((
                0,
                format!(
                    "event_desc nr {nr}: event {i} starts past the end of the {len}-byte section"
                ),
            ));
        }
        let own = u32_at(pos + 4, "attr size")?;
        if own > attr_size || !is_attr_version_size(own) {
            return Err((
                pos + 4,
                format!("event_desc event {i}: {}", attr_version_error(own)),
            ));
        }
        pos += attr_size;
        let nr_ids = u32_at(pos, "nr_ids")?;
        let name_len = u32_at(pos + 4, "name length")?;
        let end = pos + 8 + name_len + nr_ids * 8;
        if end > len {
            return Err((pos, format!("event_desc event {i}: name of {name_len} bytes and {nr_ids} ids exceed the {len}-byte section")));
        }
        let name = &data[(pos + 8) as usize..(pos + 8 + name_len) as usize];
        let name = &name[..name.iter().position(|&b| b == 0).unwrap_or(name.len())];
        let ids = (pos + 8 + name_len) as usize;
        events.push(EventDescEntry {
            name: std::str::from_utf8(name).ok().map(str::to_string),
            first_id: (nr_ids > 0).then(|| le64(&data[ids..ids + 8])),
        });
        pos = end;
    }
    Ok(events)
}

/// True when linux-perf-event-reader reads exactly `size` bytes of an attr whose `size`
/// field says so: a `PERF_ATTR_SIZE_VER*` size, or any size past VER7 (it reads the known
/// fields of the largest version at or below `size`, and skips the rest only past VER7).
fn is_attr_version_size(size: u64) -> bool {
    size >= 128 || [64, 72, 80, 96, 104, 112, 120].contains(&size)
}

fn attr_version_error(size: u64) -> String {
    format!("attr size {size} is not a perf_event_attr version size (64, 72, 80, 96, 104, 112, 120 or >= 128)")
}

/// Walks a perf string list (`u32 nr; { u32 len; char s[len] }[nr]`) starting at `start`
/// and returns the offset after it. Errors are (offset in the section, what).
pub(super) fn check_string_list(data: &[u8], start: u64) -> Result<u64, (u64, String)> {
    let len = data.len() as u64;
    let u32_at = |at: u64| {
        data.get(at as usize..at as usize + 4)
            .map(|b| le32(b) as u64)
    };
    let nr = u32_at(start).ok_or((
        start,
        format!("string list count past the end of the {len}-byte section"),
    ))?;
    let mut pos = start + 4;
    for i in 0..nr {
        let n = u32_at(pos).ok_or((
            pos,
            format!(
                "string list of {nr}: string {i} starts past the end of the {len}-byte section"
            ),
        ))?;
        if pos + 4 + n > len {
            return Err((
                pos,
                format!("string {i} of {n} bytes exceeds the {len}-byte section"),
            ));
        }
        pos += 4 + n;
    }
    Ok(pos)
}
