//! TCP listeners with a backlog sized for a gateway.
//!
//! tokio's `TcpListener::bind` listens with std's backlog of 128: a burst of more new
//! connections than that before the accept loop runs (a LAN's browsers, a 1,000-stream
//! job) overflows the accept queue, and each dropped SYN costs its client a 1 s
//! retransmission timeout. The kernel caps the value at `net.core.somaxconn`.

use std::io;
use std::net::SocketAddr;
use tokio::net::{TcpListener, TcpSocket};

/// Accept-queue length asked of the kernel for every listener the gateway opens.
pub const BACKLOG: u32 = 4096;

/// Binds a TCP listener on `addr` (address reuse on, as tokio's `bind` does) with
/// [`BACKLOG`].
///
/// # Errors
/// If the socket cannot be created, bound or put in the listening state.
pub fn bind(addr: SocketAddr) -> io::Result<TcpListener> {
    let sock = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    sock.set_reuseaddr(true)?;
    sock.bind(addr)?;
    sock.listen(BACKLOG)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_burst_beyond_std_backlog_is_queued_without_drops() {
        // 600 connections arrive before the first accept: all must complete their
        // handshake at once (a queue of 128 would leave the rest retrying SYNs for 1 s).
        let l = bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = l.local_addr().unwrap();
        let mut conns = Vec::new();
        for _ in 0..600 {
            let c = tokio::time::timeout(
                std::time::Duration::from_millis(500),
                tokio::net::TcpStream::connect(addr),
            )
            .await
            .expect("connect must not wait for a SYN retransmission")
            .unwrap();
            conns.push(c);
        }
        for _ in 0..600 {
            l.accept().await.unwrap();
        }
    }
}
