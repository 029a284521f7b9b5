//! Gateway mode for UDP (issue 27): the transparent UDP listener, TPROXY only.
//!
//! nftables `tproxy` hands LAN clients' UDP datagrams, unchanged, to an `IP_TRANSPARENT`
//! (`IPV6_TRANSPARENT`) socket; `IP_RECVORIGDSTADDR` / `IPV6_RECVORIGDSTADDR` make the
//! kernel say, for each datagram, the address it was sent to (its original destination).
//! Datagrams are grouped into flows by (client address, original destination); each flow
//! rides the tunnel session as datagrams, in the SOCKS UDP ASSOCIATE format (flow id,
//! target on the flow's first datagrams and every 64th, payload), to the reverse side's
//! per-flow socket. Replies go back to the client
//! from a transparent socket bound to the original destination, so the client sees the
//! server's address as their source. A flow idle for `udp_idle_timeout` is closed; at
//! `udp_max_flows` the least recently active one goes.
//!
//! Socket options and `recvmsg` go through `socket2` and `nix`'s safe wrappers: this
//! module has no `unsafe`. Destinations the loop guard refuses (the reverse peer, this
//! proxy's own ports) are dropped and counted, never tunnelled.

use crate::clock;
use crate::datagram::FlowLimits;
use crate::datagram::{self, FlowSender, ForwardFlows, COUNTERS};
use crate::driver::Driver;
use crate::transparent::{is_local_address, unmap, LoopGuard};
use ctcp_proto::ConnectionHandle;
use ctcp_socks5::TargetAddr;
use nix::sys::socket::{
    recvmsg, setsockopt, sockopt, ControlMessageOwned, MsgFlags, SockaddrIn, SockaddrIn6,
    SockaddrStorage,
};
use socket2::{Domain, Protocol, Socket, Type};
use std::collections::HashMap;
use std::io::{self, IoSliceMut};
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::Interest;
use tokio::net::UdpSocket;
use tokio::sync::{mpsc, watch};

/// Largest UDP datagram read.
const MAX_UDP: usize = 65_535;

/// The transparent UDP listener.
#[derive(Debug)]
pub struct UdpGateway {
    socket: UdpSocket,
    guard: LoopGuard,
}

fn transparent_err(e: io::Error) -> io::Error {
    io::Error::new(
        e.kind(),
        format!("cannot set IP_TRANSPARENT (tproxy needs CAP_NET_ADMIN): {e}"),
    )
}

impl UdpGateway {
    /// Binds the transparent UDP listener on `addr`; an IPv6 wildcard also takes IPv4.
    ///
    /// # Errors
    /// If the socket cannot be made, marked transparent (no `CAP_NET_ADMIN`), told to
    /// report original destinations, or bound.
    pub fn bind(addr: SocketAddr, guard: LoopGuard) -> io::Result<Self> {
        let sock = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
        sock.set_reuse_address(true)?;
        if addr.is_ipv6() {
            sock.set_only_v6(false)?;
            sock.set_ip_transparent_v6(true)
                .and_then(|()| sock.set_ip_transparent_v4(true))
                .map_err(transparent_err)?;
            setsockopt(&sock, sockopt::Ipv6OrigDstAddr, &true)?;
            // IPv4 datagrams on the dual-stack socket report theirs at the IP level.
            setsockopt(&sock, sockopt::Ipv4OrigDstAddr, &true)?;
        } else {
            sock.set_ip_transparent_v4(true).map_err(transparent_err)?;
            setsockopt(&sock, sockopt::Ipv4OrigDstAddr, &true)?;
        }
        sock.set_nonblocking(true)?;
        sock.bind(&addr.into())?;
        let socket = UdpSocket::from_std(sock.into())?;
        let guard = LoopGuard {
            transparent: socket.local_addr()?,
            ..guard
        };
        Ok(UdpGateway { socket, guard })
    }

    /// The address actually bound.
    ///
    /// # Errors
    /// As `getsockname`.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.socket.local_addr()
    }

    /// Reads one queued datagram without waiting: its length, its source and its
    /// original destination (unmapped; `None` if the kernel did not say).
    fn try_recv(&self, buf: &mut [u8]) -> io::Result<(usize, SocketAddr, Option<SocketAddr>)> {
        self.socket.try_io(Interest::READABLE, || {
            let mut cmsg = nix::cmsg_space!(nix::libc::sockaddr_in6, nix::libc::sockaddr_in);
            let mut iov = [IoSliceMut::new(buf)];
            let msg = recvmsg::<SockaddrStorage>(
                self.socket.as_raw_fd(),
                &mut iov,
                Some(&mut cmsg),
                MsgFlags::empty(),
            )
            .map_err(io::Error::from)?;
            let from = msg
                .address
                .as_ref()
                .and_then(storage_addr)
                .ok_or_else(|| io::Error::other("datagram without a source address"))?;
            let mut dst = None;
            for c in msg.cmsgs().map_err(io::Error::from)? {
                match c {
                    ControlMessageOwned::Ipv4OrigDstAddr(a) => {
                        dst = Some(SocketAddr::from(SockaddrIn::from(a)));
                    }
                    ControlMessageOwned::Ipv6OrigDstAddr(a) => {
                        dst = Some(SocketAddr::from(SockaddrIn6::from(a)));
                    }
                    _ => {}
                }
            }
            Ok((msg.bytes, unmap(from), dst.map(unmap)))
        })
    }
}

fn storage_addr(s: &SockaddrStorage) -> Option<SocketAddr> {
    if let Some(v4) = s.as_sockaddr_in() {
        return Some(SocketAddr::from(*v4));
    }
    s.as_sockaddr_in6().map(|v6| SocketAddr::from(*v6))
}

/// A socket that sends from `dst` (not a local address): `IP_TRANSPARENT`, bound to it.
/// Several flows to one server each bind one (`SO_REUSEADDR`).
fn reply_socket(dst: SocketAddr) -> io::Result<UdpSocket> {
    let sock = Socket::new(Domain::for_address(dst), Type::DGRAM, Some(Protocol::UDP))?;
    sock.set_reuse_address(true)?;
    if dst.is_ipv6() {
        sock.set_only_v6(true)?;
        sock.set_ip_transparent_v6(true)?;
    } else {
        sock.set_ip_transparent_v4(true)?;
    }
    sock.set_nonblocking(true)?;
    sock.bind(&dst.into())?;
    UdpSocket::from_std(sock.into())
}

/// One transparent flow: its id in [`ForwardFlows`] (with which datagrams carry the
/// target), and the task sending replies.
struct Flow {
    sender: FlowSender,
    last: Arc<Mutex<Instant>>,
    replies: tokio::task::JoinHandle<()>,
}

fn last_of(f: &Flow) -> Instant {
    *f.last
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn touch(last: &Mutex<Instant>) {
    *last
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = clock::now();
}

fn count(c: &std::sync::atomic::AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

/// The transparent UDP flows and what they need.
struct Flows {
    map: HashMap<(SocketAddr, SocketAddr), Flow>,
    shared: Arc<ForwardFlows>,
    limits: FlowLimits,
}

impl Flows {
    fn remove(&mut self, key: &(SocketAddr, SocketAddr)) {
        if let Some(f) = self.map.remove(key) {
            f.replies.abort();
            self.shared.close(f.sender.id());
        }
    }

    fn sweep(&mut self) {
        let now = clock::now();
        let idle: Vec<_> = self
            .map
            .iter()
            .filter(|(_, f)| now.saturating_duration_since(last_of(f)) >= self.limits.idle_timeout)
            .map(|(k, _)| *k)
            .collect();
        for k in idle {
            tracing::trace!(client = %k.0, dst = %k.1, "transparent UDP flow idle: closed");
            self.remove(&k);
            count(&COUNTERS.flows_idle_closed);
        }
    }

    /// The flow of (client, dst), opened if new (evicting the least recently active at
    /// the cap); `None` if its reply socket cannot be made.
    fn get_or_open(&mut self, client: SocketAddr, dst: SocketAddr) -> Option<&mut Flow> {
        if self.map.contains_key(&(client, dst)) {
            let f = self.map.get_mut(&(client, dst))?;
            touch(&f.last);
            return Some(f);
        }
        let reply = match reply_socket(dst) {
            Ok(s) => s,
            Err(e) => {
                tracing::debug!(%client, %dst, error = %e, "no reply socket for a transparent UDP flow");
                return None;
            }
        };
        if self.map.len() >= self.limits.max_flows.max(1) {
            if let Some(k) = self
                .map
                .iter()
                .min_by_key(|(_, f)| last_of(f))
                .map(|(k, _)| *k)
            {
                self.remove(&k);
                count(&COUNTERS.flows_evicted);
            }
        }
        let (tx, mut rx) = mpsc::channel::<(TargetAddr, Vec<u8>)>(256);
        let id = self.shared.open(TargetAddr::Ip(dst), tx);
        let last = Arc::new(Mutex::new(clock::now()));
        let replies = {
            let last = last.clone();
            tokio::spawn(async move {
                while let Some((_, data)) = rx.recv().await {
                    touch(&last);
                    if reply.send_to(&data, client).await.is_err() {
                        count(&COUNTERS.dropped_reply);
                    }
                }
            })
        };
        count(&COUNTERS.flows_opened);
        tracing::trace!(%client, %dst, flow = id, "transparent UDP flow opened");
        let sender = FlowSender::new(id);
        Some(self.map.entry((client, dst)).or_insert(Flow {
            sender,
            last,
            replies,
        }))
    }
}

/// Serves the transparent UDP listener until `shutdown`: each datagram joins its flow and
/// goes into the session `session()` names (dropped and counted while there is none).
pub(crate) async fn serve(
    gw: UdpGateway,
    driver: Driver,
    shared: Arc<ForwardFlows>,
    session: impl Fn() -> Option<ConnectionHandle>,
    limits: FlowLimits,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut flows = Flows {
        map: HashMap::new(),
        shared,
        limits,
    };
    let mut sweep = tokio::time::interval(Duration::from_secs(1).min(limits.idle_timeout));
    let mut buf = vec![0u8; MAX_UDP];
    loop {
        tokio::select! {
            r = gw.socket.readable() => {
                if let Err(e) = r {
                    tracing::warn!(error = %e, "transparent UDP listener failed");
                    break;
                }
                // Drain what is queued (bounded, so the sweep and shutdown get a turn).
                for _ in 0..256 {
                    match gw.try_recv(&mut buf) {
                        Ok((n, from, dst)) => on_datagram(&gw, &driver, &mut flows, &session, from, dst, &buf[..n]),
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                        Err(e) => {
                            tracing::debug!(error = %e, "transparent UDP receive failed");
                            break;
                        }
                    }
                }
            }
            _ = sweep.tick() => flows.sweep(),
            _ = shutdown.changed() => if *shutdown.borrow() { break },
        }
    }
    let keys: Vec<_> = flows.map.keys().copied().collect();
    for k in keys {
        flows.remove(&k);
    }
}

fn on_datagram(
    gw: &UdpGateway,
    driver: &Driver,
    flows: &mut Flows,
    session: &impl Fn() -> Option<ConnectionHandle>,
    from: SocketAddr,
    dst: Option<SocketAddr>,
    payload: &[u8],
) {
    let Some(dst) = dst else {
        count(&COUNTERS.dropped_bad_header);
        if gw.guard.warn_no_dst.due(clock::now()) {
            tracing::warn!(%from, "transparent UDP datagram without an original destination (not delivered by a tproxy rule?): dropped");
        }
        return;
    };
    if let Some(why) = gw.guard.refusal(dst, is_local_address) {
        count(&COUNTERS.dropped_denied);
        if gw.guard.warn_loop.due(clock::now()) {
            tracing::warn!(%from, %dst, "transparent UDP datagram refused: {why}");
        }
        return;
    }
    let Some(h) = session() else {
        count(&COUNTERS.dropped_session);
        return;
    };
    let Some(flow) = flows.get_or_open(from, dst) else {
        count(&COUNTERS.dropped_no_flow);
        return;
    };
    let d = flow.sender.encode(h, &TargetAddr::Ip(dst), payload);
    datagram::send_into(driver, h, &d);
}
