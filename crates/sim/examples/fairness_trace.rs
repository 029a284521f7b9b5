//! One ctcp and one Cubic-model flow sharing 5 Mbit/s with no random loss (the sweep's
//! fairness row), printed once per virtual second: each flow's goodput, ctcp's window and
//! RTT estimates, Cubic's window; then both flows' goodput and Jain's index after 30 s
//! (tuning aid, and the fairness time series behind BENCHMARKS.md).
//! `cargo run --release -p ctcp-sim --example fairness_trace -- RTT_MS CUBIC_START_MS SECS`
#![allow(clippy::unwrap_used, clippy::print_stdout)]
use ctcp_proto::TransportConfig;
use ctcp_sim::ctcp::{CtcpPeer, FairnessRun};
use ctcp_sim::{Seed, TcpSender};
use std::time::Duration;
fn main() {
    let a: Vec<String> = std::env::args().collect();
    let rtt: u64 = a.get(1).map_or(500, |s| s.parse().unwrap());
    let off: u64 = a.get(2).map_or(0, |s| s.parse().unwrap());
    let secs: u64 = a.get(3).map_or(120, |s| s.parse::<u64>().unwrap()).max(31);
    let mut run = FairnessRun::new(
        5_000_000,
        Duration::from_millis(rtt),
        TransportConfig::default(),
        Seed(107),
        Duration::from_millis(off),
    );
    run.sim.set_step_limit(u64::MAX / 2);
    let (mut c0, mut t0) = (0, 0);
    let (mut cs, mut ts) = (0u64, 0u64);
    for s in 1..=secs {
        run.sim
            .run_until(run.start + Duration::from_secs(s))
            .unwrap();
        let (c1, t1) = run.delivered();
        let st = run
            .sim
            .client::<CtcpPeer>(run.ctcp)
            .and_then(|p| p.stats())
            .unwrap();
        let tw = run
            .sim
            .client::<TcpSender>(run.cubic)
            .map_or(0.0, |t| t.cwnd());
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
    let cubic_events = run
        .sim
        .client::<TcpSender>(run.cubic)
        .map_or(0, |t| t.stats().congestion_events);
    println!(
        "after 30 s: ctcp {:.2} cubic {:.2} jain {:.3} (Cubic window reductions: {cubic_events})",
        x * 8e-6 / (secs - 30) as f64,
        y * 8e-6 / (secs - 30) as f64,
        (x + y).powi(2) / (2.0 * (x * x + y * y))
    );
}
