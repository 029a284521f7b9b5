//! End-to-end tests of the `ctcp-linkem` binary: real namespaces, real TUN
//! devices, real packets. They need root and /dev/net/tun and skip (with a
//! message) without them. Namespace names carry the test process id, so
//! parallel runs do not collide.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_ctcp-linkem");
const IP: &str = "/usr/sbin/ip";

/// Why these tests cannot run here, if they cannot.
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
    if !Path::new("/dev/net/tun").exists() {
        return Some("/dev/net/tun is missing".into());
    }
    if !Path::new(IP).exists() {
        return Some(format!("{IP} is missing"));
    }
    None
}

macro_rules! require_privileges {
    () => {
        if let Some(reason) = skip_reason() {
            eprintln!("skipping: {reason}");
            return;
        }
    };
}

fn namespaces() -> Vec<String> {
    let out = Command::new(IP).args(["netns", "list"]).output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
        .collect()
}

fn ns_exists(name: &str) -> bool {
    namespaces().iter().any(|n| n == name)
}

fn scratch_dir(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ctcp-linkem-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Sends `signal` (a `kill -s` name) to a process this test started.
fn send_signal(child: &Child, signal: &str) {
    let ok = Command::new("kill")
        .args(["-s", signal, &child.id().to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill -s {signal} failed");
}

/// A running emulator; on drop (a failed assertion included) it is killed
/// and its namespaces are deleted, so a failing test leaves nothing behind.
struct Emulator {
    child: Option<Child>,
    /// Every namespace it may create: --ns-a and --ns-b first.
    ns: Vec<String>,
    stderr: PathBuf,
}

impl Emulator {
    /// Starts the binary with `args` plus namespace, ready-file and stats
    /// options, and waits (up to 30 s) for it to report ready.
    fn start(dir: &Path, ns: Vec<String>, args: &[&str]) -> Self {
        let ready = dir.join("ready");
        let stderr = dir.join("stderr.log");
        let child = Command::new(BIN)
            .args(["--ns-a", &ns[0], "--ns-b", &ns[1]])
            .arg("--ready-file")
            .arg(&ready)
            .arg("--stats-file")
            .arg(dir.join("stats.jsonl"))
            .args(args)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&stderr).unwrap())
            .spawn()
            .unwrap();
        let mut emu = Self {
            child: Some(child),
            ns,
            stderr,
        };
        for _ in 0..600 {
            if ready.exists() {
                return emu;
            }
            if let Some(status) = emu.child.as_mut().unwrap().try_wait().unwrap() {
                panic!("emulator exited with {status} before ready: {}", emu.log());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("emulator not ready after 30 s: {}", emu.log());
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// Sends `signal` and waits (up to 20 s) for the process to exit.
    fn stop(&mut self, signal: &str) -> ExitStatus {
        let mut child = self.child.take().unwrap();
        send_signal(&child, signal);
        for _ in 0..400 {
            if let Some(status) = child.try_wait().unwrap() {
                return status;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = child.kill();
        let _ = child.wait();
        panic!("emulator did not exit within 20 s of {signal}");
    }
}

impl Drop for Emulator {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        for ns in &self.ns {
            if ns_exists(ns) {
                let _ = Command::new(IP).args(["netns", "del", ns]).status();
            }
        }
    }
}

fn which(program: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Round-trip times in ms of `count` pings from namespace `from` to `to`.
fn ping_rtts(from: &str, to: &str, count: usize) -> Vec<f64> {
    let out = Command::new(IP)
        .args([
            "netns",
            "exec",
            from,
            "ping",
            "-n",
            "-c",
            &count.to_string(),
            "-i",
            "0.2",
            "-W",
            "2",
            to,
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "ping failed: {text}");
    parse_ping(&text)
}

/// The `time=X ms` values of ping's output.
fn parse_ping(text: &str) -> Vec<f64> {
    text.lines()
        .filter_map(|l| l.split("time=").nth(1))
        .filter_map(|t| t.split_whitespace().next())
        .filter_map(|v| v.parse().ok())
        .collect()
}

/// Round-trip times in ms of `count` UDP echoes (python3 on both sides,
/// since ping is not installed): an echo server in `server_ns` on
/// `server_addr`, a client in `client_ns` sending one datagram every 0.2 s.
fn udp_echo_rtts(client_ns: &str, server_ns: &str, server_addr: &str, count: usize) -> Vec<f64> {
    const PORT: &str = "7777";
    let server_code = format!(
        "import socket,sys\n\
         s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\n\
         s.bind(('{server_addr}',{PORT}))\n\
         s.settimeout(20)\n\
         print('listening',flush=True)\n\
         for _ in range({count}):\n\
         \x20   d,a=s.recvfrom(4096)\n\
         \x20   s.sendto(d,a)\n"
    );
    let mut server = Command::new(IP)
        .args(["netns", "exec", server_ns, "python3", "-c", &server_code])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(server.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "listening", "echo server did not start");
    let client_code = format!(
        "import socket,time\n\
         s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\n\
         s.settimeout(2)\n\
         for i in range({count}):\n\
         \x20   t=time.monotonic()\n\
         \x20   s.sendto(b'x'*56,('{server_addr}',{PORT}))\n\
         \x20   s.recvfrom(4096)\n\
         \x20   print('%.3f'%((time.monotonic()-t)*1e3),flush=True)\n\
         \x20   time.sleep(0.2)\n"
    );
    let out = Command::new(IP)
        .args(["netns", "exec", client_ns, "python3", "-c", &client_code])
        .output()
        .unwrap();
    let _ = server.wait();
    assert!(
        out.status.success(),
        "echo client failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.trim().parse().unwrap())
        .collect()
}

fn final_stats(dir: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(dir.join("stats.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|v| v["final"] == true)
        .collect()
}

#[test]
fn ping_across_a_50ms_link_and_clean_up_on_sigterm() {
    require_privileges!();
    let pid = std::process::id();
    let ns = [format!("lkt-{pid}-pa"), format!("lkt-{pid}-pb")];
    let dir = scratch_dir("ping");
    let mut emu = Emulator::start(
        &dir,
        ns.to_vec(),
        &["--delay", "50ms", "--stats-interval", "0"],
    );
    assert!(ns_exists(&ns[0]) && ns_exists(&ns[1]));

    let count = 10;
    let (rtts, tool) = if which("ping") {
        (ping_rtts(&ns[0], "10.77.0.2", count), "ping")
    } else {
        (
            udp_echo_rtts(&ns[0], &ns[1], "10.77.0.2", count),
            "python3 UDP echo",
        )
    };
    eprintln!("RTTs over a 50 ms one-way link ({tool}): {rtts:?} ms");
    assert_eq!(rtts.len(), count, "lost echoes: {rtts:?}");
    // The RTT is the median: on a loaded 2-core machine a single echo can
    // be delayed by the scheduler (of the echo programs or the emulator),
    // which is measurement noise, not link delay (the emulator's own
    // release lateness is printed below from its statistics). No echo may
    // come back early.
    let mut sorted = rtts.clone();
    sorted.sort_by(f64::total_cmp);
    let median = (sorted[count / 2 - 1] + sorted[count / 2]) / 2.0;
    eprintln!("median RTT {median:.3} ms");
    assert!(
        (97.0..=103.0).contains(&median),
        "median RTT {median} ms is not 100 ms ± 3 ms: {rtts:?}"
    );
    assert!(sorted[0] >= 97.0, "an echo came back early: {rtts:?}");

    let status = emu.stop("TERM");
    assert!(status.success(), "exit {status}: {}", emu.log());
    assert!(!ns_exists(&ns[0]), "{} left behind", ns[0]);
    assert!(!ns_exists(&ns[1]), "{} left behind", ns[1]);
    assert!(!dir.join("ready").exists(), "ready file left behind");

    let stats = final_stats(&dir);
    assert_eq!(stats.len(), 2, "one final line per direction");
    for line in &stats {
        eprintln!(
            "{}: release lateness mean {} µs, max {} µs",
            line["direction"], line["late_mean_us"], line["late_max_us"]
        );
        assert_eq!(line["packets_in"], count as u64, "{line}");
        assert_eq!(line["delivered"], count as u64, "{line}");
        assert_eq!(line["lost"], 0, "{line}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn keep_leaves_namespaces_on_sigint_and_cleanup_removes_them() {
    require_privileges!();
    let pid = std::process::id();
    let ns = [format!("lkt-{pid}-ka"), format!("lkt-{pid}-kb")];
    let dir = scratch_dir("keep");
    let mut emu = Emulator::start(&dir, ns.to_vec(), &["--keep", "--stats-interval", "0"]);
    let status = emu.stop("INT");
    assert!(status.success(), "exit {status}: {}", emu.log());
    assert!(
        ns_exists(&ns[0]) && ns_exists(&ns[1]),
        "--keep removed the namespaces"
    );

    let out = Command::new(BIN)
        .args(["--cleanup", "--ns-a", &ns[0], "--ns-b", &ns[1]])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !ns_exists(&ns[0]) && !ns_exists(&ns[1]),
        "--cleanup left namespaces"
    );
    // Nothing left to clean is not an error.
    let again = Command::new(BIN)
        .args(["--cleanup", "--ns-a", &ns[0], "--ns-b", &ns[1]])
        .status()
        .unwrap();
    assert!(again.success());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn refuses_an_existing_namespace_and_leaves_it_alone() {
    require_privileges!();
    let pid = std::process::id();
    let ns = [format!("lkt-{pid}-ea"), format!("lkt-{pid}-eb")];
    // Owned by the test; the guard below deletes both whatever happens.
    let guard = Emulator {
        child: None,
        ns: ns.to_vec(),
        stderr: PathBuf::new(),
    };
    assert!(Command::new(IP)
        .args(["netns", "add", &ns[1]])
        .status()
        .unwrap()
        .success());
    let out = Command::new(BIN)
        .args(["--ns-a", &ns[0], "--ns-b", &ns[1], "--stats-interval", "0"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("already exists"), "{stderr}");
    assert!(!stderr.lines().any(|l| l == "ready"), "{stderr}");
    assert!(ns_exists(&ns[1]), "deleted a namespace it did not create");
    assert!(
        !ns_exists(&ns[0]),
        "left its own namespace behind after failing"
    );
    drop(guard);
}

#[test]
fn parses_ping_output() {
    let text = "PING 10.77.0.2 (10.77.0.2) 56(84) bytes of data.\n\
                64 bytes from 10.77.0.2: icmp_seq=1 ttl=64 time=100 ms\n\
                64 bytes from 10.77.0.2: icmp_seq=2 ttl=64 time=100.4 ms\n\
                --- 10.77.0.2 ping statistics ---\n";
    assert_eq!(parse_ping(text), [100.0, 100.4]);
}

/// Three links in a line (four namespaces) with a client and a server namespace at the
/// ends: each link has its own delay, the middle one its own loss and seed; the client
/// reaches the server across all of them, each link's statistics count only its own
/// losses, and SIGTERM removes all six namespaces.
#[test]
fn a_chain_of_three_links_with_end_namespaces_routes_end_to_end() {
    require_privileges!();
    let pid = std::process::id();
    let (a, b) = (format!("lkt-{pid}-ca"), format!("lkt-{pid}-cb"));
    let mid = format!("lkt-{pid}-cm");
    let (client, server) = (format!("lkt-{pid}-cc"), format!("lkt-{pid}-cs"));
    let all = vec![
        a.clone(),
        b.clone(),
        format!("{mid}1"),
        format!("{mid}2"),
        client.clone(),
        server.clone(),
    ];
    let dir = scratch_dir("chain");
    let mut emu = Emulator::start(
        &dir,
        all.clone(),
        &[
            "--mid-prefix",
            &mid,
            "--client-ns",
            &client,
            "--server-ns",
            &server,
            "--hop",
            "delay=10ms",
            "--hop",
            "delay=20ms,loss=20%,seed=7",
            "--hop",
            "delay=15ms,rate=50mbit",
            "--stats-interval",
            "0",
        ],
    );
    for ns in &all {
        assert!(ns_exists(ns), "{ns} missing");
    }
    // Client to server: 2 × (10 + 20 + 15) ms = 90 ms, with echoes lost on the
    // middle link (so only the ones that came back are timed).
    let count = 30;
    let rtts = udp_echo_rtts_lossy(&client, &server, "10.77.201.2", None, count);
    eprintln!("client→server RTTs across three links: {rtts:?} ms");
    assert!(
        rtts.len() >= 5 && rtts.len() < count,
        "echoes back: {}",
        rtts.len()
    );
    let mut sorted = rtts.clone();
    sorted.sort_by(f64::total_cmp);
    let median = sorted[sorted.len() / 2];
    // Six TUN crossings and two veths on a loaded 2-core machine add a few ms.
    assert!(
        (87.0..=100.0).contains(&median),
        "median RTT {median} ms: {rtts:?}"
    );
    assert!(sorted[0] >= 87.0, "an echo came back early: {rtts:?}");
    // The first namespace reaches the last one's link address across all links too.
    let rtts = udp_echo_rtts_lossy(&a, &b, "10.77.2.2", None, 10);
    assert!(rtts.iter().all(|r| *r >= 87.0), "{rtts:?}");

    let status = emu.stop("TERM");
    assert!(status.success(), "exit {status}: {}", emu.log());
    for ns in &all {
        assert!(!ns_exists(ns), "{ns} left behind");
    }
    let stats = final_stats(&dir);
    assert_eq!(stats.len(), 6, "one final line per direction per link");
    for line in &stats {
        let hop = line["hop"].as_u64().unwrap();
        let lost = line["lost"].as_u64().unwrap();
        eprintln!(
            "hop {hop} {}: {} in, {lost} lost",
            line["direction"], line["packets_in"]
        );
        if hop == 1 {
            assert!(lost > 0, "the lossy link lost nothing: {line}");
        } else {
            assert_eq!(lost, 0, "{line}");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Like [`udp_echo_rtts`], but over a lossy path: a lost echo times out (0.5 s) and is
/// skipped rather than failing; the round-trip times of the ones that came back. The
/// client sends from `from` if given (its source address picks a parallel path).
fn udp_echo_rtts_lossy(
    client_ns: &str,
    server_ns: &str,
    server_addr: &str,
    from: Option<&str>,
    count: usize,
) -> Vec<f64> {
    const PORT: &str = "7778";
    let server_code = format!(
        "import socket\n\
         s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\n\
         s.bind(('{server_addr}',{PORT}))\n\
         s.settimeout(15)\n\
         print('listening',flush=True)\n\
         try:\n\
         \x20   while True:\n\
         \x20       d,a=s.recvfrom(4096)\n\
         \x20       s.sendto(d,a)\n\
         except socket.timeout:\n\
         \x20   pass\n"
    );
    let mut server = Command::new(IP)
        .args(["netns", "exec", server_ns, "python3", "-c", &server_code])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(server.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "listening", "echo server did not start");
    let bind = from.unwrap_or("0.0.0.0");
    let client_code = format!(
        "import socket,time\n\
         s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\n\
         s.bind(('{bind}',0))\n\
         s.settimeout(0.5)\n\
         for i in range({count}):\n\
         \x20   t=time.monotonic()\n\
         \x20   s.sendto(b'%d'%i,('{server_addr}',{PORT}))\n\
         \x20   try:\n\
         \x20       while s.recvfrom(4096)[0]!=b'%d'%i: pass\n\
         \x20       print('%.3f'%((time.monotonic()-t)*1e3),flush=True)\n\
         \x20   except socket.timeout:\n\
         \x20       pass\n"
    );
    let out = Command::new(IP)
        .args(["netns", "exec", client_ns, "python3", "-c", &client_code])
        .output()
        .unwrap();
    let _ = server.kill();
    let _ = server.wait();
    assert!(
        out.status.success(),
        "echo client failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.trim().parse().unwrap())
        .collect()
}

/// A chain kept with `--keep` is removed by `--cleanup` given the same names: the ends,
/// every middle namespace (`--mid-prefix` and a number) and the end namespaces.
#[test]
fn cleanup_removes_a_kept_chain() {
    require_privileges!();
    let pid = std::process::id();
    let (a, b, mid) = (
        format!("lkt-{pid}-ka2"),
        format!("lkt-{pid}-kb2"),
        format!("lkt-{pid}-km"),
    );
    let client = format!("lkt-{pid}-kc");
    let all = vec![
        a.clone(),
        b.clone(),
        format!("{mid}1"),
        format!("{mid}2"),
        client.clone(),
    ];
    let dir = scratch_dir("keepchain");
    let mut emu = Emulator::start(
        &dir,
        all.clone(),
        &[
            "--keep",
            "--mid-prefix",
            &mid,
            "--client-ns",
            &client,
            "--hop",
            "delay=1ms",
            "--hop",
            "delay=1ms",
            "--hop",
            "delay=1ms",
            "--stats-interval",
            "0",
        ],
    );
    let status = emu.stop("INT");
    assert!(status.success(), "exit {status}: {}", emu.log());
    for ns in &all {
        assert!(ns_exists(ns), "--keep removed {ns}");
    }
    let out = Command::new(BIN)
        .args([
            "--cleanup",
            "--ns-a",
            &a,
            "--ns-b",
            &b,
            "--mid-prefix",
            &mid,
        ])
        .args(["--client-ns", &client])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for ns in &all {
        assert!(!ns_exists(ns), "--cleanup left {ns}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Two parallel paths between the same two namespaces, each with its own delay, loss and
/// seed: the client's source address picks the path (both talk to B's path-0 address), each
/// path's statistics count only its own losses, and the control socket cuts path 1 and
/// restores it while path 0 carries on.
#[test]
fn parallel_paths_carry_their_own_impairments_and_go_down_and_up() {
    require_privileges!();
    let pid = std::process::id();
    let ns = vec![format!("lkt-{pid}-pa2"), format!("lkt-{pid}-pb2")];
    let dir = scratch_dir("parallel");
    let ctl = dir.join("ctl");
    let ctl_arg = ctl.to_string_lossy().into_owned();
    let mut emu = Emulator::start(
        &dir,
        ns.clone(),
        &[
            "--path",
            "delay=10ms",
            "--path",
            "delay=40ms,loss=20%,seed=7",
            "--control",
            &ctl_arg,
            "--stats-interval",
            "0",
        ],
    );
    let (a, b) = (&ns[0], &ns[1]);
    let median = |rtts: &[f64]| {
        let mut s = rtts.to_vec();
        s.sort_by(f64::total_cmp);
        s[s.len() / 2]
    };
    // Path 0: 2 × 10 ms, nothing lost.
    let fast = udp_echo_rtts_lossy(a, b, "10.77.0.2", Some("10.77.0.1"), 10);
    eprintln!("path 0 RTTs: {fast:?} ms");
    assert_eq!(fast.len(), 10, "path 0 lost echoes: {fast:?}");
    // The bounds tell the two paths' delays apart with room for a loaded machine's
    // scheduling delay (tens of ms at a load of 13 on two cores); nothing comes back early.
    assert!((19.0..=45.0).contains(&median(&fast)), "{fast:?}");
    assert!(
        fast.iter().all(|r| *r >= 19.0),
        "an echo came back early: {fast:?}"
    );
    // Path 1, to the same B address: 2 × 40 ms, with 20 % loss each way.
    let count = 30;
    let slow = udp_echo_rtts_lossy(a, b, "10.77.0.2", Some("10.77.1.1"), count);
    eprintln!("path 1 RTTs: {slow:?} ms");
    assert!(
        slow.len() >= 5 && slow.len() < count,
        "echoes back: {}",
        slow.len()
    );
    assert!((79.0..=110.0).contains(&median(&slow)), "{slow:?}");
    assert!(
        slow.iter().all(|r| *r >= 79.0),
        "an echo came back early: {slow:?}"
    );

    // Cut path 1: nothing crosses it, path 0 carries on; restored, it carries again.
    let status = ctcp_linkem::control::send(&ctl, "down 1").unwrap();
    assert_eq!(status, "ok");
    assert_eq!(
        ctcp_linkem::control::send(&ctl, "status").unwrap(),
        "0 up\n1 down\n"
    );
    let cut = udp_echo_rtts_lossy(a, b, "10.77.0.2", Some("10.77.1.1"), 10);
    assert!(cut.is_empty(), "echoes crossed a cut path: {cut:?}");
    let fast = udp_echo_rtts_lossy(a, b, "10.77.0.2", Some("10.77.0.1"), 5);
    assert_eq!(fast.len(), 5, "path 0 suffered from path 1's cut: {fast:?}");
    assert!(ctcp_linkem::control::send(&ctl, "down 2").is_err());
    let out = Command::new(BIN)
        .args(["--control", &ctl_arg, "--ctl", "up 1"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "ok");
    let back = udp_echo_rtts_lossy(a, b, "10.77.0.2", Some("10.77.1.1"), count);
    assert!(!back.is_empty(), "path 1 did not come back");

    let status = emu.stop("TERM");
    assert!(status.success(), "exit {status}: {}", emu.log());
    assert!(!ctl.exists(), "control socket left behind");
    for n in &ns {
        assert!(!ns_exists(n), "{n} left behind");
    }
    let stats = final_stats(&dir);
    assert_eq!(stats.len(), 4, "one final line per direction per path");
    for line in &stats {
        let (hop, lost) = (
            line["hop"].as_u64().unwrap(),
            line["lost"].as_u64().unwrap(),
        );
        let down = line["down_drops"].as_u64().unwrap();
        eprintln!(
            "path {hop} {}: {} in, {lost} lost, {down} dropped while down",
            line["direction"], line["packets_in"]
        );
        if hop == 1 {
            assert!(lost > 0, "the lossy path lost nothing: {line}");
        } else {
            assert_eq!((lost, down), (0, 0), "{line}");
        }
    }
    let cut_ab = stats
        .iter()
        .find(|l| l["hop"] == 1 && l["direction"] == "a_to_b")
        .unwrap();
    assert!(cut_ab["down_drops"].as_u64().unwrap() >= 10, "{cut_ab}");
    let _ = std::fs::remove_dir_all(&dir);
}
