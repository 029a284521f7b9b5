//! One ctcp and one Cubic-model flow sharing 5 Mbit/s with no random loss (the sweep's
//! fairness row), printed once per virtual second: each flow's goodput, ctcp's window and
//! RTT estimates, Cubic's window; then both flows' goodput and Jain's index after 30 s
//! (tuning aid, and the fairness time series behind BENCHMARKS.md).
//! `cargo run --release -p ctcp-sim --example fairness_trace -- RTT_MS CUBIC_START_MS SECS`
#![allow(clippy::unwrap_used, clippy::print_stdout)]
use ctcp_proto::TransportConfig;
use ctcp_sim::ctcp::CtcpPeer;
use ctcp_sim::{tcp_pair, LinkSpec, Seed, Sim, TcpConfig, TcpReceiver, TcpSender};
use std::time::Duration;
fn main() {
    let a: Vec<String> = std::env::args().collect();
    let rtt: u64 = a.get(1).map_or(500, |s| s.parse().unwrap());
    let off: u64 = a.get(2).map_or(0, |s| s.parse().unwrap());
    let secs: u64 = a.get(3).map_or(120, |s| s.parse::<u64>().unwrap()).max(31);
    let rate = 5_000_000;
    let mut sim = Sim::with_seed(Seed(107));
    let start = sim.now();
    let spec = LinkSpec::new(rate, Duration::from_millis(rtt));
    let fwd_nodes = spec.build_nodes(&mut sim);
    let fwd_a = sim.add_path(fwd_nodes.iter().copied());
    let fwd_b = sim.add_path(fwd_nodes.iter().copied());
    let ret_a = LinkSpec::new(rate * 10, Duration::from_millis(rtt)).build_path(&mut sim);
    let ret_b = LinkSpec::new(rate * 10, Duration::from_millis(rtt)).build_path(&mut sim);
    let config = TransportConfig::default();
    let tx = CtcpPeer::sender(config.clone(), &[7; 32], 107, start, u64::MAX / 4);
    let rx = CtcpPeer::receiver(config, &[7; 32], 107 ^ 1);
    let cf = sim.add_flow(tx, rx, fwd_a, ret_a);
    let (ttx, trx) = tcp_pair(TcpConfig {
        start_at: (off > 0).then_some(start + Duration::from_millis(off)),
        ..TcpConfig::default()
    });
    let tf = sim.add_flow(ttx, trx, fwd_b, ret_b);
    sim.set_step_limit(u64::MAX / 2);
    let (mut c0, mut t0) = (0, 0);
    let (mut cs, mut ts) = (0u64, 0u64);
    for s in 1..=secs {
        sim.run_until(start + Duration::from_secs(s)).unwrap();
        let c1 = sim
            .server::<CtcpPeer>(cf)
            .map_or(0, |r| r.delivery.bytes_ok);
        let t1 = sim
            .server::<TcpReceiver>(tf)
            .map_or(0, |r| r.bytes_delivered());
        let st = sim.client::<CtcpPeer>(cf).and_then(|p| p.stats()).unwrap();
        let tw = sim.client::<TcpSender>(tf).map_or(0.0, |t| t.cwnd());
        println!(
            "{s:4} ctcp {:5.2} cubic {:5.2} | cw {:5} min {:4} rmin {:4} srtt {:4} | tcw {:6.1}",
            (c1 - c0) as f64 * 8e-6,
            (t1 - t0) as f64 * 8e-6,
            st.cwnd,
            st.min_rtt.as_millis(),
            st.round_min.as_millis(),
            st.srtt.as_millis(),
            tw
        );
        if s > 30 {
            cs += c1 - c0;
            ts += t1 - t0;
        }
        (c0, t0) = (c1, t1);
    }
    let (x, y) = (cs as f64, ts as f64);
    let cubic_events = sim
        .client::<TcpSender>(tf)
        .map_or(0, |t| t.stats().congestion_events);
    println!(
        "after 30 s: ctcp {:.2} cubic {:.2} jain {:.3} (Cubic window reductions: {cubic_events})",
        x * 8e-6 / (secs - 30) as f64,
        y * 8e-6 / (secs - 30) as f64,
        (x + y).powi(2) / (2.0 * (x * x + y * y))
    );
}
