//! Reverse role: accept tunnel sessions, connect to the targets the forward side asks for,
//! and splice bytes both ways.

use crate::acl::Acl;
use crate::drain;
use crate::driver::{Driver, DriverChannels, IncomingStream, SessionEvent};
use crate::live::Live;
use crate::relay::{self, NextHop};
use crate::reply;
use crate::tunnel::TunnelStream;
use crate::ReverseSettings;
use ctcp_proto::{OpenResult, Target};
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio::task::JoinSet;

/// Runs the reverse role until `shutdown` turns true, then drains. `acl` says which
/// targets may be reached: a reload may swap it (it starts as `settings.acl`); each
/// stream goes by the one in force when it arrives. With `next` (the relay role) the
/// streams are carried on to the next gateway instead, and the ACL is not consulted.
///
/// # Errors
/// Fails only if the driver stops unexpectedly.
pub(crate) async fn serve(
    driver: Driver,
    mut channels: DriverChannels,
    settings: Arc<ReverseSettings>,
    acl: Live<Acl>,
    next: Option<NextHop>,
    mut shutdown: watch::Receiver<bool>,
) -> io::Result<()> {
    // Issue 27: one UDP socket per datagram flow, under the same ACL.
    if settings.transport.datagrams && next.is_none() {
        crate::datagram::start_reverse(&driver, acl.clone(), settings.udp_flows);
    }
    let mut tasks = JoinSet::new();
    loop {
        tokio::select! {
            // Shutdown first: once it is seen, no new stream task starts.
            biased;
            _ = shutdown.changed() => if *shutdown.borrow() { break },
            incoming = channels.incoming.recv() => {
                let Some(incoming) = incoming else { break };
                let (d, conn) = (driver.clone(), Some(incoming.conn));
                if let Some(next) = next.clone() {
                    driver.spawn_stream_task(&mut tasks, conn, async move { relay::handle_stream(d, incoming, &next).await });
                    continue;
                }
                let connect_timeout = settings.connect_timeout;
                let acl = acl.load();
                driver.spawn_stream_task(&mut tasks, conn, async move { handle_stream(d, incoming, &acl, connect_timeout).await });
            }
            ev = channels.sessions.recv() => match ev {
                Some(SessionEvent::Connected(h)) => tracing::info!(session = h.0, "session established"),
                Some(SessionEvent::Lost(h, e)) => tracing::info!(session = h.0, error = %e, "session ended"),
                None => break,
            },
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
        }
    }
    // The endpoint refuses new sessions from here on (the driver saw the shutdown too);
    // streams the forward opens on a live session are refused as well, so it stops
    // sending new work here, while the open ones finish.
    let refuse = {
        let driver = driver.clone();
        let mut incoming = channels.incoming;
        let mut sessions = channels.sessions;
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    i = incoming.recv() => {
                        let Some(i) = i else { return };
                        tracing::debug!(session = i.conn.0, stream = i.id, "draining: new stream refused");
                        TunnelStream::new(driver.clone(), i.conn, i.id).fail_open(OpenResult::GeneralFailure);
                    }
                    ev = sessions.recv() => match ev {
                        Some(SessionEvent::Lost(h, e)) => tracing::info!(session = h.0, error = %e, "session ended"),
                        Some(SessionEvent::Connected(_)) => {}
                        None => return,
                    },
                }
            }
        })
    };
    drain::drain_and_close(&driver, &mut tasks, settings.drain_timeout).await;
    if let Some(next) = &next {
        next.close().await;
    }
    refuse.abort();
    Ok(())
}

async fn resolve(target: &Target) -> Result<Vec<SocketAddr>, OpenResult> {
    match target {
        Target::Ip(a) => Ok(vec![*a]),
        Target::Domain(host, port) => match tokio::net::lookup_host((host.as_str(), *port)).await {
            Ok(addrs) => {
                let v: Vec<_> = addrs.collect();
                if v.is_empty() {
                    Err(OpenResult::HostUnreachable)
                } else {
                    Ok(v)
                }
            }
            Err(_) => Err(OpenResult::HostUnreachable),
        },
    }
}

async fn connect(target: &Target, acl: &Acl, timeout: Duration) -> Result<TcpStream, OpenResult> {
    let addrs = tokio::time::timeout(timeout, resolve(target))
        .await
        .map_err(|_| OpenResult::HostUnreachable)??;
    let allowed: Vec<SocketAddr> = addrs.into_iter().filter(|a| acl.allows(*a)).collect();
    if allowed.is_empty() {
        return Err(OpenResult::NotAllowed);
    }
    let mut last = OpenResult::GeneralFailure;
    for addr in allowed {
        match tokio::time::timeout(timeout, TcpStream::connect(addr)).await {
            Ok(Ok(s)) => {
                let _ = s.set_nodelay(true);
                return Ok(s);
            }
            Ok(Err(e)) => last = reply::from_io_error(&e),
            Err(_) => last = OpenResult::TimedOut,
        }
    }
    Err(last)
}

async fn handle_stream(
    driver: Driver,
    incoming: IncomingStream,
    acl: &Acl,
    connect_timeout: Duration,
) {
    let IncomingStream { conn, id, target } = incoming;
    let mut stream = TunnelStream::new(driver.clone(), conn, id);
    match connect(&target, acl, connect_timeout).await {
        Ok(mut tcp) => {
            tracing::debug!(session = conn.0, stream = id, %target, "connected to target");
            driver.count_target_connect(reply::socks_reply(OpenResult::Succeeded).code());
            if stream.send_open_result(OpenResult::Succeeded).is_err() {
                return;
            }
            match crate::splice::splice(&mut tcp, &mut stream).await {
                Ok((down, up)) => {
                    tracing::debug!(session = conn.0, stream = id, up, down, "stream done")
                }
                Err(e) => {
                    tracing::debug!(session = conn.0, stream = id, error = %e, "stream ended with error");
                    stream.reset(OpenResult::GeneralFailure.code());
                }
            }
        }
        Err(code) => {
            tracing::debug!(session = conn.0, stream = id, %target, %code, "connect failed");
            driver.count_target_connect(reply::socks_reply(code).code());
            stream.fail_open(code);
        }
    }
}
