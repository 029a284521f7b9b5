//! Command line of ctcp-reverse: every config key has a flag; flags override the file.
//! Each flag's help shows the embedded default (the tests check it against the config's).

use clap::Parser;
use ctcp_config::cli::{CommonArgs, CommonTargets, GenArgs, KeygenArgs, StatusArgs};
use ctcp_config::{AclRule, ReverseConfig};
use std::net::SocketAddr;
use std::ops::RangeInclusive;
use std::path::PathBuf;
use std::time::Duration;

/// ctcp-reverse: accepts coded UDP tunnel sessions from ctcp-forward and opens the real TCP connections.
#[derive(Debug, Clone, Parser)]
#[command(
    version,
    about,
    after_help = "EXAMPLES:
  ctcp-reverse keygen --out /etc/ctcp/psk
  ctcp-reverse --psk-file /etc/ctcp/psk
  ctcp-reverse --listen 0.0.0.0:7000 --deny 10.0.0.0/8 --psk-file key.hex
  ctcp-reverse --allow 127.0.0.1,8080 --psk-file key.hex   # reach one local service
  ctcp-reverse --psk-file key.hex --next-hop gw2.example.net:7000 --next-psk-file next.hex   # relay
  ctcp-reverse --config /etc/ctcp/reverse.toml --check-config"
)]
pub(crate) struct Cli {
    /// Extra commands (without one, run the proxy).
    #[command(subcommand)]
    pub(crate) command: Option<Command>,
    /// TOML configuration file (all keys optional; the commented reference is configs/reverse.toml,
    /// installed as /etc/ctcp/reverse.toml by the package).
    #[arg(long, short, global = true)]
    pub(crate) config: Option<PathBuf>,
    /// Validate the configuration and key, print the key's fingerprint and any warnings,
    /// and exit.
    #[arg(long)]
    pub(crate) check_config: bool,
    /// UDP listen address [default: 0.0.0.0:7000].
    #[arg(long)]
    listen: Option<SocketAddr>,
    /// File with the pre-shared key (exactly 64 hex digits; make one with `keygen`);
    /// else CTCP_PSK.
    #[arg(long)]
    psk_file: Option<PathBuf>,
    /// Target connect timeout, e.g. 10s [default: 10s].
    #[arg(long, value_parser = ctcp_config::parse_duration)]
    connect_timeout: Option<Duration>,
    /// Deny targets in this block, optionally on these ports: 10.0.0.0/8, 10.0.0.5,22,
    /// ::1,8000-8999 (repeatable; checked before the file's rules) [default: none; the
    /// default ACL denies loopback, 0.0.0.0, :: and link-local].
    #[arg(long, value_name = "NET[,PORTS]", value_parser = ctcp_config::parse_net_ports)]
    deny: Vec<(ipnet::IpNet, RangeInclusive<u16>)>,
    /// Allow targets in this block, optionally on these ports (repeatable; checked before
    /// the file's rules, so `--allow 127.0.0.1,8080` opens one local service)
    /// [default: none].
    #[arg(long, value_name = "NET[,PORTS]", value_parser = ctcp_config::parse_net_ports)]
    allow: Vec<(ipnet::IpNet, RangeInclusive<u16>)>,
    /// Verdict for targets no ACL rule matches: allow or deny [default: allow].
    #[arg(long, value_name = "VERDICT", value_parser = ctcp_config::parse_verdict)]
    acl_default: Option<bool>,
    /// Most concurrent sessions [default: 256].
    #[arg(long)]
    max_sessions: Option<usize>,
    /// Handshakes accepted per second [default: 64].
    #[arg(long)]
    handshake_rate: Option<u32>,
    /// Worker threads, each driving its own share of the sessions; 0 means one per
    /// available core [default: 0].
    #[arg(long)]
    workers: Option<usize>,
    /// Run as a relay: carry each stream on to this gateway (another ctcp-reverse,
    /// HOST:PORT) over a session of our own instead of connecting here (`[relay]
    /// next_hop`) [default: none].
    #[arg(long, value_name = "HOST:PORT", value_parser = ctcp_config::parse_peer)]
    next_hop: Option<String>,
    /// File with the next segment's pre-shared key (`[relay] next_psk_file`); else this
    /// proxy's own key.
    #[arg(long, value_name = "FILE")]
    next_psk_file: Option<PathBuf>,
    /// Relay: the most bytes held per session waiting to be passed on, e.g. 32MiB (the
    /// credit granted on both segments; must cover each one's bandwidth × RTT)
    /// [default: 32MiB].
    #[arg(long, value_name = "SIZE", value_parser = ctcp_config::parse_size)]
    relay_buffer: Option<u64>,
    /// Relay: how long a stream waits for the next hop's connect result, e.g. 30s
    /// [default: 30s].
    #[arg(long, value_name = "DURATION", value_parser = ctcp_config::parse_duration)]
    relay_open_timeout: Option<Duration>,
    /// How a session a multipath forward opened uses its paths for what this side sends
    /// (downloads): aggregate, failover or redundant [default: aggregate].
    #[arg(long, value_name = "POLICY", value_parser = ctcp_config::parse_path_policy)]
    policy: Option<ctcp_config::PathPolicy>,
    #[command(flatten)]
    common: CommonArgs,
}

/// Subcommands.
#[derive(Debug, Clone, clap::Subcommand)]
pub(crate) enum Command {
    /// Write a fresh random pre-shared key (64 hex digits) for both gateways.
    Keygen(KeygenArgs),
    /// Show the running proxy's live sessions (peer, RTT, window, loss, repairs, goodput,
    /// streams), read from its metrics endpoint (`metrics_listen`).
    Status(StatusArgs),
    /// Write the man pages into DIR (for packaging).
    #[command(hide = true)]
    GenMan(GenArgs),
    /// Write bash, zsh and fish completions into DIR (for packaging).
    #[command(hide = true)]
    GenCompletions(GenArgs),
}

impl Cli {
    /// Applies flags over the file's values.
    pub(crate) fn apply(
        &self,
        mut c: ReverseConfig,
    ) -> Result<ReverseConfig, ctcp_config::ConfigError> {
        macro_rules! set { ($($f:ident => $($p:ident).+),*) => { $(if let Some(v) = self.$f.clone() { c.$($p).+ = v; })* } }
        set!(listen => listen, connect_timeout => connect_timeout, max_sessions => max_sessions,
             handshake_rate => handshake_rate, workers => workers,
             acl_default => acl_default_allow, policy => policy);
        if self.psk_file.is_some() {
            c.psk_file = self.psk_file.clone();
        }
        if self.next_hop.is_some() {
            c.relay.next_hop = self.next_hop.clone();
        }
        if self.next_psk_file.is_some() {
            c.relay.next_psk_file = self.next_psk_file.clone();
        }
        if let Some(v) = self.relay_buffer {
            c.relay.buffer = v;
        }
        if let Some(v) = self.relay_open_timeout {
            c.relay.open_timeout = v;
        }
        c.relay.validate("<command line>", None)?;
        let rule = |allow: bool| {
            move |(net, ports): &(ipnet::IpNet, RangeInclusive<u16>)| AclRule {
                allow,
                net: *net,
                ports: ports.clone(),
            }
        };
        let mut rules: Vec<AclRule> = self.deny.iter().map(rule(false)).collect();
        rules.extend(self.allow.iter().map(rule(true)));
        rules.append(&mut c.acl);
        c.acl = rules;
        if !(1..=100_000).contains(&c.max_sessions) {
            return Err(ctcp_config::ConfigError {
                source_name: "<command line>".into(),
                line: None,
                key: Some("max_sessions".into()),
                message: format!("must be between 1 and 100000 (got {})", c.max_sessions),
            });
        }
        if c.workers > ctcp_config::MAX_WORKERS {
            return Err(ctcp_config::ConfigError {
                source_name: "<command line>".into(),
                line: None,
                key: Some("workers".into()),
                message: format!(
                    "must be between 0 (one per core) and {} (got {})",
                    ctcp_config::MAX_WORKERS,
                    c.workers
                ),
            });
        }
        self.common.apply(CommonTargets {
            drain_timeout: &mut c.drain_timeout,
            stats_interval: &mut c.stats_interval,
            metrics_listen: &mut c.metrics_listen,
            log: &mut c.log,
            transport: &mut c.transport,
            udp: &mut c.udp,
        })?;
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    /// Flags whose absence is their default (no value to show).
    const NO_DEFAULT: [&str; 7] = [
        "config",
        "check_config",
        "psk_file",
        "next_psk_file",
        "help",
        "version",
        "log_json",
    ];

    /// Every flag with a default shows it in `--help`, and the shown defaults, given as
    /// flags, change nothing in the embedded configuration.
    #[test]
    fn help_shows_every_default_and_the_defaults_are_the_configs() {
        let cmd = Cli::command();
        let mut argv = vec!["ctcp-reverse".to_owned()];
        for a in cmd.get_arguments() {
            let id = a.get_id().as_str();
            let help = a.get_help().map(ToString::to_string).unwrap_or_default();
            if NO_DEFAULT.contains(&id) {
                continue;
            }
            let shown = help
                .split("[default: ")
                .nth(1)
                .and_then(|r| r.split(']').next())
                .unwrap_or_else(|| panic!("--{id} does not show its default: {help:?}"));
            let value = shown.split([',', ';']).next().unwrap_or(shown);
            if !["none", "off"].contains(&value) {
                argv.push(format!("--{}", a.get_long().unwrap()));
                argv.push(value.to_owned());
            }
        }
        let cli = Cli::try_parse_from(&argv).unwrap();
        assert_eq!(
            cli.apply(ReverseConfig::default()).unwrap(),
            ReverseConfig::default(),
            "{argv:?}"
        );
    }

    #[test]
    fn every_config_key_has_a_flag() {
        let longs: Vec<String> = Cli::command()
            .get_arguments()
            .filter_map(|a| a.get_long().map(str::to_owned))
            .collect();
        for key in [
            "listen",
            "psk-file",
            "connect-timeout",
            "deny",
            "allow",
            "acl-default",
            "max-sessions",
            "handshake-rate",
            "drain-timeout",
            "stats-interval",
            "metrics-listen",
            "log-level",
            "log-json",
            "symbol-size",
            "window",
            "max-rate",
            "idle-timeout",
            "keepalive",
            "initial-rtt",
            "max-streams",
            "session-send-buffer",
            "proactive-repair",
            "handshake-train",
            "next-hop",
            "next-psk-file",
            "relay-buffer",
            "relay-open-timeout",
        ] {
            assert!(longs.iter().any(|l| l == key), "no --{key}");
        }
        let c = Cli::try_parse_from([
            "r",
            "--acl-default",
            "deny",
            "--allow",
            "127.0.0.1,8080",
            "--deny",
            "10.0.0.0/8,1-1024",
        ])
        .unwrap()
        .apply(ReverseConfig::default())
        .unwrap();
        assert!(!c.acl_default_allow);
        assert_eq!(c.acl[0].net, "10.0.0.0/8".parse().unwrap());
        assert_eq!((c.acl[0].allow, c.acl[0].ports.clone()), (false, 1..=1024));
        assert_eq!(
            (c.acl[1].allow, c.acl[1].ports.clone()),
            (true, 8080..=8080)
        );
        assert_eq!(c.acl.len(), 2 + ctcp_config::default_acl().len());
        assert!(Cli::try_parse_from(["r", "--acl-default", "maybe"]).is_err());
        assert!(Cli::try_parse_from(["r", "--next-hop", "no-port"]).is_err());
        let c = Cli::try_parse_from([
            "r",
            "--next-hop",
            "gw2:7000",
            "--next-psk-file",
            "/k",
            "--relay-buffer",
            "4MiB",
            "--relay-open-timeout",
            "5s",
        ])
        .unwrap()
        .apply(ReverseConfig::default())
        .unwrap();
        assert_eq!(c.relay.next_hop.as_deref(), Some("gw2:7000"));
        assert_eq!(c.relay.buffer, 4 << 20);
        assert_eq!(c.relay.open_timeout, Duration::from_secs(5));
        let e = Cli::try_parse_from(["r", "--next-psk-file", "/k"])
            .unwrap()
            .apply(ReverseConfig::default())
            .unwrap_err();
        assert_eq!(e.key.as_deref(), Some("relay.next_psk_file"));
        let e = Cli::try_parse_from(["r", "--next-hop", "gw2:7000", "--relay-buffer", "1KiB"])
            .unwrap()
            .apply(ReverseConfig::default())
            .unwrap_err();
        assert_eq!(e.key.as_deref(), Some("relay.buffer"));
        assert!(Cli::try_parse_from(["r", "--log-level", "verbose"]).is_err());
    }
}
