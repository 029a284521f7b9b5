//! The driver task: owns one ctcp-proto `Endpoint` and its UDP socket, feeds it datagrams
//! and timeouts, flushes what it wants to send, and routes its events to stream tasks.
//!
//! Stream tasks reach the endpoint through a mutex held only for short, non-blocking
//! calls; they register wakers that the driver fires on readable/writable events.

use crate::clock;
use crate::udp::UdpIo;
use ctcp_proto::{
    ConnectionError, ConnectionHandle, Endpoint, Event, OpenResult, StreamId, Target,
};
use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::Waker;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot, watch, Notify};

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

/// State shared between the driver task and stream handles.
pub(crate) struct Inner {
    pub(crate) endpoint: Endpoint,
    pub(crate) wakers: Wakers,
    pub(crate) lost: HashMap<ConnectionHandle, ConnectionError>,
    /// Process-wide counters that outlive sessions (see `metrics`).
    pub(crate) totals: crate::metrics::Totals,
    /// Issue 27 hook: where received datagrams go (`crate::datagram`).
    pub(crate) datagrams: crate::datagram::Inbox,
}

/// Handle to a running driver.
#[derive(Clone)]
pub struct Driver {
    pub(crate) shared: Arc<Shared>,
}

pub(crate) struct Shared {
    inner: Mutex<Inner>,
    pub(crate) wake: Notify,
    local_addr: SocketAddr,
    /// Set by [`Driver::close_all`]: close every session, then stop.
    closing: AtomicBool,
    /// Turns true when the driver task has stopped.
    stopped: watch::Sender<bool>,
}

impl Shared {
    pub(crate) fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock is a bug elsewhere; keep serving with the state as is.
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl std::fmt::Debug for Driver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Driver")
            .field("local_addr", &self.shared.local_addr)
            .finish()
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

impl Driver {
    /// Binds `socket`, starts the driver task on the current tokio runtime, and returns a
    /// handle plus the event channels.
    ///
    /// When `shutdown` turns true the endpoint stops accepting new sessions (an INITIATE
    /// is answered "busy") but live sessions carry on, so their streams can drain; the role
    /// then calls [`Driver::close_all`]. The task ends once shutdown or closing is set and
    /// no session is left.
    ///
    /// # Errors
    /// Fails if the socket cannot be set up for asynchronous I/O.
    pub fn spawn(
        mut endpoint: Endpoint,
        socket: std::net::UdpSocket,
        mut shutdown: watch::Receiver<bool>,
    ) -> io::Result<(Driver, DriverChannels)> {
        let mut io = UdpIo::new(socket)?;
        let local_addr = io.local_addr()?;
        endpoint.set_wall_clock(clock::now(), clock::unix_ms());
        let shared = Arc::new(Shared {
            inner: Mutex::new(Inner {
                endpoint,
                wakers: Wakers::default(),
                lost: HashMap::new(),
                totals: crate::metrics::Totals::default(),
                datagrams: crate::datagram::Inbox::default(),
            }),
            wake: Notify::new(),
            local_addr,
            closing: AtomicBool::new(false),
            stopped: watch::channel(false).0,
        });
        let (incoming_tx, incoming) = mpsc::unbounded_channel();
        let (sessions_tx, sessions) = mpsc::unbounded_channel();
        let driver = Driver {
            shared: shared.clone(),
        };
        tokio::spawn(async move {
            let gso = io.max_gso_segments().clamp(1, 32);
            // GSO batches, written by the endpoint where they are sent from.
            let mut batches: Vec<(Vec<u8>, SocketAddr, usize)> = Vec::new();
            let mut closed = false;
            loop {
                let timeout = shared.lock().endpoint.poll_timeout();
                let sleep = async {
                    match timeout {
                        Some(t) => tokio::time::sleep_until(t.into()).await,
                        None => tokio::time::sleep(Duration::from_secs(3600)).await,
                    }
                };
                tokio::select! {
                    r = io.readable() => {
                        if let Err(e) = r {
                            tracing::error!(error = %e, "UDP socket failed");
                            break;
                        }
                        let mut inner = shared.lock();
                        let now = clock::now();
                        let before = inner.endpoint.connection_count();
                        let res = io.drain(|from, data| inner.endpoint.handle_datagram(now, from, data));
                        // A server session is established when an INITIATE creates it, with
                        // no Connected event: report and count the new ones here.
                        if inner.endpoint.connection_count() > before {
                            let Inner { endpoint, totals, .. } = &mut *inner;
                            for h in totals.on_accepted(endpoint) {
                                let _ = sessions_tx.send(SessionEvent::Connected(h));
                            }
                        }
                        if let Err(e) = res {
                            tracing::warn!(error = %e, "UDP receive error");
                        }
                    }
                    _ = sleep => {
                        shared.lock().endpoint.handle_timeout(clock::now());
                    }
                    _ = shared.wake.notified() => {}
                    _ = shutdown.changed() => {
                        if *shutdown.borrow() {
                            shared.lock().endpoint.stop_accepting();
                        }
                    }
                }
                if !closed && shared.closing.load(Ordering::Acquire) {
                    closed = true;
                    let mut inner = shared.lock();
                    for h in inner.endpoint.handles() {
                        if let Some(c) = inner.endpoint.connection_mut(h) {
                            c.close(0, "shutdown");
                        }
                    }
                }
                {
                    let mut inner = shared.lock();
                    let now = clock::now();
                    if inner.endpoint.poll_timeout().is_some_and(|t| t <= now) {
                        inner.endpoint.handle_timeout(now);
                    }
                    route_events(&mut inner, &incoming_tx, &sessions_tx);
                }
                // Flush: have the endpoint write GSO batches under the lock (up to
                // FLUSH_BATCHES of them), send them without it.
                loop {
                    let mut n = 0;
                    {
                        let mut inner = shared.lock();
                        let now = clock::now();
                        while n < FLUSH_BATCHES {
                            if batches.len() == n {
                                batches.push((Vec::with_capacity(gso * 1500), local_addr, 0));
                            }
                            let (buf, dest, seg) = &mut batches[n];
                            let Some(t) = inner.endpoint.poll_transmit_batch(now, gso, buf) else {
                                break;
                            };
                            (*dest, *seg) = (t.destination, t.segment_size);
                            n += 1;
                        }
                        route_events(&mut inner, &incoming_tx, &sessions_tx);
                    }
                    if n == 0 {
                        break;
                    }
                    for (buf, dest, seg) in &batches[..n] {
                        let seg = Some(*seg).filter(|s| buf.len() > *s);
                        if let Err(e) = io.send(*dest, buf, seg).await {
                            tracing::debug!(error = %e, %dest, "UDP send failed");
                        }
                    }
                }
                if (closed || *shutdown.borrow()) && shared.lock().endpoint.connection_count() == 0
                {
                    break;
                }
            }
            tracing::debug!("driver stopped");
            shared.stopped.send_replace(true);
        });
        Ok((driver, DriverChannels { incoming, sessions }))
    }

    /// Closes every session (CLOSE to each peer) and stops the driver once they are gone.
    pub fn close_all(&self) {
        self.shared.closing.store(true, Ordering::Release);
        self.shared.wake.notify_one();
    }

    /// Completes when the driver task has stopped.
    pub async fn stopped(&self) {
        let mut rx = self.shared.stopped.subscribe();
        // The sender lives in `Shared`, which this handle keeps alive: `wait_for` ends only
        // when the flag turns true.
        let _ = rx.wait_for(|s| *s).await;
    }

    /// Whether closing every session now would lose nothing: no open stream, and every
    /// byte sent has been acknowledged by the peer.
    pub fn is_quiescent(&self) -> bool {
        let inner = self.shared.lock();
        inner.endpoint.handles().into_iter().all(|h| {
            inner
                .endpoint
                .connection(h)
                .is_none_or(|c| c.is_quiescent())
        })
    }

    /// Open streams across all sessions.
    pub fn open_streams(&self) -> usize {
        let inner = self.shared.lock();
        inner
            .endpoint
            .handles()
            .into_iter()
            .filter_map(|h| inner.endpoint.connection(h).map(|c| c.stream_count()))
            .sum()
    }

    /// The UDP address the driver is bound to.
    pub fn local_addr(&self) -> SocketAddr {
        self.shared.local_addr
    }

    /// Starts a session to `remote` and waits for the handshake.
    ///
    /// # Errors
    /// Returns the reason the session ended if the handshake fails.
    pub fn connect(&self, remote: SocketAddr) -> ConnectionHandle {
        let h = self.shared.lock().endpoint.connect(clock::now(), remote);
        self.shared.wake.notify_one();
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

    /// Runs `f` on a session with the lock held; wakes the driver only if `f` says the
    /// call made something sendable (or the session is gone).
    pub(crate) fn with_conn_wake<R>(
        &self,
        h: ConnectionHandle,
        f: impl FnOnce(&mut ctcp_proto::Connection, &mut Wakers) -> (R, bool),
    ) -> Result<R, ConnectionError> {
        let mut inner = self.shared.lock();
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
            self.shared.wake.notify_one();
        }
        r
    }

    /// Per-session statistics, for logs and metrics.
    pub fn stats(&self) -> Vec<(ConnectionHandle, ctcp_proto::ConnectionStats, usize)> {
        let inner = self.shared.lock();
        inner
            .endpoint
            .handles()
            .into_iter()
            .filter_map(|h| {
                inner
                    .endpoint
                    .connection(h)
                    .map(|c| (h, c.stats(), c.stream_count()))
            })
            .collect()
    }

    /// Whether a session is established.
    pub fn is_established(&self, h: ConnectionHandle) -> bool {
        self.shared
            .lock()
            .endpoint
            .connection(h)
            .is_some_and(|c| c.is_established())
    }

    /// Dropped-datagram counters of the endpoint.
    pub fn drops(&self) -> ctcp_proto::DropCounters {
        self.shared.lock().endpoint.drops()
    }
}

fn route_events(
    inner: &mut Inner,
    incoming: &mpsc::UnboundedSender<IncomingStream>,
    sessions: &mpsc::UnboundedSender<SessionEvent>,
) {
    while let Some((h, event)) = inner.endpoint.poll_event() {
        match event {
            Event::Connected => {
                inner.totals.on_connected(h);
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
