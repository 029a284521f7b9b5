//! The reverse proxy as a real process. SIGTERM mid-transfer: it stops taking new
//! sessions and new streams (a new SOCKS request through the forward is refused) but lets
//! the open stream finish byte-exact, closes the session, and exits 0. A forward with
//! another key is named in a warning ("failed authentication — key mismatch?").
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] fns

use ctcp_proto::Psk;
use ctcp_runtime::{start_forward, ForwardSettings};
use std::io::Read;
use std::net::{Ipv4Addr, SocketAddr};
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const KEY: [u8; 32] = [0x6d; 32];
const TOTAL: usize = 100 << 20;

fn key_file(tag: &str, key: &[u8]) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("ctcp-rev-drain-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("key");
    let hex: String = key.iter().map(|b| format!("{b:02x}")).collect();
    std::fs::write(&path, hex).unwrap();
    path
}

fn spawn_reverse(port: u16, key_file: &std::path::Path, stderr: Stdio) -> Child {
    Command::new(env!("CARGO_BIN_EXE_ctcp-reverse"))
        .args(["--listen", &format!("127.0.0.1:{port}")])
        // The targets are on loopback, which the default ACL denies.
        .args(["--allow", "127.0.0.1"])
        .arg("--psk-file")
        .arg(key_file)
        .args(["--log-level", "info"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .expect("spawn ctcp-reverse")
}

fn free_udp_port() -> u16 {
    std::net::UdpSocket::bind((Ipv4Addr::LOCALHOST, 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn sigterm(child: &Child) {
    let ok = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill -TERM");
}

/// Waits for the child to exit (at most `limit`) and returns whether it exited 0.
async fn exit_ok(child: &mut Child, limit: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            return st.success();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the process did not exit"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Byte `i` of the test stream.
fn byte(i: usize) -> u8 {
    (i.wrapping_mul(31) ^ (i >> 11)) as u8
}

/// A server that sends `TOTAL` bytes of the test stream to each client, then closes.
async fn source_server() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let a = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut c, _)) = l.accept().await {
            tokio::spawn(async move {
                let mut buf = vec![0u8; 256 << 10];
                let mut sent = 0;
                while sent < TOTAL {
                    let n = buf.len().min(TOTAL - sent);
                    for (k, b) in buf[..n].iter_mut().enumerate() {
                        *b = byte(sent + k);
                    }
                    if c.write_all(&buf[..n]).await.is_err() {
                        return;
                    }
                    sent += n;
                }
                let _ = c.shutdown().await;
            });
        }
    });
    a
}

/// SOCKS5 CONNECT; the reply code (0 = the stream is returned).
async fn socks(proxy: SocketAddr, target: SocketAddr) -> Result<TcpStream, u8> {
    let SocketAddr::V4(t) = target else {
        unreachable!("IPv4 loopback")
    };
    let mut s = TcpStream::connect(proxy).await.map_err(|_| 0xff)?;
    let mut req = vec![5, 1, 0, 5, 1, 0, 1];
    req.extend_from_slice(&t.ip().octets());
    req.extend_from_slice(&t.port().to_be_bytes());
    s.write_all(&req).await.map_err(|_| 0xff)?;
    let mut reply = [0u8; 12];
    s.read_exact(&mut reply).await.map_err(|_| 0xff)?;
    if reply[3] == 0 {
        Ok(s)
    } else {
        Err(reply[3])
    }
}

async fn socks_when_ready(proxy: SocketAddr, target: SocketAddr) -> TcpStream {
    tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            if let Ok(s) = socks(proxy, target).await {
                return s;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
    .expect("the tunnel never came up")
}

async fn forward_to(port: u16, key: &[u8]) -> SocketAddr {
    let mut fs = ForwardSettings::new(format!("127.0.0.1:{port}"), Psk::new(key).unwrap());
    fs.listen = "127.0.0.1:0".parse().unwrap();
    start_forward(fs).await.unwrap().local_addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_mid_transfer_lets_100_mib_finish_refuses_new_streams_and_exits_0() {
    let key = key_file("transfer", &KEY);
    let port = free_udp_port();
    let mut child = spawn_reverse(port, &key, Stdio::inherit());
    let proxy = forward_to(port, &KEY).await;
    let source = source_server().await;

    let mut s = socks_when_ready(proxy, source).await;
    let mut buf = vec![0u8; 256 << 10];
    let (mut got, mut signalled, mut refused) = (0usize, false, None);
    let outcome = tokio::time::timeout(Duration::from_secs(120), async {
        loop {
            let n = s.read(&mut buf).await.expect("the transfer is not cut");
            if n == 0 {
                return;
            }
            for (k, &b) in buf[..n].iter().enumerate() {
                assert_eq!(b, byte(got + k), "byte {} differs", got + k);
            }
            got += n;
            if !signalled && got >= 10 << 20 {
                signalled = true;
                sigterm(&child);
                // Give the process a moment to handle the signal, then ask for a new
                // stream on the live session: the draining reverse refuses it.
                tokio::time::sleep(Duration::from_millis(200)).await;
                refused = Some(socks(proxy, source).await.err());
            }
        }
    })
    .await;
    drop(s);
    assert!(outcome.is_ok(), "transfer hung at {got} bytes");
    assert!(signalled, "SIGTERM was sent mid-transfer");
    assert_eq!(got, TOTAL, "every byte arrived");
    assert_eq!(
        refused,
        Some(Some(0x01)),
        "a new stream during the drain is refused"
    );
    assert!(
        exit_ok(&mut child, Duration::from_secs(10)).await,
        "exit status 0"
    );
    let _ = std::fs::remove_dir_all(key.parent().unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handshake_with_another_key_is_named_in_a_warning() {
    let key = key_file("key", &KEY);
    let port = free_udp_port();
    let mut child = spawn_reverse(port, &key, Stdio::piped());
    let proxy = forward_to(port, &[0x22; 32]).await;
    let target: SocketAddr = ([127, 0, 0, 1], 9).into();
    // The reverse may still be starting: ask until the refusal comes from a handshake
    // it answered (at most a few tries; each one is prompt).
    let mut codes = Vec::new();
    for _ in 0..5 {
        let started = tokio::time::Instant::now();
        let r = tokio::time::timeout(Duration::from_secs(30), socks(proxy, target))
            .await
            .expect("no hang");
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
        codes.push(r.err());
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert!(codes.iter().all(|c| *c == Some(0x01)), "{codes:?}");
    sigterm(&child);
    assert!(exit_ok(&mut child, Duration::from_secs(10)).await);
    let mut log = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut log)
        .unwrap();
    assert!(
        log.contains("handshake from 127.0.0.1:")
            && log.contains("failed authentication — key mismatch?"),
        "{log}"
    );
    assert!(log.contains("WARN"), "{log}");
    let _ = std::fs::remove_dir_all(key.parent().unwrap());
}
