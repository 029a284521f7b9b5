//! The forward proxy as a real process: SIGTERM mid-transfer lets the open transfer finish
//! byte-exact and then exits 0, while new SOCKS clients are refused; and a handshake that
//! cannot succeed is reported for what it is ("no answer" vs "answered but failed"), with
//! SOCKS clients refused promptly instead of after the open timeout.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] fns

use ctcp_proto::Psk;
use ctcp_runtime::{start_reverse, ReverseSettings};
use std::io::Read;
use std::net::{Ipv4Addr, SocketAddr};
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const KEY: [u8; 32] = [0x6c; 32];
const TOTAL: usize = 100 << 20;

fn key_file(tag: &str, key: &[u8]) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("ctcp-fwd-drain-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("key");
    let hex: String = key.iter().map(|b| format!("{b:02x}")).collect();
    std::fs::write(&path, hex).unwrap();
    path
}

fn free_tcp_port() -> u16 {
    std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn spawn_forward(
    socks_port: u16,
    peer: SocketAddr,
    key_file: &std::path::Path,
    stderr: Stdio,
) -> Child {
    Command::new(env!("CARGO_BIN_EXE_ctcp-forward"))
        .args(["--listen", &format!("127.0.0.1:{socks_port}")])
        .args(["--peer", &peer.to_string()])
        .arg("--psk-file")
        .arg(key_file)
        .args(["--log-level", "info"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .expect("spawn ctcp-forward")
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_mid_transfer_lets_100_mib_finish_byte_exact_and_exits_0() {
    let mut rs = ReverseSettings::new(Psk::new(&KEY).unwrap());
    rs.listen = "127.0.0.1:0".parse().unwrap();
    // The origin is on loopback, which the default ACL denies.
    rs.acl = ctcp_runtime::Acl::allow_all();
    let rev = start_reverse(rs).await.unwrap();
    let key = key_file("transfer", &KEY);
    let socks_port = free_tcp_port();
    let mut child = spawn_forward(socks_port, rev.local_addr, &key, Stdio::inherit());
    let proxy: SocketAddr = ([127, 0, 0, 1], socks_port).into();
    let source = source_server().await;

    let mut s = socks_when_ready(proxy, source).await;
    let mut buf = vec![0u8; 256 << 10];
    let (mut got, mut signalled) = (0usize, false);
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
                // New clients are refused while the open transfer drains: the listener
                // closes as soon as the signal is handled.
                let refused = tokio::time::timeout(Duration::from_secs(5), async {
                    while TcpStream::connect(proxy).await.is_ok() {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                })
                .await;
                assert!(
                    refused.is_ok(),
                    "the SOCKS port still accepts during the drain"
                );
            }
        }
    })
    .await;
    // The client closes once it has everything, as curl does.
    drop(s);
    assert!(outcome.is_ok(), "transfer hung at {got} bytes");
    assert!(signalled, "SIGTERM was sent mid-transfer");
    assert_eq!(got, TOTAL, "every byte arrived");
    assert!(
        exit_ok(&mut child, Duration::from_secs(10)).await,
        "exit status 0"
    );
    let _ = std::fs::remove_dir_all(key.parent().unwrap());
}

/// Starts the forward against `peer` with stderr piped, makes one SOCKS request, checks
/// it is refused promptly, stops the forward and returns its log.
async fn refused_promptly_and_log(peer: SocketAddr, tag: &str) -> String {
    let key = key_file(tag, &KEY);
    let socks_port = free_tcp_port();
    let mut child = spawn_forward(socks_port, peer, &key, Stdio::piped());
    let proxy: SocketAddr = ([127, 0, 0, 1], socks_port).into();
    let target: SocketAddr = ([127, 0, 0, 1], 9).into();
    // Wait for the SOCKS port, then time one request.
    tokio::time::timeout(Duration::from_secs(20), async {
        while TcpStream::connect(proxy).await.is_err() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("the SOCKS port opens");
    let started = tokio::time::Instant::now();
    let r = tokio::time::timeout(Duration::from_secs(30), socks(proxy, target))
        .await
        .expect("no hang");
    let took = started.elapsed();
    assert_eq!(r.err(), Some(0x01), "general failure");
    assert!(took < Duration::from_secs(5), "refused after {took:?}");
    sigterm(&child);
    assert!(exit_ok(&mut child, Duration::from_secs(10)).await);
    let mut log = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut log)
        .unwrap();
    let _ = std::fs::remove_dir_all(key.parent().unwrap());
    log
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_key_is_logged_as_a_failed_handshake_not_a_lost_session() {
    let mut rs = ReverseSettings::new(Psk::new(&[0x11; 32]).unwrap());
    rs.listen = "127.0.0.1:0".parse().unwrap();
    let rev = start_reverse(rs).await.unwrap();
    let log = refused_promptly_and_log(rev.local_addr, "key").await;
    assert!(
        log.contains("answered but the handshake failed (different key or version)"),
        "{log}"
    );
    assert!(
        !log.contains("session lost") && !log.contains("lost:"),
        "{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_peer_is_logged_as_no_answer() {
    let silent = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let log = refused_promptly_and_log(silent.local_addr().unwrap(), "silent").await;
    assert!(log.contains("no answer from 127.0.0.1"), "{log}");
    assert!(
        !log.contains("session lost") && !log.contains("lost:"),
        "{log}"
    );
}
