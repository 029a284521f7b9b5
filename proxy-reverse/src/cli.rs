//! Command line of ctcp-reverse: every config key has a flag; flags override the file.

use clap::Parser;
use ctcp_config::{AclRule, ReverseConfig};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// ctcp-reverse: accepts coded UDP tunnel sessions from ctcp-forward and opens the real TCP connections.
#[derive(Debug, Parser)]
#[command(
    version,
    about,
    after_help = "EXAMPLES:
  ctcp-reverse --psk-file /etc/ctcp/psk
  ctcp-reverse --listen 0.0.0.0:7000 --deny 10.0.0.0/8 --psk-file key.hex
  ctcp-reverse --config /etc/ctcp/reverse.toml --check-config"
)]
pub(crate) struct Cli {
    /// TOML configuration file (all keys optional; see configs/reverse.toml).
    #[arg(long, short)]
    pub(crate) config: Option<PathBuf>,
    /// Validate the configuration and key, print the result, and exit.
    #[arg(long)]
    pub(crate) check_config: bool,
    /// UDP listen address [default: 0.0.0.0:7000].
    #[arg(long)]
    listen: Option<SocketAddr>,
    /// File with the pre-shared key (64 hex characters); else CTCP_PSK.
    #[arg(long)]
    psk_file: Option<PathBuf>,
    /// Target connect timeout, e.g. 10s.
    #[arg(long, value_parser = humantime::parse_duration)]
    connect_timeout: Option<Duration>,
    /// Deny targets in this CIDR block (repeatable; checked before the file's rules).
    #[arg(long, value_name = "CIDR")]
    deny: Vec<ipnet::IpNet>,
    /// Allow targets in this CIDR block (repeatable; checked before the file's rules).
    #[arg(long, value_name = "CIDR")]
    allow: Vec<ipnet::IpNet>,
    /// Most concurrent sessions.
    #[arg(long)]
    max_sessions: Option<usize>,
    /// Handshakes accepted per second.
    #[arg(long)]
    handshake_rate: Option<u32>,
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
    /// Coded symbol size in bytes (must match ctcp-forward).
    #[arg(long)]
    symbol_size: Option<usize>,
    /// Sender window in symbols (must match ctcp-forward).
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
        mut c: ReverseConfig,
    ) -> Result<ReverseConfig, ctcp_config::ConfigError> {
        macro_rules! set { ($($f:ident => $($p:ident).+),*) => { $(if let Some(v) = self.$f.clone() { c.$($p).+ = v; })* } }
        set!(listen => listen, connect_timeout => connect_timeout, max_sessions => max_sessions,
             handshake_rate => handshake_rate, drain_timeout => drain_timeout, stats_interval => stats_interval,
             log_level => log.level, symbol_size => transport.symbol_size, window => transport.window,
             idle_timeout => transport.idle_timeout, keepalive => transport.keepalive, max_streams => transport.max_streams);
        if self.psk_file.is_some() {
            c.psk_file = self.psk_file.clone();
        }
        if self.max_rate.is_some() {
            c.transport.max_rate_bps = self.max_rate;
        }
        c.log.json |= self.log_json;
        let mut rules: Vec<AclRule> = self
            .deny
            .iter()
            .map(|&net| AclRule {
                allow: false,
                net,
                ports: 0..=u16::MAX,
            })
            .collect();
        rules.extend(self.allow.iter().map(|&net| AclRule {
            allow: true,
            net,
            ports: 0..=u16::MAX,
        }));
        rules.append(&mut c.acl);
        c.acl = rules;
        ctcp_config::validate_transport(&c.transport, "<command line>", None)?;
        Ok(c)
    }
}
