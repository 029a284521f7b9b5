//! The copy between a TCP socket and a tunnel stream, both ways, with no buffer per stream
//! and direction.
//!
//! Each TCP syscall, lock of the session's shard and wake-up of its driver costs more than
//! the bytes it moves, so a copy should move as much per call as there is. A buffer per
//! stream that large costs memory for every stream (1,000 streams × 2 × 64 KiB is 128 MB),
//! so the splice keeps none. It needs the tunnel stream's cooperation both ways:
//! - socket → stream: the stream says how much it would take now
//!   ([`TunnelStream::poll_write_room`]), the socket is read for no more than that into
//!   the runtime thread's scratch buffer, which the stream then takes: a buffer filled and
//!   emptied within one poll, one per thread;
//! - stream → socket: the socket is written straight from the stream's receive buffer and
//!   only what it took is consumed ([`TunnelStream::poll_write_to`]), so a full socket
//!   leaves the rest where it was, with no copy between.
//!
//! Bytes read from the socket that the stream then refuses (another stream took the
//! session's send budget between the two calls) wait in a per-direction `Vec`, which is
//! empty and unallocated otherwise.

use crate::tunnel::TunnelStream;
use std::cell::RefCell;
use std::future::poll_fn;
use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use tokio::io::AsyncWrite;
use tokio::net::TcpStream;

/// Bytes moved per socket call at most: loopback's largest TCP segment, so one call is one
/// segment on loopback; it also bounds how long a write holds the session's shard lock.
pub(crate) const CHUNK: usize = 64 * 1024;

thread_local! {
    /// The copy's scratch buffer: filled and emptied within one call of [`with_scratch`].
    static SCRATCH: RefCell<Vec<u8>> = RefCell::new(vec![0; CHUNK]);
}

/// Runs `f` on this thread's scratch buffer ([`CHUNK`] bytes), or on a fresh one if it is
/// in use (it never is: nothing inside `f` awaits or calls back into the splice).
fn with_scratch<R>(f: impl FnOnce(&mut [u8]) -> R) -> R {
    SCRATCH.with(|s| match s.try_borrow_mut() {
        Ok(mut buf) => f(&mut buf),
        Err(_) => f(&mut vec![0; CHUNK]),
    })
}

/// Socket → stream.
#[derive(Default)]
struct Up {
    /// Bytes read from the socket that the stream refused; written first.
    refused: Vec<u8>,
    /// The socket reached its end; the stream is finished next.
    eof: bool,
    done: bool,
    bytes: u64,
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
            while !self.refused.is_empty() {
                let n = ready!(Pin::new(&mut *stream).poll_write(cx, &self.refused))?;
                self.refused.drain(..n);
                self.bytes += n as u64;
            }
            self.refused = Vec::new();
            if self.eof {
                ready!(Pin::new(&mut *stream).poll_shutdown(cx))?;
                self.done = true;
                continue;
            }
            let room = ready!(stream.poll_write_room(cx))?;
            ready!(tcp.poll_read_ready(cx))?;
            let read = with_scratch(|buf| -> io::Result<Option<usize>> {
                let n = match tcp.try_read(&mut buf[..room.min(CHUNK)]) {
                    Ok(n) => n,
                    // Readiness was stale; `poll_read_ready` now waits for the next.
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
                    Err(e) => return Err(e),
                };
                if n > 0 {
                    let taken = match Pin::new(&mut *stream).poll_write(cx, &buf[..n]) {
                        Poll::Ready(r) => r?,
                        Poll::Pending => 0,
                    };
                    self.bytes += taken as u64;
                    self.refused.extend_from_slice(&buf[taken..n]);
                }
                Ok(Some(n))
            })?;
            if read == Some(0) {
                self.eof = true;
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
    fn scratch_in_use_falls_back_to_a_fresh_buffer() {
        let outer = with_scratch(|a| {
            a[0] = 7;
            with_scratch(|b| {
                b[0] = 9;
                (b.len(), b[0])
            })
        });
        assert_eq!(outer, (CHUNK, 9));
        assert_eq!(with_scratch(|a| a[0]), 7);
    }
}
