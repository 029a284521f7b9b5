//! `netbench --chain`: a heterogeneous path of two segments (issue 28) — a satellite
//! segment (10 Mbit/s, 600 ms RTT, 1 % loss) then a radio segment (50 Mbit/s, 20 ms RTT,
//! 15 % loss) — as one `ctcp-linkem` chain of three namespaces:
//!
//! ```text
//! ns A (curl, ctcp-forward) ══ satellite ══ ns M (relay) ══ radio ══ ns B (http.server, ctcp-reverse)
//! 10.77.0.1                      10.77.0.2 | 10.77.1.1              10.77.1.2
//! ```
//!
//! Each system downloads the same file with curl in A from B:
//! - `ctcp-e2e`: one tunnel end to end, ctcp-forward in A to ctcp-reverse in B (M only
//!   routes IP);
//! - `ctcp-relay`: two tunnels in cascade, ctcp-forward in A → `ctcp-reverse --next-hop`
//!   in M → ctcp-reverse in B, each segment with its own key, coding and congestion
//!   control (segment termination, seed 003);
//! - `bbr`, `cubic`: kernel TCP end to end (the servers' congestion control), cut off
//!   after a time limit, reporting the goodput so far.
//!
//! Rows: `system`, `goodput_bps`, `efficiency` (against the chain's capacity, the
//! smallest `rate × (1 − loss)` of its segments), `secs`, `first_byte_s`, `bytes_ok`,
//! `timed_out`, and per segment the bytes that entered it toward A during the transfer
//! per goodput byte (`wire_per_goodput_sat`, `wire_per_goodput_radio`), and
//! `peak_rss_relay_bytes` for the relay (and `relay_args`, the extra relay flags from
//! `NETBENCH_RELAY_ARGS`, e.g. `--relay-buffer 4MiB`).

use super::link::sysctl;
use super::procs::{self, in_ns, LinkEntry, Proc};
use super::run::Out;
use super::workload::{hash_file, make_file, Bins, DataFile};
use crate::fill_block;
use anyhow::{bail, Context, Result};
use serde_json::{json, Value};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// One segment of the chain.
#[derive(Clone, Copy, Debug)]
pub struct Segment {
    /// Name in the rows (`sat`, `radio`).
    pub name: &'static str,
    /// Rate in bit/s.
    pub rate_bps: u64,
    /// Round-trip time in ms (each direction half).
    pub rtt_ms: u64,
    /// Bernoulli loss, both directions.
    pub loss: f64,
    /// Seed of the segment's random choices.
    pub seed: u64,
}

impl Segment {
    /// Drop-tail queue: one BDP, at least 30 kB.
    fn queue_bytes(&self) -> u64 {
        (self.rate_bps / 8 * self.rtt_ms / 1000).max(30_000)
    }

    /// linkem's `--hop` value.
    fn hop_arg(&self) -> String {
        format!(
            "delay={}us,rate={}bit,queue={},loss={},seed={}",
            self.rtt_ms * 500,
            self.rate_bps,
            self.queue_bytes(),
            self.loss,
            self.seed
        )
    }

    /// What the segment can carry: `rate × (1 − loss)`.
    fn capacity_bps(&self) -> f64 {
        self.rate_bps as f64 * (1.0 - self.loss)
    }
}

/// The issue's chain from the client's side: satellite then radio (a download enters the
/// radio segment first). [`CHAIN_REVERSED`] puts the satellite next to the server, so a
/// download crosses the satellite first, as an upload does on [`CHAIN`].
pub const CHAIN: [Segment; 2] = [
    Segment {
        name: "sat",
        rate_bps: 10_000_000,
        rtt_ms: 600,
        loss: 0.01,
        seed: 28,
    },
    Segment {
        name: "radio",
        rate_bps: 50_000_000,
        rtt_ms: 20,
        loss: 0.15,
        seed: 29,
    },
];

/// [`CHAIN`] the other way round: radio next to the client, satellite next to the server.
pub const CHAIN_REVERSED: [Segment; 2] = [CHAIN[1], CHAIN[0]];

/// Address of the last namespace (servers, the last gateway).
const ADDR_SERVER: &str = "10.77.1.2";
/// Address of the middle namespace toward A (the relay's tunnel port).
const ADDR_MIDDLE: &str = "10.77.0.2";
const HTTP_PORT: u16 = 8000;
const CTCP_PORT: u16 = 7000;
const SOCKS: &str = "127.0.0.1:1080";

/// The running chain emulator.
struct ChainLink {
    segs: [Segment; 2],
    child: Option<Child>,
    entry: LinkEntry,
    middle: String,
    stats: std::path::PathBuf,
}

impl ChainLink {
    fn start(bins: &Bins, work: &Path, segs: [Segment; 2]) -> Result<Self> {
        let id = std::process::id();
        let (a, b, mid_prefix) = (
            format!("nc-a-{id}"),
            format!("nc-b-{id}"),
            format!("nc-m-{id}-"),
        );
        let stats = work.join("chain-linkem.jsonl");
        let ready = work.join("chain-linkem.ready");
        let log = std::fs::File::create(work.join("chain-linkem.log"))?;
        let mut cmd = Command::new(&bins.linkem);
        cmd.args(["--ns-a", &a, "--ns-b", &b, "--mid-prefix", &mid_prefix]);
        for s in &segs {
            cmd.args(["--hop", &s.hop_arg()]);
        }
        cmd.args(["--stats-interval", "200ms", "--stats-file"])
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
            segs,
            child: Some(child),
            entry,
            middle: format!("{mid_prefix}1"),
            stats,
        };
        let start = ctcp_runtime::clock::now();
        while !ready.exists() {
            if let Some(s) = link
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                bail!("ctcp-linkem exited before it was ready: {s} (see chain-linkem.log)");
            }
            if start.elapsed() > Duration::from_secs(15) {
                bail!("ctcp-linkem not ready after 15 s");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        for ns in link.namespaces() {
            for (k, v) in [
                ("net.ipv4.tcp_rmem", super::link::TCP_MEM),
                ("net.ipv4.tcp_wmem", super::link::TCP_MEM),
                ("net.ipv4.tcp_no_metrics_save", "1"),
            ] {
                sysctl(&ns, k, v)?;
            }
        }
        Ok(link)
    }

    fn namespaces(&self) -> [String; 3] {
        [
            self.entry.ns_a.clone(),
            self.middle.clone(),
            self.entry.ns_b.clone(),
        ]
    }

    /// Bytes that entered each segment toward A (`b_to_a`: the download's data) so far,
    /// from linkem's last statistics lines.
    fn bytes_toward_a(&self) -> Result<[u64; 2]> {
        let text = std::fs::read_to_string(&self.stats).unwrap_or_default();
        let mut out = [0u64; 2];
        for line in text.lines() {
            let Ok(v) = serde_json::from_str::<Value>(line) else {
                continue;
            };
            if v["direction"] == "b_to_a" {
                if let Some(hop) = v["hop"].as_u64().and_then(|h| usize::try_from(h).ok()) {
                    if hop < 2 {
                        out[hop] = v["bytes_in"].as_u64().unwrap_or(0);
                    }
                }
            }
        }
        Ok(out)
    }

    fn set_cc(&self, cc: &str) -> Result<()> {
        for ns in self.namespaces() {
            sysctl(&ns, "net.ipv4.tcp_congestion_control", cc)?;
        }
        Ok(())
    }
}

impl Drop for ChainLink {
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

/// curl in `ns` for `url`; true on success.
fn probe(ns: &str, socks: bool, url: &str) -> Result<bool> {
    let mut c = in_ns(ns, "curl");
    c.args(["-s", "-o", "/dev/null", "--max-time", "8"]);
    if socks {
        c.args(["--socks5-hostname", SOCKS]);
    }
    c.arg(url);
    let (status, _) = Proc::spawn("curl probe", c.stdin(Stdio::null()).stdout(Stdio::null()))?
        .finish(Duration::from_secs(12))?;
    Ok(status.is_some_and(|s| s.success()))
}

pub(super) fn wait_probe(ns: &str, socks: bool, url: &str, limit: Duration) -> Result<()> {
    let start = ctcp_runtime::clock::now();
    while !probe(ns, socks, url)? {
        if start.elapsed() > limit {
            bail!("{url} not reachable from {ns} after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    Ok(())
}

/// A gateway process (`ctcp-forward` or `ctcp-reverse`) in `ns`.
pub(super) fn gateway(
    name: &str,
    ns: &str,
    bin: &Path,
    args: &[String],
    work: &Path,
) -> Result<Proc> {
    let log = std::fs::File::create(work.join(format!("{name}.log")))?;
    let level = std::env::var("NETBENCH_LOG").unwrap_or_else(|_| "warn".into());
    // With NETBENCH_LOG=debug each session's statistics every 250 ms, as the sweep's
    // proxies log them.
    let stats: &[&str] = if level == "debug" {
        &["--stats-interval", "250ms"]
    } else {
        &[]
    };
    Proc::spawn(
        name,
        in_ns(ns, &bin.to_string_lossy())
            .args(args)
            .args(["--log-level", &level])
            .args(stats)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log),
    )
}

/// Extra flags for the relay from `NETBENCH_RELAY_ARGS` (e.g. "--relay-buffer 4MiB").
fn relay_args() -> Vec<String> {
    std::env::var("NETBENCH_RELAY_ARGS")
        .map(|v| v.split_whitespace().map(String::from).collect())
        .unwrap_or_default()
}

pub(super) fn write_key(work: &Path, name: &str, seed: u64) -> Result<String> {
    let mut raw = [0u8; 32];
    fill_block(seed, &mut raw);
    let hex: String = raw.iter().map(|b| format!("{b:02x}")).collect();
    let p = work.join(name);
    std::fs::write(&p, hex)?;
    Ok(p.to_string_lossy().into_owned())
}

/// `VmHWM` of the process `ip netns exec` became (or its child), in bytes.
pub(super) fn vm_hwm(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))?
        .trim()
        .strip_suffix("kB")?
        .trim()
        .parse()
        .ok()?;
    Some(kb * 1024)
}

/// One download with curl in A; the row's transfer fields.
fn download(
    link: &ChainLink,
    file: &DataFile,
    socks: bool,
    dest: &Path,
    limit: Duration,
) -> Result<Value> {
    let _ = std::fs::remove_file(dest);
    let before = link.bytes_toward_a()?;
    let mut c = in_ns(&link.entry.ns_a, "curl");
    c.args(["-s", "-o"])
        .arg(dest)
        .args(["--max-time", &format!("{:.0}", limit.as_secs_f64())])
        .args([
            "-w",
            "%{speed_download} %{size_download} %{time_total} %{time_starttransfer}",
        ]);
    if socks {
        c.args(["--socks5-hostname", SOCKS]);
    }
    c.arg(format!("http://{ADDR_SERVER}:{HTTP_PORT}/{}", file.name))
        .stdin(Stdio::null())
        .stdout(Stdio::piped());
    let (status, out) = Proc::spawn("curl", &mut c)?.finish(limit + Duration::from_secs(15))?;
    // Let the statistics catch up with the last packets.
    std::thread::sleep(Duration::from_millis(500));
    let after = link.bytes_toward_a()?;
    let f: Vec<f64> = out
        .split_whitespace()
        .filter_map(|x| x.parse().ok())
        .collect();
    let [speed, bytes, secs, first] = f[..] else {
        bail!("curl printed {out:?} ({status:?})");
    };
    let code = status.and_then(|s| s.code());
    let ok = code == Some(0) && {
        let (n, sha) = hash_file(dest)?;
        n == file.size && sha == file.sha
    };
    let goodput = speed * 8.0;
    let capacity = link
        .segs
        .iter()
        .map(Segment::capacity_bps)
        .fold(f64::INFINITY, f64::min);
    let mut row = json!({
        "goodput_bps": goodput,
        "efficiency": goodput / capacity,
        "capacity_bps": capacity,
        "secs": secs,
        "first_byte_s": first,
        "bytes": bytes,
        "bytes_ok": ok,
        "timed_out": code == Some(28),
        "curl_exit": code,
    });
    for (i, s) in link.segs.iter().enumerate() {
        let wire = after[i].saturating_sub(before[i]);
        row[format!("wire_bytes_{}", s.name)] = json!(wire);
        row[format!("wire_per_goodput_{}", s.name)] = json!(wire as f64 / bytes.max(1.0));
    }
    Ok(row)
}

/// Runs the chain scenario on `segs` (the client's side first): `repeats` downloads of
/// `size` bytes per system, each row written to `out`.
///
/// # Errors
/// Infrastructure failures (the chain, a server or a gateway that will not start).
#[allow(clippy::too_many_arguments)]
pub fn run(
    bins: &Bins,
    work: &Path,
    www: &Path,
    out: &mut Out,
    segs: [Segment; 2],
    size: u64,
    repeats: usize,
    systems: &[&str],
) -> Result<Vec<Value>> {
    let file = make_file(www, "chain.bin", size)?;
    std::fs::write(www.join("probe.txt"), "x")?;
    let link = ChainLink::start(bins, work, segs)?;
    let path = format!("{}-{}", segs[0].name, segs[1].name);
    let [ns_a, ns_m, ns_b] = link.namespaces();
    let http_log = std::fs::File::create(work.join("chain-http.log"))?;
    let _http = Proc::spawn(
        "python3 http.server",
        in_ns(&ns_b, "python3")
            .args(["-m", "http.server", "--bind", ADDR_SERVER, "--directory"])
            .arg(www)
            .arg(HTTP_PORT.to_string())
            .stdin(Stdio::null())
            .stdout(http_log.try_clone()?)
            .stderr(http_log),
    )?;
    let probe_url = format!("http://{ADDR_SERVER}:{HTTP_PORT}/probe.txt");
    wait_probe(&ns_a, false, &probe_url, Duration::from_secs(30))?;
    let dest = work.join("chain.out");
    let mut rows = Vec::new();
    let ctcp_limit = Duration::from_secs(120);
    let kernel_limit = Duration::from_secs(60);
    let keys = [
        write_key(work, "chain-psk-1", 281)?,
        write_key(work, "chain-psk-2", 282)?,
    ];
    for &system in systems {
        for rep in 0..repeats {
            // A fresh set of gateways per download: cold sessions, like a first transfer.
            let mut procs = Vec::new();
            let mut relay_pid = None;
            let socks = system.starts_with("ctcp");
            let port = |a: &str| format!("{a}:{CTCP_PORT}");
            match system {
                "ctcp-e2e" => {
                    procs.push(gateway(
                        "chain-reverse",
                        &ns_b,
                        &bins.reverse,
                        &[
                            "--listen".into(),
                            port(ADDR_SERVER),
                            "--psk-file".into(),
                            keys[0].clone(),
                        ],
                        work,
                    )?);
                }
                "ctcp-relay" => {
                    procs.push(gateway(
                        "chain-reverse",
                        &ns_b,
                        &bins.reverse,
                        &[
                            "--listen".into(),
                            port(ADDR_SERVER),
                            "--psk-file".into(),
                            keys[1].clone(),
                        ],
                        work,
                    )?);
                    let relay = gateway(
                        "chain-relay",
                        &ns_m,
                        &bins.reverse,
                        &[
                            "--listen".into(),
                            port(ADDR_MIDDLE),
                            "--psk-file".into(),
                            keys[0].clone(),
                            "--next-hop".into(),
                            port(ADDR_SERVER),
                            "--next-psk-file".into(),
                            keys[1].clone(),
                        ]
                        .into_iter()
                        .chain(relay_args())
                        .collect::<Vec<_>>(),
                        work,
                    )?;
                    relay_pid = Some(relay.pid());
                    procs.push(relay);
                }
                "bbr" | "cubic" => link.set_cc(system)?,
                other => bail!("unknown chain system {other} (ctcp-e2e, ctcp-relay, bbr, cubic)"),
            }
            if socks {
                let peer = if system == "ctcp-e2e" {
                    port(ADDR_SERVER)
                } else {
                    port(ADDR_MIDDLE)
                };
                procs.push(gateway(
                    "chain-forward",
                    &ns_a,
                    &bins.forward,
                    &[
                        "--listen".into(),
                        SOCKS.into(),
                        "--peer".into(),
                        peer,
                        "--psk-file".into(),
                        keys[0].clone(),
                        "--fast-open".into(),
                        "true".into(),
                    ],
                    work,
                )?);
                wait_probe(&ns_a, true, &probe_url, Duration::from_secs(60))?;
            }
            let limit = if socks { ctcp_limit } else { kernel_limit };
            let mut row = download(&link, &file, socks, &dest, limit)?;
            row["mode"] = json!("chain");
            row["system"] = json!(system);
            row["repeat"] = json!(rep);
            row["size"] = json!(size);
            row["path"] = json!(path);
            row["segments"] = json!(segs
                .iter()
                .map(|s| json!({"name": s.name, "rate_bps": s.rate_bps, "rtt_ms": s.rtt_ms, "loss": s.loss, "queue_bytes": s.queue_bytes(), "seed": s.seed}))
                .collect::<Vec<_>>());
            if let Some(pid) = relay_pid {
                row["peak_rss_relay_bytes"] = json!(vm_hwm(pid));
                row["relay_args"] = json!(relay_args().join(" "));
            }
            println!(
                "chain {path} {system:<10} #{rep}: {:6.2} Mbit/s  efficiency {:.3}  first byte {:.2} s  wire/goodput sat {:.3} radio {:.3}  ok {}",
                row["goodput_bps"].as_f64().unwrap_or(0.0) / 1e6,
                row["efficiency"].as_f64().unwrap_or(0.0),
                row["first_byte_s"].as_f64().unwrap_or(0.0),
                row["wire_per_goodput_sat"].as_f64().unwrap_or(0.0),
                row["wire_per_goodput_radio"].as_f64().unwrap_or(0.0),
                row["bytes_ok"]
            );
            out.write(&row)?;
            rows.push(row);
            drop(procs);
        }
    }
    Ok(rows)
}
