//! Datagrams through the tunnel (issue 27): the driver hands the datagrams a session
//! receives to the role's datagram relay (SOCKS UDP ASSOCIATE and the UDP TPROXY listener
//! on the forward side, per-flow UDP sockets on the reverse side) through a bounded
//! channel; a full channel drops (counted).

use crate::driver::Inner;
use ctcp_proto::ConnectionHandle;
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
