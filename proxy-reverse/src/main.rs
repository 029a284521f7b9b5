//! ctcp-reverse: tunnel endpoint next to the servers; see `--help` and README.md.

mod cli;

use anyhow::Context;
use clap::{CommandFactory, Parser};
use ctcp_config::ReverseConfig;
use ctcp_runtime::{app, keys, notes};

fn main() -> std::process::ExitCode {
    // Print the error chain plainly (no backtrace, even if RUST_BACKTRACE is set) and exit 1.
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ctcp-reverse: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run() -> anyhow::Result<()> {
    let cli = cli::Cli::parse();
    match &cli.command {
        Some(cli::Command::Keygen(k)) => {
            return keys::keygen(k.out.as_deref(), k.force).context("keygen")
        }
        Some(cli::Command::Status(s)) => return status(&cli, s),
        Some(cli::Command::GenMan(g)) => {
            let pages = ctcp_config::cli::write_man_pages(cli::Cli::command(), &g.dir)
                .with_context(|| format!("writing man pages to {}", g.dir.display()))?;
            for p in pages {
                println!("{}", p.display());
            }
            return Ok(());
        }
        Some(cli::Command::GenCompletions(g)) => {
            let files = ctcp_config::cli::write_completions(cli::Cli::command(), &g.dir)
                .with_context(|| format!("writing completions to {}", g.dir.display()))?;
            for p in files {
                println!("{}", p.display());
            }
            return Ok(());
        }
        None => {}
    }
    let file = match &cli.config {
        Some(p) => ReverseConfig::load(p)?,
        None => ReverseConfig::default(),
    };
    let cfg = cli.apply(file)?;
    let settings = app::reverse_settings(&cfg)?;
    let notes = notes::reverse_notes(&cfg)?;
    if cli.check_config {
        match &cfg.relay.next_hop {
            Some(hop) => println!(
                "configuration OK: UDP on {}, relaying to {hop} (buffer {} bytes per session)",
                cfg.listen, cfg.relay.buffer
            ),
            None => println!(
                "configuration OK: UDP on {}, {} ACL rules",
                cfg.listen,
                cfg.acl.len()
            ),
        }
        notes.print();
        return Ok(());
    }
    let log = app::init_logging(&cfg.log);
    notes.log();
    app::raise_open_file_limit_logged();
    // The shards and their sessions' streams run on threads of their own; this runtime
    // keeps the accept loop, signals, metrics and UDP flows, as many threads as shards.
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(settings.workers)
        .enable_all()
        .build()
        .context("starting the tokio runtime")?
        .block_on(serve(cli, settings, log))
}

/// Runs the proxy until a signal stops it.
async fn serve(
    cli: cli::Cli,
    settings: ctcp_runtime::ReverseSettings,
    log: app::LogHandle,
) -> anyhow::Result<()> {
    // Before the proxy says it started, so that no signal sent after that line is lost.
    let signals = ctcp_runtime::signals::Signals::install().ok();
    let running = ctcp_runtime::start_reverse(settings)
        .await
        .context("starting ctcp-reverse")?;
    let acl = running.live.acl.clone();
    let reload_cli = cli.clone();
    let reload = app::Reload {
        path: cli.config.clone(),
        // New streams are checked against the reloaded ACL; a bad file changes nothing.
        apply: Box::new(move |p| {
            let cfg = reload_cli.apply(ReverseConfig::load(p)?)?;
            if let Some(a) = &acl {
                a.store(app::acl(&cfg));
            }
            Ok(cfg.log)
        }),
    };
    app::run_until_signalled(running, signals, log, reload)
        .await
        .context("ctcp-reverse stopped with an error")
}

/// The configuration `status` reads without --config: the packaged one, if present.
const DEFAULT_CONFIG: &str = "/etc/ctcp/reverse.toml";

/// `status`: finds the metrics endpoint in the configuration (or --metrics-listen) and
/// prints the running proxy's sessions.
fn status(cli: &cli::Cli, args: &ctcp_config::cli::StatusArgs) -> anyhow::Result<()> {
    let listen = match args.metrics_listen {
        Some(a) => Some(a),
        None => {
            let path = cli.config.clone().or_else(|| {
                let p = std::path::PathBuf::from(DEFAULT_CONFIG);
                p.exists().then_some(p)
            });
            let file = match &path {
                Some(p) => ReverseConfig::load(p)?,
                None => ReverseConfig::default(),
            };
            cli.apply(file)?.metrics_listen
        }
    };
    let listen = listen.ok_or(ctcp_runtime::status::StatusError::NoListener)?;
    let table = ctcp_runtime::status::run(listen, args.sample, "ctcp-reverse")?;
    print!("{table}");
    Ok(())
}
