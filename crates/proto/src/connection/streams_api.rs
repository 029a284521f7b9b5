//! The stream API the application drives: open, write, finish, read, reset. The streams
//! part ([`crate::streams`]) does the work; this is the session's gate to it.

use super::{Connection, State, StreamApiError};
use crate::frame::{OpenResult, StreamId, Target};
use crate::stream::ReadOutcome;
use std::time::Instant;

impl Connection {
    /// Opens a stream to `target`; the peer learns of it with the first symbol.
    pub fn open_stream(&mut self, target: Target) -> Result<StreamId, StreamApiError> {
        if !self.is_established() {
            return Err(StreamApiError::NotConnected);
        }
        self.streams.open(target, &self.config)
    }

    /// Queues bytes on a stream; returns how many were taken (0 = blocked until
    /// [`crate::Event::StreamWritable`]).
    pub fn write(&mut self, id: StreamId, data: &[u8]) -> Result<usize, StreamApiError> {
        if matches!(self.state, State::Drained | State::Closing { .. }) {
            return Err(StreamApiError::NotConnected);
        }
        self.streams.write(id, data, &self.config)
    }

    /// Lets `fill` write up to `max` bytes of a stream straight into its send buffer, given
    /// as the two halves of the buffer's free space (old bytes), and queues the bytes it says
    /// it wrote, as [`Connection::write`] would. A caller reads its socket into them, with
    /// no buffer of its own. `Ok(Ok(0))` without calling `fill` when the stream has no
    /// room (then [`crate::Event::StreamWritable`] follows when it has, or when the peer
    /// resets it), when `max` is zero, or when the stream was finished.
    ///
    /// # Errors
    /// As [`Connection::write`]'s; `fill`'s own error is passed through.
    pub fn fill<E>(
        &mut self,
        id: StreamId,
        max: usize,
        fill: impl FnOnce(&mut [u8], &mut [u8]) -> Result<usize, E>,
    ) -> Result<Result<usize, E>, StreamApiError> {
        if matches!(self.state, State::Drained | State::Closing { .. }) {
            return Err(StreamApiError::NotConnected);
        }
        self.streams.fill(id, max, &self.config, fill)
    }

    /// Ends the sending direction of a stream (TCP half-close).
    pub fn finish(&mut self, id: StreamId) -> Result<(), StreamApiError> {
        self.streams.finish(id)
    }

    /// Reads from a stream at `now` (the time drives receive-credit autotuning,
    /// [`crate::TransportConfig::credit_autotune`]).
    pub fn read(
        &mut self,
        now: Instant,
        id: StreamId,
        buf: &mut [u8],
    ) -> Result<ReadOutcome, StreamApiError> {
        let srtt = self.paths.get(self.paths.lead()).rtt.srtt();
        let out = self.streams.read(now, srtt, id, buf, &self.config)?;
        if let ReadOutcome::Data(n) = out {
            self.stats.stream_bytes_read += n as u64;
        }
        Ok(out)
    }

    /// Copies readable bytes of a stream into `buf` without consuming them, so a caller
    /// whose socket takes only part of them consumes just that part
    /// ([`Connection::consume`]); an ended stream reads as [`Connection::read`] would.
    ///
    /// # Errors
    /// As [`Connection::read`]'s.
    pub fn peek(&mut self, id: StreamId, buf: &mut [u8]) -> Result<ReadOutcome, StreamApiError> {
        self.streams.peek(id, buf)
    }

    /// The bytes of a stream a read would return now, as the two halves of its buffer
    /// (empty if none or the stream is gone); after a [`Connection::peek`] with an empty
    /// buffer said `Data`, they let a caller write them out with no copy of its own.
    pub fn ready_slices(&self, id: StreamId) -> (&[u8], &[u8]) {
        self.streams.ready_slices(id)
    }

    /// Consumes the first `n` readable bytes of a stream at `now`, as reading them would.
    ///
    /// # Errors
    /// As [`Connection::read`]'s.
    pub fn consume(&mut self, now: Instant, id: StreamId, n: usize) -> Result<(), StreamApiError> {
        let srtt = self.paths.get(self.paths.lead()).rtt.srtt();
        let n = self.streams.consume(now, srtt, id, n, &self.config)?;
        self.stats.stream_bytes_read += n as u64;
        Ok(())
    }

    /// Abruptly ends a stream in both directions.
    pub fn reset(&mut self, id: StreamId, code: u8) -> Result<(), StreamApiError> {
        self.streams.reset(id, code)
    }

    /// Reports the connect result of a peer-opened stream.
    ///
    /// # Errors
    /// [`StreamApiError::UnknownStream`] if the stream is gone.
    pub fn send_open_result(
        &mut self,
        id: StreamId,
        code: OpenResult,
    ) -> Result<(), StreamApiError> {
        self.streams.send_open_result(id, code)
    }

    /// Whether control frames (credit updates, open results, resets) wait to be sent: a
    /// runtime need not wake its send loop after a read that queued none.
    pub fn has_control_queued(&self) -> bool {
        self.streams.has_control_queued()
    }

    /// Whether stream data written now could leave before the next acknowledgement: the
    /// session is up, some path's window has room, and the coding window is not full. A
    /// runtime need not wake its send loop for a write otherwise: the acknowledgement that
    /// makes room reaches that loop, which then sends what was written.
    pub fn can_send_now(&self) -> bool {
        if !self.is_established() {
            return true;
        }
        !self.encoder.is_full() && (0..self.paths.len()).any(|i| self.paths.get(i).window_open())
    }

    /// Whether a write on `id` would take bytes now.
    pub fn is_writable(&self, id: StreamId) -> bool {
        self.streams.is_writable(id, &self.config)
    }
}
