//! Datagrams through the tunnel (issue 27): the driver hands the datagrams a session
//! receives to the role's datagram relay (SOCKS UDP ASSOCIATE and the UDP TPROXY listener
//! on the forward side, per-flow UDP sockets on the reverse side) through a bounded
//! channel; a full channel drops (counted).

use crate::driver::Inner;
use ctcp_proto::{ConnectionHandle, DatagramStats};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tokio::sync::mpsc;

/// Datagrams a role has not taken yet, at most.
pub const INBOX_DATAGRAMS: usize = 1024;

/// Where the driver puts received datagrams: set by the role that relays them.
#[derive(Debug, Default)]
pub(crate) struct Inbox {
    pub(crate) tx: Option<mpsc::Sender<(ConnectionHandle, Vec<u8>)>>,
    /// Datagrams dropped because no relay took them in time (or none is set).
    pub(crate) dropped: Arc<AtomicU64>,
    /// Sessions' datagram counters as last seen, and those of sessions gone since
    /// ([`Driver::datagram_totals`]).
    seen: HashMap<ConnectionHandle, DatagramStats>,
    retired: DatagramStats,
}

impl Inbox {
    /// Keeps an ending session's final datagram counters, so the totals count everything
    /// it did after the last snapshot.
    pub(crate) fn on_session_lost(&mut self, h: ConnectionHandle, last: Option<DatagramStats>) {
        if let Some(st) = last {
            self.seen.insert(h, st);
        }
    }
}

/// Adds `b`'s counters to `a`.
fn add_stats(a: &mut DatagramStats, b: &DatagramStats) {
    a.sent += b.sent;
    a.sent_bytes += b.sent_bytes;
    a.repairs_sent += b.repairs_sent;
    a.repair_bytes += b.repair_bytes;
    a.queue_dropped += b.queue_dropped;
    a.expired += b.expired;
    a.received += b.received;
    a.recovered += b.recovered;
    a.inbox_dropped += b.inbox_dropped;
    a.rejected += b.rejected;
}

impl Driver {
    /// The datagram counters of every session this driver has held, live or ended: a
    /// session's counters are kept as last seen here (at each call, each second while a
    /// datagram relay runs, and when the session ends, from its final state).
    pub fn datagram_totals(&self) -> DatagramStats {
        let mut total = DatagramStats::default();
        for s in self.shared.shards() {
            add_stats(&mut total, &shard_datagram_totals(&mut s.lock()));
        }
        total
    }

    /// Datagrams the driver received that no relay took (its channel was full).
    pub fn datagrams_unrelayed(&self) -> u64 {
        self.shared
            .shards()
            .iter()
            .map(|s| s.lock().datagrams.dropped.load(Ordering::Relaxed))
            .sum()
    }
}

/// One shard's datagram counters, live and ended sessions'.
fn shard_datagram_totals(inner: &mut Inner) -> DatagramStats {
    let Inner {
        endpoint,
        datagrams,
        ..
    } = inner;
    let live: HashMap<ConnectionHandle, DatagramStats> = endpoint
        .handles()
        .into_iter()
        .filter_map(|h| endpoint.connection(h).map(|c| (h, c.datagram_stats())))
        .collect();
    let gone: Vec<ConnectionHandle> = datagrams
        .seen
        .keys()
        .filter(|h| !live.contains_key(h))
        .copied()
        .collect();
    for h in gone {
        if let Some(st) = datagrams.seen.remove(&h) {
            add_stats(&mut datagrams.retired, &st);
        }
    }
    let mut total = datagrams.retired;
    for st in live.values() {
        add_stats(&mut total, st);
    }
    datagrams.seen = live;
    total
}

/// Keeps [`Driver::datagram_totals`] current while a relay runs.
fn spawn_totals_ticker(driver: &Driver) {
    let d = driver.clone();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        let stopped = d.stopped();
        tokio::pin!(stopped);
        loop {
            tokio::select! {
                _ = tick.tick() => {
                    d.datagram_totals();
                }
                () = &mut stopped => break,
            }
        }
    });
}

/// The driver hook: moves what session `h` received into the role's channel.
pub(crate) fn on_received(inner: &mut Inner, h: ConnectionHandle) {
    let Some(c) = inner.endpoint.connection_mut(h) else {
        return;
    };
    while let Some(d) = c.poll_datagram() {
        let taken = inner
            .datagrams
            .tx
            .as_ref()
            .is_some_and(|tx| tx.try_send((h, d)).is_ok());
        if !taken {
            inner.datagrams.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }
}

use crate::acl::Acl;
use crate::clock;
use crate::driver::Driver;
use crate::live::Live;
use ctcp_socks5::{Reply, TargetAddr, UdpHeader, UdpHeaderError};
use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::AtomicU32;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UdpSocket};

/// Process-wide datagram counters (metrics).
#[derive(Debug, Default)]
pub struct UdpCounters {
    /// SOCKS UDP associations opened.
    pub associations: AtomicU64,
    /// Flows opened (forward: per association and target; reverse: sockets).
    pub flows_opened: AtomicU64,
    /// Reverse flows closed for idleness.
    pub flows_idle_closed: AtomicU64,
    /// Reverse flows evicted at the flow cap.
    pub flows_evicted: AtomicU64,
    /// Datagrams relayed into the tunnel.
    pub to_tunnel: AtomicU64,
    /// Datagrams relayed out of the tunnel.
    pub from_tunnel: AtomicU64,
    /// Dropped: SOCKS fragments (FRAG ≠ 0).
    pub dropped_fragment: AtomicU64,
    /// Dropped: from an address other than the associated client.
    pub dropped_wrong_source: AtomicU64,
    /// Dropped: a SOCKS header with an unknown address type, or malformed.
    pub dropped_bad_header: AtomicU64,
    /// Dropped: the reverse side's ACL denies the target, or it did not resolve.
    pub dropped_denied: AtomicU64,
    /// Dropped: the session refused it (too large, no datagrams, no session).
    pub dropped_session: AtomicU64,
    /// Dropped: a flow could not be opened (a transparent flow's reply socket failed, or
    /// too many names were resolving for a new reverse flow, or its held datagrams were
    /// full), or a short-header datagram named a flow the reverse side does not know.
    pub dropped_no_flow: AtomicU64,
    /// Dropped: a reply out of the tunnel that never reached its client (its flow was
    /// closed, its queue was full, or the send to the client failed).
    pub dropped_reply: AtomicU64,
}

/// The process's datagram counters.
pub static COUNTERS: UdpCounters = UdpCounters {
    associations: AtomicU64::new(0),
    flows_opened: AtomicU64::new(0),
    flows_idle_closed: AtomicU64::new(0),
    flows_evicted: AtomicU64::new(0),
    to_tunnel: AtomicU64::new(0),
    from_tunnel: AtomicU64::new(0),
    dropped_fragment: AtomicU64::new(0),
    dropped_wrong_source: AtomicU64::new(0),
    dropped_bad_header: AtomicU64::new(0),
    dropped_denied: AtomicU64::new(0),
    dropped_session: AtomicU64::new(0),
    dropped_no_flow: AtomicU64::new(0),
    dropped_reply: AtomicU64::new(0),
};

fn count(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

/// Points the driver's received datagrams at a new channel and returns its receiver.
pub(crate) fn install(driver: &Driver) -> mpsc::Receiver<(ConnectionHandle, Vec<u8>)> {
    let (tx, rx) = mpsc::channel(INBOX_DATAGRAMS);
    for s in driver.shared.shards() {
        s.lock().datagrams.tx = Some(tx.clone());
    }
    spawn_totals_ticker(driver);
    rx
}

// ---------------------------------------------------------------- flow header

/// Set in a forward → reverse datagram's flow id (bit 31 of the little-endian `u32`): the
/// short header, no target after the id; the reverse side routes it by the target an
/// earlier full-header datagram of the flow named. Flow ids themselves stay below it.
pub(crate) const SHORT_HEADER: u32 = 1 << 31;
/// A flow's first datagrams on a session all carry the full header, so the reverse side
/// learns the target even if several of them are lost.
pub(crate) const FULL_HEADERS_FIRST: u64 = 8;
/// After those, every this many-th datagram of the flow carries the full header again:
/// a reverse side that missed the first ones, or forgot the flow (idle timeout, eviction
/// at the cap, restart), relearns the target within this many datagrams.
pub(crate) const FULL_HEADER_EVERY: u64 = 64;

/// A flow's datagram as it rides the session with the full header: flow id
/// (little-endian), target, payload.
pub(crate) fn encode_flow(id: u32, target: &TargetAddr, payload: &[u8]) -> Vec<u8> {
    let mut p = Vec::with_capacity(payload.len() + 24);
    p.extend_from_slice(&(id & !SHORT_HEADER).to_le_bytes());
    target.encode(&mut p);
    p.extend_from_slice(payload);
    p
}

/// A flow's datagram with the short header: flow id with [`SHORT_HEADER`] set, payload.
pub(crate) fn encode_flow_short(id: u32, payload: &[u8]) -> Vec<u8> {
    let mut p = Vec::with_capacity(payload.len() + 4);
    p.extend_from_slice(&(id | SHORT_HEADER).to_le_bytes());
    p.extend_from_slice(payload);
    p
}

/// A forward → reverse datagram's header, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum FlowHeader {
    /// The flow id and its target.
    Full(u32, TargetAddr),
    /// The flow id alone: the target is the one the reverse side learnt for it.
    Short(u32),
}

impl FlowHeader {
    /// The flow id.
    pub(crate) fn id(&self) -> u32 {
        match self {
            FlowHeader::Full(id, _) | FlowHeader::Short(id) => *id,
        }
    }
}

/// Parses a forward → reverse datagram into its header and payload; `None` if it is too
/// short or its target malformed (unknown address type, empty name, cut short).
pub(crate) fn decode_flow(d: &[u8]) -> Option<(FlowHeader, &[u8])> {
    let raw = u32::from_le_bytes(d.get(..4)?.try_into().ok()?);
    let rest = &d[4..];
    if raw & SHORT_HEADER != 0 {
        return Some((FlowHeader::Short(raw & !SHORT_HEADER), rest));
    }
    let (target, used) = TargetAddr::decode(rest).ok()??;
    Some((FlowHeader::Full(raw, target), rest.get(used..)?))
}

/// The sending side of one flow's header: which of its datagrams carry the target.
/// Counted per session, so a flow moved onto a new session (the old one lost) starts
/// again with full headers, as the new session's reverse side has never seen it.
#[derive(Debug, Clone)]
pub(crate) struct FlowSender {
    id: u32,
    session: Option<ConnectionHandle>,
    sent: u64,
}

impl FlowSender {
    /// A flow with id `id` that has sent nothing yet.
    pub(crate) fn new(id: u32) -> Self {
        FlowSender {
            id,
            session: None,
            sent: 0,
        }
    }

    /// The flow id.
    pub(crate) fn id(&self) -> u32 {
        self.id
    }

    /// Wraps `payload` for session `h`: the full header on the flow's first
    /// [`FULL_HEADERS_FIRST`] datagrams on that session and on every
    /// [`FULL_HEADER_EVERY`]-th after, the short one otherwise.
    pub(crate) fn encode(
        &mut self,
        h: ConnectionHandle,
        target: &TargetAddr,
        payload: &[u8],
    ) -> Vec<u8> {
        if self.session != Some(h) {
            self.session = Some(h);
            self.sent = 0;
        }
        let n = self.sent;
        self.sent += 1;
        if n < FULL_HEADERS_FIRST || n.is_multiple_of(FULL_HEADER_EVERY) {
            encode_flow(self.id, target, payload)
        } else {
            encode_flow_short(self.id, payload)
        }
    }
}

/// Hands `payload` to session `h` as a datagram (counted: relayed, or dropped by it).
pub(crate) fn send_into(driver: &Driver, h: ConnectionHandle, payload: &[u8]) {
    let ok = driver
        .with_conn(h, |c, _| c.send_datagram(clock::now(), payload).is_ok())
        .unwrap_or(false);
    count(if ok {
        &COUNTERS.to_tunnel
    } else {
        &COUNTERS.dropped_session
    });
}

/// Largest UDP datagram read.
const MAX_UDP: usize = 65_535;

// ---------------------------------------------------------------- forward side

pub(crate) type ToClient = mpsc::Sender<(TargetAddr, Vec<u8>)>;

/// The forward side's flows: flow id → (target, the association it belongs to).
#[derive(Debug, Default)]
pub struct ForwardFlows {
    flows: Mutex<HashMap<u32, (TargetAddr, ToClient)>>,
    next: AtomicU32,
}

impl ForwardFlows {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u32, (TargetAddr, ToClient)>> {
        self.flows
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Registers a flow to `target` whose replies go to `tx`; returns its id.
    pub(crate) fn open(&self, target: TargetAddr, tx: ToClient) -> u32 {
        // Ids wrap below the short-header flag (2^31 flows apart).
        let id = self.next.fetch_add(1, Ordering::Relaxed) & !SHORT_HEADER;
        self.lock().insert(id, (target, tx));
        id
    }

    /// Forgets flow `id`: replies for it are dropped from now on.
    pub(crate) fn close(&self, id: u32) {
        self.lock().remove(&id);
    }
}

/// Starts the forward side's dispatcher: datagrams from the reverse side go to the
/// association whose flow they name.
pub(crate) fn start_forward(driver: &Driver) -> Arc<ForwardFlows> {
    let flows = Arc::new(ForwardFlows::default());
    let mut rx = install(driver);
    let f = flows.clone();
    tokio::spawn(async move {
        while let Some((_, d)) = rx.recv().await {
            let Some(id) = d
                .get(..4)
                .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            else {
                continue;
            };
            let dest = f.lock().get(&id).cloned();
            let taken =
                dest.is_some_and(|(target, tx)| tx.try_send((target, d[4..].to_vec())).is_ok());
            count(if taken {
                &COUNTERS.from_tunnel
            } else {
                &COUNTERS.dropped_reply
            });
        }
    });
    flows
}

/// The client an association takes datagrams from: the address its request named, or
/// (zeros) the first sender from the TCP client's IP.
fn client_matches(
    expected: &mut Option<SocketAddr>,
    tcp_peer: SocketAddr,
    src: SocketAddr,
) -> bool {
    match expected {
        Some(e) => *e == src,
        None if src.ip() == tcp_peer.ip() => {
            *expected = Some(src);
            true
        }
        None => false,
    }
}

/// One SOCKS UDP ASSOCIATE: a UDP socket for the client, relayed into `session` as
/// datagrams, for as long as the TCP control connection lives.
///
/// # Errors
/// I/O errors of the control connection or the socket setup.
pub(crate) async fn associate(
    mut tcp: TcpStream,
    from: SocketAddr,
    hint: TargetAddr,
    driver: Driver,
    session: ConnectionHandle,
    flows: Arc<ForwardFlows>,
) -> io::Result<()> {
    let local = tcp.local_addr()?;
    let udp = UdpSocket::bind(SocketAddr::new(crate::transparent::unmap(local).ip(), 0)).await?;
    let bound = udp.local_addr()?;
    driver.count_socks_reply(Reply::Succeeded.code());
    tcp.write_all(&Reply::Succeeded.encode(bound)).await?;
    count(&COUNTERS.associations);
    let mut expected = match hint {
        TargetAddr::Ip(a) if !a.ip().is_unspecified() && a.port() != 0 => Some(a),
        _ => None,
    };
    let (tx, mut rx) = mpsc::channel::<(TargetAddr, Vec<u8>)>(256);
    let mut mine: HashMap<TargetAddr, FlowSender> = HashMap::new();
    let mut buf = vec![0u8; MAX_UDP];
    let mut ctl = [0u8; 64];
    tracing::debug!(%from, %bound, "UDP association open");
    let result = loop {
        tokio::select! {
            r = tcp.read(&mut ctl) => match r {
                Ok(0) => {
                    tracing::debug!("control connection closed");
                    break Ok(());
                }
                Ok(_) => {}
                Err(e) => break Err(e),
            },
            r = udp.recv_from(&mut buf) => {
                let Ok((n, src)) = r else { continue };
                tracing::trace!(%src, n, "client datagram");
                if !client_matches(&mut expected, from, src) {
                    count(&COUNTERS.dropped_wrong_source);
                    continue;
                }
                let h = match UdpHeader::parse(&buf[..n]) {
                    Ok(h) => h,
                    Err(UdpHeaderError::Short | UdpHeaderError::Reserved | UdpHeaderError::Address(_)) => {
                        count(&COUNTERS.dropped_bad_header);
                        continue;
                    }
                };
                if h.frag != 0 {
                    count(&COUNTERS.dropped_fragment);
                    continue;
                }
                let flow = mine.entry(h.addr.clone()).or_insert_with(|| {
                    count(&COUNTERS.flows_opened);
                    FlowSender::new(flows.open(h.addr.clone(), tx.clone()))
                });
                let d = flow.encode(session, &h.addr, &buf[h.len..n]);
                send_into(&driver, session, &d);
            }
            Some((addr, data)) = rx.recv() => {
                let Some(client) = expected else { continue };
                let mut out = Vec::with_capacity(data.len() + 22);
                UdpHeader::encode(&addr, &mut out);
                out.extend_from_slice(&data);
                if udp.send_to(&out, client).await.is_err() {
                    count(&COUNTERS.dropped_reply);
                }
            }
        }
    };
    tracing::debug!(%from, %bound, ?result, "UDP association closed");
    let mut f = flows.lock();
    for flow in mine.values() {
        f.remove(&flow.id());
    }
    result
}

// ---------------------------------------------------------------- reverse side

/// Limits of the reverse side's flows.
#[derive(Debug, Clone, Copy)]
pub struct FlowLimits {
    /// Most flows (UDP sockets) at once; at the cap the least recently active goes.
    pub max_flows: usize,
    /// A flow with no datagram either way for this long is closed.
    pub idle_timeout: Duration,
}

impl Default for FlowLimits {
    /// The configuration's defaults (`udp_max_flows`, `udp_idle_timeout`).
    fn default() -> Self {
        FlowLimits::from(ctcp_config::UdpFlowConfig::default())
    }
}

impl From<ctcp_config::UdpFlowConfig> for FlowLimits {
    fn from(c: ctcp_config::UdpFlowConfig) -> Self {
        FlowLimits {
            max_flows: c.max_flows,
            idle_timeout: c.idle_timeout,
        }
    }
}

struct Flow {
    socket: Arc<UdpSocket>,
    last: Arc<Mutex<Instant>>,
    reader: tokio::task::JoinHandle<()>,
}

impl Drop for Flow {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

fn touch(last: &Mutex<Instant>) {
    *last
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = clock::now();
}

fn last_of(f: &Flow) -> Instant {
    *f.last
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Longest a UDP flow's name lookup may take; its datagrams are dropped after that.
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(5);
/// Names resolving at once, at most: a new flow's first datagram beyond that is dropped
/// (counted as `no_flow`), so a flood of names cannot pile up lookups.
const MAX_RESOLVING: usize = 64;
/// Datagrams a flow whose name is resolving holds, at most (the rest are dropped).
const PENDING_DATAGRAMS: usize = 8;
/// Bytes a reverse flow reads from its target at most: more than any session carries in
/// one datagram (`transport.symbol_size` is at most 1,408, so a flow's payload at most
/// 1,402 bytes), so a longer reply is seen as such and dropped rather than cut short.
/// Each flow's reader holds one such buffer, most of a flow's memory, so it times
/// `udp_max_flows` bounds what the readers hold.
const FLOW_READ: usize = 1536;

async fn resolve(host: &str, port: u16) -> Option<SocketAddr> {
    tokio::time::timeout(RESOLVE_TIMEOUT, tokio::net::lookup_host((host, port)))
        .await
        .ok()?
        .ok()?
        .next()
}

/// A name lookup's result, for the flow it was started for.
type Resolved = ((ConnectionHandle, u32), Option<SocketAddr>);

/// The reverse side's flows, and those waiting for their target's name to resolve.
struct ReverseFlows {
    driver: Driver,
    acl: Live<Acl>,
    limits: FlowLimits,
    open: HashMap<(ConnectionHandle, u32), Flow>,
    /// Flows whose name is being resolved (off the relay's path, in a task each), with
    /// the datagrams they hold until it is.
    resolving: HashMap<(ConnectionHandle, u32), Vec<Vec<u8>>>,
    resolved: mpsc::Sender<Resolved>,
}

/// Starts the reverse side's relay: one UDP socket per flow, connected to its target,
/// under the same ACL as TCP targets, closed when idle, at most `limits.max_flows`.
/// A domain name target is resolved in a task of its own (at most [`MAX_RESOLVING`] at
/// once), so a slow lookup holds up only its own flow's datagrams, not the other flows'.
pub(crate) fn start_reverse(driver: &Driver, acl: Live<Acl>, limits: FlowLimits) {
    let mut rx = install(driver);
    let (resolved, mut resolved_rx) = mpsc::channel::<Resolved>(MAX_RESOLVING);
    let mut flows = ReverseFlows {
        driver: driver.clone(),
        acl,
        limits,
        open: HashMap::new(),
        resolving: HashMap::new(),
        resolved,
    };
    tokio::spawn(async move {
        let mut sweep = tokio::time::interval(Duration::from_secs(1).min(limits.idle_timeout));
        loop {
            tokio::select! {
                d = rx.recv() => {
                    let Some((h, d)) = d else { break };
                    flows.on_datagram(h, &d).await;
                }
                Some((key, addr)) = resolved_rx.recv() => flows.on_resolved(key, addr).await,
                _ = sweep.tick() => flows.sweep(),
            }
        }
    });
}

impl ReverseFlows {
    fn sweep(&mut self) {
        let before = self.open.len();
        let idle = self.limits.idle_timeout;
        self.open
            .retain(|_, f| clock::now().saturating_duration_since(last_of(f)) < idle);
        for _ in self.open.len()..before {
            count(&COUNTERS.flows_idle_closed);
        }
    }

    async fn on_datagram(&mut self, h: ConnectionHandle, d: &[u8]) {
        let Some((header, payload)) = decode_flow(d) else {
            count(&COUNTERS.dropped_bad_header);
            return;
        };
        let key = (h, header.id());
        tracing::trace!(
            flow = key.1,
            ?header,
            len = payload.len(),
            "datagram from the tunnel"
        );
        if let Some(f) = self.open.get(&key) {
            touch(&f.last);
            let _ = f.socket.send(payload).await;
            count(&COUNTERS.from_tunnel);
            return;
        }
        let target = match header {
            FlowHeader::Full(_, target) => target,
            FlowHeader::Short(_) => {
                // A flow whose name is still resolving holds it like any other; a flow
                // not known here (never learnt, idle-closed, evicted) waits for the next
                // full header, at most FULL_HEADER_EVERY datagrams on.
                match self.resolving.get_mut(&key) {
                    Some(held) if held.len() < PENDING_DATAGRAMS => held.push(payload.to_vec()),
                    _ => count(&COUNTERS.dropped_no_flow),
                }
                return;
            }
        };
        match target {
            TargetAddr::Ip(addr) => self.open_flow(key, Some(addr), &[payload]).await,
            TargetAddr::Domain(host, port) => {
                if let Some(held) = self.resolving.get_mut(&key) {
                    if held.len() < PENDING_DATAGRAMS {
                        held.push(payload.to_vec());
                    } else {
                        count(&COUNTERS.dropped_no_flow);
                    }
                    return;
                }
                if self.resolving.len() >= MAX_RESOLVING {
                    count(&COUNTERS.dropped_no_flow);
                    return;
                }
                self.resolving.insert(key, vec![payload.to_vec()]);
                let tx = self.resolved.clone();
                tokio::spawn(async move {
                    let addr = resolve(&host, port).await;
                    let _ = tx.send((key, addr)).await;
                });
            }
        }
    }

    async fn on_resolved(&mut self, key: (ConnectionHandle, u32), addr: Option<SocketAddr>) {
        let Some(held) = self.resolving.remove(&key) else {
            return;
        };
        let held: Vec<&[u8]> = held.iter().map(Vec::as_slice).collect();
        self.open_flow(key, addr, &held).await;
    }

    /// Opens flow `key` to `addr` (if it resolved and the ACL allows it; evicting the
    /// least recently active flow at the cap) and sends it `payloads`.
    async fn open_flow(
        &mut self,
        key: (ConnectionHandle, u32),
        addr: Option<SocketAddr>,
        payloads: &[&[u8]],
    ) {
        let Some(addr) = addr.filter(|a| self.acl.load().allows(*a)) else {
            for _ in payloads {
                count(&COUNTERS.dropped_denied);
            }
            return;
        };
        if self.open.len() >= self.limits.max_flows.max(1) {
            if let Some(k) = self
                .open
                .iter()
                .min_by_key(|(_, f)| last_of(f))
                .map(|(k, _)| *k)
            {
                self.open.remove(&k);
                count(&COUNTERS.flows_evicted);
            }
        }
        let bind = SocketAddr::new(
            if addr.is_ipv4() {
                std::net::Ipv4Addr::UNSPECIFIED.into()
            } else {
                std::net::Ipv6Addr::UNSPECIFIED.into()
            },
            0,
        );
        let socket = match UdpSocket::bind(bind).await {
            Ok(s) if s.connect(addr).await.is_ok() => Arc::new(s),
            _ => {
                for _ in payloads {
                    count(&COUNTERS.dropped_denied);
                }
                return;
            }
        };
        let (h, id) = key;
        let last = Arc::new(Mutex::new(clock::now()));
        let reader = {
            let (socket, last, driver) = (socket.clone(), last.clone(), self.driver.clone());
            tokio::spawn(async move {
                let mut buf = vec![0u8; 4 + FLOW_READ];
                buf[..4].copy_from_slice(&id.to_le_bytes());
                loop {
                    // A refused send (ICMP unreachable) shows as an error here: keep reading.
                    let Ok(n) = socket.recv(&mut buf[4..]).await else {
                        continue;
                    };
                    touch(&last);
                    if n >= FLOW_READ {
                        count(&COUNTERS.dropped_session); // longer than any session carries
                        continue;
                    }
                    send_into(&driver, h, &buf[..4 + n]);
                }
            })
        };
        for p in payloads {
            let _ = socket.send(p).await;
            count(&COUNTERS.from_tunnel);
        }
        count(&COUNTERS.flows_opened);
        self.open.insert(
            key,
            Flow {
                socket,
                last,
                reader,
            },
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v4() -> TargetAddr {
        TargetAddr::Ip("192.0.2.7:53".parse().expect("a literal address"))
    }

    #[test]
    fn full_and_short_headers_round_trip() {
        let targets = [
            v4(),
            TargetAddr::Ip("[2001:db8::1]:443".parse().expect("a literal address")),
            TargetAddr::Domain("example.org".into(), 53),
        ];
        for t in targets {
            let d = encode_flow(7, &t, b"payload");
            assert_eq!(
                decode_flow(&d),
                Some((FlowHeader::Full(7, t), &b"payload"[..]))
            );
        }
        // IPv4: 4 + 7 header bytes on the full form, 4 on the short one.
        assert_eq!(encode_flow(7, &v4(), b"x").len(), 12);
        let d = encode_flow_short(7, b"payload");
        assert_eq!(d.len(), 4 + 7);
        assert_eq!(
            decode_flow(&d),
            Some((FlowHeader::Short(7), &b"payload"[..]))
        );
        // Empty payloads are datagrams too.
        assert_eq!(
            decode_flow(&encode_flow_short(u32::MAX, b"")),
            Some((FlowHeader::Short(!SHORT_HEADER), &b""[..]))
        );
        // A full header never sets the flag, whatever id it is given.
        let d = encode_flow(u32::MAX, &v4(), b"");
        assert_eq!(decode_flow(&d).map(|(h, _)| h.id()), Some(!SHORT_HEADER));
    }

    #[test]
    fn malformed_headers_are_refused_not_misread() {
        for bad in [
            &[][..],
            &[1, 0, 0][..],                   // shorter than an id
            &[1, 0, 0, 0][..],                // full form with no target
            &[1, 0, 0, 0, 0x02, 1][..],       // unknown address type
            &[1, 0, 0, 0, 0x01, 1][..],       // IPv4 cut short
            &[1, 0, 0, 0, 0x03, 0][..],       // empty name
            &[1, 0, 0, 0, 0x03, 9, b'a'][..], // name cut short
        ] {
            assert_eq!(decode_flow(bad), None, "{bad:?}");
        }
        // Every prefix of a good datagram either parses or is refused; none panics.
        let d = encode_flow(3, &TargetAddr::Domain("a.example".into(), 5353), b"abc");
        for n in 0..=d.len() {
            let _ = decode_flow(&d[..n]);
        }
    }

    /// Which of a flow's first `n` datagrams on session `h` carry the target.
    fn full_positions(s: &mut FlowSender, h: u32, n: u64) -> Vec<u64> {
        (0..n)
            .filter(|_| {
                let d = s.encode(ConnectionHandle(h), &v4(), b"p");
                matches!(decode_flow(&d), Some((FlowHeader::Full(..), _)))
            })
            .collect()
    }

    #[test]
    fn the_target_rides_the_first_datagrams_then_every_64th() {
        let mut s = FlowSender::new(9);
        let full = full_positions(&mut s, 1, 200);
        assert_eq!(full, vec![0, 1, 2, 3, 4, 5, 6, 7, 64, 128, 192]);
        // Every datagram names the flow.
        let d = s.encode(ConnectionHandle(1), &v4(), b"p");
        assert_eq!(decode_flow(&d).map(|(h, _)| h.id()), Some(9));
    }

    #[test]
    fn a_new_session_relearns_the_flow_from_full_headers() {
        let mut s = FlowSender::new(9);
        let _ = full_positions(&mut s, 1, 100);
        // The session was lost and the flow moved to another: its reverse side has never
        // seen the flow, so the count starts again.
        assert_eq!(full_positions(&mut s, 2, 10), vec![0, 1, 2, 3, 4, 5, 6, 7]);
    }

    /// A reverse side that forgot the flow (or missed all its full headers) routes it
    /// again from the next full header: short ones in between are dropped, at most 63.
    #[test]
    fn a_forgetful_reverse_side_relearns_within_64_datagrams() {
        let mut s = FlowSender::new(4);
        let mut known: HashMap<u32, TargetAddr> = HashMap::new();
        let (mut delivered, mut dropped) = (0u64, 0u64);
        for i in 0..300u64 {
            if i == 100 {
                known.clear(); // the reverse side's flow was idle-closed or evicted
            }
            let d = s.encode(ConnectionHandle(1), &v4(), b"p");
            match decode_flow(&d) {
                Some((FlowHeader::Full(id, t), _)) => {
                    known.insert(id, t);
                    delivered += 1;
                }
                Some((FlowHeader::Short(id), _)) if known.get(&id) == Some(&v4()) => {
                    delivered += 1;
                }
                Some((FlowHeader::Short(_), _)) => dropped += 1,
                None => panic!("a sender's own datagram did not parse"),
            }
        }
        // Forgotten at 100, relearnt at 128.
        assert_eq!(dropped, 28);
        assert_eq!(delivered, 300 - 28);
    }
}
