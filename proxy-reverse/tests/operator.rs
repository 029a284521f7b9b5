//! The reverse binary as an operator meets it: keygen, the key fingerprint matching the
//! forward's, the default ACL keeping the host's loopback out of reach, and SIGHUP
//! swapping the ACL (a bad file keeps the old one).
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] fns

use ctcp_proto::Psk;
use ctcp_runtime::{start_forward, ForwardSettings};
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const KEY: [u8; 32] = [0x3c; 32];

fn hex(key: &[u8; 32]) -> String {
    key.iter().map(|b| format!("{b:02x}")).collect()
}

fn dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ctcp-rev-op-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn reverse() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_ctcp-reverse"));
    c.env_remove("CTCP_PSK").env_remove("RUST_LOG");
    c
}

#[test]
fn keygen_and_check_config_show_a_fingerprint_not_the_key() {
    let out = reverse().arg("keygen").output().unwrap();
    assert!(out.status.success());
    let key = ctcp_config::parse_key(&out.stdout).unwrap();
    let out = reverse()
        .env("CTCP_PSK", hex(&key))
        .arg("--check-config")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains(&ctcp_runtime::keys::fingerprint(&key)),
        "{text}"
    );
    assert!(!text.contains(&hex(&key)));
    let out = reverse()
        .env("CTCP_PSK", format!("{} ", &hex(&key)[..40]))
        .arg("--check-config")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("40 hex digits") && err.contains("keygen"),
        "{err}"
    );
}

/// A running reverse whose stderr lines arrive on a channel.
struct Proc {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl Proc {
    fn spawn(c: &mut Command) -> Proc {
        let mut child = c
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for l in BufReader::new(stderr).lines().map_while(Result::ok) {
                eprintln!("[ctcp-reverse] {l}");
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        Proc { child, lines }
    }

    /// The next line containing `pat` (each line within 20 s of the one before).
    fn wait_for(&self, pat: &str) -> String {
        loop {
            match self.lines.recv_timeout(Duration::from_secs(20)) {
                Ok(l) if l.contains(pat) => return l,
                Ok(_) => {}
                Err(_) => panic!("no log line with {pat:?}"),
            }
        }
    }

    fn sighup(&self) {
        let ok = Command::new("kill")
            .args(["-HUP", &self.child.id().to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok);
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// SOCKS5 CONNECT to an IPv4 `target`; the reply code.
async fn connect_code(proxy: SocketAddr, target: SocketAddr) -> u8 {
    let SocketAddr::V4(t) = target else {
        unreachable!("IPv4 loopback")
    };
    let mut s = TcpStream::connect(proxy).await.unwrap();
    let mut req = vec![5, 1, 0, 5, 1, 0, 1];
    req.extend_from_slice(&t.ip().octets());
    req.extend_from_slice(&t.port().to_be_bytes());
    s.write_all(&req).await.unwrap();
    // Method selection (2 bytes), then the reply: VER, REP, RSV, ATYP=1, IPv4, port.
    let mut reply = [0u8; 12];
    s.read_exact(&mut reply).await.unwrap();
    assert_eq!(reply[..2], [5, 0]);
    reply[3]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn default_acl_denies_loopback_and_sighup_swaps_the_acl() {
    let d = dir("acl");
    let cfg = d.join("reverse.toml");
    // No [[acl]]: the default list, which denies the host's loopback.
    let base = "listen = \"127.0.0.1:0\"\n";
    std::fs::write(&cfg, base).unwrap();
    let p = Proc::spawn(
        reverse()
            .env("CTCP_PSK", hex(&KEY))
            .arg("--config")
            .arg(&cfg),
    );
    let line = p.wait_for("ctcp-reverse started");
    let udp: SocketAddr = line
        .split_whitespace()
        .find_map(|w| w.strip_prefix("udp="))
        .unwrap()
        .parse()
        .unwrap();

    let origin = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let target = origin.local_addr().unwrap();
    tokio::spawn(async move { while origin.accept().await.is_ok() {} });
    let mut fs = ForwardSettings::new(udp.to_string(), Psk::new(&KEY).unwrap());
    fs.listen = "127.0.0.1:0".parse().unwrap();
    let fwd = start_forward(fs).await.unwrap();

    // The first request may wait for the session; the reply is still the ACL's verdict.
    assert_eq!(
        connect_code(fwd.local_addr, target).await,
        0x02,
        "loopback denied by default"
    );

    std::fs::write(
        &cfg,
        format!(
            "{base}[[acl]]\naction = \"allow\"\nnet = \"127.0.0.1\"\nports = \"{}\"\n",
            target.port()
        ),
    )
    .unwrap();
    p.sighup();
    p.wait_for("configuration reloaded");
    assert_eq!(
        connect_code(fwd.local_addr, target).await,
        0x00,
        "the reloaded ACL applies"
    );

    std::fs::write(
        &cfg,
        format!("{base}[[acl]]\naction = \"deny\"\nnet = \"127.0.0.1\"\nports = \"99999\"\n"),
    )
    .unwrap();
    p.sighup();
    assert!(p
        .wait_for("configuration not reloaded")
        .contains("acl[0].ports"));
    assert_eq!(
        connect_code(fwd.local_addr, target).await,
        0x00,
        "a bad file keeps the old ACL"
    );
    let _ = fwd.shutdown.send(true);
    drop(p);
    std::fs::remove_dir_all(&d).unwrap();
}

/// The value of `key=` in a tracing text line.
fn field(line: &str, key: &str) -> String {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(&format!("{key}=")))
        .unwrap_or_else(|| panic!("no {key}= in {line:?}"))
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_shows_the_running_processs_sessions() {
    let p = Proc::spawn(reverse().env("CTCP_PSK", hex(&KEY)).args([
        "--listen",
        "127.0.0.1:0",
        "--metrics-listen",
        "127.0.0.1:0",
    ]));
    // From different tasks, in no fixed order.
    let (mut metrics, mut udp) = (None, None);
    while metrics.is_none() || udp.is_none() {
        let l = p.wait_for("");
        if l.contains("metrics endpoint listening") {
            metrics = Some(field(&l, "addr"));
        } else if l.contains("ctcp-reverse started") {
            udp = Some(field(&l, "udp"));
        }
    }
    let (metrics, udp) = (metrics.unwrap(), udp.unwrap());
    let status = || {
        let out = reverse()
            .args(["status", "--sample", "0s", "--metrics-listen", &metrics])
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    let idle = status();
    assert!(idle.starts_with("ctcp-reverse "), "{idle}");
    assert!(idle.ends_with("no live sessions\n"), "{idle}");

    let mut fs = ForwardSettings::new(udp, Psk::new(&KEY).unwrap());
    fs.listen = "127.0.0.1:0".parse().unwrap();
    let fwd = start_forward(fs).await.unwrap();
    let session = field(&p.wait_for("session established"), "session");
    let out = status();
    let row = out
        .lines()
        .find(|l| l.starts_with(&format!("{session} ")))
        .unwrap_or_else(|| panic!("no row for session {session}:\n{out}"));
    let cells: Vec<&str> = row.split_whitespace().collect();
    // The forward's socket is bound to the wildcard address; it reaches us from loopback.
    let port = fwd.driver.local_addr().port();
    assert_eq!(cells[1], format!("127.0.0.1:{port}"), "{row}");
    assert_eq!(cells[2], "established", "{row}");
    assert!(out.contains("sessions: 1 live, 1 opened"), "{out}");
}

/// A relay's `--check-config` names its next hop and prints both segments' key
/// fingerprints; a bad `[relay]` value is refused naming its key.
#[test]
fn check_config_of_a_relay_shows_the_next_hop_and_both_fingerprints() {
    let d = dir("relay");
    let next_key = [0x4d; 32];
    let next = d.join("next.psk");
    std::fs::write(&next, hex(&next_key)).unwrap();
    let out = reverse()
        .env("CTCP_PSK", hex(&KEY))
        .args(["--check-config", "--next-hop", "gw2.example.net:7000"])
        .arg("--next-psk-file")
        .arg(&next)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("relaying to gw2.example.net:7000"), "{text}");
    assert!(
        text.contains(&ctcp_runtime::keys::fingerprint(&KEY)),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "next-hop key fingerprint (it must match the next gateway's): {}",
            ctcp_runtime::keys::fingerprint(&next_key)
        )),
        "{text}"
    );
    assert!(!text.contains(&hex(&next_key)));
    let cfg = d.join("bad.toml");
    std::fs::write(
        &cfg,
        "[relay]\nnext_hop = \"gw2:7000\"\nbuffer = \"1KiB\"\n",
    )
    .unwrap();
    let out = reverse()
        .env("CTCP_PSK", hex(&KEY))
        .arg("--check-config")
        .arg("--config")
        .arg(&cfg)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("bad.toml:3: key 'relay.buffer'"), "{err}");
    let _ = std::fs::remove_dir_all(&d);
}
