//! Multipath sockets (issue 29): one tunnel UDP socket per configured path, bound to a
//! local source address or to an interface, so each path's datagrams leave by its link.

use ctcp_config::PathBind;
use socket2::{Domain, Protocol, Socket, Type};
use std::io;
use std::net::SocketAddr;

/// A UDP socket for path `p`, able to reach `peers` (the reverse's resolved addresses):
/// bound to the path's address (any port), or to the wildcard of the peers' family and,
/// with `SO_BINDTODEVICE`, to the path's interface (`CAP_NET_RAW` before Linux 5.7).
///
/// # Errors
/// The address is not local or of no peer's family, the interface does not exist, or
/// the process lacks the capability.
pub(crate) fn bind(p: &PathBind, peers: &[SocketAddr]) -> io::Result<std::net::UdpSocket> {
    match p {
        PathBind::Address(a) => {
            // A socket bound to one family's address cannot reach the other's.
            if !peers.iter().any(|p| p.is_ipv4() == a.is_ipv4()) {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "the reverse resolves to no address of this path's family",
                ));
            }
            std::net::UdpSocket::bind(SocketAddr::new(*a, 0))
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_binds_its_address_and_refuses_what_cannot_reach_the_peer() {
        let v4 = ["127.0.0.1:7000".parse().unwrap()];
        let s = bind(&PathBind::Address("127.0.0.2".parse().unwrap()), &v4).unwrap();
        assert_eq!(s.local_addr().unwrap().ip().to_string(), "127.0.0.2");
        let e = bind(&PathBind::Address("::1".parse().unwrap()), &v4).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        // An interface that does not exist is an error, never a socket on another link.
        assert!(bind(&PathBind::Device("ctcp-no-such0".into()), &v4).is_err());
    }
}
