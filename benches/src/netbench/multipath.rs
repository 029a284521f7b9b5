//! `netbench --multipath` (issue 29): one download over two parallel paths between the
//! same two namespaces (`ctcp-linkem --path`), against what users would use instead, in
//! the same run on the same paths:
//!
//! ```text
//!              ══ path 0: 10.77.0.1 ── linkem0 ── 10.77.0.2 ══
//!  namespace A ══ path 1: 10.77.1.1 ── linkem1 ── 10.77.1.2 ══ namespace B
//!  curl, ctcp-forward                       http.server (plain :8000, MPTCP :8001), ctcp-reverse
//! ```
//!
//! Systems (`--mp-systems` picks some):
//! - `ctcp-mp`: one ctcp session over both paths (the forward's `paths`, one per source
//!   address). Run only when the forward build accepts the multipath configuration (a
//!   `--check-config` probe, or `--mp-config FILE` to supply another); otherwise its row
//!   says "not available in this build" with the probe's error.
//! - `ctcp-p0`, `ctcp-p1`: ctcp over one path (the forward's peer is that path's B address).
//! - `bbr-p0`, `bbr-p1`, `cubic-p0`, `cubic-p1`: kernel TCP over one path (`curl
//!   --interface` picks it: A's source address picks the path).
//! - `mptcp-cubic`, `mptcp-bbr`: kernel MPTCP, `mptcpize run curl` against an MPTCP
//!   origin (`mptcpize run python3 -m http.server`), `ip mptcp` limits on both sides and a
//!   `subflow` endpoint on path 1's address in A; the subflows use the named congestion
//!   control. Rows record the MPTCP join counters (`nstat`) and the bytes on each path.
//! - `sum`: no transfer, the sum of the paths' capacities `Σ rate·(1 − loss)`, the bound
//!   any system can reach.
//!
//! Cells (`--mp-cells` picks some):
//! - `aggregate`: path 0 10 Mbit/s, 600 ms, 1 %; path 1 5 Mbit/s, 60 ms, 5 %; a 40 MB
//!   download; whole-transfer goodput and steady state (from 10 s after curl started).
//! - `failover`: the same paths; when 30 % of the file has arrived (or 20 s passed) path
//!   `--failover-path` (default 0, the 10 Mbit/s one) is cut in both directions (linkem's
//!   control socket: what is on it is lost, nothing crosses until restored), and restored
//!   20 s later. Rows: byte-exactness, the longest delivery stall (the longest time the
//!   received file did not grow, polled every 10 ms) against the bound `2 × surviving
//!   RTT + 200 ms` (also split by when it began: before the cut, while the path was down,
//!   after the restoration), and the time from restoration until the restored path carries data
//!   again (≥ 10 % of its rate over a 200 ms statistics interval; linkem's statistics, so
//!   ±0.2 s).
//! - `flap`: the same paths; path `--failover-path` is taken away on the forward's side,
//!   its device in A set down (`ip link set dev linkemK down`: the forward's socket on it
//!   gets a link error at once) for 5 s, then set up with its route restored. The same
//!   stall fields as `failover`; the reuse time counts from the path's first A→B bytes
//!   after the outage (the forward's challenge) in linkem's statistics.
//! - `redundant`: two paths of 10 Mbit/s, 60 ms and 100 ms, 5 % loss each; no download
//!   but an application-limited 1 Mbit/s stream of timestamped 1,000-byte records from
//!   B to A through the SOCKS forward for `RECORD_SECS`, with the extra delivery delay
//!   (arrival − write − the faster path's one-way delay, 30 ms) at p50/p90/p99 (the
//!   namespaces share the host's clock). Systems `ctcp-mp` (aggregate),
//!   `ctcp-mp-redundant` (both proxies `--policy redundant`) and `ctcp-p0` (the faster
//!   path alone); the issue's bar is p99 ≤ ½ RTT of the faster path, 30 ms.
//! - `lossy`: two paths of 10 Mbit/s, 100 ms, 20 % loss; efficiency against the sum of
//!   capacities and wire bytes per goodput byte (both paths' B→A bytes) against the
//!   target `1.05 / (1 − p)`.
//!
//! Each ctcp system runs with a fresh proxy pair (cold session, as a first transfer).
//! Rows go to `benches/results/netbench-multipath.json`.

use super::link::{path_addr_a, path_addr_b, sysctl, Link, LinkSpec, LossModel, ADDR_B};
use super::procs::{in_ns, run_quiet, Proc};
use super::report;
use super::run::{steady_fields, Out};
use super::workload::{
    curl_watched, make_file, Bins, CtcpPair, DataFile, PairOptions, Servers, Transfer, Via,
    CTCP_PORT, SOCKS,
};
use anyhow::{bail, Context, Result};
use serde_json::{json, Value};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

/// Port of the MPTCP origin in namespace B (the plain one is [`super::workload::HTTP_PORT`]).
pub const MPTCP_PORT: u16 = 8001;

/// Steady state starts this long after curl started.
const STEADY_FROM_S: u64 = 10;

/// Every system the mode knows, in the order it runs them.
pub const SYSTEMS: [&str; 11] = [
    "ctcp-mp",
    "ctcp-mp-redundant",
    "ctcp-p0",
    "ctcp-p1",
    "bbr-p0",
    "bbr-p1",
    "cubic-p0",
    "cubic-p1",
    "mptcp-cubic",
    "mptcp-bbr",
    "sum",
];

/// Every cell the mode knows.
pub const CELLS: [&str; 5] = ["aggregate", "failover", "flap", "lossy", "redundant"];

/// The `redundant` cell's record stream: rate in bit/s and duration.
const RECORD_RATE_BPS: u64 = 1_000_000;
const RECORD_SECS: u64 = 40;
/// Records written in the first seconds (the paths' start-up) are reported apart.
const RECORD_WARMUP_S: u64 = 5;
/// The record origin's port in B.
const RECORD_PORT: u16 = 9000;

/// The forward configuration `ctcp-mp` uses unless `--mp-config` gives another: one path
/// per source address, both to the reverse on path 0's B address.
pub const MP_FORWARD_CONFIG: &str = r#"# netbench --multipath: one path per source address (issue 29)
paths = [{ bind = "10.77.0.1" }, { bind = "10.77.1.1" }]
"#;

/// One cell: its two paths and what it measures.
#[derive(Clone, Debug)]
pub struct MpCell {
    /// `aggregate`, `failover` or `lossy`.
    pub name: &'static str,
    /// Path 0 and path 1.
    pub paths: [LinkSpec; 2],
    /// Bytes downloaded.
    pub size: u64,
    /// Path cut mid-transfer and restored (`failover`, `flap`).
    pub cut: Option<Cut>,
    /// A timestamped record stream instead of the download (`redundant`).
    pub records: bool,
}

/// The failover cell's outage.
#[derive(Clone, Copy, Debug)]
pub struct Cut {
    /// Which path is cut.
    pub path: usize,
    /// Cut once this share of the file has arrived...
    pub at_fraction: f64,
    /// ...or this long after curl started, whichever comes first.
    pub at_latest: Duration,
    /// Restored this long after the cut.
    pub down_for: Duration,
    /// Cut by taking the path's device in A down (the forward sees link errors), not
    /// inside linkem (the path goes silent).
    pub device: bool,
}

/// The issue's cells; the failover cuts path `failover_path`.
#[must_use]
pub fn cells(failover_path: usize) -> Vec<MpCell> {
    let hetero = || {
        [
            LinkSpec::bdp_queued(600, 10_000_000, LossModel::Bernoulli(0.01), 291),
            LinkSpec::bdp_queued(60, 5_000_000, LossModel::Bernoulli(0.05), 292),
        ]
    };
    vec![
        MpCell {
            name: "aggregate",
            paths: hetero(),
            size: 40_000_000,
            cut: None,
            records: false,
        },
        MpCell {
            name: "failover",
            paths: hetero(),
            size: 40_000_000,
            cut: Some(Cut {
                path: failover_path,
                at_fraction: 0.3,
                at_latest: Duration::from_secs(20),
                down_for: Duration::from_secs(20),
                device: false,
            }),
            records: false,
        },
        MpCell {
            name: "flap",
            paths: hetero(),
            size: 40_000_000,
            cut: Some(Cut {
                path: failover_path,
                at_fraction: 0.3,
                at_latest: Duration::from_secs(20),
                down_for: Duration::from_secs(5),
                device: true,
            }),
            records: false,
        },
        MpCell {
            name: "lossy",
            paths: [
                LinkSpec::bdp_queued(100, 10_000_000, LossModel::Bernoulli(0.2), 293),
                LinkSpec::bdp_queued(100, 10_000_000, LossModel::Bernoulli(0.2), 294),
            ],
            size: 40_000_000,
            cut: None,
            records: false,
        },
        MpCell {
            name: "redundant",
            paths: [
                LinkSpec::bdp_queued(60, 10_000_000, LossModel::Bernoulli(0.05), 295),
                LinkSpec::bdp_queued(100, 10_000_000, LossModel::Bernoulli(0.05), 296),
            ],
            size: 0,
            cut: None,
            records: true,
        },
    ]
}

/// Whether this build's ctcp-forward runs multipath, and how.
#[derive(Clone, Debug)]
pub enum MpSupport {
    /// Run `ctcp-mp` with this forward configuration file.
    Available(PathBuf),
    /// Report `ctcp-mp` as not available, with the reason.
    Unavailable(String),
}

/// Probes the forward with `config_text` (`--check-config`): available if it accepts it.
///
/// # Errors
/// If the probe cannot run at all.
pub fn probe_multipath(bins: &Bins, work: &Path, config_text: &str) -> Result<MpSupport> {
    let config = work.join("mp-forward.toml");
    std::fs::write(&config, config_text)?;
    let key = super::chain::write_key(work, "mp-probe-psk", 290)?;
    let out = std::process::Command::new(&bins.forward)
        .arg("--config")
        .arg(&config)
        .args(["--check-config", "--psk-file", &key])
        .args(["--peer", &format!("{ADDR_B}:{CTCP_PORT}")])
        .stdin(Stdio::null())
        .output()
        .context("running ctcp-forward --check-config")?;
    if out.status.success() {
        return Ok(MpSupport::Available(config));
    }
    let err = String::from_utf8_lossy(&out.stderr);
    let line = err
        .lines()
        .map(str::trim)
        .rfind(|l| !l.is_empty())
        .unwrap_or("rejected");
    // serde's message goes on to list every accepted key; the first clause says it.
    let line = line.split(", expected").next().unwrap_or(line).to_owned();
    Ok(MpSupport::Unavailable(format!(
        "not available in this build: ctcp-forward rejects `paths` ({line})"
    )))
}

/// What a run of the mode does.
pub struct MpPlan {
    /// Cells to run, in order.
    pub cells: Vec<MpCell>,
    /// Systems to run in each cell (the failover cell runs only the multipath ones).
    pub systems: Vec<String>,
    /// Whether and how `ctcp-mp` runs.
    pub support: MpSupport,
}

/// The systems a cell runs: all of `systems`, except that the failover cells compare the
/// multipath systems only (a single path cut for 20 s just waits), the record stream
/// runs ctcp only, and the redundant policy runs only there.
fn cell_systems<'a>(cell: &MpCell, systems: &'a [String]) -> Vec<&'a str> {
    systems
        .iter()
        .map(String::as_str)
        .filter(|s| cell.cut.is_none() || *s == "ctcp-mp" || s.starts_with("mptcp"))
        .filter(|s| !cell.records || s.starts_with("ctcp"))
        .filter(|s| cell.records || *s != "ctcp-mp-redundant")
        .collect()
}

/// Runs `plan`, writing each row to `out` as it completes; returns all rows.
///
/// # Errors
/// Infrastructure failures (the paths, a server or a proxy that will not start).
pub fn run(
    bins: &Bins,
    work: &Path,
    www: &Path,
    out: &mut Out,
    plan: &MpPlan,
) -> Result<Vec<Value>> {
    let mut rows = Vec::new();
    for cell in &plan.cells {
        eprintln!("[multipath] cell {}", cell.name);
        let file = make_file(www, &format!("mp-{}.bin", cell.size), cell.size)?;
        let link = Link::start_paths(&bins.linkem, work, &cell.paths)?;
        let _servers = Servers::start(&link, www, work, false)?;
        let _mptcp_origin = start_mptcp(&link, www, work)?;
        let _records = if cell.records {
            Some(start_record_origin(&link, work)?)
        } else {
            None
        };
        for system in cell_systems(cell, &plan.systems) {
            let mut row = match (system, &plan.support) {
                ("sum", _) => json!({ "goodput_bps": capacity(cell) }),
                ("ctcp-mp" | "ctcp-mp-redundant", MpSupport::Unavailable(why)) => {
                    eprintln!("  {system}: {why}");
                    json!({ "unavailable": why })
                }
                _ if cell.records => run_records(bins, work, &link, cell, system, &plan.support)?,
                _ => run_system(bins, work, &link, cell, &file, system, &plan.support)?,
            };
            decorate(&mut row, cell, system);
            println!("  {}", summary(&row));
            out.write(&row)?;
            rows.push(row);
        }
        drop(link);
    }
    Ok(rows)
}

/// `Σ rate·(1 − loss)` of the cell's paths, in bit/s.
fn capacity(cell: &MpCell) -> f64 {
    cell.paths.iter().map(LinkSpec::capacity_bps).sum()
}

/// Adds the cell's and system's fields and the efficiency against the sum of capacities.
fn decorate(row: &mut Value, cell: &MpCell, system: &str) {
    let cap = capacity(cell);
    row["mode"] = json!("multipath");
    row["cell"] = json!(cell.name);
    row["system"] = json!(system);
    row["size"] = json!(cell.size);
    row["capacity_sum_bps"] = json!(cap);
    row["paths"] = json!(cell
        .paths
        .iter()
        .map(|p| json!({
            "rtt_ms": p.rtt_ms,
            "rate_bps": p.rate_bps,
            "loss": p.loss.mean(),
            "queue_bytes": p.queue_bytes,
            "seed": p.seed,
        }))
        .collect::<Vec<_>>());
    if let Some(g) = row.get("goodput_bps").and_then(Value::as_f64) {
        row["efficiency"] = json!(g / cap);
    }
    if let Some(g) = row.get("steady_goodput_bps").and_then(Value::as_f64) {
        row["steady_efficiency"] = json!(g / cap);
    }
}

/// The MPTCP origin: `python3 -m http.server` under `mptcpize` on [`MPTCP_PORT`], with
/// MPTCP limits on both sides and a subflow endpoint on path 1's address in A.
fn start_mptcp(link: &Link, www: &Path, work: &Path) -> Result<Proc> {
    for ns in [link.ns_a(), link.ns_b()] {
        sysctl(ns, "net.mptcp.enabled", "1")?;
        run_quiet(
            "ip mptcp limits",
            in_ns(ns, "ip").args([
                "mptcp",
                "limits",
                "set",
                "subflows",
                "2",
                "add_addr_accepted",
                "2",
            ]),
            Duration::from_secs(10),
        )
        .with_context(|| format!("ip mptcp limits set in {ns}"))?;
    }
    let extra = path_addr_a(1);
    run_quiet(
        "ip mptcp endpoint",
        in_ns(link.ns_a(), "ip").args([
            "mptcp", "endpoint", "add", &extra, "dev", "linkem1", "subflow",
        ]),
        Duration::from_secs(10),
    )
    .with_context(|| format!("ip mptcp endpoint add {extra} dev linkem1 subflow"))?;
    let log = std::fs::File::create(work.join("mptcp-http.log"))?;
    let origin = Proc::spawn(
        "mptcpize http.server",
        in_ns(link.ns_b(), "mptcpize")
            .args([
                "run",
                "python3",
                "-m",
                "http.server",
                "--bind",
                ADDR_B,
                "--directory",
            ])
            .arg(www)
            .arg(MPTCP_PORT.to_string())
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log),
    )?;
    // The origin starts in the background: a download before it listens fails (curl
    // exit 7). The probe file is the one `Servers::start` wrote.
    let url = format!("http://{ADDR_B}:{MPTCP_PORT}/probe.txt");
    let start = ctcp_runtime::clock::now();
    while run_quiet(
        "mptcp probe",
        in_ns(link.ns_a(), "mptcpize").args([
            "run",
            "curl",
            "-sf",
            "-o",
            "/dev/null",
            "--max-time",
            "5",
            &url,
        ]),
        Duration::from_secs(8),
    )
    .is_err()
    {
        if start.elapsed() > Duration::from_secs(20) {
            bail!("the MPTCP origin {url} does not answer after 20 s (see mptcp-http.log)");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    Ok(origin)
}

/// The MPTCP counters of namespace `ns` that show whether MPTCP was negotiated and a
/// second subflow joined (`nstat -az`, absolute values), or null without `nstat`.
fn mptcp_counters(ns: &str) -> Value {
    let Ok(text) = run_quiet(
        "nstat",
        in_ns(ns, "nstat").args(["-az", "--json"]),
        Duration::from_secs(10),
    ) else {
        return Value::Null;
    };
    let Ok(v) = serde_json::from_str::<Value>(&text) else {
        return Value::Null;
    };
    let kernel = &v["kernel"];
    let mut out = serde_json::Map::new();
    for k in [
        "MPTcpExtMPCapableSYNACKRX",
        "MPTcpExtMPJoinSynAckRx",
        "MPTcpExtMPCapableFallbackSYNACK",
    ] {
        out.insert(k.into(), kernel[k].clone());
    }
    Value::Object(out)
}

/// Runs one system's download on the cell's paths: the transfer fields, steady state,
/// wire bytes per path and, on the failover cell, the outage's effects.
fn run_system(
    bins: &Bins,
    work: &Path,
    link: &Link,
    cell: &MpCell,
    file: &DataFile,
    system: &str,
    support: &MpSupport,
) -> Result<Value> {
    let (via_owned, pair_opts, timeout) = match system {
        "ctcp-mp" | "ctcp-mp-redundant" | "ctcp-p0" | "ctcp-p1" => {
            (ViaKind::Socks, Some(ctcp_options(system, support)?), 240)
        }
        "bbr-p0" | "bbr-p1" | "cubic-p0" | "cubic-p1" => {
            let cc = system.split('-').next().unwrap_or("cubic");
            link.set_cc(cc)?;
            let limit = if cell.name == "lossy" { 30 } else { 60 };
            (ViaKind::From(path_addr_a(path_index(system)?)), None, limit)
        }
        "mptcp-cubic" | "mptcp-bbr" => {
            link.set_cc(system.trim_start_matches("mptcp-"))?;
            let limit = match cell.name {
                "lossy" => 30,
                "failover" => 120,
                _ => 90,
            };
            (ViaKind::Mptcp, None, limit)
        }
        other => bail!("unknown multipath system {other} ({})", SYSTEMS.join(", ")),
    };
    let pair = match &pair_opts {
        Some(o) => Some(CtcpPair::start_with(link, bins, work, o)?),
        None => None,
    };
    let via = match &via_owned {
        ViaKind::Socks => Via::Socks,
        ViaKind::From(a) => Via::From(a),
        ViaKind::Mptcp => Via::Mptcp { port: MPTCP_PORT },
    };
    let before: Vec<_> = (0..2)
        .map(|k| link.path_snapshot(k))
        .collect::<Result<_>>()?;
    let mptcp_before = matches!(via, Via::Mptcp { .. }).then(|| mptcp_counters(link.ns_a()));
    let dest = work.join("mp.out");
    let mut outage = Outage::new(cell.cut, file.size);
    let (t, samples) = curl_watched(
        link,
        file,
        via,
        &dest,
        Duration::from_secs(timeout),
        &mut |elapsed, bytes| outage.poll(link, elapsed, bytes),
    )?;
    outage.finish(link)?;
    link.settled_snapshot()?;
    let after: Vec<_> = (0..2)
        .map(|k| link.path_snapshot(k))
        .collect::<Result<_>>()?;
    let _ = std::fs::remove_file(&dest);
    let mut row = transfer_fields(&t);
    let steady = steady_fields(&cell.paths[0], &t, &samples, STEADY_FROM_S);
    row["steady_from_s"] = steady["steady_from_s"].clone();
    row["steady_goodput_bps"] = steady["steady_goodput_bps"].clone();
    row["series_bps"] = steady["series_bps"].clone();
    let wire: Vec<u64> = (0..2)
        .map(|k| {
            after[k]
                .b_to_a
                .link
                .bytes_in
                .saturating_sub(before[k].b_to_a.link.bytes_in)
        })
        .collect();
    let total: u64 = wire.iter().sum();
    row["wire_bytes_paths"] = json!(wire);
    row["wire_share_paths"] = json!(wire
        .iter()
        .map(|w| *w as f64 / total.max(1) as f64)
        .collect::<Vec<_>>());
    row["wire_per_goodput"] = json!(total as f64 / t.bytes.max(1) as f64);
    row["wire_target"] =
        json!(1.05 / (1.0 - cell.paths.iter().map(|p| p.loss.mean()).fold(0.0, f64::max)));
    if let Some(b) = mptcp_before {
        row["mptcp_counters_before"] = b;
        row["mptcp_counters_after"] = mptcp_counters(link.ns_a());
    }
    if let Some(p) = &pair {
        let (f, r) = p.peak_rss();
        row["peak_rss_forward_bytes"] = json!(f);
        row["peak_rss_reverse_bytes"] = json!(r);
    }
    if let Some(cut) = cell.cut {
        let surviving = &cell.paths[1 - cut.path.min(1)];
        row["cut_path"] = json!(cut.path);
        row["stall_bound_s"] = json!(2.0 * surviving.rtt_ms as f64 / 1000.0 + 0.2);
        outage.fields(&mut row, link, &cell.paths[cut.path.min(1)])?;
    }
    drop(pair);
    Ok(row)
}

/// How a ctcp system's proxies start: `ctcp-mp` with the multipath forward
/// configuration, `ctcp-mp-redundant` the same with both proxies `--policy redundant`,
/// `ctcp-pK` with the forward's peer on path K's B address.
fn ctcp_options(system: &str, support: &MpSupport) -> Result<PairOptions> {
    let reverse_listen = format!("0.0.0.0:{CTCP_PORT}");
    Ok(match system {
        "ctcp-mp" | "ctcp-mp-redundant" => {
            let MpSupport::Available(config) = support else {
                bail!("{system} is not available");
            };
            let policy: Vec<String> = if system == "ctcp-mp-redundant" {
                vec!["--policy".into(), "redundant".into()]
            } else {
                Vec::new()
            };
            PairOptions {
                reverse_listen,
                peer: format!("{ADDR_B}:{CTCP_PORT}"),
                forward_config: Some(config.clone()),
                forward_args: policy.clone(),
                reverse_args: policy,
            }
        }
        _ => PairOptions {
            reverse_listen,
            peer: format!("{}:{CTCP_PORT}", path_addr_b(path_index(system)?)),
            ..PairOptions::default()
        },
    })
}

/// The record origin of the `redundant` cell, in B on [`ADDR_B`]:[`RECORD_PORT`]
/// (`chain::DELAY_SERVER`: 1,000-byte records stamped with their write time).
fn start_record_origin(link: &Link, work: &Path) -> Result<Proc> {
    let log = std::fs::File::create(work.join("mp-records.log"))?;
    Proc::spawn(
        "python3 record origin",
        in_ns(link.ns_b(), "python3")
            .args([
                "-c",
                super::chain::DELAY_SERVER,
                ADDR_B,
                &RECORD_PORT.to_string(),
            ])
            .arg((RECORD_RATE_BPS / 8).to_string())
            .arg(RECORD_SECS.to_string())
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log),
    )
}

/// One ctcp system on the `redundant` cell: the record stream through its SOCKS forward;
/// the row carries the extra delay over the faster path's one-way delay at p50/p90/p99
/// (all records, and those written after [`RECORD_WARMUP_S`]) and the wire bytes.
fn run_records(
    bins: &Bins,
    work: &Path,
    link: &Link,
    cell: &MpCell,
    system: &str,
    support: &MpSupport,
) -> Result<Value> {
    let pair = CtcpPair::start_with(link, bins, work, &ctcp_options(system, support)?)?;
    let lines_before = link.stats_lines()?.len();
    let before: Vec<_> = (0..2)
        .map(|k| link.path_snapshot(k))
        .collect::<Result<_>>()?;
    let owd_ms = cell.paths.iter().map(|p| p.rtt_ms).min().unwrap_or(0) / 2;
    let (host, port) = SOCKS.split_once(':').unwrap_or(("127.0.0.1", "1080"));
    let mut c = in_ns(link.ns_a(), "python3");
    c.args(["-c", super::chain::DELAY_CLIENT, host, port, ADDR_B])
        .arg(RECORD_PORT.to_string())
        .arg(owd_ms.to_string())
        .arg(RECORD_WARMUP_S.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped());
    let (status, text) =
        Proc::spawn("record client", &mut c)?.finish(Duration::from_secs(RECORD_SECS + 60))?;
    let mut row: Value = serde_json::from_str(text.trim())
        .with_context(|| format!("the record client printed {text:?} ({status:?})"))?;
    link.settled_snapshot()?;
    let after: Vec<_> = (0..2)
        .map(|k| link.path_snapshot(k))
        .collect::<Result<_>>()?;
    let wire: Vec<u64> = (0..2)
        .map(|k| {
            after[k]
                .b_to_a
                .link
                .bytes_in
                .saturating_sub(before[k].b_to_a.link.bytes_in)
        })
        .collect();
    // linkem's own lateness over the run (its release timers under CPU load): a run
    // where it is late by tens of ms measures the machine as much as the transport.
    let late: Vec<f64> = link.stats_lines()?[lines_before..]
        .iter()
        .filter_map(|v| v["late_max_us"].as_f64())
        .collect();
    row["linkem_late_max_ms"] = json!(late.iter().copied().fold(0.0, f64::max) / 1000.0);
    row["linkem_lines_late_over_10ms"] = json!(late.iter().filter(|&&l| l > 10_000.0).count());
    row["linkem_lines"] = json!(late.len());
    let expected = RECORD_RATE_BPS / 8 * RECORD_SECS;
    row["records_expected"] = json!(expected / 1000);
    row["rate_bps"] = json!(RECORD_RATE_BPS);
    row["secs"] = json!(RECORD_SECS);
    row["one_way_delay_ms"] = json!(owd_ms);
    row["p99_bound_ms"] = json!(owd_ms);
    row["wire_bytes_paths"] = json!(wire);
    row["wire_per_record_byte"] =
        json!(wire.iter().sum::<u64>() as f64 / (report::f(&row, "records") * 1000.0).max(1.0));
    drop(pair);
    Ok(row)
}

/// The source of curl's connection, owned for the run (see [`Via`]).
enum ViaKind {
    Socks,
    From(String),
    Mptcp,
}

/// The path a `…-p0`/`…-p1` system runs on.
fn path_index(system: &str) -> Result<usize> {
    match system.rsplit('-').next() {
        Some("p0") => Ok(0),
        Some("p1") => Ok(1),
        _ => bail!("{system} names no path"),
    }
}

fn transfer_fields(t: &Transfer) -> Value {
    json!({
        "goodput_bps": t.goodput_bps,
        "bytes": t.bytes,
        "secs": t.secs,
        "bytes_ok": t.bytes_ok,
        "timed_out": t.timed_out,
        "error": t.error,
        "first_byte_s": t.first_byte_secs,
    })
}

/// The failover cell's outage, driven from curl's polling loop: cuts the path, restores
/// it, and times the longest stretch in which the received file did not grow.
struct Outage {
    cut: Option<Cut>,
    size: u64,
    cut_at: Option<Duration>,
    restored_at: Option<Duration>,
    last_growth: Option<(Duration, u64)>,
    longest_stall: Duration,
    longest_stall_at: Duration,
    /// The longest stall that began before the cut, while the path was down, and after
    /// the restoration: the failover's own stall is the middle one, the others are what
    /// the session's losses cost with both paths up.
    by_phase: [Duration; 3],
}

impl Outage {
    fn new(cut: Option<Cut>, size: u64) -> Self {
        Self {
            cut,
            size,
            cut_at: None,
            restored_at: None,
            last_growth: None,
            longest_stall: Duration::ZERO,
            longest_stall_at: Duration::ZERO,
            by_phase: [Duration::ZERO; 3],
        }
    }

    /// Called every 10 ms with the time since curl started and the bytes received.
    fn poll(&mut self, link: &Link, elapsed: Duration, bytes: u64) -> Result<()> {
        match self.last_growth {
            Some((_, b)) if bytes > b => self.last_growth = Some((elapsed, bytes)),
            None if bytes > 0 => self.last_growth = Some((elapsed, bytes)),
            Some((at, b)) if b < self.size => {
                let stall = elapsed - at;
                if stall > self.longest_stall {
                    self.longest_stall = stall;
                    self.longest_stall_at = at;
                }
                let phase = match (self.cut_at, self.restored_at) {
                    (Some(c), _) if at < c => 0,
                    (None, _) => 0,
                    (Some(_), Some(r)) if at >= r => 2,
                    _ => 1,
                };
                self.by_phase[phase] = self.by_phase[phase].max(stall);
            }
            _ => {}
        }
        let Some(cut) = self.cut else { return Ok(()) };
        match (self.cut_at, self.restored_at) {
            (None, _)
                if bytes as f64 >= cut.at_fraction * self.size as f64
                    || elapsed >= cut.at_latest =>
            {
                cut_path(link, &cut, true)?;
                self.cut_at = Some(elapsed);
            }
            (Some(at), None) if elapsed >= at + cut.down_for => {
                cut_path(link, &cut, false)?;
                self.restored_at = Some(elapsed);
            }
            _ => {}
        }
        Ok(())
    }

    /// After the transfer: a path still down is restored (the next system starts clean).
    fn finish(&mut self, link: &Link) -> Result<()> {
        if let (Some(cut), Some(_), None) = (self.cut, self.cut_at, self.restored_at) {
            cut_path(link, &cut, false)?;
        }
        Ok(())
    }

    /// The outage's row fields: when the path was cut and restored, the longest stall,
    /// and how long after restoration the path carried data again.
    fn fields(&self, row: &mut Value, link: &Link, path: &LinkSpec) -> Result<()> {
        let secs = |d: Option<Duration>| d.map(|d| d.as_secs_f64());
        row["cut_at_s"] = json!(secs(self.cut_at));
        row["restored_at_s"] = json!(secs(self.restored_at));
        row["longest_stall_s"] = json!(self.longest_stall.as_secs_f64());
        row["longest_stall_from_s"] = json!(self.longest_stall_at.as_secs_f64());
        let Some(cut) = self.cut else { return Ok(()) };
        row["stall_before_cut_s"] = json!(self.by_phase[0].as_secs_f64());
        row["stall_while_down_s"] = json!(self.by_phase[1].as_secs_f64());
        row["stall_after_restore_s"] = json!(self.by_phase[2].as_secs_f64());
        let threshold = path.rate_bps.unwrap_or(0) as f64 / 8.0 * 0.1;
        let lines = link.stats_lines()?;
        row["reuse_after_restore_s"] = json!(if cut.device {
            reuse_after_device_restore(&lines, cut.path, threshold)
        } else {
            reuse_after_restore(&lines, cut.path, threshold)
        });
        row["cut_by"] = json!(if cut.device { "device" } else { "linkem" });
        Ok(())
    }
}

/// Cuts (or restores) the cut's path the way the cell says.
fn cut_path(link: &Link, cut: &Cut, down: bool) -> Result<()> {
    if cut.device {
        link.set_path_device(cut.path, down)
    } else {
        link.set_path_down(cut.path, down)
    }
}

/// [`reuse_after_restore`] for a path cut at its device in A, which linkem does not see:
/// the outage is the longest run of statistics lines over which `path`'s A→B bytes did
/// not grow (the forward sends nothing on a path that is down), the restoration the first
/// line after it that shows A→B bytes again (the forward's challenge); from there, the
/// seconds until `path`'s B→A delivered bytes per second reach `threshold`.
fn reuse_after_device_restore(lines: &[Value], path: usize, threshold: f64) -> Option<f64> {
    let series = |direction: &str| -> Vec<(f64, u64)> {
        lines
            .iter()
            .filter(|v| {
                v["hop"].as_u64() == Some(path as u64)
                    && v["direction"] == direction
                    && v["final"] != true
            })
            .map(|v| {
                (
                    v["t"].as_f64().unwrap_or(0.0),
                    v["bytes_in"].as_u64().unwrap_or(0),
                )
            })
            .collect()
    };
    let up = series("a_to_b");
    // The longest stretch [i, j] of lines with no A→B growth.
    let (mut best, mut start) = (None::<(usize, usize)>, None::<usize>);
    for i in 1..up.len() {
        if up[i].1 == up[i - 1].1 {
            let s = *start.get_or_insert(i - 1);
            if best.is_none_or(|(a, b)| i - s > b - a) {
                best = Some((s, i));
            }
        } else {
            start = None;
        }
    }
    let (_, last_flat) = best?;
    let restored = up.get(last_flat + 1)?.0;
    let down: Vec<(f64, u64)> = lines
        .iter()
        .filter(|v| {
            v["hop"].as_u64() == Some(path as u64)
                && v["direction"] == "b_to_a"
                && v["final"] != true
        })
        .map(|v| {
            (
                v["t"].as_f64().unwrap_or(0.0),
                v["bytes_delivered"].as_u64().unwrap_or(0),
            )
        })
        .filter(|s| s.0 >= restored)
        .collect();
    down.windows(2).find_map(|w| {
        let (dt, db) = (w[1].0 - w[0].0, w[1].1.saturating_sub(w[0].1));
        (dt > 0.0 && db as f64 / dt >= threshold).then_some(w[1].0 - restored)
    })
}

/// Seconds from the first statistics line of `path` (B→A) that shows it restored (after
/// lines showing it down) to the first line whose delivered bytes per second since the
/// previous line reach `threshold` (bytes/s); `None` if the path was never restored or
/// never carried that much again.
fn reuse_after_restore(lines: &[Value], path: usize, threshold: f64) -> Option<f64> {
    let series: Vec<(f64, u64, bool)> = lines
        .iter()
        .filter(|v| {
            v["hop"].as_u64() == Some(path as u64)
                && v["direction"] == "b_to_a"
                && v["final"] != true
        })
        .map(|v| {
            (
                v["t"].as_f64().unwrap_or(0.0),
                v["bytes_delivered"].as_u64().unwrap_or(0),
                v["down"].as_bool().unwrap_or(false),
            )
        })
        .collect();
    let was_down = series.iter().position(|s| s.2)?;
    let restored = was_down + series[was_down..].iter().position(|s| !s.2)?;
    let t0 = series[restored].0;
    series[restored..].windows(2).find_map(|w| {
        let (dt, db) = (w[1].0 - w[0].0, w[1].1.saturating_sub(w[0].1));
        (dt > 0.0 && db as f64 / dt >= threshold).then_some(w[1].0 - t0)
    })
}

/// One line per row for the console.
fn summary(r: &Value) -> String {
    let mut s = format!("{:<9} {:<12}", report::s(r, "cell"), report::s(r, "system"));
    if let Some(why) = r.get("unavailable").and_then(Value::as_str) {
        let _ = write!(s, " {why}");
        return s;
    }
    if report::s(r, "system") == "sum" {
        let _ = write!(s, " {}", report::opt(r, "goodput_bps", 1e6, 2));
        return s;
    }
    if r.get("p99_extra_ms").is_some() {
        let _ = write!(
            s,
            " {} records, extra delay p50 {} p90 {} p99 {} ms (after {RECORD_WARMUP_S} s: p99 {}; bound {} ms) wire/record byte {} linkem late max {} ms ({} of {} lines > 10 ms)",
            r["records"],
            report::opt(r, "p50_extra_ms", 1.0, 1),
            report::opt(r, "p90_extra_ms", 1.0, 1),
            report::opt(r, "p99_extra_ms", 1.0, 1),
            report::opt(r, "steady_p99_extra_ms", 1.0, 1),
            report::opt(r, "p99_bound_ms", 1.0, 0),
            report::opt(r, "wire_per_record_byte", 1.0, 3),
            report::opt(r, "linkem_late_max_ms", 1.0, 1),
            r["linkem_lines_late_over_10ms"],
            r["linkem_lines"],
        );
        return s;
    }
    let _ = write!(
        s,
        " {} steady {} Mbit/s wire/goodput {} ok {}",
        report::entry(r),
        report::opt(r, "steady_goodput_bps", 1e6, 2),
        report::opt(r, "wire_per_goodput", 1.0, 3),
        r["bytes_ok"]
    );
    if r.get("longest_stall_s").is_some() {
        let _ = write!(
            s,
            " stall {} s (bound {} s; before the cut {}, path down {}, after the restore {}) \
             reuse {} s",
            report::opt(r, "longest_stall_s", 1.0, 2),
            report::opt(r, "stall_bound_s", 1.0, 2),
            report::opt(r, "stall_before_cut_s", 1.0, 2),
            report::opt(r, "stall_while_down_s", 1.0, 2),
            report::opt(r, "stall_after_restore_s", 1.0, 2),
            report::opt(r, "reuse_after_restore_s", 1.0, 1)
        );
    }
    s
}

/// The markdown tables of a multipath run: per cell, one line per system with goodput
/// (efficiency against the sum of capacities), steady state, wire, the share of bytes on
/// each path and, for the failover cell, the stall and the reuse time; each cell closes
/// with the best single path and ctcp-mp against kernel MPTCP where both ran.
#[must_use]
pub fn markdown(rows: &[Value]) -> String {
    let mut out = String::new();
    for cell in CELLS {
        let rows: Vec<&Value> = rows
            .iter()
            .filter(|r| report::s(r, "cell") == cell)
            .collect();
        if rows.is_empty() {
            continue;
        }
        let _ = writeln!(out, "\n### {cell}\n");
        if cell == "redundant" {
            out.push_str(&records_table(&rows));
            continue;
        }
        let _ = writeln!(out, "| system | goodput Mbit/s (eff.) | steady Mbit/s (eff.) | wire/goodput | share path 0 / 1 | stall s (bound) | reuse s |");
        let _ = writeln!(out, "|---|---|---|---|---|---|---|");
        for r in &rows {
            if let Some(why) = r.get("unavailable").and_then(Value::as_str) {
                let _ = writeln!(out, "| {} | {why} | | | | | |", report::s(r, "system"));
                continue;
            }
            if report::s(r, "system") == "sum" {
                let _ = writeln!(
                    out,
                    "| sum of capacities | {} | | | | | |",
                    report::opt(r, "goodput_bps", 1e6, 2)
                );
                continue;
            }
            let share = r["wire_share_paths"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .map(|x| format!("{:.2}", x.as_f64().unwrap_or(0.0)))
                        .collect::<Vec<_>>()
                        .join(" / ")
                })
                .unwrap_or_default();
            let stall = if r.get("longest_stall_s").is_some() {
                format!(
                    "{} ({})",
                    report::opt(r, "longest_stall_s", 1.0, 2),
                    report::opt(r, "stall_bound_s", 1.0, 2)
                )
            } else {
                String::new()
            };
            let _ = writeln!(
                out,
                "| {} | {} | {} ({}) | {} | {share} | {stall} | {} |",
                report::s(r, "system"),
                report::entry(r),
                report::opt(r, "steady_goodput_bps", 1e6, 2),
                report::opt(r, "steady_efficiency", 1.0, 2),
                report::opt(r, "wire_per_goodput", 1.0, 3),
                if r.get("longest_stall_s").is_some() {
                    report::opt(r, "reuse_after_restore_s", 1.0, 1)
                } else {
                    String::new()
                },
            );
        }
        let best_single = rows
            .iter()
            .filter(|r| {
                report::s(r, "system").ends_with("-p0") || report::s(r, "system").ends_with("-p1")
            })
            .max_by(|a, b| report::f(a, "goodput_bps").total_cmp(&report::f(b, "goodput_bps")));
        if let Some(b) = best_single {
            let _ = writeln!(
                out,
                "\nbest single path: {} at {:.2} Mbit/s",
                report::s(b, "system"),
                report::f(b, "goodput_bps") / 1e6
            );
        }
        let get = |name: &str| {
            rows.iter()
                .find(|r| report::s(r, "system") == name && r.get("unavailable").is_none())
        };
        let best_mptcp = rows
            .iter()
            .filter(|r| report::s(r, "system").starts_with("mptcp"))
            .max_by(|a, b| report::f(a, "goodput_bps").total_cmp(&report::f(b, "goodput_bps")));
        if let (Some(mp), Some(k)) = (get("ctcp-mp"), best_mptcp) {
            let _ = writeln!(
                out,
                "ctcp-mp / best kernel MPTCP ({}): {:.2}",
                report::s(k, "system"),
                report::f(mp, "goodput_bps") / report::f(k, "goodput_bps").max(1.0)
            );
        }
    }
    out
}

/// The `redundant` cell's table: per system, the records and the extra delay quantiles.
fn records_table(rows: &[&Value]) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "| system | records | extra p50 ms | p90 | **p99** | p99 after {RECORD_WARMUP_S} s | max | bound ms | wire/record byte | linkem late max ms |");
    let _ = writeln!(out, "|---|---|---|---|---|---|---|---|---|---|");
    for r in rows {
        if let Some(why) = r.get("unavailable").and_then(Value::as_str) {
            let _ = writeln!(
                out,
                "| {} | {why} | | | | | | | | |",
                report::s(r, "system")
            );
            continue;
        }
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | **{}** | {} | {} | {} | {} | {} |",
            report::s(r, "system"),
            r["records"],
            report::opt(r, "p50_extra_ms", 1.0, 1),
            report::opt(r, "p90_extra_ms", 1.0, 1),
            report::opt(r, "p99_extra_ms", 1.0, 1),
            report::opt(r, "steady_p99_extra_ms", 1.0, 1),
            report::opt(r, "max_extra_ms", 1.0, 0),
            report::opt(r, "p99_bound_ms", 1.0, 0),
            report::opt(r, "wire_per_record_byte", 1.0, 3),
            report::opt(r, "linkem_late_max_ms", 1.0, 1),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(t: f64, bytes: u64, down: bool) -> Value {
        json!({"t": t, "hop": 0, "direction": "b_to_a", "bytes_delivered": bytes, "down": down, "final": false})
    }

    #[test]
    fn reuse_counts_from_the_first_line_after_restoration() {
        let lines = vec![
            line(0.2, 1000, false),
            line(0.4, 2000, true),
            line(0.6, 2000, true),
            line(0.8, 2000, false),
            line(1.0, 2100, false),
            line(1.2, 2000 + 100 + 30_000, false),
            json!({"t": 1.2, "hop": 1, "direction": "b_to_a", "bytes_delivered": 9_999_999, "down": false}),
        ];
        // 30 kB in 0.2 s = 150 kB/s ≥ 125 kB/s: used again 0.4 s after the restore line.
        let r = reuse_after_restore(&lines, 0, 125_000.0).unwrap();
        assert!((r - 0.4).abs() < 1e-9, "{r}");
        assert_eq!(reuse_after_restore(&lines, 0, 1e9), None, "never that fast");
        assert_eq!(reuse_after_restore(&lines[..1], 0, 1.0), None, "never down");
    }

    #[test]
    fn device_reuse_counts_from_the_first_a_to_b_bytes_after_the_outage() {
        let l = |t: f64, dir: &str, bytes: u64| json!({"t": t, "hop": 0, "direction": dir, "bytes_in": bytes, "bytes_delivered": bytes, "final": false});
        let lines = vec![
            l(0.2, "a_to_b", 100),
            l(0.4, "a_to_b", 200),
            l(0.6, "a_to_b", 200),
            l(0.8, "a_to_b", 200),
            l(1.0, "a_to_b", 200),
            l(1.2, "a_to_b", 300),
            l(1.2, "b_to_a", 1000),
            l(1.4, "b_to_a", 1100),
            l(1.6, "b_to_a", 1100 + 30_000),
        ];
        // Flat from 0.4 to 1.0 s; restored at 1.2 s; 150 kB/s over 1.4–1.6 s.
        let r = reuse_after_device_restore(&lines, 0, 125_000.0).unwrap();
        assert!((r - 0.4).abs() < 1e-9, "{r}");
        assert_eq!(
            reuse_after_device_restore(&lines, 1, 1.0),
            None,
            "no such path"
        );
    }

    #[test]
    fn paths_of_systems_and_the_failover_systems() {
        assert_eq!(path_index("bbr-p1").unwrap(), 1);
        assert_eq!(path_index("ctcp-p0").unwrap(), 0);
        assert!(path_index("ctcp-mp").is_err());
        let systems: Vec<String> = SYSTEMS.iter().map(|s| s.to_string()).collect();
        let cells = cells(0);
        assert_eq!(
            cell_systems(&cells[1], &systems),
            ["ctcp-mp", "mptcp-cubic", "mptcp-bbr"]
        );
        assert_eq!(cell_systems(&cells[0], &systems).len(), SYSTEMS.len() - 1);
        assert_eq!(
            cell_systems(&cells[2], &systems),
            ["ctcp-mp", "mptcp-cubic", "mptcp-bbr"],
            "flap: the multipath systems"
        );
        assert_eq!(
            cell_systems(&cells[4], &systems),
            ["ctcp-mp", "ctcp-mp-redundant", "ctcp-p0", "ctcp-p1"],
            "redundant: ctcp only"
        );
        // 10·0.99 + 5·0.95 Mbit/s.
        assert!((capacity(&cells[0]) - 14.65e6).abs() < 1.0);
    }
}
