//! The application's side of the streams: writes into send buffers within each stream's
//! limit and the session's send budget (and the room a write would find), reads and peeks
//! from receive buffers, with the credit updates that consuming queues.

use super::{OwnedFrame, Streams};
use crate::config::TransportConfig;
use crate::connection::{Event, StreamApiError};
use crate::frame::StreamId;
use crate::stream::ReadOutcome;
use std::collections::VecDeque;
use std::time::{Duration, Instant};

impl Streams {
    /// Queues bytes on a stream within its credit and the session's send budget; returns
    /// how many were taken.
    pub(crate) fn write(
        &mut self,
        id: StreamId,
        data: &[u8],
        config: &TransportConfig,
    ) -> Result<usize, StreamApiError> {
        let cap = self.stream_cap(config);
        let s = self.map.get_mut(&id).ok_or(StreamApiError::UnknownStream)?;
        if s.send.reset {
            return Err(StreamApiError::Reset);
        }
        let budget = config.session_send_buffer;
        let room = budget.saturating_sub(self.send_buffered);
        let own_room = s.send.limit(cap).saturating_sub(s.send.buffered());
        let n = s.send.write(&data[..data.len().min(room)], cap);
        self.send_buffered += n;
        if n < data.len() && !s.send.fin_requested {
            self.block_writer(id, own_room <= room, config);
        }
        if n > 0 {
            self.mark_ready(id);
        }
        Ok(n)
    }

    /// Records that a writer of `id` was refused bytes: by its own limit (`own`; woken when
    /// half of it drained) or by the session budget (queued for the next refill).
    fn block_writer(&mut self, id: StreamId, own: bool, config: &TransportConfig) {
        let Some(s) = self.map.get_mut(&id) else {
            return;
        };
        if own {
            s.write_blocked = true;
        } else if !s.budget_waiting {
            s.budget_waiting = true;
            self.budget_waiters.push_back(id);
            if self.budget_waiters.len() > 2 * self.map.len() + 16 {
                // Forgotten streams' ids: keep the queue bounded by the open streams.
                let map = &self.map;
                self.budget_waiters
                    .retain(|id| map.get(id).is_some_and(|s| s.budget_waiting));
            }
            if !self.budget_blocked {
                tracing::debug!(
                    budget = config.session_send_buffer,
                    "session send buffer full: stream writes wait for the peer"
                );
            }
            if !self.budget_blocked {
                self.budget_drained = 0;
            }
            self.budget_blocked = true;
        }
    }

    /// Wakes writers the session budget refused, in the order it refused them, as its room
    /// comes back: each time another quarter of the budget has drained, a batch whose own
    /// rooms cover the free room; every waiter once the budget runs low (a quarter left),
    /// so none waits on writers that were woken and wrote nothing. Waking them all at each
    /// refill woke far more writers than the room could take, and the rest only took the
    /// session's lock to block again.
    pub(super) fn wake_budget_waiters(
        &mut self,
        config: &TransportConfig,
        events: &mut VecDeque<Event>,
    ) {
        let budget = config.session_send_buffer;
        let low = self.send_buffered <= budget / 4;
        let refilled =
            self.send_buffered <= budget - budget / 4 && self.budget_drained >= budget / 4;
        if !self.budget_blocked || !(low || refilled) {
            return;
        }
        self.budget_drained = 0;
        let stream_cap = self.stream_cap(config);
        let free = budget - self.send_buffered;
        let mut promised = 0;
        while low || promised < free {
            let Some(id) = self.budget_waiters.pop_front() else {
                break;
            };
            // A forgotten stream's id: it waits for nothing.
            let Some(s) = self.map.get_mut(&id) else {
                continue;
            };
            s.budget_waiting = false;
            if s.send.is_writable(stream_cap) {
                promised += s.send.room(stream_cap).max(1);
                events.push_back(Event::StreamWritable(id));
            } else {
                // Its own limit shrank meanwhile (more streams share the budget).
                s.write_blocked = true;
            }
        }
        self.budget_blocked = !self.budget_waiters.is_empty();
    }

    /// Lets `fill` write up to `max` bytes of a stream straight into its send buffer (the
    /// room a [`Streams::write`] would find, at most); the bytes it says it wrote are
    /// queued as a write's would be. With no room, the writer is recorded as blocked as a
    /// refused write would be and `fill` is not called (nor with `max` zero, so a zero
    /// from `fill` always means it had nothing to give).
    pub(crate) fn fill<E>(
        &mut self,
        id: StreamId,
        max: usize,
        config: &TransportConfig,
        fill: impl FnOnce(&mut [u8], &mut [u8]) -> Result<usize, E>,
    ) -> Result<Result<usize, E>, StreamApiError> {
        let room = self.write_room_or_wait(id, config)?;
        if room == 0 || max == 0 {
            return Ok(Ok(0));
        }
        let cap = self.stream_cap(config);
        let s = self.map.get_mut(&id).ok_or(StreamApiError::UnknownStream)?;
        let out = s.send.fill(room.min(max), cap, fill);
        let n = *out.as_ref().unwrap_or(&0);
        self.send_buffered += n;
        if n > 0 {
            self.mark_ready(id);
        }
        Ok(out)
    }

    /// [`Streams::write_room`], and when it is zero the writer is recorded as blocked, as
    /// a refused [`Streams::write`] would be, so it is told when room frees.
    pub(crate) fn write_room_or_wait(
        &mut self,
        id: StreamId,
        config: &TransportConfig,
    ) -> Result<usize, StreamApiError> {
        let room = self.write_room(id, config)?;
        if room == 0 {
            let cap = self.stream_cap(config);
            if let Some(s) = self.map.get(&id).filter(|s| !s.send.fin_requested) {
                let own = s.send.room(cap) == 0;
                self.block_writer(id, own, config);
            }
        }
        Ok(room)
    }

    /// Bytes a [`Streams::write`] on `id` would take now: the smaller of the session
    /// budget's room and the stream's own (zero once it is finished or reset).
    pub(crate) fn write_room(
        &self,
        id: StreamId,
        config: &TransportConfig,
    ) -> Result<usize, StreamApiError> {
        let cap = self.stream_cap(config);
        let s = self.map.get(&id).ok_or(StreamApiError::UnknownStream)?;
        if s.send.reset {
            return Err(StreamApiError::Reset);
        }
        let room = config
            .session_send_buffer
            .saturating_sub(self.send_buffered);
        Ok(room.min(s.send.room(cap)))
    }

    /// Ends the sending direction of a stream.
    pub(crate) fn finish(&mut self, id: StreamId) -> Result<(), StreamApiError> {
        let s = self.map.get_mut(&id).ok_or(StreamApiError::UnknownStream)?;
        s.send.fin_requested = true;
        self.mark_ready(id);
        Ok(())
    }

    /// Reads from a stream at `now`, queueing credit updates as the application
    /// consumes; `srtt` paces the credit autotuner, if on.
    pub(crate) fn read(
        &mut self,
        now: Instant,
        srtt: Duration,
        id: StreamId,
        buf: &mut [u8],
        config: &TransportConfig,
    ) -> Result<ReadOutcome, StreamApiError> {
        let out = self.peek(id, buf)?;
        if let ReadOutcome::Data(n) = out {
            self.consume(now, srtt, id, n, config)?;
        }
        Ok(out)
    }

    /// Copies readable bytes of a stream into `buf` without consuming them (see
    /// [`Streams::consume`]); an ended stream reads as [`Streams::read`] would.
    pub(crate) fn peek(
        &mut self,
        id: StreamId,
        buf: &mut [u8],
    ) -> Result<ReadOutcome, StreamApiError> {
        let s = self.map.get_mut(&id).ok_or(StreamApiError::UnknownStream)?;
        let out = s.recv.peek(buf);
        match out {
            ReadOutcome::Data(_) => {}
            ReadOutcome::Blocked => s.read_notified = false,
            ReadOutcome::Finished | ReadOutcome::Reset(_) => {
                s.read_notified = false;
                self.maybe_forget(id);
            }
        }
        Ok(out)
    }

    /// A stream's readable bytes as the two halves of its buffer.
    pub(crate) fn ready_slices(&self, id: StreamId) -> (&[u8], &[u8]) {
        self.map
            .get(&id)
            .map_or((&[][..], &[][..]), |s| s.recv.ready_slices())
    }

    /// Consumes the first `n` readable bytes of a stream (at most what is ready) at `now`,
    /// queueing credit updates as [`Streams::read`] does; `srtt` paces the credit
    /// autotuner, if on. Returns how many were consumed.
    pub(crate) fn consume(
        &mut self,
        now: Instant,
        srtt: Duration,
        id: StreamId,
        n: usize,
        config: &TransportConfig,
    ) -> Result<usize, StreamApiError> {
        let s = self.map.get_mut(&id).ok_or(StreamApiError::UnknownStream)?;
        let n = n.min(s.recv.ready_len());
        s.recv.consume(n);
        self.data_read += n as u64;
        let before = s.recv.window();
        if let Some(max) = s.recv.credit_update(now, srtt) {
            self.control
                .push_back(OwnedFrame::MaxStreamData { id, max });
        }
        if config.credit_autotune {
            // The session makes room for every open stream's window.
            self.stream_windows += s.recv.window() - before;
            self.local_window = self
                .local_window
                .max(self.stream_windows.min(config.session_window));
        }
        // A quarter of the window, like the streams' (see `RecvHalf::credit_update`);
        // granted credit is never taken back.
        let left = self.local_max_data.saturating_sub(self.data_read);
        if left <= self.local_window / 4 * 3 {
            self.local_max_data = self.data_read + self.local_window;
            self.control.push_back(OwnedFrame::MaxData {
                max: self.local_max_data,
            });
        }
        Ok(n)
    }
}
