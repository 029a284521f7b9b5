//! Datagrams over a simulated session (issue 27): an application that sends fixed-size
//! datagrams at a fixed interval through [`ctcp_proto::Connection::send_datagram`], a
//! receiver that timestamps what arrives, and the report the scenario tests and the
//! `netbench`-style figures read (residual loss, wire bytes per payload byte, extra delay).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use ctcp_proto::{ConnectionHandle, Endpoint as ProtoEndpoint, EndpointConfig, Event, Psk};
use ctcp_proto::{DatagramStats, TransportConfig};

use crate::ctcp::{deliver, next_datagram};
use crate::link::LinkSpec;
use crate::node::SimRng;
use crate::seed::Seed;
use crate::sim::{Endpoint, Sim, SimError};
use rand::{Rng, SeedableRng};

/// The datagram traffic: `count` datagrams of `size` bytes, `burst` every `interval`,
/// each burst moved later by up to `spread` (seeded, uniform).
#[derive(Debug, Clone, Copy)]
pub struct DatagramSpec {
    /// Payload bytes per datagram (at least 4: the first 4 carry its number).
    pub size: usize,
    /// Time between datagrams.
    pub interval: Duration,
    /// Datagrams sent.
    pub count: u32,
    /// Most a datagram is sent after its slot (at most `interval`, so the order holds):
    /// independent requests such as DNS queries come at irregular gaps, some close
    /// together, rather than on a clock.
    pub spread: Duration,
    /// Datagrams sent at once in each slot (at least 1): requests from clients started
    /// together.
    pub burst: u32,
    /// Mean time between a burst's datagrams (each gap drawn from `[0, 2 × burst_gap]`):
    /// processes started together send a few milliseconds apart. Zero: all at once.
    pub burst_gap: Duration,
}

/// What a datagram run measured.
#[derive(Debug, Clone)]
pub struct DatagramReport {
    /// Datagrams the application sent.
    pub sent: u32,
    /// Distinct datagrams delivered intact.
    pub delivered: u32,
    /// Datagrams delivered more than once, or damaged.
    pub bad: u32,
    /// `1 − delivered / sent`.
    pub residual_loss: f64,
    /// UDP payload bytes the tunnel put on the data direction, per payload byte of the
    /// raw traffic (the datagrams sent as they are).
    pub wire_ratio: f64,
    /// The same with 28 bytes of IPv4/UDP header on every packet of both.
    pub wire_ratio_ip: f64,
    /// UDP payload bytes of the return direction (ACKs) per raw payload byte.
    pub ack_ratio: f64,
    /// Delivery delay beyond the one-way propagation delay, sorted.
    pub extra_delay: Vec<Duration>,
    /// The sender's datagram counters.
    pub sender: DatagramStats,
    /// The receiver's datagram counters.
    pub receiver: DatagramStats,
}

impl DatagramReport {
    /// The `q`-quantile (0..=1) of the extra delay.
    #[must_use]
    pub fn extra_delay_quantile(&self, q: f64) -> Duration {
        if self.extra_delay.is_empty() {
            return Duration::ZERO;
        }
        let i = ((self.extra_delay.len() - 1) as f64 * q.clamp(0.0, 1.0)).round() as usize;
        self.extra_delay[i]
    }
}

/// One end of the datagram run.
#[derive(Debug)]
pub struct DatagramPeer {
    endpoint: ProtoEndpoint,
    peer: SocketAddr,
    conn: Option<ConnectionHandle>,
    spec: Option<DatagramSpec>,
    /// The next datagram's slot (before its spread).
    next_slot: Option<Instant>,
    next_send: Option<Instant>,
    /// Draws each burst's spread and the gaps within it.
    rng: SimRng,
    /// Datagrams of the current burst already sent.
    in_burst: u32,
    /// Send time of each datagram, by number.
    sent_at: Vec<Instant>,
    /// Arrival time of each datagram, by number (receiver).
    arrived: Vec<Option<Instant>>,
    bad: u32,
    buf: Vec<u8>,
}

fn payload(n: u32, size: usize) -> Vec<u8> {
    let mut p: Vec<u8> = (0..size).map(|i| (i as u32 ^ n) as u8).collect();
    p[..4].copy_from_slice(&n.to_le_bytes());
    p
}

impl DatagramPeer {
    fn new(config: TransportConfig, server: bool, seed: u64, peer: SocketAddr) -> Self {
        // Test keys are at least 16 bytes by construction.
        #[allow(clippy::expect_used)]
        let psk = Psk::new(&[9u8; 32]).expect("test PSK");
        let mut s = [0u8; 32];
        s[..8].copy_from_slice(&seed.to_le_bytes());
        DatagramPeer {
            endpoint: ProtoEndpoint::new(EndpointConfig::new(psk, config, server), s),
            peer,
            conn: None,
            spec: None,
            next_slot: None,
            next_send: None,
            rng: SimRng::seed_from_u64(seed),
            in_burst: 0,
            sent_at: Vec::new(),
            arrived: Vec::new(),
            bad: 0,
            buf: Vec::new(),
        }
    }

    fn pump(&mut self, now: Instant) {
        while let Some((h, ev)) = self.endpoint.poll_event() {
            if matches!(ev, Event::Connected | Event::DatagramReceived) {
                self.conn = Some(h);
            }
            if ev == Event::Connected && self.spec.is_some() {
                self.next_slot = Some(now);
                self.next_send = Some(now);
            }
        }
        let Some(c) = self.conn.and_then(|h| self.endpoint.connection_mut(h)) else {
            return;
        };
        while let Some(d) = c.poll_datagram() {
            let n = d
                .get(..4)
                .map_or(u32::MAX, |b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
            let i = n as usize;
            if i >= self.arrived.len() {
                self.arrived.resize(i.min(1 << 24) + 1, None);
            }
            match self.arrived.get_mut(i) {
                Some(slot @ None) if d == payload(n, d.len()) => *slot = Some(now),
                _ => self.bad += 1,
            }
        }
        let (Some(spec), Some(mut slot), Some(mut at)) =
            (self.spec, self.next_slot, self.next_send)
        else {
            return;
        };
        while at <= now && (self.sent_at.len() as u32) < spec.count {
            let n = self.sent_at.len() as u32;
            let _ = c.send_datagram(at, &payload(n, spec.size));
            self.sent_at.push(at);
            self.in_burst += 1;
            if self.in_burst < spec.burst.max(1) {
                if !spec.burst_gap.is_zero() {
                    at += spec.burst_gap.mul_f64(2.0 * self.rng.gen::<f64>());
                }
                continue;
            }
            self.in_burst = 0;
            slot += spec.interval;
            let max = spec.spread.min(spec.interval);
            at = slot + max.mul_f64(self.rng.gen::<f64>());
        }
        self.next_slot = Some(slot);
        self.next_send = ((self.sent_at.len() as u32) < spec.count).then_some(at);
    }
}

impl Endpoint for DatagramPeer {
    fn handle_datagram(&mut self, now: Instant, datagram: &[u8]) {
        deliver(&mut self.endpoint, self.peer, &mut self.buf, now, datagram);
        self.pump(now);
    }

    fn poll_transmit(&mut self, now: Instant) -> Option<Vec<u8>> {
        self.pump(now);
        let out = next_datagram(&mut self.endpoint, now)?;
        Some(out)
    }

    fn poll_timeout(&self) -> Option<Instant> {
        match (self.endpoint.poll_timeout(), self.next_send) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn handle_timeout(&mut self, now: Instant) {
        self.endpoint.handle_timeout(now);
        self.pump(now);
    }
}

/// Sends `spec`'s datagrams from the client to the server over `link` (both directions
/// alike) and reports what arrived. The run lasts the traffic plus two seconds.
///
/// # Errors
/// Fails if the simulation hits its step bound.
pub fn run_datagrams(
    link: &LinkSpec,
    config: TransportConfig,
    spec: DatagramSpec,
    seed: Seed,
) -> Result<DatagramReport, SimError> {
    let mut sim = Sim::with_seed(seed);
    let start = sim.now();
    let (fwd, ret) = sim.add_link(link);
    let server_addr = SocketAddr::from(([10, 0, 0, 2], 7000));
    let client_addr = SocketAddr::from(([10, 0, 0, 1], 40000));
    let mut tx = DatagramPeer::new(config.clone(), false, seed.0, server_addr);
    tx.conn = Some(tx.endpoint.connect(start, server_addr));
    tx.spec = Some(spec);
    let rx = DatagramPeer::new(config, true, seed.0 ^ 0x5eed, client_addr);
    let flow = sim.add_flow(tx, rx, fwd, ret);
    sim.set_step_limit(100_000_000);
    sim.run_until(start + spec.interval * spec.count + Duration::from_secs(3))?;
    let (Some(tx), Some(rx)) = (
        sim.client::<DatagramPeer>(flow),
        sim.server::<DatagramPeer>(flow),
    ) else {
        // Both peers were added above; a missing one is a simulator bug.
        return Err(SimError::Stalled {
            at: Duration::ZERO,
            seed: seed.0,
        });
    };
    let one_way = link.one_way_delay;
    let mut extra: Vec<Duration> = rx
        .arrived
        .iter()
        .zip(&tx.sent_at)
        .filter_map(|(a, s)| a.map(|a| a.saturating_duration_since(*s).saturating_sub(one_way)))
        .collect();
    extra.sort_unstable();
    let sent = tx.sent_at.len() as u32;
    let delivered = extra.len() as u32;
    let stats = sim.flow_stats(flow);
    let raw = f64::from(sent) * spec.size as f64;
    let raw_ip = f64::from(sent) * (spec.size + 28) as f64;
    let fwd_bytes = stats.forward.offered_bytes as f64;
    let fwd_ip = fwd_bytes + 28.0 * stats.forward.offered_datagrams as f64;
    let stat = |p: &DatagramPeer| {
        p.conn
            .and_then(|h| p.endpoint.connection(h))
            .map(|c| c.datagram_stats())
            .unwrap_or_default()
    };
    Ok(DatagramReport {
        sent,
        delivered,
        bad: rx.bad,
        residual_loss: 1.0 - f64::from(delivered) / f64::from(sent.max(1)),
        wire_ratio: fwd_bytes / raw.max(1.0),
        wire_ratio_ip: fwd_ip / raw_ip.max(1.0),
        ack_ratio: stats.ret.offered_bytes as f64 / raw.max(1.0),
        extra_delay: extra,
        sender: stat(tx),
        receiver: stat(rx),
    })
}
