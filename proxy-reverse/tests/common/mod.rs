//! Helpers shared by the real-process tests: a free port, a minimal SOCKS5 CONNECT.
#![allow(dead_code, unreachable_pub)] // each test file uses a subset
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] fns

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A UDP port free on loopback right now.
pub fn free_udp_port() -> u16 {
    std::net::UdpSocket::bind((Ipv4Addr::LOCALHOST, 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// SOCKS5 CONNECT to `target` (IPv4) through `proxy`; the reply code on failure.
pub async fn socks(proxy: SocketAddr, target: SocketAddrV4) -> Result<TcpStream, u8> {
    let mut s = TcpStream::connect(proxy).await.unwrap();
    s.write_all(&[5, 1, 0]).await.unwrap();
    let mut m = [0u8; 2];
    s.read_exact(&mut m).await.unwrap();
    assert_eq!(m, [5, 0]);
    let mut req = vec![5, 1, 0, 1];
    req.extend_from_slice(&target.ip().octets());
    req.extend_from_slice(&target.port().to_be_bytes());
    s.write_all(&req).await.unwrap();
    let mut reply = [0u8; 10];
    s.read_exact(&mut reply).await.unwrap();
    if reply[1] == 0 {
        Ok(s)
    } else {
        Err(reply[1])
    }
}

/// Retries CONNECT every 100 ms until the tunnel serves it (processes starting, sessions
/// coming up); panics with `what` after `wait`.
pub async fn socks_when_ready(
    proxy: SocketAddr,
    target: SocketAddrV4,
    wait: Duration,
    what: &str,
) -> TcpStream {
    tokio::time::timeout(wait, async {
        loop {
            if let Ok(s) = socks(proxy, target).await {
                return s;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{what}"))
}
