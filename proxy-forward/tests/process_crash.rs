//! The forward proxy as a real process, killed with SIGKILL mid-transfer: the reverse
//! must close the server-side connection within its idle timeout (no half-dead
//! connection left behind), and a forward started again must get a session and serve.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] fns

use ctcp_proto::Psk;
use ctcp_runtime::{start_reverse, ReverseSettings};
use std::net::{Ipv4Addr, SocketAddr};
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

const KEY: [u8; 32] = [0x6b; 32];

fn spawn_forward(socks_port: u16, peer: SocketAddr, key_file: &std::path::Path) -> Child {
    Command::new(env!("CARGO_BIN_EXE_ctcp-forward"))
        .args(["--listen", &format!("127.0.0.1:{socks_port}")])
        .args(["--peer", &peer.to_string()])
        .arg("--psk-file")
        .arg(key_file)
        .args(["--idle-timeout", "3s", "--keepalive", "500ms"])
        .args(["--log-level", "info"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn ctcp-forward")
}

/// SOCKS5 CONNECT through `proxy` to an IPv4 `target`, retried until the tunnel is up.
async fn connect_when_ready(proxy: SocketAddr, target: SocketAddr) -> TcpStream {
    let SocketAddr::V4(t) = target else {
        unreachable!("IPv4 loopback")
    };
    tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            if let Ok(mut s) = TcpStream::connect(proxy).await {
                let mut req = vec![5, 1, 0, 5, 1, 0, 1];
                req.extend_from_slice(&t.ip().octets());
                req.extend_from_slice(&t.port().to_be_bytes());
                let mut reply = [0u8; 12];
                if s.write_all(&req).await.is_ok()
                    && s.read_exact(&mut reply).await.is_ok()
                    && reply[..2] == [5, 0]
                    && reply[3] == 0
                {
                    return s;
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
    .expect("the tunnel never came up")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_forward_process_closes_server_connections_and_a_restart_serves_again() {
    let dir = std::env::temp_dir().join(format!("ctcp-fwd-crash-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let key_file = dir.join("key");
    let hex: String = KEY.iter().map(|b| format!("{b:02x}")).collect();
    std::fs::write(&key_file, hex).unwrap();

    let mut rs = ReverseSettings::new(Psk::new(&KEY).unwrap());
    rs.listen = "127.0.0.1:0".parse().unwrap();
    // The origin is on loopback, which the default ACL denies.
    rs.acl = ctcp_runtime::Acl::allow_all();
    rs.transport.idle_timeout = Duration::from_secs(3);
    rs.transport.keepalive = Duration::from_millis(500);
    let rev = start_reverse(rs).await.unwrap();

    // The origin server reports how each of its connections ended.
    let origin = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let target = origin.local_addr().unwrap();
    let (ended_tx, mut ended) = mpsc::unbounded_channel::<usize>();
    tokio::spawn(async move {
        while let Ok((mut c, _)) = origin.accept().await {
            let tx = ended_tx.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 65536];
                let mut total = 0;
                while let Ok(n) = c.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                    total += n;
                }
                let _ = tx.send(total);
            });
        }
    });

    let socks_port = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let socks: SocketAddr = ([127, 0, 0, 1], socks_port).into();
    let mut child = spawn_forward(socks_port, rev.local_addr, &key_file);
    let mut s = connect_when_ready(socks, target).await;
    s.write_all(&vec![0x33u8; 1 << 20]).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;

    child.kill().expect("SIGKILL the forward");
    child.wait().unwrap();
    drop(s);
    let started = tokio::time::Instant::now();
    let got = tokio::time::timeout(Duration::from_secs(15), ended.recv())
        .await
        .expect("the server-side connection was never closed after the forward died")
        .unwrap();
    eprintln!(
        "server connection closed {:?} after SIGKILL of the forward ({got} bytes had arrived)",
        started.elapsed()
    );

    // A new forward process gets a new session from the same reverse.
    let mut child = spawn_forward(socks_port, rev.local_addr, &key_file);
    let mut s = connect_when_ready(socks, target).await;
    s.write_all(b"after restart").await.unwrap();
    s.shutdown().await.unwrap();
    let got = tokio::time::timeout(Duration::from_secs(15), ended.recv())
        .await
        .expect("no close after restart")
        .unwrap();
    assert_eq!(got, b"after restart".len());
    child.kill().unwrap();
    child.wait().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}
