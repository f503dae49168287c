//! `pgo-agent clickhouse init` (the schema of [`crate::sink::clickhouse`]) and the
//! ClickHouse side of `pgo-agent pull --clickhouse`.

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Subcommand};

use crate::merge::{load_binary, write_counters, MergeFormat};
use crate::pull::PullArgs;
use crate::sink::clickhouse::{
    check_identifier, fetch_fleet_counters, rebase, schema_sql, ClickHouseClient, ClickHouseTarget,
};
use crate::sink::read_password;

/// `pgo-agent clickhouse` arguments.
#[derive(Debug, Clone, Args)]
pub struct ClickHouseArgs {
    /// What to do.
    #[command(subcommand)]
    pub command: ClickHouseCommand,
}

/// `pgo-agent clickhouse` subcommands.
#[derive(Debug, Clone, Subcommand)]
pub enum ClickHouseCommand {
    /// Create the database and tables the sink inserts into (idempotent).
    Init(InitArgs),
}

/// `pgo-agent clickhouse init` arguments.
#[derive(Debug, Clone, Args)]
pub struct InitArgs {
    /// ClickHouse HTTP URL (`http://host:8123`).
    #[arg(long, required_unless_present = "print")]
    pub url: Option<String>,
    /// Database.
    #[arg(long, default_value = "pgo")]
    pub database: String,
    /// User (HTTP basic auth).
    #[arg(long)]
    pub user: Option<String>,
    /// File whose first line is the password.
    #[arg(long)]
    pub password_file: Option<PathBuf>,
    /// Also create `<table>_dist` Distributed tables over this cluster (from the server's
    /// `remote_servers`), sharded by build id. Run `init` on every node.
    #[arg(long)]
    pub cluster: Option<String>,
    /// Print the statements instead of running them.
    #[arg(long)]
    pub print: bool,
    /// Per-request timeout.
    #[arg(long, default_value_t = 30)]
    pub timeout_secs: u64,
}

/// Connection options shared by `init` and `pull --clickhouse`.
fn target(
    url: &str,
    database: &str,
    user: Option<&str>,
    password_file: Option<&std::path::Path>,
    timeout: Duration,
    distributed: bool,
) -> anyhow::Result<ClickHouseTarget> {
    check_identifier("--database", database)?;
    Ok(ClickHouseTarget {
        url: url.to_string(),
        database: database.to_string(),
        user: user.map(str::to_string),
        password: password_file.map(read_password).transpose()?,
        timeout,
        distributed,
    })
}

/// Runs `pgo-agent clickhouse`.
pub fn run(args: ClickHouseArgs) -> anyhow::Result<std::process::ExitCode> {
    match args.command {
        ClickHouseCommand::Init(a) => init(a),
    }
}

fn init(a: InitArgs) -> anyhow::Result<std::process::ExitCode> {
    if let Some(c) = &a.cluster {
        check_identifier("--cluster", c)?;
    }
    check_identifier("--database", &a.database)?;
    let statements = schema_sql(&a.database, a.cluster.as_deref());
    if a.print {
        let mut out = std::io::stdout().lock();
        for s in &statements {
            writeln!(out, "{s};")?;
        }
        return Ok(std::process::ExitCode::SUCCESS);
    }
    let url = a.url.as_deref().unwrap_or_default();
    let client = ClickHouseClient::new(target(
        url,
        &a.database,
        a.user.as_deref(),
        a.password_file.as_deref(),
        Duration::from_secs(a.timeout_secs.max(1)),
        false,
    )?)?;
    for s in &statements {
        client.query(s).with_context(|| format!("running {s}"))?;
    }
    eprintln!(
        "pgo-agent: clickhouse init: {} statements run on {} (database {})",
        statements.len(),
        url,
        a.database
    );
    Ok(std::process::ExitCode::SUCCESS)
}

/// `pgo-agent pull --clickhouse URL`: one build id's fleet-merged counters from
/// ClickHouse, written as unsymbolized or symbolized with `--binary`.
pub fn pull(args: &PullArgs, url: &str) -> anyhow::Result<std::process::ExitCode> {
    let id = collector::BuildId::from_hex(&args.build_id)
        .with_context(|| format!("--build-id {:?} is not hex", args.build_id))?;
    let binary = match &args.binary {
        Some(p) => Some(load_binary(p, Some(&id.to_hex()))?),
        None => None,
    };
    let client = ClickHouseClient::new(target(
        url,
        &args.database,
        args.user.as_deref(),
        args.password_file.as_deref(),
        Duration::from_secs(args.timeout_secs.max(1)),
        args.distributed,
    )?)?;
    let fleet = fetch_fleet_counters(&client, &id, args.since.unwrap_or(0))?
        .with_context(|| format!("ClickHouse at {url} has no window of {}", id.to_hex()))?;
    let format = args.format.unwrap_or(if binary.is_some() {
        MergeFormat::Extbinary
    } else {
        MergeFormat::Unsymbolized
    });
    if let Some(b) = &binary {
        anyhow::ensure!(
            b.preferred_base() == fleet.preferred_base,
            "the agents reported preferred base {:#x} for {}; the binary has {:#x}",
            fleet.preferred_base,
            id.to_hex(),
            b.preferred_base()
        );
    }
    let counters = rebase(&fleet.counters, fleet.preferred_base);
    let mut out = std::io::BufWriter::new(
        std::fs::File::create(&args.output)
            .with_context(|| format!("creating {}", args.output.display()))?,
    );
    write_counters(
        &counters,
        binary.as_ref(),
        fleet.preferred_base,
        format,
        &mut out,
    )?;
    out.flush()
        .with_context(|| format!("writing {}", args.output.display()))?;
    eprintln!(
        "pgo-agent: pull: {} windows ({} samples) of {} merged by ClickHouse into {}",
        fleet.windows,
        fleet.samples,
        id.to_hex(),
        args.output.display()
    );
    Ok(std::process::ExitCode::SUCCESS)
}
