//! Command line of ctcp-reverse: every config key has a flag; flags override the file.

use clap::Parser;
use ctcp_config::cli::{CommonArgs, CommonTargets};
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
    #[command(flatten)]
    common: CommonArgs,
}

impl Cli {
    /// Applies flags over the file's values.
    pub(crate) fn apply(
        &self,
        mut c: ReverseConfig,
    ) -> Result<ReverseConfig, ctcp_config::ConfigError> {
        macro_rules! set { ($($f:ident => $($p:ident).+),*) => { $(if let Some(v) = self.$f.clone() { c.$($p).+ = v; })* } }
        set!(listen => listen, connect_timeout => connect_timeout, max_sessions => max_sessions,
             handshake_rate => handshake_rate);
        if self.psk_file.is_some() {
            c.psk_file = self.psk_file.clone();
        }
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
