//! Forward role: a SOCKSv5 server whose CONNECTs become streams of one tunnel session to
//! the reverse proxy. The session is re-established whenever it dies.

use crate::drain;
use crate::driver::{Driver, DriverChannels, SessionEvent};
use crate::live::Live;
use crate::metrics::{SocksOutcome, TransparentOutcome};
use crate::reply;
use crate::resolve::{connect_next, PeerResolver};
use crate::socks::{self, SocksAuth};
use crate::transparent::{self, Gateway};
use crate::tunnel::TunnelStream;
use crate::ForwardSettings;
use ctcp_proto::{ConnectionError, ConnectionHandle, OpenResult};
use ctcp_socks5::Reply;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;

/// What SOCKS clients see of the tunnel.
#[derive(Debug, Clone)]
enum Tunnel {
    /// The first handshake, or the first after an established session was lost, is under
    /// way: wait for it (at most `no_answer_after`).
    Connecting,
    /// A session is established.
    Up(ConnectionHandle),
    /// No session can serve now (the reverse does not answer, or refused us); why, for
    /// the log. Clients get a failure reply at once while the keeper keeps retrying.
    Down(Arc<str>),
}

/// How the last attempt failed, so a repeat of the same failure logs at debug level and
/// only a change (or the first failure) at warn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Failure {
    NoAnswer,
    Refused,
    Lost,
}

/// How long the first handshake may go unanswered before SOCKS clients are refused: a
/// second, or three of the configured initial round trips on slower paths. The handshake
/// itself keeps going until its own timeout.
pub(crate) fn no_answer_after(t: &ctcp_proto::TransportConfig) -> Duration {
    (t.initial_rtt * 3).max(Duration::from_secs(1))
}

/// Keeps one session to the reverse proxy alive; publishes the tunnel's state.
async fn session_keeper(
    driver: Driver,
    mut channels: DriverChannels,
    mut peer: PeerResolver,
    no_answer_after: Duration,
    current: watch::Sender<Tunnel>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut backoff = Duration::from_millis(200);
    let mut pending = connect_next(&driver, &mut peer, &mut backoff).await;
    let mut established = false;
    let mut last_failure: Option<Failure> = None;
    let no_answer = tokio::time::sleep(no_answer_after);
    tokio::pin!(no_answer);
    let mut no_answer_armed = true;
    loop {
        tokio::select! {
            ev = channels.sessions.recv() => match ev {
                Some(SessionEvent::Connected(h)) if h == pending => {
                    tracing::info!(peer = peer.name(), session = h.0, "tunnel session established");
                    peer.reset();
                    backoff = Duration::from_millis(200);
                    established = true;
                    last_failure = None;
                    let _ = current.send(Tunnel::Up(h));
                }
                Some(SessionEvent::Lost(h, e)) if h == pending => {
                    if *shutdown.borrow() {
                        return;
                    }
                    let name = peer.name().to_owned();
                    let (failure, why) = if established {
                        (Failure::Lost, format!("tunnel session to {name} lost: {e}"))
                    } else if matches!(e, ConnectionError::HandshakeTimeout) {
                        (Failure::NoAnswer, format!("no answer from {name} ({e})"))
                    } else {
                        (Failure::Refused, format!("handshake with {name} failed: {e}"))
                    };
                    if last_failure == Some(failure) {
                        tracing::debug!(peer = %name, retry_in = ?backoff, "{why}; retrying");
                    } else {
                        tracing::warn!(peer = %name, retry_in = ?backoff, "{why}; retrying");
                    }
                    last_failure = Some(failure);
                    if established {
                        // A session that worked (the reverse restarting, say) is likely to
                        // come back at once: clients wait for it as they do at start-up,
                        // up to `no_answer_after` past the retry.
                        let _ = current.send(Tunnel::Connecting);
                        no_answer.as_mut().reset(tokio::time::Instant::now() + backoff + no_answer_after);
                        no_answer_armed = true;
                    } else {
                        let _ = current.send(Tunnel::Down(why.into()));
                    }
                    tokio::select! {
                        _ = tokio::time::sleep(backoff) => {}
                        _ = shutdown.changed() => if *shutdown.borrow() { return },
                    }
                    backoff = (backoff * 2).min(Duration::from_secs(10));
                    pending = connect_next(&driver, &mut peer, &mut backoff).await;
                    established = false;
                }
                Some(_) => {}
                None => return,
            },
            _ = &mut no_answer, if no_answer_armed => {
                no_answer_armed = false;
                if matches!(*current.borrow(), Tunnel::Connecting) {
                    let why = format!("no answer from {} yet", peer.name());
                    tracing::warn!(peer = peer.name(), "{why}; refusing SOCKS clients until the tunnel is up");
                    last_failure = Some(Failure::NoAnswer);
                    let _ = current.send(Tunnel::Down(why.into()));
                }
            }
            _ = shutdown.changed() => if *shutdown.borrow() { return },
        }
    }
}

/// Accepts on the transparent listener, or waits forever without one.
async fn accept_gateway(gateway: Option<&Gateway>) -> io::Result<(TcpStream, SocketAddr)> {
    match gateway {
        Some(g) => g.listener.accept().await,
        None => std::future::pending().await,
    }
}

/// Runs the forward role on `listener` (and the transparent listener `gateway`, if any)
/// until `shutdown` turns true, then drains. `peer` resolves the reverse proxy
/// (`settings.peer`) again for each reconnect; `auth` is the SOCKS policy a reload may
/// swap (it starts as `settings.socks_auth`).
///
/// # Errors
/// Fails if accepting connections fails persistently.
#[allow(clippy::too_many_arguments)]
pub async fn serve(
    listener: TcpListener,
    gateway: Option<Gateway>,
    udp_gateway: Option<crate::transparent_udp::UdpGateway>,
    driver: Driver,
    channels: DriverChannels,
    settings: Arc<ForwardSettings>,
    peer: PeerResolver,
    auth: Live<SocksAuth>,
    mut shutdown: watch::Receiver<bool>,
) -> io::Result<()> {
    let (current_tx, current) = watch::channel(Tunnel::Connecting);
    tokio::spawn(session_keeper(
        driver.clone(),
        channels,
        peer,
        no_answer_after(&settings.transport),
        current_tx,
        shutdown.clone(),
    ));
    // Issue 27: SOCKS UDP ASSOCIATE, when the session may carry datagrams.
    let udp = settings
        .transport
        .datagrams
        .then(|| crate::datagram::start_forward(&driver));
    // Issue 27: the transparent UDP listener's flows ride the session as datagrams too.
    if udp_gateway.is_some() && udp.is_none() {
        tracing::warn!("transparent UDP listener bound but datagrams are off (transport.datagrams): its datagrams are dropped");
    }
    if let (Some(g), Some(flows)) = (udp_gateway, udp.clone()) {
        let current = current.clone();
        tokio::spawn(crate::transparent_udp::serve(
            g,
            driver.clone(),
            flows,
            move || match &*current.borrow() {
                Tunnel::Up(h) => Some(*h),
                _ => None,
            },
            settings.udp_flows,
            shutdown.clone(),
        ));
    }
    let mut tasks = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (tcp, from) = match accepted {
                    Ok(x) => x,
                    Err(e) => {
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let d = driver.clone();
                let (settings, auth) = (settings.clone(), auth.clone());
                let current = current.clone();
                let udp = udp.clone();
                driver.spawn_tcp_task(&mut tasks, None, tcp, move |tcp| async move {
                    if let Err(e) = handle_client(tcp, from, d, &settings, &auth, current, udp).await {
                        tracing::debug!(%from, error = %e, "client connection ended with error");
                    }
                });
            }
            accepted = accept_gateway(gateway.as_ref()) => {
                let (tcp, from) = match accepted {
                    Ok(x) => x,
                    Err(e) => {
                        tracing::warn!(error = %e, "transparent accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let Some(g) = gateway.as_ref() else { continue };
                let (mode, guard) = (g.mode, g.guard.clone());
                let d = driver.clone();
                let settings = settings.clone();
                let current = current.clone();
                driver.spawn_tcp_task(&mut tasks, None, tcp, move |tcp| async move {
                    let from = transparent::unmap(from);
                    if let Err(e) = handle_transparent(tcp, from, mode, &guard, d, &settings, current).await {
                        tracing::debug!(%from, error = %e, "transparent connection ended with error");
                    }
                });
            }
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
            _ = shutdown.changed() => if *shutdown.borrow() { break },
        }
    }
    // Stop accepting: new SOCKS (and redirected) clients are refused by the kernel from
    // here on.
    drop(listener);
    drop(gateway);
    drain::drain_and_close(&driver, &mut tasks, settings.drain_timeout).await;
    Ok(())
}

/// Sends a SOCKS reply and counts it.
async fn socks_reply(driver: &Driver, tcp: &mut TcpStream, reply: Reply) -> io::Result<()> {
    driver.count_socks_reply(reply.code());
    socks::reply(tcp, reply).await
}

/// The session to open a stream on, or why there is none. Waits only while the first
/// handshake is under way (the keeper turns that into `Down` after `no_answer_after`),
/// and at most `timeout`.
async fn wait_session(
    mut current: watch::Receiver<Tunnel>,
    timeout: Duration,
) -> Result<ConnectionHandle, Arc<str>> {
    let fut = async {
        loop {
            match &*current.borrow_and_update() {
                Tunnel::Up(h) => return Ok(*h),
                Tunnel::Down(why) => return Err(why.clone()),
                Tunnel::Connecting => {}
            }
            if current.changed().await.is_err() {
                return Err(Arc::from("shutting down"));
            }
        }
    };
    tokio::time::timeout(timeout, fut)
        .await
        .unwrap_or_else(|_| Err(Arc::from("no tunnel session in time")))
}

async fn handle_client(
    mut tcp: TcpStream,
    from: SocketAddr,
    driver: Driver,
    settings: &ForwardSettings,
    auth: &Live<SocksAuth>,
    current: watch::Receiver<Tunnel>,
    udp: Option<Arc<crate::datagram::ForwardFlows>>,
) -> io::Result<()> {
    let _ = tcp.set_nodelay(true);
    let req = match tokio::time::timeout(
        settings.handshake_timeout,
        socks::accept(&mut tcp, &auth.load(), udp.is_some()),
    )
    .await
    {
        Ok(Ok(r)) => {
            driver.count_socks_handshake(SocksOutcome::Accepted);
            r
        }
        Ok(Err(e)) => {
            driver.count_socks_handshake(e.outcome());
            if let Some(r) = e.reply() {
                driver.count_socks_reply(r.code());
            }
            return Err(e.into());
        }
        Err(_) => {
            driver.count_socks_handshake(SocksOutcome::Timeout);
            tracing::debug!(%from, "SOCKS handshake timed out");
            return Ok(());
        }
    };
    let session = match wait_session(current, settings.open_timeout).await {
        Ok(h) => h,
        Err(why) => {
            // The keeper logs the cause once at warn; one line per refused client would
            // flood the log while the peer is down.
            tracing::debug!(%from, target = %req.target, reason = %why, "no tunnel session; refusing");
            socks_reply(&driver, &mut tcp, Reply::GeneralFailure).await?;
            return Ok(());
        }
    };
    if let (true, Some(flows)) = (req.udp_associate, udp) {
        let hint = match &req.target {
            ctcp_proto::Target::Ip(a) => ctcp_socks5::TargetAddr::Ip(*a),
            ctcp_proto::Target::Domain(h, p) => ctcp_socks5::TargetAddr::Domain(h.clone(), *p),
        };
        return crate::datagram::associate(tcp, from, hint, driver, session, flows).await;
    }
    let (mut stream, result) = match TunnelStream::open(&driver, session, req.target.clone()) {
        Ok(x) => x,
        Err(e) => {
            tracing::warn!(%from, error = %e, "cannot open tunnel stream");
            socks_reply(&driver, &mut tcp, Reply::GeneralFailure).await?;
            return Ok(());
        }
    };
    if !req.early_data.is_empty() {
        stream.write_all(&req.early_data).await?;
    }
    let open_timeout = settings.open_timeout;
    let result = async move {
        match tokio::time::timeout(open_timeout, result).await {
            Ok(Ok(code)) => code,
            Ok(Err(_)) => OpenResult::GeneralFailure, // session died before the result came
            Err(_) => OpenResult::TimedOut,
        }
    };
    if settings.fast_open {
        socks_reply(&driver, &mut tcp, Reply::Succeeded).await?;
        return relay_fast_open(tcp, from, &req.target, stream, result).await;
    }
    let code = result.await;
    socks_reply(&driver, &mut tcp, reply::socks_reply(code)).await?;
    if !code.is_success() {
        tracing::debug!(%from, target = %req.target, %code, "target connect failed");
        stream.reset(code.code());
        return Ok(());
    }
    tracing::debug!(%from, target = %req.target, stream = stream.id(), "stream open");
    match crate::splice::splice(&mut tcp, &mut stream).await {
        Ok((up, down)) => {
            tracing::debug!(%from, up, down, "client done");
            Ok(())
        }
        Err(e) => {
            stream.reset(OpenResult::GeneralFailure.code());
            // A stream cut by the tunnel (reset by a gateway, session lost) reaches the
            // client as a reset, not as a clean end it could take for the whole reply.
            let _ = tcp.set_zero_linger();
            Err(e)
        }
    }
}

/// A connection from the transparent listener: its original destination, checked
/// against loops, becomes a tunnel stream's target, as a SOCKS CONNECT's would. The
/// client's TCP handshake is already complete (the kernel answered for the destination),
/// so it is relayed at once, as with fast open: a failed target connect resets the
/// client's connection, which is what it would have seen from the destination itself.
async fn handle_transparent(
    tcp: TcpStream,
    from: SocketAddr,
    mode: ctcp_config::TransparentMode,
    guard: &transparent::LoopGuard,
    driver: Driver,
    settings: &ForwardSettings,
    current: watch::Receiver<Tunnel>,
) -> io::Result<()> {
    let _ = tcp.set_nodelay(true);
    let refuse = |tcp: &TcpStream| {
        // An RST, so the client sees an error rather than an empty reply.
        let _ = tcp.set_zero_linger();
    };
    let dst = match transparent::original_dst(&tcp, mode) {
        Ok(d) => d,
        Err(e) => {
            driver.count_transparent(TransparentOutcome::NoOriginalDst);
            let why = "transparent connection refused: no original destination (was it \
                       redirected? is transparent_mode right?)";
            if guard.warn_no_dst.due(crate::clock::now()) {
                tracing::warn!(%from, %mode, error = %e, "{why}");
            } else {
                tracing::debug!(%from, %mode, error = %e, "{why}");
            }
            refuse(&tcp);
            return Ok(());
        }
    };
    if let Some(why) = guard.refusal(dst, transparent::is_local_address) {
        driver.count_transparent(TransparentOutcome::Loop);
        // At warn once per 10 s, so a client retrying a looping destination cannot flood
        // the log; the metric counts every one.
        if guard.warn_loop.due(crate::clock::now()) {
            tracing::warn!(%from, original_dst = %dst, "transparent connection refused, never tunnelled: {why}");
        } else {
            tracing::debug!(%from, original_dst = %dst, "transparent connection refused, never tunnelled: {why}");
        }
        refuse(&tcp);
        return Ok(());
    }
    let target = ctcp_proto::Target::Ip(dst);
    let session = match wait_session(current, settings.open_timeout).await {
        Ok(h) => h,
        Err(why) => {
            driver.count_transparent(TransparentOutcome::NoSession);
            tracing::debug!(%from, %target, reason = %why, "no tunnel session; refusing transparent connection");
            refuse(&tcp);
            return Ok(());
        }
    };
    let (stream, result) = match TunnelStream::open(&driver, session, target.clone()) {
        Ok(x) => x,
        Err(e) => {
            driver.count_transparent(TransparentOutcome::NoSession);
            tracing::warn!(%from, error = %e, "cannot open tunnel stream");
            refuse(&tcp);
            return Ok(());
        }
    };
    driver.count_transparent(TransparentOutcome::Tunnelled);
    tracing::debug!(%from, %target, stream = stream.id(), "transparent connection tunnelled");
    let open_timeout = settings.open_timeout;
    let result = async move {
        let code = match tokio::time::timeout(open_timeout, result).await {
            Ok(Ok(code)) => code,
            Ok(Err(_)) => OpenResult::GeneralFailure,
            Err(_) => OpenResult::TimedOut,
        };
        driver.count_transparent_open(reply::socks_reply(code).code());
        code
    };
    relay_fast_open(tcp, from, &target, stream, result).await
}

/// Relays a connection that was told "succeeded" before the connect result came: the
/// relay runs while the result is awaited, and a failed connect resets the client's
/// connection (RST, so the application sees an error rather than an empty reply).
async fn relay_fast_open(
    mut tcp: TcpStream,
    from: SocketAddr,
    target: &ctcp_proto::Target,
    mut stream: TunnelStream,
    result: impl std::future::Future<Output = OpenResult>,
) -> io::Result<()> {
    let failed = {
        let relay = crate::splice::splice(&mut tcp, &mut stream);
        tokio::pin!(relay);
        tokio::pin!(result);
        let mut opened = false;
        loop {
            // The result first: a failed open also ends the stream, and its EOF must not
            // reach the client as a clean close before the reset.
            tokio::select! {
                biased;
                code = &mut result, if !opened => {
                    if !code.is_success() {
                        break Some(code);
                    }
                    tracing::debug!(%from, %target, "stream open (fast open)");
                    opened = true;
                }
                done = &mut relay => match done {
                    Ok((up, down)) => {
                        tracing::debug!(%from, up, down, "client done");
                        break None;
                    }
                    Err(e) => {
                        tracing::debug!(%from, error = %e, "client connection ended with error");
                        break Some(OpenResult::GeneralFailure);
                    }
                },
            }
        }
    };
    if let Some(code) = failed {
        tracing::debug!(%from, %target, %code, "fast-open stream failed; resetting the client");
        stream.reset(code.code());
        // Linger 0 makes the close an RST: the client sees a reset, not a clean EOF.
        let _ = tcp.set_zero_linger();
    }
    Ok(())
}
