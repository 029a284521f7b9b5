//! Sessions across cores (issue 26): how many datagrams per second the reverse side
//! processes with 1 and with 2 (or more) worker threads, each owning a shard of the
//! sessions as `ctcp-reverse --workers N` does.
//!
//! The forward side's datagrams are produced ahead of time: 8 forward endpoints (seeded)
//! each send one stream of pattern bytes through a lossless virtual link (1 ms each way)
//! to the reverse side's shards, and every call made on each shard's endpoint is recorded
//! (the datagrams it was handed, and when). The timed part replays those calls on fresh
//! endpoints with the same seeds, one thread per shard, from memory: the same
//! decryption, decoding, delivery into the stream buffers, reads by the application and
//! ACKs built and sealed as in production, without sockets. Replay is exact (the
//! endpoints are deterministic), which the run checks: every session's stream arrives
//! byte for byte.
//!
//! Each shard count has its own recording (the session keys come from the shard's
//! endpoint); the forward endpoints draw their connection ids so the sessions spread
//! evenly over the shards.
//!
//! ```sh
//! cargo run --release --locked -p ctcp-benches --bin shard-scale -- [--sessions 8]
//!     [--mib 16] [--workers 1,2] [--repeat 5]
//! ```

use anyhow::{bail, Context};
use ctcp_proto::{
    ConnectionHandle, Endpoint, EndpointConfig, Event, OpenResult, Psk, ReadOutcome, Shard, Target,
    TransportConfig,
};
use ctcp_sim::ctcp::pattern_byte;
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// One-way delay of the virtual link.
const DELAY: Duration = Duration::from_millis(1);
/// Virtual time between two rounds of the recording loop.
const STEP: Duration = Duration::from_micros(50);
/// GSO batch size the reverse flushes with, as the runtime's driver does on Linux.
const GSO: usize = 32;

struct Args {
    sessions: usize,
    mib: u64,
    workers: Vec<usize>,
    repeat: usize,
}

fn args() -> anyhow::Result<Args> {
    let mut a = Args {
        sessions: 8,
        mib: 16,
        workers: vec![1, 2],
        repeat: 5,
    };
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        let v = it.next().with_context(|| format!("{k} needs a value"))?;
        match k.as_str() {
            "--sessions" => a.sessions = v.parse()?,
            "--mib" => a.mib = v.parse()?,
            "--workers" => {
                a.workers = v
                    .split(',')
                    .map(str::parse)
                    .collect::<Result<_, _>>()
                    .context("--workers takes a comma-separated list")?;
            }
            "--repeat" => a.repeat = v.parse()?,
            _ => bail!("unknown option {k}"),
        }
    }
    Ok(a)
}

fn psk() -> Psk {
    // A fixed 32-byte test key: long enough by construction.
    #[allow(clippy::expect_used)]
    Psk::new(&[0x42; 32]).expect("32-byte key")
}

fn seed(kind: u8, i: usize) -> [u8; 32] {
    let mut s = [0u8; 32];
    s[0] = kind;
    s[1..9].copy_from_slice(&(i as u64).to_le_bytes());
    s
}

/// The reverse side's endpoint for shard `index` of `count`, as `start_reverse` builds it.
fn reverse_endpoint(index: usize, count: usize) -> Endpoint {
    let mut cfg = EndpointConfig::new(psk(), TransportConfig::default(), true);
    cfg.max_sessions = 1024;
    cfg.handshake_rate = 1024;
    cfg.shard = (count > 1).then_some(Shard { index, count });
    Endpoint::new(cfg, seed(1, index))
}

const REVERSE: SocketAddr = SocketAddr::new(
    std::net::IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 1, 1)),
    7000,
);

fn forward_addr(i: usize) -> SocketAddr {
    SocketAddr::from(([10, 0, 0, 1 + i as u8], 40000))
}

/// What the reverse application does at each call: answers opens, reads every stream
/// (checking the pattern), and flushes what the endpoint wants to send.
#[derive(Default)]
struct App {
    scratch: Vec<u8>,
    out: Vec<u8>,
    /// Streams by session, with the bytes read from each so far.
    streams: Vec<(ConnectionHandle, u64, u64)>,
    /// Bytes that did not match the pattern.
    bad: u64,
    /// ACK datagrams the endpoint sent.
    sent: Vec<(SocketAddr, Vec<u8>)>,
}

impl App {
    fn new() -> Self {
        App {
            scratch: vec![0; 64 * 1024],
            out: Vec::with_capacity(GSO * 1500),
            ..App::default()
        }
    }

    fn read_total(&self) -> u64 {
        self.streams.iter().map(|s| s.2).sum()
    }

    /// One call on the endpoint: the datagrams in `inbox` (copied into `buf` first, as a
    /// socket read would), due timers, events, reads, flush. `keep` keeps what it sends.
    fn step(
        &mut self,
        ep: &mut Endpoint,
        now: Instant,
        inbox: &[(SocketAddr, Vec<u8>)],
        buf: &mut Vec<u8>,
        keep: bool,
    ) {
        for (from, d) in inbox {
            buf.clear();
            buf.extend_from_slice(d);
            ep.handle_datagram(now, *from, buf);
        }
        if ep.poll_timeout().is_some_and(|t| t <= now) {
            ep.handle_timeout(now);
        }
        while let Some((h, ev)) = ep.poll_event() {
            if let Event::StreamOpened { id, .. } = ev {
                if let Some(c) = ep.connection_mut(h) {
                    let _ = c.send_open_result(id, OpenResult::Succeeded);
                }
                self.streams.push((h, id, 0));
            }
        }
        for (h, id, got) in &mut self.streams {
            let Some(c) = ep.connection_mut(*h) else {
                continue;
            };
            while let Ok(ReadOutcome::Data(n)) = c.read(now, *id, &mut self.scratch) {
                let base = *got;
                self.bad += (0..n)
                    .filter(|&i| self.scratch[i] != pattern_byte(base + i as u64))
                    .count() as u64;
                *got += n as u64;
            }
        }
        while let Some(t) = ep.poll_transmit_batch(now, GSO, &mut self.out) {
            if keep {
                for d in self.out[..t.size].chunks(t.segment_size) {
                    self.sent.push((t.destination, d.to_vec()));
                }
            }
        }
    }
}

/// One shard's recorded calls: virtual time since the start, and the datagrams handed in.
type Log = Vec<(Duration, Vec<(SocketAddr, Vec<u8>)>)>;

/// A reverse shard while recording: its endpoint and application, the calls made on it,
/// and the datagrams on their way to it (arrival time, sender, bytes).
type Recorder = (
    Endpoint,
    App,
    Log,
    VecDeque<(Duration, SocketAddr, Vec<u8>)>,
);

/// A forward endpoint with its one stream of `total` pattern bytes.
struct Forward {
    ep: Endpoint,
    conn: ConnectionHandle,
    stream: Option<u64>,
    written: u64,
    inbox: VecDeque<(Duration, Vec<u8>)>,
}

/// Runs the sessions on virtual time and records every call on each reverse shard.
fn record(sessions: usize, bytes: u64, shards: usize) -> anyhow::Result<Vec<Log>> {
    let base = ctcp_runtime::clock::now();
    let mut reverse: Vec<Recorder> = (0..shards)
        .map(|i| {
            (
                reverse_endpoint(i, shards),
                App::new(),
                Log::new(),
                VecDeque::new(),
            )
        })
        .collect();
    let mut forwards: Vec<Forward> = (0..sessions)
        .map(|i| {
            let mut cfg = EndpointConfig::new(psk(), TransportConfig::default(), false);
            // Even spread: session i on shard i mod shards.
            cfg.shard = (shards > 1).then_some(Shard {
                index: i % shards,
                count: shards,
            });
            let mut ep = Endpoint::new(cfg, seed(2, i));
            let conn = ep.connect(base, REVERSE);
            Forward {
                ep,
                conn,
                stream: None,
                written: 0,
                inbox: VecDeque::new(),
            }
        })
        .collect();
    let chunk: Vec<u8> = Vec::with_capacity(64 * 1024);
    let mut chunk = chunk;
    let mut buf = Vec::with_capacity(2048);
    let mut out = Vec::with_capacity(2048);
    let mut t = Duration::ZERO;
    let total = bytes * sessions as u64;
    loop {
        t += STEP;
        if t > Duration::from_secs(600) {
            bail!("recording did not finish in 600 s of virtual time");
        }
        let now = base + t;
        for (i, f) in forwards.iter_mut().enumerate() {
            while f.inbox.front().is_some_and(|(at, _)| *at <= t) {
                let Some((_, mut d)) = f.inbox.pop_front() else {
                    break;
                };
                f.ep.handle_datagram(now, REVERSE, &mut d);
            }
            if f.ep.poll_timeout().is_some_and(|x| x <= now) {
                f.ep.handle_timeout(now);
            }
            while f.ep.poll_event().is_some() {}
            let Some(c) = f.ep.connection_mut(f.conn) else {
                bail!("forward session {i} ended");
            };
            if c.is_established() {
                let id = match f.stream {
                    Some(id) => id,
                    None => *f.stream.insert(
                        c.open_stream(Target::Domain("sink.test".into(), 9))
                            .map_err(|e| anyhow::anyhow!("open: {e:?}"))?,
                    ),
                };
                while f.written < bytes && c.is_writable(id) {
                    let n = ((bytes - f.written) as usize).min(64 * 1024);
                    chunk.clear();
                    chunk.extend((0..n).map(|k| pattern_byte(f.written + k as u64)));
                    match c.write(id, &chunk) {
                        Ok(0) | Err(_) => break,
                        Ok(k) => f.written += k as u64,
                    }
                }
            }
            while let Some(tx) = f.ep.poll_transmit(now, &mut out) {
                let (_, _, _, q) = &mut reverse[shard_for(&out[..tx.size], shards)];
                q.push_back((t + DELAY, forward_addr(i), out[..tx.size].to_vec()));
            }
        }
        let mut read = 0;
        for (ep, app, log, q) in &mut reverse {
            let mut inbox = Vec::new();
            while q.front().is_some_and(|(at, _, _)| *at <= t) {
                if let Some((_, from, d)) = q.pop_front() {
                    inbox.push((from, d));
                }
            }
            app.step(ep, now, &inbox, &mut buf, true);
            log.push((t, inbox));
            for (to, d) in app.sent.drain(..) {
                if let Some(i) = (0..sessions).find(|&i| forward_addr(i) == to) {
                    forwards[i].inbox.push_back((t + DELAY, d));
                }
            }
            read += app.read_total();
        }
        if read >= total {
            break;
        }
    }
    Ok(reverse.into_iter().map(|(_, _, log, _)| log).collect())
}

fn shard_for(datagram: &[u8], shards: usize) -> usize {
    ctcp_proto::wire::peek_conn_id(datagram).map_or(0, |(_, id)| ctcp_proto::shard_of(id, shards))
}

/// One replay's wall time and each shard thread's CPU time.
struct Replay {
    wall: Duration,
    cpu: Vec<Duration>,
}

/// CPU time of the calling thread (user + system).
fn thread_cpu() -> Duration {
    use nix::sys::resource::{getrusage, UsageWho};
    getrusage(UsageWho::RUSAGE_THREAD).map_or(Duration::ZERO, |u| {
        let tv = |t: nix::sys::time::TimeVal| {
            Duration::new(t.tv_sec().max(0) as u64, (t.tv_usec().max(0) as u32) * 1000)
        };
        tv(u.user_time()) + tv(u.system_time())
    })
}

/// Replays `logs` (one per shard, one thread each); returns the wall and CPU times and
/// checks the bytes delivered.
fn replay(logs: &[Log], bytes_each: u64) -> anyhow::Result<Replay> {
    let base = ctcp_runtime::clock::now();
    let barrier = std::sync::Barrier::new(logs.len() + 1);
    let shards = logs.len();
    std::thread::scope(|s| {
        let handles: Vec<_> = logs
            .iter()
            .enumerate()
            .map(|(i, log)| {
                let barrier = &barrier;
                s.spawn(move || {
                    let mut ep = reverse_endpoint(i, shards);
                    let mut app = App::new();
                    let mut buf = Vec::with_capacity(2048);
                    barrier.wait();
                    let cpu0 = thread_cpu();
                    for (t, inbox) in log {
                        app.step(&mut ep, base + *t, inbox, &mut buf, false);
                    }
                    let cpu = thread_cpu().saturating_sub(cpu0);
                    (
                        app.streams.iter().map(|s| s.2).collect::<Vec<_>>(),
                        app.bad,
                        cpu,
                    )
                })
            })
            .collect();
        barrier.wait();
        let start = ctcp_runtime::clock::now();
        let mut results = Vec::new();
        for h in handles {
            results.push(
                h.join()
                    .map_err(|_| anyhow::anyhow!("replay thread panicked"))?,
            );
        }
        let wall = start.elapsed();
        let mut cpu = Vec::new();
        for (streams, bad, c) in results {
            if bad != 0 || streams.iter().any(|&b| b != bytes_each) {
                bail!("replay not byte-exact: streams {streams:?}, {bad} bad bytes");
            }
            cpu.push(c);
        }
        Ok(Replay { wall, cpu })
    })
}

fn main() -> anyhow::Result<()> {
    let a = args()?;
    let bytes = a.mib << 20;
    println!(
        "{} sessions x {} MiB, datagrams recorded on a lossless 1 ms link, replayed from memory",
        a.sessions, a.mib
    );
    let mut base_rate = None;
    let mut cpu_base_rate = None;
    for &w in &a.workers {
        let t0 = ctcp_runtime::clock::now();
        let logs = record(a.sessions, bytes, w)?;
        let datagrams: usize = logs
            .iter()
            .map(|l| l.iter().map(|(_, d)| d.len()).sum::<usize>())
            .sum();
        let per_shard: Vec<usize> = logs
            .iter()
            .map(|l| l.iter().map(|(_, d)| d.len()).sum())
            .collect();
        eprintln!(
            "recorded {w} shard(s) in {:.1} s: {datagrams} datagrams {per_shard:?}",
            t0.elapsed().as_secs_f64()
        );
        let mut runs = Vec::new();
        for _ in 0..a.repeat {
            runs.push(replay(&logs, bytes)?);
        }
        runs.sort_by_key(|r| r.wall);
        let best = runs[0].wall;
        let median = &runs[runs.len() / 2];
        let rate = datagrams as f64 / median.wall.as_secs_f64();
        let base = *base_rate.get_or_insert(rate);
        // The CPU-bound rate: datagrams over the busiest shard's CPU time, what the wall
        // rate would be with a core per shard and nothing else running.
        let busiest = median.cpu.iter().max().copied().unwrap_or_default();
        let cpu_rate = datagrams as f64 / busiest.as_secs_f64().max(1e-9);
        let cpu_base = *cpu_base_rate.get_or_insert(cpu_rate);
        println!(
            "workers {w}: {datagrams} datagrams, median {:.3} s (best {:.3} s) -> {:.0} datagrams/s ({:.0} MB/s of stream data), {:.2}x; shard CPU {:?} -> {:.0} datagrams per busiest-shard CPU-second, {:.2}x",
            median.wall.as_secs_f64(),
            best.as_secs_f64(),
            rate,
            (bytes * a.sessions as u64) as f64 / median.wall.as_secs_f64() / 1e6,
            rate / base,
            median.cpu.iter().map(|c| (c.as_secs_f64() * 1000.0).round() / 1000.0).collect::<Vec<_>>(),
            cpu_rate,
            cpu_rate / cpu_base
        );
    }
    Ok(())
}
