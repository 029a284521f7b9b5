//! The copy between a TCP socket and a tunnel stream, both ways, with no buffer of its own.
//!
//! Each TCP syscall, lock of the session's shard and wake-up of its driver costs more than
//! the bytes it moves, so a copy should move as much per call as there is. A buffer per
//! stream that large costs memory for every stream (1,000 streams × 2 × 64 KiB is 128 MB),
//! so the splice keeps none: the socket is read straight into the stream's send buffer,
//! for no more than the stream would take ([`TunnelStream::poll_fill_from`]), and written
//! straight from the stream's receive buffer, consuming only what it took
//! ([`TunnelStream::poll_write_to`]), so a full socket leaves the rest where it was. Both
//! calls hold the session's shard lock through the syscall, so each moves at most
//! [`CHUNK`].

use crate::tunnel::TunnelStream;
use std::future::poll_fn;
use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use tokio::io::AsyncWrite;
use tokio::net::TcpStream;

/// Bytes moved per socket call at most: loopback's largest TCP segment, so one call is one
/// segment on loopback; it also bounds how long a call holds the session's shard lock.
pub(crate) const CHUNK: usize = 64 * 1024;

/// Socket → stream.
#[derive(Default)]
struct Up {
    /// The socket reached its end; the stream is finished next.
    eof: bool,
    done: bool,
    bytes: u64,
    /// What the next read asks for: [`FIRST_READ`] at first, doubled (up to [`CHUNK`])
    /// each time a read fills it. The stream's send buffer grows to the space a read asks
    /// for, before the read, and keeps it while the stream is open, so a socket that only
    /// ever sends a request (or whose readiness was stale) should not cost 64 KiB.
    ask: usize,
}

/// What a socket's first read asks for: a request's worth.
const FIRST_READ: usize = 4 * 1024;

/// The ask after a read of `n` bytes that asked for `ask`: a full read says the socket
/// had more, so twice as much (up to [`CHUNK`]); a short one keeps it, so a drained
/// socket's small reads never shrink it.
fn next_ask(ask: usize, n: usize) -> usize {
    if n >= ask {
        (ask * 2).min(CHUNK)
    } else {
        ask
    }
}

impl Up {
    fn poll(
        &mut self,
        cx: &mut Context<'_>,
        tcp: &TcpStream,
        stream: &mut TunnelStream,
    ) -> Poll<io::Result<()>> {
        loop {
            if self.done {
                return Poll::Ready(Ok(()));
            }
            if self.eof {
                ready!(Pin::new(&mut *stream).poll_shutdown(cx))?;
                self.done = true;
                continue;
            }
            ready!(tcp.poll_read_ready(cx))?;
            let ask = self.ask.clamp(FIRST_READ, CHUNK);
            match ready!(stream.poll_fill_from(cx, tcp, ask))? {
                Some(0) => self.eof = true,
                Some(n) => {
                    self.bytes += n as u64;
                    self.ask = next_ask(ask, n);
                }
                // Readiness was stale; `poll_read_ready` now waits for the next.
                None => {}
            }
        }
    }
}

/// Stream → socket.
#[derive(Default)]
struct Down {
    /// The stream reached its end; the socket's sending side is shut next.
    eof: bool,
    done: bool,
    bytes: u64,
}

impl Down {
    fn poll(
        &mut self,
        cx: &mut Context<'_>,
        tcp: &mut TcpStream,
        stream: &mut TunnelStream,
    ) -> Poll<io::Result<()>> {
        loop {
            if self.done {
                return Poll::Ready(Ok(()));
            }
            if self.eof {
                ready!(Pin::new(&mut *tcp).poll_shutdown(cx))?;
                self.done = true;
                continue;
            }
            ready!(tcp.poll_write_ready(cx))?;
            match ready!(stream.poll_write_to(cx, tcp, CHUNK))? {
                Some(0) => self.eof = true,
                Some(m) => self.bytes += m as u64,
                // Readiness was stale; the bytes stay in the stream.
                None => {}
            }
        }
    }
}

/// Copies both ways between `tcp` and `stream` until both directions end, each end's
/// close passed on as a half-close (as `tokio::io::copy_bidirectional`). Returns the bytes
/// moved socket → stream and stream → socket.
///
/// # Errors
/// The first I/O error of either direction.
pub(crate) async fn splice(
    tcp: &mut TcpStream,
    stream: &mut TunnelStream,
) -> io::Result<(u64, u64)> {
    let (mut up, mut down) = (Up::default(), Down::default());
    poll_fn(|cx| {
        let up_done = up.poll(cx, tcp, stream)?.is_ready();
        let down_done = down.poll(cx, tcp, stream)?.is_ready();
        if up_done && down_done {
            Poll::Ready(Ok((up.bytes, down.bytes)))
        } else {
            Poll::Pending
        }
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_ask_for_a_request_first_and_grow_only_when_filled() {
        let first = Up::default().ask.clamp(FIRST_READ, CHUNK);
        assert_eq!(first, FIRST_READ);
        // A request's few bytes, then stale readiness: the buffer is never asked to grow.
        assert_eq!(next_ask(first, 16), FIRST_READ);
        // A bulk sender fills every read: 4, 8, 16, 32, 64 KiB, and no further.
        let mut ask = first;
        for _ in 0..8 {
            ask = next_ask(ask, ask);
        }
        assert_eq!(ask, CHUNK);
        // A socket drained mid-transfer keeps the size it reached.
        assert_eq!(next_ask(CHUNK, 100), CHUNK);
    }
}
