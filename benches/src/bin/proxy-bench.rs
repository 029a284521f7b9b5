//! Measures the real ctcp-forward and ctcp-reverse binaries as separate processes on
//! loopback: one bulk transfer's rate and each proxy's CPU seconds, then N concurrent
//! streams and each proxy's peak RSS; with SOAK_SECS, a soak: STREAMS streams held open
//! and trickling data for that long, sampling each proxy's RSS and open file descriptors
//! every 10 s. Every transfer is SHA-256 checked.
//!
//! The concurrent streams carry `STREAM_KIB` KiB each (default 1024). All of them are
//! opened first (SOCKS handshake and the tunnel's open), then start writing at once. Two
//! aggregate rates, each against the bulk stream's (issue 26: within 10 % of one stream):
//! "all moving", the bytes the sink received from the gate's opening until the first
//! stream finished (every stream open and sending), and "whole", the data phase until the
//! last stream finished. The time from the first stream's end to the last's shows how
//! evenly the session served them. STREAMS = 0 skips this phase.
//!
//! With `SESSIONS=N` (N > 1) it starts N forward processes, each its own session into the
//! one reverse (`WORKERS=W` passes `--workers W` to it), and then has each move MB MiB
//! through one stream at once: the aggregate rate against the bulk stream's (one
//! session), and the CPU seconds of the forwards and of the reverse (issue 26, the
//! end-to-end case of "sessions across cores").
//! `cargo build --release -p ctcp-forward -p ctcp-reverse && \
//!  cargo run --release -p ctcp-benches --bin proxy-bench [-- MB STREAMS [SOAK_SECS]]`
//! `SESSIONS=8 WORKERS=2 target/release/proxy-bench 300 0`: the 8-process case.
//! `DIRECT=1` then runs the bulk transfer and the concurrent streams again straight to the
//! sink (loopback TCP, no proxies): kernel TCP's own ratio of 1,000 streams to one here.
//! `DOWNLOAD=1` turns every timed phase around: the client reads from an origin through
//! the proxies (the reverse sends, the forward receives), as a user behind the forward
//! mostly does.
//! `SERIES=1` prints, for each gated phase, the MB the sink received in each 100 ms from the
//! gate's opening (`SERIES=MS`: in each MS ms), the CPU each process used meanwhile and the
//! machine's idle share (to stderr): where a phase lost its time, ramp or tail, and whether
//! the cores were idle then.

use anyhow::{bail, Context};
use ctcp_benches::{counting_sink, fill_block, socks_connect, SinkProgress};
use sha2::{Digest, Sha256};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

struct Proc(Child);
impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// (user + system CPU seconds, RSS kB) of a process from /proc.
fn usage(pid: u32) -> anyhow::Result<(f64, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let after = stat.rsplit_once(')').context("stat format")?.1;
    let f: Vec<&str> = after.split_whitespace().collect();
    let tick = 100.0; // USER_HZ on Linux
    let cpu = (f[11].parse::<f64>()? + f[12].parse::<f64>()?) / tick;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let rss = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    Ok((cpu, rss))
}

fn bin(name: &str) -> anyhow::Result<PathBuf> {
    let p = std::env::current_exe()?.with_file_name(name);
    if !p.exists() {
        bail!(
            "{} not found: build it with `cargo build --release -p {name}`",
            p.display()
        );
    }
    Ok(p)
}

async fn push(
    socks: std::net::SocketAddr,
    sink: std::net::SocketAddr,
    bytes: u64,
    seed: u64,
) -> anyhow::Result<[u8; 32]> {
    let (p, digest) = pattern(bytes as usize, seed, 1);
    push_pattern(socks, sink, p, 1, None).await?;
    Ok(digest)
}

/// A gated phase's gate: where a connection reports itself open, and the signal to start.
type Gate = (
    tokio::sync::mpsc::Sender<()>,
    tokio::sync::watch::Receiver<bool>,
);

/// Connects to `far` through the SOCKS port `socks` (straight, if `socks == far`: the
/// kernel-TCP baseline, `DIRECT=1`); with a gate, reports the connection as open and waits
/// for the gate to open.
async fn connect_gated(
    socks: std::net::SocketAddr,
    far: std::net::SocketAddr,
    gate: Option<Gate>,
) -> anyhow::Result<tokio::net::TcpStream> {
    let c = if socks == far {
        tokio::net::TcpStream::connect(far).await?
    } else {
        socks_connect(socks, far).await?
    };
    if let Some((opened, mut go)) = gate {
        opened.send(()).await?;
        go.wait_for(|g| *g).await?;
    }
    Ok(c)
}

/// Connects through the SOCKS port; with a gate, reports the connection as open and
/// waits for the gate to open before writing; then writes `pattern` `repeat` times and
/// closes. The pattern and its digest are made before the clock starts, so the timed
/// part costs the load generator only the writes.
async fn push_pattern(
    socks: std::net::SocketAddr,
    sink: std::net::SocketAddr,
    pattern: std::sync::Arc<Vec<u8>>,
    repeat: u64,
    gate: Option<Gate>,
) -> anyhow::Result<()> {
    let mut c = connect_gated(socks, sink, gate).await?;
    for _ in 0..repeat {
        c.write_all(&pattern).await?;
    }
    c.shutdown().await?;
    Ok(())
}

/// With `DOWNLOAD=1`: the source the client reads from, and where the client's reads are
/// counted and checked, as the sink's are for an upload.
struct Download {
    /// Blocks the source serves, by length (registered before a phase's clock starts).
    blocks: std::sync::Mutex<std::collections::HashMap<u64, std::sync::Arc<Vec<u8>>>>,
    /// Each finished read's byte count and SHA-256.
    results: tokio::sync::mpsc::UnboundedSender<(u64, [u8; 32])>,
    /// The client's bytes read and connections read to the end.
    progress: std::sync::Arc<SinkProgress>,
}

/// Set once by `main` when the benchmark runs downloads.
static DOWNLOAD: std::sync::OnceLock<Download> = std::sync::OnceLock::new();

/// A server that answers each connection's request (a block length and a repeat count,
/// two little-endian u64s) with that registered block repeated, then closes: the origin
/// of a download.
async fn pattern_source() -> anyhow::Result<std::net::SocketAddr> {
    let l = ctcp_runtime::listen::bind(std::net::SocketAddr::from(([127, 0, 0, 1], 0)))?;
    let addr = l.local_addr()?;
    tokio::spawn(async move {
        while let Ok((mut c, _)) = l.accept().await {
            tokio::spawn(async move {
                let mut req = [0u8; 16];
                c.read_exact(&mut req).await?;
                let [len, repeat] = [0, 8]
                    .map(|i| u64::from_le_bytes(req[i..i + 8].try_into().unwrap_or_default()));
                let block = DOWNLOAD
                    .get()
                    .and_then(|d| d.blocks.lock().ok()?.get(&len).cloned())
                    .context("no such block")?;
                for _ in 0..repeat {
                    c.write_all(&block).await?;
                }
                c.shutdown().await?;
                anyhow::Ok(())
            });
        }
    });
    Ok(addr)
}

/// Moves `pattern` `repeat` times between the client and `far` through `socks` (or
/// straight, if `socks == far`): written to the sink, or with `DOWNLOAD=1` read from the
/// source, counted and checked as the sink does.
async fn transfer(
    socks: std::net::SocketAddr,
    far: std::net::SocketAddr,
    pattern: std::sync::Arc<Vec<u8>>,
    repeat: u64,
    gate: Option<Gate>,
) -> anyhow::Result<()> {
    let Some(down) = DOWNLOAD.get() else {
        return push_pattern(socks, far, pattern, repeat, gate).await;
    };
    let mut c = connect_gated(socks, far, gate).await?;
    let mut req = [0u8; 16];
    req[..8].copy_from_slice(&(pattern.len() as u64).to_le_bytes());
    req[8..].copy_from_slice(&repeat.to_le_bytes());
    c.write_all(&req).await?;
    let (mut h, mut n, mut buf) = (Sha256::new(), 0u64, vec![0u8; 256 << 10]);
    loop {
        let k = c.read(&mut buf).await?;
        if k == 0 {
            break;
        }
        h.update(&buf[..k]);
        n += k as u64;
        down.progress.bytes.fetch_add(k as u64, Ordering::Relaxed);
    }
    down.progress.finished.fetch_add(1, Ordering::Relaxed);
    let _ = down.results.send((n, h.finalize().into()));
    Ok(())
}

/// `len` pattern bytes and the SHA-256 of the pattern repeated `repeat` times.
fn pattern(len: usize, seed: u64, repeat: u64) -> (std::sync::Arc<Vec<u8>>, [u8; 32]) {
    let mut p = vec![0u8; len];
    fill_block(seed, &mut p);
    let mut h = Sha256::new();
    for _ in 0..repeat {
        h.update(&p);
    }
    let p = std::sync::Arc::new(p);
    if let Some(d) = DOWNLOAD.get() {
        if let Ok(mut blocks) = d.blocks.lock() {
            blocks.insert(len as u64, p.clone());
        }
    }
    (p, h.finalize().into())
}

/// (RSS kB now, open file descriptors) of a process.
fn rss_and_fds(pid: u32) -> anyhow::Result<(u64, usize)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let rss = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))?.count();
    Ok((rss, fds))
}

/// One soak stream: 16 KiB about once a second until `until`, then FIN; its digest.
async fn trickle(
    socks: std::net::SocketAddr,
    sink: std::net::SocketAddr,
    until: tokio::time::Instant,
    seed: u64,
) -> anyhow::Result<(u64, [u8; 32])> {
    let mut c = socks_connect(socks, sink).await?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 16 << 10];
    let (mut i, mut total) = (seed << 32, 0u64);
    // Spread the streams' writes over the second.
    tokio::time::sleep(Duration::from_millis(seed % 1000)).await;
    while tokio::time::Instant::now() < until {
        fill_block(i, &mut buf);
        h.update(&buf);
        c.write_all(&buf).await?;
        total += buf.len() as u64;
        i += 1;
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    c.shutdown().await?;
    Ok((total, h.finalize().into()))
}

/// Holds `streams` streams open for `secs`, sampling both proxies every 10 s.
async fn soak(
    socks: std::net::SocketAddr,
    sink: std::net::SocketAddr,
    results: &mut tokio::sync::mpsc::UnboundedReceiver<(u64, [u8; 32])>,
    pids: (u32, u32),
    streams: usize,
    secs: u64,
) -> anyhow::Result<()> {
    let until = tokio::time::Instant::now() + Duration::from_secs(secs);
    let mut tasks = Vec::with_capacity(streams);
    for s in 0..streams {
        tasks.push(tokio::spawn(trickle(socks, sink, until, 5000 + s as u64)));
    }
    println!("soak: {streams} streams for {secs} s; t_s fwd_rss_mb fwd_fds rev_rss_mb rev_fds");
    let mut samples = Vec::new();
    let t0 = tokio::time::Instant::now();
    while tokio::time::Instant::now() < until {
        tokio::time::sleep(Duration::from_secs(10)).await;
        let (fr, ff) = rss_and_fds(pids.0)?;
        let (rr, rf) = rss_and_fds(pids.1)?;
        let t = t0.elapsed().as_secs();
        println!(
            "soak: {t} {:.1} {ff} {:.1} {rf}",
            fr as f64 / 1024.0,
            rr as f64 / 1024.0
        );
        samples.push((fr, ff, rr, rf));
    }
    let mut want = std::collections::HashMap::new();
    for task in tasks {
        *want.entry(task.await??).or_insert(0) += 1;
    }
    for _ in 0..streams {
        let got = tokio::time::timeout(Duration::from_secs(60), results.recv())
            .await?
            .context("sink")?;
        match want.get_mut(&got) {
            Some(c) if *c > 0 => *c -= 1,
            _ => bail!("soak stream corrupted ({} bytes)", got.0),
        }
    }
    // Growth from the first sample after ramp-up (30 s) to the last.
    let base = samples
        .get(2)
        .or(samples.first())
        .copied()
        .unwrap_or_default();
    let last = samples.last().copied().unwrap_or_default();
    let pct = |a: u64, b: u64| (b as f64 - a as f64) / a.max(1) as f64 * 100.0;
    println!(
        "soak: all {streams} streams SHA-256 ok; RSS change after ramp-up forward {:+.1} %, reverse {:+.1} %; fds forward {} -> {}, reverse {} -> {}",
        pct(base.0, last.0),
        pct(base.2, last.2),
        base.1,
        last.1,
        base.3,
        last.3
    );
    Ok(())
}

/// The same bulk transfer and concurrent streams straight to the sink over loopback TCP,
/// no proxies: what the kernel's own TCP makes of 1,000 sockets against one on this
/// machine, with the same load generator and sink.
async fn direct_baseline(
    mb: u64,
    streams: usize,
    sink: std::net::SocketAddr,
    results: &mut tokio::sync::mpsc::UnboundedReceiver<(u64, [u8; 32])>,
    progress: &std::sync::Arc<SinkProgress>,
) -> anyhow::Result<()> {
    let secs = bulk_transfer(sink, sink, mb, results).await?;
    let bulk = (mb * 1_048_576) as f64 / secs / 1e6;
    let mut line = format!("direct TCP: bulk {mb} MiB {bulk:.1} MB/s");
    if streams > 0 {
        let (p, kib, all) = streams_phase(sink, sink, streams, results, progress).await?;
        let (moving, aggregate) = p.rates(all);
        line += &format!(
            "; {streams} concurrent streams x {kib} KiB: all moving {moving:.1} MB/s ({:.2} x the bulk stream), whole {aggregate:.1} MB/s ({:.2} x); all SHA-256 ok",
            moving / bulk,
            aggregate / bulk
        );
    }
    println!("{line}");
    Ok(())
}

/// `mb` MiB through `via` (a forward's SOCKS port, or `sink` itself: straight there),
/// checked at the sink; the seconds it took.
async fn bulk_transfer(
    via: std::net::SocketAddr,
    sink: std::net::SocketAddr,
    mb: u64,
    results: &mut tokio::sync::mpsc::UnboundedReceiver<(u64, [u8; 32])>,
) -> anyhow::Result<f64> {
    let total = mb * 1_048_576;
    let (block, sent) = pattern(1 << 20, 1, mb);
    let t = ctcp_runtime::clock::now();
    transfer(via, sink, block, mb, None).await?;
    let (n, got) = results.recv().await.context("sink")?;
    let secs = t.elapsed().as_secs_f64();
    if n != total || got != sent {
        bail!("bulk transfer corrupted: {n} of {total} bytes");
    }
    Ok(secs)
}

/// `streams` concurrent connections through `via` (as [`bulk_transfer`]), `STREAM_KIB`
/// KiB each (default 1024), gated: the phase's timings, the KiB per stream and the bytes
/// in all.
async fn streams_phase(
    via: std::net::SocketAddr,
    sink: std::net::SocketAddr,
    streams: usize,
    results: &mut tokio::sync::mpsc::UnboundedReceiver<(u64, [u8; 32])>,
    progress: &std::sync::Arc<SinkProgress>,
) -> anyhow::Result<(Phase, u64, u64)> {
    let kib: u64 = std::env::var("STREAM_KIB").map_or(Ok(1024), |s| s.parse())?;
    let per = kib * 1024;
    // Every stream carries the same bytes: one digest to check them all against.
    let (block, digest) = pattern(per as usize, 2, 1);
    let p = run_gated(
        &vec![via; streams],
        sink,
        &block,
        1,
        digest,
        results,
        progress,
    )
    .await?;
    Ok((p, kib, per * streams as u64))
}

/// The processes whose CPU `series` samples: the first forward, the reverse, and this one.
static SERIES_PIDS: std::sync::OnceLock<[u32; 3]> = std::sync::OnceLock::new();

/// Prints the MB `progress` counted in each interval (`SERIES=1`: 100 ms, `SERIES=MS`: MS
/// ms), each after the ms since the gate, with the CPU each of [`SERIES_PIDS`] used
/// meanwhile and the machine's idle share (in % of one core / of all cores, at /proc's
/// 10 ms resolution), until `stop` is set: where a phase lost its time, and whether the
/// cores sat idle then. A thread of its own, so a busy runtime cannot delay the samples.
fn series(
    progress: std::sync::Arc<SinkProgress>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let pids = SERIES_PIDS.get().copied().unwrap_or_default();
        let cpu = || pids.map(|p| usage(p).map_or(0.0, |u| u.0));
        let ms: u64 = std::env::var("SERIES")
            .ok()
            .and_then(|s| s.parse().ok())
            .filter(|&m| m > 1)
            .unwrap_or(100);
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
        let t0 = ctcp_runtime::clock::now();
        let sample = || {
            let at = ctcp_runtime::clock::now();
            (
                progress.bytes.load(Ordering::Relaxed),
                cpu(),
                idle_secs(),
                at,
            )
        };
        let mut last = sample();
        eprint!("ms since the gate: MB (CPU % forward/reverse/load generator, idle %):");
        for k in 1.. {
            if stop.load(Ordering::Relaxed) {
                break;
            }
            let next = t0 + Duration::from_millis(ms * k);
            std::thread::sleep(next.saturating_duration_since(ctcp_runtime::clock::now()));
            let now = sample();
            let secs = (now.3 - last.3).as_secs_f64();
            let pct = |i: usize| ((now.1[i] - last.1[i]) * 100.0 / secs).round();
            eprint!(
                " {}: {:.1} ({}/{}/{}, {:.0})",
                (now.3 - t0).as_millis(),
                now.0.saturating_sub(last.0) as f64 / 1e6,
                pct(0),
                pct(1),
                pct(2),
                (now.2 - last.2) * 100.0 / secs / cores
            );
            last = now;
        }
        eprintln!();
    })
}

/// Seconds all cores have sat idle since boot (/proc/stat), 0 if unreadable.
fn idle_secs() -> f64 {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let idle = stat
        .lines()
        .next()
        .and_then(|l| l.split_whitespace().nth(4))
        .and_then(|v| v.parse::<f64>().ok());
    idle.unwrap_or(0.0) / 100.0 // USER_HZ
}

/// One gated phase's timings: every connection opened first, then all written at once.
struct Phase {
    /// From the first connect until every connection was open.
    open_secs: f64,
    /// From the gate until the first connection was read to its end at the sink.
    first_secs: f64,
    /// Bytes the sink received meanwhile (every connection was moving).
    first_bytes: u64,
    /// Until half had ended.
    half_secs: f64,
    /// Until the last had ended.
    data_secs: f64,
}

impl Phase {
    /// MB/s while every connection was moving and over the whole data phase, for `all`
    /// bytes in all.
    fn rates(&self, all: u64) -> (f64, f64) {
        (
            self.first_bytes as f64 / self.first_secs / 1e6,
            all as f64 / self.data_secs / 1e6,
        )
    }
}

/// Opens one SOCKS connection per entry of `via` (its forward's SOCKS port), waits until
/// all are open, then has each write `block` `repeat` times at once; checks every one at
/// the sink against `digest`.
async fn run_gated(
    via: &[std::net::SocketAddr],
    sink: std::net::SocketAddr,
    block: &std::sync::Arc<Vec<u8>>,
    repeat: u64,
    digest: [u8; 32],
    results: &mut tokio::sync::mpsc::UnboundedReceiver<(u64, [u8; 32])>,
    progress: &std::sync::Arc<SinkProgress>,
) -> anyhow::Result<Phase> {
    let n = via.len();
    let t = ctcp_runtime::clock::now();
    let (opened_tx, mut opened) = tokio::sync::mpsc::channel(n.max(1));
    let (go, gate) = tokio::sync::watch::channel(false);
    let mut tasks = Vec::with_capacity(n);
    for &socks in via {
        let g = Some((opened_tx.clone(), gate.clone()));
        tasks.push(tokio::spawn(transfer(
            socks,
            sink,
            block.clone(),
            repeat,
            g,
        )));
    }
    drop(opened_tx);
    for _ in 0..n {
        tokio::time::timeout(Duration::from_secs(60), opened.recv())
            .await?
            .context("a connection failed to open")?;
    }
    let open_secs = t.elapsed().as_secs_f64();
    let t = ctcp_runtime::clock::now();
    let (bytes0, done0) = (
        progress.bytes.load(Ordering::Relaxed),
        progress.finished.load(Ordering::Relaxed),
    );
    // Samples the sink until the first connection ends (the bytes so far moved while all
    // were moving), then until half have.
    let watch = progress.clone();
    let half = (n as u64 / 2).max(1);
    let all_moving = tokio::spawn(async move {
        let finished = || watch.finished.load(Ordering::Relaxed) - done0;
        while finished() == 0 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let bytes = watch.bytes.load(Ordering::Relaxed) - bytes0;
        let first = t.elapsed().as_secs_f64();
        while finished() < half {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        (first, bytes, t.elapsed().as_secs_f64())
    });
    let stop_series = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let series = std::env::var_os("SERIES").map(|_| series(progress.clone(), stop_series.clone()));
    go.send_replace(true);
    for task in tasks {
        task.await??;
    }
    let per = block.len() as u64 * repeat;
    for _ in 0..n {
        let (got, d) = tokio::time::timeout(Duration::from_secs(60), results.recv())
            .await?
            .context("sink")?;
        if got != per || d != digest {
            bail!("a connection's bytes were corrupted ({got} of {per})");
        }
    }
    let data_secs = t.elapsed().as_secs_f64();
    let (first_secs, first_bytes, half_secs) = all_moving.await?;
    if let Some(s) = series {
        stop_series.store(true, Ordering::Relaxed);
        let _ = s.join();
    }
    Ok(Phase {
        open_secs,
        first_secs,
        first_bytes,
        half_secs,
        data_secs,
    })
}

/// Starts a forward listening on `tcp`, its session to the reverse at `udp`.
fn start_forward(
    tcp: std::net::SocketAddr,
    udp: std::net::SocketAddr,
    key: &std::path::Path,
) -> anyhow::Result<Proc> {
    Ok(Proc(
        Command::new(bin("ctcp-forward")?)
            .args([
                "--listen",
                &tcp.to_string(),
                "--peer",
                &udp.to_string(),
                "--psk-file",
            ])
            .arg(key)
            .args(["--log-level", "warn", "--max-streams", "4096"])
            .stderr(Stdio::null())
            .spawn()?,
    ))
}

/// Waits until the SOCKS port `tcp` answers and its tunnel carries a stream.
async fn ready(
    tcp: std::net::SocketAddr,
    sink: std::net::SocketAddr,
    results: &mut tokio::sync::mpsc::UnboundedReceiver<(u64, [u8; 32])>,
) -> anyhow::Result<()> {
    let deadline = ctcp_runtime::clock::now() + Duration::from_secs(10);
    loop {
        if let Ok(Ok(d)) = tokio::time::timeout(Duration::from_secs(2), push(tcp, sink, 1, 0)).await
        {
            let (_, got) = results.recv().await.context("sink")?;
            if got != d {
                bail!("warm-up checksum mismatch");
            }
            return Ok(());
        }
        if ctcp_runtime::clock::now() > deadline {
            bail!("proxies did not come up");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mb: u64 = std::env::args().nth(1).map_or(Ok(100), |s| s.parse())?;
    let streams: usize = std::env::args().nth(2).map_or(Ok(1000), |s| s.parse())?;
    let soak_secs: u64 = std::env::args().nth(3).map_or(Ok(0), |s| s.parse())?;
    let sessions: usize = std::env::var("SESSIONS").map_or(Ok(1), |s| s.parse())?;
    let workers = std::env::var("WORKERS").ok();
    let dir = std::env::temp_dir().join(format!("ctcp-proxy-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let key = dir.join("psk");
    std::fs::write(&key, "7c".repeat(32))?;
    let udp = std::net::UdpSocket::bind("127.0.0.1:0")?.local_addr()?;
    let mut reverse = Command::new(bin("ctcp-reverse")?);
    reverse
        .args(["--listen", &udp.to_string(), "--psk-file"])
        .arg(&key)
        // The origins are on loopback, which the default ACL denies.
        .args(["--allow", "127.0.0.1"])
        .args(["--log-level", "warn"])
        .stderr(Stdio::null());
    if let Some(w) = &workers {
        reverse.args(["--workers", w]);
    }
    let rev = Proc(reverse.spawn()?);
    let mut tcps = Vec::with_capacity(sessions.max(1));
    let mut fwds = Vec::with_capacity(sessions.max(1));
    for _ in 0..sessions.max(1) {
        let tcp = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
        fwds.push(start_forward(tcp, udp, &key)?);
        tcps.push(tcp);
    }
    let (tcp, fwd) = (tcps[0], &fwds[0]);
    let _ = SERIES_PIDS.set([fwd.0.id(), rev.0.id(), std::process::id()]);
    let (sink, mut results, progress) = counting_sink().await?;
    for &t in &tcps {
        ready(t, sink, &mut results).await?;
    }
    // From here on, `sink` is where the timed phases' bytes come from or go to.
    let (sink, mut results, progress) = if std::env::var("DOWNLOAD").is_ok_and(|v| v == "1") {
        if soak_secs > 0 {
            bail!("DOWNLOAD=1 does not apply to the soak");
        }
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let down = Download {
            blocks: Default::default(),
            results: tx,
            progress: Default::default(),
        };
        let p = down.progress.clone();
        let _ = DOWNLOAD.set(down);
        println!("DOWNLOAD=1: every phase below reads from an origin through the proxies");
        (pattern_source().await?, rx, p)
    } else {
        (sink, results, progress)
    };

    let total = mb * 1_048_576;
    let me = std::process::id();
    let (f0, _) = usage(fwd.0.id())?;
    let (r0, _) = usage(rev.0.id())?;
    let (l0, _) = usage(me)?;
    let secs = bulk_transfer(tcp, sink, mb, &mut results).await?;
    let (f1, _) = usage(fwd.0.id())?;
    let (r1, _) = usage(rev.0.id())?;
    let (l1, _) = usage(me)?;
    println!(
        "bulk: {mb} MiB in {secs:.2} s = {:.1} MB/s; CPU per 100 MiB: forward {:.2} s, reverse {:.2} s, both {:.2} s, this load generator {:.2} s; SHA-256 ok",
        total as f64 / secs / 1e6,
        (f1 - f0) * 100.0 / mb as f64,
        (r1 - r0) * 100.0 / mb as f64,
        (f1 - f0 + r1 - r0) * 100.0 / mb as f64,
        (l1 - l0) * 100.0 / mb as f64
    );

    // Many concurrent streams, all opened first, then written at once.
    let bulk = total as f64 / secs / 1e6;
    if streams > 0 {
        let (f0, _) = usage(fwd.0.id())?;
        let (r0, _) = usage(rev.0.id())?;
        let (l0, _) = usage(me)?;
        let (p, kib, all) = streams_phase(tcp, sink, streams, &mut results, &progress).await?;
        let (f1, frss) = usage(fwd.0.id())?;
        let (r1, rrss) = usage(rev.0.id())?;
        let (l1, _) = usage(me)?;
        // CPU per 100 MiB over the open and data phases together.
        let per_100 = |s: f64| s * 100.0 * 1_048_576.0 / all as f64;
        let (fcpu, rcpu, load) = (per_100(f1 - f0), per_100(r1 - r0), per_100(l1 - l0));
        let (moving, aggregate) = p.rates(all);
        println!(
            "{streams} concurrent streams x {kib} KiB: opened in {:.2} s; all moving {:.2} s, {:.0} % of the bytes, {moving:.1} MB/s aggregate ({:.2} x the bulk stream); whole {:.2} s = {aggregate:.1} MB/s ({:.2} x); streams done at first {:.2} s, half {:.2} s, last {:.2} s; CPU per 100 MiB: forward {fcpu:.2} s, reverse {rcpu:.2} s, both {:.2} s, this load generator {load:.2} s; all SHA-256 ok; peak RSS forward {} MB, reverse {} MB",
            p.open_secs,
            p.first_secs,
            p.first_bytes as f64 * 100.0 / all as f64,
            moving / bulk,
            p.data_secs,
            aggregate / bulk,
            p.first_secs,
            p.half_secs,
            p.data_secs,
            fcpu + rcpu,
            frss / 1024,
            rrss / 1024
        );
    }
    if sessions > 1 {
        // One stream of `mb` MiB through each forward process (each its own session).
        let (block, digest) = pattern(1 << 20, 3, mb);
        let cpu =
            |pids: &[u32]| -> anyhow::Result<f64> { pids.iter().map(|&p| Ok(usage(p)?.0)).sum() };
        let fpids: Vec<u32> = fwds.iter().map(|f| f.0.id()).collect();
        let (f0, r0, g0) = (cpu(&fpids)?, usage(rev.0.id())?.0, usage(me)?.0);
        let p = run_gated(&tcps, sink, &block, mb, digest, &mut results, &progress).await?;
        let (f1, r1, g1) = (cpu(&fpids)?, usage(rev.0.id())?.0, usage(me)?.0);
        let all = total * sessions as u64;
        let per100 = |c: f64| c * 100.0 * 1_048_576.0 / all as f64;
        let (moving, aggregate) = p.rates(all);
        println!(
            "{sessions} sessions (forward processes) x {mb} MiB into one reverse (workers {}): all moving {:.2} s, {moving:.1} MB/s aggregate ({:.2} x the one session); whole {:.2} s = {aggregate:.1} MB/s ({:.2} x); sessions done at first {:.2} s, half {:.2} s, last {:.2} s; CPU per 100 MiB: forwards {:.2} s, reverse {:.2} s, both {:.2} s, this load generator {:.2} s; cores busy over the whole: reverse {:.2}, all {:.2}; all SHA-256 ok",
            workers.as_deref().unwrap_or("default"),
            p.first_secs,
            moving / bulk,
            p.data_secs,
            aggregate / bulk,
            p.first_secs,
            p.half_secs,
            p.data_secs,
            per100(f1 - f0),
            per100(r1 - r0),
            per100(f1 - f0 + r1 - r0),
            per100(g1 - g0),
            (r1 - r0) / p.data_secs,
            (f1 - f0 + r1 - r0 + g1 - g0) / p.data_secs
        );
    }
    if std::env::var("DIRECT").is_ok_and(|v| v == "1") {
        direct_baseline(mb, streams, sink, &mut results, &progress).await?;
    }
    if soak_secs > 0 {
        let pids = (fwd.0.id(), rev.0.id());
        soak(tcp, sink, &mut results, pids, streams, soak_secs).await?;
    }
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}
