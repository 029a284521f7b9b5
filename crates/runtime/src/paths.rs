//! Multipath sockets (issue 29): one tunnel UDP socket per configured path, bound to a
//! local source address or to an interface, so each path's datagrams leave by its link.

use ctcp_config::PathBind;
use socket2::{Domain, Protocol, Socket, Type};
use std::io;
use std::net::SocketAddr;

/// A UDP socket for path `p`, able to reach `peers` (the reverse's resolved addresses):
/// bound to the path's address (any port), or to the wildcard of the peers' family and,
/// with `SO_BINDTODEVICE`, to the path's interface (needs `CAP_NET_RAW`).
///
/// # Errors
/// The address is not local, the interface does not exist, or the process lacks the
/// capability.
pub(crate) fn bind(p: &PathBind, peers: &[SocketAddr]) -> io::Result<std::net::UdpSocket> {
    match p {
        PathBind::Address(a) => std::net::UdpSocket::bind(SocketAddr::new(*a, 0)),
        PathBind::Device(name) => {
            let wildcard = crate::resolve::wildcard_for(peers);
            let socket = Socket::new(
                Domain::for_address(wildcard),
                Type::DGRAM,
                Some(Protocol::UDP),
            )?;
            if wildcard.is_ipv6() {
                // Reaches IPv4 peers as mapped addresses, as the single-path socket does.
                socket.set_only_v6(false)?;
            }
            socket.bind_device(Some(name.as_bytes()))?;
            socket.bind(&wildcard.into())?;
            Ok(socket.into())
        }
    }
}
