//! Relay role: a reverse proxy whose "connect to the target" step is "open a stream on
//! the next gateway's session". Each segment is its own session (handshake, key,
//! coding, congestion control): the relay decodes what the upstream segment carried and
//! encodes it again for the next one (segment termination, seed 003's cascaded tunnel).
//!
//! Back-pressure crosses the relay per stream: `bridge` reads from one stream only
//! what the other accepted, so a slow next segment stops the relay reading, the
//! upstream stream's credit runs out, and the upstream sender waits. What the relay
//! holds is bounded by the credit it grants (`relay.buffer`) and the send buffers.
//!
//! Both of the relay's endpoints autotune the receive credit they grant
//! (`TransportConfig::credit_autotune`): a stream starts with 1 MiB of credit and then
//! runs a window ahead of what the relay has passed on, at first 256 KiB or four times
//! the segment's measured bandwidth × RTT, growing only while the relay keeps up with what
//! arrives (the sender was waiting on credit). So where
//! a fast segment feeds a slow one, the relay holds per stream about what the slow one
//! drains in a fraction of a second, not `relay.buffer` (32 MiB: half a minute at
//! 10 Mbit/s, which every byte would wait behind); where a slow, long segment feeds a
//! fast one, the window grows to cover the slow segment's round trips.

use crate::driver::{Driver, IncomingStream, SessionEvent};
use crate::resolve::{connect_next, PeerResolver};
use crate::tunnel::TunnelStream;
use crate::{reply, RuntimeError};
use ctcp_proto::{ConnectionHandle, Endpoint, EndpointConfig, OpenResult, Psk, TransportConfig};
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{mpsc, watch};

/// What the relay role needs: the next gateway and how to talk to it.
#[derive(Debug, Clone)]
pub struct RelaySettings {
    /// The next gateway, `host:port`.
    pub next_hop: String,
    /// The next segment's pre-shared key.
    pub psk: Psk,
    /// Flow-control credit granted per session on both segments (bytes): the most the
    /// relay may hold for one session (and for one stream). The credit it grants is
    /// autotuned below it.
    pub buffer: u64,
    /// How long a stream waits for the next hop's result (or for a next-hop session).
    pub open_timeout: Duration,
    /// UDP bind address toward the next hop (`None`: the wildcard of its family).
    pub bind: Option<SocketAddr>,
}

impl RelaySettings {
    /// `t` with its receive credit capped at the relay's buffer (a relay grants no more
    /// than it is willing to hold) and autotuned below that (it grants what the other
    /// segment drains, so bytes do not queue in the relay; see the module docs).
    pub fn cap_credit(&self, t: &TransportConfig) -> TransportConfig {
        TransportConfig {
            stream_window: t.stream_window.min(self.buffer),
            session_window: t.session_window.min(self.buffer),
            credit_autotune: true,
            ..t.clone()
        }
    }
}

/// The state of the next-hop session, as streams see it.
#[derive(Debug, Clone)]
enum Hop {
    /// Handshake under way (at start, or after an established session was lost).
    Connecting,
    /// Established.
    Up(ConnectionHandle),
    /// The last attempt failed; why.
    Down(Arc<str>),
}

/// The relay's client side toward the next gateway: its own driver (UDP socket and
/// endpoint) and the session a keeper task holds open.
#[derive(Debug, Clone)]
pub(crate) struct NextHop {
    pub(crate) driver: Driver,
    current: watch::Receiver<Hop>,
    no_answer_after: Duration,
    open_timeout: Duration,
}

impl NextHop {
    /// Binds the socket toward the next hop, starts its driver and the session keeper.
    pub(crate) async fn start(
        s: &RelaySettings,
        transport: &TransportConfig,
        seed: [u8; 32],
        shutdown: watch::Receiver<bool>,
    ) -> Result<NextHop, RuntimeError> {
        let lookup = crate::resolve::system_lookup();
        let addrs = crate::resolve::resolve_all(&s.next_hop, &lookup).await?;
        let bind = s
            .bind
            .unwrap_or_else(|| crate::resolve::wildcard_for(&addrs));
        let udp = std::net::UdpSocket::bind(bind).map_err(|source| RuntimeError::Bind {
            what: "relay UDP socket toward the next hop",
            addr: bind,
            source,
        })?;
        let peer = PeerResolver::new(s.next_hop.clone(), udp.local_addr()?, lookup, addrs);
        let transport = s.cap_credit(transport);
        let no_answer_after = crate::forward::no_answer_after(&transport);
        let endpoint = Endpoint::new(EndpointConfig::new(s.psk.clone(), transport, false), seed);
        let (driver, channels) = Driver::spawn(vec![(endpoint, udp)], shutdown.clone())?;
        let (tx, current) = watch::channel(Hop::Connecting);
        tokio::spawn(keeper(
            driver.clone(),
            channels.sessions,
            peer,
            tx,
            shutdown,
        ));
        // Nobody opens streams toward a relay's client side; drop such attempts' events.
        drop(channels.incoming);
        Ok(NextHop {
            driver,
            current,
            no_answer_after,
            open_timeout: s.open_timeout,
        })
    }

    /// The session to open a stream on: waits while a handshake is under way, at most
    /// `no_answer_after`.
    async fn session(&self) -> Result<ConnectionHandle, Arc<str>> {
        let mut current = self.current.clone();
        let fut = async {
            loop {
                match &*current.borrow_and_update() {
                    Hop::Up(h) => return Ok(*h),
                    Hop::Down(why) => return Err(why.clone()),
                    Hop::Connecting => {}
                }
                if current.changed().await.is_err() {
                    return Err(Arc::from("shutting down"));
                }
            }
        };
        tokio::time::timeout(self.no_answer_after, fut)
            .await
            .unwrap_or_else(|_| Err(Arc::from("no next-hop session in time")))
    }

    /// Closes the next-hop session (after the upstream streams drained) and waits a
    /// little for its CLOSE to go out.
    pub(crate) async fn close(&self) {
        self.driver.close_all();
        let _ = tokio::time::timeout(Duration::from_secs(2), self.driver.stopped()).await;
    }
}

/// Keeps one session to the next hop, reconnecting with backoff (0.2 s doubling to 10 s)
/// when it fails or is lost.
async fn keeper(
    driver: Driver,
    mut sessions: mpsc::UnboundedReceiver<SessionEvent>,
    mut peer: PeerResolver,
    current: watch::Sender<Hop>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut backoff = Duration::from_millis(200);
    let mut warned = false;
    loop {
        let pending = tokio::select! {
            h = connect_next(&driver, &mut peer, &mut backoff) => h,
            _ = shutdown.changed() => if *shutdown.borrow() { return } else { continue },
        };
        // Until the handshake ends.
        let failed = loop {
            tokio::select! {
                ev = sessions.recv() => match ev {
                    Some(SessionEvent::Connected(h)) if h == pending => break None,
                    Some(SessionEvent::Lost(h, e)) if h == pending => break Some(e),
                    Some(_) => {}
                    None => return,
                },
                _ = shutdown.changed() => if *shutdown.borrow() { return },
            }
        };
        if let Some(e) = failed {
            let why = format!("no session to the next hop {}: {e}", peer.name());
            if warned {
                tracing::debug!(retry_in = ?backoff, "{why}; retrying");
            } else {
                tracing::warn!(retry_in = ?backoff, "{why}; retrying");
                warned = true;
            }
            let _ = current.send(Hop::Down(why.into()));
        } else {
            tracing::info!(
                next_hop = peer.name(),
                session = pending.0,
                "next-hop session established"
            );
            peer.reset();
            backoff = Duration::from_millis(200);
            warned = false;
            let _ = current.send(Hop::Up(pending));
            let e = loop {
                tokio::select! {
                    ev = sessions.recv() => match ev {
                        Some(SessionEvent::Lost(h, e)) if h == pending => break e,
                        Some(_) => {}
                        None => return,
                    },
                    _ = shutdown.changed() => if *shutdown.borrow() { return },
                }
            };
            // The streams on it fail now (their bridges see the session end and reset
            // their upstream halves); new ones wait briefly for the reconnect.
            tracing::warn!(next_hop = peer.name(), error = %e, retry_in = ?backoff, "next-hop session lost; reconnecting");
            let _ = current.send(Hop::Connecting);
        }
        tokio::select! {
            _ = tokio::time::sleep(backoff) => {}
            _ = shutdown.changed() => if *shutdown.borrow() { return },
        }
        backoff = (backoff * 2).min(Duration::from_secs(10));
    }
}

/// Carries one upstream stream on to the next hop: opens a stream there with the same
/// target, passes the next hop's connect result back (its SOCKS code intact), and
/// bridges the two streams until both directions end.
pub(crate) async fn handle_stream(up_driver: Driver, incoming: IncomingStream, next: &NextHop) {
    let IncomingStream { conn, id, target } = incoming;
    let mut up = TunnelStream::new(up_driver.clone(), conn, id);
    let session = match next.session().await {
        Ok(h) => h,
        Err(why) => {
            tracing::debug!(session = conn.0, stream = id, %target, reason = %why, "no next-hop session; refusing");
            up_driver.count_target_connect(reply::socks_reply(OpenResult::GeneralFailure).code());
            up.fail_open(OpenResult::GeneralFailure);
            return;
        }
    };
    let (mut down, result) = match TunnelStream::open(&next.driver, session, target.clone()) {
        Ok(x) => x,
        Err(e) => {
            tracing::debug!(session = conn.0, stream = id, %target, error = %e, "cannot open a next-hop stream");
            up_driver.count_target_connect(reply::socks_reply(OpenResult::GeneralFailure).code());
            up.fail_open(OpenResult::GeneralFailure);
            return;
        }
    };
    let open_timeout = next.open_timeout;
    let result = async move {
        match tokio::time::timeout(open_timeout, result).await {
            Ok(Ok(code)) => code,
            Ok(Err(_)) => OpenResult::GeneralFailure, // the next-hop session died first
            Err(_) => OpenResult::TimedOut,
        }
    };
    let outcome = bridge(&mut up, &mut down, result).await;
    let code = match &outcome {
        Bridged::OpenFailed(c) => *c,
        Bridged::Done { .. } | Bridged::Failed(_) => OpenResult::Succeeded,
    };
    up_driver.count_target_connect(reply::socks_reply(code).code());
    match outcome {
        Bridged::Done { up: u, down: d } => {
            tracing::debug!(session = conn.0, stream = id, %target, up = u, down = d, "relayed stream done");
        }
        Bridged::OpenFailed(code) => {
            tracing::debug!(session = conn.0, stream = id, %target, %code, "next hop's connect failed");
        }
        Bridged::Failed(e) => {
            tracing::debug!(session = conn.0, stream = id, %target, error = %e, "relayed stream reset");
        }
    }
}

/// How a bridged stream ended.
#[derive(Debug)]
enum Bridged {
    /// Both directions ended cleanly; bytes carried toward the next hop and back.
    Done { up: u64, down: u64 },
    /// The next hop reported this connect failure; it was passed upstream.
    OpenFailed(OpenResult),
    /// A stream failed after the open (reset, session lost): both were reset.
    Failed(io::Error),
}

/// Bytes held per direction while they wait for the other stream to take them.
const CHUNK: usize = 64 << 10;
/// Chunks moved in one poll before the task yields to others.
const CHUNKS_PER_POLL: usize = 32;

/// One direction of a bridge: reads into its buffer only once the other stream took all
/// of the last read (so the relay holds at most `CHUNK` per direction beyond the
/// transport's buffers), and passes EOF on as a FIN.
struct Pump {
    buf: Box<[u8]>,
    pos: usize,
    cap: usize,
    eof: bool,
    done: bool,
    bytes: u64,
}

impl Pump {
    fn new() -> Self {
        Pump {
            buf: vec![0; CHUNK].into_boxed_slice(),
            pos: 0,
            cap: 0,
            eof: false,
            done: false,
            bytes: 0,
        }
    }

    fn poll(
        &mut self,
        cx: &mut Context<'_>,
        from: &mut TunnelStream,
        to: &mut TunnelStream,
    ) -> Poll<io::Result<()>> {
        if self.done {
            return Poll::Ready(Ok(()));
        }
        for _ in 0..CHUNKS_PER_POLL {
            if self.pos == self.cap && !self.eof {
                let mut rb = ReadBuf::new(&mut self.buf);
                ready!(Pin::new(&mut *from).poll_read(cx, &mut rb))?;
                let n = rb.filled().len();
                if n == 0 {
                    self.eof = true;
                } else {
                    (self.pos, self.cap) = (0, n);
                }
            }
            while self.pos < self.cap {
                let n = ready!(Pin::new(&mut *to).poll_write(cx, &self.buf[self.pos..self.cap]))?;
                if n == 0 {
                    return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
                }
                self.pos += n;
                self.bytes += n as u64;
            }
            if self.eof {
                ready!(Pin::new(&mut *to).poll_shutdown(cx))?;
                self.done = true;
                return Poll::Ready(Ok(()));
            }
        }
        // Still busy: let other tasks run, then carry on.
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

/// Bridges `up` (a stream the upstream gateway opened here) and `down` (the stream this
/// relay opened on the next hop) once `result`, the next hop's connect result, says it
/// may. Bytes toward the next hop flow at once (data a fast-open client sent with its
/// request keeps its head start); bytes back flow only after the result was passed
/// upstream, which an opener expects first.
async fn bridge(
    up: &mut TunnelStream,
    down: &mut TunnelStream,
    result: impl Future<Output = OpenResult>,
) -> Bridged {
    let mut result = std::pin::pin!(result);
    let mut opened = false;
    let (mut to_down, mut to_up) = (Pump::new(), Pump::new());
    let outcome = std::future::poll_fn(|cx| {
        if !opened {
            if let Poll::Ready(code) = result.as_mut().poll(cx) {
                if !code.is_success() {
                    return Poll::Ready(Err(Ok(code)));
                }
                if let Err(e) = up.send_open_result(OpenResult::Succeeded) {
                    return Poll::Ready(Err(Err(e)));
                }
                opened = true;
            }
        }
        let a = to_down.poll(cx, up, down);
        if let Poll::Ready(Err(e)) = a {
            return Poll::Ready(Err(Err(e)));
        }
        if !opened {
            return Poll::Pending;
        }
        let b = to_up.poll(cx, down, up);
        if let Poll::Ready(Err(e)) = b {
            return Poll::Ready(Err(Err(e)));
        }
        if a.is_ready() && b.is_ready() {
            Poll::Ready(Ok(()))
        } else {
            Poll::Pending
        }
    })
    .await;
    match outcome {
        Ok(()) => Bridged::Done {
            up: to_down.bytes,
            down: to_up.bytes,
        },
        Err(Ok(code)) => {
            // The result and a RESET with its code go upstream together; the next
            // hop's stream is already reset by its side.
            up.fail_open(code);
            down.reset(code.code());
            Bridged::OpenFailed(code)
        }
        Err(Err(e)) => {
            if !opened {
                up.fail_open(OpenResult::GeneralFailure);
            } else {
                up.reset(OpenResult::GeneralFailure.code());
            }
            down.reset(OpenResult::GeneralFailure.code());
            Bridged::Failed(e)
        }
    }
}
