//! ctcp-linkem: userspace link emulator between two network namespaces; see
//! `--help` and the `ctcp_linkem` crate docs.

mod cli;

use std::path::Path;

use anyhow::Context;
use clap::Parser;
use ctcp_linkem::{netns, Emulator, StatsOptions, StatsSink};
use tokio::signal::unix::{signal, SignalKind};

fn main() -> std::process::ExitCode {
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ctcp-linkem: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

#[tokio::main(flavor = "current_thread")]
async fn run() -> anyhow::Result<()> {
    let cli = cli::Cli::parse();
    init_logging();
    if cli.cleanup {
        let middle = netns::list()?.into_iter().filter(|n| {
            n.strip_prefix(cli.mid_prefix.as_str())
                .is_some_and(|rest| !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_digit()))
        });
        let named = [&cli.ns_a, &cli.ns_b]
            .into_iter()
            .chain(cli.client_ns.iter())
            .chain(cli.server_ns.iter())
            .cloned();
        for ns in named.chain(middle) {
            if netns::remove_if_exists(&ns)? {
                tracing::info!(ns = %ns, "removed leftover namespace");
            }
        }
        return Ok(());
    }
    if let (Some(socket), Some(command)) = (&cli.control, &cli.ctl) {
        let reply = ctcp_linkem::control::send(socket, command)
            .with_context(|| format!("control socket {}", socket.display()))?;
        print!("{reply}");
        if !reply.ends_with('\n') {
            println!();
        }
        return Ok(());
    }
    let config = cli.chain_config()?;
    // Installed before anything is created, so SIGINT/SIGTERM at any point
    // after this leads to a clean teardown rather than the default exit.
    let mut term = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    let mut int = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
    if let Some(path) = &cli.ready_file {
        remove_file_if_exists(path).context("removing a stale ready file")?;
    }
    let sink = StatsSink::open(cli.stats_file.as_deref()).context("opening the stats file")?;
    let mut emulator = Emulator::setup_chain(&config).context("setting up the link")?;

    let result = async {
        if let Some(path) = &cli.ready_file {
            write_ready_file(path).context("writing the ready file")?;
        }
        eprintln!("ready");
        let shutdown = async {
            tokio::select! {
                _ = term.recv() => tracing::info!("SIGTERM: stopping"),
                _ = int.recv() => tracing::info!("SIGINT: stopping"),
            }
        };
        let stats = StatsOptions {
            sink,
            interval: Some(cli.stats_interval),
        };
        emulator
            .run_controlled(shutdown, stats, cli.control.as_deref())
            .await?;
        anyhow::Ok(())
    }
    .await;

    if let Some(path) = &cli.ready_file {
        if let Err(e) = remove_file_if_exists(path) {
            tracing::warn!(path = %path.display(), error = %e, "cannot remove the ready file");
        }
    }
    let teardown = emulator.teardown().context("removing the namespaces");
    result?;
    teardown
}

fn init_logging() {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr)
        .init();
}

/// Writes `ready` to `path` atomically (a temporary file renamed into
/// place), so a runner polling for the file never reads it half-written.
fn write_ready_file(path: &Path) -> std::io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    std::fs::write(&tmp, "ready\n")?;
    std::fs::rename(&tmp, path)
}

fn remove_file_if_exists(path: &Path) -> std::io::Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}
