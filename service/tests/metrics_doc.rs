//! The documentation against the code:
//!
//! * the metrics table of `docs/operations.md` names every metric family the service
//!   registers, and no other;
//! * every relative link of the repository's Markdown pages resolves (file and heading), the
//!   README links every page, and the README stays within 20 KiB;
//! * no text file speaks of work sessions by number (history belongs in `git log`).

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use service::metrics::{self, DaemonCounters, Metrics};
use service::store::{ProfileQuality, ProfileSummary, Symbolization, WindowRange};

/// The page that lists the metrics, relative to the repository root.
const METRICS_PAGE: &str = "docs/operations.md";
/// The heading of its metrics section.
const METRICS_HEADING: &str = "## Metrics";
/// Largest README, in bytes.
const README_MAX_BYTES: usize = 20 * 1024;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the service crate lives in the workspace root")
        .to_path_buf()
}

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The families a [`Metrics`] registry exposes. A family with labels appears in the exposition
/// only once one of its label sets has a value, so each is given one here, through the calls
/// the daemon makes.
fn exposed_families() -> BTreeSet<String> {
    let m = Metrics::new();
    m.observe_daemon(&DaemonCounters {
        mode: "cpu_clock",
        samples: 1,
        not_routed: vec![("filtered", 1)],
        ..DaemonCounters::default()
    });
    m.observe_store(&[ProfileSummary {
        build_id: "ab".into(),
        binary_paths: vec![],
        mode: "cpu_clock".into(),
        kind: "flat".into(),
        samples: 1,
        window: WindowRange {
            retained_secs: 0,
            last_flush_unix_secs: 0,
        },
        has_pseudo_probes: None,
        symbolization: Symbolization::BinaryNotFound,
        names: None,
        unwind_errors: [("bogus_trace".to_string(), 1)].into_iter().collect(),
        density: None,
        stack_repairs: [("repaired".to_string(), 1)].into_iter().collect(),
        freshness: Default::default(),
    }]);
    m.observe_quality(&[(
        "ab".into(),
        ProfileQuality {
            density: 1.0,
            taken_branches_per_text_byte: 1.0,
            stale_sample_share: 0.0,
        },
        service::sampling_guidance::density_guidance(1.0, 60, 60, 60),
    )]);
    m.observe_http("/healthz", "GET", 200, Duration::from_millis(1));
    metrics::observe_flush(Duration::from_millis(1));
    metrics::count_flush_failure();
    metrics::count_state_file_set_aside("checksum");
    metrics::count_evictions("context", 1);
    metrics::count_binary_rejected("too_large");
    metrics::count_heap_profile_ingested();
    metrics::count_heap_profile_rejected("truncated");
    metrics::observe_sink_insert(1, Duration::from_millis(1));
    metrics::sink_insert_error("connect");
    metrics::set_sink_spool(1, 1);
    metrics::sink_windows_dropped(1);
    m.encode()
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

/// Every `"pgo_agent_…"` string literal (the whole literal a metric name) in the service crate's
/// sources: a family's name is written once, where the family is made.
fn families_in_source() -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for file in files_under(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"), &[]) {
        if file.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        let text = read(&file);
        for (at, _) in text.match_indices("\"pgo_agent_") {
            let rest = &text[at + 1..];
            let end = rest
                .find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'))
                .unwrap_or(rest.len());
            if rest[end..].starts_with('"') && end > "pgo_agent_".len() {
                names.insert(rest[..end].to_string());
            }
        }
    }
    names
}

/// The metric names in the first column of the metrics table of [`METRICS_PAGE`].
fn families_in_doc() -> BTreeSet<String> {
    let page = read(&repo_root().join(METRICS_PAGE));
    let section = page
        .split_once(&format!("\n{METRICS_HEADING}\n"))
        .unwrap_or_else(|| panic!("{METRICS_PAGE} has no `{METRICS_HEADING}` section"))
        .1;
    let section = section.split("\n## ").next().unwrap_or(section);
    section
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split_once('`'))
        .map(|(name, _)| name.to_string())
        .filter(|name| name.starts_with("pgo_agent_"))
        .collect()
}

#[test]
fn metrics_page_lists_every_registered_family() {
    let exposed = exposed_families();
    let in_source = families_in_source();
    assert!(
        exposed.len() > 10,
        "the exposition names too few families: {exposed:?}"
    );
    let not_exposed: Vec<_> = in_source.difference(&exposed).collect();
    assert!(
        not_exposed.is_empty(),
        "families named in service/src but not in the exposition of Metrics::new (register \
         them there, and give them a series in exposed_families above): {not_exposed:?}"
    );
    let not_in_source: Vec<_> = exposed.difference(&in_source).collect();
    assert!(
        not_in_source.is_empty(),
        "families exposed but not found in service/src (families_in_source above misses \
         them): {not_in_source:?}"
    );

    let documented = families_in_doc();
    let undocumented: Vec<_> = exposed.difference(&documented).collect();
    assert!(
        undocumented.is_empty(),
        "{METRICS_PAGE}, section `{METRICS_HEADING}`: add a table row for each of \
         {undocumented:?}"
    );
    let stale: Vec<_> = documented.difference(&exposed).collect();
    assert!(
        stale.is_empty(),
        "{METRICS_PAGE}, section `{METRICS_HEADING}` lists families the code does not \
         register: {stale:?}"
    );
}

/// Files under `dir`, recursively, skipping build output, version control, the fuzzers'
/// working directories and the directories named in `skip` (relative to `dir`).
fn files_under(dir: &Path, skip: &[&str]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = fs::read_dir(&d) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            if kind.is_dir() {
                let rel = path.strip_prefix(dir).unwrap_or(&path);
                let skipped = name == "target"
                    || name.starts_with('.') && name != ".ci"
                    || skip.iter().any(|s| rel == Path::new(s));
                if !skipped {
                    stack.push(path);
                }
            } else if kind.is_file() {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// Directories of the repository that hold no documentation or source of ours (fuzzers'
/// inputs and outputs, built test programs).
const NOT_OURS: &[&str] = &[
    "fuzz/corpus",
    "fuzz/work",
    "fuzz/artifacts",
    "tests/programs/build",
];

/// The Markdown pages of the repository.
fn pages() -> Vec<PathBuf> {
    files_under(&repo_root(), NOT_OURS)
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect()
}

/// `text` without its fenced code blocks (their lines are left empty).
fn prose(text: &str) -> String {
    let mut fenced = false;
    text.lines()
        .map(|line| {
            if line.trim_start().starts_with("```") {
                fenced = !fenced;
                return "";
            }
            if fenced {
                ""
            } else {
                line
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The targets of the inline links (`[text](target)`) of a page, outside code.
fn link_targets(page: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in prose(page).lines() {
        // Inline code spans may show link syntax; drop them.
        let mut plain = String::new();
        for (i, part) in line.split('`').enumerate() {
            if i % 2 == 0 {
                plain.push_str(part);
            }
        }
        let mut rest = plain.as_str();
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let Some(end) = after.find(')') else {
                break;
            };
            out.push(after[..end].trim().to_string());
            rest = &after[end..];
        }
    }
    out
}

/// GitHub's anchor for a heading's text: lower case, punctuation dropped, spaces to hyphens.
fn anchor_of(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors of a page's headings (a repeated heading gets `-1`, `-2`, … as on GitHub).
fn anchors(page: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = BTreeSet::new();
    for line in prose(page).lines() {
        let hashes = line.chars().take_while(|c| *c == '#').count();
        if hashes == 0 || hashes > 6 || !line[hashes..].starts_with(' ') {
            continue;
        }
        let base = anchor_of(&line[hashes..]);
        let n = seen.entry(base.clone()).or_insert(0);
        out.insert(if *n == 0 {
            base.clone()
        } else {
            format!("{base}-{n}")
        });
        *n += 1;
    }
    out
}

/// `path` with `.` and `..` resolved lexically.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

#[test]
fn markdown_links_resolve_and_the_readme_links_every_page() {
    let root = repo_root();
    let pages = pages();
    assert!(pages.len() > 5, "too few pages found: {pages:?}");
    let mut broken = Vec::new();
    let mut linked_from_readme = BTreeSet::new();
    for page in &pages {
        let text = read(page);
        let dir = page.parent().expect("a page is in a directory");
        for target in link_targets(&text) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (file, anchor) = match target.split_once('#') {
                Some((f, a)) => (f, Some(a)),
                None => (target.as_str(), None),
            };
            let resolved = if file.is_empty() {
                page.clone()
            } else {
                normalize(&dir.join(file))
            };
            let name = page.strip_prefix(&root).unwrap_or(page).display();
            if !resolved.exists() {
                broken.push(format!("{name}: ({target}): no such file"));
                continue;
            }
            if page == &root.join("README.md") {
                linked_from_readme.insert(resolved.clone());
            }
            if let Some(anchor) = anchor {
                if resolved.extension().is_some_and(|e| e == "md")
                    && !anchors(&read(&resolved)).contains(anchor)
                {
                    broken.push(format!("{name}: ({target}): no such heading"));
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));

    let unlinked: Vec<_> = pages
        .iter()
        .filter(|p| **p != root.join("README.md") && !linked_from_readme.contains(*p))
        .map(|p| p.strip_prefix(&root).unwrap_or(p).display().to_string())
        .collect();
    assert!(
        unlinked.is_empty(),
        "README.md does not link these pages: {unlinked:?}"
    );

    let readme = fs::metadata(root.join("README.md"))
        .expect("README.md")
        .len() as usize;
    assert!(
        readme <= README_MAX_BYTES,
        "README.md is {readme} bytes, over {README_MAX_BYTES}: move detail into the pages it links"
    );
}

#[test]
fn no_text_speaks_of_numbered_sessions() {
    // "session" followed by a space and a digit, in any case, in our text files.
    let word = "session ";
    let mut hits = Vec::new();
    let root = repo_root();
    for file in files_under(&root, NOT_OURS) {
        let text_like = file.extension().is_some_and(|e| {
            [
                "rs", "md", "sh", "toml", "py", "c", "cc", "cpp", "service", "yml", "yaml",
            ]
            .iter()
            .any(|x| e == *x)
        }) || file.ends_with(".ci/run");
        if !text_like {
            continue;
        }
        let Ok(text) = fs::read_to_string(&file) else {
            continue;
        };
        let lower = text.to_lowercase();
        for (at, _) in lower.match_indices(word) {
            if lower[at + word.len()..].starts_with(|c: char| c.is_ascii_digit()) {
                let line = lower[..at].matches('\n').count() + 1;
                hits.push(format!(
                    "{}:{line}",
                    file.strip_prefix(&root).unwrap_or(&file).display()
                ));
            }
        }
    }
    assert!(
        hits.is_empty(),
        "numbered work sessions are history, which belongs in git log: {hits:?}"
    );
}
