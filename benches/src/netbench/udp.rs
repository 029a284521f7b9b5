//! `netbench --udp` (issue 27): a UDP stream across the emulated link, sent raw and
//! through the tunnel (SOCKS UDP ASSOCIATE into ctcp-forward, coded datagrams across the
//! link, ctcp-reverse's per-flow socket out), in the same cell.
//!
//! A seeded generator in namespace A sends numbered datagrams at a fixed pace, each
//! carrying its send time (`CLOCK_MONOTONIC`, which both namespaces share); a sink in
//! namespace B records what arrives. Each run reports the residual loss (datagrams that
//! never arrived), the IP bytes the run put on the link (linkem's counters) per datagram
//! against the raw run's, and the extra delay (arrival − send − the link's one-way
//! delay) at p50/p99.

use super::link::{Link, LinkSpec, LossModel, ADDR_B};
use super::procs::{in_ns, Proc};
use super::run::Out;
use super::workload::{Bins, CtcpPair, Servers, SOCKS};
use anyhow::{bail, Context, Result};
use serde_json::{json, Value};
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

/// The sink's UDP port in namespace B.
const SINK_PORT: u16 = 9100;
/// Link rate of the UDP cells.
const RATE_BPS: u64 = 10_000_000;

/// The traffic of a UDP cell: `size`-byte datagrams at `pps` per second.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Traffic {
    /// Its name in the rows.
    pub name: &'static str,
    /// Payload bytes per datagram (at least 16: number and send time).
    pub size: usize,
    /// Datagrams per second.
    pub pps: f64,
}

/// 2 Mbit/s of 1,200-byte datagrams (the issue's stream).
pub const STREAM: Traffic = Traffic {
    name: "stream",
    size: 1200,
    pps: 2_000_000.0 / 8.0 / 1200.0,
};
/// A voice call: 160-byte datagrams, 50 a second.
pub const VOIP: Traffic = Traffic {
    name: "voip",
    size: 160,
    pps: 50.0,
};

/// One UDP cell: the link's RTT and loss.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Cell {
    /// Round-trip time in ms.
    pub rtt_ms: u64,
    /// Random loss, both directions.
    pub loss: LossModel,
}

/// The cells `--udp` runs: RTT 100 ms at 0, 10 and 20 % Bernoulli loss unless filtered
/// by `rtts` / `losses`, then at each RTT a Gilbert-Elliott cell per `(mean, burst)` of
/// `gilbert` (`--udp-gilbert`).
pub fn cells(rtts: &[u64], losses: &[f64], gilbert: &[(f64, f64)]) -> Vec<Cell> {
    let rtts = if rtts.is_empty() { &[100][..] } else { rtts };
    let losses = if losses.is_empty() {
        &[0.0, 0.1, 0.2][..]
    } else {
        losses
    };
    let mut v = Vec::new();
    for &rtt_ms in rtts {
        for &p in losses {
            let loss = if p > 0.0 {
                LossModel::Bernoulli(p)
            } else {
                LossModel::None
            };
            v.push(Cell { rtt_ms, loss });
        }
        for &(mean, burst) in gilbert {
            v.push(Cell {
                rtt_ms,
                loss: LossModel::Gilbert { mean, burst },
            });
        }
    }
    v
}

/// A cell's loss as the rows print it: `10 %`, or `5 % Gilbert (bursts 4)`.
fn loss_label(loss: LossModel) -> String {
    match loss {
        LossModel::Gilbert { mean, burst } => {
            format!("{:.0} % Gilbert (bursts {burst})", mean * 100.0)
        }
        _ => format!("{:.0} %", loss.mean() * 100.0),
    }
}

/// The generator: `mode` (raw | socks), destination, SOCKS address, size, pps, seconds,
/// seed. Prints `{"sent": N}`.
const GENERATOR: &str = r#"
import json, random, socket, struct, sys, time
mode, host, port, socks, size, pps, secs, seed = sys.argv[1:9]
port, size, pps, secs = int(port), int(size), float(pps), float(secs)
rnd = random.Random(int(seed))
filler = rnd.randbytes(size - 16)
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
head = b""
if mode == "socks":
    sh, sp = socks.split(":")
    t = socket.create_connection((sh, int(sp)))
    t.sendall(b"\x05\x01\x00")
    assert t.recv(2) == b"\x05\x00"
    t.sendall(b"\x05\x03\x00\x01\x00\x00\x00\x00\x00\x00")
    r = t.recv(10)
    assert r[1] == 0, r
    relay = (socket.inet_ntoa(r[4:8]), struct.unpack(">H", r[8:10])[0])
    head = b"\x00\x00\x00\x01" + socket.inet_aton(host) + struct.pack(">H", port)
    dest = relay
else:
    dest = (host, port)
n = int(secs * pps)
t0 = time.monotonic()
for i in range(n):
    at = t0 + i / pps
    d = at - time.monotonic()
    if d > 0:
        time.sleep(d)
    u.sendto(head + struct.pack(">QQ", i, time.monotonic_ns()) + filler, dest)
print(json.dumps({"sent": n}))
"#;

/// The sink: address, port, seconds to listen, ready file, output file. Writes the
/// arrivals to the output file as `{"arrivals": [[number, delay_ns], ...], "bad": N}`
/// (first arrival of each number).
const SINK: &str = r#"
import json, socket, struct, sys, time
host, port, secs, ready, out = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4], sys.argv[5]
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
s.bind((host, port))
s.settimeout(0.2)
open(ready, "w").close()
end = time.monotonic() + secs
seen, arrivals, bad = set(), [], 0
while time.monotonic() < end:
    try:
        d = s.recv(65535)
    except socket.timeout:
        continue
    now = time.monotonic_ns()
    if len(d) < 16:
        bad += 1
        continue
    i, sent = struct.unpack(">QQ", d[:16])
    if i in seen:
        bad += 1
        continue
    seen.add(i)
    arrivals.append([i, now - sent])
with open(out, "w") as f:
    json.dump({"arrivals": arrivals, "bad": bad}, f)
"#;

/// What one run measured.
struct RunResult {
    sent: u64,
    received: u64,
    bad: u64,
    /// Extra delays in ms, sorted.
    extra_ms: Vec<f64>,
    /// IP bytes and packets into the link A→B and B→A during the run.
    a_to_b: (u64, u64),
    b_to_a: (u64, u64),
    /// linkem's own lateness over the run (its release timers under CPU load), worst
    /// stats interval, ms: a run where it is late by tens of ms measures the machine.
    late_max_ms: f64,
}

fn quantile(sorted: &[f64], q: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let i = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted.get(i).copied()
}

/// Sends `traffic` for `secs` from A to the sink in B, raw or through the pair's SOCKS
/// listener, and measures it.
fn one_run(
    link: &Link,
    work: &Path,
    traffic: Traffic,
    secs: u64,
    socks: bool,
    seed: u64,
) -> Result<RunResult> {
    let ready = work.join(format!("udp-sink-{seed}-{socks}.ready"));
    let arrivals = work.join(format!("udp-sink-{seed}-{socks}.json"));
    let _ = std::fs::remove_file(&ready);
    let _ = std::fs::remove_file(&arrivals);
    let mut sink_cmd = in_ns(link.ns_b(), "python3");
    sink_cmd
        .args(["-c", SINK, ADDR_B, &SINK_PORT.to_string()])
        .arg((secs + 4).to_string())
        .arg(&ready)
        .arg(&arrivals)
        .stdin(Stdio::null())
        .stdout(Stdio::null());
    let sink = Proc::spawn("udp sink", &mut sink_cmd)?;
    for _ in 0..200 {
        if ready.exists() {
            break;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    if !ready.exists() {
        bail!("the UDP sink did not start");
    }
    let before = link.settled_snapshot()?;
    let lines_before = link.stats_lines()?.len();
    let mut gen = in_ns(link.ns_a(), "python3");
    gen.args(["-c", GENERATOR, if socks { "socks" } else { "raw" }, ADDR_B])
        .arg(SINK_PORT.to_string())
        .arg(SOCKS)
        .arg(traffic.size.to_string())
        .arg(traffic.pps.to_string())
        .arg(secs.to_string())
        .arg(seed.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped());
    let (status, text) =
        Proc::spawn("udp generator", &mut gen)?.finish(Duration::from_secs(secs + 30))?;
    let g: Value = serde_json::from_str(text.trim())
        .with_context(|| format!("the UDP generator printed {text:?} ({status:?})"))?;
    let (status, _) = sink.finish(Duration::from_secs(30))?;
    let after = link.settled_snapshot()?;
    let late_max_ms = link
        .stats_lines()?
        .iter()
        .skip(lines_before)
        .filter_map(|v| v["late_max_us"].as_f64())
        .fold(0.0, f64::max)
        / 1000.0;
    let text = std::fs::read_to_string(&arrivals)
        .with_context(|| format!("the UDP sink wrote no arrivals ({status:?})"))?;
    let s: Value = serde_json::from_str(&text).context("the UDP sink's arrivals")?;
    let one_way_ms = link.spec.one_way_delay_us() as f64 / 1000.0;
    let mut extra_ms: Vec<f64> = s["arrivals"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|x| x[1].as_f64())
                .map(|ns| ns / 1e6 - one_way_ms)
                .collect()
        })
        .unwrap_or_default();
    extra_ms.sort_by(f64::total_cmp);
    let diff = |a: u64, b: u64| a.saturating_sub(b);
    Ok(RunResult {
        sent: g["sent"].as_u64().unwrap_or(0),
        received: extra_ms.len() as u64,
        bad: s["bad"].as_u64().unwrap_or(0),
        extra_ms,
        a_to_b: (
            diff(after.a_to_b.link.bytes_in, before.a_to_b.link.bytes_in),
            diff(after.a_to_b.link.packets_in, before.a_to_b.link.packets_in),
        ),
        b_to_a: (
            diff(after.b_to_a.link.bytes_in, before.b_to_a.link.bytes_in),
            diff(after.b_to_a.link.packets_in, before.b_to_a.link.packets_in),
        ),
        late_max_ms,
    })
}

fn row(cell: Cell, traffic: Traffic, system: &str, r: &RunResult, raw: &RunResult) -> Value {
    let per = |bytes: u64, sent: u64| bytes as f64 / sent.max(1) as f64;
    let raw_per = per(raw.a_to_b.0, raw.sent);
    json!({
        "mode": "udp",
        "system": system,
        "traffic": traffic.name,
        "size": traffic.size,
        "pps": traffic.pps,
        "rtt_ms": cell.rtt_ms,
        "loss": cell.loss.mean(),
        "loss_model": cell.loss.name(),
        "loss_burst": match cell.loss {
            LossModel::Gilbert { burst, .. } => Some(burst),
            _ => None,
        },
        "rate_bps": RATE_BPS,
        "sent": r.sent,
        "received": r.received,
        "bad": r.bad,
        "residual_loss": 1.0 - r.received as f64 / r.sent.max(1) as f64,
        "wire_bytes_a_to_b": r.a_to_b.0,
        "wire_packets_a_to_b": r.a_to_b.1,
        "wire_bytes_b_to_a": r.b_to_a.0,
        "wire_packets_b_to_a": r.b_to_a.1,
        // IP bytes per datagram sent, against the raw run's (the data direction, and
        // both directions: the tunnel's ACKs come back B→A).
        "wire_vs_raw": per(r.a_to_b.0, r.sent) / raw_per.max(1.0),
        "wire_vs_raw_both": per(r.a_to_b.0 + r.b_to_a.0, r.sent) / raw_per.max(1.0),
        "extra_p50_ms": quantile(&r.extra_ms, 0.5),
        "extra_p99_ms": quantile(&r.extra_ms, 0.99),
        "extra_max_ms": r.extra_ms.last(),
        "linkem_late_max_ms": r.late_max_ms,
    })
}

/// Runs `traffic` in every cell `repeats` times: raw first, then through a fresh ctcp
/// pair on the same link. Rows go to `out` and are returned.
///
/// # Errors
/// Infrastructure failures (the link, the origin, the pair, a generator or sink).
#[allow(clippy::too_many_arguments)]
pub fn run(
    bins: &Bins,
    work: &Path,
    www: &Path,
    out: &mut Out,
    cells: &[Cell],
    traffic: &[Traffic],
    secs: u64,
    repeats: usize,
) -> Result<Vec<Value>> {
    let mut rows = Vec::new();
    for (ci, &cell) in cells.iter().enumerate() {
        for rep in 0..repeats {
            let seed = 2700 + (ci * 16 + rep) as u64;
            let spec = LinkSpec::bdp_queued(cell.rtt_ms, RATE_BPS, cell.loss, seed);
            let link = Link::start(&bins.linkem, work, &spec)?;
            let _servers = Servers::start(&link, www, work, false)?;
            for &t in traffic {
                let raw = one_run(&link, work, t, secs, false, seed)?;
                let pair = CtcpPair::start(&link, bins, work)?;
                let tun = one_run(&link, work, t, secs, true, seed)?;
                drop(pair);
                for (system, r) in [("raw", &raw), ("ctcp", &tun)] {
                    let mut v = row(cell, t, system, r, &raw);
                    v["repeat"] = json!(rep);
                    v["seed"] = json!(seed);
                    println!(
                        "udp {} {} ms {} {:<4}: {}/{} received (residual {:.3} %), wire {:.3}× raw ({:.3}× both ways), extra delay p50 {:.1} p99 {:.1} ms, linkem late ≤ {:.1} ms",
                        t.name,
                        cell.rtt_ms,
                        loss_label(cell.loss),
                        system,
                        r.received,
                        r.sent,
                        v["residual_loss"].as_f64().unwrap_or(f64::NAN) * 100.0,
                        v["wire_vs_raw"].as_f64().unwrap_or(f64::NAN),
                        v["wire_vs_raw_both"].as_f64().unwrap_or(f64::NAN),
                        v["extra_p50_ms"].as_f64().unwrap_or(f64::NAN),
                        v["extra_p99_ms"].as_f64().unwrap_or(f64::NAN),
                        r.late_max_ms,
                    );
                    out.write(&v)?;
                    rows.push(v);
                }
            }
        }
    }
    Ok(rows)
}

/// The rows as a markdown table.
pub fn markdown(rows: &[Value]) -> String {
    let mut s = String::from(
        "| traffic | RTT ms | loss | system | received / sent | residual | wire vs raw (A→B) | both ways | extra p50 ms | extra p99 ms | linkem late ms |\n|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for r in rows {
        let loss = r["loss"].as_f64().unwrap_or(0.0);
        let loss = match r["loss_burst"].as_f64() {
            Some(burst) => loss_label(LossModel::Gilbert { mean: loss, burst }),
            None => loss_label(LossModel::Bernoulli(loss)),
        };
        s.push_str(&format!(
            "| {} | {} | {} | {} | {} / {} | {:.3} % | {:.3} | {:.3} | {:.1} | {:.1} | {:.1} |\n",
            r["traffic"].as_str().unwrap_or("?"),
            r["rtt_ms"],
            loss,
            r["system"].as_str().unwrap_or("?"),
            r["received"],
            r["sent"],
            r["residual_loss"].as_f64().unwrap_or(f64::NAN) * 100.0,
            r["wire_vs_raw"].as_f64().unwrap_or(f64::NAN),
            r["wire_vs_raw_both"].as_f64().unwrap_or(f64::NAN),
            r["extra_p50_ms"].as_f64().unwrap_or(f64::NAN),
            r["extra_p99_ms"].as_f64().unwrap_or(f64::NAN),
            r["linkem_late_max_ms"].as_f64().unwrap_or(f64::NAN),
        ));
    }
    s
}
