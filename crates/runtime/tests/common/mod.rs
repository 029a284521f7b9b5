//! Helpers shared by the real-socket test files: a pair of roles in one process, a
//! minimal SOCKS5 client, an echo server, deterministic test data.
#![allow(dead_code, unreachable_pub)] // each test file uses a subset

use ctcp_proto::Psk;
use ctcp_runtime::{start_forward, start_reverse, Acl, ForwardSettings, ReverseSettings, Running};
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

pub const T: Duration = Duration::from_secs(30);

pub struct Pair {
    pub fwd: Running,
    pub rev: Running,
}

pub async fn pair_with(
    key_f: &[u8],
    key_r: &[u8],
    acl: Acl,
    tweak: impl FnOnce(&mut ForwardSettings, &mut ReverseSettings),
) -> Pair {
    let mut rs = ReverseSettings::new(Psk::new(key_r).unwrap());
    rs.listen = "127.0.0.1:0".parse().unwrap();
    rs.acl = acl;
    rs.connect_timeout = Duration::from_secs(3);
    let mut fs = ForwardSettings::new("127.0.0.1:1", Psk::new(key_f).unwrap());
    fs.listen = "127.0.0.1:0".parse().unwrap();
    tweak(&mut fs, &mut rs);
    let rev = start_reverse(rs).await.unwrap();
    fs.peer = rev.local_addr.to_string();
    let fwd = start_forward(fs).await.unwrap();
    Pair { fwd, rev }
}

pub async fn pair() -> Pair {
    pair_with(&[7; 32], &[7; 32], Acl::allow_all(), |_, _| {}).await
}

/// SOCKS5 CONNECT; returns the stream or the reply code.
pub async fn socks(
    proxy: SocketAddr,
    atyp_addr: &[u8],
    port: u16,
    cmd: u8,
) -> Result<TcpStream, u8> {
    socks_over(
        TcpStream::connect(proxy).await.unwrap(),
        atyp_addr,
        port,
        cmd,
    )
    .await
}

/// SOCKS5 CONNECT over a connection already made to the proxy (e.g. with small socket
/// buffers); returns the stream or the reply code.
pub async fn socks_over(
    mut s: TcpStream,
    atyp_addr: &[u8],
    port: u16,
    cmd: u8,
) -> Result<TcpStream, u8> {
    s.write_all(&[5, 1, 0]).await.unwrap();
    let mut m = [0u8; 2];
    s.read_exact(&mut m).await.unwrap();
    assert_eq!(m, [5, 0]);
    let mut req = vec![5, cmd, 0];
    req.extend_from_slice(atyp_addr);
    req.extend_from_slice(&port.to_be_bytes());
    s.write_all(&req).await.unwrap();
    let mut head = [0u8; 4];
    s.read_exact(&mut head).await.unwrap();
    let rest = if head[3] == 4 { 18 } else { 6 };
    let mut skip = vec![0u8; rest];
    s.read_exact(&mut skip).await.unwrap();
    if head[1] == 0 {
        Ok(s)
    } else {
        Err(head[1])
    }
}

pub fn v4(a: SocketAddr) -> Vec<u8> {
    match a {
        SocketAddr::V4(a) => [&[1u8][..], &a.ip().octets()].concat(),
        SocketAddr::V6(_) => unreachable!("tests use IPv4 loopback"),
    }
}

pub fn domain(name: &str) -> Vec<u8> {
    [&[3u8, name.len() as u8][..], name.as_bytes()].concat()
}

pub fn pattern(seed: u64, n: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Echo server: reads to EOF, echoes everything, then closes (exercises half-close).
pub async fn echo_server() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let a = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut c, _)) = l.accept().await {
            tokio::spawn(async move {
                let (mut r, mut w) = c.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
                let _ = w.shutdown().await;
            });
        }
    });
    a
}

pub async fn round_trip(proxy: SocketAddr, target: SocketAddr, data: &[u8]) -> Vec<u8> {
    let s = socks(proxy, &v4(target), target.port(), 1)
        .await
        .expect("connect ok");
    let (mut r, mut w) = s.into_split();
    let data = data.to_vec();
    let writer = tokio::spawn(async move {
        w.write_all(&data).await.unwrap();
        w.shutdown().await.unwrap();
    });
    let mut back = Vec::new();
    r.read_to_end(&mut back).await.unwrap();
    writer.await.unwrap();
    back
}
