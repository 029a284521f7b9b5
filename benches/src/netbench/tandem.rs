//! `netbench --tandem` (issue 28): seed 003's tandem network scaled to our tools. Two
//! lossy middle segments of 3 Mbit/s / 10 ms (one-way) with random loss r₀ on each in the
//! data's direction, between edge links of 5 ms, crossed by 1 to 4 concurrent downloads
//! each held to 1 Mbit/s (seed 003's 1 Mbit/s edge links; here the origin writes each
//! response at 1 Mbit/s, [`PACED_SERVER`], so 4 flows ask for 4 Mbit/s of a 3 Mbit/s
//! path, the seed's congestion case; `curl --limit-rate` would not do: it caps the
//! average since the start and lets a flow that fell behind burst above the cap):
//!
//! ```text
//! ns A (curl ×n) ─edge 5 ms─ M1 (GW1) ═ 3 Mbit/s, 10 ms, r₀ ═ M2 (GW2) ═ 3 Mbit/s, 10 ms, r₀ ═ M3 (GW3) ─edge 5 ms─ ns B (paced origin)
//! 10.77.0.1        10.77.0.2 | 10.77.1.1        10.77.1.2 | 10.77.2.1         10.77.2.2 | 10.77.3.1        10.77.3.2
//! ```
//!
//! A five-namespace `ctcp-linkem` chain (four `--hop`s; `--a-to-b loss=0`: losses only
//! in the data's direction, B→A, as in the seed). Queues of 100 packets of 1000 bytes
//! (100 kB) on the middle segments; the edges have no rate limit. Systems:
//! - `tcp-cubic` / `tcp-reno`: plain kernel TCP end to end (curl in A to the server in B);
//! - `ctcp-single`: one ctcp tunnel over both segments, ctcp-forward in M1 (SOCKS on
//!   10.77.0.2:1080) to ctcp-reverse in M3 (M2 only routes);
//! - `ctcp-cascade`: ctcp-forward in M1 → `ctcp-reverse --next-hop` in M2 → ctcp-reverse
//!   in M3, each segment its own session.
//!
//! Per cell (r₀, system, n flows) the n downloads start together; the bytes each has
//! received are read after a warm-up and again after the measuring time, and the
//! downloads are then stopped. Rows: `flows`, `loss` (r₀), `per_flow_bps`, `goodput_bps`
//! (their sum), `jain`, `bytes_ok` (every flow's bytes a prefix of the file), and per
//! middle segment the bytes that entered it toward A per goodput byte over the measuring
//! time (`wire_per_goodput_seg1`, `_seg2`). The session (ctcp) or the kernel's congestion
//! control persists across a system's flow counts within one r₀; a system's gateways are
//! fresh per r₀.

use super::chain::{gateway, write_key};
use super::link::sysctl;
use super::procs::{self, in_ns, LinkEntry, Proc};
use super::run::{jain, Out};
use super::workload::{bytes_so_far, make_file, Bins, DataFile};
use anyhow::{bail, Context, Result};
use serde_json::{json, Value};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// Middle segments' rate (bit/s).
pub const SEG_RATE_BPS: u64 = 3_000_000;
/// Middle segments' one-way delay (ms).
pub const SEG_DELAY_MS: u64 = 10;
/// Edge links' one-way delay (ms).
pub const EDGE_DELAY_MS: u64 = 5;
/// Middle segments' drop-tail queue: 100 packets of 1000 bytes.
pub const SEG_QUEUE_BYTES: u64 = 100_000;
/// Each flow's cap (the seed's 1 Mbit/s edge link), bytes/s.
pub const FLOW_LIMIT_BYTES: u64 = 125_000;

/// The origin: an HTTP/1.0 server (`python3 -c`, arguments: address, port, directory,
/// bytes/s) that writes each file at a steady rate, 5,000-byte writes at most one per
/// 5,000 / rate seconds and no catching up after a blocked write, one thread per
/// connection: every flow's 1 Mbit/s edge link at its source.
pub const PACED_SERVER: &str = r#"
import os, socket, socketserver, sys, threading, time
addr, port, root, rate = sys.argv[1], int(sys.argv[2]), sys.argv[3], float(sys.argv[4])
CHUNK = 5000
class H(socketserver.BaseRequestHandler):
    def handle(self):
        req = b""
        while b"\r\n\r\n" not in req:
            d = self.request.recv(4096)
            if not d:
                return
            req += d
        name = os.path.basename(req.split(b" ")[1].decode().lstrip("/"))
        try:
            f = open(os.path.join(root, name), "rb")
        except OSError:
            self.request.sendall(b"HTTP/1.0 404 Not Found\r\nContent-Length: 0\r\n\r\n")
            return
        size = os.fstat(f.fileno()).st_size
        self.request.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: %d\r\n\r\n" % size)
        due = time.monotonic()
        while True:
            data = f.read(CHUNK)
            if not data:
                return
            now = time.monotonic()
            if due > now:
                time.sleep(due - now)
            try:
                self.request.sendall(data)
            except OSError:
                return
            # No catching up: a flow the path held back gets no burst above the rate.
            due = max(due, time.monotonic()) + CHUNK / rate
class S(socketserver.ThreadingTCPServer):
    allow_reuse_address = True
    daemon_threads = True
S((addr, port), H).serve_forever()
"#;

const ADDR_SERVER: &str = "10.77.3.2";
const ADDR_GW1: &str = "10.77.0.2";
const ADDR_GW2: &str = "10.77.1.2";
const ADDR_GW3: &str = "10.77.2.2";
const HTTP_PORT: u16 = 8000;
const CTCP_PORT: u16 = 7000;
const SOCKS_PORT: u16 = 1080;

/// What one run measures.
#[derive(Clone, Debug)]
pub struct TandemPlan {
    /// Random loss on each middle segment.
    pub losses: Vec<f64>,
    /// Numbers of concurrent flows.
    pub flows: Vec<usize>,
    /// Systems (`tcp-cubic`, `tcp-reno`, `ctcp-single`, `ctcp-cascade`).
    pub systems: Vec<String>,
    /// Warm-up before the measuring starts.
    pub warmup: Duration,
    /// Measuring time.
    pub measure: Duration,
    /// Cells per (loss, system, flows).
    pub repeats: usize,
}

/// The running five-namespace chain.
struct TandemLink {
    child: Option<Child>,
    entry: LinkEntry,
    mid_prefix: String,
    stats: PathBuf,
}

impl TandemLink {
    fn start(bins: &Bins, work: &Path, loss: f64, seed: u64) -> Result<Self> {
        let id = std::process::id();
        let (a, b, mid_prefix) = (
            format!("nt-a-{id}"),
            format!("nt-b-{id}"),
            format!("nt-m-{id}-"),
        );
        let stats = work.join("tandem-linkem.jsonl");
        let _ = std::fs::remove_file(&stats);
        let ready = work.join("tandem-linkem.ready");
        let log = std::fs::File::create(work.join("tandem-linkem.log"))?;
        let edge = format!("delay={}us,queue=100000", EDGE_DELAY_MS * 1000);
        let seg = |s: u64| {
            format!(
                "delay={}us,rate={SEG_RATE_BPS}bit,queue={SEG_QUEUE_BYTES},loss={loss},seed={s}",
                SEG_DELAY_MS * 1000
            )
        };
        let mut cmd = Command::new(&bins.linkem);
        cmd.args(["--ns-a", &a, "--ns-b", &b, "--mid-prefix", &mid_prefix])
            .args(["--hop", &edge, "--hop", &seg(seed), "--hop", &seg(seed + 1)])
            .args(["--hop", &edge])
            // Losses in the data's direction only (B→A), as in the seed.
            .args(["--a-to-b", "loss=0"])
            .args(["--stats-interval", "200ms", "--stats-file"])
            .arg(&stats)
            .arg("--ready-file")
            .arg(&ready)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .process_group(0);
        let child = cmd.spawn().context("starting ctcp-linkem")?;
        let entry = LinkEntry {
            pid: i32::try_from(child.id()).context("pid")?,
            ns_a: a,
            ns_b: b,
            bin: bins.linkem.clone(),
        };
        procs::register_link(entry.clone());
        let mut link = Self {
            child: Some(child),
            entry,
            mid_prefix,
            stats,
        };
        super::link::wait_linkem_ready(&mut link.child, &ready, "tandem-linkem.log")?;
        super::link::tune_tcp(&link.namespaces(), super::link::TCP_MEM)?;
        Ok(link)
    }

    /// A, M1, M2, M3, B.
    fn namespaces(&self) -> [String; 5] {
        [
            self.entry.ns_a.clone(),
            self.mid(1),
            self.mid(2),
            self.mid(3),
            self.entry.ns_b.clone(),
        ]
    }

    fn mid(&self, k: usize) -> String {
        format!("{}{k}", self.mid_prefix)
    }

    /// Bytes that entered the two middle segments toward A so far.
    fn seg_bytes_toward_a(&self) -> [u64; 2] {
        let text = std::fs::read_to_string(&self.stats).unwrap_or_default();
        let mut out = [0u64; 2];
        for v in text
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        {
            if v["direction"] != "b_to_a" {
                continue;
            }
            match v["hop"].as_u64() {
                Some(1) => out[0] = v["bytes_in"].as_u64().unwrap_or(0),
                Some(2) => out[1] = v["bytes_in"].as_u64().unwrap_or(0),
                _ => {}
            }
        }
        out
    }

    fn set_cc(&self, cc: &str) -> Result<()> {
        for ns in self.namespaces() {
            sysctl(&ns, "net.ipv4.tcp_congestion_control", cc)?;
        }
        Ok(())
    }
}

impl Drop for TandemLink {
    fn drop(&mut self) {
        let mut child = self.child.take();
        procs::stop_link(&self.entry, |_| {
            child
                .as_mut()
                .is_none_or(|c| c.try_wait().ok().flatten().is_some())
        });
        procs::deregister_link(self.entry.pid);
    }
}

/// A curl in `ns` for `url`, through `socks` if given.
fn curl(ns: &str, socks: Option<&str>) -> Command {
    let mut c = in_ns(ns, "curl");
    c.arg("-s");
    if let Some(s) = socks {
        c.args(["--socks5-hostname", s]);
    }
    c
}

fn wait_reachable(ns: &str, socks: Option<&str>, url: &str, limit: Duration) -> Result<()> {
    let start = ctcp_runtime::clock::now();
    loop {
        let mut c = curl(ns, socks);
        c.args(["-o", "/dev/null", "--max-time", "8", url])
            .stdin(Stdio::null())
            .stdout(Stdio::null());
        let (status, _) = Proc::spawn("curl probe", &mut c)?.finish(Duration::from_secs(12))?;
        if status.is_some_and(|s| s.success()) {
            return Ok(());
        }
        if start.elapsed() > limit {
            bail!("{url} not reachable from {ns} after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// True if `got` holds a prefix of `file` (in `www`).
fn is_prefix(got: &Path, www: &Path, file: &DataFile) -> Result<bool> {
    let got = std::fs::read(got).unwrap_or_default();
    let want = std::fs::read(www.join(&file.name))?;
    Ok(got.len() <= want.len() && want[..got.len()] == got[..])
}

/// The gateways of `system` (none for plain TCP) and the SOCKS address to use.
fn start_system(
    system: &str,
    link: &TandemLink,
    bins: &Bins,
    work: &Path,
    keys: &[String; 2],
) -> Result<(Vec<Proc>, Option<String>)> {
    let [_, m1, m2, m3, _] = link.namespaces();
    let port = |a: &str| format!("{a}:{CTCP_PORT}");
    let mut procs = Vec::new();
    let peer = match system {
        "tcp-cubic" => {
            link.set_cc("cubic")?;
            return Ok((procs, None));
        }
        "tcp-reno" => {
            link.set_cc("reno")?;
            return Ok((procs, None));
        }
        "ctcp-single" => {
            procs.push(gateway(
                "tandem-reverse",
                &m3,
                &bins.reverse,
                &[
                    "--listen".into(),
                    port(ADDR_GW3),
                    "--psk-file".into(),
                    keys[0].clone(),
                ],
                work,
            )?);
            port(ADDR_GW3)
        }
        "ctcp-cascade" => {
            procs.push(gateway(
                "tandem-reverse",
                &m3,
                &bins.reverse,
                &[
                    "--listen".into(),
                    port(ADDR_GW3),
                    "--psk-file".into(),
                    keys[1].clone(),
                ],
                work,
            )?);
            procs.push(gateway(
                "tandem-relay",
                &m2,
                &bins.reverse,
                &[
                    "--listen".into(),
                    port(ADDR_GW2),
                    "--psk-file".into(),
                    keys[0].clone(),
                    "--next-hop".into(),
                    port(ADDR_GW3),
                    "--next-psk-file".into(),
                    keys[1].clone(),
                ],
                work,
            )?);
            port(ADDR_GW2)
        }
        other => {
            bail!("unknown tandem system {other} (tcp-cubic, tcp-reno, ctcp-single, ctcp-cascade)")
        }
    };
    // The TCP legs at the edges (client → GW1, GW3 → server) run kernel Cubic.
    link.set_cc("cubic")?;
    let socks = format!("{ADDR_GW1}:{SOCKS_PORT}");
    procs.push(gateway(
        "tandem-forward",
        &m1,
        &bins.forward,
        &[
            "--listen".into(),
            socks.clone(),
            "--peer".into(),
            peer,
            "--psk-file".into(),
            keys[0].clone(),
            "--fast-open".into(),
            "true".into(),
        ],
        work,
    )?);
    Ok((procs, Some(socks)))
}

/// One cell: `n` concurrent rate-capped downloads; the row's measured fields.
fn cell(
    link: &TandemLink,
    www: &Path,
    work: &Path,
    file: &DataFile,
    socks: Option<&str>,
    n: usize,
    plan: &TandemPlan,
) -> Result<Value> {
    let url = format!("http://{ADDR_SERVER}:{HTTP_PORT}/{}", file.name);
    let secs = (plan.warmup + plan.measure).as_secs() + 10;
    let mut curls = Vec::new();
    let dests: Vec<PathBuf> = (0..n)
        .map(|i| work.join(format!("tandem-{i}.out")))
        .collect();
    for d in &dests {
        let _ = std::fs::remove_file(d);
        let mut c = curl(&link.entry.ns_a, socks);
        c.args(["-o"])
            .arg(d)
            .args(["--max-time", &secs.to_string(), &url])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        curls.push(Proc::spawn("curl", &mut c)?);
    }
    std::thread::sleep(plan.warmup);
    let t0 = ctcp_runtime::clock::now();
    let b0: Vec<u64> = dests.iter().map(|d| bytes_so_far(d)).collect();
    let w0 = link.seg_bytes_toward_a();
    std::thread::sleep(plan.measure);
    let b1: Vec<u64> = dests.iter().map(|d| bytes_so_far(d)).collect();
    let dt = t0.elapsed().as_secs_f64();
    // linkem writes its counters every 200 ms: read them a period later, and take the
    // interval as the same length (the bytes in flight at either end cancel out).
    std::thread::sleep(Duration::from_millis(250));
    let w1 = link.seg_bytes_toward_a();
    for c in &mut curls {
        c.kill();
    }
    drop(curls);
    let per_flow: Vec<f64> = b0
        .iter()
        .zip(&b1)
        .map(|(a, b)| b.saturating_sub(*a) as f64 * 8.0 / dt)
        .collect();
    let total: f64 = per_flow.iter().sum();
    let mut ok = true;
    for d in &dests {
        ok &= is_prefix(d, www, file)?;
    }
    let good_bytes = total / 8.0 * dt;
    let wire = |i: usize| w1[i].saturating_sub(w0[i]) as f64 / good_bytes.max(1.0);
    Ok(json!({
        "flows": n,
        "per_flow_bps": per_flow,
        "goodput_bps": total,
        "jain": jain(&per_flow),
        "measure_s": dt,
        "warmup_s": plan.warmup.as_secs_f64(),
        "bytes_ok": ok,
        "wire_per_goodput_seg1": wire(0),
        "wire_per_goodput_seg2": wire(1),
    }))
}

/// Runs `plan`, one row per cell written to `out`.
///
/// # Errors
/// Infrastructure failures (the chain, a server or a gateway that will not start).
pub fn run(
    bins: &Bins,
    work: &Path,
    www: &Path,
    out: &mut Out,
    plan: &TandemPlan,
) -> Result<Vec<Value>> {
    let size = FLOW_LIMIT_BYTES * (plan.warmup + plan.measure).as_secs() * 2 + 1_000_000;
    let file = make_file(www, "tandem.bin", size)?;
    std::fs::write(www.join("probe.txt"), "x")?;
    let keys = [
        write_key(work, "tandem-psk-1", 301)?,
        write_key(work, "tandem-psk-2", 302)?,
    ];
    let probe_url = format!("http://{ADDR_SERVER}:{HTTP_PORT}/probe.txt");
    let mut rows = Vec::new();
    for &loss in &plan.losses {
        let link = TandemLink::start(bins, work, loss, 3)?;
        let [ns_a, .., ns_b] = link.namespaces();
        let http_log = std::fs::File::create(work.join("tandem-http.log"))?;
        let _http = Proc::spawn(
            "python3 paced server",
            in_ns(&ns_b, "python3")
                .args(["-c", PACED_SERVER, ADDR_SERVER, &HTTP_PORT.to_string()])
                .arg(www)
                .arg(FLOW_LIMIT_BYTES.to_string())
                .stdin(Stdio::null())
                .stdout(http_log.try_clone()?)
                .stderr(http_log),
        )?;
        wait_reachable(&ns_a, None, &probe_url, Duration::from_secs(60))?;
        for system in &plan.systems {
            let (gateways, socks) = start_system(system, &link, bins, work, &keys)?;
            if socks.is_some() {
                wait_reachable(&ns_a, socks.as_deref(), &probe_url, Duration::from_secs(60))?;
            }
            for &n in &plan.flows {
                for rep in 0..plan.repeats {
                    let mut row = cell(&link, www, work, &file, socks.as_deref(), n, plan)?;
                    row["mode"] = json!("tandem");
                    row["workload"] = json!("tandem");
                    row["system"] = json!(system);
                    row["loss"] = json!(loss);
                    row["repeat"] = json!(rep);
                    row["rate_bps"] = json!(SEG_RATE_BPS);
                    row["rtt_ms"] = json!(2 * (2 * EDGE_DELAY_MS + 2 * SEG_DELAY_MS));
                    row["flow_limit_bps"] = json!(FLOW_LIMIT_BYTES * 8);
                    row["seg_queue_bytes"] = json!(SEG_QUEUE_BYTES);
                    let per: Vec<String> = row["per_flow_bps"]
                        .as_array()
                        .map(|a| {
                            a.iter()
                                .map(|x| format!("{:.3}", x.as_f64().unwrap_or(0.0) / 1e6))
                                .collect()
                        })
                        .unwrap_or_default();
                    println!(
                        "tandem r0={loss:<4} {system:<12} n={n} #{rep}: total {:.3} Mbit/s  flows [{}]  jain {:.3}  wire/goodput {:.3} {:.3}  ok {}",
                        row["goodput_bps"].as_f64().unwrap_or(0.0) / 1e6,
                        per.join(", "),
                        row["jain"].as_f64().unwrap_or(0.0),
                        row["wire_per_goodput_seg1"].as_f64().unwrap_or(0.0),
                        row["wire_per_goodput_seg2"].as_f64().unwrap_or(0.0),
                        row["bytes_ok"]
                    );
                    out.write(&row)?;
                    rows.push(row);
                    // Let the stopped flows' connections and streams close.
                    std::thread::sleep(Duration::from_secs(1));
                }
            }
            drop(gateways);
        }
    }
    Ok(rows)
}

/// The markdown table of `rows`: per r₀ and flow count, each system's total and per-flow
/// goodput and Jain's index.
#[must_use]
pub fn markdown(rows: &[Value]) -> String {
    let mut s = String::from(
        "| r₀ | flows | system | total Mbit/s | per flow Mbit/s | Jain | wire/goodput seg1, seg2 |\n|---|---|---|---|---|---|---|\n",
    );
    for r in rows {
        let per: Vec<String> = r["per_flow_bps"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|x| format!("{:.2}", x.as_f64().unwrap_or(0.0) / 1e6))
                    .collect()
            })
            .unwrap_or_default();
        s.push_str(&format!(
            "| {} | {} | {} | {:.3}{} | {} | {:.3} | {:.3}, {:.3} |\n",
            r["loss"],
            r["flows"],
            r["system"].as_str().unwrap_or("?"),
            r["goodput_bps"].as_f64().unwrap_or(0.0) / 1e6,
            if r["bytes_ok"] == Value::Bool(true) {
                ""
            } else {
                " !"
            },
            per.join(", "),
            r["jain"].as_f64().unwrap_or(0.0),
            r["wire_per_goodput_seg1"].as_f64().unwrap_or(0.0),
            r["wire_per_goodput_seg2"].as_f64().unwrap_or(0.0),
        ));
    }
    s
}
