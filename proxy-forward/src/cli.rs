//! Command line of ctcp-forward: every config key has a flag; flags override the file.

use clap::Parser;
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
    /// Drain time on SIGTERM, e.g. 30s.
    #[arg(long, value_parser = humantime::parse_duration)]
    drain_timeout: Option<Duration>,
    /// Statistics interval (debug level), e.g. 5s.
    #[arg(long, value_parser = humantime::parse_duration)]
    stats_interval: Option<Duration>,
    /// Log level or tracing filter (RUST_LOG overrides).
    #[arg(long)]
    log_level: Option<String>,
    /// Log as JSON lines.
    #[arg(long)]
    log_json: bool,
    /// Coded symbol size in bytes (must match ctcp-reverse).
    #[arg(long)]
    symbol_size: Option<usize>,
    /// Sender window in symbols (must match ctcp-reverse).
    #[arg(long)]
    window: Option<usize>,
    /// Sending-rate ceiling, e.g. 50mbit.
    #[arg(long, value_parser = ctcp_config::parse_rate)]
    max_rate: Option<u64>,
    /// Session idle timeout, e.g. 30s.
    #[arg(long, value_parser = humantime::parse_duration)]
    idle_timeout: Option<Duration>,
    /// Keepalive interval, e.g. 5s.
    #[arg(long, value_parser = humantime::parse_duration)]
    keepalive: Option<Duration>,
    /// Most concurrent streams per session.
    #[arg(long)]
    max_streams: Option<usize>,
}

impl Cli {
    /// Applies flags over the file's values.
    pub(crate) fn apply(
        &self,
        mut c: ForwardConfig,
    ) -> Result<ForwardConfig, ctcp_config::ConfigError> {
        macro_rules! set { ($($f:ident => $($p:ident).+),*) => { $(if let Some(v) = self.$f.clone() { c.$($p).+ = v; })* } }
        set!(listen => listen, handshake_timeout => handshake_timeout, open_timeout => open_timeout,
             drain_timeout => drain_timeout, stats_interval => stats_interval, log_level => log.level,
             symbol_size => transport.symbol_size, window => transport.window, idle_timeout => transport.idle_timeout,
             keepalive => transport.keepalive, max_streams => transport.max_streams);
        if self.peer.is_some() {
            c.peer = self.peer.clone();
        }
        if self.psk_file.is_some() {
            c.psk_file = self.psk_file.clone();
        }
        if self.max_rate.is_some() {
            c.transport.max_rate_bps = self.max_rate;
        }
        c.log.json |= self.log_json;
        ctcp_config::validate_transport(&c.transport, "<command line>", None)?;
        Ok(c)
    }
}
