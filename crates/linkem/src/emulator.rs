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
//! The loop reads the clock once per event ([`crate::clock::now`]), pushes
//! what the TUN devices deliver, writes out what the links release, and
//! sleeps on a `timerfd` ([`ReleaseTimer`]) until the earliest release.

use std::future::Future;
use std::io;
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use thiserror::Error;
use tun_rs::{AsyncDevice, DeviceBuilder};

use crate::clock;
use crate::config::{ConfigError, LinkConfig};
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

/// Why the emulator could not start or stopped.
#[derive(Debug, Error)]
pub enum EmulatorError {
    /// A link parameter is invalid.
    #[error("{direction}: {source}")]
    Config {
        /// `a_to_b` or `b_to_a`.
        direction: &'static str,
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

/// One end of the link: the TUN device inside its namespace.
struct End {
    /// Dropped before `ns` (field order), so the device is closed before
    /// its namespace is deleted.
    device: AsyncDevice,
    ns: Namespace,
}

impl std::fmt::Debug for End {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("End")
            .field("ns", &self.ns)
            .finish_non_exhaustive()
    }
}

/// A running link emulator. Dropping it deletes the namespaces it created
/// (unless [`EmulatorConfig::keep`]).
#[derive(Debug)]
pub struct Emulator {
    a: End,
    b: End,
    a_to_b: Link,
    b_to_a: Link,
    keep: bool,
    ready_at: Instant,
    write_errors: u64,
    /// Release lateness per direction (A→B, B→A) since the last stats line.
    late: [Lateness; 2],
}

/// Gives every emulator in this process distinct temporary TUN names.
static INSTANCE: AtomicU32 = AtomicU32::new(0);

impl Emulator {
    /// Creates both namespaces, both TUN devices, moves and configures
    /// them. Must be called inside a tokio runtime (the devices register
    /// with its reactor). On error, whatever was created is removed.
    ///
    /// # Errors
    /// Invalid configuration, an existing namespace, or a failing `ip` or
    /// TUN operation.
    pub fn setup(config: &EmulatorConfig) -> Result<Self, EmulatorError> {
        let a_to_b = Link::new(config.a_to_b.clone()).map_err(|source| EmulatorError::Config {
            direction: "a_to_b",
            source,
        })?;
        let b_to_a = Link::new(config.b_to_a.clone()).map_err(|source| EmulatorError::Config {
            direction: "b_to_a",
            source,
        })?;
        if config.ns_a == config.ns_b {
            return Err(EmulatorError::Setup(format!(
                "both namespaces are named {:?}",
                config.ns_a
            )));
        }
        if config.addr_a == config.addr_b {
            return Err(EmulatorError::Setup(format!(
                "both ends have address {}",
                config.addr_a
            )));
        }
        if config.dev.len() > MAX_IFNAME {
            return Err(EmulatorError::Setup(format!(
                "interface name {:?} is longer than {MAX_IFNAME} bytes",
                config.dev
            )));
        }
        netns::check_name(&config.dev)?;
        if config.mtu < 68 {
            return Err(EmulatorError::Setup(format!(
                "MTU {} is below the IPv4 minimum of 68",
                config.mtu
            )));
        }

        let instance = INSTANCE.fetch_add(1, Ordering::Relaxed);
        let tag = format!("lk{}x{instance}", std::process::id());
        let mut a = Self::end(
            config,
            &config.ns_a,
            &format!("{tag}a"),
            config.addr_a,
            config.addr_b,
        )?;
        let mut b = Self::end(
            config,
            &config.ns_b,
            &format!("{tag}b"),
            config.addr_b,
            config.addr_a,
        )?;
        if config.keep {
            // Only a complete setup is kept; a failed one is removed above.
            a.ns.keep();
            b.ns.keep();
        }
        tracing::info!(
            ns_a = %config.ns_a, addr_a = %config.addr_a,
            ns_b = %config.ns_b, addr_b = %config.addr_b,
            dev = %config.dev, mtu = config.mtu,
            "link up"
        );
        Ok(Self {
            a,
            b,
            a_to_b,
            b_to_a,
            keep: config.keep,
            ready_at: clock::now(),
            write_errors: 0,
            late: [Lateness::default(), Lateness::default()],
        })
    }

    /// Builds one end: namespace `ns`, a TUN first named `tmp_name` in the
    /// current namespace, moved into `ns`, renamed and configured.
    fn end(
        config: &EmulatorConfig,
        ns: &str,
        tmp_name: &str,
        local: Ipv4Addr,
        peer: Ipv4Addr,
    ) -> Result<End, EmulatorError> {
        if tmp_name.len() > MAX_IFNAME {
            return Err(EmulatorError::Setup(format!(
                "temporary interface name {tmp_name:?} is too long"
            )));
        }
        let ns = Namespace::create(ns)?;
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
        ns.adopt(tmp_name, &config.dev)?;
        ns.configure_point_to_point(&config.dev, local, peer, config.mtu)?;
        Ok(End { device, ns })
    }

    /// Moves packets until `shutdown` completes or an I/O error occurs, then
    /// writes the final statistics lines.
    ///
    /// # Errors
    /// A failing TUN read, timer, or statistics write.
    pub async fn run(
        &mut self,
        shutdown: impl Future<Output = ()>,
        mut stats: StatsOptions,
    ) -> Result<(), EmulatorError> {
        let result = self.pump(shutdown, &mut stats).await;
        let last = self.write_stats(&mut stats.sink, true);
        result?;
        last.map_err(io_error("writing statistics"))
    }

    async fn pump(
        &mut self,
        shutdown: impl Future<Output = ()>,
        stats: &mut StatsOptions,
    ) -> Result<(), EmulatorError> {
        // The loop runs on this thread (the binary uses a current-thread runtime).
        timer::tighten_timer_slack();
        let mut timer = ReleaseTimer::new().map_err(io_error("creating the release timer"))?;
        let mut buf_a = vec![0u8; READ_BUF];
        let mut buf_b = vec![0u8; READ_BUF];
        let mut tick = stats.interval.filter(|d| !d.is_zero()).map(|period| {
            let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            tick
        });
        tokio::pin!(shutdown);
        loop {
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
                () = &mut shutdown => return Ok(()),
                r = self.a.device.recv(&mut buf_a) => {
                    let n = r.map_err(io_error("reading the TUN device in namespace A"))?;
                    self.a_to_b.push(clock::now(), buf_a[..n].to_vec());
                    drain(&self.a.device, &mut buf_a, &mut self.a_to_b)
                        .map_err(io_error("reading the TUN device in namespace A"))?;
                }
                r = self.b.device.recv(&mut buf_b) => {
                    let n = r.map_err(io_error("reading the TUN device in namespace B"))?;
                    self.b_to_a.push(clock::now(), buf_b[..n].to_vec());
                    drain(&self.b.device, &mut buf_b, &mut self.b_to_a)
                        .map_err(io_error("reading the TUN device in namespace B"))?;
                }
                r = timer.expired() => r.map_err(io_error("waiting for the release timer"))?,
                _ = next_tick(&mut tick) => {
                    self.write_stats(&mut stats.sink, false)
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
            now,
            late_ab,
            &mut self.write_errors,
        )
        .await;
        forward(
            &mut self.b_to_a,
            &self.a,
            now,
            late_ba,
            &mut self.write_errors,
        )
        .await;
    }

    fn write_stats(&mut self, sink: &mut StatsSink, last: bool) -> io::Result<()> {
        let now = clock::now();
        let t = now.saturating_duration_since(self.ready_at).as_secs_f64();
        let [late_ab, late_ba] = &mut self.late;
        for (direction, link, from, to, late) in [
            ("a_to_b", &self.a_to_b, &self.a, &self.b, late_ab),
            ("b_to_a", &self.b_to_a, &self.b, &self.a, late_ba),
        ] {
            sink.write(&StatsLine {
                t,
                direction,
                from: from.ns.name(),
                to: to.ns.name(),
                counters: link.counters(),
                in_flight: link.in_flight(),
                backlog_bytes: link.backlog(now),
                late_mean_us: late.mean_us(),
                late_max_us: late.max_us(),
                last,
            })?;
            *late = Lateness::default();
        }
        Ok(())
    }

    /// The two directions' links (A→B, B→A), for their counters.
    #[must_use]
    pub fn links(&self) -> (&Link, &Link) {
        (&self.a_to_b, &self.b_to_a)
    }

    /// Closes the devices and deletes the namespaces now (or leaves them
    /// with `keep`), reporting failures instead of only logging them.
    ///
    /// # Errors
    /// The first `ip netns del` failure.
    pub fn teardown(self) -> Result<(), EmulatorError> {
        let Self { a, b, keep, .. } = self;
        let End { device, ns: ns_a } = a;
        drop(device);
        let End { device, ns: ns_b } = b;
        drop(device);
        if keep {
            tracing::info!(ns_a = %ns_a.name(), ns_b = %ns_b.name(), "keeping namespaces");
            return Ok(());
        }
        let first = ns_a.delete();
        let second = ns_b.delete();
        first?;
        second?;
        Ok(())
    }
}

/// Writes every packet of `link` due at `now` to the device of `to`,
/// recording how late each one leaves.
async fn forward(link: &mut Link, to: &End, now: Instant, late: &mut Lateness, errors: &mut u64) {
    while let Some(at) = link.next_release().filter(|at| *at <= now) {
        let Some(packet) = link.poll(now) else { break };
        late.record(now - at);
        if let Err(e) = to.device.send(&packet).await {
            note_write_error(errors, to.ns.name(), &e);
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
