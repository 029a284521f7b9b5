//! ctcp configuration: TOML text → raw serde structs (`deny_unknown_fields`) → validated
//! types with embedded defaults, so both proxies run with no file at all.
//!
//! Every error names the file, the line and the key, e.g.
//! `configs/forward.toml:12: key 'transport.window': must be between 16 and 65536 (got 3)`.
#![deny(unsafe_code)]

#[cfg(feature = "cli")]
pub mod cli;
mod raw;
mod units;

pub use units::{
    parse_duration, parse_log_level, parse_peer, parse_rate, parse_size, DURATION_UNITS,
};

/// The `policy` keys' type, re-exported so the binaries need not name ctcp-proto.
pub use ctcp_proto::PathPolicy;
/// The `transport.repair_priority` key's type, re-exported for the same reason.
pub use ctcp_proto::RepairPriority;
use ctcp_proto::{EndpointConfig, TransportConfig};
use ipnet::IpNet;
use std::net::{IpAddr, SocketAddr};
use std::ops::RangeInclusive;
use std::path::{Path, PathBuf};
use std::time::Duration;
use thiserror::Error;

/// A configuration problem, located as precisely as possible.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[error("{source_name}{}{}: {message}", line.map(|l| format!(":{l}")).unwrap_or_default(), key.as_ref().map(|k| format!(": key '{k}'")).unwrap_or_default())]
pub struct ConfigError {
    /// File name (or `<command line>`, `<environment>`).
    pub source_name: String,
    /// 1-based line, when known.
    pub line: Option<usize>,
    /// Dotted key path, when known.
    pub key: Option<String>,
    /// What is wrong.
    pub message: String,
}

impl ConfigError {
    fn new(source_name: &str, text: Option<&str>, key: &str, message: impl Into<String>) -> Self {
        ConfigError {
            source_name: source_name.to_owned(),
            line: text.and_then(|t| raw::key_line(t, key)),
            key: Some(key.to_owned()),
            message: message.into(),
        }
    }
}

/// Log output settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogConfig {
    /// `error`, `warn`, `info`, `debug`, `trace`, or a `tracing` filter directive.
    pub level: String,
    /// JSON lines instead of human-readable text.
    pub json: bool,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            level: "info".into(),
            json: false,
        }
    }
}

/// The coded-transport tunables a configuration file sets: a validated view of
/// [`TransportConfig`], whose defaults they take ([`TransportSettings::from_transport`])
/// and into which they turn ([`TransportSettings::transport_config`]). `symbol_size` must
/// match the peer's; the windows are negotiated down to the smaller side's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransportSettings {
    /// Coded symbol size in bytes: a multiple of 64 in 256..=1408 (1408 + 33 bytes of
    /// headers fits the 1452-byte datagram of a 1500-byte IPv6 path; the next multiple of
    /// 64 would not).
    pub symbol_size: usize,
    /// Sender window in symbols (16..=65536).
    pub window: usize,
    /// Optional sending-rate ceiling in bit/s.
    pub max_rate_bps: Option<u64>,
    /// Session dies after this long without hearing from the peer.
    pub idle_timeout: Duration,
    /// PING after this long without sending.
    pub keepalive: Duration,
    /// RTT assumed before the first measurement.
    pub initial_rtt: Duration,
    /// Most concurrent streams per session.
    pub max_streams: usize,
    /// Send-side memory budget of a session: bytes all its streams may queue together.
    pub session_send_buffer: u64,
    /// Repairs sent ahead of loss reports, in percent of the expected loss (0..=400; scaled
    /// down on paths under 500 ms). 0 (default) repairs reported holes and the idle tail's
    /// likely losses: the least wire; more lowers delivery delay.
    pub proactive_repair_percent: u16,
    /// What the repairs sent when the sender falls idle are sized for: `latency` (default:
    /// the flight's likely losses plus a margin, before they are reported) or `bandwidth`
    /// (only reported losses: about the erasure minimum, each loss a round trip or more
    /// later). Matters for application-limited flows.
    pub repair_priority: RepairPriority,
    /// Handshake copies sent back to back to measure the path (0..=64; 0 turns it off).
    pub handshake_train: u8,
    /// Unreliable datagrams in the session (issue 27): SOCKS UDP ASSOCIATE and the UDP
    /// TPROXY listener on the forward side, per-flow UDP sockets on the reverse side.
    pub datagrams: bool,
    /// How long a datagram may wait for its first transmission or for repairs, beyond a
    /// quarter RTT (1ms..=10s).
    pub datagram_deadline: Duration,
    /// Datagrams queued to send (and received, not yet taken) per session, at most
    /// (16..=65536); beyond, the oldest is dropped.
    pub datagram_queue: usize,
}

impl Default for TransportSettings {
    /// [`TransportConfig`]'s defaults: they are written once, in `ctcp-proto`.
    fn default() -> Self {
        TransportSettings::from_transport(&TransportConfig::default())
    }
}

impl TransportSettings {
    /// The configurable part of `t`.
    pub fn from_transport(t: &TransportConfig) -> Self {
        TransportSettings {
            symbol_size: t.symbol_size,
            window: t.window,
            max_rate_bps: t.max_rate_bps,
            idle_timeout: t.idle_timeout,
            keepalive: t.keepalive,
            initial_rtt: t.initial_rtt,
            max_streams: t.max_streams,
            session_send_buffer: u64::try_from(t.session_send_buffer).unwrap_or(u64::MAX),
            // A share of at most 4 (400 %) in the validated range; the float-to-int cast
            // saturates anything else.
            proactive_repair_percent: (t.proactive_repair * 100.0).round() as u16,
            repair_priority: t.repair_priority,
            handshake_train: t.handshake_train,
            datagrams: t.datagrams,
            datagram_deadline: t.datagram_deadline,
            datagram_queue: t.datagram_queue,
        }
    }

    /// The transport parameters these settings ask for: the configurable ones from here,
    /// the rest at [`TransportConfig`]'s defaults.
    pub fn transport_config(&self) -> TransportConfig {
        TransportConfig {
            symbol_size: self.symbol_size,
            window: self.window,
            max_rate_bps: self.max_rate_bps,
            idle_timeout: self.idle_timeout,
            keepalive: self.keepalive,
            initial_rtt: self.initial_rtt,
            max_streams: self.max_streams,
            session_send_buffer: usize::try_from(self.session_send_buffer).unwrap_or(usize::MAX),
            proactive_repair: f64::from(self.proactive_repair_percent) / 100.0,
            repair_priority: self.repair_priority,
            handshake_train: self.handshake_train,
            datagrams: self.datagrams,
            datagram_deadline: self.datagram_deadline,
            datagram_queue: self.datagram_queue,
            ..TransportConfig::default()
        }
    }
}

/// UDP flows (issue 27): the reverse side's per-flow sockets, the forward side's UDP
/// TPROXY flows. Top-level keys `udp_max_flows` and `udp_idle_timeout` of both files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpFlowConfig {
    /// Most flows at once (1..=1000000); at the cap the least recently active goes.
    pub max_flows: usize,
    /// A flow with no datagram either way for this long is closed (1s..=1h).
    pub idle_timeout: Duration,
}

impl Default for UdpFlowConfig {
    fn default() -> Self {
        UdpFlowConfig {
            max_flows: 1024,
            idle_timeout: Duration::from_secs(60),
        }
    }
}

impl UdpFlowConfig {
    /// Checks the limits.
    ///
    /// # Errors
    /// The first bad value, named by its key (`udp_max_flows`, `udp_idle_timeout`).
    pub fn validate(&self, source_name: &str, text: Option<&str>) -> Result<(), ConfigError> {
        if !(1..=1_000_000).contains(&self.max_flows) {
            return Err(ConfigError::new(
                source_name,
                text,
                "udp_max_flows",
                format!("must be between 1 and 1000000 (got {})", self.max_flows),
            ));
        }
        if self.idle_timeout < Duration::from_secs(1)
            || self.idle_timeout > Duration::from_secs(3600)
        {
            return Err(ConfigError::new(
                source_name,
                text,
                "udp_idle_timeout",
                format!("must be between 1s and 1h (got {:?})", self.idle_timeout),
            ));
        }
        Ok(())
    }
}

/// The forward proxy's configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForwardConfig {
    /// SOCKS listen address (default 127.0.0.1:1080: loopback only).
    pub listen: SocketAddr,
    /// The reverse proxy, `host:port` (required: file or `--peer`).
    pub peer: Option<String>,
    /// File holding the pre-shared key (else `CTCP_PSK`).
    pub psk_file: Option<PathBuf>,
    /// SOCKS username/password pairs; empty means no authentication.
    pub socks_users: Vec<(String, String)>,
    /// SOCKS handshake timeout.
    pub handshake_timeout: Duration,
    /// Wait for the reverse side's connect result.
    pub open_timeout: Duration,
    /// Reply success to a SOCKS CONNECT at once instead of after the reverse side's
    /// connect result: saves one round trip per connection (600 ms on a satellite link),
    /// but a failed target connect then shows as a reset connection, not a SOCKS error.
    pub fast_open: bool,
    /// Drain time on SIGTERM.
    pub drain_timeout: Duration,
    /// Debug-level statistics interval.
    pub stats_interval: Duration,
    /// Opt-in Prometheus/OpenMetrics endpoint (HTTP), e.g. 127.0.0.1:9100.
    pub metrics_listen: Option<SocketAddr>,
    /// Opt-in transparent (gateway) TCP listener: connections the kernel redirects to
    /// it ride the tunnel to their original destination, as a SOCKS CONNECT would.
    pub transparent_listen: Option<SocketAddr>,
    /// How the kernel hands connections to `transparent_listen`.
    pub transparent_mode: TransparentMode,
    /// Opt-in transparent (gateway) UDP listener (`tproxy` only): datagrams the kernel
    /// hands to it ride the session as datagrams to their original destination.
    pub transparent_udp_listen: Option<SocketAddr>,
    /// Limits of the transparent UDP flows.
    pub udp: UdpFlowConfig,
    /// Multipath (issue 29): the local links the session uses, one UDP socket each; the
    /// first that is up when a session starts carries its handshake (its path 0), the
    /// others are opened once the session is up. Empty (the default): one socket, bound as
    /// without this key.
    pub paths: Vec<PathBind>,
    /// How a session with several paths uses them.
    pub policy: PathPolicy,
    /// Logging.
    pub log: LogConfig,
    /// Transport.
    pub transport: TransportSettings,
}

/// Where one path's socket is bound: a local source address, or an interface
/// (`SO_BINDTODEVICE`, so the path follows that link whatever its address).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PathBind {
    /// Bind to this local address (any port).
    Address(IpAddr),
    /// Bind to this network interface.
    Device(String),
}

impl std::fmt::Display for PathBind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PathBind::Address(a) => write!(f, "{a}"),
            PathBind::Device(d) => f.write_str(d),
        }
    }
}

/// Parses a path's `bind`: an IP address, else an interface name (1 to 15 bytes, no
/// `/`, whitespace or NUL: what Linux accepts as a device name).
///
/// # Errors
/// A name Linux could not have.
pub fn parse_path_bind(s: &str) -> Result<PathBind, String> {
    if let Ok(a) = s.parse::<IpAddr>() {
        return Ok(PathBind::Address(a));
    }
    let bad = |c: char| c == '/' || c == '\0' || c.is_whitespace();
    if s.is_empty() || s.len() > 15 || s.chars().any(bad) || s == "." || s == ".." {
        return Err(format!(
            "must be an IP address or an interface name (got {s:?})"
        ));
    }
    Ok(PathBind::Device(s.to_owned()))
}

/// Parses a path policy: `aggregate`, `failover` or `redundant`.
///
/// # Errors
/// Anything else.
pub fn parse_path_policy(s: &str) -> Result<PathPolicy, String> {
    match s.trim() {
        "aggregate" => Ok(PathPolicy::Aggregate),
        "failover" => Ok(PathPolicy::Failover),
        "redundant" => Ok(PathPolicy::Redundant),
        o => Err(format!(
            "must be \"aggregate\", \"failover\" or \"redundant\" (got {o:?})"
        )),
    }
}

/// Parses a repair priority: `latency` or `bandwidth`.
///
/// # Errors
/// Anything else.
pub fn parse_repair_priority(s: &str) -> Result<RepairPriority, String> {
    match s.trim() {
        "latency" => Ok(RepairPriority::Latency),
        "bandwidth" => Ok(RepairPriority::Bandwidth),
        o => Err(format!("must be \"latency\" or \"bandwidth\" (got {o:?})")),
    }
}

/// How connections reach the transparent listener, and so where their original
/// destination is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TransparentMode {
    /// nftables/iptables `redirect` (NAT): the original destination comes from
    /// conntrack (`SO_ORIGINAL_DST` / `IP6T_SO_ORIGINAL_DST`).
    #[default]
    Redirect,
    /// TPROXY: the listener is `IP_TRANSPARENT`, and an accepted connection's local
    /// address is its original destination (no NAT).
    Tproxy,
}

impl TransparentMode {
    /// The name used in files and on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            TransparentMode::Redirect => "redirect",
            TransparentMode::Tproxy => "tproxy",
        }
    }
}

impl std::fmt::Display for TransparentMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Parses a transparent mode: `redirect` or `tproxy`.
///
/// # Errors
/// Anything else.
pub fn parse_transparent_mode(s: &str) -> Result<TransparentMode, String> {
    match s.trim() {
        "redirect" => Ok(TransparentMode::Redirect),
        "tproxy" => Ok(TransparentMode::Tproxy),
        o => Err(format!("must be \"redirect\" or \"tproxy\" (got {o:?})")),
    }
}

impl Default for ForwardConfig {
    fn default() -> Self {
        ForwardConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 1080)),
            peer: None,
            psk_file: None,
            socks_users: Vec::new(),
            handshake_timeout: Duration::from_secs(10),
            open_timeout: Duration::from_secs(30),
            fast_open: false,
            drain_timeout: Duration::from_secs(30),
            stats_interval: Duration::from_secs(5),
            metrics_listen: None,
            transparent_listen: None,
            transparent_mode: TransparentMode::Redirect,
            transparent_udp_listen: None,
            udp: UdpFlowConfig::default(),
            paths: Vec::new(),
            policy: PathPolicy::Aggregate,
            log: LogConfig::default(),
            transport: TransportSettings::default(),
        }
    }
}

/// One ACL rule: first match wins.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AclRule {
    /// Allow (true) or deny.
    pub allow: bool,
    /// Addresses covered.
    pub net: IpNet,
    /// Ports covered.
    pub ports: RangeInclusive<u16>,
}

/// The reverse proxy's configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReverseConfig {
    /// UDP listen address (default 0.0.0.0:7000).
    pub listen: SocketAddr,
    /// File holding the pre-shared key (else `CTCP_PSK`).
    pub psk_file: Option<PathBuf>,
    /// Target connect timeout (name resolution included).
    pub connect_timeout: Duration,
    /// ACL rules, in order. The default ([`default_acl`]) denies the reverse host's own
    /// loopback and unspecified addresses and link-local addresses (where cloud metadata
    /// services live), and allows everything else.
    pub acl: Vec<AclRule>,
    /// Verdict when no rule matches (default allow).
    pub acl_default_allow: bool,
    /// Most concurrent sessions.
    pub max_sessions: usize,
    /// Handshakes accepted per second.
    pub handshake_rate: u32,
    /// Worker threads, each driving a shard of the sessions and their streams (its own
    /// endpoint and `SO_REUSEPORT` socket); 0 (the default) means one per available core.
    pub workers: usize,
    /// Drain time on SIGTERM.
    pub drain_timeout: Duration,
    /// Debug-level statistics interval.
    pub stats_interval: Duration,
    /// Opt-in Prometheus/OpenMetrics endpoint (HTTP), e.g. 127.0.0.1:9101.
    pub metrics_listen: Option<SocketAddr>,
    /// Limits of the per-flow UDP sockets (datagrams from forward clients).
    pub udp: UdpFlowConfig,
    /// How a session with several paths (opened by a multipath forward) uses them for
    /// what this side sends: downloads follow the reverse's policy, uploads the forward's.
    pub policy: PathPolicy,
    /// Logging.
    pub log: LogConfig,
    /// Transport.
    pub transport: TransportSettings,
    /// Relay role (`[relay]`): carry streams on to another gateway instead of opening
    /// the TCP connections here.
    pub relay: RelayConfig,
}

/// The relay role of a reverse proxy (`[relay]`): with `next_hop` set, each stream the
/// forward side opens is carried on over this proxy's own tunnel session to the next
/// gateway (a reverse proxy, or another relay) rather than connected here. Each segment
/// has its own handshake, key and transport state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelayConfig {
    /// The next gateway, `host:port`; unset (the default) means no relay: connect here.
    pub next_hop: Option<String>,
    /// File holding the next segment's pre-shared key; unset means the same key as the
    /// upstream segment (`psk_file`, else `CTCP_PSK`).
    pub next_psk_file: Option<PathBuf>,
    /// The most bytes the relay holds for one session waiting to be passed on: the
    /// flow-control credit it grants on each upstream session and on its next-hop
    /// session (per stream and per session), so memory is at most about
    /// `buffer × (upstream sessions + 1)` plus the send buffers
    /// (`transport.session_send_buffer`). It must cover each segment's bandwidth-delay
    /// product or it caps the rate.
    pub buffer: u64,
    /// How long a stream waits for the next hop's connect result (and for a next-hop
    /// session) before its opener is told it failed.
    pub open_timeout: Duration,
}

impl Default for RelayConfig {
    fn default() -> Self {
        RelayConfig {
            next_hop: None,
            next_psk_file: None,
            buffer: 32 << 20,
            open_timeout: Duration::from_secs(30),
        }
    }
}

impl RelayConfig {
    /// Checks values that the TOML path and the command line both set.
    ///
    /// # Errors
    /// The first bad value, named by its key (`relay.buffer`, `relay.next_psk_file`).
    pub fn validate(&self, source_name: &str, text: Option<&str>) -> Result<(), ConfigError> {
        if !((256 << 10)..=(4 << 30)).contains(&self.buffer) {
            return Err(ConfigError::new(
                source_name,
                text,
                "relay.buffer",
                format!(
                    "must be between 256KiB and 4GiB (got {} bytes)",
                    self.buffer
                ),
            ));
        }
        if self.open_timeout.is_zero() {
            return Err(ConfigError::new(
                source_name,
                text,
                "relay.open_timeout",
                "must be non-zero",
            ));
        }
        if self.next_hop.is_none() && self.next_psk_file.is_some() {
            return Err(ConfigError::new(
                source_name,
                text,
                "relay.next_psk_file",
                "is set but relay.next_hop is not: set the next gateway (--next-hop HOST:PORT) or remove the key file",
            ));
        }
        Ok(())
    }
}

/// Parses an ACL address block: a CIDR block (`10.0.0.0/8`) or one address (`10.0.0.5`).
///
/// # Errors
/// Neither an address nor a block.
pub fn parse_net(s: &str) -> Result<IpNet, String> {
    let s = s.trim();
    s.parse()
        .or_else(|_| s.parse::<std::net::IpAddr>().map(IpNet::from))
        .map_err(|_| format!("{s:?} is not an address or CIDR block"))
}

/// Parses an ACL port set: one port (`22`), a range (`1-1024`) or `*` (all).
///
/// # Errors
/// Not a port, or a range whose start is after its end.
pub fn parse_ports(p: &str) -> Result<RangeInclusive<u16>, String> {
    let p = p.trim();
    if p == "*" {
        return Ok(0..=u16::MAX);
    }
    let bad = || format!("{p:?} is not a port, a range like \"1-1024\", or \"*\"");
    let (a, b) = p.split_once('-').unwrap_or((p, p));
    let a: u16 = a.trim().parse().map_err(|_| bad())?;
    let b: u16 = b.trim().parse().map_err(|_| bad())?;
    if a > b {
        return Err(bad());
    }
    Ok(a..=b)
}

/// Parses an ACL verdict: `allow` (true) or `deny` (false).
///
/// # Errors
/// Anything else.
pub fn parse_verdict(s: &str) -> Result<bool, String> {
    match s.trim() {
        "allow" => Ok(true),
        "deny" => Ok(false),
        o => Err(format!("must be \"allow\" or \"deny\" (got {o:?})")),
    }
}

/// Parses the command-line form of an ACL target, `NET[,PORTS]`: `10.0.0.0/8`,
/// `10.0.0.5,22`, `::1,8000-8999`.
///
/// # Errors
/// As [`parse_net`] and [`parse_ports`].
pub fn parse_net_ports(s: &str) -> Result<(IpNet, RangeInclusive<u16>), String> {
    let (net, ports) = s.split_once(',').unwrap_or((s, "*"));
    Ok((parse_net(net)?, parse_ports(ports)?))
}

/// The blocks [`default_acl`] denies: the reverse host itself (loopback, and the
/// unspecified addresses, which `connect()` also delivers to the host) and link-local
/// (169.254.0.0/16 holds cloud metadata services at 169.254.169.254).
pub const DEFAULT_DENIED: [&str; 6] = [
    "127.0.0.0/8",
    "::1/128",
    "0.0.0.0/32",
    "::/128",
    "169.254.0.0/16",
    "fe80::/10",
];

/// The ACL used when none is configured: deny [`DEFAULT_DENIED`], allow the rest. Without
/// the loopback rules any forward client could reach services bound to the reverse
/// host's 127.0.0.1 (admin ports, metrics, databases); `--allow 127.0.0.1` or `[[acl]]`
/// rules override it.
pub fn default_acl() -> Vec<AclRule> {
    DEFAULT_DENIED
        .iter()
        .filter_map(|n| n.parse().ok())
        .map(|net| AclRule {
            allow: false,
            net,
            ports: 0..=u16::MAX,
        })
        .collect()
}

/// Most worker threads (`workers`) a reverse proxy accepts: a bound on threads, sockets
/// and per-shard buffers, far above any core count it will meet.
pub const MAX_WORKERS: usize = 256;

impl ReverseConfig {
    /// The worker count to run: `workers`, or one per available core when it is 0.
    pub fn worker_count(&self) -> usize {
        match self.workers {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
            n => n,
        }
    }
}

impl Default for ReverseConfig {
    fn default() -> Self {
        ReverseConfig {
            listen: SocketAddr::from(([0, 0, 0, 0], 7000)),
            psk_file: None,
            connect_timeout: Duration::from_secs(10),
            acl: default_acl(),
            acl_default_allow: true,
            max_sessions: EndpointConfig::DEFAULT_MAX_SESSIONS,
            handshake_rate: EndpointConfig::DEFAULT_HANDSHAKE_RATE,
            workers: 0,
            drain_timeout: Duration::from_secs(30),
            stats_interval: Duration::from_secs(5),
            metrics_listen: None,
            udp: UdpFlowConfig::default(),
            policy: PathPolicy::Aggregate,
            log: LogConfig::default(),
            transport: TransportSettings::default(),
            relay: RelayConfig::default(),
        }
    }
}

fn read(path: &Path) -> Result<String, ConfigError> {
    std::fs::read_to_string(path).map_err(|e| ConfigError {
        source_name: path.display().to_string(),
        line: None,
        key: None,
        message: format!("cannot read: {e}"),
    })
}

impl ForwardConfig {
    /// Parses and validates TOML text; `source_name` appears in errors.
    ///
    /// # Errors
    /// Syntax errors, unknown keys, out-of-range values — each located.
    pub fn from_toml_str(text: &str, source_name: &str) -> Result<Self, ConfigError> {
        raw::forward(text, source_name)
    }

    /// Loads a file.
    ///
    /// # Errors
    /// As [`ForwardConfig::from_toml_str`], or if the file cannot be read.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        Self::from_toml_str(&read(path)?, &path.display().to_string())
    }
}

impl ReverseConfig {
    /// Parses and validates TOML text; `source_name` appears in errors.
    ///
    /// # Errors
    /// Syntax errors, unknown keys, out-of-range values — each located.
    pub fn from_toml_str(text: &str, source_name: &str) -> Result<Self, ConfigError> {
        raw::reverse(text, source_name)
    }

    /// Loads a file.
    ///
    /// # Errors
    /// As [`ReverseConfig::from_toml_str`], or if the file cannot be read.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        Self::from_toml_str(&read(path)?, &path.display().to_string())
    }
}

/// Validates the forward's listeners against each other (shared by the TOML path and
/// command-line overrides): the transparent listener must not be the SOCKS or metrics
/// address.
///
/// # Errors
/// The clash, named by the transparent listener's key.
pub fn validate_forward(
    c: &ForwardConfig,
    source_name: &str,
    text: Option<&str>,
) -> Result<(), ConfigError> {
    c.udp.validate(source_name, text)?;
    if c.paths.len() > usize::from(ctcp_proto::wire::MAX_PATHS) {
        return Err(ConfigError::new(
            source_name,
            text,
            "paths",
            format!(
                "at most {} paths per session (got {})",
                ctcp_proto::wire::MAX_PATHS,
                c.paths.len()
            ),
        ));
    }
    for (i, p) in c.paths.iter().enumerate() {
        if let Some(j) = c.paths[..i].iter().position(|q| q == p) {
            return Err(ConfigError::new(
                source_name,
                text,
                &format!("paths[{i}].bind"),
                format!("{p} is already path {j}: each path needs its own link"),
            ));
        }
    }
    if let Some(u) = c.transparent_udp_listen {
        let why = if c.transparent_mode != TransparentMode::Tproxy {
            Some("needs transparent_mode = \"tproxy\": UDP has no NAT original destination to read")
        } else if !c.transport.datagrams {
            Some("needs transport.datagrams = true: flows ride the session as datagrams")
        } else if u.port() == 0 {
            Some("needs a fixed port: the firewall rules send datagrams to it")
        } else if c.listen == u || c.metrics_listen == Some(u) {
            Some("clashes with another listener")
        } else {
            None
        };
        if let Some(why) = why {
            return Err(ConfigError::new(
                source_name,
                text,
                "transparent_udp_listen",
                why,
            ));
        }
    }
    let Some(t) = c.transparent_listen else {
        return Ok(());
    };
    let clash = |other: SocketAddr| {
        other.port() == t.port()
            && (other.ip() == t.ip() || other.ip().is_unspecified() || t.ip().is_unspecified())
    };
    let other = if clash(c.listen) {
        Some(("the SOCKS listener (listen)", c.listen))
    } else {
        c.metrics_listen
            .filter(|m| clash(*m))
            .map(|m| ("the metrics endpoint (metrics_listen)", m))
    };
    if let Some((what, addr)) = other {
        return Err(ConfigError::new(
            source_name,
            text,
            "transparent_listen",
            format!("{t} clashes with {what} on {addr}: give it a port of its own"),
        ));
    }
    if t.port() == 0 {
        return Err(ConfigError::new(
            source_name,
            text,
            "transparent_listen",
            "needs a fixed port: the firewall rules redirect to it",
        ));
    }
    Ok(())
}

/// Validates transport settings (shared by the TOML path and command-line overrides).
///
/// # Errors
/// The first out-of-range value, named by its key.
pub fn validate_transport(
    t: &TransportSettings,
    source_name: &str,
    text: Option<&str>,
) -> Result<(), ConfigError> {
    let err = |k: &str, m: String| Err(ConfigError::new(source_name, text, k, m));
    if !t.symbol_size.is_multiple_of(64) || !(256..=1408).contains(&t.symbol_size) {
        return err(
            "transport.symbol_size",
            format!(
                "must be a multiple of 64 between 256 and 1408 (got {})",
                t.symbol_size
            ),
        );
    }
    if !(16..=65536).contains(&t.window) {
        return err(
            "transport.window",
            format!("must be between 16 and 65536 (got {})", t.window),
        );
    }
    if t.max_rate_bps.is_some_and(|r| r < 64_000) {
        return err("transport.max_rate", "must be at least 64kbit".into());
    }
    if t.proactive_repair_percent > 400 {
        return err(
            "transport.proactive_repair",
            format!(
                "must be a percentage between 0 and 400 (got {})",
                t.proactive_repair_percent
            ),
        );
    }
    if t.handshake_train > 64 {
        return err(
            "transport.handshake_train",
            format!("must be between 0 and 64 (got {})", t.handshake_train),
        );
    }
    if t.initial_rtt.is_zero() || t.initial_rtt > Duration::from_secs(60) {
        return err(
            "transport.initial_rtt",
            format!("must be between 1ms and 60s (got {:?})", t.initial_rtt),
        );
    }
    if t.idle_timeout < Duration::from_secs(1) {
        return err("transport.idle_timeout", "must be at least 1s".into());
    }
    if t.keepalive.is_zero() || t.keepalive >= t.idle_timeout {
        return err(
            "transport.keepalive",
            "must be non-zero and shorter than idle_timeout".into(),
        );
    }
    if !((64 << 10)..=(4 << 30)).contains(&t.session_send_buffer) {
        return err(
            "transport.session_send_buffer",
            format!(
                "must be between 64KiB and 4GiB (got {} bytes)",
                t.session_send_buffer
            ),
        );
    }
    if !(1..=65536).contains(&t.max_streams) {
        return err(
            "transport.max_streams",
            format!("must be between 1 and 65536 (got {})", t.max_streams),
        );
    }
    if t.datagram_deadline.is_zero() || t.datagram_deadline > Duration::from_secs(10) {
        return err(
            "transport.datagram_deadline",
            format!(
                "must be between 1ms and 10s (got {:?})",
                t.datagram_deadline
            ),
        );
    }
    if !(16..=65536).contains(&t.datagram_queue) {
        return err(
            "transport.datagram_queue",
            format!("must be between 16 and 65536 (got {})", t.datagram_queue),
        );
    }
    Ok(())
}

/// How to make a key, shown in every key error.
pub const KEYGEN_HINT: &str = "make one with `ctcp-forward keygen --out FILE` (or `ctcp-reverse keygen`), or `head -c32 /dev/urandom | od -An -tx1 | tr -d ' \\n' > FILE`";

/// Parses key text: exactly 64 hex digits (32 bytes), surrounding whitespace allowed.
///
/// # Errors
/// What is wrong with the text (length, a non-hex character, whitespace inside, binary
/// data), for the caller to locate.
pub fn parse_key(text: &[u8]) -> Result<[u8; 32], String> {
    let Ok(text) = std::str::from_utf8(text) else {
        return Err(format!(
            "the key is binary data ({} bytes), not 64 hex digits",
            text.len()
        ));
    };
    let t = text.trim();
    if let Some((i, c)) = t.char_indices().find(|(_, c)| !c.is_ascii_hexdigit()) {
        return Err(if c.is_whitespace() {
            format!("the key has whitespace inside it (at character {}); it must be 64 hex digits on one line", i + 1)
        } else {
            format!("{c:?} (character {}) is not a hex digit", i + 1)
        });
    }
    if t.len() != 64 {
        return Err(format!(
            "the key has {} hex digits; it must have exactly 64 (32 bytes)",
            t.len()
        ));
    }
    let mut key = [0u8; 32];
    for (k, pair) in key.iter_mut().zip(t.as_bytes().chunks_exact(2)) {
        // Both bytes are ASCII hex digits (checked above), so this is valid UTF-8 hex.
        let hex = std::str::from_utf8(pair).map_err(|e| e.to_string())?;
        *k = u8::from_str_radix(hex, 16).map_err(|e| e.to_string())?;
    }
    Ok(key)
}

/// Reads the pre-shared key: from `path` if given, else from the `CTCP_PSK` environment
/// variable. A key is exactly 64 hex digits (32 bytes), surrounding whitespace (a
/// trailing newline) allowed. Keys never come from the command line, where `ps` shows them.
///
/// # Errors
/// No key source, an unreadable file, or a malformed key; the message says how to make one.
pub fn load_psk(path: Option<&Path>) -> Result<[u8; 32], ConfigError> {
    let (name, bytes) = match path {
        Some(p) => (
            p.display().to_string(),
            std::fs::read(p).map_err(|e| ConfigError {
                source_name: p.display().to_string(),
                line: None,
                key: None,
                message: format!("cannot read key file: {e}"),
            })?,
        ),
        None => match std::env::var("CTCP_PSK") {
            Ok(v) => ("<environment CTCP_PSK>".to_owned(), v.into_bytes()),
            Err(_) => {
                return Err(ConfigError {
                    source_name: "<key>".into(),
                    line: None,
                    key: Some("psk_file".into()),
                    message: format!(
                        "no pre-shared key: pass --psk-file FILE or set CTCP_PSK; {KEYGEN_HINT}"
                    ),
                })
            }
        },
    };
    parse_key(&bytes).map_err(|m| ConfigError {
        source_name: name,
        line: None,
        key: None,
        message: format!("{m}; {KEYGEN_HINT}"),
    })
}

/// A warning if the key file can be read by its group or by others (it should be mode
/// 0600, owned by the proxy's user); `None` when private or not a Unix file system.
pub fn key_file_warning(path: &Path) -> Option<String> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(path).ok()?.permissions().mode() & 0o777;
        (mode & 0o077 != 0).then(|| {
            format!(
                "key file {} is readable by {} (mode {mode:04o}); restrict it with `chmod 600 {}`",
                path.display(),
                if mode & 0o007 != 0 {
                    "everyone"
                } else {
                    "its group"
                },
                path.display()
            )
        })
    }
    #[cfg(not(unix))]
    {
        let _ = path;
        None
    }
}

#[cfg(test)]
mod tests;
