//! Simulator sweep: ctcp over a 10 Mbit/s link across RTT × loss, bursty loss, reordering,
//! and fairness against a Cubic-model flow. Prints a table and writes one JSON object per
//! line to `benches/results/sim-sweep.json`.
//!
//! `cargo run --release -p ctcp-benches --bin sim-sweep [-- --rtt 500 --loss 0.2 --mb 20 --seed-offset N --out FILE | --no-json]`
//! (`--seed-offset` or `SIM_SEED_OFFSET` shifts every cell's seed, for multi-seed means; 0 keeps
//! the historical seeds).
//!
//! `--jitter` runs the jitter class instead (RTT varying by ±25 % of its mean, uniform and
//! normal, FIFO and reordering, Bernoulli and Gilbert loss, 50–500 ms), `--large-pipe` a
//! 100 Mbit/s × 600 ms link at 1 % loss (200 MB unless `--mb`), and `--asymmetric` links
//! whose return path runs at a tenth of the forward rate; `--rtt`/`--loss` narrow them.

use anyhow::Context;
use ctcp_proto::TransportConfig;
use ctcp_sim::ctcp::{run_fairness_phases, run_transfer_on, sweep_config, sweep_seed};
use ctcp_sim::{jain, JitterDist, LinkSpec, LossModel, Seed};
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
  --extra-only     only the Gilbert, reordering and fairness rows
  --jitter         the jitter class (±25 % RTT jitter; uniform/normal; FIFO/reordering)
  --jitter-frac F  jitter as a fraction of the RTT either side of the mean (default 0.25)
  --large-pipe     100 Mbit/s, 600 ms, 1 % loss, 200 MB
  --asymmetric     return path at a tenth of the forward rate, 100-600 ms, 0-10 % loss";

/// Which family of cells to run.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Family {
    /// RTT × Bernoulli loss, plus Gilbert, reordering and fairness rows.
    Classic,
    /// RTT jitter of ± a fraction of the RTT.
    Jitter,
    /// 100 Mbit/s × 600 ms.
    LargePipe,
    /// Return path at a tenth of the forward rate.
    Asymmetric,
}

struct Args {
    rtts: Vec<u64>,
    losses: Vec<f64>,
    mb: u64,
    extra: bool,
    out: Option<String>,
    seed_offset: u64,
    family: Family,
    jitter_frac: f64,
    rtts_given: bool,
    losses_given: bool,
    mb_given: bool,
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
        family: Family::Classic,
        jitter_frac: 0.25,
        rtts_given: false,
        losses_given: false,
        mb_given: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        let mut v = || it.next().context("missing value");
        match k.as_str() {
            "--rtt" => {
                a.rtts = v()?.split(',').map(str::parse).collect::<Result<_, _>>()?;
                a.extra = false;
                a.rtts_given = true;
            }
            "--loss" => {
                a.losses = v()?.split(',').map(str::parse).collect::<Result<_, _>>()?;
                a.extra = false;
                a.losses_given = true;
            }
            "--mb" => {
                a.mb = v()?.parse()?;
                a.mb_given = true;
            }
            "--jitter" => a.family = Family::Jitter,
            "--jitter-frac" => a.jitter_frac = v()?.parse()?,
            "--large-pipe" => a.family = Family::LargePipe,
            "--asymmetric" => a.family = Family::Asymmetric,
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
    if a.family != Family::Classic && a.out.as_deref() == Some("benches/results/sim-sweep.json") {
        let name = match a.family {
            Family::Jitter => "jitter",
            Family::LargePipe => "large-pipe",
            _ => "asymmetric",
        };
        a.out = Some(format!("benches/results/sim-sweep-{name}.json"));
    }
    Ok(a)
}

/// One transfer of the sweep: its label and links.
struct Cell {
    scenario: String,
    rtt: u64,
    loss: f64,
    link: LinkSpec,
    /// The return direction, when it differs from `link`.
    ret: Option<LinkSpec>,
}

/// The cells of a non-classic family.
fn family_cells(a: &Args) -> Vec<Cell> {
    let pick = |given: bool, v: &[u64], default: &[u64]| -> Vec<u64> {
        if given {
            v.to_vec()
        } else {
            default.to_vec()
        }
    };
    let pickf = |given: bool, v: &[f64], default: &[f64]| -> Vec<f64> {
        if given {
            v.to_vec()
        } else {
            default.to_vec()
        }
    };
    let bern = |p: f64| {
        if p > 0.0 {
            LossModel::Bernoulli(p)
        } else {
            LossModel::None
        }
    };
    let mut cells = Vec::new();
    match a.family {
        Family::Classic => {}
        Family::Jitter => {
            for rtt in pick(a.rtts_given, &a.rtts, &[50, 100, 200, 500]) {
                let spread = Duration::from_millis(rtt).mul_f64(2.0 * a.jitter_frac);
                for (dist, dname) in [
                    (JitterDist::Uniform, "uniform"),
                    (JitterDist::Normal, "normal"),
                ] {
                    for reorder in [false, true] {
                        let mut losses: Vec<(LossModel, f64, &str)> =
                            pickf(a.losses_given, &a.losses, &[0.0, 0.01, 0.05])
                                .into_iter()
                                .map(|p| (bern(p), p, ""))
                                .collect();
                        if dist == JitterDist::Uniform {
                            losses.push((
                                LossModel::Gilbert {
                                    mean: 0.05,
                                    burst: 4.0,
                                },
                                0.05,
                                "-gilbert",
                            ));
                        }
                        for (model, p, tag) in losses {
                            let link = LinkSpec::new(RATE, Duration::from_millis(rtt))
                                .loss(model)
                                .rtt_jitter(spread, dist, reorder);
                            let r = if reorder { "-reorder" } else { "" };
                            cells.push(Cell {
                                scenario: format!("j-{dname}{r}{tag}"),
                                rtt,
                                loss: p,
                                link,
                                ret: None,
                            });
                        }
                    }
                }
            }
        }
        Family::LargePipe => {
            for rtt in pick(a.rtts_given, &a.rtts, &[600]) {
                for p in pickf(a.losses_given, &a.losses, &[0.01]) {
                    let link = LinkSpec::new(100_000_000, Duration::from_millis(rtt)).loss(bern(p));
                    cells.push(Cell {
                        scenario: "large-pipe".into(),
                        rtt,
                        loss: p,
                        link,
                        ret: None,
                    });
                }
            }
        }
        Family::Asymmetric => {
            for rtt in pick(a.rtts_given, &a.rtts, &[100, 300, 600]) {
                for p in pickf(a.losses_given, &a.losses, &[0.0, 0.01, 0.05, 0.10]) {
                    let link = LinkSpec::new(RATE, Duration::from_millis(rtt)).loss(bern(p));
                    let ret = LinkSpec {
                        rate_bps: Some(RATE / 10),
                        ..link
                    };
                    cells.push(Cell {
                        scenario: "asym-10".into(),
                        rtt,
                        loss: p,
                        link,
                        ret: Some(ret),
                    });
                }
            }
        }
    }
    cells
}

fn main() -> anyhow::Result<()> {
    let mut args = parse_args()?;
    if args.family == Family::LargePipe && !args.mb_given {
        args.mb = 200;
    }
    let total = args.mb * 1_000_000;
    // Offset 0 keeps the historical seeds; others shift every cell's seed.
    // The fairness rows shift their seeds by the offset the same way as `sweep_seed`.
    let seed_mix = args.seed_offset.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let mut rows = Vec::new();
    println!(
        "{:<22} {:>6} {:>6} {:>10} {:>6} {:>6} {:>7} {:>6} {:>8} {:>8} {:>5} {:>7} {:>6} {:>5}",
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
        "ack",
        "bkoff"
    );
    let mut run = |scenario: &str,
                   rtt: u64,
                   loss: f64,
                   link: LinkSpec,
                   ret: Option<LinkSpec>|
     -> anyhow::Result<()> {
        let seed = Seed(sweep_seed(rtt, loss, args.seed_offset));
        let deadline = Duration::from_secs(600);
        let r = run_transfer_on(
            &link,
            &ret.unwrap_or(link),
            sweep_config(),
            total,
            None,
            seed,
            deadline,
        )
        .map_err(|e| anyhow::anyhow!("{e}"))?;
        let rate = link.rate_bps.unwrap_or(RATE) as f64;
        let eff = r.goodput_bps / (rate * (1.0 - loss));
        let eff_steady = r.steady_goodput_bps / (rate * (1.0 - loss));
        let eff_open = r.open_goodput_bps / (rate * (1.0 - loss));
        let eff_10s = r.goodput_after_10s_bps / (rate * (1.0 - loss));
        let t90 = r.time_to_90pct.map(|d| d.as_secs_f64());
        println!(
            "{:<22} {:>6} {:>6.3} {:>10.0} {:>6.3} {:>6.3} {:>7.3} {:>6.3} {:>8.1} {:>8} {:>5} {:>7.3} {:>6.3} {:>5}",
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
            r.ack_per_goodput,
            r.sender_stats.map_or(0, |s| s.backoffs)
        );
        rows.push(json!({
            "scenario": scenario, "rtt_ms": rtt, "loss": loss, "goodput_bps": r.goodput_bps,
            "efficiency": eff, "efficiency_from_open": eff_open, "efficiency_after_10s": eff_10s,
            "rate_bps": rate, "jitter_ms": link.jitter.map(|j| j.as_secs_f64() * 1e3),
            "return_rate_bps": ret.and_then(|r| r.rate_bps),
            "backoffs": r.sender_stats.map(|s| s.backoffs), "efficiency_steady": eff_steady, "repair_overhead": r.repair_overhead, "wire_per_goodput": r.wire_per_goodput,
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
    for c in family_cells(&args) {
        run(&c.scenario, c.rtt, c.loss, c.link, c.ret)?;
    }
    if args.family != Family::Classic {
        args.rtts.clear();
        args.extra = false;
    }
    for &rtt in &args.rtts {
        for &loss in &args.losses {
            let link = LinkSpec::new(RATE, Duration::from_millis(rtt)).loss(if loss > 0.0 {
                LossModel::Bernoulli(loss)
            } else {
                LossModel::None
            });
            run("bernoulli", rtt, loss, link, None)?;
        }
    }
    if args.extra {
        for rtt in [100, 500] {
            let link = LinkSpec::new(RATE, Duration::from_millis(rtt)).loss(LossModel::Gilbert {
                mean: 0.05,
                burst: 4.0,
            });
            run("gilbert", rtt, 0.05, link, None)?;
            let link = LinkSpec::new(RATE, Duration::from_millis(rtt))
                .reorder(0.02, Duration::from_millis(50));
            run("reorder", rtt, 0.0, link, None)?;
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
