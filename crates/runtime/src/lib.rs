//! The tokio runtime of ctcp: the only crate that touches sockets, the clock and OS
//! randomness. It drives one sans-IO `ctcp_proto::Endpoint` per UDP socket and runs the
//! forward (SOCKS server) and reverse (target connector) roles on top of it.
#![deny(unsafe_code)]

pub mod acl;
pub mod app;
pub mod clock;
pub mod datagram;
mod drain;
pub mod driver;
pub mod forward;
pub mod keys;
pub mod listen;
pub mod live;
pub mod metrics;
pub mod notes;
mod paths;
pub mod relay;
pub mod reply;
pub mod resolve;
pub mod reverse;
pub mod signals;
pub mod socks;
mod splice;
pub mod status;
pub mod transparent;
pub mod transparent_udp;
pub mod tunnel;
mod udp;

pub use acl::{Acl, Rule};
pub use driver::{Driver, DriverChannels, IncomingStream, SessionEvent};
pub use live::{Live, LiveSettings};
pub use relay::RelaySettings;
pub use socks::SocksAuth;
pub use tunnel::TunnelStream;

use ctcp_config::{ForwardConfig, ReverseConfig};
use ctcp_proto::{Endpoint, EndpointConfig, Psk, Shard, TransportConfig};
use rand::RngCore;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use thiserror::Error;
use tokio::sync::watch;

/// Failures that stop a proxy.
#[derive(Debug, Error)]
pub enum RuntimeError {
    /// A socket could not be bound. The cause is the error's `source`, not part of its
    /// message, so an error chain (`{:#}`) shows it once.
    #[error("cannot bind {what} on {addr}")]
    Bind {
        /// Which socket.
        what: &'static str,
        /// Where.
        addr: SocketAddr,
        /// Why.
        source: io::Error,
    },
    /// No multipath socket could be bound (one missing path alone is retried at run
    /// time); the first path's error.
    #[error("cannot bind the tunnel socket of any path (path {path}, {bind})")]
    PathBind {
        /// The path's index in `paths`.
        path: usize,
        /// Its `bind` (address or interface).
        bind: String,
        /// Why.
        source: io::Error,
    },
    /// The peer name did not resolve.
    #[error("cannot resolve peer {peer}: {reason}")]
    Resolve {
        /// The name.
        peer: String,
        /// Why.
        reason: String,
    },
    /// Other I/O failure.
    #[error(transparent)]
    Io(#[from] io::Error),
}

fn os_seed() -> [u8; 32] {
    let mut seed = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut seed);
    seed
}

/// Everything the forward proxy needs: a validated [`ForwardConfig`] with its peer and key
/// resolved ([`ForwardSettings::from_config`]), plus what only a program sets (the UDP
/// bind address, transport parameters without a configuration key).
#[derive(Debug, Clone)]
pub struct ForwardSettings {
    /// SOCKS listen address.
    pub listen: SocketAddr,
    /// The reverse proxy (`host:port`).
    pub peer: String,
    /// UDP bind address for the tunnel (`0.0.0.0:0` / `[::]:0` picks one).
    pub bind: Option<SocketAddr>,
    /// The pre-shared key.
    pub psk: Psk,
    /// Transport tunables.
    pub transport: TransportConfig,
    /// Role options (auth, timeouts).
    pub socks_auth: SocksAuth,
    /// SOCKS handshake timeout.
    pub handshake_timeout: Duration,
    /// How long to wait for the reverse side's connect result.
    pub open_timeout: Duration,
    /// Reply SOCKS success before the connect result (one round trip saved per
    /// connection; a failed connect then resets the client's connection).
    pub fast_open: bool,
    /// Drain time on shutdown.
    pub drain_timeout: Duration,
    /// Statistics log interval (debug level).
    pub stats_interval: Duration,
    /// Opt-in metrics endpoint.
    pub metrics_listen: Option<SocketAddr>,
    /// Opt-in transparent (gateway) TCP listener.
    pub transparent_listen: Option<SocketAddr>,
    /// How connections reach `transparent_listen`.
    pub transparent_mode: ctcp_config::TransparentMode,
    /// Opt-in transparent (gateway) UDP listener (tproxy).
    pub transparent_udp_listen: Option<SocketAddr>,
    /// Limits of the transparent UDP flows.
    pub udp_flows: datagram::FlowLimits,
    /// Multipath (issue 29): one tunnel socket per entry, the first that is up when a
    /// session starts for its handshake (it replaces `bind`); empty for one socket.
    pub paths: Vec<ctcp_config::PathBind>,
}

impl ForwardSettings {
    /// The settings `cfg` asks for, with the reverse proxy `peer` and the key `psk`.
    pub fn from_config(cfg: &ForwardConfig, peer: impl Into<String>, psk: Psk) -> Self {
        ForwardSettings {
            listen: cfg.listen,
            peer: peer.into(),
            bind: None,
            psk,
            transport: ctcp_proto::TransportConfig {
                path_policy: cfg.policy,
                ..cfg.transport.transport_config()
            },
            socks_auth: app::socks_auth(cfg),
            handshake_timeout: cfg.handshake_timeout,
            open_timeout: cfg.open_timeout,
            fast_open: cfg.fast_open,
            drain_timeout: cfg.drain_timeout,
            stats_interval: cfg.stats_interval,
            metrics_listen: cfg.metrics_listen,
            transparent_listen: cfg.transparent_listen,
            transparent_mode: cfg.transparent_mode,
            transparent_udp_listen: cfg.transparent_udp_listen,
            udp_flows: cfg.udp.into(),
            paths: cfg.paths.clone(),
        }
    }

    /// The default configuration's settings, with the reverse proxy `peer` and the key.
    pub fn new(peer: impl Into<String>, psk: Psk) -> Self {
        Self::from_config(&ForwardConfig::default(), peer, psk)
    }
}

/// Everything the reverse proxy needs: a validated [`ReverseConfig`] with its key loaded
/// ([`ReverseSettings::from_config`]), plus transport parameters without a configuration
/// key that a program may set.
#[derive(Debug, Clone)]
pub struct ReverseSettings {
    /// UDP listen address.
    pub listen: SocketAddr,
    /// The pre-shared key.
    pub psk: Psk,
    /// Transport tunables.
    pub transport: TransportConfig,
    /// Target access list.
    pub acl: Acl,
    /// Target connect timeout.
    pub connect_timeout: Duration,
    /// Most concurrent sessions.
    pub max_sessions: usize,
    /// Handshakes accepted per second.
    pub handshake_rate: u32,
    /// Driver shards: each its own endpoint, socket (`SO_REUSEPORT`, steered by
    /// connection id) and task, so sessions spread over this many cores.
    pub workers: usize,
    /// Drain time on shutdown.
    pub drain_timeout: Duration,
    /// Statistics log interval (debug level).
    pub stats_interval: Duration,
    /// Opt-in metrics endpoint.
    pub metrics_listen: Option<SocketAddr>,
    /// The relay role: carry streams on to this next gateway instead of connecting
    /// here (`None`: an ordinary reverse proxy).
    pub relay: Option<RelaySettings>,
    /// Limits of the per-flow UDP sockets.
    pub udp_flows: datagram::FlowLimits,
}

impl ReverseSettings {
    /// The settings `cfg` asks for, with the key `psk`; the relay role, which needs the
    /// next segment's key, is set with [`ReverseSettings::relay_to`].
    pub fn from_config(cfg: &ReverseConfig, psk: Psk) -> Self {
        ReverseSettings {
            listen: cfg.listen,
            psk,
            transport: ctcp_proto::TransportConfig {
                path_policy: cfg.policy,
                ..cfg.transport.transport_config()
            },
            acl: Acl::from_config(cfg),
            connect_timeout: cfg.connect_timeout,
            max_sessions: cfg.max_sessions,
            handshake_rate: cfg.handshake_rate,
            workers: cfg.worker_count(),
            drain_timeout: cfg.drain_timeout,
            stats_interval: cfg.stats_interval,
            metrics_listen: cfg.metrics_listen,
            relay: None,
            udp_flows: cfg.udp.into(),
        }
    }

    /// These settings as a relay to `next_hop` (`host:port`) with the key `psk` for that
    /// segment, the other relay options from `cfg` (`[relay]`).
    pub fn relay_to(
        mut self,
        cfg: &ctcp_config::RelayConfig,
        next_hop: impl Into<String>,
        psk: Psk,
    ) -> Self {
        self.relay = Some(RelaySettings {
            next_hop: next_hop.into(),
            psk,
            buffer: cfg.buffer,
            open_timeout: cfg.open_timeout,
            bind: None,
        });
        self
    }

    /// The default configuration's settings (its ACL denies the reverse host's own
    /// addresses: see [`Acl::allow_all`] for loopback targets), with the key.
    pub fn new(psk: Psk) -> Self {
        Self::from_config(&ReverseConfig::default(), psk)
    }
}

/// A started proxy: its bound addresses and a way to stop it.
#[derive(Debug)]
pub struct Running {
    /// The TCP (forward) or UDP (reverse) address actually bound.
    pub local_addr: SocketAddr,
    /// The tunnel driver.
    pub driver: Driver,
    /// A relay's driver toward its next hop (`None` unless `--next-hop`).
    pub next_hop_driver: Option<Driver>,
    /// Set to true to stop (drain, then exit).
    pub shutdown: watch::Sender<bool>,
    /// Completes when the proxy has stopped.
    pub done: tokio::task::JoinHandle<io::Result<()>>,
    /// What a reload may change while it runs.
    pub live: LiveSettings,
}

/// Binds the metrics endpoint (so a bad address fails start-up) and serves it in the background.
async fn spawn_metrics(
    addr: Option<SocketAddr>,
    driver: &Driver,
    extra: Vec<Driver>,
    rx: &watch::Receiver<bool>,
) -> Result<(), RuntimeError> {
    let Some(addr) = addr else { return Ok(()) };
    // Probe the bind now for a clear start-up error; the server binds again right after.
    drop(
        tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|source| RuntimeError::Bind {
                what: "metrics endpoint",
                addr,
                source,
            })?,
    );
    let (driver, rx) = (driver.clone(), rx.clone());
    tokio::spawn(async move {
        if let Err(e) = metrics::serve(addr, driver, extra, rx).await {
            tracing::error!(%addr, error = %e, "metrics endpoint failed");
        }
    });
    Ok(())
}

/// The forward's tunnel sockets: one, or one per configured path (multipath).
enum TunnelSockets {
    One(std::net::UdpSocket),
    Paths(paths::PathSockets),
}

/// Binds and starts the forward proxy on the current tokio runtime.
///
/// # Errors
/// Fails if a socket cannot be bound or the peer does not resolve.
pub async fn start_forward(s: ForwardSettings) -> Result<Running, RuntimeError> {
    let lookup = resolve::system_lookup();
    let addrs = resolve::resolve_any(&s.peer, &lookup).await?;
    let bind = s.bind.unwrap_or_else(|| resolve::wildcard_for(&addrs));
    // With paths configured, every path has a socket of its own (`paths`): the first
    // that binds and works carries the first handshake; the others come up when they can
    // (`paths::monitor`).
    let tunnel = if s.paths.is_empty() {
        let udp = std::net::UdpSocket::bind(bind)
            .or_else(|e| match s.bind {
                // A host without IPv6 still reaches the name's IPv4 addresses.
                None if bind.is_ipv6() => {
                    std::net::UdpSocket::bind(SocketAddr::from(([0, 0, 0, 0], 0)))
                }
                _ => Err(e),
            })
            .map_err(|source| RuntimeError::Bind {
                what: "tunnel UDP socket",
                addr: bind,
                source,
            })?;
        TunnelSockets::One(udp)
    } else {
        let sockets =
            paths::PathSockets::bind_all(&s.paths, &addrs).map_err(|(path, source)| {
                RuntimeError::PathBind {
                    path,
                    bind: s.paths[path].to_string(),
                    source,
                }
            })?;
        TunnelSockets::Paths(sockets)
    };
    let tunnel_addr = match &tunnel {
        TunnelSockets::One(u) => u.local_addr()?,
        TunnelSockets::Paths(p) => p.lead_addr()?,
    };
    let guard_peers = addrs.clone();
    // With one name the start-up resolution is its first; with a list the resolver starts
    // from the first name's own.
    let first = if resolve::peer_names(&s.peer).len() == 1 {
        addrs
    } else {
        Vec::new()
    };
    let peer = resolve::PeerResolver::new(s.peer.clone(), tunnel_addr, lookup, first);
    let listener = listen::bind(s.listen).map_err(|source| RuntimeError::Bind {
        what: "SOCKS listener",
        addr: s.listen,
        source,
    })?;
    let local_addr = listener.local_addr()?;
    let gateway = match s.transparent_listen {
        None => None,
        Some(addr) => Some(
            transparent::Gateway::bind(
                addr,
                s.transparent_mode,
                // The metrics endpoint binds later; its configured address is the one.
                transparent::LoopGuard::new(
                    &std::iter::once(local_addr)
                        .chain(s.metrics_listen)
                        .collect::<Vec<_>>(),
                    &guard_peers,
                ),
            )
            .map_err(|source| RuntimeError::Bind {
                what: "transparent listener",
                addr,
                source,
            })?,
        ),
    };
    let udp_gateway = match s.transparent_udp_listen {
        None => None,
        Some(addr) => Some(
            transparent_udp::UdpGateway::bind(
                addr,
                transparent::LoopGuard::new(
                    &std::iter::once(local_addr)
                        .chain(s.metrics_listen)
                        .chain(s.transparent_listen)
                        .collect::<Vec<_>>(),
                    &guard_peers,
                ),
            )
            .map_err(|source| RuntimeError::Bind {
                what: "transparent UDP listener",
                addr,
                source,
            })?,
        ),
    };
    let endpoint = Endpoint::new(
        EndpointConfig::new(s.psk.clone(), s.transport.clone(), false),
        os_seed(),
    );
    let (shutdown, rx) = watch::channel(false);
    let (driver, channels) = match tunnel {
        TunnelSockets::Paths(sockets) => {
            tracing::info!(paths = ?sockets.slots.iter().map(|p| p.bind.to_string()).collect::<Vec<_>>(), policy = ?s.transport.path_policy, "multipath");
            Driver::spawn_multipath(endpoint, sockets, rx.clone())?
        }
        TunnelSockets::One(udp) => Driver::spawn(vec![(endpoint, udp)], rx.clone())?,
    };
    tokio::spawn(signals::periodic_stats(
        driver.clone(),
        s.stats_interval,
        rx.clone(),
    ));
    spawn_metrics(s.metrics_listen, &driver, Vec::new(), &rx).await?;
    let auth = Live::new(s.socks_auth.clone());
    tracing::info!(socks = %local_addr, peer = %s.peer, "ctcp-forward started");
    if let Some(g) = &gateway {
        tracing::info!(
            transparent = %g.local_addr()?,
            mode = %s.transparent_mode,
            "transparent gateway listener started"
        );
    }
    if let Some(g) = &udp_gateway {
        tracing::info!(
            transparent_udp = %g.local_addr()?,
            max_flows = s.udp_flows.max_flows,
            idle_timeout = ?s.udp_flows.idle_timeout,
            "transparent UDP gateway listener started"
        );
    }
    let done = tokio::spawn(forward::serve(
        listener,
        gateway,
        udp_gateway,
        driver.clone(),
        channels,
        Arc::new(s),
        peer,
        auth.clone(),
        rx,
    ));
    Ok(Running {
        local_addr,
        driver,
        next_hop_driver: None,
        shutdown,
        done,
        live: LiveSettings {
            socks_auth: Some(auth),
            acl: None,
        },
    })
}

/// Binds and starts the reverse proxy on the current tokio runtime.
///
/// # Errors
/// Fails if the UDP socket cannot be bound.
pub async fn start_reverse(s: ReverseSettings) -> Result<Running, RuntimeError> {
    let workers = s.workers.max(1);
    let sockets = udp::bind_shards(s.listen, workers).map_err(|source| RuntimeError::Bind {
        what: "tunnel UDP socket",
        addr: s.listen,
        source,
    })?;
    // A relay grants upstream no more credit than it is willing to hold.
    let transport = match &s.relay {
        Some(r) => r.cap_credit(&s.transport),
        None => s.transport.clone(),
    };
    let mut cfg = EndpointConfig::new(s.psk.clone(), transport, true);
    // The shards share the session limit; each takes its share of the handshake rate.
    cfg.max_sessions = s.max_sessions;
    cfg.handshake_rate = s.handshake_rate.div_ceil(workers as u32).max(1);
    cfg.session_count = (workers > 1).then(Default::default);
    let shards = sockets
        .into_iter()
        .enumerate()
        .map(|(index, udp)| {
            let mut cfg = cfg.clone();
            cfg.shard = (workers > 1).then_some(Shard {
                index,
                count: workers,
            });
            (Endpoint::new(cfg, os_seed()), udp)
        })
        .collect();
    let (shutdown, rx) = watch::channel(false);
    let next = match &s.relay {
        Some(r) => Some(relay::NextHop::start(r, &s.transport, os_seed(), rx.clone()).await?),
        None => None,
    };
    let (driver, channels) = Driver::spawn(shards, rx.clone())?;
    let local_addr = driver.local_addr();
    tokio::spawn(signals::periodic_stats(
        driver.clone(),
        s.stats_interval,
        rx.clone(),
    ));
    let next_hop_driver = next.as_ref().map(|n| n.driver.clone());
    if let Some(d) = &next_hop_driver {
        tokio::spawn(signals::periodic_stats(
            d.clone(),
            s.stats_interval,
            rx.clone(),
        ));
    }
    spawn_metrics(
        s.metrics_listen,
        &driver,
        next_hop_driver.iter().cloned().collect(),
        &rx,
    )
    .await?;
    let acl = Live::new(s.acl.clone());
    match &s.relay {
        Some(r) => {
            tracing::info!(udp = %local_addr, next_hop = %r.next_hop, "ctcp-reverse started as a relay")
        }
        None => tracing::info!(udp = %local_addr, "ctcp-reverse started"),
    }
    let done = tokio::spawn(reverse::serve(
        driver.clone(),
        channels,
        Arc::new(s),
        acl.clone(),
        next,
        rx,
    ));
    Ok(Running {
        local_addr,
        driver,
        next_hop_driver,
        shutdown,
        done,
        live: LiveSettings {
            socks_auth: None,
            acl: Some(acl),
        },
    })
}
