//! Whose turn it is: the ready queue that fills a symbol with stream data round robin,
//! and each stream's share of the session's send budget.

use super::{Streams, MIN_STREAM_SHARE};

/// The bytes a stream sends per turn (whole frames, so up to a symbol more): a run of
/// symbols for one stream lets the receiver deliver them to its reader in one wake-up
/// and one write, where a turn per symbol costs both per symbol per stream.
pub(super) const TURN_BYTES: usize = 8 << 10;
use crate::config::TransportConfig;
use crate::connection::Event;
use crate::frame::{self, StreamId};
use std::collections::VecDeque;

impl Streams {
    /// The most one stream may hold unsent: an even share of the session's send budget
    /// (never below [`MIN_STREAM_SHARE`]) when that is below the stream's own buffer, so
    /// with many streams each keeps room to write and none crowds the others out.
    pub(super) fn stream_cap(&self, config: &TransportConfig) -> usize {
        (config.session_send_buffer / self.map.len().max(1)).max(MIN_STREAM_SHARE)
    }

    /// Puts a stream that has a frame to send at the back of the turn order, unless it
    /// already waits there.
    pub(super) fn mark_ready(&mut self, id: StreamId) {
        let Some(s) = self.map.get_mut(&id) else {
            return;
        };
        if s.queued || !s.send.has_frame() {
            return;
        }
        s.queued = true;
        self.ready.push_back(id);
        if self.ready.len() > 2 * self.map.len() + 16 {
            // Ids of forgotten streams that never came up again: drop them so the queue
            // stays bounded by the open streams.
            let map = &self.map;
            self.ready
                .retain(|id| map.get(id).is_some_and(|s| s.queued));
        }
    }

    /// Appends stream data, taking turns over the ready queue: the stream at the front
    /// sends up to [`TURN_BYTES`], then goes to the back if it has more. The frame that ends the
    /// payload goes without its length: each frame is sized against that shorter header,
    /// so a symbol fills exactly, and one left without room for its length ends the
    /// payload (its stream stays at the front and starts the next one). A frame that had
    /// room but turned out to be the last one (the data ran out) loses its length
    /// afterwards: `open_tail` is where it starts. A stream whose writer was held back by
    /// its own limit is woken once half of `stream_cap` is free.
    pub(super) fn take_stream_data(
        &mut self,
        payload: &mut Vec<u8>,
        cap: usize,
        stream_cap: usize,
        events: &mut VecDeque<Event>,
    ) {
        let mut open_tail = None;
        // Each queued stream comes up at most once, so a session out of credit ends the
        // pass instead of turning the queue round for ever.
        let mut turns = self.ready.len();
        while turns > 0 {
            turns -= 1;
            let Some(&id) = self.ready.front() else {
                break;
            };
            let room = cap.saturating_sub(payload.len());
            let session_credit = self.peer_max_data.saturating_sub(self.data_sent) as usize;
            let Some(s) = self.map.get_mut(&id) else {
                self.ready.pop_front();
                self.turn_sent = 0;
                continue;
            };
            if !s.send.has_frame() {
                s.queued = false;
                self.ready.pop_front();
                self.turn_sent = 0;
                continue;
            }
            let header = frame::stream_last_header_len(id, s.send.offset);
            if room <= header {
                break;
            }
            let max = (room - header).min(session_credit);
            if max == 0 && !(s.send.fin_requested && s.send.buffered() == 0) {
                // Out of session credit: its turn passes, its place in the queue holds.
                self.ready.rotate_left(1);
                self.turn_sent = 0;
                continue;
            }
            let (offset, n, fin) = s.send.peek_frame(max);
            self.data_sent += n as u64;
            self.send_buffered -= n;
            let ends_payload = frame::stream_header_len(id, offset) + n > room;
            if ends_payload {
                frame::emit_stream_header(payload, id, offset, fin, None);
                open_tail = None;
            } else {
                open_tail = Some(payload.len());
                frame::emit_stream_header(payload, id, offset, fin, Some(n as u16));
            }
            let sent_fin = s.send.take_into(n, payload);
            debug_assert_eq!(sent_fin, fin);
            if s.write_blocked && s.send.buffered() <= s.send.limit(stream_cap) / 2 {
                s.write_blocked = false;
                if s.send.is_writable(stream_cap) {
                    events.push_back(Event::StreamWritable(id));
                }
            }
            self.turn_sent += n;
            if !s.send.has_frame() {
                s.queued = false;
                self.ready.pop_front();
                self.turn_sent = 0;
            } else if self.turn_sent >= TURN_BYTES {
                self.ready.rotate_left(1);
                self.turn_sent = 0;
            }
            self.maybe_forget(id);
            if ends_payload {
                break;
            }
        }
        if let Some(start) = open_tail {
            // Nothing followed that frame (only stream frames come after control frames).
            let dropped = frame::drop_final_stream_length(payload, start);
            debug_assert!(dropped, "the payload's final frame is a length-form STREAM");
        }
    }
}
