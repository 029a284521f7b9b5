//! The event loop: routing, shared nodes, counters, bounds, determinism.

#![allow(clippy::unwrap_used)] // test helpers, not only #[test] fns

use std::time::{Duration, Instant};

use ctcp_sim::{
    tcp_pair, Delay, Endpoint, LinkSpec, LossModel, Rate, Seed, Side, Sim, SimError, TcpConfig,
    TcpReceiver, TcpSender, TraceKind,
};
use sha2::{Digest, Sha256};

/// Sends `count` datagrams of `size` bytes, one every `interval`, each
/// carrying its sequence number; records what it receives with arrival time.
#[derive(Debug)]
struct Pinger {
    interval: Duration,
    size: usize,
    count: u64,
    sent: u64,
    next: Option<Instant>,
    due: bool,
    received: Vec<(Instant, Vec<u8>)>,
}

impl Pinger {
    fn new(start: Instant, interval: Duration, size: usize, count: u64) -> Self {
        Self {
            interval,
            size,
            count,
            sent: 0,
            next: (count > 0).then_some(start),
            due: false,
            received: Vec::new(),
        }
    }
}

impl Endpoint for Pinger {
    fn handle_datagram(&mut self, now: Instant, datagram: &[u8]) {
        self.received.push((now, datagram.to_vec()));
    }
    fn poll_transmit(&mut self, _now: Instant) -> Option<Vec<u8>> {
        if !self.due {
            return None;
        }
        self.due = false;
        let mut d = vec![0u8; self.size.max(8)];
        d[..8].copy_from_slice(&self.sent.to_le_bytes());
        self.sent += 1;
        Some(d)
    }
    fn poll_timeout(&self) -> Option<Instant> {
        self.next
    }
    fn handle_timeout(&mut self, now: Instant) {
        if self.next.is_some_and(|t| t <= now) {
            self.due = true;
            self.next = (self.sent + 1 < self.count).then(|| now + self.interval);
        }
    }
}

fn seq(d: &[u8]) -> u64 {
    u64::from_le_bytes(d[..8].try_into().unwrap())
}

#[test]
fn delivers_over_path_with_exact_delay_and_counts() {
    let mut sim = Sim::with_seed(Seed::from_env_or(1));
    let t0 = sim.now();
    let d = Delay::new(Duration::from_millis(25));
    let fwd_delay = sim.add_node(d);
    let ret_delay = sim.add_node(Delay::new(Duration::from_millis(40)));
    let fwd = sim.add_path([fwd_delay]);
    let ret = sim.add_path([ret_delay]);
    let client = Pinger::new(t0, Duration::from_millis(10), 100, 50);
    let server = Pinger::new(
        t0 + Duration::from_millis(5),
        Duration::from_millis(10),
        60,
        20,
    );
    let flow = sim.add_flow(client, server, fwd, ret);
    sim.run_for(Duration::from_secs(2)).unwrap();
    assert_eq!(sim.elapsed(), Duration::from_secs(2));

    let server: &Pinger = sim.server(flow).unwrap();
    assert_eq!(server.received.len(), 50);
    for (i, (t, d)) in server.received.iter().enumerate() {
        assert_eq!(seq(d), i as u64);
        assert_eq!(*t - t0, Duration::from_millis(10 * i as u64 + 25));
    }
    let client: &Pinger = sim.client(flow).unwrap();
    assert_eq!(client.received.len(), 20);
    for (i, (t, _)) in client.received.iter().enumerate() {
        assert_eq!(*t - t0, Duration::from_millis(10 * i as u64 + 45));
    }
    let s = sim.flow_stats(flow);
    assert_eq!(s.forward.offered_datagrams, 50);
    assert_eq!(s.forward.offered_bytes, 5000);
    assert_eq!(s.forward.delivered_datagrams, 50);
    assert_eq!(s.ret.offered_datagrams, 20);
    assert_eq!(s.ret.delivered_bytes, 1200);
    assert_eq!(sim.node_stats(fwd_delay).packets_out, 50);
    assert_eq!(sim.node_name(fwd_delay), "delay");
    // Wrong type downcasts to None.
    assert!(sim.get::<TcpReceiver>(flow, Side::Server).is_none());
    assert!(sim.get_mut::<Pinger>(flow, Side::Client).is_some());
}

#[test]
fn shared_bottleneck_serves_two_flows() {
    let mut sim = Sim::with_seed(Seed::from_env_or(2));
    let t0 = sim.now();
    // 1 Mbit/s shared; each flow offers 1000 B every 10 ms = 0.8 Mbit/s.
    let shared = sim.add_node(Rate::new(1_000_000, 1_000_000));
    let da = sim.add_node(Delay::new(Duration::from_millis(10)));
    let db = sim.add_node(Delay::new(Duration::from_millis(30)));
    let pa = sim.add_path([shared, da]);
    let pb = sim.add_path([shared, db]);
    let empty = sim.add_path([]);
    let iv = Duration::from_millis(10);
    let a = sim.add_flow(
        Pinger::new(t0, iv, 1000, 100),
        Pinger::new(t0, iv, 0, 0),
        pa,
        empty,
    );
    let b = sim.add_flow(
        Pinger::new(t0, iv, 1000, 100),
        Pinger::new(t0, iv, 0, 0),
        pb,
        empty,
    );
    sim.run_for(Duration::from_secs(5)).unwrap();
    let st = sim.node_stats(shared);
    assert_eq!(st.packets_in, 200);
    assert_eq!(st.packets_out, 200);
    // 1.6 Mbit/s offered into 1 Mbit/s: the queue grows, so the last packet
    // leaves at 200 · 8 ms = 1.6 s (+ propagation).
    let ra: &Pinger = sim.server(a).unwrap();
    let rb: &Pinger = sim.server(b).unwrap();
    assert_eq!(ra.received.len(), 100);
    assert_eq!(rb.received.len(), 100);
    let last = ra
        .received
        .last()
        .unwrap()
        .0
        .max(rb.received.last().unwrap().0);
    let last_a = ra.received.last().unwrap().0 - t0 - Duration::from_millis(10);
    let last_b = rb.received.last().unwrap().0 - t0 - Duration::from_millis(30);
    assert_eq!(last_a.max(last_b), Duration::from_millis(1600));
    assert!(last > t0);
}

/// Asks for a timeout in the past forever.
struct Stuck(Instant);

impl Endpoint for Stuck {
    fn handle_datagram(&mut self, _: Instant, _: &[u8]) {}
    fn poll_transmit(&mut self, _: Instant) -> Option<Vec<u8>> {
        None
    }
    fn poll_timeout(&self) -> Option<Instant> {
        Some(self.0)
    }
    fn handle_timeout(&mut self, _: Instant) {}
}

/// Never stops sending.
struct Flood;

impl Endpoint for Flood {
    fn handle_datagram(&mut self, _: Instant, _: &[u8]) {}
    fn poll_transmit(&mut self, _: Instant) -> Option<Vec<u8>> {
        Some(vec![0])
    }
    fn poll_timeout(&self) -> Option<Instant> {
        None
    }
    fn handle_timeout(&mut self, _: Instant) {}
}

#[test]
fn bounds_error_instead_of_hanging() {
    let mut sim = Sim::with_seed(Seed(4));
    let t0 = sim.now();
    let p = sim.add_path([]);
    sim.add_flow(Stuck(t0), Stuck(t0), p, p);
    let err = sim.run_for(Duration::from_secs(1)).unwrap_err();
    assert!(matches!(err, SimError::Livelock { seed: 4, .. }), "{err}");
    assert!(err.to_string().contains("CTCP_SIM_SEED=4"));

    let mut sim = Sim::with_seed(Seed(4));
    let p = sim.add_path([]);
    let d = sim.add_node(Delay::new(Duration::from_millis(1)));
    let q = sim.add_path([d]);
    sim.add_flow(Flood, Stuck(t0), q, p);
    let err = sim.run_for(Duration::from_secs(1)).unwrap_err();
    assert!(matches!(err, SimError::TransmitFlood { .. }), "{err}");

    // Step limit.
    let mut sim = Sim::with_seed(Seed(4));
    let t0 = sim.now();
    let p = sim.add_path([]);
    sim.add_flow(
        Pinger::new(t0, Duration::from_millis(1), 10, u64::MAX),
        Pinger::new(t0, Duration::from_millis(1), 10, 0),
        p,
        p,
    );
    sim.set_step_limit(100);
    let err = sim.run_for(Duration::from_secs(10)).unwrap_err();
    assert!(
        matches!(err, SimError::StepLimit { limit: 100, .. }),
        "{err}"
    );

    // run_while with nothing left to do.
    let mut sim = Sim::with_seed(Seed(4));
    let t0 = sim.now();
    let p = sim.add_path([]);
    let f = sim.add_flow(
        Pinger::new(t0, Duration::from_millis(1), 10, 3),
        Pinger::new(t0, Duration::from_millis(1), 10, 0),
        p,
        p,
    );
    let err = sim
        .run_while(|s| s.flow_stats(f).forward.delivered_datagrams < 5)
        .unwrap_err();
    assert!(matches!(err, SimError::Stalled { .. }), "{err}");
    sim.run_while(|s| s.flow_stats(f).forward.delivered_datagrams < 3)
        .unwrap();
}

fn lossy_tcp_run(seed: u64) -> (u64, Vec<u8>, u64) {
    let mut sim = Sim::with_seed(Seed(seed));
    sim.enable_trace();
    let spec = LinkSpec::new(5_000_000, Duration::from_millis(60))
        .loss(LossModel::Gilbert {
            mean: 0.02,
            burst: 3.0,
        })
        .reorder(0.01, Duration::from_millis(5))
        .duplicate(0.01)
        .corrupt(0.01)
        .jitter(Duration::from_millis(2));
    let (fwd, ret) = sim.add_link(&spec);
    let (tx, rx) = tcp_pair(TcpConfig {
        bytes: Some(2_000_000),
        ..TcpConfig::default()
    });
    let flow = sim.add_flow(tx, rx, fwd, ret);
    let done = sim
        .run_while_until(sim.now() + Duration::from_secs(60), |s| {
            !s.client::<TcpSender>(flow).unwrap().is_complete()
        })
        .unwrap();
    assert!(done, "transfer did not finish (seed {seed})");
    let rx: &TcpReceiver = sim.server(flow).unwrap();
    assert_eq!(rx.bytes_delivered(), 2_000_000);
    let mut h = Sha256::new();
    for e in sim.trace().unwrap() {
        h.update(e.at.as_nanos().to_le_bytes());
        h.update(e.id.to_le_bytes());
        h.update([e.kind as u8, e.direction as u8]);
    }
    (sim.digest(), h.finalize().to_vec(), sim.steps())
}

#[test]
fn same_seed_same_run_different_seed_different_run() {
    let seed = Seed::from_env_or(42).0;
    let a = lossy_tcp_run(seed);
    let b = lossy_tcp_run(seed);
    assert_eq!(a, b);
    let c = lossy_tcp_run(seed.wrapping_add(1));
    assert_ne!(a.0, c.0);
    assert_ne!(a.1, c.1);
}

#[test]
fn trace_records_offers_and_deliveries() {
    let mut sim = Sim::with_seed(Seed(5));
    let t0 = sim.now();
    sim.enable_trace();
    let (fwd, ret) = sim.add_link(&LinkSpec::new(1_000_000, Duration::from_millis(20)));
    sim.add_flow(
        Pinger::new(t0, Duration::from_millis(50), 125, 3),
        Pinger::new(t0, Duration::from_millis(50), 8, 0),
        fwd,
        ret,
    );
    sim.run_for(Duration::from_secs(1)).unwrap();
    let tr = sim.trace().unwrap();
    assert_eq!(tr.len(), 6);
    // 125 B at 1 Mbit/s = 1 ms serialisation + 10 ms propagation.
    assert_eq!(tr[0].kind, TraceKind::Offered);
    assert_eq!(tr[1].kind, TraceKind::Delivered);
    assert_eq!(tr[1].at - tr[0].at, Duration::from_millis(11));
}

#[test]
fn link_spec_builds_nodes_in_documented_order() {
    let mut sim = Sim::with_seed(Seed(6));
    let spec = LinkSpec::new(10_000_000, Duration::from_millis(100));
    assert_eq!(spec.effective_queue_bytes(), 125_000);
    let (fwd, ret) = sim.add_link(&spec);
    let names: Vec<_> = sim.path(fwd).iter().map(|&n| sim.node_name(n)).collect();
    assert_eq!(names, ["rate", "delay"]);
    assert_ne!(sim.path(fwd), sim.path(ret));
    let full = spec
        .mtu(1500)
        .jitter(Duration::from_millis(1))
        .loss(LossModel::Bernoulli(0.1))
        .reorder(0.1, Duration::from_millis(5))
        .duplicate(0.1)
        .corrupt(0.1);
    let p = full.build_path(&mut sim);
    let names: Vec<_> = sim.path(p).iter().map(|&n| sim.node_name(n)).collect();
    assert_eq!(
        names,
        [
            "mtu",
            "rate",
            "delay",
            "jitter",
            "bernoulli",
            "reorder",
            "duplicate",
            "corrupt"
        ]
    );
}
