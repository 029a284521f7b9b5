//! The driver: one task per shard, each owning a ctcp-proto `Endpoint` and its UDP socket;
//! it feeds the endpoint datagrams and timeouts, flushes what it wants to send, and routes
//! its events to stream tasks.
//!
//! A session lives on the shard that owns its connection id (`ctcp_proto::shard_of`), so
//! sessions on different shards never share a lock, and each shard runs on a thread of its
//! own: N shards use N cores. Stream tasks run on their session's shard's thread too and
//! reach the endpoint through the shard's mutex, held only for short, non-blocking calls;
//! they register wakers that the shard's task fires on readable/writable events.

use crate::clock;
use crate::udp::UdpIo;
use ctcp_proto::{
    shard_of, wire, ConnectionError, ConnectionHandle, Endpoint, Event, OpenResult, StreamId,
    Target,
};
use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::Waker;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot, watch, Notify};
use tokio::task::JoinSet;

/// GSO batches the driver has the endpoint write per lock hold before sending them.
const FLUSH_BATCHES: usize = 2;

/// A stream the peer opened (reverse role).
#[derive(Debug)]
pub struct IncomingStream {
    /// The session.
    pub conn: ConnectionHandle,
    /// The stream.
    pub id: StreamId,
    /// Where the peer wants us to connect.
    pub target: Target,
}

/// Session-level happenings the roles care about.
#[derive(Debug)]
pub enum SessionEvent {
    /// A session's handshake completed.
    Connected(ConnectionHandle),
    /// A session ended.
    Lost(ConnectionHandle, ConnectionError),
}

#[derive(Default)]
pub(crate) struct Wakers {
    pub(crate) read: HashMap<(ConnectionHandle, StreamId), Waker>,
    pub(crate) write: HashMap<(ConnectionHandle, StreamId), Waker>,
    pub(crate) open_results: HashMap<(ConnectionHandle, StreamId), oneshot::Sender<OpenResult>>,
}

/// One shard's state, shared between its driver task and the stream handles of its
/// sessions.
pub(crate) struct Inner {
    pub(crate) endpoint: Endpoint,
    pub(crate) wakers: Wakers,
    pub(crate) lost: HashMap<ConnectionHandle, ConnectionError>,
    /// Process-wide counters that outlive sessions (see `metrics`).
    pub(crate) totals: crate::metrics::Totals,
    /// Issue 27 hook: where received datagrams go (`crate::datagram`).
    pub(crate) datagrams: crate::datagram::Inbox,
    /// Multipath (issue 29): the forward's path sockets (one slot per configured path,
    /// each with its own socket); a session opens a path per slot beyond its first once its
    /// handshake completes, down where the slot is.
    pub(crate) paths: Option<Arc<Mutex<crate::paths::PathSockets>>>,
}

/// Handle to a running driver: one or more shards, each an `Endpoint` with its own
/// socket, lock and task.
#[derive(Clone)]
pub struct Driver {
    pub(crate) shared: Arc<Shared>,
}

/// A datagram one shard read for a session another shard owns.
type Routed = (SocketAddr, Vec<u8>);

/// Datagrams queued for another shard, at most; beyond it they are dropped (counted), as
/// a full socket buffer would drop them.
const ROUTE_QUEUE: usize = 1024;

/// One worker's share of the sessions: the sessions whose connection id it owns
/// (`ctcp_proto::shard_of`).
pub(crate) struct Shard {
    /// The shard's own single-threaded runtime, on a thread of its own: its driver task
    /// and the stream tasks of its sessions ([`Driver::spawn_stream_task`]) run there,
    /// so one session's work stays on one thread, with no wake-ups or lock contention
    /// across threads. `None` for a multipath shard, which runs on the caller's runtime.
    runtime: Option<tokio::runtime::Handle>,
    inner: Mutex<Inner>,
    /// Wakes this shard's driver task: a stream made something sendable, or a session
    /// was started or is to close.
    pub(crate) wake: Notify,
    /// Datagrams other shards read for this shard's sessions.
    routed: mpsc::Sender<Routed>,
}

impl Shard {
    pub(crate) fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock is a bug elsewhere; keep serving with the state as is.
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

pub(crate) struct Shared {
    shards: Box<[Shard]>,
    local_addr: SocketAddr,
    /// Set by [`Driver::close_all`]: close every session, then stop.
    closing: AtomicBool,
    /// Shards whose task has stopped; the driver has stopped when all have.
    pub(crate) stopped: watch::Sender<usize>,
    /// Where [`Driver::connect`] starts its next session (round-robin over shards).
    next_connect: AtomicUsize,
    /// Datagrams a shard read for another whose queue was full.
    route_dropped: AtomicU64,
    /// Multipath (issue 29): the forward's path sockets, if it has paths.
    pub(crate) path_sockets: Option<Arc<Mutex<crate::paths::PathSockets>>>,
    /// Moves when a path socket's writer or the path-to-slot order changes
    /// (`crate::paths::Writers`).
    path_generation: Arc<AtomicU64>,
}

impl Shared {
    /// The shard that owns session `h`.
    pub(crate) fn shard(&self, h: ConnectionHandle) -> &Shard {
        &self.shards[shard_of(h.0, self.shards.len())]
    }

    /// Every shard.
    pub(crate) fn shards(&self) -> &[Shard] {
        &self.shards
    }
}

impl std::fmt::Debug for Driver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Driver")
            .field("local_addr", &self.shared.local_addr)
            .field("shards", &self.shared.shards.len())
            .finish()
    }
}

/// A shard's own runtime, shut down without waiting when dropped: the usual drop blocks,
/// which tokio refuses (with a panic) inside another runtime, where a start that fails
/// halfway drops the runtimes it built.
struct ShardRuntime(Option<tokio::runtime::Runtime>);

impl Drop for ShardRuntime {
    fn drop(&mut self) {
        if let Some(rt) = self.0.take() {
            rt.shutdown_background();
        }
    }
}

/// Channels the driver reports on.
#[derive(Debug)]
pub struct DriverChannels {
    /// Streams opened by the peer.
    pub incoming: mpsc::UnboundedReceiver<IncomingStream>,
    /// Session lifecycle.
    pub sessions: mpsc::UnboundedReceiver<SessionEvent>,
}

/// The senders a shard task reports on.
#[derive(Clone)]
struct Reports {
    incoming: mpsc::UnboundedSender<IncomingStream>,
    sessions: mpsc::UnboundedSender<SessionEvent>,
}

impl Driver {
    /// Starts one driver task per `(endpoint, socket)` pair, each on a thread and
    /// single-threaded runtime of its own, and returns a handle plus the event channels.
    ///
    /// With more than one pair, the pairs are shards: the sockets share one address
    /// ([`crate::udp::bind_shards`]), endpoint `i` owns the connection ids
    /// `ctcp_proto::shard_of(id, n) == i`, and a datagram a shard reads for another's
    /// session is handed to the owner. Each shard has its own lock and thread, so
    /// sessions on different shards run on different cores.
    ///
    /// When `shutdown` turns true the endpoints stop accepting new sessions (an INITIATE
    /// is answered "busy") but live sessions carry on, so their streams can drain; the role
    /// then calls [`Driver::close_all`]. A task ends once shutdown or closing is set and
    /// its shard holds no session.
    ///
    /// # Errors
    /// Fails if a socket cannot be set up for asynchronous I/O, or a shard's thread or
    /// runtime cannot be started.
    ///
    /// # Panics
    /// If `shards` is empty.
    pub fn spawn(
        shards: Vec<(Endpoint, std::net::UdpSocket)>,
        shutdown: watch::Receiver<bool>,
    ) -> io::Result<(Driver, DriverChannels)> {
        let shards = shards.into_iter().map(|(e, s)| (e, Some(s))).collect();
        Self::spawn_paths(shards, None, shutdown)
    }

    /// Starts one driver over several local sockets, one per path (issue 29): each
    /// session's path 0 (the handshake) leaves from the first slot of `paths` that is up
    /// when the session starts, and once connected the session opens a path per further
    /// slot to its peer, in configuration order. Every slot's socket is written by the
    /// shard's task and read by a task of its own, so any of them can be re-bound.
    /// Datagrams read on any socket feed the one endpoint (a packet names its path
    /// itself). Paths come and go at run time (`crate::paths`).
    ///
    /// # Errors
    /// Fails if a socket cannot be set up for asynchronous I/O.
    pub(crate) fn spawn_multipath(
        endpoint: Endpoint,
        paths: crate::paths::PathSockets,
        shutdown: watch::Receiver<bool>,
    ) -> io::Result<(Driver, DriverChannels)> {
        Self::spawn_paths(vec![(endpoint, None)], Some(paths), shutdown)
    }

    /// [`Driver::spawn`] with multipath sockets on the first shard (which then has no
    /// socket of its own).
    fn spawn_paths(
        shards: Vec<(Endpoint, Option<std::net::UdpSocket>)>,
        paths: Option<crate::paths::PathSockets>,
        shutdown: watch::Receiver<bool>,
    ) -> io::Result<(Driver, DriverChannels)> {
        assert!(!shards.is_empty(), "a driver needs at least one shard");
        let mut local_addr = paths
            .as_ref()
            .map(crate::paths::PathSockets::lead_addr)
            .transpose()?;
        let path_generation = paths
            .as_ref()
            .map_or_else(Arc::default, crate::paths::PathSockets::generation);
        let path_sockets = paths.map(|p| Arc::new(Mutex::new(p)));
        let mut ios = Vec::with_capacity(shards.len());
        let mut states = Vec::with_capacity(shards.len());
        let mut receivers = Vec::with_capacity(shards.len());
        // Multipath sockets are re-bound by tasks on the caller's runtime; those shards
        // stay there too.
        let own_threads = path_sockets.is_none();
        let mut rts = Vec::with_capacity(shards.len());
        for (mut endpoint, socket) in shards {
            let rt = ShardRuntime(
                own_threads
                    .then(|| {
                        tokio::runtime::Builder::new_current_thread()
                            .enable_all()
                            .build()
                    })
                    .transpose()?,
            );
            // The socket's readiness then comes from the shard's own reactor.
            let io = {
                let _runtime = rt.0.as_ref().map(tokio::runtime::Runtime::enter);
                socket.map(UdpIo::new).transpose()?
            };
            if let Some(io) = &io {
                local_addr.get_or_insert(io.local_addr()?);
            }
            endpoint.set_wall_clock(clock::now(), clock::unix_ms());
            let (routed, rx) = mpsc::channel(ROUTE_QUEUE);
            let first = states.is_empty();
            states.push(Shard {
                runtime: rt.0.as_ref().map(|r| r.handle().clone()),
                inner: Mutex::new(Inner {
                    endpoint,
                    wakers: Wakers::default(),
                    lost: HashMap::new(),
                    totals: crate::metrics::Totals::default(),
                    datagrams: crate::datagram::Inbox::default(),
                    paths: path_sockets.clone().filter(|_| first),
                }),
                wake: Notify::new(),
                routed,
            });
            ios.push(io);
            receivers.push(rx);
            rts.push(rt);
        }
        let shared = Arc::new(Shared {
            shards: states.into_boxed_slice(),
            local_addr: local_addr.ok_or_else(|| io::Error::other("a shard without a socket"))?,
            closing: AtomicBool::new(false),
            stopped: watch::channel(0).0,
            next_connect: AtomicUsize::new(0),
            route_dropped: AtomicU64::new(0),
            path_sockets,
            path_generation,
        });
        let (incoming_tx, incoming) = mpsc::unbounded_channel();
        let (sessions_tx, sessions) = mpsc::unbounded_channel();
        let reports = Reports {
            incoming: incoming_tx,
            sessions: sessions_tx,
        };
        let mut gso = None;
        if let Some(sockets) = &shared.path_sockets {
            // Each path socket is read by its own task and written by the shard's, through
            // two descriptors of one socket: reading needs the receive buffers to itself.
            let mut s = crate::paths::lock(sockets);
            for (k, socket) in s.take_pending() {
                s.install(&shared, k, socket)?;
                gso = gso.or_else(|| s.writer(k).map(|w| w.max_gso_segments()));
            }
            drop(s);
            tokio::spawn(crate::paths::monitor(shared.clone()));
        }
        for (index, ((io, routed), rt)) in ios.into_iter().zip(receivers).zip(rts).enumerate() {
            let gso = io
                .as_ref()
                .map_or(gso.unwrap_or(1), UdpIo::max_gso_segments);
            let fut = run_shard(
                shared.clone(),
                index,
                io,
                gso,
                routed,
                reports.clone(),
                shutdown.clone(),
            );
            if rt.0.is_none() {
                tokio::spawn(fut);
                continue;
            }
            std::thread::Builder::new()
                .name(format!("ctcp-shard-{index}"))
                .spawn(move || {
                    if let Some(rt) = &rt.0 {
                        rt.block_on(fut);
                    }
                })?;
        }
        Ok((Driver { shared }, DriverChannels { incoming, sessions }))
    }

    /// Spawns a stream's task into `tasks` on the thread of the shard that owns `conn`
    /// (the first shard for `None`: a forward's only one), where its session's driver
    /// runs, or on the caller's runtime if that shard runs there.
    pub(crate) fn spawn_stream_task<F>(
        &self,
        tasks: &mut JoinSet<()>,
        conn: Option<ConnectionHandle>,
        task: F,
    ) where
        F: Future<Output = ()> + Send + 'static,
    {
        match &self.shard_for(conn).runtime {
            Some(rt) => tasks.spawn_on(task, rt),
            None => tasks.spawn(task),
        };
    }

    /// [`Driver::spawn_stream_task`] for a task that serves an accepted TCP connection:
    /// the socket moves to the shard's reactor first, so its readiness wakes the shard's
    /// thread and no other. A socket that cannot move is dropped (the client sees a
    /// reset), with a debug line.
    pub(crate) fn spawn_tcp_task<F, Fut>(
        &self,
        tasks: &mut JoinSet<()>,
        conn: Option<ConnectionHandle>,
        tcp: tokio::net::TcpStream,
        task: F,
    ) where
        F: FnOnce(tokio::net::TcpStream) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        if self.shard_for(conn).runtime.is_none() {
            return self.spawn_stream_task(tasks, conn, task(tcp));
        }
        let moved = tcp.into_std();
        self.spawn_stream_task(tasks, conn, async move {
            match moved.and_then(tokio::net::TcpStream::from_std) {
                Ok(tcp) => task(tcp).await,
                Err(e) => tracing::debug!(error = %e, "could not move a connection to its shard"),
            }
        });
    }

    fn shard_for(&self, conn: Option<ConnectionHandle>) -> &Shard {
        match conn {
            Some(h) => self.shared.shard(h),
            None => &self.shared.shards[0],
        }
    }

    /// Closes every session (CLOSE to each peer) and stops the driver once they are gone.
    pub fn close_all(&self) {
        self.shared.closing.store(true, Ordering::Release);
        for s in self.shared.shards() {
            s.wake.notify_one();
        }
    }

    /// Completes when every shard's task has stopped.
    pub async fn stopped(&self) {
        let mut rx = self.shared.stopped.subscribe();
        let n = self.shared.shards.len();
        // The sender lives in `Shared`, which this handle keeps alive: `wait_for` ends only
        // when every shard has counted itself out.
        let _ = rx.wait_for(|s| *s >= n).await;
    }

    /// Whether closing every session now would lose nothing: no open stream, and every
    /// byte sent has been acknowledged by the peer.
    pub fn is_quiescent(&self) -> bool {
        self.shared.shards().iter().all(|s| {
            let inner = s.lock();
            inner.endpoint.handles().into_iter().all(|h| {
                inner
                    .endpoint
                    .connection(h)
                    .is_none_or(|c| c.is_quiescent())
            })
        })
    }

    /// Open streams across all sessions.
    pub fn open_streams(&self) -> usize {
        self.shared
            .shards()
            .iter()
            .map(|s| {
                let inner = s.lock();
                inner
                    .endpoint
                    .handles()
                    .into_iter()
                    .filter_map(|h| inner.endpoint.connection(h).map(|c| c.stream_count()))
                    .sum::<usize>()
            })
            .sum()
    }

    /// The UDP address the driver is bound to (every shard's socket shares it).
    pub fn local_addr(&self) -> SocketAddr {
        self.shared.local_addr
    }

    /// How many shards (endpoints, sockets and tasks) the driver runs.
    pub fn shard_count(&self) -> usize {
        self.shared.shards.len()
    }

    /// Datagrams one shard read for another whose queue was full, dropped.
    pub fn route_dropped(&self) -> u64 {
        self.shared.route_dropped.load(Ordering::Relaxed)
    }

    /// Starts a session to `remote` on the next shard (round-robin); the handshake runs
    /// in the background. A multipath forward's session starts on the first path that is
    /// up (`crate::paths::PathSockets::map_new_session`).
    pub fn connect(&self, remote: SocketAddr) -> ConnectionHandle {
        if let Some(sockets) = &self.shared.path_sockets {
            let mut s = crate::paths::lock(sockets);
            if let Some(lead) = s.map_new_session() {
                tracing::info!(path = lead, bind = %s.slots[lead].bind, "sessions start on this path (the first that is up)");
            }
        }
        let shards = self.shared.shards();
        let i = self.shared.next_connect.fetch_add(1, Ordering::Relaxed) % shards.len();
        let h = shards[i].lock().endpoint.connect(clock::now(), remote);
        shards[i].wake.notify_one();
        h
    }

    /// Runs `f` on a session with the lock held, then wakes the driver.
    pub(crate) fn with_conn<R>(
        &self,
        h: ConnectionHandle,
        f: impl FnOnce(&mut ctcp_proto::Connection, &mut Wakers) -> R,
    ) -> Result<R, ConnectionError> {
        self.with_conn_wake(h, |c, w| (f(c, w), true))
    }

    /// Runs `f` on a session with its shard's lock held; wakes that shard's task only if
    /// `f` says the call made something sendable (or the session is gone).
    pub(crate) fn with_conn_wake<R>(
        &self,
        h: ConnectionHandle,
        f: impl FnOnce(&mut ctcp_proto::Connection, &mut Wakers) -> (R, bool),
    ) -> Result<R, ConnectionError> {
        let shard = self.shared.shard(h);
        let mut inner = shard.lock();
        let Inner {
            endpoint,
            wakers,
            lost,
            ..
        } = &mut *inner;
        let (r, wake) = match endpoint.connection_mut(h) {
            Some(c) => {
                let (r, wake) = f(c, wakers);
                (Ok(r), wake)
            }
            None => (
                Err(lost
                    .get(&h)
                    .cloned()
                    .unwrap_or(ConnectionError::LocallyClosed)),
                true,
            ),
        };
        drop(inner);
        if wake {
            shard.wake.notify_one();
        }
        r
    }

    /// Per-session statistics, for logs and metrics.
    pub fn stats(&self) -> Vec<(ConnectionHandle, ctcp_proto::ConnectionStats, usize)> {
        let mut all = Vec::new();
        for s in self.shared.shards() {
            let inner = s.lock();
            all.extend(inner.endpoint.handles().into_iter().filter_map(|h| {
                inner
                    .endpoint
                    .connection(h)
                    .map(|c| (h, c.stats(), c.stream_count()))
            }));
        }
        all
    }

    /// Whether a session is established.
    pub fn is_established(&self, h: ConnectionHandle) -> bool {
        self.shared
            .shard(h)
            .lock()
            .endpoint
            .connection(h)
            .is_some_and(|c| c.is_established())
    }

    /// A session's paths (one unless multipath), for logs, metrics and tests.
    pub fn paths(&self, h: ConnectionHandle) -> Vec<ctcp_proto::PathInfo> {
        self.shared
            .shard(h)
            .lock()
            .endpoint
            .connection(h)
            .map(|c| c.paths())
            .unwrap_or_default()
    }

    /// Dropped-datagram counters of the endpoints, summed.
    pub fn drops(&self) -> ctcp_proto::DropCounters {
        let mut t = ctcp_proto::DropCounters::default();
        for s in self.shared.shards() {
            let d = s.lock().endpoint.drops();
            t.malformed += d.malformed;
            t.bad_handshake += d.bad_handshake;
            t.refused += d.refused;
            t.unknown_session += d.unknown_session;
            t.resets_sent += d.resets_sent;
            t.rejects_sent += d.rejects_sent;
        }
        t
    }
}

/// Waits until `io` may be read; never without a socket.
async fn readable(io: Option<&UdpIo>) -> io::Result<()> {
    match io {
        Some(io) => io.readable().await,
        None => std::future::pending().await,
    }
}

/// One shard's driver task: feeds its endpoint the datagrams its socket reads (handing
/// other shards theirs) and those routed to it, runs timers, routes events, and flushes.
/// A multipath shard has no socket of its own: it writes each path's datagrams to that
/// path's slot, whose own task reads it.
async fn run_shard(
    shared: Arc<Shared>,
    index: usize,
    mut io: Option<UdpIo>,
    gso: usize,
    mut routed: mpsc::Receiver<Routed>,
    reports: Reports,
    mut shutdown: watch::Receiver<bool>,
) {
    let me = &shared.shards[index];
    let count = shared.shards.len();
    let local_addr = shared.local_addr;
    let gso = gso.clamp(1, 32);
    let mut writers = crate::paths::Writers::default();
    // GSO batches, written by the endpoint where they are sent from.
    let mut batches: Vec<(Vec<u8>, SocketAddr, usize, u8)> = Vec::new();
    let mut closed = false;
    loop {
        let timeout = me.lock().endpoint.poll_timeout();
        let sleep = async {
            match timeout {
                Some(t) => tokio::time::sleep_until(t.into()).await,
                None => tokio::time::sleep(Duration::from_secs(3600)).await,
            }
        };
        tokio::select! {
            r = readable(io.as_ref()) => {
                if let Err(e) = r {
                    tracing::error!(error = %e, "UDP socket failed");
                    break;
                }
                let Some(io) = io.as_mut() else { continue };
                let mut inner = me.lock();
                let now = clock::now();
                let before = inner.endpoint.connection_count();
                let res = io.drain(|from, data| {
                    match owner(data, count) {
                        Some(k) if k != index => route(&shared, k, from, data),
                        _ => inner.endpoint.handle_datagram(now, from, data),
                    }
                });
                on_received(&mut inner, before, &reports);
                if let Err(e) = res {
                    tracing::warn!(error = %e, "UDP receive error");
                }
            }
            Some((from, mut data)) = routed.recv() => {
                let mut inner = me.lock();
                let now = clock::now();
                let before = inner.endpoint.connection_count();
                inner.endpoint.handle_datagram(now, from, &mut data);
                while let Ok((from, mut data)) = routed.try_recv() {
                    inner.endpoint.handle_datagram(now, from, &mut data);
                }
                on_received(&mut inner, before, &reports);
            }
            _ = sleep => {
                me.lock().endpoint.handle_timeout(clock::now());
            }
            _ = me.wake.notified() => {}
            _ = shutdown.changed() => {
                if *shutdown.borrow() {
                    me.lock().endpoint.stop_accepting();
                }
            }
        }
        if !closed && shared.closing.load(Ordering::Acquire) {
            closed = true;
            let mut inner = me.lock();
            for h in inner.endpoint.handles() {
                if let Some(c) = inner.endpoint.connection_mut(h) {
                    c.close(0, "shutdown");
                }
            }
        }
        {
            let mut inner = me.lock();
            let now = clock::now();
            if inner.endpoint.poll_timeout().is_some_and(|t| t <= now) {
                inner.endpoint.handle_timeout(now);
            }
            route_events(&mut inner, &reports);
        }
        // Flush: have the endpoint write GSO batches under the lock (up to
        // FLUSH_BATCHES of them), send them without it.
        loop {
            let mut n = 0;
            {
                let mut inner = me.lock();
                let now = clock::now();
                while n < FLUSH_BATCHES {
                    if batches.len() == n {
                        batches.push((Vec::with_capacity(gso * 1500), local_addr, 0, 0));
                    }
                    let (buf, dest, seg, path) = &mut batches[n];
                    let Some(t) = inner.endpoint.poll_transmit_batch(now, gso, buf) else {
                        break;
                    };
                    (*dest, *seg, *path) = (t.destination, t.segment_size, t.path);
                    n += 1;
                }
                route_events(&mut inner, &reports);
            }
            if n == 0 {
                break;
            }
            if let Some(sockets) = &shared.path_sockets {
                writers.refresh(sockets, &shared.path_generation);
            }
            for (buf, dest, seg, path) in &batches[..n] {
                let seg = Some(*seg).filter(|s| buf.len() > *s);
                let k = usize::from(*path);
                // A multipath forward's path leaves from its slot's socket; a slot without
                // one (not bound yet) sends nothing. Any other shard (a reverse answers
                // each path where it came from) uses its own socket.
                let socket = match &shared.path_sockets {
                    None => io.as_ref(),
                    Some(_) => writers.writer(k),
                };
                let Some(socket) = socket else { continue };
                match socket.send(*dest, buf, seg).await {
                    Err(e) if crate::paths::is_link_error(&e) => {
                        tracing::debug!(error = %e, %dest, path, "UDP send failed: link error");
                        if let Some(slot) = writers.slot(k) {
                            crate::paths::set_down(&shared, slot, &e);
                        }
                    }
                    Err(e) => tracing::debug!(error = %e, %dest, path, "UDP send failed"),
                    Ok(()) => {}
                }
            }
        }
        if (closed || *shutdown.borrow()) && me.lock().endpoint.connection_count() == 0 {
            break;
        }
        // The stream tasks this round woke (on this thread) run before the next batch is
        // read: otherwise received data piles up in stream buffers, up to the credit.
        tokio::task::yield_now().await;
    }
    tracing::debug!(shard = index, "driver stopped");
    shared.stopped.send_modify(|n| *n += 1);
}

/// Reads one path socket (multipath) and feeds what it reads to the endpoint of the shard
/// that owns each session (under its lock, one hold per batch read, as the shard reads
/// its own socket), then wakes it; until the driver stops.
pub(crate) async fn read_path(shared: Arc<Shared>, mut io: UdpIo) {
    let count = shared.shards.len();
    let stopped = async {
        let mut rx = shared.stopped.subscribe();
        let _ = rx.wait_for(|s| *s >= count).await;
    };
    tokio::pin!(stopped);
    loop {
        tokio::select! {
            r = io.readable() => {
                if let Err(e) = r {
                    tracing::error!(error = %e, "path UDP socket failed");
                    return;
                }
                let first = &shared.shards[0];
                let res = {
                    let mut inner = first.lock();
                    let now = clock::now();
                    io.drain(|from, data| match owner(data, count) {
                        Some(k) if k != 0 => route(&shared, k, from, data),
                        _ => inner.endpoint.handle_datagram(now, from, data),
                    })
                };
                first.wake.notify_one();
                if let Err(e) = res {
                    tracing::warn!(error = %e, "path UDP receive error");
                }
            }
            () = &mut stopped => return,
        }
    }
}

/// The shard that owns the session a datagram names, if it names one.
fn owner(data: &[u8], shards: usize) -> Option<usize> {
    if shards == 1 {
        return None;
    }
    wire::peek_conn_id(data)
        .ok()
        .map(|(_, id)| shard_of(id, shards))
}

/// Hands a datagram to the shard that owns its session (the kernel's socket choice
/// missed: no steering program, or a peer whose address changed before the program saw
/// it). A full queue drops it, as a full socket buffer would.
fn route(shared: &Shared, to: usize, from: SocketAddr, data: &[u8]) {
    let shard = &shared.shards[to];
    if shard.routed.try_send((from, data.to_vec())).is_err() {
        shared.route_dropped.fetch_add(1, Ordering::Relaxed);
    }
}

/// After datagrams: a server session is established when an INITIATE creates it, with
/// no Connected event, so report and count the new ones here.
fn on_received(inner: &mut Inner, before: usize, reports: &Reports) {
    if inner.endpoint.connection_count() > before {
        let Inner {
            endpoint, totals, ..
        } = inner;
        for h in totals.on_accepted(endpoint) {
            let _ = reports.sessions.send(SessionEvent::Connected(h));
        }
    }
}

/// Multipath: opens one path per path socket slot beyond the session's first on a
/// session that just connected, to the peer's address (the path differs by the socket it
/// leaves from); a path whose slot is down starts down, and comes up when the slot does.
fn open_paths(inner: &mut Inner, h: ConnectionHandle) {
    let Some(sockets) = inner.paths.clone() else {
        return;
    };
    let (up, links): (Vec<bool>, Vec<String>) = {
        let s = crate::paths::lock(&sockets);
        ((0..s.len()).map(|i| s.path_is_up(i)).collect(), s.links())
    };
    // Path ids name links per session (path 0 is the first link up when it started), so
    // the per-path series and logs are read with this.
    tracing::info!(session = h.0, links = ?links, "multipath session: path i leaves from links[i]");
    let Some(c) = inner.endpoint.connection_mut(h) else {
        return;
    };
    let (now, remote) = (clock::now(), c.remote());
    for &slot_up in up.iter().skip(1) {
        match c.add_path(now, remote) {
            Ok(id) => {
                if !slot_up {
                    c.set_path_down(now, id);
                }
                tracing::debug!(session = h.0, path = id, %remote, up = slot_up, "path opened");
            }
            Err(e) => {
                tracing::warn!(session = h.0, error = %e, "path not opened");
                break;
            }
        }
    }
    if !up.first().copied().unwrap_or(true) {
        c.set_path_down(now, 0);
    }
}

fn route_events(inner: &mut Inner, reports: &Reports) {
    let (incoming, sessions) = (&reports.incoming, &reports.sessions);
    while let Some((h, event)) = inner.endpoint.poll_event() {
        match event {
            Event::Connected => {
                inner.totals.on_connected(h);
                open_paths(inner, h);
                let _ = sessions.send(SessionEvent::Connected(h));
            }
            Event::StreamOpened { id, target } => {
                let _ = incoming.send(IncomingStream {
                    conn: h,
                    id,
                    target,
                });
            }
            Event::OpenResult { id, code } => {
                if let Some(tx) = inner.wakers.open_results.remove(&(h, id)) {
                    let _ = tx.send(code);
                }
            }
            Event::StreamReadable(id) => {
                if let Some(w) = inner.wakers.read.remove(&(h, id)) {
                    w.wake();
                }
            }
            Event::StreamWritable(id) => {
                if let Some(w) = inner.wakers.write.remove(&(h, id)) {
                    w.wake();
                }
            }
            // Issue 27 hook: received datagrams go to the role's datagram relay.
            Event::DatagramReceived => crate::datagram::on_received(inner, h),
            Event::ConnectionLost(err) => {
                if matches!(
                    err,
                    ConnectionError::HandshakeTimeout
                        | ConnectionError::Rejected { .. }
                        | ConnectionError::Incompatible(_)
                ) {
                    // A session that never existed; the forward role reports why at warn.
                    tracing::debug!(session = h.0, error = %err, "handshake failed");
                } else {
                    tracing::info!(session = h.0, error = %err, "session ended");
                }
                // The endpoint still holds the connection: keep its final counters.
                let last = inner.endpoint.connection(h).map(|c| c.stats());
                inner.totals.on_lost(h, &err, last.as_ref());
                let last_datagrams = inner.endpoint.connection(h).map(|c| c.datagram_stats());
                inner.datagrams.on_session_lost(h, last_datagrams);
                inner.lost.insert(h, err.clone());
                if inner.lost.len() > 1024 {
                    inner.lost.clear();
                }
                // Wake every task of this session so it sees the error.
                let keys: Vec<_> = inner
                    .wakers
                    .read
                    .keys()
                    .filter(|k| k.0 == h)
                    .copied()
                    .collect();
                for k in keys {
                    if let Some(w) = inner.wakers.read.remove(&k) {
                        w.wake();
                    }
                }
                let keys: Vec<_> = inner
                    .wakers
                    .write
                    .keys()
                    .filter(|k| k.0 == h)
                    .copied()
                    .collect();
                for k in keys {
                    if let Some(w) = inner.wakers.write.remove(&k) {
                        w.wake();
                    }
                }
                inner.wakers.open_results.retain(|k, _| k.0 != h);
                let _ = sessions.send(SessionEvent::Lost(h, err));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn endpoint() -> Endpoint {
        Endpoint::new(
            ctcp_proto::EndpointConfig::new(
                ctcp_proto::Psk::new(&[3; 32]).expect("a 32-byte key"),
                ctcp_proto::TransportConfig::default(),
                false,
            ),
            [4; 32],
        )
    }

    fn thread_name() -> String {
        std::thread::current().name().unwrap_or("").to_owned()
    }

    /// A start that fails halfway drops the shard runtimes it built inside the caller's
    /// runtime, where a plain `Runtime` drop panics.
    #[tokio::test]
    async fn a_shard_runtime_can_be_dropped_inside_another_runtime() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let handle = rt.handle().clone();
        drop(ShardRuntime(Some(rt)));
        let late = handle.spawn(async {}).await;
        assert!(
            late.is_err_and(|e| e.is_cancelled()),
            "the runtime is shut down"
        );
    }

    /// A session's stream tasks share its shard's thread with the shard's driver task,
    /// and an accepted connection keeps working after it moves to that thread's reactor.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn stream_tasks_run_on_their_shards_thread_with_their_socket() {
        let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let (_stop, rx) = watch::channel(false);
        let (driver, _channels) = Driver::spawn(vec![(endpoint(), udp)], rx).unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut client = tokio::net::TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (tcp, _) = listener.accept().await.unwrap();
        let (tx, rx) = oneshot::channel();
        let mut tasks = JoinSet::new();
        driver.spawn_tcp_task(&mut tasks, None, tcp, move |mut tcp| async move {
            let mut buf = [0u8; 5];
            tcp.read_exact(&mut buf).await.unwrap();
            tcp.write_all(&buf).await.unwrap();
            let _ = tx.send(thread_name());
        });
        client.write_all(b"hello").await.unwrap();
        let mut echo = [0u8; 5];
        client.read_exact(&mut echo).await.unwrap();
        assert_eq!(&echo, b"hello");
        assert_eq!(rx.await.unwrap(), "ctcp-shard-0");
        tasks.join_next().await.unwrap().unwrap();
        // With no session the shard's task, and so its thread, ends once told to close.
        driver.close_all();
        tokio::time::timeout(Duration::from_secs(5), driver.stopped())
            .await
            .expect("the shard stops");
        assert_ne!(
            thread_name(),
            "ctcp-shard-0",
            "the test itself runs elsewhere"
        );
    }
}
