//! `--validate`: checks that the emulated link does what it is told — delay (UDP echo RTT),
//! Bernoulli loss (10,000 datagrams), rate (a UDP blast counted by linkem).

use super::link::{Link, LinkSpec, LossModel, ADDR_B, TCP_MEM};
use super::procs::{in_ns, Proc};
use super::workload::Bins;
use anyhow::{Context, Result};
use serde_json::{json, Value};
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

const ECHO_SERVER: &str = r#"
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind((sys.argv[1], int(sys.argv[2])))
while True:
    d, a = s.recvfrom(4096)
    s.sendto(d, a)
"#;

const ECHO_CLIENT: &str = r#"
import socket, sys, time, json, statistics
dst = (sys.argv[1], int(sys.argv[2])); n = int(sys.argv[3])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(1.0)
deadline = time.monotonic() + 10
while True:  # wait for the echo server
    s.sendto(b"hello", dst)
    try:
        if s.recvfrom(4096)[0] == b"hello": break
    except socket.timeout:
        if time.monotonic() > deadline: sys.exit("no echo")
rtts = []
for i in range(n):
    m = str(i).encode(); t = time.perf_counter(); s.sendto(m, dst)
    try:
        while True:
            d = s.recvfrom(4096)[0]
            if d == m:
                rtts.append((time.perf_counter() - t) * 1000); break
    except socket.timeout:
        pass
    time.sleep(0.005)
print(json.dumps({"n": len(rtts), "median": statistics.median(rtts), "min": min(rtts), "max": max(rtts)}))
"#;

const COUNT_SERVER: &str = r#"
import socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
s.bind((sys.argv[1], int(sys.argv[2])))
s.settimeout(30.0); n = 0; seen = set()
try:
    while True:
        d = s.recvfrom(4096)[0]; seen.add(d[:8]); n += 1; s.settimeout(2.0)
except socket.timeout:
    pass
print(len(seen))
"#;

const SENDER: &str = r#"
import socket, sys, time
dst = (sys.argv[1], int(sys.argv[2])); n = int(sys.argv[3]); size = int(sys.argv[4])
bps = float(sys.argv[5]); secs = float(sys.argv[6])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
pad = b"x" * (size - 8); start = time.monotonic(); i = 0
while (n and i < n) or (not n and time.monotonic() - start < secs):
    s.sendto(i.to_bytes(8, "big") + pad, dst); i += 1
    ahead = i * (size + 28) * 8 / bps - (time.monotonic() - start)
    if ahead > 0.002: time.sleep(ahead)
print(i)
"#;

fn python(ns: &str, script: &str, args: &[String]) -> std::process::Command {
    let mut c = in_ns(ns, "python3");
    c.arg("-c").arg(script).args(args);
    c.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    c
}

fn parse<T: std::str::FromStr>(out: &str, what: &str) -> Result<T> {
    out.trim()
        .parse()
        .ok()
        .with_context(|| format!("{what}: unexpected output {out:?}"))
}

/// RTT across a 50 ms one-way link: median of 100 UDP echoes, must be within 2 ms of 100.
fn rtt(bins: &Bins, work: &Path) -> Result<Value> {
    let spec = LinkSpec {
        rtt_ms: 100,
        rate_bps: None,
        queue_bytes: 125_000,
        loss: LossModel::None,
        reorder: None,
        seed: 1,
        jitter: None,
        return_path: None,
        tcp_mem: TCP_MEM,
    };
    let link = Link::start(&bins.linkem, work, &spec)?;
    let _srv = Proc::spawn(
        "echo server",
        &mut python(link.ns_b(), ECHO_SERVER, &[ADDR_B.into(), "9000".into()]),
    )?;
    let args = [ADDR_B.into(), "9000".into(), "100".into()];
    let (_, out) = Proc::spawn("echo client", &mut python(link.ns_a(), ECHO_CLIENT, &args))?
        .finish(Duration::from_secs(60))?;
    let v: Value = serde_json::from_str(out.trim()).context("echo client output")?;
    let median = v["median"].as_f64().context("median")?;
    let ok = (median - 100.0).abs() <= 2.0;
    println!(
        "validate rtt: median {median:.3} ms (min {:.3}, max {:.3}, n {}) for 2 × 50 ms: {}",
        v["min"].as_f64().unwrap_or(0.0),
        v["max"].as_f64().unwrap_or(0.0),
        v["n"],
        pass(ok)
    );
    drop(link);
    Ok(
        json!({"workload": "validate", "test": "rtt", "delay_ms": 50, "target_ms": 100.0,
              "median_ms": median, "min_ms": v["min"], "max_ms": v["max"], "samples": v["n"],
              "pass": ok}),
    )
}

fn pass(ok: bool) -> &'static str {
    if ok {
        "PASS"
    } else {
        "FAIL"
    }
}

/// 10,000 datagrams over a 10 % Bernoulli link: the loss fraction must lie in the
/// binomial 99 % interval p ± 2.576·√(p(1−p)/n).
fn loss(bins: &Bins, work: &Path) -> Result<Value> {
    let (p, n) = (0.10, 10_000u64);
    let spec = LinkSpec {
        rtt_ms: 10,
        rate_bps: None,
        queue_bytes: 125_000,
        loss: LossModel::Bernoulli(p),
        reorder: None,
        seed: 11,
        jitter: None,
        return_path: None,
        tcp_mem: TCP_MEM,
    };
    let link = Link::start(&bins.linkem, work, &spec)?;
    let counter = Proc::spawn(
        "counter",
        &mut python(link.ns_b(), COUNT_SERVER, &[ADDR_B.into(), "9001".into()]),
    )?;
    std::thread::sleep(Duration::from_millis(500));
    let args = [
        ADDR_B.into(),
        "9001".into(),
        n.to_string(),
        "200".into(),
        "4e6".into(),
        "0".into(),
    ];
    let (_, sent) = Proc::spawn("sender", &mut python(link.ns_a(), SENDER, &args))?
        .finish(Duration::from_secs(60))?;
    let sent: u64 = parse(&sent, "sender")?;
    let (_, got) = counter.finish(Duration::from_secs(40))?;
    let got: u64 = parse(&got, "counter")?;
    let snap = link.settled_snapshot()?;
    let frac = 1.0 - got as f64 / sent as f64;
    let linkem_frac = snap.a_to_b.link.lost as f64 / snap.a_to_b.link.packets_in.max(1) as f64;
    let half = 2.576 * (p * (1.0 - p) / n as f64).sqrt();
    let ok = (frac - p).abs() <= half;
    println!(
        "validate loss: {got}/{sent} received, loss {frac:.4} (linkem: {} of {} = {linkem_frac:.4}); 99 % interval [{:.4}, {:.4}]: {}",
        snap.a_to_b.link.lost,
        snap.a_to_b.link.packets_in,
        p - half,
        p + half,
        pass(ok)
    );
    drop(link);
    Ok(
        json!({"workload": "validate", "test": "loss", "loss": p, "sent": sent, "received": got,
              "loss_measured": frac, "loss_linkem": linkem_frac,
              "interval99": [p - half, p + half], "pass": ok}),
    )
}

/// A 15 Mbit/s UDP blast into a 10 Mbit/s link for 8 s: the rate linkem delivers while
/// backlogged (from its counters, 2 s to 7 s) must be within 2 % of 10 Mbit/s.
fn rate(bins: &Bins, work: &Path) -> Result<Value> {
    let target = 10_000_000u64;
    let spec = LinkSpec::bdp_queued(20, target, LossModel::None, 3);
    let link = Link::start(&bins.linkem, work, &spec)?;
    let args = [
        ADDR_B.into(),
        "9002".into(),
        "0".into(),
        "1400".into(),
        "15e6".into(),
        "8".into(),
    ];
    let sender = Proc::spawn("blaster", &mut python(link.ns_a(), SENDER, &args))?;
    std::thread::sleep(Duration::from_secs(2));
    let a = link.snapshot()?.a_to_b;
    std::thread::sleep(Duration::from_secs(5));
    let b = link.snapshot()?.a_to_b;
    sender.finish(Duration::from_secs(15))?;
    let measured = (b.link.bytes_delivered - a.link.bytes_delivered) as f64 * 8.0 / (b.t - a.t);
    let offered = (b.link.bytes_in - a.link.bytes_in) as f64 * 8.0 / (b.t - a.t);
    let err = measured / target as f64 - 1.0;
    let ok = err.abs() <= 0.02 && offered > target as f64;
    println!(
        "validate rate: delivered {:.4} Mbit/s (offered {:.2} Mbit/s, {} queue drops) vs 10 Mbit/s, error {:+.2} %: {}",
        measured / 1e6,
        offered / 1e6,
        b.link.queue_drops - a.link.queue_drops,
        err * 100.0,
        pass(ok)
    );
    drop(link);
    Ok(
        json!({"workload": "validate", "test": "rate", "rate_bps": target,
              "delivered_bps": measured, "offered_bps": offered, "error": err,
              "window_s": b.t - a.t, "pass": ok}),
    )
}

/// Runs the three checks; returns their rows (each with `"pass"`).
///
/// # Errors
/// Infrastructure failures.
pub fn run(bins: &Bins, work: &Path) -> Result<Vec<Value>> {
    Ok(vec![rtt(bins, work)?, loss(bins, work)?, rate(bins, work)?])
}
