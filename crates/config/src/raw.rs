//! The TOML shape: raw serde structs with every field optional, converted into the
//! validated types over the embedded defaults.

use crate::{
    validate_transport, AclRule, ConfigError, ForwardConfig, LogConfig, RelayConfig, ReverseConfig,
    TransportSettings, UdpFlowConfig,
};
use serde::Deserialize;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawLog {
    level: Option<String>,
    format: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawTransport {
    symbol_size: Option<usize>,
    window: Option<usize>,
    max_rate: Option<String>,
    #[serde(default, deserialize_with = "crate::units::opt_duration::deserialize")]
    idle_timeout: Option<Duration>,
    #[serde(default, deserialize_with = "crate::units::opt_duration::deserialize")]
    keepalive: Option<Duration>,
    #[serde(default, deserialize_with = "crate::units::opt_duration::deserialize")]
    initial_rtt: Option<Duration>,
    max_streams: Option<usize>,
    session_send_buffer: Option<String>,
    proactive_repair: Option<u16>,
    repair_priority: Option<String>,
    handshake_train: Option<u8>,
    datagrams: Option<bool>,
    #[serde(default, deserialize_with = "crate::units::opt_duration::deserialize")]
    datagram_deadline: Option<Duration>,
    datagram_queue: Option<usize>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawUser {
    username: String,
    password: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPath {
    bind: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawForward {
    listen: Option<SocketAddr>,
    peer: Option<String>,
    psk_file: Option<PathBuf>,
    #[serde(default)]
    socks_users: Vec<RawUser>,
    #[serde(default, deserialize_with = "crate::units::opt_duration::deserialize")]
    handshake_timeout: Option<Duration>,
    #[serde(default, deserialize_with = "crate::units::opt_duration::deserialize")]
    open_timeout: Option<Duration>,
    fast_open: Option<bool>,
    #[serde(default, deserialize_with = "crate::units::opt_duration::deserialize")]
    drain_timeout: Option<Duration>,
    #[serde(default, deserialize_with = "crate::units::opt_duration::deserialize")]
    stats_interval: Option<Duration>,
    metrics_listen: Option<SocketAddr>,
    transparent_listen: Option<SocketAddr>,
    transparent_mode: Option<String>,
    transparent_udp_listen: Option<SocketAddr>,
    udp_max_flows: Option<usize>,
    #[serde(default, deserialize_with = "crate::units::opt_duration::deserialize")]
    udp_idle_timeout: Option<Duration>,
    #[serde(default)]
    paths: Vec<RawPath>,
    policy: Option<String>,
    #[serde(default)]
    log: RawLog,
    #[serde(default)]
    transport: RawTransport,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawRelay {
    next_hop: Option<String>,
    next_psk_file: Option<PathBuf>,
    buffer: Option<String>,
    #[serde(default, deserialize_with = "crate::units::opt_duration::deserialize")]
    open_timeout: Option<Duration>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAclRule {
    action: String,
    net: String,
    ports: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawReverse {
    listen: Option<SocketAddr>,
    psk_file: Option<PathBuf>,
    #[serde(default, deserialize_with = "crate::units::opt_duration::deserialize")]
    connect_timeout: Option<Duration>,
    acl: Option<Vec<RawAclRule>>,
    acl_default: Option<String>,
    max_sessions: Option<usize>,
    handshake_rate: Option<u32>,
    workers: Option<usize>,
    #[serde(default, deserialize_with = "crate::units::opt_duration::deserialize")]
    drain_timeout: Option<Duration>,
    #[serde(default, deserialize_with = "crate::units::opt_duration::deserialize")]
    stats_interval: Option<Duration>,
    metrics_listen: Option<SocketAddr>,
    udp_max_flows: Option<usize>,
    #[serde(default, deserialize_with = "crate::units::opt_duration::deserialize")]
    udp_idle_timeout: Option<Duration>,
    policy: Option<String>,
    #[serde(default)]
    log: RawLog,
    #[serde(default)]
    transport: RawTransport,
    #[serde(default)]
    relay: RawRelay,
}

/// The 1-based line where dotted `key` is set in `text` (section-aware, best effort).
pub(crate) fn key_line(text: &str, key: &str) -> Option<usize> {
    let (section, leaf) = match key.rsplit_once('.') {
        Some((s, l)) => (Some(s), l),
        None => (None, key),
    };
    let leaf = leaf.split('[').next().unwrap_or(leaf);
    let mut current: Option<String> = None;
    for (i, line) in text.lines().enumerate() {
        let t = line.trim();
        if let Some(h) = t.strip_prefix('[') {
            current = Some(
                h.trim_start_matches('[')
                    .trim_end_matches(']')
                    .trim()
                    .to_owned(),
            );
            continue;
        }
        let in_section = match (section, &current) {
            (None, None) => true,
            (Some(s), Some(c)) => s.split('[').next() == Some(c.as_str()),
            _ => false,
        };
        if in_section && t.split('=').next().map(str::trim) == Some(leaf) && t.contains('=') {
            return Some(i + 1);
        }
    }
    None
}

/// The dotted key set on the 1-based `line` of `text` (or on the nearest line above it
/// that sets one, for values spanning lines), with its section: `transport.window`,
/// `acl[1].net`. Best effort: for messages that do not name their key.
pub(crate) fn key_at(text: &str, line: usize) -> Option<String> {
    let mut section: Option<String> = None;
    let mut key: Option<String> = None;
    let mut array_counts: std::collections::HashMap<String, usize> = Default::default();
    for l in text.lines().take(line) {
        let t = l.trim();
        if t.is_empty() || t.starts_with('#') {
            continue;
        }
        if let Some(h) = t.strip_prefix("[[") {
            let name = h.split("]]").next().unwrap_or(h).trim().to_owned();
            let n = array_counts.entry(name.clone()).or_default();
            section = Some(format!("{name}[{n}]"));
            *n += 1;
            key = None;
        } else if let Some(h) = t.strip_prefix('[') {
            section = Some(h.split(']').next().unwrap_or(h).trim().to_owned());
            key = None;
        } else if let Some((k, _)) = t.split_once('=') {
            key = Some(k.trim().trim_matches('"').to_owned());
        }
    }
    match (section, key) {
        (Some(s), Some(k)) => Some(format!("{s}.{k}")),
        (None, Some(k)) => Some(k),
        (Some(s), None) => Some(s),
        (None, None) => None,
    }
}

fn parse_err(e: toml::de::Error, text: &str, source_name: &str) -> ConfigError {
    let line = e
        .span()
        .map(|s| text[..s.start.min(text.len())].matches('\n').count() + 1);
    let msg = e.message().to_owned();
    // serde names the offending key in "unknown field `x`" / "missing field `x`"; other
    // messages ("invalid type: ..., expected usize") do not, so the key comes from the
    // line the error points at.
    let key = if msg.starts_with("unknown field") || msg.starts_with("missing field") {
        msg.split('`').nth(1).map(str::to_owned)
    } else {
        line.and_then(|l| key_at(text, l))
    };
    ConfigError {
        source_name: source_name.to_owned(),
        line,
        key,
        message: msg,
    }
}

fn log(raw: RawLog, text: &str, src: &str) -> Result<LogConfig, ConfigError> {
    let d = LogConfig::default();
    let json = match raw.format.as_deref() {
        None | Some("text") => false,
        Some("json") => true,
        Some(o) => {
            return Err(ConfigError::new(
                src,
                Some(text),
                "log.format",
                format!("must be \"text\" or \"json\" (got {o:?})"),
            ))
        }
    };
    let level = match raw.level {
        None => d.level,
        Some(l) => crate::parse_log_level(&l)
            .map_err(|m| ConfigError::new(src, Some(text), "log.level", m))?,
    };
    Ok(LogConfig { level, json })
}

fn transport(raw: RawTransport, text: &str, src: &str) -> Result<TransportSettings, ConfigError> {
    let d = TransportSettings::default();
    let max_rate_bps = match raw.max_rate {
        None => None,
        Some(r) => Some(
            crate::parse_rate(&r)
                .map_err(|m| ConfigError::new(src, Some(text), "transport.max_rate", m))?,
        ),
    };
    let t = TransportSettings {
        symbol_size: raw.symbol_size.unwrap_or(d.symbol_size),
        window: raw.window.unwrap_or(d.window),
        max_rate_bps,
        idle_timeout: raw.idle_timeout.unwrap_or(d.idle_timeout),
        keepalive: raw.keepalive.unwrap_or(d.keepalive),
        initial_rtt: raw.initial_rtt.unwrap_or(d.initial_rtt),
        max_streams: raw.max_streams.unwrap_or(d.max_streams),
        session_send_buffer: match raw.session_send_buffer {
            None => d.session_send_buffer,
            Some(v) => crate::parse_size(&v).map_err(|m| {
                ConfigError::new(src, Some(text), "transport.session_send_buffer", m)
            })?,
        },
        proactive_repair_percent: raw.proactive_repair.unwrap_or(d.proactive_repair_percent),
        repair_priority: match raw.repair_priority.as_deref() {
            None => d.repair_priority,
            Some(p) => crate::parse_repair_priority(p)
                .map_err(|m| ConfigError::new(src, Some(text), "transport.repair_priority", m))?,
        },
        handshake_train: raw.handshake_train.unwrap_or(d.handshake_train),
        datagrams: raw.datagrams.unwrap_or(d.datagrams),
        datagram_deadline: raw.datagram_deadline.unwrap_or(d.datagram_deadline),
        datagram_queue: raw.datagram_queue.unwrap_or(d.datagram_queue),
    };
    validate_transport(&t, src, Some(text))?;
    Ok(t)
}

pub(crate) fn forward(text: &str, src: &str) -> Result<ForwardConfig, ConfigError> {
    let raw: RawForward = toml::from_str(text).map_err(|e| parse_err(e, text, src))?;
    let d = ForwardConfig::default();
    for (i, u) in raw.socks_users.iter().enumerate() {
        if u.username.is_empty() || u.username.len() > 255 || u.password.len() > 255 {
            return Err(ConfigError::new(
                src,
                Some(text),
                &format!("socks_users[{i}].username"),
                "username must be 1-255 bytes and password at most 255",
            ));
        }
    }
    let peer = match raw.peer {
        None => None,
        Some(p) => {
            Some(crate::parse_peer(&p).map_err(|m| ConfigError::new(src, Some(text), "peer", m))?)
        }
    };
    let transparent_mode = match raw.transparent_mode.as_deref() {
        None => d.transparent_mode,
        Some(m) => crate::parse_transparent_mode(m)
            .map_err(|m| ConfigError::new(src, Some(text), "transparent_mode", m))?,
    };
    let paths = raw
        .paths
        .iter()
        .enumerate()
        .map(|(i, p)| {
            crate::parse_path_bind(&p.bind)
                .map_err(|m| ConfigError::new(src, Some(text), &format!("paths[{i}].bind"), m))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let policy = match raw.policy.as_deref() {
        None => d.policy,
        Some(p) => crate::parse_path_policy(p)
            .map_err(|m| ConfigError::new(src, Some(text), "policy", m))?,
    };
    let c = ForwardConfig {
        listen: raw.listen.unwrap_or(d.listen),
        peer,
        psk_file: raw.psk_file,
        socks_users: raw
            .socks_users
            .into_iter()
            .map(|u| (u.username, u.password))
            .collect(),
        handshake_timeout: raw.handshake_timeout.unwrap_or(d.handshake_timeout),
        open_timeout: raw.open_timeout.unwrap_or(d.open_timeout),
        fast_open: raw.fast_open.unwrap_or(d.fast_open),
        drain_timeout: raw.drain_timeout.unwrap_or(d.drain_timeout),
        stats_interval: raw.stats_interval.unwrap_or(d.stats_interval),
        metrics_listen: raw.metrics_listen,
        transparent_listen: raw.transparent_listen,
        transparent_mode,
        transparent_udp_listen: raw.transparent_udp_listen,
        udp: UdpFlowConfig {
            max_flows: raw.udp_max_flows.unwrap_or(d.udp.max_flows),
            idle_timeout: raw.udp_idle_timeout.unwrap_or(d.udp.idle_timeout),
        },
        paths,
        policy,
        log: log(raw.log, text, src)?,
        transport: transport(raw.transport, text, src)?,
    };
    crate::validate_forward(&c, src, Some(text))?;
    Ok(c)
}

fn acl_rule(r: RawAclRule, i: usize, text: &str, src: &str) -> Result<AclRule, ConfigError> {
    let key = |k: &str| format!("acl[{i}].{k}");
    let allow = match r.action.as_str() {
        "allow" => true,
        "deny" => false,
        o => {
            return Err(ConfigError::new(
                src,
                Some(text),
                &key("action"),
                format!("must be \"allow\" or \"deny\" (got {o:?})"),
            ))
        }
    };
    let net =
        crate::parse_net(&r.net).map_err(|m| ConfigError::new(src, Some(text), &key("net"), m))?;
    let ports = match r.ports.as_deref() {
        None => 0..=u16::MAX,
        Some(p) => crate::parse_ports(p)
            .map_err(|m| ConfigError::new(src, Some(text), &key("ports"), m))?,
    };
    Ok(AclRule { allow, net, ports })
}

pub(crate) fn reverse(text: &str, src: &str) -> Result<ReverseConfig, ConfigError> {
    let raw: RawReverse = toml::from_str(text).map_err(|e| parse_err(e, text, src))?;
    let d = ReverseConfig::default();
    let acl = match raw.acl {
        None => d.acl,
        Some(rules) => rules
            .into_iter()
            .enumerate()
            .map(|(i, r)| acl_rule(r, i, text, src))
            .collect::<Result<_, _>>()?,
    };
    let acl_default_allow = match raw.acl_default.as_deref() {
        None => d.acl_default_allow,
        Some(v) => crate::parse_verdict(v)
            .map_err(|m| ConfigError::new(src, Some(text), "acl_default", m))?,
    };
    let max_sessions = raw.max_sessions.unwrap_or(d.max_sessions);
    if !(1..=100_000).contains(&max_sessions) {
        return Err(ConfigError::new(
            src,
            Some(text),
            "max_sessions",
            format!("must be between 1 and 100000 (got {max_sessions})"),
        ));
    }
    let workers = raw.workers.unwrap_or(d.workers);
    if workers > crate::MAX_WORKERS {
        return Err(ConfigError::new(
            src,
            Some(text),
            "workers",
            format!(
                "must be between 0 (one per core) and {} (got {workers})",
                crate::MAX_WORKERS
            ),
        ));
    }
    let udp = UdpFlowConfig {
        max_flows: raw.udp_max_flows.unwrap_or(d.udp.max_flows),
        idle_timeout: raw.udp_idle_timeout.unwrap_or(d.udp.idle_timeout),
    };
    udp.validate(src, Some(text))?;
    let policy = match raw.policy.as_deref() {
        None => d.policy,
        Some(p) => crate::parse_path_policy(p)
            .map_err(|m| ConfigError::new(src, Some(text), "policy", m))?,
    };
    Ok(ReverseConfig {
        listen: raw.listen.unwrap_or(d.listen),
        psk_file: raw.psk_file,
        connect_timeout: raw.connect_timeout.unwrap_or(d.connect_timeout),
        acl,
        acl_default_allow,
        max_sessions,
        handshake_rate: raw.handshake_rate.unwrap_or(d.handshake_rate),
        workers,
        drain_timeout: raw.drain_timeout.unwrap_or(d.drain_timeout),
        stats_interval: raw.stats_interval.unwrap_or(d.stats_interval),
        metrics_listen: raw.metrics_listen,
        udp,
        policy,
        log: log(raw.log, text, src)?,
        transport: transport(raw.transport, text, src)?,
        relay: relay(raw.relay, text, src)?,
    })
}

fn relay(raw: RawRelay, text: &str, src: &str) -> Result<RelayConfig, ConfigError> {
    let d = RelayConfig::default();
    let next_hop = match raw.next_hop {
        None => None,
        Some(p) => Some(
            crate::parse_peer(&p)
                .map_err(|m| ConfigError::new(src, Some(text), "relay.next_hop", m))?,
        ),
    };
    let buffer = match raw.buffer {
        None => d.buffer,
        Some(v) => crate::parse_size(&v)
            .map_err(|m| ConfigError::new(src, Some(text), "relay.buffer", m))?,
    };
    let r = RelayConfig {
        next_hop,
        next_psk_file: raw.next_psk_file,
        buffer,
        open_timeout: raw.open_timeout.unwrap_or(d.open_timeout),
    };
    r.validate(src, Some(text))?;
    Ok(r)
}
