//! The servers in namespace B, the ctcp proxy pair, and the client transfers (curl, rsync).

use super::link::{Link, ADDR_B};
use super::procs::{in_ns, Proc};
use crate::fill_block;
use anyhow::{bail, Context, Result};
use sha2::{Digest, Sha256};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// Port of the HTTP origin in namespace B.
pub const HTTP_PORT: u16 = 8000;
/// Port of the rsync daemon in namespace B.
pub const RSYNC_PORT: u16 = 8730;
/// UDP port of ctcp-reverse in namespace B.
pub const CTCP_PORT: u16 = 7000;
/// SOCKS address of ctcp-forward in namespace A.
pub const SOCKS: &str = "127.0.0.1:1080";

/// Paths of the binaries the runner drives.
#[derive(Clone, Debug)]
pub struct Bins {
    /// `ctcp-linkem`.
    pub linkem: PathBuf,
    /// `ctcp-forward`.
    pub forward: PathBuf,
    /// `ctcp-reverse`.
    pub reverse: PathBuf,
}

impl Bins {
    /// Finds the binaries next to the running executable.
    ///
    /// # Errors
    /// If one is missing (with the build command to run).
    pub fn locate() -> Result<Self> {
        let exe = std::env::current_exe()?;
        let find = |name: &str| -> Result<PathBuf> {
            let p = exe.with_file_name(name);
            if !p.exists() {
                bail!(
                    "{} not found: run `cargo build --release -p ctcp-forward -p ctcp-reverse -p ctcp-linkem` first",
                    p.display()
                );
            }
            Ok(p)
        };
        Ok(Self {
            linkem: find("ctcp-linkem")?,
            forward: find("ctcp-forward")?,
            reverse: find("ctcp-reverse")?,
        })
    }
}

/// A file served by the origins, with its SHA-256.
#[derive(Clone, Debug)]
pub struct DataFile {
    /// Name inside the served directory.
    pub name: String,
    /// Size in bytes.
    pub size: u64,
    /// SHA-256 of the content.
    pub sha: [u8; 32],
}

/// Writes `size` deterministic incompressible bytes to `dir/name` and hashes them.
///
/// # Errors
/// I/O errors.
pub fn make_file(dir: &Path, name: &str, size: u64) -> Result<DataFile> {
    let mut f = std::io::BufWriter::new(std::fs::File::create(dir.join(name))?);
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 64 * 1024];
    let mut left = size;
    let mut i = size;
    while left > 0 {
        let n = usize::try_from(left.min(buf.len() as u64))?;
        fill_block(i, &mut buf[..n]);
        h.update(&buf[..n]);
        f.write_all(&buf[..n])?;
        left -= n as u64;
        i += 1;
    }
    f.flush()?;
    Ok(DataFile {
        name: name.to_owned(),
        size,
        sha: h.finalize().into(),
    })
}

/// SHA-256 and length of a file.
///
/// # Errors
/// I/O errors.
pub fn hash_file(p: &Path) -> Result<(u64, [u8; 32])> {
    let mut f = std::fs::File::open(p)?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 256 * 1024];
    let mut n = 0u64;
    loop {
        let k = f.read(&mut buf)?;
        if k == 0 {
            break;
        }
        h.update(&buf[..k]);
        n += k as u64;
    }
    Ok((n, h.finalize().into()))
}

fn file_len(p: &Path) -> u64 {
    std::fs::metadata(p).map(|m| m.len()).unwrap_or(0)
}

/// Polls `probe` (a command run to completion) until it succeeds or `limit` passes.
fn wait_until(what: &str, limit: Duration, mut probe: impl FnMut() -> Result<bool>) -> Result<()> {
    let start = ctcp_runtime::clock::now();
    loop {
        if probe()? {
            return Ok(());
        }
        if start.elapsed() > limit {
            bail!("{what} not ready after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Runs curl in `ns` for the probe file; true on success.
fn probe_http(ns: &str, socks: bool) -> Result<bool> {
    let mut c = in_ns(ns, "curl");
    c.args(["-s", "-o", "/dev/null", "--max-time", "5"]);
    if socks {
        c.args(["--socks5-hostname", SOCKS]);
    }
    c.arg(format!("http://{ADDR_B}:{HTTP_PORT}/probe.txt"));
    let (status, _) = Proc::spawn("curl probe", c.stdin(Stdio::null()).stdout(Stdio::null()))?
        .finish(Duration::from_secs(8))?;
    Ok(status.is_some_and(|s| s.success()))
}

/// The origins in namespace B: `python3 -m http.server` and, optionally, an rsync daemon.
pub struct Servers {
    _http: Proc,
    _rsync: Option<Proc>,
}

impl Servers {
    /// Starts the HTTP origin serving `www` (and the rsync daemon if `rsync`), waiting until
    /// they answer.
    ///
    /// # Errors
    /// If one fails to start or to answer within 15 s.
    pub fn start(link: &Link, www: &Path, work: &Path, rsync: bool) -> Result<Self> {
        std::fs::write(www.join("probe.txt"), "x")?;
        let log = std::fs::File::create(work.join("http.log"))?;
        let http = Proc::spawn(
            "python3 http.server",
            in_ns(link.ns_b(), "python3")
                .args(["-m", "http.server", "--bind", ADDR_B, "--directory"])
                .arg(www)
                .arg(HTTP_PORT.to_string())
                .stdin(Stdio::null())
                .stdout(log.try_clone()?)
                .stderr(log),
        )?;
        wait_until("http.server", Duration::from_secs(15), || {
            probe_http(link.ns_b(), false)
        })?;
        let rsync = if rsync {
            Some(start_rsyncd(link, www, work)?)
        } else {
            None
        };
        Ok(Self {
            _http: http,
            _rsync: rsync,
        })
    }
}

fn start_rsyncd(link: &Link, www: &Path, work: &Path) -> Result<Proc> {
    let conf = work.join("rsyncd.conf");
    std::fs::write(
        &conf,
        format!(
            "port = {RSYNC_PORT}\naddress = {ADDR_B}\nuse chroot = no\nuid = root\ngid = root\n\
             log file = {}\n[mod]\npath = {}\nread only = yes\n",
            work.join("rsyncd.log").display(),
            www.display()
        ),
    )?;
    let p = Proc::spawn(
        "rsync daemon",
        in_ns(link.ns_b(), "rsync")
            .args(["--daemon", "--no-detach"])
            .arg(format!("--config={}", conf.display()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    )?;
    let ns = link.ns_b().to_owned();
    wait_until("rsync daemon", Duration::from_secs(15), || {
        let mut c = in_ns(&ns, "rsync");
        c.arg(format!("rsync://{ADDR_B}:{RSYNC_PORT}/"));
        let (s, _) = Proc::spawn(
            "rsync probe",
            c.stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::null()),
        )?
        .finish(Duration::from_secs(5))?;
        Ok(s.is_some_and(|s| s.success()))
    })?;
    Ok(p)
}

/// ctcp-reverse in namespace B and ctcp-forward (SOCKS on [`SOCKS`]) in namespace A.
pub struct CtcpPair {
    forward: Proc,
    reverse: Proc,
}

/// Where a [`CtcpPair`] listens and what its forward is told.
#[derive(Clone, Debug)]
pub struct PairOptions {
    /// ctcp-reverse's UDP listen address.
    pub reverse_listen: String,
    /// ctcp-forward's `--peer`.
    pub peer: String,
    /// A configuration file for ctcp-forward (`--config`), e.g. its multipath `paths`.
    pub forward_config: Option<PathBuf>,
    /// Further arguments of ctcp-forward (e.g. `--policy redundant`).
    pub forward_args: Vec<String>,
    /// Further arguments of ctcp-reverse.
    pub reverse_args: Vec<String>,
}

impl Default for PairOptions {
    /// Both on the link's addresses: the reverse on [`ADDR_B`]:[`CTCP_PORT`], no config.
    fn default() -> Self {
        let at = format!("{ADDR_B}:{CTCP_PORT}");
        Self {
            reverse_listen: at.clone(),
            peer: at,
            forward_config: None,
            forward_args: Vec::new(),
            reverse_args: Vec::new(),
        }
    }
}

impl CtcpPair {
    /// Starts both proxies with a fresh key and waits until a download through them works.
    ///
    /// # Errors
    /// If a proxy fails to start or the pair does not carry a request within 60 s.
    pub fn start(link: &Link, bins: &Bins, work: &Path) -> Result<Self> {
        Self::start_with(link, bins, work, &PairOptions::default())
    }

    /// Like [`Self::start`], with the addresses and forward configuration of `opts`.
    ///
    /// # Errors
    /// As [`Self::start`].
    pub fn start_with(link: &Link, bins: &Bins, work: &Path, opts: &PairOptions) -> Result<Self> {
        let key = work.join("psk.hex");
        let mut raw = [0u8; 32];
        fill_block(u64::from(std::process::id()), &mut raw);
        let hex: String = raw.iter().map(|b| format!("{b:02x}")).collect();
        std::fs::write(&key, hex)?;
        let log = std::fs::File::create(work.join("ctcp-reverse.log"))?;
        let reverse = Proc::spawn(
            "ctcp-reverse",
            in_ns(link.ns_b(), &bins.reverse.to_string_lossy())
                .args(["--listen", &opts.reverse_listen, "--psk-file"])
                .arg(&key)
                .args(&opts.reverse_args)
                .args(proxy_log_args())
                .stdin(Stdio::null())
                .stdout(log.try_clone()?)
                .stderr(log),
        )?;
        let log = std::fs::File::create(work.join("ctcp-forward.log"))?;
        let mut forward = in_ns(link.ns_a(), &bins.forward.to_string_lossy());
        if let Some(config) = &opts.forward_config {
            forward.arg("--config").arg(config);
        }
        let forward = Proc::spawn(
            "ctcp-forward",
            forward
                .args([
                    "--listen",
                    SOCKS,
                    "--peer",
                    &opts.peer,
                    // The long-RTT setting README recommends: the SOCKS reply does not
                    // wait a round trip for the target's connect result.
                    "--fast-open",
                    "true",
                ])
                .arg("--psk-file")
                .arg(&key)
                .args(&opts.forward_args)
                .args(proxy_log_args())
                .stdin(Stdio::null())
                .stdout(log.try_clone()?)
                .stderr(log),
        )?;
        wait_until("ctcp pair", Duration::from_secs(60), || {
            probe_http(link.ns_a(), true)
        })?;
        Ok(Self { forward, reverse })
    }

    /// Peak resident memory so far (`VmHWM`) of ctcp-forward and ctcp-reverse in bytes,
    /// `None` where it cannot be read.
    pub fn peak_rss(&self) -> (Option<u64>, Option<u64>) {
        (vm_hwm(self.forward.pid()), vm_hwm(self.reverse.pid()))
    }
}

/// `VmHWM` of `pid` in bytes. `ip netns exec` execs its command in the same process,
/// but should it fork, the child is the proxy.
fn vm_hwm(pid: u32) -> Option<u64> {
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
    let pid = if comm.trim() == "ip" {
        let children = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).ok()?;
        children.split_whitespace().next()?.parse().ok()?
    } else {
        pid
    };
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

/// The outcome of one transfer.
#[derive(Clone, Debug, Default)]
pub struct Transfer {
    /// Bytes received (all of them, or those before the timeout).
    pub bytes: u64,
    /// Seconds from start to end (or to the timeout).
    pub secs: f64,
    /// Application goodput in bit/s.
    pub goodput_bps: f64,
    /// The received file matches the original byte for byte.
    pub bytes_ok: bool,
    /// The transfer was cut off by its timeout.
    pub timed_out: bool,
    /// A failure other than the timeout (exit status, message), if any.
    pub error: Option<String>,
    /// Seconds from start to the first byte of the reply (curl's `time_starttransfer`):
    /// the request phase (SOCKS, tunnel stream open, request, server's first reply), which
    /// loss costs differently from the bulk. None where the client does not report it.
    pub first_byte_secs: Option<f64>,
}

/// How curl in namespace A reaches the origin.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Via<'a> {
    /// Kernel TCP, the source address the routing picks.
    Direct,
    /// Through ctcp's SOCKS port ([`SOCKS`]).
    Socks,
    /// Kernel TCP from this source address (`curl --interface`; on parallel paths it
    /// picks the path).
    From(&'a str),
    /// Kernel MPTCP (`mptcpize run curl`) to the origin on `port` (an MPTCP listener).
    Mptcp {
        /// The MPTCP origin's port in namespace B.
        port: u16,
    },
}

impl Via<'_> {
    fn from_flag(via_ctcp: bool) -> Self {
        if via_ctcp {
            Self::Socks
        } else {
            Self::Direct
        }
    }
}

/// A curl download of `file` into `dest` in namespace A (reaching the origin `via`),
/// stopping after `max_secs`; the caller adds output options.
fn curl_command(link: &Link, file: &DataFile, via: Via<'_>, dest: &Path, max_secs: f64) -> Command {
    let _ = std::fs::remove_file(dest);
    let mut c = match via {
        Via::Mptcp { .. } => {
            let mut c = in_ns(link.ns_a(), "mptcpize");
            c.args(["run", "curl"]);
            c
        }
        _ => in_ns(link.ns_a(), "curl"),
    };
    c.args(["-s", "-o"])
        .arg(dest)
        .args(["--max-time", &format!("{max_secs:.1}")]);
    let port = match via {
        Via::Socks => {
            c.args(["--socks5-hostname", SOCKS]);
            HTTP_PORT
        }
        Via::From(addr) => {
            c.args(["--interface", addr]);
            HTTP_PORT
        }
        Via::Mptcp { port } => port,
        Via::Direct => HTTP_PORT,
    };
    c.arg(format!("http://{ADDR_B}:{port}/{}", file.name))
        .stdin(Stdio::null());
    c
}

/// Downloads `file` with curl in namespace A, through ctcp's SOCKS port if `via_ctcp`.
///
/// # Errors
/// Only if curl cannot be run; a failed or timed-out transfer is a result.
pub fn curl(
    link: &Link,
    file: &DataFile,
    via_ctcp: bool,
    dest: &Path,
    timeout: Duration,
) -> Result<Transfer> {
    curl_run(link, file, Via::from_flag(via_ctcp), dest, timeout, None)
}

/// Like [`curl`], and also the bytes received at every whole second since curl started:
/// element `k` is the size of `dest` at `k + 1` s (the last one at or before the end).
///
/// # Errors
/// As [`curl`].
pub fn curl_sampled(
    link: &Link,
    file: &DataFile,
    via_ctcp: bool,
    dest: &Path,
    timeout: Duration,
) -> Result<(Transfer, Vec<u64>)> {
    curl_watched(
        link,
        file,
        Via::from_flag(via_ctcp),
        dest,
        timeout,
        &mut |_, _| Ok(()),
    )
}

/// Like [`curl_sampled`], reaching the origin `via`, and calling `watch(elapsed, bytes)`
/// every 10 ms while curl runs (bytes: the size of `dest` so far), e.g. to cut a path
/// mid-transfer or time the longest stall.
///
/// # Errors
/// As [`curl`], or an error `watch` returns (curl is then killed).
pub fn curl_watched(
    link: &Link,
    file: &DataFile,
    via: Via<'_>,
    dest: &Path,
    timeout: Duration,
    watch: &mut dyn FnMut(Duration, u64) -> Result<()>,
) -> Result<(Transfer, Vec<u64>)> {
    let mut samples = Vec::new();
    let t = curl_run(link, file, via, dest, timeout, Some((&mut samples, watch)))?;
    Ok((t, samples))
}

/// Per-second sizes of the destination and a callback every poll (see [`curl_watched`]).
type Watch<'a> = (
    &'a mut Vec<u64>,
    &'a mut dyn FnMut(Duration, u64) -> Result<()>,
);

fn curl_run(
    link: &Link,
    file: &DataFile,
    via: Via<'_>,
    dest: &Path,
    timeout: Duration,
    watch: Option<Watch<'_>>,
) -> Result<Transfer> {
    let mut c = curl_command(link, file, via, dest, timeout.as_secs_f64());
    c.args([
        "-w",
        "%{speed_download} %{size_download} %{time_total} %{time_starttransfer}",
    ])
    .stdout(Stdio::piped());
    let start = ctcp_runtime::clock::now();
    let mut p = Proc::spawn("curl", &mut c)?;
    let mut limit = timeout + Duration::from_secs(15);
    if let Some((samples, on_poll)) = watch {
        // curl's `-w` line is short, so its pipe cannot fill while we poll.
        while p.try_wait()?.is_none() && start.elapsed() < limit {
            let (elapsed, len) = (start.elapsed(), file_len(dest));
            let due = Duration::from_secs(samples.len() as u64 + 1);
            if elapsed >= due {
                samples.push(len);
            }
            on_poll(elapsed, len)?;
            std::thread::sleep(Duration::from_millis(10));
        }
        limit = limit.saturating_sub(start.elapsed());
    }
    let (status, out) = p.finish(limit)?;
    let wall = start.elapsed().as_secs_f64();
    let f: Vec<f64> = out
        .split_whitespace()
        .filter_map(|x| x.parse().ok())
        .collect();
    let (speed, bytes, secs, first_byte_secs) = match f[..] {
        [s, b, t, fb] => (s, b as u64, t, (fb > 0.0).then_some(fb)),
        _ => {
            let b = file_len(dest);
            (b as f64 / wall, b, wall, None)
        }
    };
    let code = status.and_then(|s| s.code());
    let timed_out = code == Some(28) || status.is_none();
    Ok(Transfer {
        bytes,
        secs,
        goodput_bps: speed * 8.0,
        bytes_ok: code == Some(0) && matches_file(dest, file)?,
        timed_out,
        error: match code {
            Some(0) | Some(28) => None,
            c => Some(format!("curl exit {c:?}")),
        },
        first_byte_secs,
    })
}

fn matches_file(dest: &Path, file: &DataFile) -> Result<bool> {
    if file_len(dest) != file.size {
        return Ok(false);
    }
    let (n, sha) = hash_file(dest).context("hashing the received file")?;
    Ok(n == file.size && sha == file.sha)
}

/// Writes the proxychains4 configuration pointing at ctcp-forward; returns its path.
///
/// # Errors
/// I/O errors.
pub fn proxychains_conf(work: &Path) -> Result<PathBuf> {
    let p = work.join("proxychains.conf");
    std::fs::write(
        &p,
        "strict_chain\nproxy_dns\nquiet_mode\ntcp_read_time_out 60000\ntcp_connect_time_out 30000\n\
         [ProxyList]\nsocks5 127.0.0.1 1080\n",
    )?;
    Ok(p)
}

/// Fetches `file` from the rsync daemon in namespace A (through proxychains4 and ctcp if
/// `proxy` names its configuration); partial progress is measured with `--inplace`.
///
/// # Errors
/// Only if rsync cannot be run.
pub fn rsync(
    link: &Link,
    file: &DataFile,
    proxy: Option<&Path>,
    dest: &Path,
    timeout: Duration,
) -> Result<Transfer> {
    let _ = std::fs::remove_file(dest);
    let mut c = match proxy {
        Some(conf) => {
            let mut c = in_ns(link.ns_a(), "proxychains4");
            c.args(["-q", "-f"]).arg(conf).arg("rsync");
            c
        }
        None => in_ns(link.ns_a(), "rsync"),
    };
    c.args(["--inplace", "-q"])
        .arg(format!("rsync://{ADDR_B}:{RSYNC_PORT}/mod/{}", file.name))
        .arg(dest)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let start = ctcp_runtime::clock::now();
    let mut p = Proc::spawn("rsync", &mut c)?;
    let status = p.wait_timeout(timeout)?;
    let secs = start.elapsed().as_secs_f64();
    drop(p);
    let bytes = file_len(dest);
    let ok = status.is_some_and(|s| s.success());
    Ok(Transfer {
        bytes,
        secs,
        goodput_bps: bytes as f64 * 8.0 / secs,
        bytes_ok: ok && matches_file(dest, file)?,
        timed_out: status.is_none(),
        error: match status {
            Some(s) if !s.success() => Some(format!("rsync {s}")),
            _ => None,
        },
        first_byte_secs: None,
    })
}

/// Starts a curl download that runs for up to `secs` and writes to `dest` (for sampling),
/// from the client address `from` if given (`curl --interface`, e.g. [`ADDR_A2`]).
///
/// [`ADDR_A2`]: super::link::ADDR_A2
///
/// # Errors
/// If curl cannot start.
pub fn curl_background(
    link: &Link,
    file: &DataFile,
    via_ctcp: bool,
    from: Option<&str>,
    dest: &Path,
    secs: u64,
) -> Result<Proc> {
    let mut c = curl_command(link, file, Via::from_flag(via_ctcp), dest, secs as f64);
    if let Some(addr) = from {
        c.args(["--interface", addr]);
    }
    c.stdout(Stdio::null()).stderr(Stdio::null());
    Proc::spawn("curl", &mut c)
}

/// Bytes written so far to `p` (0 if absent).
pub fn bytes_so_far(p: &Path) -> u64 {
    file_len(p)
}

/// Logging flags for both proxies: warnings only, unless `NETBENCH_LOG` names a level
/// (e.g. `debug`: then the logs in the kept scratch directory show each session's
/// statistics every 250 ms, the time series behind a cell's figure).
fn proxy_log_args() -> Vec<String> {
    let level = std::env::var("NETBENCH_LOG").unwrap_or_else(|_| "warn".into());
    let mut args = vec![
        "--log-level".into(),
        level,
        "--stats-interval".into(),
        "250ms".into(),
    ];
    // NETBENCH_PROXY_ARGS: extra flags for both proxies (e.g. "--window 32768"), to try a
    // setting on the real link without a rebuild.
    if let Ok(extra) = std::env::var("NETBENCH_PROXY_ARGS") {
        args.extend(extra.split_whitespace().map(String::from));
    }
    args
}
