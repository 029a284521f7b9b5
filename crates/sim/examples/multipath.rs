//! Multipath sweep (issue 29): the scenarios of `tests/multipath.rs` at full size, with
//! their figures: aggregation of a long fat path and a short lossy one, failover of
//! either path and its return, two 20 %-loss paths, the redundant policy, and the best
//! single path of each pair for comparison.
//!
//! `cargo run --release -p ctcp-sim --example multipath [-- --seed N] [--only a|b|c|d]`
//! (`--only`: the scenarios of that letter alone; `MULTIPATH_STALLS=N` lists the N
//! longest stalls of each run by when they began).

use ctcp_proto::{PathPolicy, TransportConfig};
use ctcp_sim::ctcp::Pace;
use ctcp_sim::multipath::{run_multipath, MultipathReport, MultipathSpec, PathSpec};
use ctcp_sim::{LinkSpec, LossModel};
use std::time::Duration;

fn link(mbit: u64, rtt_ms: u64, loss: f64) -> LinkSpec {
    LinkSpec {
        loss: LossModel::Bernoulli(loss),
        ..LinkSpec::new(mbit * 1_000_000, Duration::from_millis(rtt_ms))
    }
}

fn config(policy: PathPolicy) -> TransportConfig {
    TransportConfig {
        stream_send_buffer: 4 << 20,
        path_policy: policy,
        ..TransportConfig::default()
    }
}

/// The value after `flag` on the command line.
fn arg(flag: &str) -> Option<String> {
    std::env::args().skip_while(|a| a != flag).nth(1)
}

/// Whether the scenario group `letter` runs (`--only`).
fn wanted(letter: &str) -> bool {
    arg("--only").is_none_or(|o| o == letter)
}

fn run(name: &str, spec: &MultipathSpec, ideal_mbit: f64) -> MultipathReport {
    let r = run_multipath(spec).unwrap_or_else(|e| panic!("{name}: {e}"));
    println!(
        "{name:<34} {:>5} MB ok={} {:>6.2} s goodput {:>6.2} Mbit/s after-10s {:>6.2} \
         (x{:.3} of {ideal_mbit:.2}) wire {:.3} stall {:>5.0} ms at {:>5.1} s p99 {:>6.1} ms",
        spec.total / 1_000_000,
        r.bytes_ok,
        r.duration.as_secs_f64(),
        r.goodput_bps / 1e6,
        r.goodput_after_10s_bps / 1e6,
        r.goodput_after_10s_bps / 1e6 / ideal_mbit,
        r.wire_per_goodput,
        r.longest_stall.as_secs_f64() * 1e3,
        r.longest_stall_at.as_secs_f64(),
        r.p99_extra_delay_ms,
    );
    if let Some(n) = std::env::var("MULTIPATH_STALLS")
        .ok()
        .and_then(|n| n.parse::<usize>().ok())
    {
        let mut gaps: Vec<(std::time::Duration, std::time::Duration)> = r
            .progress
            .windows(2)
            .map(|w| (w[1].0 - w[0].0, w[0].0))
            .collect();
        gaps.sort_by(|a, b| b.cmp(a));
        let list: Vec<String> = gaps
            .iter()
            .take(n)
            .map(|(d, at)| {
                format!(
                    "{:.0} ms at {:.2} s",
                    d.as_secs_f64() * 1e3,
                    at.as_secs_f64()
                )
            })
            .collect();
        println!("    stalls: {}", list.join(", "));
    }
    if r.receiver_path_bytes.len() > 1 {
        let secs = r.duration.as_secs_f64().max(1e-9);
        let per: Vec<String> = r
            .receiver_path_bytes
            .iter()
            .map(|b| format!("{:.1} kbit/s", *b as f64 * 8.0 / secs / 1e3))
            .collect();
        println!("    return bytes per path (ACKs): {}", per.join(" / "));
    }
    if std::env::var_os("MULTIPATH_STATS").is_some() {
        println!("    sender {:?}", r.sender_stats);
        println!("    receiver {:?}", r.receiver_stats);
    }
    r
}

fn main() {
    let seed: u64 = arg("--seed").and_then(|s| s.parse().ok()).unwrap_or(29);
    let long = link(10, 600, 0.01);
    let short = link(5, 60, 0.05);
    let spec = |paths: Vec<PathSpec>, total: u64, policy: PathPolicy| MultipathSpec {
        paths,
        config: config(policy),
        total,
        pace: None,
        seed,
        deadline: Duration::from_secs(300),
    };
    let agg_ideal = 10.0 * 0.99 + 5.0 * 0.95;
    if wanted("a") {
        aggregate(&spec, long, short, agg_ideal);
    }
    if wanted("b") {
        failover(&spec, long, short, agg_ideal);
    }
    if wanted("c") {
        two_lossy(&spec);
    }
    if wanted("d") {
        redundant(&spec);
    }
}

type Spec<'a> = &'a dyn Fn(Vec<PathSpec>, u64, PathPolicy) -> MultipathSpec;

fn aggregate(spec: Spec<'_>, long: LinkSpec, short: LinkSpec, agg_ideal: f64) {
    run(
        "(a) 10/600/1% + 5/60/5% aggregate",
        &spec(
            vec![PathSpec::new(long), PathSpec::new(short)],
            40_000_000,
            PathPolicy::Aggregate,
        ),
        agg_ideal,
    );
    run(
        "    10/600/1% alone",
        &spec(vec![PathSpec::new(long)], 40_000_000, PathPolicy::Aggregate),
        9.9,
    );
    run(
        "    5/60/5% alone",
        &spec(
            vec![PathSpec::new(short)],
            20_000_000,
            PathPolicy::Aggregate,
        ),
        4.75,
    );
}

fn failover(spec: Spec<'_>, long: LinkSpec, short: LinkSpec, agg_ideal: f64) {
    let (down, up) = (Duration::from_secs(15), Duration::from_secs(35));
    for (name, paths, survivor_rtt) in [
        (
            "(b) 60 ms path down 15-35 s",
            vec![PathSpec::new(long), PathSpec::new(short).down(down, up)],
            600,
        ),
        (
            "(b) 600 ms path down 15-35 s",
            vec![PathSpec::new(long).down(down, up), PathSpec::new(short)],
            60,
        ),
    ] {
        let r = run(
            name,
            &spec(paths, 60_000_000, PathPolicy::Aggregate),
            agg_ideal,
        );
        let back: Vec<String> = (0..2)
            .map(|i| {
                r.path_busy_after(i, up, Duration::from_millis(500), 50)
                    .map_or("never".into(), |t| {
                        format!("{:.1} s", (t - up).as_secs_f64())
                    })
            })
            .collect();
        let ms = |(d, at): (Duration, Duration)| {
            format!(
                "{:.0} ms at {:.1} s",
                d.as_secs_f64() * 1e3,
                at.as_secs_f64()
            )
        };
        let five = Duration::from_secs(5);
        println!(
            "    longest stall: 5 s before the cut {}; from the cut on {} (bound 2 x {survivor_rtt} ms \
             + 200 ms = {} ms); 5 s from the return {}; paths busy again after the return: {}",
            ms(r.longest_stall_in(down - five, down)),
            ms(r.longest_stall_in(down, down + five)),
            2 * survivor_rtt + 200,
            ms(r.longest_stall_in(up, up + five)),
            back.join(" / ")
        );
    }
}

fn two_lossy(spec: Spec<'_>) {
    let lossy = link(10, 100, 0.2);
    run(
        "(c) 2 x 10/100/20% aggregate",
        &spec(
            vec![PathSpec::new(lossy), PathSpec::new(lossy)],
            40_000_000,
            PathPolicy::Aggregate,
        ),
        2.0 * 10.0 * 0.8,
    );
    println!("    wire budget 1.05/(1-0.2) = {:.3}", 1.05 / 0.8);
}

fn redundant(spec: Spec<'_>) {
    for (name, policy) in [
        ("(d) redundant 2 x 5% 1 Mbit/s app", PathPolicy::Redundant),
        ("    aggregate, same paths and app", PathPolicy::Aggregate),
    ] {
        let paths = vec![
            PathSpec::new(link(10, 60, 0.05)),
            PathSpec::new(link(10, 100, 0.05)),
        ];
        let mut s = spec(paths, 4_000_000, policy);
        s.pace = Some(Pace {
            chunk: 1250,
            every: Duration::from_millis(10),
        });
        run(name, &s, 1.0);
    }
    println!("    p99 bound: half the faster RTT = 30 ms");
}
