//! Useless repairs at the end of bulk transfers (tuning aid): for each long-path, high-loss
//! sweep cell and seed offset, efficiency, repair overhead, the sender's repairs by origin
//! and the receiver's useless repairs, at the last byte and 3 s later (repairs still in
//! flight when the last byte is read arrive useless after it). `wire+` counts the sender's
//! bytes until 3 s after the last byte, `late` the repairs it sent after that byte.
//! `cargo run --release -p ctcp-sim --example tailstat -- [RTT_MS,.. [LOSS,.. [OFFSETS]]]`
#![allow(clippy::unwrap_used, clippy::print_stdout)]
use ctcp_sim::ctcp::{sweep_config, sweep_seed, CtcpPeer};
use ctcp_sim::{LinkSpec, LossModel, Seed, Sim};
use std::time::Duration;

const RATE: u64 = 10_000_000;
const TOTAL: u64 = 20_000_000;

fn list<T>(a: Option<&String>, d: &[T]) -> Vec<T>
where
    T: Clone + std::str::FromStr,
    T::Err: std::fmt::Debug,
{
    a.map_or_else(
        || d.to_vec(),
        |s| s.split(',').map(|x| x.parse().unwrap()).collect(),
    )
}

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let rtts: Vec<u64> = list(a.get(1), &[500, 600]);
    let losses: Vec<f64> = list(a.get(2), &[0.2, 0.3]);
    let offsets: Vec<u64> = list(a.get(3), &[0, 1, 2, 3]);
    println!(
        "{:>4} {:>4} {:>3} {:>6} {:>7} {:>7} {:>7} {:>22} {:>5} {:>5} {:>5} {:>3}",
        "rtt",
        "loss",
        "off",
        "eff",
        "repair",
        "wire",
        "wire+",
        "origin d/c/t/m",
        "usel",
        "usel+",
        "late",
        "ok"
    );
    let mut sums: std::collections::BTreeMap<(u64, u64), [f64; 7]> = Default::default();
    for &rtt in &rtts {
        for &loss in &losses {
            for &off in &offsets {
                let seed = Seed(sweep_seed(rtt, loss, off));
                let link = LinkSpec::new(RATE, Duration::from_millis(rtt))
                    .loss(LossModel::Bernoulli(loss));
                let mut sim = Sim::with_seed(seed);
                let start = sim.now();
                let (f, r) = sim.add_link(&link);
                let psk = [7u8; 32];
                let tx = CtcpPeer::sender(sweep_config(), &psk, seed.0, start, TOTAL);
                let rx = CtcpPeer::receiver(sweep_config(), &psk, seed.0 ^ 0xdead_beef);
                let flow = sim.add_flow(tx, rx, f, r);
                sim.set_step_limit(200_000_000);
                sim.run_while_until(start + Duration::from_secs(600), |s| {
                    !s.server::<CtcpPeer>(flow)
                        .is_some_and(|r| r.delivery.finished)
                })
                .unwrap();
                let rxp = sim.server::<CtcpPeer>(flow).unwrap();
                let d = rxp.delivery.clone();
                let ok = d.bytes_ok == TOTAL && d.bytes_bad == 0 && d.finished;
                let dur = d.finished_at.unwrap().saturating_duration_since(start);
                let eff =
                    d.bytes_ok as f64 * 8.0 / dur.as_secs_f64() / (RATE as f64 * (1.0 - loss));
                let s = sim.client::<CtcpPeer>(flow).unwrap().stats().unwrap();
                let rs = rxp.stats().unwrap();
                let repair = s.repair_bytes_sent as f64 / s.source_bytes_sent as f64;
                let wire = s.bytes_sent as f64 / d.bytes_ok as f64;
                sim.run_for(Duration::from_secs(3)).unwrap();
                let s2 = sim.client::<CtcpPeer>(flow).unwrap().stats().unwrap();
                let rs2 = sim.server::<CtcpPeer>(flow).unwrap().stats().unwrap();
                let late = s2.repair_sent - s.repair_sent;
                let wire_all = s2.bytes_sent as f64 / d.bytes_ok as f64;
                println!(
                    "{:>4} {:>4.2} {:>3} {:>6.4} {:>7.4} {:>7.4} {:>7.4} {:>22} {:>5} {:>5} {:>5} {:>3}",
                    rtt,
                    loss,
                    off,
                    eff,
                    repair,
                    wire,
                    wire_all,
                    format!("{:?}", s2.repair_origin),
                    rs.repairs_useless,
                    rs2.repairs_useless,
                    late,
                    ok as u8
                );
                let e = sums.entry((rtt, (loss * 100.0) as u64)).or_default();
                e[0] += eff;
                e[1] += repair;
                e[2] += rs2.repairs_useless as f64;
                e[3] += (rs2.repairs_useless - rs.repairs_useless) as f64;
                e[4] += wire;
                e[5] += wire_all;
                e[6] += late as f64;
            }
        }
    }
    let n = offsets.len() as f64;
    for ((rtt, l), e) in sums {
        println!(
            "mean {rtt} {l}%: eff {:.4} repair {:.4} wire {:.4} wire+ {:.4} useless {:.1} (after last byte {:.1}) sent after it {:.1}",
            e[0] / n,
            e[1] / n,
            e[4] / n,
            e[5] / n,
            e[2] / n,
            e[3] / n,
            e[6] / n
        );
    }
}
