//! Runs a [`Plan`]: one link per cell, the jobs on it, one JSON row per transfer.

use super::link::{Link, LinkSpec, LossModel, Snapshot, ADDR_A, ADDR_A2};
use super::plan::{Cell, Fairness, Job, Plan, System, Workload, RATE};
use super::workload::{
    bytes_so_far, curl, curl_background, curl_sampled, make_file, proxychains_conf, rsync, Bins,
    CtcpPair, DataFile, Servers, Transfer,
};
use anyhow::{bail, Context, Result};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Appends JSON rows to the output file as they are produced.
pub struct Out {
    file: std::fs::File,
    /// Its path.
    pub path: PathBuf,
}

impl Out {
    /// Creates (truncates) `path`.
    ///
    /// # Errors
    /// I/O errors.
    pub fn create(path: &Path) -> Result<Self> {
        if let Some(d) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(d)?;
        }
        let file =
            std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
        Ok(Self {
            file,
            path: path.to_owned(),
        })
    }

    /// Writes one row as a line and flushes it.
    ///
    /// # Errors
    /// I/O errors.
    pub fn write(&mut self, row: &Value) -> Result<()> {
        writeln!(self.file, "{row}")?;
        self.file.flush()?;
        Ok(())
    }
}

/// The scratch directory of a run, removed on drop.
pub struct WorkDir {
    /// Its path.
    pub path: PathBuf,
    /// The directory the origins serve.
    pub www: PathBuf,
}

impl WorkDir {
    /// Creates `/tmp/netbench-PID` and its `www` subdirectory.
    ///
    /// # Errors
    /// I/O errors.
    pub fn create() -> Result<Self> {
        let path = std::env::temp_dir().join(format!("netbench-{}", std::process::id()));
        let www = path.join("www");
        std::fs::create_dir_all(&www)?;
        super::procs::register_scratch(path.clone());
        Ok(Self { path, www })
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        if std::env::var_os("NETBENCH_KEEP").is_none() {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

/// What a cell run needs from its surroundings.
pub struct Ctx<'a> {
    /// The binaries.
    pub bins: &'a Bins,
    /// Scratch space.
    pub work: &'a WorkDir,
    /// Served files by size.
    pub files: BTreeMap<u64, DataFile>,
    /// The mode's name, written into every row.
    pub mode: &'static str,
}

impl Ctx<'_> {
    /// Creates the served files the plan needs (plus `extra` sizes).
    ///
    /// # Errors
    /// I/O errors.
    pub fn make_files(&mut self, plan: &Plan, extra: &[u64]) -> Result<()> {
        for size in plan.sizes().into_iter().chain(extra.iter().copied()) {
            let f = make_file(&self.work.www, &format!("f{size}.bin"), size)?;
            self.files.insert(size, f);
        }
        Ok(())
    }

    fn file(&self, size: u64) -> Result<&DataFile> {
        self.files.get(&size).context("file of that size not made")
    }
}

/// Runs every cell of `plan` and the fairness run, writing each row to `out` as it
/// completes; returns all rows.
///
/// # Errors
/// Infrastructure failures (a link, server or proxy that will not start).
pub fn run_plan(ctx: &Ctx<'_>, plan: &Plan, out: &mut Out) -> Result<Vec<Value>> {
    let mut rows = Vec::new();
    let n = plan.cells.len();
    for (i, cell) in plan.cells.iter().enumerate() {
        eprintln!(
            "[{}/{n}] rtt {} ms, {} {:.3}{}{}",
            i + 1,
            cell.link.rtt_ms,
            cell.link.loss.name(),
            cell.link.loss.mean(),
            if cell.link.reorder.is_some() {
                ", reorder"
            } else {
                ""
            },
            link_note(&cell.link)
        );
        for row in run_cell(ctx, cell)? {
            out.write(&row)?;
            rows.push(row);
        }
    }
    if let Some(f) = plan.fairness {
        eprintln!(
            "fairness: {} s at {} bit/s, {} against {}",
            f.secs,
            f.rate_bps,
            f.first().name(),
            f.against.name()
        );
        let row = run_fairness(ctx, &f)?;
        out.write(&row)?;
        rows.push(row);
    }
    Ok(rows)
}

fn run_cell(ctx: &Ctx<'_>, cell: &Cell) -> Result<Vec<Value>> {
    let has_rsync = cell.jobs.iter().any(|j| j.workload == Workload::Rsync);
    let link = Link::start(&ctx.bins.linkem, &ctx.work.path, &cell.link)?;
    let _servers = Servers::start(&link, &ctx.work.www, &ctx.work.path, has_rsync)?;
    let mut rows = Vec::new();
    let (ctcp, kernel): (Vec<&Job>, Vec<&Job>) =
        cell.jobs.iter().partition(|j| j.system == System::Ctcp);
    if !ctcp.is_empty() {
        let pair = CtcpPair::start(&link, ctx.bins, &ctx.work.path)?;
        link.set_cc("cubic")?;
        for job in ctcp {
            let mut row = run_job(ctx, &link, job)?;
            if cell.proxy_rss {
                // Read just before the pair stops: the peak over its whole life.
                let (fwd, rev) = pair.peak_rss();
                row["peak_rss_forward_bytes"] = json!(fwd);
                row["peak_rss_reverse_bytes"] = json!(rev);
                eprintln!(
                    "  peak RSS: ctcp-forward {:.1} MB, ctcp-reverse {:.1} MB",
                    fwd.unwrap_or(0) as f64 / 1e6,
                    rev.unwrap_or(0) as f64 / 1e6
                );
            }
            rows.push(row);
        }
        drop(pair);
    }
    for job in kernel {
        if let Some(cc) = job.system.cc() {
            link.set_cc(cc)?;
        }
        rows.push(run_job(ctx, &link, job)?);
    }
    let fin = link.stop()?;
    for r in &mut rows {
        r["link_final"] = counters_json(&fin);
    }
    Ok(rows)
}

fn run_job(ctx: &Ctx<'_>, link: &Link, job: &Job) -> Result<Value> {
    let file = ctx.file(job.size)?;
    let dest = ctx.work.path.join("received.bin");
    let via_ctcp = job.system == System::Ctcp;
    let before = link.settled_snapshot()?;
    let tun_before = match job.steady_from_s {
        Some(_) => Some(link.tun_drops()?),
        None => None,
    };
    let mut samples = None;
    let t = match job.workload {
        _ if job.steady_from_s.is_some() => {
            let (t, s) = curl_sampled(link, file, via_ctcp, &dest, job.timeout)?;
            samples = Some(s);
            t
        }
        Workload::Curl
        | Workload::Reorder
        | Workload::Jitter
        | Workload::LargePipe
        | Workload::Asymmetric => curl(link, file, via_ctcp, &dest, job.timeout)?,
        Workload::Rsync => {
            let conf = via_ctcp
                .then(|| proxychains_conf(&ctx.work.path))
                .transpose()?;
            rsync(link, file, conf.as_deref(), &dest, job.timeout)?
        }
    };
    // Let what the sender still has in flight drain, so its bytes are counted.
    std::thread::sleep(Duration::from_millis(link.spec.rtt_ms.max(300)));
    let after = link.settled_snapshot()?;
    let _ = std::fs::remove_file(&dest);
    let mut row = job_row(ctx.mode, &link.spec, job, &t, &before, &after);
    if let (Some(from), Some(samples)) = (job.steady_from_s, samples) {
        row = merge(row, steady_fields(&link.spec, &t, &samples, from));
        if let Some(b) = tun_before {
            row["tun_drops"] = json!(link.tun_drops()?.saturating_sub(b));
        }
        eprintln!(
            "  steady from {from} s: {:.2} Mbit/s (efficiency {:.3}); wire/goodput {:.3}",
            row["steady_goodput_bps"].as_f64().unwrap_or(0.0) / 1e6,
            row["steady_efficiency"].as_f64().unwrap_or(0.0),
            row["wire_per_goodput"].as_f64().unwrap_or(0.0),
        );
    }
    eprintln!(
        "  {:<6} {:<8} {:>7.2} Mbit/s ok={} timed_out={}{}",
        job.system.name(),
        job.workload.name(),
        t.goodput_bps / 1e6,
        t.bytes_ok,
        t.timed_out,
        t.error
            .as_deref()
            .map(|e| format!(" error: {e}"))
            .unwrap_or_default()
    );
    Ok(row)
}

/// `", jitter uniform ±25 ms, reorder"`, `", return 1 Mbit/s"` or nothing.
fn link_note(spec: &LinkSpec) -> String {
    let mut s = String::new();
    if let Some(j) = spec.jitter {
        s += &format!(
            ", jitter {} 0-{} ms{}",
            j.dist.name(),
            j.spread_us as f64 / 1e3,
            if j.reorder { " reordering" } else { "" }
        );
    }
    if let Some(r) = spec.return_path {
        s += &format!(", return {} Mbit/s", r.rate_bps as f64 / 1e6);
    }
    if let Some(rate) = spec.rate_bps.filter(|&r| r != RATE) {
        s += &format!(", {} Mbit/s", rate as f64 / 1e6);
    }
    s
}

/// The link's settings for a row. Jitter, a return path and non-default TCP buffers add
/// fields only where present, so the rows of the other modes stay as they were.
fn link_fields(spec: &LinkSpec) -> Value {
    let burst = match spec.loss {
        LossModel::Gilbert { burst, .. } => Some(burst),
        _ => None,
    };
    let mut v = json!({
        "rtt_ms": spec.rtt_ms,
        "loss": spec.loss.mean(),
        "loss_model": spec.loss.name(),
        "ge_burst": burst,
        "reorder": spec.reorder.map(|(p, ms)| json!({"p": p, "delay_ms": ms})),
        "rate_bps": spec.rate_bps,
        "queue_bytes": spec.queue_bytes,
        "seed": spec.seed,
    });
    if let Some(j) = spec.jitter {
        v = merge(
            v,
            json!({
                // The spread J of each direction's extra delay; the fixed one-way delay
                // is RTT/2 − J/2, so the RTT averages rtt_ms.
                "jitter_ms": j.spread_us as f64 / 1e3,
                "jitter_dist": j.dist.name(),
                "jitter_reorder": j.reorder,
                "one_way_delay_ms": spec.one_way_delay_us() as f64 / 1e3,
            }),
        );
    }
    if let Some(r) = spec.return_path {
        v = merge(
            v,
            json!({
                "return_rate_bps": r.rate_bps,
                "return_queue_bytes": r.queue_bytes,
                "return_loss": 0.0,
            }),
        );
    }
    if spec.tcp_mem != super::link::TCP_MEM {
        v["tcp_mem"] = json!(spec.tcp_mem);
    }
    v
}

/// The steady-state fields of a sampled transfer: per-second goodput series and the
/// goodput from `from` s after curl started to the transfer's end (or cut-off).
pub(crate) fn steady_fields(spec: &LinkSpec, t: &Transfer, samples: &[u64], from: u64) -> Value {
    let series: Vec<f64> = std::iter::once(0)
        .chain(samples.iter().copied())
        .collect::<Vec<u64>>()
        .windows(2)
        .map(|w| (w[1].saturating_sub(w[0]) * 8) as f64)
        .collect();
    let at_from = usize::try_from(from)
        .ok()
        .and_then(|k| k.checked_sub(1))
        .and_then(|k| samples.get(k).copied());
    let span = t.secs - from as f64;
    let steady = at_from
        .filter(|_| span > 1.0)
        .map(|b| t.bytes.saturating_sub(b) as f64 * 8.0 / span);
    let rate = spec.rate_bps.unwrap_or(RATE) as f64;
    json!({
        "series_bps": series,
        "steady_from_s": from,
        "steady_goodput_bps": steady,
        "steady_efficiency": steady.map(|g| g / (rate * (1.0 - spec.loss.mean()))),
    })
}

fn merge(mut a: Value, b: Value) -> Value {
    if let (Some(a), Value::Object(b)) = (a.as_object_mut(), b) {
        a.extend(b);
    }
    a
}

fn job_row(
    mode: &str,
    spec: &LinkSpec,
    job: &Job,
    t: &Transfer,
    before: &Snapshot,
    after: &Snapshot,
) -> Value {
    // Counter deltas over the job, per direction (B→A carries the data).
    let (down, down0) = (&after.b_to_a.link, &before.b_to_a.link);
    let (up, up0) = (&after.a_to_b.link, &before.a_to_b.link);
    let wire = down.bytes_in.saturating_sub(down0.bytes_in);
    let ack_wire = up.bytes_in.saturating_sub(up0.bytes_in);
    let random_lost = down.lost.saturating_sub(down0.lost);
    let queue_drops = down.queue_drops.saturating_sub(down0.queue_drops);
    let lost = random_lost + queue_drops;
    let packets = down.packets_in.saturating_sub(down0.packets_in);
    let rate = spec.rate_bps.unwrap_or(RATE) as f64;
    let row = json!({
        "mode": mode,
        "system": job.system.name(),
        "workload": job.workload.name(),
        "size_bytes": job.size,
        "timeout_s": job.timeout.as_secs_f64(),
        "bytes_received": t.bytes,
        "secs": t.secs,
        "first_byte_s": t.first_byte_secs,
        "goodput_bps": t.goodput_bps,
        "efficiency": t.goodput_bps / (rate * (1.0 - spec.loss.mean())),
        "bytes_ok": t.bytes_ok,
        "timed_out": t.timed_out,
        "error": t.error,
        "wire_bytes": wire,
        "wire_per_goodput": ratio(wire, t.bytes),
        "ack_wire_bytes": ack_wire,
        "link_lost_b_to_a": random_lost,
        "link_queue_drops_b_to_a": queue_drops,
        // The loss this run drew (B→A, random and queue drops): a 20 MB run at a nominal
        // 5 % Gilbert loss drew 5.9 %, and the erasure minimum follows what was drawn.
        "loss_realized_b_to_a": (packets > 0).then(|| lost as f64 / packets as f64),
    });
    merge(row, link_fields(spec))
}

fn ratio(a: u64, b: u64) -> Option<f64> {
    (b > 0).then(|| a as f64 / b as f64)
}

fn counters_json(s: &Snapshot) -> Value {
    let one = |c: &super::link::Counters| serde_json::to_value(c.link).unwrap_or(Value::Null);
    json!({"a_to_b": one(&s.a_to_b), "b_to_a": one(&s.b_to_a)})
}

/// Size of the fairness download: longer than either flow can finish in the run.
pub fn fairness_size(f: &Fairness) -> u64 {
    f.rate_bps / 8 * f.secs * 6 / 5
}

/// Jain's fairness index of `xs`.
pub fn jain(xs: &[f64]) -> f64 {
    let s: f64 = xs.iter().sum();
    let q: f64 = xs.iter().map(|x| x * x).sum();
    if q == 0.0 {
        0.0
    } else {
        s * s / (xs.len() as f64 * q)
    }
}

/// Samples two files' sizes once a second for `secs` seconds; returns per-second bit/s.
fn sample(a: &Path, b: &Path, secs: u64) -> (Vec<f64>, Vec<f64>) {
    let start = ctcp_runtime::clock::now();
    let (mut sa, mut sb) = (Vec::new(), Vec::new());
    let (mut pa, mut pb) = (0u64, 0u64);
    for k in 1..=secs {
        let due = Duration::from_secs(k);
        if let Some(wait) = due.checked_sub(start.elapsed()) {
            std::thread::sleep(wait);
        }
        let (na, nb) = (bytes_so_far(a), bytes_so_far(b));
        sa.push((na.saturating_sub(pa) * 8) as f64);
        sb.push((nb.saturating_sub(pb) * 8) as f64);
        (pa, pb) = (na, nb);
    }
    (sa, sb)
}

fn mean(xs: &[f64]) -> f64 {
    if xs.is_empty() {
        0.0
    } else {
        xs.iter().sum::<f64>() / xs.len() as f64
    }
}

/// The congestion control of each established connection in `ss -tin` output, with the
/// peer's address: `(peer, cc)`. The header line of a connection names the local and peer
/// address (`0 0 10.77.0.2:8000 10.77.0.3:41234`), the indented line after it starts with
/// the options and then the algorithm (`ts sack bbr wscale:7,7 ...`).
pub fn ss_congestion(out: &str) -> Vec<(String, String)> {
    const FLAGS: [&str; 5] = ["ts", "sack", "ecn", "ecnseen", "fastopen"];
    let mut conns = Vec::new();
    let mut peer: Option<String> = None;
    for line in out.lines() {
        if line.starts_with([' ', '\t']) {
            let Some(p) = peer.take() else { continue };
            let cc = line.split_whitespace().find(|t| {
                !FLAGS.contains(t)
                    && t.chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
            });
            conns.push((p, cc.unwrap_or("?").to_owned()));
        } else {
            peer = line
                .split_whitespace()
                .filter_map(|t| t.rsplit_once(':').map(|(ip, _)| ip))
                .next_back()
                .map(|ip| {
                    let ip = ip.trim_start_matches('[').trim_end_matches(']');
                    ip.strip_prefix("::ffff:").unwrap_or(ip).to_owned()
                });
        }
    }
    conns
}

/// Checks that every connection B serves to `want`'s addresses runs that address's
/// congestion control, and that each address has one; returns `{address: cc}`.
fn check_congestion(ss: &str, want: &[(&str, &str)]) -> Result<Value> {
    let conns = ss_congestion(ss);
    let mut seen = serde_json::Map::new();
    for &(addr, cc) in want {
        let got: Vec<&str> = conns
            .iter()
            .filter(|(p, _)| p == addr)
            .map(|(_, c)| c.as_str())
            .collect();
        if got.is_empty() || got.iter().any(|c| *c != cc) {
            bail!(
                "the connection from {addr} should use {cc} but ss in namespace B shows {got:?}:\n{ss}"
            );
        }
        seen.insert(addr.to_owned(), json!(cc));
    }
    Ok(Value::Object(seen))
}

fn run_fairness(ctx: &Ctx<'_>, f: &Fairness) -> Result<Value> {
    let spec = LinkSpec::bdp_queued(f.rtt_ms, f.rate_bps, LossModel::None, 7);
    let link = Link::start(&ctx.bins.linkem, &ctx.work.path, &spec)?;
    let _servers = Servers::start(&link, &ctx.work.www, &ctx.work.path, false)?;
    let kernel = f.against.name();
    let against_cc = f
        .against
        .cc()
        .context("the fairness run is against kernel TCP")?;
    // ctcp's flow, or the reference: a kernel TCP flow with the namespaces' default
    // congestion control while the other flow, from the second client address, gets
    // `against` from B's route to that address.
    let (_pair, from) = match f.reference {
        None => {
            let pair = CtcpPair::start(&link, ctx.bins, &ctx.work.path)?;
            link.set_cc(against_cc)?;
            (Some(pair), None)
        }
        Some(r) => {
            let cc = r.cc().context("the reference flow is kernel TCP")?;
            if cc == against_cc {
                bail!("the reference flow needs another congestion control than {kernel}");
            }
            link.set_cc(cc)?;
            link.add_client_addr(against_cc)?;
            (None, Some(ADDR_A2))
        }
    };
    let first = f.first().name();
    let file = ctx.file(fairness_size(f))?;
    let (da, db) = (
        ctx.work.path.join(format!("fair-{first}")),
        ctx.work.path.join(format!("fair-{kernel}")),
    );
    let before = link.settled_snapshot()?;
    let mut a = curl_background(&link, file, f.reference.is_none(), None, &da, f.secs)?;
    let mut b = curl_background(&link, file, false, from, &db, f.secs)?;
    // Two kernel flows: once both are established, B's sockets must show one congestion
    // control each (read while sampling, so the samples keep their clock).
    let ss_after = Duration::from_millis((4 * f.rtt_ms).max(3000));
    let ((sa, sb), ss) = std::thread::scope(|s| {
        let ss = f.reference.map(|_| {
            s.spawn(|| {
                std::thread::sleep(ss_after);
                link.ss_b()
            })
        });
        let samples = sample(&da, &db, f.secs);
        (samples, ss.map(|h| h.join()))
    });
    let cc_seen = match ss {
        None => None,
        Some(Err(_)) => bail!("the ss thread panicked"),
        Some(Ok(ss)) => {
            let ss = ss?;
            let want = [(ADDR_A, first), (ADDR_A2, kernel)];
            let seen = check_congestion(&ss, &want)?;
            eprintln!(
                "  ss in namespace B after {:.1} s: {}",
                ss_after.as_secs_f64(),
                ss_congestion(&ss)
                    .iter()
                    .map(|(p, c)| format!("{p} {c}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            Some((seen, ss))
        }
    };
    a.wait_timeout(Duration::from_secs(5))?;
    b.wait_timeout(Duration::from_secs(5))?;
    drop((a, b));
    let after = link.settled_snapshot()?;
    let skip = usize::try_from((f.secs / 4).max(5))?.min(sa.len());
    let (ma, mb) = (mean(&sa[skip..]), mean(&sb[skip..]));
    let (ga, gb) = (mean(&sa), mean(&sb));
    let j = jain(&[ma, mb]);
    eprintln!(
        "  fairness: {first} {:.2} Mbit/s, {kernel} {:.2} Mbit/s, Jain (steady, from {skip} s) {j:.3}",
        ma / 1e6,
        mb / 1e6
    );
    let wire = after
        .b_to_a
        .link
        .bytes_in
        .saturating_sub(before.b_to_a.link.bytes_in);
    let got = bytes_so_far(&da) + bytes_so_far(&db);
    let mut row = json!({
        "mode": ctx.mode,
        "system": format!("{first}+{kernel}"),
        "workload": "fairness",
        "against": kernel,
        "secs": f.secs,
        "goodput_bps": ga + gb,
        "efficiency": (ga + gb) / f.rate_bps as f64,
        "steady_from_s": skip,
        "jain": j,
        "jain_whole": jain(&[ga, gb]),
        "bytes_ok": true,
        "timed_out": false,
        "wire_bytes": wire,
        "wire_per_goodput": ratio(wire, got),
        "link_final": counters_json(&link.stop()?),
    });
    // Both flows' fields are named after them (`goodput_ctcp_bps`, `goodput_cubic_bps`,
    // `goodput_bbr_bps`); a reference row names its first flow in `reference` and keeps
    // what ss showed of the two connections.
    row[format!("goodput_{first}_bps")] = json!(ga);
    row[format!("steady_{first}_bps")] = json!(ma);
    row[format!("series_{first}_bps")] = json!(sa);
    row[format!("goodput_{kernel}_bps")] = json!(gb);
    row[format!("steady_{kernel}_bps")] = json!(mb);
    row[format!("series_{kernel}_bps")] = json!(sb);
    if let Some((seen, ss)) = cc_seen {
        row["reference"] = json!(first);
        row["reference_addr"] = json!(ADDR_A);
        row["against_addr"] = json!(ADDR_A2);
        row["cc_seen"] = seen;
        row["ss_b"] = json!(ss);
    }
    Ok(merge(row, link_fields(&spec)))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SS: &str = "0      0      10.77.0.2:8000 10.77.0.1:41234\n\t ts sack cubic wscale:7,7 rto:308 rtt:104.2/1.1 mss:1448 cwnd:60\n0      0      10.77.0.2:8000 10.77.0.3:52710\n\t ts sack bbr wscale:7,7 rto:304 rtt:101.5/0.5 bbr:(bw:3.9Mbps,mrtt:100.2) cwnd:80\n0 0 [::ffff:10.77.0.2]:8000 [::ffff:10.77.0.1]:40000\n\t reno wscale:7,7\n";

    #[test]
    fn ss_congestion_reads_each_connection() {
        assert_eq!(
            ss_congestion(SS),
            [
                ("10.77.0.1".to_owned(), "cubic".to_owned()),
                ("10.77.0.3".to_owned(), "bbr".to_owned()),
                ("10.77.0.1".to_owned(), "reno".to_owned()),
            ]
        );
        let two = SS.lines().take(4).collect::<Vec<_>>().join("\n");
        let seen = check_congestion(&two, &[("10.77.0.1", "cubic"), ("10.77.0.3", "bbr")]);
        assert_eq!(
            seen.unwrap(),
            json!({"10.77.0.1": "cubic", "10.77.0.3": "bbr"})
        );
        // The same controller on both, or a missing connection, fails.
        assert!(check_congestion(&two, &[("10.77.0.1", "bbr"), ("10.77.0.3", "bbr")]).is_err());
        assert!(check_congestion(SS, &[("10.77.0.1", "cubic")]).is_err());
        assert!(check_congestion("", &[("10.77.0.3", "bbr")]).is_err());
    }
}
