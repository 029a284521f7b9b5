//! Multipath sockets (issue 29): one tunnel UDP socket per configured path, bound to a
//! local source address or to an interface, so each path's datagrams leave by its link.
//!
//! Paths come and go at run time: a send that fails with a link error takes the path
//! down in every session at once (its flight is repaired over the others), and a
//! monitor checks every path each [`CHECK_EVERY`]: one whose interface or address is
//! gone goes down, and one that is back is validated again before it carries data: with
//! a fresh socket if it could not be bound at start-up or its interface was re-created
//! under the same name (a new interface index), with its own socket otherwise.
//!
//! Every configured path is a slot with its own socket, writer and reader task, the one
//! carrying the handshake included: none is the shard's socket, so any can be re-bound.
//! The session's path ids map to slots ([`PathSockets::order`]): path 0, which carries the
//! handshake, is the first slot that is up when the session starts, the others follow in
//! configuration order. A forward holds one session at a time, so one mapping serves it.

use crate::driver::Shared;
use crate::udp::UdpIo;
use ctcp_config::PathBind;
use socket2::{Domain, Protocol, Socket, Type};
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How often the monitor checks each path's interface, address and route.
pub(crate) const CHECK_EVERY: Duration = Duration::from_secs(1);

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

/// Whether a send error says the path's link is gone (rather than a passing condition):
/// no route or network, the device or the source address no longer there.
pub(crate) fn is_link_error(e: &io::Error) -> bool {
    use nix::libc;
    matches!(
        e.raw_os_error(),
        Some(
            libc::ENETUNREACH
                | libc::ENETDOWN
                | libc::ENODEV
                | libc::ENXIO
                | libc::EADDRNOTAVAIL
                | libc::EHOSTUNREACH
        )
    )
}

/// Whether path `p` can reach `peer` now: for an interface, it exists, is up with a
/// carrier and holds an address of the peer's family (a socket bound to an interface
/// without one still "sends", but nothing can answer); then a socket bound as the path's
/// finds a route to the peer (`connect` on UDP only looks the route up).
///
/// # Errors
/// Why the path cannot be used: the kernel's error (no such device, address not
/// available, network unreachable) or `ENETDOWN` for an interface down or without an
/// address.
pub(crate) fn check(p: &PathBind, peer: SocketAddr) -> io::Result<()> {
    if let PathBind::Device(name) = p {
        device_ready(name, peer.is_ipv4())?;
    }
    bind(p, &[peer])?.connect(peer)
}

/// Whether interface `name` is up, running and holds an address of the family asked.
fn device_ready(name: &str, v4: bool) -> io::Result<()> {
    use nix::net::if_::InterfaceFlags;
    let mut seen = false;
    for a in nix::ifaddrs::getifaddrs()?.filter(|a| a.interface_name == name) {
        seen = true;
        let running = a
            .flags
            .contains(InterfaceFlags::IFF_UP | InterfaceFlags::IFF_RUNNING);
        let family = a.address.is_some_and(|s| {
            if v4 {
                s.as_sockaddr_in().is_some()
            } else {
                s.as_sockaddr_in6().is_some()
            }
        });
        if running && family {
            return Ok(());
        }
    }
    Err(if seen {
        io::Error::new(
            io::ErrorKind::NetworkDown,
            "interface down or without an address of the peer's family",
        )
    } else {
        io::Error::from_raw_os_error(nix::libc::ENODEV)
    })
}

/// The interface index path `p`'s socket is bound to, if it binds to an interface: a
/// device deleted and created again under the same name gets a new index, and a socket
/// bound to the old one never carries data again.
fn device_index(p: &PathBind) -> Option<u32> {
    match p {
        PathBind::Device(name) => nix::net::if_::if_nametoindex(name.as_str()).ok(),
        PathBind::Address(_) => None,
    }
}

/// One configured path's socket, as the driver sends on it.
#[derive(Debug)]
pub(crate) struct Slot {
    /// What the path binds to.
    pub(crate) bind: PathBind,
    /// Where the path's datagrams are written; `None` for a path not bound yet.
    writer: Option<Arc<UdpIo>>,
    /// A socket bound at start-up, until the driver takes it over.
    pending: Option<std::net::UdpSocket>,
    /// The task reading the path's socket, stopped when the socket is replaced.
    reader: Option<tokio::task::AbortHandle>,
    /// The interface index the socket was bound to (interface paths only).
    ifindex: Option<u32>,
    /// Whether the path's link works (as far as sends and the last check tell).
    pub(crate) up: bool,
}

impl Slot {
    /// Whether the slot's socket can serve again once its link works: it has one, bound
    /// to the interface of that name now (one set down and up keeps its index) or to an
    /// address (removed and added back, it is the same address). Keeping it keeps the
    /// path's address, which the reverse would otherwise challenge before it sends there
    /// again.
    fn socket_still_works(&self) -> bool {
        self.writer.is_some() && self.ifindex == device_index(&self.bind)
    }
}

/// The multipath sockets of a forward: slot `k` is configured path `k`; `order` says
/// which slot each of the session's paths leaves from.
#[derive(Debug)]
pub(crate) struct PathSockets {
    pub(crate) slots: Vec<Slot>,
    /// The session's path id `i` leaves from slot `order[i]`: path 0 (the handshake) from
    /// the first slot up when the session started, the others in configuration order.
    order: Vec<usize>,
    /// The reverse's resolved addresses (the check's destination before a session
    /// exists).
    pub(crate) peers: Vec<SocketAddr>,
    /// Bumped whenever a writer or the order changes, so the driver re-reads its copy of
    /// the writers only then (no lock per send).
    generation: Arc<AtomicU64>,
}

/// The driver's copy of the writers, by the session's path id, re-read from
/// [`PathSockets`] when its generation moves.
#[derive(Debug, Default)]
pub(crate) struct Writers {
    /// The generation read last (0: never; [`PathSockets`] starts at 1).
    generation: u64,
    by_path: Vec<Option<Arc<UdpIo>>>,
    slot_of: Vec<usize>,
}

impl Writers {
    /// Re-reads the writers if `sockets` changed since the last call: one atomic load when
    /// nothing did.
    pub(crate) fn refresh(&mut self, sockets: &Mutex<PathSockets>, generation: &AtomicU64) {
        let now = generation.load(Ordering::Acquire);
        if now == self.generation {
            return;
        }
        let s = lock(sockets);
        self.generation = s.generation.load(Ordering::Acquire);
        self.slot_of.clone_from(&s.order);
        self.by_path = s
            .order
            .iter()
            .map(|&k| s.slots.get(k).and_then(|slot| slot.writer.clone()))
            .collect();
    }

    /// The socket the session's path `path` writes to, if its slot has one.
    pub(crate) fn writer(&self, path: usize) -> Option<&UdpIo> {
        self.by_path.get(path).and_then(|w| w.as_deref())
    }

    /// The slot the session's path `path` leaves from.
    pub(crate) fn slot(&self, path: usize) -> Option<usize> {
        self.slot_of.get(path).copied()
    }
}

impl PathSockets {
    /// Binds every configured path for `peers` and checks its link. A path that does not
    /// bind is retried by the monitor, so one missing interface does not stop the
    /// forward. Path 0 leaves from the first slot that binds and works (else the first
    /// that binds).
    ///
    /// # Errors
    /// The first path's error, when no path binds at all.
    pub(crate) fn bind_all(
        binds: &[PathBind],
        peers: &[SocketAddr],
    ) -> Result<PathSockets, (usize, io::Error)> {
        let peer = peers.first().copied();
        let mut slots = Vec::with_capacity(binds.len());
        let mut first_error = None;
        for (i, b) in binds.iter().enumerate() {
            let socket = match bind(b, peers) {
                Ok(s) => Some(s),
                Err(e) => {
                    tracing::warn!(path = i, bind = %b, error = %e, "path not bound at start-up: retried every second");
                    first_error.get_or_insert((i, e));
                    None
                }
            };
            let up = socket.is_some() && peer.is_some_and(|p| check(b, p).is_ok());
            slots.push(Slot {
                bind: b.clone(),
                writer: None,
                ifindex: socket.as_ref().and_then(|_| device_index(b)),
                pending: socket,
                reader: None,
                up,
            });
        }
        let lead = slots
            .iter()
            .position(|s| s.up)
            .or_else(|| slots.iter().position(|s| s.pending.is_some()));
        let Some(lead) = lead else {
            return Err(first_error
                .unwrap_or_else(|| (0, io::Error::new(io::ErrorKind::InvalidInput, "no path"))));
        };
        let mut sockets = PathSockets {
            order: Vec::new(),
            slots,
            peers: peers.to_vec(),
            generation: Arc::new(AtomicU64::new(1)),
        };
        sockets.order = sockets.order_from(lead);
        Ok(sockets)
    }

    /// Slot `lead` first, then every other slot in configuration order.
    fn order_from(&self, lead: usize) -> Vec<usize> {
        std::iter::once(lead)
            .chain((0..self.slots.len()).filter(|&k| k != lead))
            .collect()
    }

    /// Maps the session about to start: its path 0 (the handshake) leaves from the first
    /// slot that is up (the current lead if none is), the others in configuration order.
    /// Returns the slot path 0 leaves from if that changed.
    pub(crate) fn map_new_session(&mut self) -> Option<usize> {
        let lead = self
            .slots
            .iter()
            .position(|s| s.up)
            .unwrap_or_else(|| self.order.first().copied().unwrap_or(0));
        let order = self.order_from(lead);
        if order == self.order {
            return None;
        }
        self.order = order;
        self.generation.fetch_add(1, Ordering::AcqRel);
        Some(lead)
    }

    /// The generation counter [`Writers::refresh`] watches.
    pub(crate) fn generation(&self) -> Arc<AtomicU64> {
        self.generation.clone()
    }

    /// The session's path id that leaves from slot `k`.
    pub(crate) fn path_of(&self, k: usize) -> Option<u8> {
        self.order
            .iter()
            .position(|&s| s == k)
            .and_then(|i| u8::try_from(i).ok())
    }

    /// Whether the slot the session's path `path` leaves from is up.
    pub(crate) fn path_is_up(&self, path: usize) -> bool {
        self.order
            .get(path)
            .and_then(|&k| self.slots.get(k))
            .is_some_and(|s| s.up)
    }

    /// What each of the session's paths binds to, by path id.
    pub(crate) fn links(&self) -> Vec<String> {
        self.order
            .iter()
            .filter_map(|&k| self.slots.get(k).map(|s| s.bind.to_string()))
            .collect()
    }

    /// How many paths a session has (one per slot).
    pub(crate) fn len(&self) -> usize {
        self.slots.len()
    }

    /// The address the lead slot's socket is bound to (before the driver takes it over).
    ///
    /// # Errors
    /// The lead slot has no socket (cannot happen after [`PathSockets::bind_all`]).
    pub(crate) fn lead_addr(&self) -> io::Result<SocketAddr> {
        self.order
            .first()
            .and_then(|&k| self.slots.get(k))
            .and_then(|s| s.pending.as_ref())
            .map_or_else(
                || Err(io::Error::other("the lead path has no socket")),
                std::net::UdpSocket::local_addr,
            )
    }

    /// The socket slot `k` writes to, if it has one.
    pub(crate) fn writer(&self, k: usize) -> Option<Arc<UdpIo>> {
        self.slots.get(k).and_then(|s| s.writer.clone())
    }

    /// Takes over slot `k`'s new socket: a writer for the driver, and a task reading it
    /// into `shared`'s shards; the old socket, if any, is closed.
    ///
    /// # Errors
    /// The socket cannot be set up for asynchronous I/O.
    pub(crate) fn install(
        &mut self,
        shared: &Arc<Shared>,
        k: usize,
        socket: std::net::UdpSocket,
    ) -> io::Result<()> {
        let writer = Arc::new(UdpIo::new(socket.try_clone()?)?);
        let reader = UdpIo::new(socket)?;
        let Some(slot) = self.slots.get_mut(k) else {
            return Ok(());
        };
        if let Some(old) = slot.reader.take() {
            old.abort();
        }
        slot.writer = Some(writer);
        slot.ifindex = device_index(&slot.bind);
        slot.reader =
            Some(tokio::spawn(crate::driver::read_path(shared.clone(), reader)).abort_handle());
        self.generation.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }

    /// The sockets bound at start-up, by slot, for [`PathSockets::install`].
    pub(crate) fn take_pending(&mut self) -> Vec<(usize, std::net::UdpSocket)> {
        self.slots
            .iter_mut()
            .enumerate()
            .filter_map(|(k, s)| s.pending.take().map(|p| (k, p)))
            .collect()
    }
}

/// Takes slot `k` down in the driver and its path down in every session on shard 0 (a
/// forward's multipath sessions live there), once: logged at info with `why`.
pub(crate) fn set_down(shared: &Shared, k: usize, why: &dyn std::fmt::Display) {
    let Some(sockets) = shared.path_sockets.as_ref() else {
        return;
    };
    let path = {
        let mut s = lock(sockets);
        let path = s.path_of(k);
        let Some(slot) = s.slots.get_mut(k).filter(|s| s.up) else {
            return;
        };
        slot.up = false;
        tracing::info!(path = k, bind = %slot.bind, error = %why, "path down: its flight goes over the other paths");
        path
    };
    if let Some(id) = path {
        for_sessions(shared, |c, now| {
            c.set_path_down(now, id);
        });
    }
}

/// Locks the path sockets (a panic while holding the lock is a bug elsewhere; the
/// state stays usable).
pub(crate) fn lock(m: &Mutex<PathSockets>) -> std::sync::MutexGuard<'_, PathSockets> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The monitor: every [`CHECK_EVERY`] checks each path ([`check`]) toward the session's
/// peer; a path that fails goes down, one that works again (or whose interface was
/// re-created) is brought up in every session, which validates it again ([`bring_up`]).
/// Ends when the driver stops.
pub(crate) async fn monitor(shared: Arc<Shared>) {
    let Some(sockets) = shared.path_sockets.as_ref() else {
        return;
    };
    let count = shared.shards().len();
    let stopped = async {
        let mut rx = shared.stopped.subscribe();
        let _ = rx.wait_for(|s| *s >= count).await;
    };
    tokio::pin!(stopped);
    let mut tick = tokio::time::interval(CHECK_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            () = &mut stopped => return,
        }
        let peer = {
            let inner = shared.shards()[0].lock();
            let remote = inner
                .endpoint
                .handles()
                .into_iter()
                .find_map(|h| inner.endpoint.connection(h).map(|c| c.remote()));
            remote.or_else(|| lock(sockets).peers.first().copied())
        };
        let Some(peer) = peer else { continue };
        let n = lock(sockets).slots.len();
        for k in 0..n {
            let (bind, up, ifindex) = {
                let s = lock(sockets);
                (s.slots[k].bind.clone(), s.slots[k].up, s.slots[k].ifindex)
            };
            match (up, check(&bind, peer)) {
                (true, Err(e)) => set_down(&shared, k, &e),
                (false, Ok(())) => bring_up(&shared, sockets, k, &bind, peer),
                (true, Ok(())) if ifindex != device_index(&bind) => {
                    // Deleted and created again between two checks: the socket still
                    // names the old device.
                    set_down(&shared, k, &"interface re-created");
                    bring_up(&shared, sockets, k, &bind, peer);
                }
                (true, Ok(())) => {
                    // The sockets' lock is released before a shard's is taken (the
                    // driver takes them the other way round, in `open_paths`).
                    let id = lock(sockets).path_of(k);
                    if let Some(id) = id {
                        for_sessions(&shared, |c, now| {
                            c.set_path_up(now, id);
                        });
                    }
                }
                (false, Err(_)) => {}
            }
        }
    }
}

/// Slot `k` works again: a fresh socket unless its own still works, then its path up in
/// every session.
fn bring_up(
    shared: &Arc<Shared>,
    sockets: &Mutex<PathSockets>,
    k: usize,
    bind_to: &PathBind,
    peer: SocketAddr,
) {
    let keep = lock(sockets)
        .slots
        .get(k)
        .is_some_and(Slot::socket_still_works);
    let fresh = if keep {
        Ok(())
    } else {
        bind(bind_to, &[peer]).and_then(|s| lock(sockets).install(shared, k, s))
    };
    if let Err(e) = fresh {
        tracing::debug!(path = k, bind = %bind_to, error = %e, "path works but its socket does not bind yet");
        return;
    }
    let path = {
        let mut s = lock(sockets);
        if let Some(slot) = s.slots.get_mut(k) {
            slot.up = true;
        }
        s.path_of(k)
    };
    tracing::info!(path = k, bind = %bind_to, "path up: validating it again");
    if let Some(id) = path {
        for_sessions(shared, |c, now| {
            c.set_path_up(now, id);
        });
    }
}

/// Runs `f` on every session of shard 0 (where a forward's sessions live), then wakes it.
fn for_sessions(shared: &Shared, f: impl Fn(&mut ctcp_proto::Connection, std::time::Instant)) {
    let shard = &shared.shards()[0];
    let mut inner = shard.lock();
    let now = crate::clock::now();
    for h in inner.endpoint.handles() {
        if let Some(c) = inner.endpoint.connection_mut(h) {
            f(c, now);
        }
    }
    drop(inner);
    shard.wake.notify_one();
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

    #[test]
    fn a_path_is_checked_by_its_interface_address_and_route() {
        let peer = "127.0.0.1:7000".parse().unwrap();
        assert!(check(&PathBind::Address("127.0.0.1".parse().unwrap()), peer).is_ok());
        // An address this host does not hold (TEST-NET-3).
        let gone = check(&PathBind::Address("203.0.113.9".parse().unwrap()), peer).unwrap_err();
        assert!(is_link_error(&gone), "{gone}");
        let missing = check(&PathBind::Device("ctcp-no-such0".into()), peer).unwrap_err();
        assert!(is_link_error(&missing), "{missing}");
        assert!(!is_link_error(&io::Error::from(io::ErrorKind::WouldBlock)));
    }

    #[test]
    fn a_missing_path_does_not_stop_the_others_and_path_0_is_one_that_works() {
        let peers = ["127.0.0.1:7000".parse().unwrap()];
        let binds = [
            PathBind::Device("ctcp-no-such0".into()),
            PathBind::Address("127.0.0.1".parse().unwrap()),
        ];
        let s = PathSockets::bind_all(&binds, &peers).unwrap();
        assert_eq!(s.lead_addr().unwrap().ip().to_string(), "127.0.0.1");
        assert_eq!(s.order, [1, 0], "the working path leads");
        assert_eq!(s.links(), ["127.0.0.1", "ctcp-no-such0"]);
        assert_eq!(s.path_of(1), Some(0));
        assert!(!s.slots[0].up && s.slots[1].up);
        assert!(
            s.slots[0].pending.is_none(),
            "nothing bound for the missing one"
        );
        let none = PathSockets::bind_all(&binds[..1], &peers).unwrap_err();
        assert_eq!(none.0, 0);
    }

    #[test]
    fn a_new_session_starts_on_the_first_slot_that_is_up() {
        let peers = ["127.0.0.1:7000".parse().unwrap()];
        let a = PathBind::Address("127.0.0.1".parse().unwrap());
        let mut s = PathSockets::bind_all(&[a.clone(), a.clone(), a], &peers).unwrap();
        assert_eq!(s.order, [0, 1, 2]);
        let g = s.generation.load(Ordering::Acquire);
        assert_eq!(s.map_new_session(), None);
        assert_eq!(s.generation.load(Ordering::Acquire), g, "nothing moved");
        s.slots[0].up = false;
        assert_eq!(s.map_new_session(), Some(1));
        assert_eq!(
            s.order,
            [1, 0, 2],
            "the others follow in configuration order"
        );
        assert!(
            s.generation.load(Ordering::Acquire) > g,
            "the driver re-reads"
        );
        assert_eq!(
            (s.path_of(1), s.path_of(0), s.path_of(2)),
            (Some(0), Some(1), Some(2))
        );
        assert!(s.path_is_up(0) && !s.path_is_up(1) && s.path_is_up(2));
        s.slots[1].up = false;
        assert_eq!(s.map_new_session(), Some(2));
        assert_eq!(s.order, [2, 0, 1]);
        // Nothing up: the last lead stays (its handshake fails and the session is retried).
        s.slots[2].up = false;
        assert_eq!(s.map_new_session(), None);
        assert_eq!(s.order, [2, 0, 1]);
        s.slots[0].up = true;
        assert_eq!(s.map_new_session(), Some(0));
        assert_eq!(s.order, [0, 1, 2]);
    }

    /// Open descriptors of this process.
    fn open_fds() -> usize {
        std::fs::read_dir("/proc/self/fd").map_or(0, Iterator::count)
    }

    #[tokio::test]
    async fn re_binding_a_path_many_times_leaves_the_descriptors_flat() {
        let peers = ["127.0.0.1:7000".parse().unwrap()];
        let binds = [
            PathBind::Address("127.0.0.1".parse().unwrap()),
            PathBind::Address("127.0.0.1".parse().unwrap()),
        ];
        let sockets = PathSockets::bind_all(&binds, &peers).unwrap();
        let endpoint = ctcp_proto::Endpoint::new(
            ctcp_proto::EndpointConfig::new(
                ctcp_proto::Psk::new(&[3; 32]).unwrap(),
                ctcp_proto::TransportConfig::default(),
                false,
            ),
            [4; 32],
        );
        let (_stop, rx) = tokio::sync::watch::channel(false);
        let (driver, _channels) = crate::Driver::spawn_multipath(endpoint, sockets, rx).unwrap();
        let shared = driver.shared.clone();
        let m = shared.path_sockets.clone().unwrap();
        let before = open_fds();
        // Each re-bind opens a socket (two descriptors) and must close the one it replaces:
        // a leak would add 2,000 descriptors over these 1,000 flaps (the count of
        // path-change events). Path 0's slot re-binds like the others.
        for i in 0..1000 {
            let socket = bind(&binds[i % 2], &peers).unwrap();
            lock(&m).install(&shared, i % 2, socket).unwrap();
            tokio::task::yield_now().await;
        }
        // Aborted readers drop their socket when the runtime next polls them.
        tokio::time::sleep(Duration::from_millis(50)).await;
        let after = open_fds();
        assert!(
            after < before + 100,
            "descriptors grew from {before} to {after} over 1,000 re-binds"
        );
        assert!(lock(&m).writer(0).is_some() && lock(&m).writer(1).is_some());
    }

    #[tokio::test]
    async fn a_slot_keeps_its_socket_unless_its_interface_was_re_created() {
        let peers = ["127.0.0.1:7000".parse().unwrap()];
        let binds = [
            PathBind::Device("lo".into()),
            PathBind::Address("127.0.0.1".parse().unwrap()),
        ];
        let mut s = PathSockets::bind_all(&binds, &peers).unwrap();
        for slot in &mut s.slots {
            assert!(!slot.socket_still_works(), "nothing installed yet");
            let socket = slot.pending.take().unwrap();
            slot.writer = Some(Arc::new(UdpIo::new(socket).unwrap()));
        }
        assert!(s.slots[0].ifindex.is_some());
        assert!(s.slots.iter().all(Slot::socket_still_works));
        // The same name with another index: a device deleted and created again.
        s.slots[0].ifindex = s.slots[0].ifindex.map(|i| i + 1000);
        assert!(!s.slots[0].socket_still_works());
    }
}
