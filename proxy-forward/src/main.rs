//! ctcp-forward: SOCKSv5 server next to the clients; see `--help` and README.md.

mod cli;

use anyhow::Context;
use clap::Parser;
use ctcp_config::ForwardConfig;
use ctcp_runtime::app;

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
    let file = match &cli.config {
        Some(p) => ForwardConfig::load(p)?,
        None => ForwardConfig::default(),
    };
    let cfg = cli.apply(file)?;
    let settings = app::forward_settings(&cfg)?;
    if cli.check_config {
        println!(
            "configuration OK: SOCKS on {}, peer {}",
            cfg.listen, settings.peer
        );
        return Ok(());
    }
    let log = app::init_logging(&cfg.log);
    let running = ctcp_runtime::start_forward(settings)
        .await
        .context("starting ctcp-forward")?;
    let reload = app::Reload {
        path: cli.config.clone(),
        read_log: |p| ForwardConfig::load(p).map(|c| c.log),
    };
    app::run_until_signalled(running, log, reload)
        .await
        .context("ctcp-forward stopped with an error")
}
