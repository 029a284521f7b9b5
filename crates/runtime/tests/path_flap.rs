//! Paths come and go at run time (issue 29), in real network namespaces: a forward with
//! two paths, each bound to its own veth device, carries an application-limited echo
//! stream; path 0's device is taken down mid-transfer (`ip link set dev X down`) and
//! brought back a few seconds later. The transfer completes byte-exact, path 0 is marked
//! down while its link is gone, and after restoration both paths are validated again and
//! carry data. Needs root (CI runs as root); skips with a message without it.
//!
//! ```text
//!  namespace F (forward, client)           namespace R (reverse, echo server)
//!   fa: 10.213.1.1/24 ── veth ── ra: 10.213.1.2/24
//!   fb: 10.213.2.1/24 ── veth ── rb: 10.213.2.2/24      lo: 10.213.9.9 (the peer)
//! ```
//! F reaches the peer through either device (a route per device); each path's socket is
//! bound to its device, so each path's datagrams take their own link.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] fns

mod common;

use common::{echo_server, pattern, socks, v4};
use ctcp_config::PathBind;
use ctcp_proto::{PathInfo, PathPolicy, Psk};
use ctcp_runtime::{start_forward, start_reverse, Acl, ForwardSettings, ReverseSettings};
use std::net::SocketAddr;
use std::process::Command;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::Instant;

const IP: &str = "/usr/sbin/ip";
const PEER: &str = "10.213.9.9";
/// The stream: `CHUNK` bytes every `EVERY` (about 1.3 MB/s) for `RUN`.
const CHUNK: usize = 32 << 10;
const EVERY: Duration = Duration::from_millis(25);
const RUN: Duration = Duration::from_secs(10);
/// When path 0's device goes down and comes back, from the stream's start.
const DOWN_AT: Duration = Duration::from_millis(2500);
const UP_AT: Duration = Duration::from_millis(5500);

fn skip_reason() -> Option<String> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let root = status
        .lines()
        .find(|l| l.starts_with("Uid:"))
        .and_then(|l| l.split_whitespace().nth(2))
        == Some("0");
    if !root {
        return Some("not running as root".into());
    }
    if !std::path::Path::new(IP).exists() {
        return Some(format!("{IP} is missing"));
    }
    None
}

fn ip(args: &str) {
    let out = Command::new(IP)
        .args(args.split_whitespace())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "ip {args}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The two namespaces and their links, removed on drop (the veths go with them).
struct Topology {
    f: String,
    r: String,
    dev: [String; 2],
}

impl Topology {
    fn new() -> Topology {
        let tag = std::process::id() % 100_000;
        let t = Topology {
            f: format!("ctcpflapF{tag}"),
            r: format!("ctcpflapR{tag}"),
            dev: [format!("cfa{tag}"), format!("cfb{tag}")],
        };
        let (f, r) = (&t.f, &t.r);
        ip(&format!("netns add {f}"));
        ip(&format!("netns add {r}"));
        ip(&format!("-n {f} link set lo up"));
        ip(&format!("-n {r} link set lo up"));
        ip(&format!("-n {r} addr add {PEER}/32 dev lo"));
        for (k, dev) in t.dev.iter().enumerate() {
            let peer_dev = format!("cr{}{tag}", ['a', 'b'][k]);
            let net = k + 1;
            ip(&format!(
                "-n {f} link add {dev} type veth peer name {peer_dev} netns {r}"
            ));
            ip(&format!("-n {f} addr add 10.213.{net}.1/24 dev {dev}"));
            ip(&format!("-n {r} addr add 10.213.{net}.2/24 dev {peer_dev}"));
            ip(&format!("-n {f} link set {dev} up"));
            ip(&format!("-n {r} link set {peer_dev} up"));
            t.route(k);
        }
        t
    }

    /// F's route to the peer through path `k`'s device (a link coming up gets it back,
    /// as an interface script would add it).
    fn route(&self, k: usize) {
        ip(&format!(
            "-n {} route add {PEER}/32 via 10.213.{}.2 dev {} metric {}",
            self.f,
            k + 1,
            self.dev[k],
            10 * (k + 1)
        ));
    }
}

impl Drop for Topology {
    fn drop(&mut self) {
        for ns in [&self.f, &self.r] {
            let _ = Command::new(IP).args(["netns", "del", ns]).status();
        }
    }
}

/// Moves the calling thread into namespace `name` (sockets it opens live there).
fn enter(name: &str) {
    let f = std::fs::File::open(format!("/run/netns/{name}")).unwrap();
    nix::sched::setns(f, nix::sched::CloneFlags::CLONE_NEWNET).unwrap();
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// What the forward side saw.
struct Outcome {
    sent: usize,
    back: Vec<u8>,
    /// Path 0 was seen down while its link was gone.
    saw_down: bool,
    /// The paths at restoration and at the end.
    at_up: Vec<PathInfo>,
    at_end: Vec<PathInfo>,
    /// From the link going down until path 0 was seen down.
    down_after: Option<Duration>,
    /// From restoration until path 0 was validated and had carried 16 KiB more.
    back_after: Option<Duration>,
    /// The longest gap between echoed reads once the stream flowed.
    longest_stall: Duration,
}

#[test]
fn a_path_whose_device_goes_down_and_back_carries_data_again() {
    if let Some(reason) = skip_reason() {
        eprintln!("skipping: {reason}");
        return;
    }
    let topo = Topology::new();
    // The reverse and the echo server, in R.
    let (addr_tx, addr_rx) = std::sync::mpsc::channel();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let r_ns = topo.r.clone();
    let reverse = std::thread::spawn(move || {
        enter(&r_ns);
        runtime().block_on(async move {
            let mut rs = ReverseSettings::new(Psk::new(&[7; 32]).unwrap());
            // On the peer address, so answers leave from it whichever link they take.
            rs.listen = format!("{PEER}:0").parse().unwrap();
            rs.acl = Acl::allow_all();
            rs.transport.path_policy = PathPolicy::Redundant;
            let rev = start_reverse(rs).await.unwrap();
            let echo = echo_server().await;
            addr_tx.send((rev.local_addr.port(), echo)).unwrap();
            let _ = stop_rx.await;
        });
    });
    let (rev_port, echo) = addr_rx.recv().unwrap();
    let f_ns = topo.f.clone();
    let dev = topo.dev.clone();
    let route_0 = format!(
        "-n {} route add {PEER}/32 via 10.213.1.2 dev {} metric 10",
        topo.f, topo.dev[0]
    );
    let forward = std::thread::spawn(move || {
        enter(&f_ns);
        runtime().block_on(run_forward(&f_ns, &dev, &route_0, rev_port, echo))
    });
    let out = forward.join().unwrap();
    let _ = stop_tx.send(());
    reverse.join().unwrap();
    drop(topo);

    eprintln!(
        "path 0 down {:?} after its link went; carried data again {:?} after it came back; longest stall {:?}",
        out.down_after, out.back_after, out.longest_stall
    );
    eprintln!("paths at restoration: {:?}", out.at_up);
    eprintln!("paths at the end:     {:?}", out.at_end);
    assert_eq!(out.back.len(), out.sent, "every byte came back");
    assert!(out.back == pattern(29, out.sent), "byte-exact");
    assert!(
        out.saw_down,
        "path 0 was marked down while its link was gone"
    );
    assert_eq!(out.at_end.len(), 2);
    for (now, then) in out.at_end.iter().zip(&out.at_up) {
        assert!(now.validated && !now.down && !now.dead, "{now:?}");
        // 128 KiB is ~90 full datagrams: far beyond a path's challenges and probes.
        assert!(
            now.bytes_sent >= then.bytes_sent + (128 << 10),
            "path {} carried data after the restoration: {then:?} -> {now:?}",
            now.id
        );
    }
    assert!(out.back_after.is_some(), "path 0 carries data again");
}

async fn run_forward(
    ns: &str,
    dev: &[String; 2],
    route_0: &str,
    rev_port: u16,
    echo: SocketAddr,
) -> Outcome {
    let mut fs = ForwardSettings::new(format!("{PEER}:{rev_port}"), Psk::new(&[7; 32]).unwrap());
    fs.listen = "127.0.0.1:0".parse().unwrap();
    fs.paths = dev.iter().map(|d| PathBind::Device(d.clone())).collect();
    fs.transport.path_policy = PathPolicy::Redundant;
    let fwd = start_forward(fs).await.unwrap();
    let s = socks(fwd.local_addr, &v4(echo), echo.port(), 1)
        .await
        .expect("connect ok");
    let (mut r, mut w) = s.into_split();
    let reader = tokio::spawn(async move {
        let (mut back, mut buf) = (Vec::new(), vec![0u8; 64 << 10]);
        let (mut last, mut longest) = (None::<Instant>, Duration::ZERO);
        loop {
            let n = r.read(&mut buf).await.unwrap();
            if n == 0 {
                return (back, longest);
            }
            let now = Instant::now();
            if let Some(t) = last {
                longest = longest.max(now - t);
            }
            last = Some(now);
            back.extend_from_slice(&buf[..n]);
        }
    });
    let driver = fwd.driver.clone();
    let paths = move || {
        driver
            .stats()
            .first()
            .map(|s| driver.paths(s.0))
            .unwrap_or_default()
    };
    let data = pattern(29, 512 << 20);
    let start = Instant::now();
    let (mut sent, mut saw_down, mut at_up, mut back_after) = (0, false, None, None);
    let (mut down_at, mut down_after) = (None, None);
    let mut phase = 0;
    while start.elapsed() < RUN {
        w.write_all(&data[sent..sent + CHUNK]).await.unwrap();
        sent += CHUNK;
        tokio::time::sleep(EVERY).await;
        let t = start.elapsed();
        let now = paths();
        if phase == 0 && t >= DOWN_AT {
            ip(&format!("-n {ns} link set dev {} down", dev[0]));
            down_at = Some(Instant::now());
            phase = 1;
        } else if phase == 1 {
            if !saw_down && now.first().is_some_and(|p| p.down) {
                saw_down = true;
                down_after = down_at.map(|t| t.elapsed());
            }
            if t >= UP_AT {
                ip(&format!("-n {ns} link set dev {} up", dev[0]));
                ip(route_0);
                at_up = Some((Instant::now(), now));
                phase = 2;
            }
        } else if let (2, Some((up, then))) = (phase, &at_up) {
            let (p, q) = (now.first(), then.first());
            if back_after.is_none()
                && p.zip(q)
                    .is_some_and(|(p, q)| p.validated && p.bytes_sent >= q.bytes_sent + (16 << 10))
            {
                back_after = Some(up.elapsed());
            }
        }
    }
    w.shutdown().await.unwrap();
    let (back, longest_stall) = reader.await.unwrap();
    Outcome {
        sent,
        back,
        saw_down,
        down_after,
        at_up: at_up.map(|(_, p)| p).unwrap_or_default(),
        at_end: paths(),
        back_after,
        longest_stall,
    }
}
