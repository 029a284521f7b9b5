//! Command line of ctcp-forward: every config key has a flag; flags override the file.

use clap::Parser;
use ctcp_config::cli::{CommonArgs, CommonTargets};
use ctcp_config::ForwardConfig;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// ctcp-forward: a SOCKSv5 server whose connections ride a coded UDP tunnel to ctcp-reverse.
#[derive(Debug, Parser)]
#[command(
    version,
    about,
    after_help = "EXAMPLES:
  ctcp-forward --peer gw.example.net:7000 --psk-file /etc/ctcp/psk
  CTCP_PSK=$(cat key.hex) ctcp-forward --config /etc/ctcp/forward.toml
  curl --socks5-hostname 127.0.0.1:1080 https://example.com/
  proxychains4 -f configs/proxychains4.conf rsync -a data/ server::module"
)]
pub(crate) struct Cli {
    /// TOML configuration file (all keys optional; see configs/forward.toml).
    #[arg(long, short)]
    pub(crate) config: Option<PathBuf>,
    /// Validate the configuration and key, print the result, and exit.
    #[arg(long)]
    pub(crate) check_config: bool,
    /// SOCKS listen address [default: 127.0.0.1:1080].
    #[arg(long)]
    listen: Option<SocketAddr>,
    /// The reverse proxy's UDP address, HOST:PORT.
    #[arg(long)]
    peer: Option<String>,
    /// File with the pre-shared key (64 hex characters); else CTCP_PSK.
    #[arg(long)]
    psk_file: Option<PathBuf>,
    /// SOCKS handshake timeout, e.g. 10s.
    #[arg(long, value_parser = humantime::parse_duration)]
    handshake_timeout: Option<Duration>,
    /// Wait for the target connect result, e.g. 30s.
    #[arg(long, value_parser = humantime::parse_duration)]
    open_timeout: Option<Duration>,
    /// Reply to SOCKS CONNECT before the target's connect result (saves a round trip;
    /// failures then show as a reset connection) [default: false].
    #[arg(long, value_name = "BOOL")]
    fast_open: Option<bool>,
    #[command(flatten)]
    common: CommonArgs,
}

impl Cli {
    /// Applies flags over the file's values.
    pub(crate) fn apply(
        &self,
        mut c: ForwardConfig,
    ) -> Result<ForwardConfig, ctcp_config::ConfigError> {
        macro_rules! set { ($($f:ident => $($p:ident).+),*) => { $(if let Some(v) = self.$f.clone() { c.$($p).+ = v; })* } }
        set!(listen => listen, handshake_timeout => handshake_timeout, open_timeout => open_timeout, fast_open => fast_open);
        if self.peer.is_some() {
            c.peer = self.peer.clone();
        }
        if self.psk_file.is_some() {
            c.psk_file = self.psk_file.clone();
        }
        self.common.apply(CommonTargets {
            drain_timeout: &mut c.drain_timeout,
            stats_interval: &mut c.stats_interval,
            metrics_listen: &mut c.metrics_listen,
            log: &mut c.log,
            transport: &mut c.transport,
        })?;
        Ok(c)
    }
}
