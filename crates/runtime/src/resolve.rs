//! The forward's view of the reverse proxy's address: the configured name is resolved
//! again for every reconnect, and each address it resolves to is tried in turn, so a
//! peer that moved (new DNS record) or a name with several addresses (`localhost`:
//! `::1` and `127.0.0.1`) is reached without a restart. A comma-separated list of names
//! (several reverse gateways) is tried in turn the same way: each reconnect moves on to
//! the next name, so when one gateway stops answering the next one takes the streams.

use crate::driver::Driver;
use crate::RuntimeError;
use ctcp_proto::ConnectionHandle;
use std::collections::VecDeque;
use std::fmt;
use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

/// A name lookup: `host:port` → addresses (the system resolver, or a stub in tests).
pub type Lookup = Arc<
    dyn Fn(String) -> Pin<Box<dyn Future<Output = io::Result<Vec<SocketAddr>>> + Send>>
        + Send
        + Sync,
>;

/// The system resolver (`getaddrinfo` through tokio).
pub fn system_lookup() -> Lookup {
    Arc::new(|name| Box::pin(async move { Ok(tokio::net::lookup_host(name).await?.collect()) }))
}

/// The names in a peer setting: one `HOST:PORT`, or a comma-separated list of them.
pub fn peer_names(spec: &str) -> Vec<String> {
    spec.split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .map(str::to_owned)
        .collect()
}

/// Resolves every name of the peer setting `spec` once, for start-up (to pick the socket
/// family and fail fast): the addresses of the first name, then those of the others.
/// Names that do not resolve are skipped while one does (a backup gateway's name may be
/// down now and come back).
///
/// # Errors
/// [`RuntimeError::Resolve`] if no name resolves to an address (the first one's error).
pub async fn resolve_any(spec: &str, lookup: &Lookup) -> Result<Vec<SocketAddr>, RuntimeError> {
    let mut all = Vec::new();
    let mut first_err = None;
    for name in peer_names(spec) {
        match resolve_all(&name, lookup).await {
            Ok(a) => all.extend(a),
            Err(e) => {
                first_err.get_or_insert(e);
            }
        }
    }
    match first_err {
        Some(e) if all.is_empty() => Err(e),
        _ if all.is_empty() => Err(RuntimeError::Resolve {
            peer: spec.to_owned(),
            reason: "no addresses".into(),
        }),
        _ => Ok(all),
    }
}

/// Resolves `peer` once, for start-up (to pick the socket family and fail fast).
///
/// # Errors
/// [`RuntimeError::Resolve`] if the name does not resolve or has no address.
pub async fn resolve_all(peer: &str, lookup: &Lookup) -> Result<Vec<SocketAddr>, RuntimeError> {
    let addrs = lookup(peer.to_owned())
        .await
        .map_err(|e| RuntimeError::Resolve {
            peer: peer.to_owned(),
            reason: e.to_string(),
        })?;
    if addrs.is_empty() {
        return Err(RuntimeError::Resolve {
            peer: peer.to_owned(),
            reason: "no addresses".into(),
        });
    }
    Ok(addrs)
}

/// The wildcard address to bind the tunnel socket to for these peer addresses: IPv4 if
/// they are all IPv4, else IPv6 (dual-stack, so IPv4 peers are reachable as mapped
/// addresses).
pub fn wildcard_for(addrs: &[SocketAddr]) -> SocketAddr {
    if addrs.iter().all(SocketAddr::is_ipv4) {
        SocketAddr::from(([0, 0, 0, 0], 0))
    } else {
        SocketAddr::from(([0u16; 8], 0))
    }
}

/// `addr` as a socket of the given family can send to it: IPv4 as IPv4-mapped IPv6 on an
/// IPv6 socket; `None` for IPv6 on an IPv4 socket.
fn for_socket(addr: SocketAddr, ipv6_socket: bool) -> Option<SocketAddr> {
    match (addr.ip(), ipv6_socket) {
        (IpAddr::V4(v4), true) => Some(SocketAddr::new(v4.to_ipv6_mapped().into(), addr.port())),
        (IpAddr::V6(v6), false) => v6
            .to_ipv4_mapped()
            .map(|v4| SocketAddr::new(v4.into(), addr.port())),
        _ => Some(addr),
    }
}

/// The peer's names, the one being tried, and the addresses of its last resolution not
/// tried yet.
#[derive(Clone)]
pub struct PeerResolver {
    names: Vec<String>,
    /// Index in `names` of the name the untried addresses belong to.
    current: usize,
    ipv6_socket: bool,
    lookup: Lookup,
    untried: VecDeque<SocketAddr>,
}

impl fmt::Debug for PeerResolver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PeerResolver")
            .field("names", &self.names)
            .field("current", &self.current)
            .field("ipv6_socket", &self.ipv6_socket)
            .field("untried", &self.untried)
            .finish_non_exhaustive()
    }
}

impl PeerResolver {
    /// A resolver for `spec` (`host:port`, or a comma-separated list of them) feeding a
    /// socket bound to `local`, starting with the addresses of a resolution of its first
    /// name already made (`first`, possibly empty).
    pub fn new(
        spec: impl Into<String>,
        local: SocketAddr,
        lookup: Lookup,
        first: Vec<SocketAddr>,
    ) -> Self {
        let spec = spec.into();
        let mut names = peer_names(&spec);
        if names.is_empty() {
            names.push(spec);
        }
        let mut r = PeerResolver {
            names,
            current: 0,
            ipv6_socket: local.is_ipv6(),
            lookup,
            untried: VecDeque::new(),
        };
        r.fill(first);
        if r.untried.is_empty() {
            // The first `next` moves on to the first name.
            r.current = r.names.len() - 1;
        }
        r
    }

    /// The name being tried (or last tried).
    pub fn name(&self) -> &str {
        &self.names[self.current]
    }

    fn fill(&mut self, addrs: Vec<SocketAddr>) {
        let ipv6 = self.ipv6_socket;
        self.untried = addrs
            .into_iter()
            .filter_map(|a| for_socket(a, ipv6))
            .collect();
    }

    /// The next address to try: the next one of the last resolution, or, once all have
    /// been tried, the first of a fresh resolution of the next name (the same name when
    /// there is one).
    ///
    /// # Errors
    /// If that name does not resolve, or to no address this socket can reach (the next
    /// call moves on to the following name).
    pub async fn next(&mut self) -> Result<SocketAddr, RuntimeError> {
        if self.untried.is_empty() {
            self.current = (self.current + 1) % self.names.len();
            let addrs = resolve_all(&self.names[self.current], &self.lookup).await?;
            self.fill(addrs);
        }
        self.untried
            .pop_front()
            .ok_or_else(|| RuntimeError::Resolve {
                peer: self.name().to_owned(),
                reason: format!(
                    "no {} address (the tunnel socket is {})",
                    if self.ipv6_socket { "usable" } else { "IPv4" },
                    if self.ipv6_socket { "IPv6" } else { "IPv4" }
                ),
            })
    }

    /// Forgets the rest of the last resolution: a session to it worked, so the next
    /// reconnect resolves again, the next name of a list (the gateway that just failed
    /// may be down; with one name, the peer may have moved since).
    pub fn reset(&mut self) {
        self.untried.clear();
    }
}

/// Starts a handshake with the peer's next address; while the name does not resolve,
/// logs, waits `backoff` (doubling up to 10 s) and tries again.
pub async fn connect_next(
    driver: &Driver,
    peer: &mut PeerResolver,
    backoff: &mut Duration,
) -> ConnectionHandle {
    loop {
        match peer.next().await {
            Ok(addr) => {
                tracing::info!(peer = peer.name(), %addr, "connecting to reverse proxy");
                return driver.connect(addr);
            }
            Err(e) => {
                tracing::warn!(error = %e, retry_in = ?backoff, "cannot resolve the reverse proxy");
                tokio::time::sleep(*backoff).await;
                *backoff = (*backoff * 2).min(Duration::from_secs(10));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// A lookup answering from `answers` in turn (the last one repeats), counting calls.
    fn scripted(answers: Vec<Vec<SocketAddr>>) -> (Lookup, Arc<Mutex<usize>>) {
        let calls = Arc::new(Mutex::new(0));
        let c = Arc::clone(&calls);
        let lookup: Lookup = Arc::new(move |_name| {
            let mut n = c.lock().unwrap();
            let a = answers[(*n).min(answers.len() - 1)].clone();
            *n += 1;
            Box::pin(async move { Ok(a) })
        });
        (lookup, calls)
    }

    fn a(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[tokio::test]
    async fn every_address_is_tried_then_the_name_is_resolved_again() {
        let first = vec![a("[::1]:7000"), a("127.0.0.1:7000")];
        let (lookup, calls) = scripted(vec![vec![a("[2001:db8::7]:7000"), a("192.0.2.7:7000")]]);
        let mut r = PeerResolver::new("localhost:7000", a("[::]:0"), lookup, first);
        assert_eq!(r.next().await.unwrap(), a("[::1]:7000"));
        assert_eq!(r.next().await.unwrap(), a("[::ffff:127.0.0.1]:7000"));
        assert_eq!(*calls.lock().unwrap(), 0, "start-up resolution used first");
        // Both failed: a fresh resolution (the peer moved).
        assert_eq!(r.next().await.unwrap(), a("[2001:db8::7]:7000"));
        assert_eq!(*calls.lock().unwrap(), 1);
        assert_eq!(r.next().await.unwrap(), a("[::ffff:192.0.2.7]:7000"));
    }

    #[tokio::test]
    async fn a_reconnect_after_a_working_session_resolves_again() {
        let (lookup, calls) = scripted(vec![vec![a("192.0.2.8:7000")], vec![a("192.0.2.9:7000")]]);
        let mut r = PeerResolver::new(
            "gw:7000",
            a("0.0.0.0:0"),
            lookup,
            vec![a("192.0.2.1:7000"), a("192.0.2.2:7000")],
        );
        assert_eq!(r.next().await.unwrap(), a("192.0.2.1:7000"));
        r.reset(); // the session to .1 worked and later died
        assert_eq!(r.next().await.unwrap(), a("192.0.2.8:7000"));
        r.reset();
        assert_eq!(r.next().await.unwrap(), a("192.0.2.9:7000"));
        assert_eq!(*calls.lock().unwrap(), 2);
    }

    #[tokio::test]
    async fn a_list_of_gateways_is_tried_in_turn_and_a_reconnect_moves_on() {
        let lookup: Lookup = Arc::new(|name: String| {
            Box::pin(async move {
                match name.as_str() {
                    "gw1:7000" => Ok(vec![a("192.0.2.1:7000")]),
                    "gw2:7000" => Ok(vec![a("192.0.2.2:7000"), a("192.0.2.22:7000")]),
                    _ => Err(io::Error::other("no such host")),
                }
            })
        });
        let spec = "gw1:7000,down:7000,gw2:7000";
        assert_eq!(
            resolve_any(spec, &lookup).await.unwrap(),
            vec![
                a("192.0.2.1:7000"),
                a("192.0.2.2:7000"),
                a("192.0.2.22:7000")
            ],
            "a name that does not resolve is skipped at start-up"
        );
        let mut r = PeerResolver::new(spec, a("0.0.0.0:0"), lookup, Vec::new());
        assert_eq!(r.next().await.unwrap(), a("192.0.2.1:7000"));
        assert_eq!(r.name(), "gw1:7000");
        r.reset(); // the session to gw1 worked, then gw1 stopped answering
        assert!(r.next().await.is_err(), "the unresolvable name fails alone");
        assert_eq!(r.next().await.unwrap(), a("192.0.2.2:7000"));
        assert_eq!(r.name(), "gw2:7000");
        assert_eq!(r.next().await.unwrap(), a("192.0.2.22:7000"));
        assert_eq!(
            r.next().await.unwrap(),
            a("192.0.2.1:7000"),
            "back to the first"
        );
    }

    #[tokio::test]
    async fn an_ipv4_socket_skips_ipv6_addresses() {
        let (lookup, _) = scripted(vec![vec![a("[2001:db8::1]:7000")]]);
        let mut r = PeerResolver::new(
            "gw:7000",
            a("0.0.0.0:0"),
            lookup,
            vec![a("[2001:db8::1]:7000"), a("192.0.2.1:7000")],
        );
        assert_eq!(r.next().await.unwrap(), a("192.0.2.1:7000"));
        assert!(matches!(r.next().await, Err(RuntimeError::Resolve { .. })));
        assert_eq!(wildcard_for(&[a("192.0.2.1:1")]), a("0.0.0.0:0"));
        assert_eq!(wildcard_for(&[a("192.0.2.1:1"), a("[::1]:1")]), a("[::]:0"));
    }
}
