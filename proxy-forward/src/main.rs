//! ctcp-forward: SOCKSv5 server next to the clients; see `--help` and README.md.

mod cli;

use anyhow::Context;
use clap::Parser;
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
    if let Some(cli::Command::Keygen(k)) = &cli.command {
        return keys::keygen(k.out.as_deref(), k.force).context("keygen");
    }
    let file = match &cli.config {
        Some(p) => ForwardConfig::load(p)?,
        None => ForwardConfig::default(),
    };
    let cfg = cli.apply(file)?;
    let settings = app::forward_settings(&cfg)?;
    let notes = notes::forward_notes(&cfg)?;
    if cli.check_config {
        println!(
            "configuration OK: SOCKS on {}, peer {}",
            cfg.listen, settings.peer
        );
        notes.print();
        return Ok(());
    }
    let log = app::init_logging(&cfg.log);
    notes.log();
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
    app::run_until_signalled(running, log, reload)
        .await
        .context("ctcp-forward stopped with an error")
}
