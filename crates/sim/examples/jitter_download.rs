//! One bulk download per seed over a 10 Mbit/s link with RTT jitter (uniform, FIFO unless
//! `JREORDER=1`) and Bernoulli loss, in the sweep's configuration with a 16-packet
//! handshake train: the whole-transfer efficiency (against the rate × (1 − loss)), and what
//! the first 2 s carried, lost and backed off. The seed spread of a cell is what one real
//! run of it samples from (docs/experiments/jitter.md, sessions 29 and 30).
//! `cargo run --release -p ctcp-sim --example jitter_download -- RTT_MS LOSS MB JITTER_MS [SEEDS] [FIRST_SEED]`
//! (`JITTER_MS` either side of the mean RTT, as the sweep's ±25 %: 125 at 500 ms).
#![allow(clippy::unwrap_used, clippy::print_stdout)]
use ctcp_proto::TransportConfig;
use ctcp_sim::ctcp::CtcpPeer;
use ctcp_sim::{JitterDist, LinkSpec, LossModel, Seed, Sim};
use std::time::Duration;

/// Link rate in bits per second.
const RATE: u64 = 10_000_000;
/// Resolution of the finishing time. Each step polls both endpoints once more (as a real
/// driver does whenever the application acts), which moves single seeds by up to 0.05
/// and the eight-seed mean by up to 0.005: compare means, at one step.
const STEP: Duration = Duration::from_millis(100);
/// The start-up span reported on its own.
const FIRST: Duration = Duration::from_secs(2);

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let arg = |i: usize| -> &str { a.get(i).map_or_else(|| usage(), String::as_str) };
    let rtt: u64 = arg(1).parse().unwrap();
    let loss: f64 = arg(2).parse().unwrap();
    let mb: f64 = arg(3).parse().unwrap();
    let jitter: u64 = arg(4).parse().unwrap();
    let seeds: u64 = a.get(5).map_or(8, |s| s.parse().unwrap());
    let first: u64 = a.get(6).map_or(1, |s| s.parse().unwrap());
    let bytes = (mb * 1e6) as u64;
    let mut effs = Vec::new();
    for seed in first..first + seeds {
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
        let mut sim = Sim::with_seed(Seed(seed));
        let start = sim.now();
        let (f, r) = sim.add_asymmetric_link(&link, &link);
        let cfg = TransportConfig {
            handshake_train: 16,
            ..ctcp_sim::ctcp::sweep_config()
        };
        let tx = CtcpPeer::sender(cfg.clone(), &[7; 32], seed, start, bytes);
        let rx = CtcpPeer::receiver(cfg, &[7; 32], seed ^ 0xdead_beef);
        let flow = sim.add_flow(tx, rx, f, r);
        let (mut early, mut end) = (None, None);
        for i in 1u32.. {
            let now = STEP * i;
            sim.run_until(start + now).unwrap();
            let rx = sim.server::<CtcpPeer>(flow).unwrap();
            let (got, finished) = (rx.delivery.bytes_ok, rx.delivery.finished);
            if now == FIRST {
                let stats = sim.client::<CtcpPeer>(flow).unwrap().stats();
                let (lost, backoffs) = stats.map_or((0, 0), |s| (s.lost, s.backoffs));
                early = Some((got, lost, backoffs));
            }
            if finished {
                assert_eq!(got, bytes, "seed {seed}: delivered bytes");
                end = Some(now.as_secs_f64());
                break;
            }
        }
        let end = end.unwrap();
        let eff = bytes as f64 * 8.0 / end / RATE as f64 / (1.0 - loss);
        effs.push(eff);
        let (got, lost, backoffs) = early.unwrap_or((bytes, 0, 0));
        println!(
            "seed {seed}: {end:.2} s, efficiency {eff:.3} | first {} s: {:.2} Mbit/s, {lost} lost, {backoffs} backoffs",
            FIRST.as_secs(),
            got as f64 * 8.0 / FIRST.as_secs_f64() / 1e6,
        );
    }
    let mean = effs.iter().sum::<f64>() / effs.len().max(1) as f64;
    println!("mean efficiency {mean:.4} over {} seeds", effs.len());
}

fn usage() -> ! {
    eprintln!("usage: jitter_download RTT_MS LOSS MB JITTER_MS [SEEDS] [FIRST_SEED]");
    std::process::exit(2)
}
