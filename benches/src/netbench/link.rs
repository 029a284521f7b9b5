//! The emulated link: one `ctcp-linkem` process joining namespaces A and B, its
//! cumulative counters, and the per-namespace kernel settings.

use super::procs::{self, in_ns, run_quiet, LinkEntry};
use anyhow::{bail, Context, Result};
pub use ctcp_linkem::JitterDist;
use serde::Deserialize;
use serde_json::Value;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

/// Address of the link's end in namespace A (clients).
pub const ADDR_A: &str = "10.77.0.1";
/// Address of the link's end in namespace B (servers).
pub const ADDR_B: &str = "10.77.0.2";
/// A second client address in namespace A, on the same TUN device
/// ([`Link::add_client_addr`]): B's route to it carries its own congestion control.
pub const ADDR_A2: &str = "10.77.0.3";
/// TCP buffer limits set in both namespaces: max 16 MiB, ≫ 600 ms × 10 Mbit/s (750 kB).
pub const TCP_MEM: &str = "4096 131072 16777216";
/// TCP buffer limits of the large-pipe link: max 64 MiB, so that a window of a BDP
/// (600 ms × 100 Mbit/s = 7.5 MB) plus a BDP of queue fits with the kernel's overhead.
pub const TCP_MEM_LARGE: &str = "4096 131072 67108864";
/// The TUN device linkem creates in both namespaces (its `--dev` default).
pub const TUN_DEV: &str = "linkem0";

/// How the link drops packets at random.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum LossModel {
    /// No random loss.
    None,
    /// Independent loss with this probability.
    Bernoulli(f64),
    /// Gilbert-Elliott loss: mean probability and mean burst length in packets.
    Gilbert {
        /// Mean loss probability.
        mean: f64,
        /// Mean burst length.
        burst: f64,
    },
}

impl LossModel {
    /// The mean loss probability.
    pub fn mean(self) -> f64 {
        match self {
            Self::None => 0.0,
            Self::Bernoulli(p) => p,
            Self::Gilbert { mean, .. } => mean,
        }
    }

    /// `"none"`, `"bernoulli"` or `"gilbert"`.
    pub fn name(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Bernoulli(_) => "bernoulli",
            Self::Gilbert { .. } => "gilbert",
        }
    }
}

/// Jitter on both directions of a link whose mean RTT stays [`LinkSpec::rtt_ms`]: each
/// direction's fixed delay is `rtt/2 − J/2` and its extra delay is drawn with spread `J`
/// (uniform in `[0, J]`, or normal with mean `J/2`, sd `J/4`, clipped at 0), so the mean
/// one-way delay is `rtt/2` and, uniform, the RTT lies in `[rtt − J, rtt + J]`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Jitter {
    /// The spread `J` of each direction's extra delay, in µs.
    pub spread_us: u64,
    /// How the extra delay is drawn.
    pub dist: JitterDist,
    /// Whether jitter may reorder packets (linkem's `--jitter-reorder`); without it a
    /// packet never overtakes an earlier one, so jitter only bunches packets.
    pub reorder: bool,
}

impl Jitter {
    /// ±25 % of the RTT: `J = rtt/4` per direction, the RTT varies over
    /// `[0.75·rtt, 1.25·rtt]` (uniform) with mean `rtt`.
    pub fn quarter_rtt(rtt_ms: u64, dist: JitterDist, reorder: bool) -> Self {
        Self {
            spread_us: rtt_ms * 250,
            dist,
            reorder,
        }
    }
}

/// The A→B direction (requests, acknowledgements of downloads) of an asymmetric link:
/// its own rate and queue and no random loss; the spec's loss applies to B→A only.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ReturnPath {
    /// Rate in bit/s.
    pub rate_bps: u64,
    /// Drop-tail queue in bytes.
    pub queue_bytes: u64,
}

/// The settings of one emulated link (both directions alike unless `return_path`).
#[derive(Clone, Debug)]
pub struct LinkSpec {
    /// Round-trip time in ms (one-way delay is half).
    pub rtt_ms: u64,
    /// Bottleneck rate in bit/s (`None`: unlimited).
    pub rate_bps: Option<u64>,
    /// Drop-tail queue in bytes.
    pub queue_bytes: u64,
    /// Random loss.
    pub loss: LossModel,
    /// Reordering: probability and hold-back delay in ms.
    pub reorder: Option<(f64, u64)>,
    /// Seed of linkem's random choices.
    pub seed: u64,
    /// Jitter of both directions, if any.
    pub jitter: Option<Jitter>,
    /// A slower, loss-free A→B direction, if any.
    pub return_path: Option<ReturnPath>,
    /// `net.ipv4.tcp_rmem` and `tcp_wmem` in both namespaces.
    pub tcp_mem: &'static str,
}

impl LinkSpec {
    /// A link at `rate_bps` with a queue of one BDP (at least 30 kB).
    pub fn bdp_queued(rtt_ms: u64, rate_bps: u64, loss: LossModel, seed: u64) -> Self {
        let bdp = rate_bps / 8 * rtt_ms / 1000;
        Self {
            rtt_ms,
            rate_bps: Some(rate_bps),
            queue_bytes: bdp.max(30_000),
            loss,
            reorder: None,
            seed,
            jitter: None,
            return_path: None,
            tcp_mem: TCP_MEM,
        }
    }

    /// Fixed one-way delay in µs: half the RTT (in µs, so odd RTTs stay exact), less
    /// half the jitter's spread.
    pub fn one_way_delay_us(&self) -> u64 {
        let half_spread = self.jitter.map_or(0, |j| j.spread_us / 2);
        (self.rtt_ms * 500).saturating_sub(half_spread)
    }

    /// linkem's `--path` (or `--hop`) value: this link's delay, rate, queue, loss and
    /// seed as `KEY=VALUE` items, both directions alike.
    ///
    /// # Errors
    /// Jitter, reordering or a return path, which the items here do not carry.
    pub fn path_arg(&self) -> Result<String> {
        if self.jitter.is_some() || self.reorder.is_some() || self.return_path.is_some() {
            bail!("a parallel path takes delay, rate, queue, loss and seed only");
        }
        let mut a = format!(
            "delay={}us,queue={},seed={}",
            self.one_way_delay_us(),
            self.queue_bytes,
            self.seed
        );
        if let Some(r) = self.rate_bps {
            a.push_str(&format!(",rate={r}bit"));
        }
        match self.loss {
            LossModel::None => {}
            LossModel::Bernoulli(p) => a.push_str(&format!(",loss={p}")),
            LossModel::Gilbert { mean, burst } => {
                a.push_str(&format!(",ge-loss={mean},ge-burst={burst}"));
            }
        }
        Ok(a)
    }

    /// What the link carries at most: `rate × (1 − mean loss)` in bit/s (0 if unlimited).
    pub fn capacity_bps(&self) -> f64 {
        self.rate_bps.unwrap_or(0) as f64 * (1.0 - self.loss.mean())
    }

    fn args(&self) -> Vec<String> {
        let mut a = vec![
            "--delay".to_owned(),
            format!("{}us", self.one_way_delay_us()),
            "--queue".to_owned(),
            self.queue_bytes.to_string(),
            "--seed".to_owned(),
            self.seed.to_string(),
        ];
        if let Some(r) = self.rate_bps {
            a.extend(["--rate".to_owned(), format!("{r}bit")]);
        }
        match self.loss {
            LossModel::None => {}
            LossModel::Bernoulli(p) => a.extend(["--loss".to_owned(), p.to_string()]),
            LossModel::Gilbert { mean, burst } => a.extend([
                "--ge-loss".to_owned(),
                mean.to_string(),
                "--ge-burst".to_owned(),
                burst.to_string(),
            ]),
        }
        if let Some((p, ms)) = self.reorder {
            a.extend([
                "--reorder".to_owned(),
                p.to_string(),
                "--reorder-delay".to_owned(),
                format!("{ms}ms"),
            ]);
        }
        if let Some(j) = self.jitter {
            a.extend([
                "--jitter".to_owned(),
                format!("{}us", j.spread_us),
                "--jitter-dist".to_owned(),
                j.dist.name().to_owned(),
            ]);
            if j.reorder {
                a.push("--jitter-reorder".to_owned());
            }
        }
        if let Some(r) = self.return_path {
            let mut o = format!("rate={}bit,queue={},loss=0", r.rate_bps, r.queue_bytes);
            if matches!(self.loss, LossModel::Gilbert { .. }) {
                o.push_str(",ge-loss=0");
            }
            a.extend(["--a-to-b".to_owned(), o]);
        }
        a
    }
}

/// One direction's cumulative counters from a linkem statistics line: the emulator's own
/// [`ctcp_linkem::Counters`] and the time of the line.
#[derive(Clone, Copy, Debug, Default, PartialEq, Deserialize)]
pub struct Counters {
    /// Seconds since the link came up.
    pub t: f64,
    /// What the link did to the packets of this direction so far.
    #[serde(flatten)]
    pub link: ctcp_linkem::Counters,
}

impl Counters {
    fn from_json(v: &Value) -> Self {
        Self::deserialize(v).unwrap_or_default()
    }
}

/// Both directions' counters at one moment.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Snapshot {
    /// A→B (requests, acknowledgements of downloads).
    pub a_to_b: Counters,
    /// B→A (the data of downloads).
    pub b_to_a: Counters,
}

/// Period of linkem's statistics lines.
pub const STATS_INTERVAL: Duration = Duration::from_millis(200);

static LINK_SEQ: AtomicU32 = AtomicU32::new(0);

/// A running emulated link (or parallel paths between the same two namespaces,
/// [`Link::start_paths`]); dropping it kills what runs in its namespaces and takes it down.
pub struct Link {
    child: Option<Child>,
    entry: LinkEntry,
    stats: PathBuf,
    /// Its settings (path 0's for parallel paths).
    pub spec: LinkSpec,
    /// Every path's settings, path `k` from `10.77.k.1` to `10.77.k.2` (just `spec`
    /// for a single link).
    pub paths: Vec<LinkSpec>,
    /// linkem's control socket (parallel paths only).
    control: Option<PathBuf>,
}

impl Link {
    /// Starts `ctcp-linkem` with `spec`, waits until it is ready and tunes both namespaces.
    ///
    /// # Errors
    /// If linkem fails to start or to come up within 15 s.
    pub fn start(bin: &Path, dir: &Path, spec: &LinkSpec) -> Result<Self> {
        Self::launch(bin, dir, spec, &[])
    }

    /// Starts `ctcp-linkem` with one parallel path per spec between namespaces A and B
    /// (`--path`; path `k` joins [`path_addr_a`]`(k)` to [`path_addr_b`]`(k)`, A's source
    /// address picking the path), with a control socket to cut and restore paths
    /// ([`Self::set_path_down`]). Both namespaces get path 0's TCP buffers.
    ///
    /// # Errors
    /// As [`Self::start`], or a spec a path cannot carry ([`LinkSpec::path_arg`]).
    pub fn start_paths(bin: &Path, dir: &Path, specs: &[LinkSpec]) -> Result<Self> {
        let first = specs.first().context("no paths")?;
        Self::launch(bin, dir, first, specs)
    }

    fn launch(bin: &Path, dir: &Path, spec: &LinkSpec, paths: &[LinkSpec]) -> Result<Self> {
        let n = LINK_SEQ.fetch_add(1, Ordering::SeqCst);
        let id = std::process::id();
        let (ns_a, ns_b) = (format!("nb-a-{id}-{n}"), format!("nb-b-{id}-{n}"));
        let stats = dir.join(format!("linkem-{n}.jsonl"));
        let ready = dir.join(format!("linkem-{n}.ready"));
        let log = std::fs::File::create(dir.join(format!("linkem-{n}.log")))?;
        let mut cmd = Command::new(bin);
        cmd.args(["--ns-a", &ns_a, "--ns-b", &ns_b]);
        let control = if paths.is_empty() {
            cmd.args(spec.args());
            None
        } else {
            for p in paths {
                cmd.args(["--path", &p.path_arg()?]);
            }
            let control = dir.join(format!("linkem-{n}.ctl"));
            cmd.arg("--control").arg(&control);
            Some(control)
        };
        cmd.arg("--stats-interval")
            .arg(format!("{}ms", STATS_INTERVAL.as_millis()))
            .arg("--stats-file")
            .arg(&stats)
            .arg("--ready-file")
            .arg(&ready)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .process_group(0);
        if procs::stopping() {
            bail!("interrupted");
        }
        let child = cmd.spawn().context("starting ctcp-linkem")?;
        let entry = LinkEntry {
            pid: i32::try_from(child.id()).context("pid")?,
            ns_a,
            ns_b,
            bin: bin.to_owned(),
        };
        procs::register_link(entry.clone());
        let mut link = Self {
            child: Some(child),
            entry,
            stats,
            spec: spec.clone(),
            paths: if paths.is_empty() {
                vec![spec.clone()]
            } else {
                paths.to_vec()
            },
            control,
        };
        link.wait_ready(&ready)?;
        link.tune()?;
        Ok(link)
    }

    fn wait_ready(&mut self, ready: &Path) -> Result<()> {
        wait_linkem_ready(&mut self.child, ready, "its log")
    }

    /// Namespace A (clients, ctcp-forward).
    pub fn ns_a(&self) -> &str {
        &self.entry.ns_a
    }

    /// Namespace B (servers, ctcp-reverse).
    pub fn ns_b(&self) -> &str {
        &self.entry.ns_b
    }

    /// Large TCP buffers and no cached per-destination metrics in both namespaces.
    fn tune(&self) -> Result<()> {
        tune_tcp(&[self.ns_a(), self.ns_b()], self.spec.tcp_mem)
    }

    /// Sets the kernel congestion control in both namespaces.
    ///
    /// # Errors
    /// If `sysctl` fails (e.g. the algorithm is not available).
    pub fn set_cc(&self, cc: &str) -> Result<()> {
        sysctl(self.ns_a(), "net.ipv4.tcp_congestion_control", cc)?;
        sysctl(self.ns_b(), "net.ipv4.tcp_congestion_control", cc)
    }

    /// Gives namespace A the second address [`ADDR_A2`] and namespace B a /32 route to it
    /// over the link with congestion control `cc` (`ip route ... congctl cc`): the TCP
    /// connections B's servers accept from [`ADDR_A2`] use `cc`, whatever the
    /// namespace's default ([`Self::set_cc`]). linkem carries every IP packet between its
    /// TUN ends, whatever the addresses.
    ///
    /// # Errors
    /// If `ip` fails (e.g. `cc` is not available).
    pub fn add_client_addr(&self, cc: &str) -> Result<()> {
        let addr = format!("{ADDR_A2}/32");
        run_quiet(
            "ip addr add",
            in_ns(self.ns_a(), "ip").args(["addr", "add", &addr, "dev", TUN_DEV]),
            Duration::from_secs(10),
        )
        .with_context(|| format!("ip addr add {addr} dev {TUN_DEV} in {}", self.ns_a()))?;
        run_quiet(
            "ip route add",
            in_ns(self.ns_b(), "ip").args([
                "route", "add", &addr, "dev", TUN_DEV, "src", ADDR_B, "congctl", cc,
            ]),
            Duration::from_secs(10),
        )
        .with_context(|| {
            format!(
                "ip route add {addr} dev {TUN_DEV} src {ADDR_B} congctl {cc} in {}",
                self.ns_b()
            )
        })
        .map(drop)
    }

    /// The established TCP connections in namespace B as `ss -tin` shows them.
    ///
    /// # Errors
    /// If `ss` fails.
    pub fn ss_b(&self) -> Result<String> {
        run_quiet(
            "ss",
            in_ns(self.ns_b(), "ss").args(["-tinH", "state", "established"]),
            Duration::from_secs(10),
        )
    }

    /// Cuts parallel path `k` (both directions; what is on it is lost) or restores it,
    /// through linkem's control socket.
    ///
    /// # Errors
    /// Not a parallel-path link, or linkem refuses or does not answer.
    pub fn set_path_down(&self, k: usize, down: bool) -> Result<()> {
        let control = self.control.as_ref().context("not a parallel-path link")?;
        let cmd = format!("{} {k}", if down { "down" } else { "up" });
        ctcp_linkem::control::send(control, &cmd)
            .with_context(|| format!("linkem control: {cmd}"))
            .map(drop)
    }

    /// Takes parallel path `k`'s device in namespace A down (`ip link set dev … down`:
    /// sockets bound to its address get a link error at once) or brings it back up and
    /// restores the path's policy route, as an interface script would (the kernel drops
    /// a device's routes when it goes down). linkem itself is untouched.
    ///
    /// # Errors
    /// Not a parallel-path link, or `ip` fails.
    pub fn set_path_device(&self, k: usize, down: bool) -> Result<()> {
        self.control.as_ref().context("not a parallel-path link")?;
        let dev = ctcp_linkem::emulator::hop_dev(TUN_DEV, k);
        let state = if down { "down" } else { "up" };
        run_quiet(
            "ip link set",
            in_ns(self.ns_a(), "ip").args(["link", "set", "dev", &dev, state]),
            Duration::from_secs(10),
        )
        .with_context(|| format!("ip link set dev {dev} {state} in {}", self.ns_a()))?;
        if !down {
            // linkem's `route_by_source`: path k's table is PATH_TABLE (100) + k.
            let table = (100 + k).to_string();
            run_quiet(
                "ip route add",
                in_ns(self.ns_a(), "ip")
                    .args(["route", "add", "default", "dev", &dev, "table", &table]),
                Duration::from_secs(10),
            )
            .with_context(|| format!("ip route add default dev {dev} table {table}"))?;
        }
        Ok(())
    }

    /// Every statistics line linkem wrote so far, parsed (for per-path time series).
    ///
    /// # Errors
    /// If the statistics file cannot be read.
    pub fn stats_lines(&self) -> Result<Vec<Value>> {
        let text = std::fs::read_to_string(&self.stats)
            .with_context(|| format!("reading {}", self.stats.display()))?;
        Ok(text
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .collect())
    }

    /// The latest counters linkem wrote (path 0's for parallel paths).
    ///
    /// # Errors
    /// If the statistics file cannot be read.
    pub fn snapshot(&self) -> Result<Snapshot> {
        self.path_snapshot(0)
    }

    /// The latest counters linkem wrote for link (or path) `k`.
    ///
    /// # Errors
    /// If the statistics file cannot be read.
    pub fn path_snapshot(&self, k: usize) -> Result<Snapshot> {
        let mut s = Snapshot::default();
        for v in self.stats_lines()? {
            if v.get("hop").and_then(Value::as_u64) != Some(k as u64) {
                continue;
            }
            match v.get("direction").and_then(Value::as_str) {
                Some("a_to_b") => s.a_to_b = Counters::from_json(&v),
                Some("b_to_a") => s.b_to_a = Counters::from_json(&v),
                _ => {}
            }
        }
        Ok(s)
    }

    /// Waits until linkem has written lines covering everything sent so far (the link
    /// must be idle), then returns them.
    ///
    /// # Errors
    /// As [`Self::snapshot`].
    pub fn settled_snapshot(&self) -> Result<Snapshot> {
        std::thread::sleep(STATS_INTERVAL * 2 + Duration::from_millis(50));
        self.snapshot()
    }

    /// Packets the TUN devices of both namespaces dropped or failed so far (their
    /// `rx`/`tx` `dropped` and `errors`), the emulator's own losses: a device whose
    /// queue overflows because linkem does not read fast enough counts them here, not
    /// in linkem's counters.
    ///
    /// # Errors
    /// If `ip` fails or prints something unexpected.
    pub fn tun_drops(&self) -> Result<u64> {
        let mut n = 0;
        for ns in [self.ns_a(), self.ns_b()] {
            let out = run_quiet(
                "ip -s link",
                in_ns(ns, "ip").args(["-s", "-j", "link", "show", "dev", TUN_DEV]),
                Duration::from_secs(10),
            )?;
            let v: Value = serde_json::from_str(&out).context("ip -s -j link output")?;
            let stats = &v[0]["stats64"];
            for dir in ["rx", "tx"] {
                for k in ["dropped", "errors"] {
                    n += stats[dir][k]
                        .as_u64()
                        .context("ip -s -j link: no counters")?;
                }
            }
        }
        Ok(n)
    }

    /// Takes the link down and returns the final counters.
    ///
    /// # Errors
    /// As [`Self::snapshot`].
    pub fn stop(mut self) -> Result<Snapshot> {
        self.shutdown();
        self.snapshot()
    }

    fn shutdown(&mut self) {
        if let Some(mut child) = self.child.take() {
            procs::stop_link(&self.entry, |_| {
                matches!(child.try_wait(), Ok(Some(_)) | Err(_))
            });
            procs::deregister_link(self.entry.pid);
        }
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Address of parallel path `k`'s end in namespace A (path 0: [`ADDR_A`]).
pub fn path_addr_a(k: usize) -> String {
    format!("10.77.{k}.1")
}

/// Address of parallel path `k`'s end in namespace B (path 0: [`ADDR_B`]).
pub fn path_addr_b(k: usize) -> String {
    format!("10.77.{k}.2")
}

/// Waits until `ctcp-linkem` (`child`) writes its ready file, failing if it exits first
/// (`log` names where to look) or takes over 15 s.
pub(crate) fn wait_linkem_ready(child: &mut Option<Child>, ready: &Path, log: &str) -> Result<()> {
    let start = ctcp_runtime::clock::now();
    while !ready.exists() {
        if let Some(c) = child.as_mut() {
            if let Some(s) = c.try_wait()? {
                bail!("ctcp-linkem exited before it was ready: {s} (see {log})");
            }
        }
        if start.elapsed() > Duration::from_secs(15) {
            bail!("ctcp-linkem not ready after 15 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// TCP buffers of `tcp_mem` and no cached per-destination metrics in each namespace.
pub(crate) fn tune_tcp<S: AsRef<str>>(namespaces: &[S], tcp_mem: &str) -> Result<()> {
    for ns in namespaces {
        for (k, v) in [
            ("net.ipv4.tcp_rmem", tcp_mem),
            ("net.ipv4.tcp_wmem", tcp_mem),
            ("net.ipv4.tcp_no_metrics_save", "1"),
        ] {
            sysctl(ns.as_ref(), k, v)?;
        }
    }
    Ok(())
}

/// `sysctl -w key=value` inside `ns`.
///
/// # Errors
/// If it fails.
pub fn sysctl(ns: &str, key: &str, value: &str) -> Result<()> {
    run_quiet(
        "sysctl",
        in_ns(ns, "sysctl").args(["-q", "-w", &format!("{key}={value}")]),
        Duration::from_secs(10),
    )
    .map(drop)
    .with_context(|| format!("sysctl {key}={value} in {ns}"))
}
