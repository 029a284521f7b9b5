//! Simulator sweep: ctcp over a 10 Mbit/s link across RTT × loss, bursty loss, reordering,
//! and fairness against a Cubic-model flow. Prints a table and writes one JSON object per
//! line to `benches/results/sim-sweep.json`.
//!
//! `cargo run --release -p ctcp-benches --bin sim-sweep [-- --rtt 500 --loss 0.2 --mb 20 --seed-offset N --out FILE | --no-json]`
//! (`--seed-offset` or `SIM_SEED_OFFSET` shifts every cell's seed, for multi-seed means; 0 keeps
//! the historical seeds).

use anyhow::Context;
use ctcp_proto::TransportConfig;
use ctcp_sim::ctcp::{run_fairness_phases, run_transfer, sweep_config, sweep_seed};
use ctcp_sim::{jain, LinkSpec, LossModel, Seed};
use serde_json::json;
use std::io::Write;
use std::time::Duration;

const RATE: u64 = 10_000_000;
/// Fairness runs per RTT, the Cubic flow starting 250 ms later in each.
const FAIRNESS_PHASES: u32 = 4;

const USAGE: &str = "usage: sim-sweep [--rtt MS,..] [--loss P,..] [--mb N] [--seed-offset N] \
[--out FILE | --no-json] [--extra-only]
  --rtt / --loss   sweep only these cells (and skip the Gilbert, reordering and fairness rows)
  --seed-offset N  shift every cell's seed (also SIM_SEED_OFFSET); 0 keeps the historical seeds
  --out FILE       write the JSON rows to FILE (default benches/results/sim-sweep.json)
  --no-json        print the table only
  --extra-only     only the Gilbert, reordering and fairness rows";

struct Args {
    rtts: Vec<u64>,
    losses: Vec<f64>,
    mb: u64,
    extra: bool,
    out: Option<String>,
    seed_offset: u64,
}

fn parse_args() -> anyhow::Result<Args> {
    let mut a = Args {
        rtts: vec![20, 100, 500, 600],
        losses: vec![0.0, 0.01, 0.025, 0.05, 0.10, 0.20, 0.30],
        mb: 20,
        extra: true,
        out: Some("benches/results/sim-sweep.json".into()),
        seed_offset: std::env::var("SIM_SEED_OFFSET")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0),
    };
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        let mut v = || it.next().context("missing value");
        match k.as_str() {
            "--rtt" => {
                a.rtts = v()?.split(',').map(str::parse).collect::<Result<_, _>>()?;
                a.extra = false;
            }
            "--loss" => {
                a.losses = v()?.split(',').map(str::parse).collect::<Result<_, _>>()?;
                a.extra = false;
            }
            "--mb" => a.mb = v()?.parse()?,
            "--no-json" => a.out = None,
            "--out" => a.out = Some(v()?),
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            "--seed-offset" => a.seed_offset = v()?.parse()?,
            "--extra-only" => {
                a.rtts.clear();
                a.extra = true;
            }
            other => anyhow::bail!("unknown argument {other}\n{USAGE}"),
        }
    }
    Ok(a)
}

fn main() -> anyhow::Result<()> {
    let args = parse_args()?;
    let total = args.mb * 1_000_000;
    // Offset 0 keeps the historical seeds; others shift every cell's seed.
    // The fairness rows shift their seeds by the offset the same way as `sweep_seed`.
    let seed_mix = args.seed_offset.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let mut rows = Vec::new();
    println!(
        "{:<12} {:>6} {:>6} {:>10} {:>6} {:>6} {:>7} {:>6} {:>8} {:>8} {:>5} {:>7} {:>6}",
        "scenario",
        "rtt",
        "loss",
        "goodput",
        "eff",
        "effss",
        "repair",
        "wire",
        "p99ms",
        "t90s",
        "ok",
        "effopen",
        "ack"
    );
    let mut run = |scenario: &str, rtt: u64, loss: f64, link: LinkSpec| -> anyhow::Result<()> {
        let seed = Seed(sweep_seed(rtt, loss, args.seed_offset));
        let deadline = Duration::from_secs(600);
        let r = run_transfer(&link, sweep_config(), total, seed, deadline)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        let eff = r.goodput_bps / (RATE as f64 * (1.0 - loss));
        let eff_steady = r.steady_goodput_bps / (RATE as f64 * (1.0 - loss));
        let eff_open = r.open_goodput_bps / (RATE as f64 * (1.0 - loss));
        let t90 = r.time_to_90pct.map(|d| d.as_secs_f64());
        println!(
            "{:<12} {:>6} {:>6.3} {:>10.0} {:>6.3} {:>6.3} {:>7.3} {:>6.3} {:>8.1} {:>8} {:>5} {:>7.3} {:>6.3}",
            scenario,
            rtt,
            loss,
            r.goodput_bps,
            eff,
            eff_steady,
            r.repair_overhead,
            r.wire_per_goodput,
            r.p99_extra_delay_ms,
            t90.map_or("-".into(), |t| format!("{t:.2}")),
            r.bytes_ok,
            eff_open,
            r.ack_per_goodput
        );
        rows.push(json!({
            "scenario": scenario, "rtt_ms": rtt, "loss": loss, "goodput_bps": r.goodput_bps,
            "efficiency": eff, "efficiency_from_open": eff_open, "efficiency_steady": eff_steady, "repair_overhead": r.repair_overhead, "wire_per_goodput": r.wire_per_goodput,
            "ack_per_goodput": r.ack_per_goodput,
            "bytes_ok": r.bytes_ok, "jain": null, "p99_extra_delay_ms": r.p99_extra_delay_ms, "p99_write_to_read_ms": r.p99_write_to_read_ms,
            "longest_stall_s": r.longest_stall.as_secs_f64(),
            "time_to_90pct_s": t90, "seed": seed.0,
            "repair_origin": r.sender_stats.map(|s| s.repair_origin),
            "repairs_useless": r.receiver_stats.map(|s| s.repairs_useless),
            // Declared lost over all datagrams sent (ACK-only and handshake packets
            // included): a little under the loss the link drew.
            "loss_seen": r.sender_stats.map(|s| s.lost as f64 / (s.datagrams_sent as f64).max(1.0)),
        }));
        Ok(())
    };
    for &rtt in &args.rtts {
        for &loss in &args.losses {
            let link = LinkSpec::new(RATE, Duration::from_millis(rtt)).loss(if loss > 0.0 {
                LossModel::Bernoulli(loss)
            } else {
                LossModel::None
            });
            run("bernoulli", rtt, loss, link)?;
        }
    }
    if args.extra {
        for rtt in [100, 500] {
            let link = LinkSpec::new(RATE, Duration::from_millis(rtt)).loss(LossModel::Gilbert {
                mean: 0.05,
                burst: 4.0,
            });
            run("gilbert", rtt, 0.05, link)?;
            let link = LinkSpec::new(RATE, Duration::from_millis(rtt))
                .reorder(0.02, Duration::from_millis(50));
            run("reorder", rtt, 0.0, link)?;
        }
        // The Cubic flow starts 0, ¼, ½ and ¾ of a second after ctcp: without random loss
        // each run is deterministic, and the phase of the two sawtooths moves a single
        // run's split by several points of Jain; the row reports the mean of the four
        // runs' goodputs and Jain indices, and the worst.
        for rtt in [20u64, 100, 500] {
            let runs: Vec<(f64, f64, f64)> = run_fairness_phases(
                5_000_000,
                Duration::from_millis(rtt),
                &TransportConfig::default(),
                Seed((7 + rtt).wrapping_add(seed_mix)),
                Duration::from_secs(30),
                Duration::from_secs(90),
                FAIRNESS_PHASES,
            )
            .map_err(|e| anyhow::anyhow!("{e}"))?
            .into_iter()
            .map(|(a, b)| (a, b, jain(&[a, b])))
            .collect();
            let n = runs.len() as f64;
            let a = runs.iter().map(|r| r.0).sum::<f64>() / n;
            let b = runs.iter().map(|r| r.1).sum::<f64>() / n;
            let j = runs.iter().map(|r| r.2).sum::<f64>() / n;
            let j_min = runs.iter().map(|r| r.2).fold(1.0, f64::min);
            println!(
                "{:<12} {:>6} {:>6} ctcp {:>9.0} cubic {:>9.0} jain {:.3} (worst of {} {:.3})",
                "fairness",
                rtt,
                0,
                a,
                b,
                j,
                runs.len(),
                j_min
            );
            let per_run: Vec<f64> = runs.iter().map(|r| r.2).collect();
            rows.push(json!({"scenario": "fairness", "rtt_ms": rtt, "loss": 0.0, "goodput_bps": a, "cubic_bps": b,
                "efficiency": (a + b) / 5e6, "bytes_ok": true, "jain": j, "jain_min": j_min, "jain_runs": per_run}));
        }
    }
    if let Some(path) = args.out {
        let mut f = std::fs::File::create(&path).with_context(|| format!("writing {path}"))?;
        for r in rows {
            writeln!(f, "{r}")?;
        }
        println!("wrote {path}");
    }
    Ok(())
}
