//! Forward role: a SOCKSv5 server whose CONNECTs become streams of one tunnel session to
//! the reverse proxy. The session is re-established whenever it dies.

use crate::driver::{Driver, DriverChannels, SessionEvent};
use crate::live::Live;
use crate::metrics::SocksOutcome;
use crate::reply;
use crate::resolve::{connect_next, PeerResolver};
use crate::socks::{self, SocksAuth};
use crate::tunnel::TunnelStream;
use ctcp_proto::ConnectionHandle;
use std::io;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;

/// What the forward role needs beyond the endpoint.
#[derive(Debug, Clone)]
pub struct ForwardOptions {
    /// The reverse proxy's name, resolved again for each reconnect.
    pub peer: PeerResolver,
    /// SOCKS authentication policy (swapped on reload; read per connection).
    pub auth: Live<SocksAuth>,
    /// How long a SOCKS client may take to send its greeting and request.
    pub handshake_timeout: Duration,
    /// How long to wait for the reverse side's connect result.
    pub open_timeout: Duration,
    /// Reply success at once instead of after the connect result.
    pub fast_open: bool,
    /// How long to let streams drain after SIGTERM.
    pub drain_timeout: Duration,
}

/// Keeps one session to the reverse proxy alive; publishes the current handle.
async fn session_keeper(
    driver: Driver,
    mut channels: DriverChannels,
    mut peer: PeerResolver,
    current: watch::Sender<Option<ConnectionHandle>>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut backoff = Duration::from_millis(200);
    let mut pending = connect_next(&driver, &mut peer, &mut backoff).await;
    loop {
        tokio::select! {
            ev = channels.sessions.recv() => match ev {
                Some(SessionEvent::Connected(h)) => {
                    tracing::info!(peer = peer.name(), session = h.0, "tunnel session established");
                    backoff = Duration::from_millis(200);
                    peer.reset();
                    let _ = current.send(Some(h));
                }
                Some(SessionEvent::Lost(h, e)) => {
                    if *shutdown.borrow() {
                        continue;
                    }
                    if h == pending {
                        let _ = current.send(None);
                        tracing::warn!(peer = peer.name(), error = %e, retry_in = ?backoff, "tunnel session lost; reconnecting");
                        tokio::time::sleep(backoff).await;
                        backoff = (backoff * 2).min(Duration::from_secs(10));
                        pending = connect_next(&driver, &mut peer, &mut backoff).await;
                    }
                }
                None => return,
            },
            _ = shutdown.changed() => if *shutdown.borrow() { return },
        }
    }
}

/// Runs the forward role on `listener` until `shutdown` turns true, then drains.
///
/// # Errors
/// Fails if accepting connections fails persistently.
pub async fn serve(
    listener: TcpListener,
    driver: Driver,
    channels: DriverChannels,
    opts: ForwardOptions,
    mut shutdown: watch::Receiver<bool>,
) -> io::Result<()> {
    let (current_tx, current) = watch::channel(None);
    tokio::spawn(session_keeper(
        driver.clone(),
        channels,
        opts.peer.clone(),
        current_tx,
        shutdown.clone(),
    ));
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
                let driver = driver.clone();
                let opts = opts.clone();
                let current = current.clone();
                tasks.spawn(async move {
                    if let Err(e) = handle_client(tcp, from, driver, opts, current).await {
                        tracing::debug!(%from, error = %e, "client connection ended with error");
                    }
                });
            }
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
            _ = shutdown.changed() => if *shutdown.borrow() { break },
        }
    }
    drop(listener);
    tracing::info!(streams = tasks.len(), "draining client connections");
    let _ = tokio::time::timeout(opts.drain_timeout, async {
        while tasks.join_next().await.is_some() {}
    })
    .await;
    tasks.abort_all();
    Ok(())
}

/// Sends a SOCKS reply and counts it.
async fn socks_reply(driver: &Driver, tcp: &mut TcpStream, code: u8) -> io::Result<()> {
    driver.count_socks_reply(code);
    socks::reply(tcp, code).await
}

async fn wait_session(
    mut current: watch::Receiver<Option<ConnectionHandle>>,
    timeout: Duration,
) -> Option<ConnectionHandle> {
    let fut = async {
        loop {
            if let Some(h) = *current.borrow_and_update() {
                return Some(h);
            }
            if current.changed().await.is_err() {
                return None;
            }
        }
    };
    tokio::time::timeout(timeout, fut).await.ok().flatten()
}

async fn handle_client(
    mut tcp: TcpStream,
    from: SocketAddr,
    driver: Driver,
    opts: ForwardOptions,
    current: watch::Receiver<Option<ConnectionHandle>>,
) -> io::Result<()> {
    let _ = tcp.set_nodelay(true);
    let req = match tokio::time::timeout(
        opts.handshake_timeout,
        socks::accept(&mut tcp, &opts.auth.load()),
    )
    .await
    {
        Ok(Ok(r)) => {
            driver.count_socks_handshake(SocksOutcome::Accepted);
            r
        }
        Ok(Err(e)) => {
            driver.count_socks_handshake(e.outcome());
            if let Some(code) = e.reply_code() {
                driver.count_socks_reply(code);
            }
            return Err(e.into());
        }
        Err(_) => {
            driver.count_socks_handshake(SocksOutcome::Timeout);
            tracing::debug!(%from, "SOCKS handshake timed out");
            return Ok(());
        }
    };
    let Some(session) = wait_session(current, opts.open_timeout).await else {
        tracing::warn!(%from, target = %req.target, "no tunnel session; refusing");
        socks_reply(&driver, &mut tcp, reply::GENERAL_FAILURE).await?;
        return Ok(());
    };
    let (mut stream, result) = match TunnelStream::open(&driver, session, req.target.clone()) {
        Ok(x) => x,
        Err(e) => {
            tracing::warn!(%from, error = %e, "cannot open tunnel stream");
            socks_reply(&driver, &mut tcp, reply::GENERAL_FAILURE).await?;
            return Ok(());
        }
    };
    if !req.early_data.is_empty() {
        stream.write_all(&req.early_data).await?;
    }
    let open_timeout = opts.open_timeout;
    let result = async move {
        match tokio::time::timeout(open_timeout, result).await {
            Ok(Ok(code)) => code,
            Ok(Err(_)) => reply::GENERAL_FAILURE, // session died before the result came
            Err(_) => reply::TTL_EXPIRED,
        }
    };
    if opts.fast_open {
        socks_reply(&driver, &mut tcp, reply::SUCCEEDED).await?;
        return relay_fast_open(tcp, from, &req.target, stream, result).await;
    }
    let code = result.await;
    socks_reply(&driver, &mut tcp, code).await?;
    if code != reply::SUCCEEDED {
        tracing::debug!(%from, target = %req.target, code, "target connect failed");
        stream.reset(code);
        return Ok(());
    }
    tracing::debug!(%from, target = %req.target, stream = stream.id(), "stream open");
    match tokio::io::copy_bidirectional(&mut tcp, &mut stream).await {
        Ok((up, down)) => {
            tracing::debug!(%from, up, down, "client done");
            Ok(())
        }
        Err(e) => {
            stream.reset(reply::GENERAL_FAILURE);
            Err(e)
        }
    }
}

/// Relays a connection that was told "succeeded" before the connect result came: the
/// relay runs while the result is awaited, and a failed connect resets the client's
/// connection (RST, so the application sees an error rather than an empty reply).
async fn relay_fast_open(
    mut tcp: TcpStream,
    from: SocketAddr,
    target: &ctcp_proto::Target,
    mut stream: TunnelStream,
    result: impl std::future::Future<Output = u8>,
) -> io::Result<()> {
    let failed = {
        let relay = tokio::io::copy_bidirectional(&mut tcp, &mut stream);
        tokio::pin!(relay);
        tokio::pin!(result);
        let mut opened = false;
        loop {
            // The result first: a failed open also ends the stream, and its EOF must not
            // reach the client as a clean close before the reset.
            tokio::select! {
                biased;
                code = &mut result, if !opened => {
                    if code != reply::SUCCEEDED {
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
                        break Some(reply::GENERAL_FAILURE);
                    }
                },
            }
        }
    };
    if let Some(code) = failed {
        tracing::debug!(%from, %target, code, "fast-open stream failed; resetting the client");
        stream.reset(code);
        // Linger 0 makes the close an RST: the client sees a reset, not a clean EOF.
        let _ = tcp.set_zero_linger();
    }
    Ok(())
}
