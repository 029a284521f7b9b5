//! Request/response latency over a lossy link, many seeds: how long a small exchange on a
//! standing session takes (what a proxied HTTP GET waits before its first byte).
//!
//! `cargo run --release -p ctcp-sim --example exchange -- RTT_MS LOSS SEEDS [REQUEST RESPONSE AFTER_MS THINK_MS]`
//! (`EXCHANGE_VERBOSE=1` prints both sides' statistics for each slow exchange).
#![allow(clippy::print_stdout)]

use ctcp_sim::ctcp::{run_exchange, sweep_config, ExchangeSpec};
use ctcp_sim::{LinkSpec, LossModel, Seed};
use std::time::Duration;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize, d: f64| args.get(i).and_then(|a| a.parse().ok()).unwrap_or(d);
    let rtt = Duration::from_millis(arg(0, 500.0) as u64);
    let loss = arg(1, 0.3);
    let seeds = arg(2, 200.0) as u64;
    let (req, resp) = (arg(3, 100.0) as u64, arg(4, 2000.0) as u64);
    let after = Duration::from_millis(arg(5, 1000.0) as u64);
    let think = Duration::from_millis(arg(6, 1.0) as u64);
    let link = LinkSpec::new(10_000_000, rtt).loss(LossModel::Bernoulli(loss));
    let mut took = Vec::new();
    let mut bad = 0;
    for i in 0..seeds {
        let r = run_exchange(
            &link,
            sweep_config(),
            ExchangeSpec {
                request: req,
                response: resp,
                after,
                think,
            },
            Seed(0xe7c4 + i),
            Duration::from_secs(120),
        );
        let r = match r {
            Ok(r) => r,
            Err(e) => {
                eprintln!("seed {i}: {e}");
                std::process::exit(1);
            }
        };
        if !r.bytes_ok {
            bad += 1;
        }
        if std::env::var_os("EXCHANGE_VERBOSE").is_some() && r.took.is_none_or(|t| t > rtt * 3 / 2)
        {
            let f = |s: Option<ctcp_proto::ConnectionStats>| {
                s.map(|s| {
                    format!(
                        "src {} rep {} origin {:?} lost {} loss {:.2} rx {}",
                        s.source_sent,
                        s.repair_sent,
                        s.repair_origin,
                        s.lost,
                        s.loss,
                        s.datagrams_received
                    )
                })
            };
            println!(
                "seed {i}: {:?} client [{}] server [{}]",
                r.took,
                f(r.client_stats).unwrap_or_default(),
                f(r.server_stats).unwrap_or_default()
            );
        }
        took.push(
            r.took
                .map_or(f64::INFINITY, |d| d.as_secs_f64() / rtt.as_secs_f64()),
        );
    }
    took.sort_by(f64::total_cmp);
    let q = |f: f64| took[((took.len() - 1) as f64 * f) as usize];
    let within = |k: f64| took.iter().filter(|&&t| t <= k).count() as f64 / took.len() as f64;
    println!(
        "rtt {} ms loss {loss}: exchange time in RTTs p50 {:.2} p90 {:.2} p99 {:.2} max {:.2}; within 1.5 RTT {:.2}, 2 RTT {:.2}; not byte-exact {bad}",
        rtt.as_millis(),
        q(0.5),
        q(0.9),
        q(0.99),
        took[took.len() - 1],
        within(1.5),
        within(2.0)
    );
}
