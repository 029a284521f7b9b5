//! Command-line flags both binaries share: logging and transport. Each overrides the
//! config file's value when given.

use crate::{validate_transport, ConfigError, LogConfig, TransportSettings, UdpFlowConfig};
use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Flags both binaries share, flattened into each one's command line. The defaults shown
/// in `--help` are the embedded ones; a flag overrides the file only when given.
#[derive(Debug, Clone, clap::Args)]
pub struct CommonArgs {
    /// Drain time on SIGTERM, e.g. 30s [default: 30s].
    #[arg(long, value_parser = crate::parse_duration)]
    pub drain_timeout: Option<Duration>,
    /// Statistics interval (debug level), e.g. 5s [default: 5s].
    #[arg(long, value_parser = crate::parse_duration)]
    pub stats_interval: Option<Duration>,
    /// Log level (error, warn, info, debug, trace, off) or a tracing filter such as
    /// "info,ctcp_runtime=debug"; RUST_LOG overrides [default: info].
    #[arg(long, value_parser = crate::parse_log_level)]
    pub log_level: Option<String>,
    /// Log as JSON lines (`[log] format = "json"`) [default: text].
    #[arg(long)]
    pub log_json: bool,
    /// Serve Prometheus/OpenMetrics text on this address [default: off].
    #[arg(long)]
    pub metrics_listen: Option<SocketAddr>,
    /// Coded symbol size in bytes (must match the other proxy) [default: 1408].
    #[arg(long)]
    pub symbol_size: Option<usize>,
    /// Sender window in symbols (must match the other proxy) [default: 16384].
    #[arg(long)]
    pub window: Option<usize>,
    /// Sending-rate ceiling, e.g. 50mbit [default: none].
    #[arg(long, value_parser = crate::parse_rate)]
    pub max_rate: Option<u64>,
    /// Session idle timeout, e.g. 30s [default: 30s].
    #[arg(long, value_parser = crate::parse_duration)]
    pub idle_timeout: Option<Duration>,
    /// Keepalive interval, e.g. 5s [default: 5s].
    #[arg(long, value_parser = crate::parse_duration)]
    pub keepalive: Option<Duration>,
    /// RTT assumed before the first measurement [default: 100ms].
    #[arg(long, value_parser = crate::parse_duration)]
    pub initial_rtt: Option<Duration>,
    /// Most concurrent streams per session [default: 4096].
    #[arg(long)]
    pub max_streams: Option<usize>,
    /// Bytes all streams of a session may queue for sending, e.g. 16MiB [default: 16MiB].
    #[arg(long, value_parser = crate::parse_size)]
    pub session_send_buffer: Option<u64>,
    /// Repairs sent before any loss is reported, in percent of the expected loss (0-400;
    /// 0 repairs only what the receiver reports) [default: 0].
    #[arg(long, value_name = "PERCENT")]
    pub proactive_repair: Option<u16>,
    /// What repairs sent when the sender falls idle are sized for: latency (repair likely
    /// losses before they are reported) or bandwidth (only reported losses: the least on
    /// the wire, later delivery) [default: latency].
    #[arg(long, value_name = "PRIORITY", value_parser = crate::parse_repair_priority)]
    pub repair_priority: Option<crate::RepairPriority>,
    /// Handshake copies sent back to back to measure the path (0-64; 0 turns it off)
    /// [default: 16].
    #[arg(long, value_name = "COPIES")]
    pub handshake_train: Option<u8>,
    /// Unreliable datagrams in the session: SOCKS UDP ASSOCIATE and the UDP TPROXY
    /// listener (forward), per-flow UDP sockets (reverse) [default: true].
    #[arg(long, value_name = "BOOL")]
    pub datagrams: Option<bool>,
    /// How long a datagram may wait to be sent or repaired, beyond a quarter RTT, e.g.
    /// 50ms [default: 50ms].
    #[arg(long, value_parser = crate::parse_duration)]
    pub datagram_deadline: Option<Duration>,
    /// Datagrams queued per session before the oldest is dropped (16-65536)
    /// [default: 256].
    #[arg(long, value_name = "COUNT")]
    pub datagram_queue: Option<usize>,
    /// Most UDP flows at once; at the cap the least recently active goes [default: 1024].
    #[arg(long, value_name = "COUNT")]
    pub udp_max_flows: Option<usize>,
    /// A UDP flow with no datagram either way for this long is closed, e.g. 60s
    /// [default: 60s].
    #[arg(long, value_parser = crate::parse_duration)]
    pub udp_idle_timeout: Option<Duration>,
}

/// `keygen`: writes a fresh random key, the same for both binaries.
#[derive(Debug, Clone, clap::Args)]
pub struct KeygenArgs {
    /// Write the key to this file (created with mode 0600); without it, print the key.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Replace FILE if it exists (the other gateway then needs the new key too).
    #[arg(long, requires = "out")]
    pub force: bool,
}

/// `status`: the running proxy's sessions, read from its metrics endpoint.
#[derive(Debug, Clone, clap::Args)]
pub struct StatusArgs {
    /// The running proxy's metrics address [default: `metrics_listen` of the
    /// configuration: --config FILE, else /etc/ctcp/<forward|reverse>.toml if it exists].
    #[arg(long, value_name = "ADDR")]
    pub metrics_listen: Option<SocketAddr>,
    /// Time between the two scrapes the goodput is measured over; 0s scrapes once and
    /// shows no goodput.
    #[arg(long, value_parser = crate::parse_duration, default_value = "1s")]
    pub sample: Duration,
}

/// `gen-man DIR` and `gen-completions DIR` (hidden; used to build the packages).
#[derive(Debug, Clone, clap::Args)]
pub struct GenArgs {
    /// Output directory (created if missing).
    pub dir: PathBuf,
}

/// Writes the man pages of `cmd` and of each visible subcommand into `dir`
/// (`NAME.1`, `NAME-SUB.1`) and returns their paths.
///
/// # Errors
/// If `dir` cannot be created or a page cannot be written.
pub fn write_man_pages(cmd: clap::Command, dir: &Path) -> io::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)?;
    clap_mangen::generate_to(cmd, dir)?;
    let mut pages: Vec<PathBuf> = std::fs::read_dir(dir)?
        .map(|e| e.map(|e| e.path()))
        .collect::<io::Result<_>>()?;
    pages.retain(|p| p.extension().is_some_and(|x| x == "1"));
    pages.sort();
    Ok(pages)
}

/// Writes bash, zsh and fish completions for `cmd` into `dir` and returns their paths
/// (`NAME.bash`, `_NAME`, `NAME.fish`).
///
/// # Errors
/// If `dir` cannot be created or a file cannot be written.
pub fn write_completions(cmd: clap::Command, dir: &Path) -> io::Result<Vec<PathBuf>> {
    use clap_complete::Shell;
    std::fs::create_dir_all(dir)?;
    let mut cmd = cmd;
    let name = cmd.get_name().to_owned();
    [Shell::Bash, Shell::Zsh, Shell::Fish]
        .into_iter()
        .map(|shell| clap_complete::generate_to(shell, &mut cmd, &name, dir))
        .collect()
}

/// The config values [`CommonArgs`] may override; both binaries' configs have them all.
#[derive(Debug)]
pub struct CommonTargets<'a> {
    /// `drain_timeout`.
    pub drain_timeout: &'a mut Duration,
    /// `stats_interval`.
    pub stats_interval: &'a mut Duration,
    /// `metrics_listen`.
    pub metrics_listen: &'a mut Option<SocketAddr>,
    /// `[log]`.
    pub log: &'a mut LogConfig,
    /// `[transport]`.
    pub transport: &'a mut TransportSettings,
    /// `udp_max_flows`, `udp_idle_timeout`.
    pub udp: &'a mut UdpFlowConfig,
}

impl CommonArgs {
    /// Applies the flags over the config's values, then validates the transport.
    ///
    /// # Errors
    /// An out-of-range transport value, named by its key.
    pub fn apply(&self, c: CommonTargets<'_>) -> Result<(), ConfigError> {
        let CommonTargets {
            drain_timeout,
            stats_interval,
            metrics_listen,
            log,
            transport: t,
            udp,
        } = c;
        if let Some(v) = self.drain_timeout {
            *drain_timeout = v;
        }
        if let Some(v) = self.stats_interval {
            *stats_interval = v;
        }
        if self.metrics_listen.is_some() {
            *metrics_listen = self.metrics_listen;
        }
        if let Some(v) = &self.log_level {
            log.level = v.clone();
        }
        log.json |= self.log_json;
        if let Some(v) = self.symbol_size {
            t.symbol_size = v;
        }
        if let Some(v) = self.window {
            t.window = v;
        }
        if self.max_rate.is_some() {
            t.max_rate_bps = self.max_rate;
        }
        if let Some(v) = self.idle_timeout {
            t.idle_timeout = v;
        }
        if let Some(v) = self.keepalive {
            t.keepalive = v;
        }
        if let Some(v) = self.max_streams {
            t.max_streams = v;
        }
        if let Some(v) = self.session_send_buffer {
            t.session_send_buffer = v;
        }
        if let Some(v) = self.initial_rtt {
            t.initial_rtt = v;
        }
        if let Some(v) = self.proactive_repair {
            t.proactive_repair_percent = v;
        }
        if let Some(v) = self.repair_priority {
            t.repair_priority = v;
        }
        if let Some(v) = self.handshake_train {
            t.handshake_train = v;
        }
        if let Some(v) = self.datagrams {
            t.datagrams = v;
        }
        if let Some(v) = self.datagram_deadline {
            t.datagram_deadline = v;
        }
        if let Some(v) = self.datagram_queue {
            t.datagram_queue = v;
        }
        if let Some(v) = self.udp_max_flows {
            udp.max_flows = v;
        }
        if let Some(v) = self.udp_idle_timeout {
            udp.idle_timeout = v;
        }
        udp.validate("<command line>", None)?;
        validate_transport(t, "<command line>", None)
    }
}
