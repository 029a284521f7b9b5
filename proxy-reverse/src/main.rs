//! ctcp-reverse: tunnel endpoint next to the servers; see `--help` and README.md.

mod cli;

use anyhow::Context;
use clap::Parser;
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

#[tokio::main]
async fn run() -> anyhow::Result<()> {
    let cli = cli::Cli::parse();
    if let Some(cli::Command::Keygen(k)) = &cli.command {
        return keys::keygen(k.out.as_deref(), k.force).context("keygen");
    }
    let file = match &cli.config {
        Some(p) => ReverseConfig::load(p)?,
        None => ReverseConfig::default(),
    };
    let cfg = cli.apply(file)?;
    let settings = app::reverse_settings(&cfg)?;
    let notes = notes::reverse_notes(&cfg)?;
    if cli.check_config {
        println!(
            "configuration OK: UDP on {}, {} ACL rules",
            cfg.listen,
            cfg.acl.len()
        );
        notes.print();
        return Ok(());
    }
    let log = app::init_logging(&cfg.log);
    notes.log();
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
    app::run_until_signalled(running, log, reload)
        .await
        .context("ctcp-reverse stopped with an error")
}
