//! Time from a SOCKS CONNECT to its reply through ctcp-forward, in three situations: the
//! reverse is down (a UDP port that never answers), the keys differ, and the tunnel is up.
//! Each situation gets a fresh forward; the first request is cold (the forward's first
//! handshake is under way), the next ones warm. Prints the figures; asserts nothing.
//!
//! `cargo run --release -p ctcp-benches --bin connect-latency [-- REQUESTS]`

use anyhow::Context;
use ctcp_proto::Psk;
use ctcp_runtime::{start_forward, start_reverse, ForwardSettings, ReverseSettings, Running};
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// One SOCKS CONNECT to `target`; the time to the reply and its code.
async fn connect(proxy: SocketAddr, target: SocketAddr) -> anyhow::Result<(Duration, u8)> {
    let SocketAddr::V4(t) = target else {
        anyhow::bail!("IPv4 targets only")
    };
    let started = ctcp_runtime::clock::now();
    let mut s = TcpStream::connect(proxy).await?;
    let mut req = vec![5, 1, 0, 5, 1, 0, 1];
    req.extend_from_slice(&t.ip().octets());
    req.extend_from_slice(&t.port().to_be_bytes());
    s.write_all(&req).await?;
    let mut reply = [0u8; 12];
    tokio::time::timeout(Duration::from_secs(60), s.read_exact(&mut reply))
        .await
        .context("no SOCKS reply within 60 s")??;
    Ok((ctcp_runtime::clock::now() - started, reply[3]))
}

async fn forward(peer: SocketAddr, key: &[u8]) -> anyhow::Result<Running> {
    let mut fs = ForwardSettings::new(peer.to_string(), Psk::new(key).context("key")?);
    fs.listen = "127.0.0.1:0".parse()?;
    Ok(start_forward(fs).await?)
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}

async fn measure(
    name: &str,
    proxy: SocketAddr,
    target: SocketAddr,
    n: usize,
) -> anyhow::Result<()> {
    let mut times = Vec::new();
    let mut codes = Vec::new();
    for _ in 0..n {
        let (t, code) = connect(proxy, target).await?;
        times.push(t);
        codes.push(code);
    }
    let cold = times[0];
    let mut warm = times[1..].to_vec();
    warm.sort();
    let (lo, mid, hi) = match warm.as_slice() {
        [] => (cold, cold, cold),
        w => (w[0], w[w.len() / 2], w[w.len() - 1]),
    };
    codes.dedup();
    println!(
        "{name:<14} reply {codes:?}  cold {:>9}  warm min {:>9} median {:>9} max {:>9}",
        ms(cold),
        ms(lo),
        ms(mid),
        ms(hi)
    );
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let n: usize = std::env::args()
        .nth(1)
        .map_or(Ok(6), |s| s.parse())
        .context("REQUESTS must be a number")?
        .max(1);
    let target = TcpListener::bind("127.0.0.1:0").await?;
    let target_addr = target.local_addr()?;
    tokio::spawn(async move {
        // Accept and hold: the CONNECT succeeds, nothing is exchanged.
        let mut held = Vec::new();
        while let Ok((c, _)) = target.accept().await {
            held.push(c);
        }
    });
    let key = [0x42u8; 32];
    let mut rs = ReverseSettings::new(Psk::new(&key).context("key")?);
    rs.listen = "127.0.0.1:0".parse()?;
    // The targets are on loopback, which the default ACL denies.
    rs.acl = ctcp_runtime::Acl::allow_all();
    let reverse = start_reverse(rs).await?;

    println!(
        "SOCKS CONNECT → reply through ctcp-forward on loopback, {n} requests each (first cold)"
    );
    let silent = std::net::UdpSocket::bind("127.0.0.1:0")?;
    let down = forward(silent.local_addr()?, &key).await?;
    measure("reverse down", down.local_addr, target_addr, n).await?;
    let wrong = forward(reverse.local_addr, &[0x43; 32]).await?;
    measure("wrong key", wrong.local_addr, target_addr, n).await?;
    let up = forward(reverse.local_addr, &key).await?;
    measure("tunnel up", up.local_addr, target_addr, n).await?;
    Ok(())
}
