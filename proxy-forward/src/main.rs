//! ctcp-forward: SOCKSv5 server next to the clients; see `--help` and README.md.

mod cli;

use anyhow::Context;
use clap::{CommandFactory, Parser};
use ctcp_config::ForwardConfig;
use ctcp_runtime::{app, keys, notes};

fn main() -> std::process::ExitCode {
    // Print the error chain plainly (no backtrace, even if RUST_BACKTRACE is set) and exit 1.
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ctcp-forward: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

#[tokio::main]
async fn run() -> anyhow::Result<()> {
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
        Some(p) => ForwardConfig::load(p)?,
        None => ForwardConfig::default(),
    };
    let cfg = cli.apply(file)?;
    let settings = app::forward_settings(&cfg)?;
    let notes = notes::forward_notes(&cfg)?;
    if cli.check_config {
        let gateway = cfg
            .transparent_listen
            .map(|t| format!(", transparent ({}) on {t}", cfg.transparent_mode))
            .unwrap_or_default();
        println!(
            "configuration OK: SOCKS on {}, peer {}{gateway}",
            cfg.listen, settings.peer
        );
        notes.print();
        return Ok(());
    }
    let log = app::init_logging(&cfg.log);
    notes.log();
    app::raise_open_file_limit_logged();
    // Before the proxy says it started, so that no signal sent after that line is lost.
    let signals = ctcp_runtime::signals::Signals::install().ok();
    let running = ctcp_runtime::start_forward(settings)
        .await
        .context("starting ctcp-forward")?;
    let users = running.live.socks_auth.clone();
    let reload_cli = cli.clone();
    let reload = app::Reload {
        path: cli.config.clone(),
        // New SOCKS connections use the reloaded users; a bad file changes nothing.
        apply: Box::new(move |p| {
            let cfg = reload_cli.apply(ForwardConfig::load(p)?)?;
            if let Some(w) = notes::open_proxy_warning(&cfg) {
                tracing::warn!("{w}");
            }
            if let Some(u) = &users {
                u.store(app::socks_auth(&cfg));
            }
            Ok(cfg.log)
        }),
    };
    app::run_until_signalled(running, signals, log, reload)
        .await
        .context("ctcp-forward stopped with an error")
}

/// The configuration `status` reads without --config: the packaged one, if present.
const DEFAULT_CONFIG: &str = "/etc/ctcp/forward.toml";

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
                Some(p) => ForwardConfig::load(p)?,
                None => ForwardConfig::default(),
            };
            cli.apply(file)?.metrics_listen
        }
    };
    let listen = listen.ok_or(ctcp_runtime::status::StatusError::NoListener)?;
    let table = ctcp_runtime::status::run(listen, args.sample, "ctcp-forward")?;
    print!("{table}");
    Ok(())
}
