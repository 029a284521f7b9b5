//! An application-limited sender, several seeds: what its repairs cost and what they buy.
//! The flow of the `an_application_limited_sender_gets_its_rate_with_bounded_repairs`
//! test: 64 KiB written every 100 ms (5.2 Mbit/s) over a 10 Mbit/s link, 5 MB, seeds
//! `0x9ace + i`.
//!
//! `cargo run --release -p ctcp-sim --example paced -- [RTT_MS LOSS SEEDS BYTES
//! latency|bandwidth]` (the last: `TransportConfig::repair_priority`) prints
//! per seed the repairs per source against the erasure minimum p/(1 − p), the sender's
//! repairs by origin (reactive, proactive, tail, margin), the receiver's repairs received
//! and useless, the p99 extra delivery delay and the goodput.
#![allow(clippy::print_stdout)]

use ctcp_proto::{RepairPriority, TransportConfig};
use ctcp_sim::ctcp::{run_paced_transfer, sweep_config, Pace};
use ctcp_sim::{LinkSpec, LossModel, Seed};
use std::time::Duration;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize, d: f64| args.get(i).and_then(|a| a.parse().ok()).unwrap_or(d);
    let rtt = Duration::from_millis(arg(0, 500.0) as u64);
    let loss = arg(1, 0.3);
    let seeds = arg(2, 4.0) as u64;
    let total = arg(3, 5e6) as u64;
    let priority = match args.get(4).map(String::as_str) {
        None | Some("latency") => RepairPriority::Latency,
        Some("bandwidth") => RepairPriority::Bandwidth,
        Some(other) => {
            eprintln!("repair priority {other:?}: expected latency or bandwidth");
            std::process::exit(2);
        }
    };
    let link = LinkSpec::new(10_000_000, rtt).loss(LossModel::Bernoulli(loss));
    let pace = Pace {
        chunk: 64 * 1024,
        every: Duration::from_millis(100),
    };
    println!(
        "{} ms / {:.0} %: minimum repair/source {:.3}",
        rtt.as_millis(),
        loss * 100.0,
        loss / (1.0 - loss)
    );
    println!(
        "seed    rep/src  [reactive proactive tail margin]  received useless  p99 ms  Mbit/s  ok"
    );
    let mut sum = [0.0f64; 6];
    for i in 0..seeds {
        let seed = Seed(0x9ace + i);
        let r = match run_paced_transfer(
            &link,
            TransportConfig {
                repair_priority: priority,
                ..sweep_config()
            },
            total,
            Some(pace),
            seed,
            Duration::from_secs(600),
        ) {
            Ok(r) => r,
            Err(e) => {
                eprintln!("seed {i}: {e}");
                std::process::exit(1);
            }
        };
        let origin = r.sender_stats.as_ref().map_or([0; 4], |s| s.repair_origin);
        let (received, useless) = r
            .receiver_stats
            .as_ref()
            .map_or((0, 0), |s| (s.repairs_received, s.repairs_useless));
        println!(
            "{:#06x}  {:.4}  {:?}  {received} {useless}  {:.0}  {:.2}  {}",
            seed.0,
            r.repair_overhead,
            origin,
            r.p99_extra_delay_ms,
            r.goodput_bps / 1e6,
            r.bytes_ok
        );
        for (s, v) in sum.iter_mut().zip([
            r.repair_overhead,
            origin[2] as f64,
            origin[0] as f64,
            useless as f64,
            r.p99_extra_delay_ms,
            r.goodput_bps / 1e6,
        ]) {
            *s += v / seeds as f64;
        }
    }
    println!(
        "mean    {:.4}  tail {:.0} reactive {:.0}  useless {:.0}  {:.0}  {:.2}",
        sum[0], sum[1], sum[2], sum[3], sum[4], sum[5]
    );
}
