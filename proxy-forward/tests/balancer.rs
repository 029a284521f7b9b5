//! Several ctcp-reverse instances behind one address, in real network namespaces: the
//! shipped stateless balancer (`configs/reverse-balancer.nft`, only its `define` lines
//! set) hashes each datagram's connection id to an instance, so sessions from several
//! forwards spread over both; a forward whose address changes (NAT rebinding) keeps its
//! session on its instance; one instance is killed, the operator points its bucket at the
//! other (`configs/reverse-balancer.sh set`), and new streams through every forward work
//! again, byte-exact (real `curl` downloads through each forward's SOCKS port, checked by
//! SHA-256).
//!
//! ```text
//!  forwards ns (C)           balancer ns (B)                      instances (R0, R1)
//!  10.201.1.2  ── veth ──  10.201.1.1                 10.201.2.1 ── veth ── R0 10.201.2.2:7000
//!  8 × ctcp-forward        VIP 10.201.0.1 (nftables)  10.201.3.1 ── veth ── R1 10.201.3.2:7000
//!  --peer VIP:7000         routes, no proxy           each R: HTTP server on lo 10.201.9.1:8080
//! ```
//!
//! C has no route to 10.201.9.1 and B none either, so every download came through a
//! tunnel session and an instance. Which instance holds a forward's session is read from
//! the instances' metrics endpoints (`ctcp_session_info`).
//!
//! Needs root, `ip`, `nft` and `curl`; without them the test prints why and passes. For
//! measurements (BENCHMARKS.md): `CTCP_BALANCER_FORWARDS=N` runs N forwards instead of 8;
//! `CTCP_BALANCER_NO_MAP_UPDATE=1` leaves the dead instance in the map, so the forwards
//! recover on their own (idle timeout, then a fresh connection id per handshake).
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] fns

mod netns;

use netns::{fill, in_ns, ip, must, run, sha256, wait_for_log, Lab};
use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

const VIP: &str = "10.201.0.1";
const PORT: u16 = 7000;
const INSTANCES: [&str; 2] = ["10.201.2.2", "10.201.3.2"];
const SERVER: &str = "10.201.9.1:8080";
const REBOUND: &str = "10.201.1.3";
const FILE_SIZE: usize = 1 << 20;
const FIRST_SOCKS_PORT: u16 = 1081;

/// The namespaces, addresses and routes of the module's diagram, the balancer's ruleset
/// loaded in B.
fn balancer_lab() -> Lab {
    let lab = Lab::new("lb", "t", &["c", "b", "r0", "r1"]);
    lab.veth("c", "c0", "b", "b0");
    lab.veth("b", "b1", "r0", "e0");
    lab.veth("b", "b2", "r1", "e0");
    for (n, dev, addr) in [
        ("c", "c0", "10.201.1.2/24"),
        ("b", "b0", "10.201.1.1/24"),
        ("b", "b0", &format!("{VIP}/32")),
        ("b", "b1", "10.201.2.1/24"),
        ("b", "b2", "10.201.3.1/24"),
        ("r0", "e0", "10.201.2.2/24"),
        ("r1", "e0", "10.201.3.2/24"),
        ("r0", "lo", "10.201.9.1/32"),
        ("r1", "lo", "10.201.9.1/32"),
    ] {
        lab.addr(n, dev, addr);
    }
    ip(&[
        "-n",
        &lab.ns("c"),
        "route",
        "add",
        "default",
        "via",
        "10.201.1.1",
    ]);
    ip(&[
        "-n",
        &lab.ns("r0"),
        "route",
        "add",
        "default",
        "via",
        "10.201.2.1",
    ]);
    ip(&[
        "-n",
        &lab.ns("r1"),
        "route",
        "add",
        "default",
        "via",
        "10.201.3.1",
    ]);
    must(in_ns(&lab.ns("b"), "sh").args(["-c", "echo 1 > /proc/sys/net/ipv4/ip_forward"]));
    lab.load_ruleset(
        "b",
        "reverse-balancer.nft",
        &[
            ("vip", VIP.to_owned()),
            ("port", PORT.to_string()),
            ("instance_0", INSTANCES[0].to_owned()),
            ("instance_1", INSTANCES[1].to_owned()),
        ],
    );
    lab
}

/// Instance `i`: the real ctcp-reverse in namespace `r{i}`, its metrics on that
/// namespace's loopback.
fn start_instance(lab: &mut Lab, key: &Path, i: usize) {
    let ns = lab.ns(&format!("r{i}"));
    let log = lab.spawn(
        &format!("reverse-{i}"),
        in_ns(&ns, netns::reverse_binary().to_str().unwrap())
            .args(["--listen", &format!("0.0.0.0:{PORT}")])
            .args(["--metrics-listen", "127.0.0.1:9100", "--log-level", "info"])
            .arg("--psk-file")
            .arg(key),
    );
    wait_for_log(&log, "ctcp-reverse started");
}

/// Forward `i` in C, SOCKS on 127.0.0.1:(1081 + i), peer the VIP; returns its log once
/// its session is up.
fn start_forward(lab: &mut Lab, key: &Path, i: usize) -> PathBuf {
    let log = lab.spawn(
        &format!("forward-{i}"),
        in_ns(&lab.ns("c"), env!("CARGO_BIN_EXE_ctcp-forward"))
            .args(["--peer", &format!("{VIP}:{PORT}")])
            .args(["--listen", &socks_addr(i), "--log-level", "info"])
            .arg("--psk-file")
            .arg(key),
    );
    wait_for_log(&log, "tunnel session established");
    log
}

fn socks_addr(i: usize) -> String {
    format!("127.0.0.1:{}", FIRST_SOCKS_PORT + i as u16)
}

/// The connection id of the forward's current session: the last one its log reports.
fn current_session(log: &Path) -> u32 {
    let text = fs::read_to_string(log).unwrap();
    text.lines()
        .rev()
        .filter(|l| l.contains("tunnel session established"))
        .find_map(|l| l.split("session=").nth(1))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no session in {}", log.display()))
}

/// Instance `i`'s live sessions and their peers, from its metrics endpoint; empty if it
/// does not answer.
fn instance_sessions(lab: &Lab, i: usize) -> BTreeMap<u32, String> {
    let out = run(in_ns(&lab.ns(&format!("r{i}")), "curl").args([
        "-sS",
        "--max-time",
        "5",
        "http://127.0.0.1:9100/metrics",
    ]));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.strip_prefix("ctcp_session_info{session=\""))
        .filter_map(|l| {
            let (id, rest) = l.split_once('"')?;
            let peer = rest.split("peer=\"").nth(1)?.split('"').next()?;
            Some((id.parse().ok()?, peer.to_owned()))
        })
        .collect()
}

/// Which instance holds each forward's current session (panics if neither does).
fn placement(lab: &Lab, logs: &[PathBuf]) -> Vec<usize> {
    let held = [instance_sessions(lab, 0), instance_sessions(lab, 1)];
    logs.iter()
        .map(|log| {
            let s = current_session(log);
            held.iter()
                .position(|h| h.contains_key(&s))
                .unwrap_or_else(|| panic!("session {s} is on no instance: {held:?}"))
        })
        .collect()
}

/// A `curl` download of the test file through forward `i`'s SOCKS port: byte-exact or
/// why not.
fn fetch(c_ns: &str, i: usize, want: &str) -> Result<(), String> {
    let out = run(in_ns(c_ns, "curl").args([
        "-sS",
        "--fail",
        "--max-time",
        "20",
        "--socks5",
        &socks_addr(i),
        &format!("http://{SERVER}/file.bin"),
    ]));
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    if out.stdout.len() != FILE_SIZE || sha256(&out.stdout) != want {
        return Err(format!("{} bytes, not the file", out.stdout.len()));
    }
    Ok(())
}

/// Retries [`fetch`] through every forward at once until each succeeds; the time each
/// took from the call.
fn fetch_all_eventually(lab: &Lab, n: usize, want: &str, limit: Duration) -> Vec<Duration> {
    let c = lab.ns("c");
    let start = ctcp_runtime::clock::now();
    std::thread::scope(|scope| {
        let tasks: Vec<_> = (0..n)
            .map(|i| {
                let c = c.clone();
                scope.spawn(move || loop {
                    match fetch(&c, i, want) {
                        Ok(()) => return start.elapsed(),
                        Err(e) => assert!(
                            start.elapsed() < limit,
                            "no download through forward {i} within {limit:?}: {e}"
                        ),
                    }
                    std::thread::sleep(Duration::from_millis(100));
                })
            })
            .collect();
        tasks.into_iter().map(|t| t.join().unwrap()).collect()
    })
}

fn count_on(placed: &[usize], i: usize) -> usize {
    placed.iter().filter(|&&p| p == i).count()
}

#[test]
fn sessions_spread_over_two_instances_and_survive_one_dying() {
    if let Some(why) = netns::skip_reason(&["ip", "nft", "curl"]) {
        eprintln!("skipping the balancer test: {why}");
        return;
    }
    let n: usize = std::env::var("CTCP_BALANCER_FORWARDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(8);
    let update_map = std::env::var_os("CTCP_BALANCER_NO_MAP_UPDATE").is_none();
    let mut lab = balancer_lab();
    let key = lab.key();
    let mut body = vec![0u8; FILE_SIZE];
    fill(&mut body, 26);
    let want = sha256(&body);
    for r in ["r0", "r1"] {
        lab.start_http(r, &[SERVER.to_owned()], body.clone());
    }
    start_instance(&mut lab, &key, 0);
    start_instance(&mut lab, &key, 1);
    let mut logs: Vec<PathBuf> = (0..n).map(|i| start_forward(&mut lab, &key, i)).collect();

    // Sessions spread by the hash of their random connection ids. All N on one instance
    // has probability 2^(1−N) (1/128 for 8): then a forward is restarted, which draws a
    // fresh id, until both instances hold sessions.
    let mut placed = placement(&lab, &logs);
    let first = [count_on(&placed, 0), count_on(&placed, 1)];
    let mut redraws = 0;
    while count_on(&placed, 0) == 0 || count_on(&placed, 1) == 0 {
        assert!(redraws < 30, "30 fresh sessions all went to one instance");
        redraws += 1;
        lab.kill("forward-0");
        logs[0] = start_forward(&mut lab, &key, 0);
        placed = placement(&lab, &logs);
    }
    eprintln!(
        "{n} sessions: {} on instance 0, {} on instance 1 (first draw {first:?}, {redraws} redraws)",
        count_on(&placed, 0),
        count_on(&placed, 1)
    );
    let took = fetch_all_eventually(&lab, n, &want, Duration::from_secs(30));
    eprintln!("a byte-exact download through every forward ({took:?})");
    assert_eq!(
        placement(&lab, &logs),
        placed,
        "the downloads moved a session"
    );

    // NAT rebinding: from now on C's datagrams leave from another address (a stateless
    // rewrite in C, as a NAT changing its mapping). The balancer hashes only the
    // connection id, so each session stays on its instance, which follows the new address.
    let c = lab.ns("c");
    ip(&[
        "-n",
        &c,
        "addr",
        "add",
        &format!("{REBOUND}/24"),
        "dev",
        "c0",
    ]);
    let rebind = lab.dir.join("rebind.nft");
    fs::write(
        &rebind,
        format!(
            "table ip rebind {{
  chain output {{ type filter hook output priority raw; policy accept;
    ip daddr {VIP} udp dport {PORT} notrack; }}
  chain postrouting {{ type filter hook postrouting priority srcnat; policy accept;
    ip daddr {VIP} udp dport {PORT} ip saddr set {REBOUND}; }}
  chain prerouting {{ type filter hook prerouting priority raw; policy accept;
    ip saddr {VIP} udp sport {PORT} notrack; }}
}}
"
        ),
    )
    .unwrap();
    must(in_ns(&c, "nft").arg("-f").arg(&rebind));
    let took = fetch_all_eventually(&lab, n, &want, Duration::from_secs(30));
    eprintln!("after the rebinding, a byte-exact download through every forward ({took:?})");
    assert_eq!(
        placement(&lab, &logs),
        placed,
        "a rebound session moved to the other instance or was replaced"
    );
    let held = [instance_sessions(&lab, 0), instance_sessions(&lab, 1)];
    for log in &logs {
        let s = current_session(log);
        let peer = held.iter().find_map(|h| h.get(&s)).unwrap();
        assert!(
            peer.starts_with(&format!("{REBOUND}:")),
            "session {s} still has peer {peer}"
        );
    }

    // Instance 1 dies. The operator (or a health check) points its bucket at instance 0;
    // the sessions that were on instance 1 now reach instance 0, which answers with a
    // stateless RESET, and their forwards reconnect at once.
    let moved = count_on(&placed, 1);
    let sessions_before: Vec<u32> = logs.iter().map(|l| current_session(l)).collect();
    lab.kill("reverse-1");
    let limit = if update_map {
        must(
            in_ns(&lab.ns("b"), "sh")
                .arg(format!(
                    "{}/../configs/reverse-balancer.sh",
                    env!("CARGO_MANIFEST_DIR")
                ))
                .args(["set", "1", INSTANCES[0]]),
        );
        Duration::from_secs(60)
    } else {
        Duration::from_secs(300)
    };
    let took = fetch_all_eventually(&lab, n, &want, limit);
    let slowest = took.iter().max().unwrap();
    eprintln!(
        "instance 1 killed{}: a byte-exact download through every forward within {slowest:?} \
         ({moved} forwards had their session there; each: {took:?})",
        if update_map {
            ", its bucket pointed at instance 0"
        } else {
            ", the map left as it was"
        }
    );
    let after = placement(&lab, &logs);
    assert!(
        after.iter().all(|&p| p == 0),
        "a forward's session is not on the live instance: {after:?}"
    );
    for (i, log) in logs.iter().enumerate() {
        if placed[i] == 0 {
            assert_eq!(
                current_session(log),
                sessions_before[i],
                "forward {i}'s session on the live instance was replaced"
            );
        }
    }
}
