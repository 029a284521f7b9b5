//! The stream API the application drives: open, write, finish, read, reset.

use super::*;

impl Connection {
    pub(super) fn new_stream(&self) -> Stream {
        Stream {
            send: SendHalf::new(self.config.stream_window, self.config.stream_send_buffer),
            recv: RecvHalf::new(self.config.stream_window),
            write_blocked: false,
            read_notified: false,
        }
    }

    pub(super) fn maybe_forget(&mut self, id: StreamId) {
        if let Some(s) = self.streams.get(&id) {
            let send_done = s.send.reset || (s.send.fin_sent && s.send.buffered() == 0);
            if send_done && s.recv.is_done() {
                self.streams.remove(&id);
            }
        }
    }

    /// Opens a stream to `target`; the peer learns of it with the first symbol.
    pub fn open_stream(&mut self, target: Target) -> Result<StreamId, StreamApiError> {
        if !self.is_established() {
            return Err(StreamApiError::NotConnected);
        }
        if self.streams.len() >= self.config.max_streams {
            return Err(StreamApiError::TooManyStreams);
        }
        let id = self.next_local_stream;
        self.next_local_stream += 2;
        self.streams.insert(id, self.new_stream());
        self.control.push_back(OwnedFrame::Open { id, target });
        Ok(id)
    }

    /// Queues bytes on a stream; returns how many were taken (0 = blocked until
    /// [`Event::StreamWritable`]).
    pub fn write(&mut self, id: StreamId, data: &[u8]) -> Result<usize, StreamApiError> {
        if matches!(self.state, State::Drained | State::Closing { .. }) {
            return Err(StreamApiError::NotConnected);
        }
        let s = self
            .streams
            .get_mut(&id)
            .ok_or(StreamApiError::UnknownStream)?;
        if s.send.reset {
            return Err(StreamApiError::Reset);
        }
        let budget = self.config.session_send_buffer;
        let mut room = budget.saturating_sub(self.send_buffered);
        if room < data.len() {
            // The running total only over-estimates (resets and forgotten streams do not
            // subtract); recount before refusing.
            self.send_buffered = self.streams.values().map(|s| s.send.buffered()).sum();
            room = budget.saturating_sub(self.send_buffered);
        }
        let Some(s) = self.streams.get_mut(&id) else {
            return Err(StreamApiError::UnknownStream);
        };
        let n = s.send.write(&data[..data.len().min(room)]);
        self.send_buffered += n;
        if n < data.len() {
            s.write_blocked = true;
            if room < data.len() {
                if !self.budget_blocked {
                    tracing::debug!(
                        budget,
                        "session send buffer full: stream writes wait for the peer"
                    );
                }
                self.budget_blocked = true;
            }
        }
        Ok(n)
    }

    /// Ends the sending direction of a stream (TCP half-close).
    pub fn finish(&mut self, id: StreamId) -> Result<(), StreamApiError> {
        let s = self
            .streams
            .get_mut(&id)
            .ok_or(StreamApiError::UnknownStream)?;
        s.send.fin_requested = true;
        Ok(())
    }

    /// Reads from a stream.
    pub fn read(&mut self, id: StreamId, buf: &mut [u8]) -> Result<ReadOutcome, StreamApiError> {
        let s = self
            .streams
            .get_mut(&id)
            .ok_or(StreamApiError::UnknownStream)?;
        let out = s.recv.read(buf);
        match out {
            ReadOutcome::Data(n) => {
                self.data_read += n as u64;
                self.stats.stream_bytes_read += n as u64;
                if let Some(max) = s.recv.credit_update() {
                    self.control
                        .push_back(OwnedFrame::MaxStreamData { id, max });
                }
                // A quarter of the window, like the streams' (see `RecvHalf::credit_update`).
                if self.local_max_data - self.data_read <= self.config.session_window / 4 * 3 {
                    self.local_max_data = self.data_read + self.config.session_window;
                    self.control.push_back(OwnedFrame::MaxData {
                        max: self.local_max_data,
                    });
                }
            }
            ReadOutcome::Blocked => s.read_notified = false,
            ReadOutcome::Finished | ReadOutcome::Reset(_) => {
                s.read_notified = false;
                self.maybe_forget(id);
            }
        }
        Ok(out)
    }

    /// Abruptly ends a stream in both directions.
    pub fn reset(&mut self, id: StreamId, code: u8) -> Result<(), StreamApiError> {
        let s = self
            .streams
            .get_mut(&id)
            .ok_or(StreamApiError::UnknownStream)?;
        s.send.reset = true;
        if s.recv.reset.is_none() {
            s.recv.reset = Some(code);
        }
        self.control.push_back(OwnedFrame::Reset { id, code });
        self.streams.remove(&id);
        Ok(())
    }

    /// Reports the connect result of a peer-opened stream.
    ///
    /// # Errors
    /// [`StreamApiError::UnknownStream`] if the stream is gone.
    pub fn send_open_result(
        &mut self,
        id: StreamId,
        code: crate::frame::OpenResult,
    ) -> Result<(), StreamApiError> {
        if !self.streams.contains_key(&id) {
            return Err(StreamApiError::UnknownStream);
        }
        self.control.push_back(OwnedFrame::OpenResult { id, code });
        Ok(())
    }

    /// Whether a write on `id` would take bytes now.
    pub fn is_writable(&self, id: StreamId) -> bool {
        self.streams.get(&id).is_some_and(|s| s.send.is_writable())
    }
}
