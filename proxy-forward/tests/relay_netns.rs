//! A relay between two real network namespaces (issue 28): the shipped binaries as
//! forward → relay (`ctcp-reverse --next-hop`) → reverse, each segment its own veth and
//! its own key, the web server reachable only inside the last namespace. Downloads come
//! through both tunnels byte-exact; a refused connect comes back as SOCKS's "connection
//! refused" (reply 5); killing the relay mid-download ends the client's transfer with an
//! error once the forward's idle timeout has passed and it has handed over what it held
//! (no hang); once the relay is back, new downloads work.
//!
//! ```text
//!  client ns (C)                  relay ns (M)                            server ns (S)
//!  curl, ctcp-forward  ── veth ── 10.202.1.1:7000 relay  ── veth ──  10.202.2.2:7000 reverse
//!  10.202.1.2          key A      next hop 10.202.2.2, key B          HTTP on lo 10.202.9.1:8080
//! ```
//!
//! Needs root, `ip` and `curl`; without them the test prints why and passes.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] fns

mod netns;

use netns::{fill, in_ns, run, sha256, wait_for_log, Lab};
use std::fs;
use std::path::Path;
use std::time::Duration;

const RELAY: &str = "10.202.1.1:7000";
const LAST: &str = "10.202.2.2:7000";
const SERVER: &str = "10.202.9.1:8080";
/// A port nothing listens on in S: its connect is refused there.
const CLOSED: &str = "10.202.9.1:8081";
/// An HTTP response that never ends, in S: a download still running whenever the relay
/// is killed, however far the tunnels' buffers ran ahead of the reader.
const ENDLESS: &str = "10.202.9.1:8082";
const SOCKS: &str = "127.0.0.1:1081";
const FILE_SIZE: usize = 4 << 20;
/// The forward's idle timeout: how long a dead relay takes to show.
const IDLE: Duration = Duration::from_secs(3);

fn relay_lab() -> Lab {
    let lab = Lab::new("rl", "t", &["c", "m", "s"]);
    lab.veth("c", "c0", "m", "m0");
    lab.veth("m", "m1", "s", "s0");
    for (n, dev, addr) in [
        ("c", "c0", "10.202.1.2/24"),
        ("m", "m0", "10.202.1.1/24"),
        ("m", "m1", "10.202.2.1/24"),
        ("s", "s0", "10.202.2.2/24"),
        ("s", "lo", "10.202.9.1/32"),
    ] {
        lab.addr(n, dev, addr);
    }
    lab
}

fn start_relay(lab: &mut Lab, key: &Path, next_key: &Path) {
    let log = lab.spawn(
        "relay",
        in_ns(&lab.ns("m"), netns::reverse_binary().to_str().unwrap())
            .args(["--listen", RELAY, "--next-hop", LAST, "--log-level", "info"])
            .arg("--psk-file")
            .arg(key)
            .arg("--next-psk-file")
            .arg(next_key),
    );
    wait_for_log(&log, "started as a relay");
}

/// Serves [`ENDLESS`] in namespace `ns` from a thread: each connection gets a response
/// header and then bytes until the peer goes away.
fn start_endless(ns: &str) {
    let netns = fs::File::open(format!("/run/netns/{ns}")).unwrap();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        // Sockets this thread makes from here on live in the namespace.
        nix::sched::setns(&netns, nix::sched::CloneFlags::CLONE_NEWNET).unwrap();
        let l = std::net::TcpListener::bind(ENDLESS).unwrap();
        ready_tx.send(()).unwrap();
        for conn in l.incoming() {
            let Ok(mut conn) = conn else { continue };
            std::thread::spawn(move || {
                use std::io::{Read, Write};
                let mut request = [0u8; 1024];
                let _ = conn.read(&mut request);
                let chunk = vec![0x5a; 64 << 10];
                let _ = conn.write_all(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\n\r\n",
                );
                while conn.write_all(&chunk).is_ok() {}
            });
        }
    });
    ready_rx
        .recv_timeout(Duration::from_secs(10))
        .expect("endless server");
}

/// `curl` in namespace `c_ns` through the forward: its exit status, stdout and stderr.
fn curl(c_ns: &str, url: &str, extra: &[&str]) -> std::process::Output {
    run(in_ns(c_ns, "curl")
        .args(["-sS", "--fail", "--max-time", "30", "--socks5", SOCKS])
        .args(extra)
        .arg(url))
}

fn fetch(lab: &Lab, want: &str) -> Result<(), String> {
    let out = curl(&lab.ns("c"), &format!("http://{SERVER}/file.bin"), &[]);
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    if out.stdout.len() != FILE_SIZE || sha256(&out.stdout) != want {
        return Err(format!("{} bytes, not the file", out.stdout.len()));
    }
    Ok(())
}

#[test]
fn a_relay_carries_streams_between_namespaces_and_its_loss_is_a_clean_error() {
    if let Some(why) = netns::skip_reason(&["ip", "curl"]) {
        eprintln!("skipping the relay namespace test: {why}");
        return;
    }
    let mut lab = relay_lab();
    let (key, next_key) = (lab.key(), lab.key_file("psk-next", &"a5".repeat(32)));
    let mut body = vec![0u8; FILE_SIZE];
    fill(&mut body, 28);
    let want = sha256(&body);
    lab.start_http("s", &[SERVER.to_owned()], body);
    let last = lab.spawn(
        "reverse",
        in_ns(&lab.ns("s"), netns::reverse_binary().to_str().unwrap())
            .args(["--listen", LAST, "--log-level", "info"])
            .arg("--psk-file")
            .arg(&next_key),
    );
    wait_for_log(&last, "ctcp-reverse started");
    start_relay(&mut lab, &key, &next_key);
    let idle = format!("{}s", IDLE.as_secs());
    let forward = lab.spawn(
        "forward",
        in_ns(&lab.ns("c"), env!("CARGO_BIN_EXE_ctcp-forward"))
            .args(["--peer", RELAY, "--listen", SOCKS, "--log-level", "info"])
            .args(["--idle-timeout", &idle, "--keepalive", "1s"])
            .arg("--psk-file")
            .arg(&key),
    );
    wait_for_log(&forward, "tunnel session established");

    // C and M have no route to the server: a download can only come through both tunnels.
    fetch(&lab, &want).expect("a download through the relay");
    let c_ns = lab.ns("c");
    let refused = curl(&c_ns, &format!("http://{CLOSED}/"), &[]);
    let why = String::from_utf8_lossy(&refused.stderr).to_lowercase();
    // curl prints the SOCKS reply code: 5 is RFC 1928's "connection refused".
    assert!(
        !refused.status.success() && why.contains("(5)"),
        "a refused connect in S must come back as SOCKS reply 5: {why}"
    );

    // Kill the relay while a download runs: curl must end with an error, not hang.
    start_endless(&lab.ns("s"));
    let started = ctcp_runtime::clock::now();
    let slow = std::thread::scope(|scope| {
        let dl = scope.spawn(|| {
            curl(
                &c_ns,
                &format!("http://{ENDLESS}/"),
                &[
                    "--limit-rate",
                    "2M",
                    "-o",
                    "/dev/null",
                    "-w",
                    "%{size_download}",
                ],
            )
        });
        std::thread::sleep(Duration::from_millis(1500));
        lab.kill("relay");
        dl.join().unwrap()
    });
    let took = started.elapsed();
    eprintln!(
        "relay killed 1.5 s into the download: curl ended after {took:?} with {:?}, {} bytes",
        slow.status.code(),
        String::from_utf8_lossy(&slow.stdout)
    );
    // curl's own 30 s limit (exit 28) would be the hang; any other failure is the error.
    assert!(
        !slow.status.success() && slow.status.code() != Some(28),
        "the download must fail once the relay is gone, not time out: {:?}",
        slow.status
    );

    start_relay(&mut lab, &key, &next_key);
    netns::wait_up_to(
        Duration::from_secs(30),
        "a download once the relay is back",
        || fetch(&lab, &want).is_ok(),
    );
}
