//! Whose turn it is: the ready queues that fill a symbol with stream data round robin,
//! and each stream's share of the session's send budget.
//!
//! A stream that had nothing to send and now has a frame goes to `sparse`, served before
//! `ready`, for one turn (fq_codel's new flows): a request or a keystroke waits for the
//! symbol being built, not for a turn of every bulk stream, which on a slow return link
//! adds up to a noticeable fraction of a second. A stream that runs out
//! of data keeps its place in `ready` for one more round, so a bulk stream whose writer
//! refills it within a round never counts as new.

use super::payload::PayloadWriter;
use super::{Streams, MIN_STREAM_SHARE};

/// The bytes a stream sends per turn (whole frames, so up to a symbol more) up to the
/// rate where that is [`TURN_TIME`] of the path: a run of symbols for one stream lets the
/// receiver deliver them to its reader in one wake-up and one write, where a turn per
/// symbol costs both per symbol per stream.
pub(super) const TURN_BYTES: usize = 8 << 10;
/// The most a turn grows to at high rates: a turn and the symbols around it still fit
/// one 64 KiB receive buffer per stream, which bounds a thousand streams' memory.
pub(super) const MAX_TURN_BYTES: usize = 48 << 10;
/// How long a turn lasts once [`TURN_BYTES`] would be shorter (above 13 Mbit/s): each
/// turn costs the receiver a wake-up and a socket write for its stream, so at high rates
/// a turn must be long in bytes for that cost to stay small per byte. A stream that was
/// idle still goes first (`sparse`), whatever the turn.
const TURN_TIME: Duration = Duration::from_millis(5);
use crate::config::TransportConfig;
use crate::connection::Event;
use crate::frame::{self, StreamId};
use std::collections::VecDeque;
use std::time::Duration;

impl Streams {
    /// The most one stream may hold unsent: an even share of the session's send budget
    /// (never below [`MIN_STREAM_SHARE`]) when that is below the stream's own buffer, so
    /// with many streams each keeps room to write and none crowds the others out.
    pub(super) fn stream_cap(&self, config: &TransportConfig) -> usize {
        // At least a turn, or a long turn would only ever find a share's worth queued.
        (config.session_send_buffer / self.map.len().max(1))
            .max(MIN_STREAM_SHARE)
            .max(self.turn_bytes)
    }

    /// Sizes the turns to the rate the path sends at, in bytes per second:
    /// [`TURN_TIME`] of it, within [`TURN_BYTES`]..=[`MAX_TURN_BYTES`].
    pub(crate) fn set_send_rate(&mut self, bytes_per_sec: f64) {
        // `as` saturates, and maps NaN to 0: an unknown rate gives the shortest turn.
        let bytes = (bytes_per_sec * TURN_TIME.as_secs_f64()) as usize;
        self.turn_bytes = bytes.clamp(TURN_BYTES, MAX_TURN_BYTES);
    }

    /// Gives a stream that has a frame to send a turn: at the back of `sparse` if it was
    /// idle (in neither queue), else it already waits for one.
    pub(super) fn mark_ready(&mut self, id: StreamId) {
        let Some(s) = self.map.get_mut(&id) else {
            return;
        };
        if s.queued || !s.send.has_frame() {
            return;
        }
        s.queued = true;
        self.sparse.push_back(id);
        let bound = 2 * self.map.len() + 16;
        if self.sparse.len() + self.ready.len() > bound {
            // Ids of forgotten streams that never came up again: drop them so the queues
            // stay bounded by the open streams.
            let map = &self.map;
            let keep = |id: &StreamId| map.get(id).is_some_and(|s| s.queued);
            self.ready.retain(keep);
            self.sparse.retain(keep);
        }
    }

    /// The queue whose front is served next: `sparse` while it holds a stream.
    fn turn_queue(&mut self) -> &mut VecDeque<StreamId> {
        if self.sparse.is_empty() {
            &mut self.ready
        } else {
            &mut self.sparse
        }
    }

    /// Ends the turn of the stream at the front of the queue being served: a sparse
    /// stream joins the back of `ready` (even if it ran dry: see the module doc), a ready
    /// one goes round to its back.
    fn end_turn(&mut self) {
        self.turn_sent = 0;
        if let Some(id) = self.sparse.pop_front() {
            self.ready.push_back(id);
        } else {
            self.ready.rotate_left(1);
        }
    }

    /// Takes the front of the queue being served out of the turn order: its stream is gone
    /// or has nothing left to send.
    fn drop_turn(&mut self) {
        self.turn_sent = 0;
        let id = self.turn_queue().pop_front();
        if let Some(s) = id.and_then(|id| self.map.get_mut(&id)) {
            s.queued = false;
        }
    }

    /// Appends stream data, taking turns over the ready queue: the stream at the front
    /// sends up to `turn_bytes`, then goes to the back if it has more. The frame that ends the
    /// payload goes without its length: each frame is sized against that shorter header,
    /// so a symbol fills exactly, and one left without room for its length ends the
    /// payload (its stream stays at the front and starts the next one). A frame that had
    /// room but turned out to be the last one (the data ran out) loses its length
    /// afterwards: `open_tail` is where it starts. A stream whose writer was held back by
    /// its own limit is woken once half of `stream_cap` is free.
    pub(super) fn take_stream_data(
        &mut self,
        payload: &mut PayloadWriter<'_>,
        cap: usize,
        stream_cap: usize,
        events: &mut VecDeque<Event>,
    ) {
        let mut open_tail = None;
        // Each queued stream comes up at most once (twice if its sparse turn ends), so a
        // session out of credit ends the pass instead of turning the queue round for ever.
        let mut turns = self.ready.len() + 2 * self.sparse.len();
        while turns > 0 {
            turns -= 1;
            let Some(&id) = self.turn_queue().front() else {
                break;
            };
            let room = cap.saturating_sub(payload.len());
            let session_credit = self.peer_max_data.saturating_sub(self.data_sent) as usize;
            let Some(s) = self.map.get_mut(&id) else {
                self.drop_turn();
                continue;
            };
            if !s.send.has_frame() {
                self.drop_turn();
                continue;
            }
            let header = frame::stream_last_header_len(id, s.send.offset);
            if room <= header {
                break;
            }
            let max = (room - header).min(session_credit);
            if max == 0 && !(s.send.fin_requested && s.send.buffered() == 0) {
                // Out of session credit: its turn passes, its place in the order holds.
                self.end_turn();
                continue;
            }
            let (offset, n, fin) = s.send.peek_frame(max);
            self.data_sent += n as u64;
            self.send_buffered -= n;
            let ends_payload = frame::stream_header_len(id, offset) + n > room;
            if ends_payload {
                payload.emit(|out| frame::emit_stream_header(out, id, offset, fin, None));
                open_tail = None;
            } else {
                open_tail = Some(payload.len());
                payload.emit(|out| frame::emit_stream_header(out, id, offset, fin, Some(n as u16)));
            }
            let sent_fin = s.send.take_into(payload.reserve(n));
            debug_assert_eq!(sent_fin, fin);
            if s.write_blocked && s.send.buffered() <= s.send.limit(stream_cap) / 2 {
                s.write_blocked = false;
                if s.send.is_writable(stream_cap) {
                    events.push_back(Event::StreamWritable(id));
                }
            }
            self.turn_sent += n;
            // A stream that ran dry keeps its place for a round (the module doc says why).
            if !s.send.has_frame() || self.turn_sent >= self.turn_bytes {
                self.end_turn();
            }
            self.maybe_forget(id);
            if ends_payload {
                break;
            }
        }
        if let Some(start) = open_tail {
            // Nothing followed that frame (only stream frames come after control frames).
            let dropped = payload.drop_final_stream_length(start);
            debug_assert!(dropped, "the payload's final frame is a length-form STREAM");
        }
    }
}
