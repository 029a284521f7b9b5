//! The TCP model behaves like kernel TCP: fills a clean link, collapses on
//! a long lossy one (Mathis), shares a bottleneck fairly.

#![allow(clippy::unwrap_used)] // test helpers, not only #[test] fns

use std::time::Duration;

use ctcp_sim::{
    jain, tcp_pair, CcAlgorithm, Delay, LinkSpec, LossModel, Rate, Seed, Sim, TcpConfig,
    TcpReceiver, TcpSender,
};

fn utilisation(rate_bps: u64, rtt_ms: u64, loss: LossModel, cc: CcAlgorithm, secs: u64) -> f64 {
    let mut sim = Sim::with_seed(Seed::from_env_or(1));
    let spec = LinkSpec::new(rate_bps, Duration::from_millis(rtt_ms)).loss(loss);
    let (fwd, ret) = sim.add_link(&spec);
    let (tx, rx) = tcp_pair(TcpConfig {
        cc,
        ..TcpConfig::default()
    });
    let flow = sim.add_flow(tx, rx, fwd, ret);
    sim.run_for(Duration::from_secs(secs)).unwrap();
    let rx: &TcpReceiver = sim.server(flow).unwrap();
    let tx: &TcpSender = sim.client(flow).unwrap();
    let u = rx.bytes_delivered() as f64 * 8.0 / secs as f64 / rate_bps as f64;
    eprintln!(
        "{cc:?} {rate_bps} bit/s rtt {rtt_ms} ms {loss:?}: utilisation {u:.3}, cwnd {:.1}, {:?}",
        tx.cwnd(),
        tx.stats()
    );
    u
}

#[test]
fn cubic_fills_clean_bdp_link() {
    let u = utilisation(10_000_000, 100, LossModel::None, CcAlgorithm::Cubic, 30);
    assert!(u >= 0.80, "utilisation {u}");
}

#[test]
fn newreno_fills_clean_bdp_link() {
    let u = utilisation(10_000_000, 100, LossModel::None, CcAlgorithm::NewReno, 30);
    assert!(u >= 0.80, "utilisation {u}");
}

#[test]
fn cubic_collapses_at_long_rtt_with_random_loss() {
    let u = utilisation(
        10_000_000,
        500,
        LossModel::Bernoulli(0.01),
        CcAlgorithm::Cubic,
        60,
    );
    assert!(u < 0.30, "utilisation {u}");
    assert!(
        u > 0.005,
        "utilisation {u}: the model stalls instead of crawling"
    );
}

#[test]
fn newreno_tracks_mathis() {
    // Mathis: rate ≈ MSS/RTT · 1.22/√p; at 100 ms, 1 %: 1.37 Mbit/s.
    let u = utilisation(
        100_000_000,
        100,
        LossModel::Bernoulli(0.01),
        CcAlgorithm::NewReno,
        60,
    );
    let mathis = 1400.0 * 8.0 / 0.1 * 1.22 / 0.1 / 100e6;
    assert!(
        u > 0.5 * mathis && u < 2.0 * mathis,
        "utilisation {u}, Mathis {mathis}"
    );
}

#[test]
fn two_cubic_flows_share_a_bottleneck_fairly() {
    let mut sim = Sim::with_seed(Seed::from_env_or(3));
    let t0 = sim.now();
    let rate = 5_000_000;
    let rtt = Duration::from_millis(50);
    let bdp = (rate as f64 * rtt.as_secs_f64() / 8.0) as usize;
    let shared = sim.add_node(Rate::new(rate, bdp));
    let mut flows = Vec::new();
    for start in [0u64, 2] {
        let fwd_delay = sim.add_node(Delay::new(rtt / 2));
        let ret_delay = sim.add_node(Delay::new(rtt / 2));
        let fwd = sim.add_path([shared, fwd_delay]);
        let ret = sim.add_path([ret_delay]);
        let (tx, rx) = tcp_pair(TcpConfig {
            start_at: Some(t0 + Duration::from_secs(start)),
            ..TcpConfig::default()
        });
        flows.push(sim.add_flow(tx, rx, fwd, ret));
    }
    sim.run_for(Duration::from_secs(60)).unwrap();
    let goodputs: Vec<f64> = flows
        .iter()
        .map(|&f| {
            let rx: &TcpReceiver = sim.server(f).unwrap();
            rx.bytes_delivered() as f64 * 8.0 / 60.0
        })
        .collect();
    let j = jain(&goodputs);
    let total: f64 = goodputs.iter().sum::<f64>() / rate as f64;
    eprintln!("goodputs {goodputs:?} bit/s, jain {j:.3}, utilisation {total:.3}");
    assert!(j >= 0.9, "jain {j}");
    assert!(total >= 0.8, "utilisation {total}");
    assert!(sim.node_stats(shared).packets_dropped > 0);
}

#[test]
fn finite_transfer_completes_over_a_hostile_link() {
    let mut sim = Sim::with_seed(Seed::from_env_or(8));
    let spec = LinkSpec::new(2_000_000, Duration::from_millis(200))
        .loss(LossModel::Bernoulli(0.05))
        .reorder(0.02, Duration::from_millis(20))
        .duplicate(0.02)
        .corrupt(0.02);
    let (fwd, ret) = sim.add_link(&spec);
    let (tx, rx) = tcp_pair(TcpConfig {
        bytes: Some(300_000),
        ..TcpConfig::default()
    });
    let flow = sim.add_flow(tx, rx, fwd, ret);
    let done = sim
        .run_while_until(sim.now() + Duration::from_secs(600), |s| {
            !s.client::<TcpSender>(flow).unwrap().is_complete()
        })
        .unwrap();
    assert!(done);
    let rx: &TcpReceiver = sim.server(flow).unwrap();
    assert_eq!(rx.bytes_delivered(), 300_000);
    assert!(rx.stats().discarded > 0);
    // Once finished, nothing is left to do.
    let tx: &TcpSender = sim.client(flow).unwrap();
    assert_eq!(tx.in_flight(), 0);
}
