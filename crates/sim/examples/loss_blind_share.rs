//! ctcp's share of a 5 Mbit/s one-BDP-queue bottleneck against the TCP model's
//! `CcAlgorithm::BbrWindow` (BBR v1's in-flight cap, which no loss lowers), 30 s warm-up,
//! 60 s measured, at each given RTT.
//! `cargo run --release -p ctcp-sim --example loss_blind_share -- RTT_MS,..`
#![allow(clippy::unwrap_used, clippy::print_stdout)]
use ctcp_proto::TransportConfig;
use ctcp_sim::ctcp::FairnessRun;
use ctcp_sim::{CcAlgorithm, LinkSpec, Seed, TcpConfig};
use std::time::Duration;

fn main() {
    let rtts: Vec<u64> = std::env::args().nth(1).map_or(vec![100, 500], |s| {
        s.split(',').map(|x| x.parse().unwrap()).collect()
    });
    for rtt in rtts {
        let spec = LinkSpec::new(5_000_000, Duration::from_millis(rtt));
        let tcp = TcpConfig {
            cc: CcAlgorithm::BbrWindow,
            ..TcpConfig::default()
        };
        let mut run = FairnessRun::against(
            &spec,
            TransportConfig::default(),
            Seed(7 + rtt),
            Duration::ZERO,
            tcp,
        );
        run.sim.set_step_limit(200_000_000);
        run.sim
            .run_until(run.start + Duration::from_secs(30))
            .unwrap();
        let (c0, t0) = run.delivered();
        run.sim
            .run_until(run.start + Duration::from_secs(90))
            .unwrap();
        let (c1, t1) = run.delivered();
        let (c, t) = ((c1 - c0) as f64, (t1 - t0) as f64);
        println!(
            "rtt {rtt} ms: ctcp share {:.3}, ctcp {:.2} Mbit/s, BBR window {:.2}",
            c / (c + t),
            c * 8.0 / 60e6,
            t * 8.0 / 60e6
        );
    }
}
