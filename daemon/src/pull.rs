//! `pgo-agent pull`: fetches one build id's unsymbolized profile from many agents
//! (`GET /api/v1/profiles/{id}?format=unsymbolized`), sums them ([`crate::merge`]) and
//! writes the sum, or symbolizes it with a local binary.

use std::io::Read;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::Args;

use crate::merge::{merge_and_write, MergeFormat, MAX_INPUT_BYTES};

/// What `pgo-agent pull --help` adds below the flags.
const PULL_AFTER_HELP: &str = "\
Give the agents (--agent, repeated) or a ClickHouse server (--clickhouse), not both.
Without --binary the sum is written unsymbolized; with it, extbinary unless --format says
otherwise. The binary's build id must be --build-id.

Examples:
  pgo-agent pull --agent http://web1:9464 --agent http://web2:9464 \\
      --build-id BUILD_ID --binary ./app -o app.prof
  pgo-agent pull --agent http://127.0.0.1:9464 --build-id BUILD_ID -o app.unsymbolized
  pgo-agent pull --clickhouse http://127.0.0.1:8123 --build-id BUILD_ID --binary ./app -o app.prof";

/// `pgo-agent pull` arguments.
#[derive(Debug, Clone, Args)]
#[command(after_help = PULL_AFTER_HELP)]
pub struct PullArgs {
    /// Agent base URLs (`http://host:9464`); repeat for many agents.
    #[arg(long = "agent", required_unless_present = "clickhouse")]
    pub agents: Vec<String>,
    /// ClickHouse HTTP URL: ask it for the fleet-merged counters instead of the agents
    /// (one aggregate query; see `pgo-agent clickhouse init`).
    #[arg(long, conflicts_with = "agents")]
    pub clickhouse: Option<String>,
    /// ClickHouse database.
    #[arg(long, default_value = "pgo", requires = "clickhouse")]
    pub database: String,
    /// ClickHouse user (HTTP basic auth).
    #[arg(long, requires = "clickhouse")]
    pub user: Option<String>,
    /// File whose first line is the ClickHouse password.
    #[arg(long, requires = "clickhouse")]
    pub password_file: Option<PathBuf>,
    /// Only windows starting at or after this Unix time (seconds).
    #[arg(long, requires = "clickhouse")]
    pub since: Option<u64>,
    /// Query the cluster's Distributed tables (`<table>_dist`).
    #[arg(long, requires = "clickhouse")]
    pub distributed: bool,
    /// Build id (hex) of the binary.
    #[arg(long)]
    pub build_id: String,
    /// Local copy of the binary: symbolize here (text/extbinary).
    #[arg(long)]
    pub binary: Option<PathBuf>,
    /// Output format (default: extbinary with --binary, else unsymbolized).
    #[arg(long, value_enum)]
    pub format: Option<MergeFormat>,
    /// Bearer token file (first line) for agents that require one.
    #[arg(long)]
    pub token_file: Option<PathBuf>,
    /// Skip agents that do not have the profile (404) instead of failing.
    #[arg(long)]
    pub allow_missing: bool,
    /// Per-request timeout.
    #[arg(long, default_value_t = 60)]
    pub timeout_secs: u64,
    /// Output file.
    #[arg(short, long)]
    pub output: PathBuf,
}

/// Runs `pgo-agent pull`.
pub fn run(args: PullArgs) -> anyhow::Result<std::process::ExitCode> {
    if let Some(url) = &args.clickhouse {
        return crate::clickhouse_cmd::pull(&args, url);
    }
    let id = collector::BuildId::from_hex(&args.build_id)
        .with_context(|| format!("--build-id {:?} is not hex", args.build_id))?;
    let token = match &args.token_file {
        Some(p) => Some(crate::run::http::read_token(p)?),
        None => None,
    };
    let agent = ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(args.timeout_secs))
        .build();
    let mut texts = Vec::new();
    for base in &args.agents {
        let url = format!(
            "{}/api/v1/profiles/{}?format=unsymbolized",
            base.trim_end_matches('/'),
            id.to_hex()
        );
        let mut req = agent.get(&url);
        if let Some(t) = &token {
            req = req.set("Authorization", &format!("Bearer {t}"));
        }
        let resp = match req.call() {
            Ok(r) => r,
            Err(ureq::Error::Status(404, _)) if args.allow_missing => {
                eprintln!("pgo-agent: pull: {base} has no profile for {}", id.to_hex());
                continue;
            }
            Err(ureq::Error::Status(code, r)) => {
                let body = r.into_string().unwrap_or_default();
                bail!("GET {url}: HTTP {code}: {}", body.trim());
            }
            Err(e) => return Err(e).with_context(|| format!("GET {url}")),
        };
        let served = resp
            .header("x-pgo-profile-format")
            .unwrap_or("unsymbolized");
        anyhow::ensure!(
            served == "unsymbolized",
            "GET {url}: agent served {served:?}, not the unsymbolized profile"
        );
        let mut text = String::new();
        resp.into_reader()
            .take(MAX_INPUT_BYTES + 1)
            .read_to_string(&mut text)
            .with_context(|| format!("reading GET {url}"))?;
        anyhow::ensure!(
            text.len() as u64 <= MAX_INPUT_BYTES,
            "GET {url}: response exceeds {MAX_INPUT_BYTES} bytes"
        );
        texts.push((url, text));
    }
    anyhow::ensure!(
        !texts.is_empty(),
        "no agent had a profile for {}",
        id.to_hex()
    );
    merge_and_write(
        &texts,
        args.binary.as_deref(),
        Some(&id.to_hex()),
        args.format,
        &args.output,
    )?;
    eprintln!(
        "pgo-agent: pull: merged {} profiles into {}",
        texts.len(),
        args.output.display()
    );
    Ok(std::process::ExitCode::SUCCESS)
}
