//! Fairness against a Cubic-model flow on a jittery bottleneck: the sweep's fairness setup
//! (5 Mbit/s, one-BDP queue, no random loss, the Cubic flow starting 0, ¼, ½ and ¾ s after
//! ctcp, 30 s warm-up, 90 s measured) with uniform FIFO jitter of ±FRAC of the RTT on the
//! shared link. Each row also runs ctcp with its Cubic controller in ctcp's place: what a
//! loss-based flow gets against the Cubic model on the same jittery link.
//! `cargo run --release -p ctcp-sim --example jitter_fairness -- [FRAC] [RTT_MS,..]`
#![allow(clippy::unwrap_used, clippy::print_stdout)]
use ctcp_proto::{ControllerKind, TransportConfig};
use ctcp_sim::ctcp::{run_fairness_offset_on, FAIRNESS_PHASE_STEP};
use ctcp_sim::{LinkSpec, Seed};
use std::time::Duration;

fn jain(a: f64, b: f64) -> f64 {
    (a + b) * (a + b) / (2.0 * (a * a + b * b))
}

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let frac: f64 = a.get(1).map_or(0.25, |s| s.parse().unwrap());
    let rtts: Vec<u64> = a.get(2).map_or(vec![100, 500], |s| {
        s.split(',').map(|x| x.parse().unwrap()).collect()
    });
    for rtt in rtts {
        let mut spec = LinkSpec::new(5_000_000, Duration::from_millis(rtt));
        spec.jitter = (frac > 0.0).then(|| Duration::from_millis(rtt).mul_f64(2.0 * frac));
        for (name, kind) in [
            ("ctcp", ControllerKind::Ctcp),
            ("cubic-cc", ControllerKind::Cubic),
        ] {
            let config = TransportConfig {
                congestion: kind,
                ..TransportConfig::default()
            };
            let runs: Vec<(f64, f64)> = (0..4)
                .map(|k| {
                    run_fairness_offset_on(
                        &spec,
                        config.clone(),
                        Seed(7 + rtt),
                        Duration::from_secs(30),
                        Duration::from_secs(90),
                        FAIRNESS_PHASE_STEP * k,
                    )
                    .unwrap()
                })
                .collect();
            let j: Vec<f64> = runs.iter().map(|&(x, y)| jain(x, y)).collect();
            let share: Vec<f64> = runs.iter().map(|&(x, y)| x / (x + y)).collect();
            println!(
                "rtt {rtt} ms, jitter ±{:.0} %: {name:<8} share {} jain {} (mean {:.3})",
                frac * 100.0,
                share
                    .iter()
                    .map(|v| format!("{v:.2}"))
                    .collect::<Vec<_>>()
                    .join("/"),
                j.iter()
                    .map(|v| format!("{v:.3}"))
                    .collect::<Vec<_>>()
                    .join("/"),
                j.iter().sum::<f64>() / j.len() as f64
            );
        }
    }
}
