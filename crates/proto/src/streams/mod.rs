//! The session's streams: the stream table, stream ids, the control-frame queue, the
//! session-level flow control (credit both ways, the send budget) and the round-robin
//! that fills source symbols with stream data.
//!
//! Per-stream buffers and credit are [`crate::stream`]'s halves; this part decides which
//! stream speaks next, and turns decoded frames into stream data and events.
//!
//! Everything per packet costs the streams the packet touches, not the streams the
//! session holds: streams with a frame to send wait in a ready queue (round robin over
//! it; a stream that was idle goes first, fq_codel's new-flow rule), the bytes buffered
//! over all streams are counted exactly as they come and go, and a blocked writer is
//! woken by its own stream draining, or once per refill of the session budget.

use crate::config::TransportConfig;
use crate::connection::{ConnectionError, Event, Side, StreamApiError};
use crate::frame::{Frame, OpenResult, StreamId, Target};
use crate::stream::{CreditTuner, RecvHalf, SendHalf, StreamError};
use payload::PayloadWriter;
use std::collections::{BTreeMap, VecDeque};

/// Stream reset code: the peer exceeded the stream limit.
pub const RESET_REFUSED: u8 = 0xfe;

/// The least a stream may buffer however many share the session's send budget: about
/// a dozen symbols, so a writer woken at half of it still has data queued.
const MIN_STREAM_SHARE: usize = 16 << 10;

/// One stream's two halves and whether the application was told about them.
#[derive(Debug)]
struct Stream {
    send: SendHalf,
    recv: RecvHalf,
    /// A write was cut short by the stream's own limit: wake it once half has drained.
    write_blocked: bool,
    /// In `Streams::budget_waiters`: a write was cut short by the session budget.
    budget_waiting: bool,
    /// In `Streams::ready` or `Streams::sparse` (may linger there after its frames are
    /// gone).
    queued: bool,
    read_notified: bool,
}

impl Stream {
    /// A stream whose halves start with `credit` bytes of credit each way (the
    /// handshake's agreed value); the receive half then grants up to its own window,
    /// which with autotuning starts at the larger of the floor and `start_window`.
    fn new(config: &TransportConfig, credit: u64, start_window: u64) -> Self {
        let window = if config.credit_autotune {
            crate::config::AUTOTUNE_STREAM_FLOOR
                .max(start_window)
                .min(config.stream_window)
        } else {
            config.stream_window
        };
        let tuner = config
            .credit_autotune
            .then(|| CreditTuner::new(window, config.stream_window));
        Stream {
            send: SendHalf::new(credit, config.stream_send_buffer),
            recv: RecvHalf::new(credit, window, tuner),
            write_blocked: false,
            budget_waiting: false,
            queued: false,
            read_notified: false,
        }
    }
}

/// A control frame waiting for the next source symbol.
#[derive(Debug, Clone)]
pub(crate) enum OwnedFrame {
    /// The handshake train's measurement for the server (see `handshake_train`).
    Path {
        /// Bytes per second back towards the client.
        rate: u64,
        /// The handshake's round trip, µs.
        rtt_us: u64,
        /// Whether `rate` is a measurement rather than a lower bound.
        exact: bool,
    },
    /// A stream we opened, towards `target`.
    Open { id: StreamId, target: Target },
    /// The connect result of a stream the peer opened.
    OpenResult { id: StreamId, code: OpenResult },
    /// A stream ended abruptly (by us, or refused over the stream limit).
    Reset { id: StreamId, code: u8 },
    /// New receive credit for one stream.
    MaxStreamData { id: StreamId, max: u64 },
    /// New receive credit for the session.
    MaxData { max: u64 },
}

impl OwnedFrame {
    fn as_frame(&self) -> Frame<'static> {
        match self.clone() {
            OwnedFrame::Path {
                rate,
                rtt_us,
                exact,
            } => Frame::Path {
                rate,
                rtt_us,
                exact,
            },
            OwnedFrame::Open { id, target } => Frame::Open { id, target },
            OwnedFrame::OpenResult { id, code } => Frame::OpenResult { id, code },
            OwnedFrame::Reset { id, code } => Frame::Reset { id, code },
            OwnedFrame::MaxStreamData { id, max } => Frame::MaxStreamData { id, max },
            OwnedFrame::MaxData { max } => Frame::MaxData { max },
        }
    }
}

/// Every stream of one session and the session-level flow control.
#[derive(Debug)]
pub(crate) struct Streams {
    side: Side,
    /// The session's id, for logs.
    conn_id: u32,
    map: BTreeMap<StreamId, Stream>,
    next_local: StreamId,
    highest_peer: Option<StreamId>,
    control: VecDeque<OwnedFrame>,
    /// Streams with a frame to send, in turn order: the front starts the next symbol's
    /// data. Holds every such stream once (`Stream::queued`), and possibly ids whose
    /// frames are gone or whose stream was forgotten (dropped when they come up).
    ready: VecDeque<StreamId>,
    /// Streams that had nothing queued and now have a frame: served before `ready` for
    /// one turn, then they join it. An interactive stream's request then waits for one
    /// symbol, not for a turn of every bulk stream.
    sparse: VecDeque<StreamId>,
    /// Streams whose last write the session budget cut short, woken in order once the
    /// budget has room again (`Stream::budget_waiting`).
    budget_waiters: VecDeque<StreamId>,
    /// Bytes the stream being served (the front of `sparse`, else of `ready`) has sent in
    /// its current turn.
    turn_sent: usize,
    /// The bytes a turn lasts at the path's current rate ([`Streams::set_send_rate`]).
    turn_bytes: usize,
    peer_max_data: u64,
    data_sent: u64,
    local_max_data: u64,
    data_received: u64,
    data_read: u64,
    /// How far ahead of `data_read` the session grants credit: `session_window`, or with
    /// autotuning the largest of its floor and the open streams' windows summed, at most
    /// `session_window` (it never shrinks).
    local_window: u64,
    /// The receive windows of the open streams summed, if autotuning (0 otherwise).
    stream_windows: u64,
    /// The credit every new stream starts with in both directions: the smaller of the
    /// two ends' offered stream windows once the handshake settled it.
    stream_credit: u64,
    /// The credit the session started with in both directions, settled likewise.
    session_credit: u64,
    /// With autotuning, the window new streams start from if above the floor: four times
    /// the incoming path's bandwidth-delay product as the handshake measured it (0
    /// unknown).
    start_window: u64,
    /// Bytes queued on all streams and not yet framed, exactly; checked against
    /// `config.session_send_buffer`.
    send_buffered: usize,
    /// A write was cut short by the session budget and `budget_waiters` holds writers to
    /// wake as it drains.
    budget_blocked: bool,
    /// Bytes framed since the budget blocked or since its last batch of writers was woken.
    budget_drained: usize,
    /// The peer-stream limit has been reported at warn level for this session.
    limit_logged: bool,
    /// Where frame headers are emitted before they go into a symbol (kept for its
    /// allocation).
    header_scratch: Vec<u8>,
}

impl Streams {
    /// No streams yet; the initial credits at what this end offers (see
    /// [`TransportConfig::params`]) until the handshake settles them.
    pub(crate) fn new(side: Side, conn_id: u32, config: &TransportConfig) -> Self {
        let offer = config.params();
        Streams {
            side,
            conn_id,
            map: BTreeMap::new(),
            next_local: match side {
                Side::Client => 0,
                Side::Server => 1,
            },
            highest_peer: None,
            control: VecDeque::new(),
            ready: VecDeque::new(),
            sparse: VecDeque::new(),
            budget_waiters: VecDeque::new(),
            turn_sent: 0,
            turn_bytes: turns::TURN_BYTES,
            peer_max_data: offer.session_window,
            data_sent: 0,
            local_max_data: offer.session_window,
            data_received: 0,
            data_read: 0,
            local_window: config.initial_session_window(),
            stream_windows: 0,
            stream_credit: offer.stream_window,
            session_credit: offer.session_window,
            start_window: 0,
            send_buffered: 0,
            budget_blocked: false,
            budget_drained: 0,
            limit_logged: false,
            header_scratch: Vec::new(),
        }
    }

    /// Open streams.
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether no stream is open and no control frame waits.
    pub(crate) fn is_idle(&self) -> bool {
        self.map.is_empty() && self.control.is_empty()
    }

    /// Stream bytes sent so far (first transmissions).
    pub(crate) fn data_sent(&self) -> u64 {
        self.data_sent
    }

    /// Queues a control frame for the next source symbol.
    pub(crate) fn push_control(&mut self, frame: OwnedFrame) {
        self.control.push_back(frame);
    }

    fn maybe_forget(&mut self, id: StreamId) {
        if let Some(s) = self.map.get(&id) {
            let send_done = s.send.reset || (s.send.fin_sent && s.send.buffered() == 0);
            if send_done && s.recv.is_done() {
                self.remove(id);
            }
        }
    }

    /// Adds a stream (local or the peer's, its OPEN already queued or received) with the
    /// session's initial credit, and grants its own window at once if that is larger.
    fn insert(&mut self, id: StreamId, config: &TransportConfig) {
        let mut s = Stream::new(config, self.stream_credit, self.start_window);
        if config.credit_autotune {
            self.stream_windows += s.recv.window();
        }
        if let Some(max) = s.recv.open_window() {
            self.control
                .push_back(OwnedFrame::MaxStreamData { id, max });
        }
        self.map.insert(id, s);
    }

    /// Forgets a stream, returning its unsent bytes to the session budget.
    fn remove(&mut self, id: StreamId) {
        if let Some(mut s) = self.map.remove(&id) {
            // Zero unless autotuning, when it holds this stream's window.
            self.stream_windows = self.stream_windows.saturating_sub(s.recv.window());
            self.send_buffered -= s.send.discard_pending();
        }
    }

    /// Opens a stream to `target`; the peer learns of it with the first symbol.
    pub(crate) fn open(
        &mut self,
        target: Target,
        config: &TransportConfig,
    ) -> Result<StreamId, StreamApiError> {
        if self.map.len() >= config.max_streams {
            return Err(StreamApiError::TooManyStreams);
        }
        let id = self.next_local;
        self.next_local += 2;
        // The OPEN goes first: a credit update for a stream the peer does not know yet
        // would be dropped.
        self.control.push_back(OwnedFrame::Open { id, target });
        self.insert(id, config);
        Ok(id)
    }

    /// Abruptly ends a stream in both directions.
    pub(crate) fn reset(&mut self, id: StreamId, code: u8) -> Result<(), StreamApiError> {
        let s = self.map.get_mut(&id).ok_or(StreamApiError::UnknownStream)?;
        s.send.reset = true;
        if s.recv.reset.is_none() {
            s.recv.reset = Some(code);
        }
        self.control.push_back(OwnedFrame::Reset { id, code });
        self.remove(id);
        Ok(())
    }

    /// Queues the connect result of a peer-opened stream.
    pub(crate) fn send_open_result(
        &mut self,
        id: StreamId,
        code: OpenResult,
    ) -> Result<(), StreamApiError> {
        if !self.map.contains_key(&id) {
            return Err(StreamApiError::UnknownStream);
        }
        self.control.push_back(OwnedFrame::OpenResult { id, code });
        Ok(())
    }

    /// Whether control frames wait to be sent.
    pub(crate) fn has_control_queued(&self) -> bool {
        !self.control.is_empty()
    }

    /// Whether a write on `id` would take bytes now.
    pub(crate) fn is_writable(&self, id: StreamId, config: &TransportConfig) -> bool {
        let cap = self.stream_cap(config);
        self.send_buffered < config.session_send_buffer
            && self.map.get(&id).is_some_and(|s| s.send.is_writable(cap))
    }

    /// Writes frames for one source symbol into the front of `payload` (the encoder's
    /// slot), at most `cap` bytes, and returns how many: control frames first (they
    /// unblock the peer), then stream data round-robin. Stream bytes go from each send
    /// buffer straight into `payload`. Returns 0 if there is nothing to send.
    ///
    /// `cap` must not exceed `payload.len()`.
    pub(crate) fn fill_payload(
        &mut self,
        payload: &mut [u8],
        cap: usize,
        config: &TransportConfig,
        events: &mut VecDeque<Event>,
    ) -> usize {
        let cap = cap.min(payload.len());
        let mut out = PayloadWriter::new(payload, std::mem::take(&mut self.header_scratch));
        while let Some(f) = self.control.front() {
            let frame = f.as_frame();
            if out.len() + frame.encoded_len() > cap {
                break;
            }
            out.emit(|v| frame.emit(v));
            self.control.pop_front();
        }
        let stream_cap = self.stream_cap(config);
        let buffered = self.send_buffered;
        self.take_stream_data(&mut out, cap, stream_cap, events);
        let (len, scratch) = out.finish();
        self.header_scratch = scratch;
        self.budget_drained += buffered - self.send_buffered;
        self.wake_budget_waiters(config, events);
        len
    }

    /// Applies a decoded frame (any but PATH, which is the handshake's).
    pub(crate) fn on_frame(
        &mut self,
        frame: Frame<'_>,
        config: &TransportConfig,
        events: &mut VecDeque<Event>,
    ) -> Result<(), ConnectionError> {
        match frame {
            Frame::Open { id, target } => {
                if self.peer_stream(id, config)? {
                    events.push_back(Event::StreamOpened { id, target });
                }
            }
            Frame::OpenResult { id, code } => {
                if self.map.contains_key(&id) {
                    events.push_back(Event::OpenResult { id, code });
                }
            }
            Frame::Stream {
                id,
                offset,
                fin,
                data,
            } => self.on_stream_data(id, offset, fin, data, config, events)?,
            Frame::Reset { id, code } => {
                if let Some(s) = self.map.get_mut(&id) {
                    s.recv.reset = Some(code);
                    s.send.reset = true;
                    self.send_buffered -= s.send.discard_pending();
                    s.read_notified = true;
                    events.push_back(Event::StreamReadable(id));
                    // A writer waiting for room would wait for ever (the discarded bytes
                    // never drain): wake it to find the reset.
                    if s.write_blocked || s.budget_waiting {
                        s.write_blocked = false;
                        events.push_back(Event::StreamWritable(id));
                    }
                }
            }
            Frame::MaxStreamData { id, max } => {
                if let Some(s) = self.map.get_mut(&id) {
                    s.send.max_data = s.send.max_data.max(max);
                }
                self.mark_ready(id);
            }
            Frame::MaxData { max } => self.peer_max_data = self.peer_max_data.max(max),
            Frame::Path { .. } => {}
        }
        Ok(())
    }

    fn on_stream_data(
        &mut self,
        id: StreamId,
        offset: u64,
        fin: bool,
        data: &[u8],
        config: &TransportConfig,
        events: &mut VecDeque<Event>,
    ) -> Result<(), ConnectionError> {
        if self.is_peer_initiated(id) && !self.peer_stream(id, config)? {
            return Ok(());
        }
        let Some(s) = self.map.get_mut(&id) else {
            return Ok(());
        };
        let new = s.recv.insert(offset, data, fin).map_err(|e| match e {
            StreamError::FlowControl => ConnectionError::Protocol("stream flow control"),
            StreamError::FinalSize => ConnectionError::Protocol("final size"),
        })?;
        self.data_received += new as u64;
        if self.data_received > self.local_max_data {
            return Err(ConnectionError::Protocol("session flow control"));
        }
        if s.recv.is_readable() && !s.read_notified {
            s.read_notified = true;
            events.push_back(Event::StreamReadable(id));
        }
        Ok(())
    }

    fn is_peer_initiated(&self, id: StreamId) -> bool {
        let peer_parity = match self.side {
            Side::Client => 1,
            Side::Server => 0,
        };
        id & 1 == peer_parity
    }

    /// Makes sure a peer-initiated stream exists; false if it is closed and forgotten.
    fn peer_stream(
        &mut self,
        id: StreamId,
        config: &TransportConfig,
    ) -> Result<bool, ConnectionError> {
        if !self.is_peer_initiated(id) {
            return Ok(self.map.contains_key(&id));
        }
        if self.map.contains_key(&id) {
            return Ok(true);
        }
        if self.highest_peer.is_some_and(|h| id <= h) {
            return Ok(false);
        }
        self.highest_peer = Some(id);
        if self.map.len() >= config.max_streams {
            if self.limit_logged {
                tracing::debug!(conn = self.conn_id, id, "stream limit: refusing stream");
            } else {
                self.limit_logged = true;
                tracing::warn!(
                    conn = self.conn_id,
                    limit = config.max_streams,
                    "peer opened more streams than max_streams allows; refusing the excess \
                     (logged once per session)"
                );
            }
            self.control.push_back(OwnedFrame::Reset {
                id,
                code: RESET_REFUSED,
            });
            return Ok(false);
        }
        self.insert(id, config);
        Ok(true)
    }
}

mod app_io;
mod credit;
mod payload;
#[cfg(test)]
mod tests;
mod turns;
