//! [`Emulator`]: the I/O layer. It builds two network namespaces joined by
//! two TUN devices and moves every IP packet between them through a
//! [`Link`] per direction, on one tokio task.
//!
//! ```text
//!  namespace A                                                namespace B
//!  10.77.0.1 ── TUN ─▶ read ─▶ Link A→B ─▶ write ─▶ TUN ── 10.77.0.2
//!           ◀─ TUN ◀─ write ◀─ Link B→A ◀─ read ◀─ TUN ──
//! ```
//!
//! A chain ([`ChainConfig`], [`Emulator::setup_chain`]) puts N namespaces in a
//! line joined by N − 1 such links, each with its own impairments; link `k`
//! joins `10.77.k.1` (namespace k) to `10.77.k.2` (namespace k + 1), and every
//! namespace routes (IP forwarding on) to the subnets beyond its neighbours,
//! so a host in the first reaches the last through all the links. Optional
//! client and server namespaces hang off the two ends by unimpaired veth
//! pairs.
//!
//! ```text
//!  [client] ─veth─ ns0 ══link 0══ ns1 ══link 1══ ns2 ─veth─ [server]
//! ```
//!
//! Parallel paths ([`Topology::Parallel`]) join the same two namespaces by N
//! links side by side, each with its own impairments: path `k` joins `10.77.k.1`
//! in A to `10.77.k.2` in B over `linkemK`. A's source address picks the path
//! (one policy-routing table per path, as on a host with one uplink per
//! address), and B routes by destination, so a flow from `10.77.k.1` crosses
//! path `k` both ways whichever B address it talks to; unbound sockets in A reach
//! `10.77.k.2` over path `k`.
//!
//! ```text
//!              ══ path 0: 10.77.0.1 ── linkem0 ── 10.77.0.2 ══
//!  namespace A ══ path 1: 10.77.1.1 ── linkem1 ── 10.77.1.2 ══ namespace B
//! ```
//!
//! Any link can be cut and restored while running ([`crate::control`]).
//!
//! The loop reads the clock once per event ([`crate::clock::now`]), pushes
//! what the TUN devices deliver, writes out what the links release, and
//! sleeps on a `timerfd` ([`ReleaseTimer`]) until the earliest release.

use std::cell::RefCell;
use std::future::Future;
use std::io;
use std::net::Ipv4Addr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};

use thiserror::Error;
use tun_rs::{AsyncDevice, DeviceBuilder};

use crate::clock;
use crate::config::{ConfigError, LinkConfig};
use crate::control::{self, MAX_MESSAGE};
use crate::link::Link;
use crate::netns::{self, Namespace, NetnsError};
use crate::stats::{Lateness, StatsLine, StatsSink};
use crate::timer::{self, ReleaseTimer};

/// Longest interface name Linux accepts (`IFNAMSIZ - 1`).
const MAX_IFNAME: usize = 15;

/// Largest packet read from a TUN device (no offloads, so at most the MTU;
/// this leaves room for any MTU).
const READ_BUF: usize = 65_536;

/// Packets read from one device before the loop looks at the other side
/// and the timer again.
const READ_BATCH: usize = 64;

/// What to build and how each direction behaves.
#[derive(Clone, Debug, PartialEq)]
pub struct EmulatorConfig {
    /// Name of namespace A (default `ctcp-a`).
    pub ns_a: String,
    /// Name of namespace B (default `ctcp-b`).
    pub ns_b: String,
    /// Address of the TUN end in A (default 10.77.0.1).
    pub addr_a: Ipv4Addr,
    /// Address of the TUN end in B (default 10.77.0.2).
    pub addr_b: Ipv4Addr,
    /// Name of the TUN interface inside both namespaces (default `linkem0`).
    pub dev: String,
    /// MTU of both TUN interfaces (default 1500).
    pub mtu: u16,
    /// Impairments of packets from A to B.
    pub a_to_b: LinkConfig,
    /// Impairments of packets from B to A.
    pub b_to_a: LinkConfig,
    /// Leave the namespaces in place on exit.
    pub keep: bool,
}

impl Default for EmulatorConfig {
    fn default() -> Self {
        Self {
            ns_a: "ctcp-a".to_owned(),
            ns_b: "ctcp-b".to_owned(),
            addr_a: Ipv4Addr::new(10, 77, 0, 1),
            addr_b: Ipv4Addr::new(10, 77, 0, 2),
            dev: "linkem0".to_owned(),
            mtu: 1500,
            a_to_b: LinkConfig::default(),
            b_to_a: LinkConfig::default(),
            keep: false,
        }
    }
}

/// How the links of a [`ChainConfig`] join its namespaces.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Topology {
    /// A line: link `k` joins namespace `k` to namespace `k + 1`.
    #[default]
    Line,
    /// Parallel paths: every link joins the two namespaces (see the module docs).
    Parallel,
}

/// Namespaces joined by emulated links, in a line or side by side (see the module
/// docs).
#[derive(Clone, Debug, PartialEq)]
pub struct ChainConfig {
    /// How the links join the namespaces.
    pub topology: Topology,
    /// The namespaces, in order: at least two (exactly two for parallel paths).
    pub namespaces: Vec<String>,
    /// One entry per link: between neighbours in a line (`namespaces.len() − 1`
    /// of them), or per path between the two namespaces; the impairments away
    /// from the first namespace (A→B) and toward it (B→A).
    pub hops: Vec<(LinkConfig, LinkConfig)>,
    /// Address of link 0's end in the first namespace (default 10.77.0.1);
    /// link `k` adds `k` to the third octet, and so does its other end.
    pub addr_a: Ipv4Addr,
    /// Address of link 0's end in the second namespace (default 10.77.0.2).
    pub addr_b: Ipv4Addr,
    /// TUN interface name of link 0; link `k` adds `k` to its trailing
    /// number (`linkem0`, `linkem1`, ...; a name without one gets `k`
    /// appended from link 1 on).
    pub dev: String,
    /// MTU of every TUN interface.
    pub mtu: u16,
    /// A client namespace joined to the first namespace by a veth pair
    /// (the client 10.77.200.1, the first namespace 10.77.200.2: the link
    /// addresses with 200 added to the third octet), routed through the chain.
    pub client_ns: Option<String>,
    /// A server namespace joined to the last namespace by a veth pair
    /// (the last namespace 10.77.201.1, the server 10.77.201.2).
    pub server_ns: Option<String>,
    /// Leave the namespaces in place on exit.
    pub keep: bool,
}

impl From<&EmulatorConfig> for ChainConfig {
    /// The two-namespace link as a chain of one hop, with no end namespaces.
    fn from(c: &EmulatorConfig) -> Self {
        ChainConfig {
            topology: Topology::Line,
            namespaces: vec![c.ns_a.clone(), c.ns_b.clone()],
            hops: vec![(c.a_to_b.clone(), c.b_to_a.clone())],
            addr_a: c.addr_a,
            addr_b: c.addr_b,
            dev: c.dev.clone(),
            mtu: c.mtu,
            client_ns: None,
            server_ns: None,
            keep: c.keep,
        }
    }
}

/// `a` with `k` added to its third octet (link `k`'s addresses; 200 and 201
/// for the client and server veth pairs).
#[must_use]
pub fn shifted(a: Ipv4Addr, k: usize) -> Ipv4Addr {
    let [w, x, y, z] = a.octets();
    // Chains are validated to stay under 200 links, so this does not wrap.
    Ipv4Addr::new(w, x, y.wrapping_add(k as u8), z)
}

/// The TUN name of link `k` (see [`ChainConfig::dev`]).
#[must_use]
pub fn hop_dev(dev: &str, k: usize) -> String {
    if k == 0 {
        return dev.to_owned();
    }
    let digits = dev.len() - dev.trim_end_matches(|c: char| c.is_ascii_digit()).len();
    let (stem, num) = dev.split_at(dev.len() - digits);
    match num.parse::<usize>() {
        Ok(n) => format!("{stem}{}", n + k),
        Err(_) => format!("{dev}{k}"),
    }
}

/// Why the emulator could not start or stopped.
#[derive(Debug, Error)]
pub enum EmulatorError {
    /// A link parameter is invalid.
    #[error("{direction}: {source}")]
    Config {
        /// `a_to_b` or `b_to_a` (with the hop, `hop 1 a_to_b`, in a chain).
        direction: String,
        /// The invalid parameter.
        source: ConfigError,
    },
    /// The setup is inconsistent (same namespace twice, name too long, ...).
    #[error("invalid setup: {0}")]
    Setup(String),
    /// A namespace or interface operation failed.
    #[error(transparent)]
    Netns(#[from] NetnsError),
    /// A TUN device could not be created.
    #[error("cannot create TUN device {name}: {source} (need root and /dev/net/tun)")]
    Tun {
        /// The device name asked for.
        name: String,
        /// The error.
        source: io::Error,
    },
    /// Reading a TUN device, the timer, or writing statistics failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// The error.
        source: io::Error,
    },
}

fn io_error(what: &'static str) -> impl FnOnce(io::Error) -> EmulatorError {
    move |source| EmulatorError::Io { what, source }
}

/// Where and how often statistics are written while running.
#[derive(Debug)]
pub struct StatsOptions {
    /// Where the JSON lines go.
    pub sink: StatsSink,
    /// Period of the running lines; `None` writes only the final ones.
    pub interval: Option<Duration>,
}

/// One link of the chain: a TUN device in each of its two namespaces and a
/// [`Link`] per direction.
struct Segment {
    hop: usize,
    a: AsyncDevice,
    b: AsyncDevice,
    ns_a: String,
    ns_b: String,
    a_to_b: Link,
    b_to_a: Link,
    write_errors: u64,
    /// Release lateness per direction (A→B, B→A) since the last stats line.
    late: [Lateness; 2],
    /// Set by the control socket: the link is cut (both directions).
    down: Arc<AtomicBool>,
}

impl std::fmt::Debug for Segment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Segment")
            .field("hop", &self.hop)
            .field("ns_a", &self.ns_a)
            .field("ns_b", &self.ns_b)
            .finish_non_exhaustive()
    }
}

/// A running link emulator. Dropping it deletes the namespaces it created
/// (unless [`EmulatorConfig::keep`]).
#[derive(Debug)]
pub struct Emulator {
    /// Dropped before `namespaces` (field order), so the devices are closed
    /// before their namespaces are deleted.
    segments: Vec<Segment>,
    namespaces: Vec<Namespace>,
    keep: bool,
    ready_at: Instant,
    /// Each segment's down flag (shared with it), for the control socket.
    downs: Vec<Arc<AtomicBool>>,
}

/// Gives every emulator in this process distinct temporary TUN names.
static INSTANCE: AtomicU32 = AtomicU32::new(0);

/// Most links in a chain (the third octet of link `k`'s addresses is
/// shifted by `k`, below the end pairs' 200 and 201).
pub const MAX_HOPS: usize = 64;

impl Emulator {
    /// Creates both namespaces, both TUN devices, moves and configures
    /// them. Must be called inside a tokio runtime (the devices register
    /// with its reactor). On error, whatever was created is removed.
    ///
    /// # Errors
    /// Invalid configuration, an existing namespace, or a failing `ip` or
    /// TUN operation.
    pub fn setup(config: &EmulatorConfig) -> Result<Self, EmulatorError> {
        let e = Self::setup_chain(&ChainConfig::from(config));
        // A two-namespace link names its directions without a hop.
        e.map_err(|err| match err {
            EmulatorError::Config { direction, source } => EmulatorError::Config {
                direction: direction.trim_start_matches("hop 0 ").to_owned(),
                source,
            },
            other => other,
        })
    }

    /// Creates a chain of namespaces joined by emulated links (and the
    /// optional end namespaces), with routes through it. Must be called
    /// inside a tokio runtime. On error, whatever was created is removed.
    ///
    /// # Errors
    /// Invalid configuration, an existing namespace, or a failing `ip` or
    /// TUN operation.
    pub fn setup_chain(config: &ChainConfig) -> Result<Self, EmulatorError> {
        let n = config.namespaces.len();
        let parallel = config.topology == Topology::Parallel;
        if parallel {
            if n != 2 || config.hops.is_empty() {
                return Err(EmulatorError::Setup(format!(
                    "parallel paths need two namespaces and at least one path (got {n} and {})",
                    config.hops.len()
                )));
            }
            if config.client_ns.is_some() || config.server_ns.is_some() {
                return Err(EmulatorError::Setup(
                    "parallel paths take no client or server namespace".into(),
                ));
            }
        } else if n < 2 || config.hops.len() != n - 1 {
            return Err(EmulatorError::Setup(format!(
                "{n} namespaces need {} links (got {})",
                n.saturating_sub(1),
                config.hops.len()
            )));
        }
        if config.hops.len() > MAX_HOPS {
            return Err(EmulatorError::Setup(format!(
                "{} links; at most {MAX_HOPS}",
                config.hops.len()
            )));
        }
        let mut links = Vec::new();
        for (k, (ab, ba)) in config.hops.iter().enumerate() {
            let mk = |c: &LinkConfig, d: &str| {
                Link::new(c.clone()).map_err(|source| EmulatorError::Config {
                    direction: format!("hop {k} {d}"),
                    source,
                })
            };
            links.push((mk(ab, "a_to_b")?, mk(ba, "b_to_a")?));
        }
        let mut all: Vec<&String> = config.namespaces.iter().collect();
        all.extend(config.client_ns.iter());
        all.extend(config.server_ns.iter());
        for (i, x) in all.iter().enumerate() {
            if all[..i].contains(x) {
                if n == 2 && all.len() == 2 {
                    return Err(EmulatorError::Setup(format!(
                        "both namespaces are named {x:?}"
                    )));
                }
                return Err(EmulatorError::Setup(format!(
                    "namespace {x:?} is named twice"
                )));
            }
        }
        if config.addr_a == config.addr_b {
            return Err(EmulatorError::Setup(format!(
                "both ends have address {}",
                config.addr_a
            )));
        }
        for k in 0..config.hops.len() {
            let dev = hop_dev(&config.dev, k);
            if dev.len() > MAX_IFNAME {
                return Err(EmulatorError::Setup(format!(
                    "interface name {dev:?} is longer than {MAX_IFNAME} bytes"
                )));
            }
            netns::check_name(&dev)?;
        }
        if config.mtu < 68 {
            return Err(EmulatorError::Setup(format!(
                "MTU {} is below the IPv4 minimum of 68",
                config.mtu
            )));
        }

        // Namespaces first (each guard deletes its own on an error below).
        let mut namespaces = Vec::new();
        for name in &config.namespaces {
            namespaces.push(Namespace::create(name)?);
        }
        let instance = INSTANCE.fetch_add(1, Ordering::Relaxed);
        let tag = format!("lk{}x{instance}", std::process::id());
        let mut segments = Vec::new();
        for (k, (a_to_b, b_to_a)) in links.into_iter().enumerate() {
            let dev = hop_dev(&config.dev, k);
            let (addr_a, addr_b) = (shifted(config.addr_a, k), shifted(config.addr_b, k));
            // A line's link k joins namespaces k and k + 1; every path joins the two.
            let (ia, ib) = if parallel { (0, 1) } else { (k, k + 1) };
            let a = Self::end(
                config,
                &namespaces[ia],
                &format!("{tag}h{k}a"),
                &dev,
                addr_a,
                addr_b,
            )?;
            let b = Self::end(
                config,
                &namespaces[ib],
                &format!("{tag}h{k}b"),
                &dev,
                addr_b,
                addr_a,
            )?;
            segments.push(Segment {
                hop: k,
                a,
                b,
                ns_a: config.namespaces[ia].clone(),
                ns_b: config.namespaces[ib].clone(),
                a_to_b,
                b_to_a,
                write_errors: 0,
                late: [Lateness::default(), Lateness::default()],
                down: Arc::new(AtomicBool::new(false)),
            });
        }
        if let Some(c) = &config.client_ns {
            let ns = Namespace::create(c)?;
            let (end, at) = (shifted(config.addr_a, 200), shifted(config.addr_b, 200));
            Self::veth(&ns, &namespaces[0], "vethcli", end, at)?;
            namespaces.push(ns);
        }
        if let Some(s) = &config.server_ns {
            let ns = Namespace::create(s)?;
            let (end, at) = (shifted(config.addr_b, 201), shifted(config.addr_a, 201));
            Self::veth(&ns, &namespaces[n - 1], "vethsrv", end, at)?;
            namespaces.push(ns);
        }
        if parallel {
            Self::route_by_source(config, &namespaces[0])?;
        } else if n > 2 || config.client_ns.is_some() || config.server_ns.is_some() {
            Self::route(config, &namespaces[..n])?;
        }
        if config.keep {
            // Only a complete setup is kept; a failed one is removed above.
            for ns in &mut namespaces {
                ns.keep();
            }
        }
        tracing::info!(
            topology = ?config.topology,
            links = config.hops.len(),
            namespaces = ?config.namespaces,
            client = ?config.client_ns,
            server = ?config.server_ns,
            addr_a = %config.addr_a, addr_b = %config.addr_b,
            dev = %config.dev, mtu = config.mtu,
            "link up"
        );
        let downs = segments.iter().map(|s| Arc::clone(&s.down)).collect();
        Ok(Self {
            segments,
            namespaces,
            keep: config.keep,
            ready_at: clock::now(),
            downs,
        })
    }

    /// First policy-routing table of the parallel paths (path `k` uses
    /// `PATH_TABLE + k`, its rule the same preference).
    const PATH_TABLE: usize = 100;

    /// Parallel paths: in namespace A, traffic from path `k`'s address leaves by
    /// path `k` (a rule per source address and a table whose default route is the
    /// path's device, then `unreachable`, so a path whose device is down fails
    /// rather than leaking onto another path). B needs nothing: its route to each
    /// A address is the path's point-to-point peer route.
    fn route_by_source(config: &ChainConfig, a: &Namespace) -> Result<(), EmulatorError> {
        for k in 0..config.hops.len() {
            let table = (Self::PATH_TABLE + k).to_string();
            let from = shifted(config.addr_a, k).to_string();
            let dev = hop_dev(&config.dev, k);
            a.ip(&["route", "add", "default", "dev", &dev, "table", &table])?;
            a.ip(&[
                "route",
                "add",
                "unreachable",
                "default",
                "metric",
                "4096",
                "table",
                &table,
            ])?;
            a.ip(&[
                "rule", "add", "from", &from, "lookup", &table, "pref", &table,
            ])?;
        }
        Ok(())
    }

    /// Joins the end namespace `end` to the chain's namespace `at` with a veth
    /// pair (`veth0` in `end`, `name` in `at`): `end_addr`/24 in `end` with a
    /// default route to `at_addr`, `at_addr`/24 in `at`.
    fn veth(
        end: &Namespace,
        at: &Namespace,
        name: &str,
        end_addr: Ipv4Addr,
        at_addr: Ipv4Addr,
    ) -> Result<(), EmulatorError> {
        end.ip(&[
            "link",
            "add",
            "veth0",
            "type",
            "veth",
            "peer",
            "name",
            name,
            "netns",
            at.name(),
        ])?;
        let (e, a) = (format!("{end_addr}/24"), format!("{at_addr}/24"));
        end.ip(&["addr", "add", &e, "dev", "veth0"])?;
        end.ip(&["link", "set", "dev", "veth0", "up"])?;
        at.ip(&["addr", "add", &a, "dev", name])?;
        at.ip(&["link", "set", "dev", name, "up"])?;
        end.ip(&["route", "add", "default", "via", &at_addr.to_string()])?;
        Ok(())
    }

    /// Routes every chain namespace to the link subnets (and end subnets)
    /// beyond its neighbours, and turns IP forwarding on in each.
    fn route(config: &ChainConfig, chain: &[Namespace]) -> Result<(), EmulatorError> {
        let n = chain.len();
        let subnet = |k: usize| {
            let [w, x, y, _] = shifted(config.addr_a, k).octets();
            format!("{w}.{x}.{y}.0/24")
        };
        for (j, ns) in chain.iter().enumerate() {
            netns::enable_forwarding(ns.name())?;
            // Link k lies to the left of namespace j if k < j - 1 (link j-1
            // is its own left link), to the right if k > j.
            for k in 0..n - 1 {
                if k + 1 < j {
                    ns.ip(&[
                        "route",
                        "add",
                        &subnet(k),
                        "dev",
                        &hop_dev(&config.dev, j - 1),
                    ])?;
                } else if k > j {
                    ns.ip(&["route", "add", &subnet(k), "dev", &hop_dev(&config.dev, j)])?;
                }
            }
            if config.client_ns.is_some() && j > 0 {
                ns.ip(&[
                    "route",
                    "add",
                    &subnet(200),
                    "dev",
                    &hop_dev(&config.dev, j - 1),
                ])?;
            }
            if config.server_ns.is_some() && j < n - 1 {
                ns.ip(&[
                    "route",
                    "add",
                    &subnet(201),
                    "dev",
                    &hop_dev(&config.dev, j),
                ])?;
            }
        }
        Ok(())
    }

    /// Builds one end of a link: a TUN first named `tmp_name` in the current
    /// namespace, moved into `ns`, renamed `dev` and configured.
    fn end(
        config: &ChainConfig,
        ns: &Namespace,
        tmp_name: &str,
        dev: &str,
        local: Ipv4Addr,
        peer: Ipv4Addr,
    ) -> Result<AsyncDevice, EmulatorError> {
        if tmp_name.len() > MAX_IFNAME {
            return Err(EmulatorError::Setup(format!(
                "temporary interface name {tmp_name:?} is too long"
            )));
        }
        let device = DeviceBuilder::new()
            .name(tmp_name)
            .packet_information(false)
            // Down until configured inside its namespace: up in this
            // namespace it would queue IPv6 router solicitations.
            .enable(false)
            .build_async()
            .map_err(|source| EmulatorError::Tun {
                name: tmp_name.to_owned(),
                source,
            })?;
        ns.adopt(tmp_name, dev)?;
        ns.configure_point_to_point(dev, local, peer, config.mtu)?;
        Ok(device)
    }

    /// Moves packets until `shutdown` completes or an I/O error occurs, then
    /// writes the final statistics lines. The links of a chain run side by side
    /// on this task, each with its own release timer.
    ///
    /// # Errors
    /// A failing TUN read, timer, or statistics write.
    pub async fn run(
        &mut self,
        shutdown: impl Future<Output = ()>,
        stats: StatsOptions,
    ) -> Result<(), EmulatorError> {
        self.run_controlled(shutdown, stats, None).await
    }

    /// Like [`Self::run`], and answers [`crate::control`] commands on a Unix
    /// datagram socket at `control` (created here, removed at the end; a stale
    /// file there is replaced).
    ///
    /// # Errors
    /// As [`Self::run`], or the control socket cannot be created.
    pub async fn run_controlled(
        &mut self,
        shutdown: impl Future<Output = ()>,
        mut stats: StatsOptions,
        control: Option<&Path>,
    ) -> Result<(), EmulatorError> {
        let socket = match control {
            Some(path) => {
                let _ = std::fs::remove_file(path);
                Some(
                    tokio::net::UnixDatagram::bind(path)
                        .map_err(io_error("creating the control socket"))?,
                )
            }
            None => None,
        };
        let downs = self.downs.clone();
        // The loops run on this thread (the binary uses a current-thread runtime).
        timer::tighten_timer_slack();
        let ready_at = self.ready_at;
        let result = {
            let sink = RefCell::new(&mut stats.sink);
            let interval = stats.interval;
            let mut pumps: Vec<_> = self
                .segments
                .iter_mut()
                .map(|seg| Box::pin(seg.pump(&sink, interval, ready_at)))
                .collect();
            let any_failed = std::future::poll_fn(|cx| {
                for p in &mut pumps {
                    if let Poll::Ready(r) = p.as_mut().poll(cx) {
                        return Poll::Ready(r);
                    }
                }
                Poll::Pending
            });
            tokio::select! {
                () = shutdown => Ok(()),
                r = any_failed => r,
                r = serve_control(socket.as_ref(), &downs) => r,
            }
        };
        if let Some(path) = control {
            let _ = std::fs::remove_file(path);
        }
        let mut last = Ok(());
        for seg in &mut self.segments {
            if last.is_ok() {
                last = seg.write_stats(&mut stats.sink, ready_at, true);
            }
        }
        result?;
        last.map_err(io_error("writing statistics"))
    }

    /// The two directions' links (A→B, B→A) of the first hop, for their
    /// counters.
    #[must_use]
    pub fn links(&self) -> (&Link, &Link) {
        self.hop_links(0)
            .unwrap_or_else(|| unreachable!("a chain has a link"))
    }

    /// The two directions' links (A→B, B→A) of hop `k`, if there is one.
    #[must_use]
    pub fn hop_links(&self, k: usize) -> Option<(&Link, &Link)> {
        self.segments.get(k).map(|s| (&s.a_to_b, &s.b_to_a))
    }

    /// Closes the devices and deletes the namespaces now (or leaves them
    /// with `keep`), reporting failures instead of only logging them.
    ///
    /// # Errors
    /// The first `ip netns del` failure.
    pub fn teardown(self) -> Result<(), EmulatorError> {
        let Self {
            segments,
            namespaces,
            keep,
            ..
        } = self;
        drop(segments);
        if keep {
            let names: Vec<&str> = namespaces.iter().map(Namespace::name).collect();
            tracing::info!(namespaces = ?names, "keeping namespaces");
            return Ok(());
        }
        let mut first = Ok(());
        for ns in namespaces {
            let r = ns.delete();
            if first.is_ok() {
                first = r;
            }
        }
        Ok(first?)
    }
}

/// Answers control commands on `socket` until it fails (never without one).
async fn serve_control(
    socket: Option<&tokio::net::UnixDatagram>,
    downs: &[Arc<AtomicBool>],
) -> Result<(), EmulatorError> {
    let Some(socket) = socket else {
        return std::future::pending().await;
    };
    let mut buf = vec![0u8; MAX_MESSAGE];
    loop {
        let (n, from) = socket
            .recv_from(&mut buf)
            .await
            .map_err(io_error("reading the control socket"))?;
        let text = String::from_utf8_lossy(&buf[..n]);
        let mut flags: Vec<bool> = downs.iter().map(|d| d.load(Ordering::Relaxed)).collect();
        let before = flags.clone();
        let reply = control::apply(&text, &mut flags);
        for (k, (flag, was)) in flags.iter().zip(&before).enumerate() {
            if flag != was {
                tracing::info!(
                    link = k,
                    down = *flag,
                    "link {}",
                    if *flag { "cut" } else { "restored" }
                );
            }
            downs[k].store(*flag, Ordering::Relaxed);
        }
        if !reply.is_ok() {
            tracing::warn!(command = %text.trim(), reply = %reply.0, "control command refused");
        }
        // A sender without a bound address cannot be answered; the command still applies.
        if let Some(path) = from.as_pathname() {
            if let Err(e) = socket.send_to(reply.0.as_bytes(), path).await {
                tracing::debug!(error = %e, "cannot answer a control command");
            }
        }
    }
}

impl Segment {
    /// Applies the control socket's down flag to both directions (a cut link
    /// loses what is on it, [`Link::set_down`]); called before every push and
    /// release, so a command takes effect at the next packet or timer.
    fn sync_down(&mut self) {
        let down = self.down.load(Ordering::Relaxed);
        if down != self.a_to_b.is_down() {
            self.a_to_b.set_down(down);
            self.b_to_a.set_down(down);
        }
    }

    async fn pump(
        &mut self,
        sink: &RefCell<&mut StatsSink>,
        interval: Option<Duration>,
        ready_at: Instant,
    ) -> Result<(), EmulatorError> {
        let mut timer = ReleaseTimer::new().map_err(io_error("creating the release timer"))?;
        let mut buf_a = vec![0u8; READ_BUF];
        let mut buf_b = vec![0u8; READ_BUF];
        let mut tick = interval.filter(|d| !d.is_zero()).map(|period| {
            let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            tick
        });
        loop {
            self.sync_down();
            let now = clock::now();
            self.release(now).await;
            let next = match (self.a_to_b.next_release(), self.b_to_a.next_release()) {
                (Some(x), Some(y)) => Some(x.min(y)),
                (x, y) => x.or(y),
            };
            // Measured after the writes, so their time does not delay the timer.
            timer
                .arm(next, clock::now())
                .map_err(io_error("arming the release timer"))?;
            tokio::select! {
                r = self.a.recv(&mut buf_a) => {
                    let n = r.map_err(io_error("reading the TUN device in namespace A"))?;
                    self.sync_down();
                    self.a_to_b.push(clock::now(), buf_a[..n].to_vec());
                    drain(&self.a, &mut buf_a, &mut self.a_to_b)
                        .map_err(io_error("reading the TUN device in namespace A"))?;
                }
                r = self.b.recv(&mut buf_b) => {
                    let n = r.map_err(io_error("reading the TUN device in namespace B"))?;
                    self.sync_down();
                    self.b_to_a.push(clock::now(), buf_b[..n].to_vec());
                    drain(&self.b, &mut buf_b, &mut self.b_to_a)
                        .map_err(io_error("reading the TUN device in namespace B"))?;
                }
                r = timer.expired() => r.map_err(io_error("waiting for the release timer"))?,
                _ = next_tick(&mut tick) => {
                    let mut sink = sink.borrow_mut();
                    self.write_stats(&mut sink, ready_at, false)
                        .map_err(io_error("writing statistics"))?;
                }
            }
        }
    }

    /// Writes every packet due at `now` to its destination device.
    async fn release(&mut self, now: Instant) {
        let [late_ab, late_ba] = &mut self.late;
        forward(
            &mut self.a_to_b,
            &self.b,
            &self.ns_b,
            now,
            late_ab,
            &mut self.write_errors,
        )
        .await;
        forward(
            &mut self.b_to_a,
            &self.a,
            &self.ns_a,
            now,
            late_ba,
            &mut self.write_errors,
        )
        .await;
    }

    fn write_stats(
        &mut self,
        sink: &mut StatsSink,
        ready_at: Instant,
        last: bool,
    ) -> io::Result<()> {
        let now = clock::now();
        let t = now.saturating_duration_since(ready_at).as_secs_f64();
        let [late_ab, late_ba] = &mut self.late;
        for (direction, link, from, to, late) in [
            ("a_to_b", &self.a_to_b, &self.ns_a, &self.ns_b, late_ab),
            ("b_to_a", &self.b_to_a, &self.ns_b, &self.ns_a, late_ba),
        ] {
            sink.write(&StatsLine {
                t,
                hop: self.hop,
                direction,
                from,
                to,
                counters: link.counters(),
                in_flight: link.in_flight(),
                backlog_bytes: link.backlog(now),
                late_mean_us: late.mean_us(),
                late_max_us: late.max_us(),
                down: link.is_down(),
                last,
            })?;
            *late = Lateness::default();
        }
        Ok(())
    }
}

/// Writes every packet of `link` due at `now` to the device `to` (in
/// namespace `ns`), recording how late each one leaves.
async fn forward(
    link: &mut Link,
    to: &AsyncDevice,
    ns: &str,
    now: Instant,
    late: &mut Lateness,
    errors: &mut u64,
) {
    while let Some(at) = link.next_release().filter(|at| *at <= now) {
        let Some(packet) = link.poll(now) else { break };
        late.record(now - at);
        if let Err(e) = to.send(&packet).await {
            note_write_error(errors, ns, &e);
        }
    }
}

/// Reads up to [`READ_BATCH`] more packets that are already waiting,
/// without blocking.
fn drain(device: &AsyncDevice, buf: &mut [u8], link: &mut Link) -> io::Result<()> {
    for _ in 0..READ_BATCH {
        match device.try_recv(buf) {
            Ok(n) => link.push(clock::now(), buf[..n].to_vec()),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Counts a failed TUN write (for example while the far interface is down):
/// the packet is lost, as it would be on a real link; the first one is
/// logged at warn, the rest at debug.
fn note_write_error(count: &mut u64, ns: &str, error: &io::Error) {
    *count += 1;
    if *count == 1 {
        tracing::warn!(ns, %error, "cannot write to TUN device; dropping the packet");
    } else {
        tracing::debug!(ns, %error, count = *count, "cannot write to TUN device");
    }
}

/// The next statistics tick, or never without an interval.
async fn next_tick(tick: &mut Option<tokio::time::Interval>) {
    match tick {
        Some(t) => {
            t.tick().await;
        }
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hop_names_and_addresses() {
        assert_eq!(hop_dev("linkem0", 0), "linkem0");
        assert_eq!(hop_dev("linkem0", 2), "linkem2");
        assert_eq!(hop_dev("tun9", 3), "tun12");
        assert_eq!(hop_dev("link", 0), "link");
        assert_eq!(hop_dev("link", 1), "link1");
        let a = Ipv4Addr::new(10, 77, 0, 1);
        assert_eq!(shifted(a, 0), a);
        assert_eq!(shifted(a, 2), Ipv4Addr::new(10, 77, 2, 1));
        assert_eq!(shifted(a, 200), Ipv4Addr::new(10, 77, 200, 1));
    }

    #[test]
    fn a_two_namespace_link_is_a_chain_of_one() {
        let c = ChainConfig::from(&EmulatorConfig::default());
        assert_eq!(c.namespaces, ["ctcp-a", "ctcp-b"]);
        assert_eq!(c.hops.len(), 1);
        assert_eq!((c.client_ns, c.server_ns), (None, None));
    }
}
