//! What both binaries share: logging set-up, config → settings, systemd readiness, and
//! running until a signal.

use crate::{signals, Acl, ForwardSettings, ReverseSettings, Running};
use ctcp_config::{ConfigError, ForwardConfig, LogConfig, ReverseConfig};
use ctcp_proto::Psk;
use std::io;
use std::path::PathBuf;
use tokio::sync::mpsc;
use tracing_subscriber::{reload, EnvFilter};

/// Handle that changes the log filter at run time (SIGHUP).
pub type LogHandle = reload::Handle<EnvFilter, tracing_subscriber::Registry>;

fn filter(level: &str) -> EnvFilter {
    // RUST_LOG wins over the configured level, as users expect.
    EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(level))
}

/// Installs the global tracing subscriber (text or JSON lines to stderr).
pub fn init_logging(log: &LogConfig) -> LogHandle {
    use tracing_subscriber::prelude::*;
    let (layer, handle) = reload::Layer::new(filter(&log.level));
    let registry = tracing_subscriber::registry().with(layer);
    if log.json {
        registry
            .with(
                tracing_subscriber::fmt::layer()
                    .json()
                    .with_writer(io::stderr),
            )
            .init();
    } else {
        let ansi = std::io::IsTerminal::is_terminal(&io::stderr());
        registry
            .with(
                tracing_subscriber::fmt::layer()
                    .with_ansi(ansi)
                    .with_writer(io::stderr),
            )
            .init();
    }
    handle
}

/// Most open files asked for: the kernel's default `fs.nr_open`, above which `setrlimit`
/// fails even for root.
const MAX_OPEN_FILES: u64 = 1 << 20;

/// Raises the soft open-file limit to the hard one (at most [`MAX_OPEN_FILES`]), as Go's
/// runtime and nginx's `worker_rlimit_nofile` do: every stream holds a socket, and a proxy
/// started outside the packaged units (which set `LimitNOFILE`) gets a soft limit of 1,024
/// on most distributions, which its 500th concurrent stream would reach. Returns the old
/// and new soft limits if it raised them.
///
/// # Errors
/// If the limit cannot be read or set.
pub fn raise_open_file_limit() -> io::Result<Option<(u64, u64)>> {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).map_err(io::Error::from)?;
    let target = hard.min(MAX_OPEN_FILES);
    if soft >= target {
        return Ok(None);
    }
    setrlimit(Resource::RLIMIT_NOFILE, target, hard).map_err(io::Error::from)?;
    Ok(Some((soft, target)))
}

/// [`raise_open_file_limit`], logged: debug when raised, a warning if it failed.
pub fn raise_open_file_limit_logged() {
    match raise_open_file_limit() {
        Ok(Some((from, to))) => tracing::debug!(from, to, "raised the open-file limit"),
        Ok(None) => {}
        Err(e) => tracing::warn!(error = %e, "cannot raise the open-file limit"),
    }
}

/// Loads the key named by the config (or `CTCP_PSK`).
///
/// # Errors
/// As [`ctcp_config::load_psk`].
pub fn load_psk(path: Option<&std::path::Path>) -> Result<Psk, ConfigError> {
    let bytes = ctcp_config::load_psk(path)?;
    Psk::new(&bytes).ok_or_else(|| ConfigError {
        source_name: "<key>".into(),
        line: None,
        key: None,
        message: "key too short".into(),
    })
}

/// Forward settings from a validated config.
///
/// # Errors
/// If no peer is configured or the key cannot be loaded.
pub fn forward_settings(cfg: &ForwardConfig) -> Result<ForwardSettings, ConfigError> {
    let peer = cfg.peer.clone().ok_or_else(|| ConfigError {
        source_name: "<configuration>".into(),
        line: None,
        key: Some("peer".into()),
        message:
            "the reverse proxy's address is required: --peer HOST:PORT or `peer = \"HOST:PORT\"`"
                .into(),
    })?;
    Ok(ForwardSettings::from_config(
        cfg,
        peer,
        load_psk(cfg.psk_file.as_deref())?,
    ))
}

/// The SOCKS authentication policy a forward config asks for.
pub fn socks_auth(cfg: &ForwardConfig) -> ctcp_socks5::AuthPolicy {
    if cfg.socks_users.is_empty() {
        ctcp_socks5::AuthPolicy::NoAuth
    } else {
        ctcp_socks5::AuthPolicy::UserPass(cfg.socks_users.clone())
    }
}

/// The target ACL a reverse config asks for.
pub fn acl(cfg: &ReverseConfig) -> Acl {
    Acl::from_config(cfg)
}

/// Reverse settings from a validated config (a relay's too: `[relay] next_hop`).
///
/// # Errors
/// If a key cannot be loaded.
pub fn reverse_settings(cfg: &ReverseConfig) -> Result<ReverseSettings, ConfigError> {
    let s = ReverseSettings::from_config(cfg, load_psk(cfg.psk_file.as_deref())?);
    Ok(match &cfg.relay.next_hop {
        None => s,
        Some(hop) => {
            // The next segment's key; without a file of its own, this proxy's key.
            let path = cfg
                .relay
                .next_psk_file
                .as_deref()
                .or(cfg.psk_file.as_deref());
            s.relay_to(&cfg.relay, hop.clone(), load_psk(path)?)
        }
    })
}

/// Re-reads the file, validates all of it, applies what a running proxy can change (the
/// ACL, the SOCKS users), and returns the log settings; on an error it changes nothing.
pub type ReloadFn = Box<dyn Fn(&std::path::Path) -> Result<LogConfig, ConfigError> + Send>;

/// Which config file to re-read on SIGHUP, and how to apply it.
pub struct Reload {
    /// The file, if one was given.
    pub path: Option<PathBuf>,
    /// Reads and applies it.
    pub apply: ReloadFn,
}

impl std::fmt::Debug for Reload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reload")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

/// Tells systemd we are ready, waits for SIGTERM/SIGINT (reloading on SIGHUP: the log
/// level here, the rest through [`Reload::apply`]), drains, and returns when the proxy
/// has stopped. `signals` are the handlers installed before the proxy started (`None`
/// when the system refused them: then SIGTERM ends the process without a drain).
///
/// # Errors
/// If the proxy task failed.
pub async fn run_until_signalled(
    running: Running,
    signals: Option<signals::Signals>,
    log: LogHandle,
    reload: Reload,
) -> io::Result<()> {
    let Running {
        driver,
        shutdown,
        done,
        ..
    } = running;
    let (reload_tx, mut reload_rx) = mpsc::unbounded_channel();
    match signals {
        Some(signals) => {
            tokio::spawn(signals::watch_signals(signals, driver, shutdown, reload_tx));
        }
        None => tracing::warn!(
            "cannot install signal handlers; SIGTERM will kill the process without draining"
        ),
    }
    let _ = sd_notify::notify(false, &[sd_notify::NotifyState::Ready]);
    let mut done = done;
    loop {
        tokio::select! {
            r = &mut done => {
                let _ = sd_notify::notify(false, &[sd_notify::NotifyState::Stopping]);
                return r.map_err(io::Error::other)?;
            }
            Some(()) = reload_rx.recv() => {
                let Some(path) = &reload.path else {
                    tracing::info!("SIGHUP: no configuration file to reload");
                    continue;
                };
                let _ = sd_notify::notify(false, &[sd_notify::NotifyState::Reloading]);
                match (reload.apply)(path) {
                    Ok(l) => match log.reload(filter(&l.level)) {
                        Ok(()) => tracing::info!(level = %l.level, "configuration reloaded (log level, ACL and SOCKS users applied; other changes need a restart)"),
                        Err(e) => tracing::warn!(error = %e, "cannot apply log level"),
                    },
                    Err(e) => tracing::error!(error = %e, "configuration not reloaded; the previous one stays in force"),
                }
                let _ = sd_notify::notify(false, &[sd_notify::NotifyState::Ready]);
            }
        }
    }
}
