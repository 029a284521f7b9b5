//! `TunnelStream`: one ctcp stream as `AsyncRead + AsyncWrite`, with back-pressure both
//! ways and TCP half-close.

use crate::driver::Driver;
use ctcp_proto::{
    ConnectionError, ConnectionHandle, OpenResult, ReadOutcome, StreamApiError, StreamId, Target,
};
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::oneshot;

/// A bidirectional byte stream through the tunnel.
#[derive(Debug)]
pub struct TunnelStream {
    driver: Driver,
    conn: ConnectionHandle,
    id: StreamId,
    read_eof: bool,
    write_closed: bool,
}

fn lost(e: ConnectionError) -> io::Error {
    io::Error::new(
        io::ErrorKind::ConnectionAborted,
        format!("tunnel session ended: {e}"),
    )
}

fn api(e: StreamApiError) -> io::Error {
    io::Error::new(io::ErrorKind::BrokenPipe, e.to_string())
}

impl TunnelStream {
    /// Wraps an existing stream (reverse role: a stream the peer opened).
    pub fn new(driver: Driver, conn: ConnectionHandle, id: StreamId) -> Self {
        TunnelStream {
            driver,
            conn,
            id,
            read_eof: false,
            write_closed: false,
        }
    }

    /// Opens a stream to `target` on session `conn`, returning it and a receiver for the
    /// peer's connect result.
    ///
    /// # Errors
    /// Fails if the session is gone or at its stream limit.
    pub fn open(
        driver: &Driver,
        conn: ConnectionHandle,
        target: Target,
    ) -> io::Result<(Self, oneshot::Receiver<OpenResult>)> {
        let (tx, rx) = oneshot::channel();
        let id = driver
            .with_conn(conn, |c, w| {
                let id = c.open_stream(target)?;
                w.open_results.insert((conn, id), tx);
                Ok::<_, StreamApiError>(id)
            })
            .map_err(lost)?
            .map_err(api)?;
        Ok((TunnelStream::new(driver.clone(), conn, id), rx))
    }

    /// The stream id.
    pub fn id(&self) -> StreamId {
        self.id
    }

    /// Reports the connect result to the opener (reverse role).
    ///
    /// # Errors
    /// Fails if the session or stream is gone.
    pub fn send_open_result(&self, code: OpenResult) -> io::Result<()> {
        self.driver
            .with_conn(self.conn, |c, _| c.send_open_result(self.id, code))
            .map_err(lost)?
            .map_err(api)
    }

    /// Reports a failed connect (reverse role): the result and a RESET with the same code
    /// byte leave in one step, so they share a symbol. Why not a FIN: the opener may have
    /// answered its client before the result (fast open) and be relaying already; a FIN
    /// that overtook a lost result would reach that client as a clean, empty close, while
    /// a RESET always reads as an error.
    pub fn fail_open(&mut self, code: OpenResult) {
        let id = self.id;
        let _ = self.driver.with_conn(self.conn, |c, _| {
            let _ = c.send_open_result(id, code);
            c.reset(id, code.code())
        });
        self.read_eof = true;
        self.write_closed = true;
    }

    /// Resets the stream in both directions.
    pub fn reset(&mut self, code: u8) {
        let id = self.id;
        let _ = self.driver.with_conn(self.conn, |c, _| c.reset(id, code));
        self.read_eof = true;
        self.write_closed = true;
    }
}

/// The splice's view of a stream: the socket is read straight into the stream's send
/// buffer and written straight from its receive buffer, so the copy needs no buffer of
/// its own (`crate::splice`).
impl TunnelStream {
    /// Writes up to `max` readable bytes straight from the stream's buffer to `sock` (one
    /// vectored, non-blocking write under the session's shard lock, so `max` bounds how
    /// long the driver may wait for it) and consumes what the socket took.
    /// `Ready(Ok(Some(0)))` is the end of the stream; `Ready(Ok(None))` means the socket
    /// would block (its readiness must be polled again).
    pub(crate) fn poll_write_to(
        &mut self,
        cx: &mut Context<'_>,
        sock: &tokio::net::TcpStream,
        max: usize,
    ) -> Poll<io::Result<Option<usize>>> {
        if self.read_eof {
            return Poll::Ready(Ok(Some(0)));
        }
        let (conn, id) = (self.conn, self.id);
        let res = self.driver.with_conn_wake(conn, |c, w| {
            let out = c.peek(id, &mut []);
            match out {
                Ok(ReadOutcome::Data(_)) => {
                    let (a, b) = c.ready_slices(id);
                    let a = &a[..a.len().min(max)];
                    let b = &b[..b.len().min(max - a.len())];
                    let wrote =
                        sock.try_write_vectored(&[io::IoSlice::new(a), io::IoSlice::new(b)]);
                    // Consuming frees credit; only a credit update queued for the peer
                    // is news for the send loop.
                    let wake = match wrote {
                        Ok(m) => {
                            let _ = c.consume(crate::clock::now(), id, m);
                            c.has_control_queued()
                        }
                        Err(_) => false,
                    };
                    (Ok(wrote), wake)
                }
                other => {
                    if matches!(other, Ok(ReadOutcome::Blocked)) {
                        w.read.insert((conn, id), cx.waker().clone());
                    }
                    let wake = matches!(other, Ok(ReadOutcome::Finished | ReadOutcome::Reset(_)))
                        && c.has_control_queued();
                    (Err(other), wake)
                }
            }
        });
        match res {
            Err(e) => Poll::Ready(Err(lost(e))),
            Ok(Ok(Ok(0))) => Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
            Ok(Ok(Ok(m))) => Poll::Ready(Ok(Some(m))),
            Ok(Ok(Err(e))) if e.kind() == io::ErrorKind::WouldBlock => Poll::Ready(Ok(None)),
            Ok(Ok(Err(e))) => Poll::Ready(Err(e)),
            Ok(Err(other)) => self.read_outcome(Ok(other)).map_ok(|n| {
                debug_assert_eq!(n, 0);
                Some(0)
            }),
        }
    }

    /// Reads up to `max` bytes of `sock` straight into the stream's send buffer (one
    /// vectored, non-blocking read under the session's shard lock, for no more than the
    /// stream would take now). `Ready(Ok(Some(0)))` is the socket's end;
    /// `Ready(Ok(None))` means it had nothing (its readiness must be polled again);
    /// `Pending` while the stream has no room (woken when it has).
    pub(crate) fn poll_fill_from(
        &mut self,
        cx: &mut Context<'_>,
        sock: &tokio::net::TcpStream,
        max: usize,
    ) -> Poll<io::Result<Option<usize>>> {
        if self.write_closed {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "stream closed for writing",
            )));
        }
        let (conn, id) = (self.conn, self.id);
        let res = self.driver.with_conn_wake(conn, |c, w| {
            let mut read = false;
            let out = c.fill(id, max, |a, b| {
                read = true;
                sock.try_read_vectored(&mut [io::IoSliceMut::new(a), io::IoSliceMut::new(b)])
            });
            if !read && out.is_ok() {
                w.write.insert((conn, id), cx.waker().clone());
            }
            // Only bytes taken are something new to send, and only if the window has room
            // (else the acknowledgement that opens it wakes the send loop).
            let wake = matches!(out, Ok(Ok(n)) if n > 0) && c.can_send_now();
            ((out, read), wake)
        });
        match res {
            Err(e) => Poll::Ready(Err(lost(e))),
            Ok((Err(e), _)) => Poll::Ready(Err(api(e))),
            Ok((Ok(_), false)) => Poll::Pending,
            Ok((Ok(Ok(n)), true)) => Poll::Ready(Ok(Some(n))),
            Ok((Ok(Err(e)), true)) if e.kind() == io::ErrorKind::WouldBlock => {
                Poll::Ready(Ok(None))
            }
            Ok((Ok(Err(e)), true)) => Poll::Ready(Err(e)),
        }
    }

    /// `poll_read`'s and `poll_write_to`'s answer to a read outcome: data, end, or error.
    fn read_outcome(
        &mut self,
        res: Result<Result<ReadOutcome, StreamApiError>, ConnectionError>,
    ) -> Poll<io::Result<usize>> {
        match res {
            Err(e) => Poll::Ready(Err(lost(e))),
            Ok(Err(StreamApiError::UnknownStream)) => {
                self.read_eof = true;
                Poll::Ready(Ok(0))
            }
            Ok(Err(e)) => Poll::Ready(Err(api(e))),
            Ok(Ok(ReadOutcome::Data(n))) => Poll::Ready(Ok(n)),
            Ok(Ok(ReadOutcome::Blocked)) => Poll::Pending,
            Ok(Ok(ReadOutcome::Finished)) => {
                self.read_eof = true;
                Poll::Ready(Ok(0))
            }
            Ok(Ok(ReadOutcome::Reset(code))) => {
                self.read_eof = true;
                Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::ConnectionReset,
                    format!("stream reset by peer (code {code})"),
                )))
            }
        }
    }
}

impl AsyncRead for TunnelStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.read_eof {
            return Poll::Ready(Ok(()));
        }
        let (conn, id) = (this.conn, this.id);
        let res = this.driver.with_conn_wake(conn, |c, w| {
            let out = c.read(crate::clock::now(), id, buf.initialize_unfilled());
            if matches!(out, Ok(ReadOutcome::Blocked)) {
                w.read.insert((conn, id), cx.waker().clone());
            }
            // Reading frees credit; only a credit update queued for the peer is news
            // for the send loop.
            let wake = !matches!(out, Ok(ReadOutcome::Blocked)) && c.has_control_queued();
            (out, wake)
        });
        this.read_outcome(res).map_ok(|n| buf.advance(n))
    }
}

impl AsyncWrite for TunnelStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.write_closed {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "stream closed for writing",
            )));
        }
        let (conn, id) = (this.conn, this.id);
        let res = this.driver.with_conn_wake(conn, |c, w| {
            let out = c.write(id, data);
            if matches!(out, Ok(0)) && !data.is_empty() {
                w.write.insert((conn, id), cx.waker().clone());
            }
            // Only bytes taken are something new to send, and only if the window has room.
            let wake = !matches!(out, Ok(0)) && c.can_send_now();
            (out, wake)
        });
        match res {
            Err(e) => Poll::Ready(Err(lost(e))),
            Ok(Err(e)) => Poll::Ready(Err(api(e))),
            Ok(Ok(0)) if !data.is_empty() => Poll::Pending,
            Ok(Ok(n)) => Poll::Ready(Ok(n)),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.write_closed {
            return Poll::Ready(Ok(()));
        }
        this.write_closed = true;
        let id = this.id;
        match this.driver.with_conn(this.conn, |c, _| c.finish(id)) {
            Ok(_) => Poll::Ready(Ok(())),
            Err(e) => Poll::Ready(Err(lost(e))),
        }
    }
}

impl Drop for TunnelStream {
    fn drop(&mut self) {
        // Dropped before both directions ended cleanly: tell the peer rather than leave it hanging.
        if !(self.read_eof && self.write_closed) {
            let id = self.id;
            let _ = self.driver.with_conn(self.conn, |c, _| c.reset(id, 0));
        }
        let mut inner = self.driver.shared.shard(self.conn).lock();
        inner.wakers.read.remove(&(self.conn, self.id));
        inner.wakers.write.remove(&(self.conn, self.id));
    }
}
