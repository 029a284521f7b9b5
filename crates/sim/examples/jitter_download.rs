//! One bulk transfer per seed over a 10 Mbit/s link with RTT jitter (uniform, FIFO unless
//! `JREORDER=1`) and Bernoulli loss, in the sweep's configuration with a 16-packet
//! handshake train ([`run_transfer`]): the whole-transfer efficiency (against the rate ×
//! (1 − loss)), the efficiency from 10 s after the stream opened, the wire per goodput
//! byte, and the sender's losses and backoffs. The seed spread of a cell is what one real
//! run of it samples from (docs/experiments/jitter.md, sessions 29 and 30): compare means
//! over seeds, never one seed.
//! `cargo run --release -p ctcp-sim --example jitter_download -- RTT_MS LOSS MB JITTER_MS [SEEDS] [FIRST_SEED]`
//! (`JITTER_MS` either side of the mean RTT, as the sweep's ±25 %: 125 at 500 ms).
#![allow(clippy::unwrap_used, clippy::print_stdout)]
use ctcp_proto::TransportConfig;
use ctcp_sim::ctcp::{run_transfer, sweep_config};
use ctcp_sim::{JitterDist, LinkSpec, LossModel, Seed};
use std::time::Duration;

/// Link rate in bits per second.
const RATE: u64 = 10_000_000;

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let arg = |i: usize| -> &str { a.get(i).map_or_else(|| usage(), String::as_str) };
    let rtt: u64 = arg(1).parse().unwrap();
    let loss: f64 = arg(2).parse().unwrap();
    let mb: f64 = arg(3).parse().unwrap();
    let jitter: u64 = arg(4).parse().unwrap();
    let seeds: u64 = a.get(5).map_or(8, |s| s.parse().unwrap());
    let first: u64 = a.get(6).map_or(1, |s| s.parse().unwrap());
    let link = LinkSpec::new(RATE, Duration::from_millis(rtt)).loss(if loss <= 0.0 {
        LossModel::None
    } else {
        LossModel::Bernoulli(loss)
    });
    let link = if jitter > 0 {
        link.rtt_jitter(
            Duration::from_millis(2 * jitter),
            JitterDist::Uniform,
            std::env::var_os("JREORDER").is_some(),
        )
    } else {
        link
    };
    let cfg = TransportConfig {
        handshake_train: 16,
        ..sweep_config()
    };
    let bytes = (mb * 1e6) as u64;
    // Ample for any cell this tool is meant for: 1 % of the link's rate.
    let deadline = Duration::from_secs_f64(bytes as f64 * 8.0 / (RATE as f64 * 0.01));
    let usable = RATE as f64 * (1.0 - loss);
    let mut effs = Vec::new();
    for seed in first..first + seeds {
        let r = run_transfer(&link, cfg.clone(), bytes, Seed(seed), deadline).unwrap();
        assert!(
            r.bytes_ok,
            "seed {seed}: the transfer did not arrive intact"
        );
        let eff = r.goodput_bps / usable;
        effs.push(eff);
        let (lost, backoffs) = r.sender_stats.map_or((0, 0), |s| (s.lost, s.backoffs));
        println!(
            "seed {seed}: {:.2} s, efficiency {eff:.3}, from 10 s {:.3}, wire {:.3} | {lost} lost, {backoffs} backoffs",
            r.duration.as_secs_f64(),
            r.goodput_after_10s_bps / usable,
            r.wire_per_goodput,
        );
    }
    let mean = effs.iter().sum::<f64>() / effs.len().max(1) as f64;
    println!("mean efficiency {mean:.4} over {} seeds", effs.len());
}

fn usage() -> ! {
    eprintln!("usage: jitter_download RTT_MS LOSS MB JITTER_MS [SEEDS] [FIRST_SEED]");
    std::process::exit(2)
}
