//! Shared helpers for ctcp's benchmarks and demo: a SOCKS5 client, a checksumming sink,
//! the RLNC benchmark cases.

pub mod netbench;
pub mod rlnc_case;

use sha2::{Digest, Sha256};
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Connects to `target` through the SOCKS5 server at `socks` (no authentication).
///
/// # Errors
/// I/O errors, or the server's failure reply as `ConnectionRefused` with its code.
pub async fn socks_connect(socks: SocketAddr, target: SocketAddr) -> io::Result<TcpStream> {
    let mut s = TcpStream::connect(socks).await?;
    s.set_nodelay(true)?;
    s.write_all(&[5, 1, 0]).await?;
    let mut m = [0u8; 2];
    s.read_exact(&mut m).await?;
    if m != [5, 0] {
        return Err(io::Error::other(format!("SOCKS method refused: {m:?}")));
    }
    let mut req = vec![5, 1, 0];
    match target {
        SocketAddr::V4(a) => {
            req.push(1);
            req.extend_from_slice(&a.ip().octets());
        }
        SocketAddr::V6(a) => {
            req.push(4);
            req.extend_from_slice(&a.ip().octets());
        }
    }
    req.extend_from_slice(&target.port().to_be_bytes());
    s.write_all(&req).await?;
    let mut head = [0u8; 4];
    s.read_exact(&mut head).await?;
    let rest = match head[3] {
        1 => 4 + 2,
        4 => 16 + 2,
        _ => return Err(io::Error::other("bad SOCKS reply address type")),
    };
    let mut skip = vec![0u8; rest];
    s.read_exact(&mut skip).await?;
    if head[1] != 0 {
        return Err(io::Error::new(
            io::ErrorKind::ConnectionRefused,
            format!("SOCKS reply code {:#04x}", head[1]),
        ));
    }
    Ok(s)
}

/// A TCP server that reads each connection to EOF and reports (bytes, SHA-256).
///
/// # Errors
/// If it cannot bind.
pub async fn checksum_sink() -> io::Result<(
    SocketAddr,
    tokio::sync::mpsc::UnboundedReceiver<(u64, [u8; 32])>,
)> {
    let (addr, rx, _) = counting_sink().await?;
    Ok((addr, rx))
}

/// What a [`counting_sink`] has received so far, over all its connections: lets a
/// benchmark take a rate over an interval of its choosing (e.g. while every stream is
/// still moving) rather than only per finished connection.
#[derive(Debug, Default)]
pub struct SinkProgress {
    /// Bytes read from every connection.
    pub bytes: AtomicU64,
    /// Connections read to EOF.
    pub finished: AtomicU64,
}

/// [`checksum_sink`] that also counts its bytes and finished connections as they come.
///
/// # Errors
/// If it cannot bind.
pub async fn counting_sink() -> io::Result<(
    SocketAddr,
    tokio::sync::mpsc::UnboundedReceiver<(u64, [u8; 32])>,
    Arc<SinkProgress>,
)> {
    // The gateway's backlog: 1,000 streams connect to the sink at once.
    let l = ctcp_runtime::listen::bind(SocketAddr::from(([127, 0, 0, 1], 0)))?;
    let addr = l.local_addr()?;
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let progress = Arc::new(SinkProgress::default());
    let p = progress.clone();
    tokio::spawn(async move {
        while let Ok((mut c, _)) = l.accept().await {
            let tx = tx.clone();
            let p = p.clone();
            tokio::spawn(async move {
                let mut h = Sha256::new();
                let mut n = 0u64;
                let mut buf = vec![0u8; 256 * 1024];
                loop {
                    match c.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(k) => {
                            h.update(&buf[..k]);
                            n += k as u64;
                            p.bytes.fetch_add(k as u64, Ordering::Relaxed);
                        }
                    }
                }
                p.finished.fetch_add(1, Ordering::Relaxed);
                let _ = tx.send((n, h.finalize().into()));
            });
        }
    });
    Ok((addr, rx, progress))
}

/// Deterministic pseudo-random bytes for block `i` of a transfer (cheap, incompressible).
pub fn fill_block(i: u64, buf: &mut [u8]) {
    let mut x = i.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    for chunk in buf.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let b = x.to_le_bytes();
        chunk.copy_from_slice(&b[..chunk.len()]);
    }
}
