//! UDP socket I/O through quinn-udp: batched receive with GRO, GSO batches on send.

use quinn_udp::{RecvMeta, Transmit, UdpSocketState};
use std::io::{self, IoSliceMut};
use std::net::SocketAddr;
use tokio::io::Interest;
use tokio::net::UdpSocket;

/// Receive buffers per batch.
pub(crate) const BATCH: usize = 32;
/// Size of one receive buffer: room for a GRO train of datagrams.
const RECV_BUF: usize = 64 * 1024;

/// A UDP socket with quinn-udp's batching and offload state.
#[derive(Debug)]
pub(crate) struct UdpIo {
    socket: UdpSocket,
    state: UdpSocketState,
    bufs: Vec<Vec<u8>>,
    metas: Vec<RecvMeta>,
}

impl UdpIo {
    pub(crate) fn new(socket: std::net::UdpSocket) -> io::Result<Self> {
        socket.set_nonblocking(true)?;
        let state = UdpSocketState::new((&socket).into())?;
        // Large kernel buffers absorb bursts at high rates; failures are not fatal.
        let _ = state.set_recv_buffer_size((&socket).into(), 8 << 20);
        let _ = state.set_send_buffer_size((&socket).into(), 8 << 20);
        let socket = UdpSocket::from_std(socket)?;
        Ok(UdpIo {
            socket,
            state,
            bufs: (0..BATCH).map(|_| vec![0u8; RECV_BUF]).collect(),
            metas: vec![RecvMeta::default(); BATCH],
        })
    }

    pub(crate) fn local_addr(&self) -> io::Result<SocketAddr> {
        self.socket.local_addr()
    }

    /// Most datagrams one GSO send may carry.
    pub(crate) fn max_gso_segments(&self) -> usize {
        self.state.max_gso_segments()
    }

    /// Waits until datagrams may be read.
    pub(crate) async fn readable(&self) -> io::Result<()> {
        self.socket.readable().await
    }

    /// Reads what is queued without waiting; calls `f(from, datagram)` for each datagram.
    pub(crate) fn drain(&mut self, mut f: impl FnMut(SocketAddr, &mut [u8])) -> io::Result<usize> {
        let mut total = 0;
        loop {
            let mut iovs: Vec<IoSliceMut<'_>> =
                self.bufs.iter_mut().map(|b| IoSliceMut::new(b)).collect();
            let res = self.socket.try_io(Interest::READABLE, || {
                self.state
                    .recv((&self.socket).into(), &mut iovs, &mut self.metas)
            });
            drop(iovs);
            let n = match res {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(total),
                // ICMP errors (e.g. port unreachable) surface here on Linux; not fatal.
                Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => continue,
                Err(e) => return Err(e),
            };
            for (meta, buf) in self.metas.iter().zip(self.bufs.iter_mut()).take(n) {
                let stride = meta.stride.max(1);
                for chunk in buf[..meta.len].chunks_mut(stride) {
                    f(meta.addr, chunk);
                    total += 1;
                }
            }
            if total >= 4096 {
                return Ok(total);
            }
        }
    }

    /// Sends `contents` (one datagram, or several of `segment_size` each) to `destination`.
    pub(crate) async fn send(
        &self,
        destination: SocketAddr,
        contents: &[u8],
        segment_size: Option<usize>,
    ) -> io::Result<()> {
        let transmit = Transmit {
            destination,
            ecn: None,
            contents,
            segment_size,
            src_ip: None,
        };
        loop {
            self.socket.writable().await?;
            match self.socket.try_io(Interest::WRITABLE, || {
                self.state.send((&self.socket).into(), &transmit)
            }) {
                Ok(()) => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err(e),
            }
        }
    }
}
