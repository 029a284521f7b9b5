//! ctcp's share of a 5 Mbit/s one-BDP-queue bottleneck against the TCP model's
//! `CcAlgorithm::BbrWindow` (BBR v1's in-flight cap, which no loss lowers), 30 s warm-up,
//! 60 s measured, at each given RTT.
//! `cargo run --release -p ctcp-sim --example loss_blind_share -- RTT_MS,..`
#![allow(clippy::unwrap_used, clippy::print_stdout)]
use ctcp_sim::ctcp::run_against_bbr_window;
use ctcp_sim::{LinkSpec, Seed};
use std::time::Duration;

fn main() {
    let rtts: Vec<u64> = std::env::args().nth(1).map_or(vec![100, 500], |s| {
        s.split(',').map(|x| x.parse().unwrap()).collect()
    });
    for rtt in rtts {
        let spec = LinkSpec::new(5_000_000, Duration::from_millis(rtt));
        let (c, t) = run_against_bbr_window(
            &spec,
            Seed(7 + rtt),
            Duration::from_secs(30),
            Duration::from_secs(60),
        )
        .unwrap();
        println!(
            "rtt {rtt} ms: ctcp share {:.3}, ctcp {:.2} Mbit/s, BBR window {:.2}",
            c / (c + t),
            c / 1e6,
            t / 1e6
        );
    }
}
