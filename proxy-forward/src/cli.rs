//! Command line of ctcp-forward: every config key has a flag; flags override the file.
//! Each flag's help shows the embedded default (the tests check it against the config's).

use clap::Parser;
use ctcp_config::cli::{CommonArgs, CommonTargets, GenArgs, KeygenArgs, StatusArgs};
use ctcp_config::{ForwardConfig, PathBind, PathPolicy, TransparentMode};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// ctcp-forward: a SOCKSv5 server whose connections ride a coded UDP tunnel to ctcp-reverse.
#[derive(Debug, Clone, Parser)]
#[command(
    version,
    about,
    after_help = "EXAMPLES:
  ctcp-forward keygen --out /etc/ctcp/psk
  ctcp-forward --peer gw.example.net:7000 --psk-file /etc/ctcp/psk
  CTCP_PSK=$(cat key.hex) ctcp-forward --config /etc/ctcp/forward.toml
  curl --socks5-hostname 127.0.0.1:1080 https://example.com/
  proxychains4 -f configs/proxychains4.conf rsync -a data/ server::module"
)]
pub(crate) struct Cli {
    /// Extra commands (without one, run the proxy).
    #[command(subcommand)]
    pub(crate) command: Option<Command>,
    /// TOML configuration file (all keys optional; the commented reference is configs/forward.toml,
    /// installed as /etc/ctcp/forward.toml by the package).
    #[arg(long, short, global = true)]
    pub(crate) config: Option<PathBuf>,
    /// Validate the configuration and key, print the key's fingerprint and any warnings,
    /// and exit.
    #[arg(long)]
    pub(crate) check_config: bool,
    /// SOCKS listen address [default: 127.0.0.1:1080].
    #[arg(long)]
    listen: Option<SocketAddr>,
    /// The reverse proxy's UDP address, HOST:PORT (resolved again on every reconnect), or
    /// several gateways comma-separated, tried in turn: a reconnect moves to the next.
    #[arg(long, value_parser = ctcp_config::parse_peer)]
    peer: Option<String>,
    /// File with the pre-shared key (exactly 64 hex digits; make one with `keygen`);
    /// else CTCP_PSK.
    #[arg(long)]
    psk_file: Option<PathBuf>,
    /// A SOCKS user, USER:PASSWORD (repeatable; replaces the file's [[socks_users]]).
    /// Visible in `ps`: prefer the config file on shared hosts [default: none, no
    /// authentication].
    #[arg(long = "socks-user", value_name = "USER:PASSWORD", value_parser = parse_user)]
    socks_users: Vec<(String, String)>,
    /// SOCKS handshake timeout, e.g. 10s [default: 10s].
    #[arg(long, value_parser = ctcp_config::parse_duration)]
    handshake_timeout: Option<Duration>,
    /// Wait for the target connect result, e.g. 30s [default: 30s].
    #[arg(long, value_parser = ctcp_config::parse_duration)]
    open_timeout: Option<Duration>,
    /// Reply to SOCKS CONNECT before the target's connect result (saves a round trip;
    /// failures then show as a reset connection) [default: false].
    #[arg(long, value_name = "BOOL")]
    fast_open: Option<bool>,
    /// Transparent (gateway) TCP listener for connections the kernel redirects to it
    /// (nftables `redirect` or `tproxy`); each rides the tunnel to its original
    /// destination [default: off].
    #[arg(long, value_name = "ADDR")]
    transparent_listen: Option<SocketAddr>,
    /// How connections reach the transparent listener: redirect (NAT, SO_ORIGINAL_DST)
    /// or tproxy (IP_TRANSPARENT) [default: redirect].
    #[arg(long, value_name = "MODE", value_parser = ctcp_config::parse_transparent_mode)]
    transparent_mode: Option<TransparentMode>,
    /// Transparent (gateway) UDP listener for datagrams the kernel hands to it (nftables
    /// `tproxy`; needs --transparent-mode tproxy); each flow rides the session as
    /// datagrams to its original destination [default: off].
    #[arg(long, value_name = "ADDR")]
    transparent_udp_listen: Option<SocketAddr>,
    /// Multipath: a local link for the session, an IP address or an interface name
    /// (SO_BINDTODEVICE); repeatable, one UDP socket each, the first that is up carrying
    /// the handshake; replaces the file's `paths` [default: none, one socket].
    #[arg(long = "path", value_name = "ADDR|IFACE", value_parser = ctcp_config::parse_path_bind)]
    paths: Vec<PathBind>,
    /// How a multipath session uses its paths for what this side sends: aggregate,
    /// failover or redundant [default: aggregate].
    #[arg(long, value_name = "POLICY", value_parser = ctcp_config::parse_path_policy)]
    policy: Option<PathPolicy>,
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

/// `USER:PASSWORD` with RFC 1929's limits (user 1-255 bytes, password at most 255).
fn parse_user(s: &str) -> Result<(String, String), String> {
    let (u, p) = s
        .split_once(':')
        .ok_or_else(|| "expected USER:PASSWORD".to_owned())?;
    if u.is_empty() || u.len() > 255 || p.len() > 255 {
        return Err("the user must be 1-255 bytes and the password at most 255".into());
    }
    Ok((u.to_owned(), p.to_owned()))
}

impl Cli {
    /// Applies flags over the file's values.
    pub(crate) fn apply(
        &self,
        mut c: ForwardConfig,
    ) -> Result<ForwardConfig, ctcp_config::ConfigError> {
        macro_rules! set { ($($f:ident => $($p:ident).+),*) => { $(if let Some(v) = self.$f.clone() { c.$($p).+ = v; })* } }
        set!(listen => listen, handshake_timeout => handshake_timeout, open_timeout => open_timeout, fast_open => fast_open, transparent_mode => transparent_mode, policy => policy);
        if self.transparent_listen.is_some() {
            c.transparent_listen = self.transparent_listen;
        }
        if self.transparent_udp_listen.is_some() {
            c.transparent_udp_listen = self.transparent_udp_listen;
        }
        if self.peer.is_some() {
            c.peer = self.peer.clone();
        }
        if self.psk_file.is_some() {
            c.psk_file = self.psk_file.clone();
        }
        if !self.socks_users.is_empty() {
            c.socks_users = self.socks_users.clone();
        }
        if !self.paths.is_empty() {
            c.paths = self.paths.clone();
        }
        self.common.apply(CommonTargets {
            drain_timeout: &mut c.drain_timeout,
            stats_interval: &mut c.stats_interval,
            metrics_listen: &mut c.metrics_listen,
            log: &mut c.log,
            transport: &mut c.transport,
            udp: &mut c.udp,
        })?;
        ctcp_config::validate_forward(&c, "<command line>", None)?;
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
        "peer",
        "psk_file",
        "help",
        "version",
        "log_json",
    ];

    /// Every flag with a default shows it in `--help`, and the shown defaults, given as
    /// flags, change nothing in the embedded configuration.
    #[test]
    fn help_shows_every_default_and_the_defaults_are_the_configs() {
        let cmd = Cli::command();
        let mut argv = vec!["ctcp-forward".to_owned()];
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
            let value = shown.split(',').next().unwrap_or(shown);
            if !["none", "off"].contains(&value) {
                argv.push(format!("--{}", a.get_long().unwrap()));
                argv.push(value.to_owned());
            }
        }
        let cli = Cli::try_parse_from(&argv).unwrap();
        assert_eq!(
            cli.apply(ForwardConfig::default()).unwrap(),
            ForwardConfig::default(),
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
            "peer",
            "psk-file",
            "socks-user",
            "handshake-timeout",
            "open-timeout",
            "fast-open",
            "transparent-listen",
            "transparent-mode",
            "transparent-udp-listen",
            "path",
            "policy",
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
            "datagrams",
            "datagram-deadline",
            "datagram-queue",
            "udp-max-flows",
            "udp-idle-timeout",
        ] {
            assert!(longs.iter().any(|l| l == key), "no --{key}");
        }
        let c = Cli::try_parse_from([
            "f",
            "--socks-user",
            "alice:s3cret",
            "--socks-user",
            "bob:",
            "--initial-rtt",
            "600ms",
            "--proactive-repair",
            "90",
            "--handshake-train",
            "0",
        ])
        .unwrap()
        .apply(ForwardConfig::default())
        .unwrap();
        assert_eq!(
            c.socks_users,
            [
                ("alice".into(), "s3cret".into()),
                ("bob".into(), String::new())
            ]
        );
        assert_eq!(c.transport.initial_rtt, Duration::from_millis(600));
        assert_eq!(c.transport.proactive_repair_percent, 90);
        assert_eq!(c.transport.handshake_train, 0);
    }

    #[test]
    fn bad_flags_are_refused_with_a_reason() {
        for (args, why) in [
            (&["--log-level", "bogus"][..], "is not a log level"),
            (&["--peer", "127.0.0.1"], "no port"),
            (&["--idle-timeout", "5 parsecs"], "ms, s (sec)"),
            (&["--socks-user", "alice"], "USER:PASSWORD"),
            (&["--transparent-mode", "nat"], "\"redirect\" or \"tproxy\""),
            (
                &["--repair-priority", "cheap"],
                "\"latency\" or \"bandwidth\"",
            ),
        ] {
            let e = Cli::try_parse_from(std::iter::once("f").chain(args.iter().copied()))
                .unwrap_err()
                .to_string();
            assert!(e.contains(why), "{args:?}: {e}");
        }
        let e = Cli::try_parse_from(["f", "--proactive-repair", "500"])
            .unwrap()
            .apply(ForwardConfig::default())
            .unwrap_err();
        assert_eq!(e.key.as_deref(), Some("transport.proactive_repair"));
        let e = Cli::try_parse_from(["f", "--transparent-listen", "127.0.0.1:1080"])
            .unwrap()
            .apply(ForwardConfig::default())
            .unwrap_err();
        assert_eq!(e.key.as_deref(), Some("transparent_listen"));
        let c = Cli::try_parse_from([
            "f",
            "--transparent-listen",
            "[::]:12345",
            "--transparent-mode",
            "tproxy",
        ])
        .unwrap()
        .apply(ForwardConfig::default())
        .unwrap();
        assert_eq!(c.transparent_listen, Some("[::]:12345".parse().unwrap()));
        assert_eq!(c.transparent_mode, TransparentMode::Tproxy);
    }
}
