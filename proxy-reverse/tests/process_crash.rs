//! The reverse proxy as a real process, killed with SIGKILL mid-transfer: the client's
//! connection through the forward role must end with an error or EOF within the idle
//! timeout, never hang; and a reverse started again must serve new connections through
//! the same forward (which re-establishes its session).
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] fns

mod common;

use ctcp_proto::Psk;
use ctcp_runtime::{start_forward, ForwardSettings};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

const KEY: [u8; 32] = [0x5a; 32];

/// Starts `ctcp-reverse` on `port` with the test key, logging to the test's stderr.
fn spawn_reverse(port: u16, key_file: &std::path::Path) -> Child {
    Command::new(env!("CARGO_BIN_EXE_ctcp-reverse"))
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .arg("--psk-file")
        .arg(key_file)
        .args(["--log-level", "info"])
        // The origin is on loopback, which the default ACL denies.
        .args(["--allow", "127.0.0.1"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn ctcp-reverse")
}

/// A TCP server that reads and discards everything, and echoes a marker on accept.
async fn sink_server() -> SocketAddrV4 {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let SocketAddr::V4(a) = l.local_addr().unwrap() else {
        unreachable!("bound to IPv4")
    };
    tokio::spawn(async move {
        while let Ok((mut c, _)) = l.accept().await {
            tokio::spawn(async move {
                let _ = c.write_all(b"hi").await;
                let mut buf = vec![0u8; 65536];
                while matches!(c.read(&mut buf).await, Ok(n) if n > 0) {}
            });
        }
    });
    a
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_reverse_process_ends_client_connections_and_a_restart_serves_again() {
    let dir = std::env::temp_dir().join(format!("ctcp-crash-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let key_file = dir.join("key");
    let hex: String = KEY.iter().map(|b| format!("{b:02x}")).collect();
    std::fs::write(&key_file, hex).unwrap();
    let port = std::net::UdpSocket::bind((Ipv4Addr::LOCALHOST, 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port();

    let mut child = spawn_reverse(port, &key_file);
    let mut fs = ForwardSettings::new(format!("127.0.0.1:{port}"), Psk::new(&KEY).unwrap());
    fs.listen = "127.0.0.1:0".parse().unwrap();
    fs.transport.idle_timeout = Duration::from_secs(3);
    fs.transport.keepalive = Duration::from_millis(500);
    let fwd = start_forward(fs).await.unwrap();
    let target = sink_server().await;

    let mut s = common::socks_when_ready(
        fwd.local_addr,
        target,
        Duration::from_secs(20),
        "the tunnel never came up",
    )
    .await;
    let mut hi = [0u8; 2];
    s.read_exact(&mut hi).await.unwrap();
    assert_eq!(&hi, b"hi");
    let chunk = vec![0xa5u8; 64 * 1024];
    for _ in 0..16 {
        s.write_all(&chunk).await.unwrap();
    }

    child.kill().expect("SIGKILL the reverse");
    child.wait().unwrap();
    let started = tokio::time::Instant::now();
    let (mut rd, mut wr) = s.into_split();
    let outcome = tokio::time::timeout(Duration::from_secs(20), async {
        let mut buf = [0u8; 1024];
        loop {
            tokio::select! {
                w = wr.write_all(&chunk) => if w.is_err() { return "write error" },
                r = rd.read(&mut buf) => match r {
                    Ok(0) => return "eof",
                    Err(_) => return "read error",
                    Ok(_) => {}
                },
            }
        }
    })
    .await;
    let how = outcome.expect("client connection hung after the reverse process died");
    eprintln!(
        "client connection ended ({how}) {:?} after SIGKILL",
        started.elapsed()
    );
    assert!(started.elapsed() < Duration::from_secs(20));

    // A new reverse on the same port: the forward re-establishes its session.
    let mut child = spawn_reverse(port, &key_file);
    let mut s = common::socks_when_ready(
        fwd.local_addr,
        target,
        Duration::from_secs(20),
        "the tunnel never came up",
    )
    .await;
    let mut hi = [0u8; 2];
    s.read_exact(&mut hi).await.unwrap();
    assert_eq!(&hi, b"hi");
    child.kill().unwrap();
    child.wait().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}
