//! A chain of real processes on loopback: the forward role → `ctcp-reverse --next-hop`
//! → `ctcp-reverse --next-hop` → `ctcp-reverse`, each segment with its own key. A
//! download crosses all three segments byte-exact; SIGKILL of the second relay
//! mid-transfer ends the client's connection with an error within a bound (the first
//! relay's idle timeout, 3 s here, plus slack), and once that relay is started again a
//! new connection works.
//!
//! The download is `CTCP_RELAY_TEST_MIB` MiB (default 32). The 100 MiB run:
//! `CTCP_RELAY_TEST_MIB=100 cargo test --release -p ctcp-reverse --test relay_chain`.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] fns

mod common;
use common::free_udp_port;

use ctcp_proto::Psk;
use ctcp_runtime::{start_forward, ForwardSettings};
use std::net::{SocketAddr, SocketAddrV4};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// One key per segment.
const KEYS: [[u8; 32]; 3] = [[0x11; 32], [0x22; 32], [0x33; 32]];

fn write_key(dir: &Path, i: usize) -> std::path::PathBuf {
    let f = dir.join(format!("key{i}"));
    let hex: String = KEYS[i].iter().map(|b| format!("{b:02x}")).collect();
    std::fs::write(&f, hex).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
    f
}

/// `ctcp-reverse` on `port` with key `key`; a relay when `next` names the next
/// gateway's port and key file. Short idle timeouts so a dead hop is noticed quickly.
fn spawn_gateway(port: u16, key: &Path, next: Option<(u16, &Path)>) -> Child {
    let mut c = Command::new(env!("CARGO_BIN_EXE_ctcp-reverse"));
    c.args(["--listen", &format!("127.0.0.1:{port}")])
        .arg("--psk-file")
        .arg(key)
        .args(["--log-level", "info"])
        .args(["--idle-timeout", "3s", "--keepalive", "500ms"])
        .args(["--allow", "127.0.0.1"]);
    if let Some((p, k)) = next {
        c.args(["--next-hop", &format!("127.0.0.1:{p}")])
            .arg("--next-psk-file")
            .arg(k);
    }
    c.stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn ctcp-reverse")
}

/// Deterministic bytes, generated in pieces (xorshift64).
struct Pattern(u64);

impl Pattern {
    fn fill(&mut self, buf: &mut [u8]) {
        for b in buf {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            *b = self.0 as u8;
        }
    }
}

/// A server that sends `len` pattern bytes to each connection and closes.
async fn file_server(len: u64) -> SocketAddrV4 {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let SocketAddr::V4(a) = l.local_addr().unwrap() else {
        unreachable!("bound to IPv4")
    };
    tokio::spawn(async move {
        while let Ok((mut c, _)) = l.accept().await {
            tokio::spawn(async move {
                let mut p = Pattern(0x9E37_79B9_7F4A_7C15);
                let mut buf = vec![0u8; 256 << 10];
                let mut left = len;
                while left > 0 {
                    let n = buf.len().min(left as usize);
                    p.fill(&mut buf[..n]);
                    if c.write_all(&buf[..n]).await.is_err() {
                        return;
                    }
                    left -= n as u64;
                }
                let _ = c.shutdown().await;
            });
        }
    });
    a
}

/// Reads the whole download, checking it against the pattern as it comes; the byte
/// count, or the first mismatch.
async fn check_download(s: &mut TcpStream) -> Result<u64, String> {
    let mut p = Pattern(0x9E37_79B9_7F4A_7C15);
    let mut buf = vec![0u8; 256 << 10];
    let mut want = vec![0u8; 256 << 10];
    let mut got = 0u64;
    loop {
        let n = s.read(&mut buf).await.map_err(|e| e.to_string())?;
        if n == 0 {
            return Ok(got);
        }
        p.fill(&mut want[..n]);
        if buf[..n] != want[..n] {
            return Err(format!("bytes differ in {got}..{}", got + n as u64));
        }
        got += n as u64;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forward_relay_relay_reverse_processes_download_byte_exact_and_survive_a_relay_kill() {
    let mib: u64 = std::env::var("CTCP_RELAY_TEST_MIB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(32);
    let dir = std::env::temp_dir().join(format!("ctcp-relay-chain-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let keys: Vec<_> = (0..3).map(|i| write_key(&dir, i)).collect();
    let ports: Vec<u16> = (0..3).map(|_| free_udp_port()).collect();
    // ports[0]: relay 1, ports[1]: relay 2, ports[2]: the last gateway.
    let mut rev = spawn_gateway(ports[2], &keys[2], None);
    let mut relay2 = spawn_gateway(ports[1], &keys[1], Some((ports[2], &keys[2])));
    let mut relay1 = spawn_gateway(ports[0], &keys[0], Some((ports[1], &keys[1])));

    let mut fs = ForwardSettings::new(
        format!("127.0.0.1:{}", ports[0]),
        Psk::new(&KEYS[0]).unwrap(),
    );
    fs.listen = "127.0.0.1:0".parse().unwrap();
    fs.transport.idle_timeout = Duration::from_secs(3);
    fs.transport.keepalive = Duration::from_millis(500);
    let fwd = start_forward(fs).await.unwrap();

    // 1. A download across three segments, byte-exact.
    let big = file_server(mib << 20).await;
    let started = tokio::time::Instant::now();
    let mut s = common::socks_when_ready(
        fwd.local_addr,
        big,
        Duration::from_secs(30),
        "the chain never came up",
    )
    .await;
    let got = tokio::time::timeout(Duration::from_secs(300), check_download(&mut s))
        .await
        .expect("download hung")
        .expect("download failed");
    let secs = started.elapsed().as_secs_f64();
    eprintln!(
        "{mib} MiB through forward → relay → relay → reverse in {secs:.2} s ({:.0} Mbit/s)",
        got as f64 * 8.0 / secs / 1e6
    );
    assert_eq!(got, mib << 20);

    // 2. SIGKILL of the second relay mid-transfer: the client's connection ends with an
    // error (a reset, not an EOF that could pass for the end of the reply) within the first relay's idle timeout plus slack, never hangs.
    let endless = file_server(u64::MAX).await;
    let mut s = common::socks_when_ready(
        fwd.local_addr,
        endless,
        Duration::from_secs(30),
        "the chain never came up",
    )
    .await;
    let mut buf = vec![0u8; 64 << 10];
    let mut seen = 0usize;
    while seen < 4 << 20 {
        seen += s.read(&mut buf).await.unwrap();
    }
    relay2.kill().expect("SIGKILL relay 2");
    relay2.wait().unwrap();
    let killed = tokio::time::Instant::now();
    let how = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            match s.read(&mut buf).await {
                Ok(0) => return "eof",
                Err(_) => return "error",
                Ok(_) => {}
            }
        }
    })
    .await
    .expect("the client's connection hung after the middle relay died");
    let took = killed.elapsed();
    eprintln!("client connection ended ({how}) {took:?} after SIGKILL of relay 2");
    assert!(took < Duration::from_secs(10), "{took:?}");
    assert_eq!(
        how, "error",
        "a cut download must not look like a complete one"
    );

    // 3. Relay 2 again on the same port: relay 1 reconnects, a new connection works.
    relay2 = spawn_gateway(ports[1], &keys[1], Some((ports[2], &keys[2])));
    let small = file_server(1 << 20).await;
    let back = tokio::time::Instant::now();
    let mut s = common::socks_when_ready(
        fwd.local_addr,
        small,
        Duration::from_secs(30),
        "the chain never came up",
    )
    .await;
    let got = tokio::time::timeout(Duration::from_secs(30), check_download(&mut s))
        .await
        .expect("download after the restart hung")
        .expect("download after the restart failed");
    assert_eq!(got, 1 << 20);
    eprintln!("served again {:?} after relay 2 restarted", back.elapsed());

    for c in [&mut relay1, &mut relay2, &mut rev] {
        c.kill().unwrap();
        c.wait().unwrap();
    }
    let _ = std::fs::remove_dir_all(&dir);
}
