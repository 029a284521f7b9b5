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

/// A relay whose next segment is ten times slower than the one feeding it (issue 28's
/// memory item): a download enters the relay over `fast` (10 Mbit/s, 100 ms, 1 %) and
/// leaves it over `slow` (1 Mbit/s, 100 ms, no loss), so everything the relay lets in
/// beyond what `slow` drains is held in it.
pub const THROTTLED: [Segment; 2] = [
    Segment {
        name: "slow",
        rate_bps: 1_000_000,
        rtt_ms: 100,
        loss: 0.0,
        seed: 30,
    },
    Segment {
        name: "fast",
        rate_bps: 10_000_000,
        rtt_ms: 100,
        loss: 0.01,
        seed: 31,
    },
];

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
        super::link::wait_linkem_ready(&mut link.child, &ready, "chain-linkem.log")?;
        super::link::tune_tcp(&link.namespaces(), super::link::TCP_MEM)?;
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
    // Appended, so a run's repeats all stay in the kept work directory.
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(work.join(format!("{name}.log")))?;
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

/// Starts `system`'s gateways on `link` (none for kernel TCP, whose congestion control it
/// sets instead): the processes and the relay's pid.
fn start_system(
    system: &str,
    link: &ChainLink,
    bins: &Bins,
    work: &Path,
    keys: &[String; 2],
) -> Result<(Vec<Proc>, Option<u32>)> {
    let [ns_a, ns_m, ns_b] = link.namespaces();
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
    }
    Ok((procs, relay_pid))
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
    let [ns_a, _, ns_b] = link.namespaces();
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
            let socks = system.starts_with("ctcp");
            let (procs, relay_pid) = start_system(system, &link, bins, work, &keys)?;
            if socks {
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
            let wire = |s: &Segment| {
                row[format!("wire_per_goodput_{}", s.name)]
                    .as_f64()
                    .unwrap_or(0.0)
            };
            println!(
                "chain {path} {system:<10} #{rep}: {:6.2} Mbit/s  efficiency {:.3}  first byte {:.2} s  wire/goodput {} {:.3} {} {:.3}  ok {}  relay peak RSS {} MB",
                row["goodput_bps"].as_f64().unwrap_or(0.0) / 1e6,
                row["efficiency"].as_f64().unwrap_or(0.0),
                row["first_byte_s"].as_f64().unwrap_or(0.0),
                segs[0].name,
                wire(&segs[0]),
                segs[1].name,
                wire(&segs[1]),
                row["bytes_ok"],
                row["peak_rss_relay_bytes"].as_u64().map_or(0, |b| b >> 20),
            );
            out.write(&row)?;
            rows.push(row);
            drop(procs);
        }
    }
    Ok(rows)
}

/// The delay origin (`python3 -c`, arguments: address, port, bytes/s, seconds): on each
/// connection it writes 1000-byte records, each starting with the wall-clock time of its
/// write (the namespaces share the host's clock) and its sequence number, at a steady
/// rate with no catching up after a blocked write, for the given time, then closes.
pub(crate) const DELAY_SERVER: &str = r#"
import socket, socketserver, struct, sys, time
addr, port, rate, secs = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
REC = 1000
class H(socketserver.BaseRequestHandler):
    def handle(self):
        start = time.monotonic()
        due, seq = start, 0
        while time.monotonic() - start < secs:
            now = time.monotonic()
            if due > now:
                time.sleep(due - now)
            rec = struct.pack("<dq", time.time(), seq) + bytes(REC - 16)
            try:
                self.request.sendall(rec)
            except OSError:
                return
            seq += 1
            due = max(due, time.monotonic()) + REC / rate
class S(socketserver.ThreadingTCPServer):
    allow_reuse_address = True
    daemon_threads = True
S((addr, port), H).serve_forever()
"#;

/// The delay client (`python3 -c`, arguments: SOCKS address, port, target address, port,
/// one-way delay in ms, warm-up s): connects through SOCKS5, reads records to EOF and
/// prints one JSON object: records, and the extra delay (arrival − write − one-way delay)
/// at p50/p90/p99 over all records and over those written after the warm-up.
pub(crate) const DELAY_CLIENT: &str = r#"
import json, socket, struct, sys, time
sh, sp, th, tp, owd, warm = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), float(sys.argv[5]), float(sys.argv[6])
s = socket.create_connection((sh, sp))
s.sendall(b"\x05\x01\x00")
assert s.recv(2) == b"\x05\x00"
s.sendall(b"\x05\x01\x00\x01" + socket.inet_aton(th) + struct.pack(">H", tp))
rep = b""
while len(rep) < 10:
    d = s.recv(10 - len(rep))
    assert d, "SOCKS reply cut short"
    rep += d
assert rep[1] == 0, "SOCKS connect failed: %d" % rep[1]
REC = 1000
buf, delays, first = b"", [], None
while True:
    d = s.recv(65536)
    now = time.time()
    if not d:
        break
    buf += d
    while len(buf) >= REC:
        ts, seq = struct.unpack("<dq", buf[:16])
        buf = buf[REC:]
        if first is None:
            first = ts
        delays.append((ts - first, (now - ts) * 1000.0 - owd))
def q(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round((len(xs) - 1) * p)))] if xs else None
alld = [x for _, x in delays]
steady = [x for t, x in delays if t >= warm]
print(json.dumps({"records": len(delays), "p50_extra_ms": q(alld, .5), "p90_extra_ms": q(alld, .9), "p99_extra_ms": q(alld, .99), "max_extra_ms": max(alld) if alld else None, "max_extra_at_unix": max(delays, key=lambda d: d[1])[0] + first if delays else None, "steady_records": len(steady), "steady_p50_extra_ms": q(steady, .5), "steady_p90_extra_ms": q(steady, .9), "steady_p99_extra_ms": q(steady, .99)}))
"#;

const DELAY_PORT: u16 = 9000;

/// `netbench --chain-delay`: on `segs` (the client's side first), a stream of
/// timestamped records from the last namespace to the first at `rate_bps` for `secs`,
/// through each ctcp system in `systems`; the rows carry the extra delivery delay
/// (arrival − write − the chain's one-way delay) at p50/p90/p99, over every record and
/// over those written after a 5 s warm-up.
///
/// # Errors
/// Infrastructure failures (the chain, the origin or a gateway that will not start).
#[allow(clippy::too_many_arguments)]
pub fn run_delay(
    bins: &Bins,
    work: &Path,
    www: &Path,
    out: &mut Out,
    segs: [Segment; 2],
    rate_bps: u64,
    secs: u64,
    repeats: usize,
    systems: &[&str],
) -> Result<Vec<Value>> {
    std::fs::write(www.join("probe.txt"), "x")?;
    let link = ChainLink::start(bins, work, segs)?;
    let path = format!("{}-{}", segs[0].name, segs[1].name);
    let [ns_a, _, ns_b] = link.namespaces();
    let log = std::fs::File::create(work.join("chain-origins.log"))?;
    let _http = Proc::spawn(
        "python3 http.server",
        in_ns(&ns_b, "python3")
            .args(["-m", "http.server", "--bind", ADDR_SERVER, "--directory"])
            .arg(www)
            .arg(HTTP_PORT.to_string())
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log.try_clone()?),
    )?;
    let _origin = Proc::spawn(
        "python3 delay origin",
        in_ns(&ns_b, "python3")
            .args(["-c", DELAY_SERVER, ADDR_SERVER, &DELAY_PORT.to_string()])
            .arg((rate_bps / 8).to_string())
            .arg(secs.to_string())
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log),
    )?;
    let probe_url = format!("http://{ADDR_SERVER}:{HTTP_PORT}/probe.txt");
    wait_probe(&ns_a, false, &probe_url, Duration::from_secs(30))?;
    let keys = [
        write_key(work, "chain-psk-1", 281)?,
        write_key(work, "chain-psk-2", 282)?,
    ];
    let owd_ms: u64 = segs.iter().map(|s| s.rtt_ms / 2).sum();
    let mut rows = Vec::new();
    for &system in systems {
        if !system.starts_with("ctcp") {
            bail!("--chain-delay measures ctcp systems only (ctcp-e2e, ctcp-relay), not {system}");
        }
        for rep in 0..repeats {
            let (procs, _) = start_system(system, &link, bins, work, &keys)?;
            wait_probe(&ns_a, true, &probe_url, Duration::from_secs(60))?;
            let (host, port) = SOCKS.split_once(':').unwrap_or(("127.0.0.1", "1080"));
            let mut c = in_ns(&ns_a, "python3");
            c.args(["-c", DELAY_CLIENT, host, port, ADDR_SERVER])
                .arg(DELAY_PORT.to_string())
                .arg(owd_ms.to_string())
                .arg("5")
                .stdin(Stdio::null())
                .stdout(Stdio::piped());
            let (status, text) =
                Proc::spawn("delay client", &mut c)?.finish(Duration::from_secs(secs + 60))?;
            let mut row: Value = serde_json::from_str(text.trim())
                .with_context(|| format!("the delay client printed {text:?} ({status:?})"))?;
            row["mode"] = json!("chain-delay");
            row["system"] = json!(system);
            row["path"] = json!(path);
            row["repeat"] = json!(rep);
            row["rate_bps"] = json!(rate_bps);
            row["secs"] = json!(secs);
            row["one_way_delay_ms"] = json!(owd_ms);
            row["segment_loss"] = json!(segs.map(|s| s.loss));
            println!(
                "chain-delay {path} {system:<10} #{rep}: {} records, extra delay p50 {:.0} p90 {:.0} p99 {:.0} ms (after 5 s: {:.0} / {:.0} / {:.0})",
                row["records"],
                row["p50_extra_ms"].as_f64().unwrap_or(f64::NAN),
                row["p90_extra_ms"].as_f64().unwrap_or(f64::NAN),
                row["p99_extra_ms"].as_f64().unwrap_or(f64::NAN),
                row["steady_p50_extra_ms"].as_f64().unwrap_or(f64::NAN),
                row["steady_p90_extra_ms"].as_f64().unwrap_or(f64::NAN),
                row["steady_p99_extra_ms"].as_f64().unwrap_or(f64::NAN),
            );
            out.write(&row)?;
            rows.push(row);
            drop(procs);
        }
    }
    Ok(rows)
}
