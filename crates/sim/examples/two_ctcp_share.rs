//! Two ctcp sessions sharing a 5 Mbit/s one-BDP-queue bottleneck (the second starting a
//! quarter second later), 30 s warm-up, 60 s measured: each one's share, and the mean
//! smoothed RTT both senders see over the measured part (the standing queue).
//! `cargo run --release -p ctcp-sim --example two_ctcp_share -- RTT_MS,..`
#![allow(clippy::unwrap_used, clippy::print_stdout)]
use ctcp_proto::TransportConfig;
use ctcp_sim::ctcp::CtcpPeer;
use ctcp_sim::{LinkSpec, Seed, Sim};
use std::time::Duration;

fn main() {
    let rtts: Vec<u64> = std::env::args().nth(1).map_or(vec![100, 500], |s| {
        s.split(',').map(|x| x.parse().unwrap()).collect()
    });
    for rtt_ms in rtts {
        let rtt = Duration::from_millis(rtt_ms);
        let spec = LinkSpec::new(5_000_000, rtt);
        let mut sim = Sim::with_seed(Seed(7 + rtt_ms));
        let start = sim.now();
        let fwd = spec.build_nodes(&mut sim);
        let psk = [7u8; 32];
        let huge = u64::MAX / 4;
        let flows: Vec<_> = (0..2u64)
            .map(|k| {
                let path = sim.add_path(fwd.iter().copied());
                let ret = LinkSpec::new(50_000_000, rtt).build_path(&mut sim);
                let at = start + Duration::from_millis(250) * k as u32;
                let tx = CtcpPeer::sender(TransportConfig::default(), &psk, 11 + k, at, huge);
                let rx = CtcpPeer::receiver(TransportConfig::default(), &psk, 12 + k);
                sim.add_flow(tx, rx, path, ret)
            })
            .collect();
        sim.set_step_limit(400_000_000);
        sim.run_until(start + Duration::from_secs(30)).unwrap();
        let got = |sim: &Sim| -> Vec<u64> {
            flows
                .iter()
                .map(|&f| sim.server::<CtcpPeer>(f).map_or(0, |r| r.delivery.bytes_ok))
                .collect()
        };
        let before = got(&sim);
        let (mut srtt_sum, mut n) = (0.0, 0u32);
        for step in 1..=600u32 {
            sim.run_until(start + Duration::from_secs(30) + Duration::from_millis(100) * step)
                .unwrap();
            for &f in &flows {
                if let Some(s) = sim.client::<CtcpPeer>(f).and_then(CtcpPeer::stats) {
                    srtt_sum += s.srtt.as_secs_f64();
                    n += 1;
                }
            }
        }
        let after = got(&sim);
        let d: Vec<f64> = after
            .iter()
            .zip(&before)
            .map(|(a, b)| (a - b) as f64)
            .collect();
        println!(
            "rtt {rtt_ms} ms: shares {:.3} / {:.3}, total {:.2} Mbit/s, mean srtt {:.0} ms",
            d[0] / (d[0] + d[1]),
            d[1] / (d[0] + d[1]),
            (d[0] + d[1]) * 8.0 / 60e6,
            srtt_sum / f64::from(n.max(1)) * 1000.0
        );
    }
}
