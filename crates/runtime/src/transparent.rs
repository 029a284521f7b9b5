//! Gateway mode: the transparent TCP listener. Connections the kernel hands to it
//! (nftables `redirect`, or `tproxy` with policy routing) open a tunnel stream to their
//! original destination, as a SOCKS CONNECT would, and are relayed the same way.
//!
//! - `redirect` (NAT): the accepted socket's local address is the listener's; the
//!   original destination is conntrack's, read with `SO_ORIGINAL_DST` (IPv4) or
//!   `IP6T_SO_ORIGINAL_DST` (IPv6).
//! - `tproxy`: the listener is `IP_TRANSPARENT` / `IPV6_TRANSPARENT` (needs
//!   `CAP_NET_ADMIN`), and the kernel delivers connections to any address to it
//!   unchanged: the accepted socket's local address is the original destination.
//!
//! Both socket options are read and set through `nix` and `socket2`'s safe wrappers: this
//! module has no `unsafe`.
//!
//! A connection whose original destination is this proxy itself (its transparent, SOCKS or
//! metrics port on one of the host's addresses: it was not redirected, or a rule loops back) or
//! the reverse peer's address (the tunnel would carry traffic for the host it runs to) is
//! refused and logged, never tunnelled.

use ctcp_config::TransparentMode;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::net::{TcpListener, TcpStream};

/// A kind of refusal is logged at warn at most this often (the rest at debug), so a
/// misrouted client retrying cannot flood the log.
const WARN_EVERY: Duration = Duration::from_secs(10);

/// Says when a warning of one kind is due again.
#[derive(Debug, Default)]
pub(crate) struct WarnEvery {
    last: Mutex<Option<Instant>>,
}

impl WarnEvery {
    /// True if no warning of this kind went out in the last [`WARN_EVERY`] (and records
    /// `now` as the last).
    pub(crate) fn due(&self, now: Instant) -> bool {
        let mut last = self
            .last
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if last.is_some_and(|t| now.saturating_duration_since(t) < WARN_EVERY) {
            return false;
        }
        *last = Some(now);
        true
    }
}

/// The transparent listener and what it needs to read and check destinations.
#[derive(Debug)]
pub struct Gateway {
    /// The bound listener.
    pub(crate) listener: TcpListener,
    /// How connections reach it.
    pub(crate) mode: TransparentMode,
    /// Destinations refused as loops.
    pub(crate) guard: LoopGuard,
}

impl Gateway {
    /// Binds the transparent listener on `addr`: `IP_TRANSPARENT` (or `IPV6_TRANSPARENT`)
    /// in `tproxy` mode; an IPv6 wildcard also takes IPv4 connections.
    ///
    /// # Errors
    /// If the socket cannot be made, marked transparent (no `CAP_NET_ADMIN`) or bound.
    pub fn bind(addr: SocketAddr, mode: TransparentMode, guard: LoopGuard) -> io::Result<Self> {
        use socket2::{Domain, Protocol, Socket, Type};
        let sock = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
        sock.set_reuse_address(true)?;
        if addr.is_ipv6() {
            // `[::]:PORT` takes both families, whatever the host's bindv6only default.
            sock.set_only_v6(false)?;
        }
        if mode == TransparentMode::Tproxy {
            let marked = if addr.is_ipv6() {
                // A dual-stack socket gets both, so it accepts IPv4 tproxied flows too.
                sock.set_ip_transparent_v6(true)
                    .and_then(|()| sock.set_ip_transparent_v4(true))
            } else {
                sock.set_ip_transparent_v4(true)
            };
            marked.map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!("cannot set IP_TRANSPARENT (tproxy needs CAP_NET_ADMIN): {e}"),
                )
            })?;
        }
        sock.set_nonblocking(true)?;
        sock.bind(&addr.into())?;
        // A whole LAN's connections arrive here: the gateway's backlog, as i32 for socket2.
        sock.listen(crate::listen::BACKLOG as i32)?;
        let listener = TcpListener::from_std(sock.into())?;
        let guard = LoopGuard {
            transparent: listener.local_addr()?,
            ..guard
        };
        Ok(Gateway {
            listener,
            mode,
            guard,
        })
    }

    /// The address actually bound.
    ///
    /// # Errors
    /// As `getsockname`.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }
}

/// `::ffff:a.b.c.d` (an IPv4 peer of a dual-stack socket) as the IPv4 address it is.
pub(crate) fn unmap(a: SocketAddr) -> SocketAddr {
    match a {
        SocketAddr::V6(v6) => match v6.ip().to_ipv4_mapped() {
            Some(v4) => SocketAddr::from((v4, v6.port())),
            None => a,
        },
        SocketAddr::V4(_) => a,
    }
}

/// The original destination of a connection accepted by the transparent listener.
///
/// # Errors
/// `redirect`: conntrack has no NAT entry for it (it was not redirected, or conntrack is
/// not loaded); either mode: the socket's addresses cannot be read.
pub(crate) fn original_dst(tcp: &TcpStream, mode: TransparentMode) -> io::Result<SocketAddr> {
    let local = unmap(tcp.local_addr()?);
    match mode {
        TransparentMode::Tproxy => Ok(local),
        TransparentMode::Redirect => {
            use nix::sys::socket::{getsockopt, sockopt, SockaddrIn, SockaddrIn6};
            // The family of the connection, not of the listener: a dual-stack listener's
            // IPv4 connections are NATed by the IPv4 conntrack.
            let dst = if local.is_ipv4() {
                SocketAddr::from(SockaddrIn::from(getsockopt(tcp, sockopt::OriginalDst)?))
            } else {
                SocketAddr::from(SockaddrIn6::from(getsockopt(
                    tcp,
                    sockopt::Ip6tOriginalDst,
                )?))
            };
            Ok(unmap(dst))
        }
    }
}

/// The destinations a transparent connection must not be tunnelled to.
#[derive(Debug, Clone)]
pub struct LoopGuard {
    /// The transparent listener's address (set by [`Gateway::bind`]).
    pub(crate) transparent: SocketAddr,
    /// The proxy's other listeners: SOCKS, and the metrics endpoint if any.
    pub(crate) own: Vec<SocketAddr>,
    /// The reverse peer's addresses (as resolved at start).
    pub(crate) peers: Vec<IpAddr>,
    /// Rate limit of the "refused: loop" warning.
    pub(crate) warn_loop: Arc<WarnEvery>,
    /// Rate limit of the "no original destination" warning.
    pub(crate) warn_no_dst: Arc<WarnEvery>,
}

impl LoopGuard {
    /// A guard for a proxy whose other listeners (SOCKS, metrics) are `own` and whose
    /// reverse peer resolved to `peers`.
    pub fn new(own: &[SocketAddr], peers: &[SocketAddr]) -> Self {
        LoopGuard {
            transparent: SocketAddr::from(([0, 0, 0, 0], 0)),
            own: own.iter().map(|a| unmap(*a)).collect(),
            peers: peers.iter().map(|p| unmap(*p).ip()).collect(),
            warn_loop: Arc::default(),
            warn_no_dst: Arc::default(),
        }
    }

    /// Why `dst` must not be tunnelled, if so. `is_local` says whether an address is one
    /// of this host's (only asked for this proxy's own ports).
    pub(crate) fn refusal(
        &self,
        dst: SocketAddr,
        is_local: impl Fn(IpAddr) -> bool,
    ) -> Option<&'static str> {
        if self.peers.contains(&dst.ip()) {
            return Some(
                "the original destination is the reverse peer's address (exempt it in the \
                 firewall rules: reach it directly, not through its own tunnel)",
            );
        }
        let own = |l: SocketAddr| {
            l.port() == dst.port()
                && (l.ip() == dst.ip() || (l.ip().is_unspecified() && is_local(dst.ip())))
        };
        if own(self.transparent) {
            return Some(
                "the original destination is the transparent listener itself (the \
                 connection was not redirected, or a rule loops back)",
            );
        }
        if self.own.iter().any(|l| own(*l)) {
            return Some("the original destination is this proxy's SOCKS or metrics listener");
        }
        None
    }
}

/// Whether `ip` is one of this host's addresses (loopback included); false if the
/// interfaces cannot be listed.
pub(crate) fn is_local_address(ip: IpAddr) -> bool {
    if ip.is_loopback() || ip.is_unspecified() {
        return true;
    }
    let Ok(addrs) = nix::ifaddrs::getifaddrs() else {
        return false;
    };
    addrs.filter_map(|a| a.address).any(|s| {
        s.as_sockaddr_in().map(|v4| IpAddr::from(v4.ip())) == Some(ip)
            || s.as_sockaddr_in6().map(|v6| IpAddr::from(v6.ip())) == Some(ip)
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn guard() -> LoopGuard {
        LoopGuard {
            transparent: "[::]:12345".parse().unwrap(),
            ..LoopGuard::new(
                &[
                    "127.0.0.1:1080".parse().unwrap(),
                    "0.0.0.0:9100".parse().unwrap(),
                ],
                &[
                    "203.0.113.7:7000".parse().unwrap(),
                    "[2001:db8::7]:7000".parse().unwrap(),
                ],
            )
        }
    }

    #[test]
    fn loops_and_the_peer_are_refused_and_the_rest_passes() {
        let g = guard();
        let local = |ip: IpAddr| ip == "10.0.0.1".parse::<IpAddr>().unwrap() || ip.is_loopback();
        let refused = |d: &str| g.refusal(d.parse().unwrap(), local);
        assert!(refused("203.0.113.7:443").unwrap().contains("reverse peer"));
        assert!(refused("[2001:db8::7]:22")
            .unwrap()
            .contains("reverse peer"));
        assert!(refused("10.0.0.1:12345")
            .unwrap()
            .contains("not redirected"));
        assert!(refused("127.0.0.1:1080").unwrap().contains("SOCKS"));
        assert!(refused("10.0.0.1:9100").unwrap().contains("metrics"));
        assert_eq!(refused("192.0.2.1:9100"), None);
        // The same ports elsewhere, and other hosts, are fine.
        assert_eq!(refused("192.0.2.1:12345"), None);
        assert_eq!(refused("10.0.0.1:1080"), None);
        assert_eq!(refused("198.51.100.1:80"), None);
    }

    #[test]
    fn a_kind_of_warning_goes_out_at_most_every_ten_seconds() {
        let w = WarnEvery::default();
        let t0 = crate::clock::now();
        assert!(w.due(t0));
        assert!(!w.due(t0 + Duration::from_secs(9)));
        assert!(w.due(t0 + Duration::from_secs(10)));
        assert!(!w.due(t0 + Duration::from_secs(11)));
    }

    #[test]
    fn mapped_addresses_are_unmapped() {
        assert_eq!(
            unmap("[::ffff:10.1.2.3]:80".parse().unwrap()),
            "10.1.2.3:80".parse::<SocketAddr>().unwrap()
        );
        assert_eq!(
            unmap("[2001:db8::1]:80".parse().unwrap()),
            "[2001:db8::1]:80".parse::<SocketAddr>().unwrap()
        );
        let g = LoopGuard::new(
            &["127.0.0.1:1080".parse().unwrap()],
            &["[::ffff:203.0.113.7]:7000".parse().unwrap()],
        );
        assert_eq!(g.peers, ["203.0.113.7".parse::<IpAddr>().unwrap()]);
    }

    #[test]
    fn loopback_is_local() {
        assert!(is_local_address("127.0.0.1".parse().unwrap()));
        assert!(is_local_address("::1".parse().unwrap()));
        assert!(!is_local_address("192.0.2.55".parse().unwrap()));
    }

    #[tokio::test]
    async fn a_connection_that_was_not_redirected_has_no_nat_destination() {
        // Plain loopback, no NAT: redirect mode cannot read an original destination
        // (ENOENT without a conntrack entry) or reads the listener itself.
        let g = Gateway::bind(
            "127.0.0.1:0".parse().unwrap(),
            TransparentMode::Redirect,
            LoopGuard::new(&["127.0.0.1:1080".parse().unwrap()], &[]),
        )
        .unwrap();
        let addr = g.local_addr().unwrap();
        let _c = TcpStream::connect(addr).await.unwrap();
        let (s, _) = g.listener.accept().await.unwrap();
        match original_dst(&s, TransparentMode::Redirect) {
            Err(_) => {}
            Ok(d) => assert!(g.guard.refusal(d, is_local_address).is_some(), "{d}"),
        }
        let d = original_dst(&s, TransparentMode::Tproxy).unwrap();
        assert_eq!(d, addr);
        assert!(g.guard.refusal(d, is_local_address).is_some());
    }
}
