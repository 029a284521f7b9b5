//! UDP socket I/O through quinn-udp: batched receive with GRO, GSO batches on send; the
//! sharded bind (one `SO_REUSEPORT` socket per shard, steered by connection id).

use quinn_udp::{RecvMeta, Transmit, UdpSocketState};
use std::io::{self, IoSliceMut};
use std::net::SocketAddr;
use tokio::io::Interest;
use tokio::net::UdpSocket;

/// Receive buffers per batch.
pub(crate) const BATCH: usize = 32;
/// Size of one receive buffer: room for a GRO train of datagrams.
const RECV_BUF: usize = 64 * 1024;

/// Kernel buffer asked for each way: a burst at 100 Mbit/s and more, or a driver task
/// held off its core for tens of milliseconds, queues megabytes.
const KERNEL_BUF: usize = 8 << 20;

/// Gives the socket [`KERNEL_BUF`] each way. The kernel caps the ask at
/// `net.core.rmem_max` / `wmem_max` (208 KiB on many distributions) unless the process may
/// force it (`SO_RCVBUFFORCE`, CAP_NET_ADMIN); what it got is logged, with the fix, when it
/// is less than half. Failures are not fatal: the transport repairs what a full buffer drops.
fn size_kernel_buffers(state: &UdpSocketState, socket: &std::net::UdpSocket) {
    use nix::sys::socket::{setsockopt, sockopt};
    let _ = state.set_recv_buffer_size(socket.into(), KERNEL_BUF);
    let _ = state.set_send_buffer_size(socket.into(), KERNEL_BUF);
    // The kernel reports twice what was set (its bookkeeping overhead).
    let got = |n: io::Result<usize>| n.map_or(0, |n| n / 2);
    if got(state.recv_buffer_size(socket.into())) < KERNEL_BUF / 2 {
        let _ = setsockopt(socket, sockopt::RcvBufForce, &KERNEL_BUF);
    }
    if got(state.send_buffer_size(socket.into())) < KERNEL_BUF / 2 {
        let _ = setsockopt(socket, sockopt::SndBufForce, &KERNEL_BUF);
    }
    let (rcv, snd) = (
        got(state.recv_buffer_size(socket.into())),
        got(state.send_buffer_size(socket.into())),
    );
    // Once per process: every shard and path binds its own socket alike.
    static TOLD: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if (rcv < KERNEL_BUF / 2 || snd < KERNEL_BUF / 2)
        && !TOLD.swap(true, std::sync::atomic::Ordering::Relaxed)
    {
        tracing::info!(
            receive = rcv,
            send = snd,
            wanted = KERNEL_BUF,
            "UDP socket buffers are small: bursts at high rates may be dropped; raise \
             net.core.rmem_max and net.core.wmem_max (e.g. sysctl -w net.core.rmem_max=8388608)"
        );
    }
}

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
        size_kernel_buffers(&state, &socket);
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
            // `try_send`, not `send`: quinn-udp's `send` logs and swallows every other
            // error, and the multipath driver must see link errors (`paths::is_link_error`).
            match self.socket.try_io(Interest::WRITABLE, || {
                self.state.try_send((&self.socket).into(), &transmit)
            }) {
                Ok(()) => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                // Too large for the route's MTU: dropped like a lost datagram, as quinn-udp's
                // `send` does.
                Err(e) if e.raw_os_error() == Some(nix::libc::EMSGSIZE) => return Ok(()),
                Err(e) => return Err(e),
            }
        }
    }
}

/// Binds the sockets of `shards` driver shards to `addr`.
///
/// One shard gets one plain socket. Several get one `SO_REUSEPORT` socket each, all on
/// the same address, and a classic BPF program on the group that picks the socket by the
/// connection id in the datagram (`ctcp_proto::shard_of`), so a session's
/// datagrams reach the shard that owns it whatever address they come from (NAT
/// rebinding included). Where the program cannot be attached the kernel picks by address
/// hash and the driver hands misdirected datagrams to their owner.
///
/// A plain socket is bound first and dropped, so an address another process holds is
/// refused as "address in use" exactly as with one socket (a sharded ctcp-reverse
/// holding it included).
///
/// # Errors
/// Fails if the address cannot be bound.
pub(crate) fn bind_shards(addr: SocketAddr, shards: usize) -> io::Result<Vec<std::net::UdpSocket>> {
    // Port 0 asks for any port: a probe picks one and the group takes it over. Another
    // process may bind that port between the probe's close and the group's bind, so a
    // port taken meanwhile is picked again (a fixed port is tried once).
    let attempts = if addr.port() == 0 { 8 } else { 1 };
    let mut last = None;
    for _ in 0..attempts {
        match bind_group(addr, shards) {
            Err(e) if e.kind() == io::ErrorKind::AddrInUse => last = Some(e),
            other => return other,
        }
    }
    Err(last.unwrap_or_else(|| io::Error::from(io::ErrorKind::AddrInUse)))
}

/// One attempt of [`bind_shards`].
fn bind_group(addr: SocketAddr, shards: usize) -> io::Result<Vec<std::net::UdpSocket>> {
    let probe = std::net::UdpSocket::bind(addr)?;
    if shards <= 1 {
        return Ok(vec![probe]);
    }
    let addr = probe.local_addr()?;
    drop(probe);
    let mut sockets = Vec::with_capacity(shards);
    for _ in 0..shards {
        let s = socket2::Socket::new(
            socket2::Domain::for_address(addr),
            socket2::Type::DGRAM,
            Some(socket2::Protocol::UDP),
        )?;
        if addr.is_ipv6() {
            // As std's bind leaves it: the OS default (dual-stack on Linux).
            let _ = s.only_v6();
        }
        s.set_reuse_port(true)?;
        s.bind(&addr.into())?;
        sockets.push(std::net::UdpSocket::from(s));
    }
    if let Err(e) = steer_by_conn_id(&sockets[0], shards) {
        tracing::debug!(error = %e, "no reuseport steering program; shards route by connection id");
    }
    Ok(sockets)
}

/// Attaches the reuseport program that picks socket `conn_id % shards` of the group.
fn steer_by_conn_id(socket: &std::net::UdpSocket, shards: usize) -> io::Result<()> {
    use nix::libc::{sock_filter, sock_fprog};
    use nix::sys::socket::{setsockopt, sockopt::AttachReusePortCbpf};
    let n = u32::try_from(shards).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    let op = |code: u16, jt: u8, jf: u8, k: u32| sock_filter { code, jt, jf, k };
    // The program sees the UDP payload at offset 0. The handshake packets carry the
    // connection id at byte 2, every other type (DATA of every path, RESET) at byte 1
    // (`wire::conn_id_offset`); a word load reads it big-endian, as `shard_of` does. A
    // datagram too short to hold one ends the program with 0: shard 0 drops it as malformed.
    use ctcp_proto::wire::{TYPE_ACCEPT, TYPE_INITIATE, TYPE_REJECT};
    let mut prog = [
        op(0x30, 0, 0, 0),                        // ldb [0]: packet type
        op(0x15, 4, 0, u32::from(TYPE_INITIATE)), // jeq INITIATE -> 6
        op(0x15, 3, 0, u32::from(TYPE_ACCEPT)),   // jeq ACCEPT -> 6
        op(0x15, 2, 0, u32::from(TYPE_REJECT)),   // jeq REJECT -> 6
        op(0x20, 0, 0, 1),                        // ld [1]: the id of the others
        op(0x05, 0, 0, 1),                        // ja 7
        op(0x20, 0, 0, 2),                        // ld [2]: the handshake's id
        op(0x94, 0, 0, n),                        // mod #shards
        op(0x16, 0, 0, 0),                        // ret a: the socket's index
    ];
    let fprog = sock_fprog {
        len: prog.len() as u16,
        filter: prog.as_mut_ptr(),
    };
    setsockopt(socket, AttachReusePortCbpf, &fprog).map_err(io::Error::from)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// A datagram of type `ty` naming connection id `id`, as `wire::peek_conn_id` reads it.
    fn datagram(ty: u8, id: u32) -> Vec<u8> {
        let mut d = vec![ty];
        if ctcp_proto::wire::conn_id_offset(ty) == Some(ctcp_proto::wire::HANDSHAKE_CONN_ID_OFFSET)
        {
            d.push(ctcp_proto::wire::VERSION);
        }
        d.extend_from_slice(&id.to_le_bytes());
        d.extend_from_slice(&[0; 40]);
        assert_eq!(ctcp_proto::wire::peek_conn_id(&d).unwrap(), (ty, id));
        d
    }

    #[test]
    fn shards_share_the_address_and_get_their_sessions_datagrams() {
        let shards = 3;
        let sockets = bind_shards("127.0.0.1:0".parse().unwrap(), shards).unwrap();
        let addr = sockets[0].local_addr().unwrap();
        assert!(sockets.iter().all(|s| s.local_addr().unwrap() == addr));
        for s in &sockets {
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        }
        // Several senders: the kernel's address hash alone would spread them at random.
        let senders: Vec<_> = (0..4)
            .map(|_| std::net::UdpSocket::bind("127.0.0.1:0").unwrap())
            .collect();
        let types = [
            ctcp_proto::wire::TYPE_DATA,
            ctcp_proto::wire::TYPE_INITIATE,
            ctcp_proto::wire::TYPE_RESET,
            // A data packet of an added path (multipath).
            ctcp_proto::wire::TYPE_DATA_PATH + 1,
        ];
        for (i, sender) in senders.iter().enumerate() {
            for id in [7u32, 8, 9, 0xdead_beef, 1_000_000 + i as u32] {
                let ty = types[(id as usize + i) % types.len()];
                sender.send_to(&datagram(ty, id), addr).unwrap();
                let owner = ctcp_proto::shard_of(id, shards);
                let mut buf = [0u8; 64];
                let (n, _) = sockets[owner].recv_from(&mut buf).unwrap();
                assert_eq!(ctcp_proto::wire::peek_conn_id(&buf[..n]).unwrap(), (ty, id));
            }
        }
    }

    #[test]
    fn an_address_in_use_is_refused() {
        let held = bind_shards("127.0.0.1:0".parse().unwrap(), 2).unwrap();
        let addr = held[0].local_addr().unwrap();
        for n in [1, 2] {
            let err = bind_shards(addr, n).unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::AddrInUse);
        }
    }
}
