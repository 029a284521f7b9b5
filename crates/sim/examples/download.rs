//! A download over an asymmetric link: the server sends, its packets on the fast
//! direction, the client's requests and ACKs on a return path at a tenth of the rate (a
//! satellite terminal's return channel). What the server's start-up reads of the downlink
//! decides how fast it ramps.
//!
//! `cargo run --release -p ctcp-sim --example download -- [RTT_MS LOSS MB SEEDS]` prints
//! per seed the goodput from the request's first write to the reply's last byte, and its
//! efficiency against the downlink's 10 Mbit/s.
#![allow(clippy::print_stdout)]

use ctcp_sim::ctcp::{run_exchange_on, sweep_config, ExchangeSpec};
use ctcp_sim::{LinkSpec, LossModel, Seed};
use std::time::Duration;

const RATE: u64 = 10_000_000;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize, d: f64| args.get(i).and_then(|a| a.parse().ok()).unwrap_or(d);
    let rtt = Duration::from_millis(arg(0, 600.0) as u64);
    let loss = arg(1, 0.0);
    let bytes = (arg(2, 20.0) * 1e6) as u64;
    let seeds = arg(3, 3.0) as u64;
    let down = LinkSpec::new(RATE, rtt).loss(LossModel::Bernoulli(loss));
    let up = LinkSpec {
        rate_bps: Some(RATE / 10),
        ..down
    };
    for i in 0..seeds {
        let seed = Seed(0xd0_0000 + i);
        let spec = ExchangeSpec {
            request: 300,
            response: bytes,
            after: Duration::from_secs(1),
            think: Duration::ZERO,
        };
        match run_exchange_on(
            &up,
            &down,
            sweep_config(),
            spec,
            seed,
            Duration::from_secs(600),
        ) {
            Ok(r) => {
                let secs = r.took.map_or(f64::NAN, |t| t.as_secs_f64());
                let goodput = bytes as f64 * 8.0 / secs;
                println!(
                    "{} ms {:.0} % seed {:#x}: {:.2} Mbit/s ({:.3}) in {secs:.2} s, ok {}",
                    rtt.as_millis(),
                    loss * 100.0,
                    seed.0,
                    goodput / 1e6,
                    goodput / (RATE as f64 * (1.0 - loss)),
                    r.bytes_ok
                );
            }
            Err(e) => println!("seed {:#x}: {e}", seed.0),
        }
    }
}
