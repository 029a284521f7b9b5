//! Paths come and go at run time (issue 29), in real network namespaces: a forward with
//! two paths, each bound to its own veth device, carries an application-limited echo
//! stream; path 0's link is cut mid-transfer and restored a few seconds later, three
//! ways: its device set down and up, its device deleted and created again (a modem
//! replugged: a new interface index, so the old socket stays dead), its address deleted
//! and added again. The transfer completes byte-exact, path 0 is marked down while its
//! link is gone, and after restoration both paths are validated again and carry data.
//! A fourth test loses the session while path 0 is down (the reverse restarts): the
//! forward reconnects over path 1 and carries a SOCKS transfer, and path 0 joins the new
//! session once its link is back. Needs root (CI runs as root); skips with a message
//! without it.
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

use common::{echo_server, pattern, round_trip, socks, v4};
use ctcp_config::PathBind;
use ctcp_proto::{PathInfo, PathPolicy, Psk};
use ctcp_runtime::{start_forward, start_reverse, Acl, Driver, ForwardSettings, ReverseSettings};
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

/// How path 0's link is cut and restored.
#[derive(Clone, Copy, Debug)]
enum Outage {
    /// `ip link set dev X down`, then up (the device keeps its index).
    DeviceDown,
    /// `ip link del X`, then a new veth pair of the same names and addresses: the new
    /// device has a new index, which a socket bound to the old one never reaches.
    DeviceRecreated,
    /// The device's address deleted (its route goes with it), then added again.
    AddressRemoved,
}

/// The two namespaces and their links.
#[derive(Clone)]
struct Net {
    f: String,
    r: String,
    tag: u32,
    dev: [String; 2],
}

/// The namespaces, removed on drop (the veths go with them).
struct Topology(Net);

impl Topology {
    /// Namespaces named by the process and `test` (the tests of this file run at once).
    fn new(test: u32) -> Topology {
        let tag = std::process::id() % 100_000;
        let n = Net {
            f: format!("ctcpflapF{tag}t{test}"),
            r: format!("ctcpflapR{tag}t{test}"),
            tag,
            dev: [format!("cfa{tag}"), format!("cfb{tag}")],
        };
        let (f, r) = (&n.f, &n.r);
        ip(&format!("netns add {f}"));
        ip(&format!("netns add {r}"));
        ip(&format!("-n {f} link set lo up"));
        ip(&format!("-n {r} link set lo up"));
        ip(&format!("-n {r} addr add {PEER}/32 dev lo"));
        for k in 0..2 {
            n.link(k);
        }
        Topology(n)
    }
}

impl Net {
    /// Path `k`'s veth pair, its addresses, both ends up, and F's route through it.
    fn link(&self, k: usize) {
        let (f, r, dev) = (&self.f, &self.r, &self.dev[k]);
        let peer_dev = format!("cr{}{}", ['a', 'b'][k], self.tag);
        let net = k + 1;
        ip(&format!(
            "-n {f} link add {dev} type veth peer name {peer_dev} netns {r}"
        ));
        ip(&format!("-n {f} addr add 10.213.{net}.1/24 dev {dev}"));
        ip(&format!("-n {r} addr add 10.213.{net}.2/24 dev {peer_dev}"));
        ip(&format!("-n {f} link set {dev} up"));
        ip(&format!("-n {r} link set {peer_dev} up"));
        self.route(k);
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

    /// Cuts path 0's link.
    fn cut(&self, o: Outage) {
        let (f, dev) = (&self.f, &self.dev[0]);
        match o {
            Outage::DeviceDown => ip(&format!("-n {f} link set dev {dev} down")),
            Outage::DeviceRecreated => ip(&format!("-n {f} link del {dev}")),
            Outage::AddressRemoved => ip(&format!("-n {f} addr del 10.213.1.1/24 dev {dev}")),
        }
    }

    /// Restores path 0's link as [`Net::cut`] took it.
    fn restore(&self, o: Outage) {
        let (f, dev) = (&self.f, &self.dev[0]);
        match o {
            Outage::DeviceDown => {
                ip(&format!("-n {f} link set dev {dev} up"));
                self.route(0);
            }
            Outage::DeviceRecreated => self.link(0),
            Outage::AddressRemoved => {
                ip(&format!("-n {f} addr add 10.213.1.1/24 dev {dev}"));
                self.route(0);
            }
        }
    }
}

impl Drop for Topology {
    fn drop(&mut self) {
        for ns in [&self.0.f, &self.0.r] {
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
    flap(Outage::DeviceDown, 0);
}

#[test]
fn path_0_whose_device_is_deleted_and_created_again_carries_data_again() {
    flap(Outage::DeviceRecreated, 1);
}

#[test]
fn path_0_whose_address_is_removed_and_added_again_carries_data_again() {
    flap(Outage::AddressRemoved, 2);
}

/// Starts the reverse (and the echo server) in `ns` on `listen`, on the current runtime;
/// a port just released by a reverse that stopped is tried again for a while.
async fn reverse_on(listen: SocketAddr) -> ctcp_runtime::Running {
    let mut tries = 0;
    loop {
        let mut rs = ReverseSettings::new(Psk::new(&[7; 32]).unwrap());
        // On the peer address, so answers leave from it whichever link they take.
        rs.listen = listen;
        rs.acl = Acl::allow_all();
        rs.drain_timeout = Duration::from_millis(100);
        rs.transport.path_policy = PathPolicy::Redundant;
        match start_reverse(rs).await {
            Ok(r) => return r,
            Err(e) if tries < 50 => {
                tries += 1;
                eprintln!("reverse not bound yet ({e}); again");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("reverse: {e}"),
        }
    }
}

/// Path 0's link cut `o`'s way mid-transfer and restored: byte-exact, path 0 seen down,
/// both paths validated and carrying data after the restore.
fn flap(o: Outage, test: u32) {
    if let Some(reason) = skip_reason() {
        eprintln!("skipping: {reason}");
        return;
    }
    let topo = Topology::new(test);
    // The reverse and the echo server, in R.
    let (addr_tx, addr_rx) = std::sync::mpsc::channel();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let r_ns = topo.0.r.clone();
    let reverse = std::thread::spawn(move || {
        enter(&r_ns);
        runtime().block_on(async move {
            let rev = reverse_on(format!("{PEER}:0").parse().unwrap()).await;
            let echo = echo_server().await;
            addr_tx.send((rev.local_addr.port(), echo)).unwrap();
            let _ = stop_rx.await;
        });
    });
    let (rev_port, echo) = addr_rx.recv().unwrap();
    let net = topo.0.clone();
    let forward = std::thread::spawn(move || {
        enter(&net.f);
        runtime().block_on(run_forward(&net, o, rev_port, echo))
    });
    let out = forward.join().unwrap();
    let _ = stop_tx.send(());
    reverse.join().unwrap();
    drop(topo);

    eprintln!(
        "{o:?}: path 0 down {:?} after its link went; carried data again {:?} after it came back; longest stall {:?}",
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

/// The paths of the driver's first session.
fn paths_of(driver: &Driver) -> Vec<PathInfo> {
    driver
        .stats()
        .first()
        .map(|s| driver.paths(s.0))
        .unwrap_or_default()
}

/// The forward of these tests: one path per device of `net` (policy `redundant`), to
/// the reverse on `rev_port`.
fn forward_settings(net: &Net, rev_port: u16) -> ForwardSettings {
    let mut fs = ForwardSettings::new(format!("{PEER}:{rev_port}"), Psk::new(&[7; 32]).unwrap());
    fs.listen = "127.0.0.1:0".parse().unwrap();
    fs.paths = net
        .dev
        .iter()
        .map(|d| PathBind::Device(d.clone()))
        .collect();
    fs.transport.path_policy = PathPolicy::Redundant;
    fs
}

async fn run_forward(net: &Net, o: Outage, rev_port: u16, echo: SocketAddr) -> Outcome {
    let fwd = start_forward(forward_settings(net, rev_port))
        .await
        .unwrap();
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
    let paths = move || paths_of(&driver);
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
            net.cut(o);
            down_at = Some(Instant::now());
            phase = 1;
        } else if phase == 1 {
            if !saw_down && now.first().is_some_and(|p| p.down) {
                saw_down = true;
                down_after = down_at.map(|t| t.elapsed());
            }
            if t >= UP_AT {
                net.restore(o);
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

/// Polls `f` every write cadence until it holds, for at most `limit` (a liveness bound,
/// not a timing assertion: the test fails only if it never holds).
async fn until(limit: Duration, what: &str, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < limit, "{what}: not within {limit:?}");
        tokio::time::sleep(EVERY).await;
    }
}

#[test]
fn a_session_lost_while_path_0_is_down_reconnects_over_path_1() {
    if let Some(reason) = skip_reason() {
        eprintln!("skipping: {reason}");
        return;
    }
    let topo = Topology::new(3);
    // The reverse, restarted on the same port on request (`true`), stopped on `false`.
    let (addr_tx, mut addr_rx) = tokio::sync::mpsc::unbounded_channel();
    let (ctl_tx, mut ctl_rx) = tokio::sync::mpsc::unbounded_channel::<bool>();
    let r_ns = topo.0.r.clone();
    let reverse = std::thread::spawn(move || {
        enter(&r_ns);
        runtime().block_on(async move {
            let echo = echo_server().await;
            let mut listen: SocketAddr = format!("{PEER}:0").parse().unwrap();
            loop {
                let rev = reverse_on(listen).await;
                listen = rev.local_addr;
                addr_tx.send((listen.port(), echo)).unwrap();
                let restart = ctl_rx.recv().await.unwrap_or(false);
                let _ = rev.shutdown.send(true);
                let _ = rev.done.await;
                if !restart {
                    return;
                }
            }
        });
    });
    let (rev_port, echo) = addr_rx.blocking_recv().unwrap();
    let net = topo.0.clone();
    let ctl = ctl_tx.clone();
    let forward = std::thread::spawn(move || {
        enter(&net.f);
        runtime().block_on(async move {
            let fwd = start_forward(forward_settings(&net, rev_port)).await.unwrap();
            let d = fwd.driver.clone();
            let first = pattern(31, 256 << 10);
            assert!(round_trip(fwd.local_addr, echo, &first).await == first);
            let old = d.stats()[0].0;

            // Path 0's link goes, then the session: the reverse restarts.
            net.cut(Outage::DeviceDown);
            until(Duration::from_secs(10), "path 0 seen down", || {
                d.paths(old).first().is_some_and(|p| p.down)
            })
            .await;
            ctl.send(true).unwrap();
            let lost_at = Instant::now();
            addr_rx.recv().await.expect("the reverse restarted");
            let rebound = lost_at.elapsed();
            until(Duration::from_secs(30), "a new session", || {
                d.stats()
                    .iter()
                    .any(|s| s.0 != old && d.is_established(s.0))
            })
            .await;
            let reconnected = lost_at.elapsed();
            let new = d.stats().iter().find(|s| s.0 != old).unwrap().0;
            let data = pattern(32, 1 << 20);
            assert!(
                round_trip(fwd.local_addr, echo, &data).await == data,
                "byte-exact over path 1 alone"
            );
            let during = d.paths(new);

            // Path 0's link comes back: it joins the new session (as its path 1).
            net.restore(Outage::DeviceDown);
            let restored = Instant::now();
            let s = socks(fwd.local_addr, &v4(echo), echo.port(), 1)
                .await
                .expect("connect ok");
            let (mut r, mut w) = s.into_split();
            let reader = tokio::spawn(async move {
                let mut back = Vec::new();
                r.read_to_end(&mut back).await.unwrap();
                back
            });
            let stream = pattern(33, 64 << 20);
            let mut sent = 0;
            let mut joined = None;
            while restored.elapsed() < Duration::from_secs(4) {
                w.write_all(&stream[sent..sent + CHUNK]).await.unwrap();
                sent += CHUNK;
                tokio::time::sleep(EVERY).await;
                let p = d.paths(new);
                if joined.is_none()
                    && p.get(1).is_some_and(|p| {
                        p.validated && p.bytes_sent >= during[1].bytes_sent + (16 << 10)
                    })
                {
                    joined = Some(restored.elapsed());
                }
            }
            w.shutdown().await.unwrap();
            let back = reader.await.unwrap();
            let after = d.paths(new);
            eprintln!(
                "reverse bound again {rebound:?} and the session re-established {reconnected:?} after the restart began; path 0's link carried data again {joined:?} after its restore"
            );
            eprintln!("new session while path 0's link was down: {during:?}");
            eprintln!("after the restore: {after:?}");
            assert!(back == stream[..sent], "byte-exact after the restore");
            assert_eq!(during.len(), 2);
            assert!(
                during[0].validated && !during[0].down && during[0].bytes_sent >= 1 << 20,
                "the new session's path 0 runs over the working link: {during:?}"
            );
            assert!(during[1].down, "the down link is the session's path 1: {during:?}");
            for (now, then) in after.iter().zip(&during) {
                assert!(now.validated && !now.down && !now.dead, "{now:?}");
                assert!(
                    now.bytes_sent >= then.bytes_sent + (128 << 10),
                    "path {} carried data after the restore: {then:?} -> {now:?}",
                    now.id
                );
            }
        });
    });
    let res = forward.join();
    let _ = ctl_tx.send(false);
    reverse.join().unwrap();
    drop(topo);
    res.unwrap();
}
