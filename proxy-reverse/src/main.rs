//! ctcp-reverse: tunnel endpoint next to the servers; see `--help` and README.md.

mod cli;

use anyhow::Context;
use clap::Parser;
use ctcp_config::ReverseConfig;
use ctcp_runtime::app;

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

#[tokio::main]
async fn run() -> anyhow::Result<()> {
    let cli = cli::Cli::parse();
    let file = match &cli.config {
        Some(p) => ReverseConfig::load(p)?,
        None => ReverseConfig::default(),
    };
    let cfg = cli.apply(file)?;
    let settings = app::reverse_settings(&cfg)?;
    if cli.check_config {
        println!(
            "configuration OK: UDP on {}, {} ACL rules",
            cfg.listen,
            cfg.acl.len()
        );
        return Ok(());
    }
    let log = app::init_logging(&cfg.log);
    let running = ctcp_runtime::start_reverse(settings)
        .await
        .context("starting ctcp-reverse")?;
    let reload = app::Reload {
        path: cli.config.clone(),
        read_log: |p| ReverseConfig::load(p).map(|c| c.log),
    };
    app::run_until_signalled(running, log, reload)
        .await
        .context("ctcp-reverse stopped with an error")
}
