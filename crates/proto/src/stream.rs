//! Per-stream send and receive buffers with flow control.
//!
//! The coded layer makes every source symbol reliable, so a byte handed to a symbol is never
//! sent again: the send side only keeps bytes not yet framed. The receive side places data
//! by offset (symbols decode in any order, and one stream's hole never blocks another) and
//! returns credit as the application reads, so a slow reader back-pressures only its stream.

use crate::byte_ring::ByteRing;
use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};
use thiserror::Error;

/// How many times a round trip's reads an autotuned window grows to: room for one round
/// trip in flight and two of data held behind a hole while its repair is asked for and
/// crosses (ctcp repairs a loss about 1.25 srtt after it is sent), one more than TCP's
/// factor (measurements: docs/experiments/relay-p99.md).
const AUTOTUNE_GROWTH: u64 = 3;

/// The most an empty receive buffer keeps allocated (a dozen packets' worth, what one
/// delivery between two reads usually brings).
const READY_KEEP: usize = 16 << 10;

/// Receive-window autotuning ([`crate::TransportConfig::credit_autotune`]), after Linux's
/// `tcp_rcv_space_adjust`: over each smoothed round trip it counts the bytes the
/// application read beyond those already readable when the round trip began; when that
/// beats the best earlier round trip (at first, half the window), the window grows to
/// [`AUTOTUNE_GROWTH`] times it, plus twice that in proportion to the increase, at most
/// one doubling's worth (a sender still ramping up doubles next round trip); it grows
/// during the round trip, as the count rises. Bytes that waited readable do not
/// count: a reader that lags is the bottleneck, more credit would only queue bytes in
/// front of it, and its catching up (a relay's next segment opening, say) is no sign of
/// a fast one. The window never shrinks (the peer may already use granted credit) and
/// never passes `cap`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CreditTuner {
    /// The configured window: the tuned one never grows past it.
    cap: u64,
    /// The current round trip's start: when, how many bytes had been read by then, and
    /// how many were readable but unread.
    epoch: Option<(Instant, u64, u64)>,
    /// The most bytes a round trip counted so far.
    best: u64,
}

impl CreditTuner {
    /// A tuner for a receiver starting at `window`, which may grow up to `cap`.
    pub(crate) fn new(window: u64, cap: u64) -> Self {
        CreditTuner {
            cap,
            epoch: None,
            best: (window / 2).max(1),
        }
    }

    /// The window to grant after a read that brought the total read to `read` at `now`
    /// and left `readable` bytes unread, given the current `window` and the smoothed RTT:
    /// `window`, or larger.
    pub(crate) fn window(
        &mut self,
        window: u64,
        now: Instant,
        srtt: Duration,
        read: u64,
        readable: u64,
    ) -> u64 {
        let Some((start, from, waiting)) = self.epoch else {
            self.epoch = Some((now, read, readable));
            return window;
        };
        let copied = read.saturating_sub(from).saturating_sub(waiting);
        // The round trip's count so far can only rise: grow as soon as it beats the best,
        // not a round trip later (a sender that jumps to the path's rate at once would
        // otherwise wait on credit for a round trip of each doubling).
        let grown = if copied > self.best {
            let base = copied.saturating_mul(AUTOTUNE_GROWTH);
            // The ramp term, its ratio at most 1 (a first round trip after an idle spell
            // is no ramp): a sender doubling per round trip gets three times `base`.
            let more = (copied - self.best).min(self.best);
            let ramp = u64::try_from(u128::from(base) * u128::from(more) / u128::from(self.best))
                .unwrap_or(u64::MAX);
            window.max(base.saturating_add(ramp.saturating_mul(2)).min(self.cap))
        } else {
            window
        };
        // At least a millisecond, so a bogus zero srtt does not count single reads.
        if now.saturating_duration_since(start) >= srtt.max(Duration::from_millis(1)) {
            self.epoch = Some((now, read, readable));
            self.best = self.best.max(copied);
        }
        grown
    }
}

/// A stream-level protocol violation by the peer.
#[derive(Debug, Error, Clone, Copy, PartialEq, Eq)]
pub enum StreamError {
    /// Data beyond the credit we granted.
    #[error("peer exceeded stream flow-control credit")]
    FlowControl,
    /// Data beyond the announced final size, or a changed final size.
    #[error("peer changed the final size of a stream")]
    FinalSize,
}

/// Sending half of a stream.
#[derive(Debug)]
pub(crate) struct SendHalf {
    /// Bytes written by the application and not yet framed.
    pending: ByteRing,
    /// Stream offset of the first pending byte (= bytes framed so far).
    pub(crate) offset: u64,
    /// Peer's credit: absolute byte limit.
    pub(crate) max_data: u64,
    /// Upper bound on pending bytes, so the application cannot queue without limit.
    buffer_limit: usize,
    /// The application finished writing.
    pub(crate) fin_requested: bool,
    /// The FIN went out in a frame.
    pub(crate) fin_sent: bool,
    /// The stream was reset (locally or by the peer); nothing more goes out.
    pub(crate) reset: bool,
}

impl SendHalf {
    pub(crate) fn new(max_data: u64, buffer_limit: usize) -> Self {
        SendHalf {
            pending: ByteRing::default(),
            offset: 0,
            max_data,
            buffer_limit,
            fin_requested: false,
            fin_sent: false,
            reset: false,
        }
    }

    /// Queues as much of `data` as the buffer allows, holding at most `cap` bytes (the
    /// smaller of `cap` and the configured limit); returns how much.
    pub(crate) fn write(&mut self, data: &[u8], cap: usize) -> usize {
        let n = self.room(cap).min(data.len());
        self.pending.extend_from_slice(&data[..n]);
        n
    }

    /// Lets `fill` write up to `n` bytes (at most [`SendHalf::room`]) straight into the
    /// buffer's free space, given as the two halves of the ring's tail; keeps as many as
    /// it says it wrote. The space holds old bytes, never uninitialised memory.
    pub(crate) fn fill<E>(
        &mut self,
        n: usize,
        cap: usize,
        fill: impl FnOnce(&mut [u8], &mut [u8]) -> Result<usize, E>,
    ) -> Result<usize, E> {
        let n = n.min(self.room(cap));
        let (front, back) = self.pending.room_mut(n);
        let out = fill(front, back);
        let wrote = *out.as_ref().unwrap_or(&0);
        self.pending.commit(wrote.min(n));
        out.map(|w| w.min(n))
    }

    /// Bytes [`SendHalf::write`] would take now.
    pub(crate) fn room(&self, cap: usize) -> usize {
        if self.fin_requested || self.reset {
            return 0;
        }
        self.limit(cap).saturating_sub(self.pending.len())
    }

    /// Bytes that could be framed now, given the stream credit.
    pub(crate) fn sendable(&self) -> usize {
        if self.reset {
            return 0;
        }
        let credit = self.max_data.saturating_sub(self.offset);
        (self.pending.len() as u64).min(credit) as usize
    }

    /// Whether a frame is due (data within credit, or a FIN not yet sent).
    pub(crate) fn has_frame(&self) -> bool {
        !self.reset
            && (self.sendable() > 0
                || (self.fin_requested && !self.fin_sent && self.pending.is_empty()))
    }

    /// What a frame of up to `max` bytes would carry now: `(offset, len, fin)`.
    pub(crate) fn peek_frame(&self, max: usize) -> (u64, usize, bool) {
        let n = self.sendable().min(max);
        let fin = self.fin_requested && self.pending.len() == n;
        (self.offset, n, fin)
    }

    /// Moves the next `out.len()` bytes (from [`SendHalf::peek_frame`]) into `out`, the
    /// frame's place in the symbol being built; returns whether that sent the FIN.
    pub(crate) fn take_into(&mut self, out: &mut [u8]) -> bool {
        let n = out.len();
        let (a, b) = self.pending.as_slices();
        let from_a = n.min(a.len());
        out[..from_a].copy_from_slice(&a[..from_a]);
        out[from_a..].copy_from_slice(&b[..n - from_a]);
        self.pending.consume(n);
        self.offset += n as u64;
        let fin = self.fin_requested && self.pending.is_empty();
        if fin {
            self.fin_sent = true;
        }
        fin
    }

    /// Whether the application may write more now, holding at most `cap` bytes.
    pub(crate) fn is_writable(&self, cap: usize) -> bool {
        !self.fin_requested && !self.reset && self.pending.len() < self.limit(cap)
    }

    /// The bytes this stream may hold: its configured buffer, or `cap` if smaller.
    pub(crate) fn limit(&self, cap: usize) -> usize {
        self.buffer_limit.min(cap)
    }

    /// Drops the bytes not yet framed (the stream was reset: they will never be sent);
    /// returns how many, for the session's budget.
    pub(crate) fn discard_pending(&mut self) -> usize {
        let n = self.pending.len();
        self.pending.clear_and_free();
        n
    }

    /// Bytes buffered and not yet framed.
    pub(crate) fn buffered(&self) -> usize {
        self.pending.len()
    }
}

/// Receiving half of a stream.
#[derive(Debug)]
pub(crate) struct RecvHalf {
    /// Contiguous bytes ready for the application.
    ready: VecDeque<u8>,
    /// Out-of-order segments by offset.
    segments: BTreeMap<u64, Vec<u8>>,
    /// Offset one past the contiguous data received.
    contiguous_end: u64,
    /// Bytes the application has read.
    read_offset: u64,
    /// The final size, once a FIN arrived.
    final_size: Option<u64>,
    /// Credit granted to the peer (absolute).
    pub(crate) max_data: u64,
    /// Credit window size: how far ahead of the read point credit is granted.
    window: u64,
    /// Grows `window` with the reader's pace, if autotuning.
    tuner: Option<CreditTuner>,
    /// Peer reset the stream with this code.
    pub(crate) reset: Option<u8>,
    /// Bytes buffered (ready + segments), for the session memory budget.
    buffered: usize,
}

/// Outcome of a read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadOutcome {
    /// This many bytes were copied.
    Data(usize),
    /// Nothing available yet.
    Blocked,
    /// The stream ended cleanly; nothing more will arrive.
    Finished,
    /// The peer reset the stream.
    Reset(u8),
}

impl RecvHalf {
    /// A receive half whose peer starts with `initial` bytes of credit (the handshake's
    /// agreed value) and is granted up to `window` ahead of the read point once reading
    /// starts; `tuner` grows `window` with the reader's pace.
    pub(crate) fn new(initial: u64, window: u64, tuner: Option<CreditTuner>) -> Self {
        RecvHalf {
            ready: VecDeque::new(),
            segments: BTreeMap::new(),
            contiguous_end: 0,
            read_offset: 0,
            final_size: None,
            max_data: initial,
            window,
            tuner,
            reset: None,
            buffered: 0,
        }
    }

    /// Places stream data at `offset`. Returns the number of new bytes accepted.
    pub(crate) fn insert(
        &mut self,
        offset: u64,
        data: &[u8],
        fin: bool,
    ) -> Result<usize, StreamError> {
        let end = offset + data.len() as u64;
        if end > self.max_data {
            return Err(StreamError::FlowControl);
        }
        if let Some(fs) = self.final_size {
            if end > fs || (fin && end != fs) {
                return Err(StreamError::FinalSize);
            }
        }
        if fin {
            if end
                < self.contiguous_end.max(
                    self.segments
                        .last_key_value()
                        .map_or(0, |(o, d)| o + d.len() as u64),
                )
            {
                return Err(StreamError::FinalSize);
            }
            self.final_size = Some(end);
        }
        if self.reset.is_some() || end <= self.contiguous_end {
            return Ok(0);
        }
        // Trim what we already have in order.
        let skip = self.contiguous_end.saturating_sub(offset) as usize;
        let (offset, data) = (offset + skip as u64, &data[skip..]);
        let before = self.buffered;
        if offset == self.contiguous_end {
            self.ready.extend(data);
            self.buffered += data.len();
            self.contiguous_end += data.len() as u64;
            // Pull in segments that are now contiguous.
            while let Some(entry) = self.segments.first_entry() {
                let seg_off = *entry.key();
                if seg_off > self.contiguous_end {
                    break;
                }
                let seg = entry.remove();
                self.buffered -= seg.len();
                let seg_end = seg_off + seg.len() as u64;
                if seg_end > self.contiguous_end {
                    let from = (self.contiguous_end - seg_off) as usize;
                    self.ready.extend(&seg[from..]);
                    self.buffered += seg.len() - from;
                    self.contiguous_end = seg_end;
                }
            }
        } else if !data.is_empty() {
            match self.segments.get(&offset) {
                Some(existing) if existing.len() >= data.len() => {}
                _ => {
                    if let Some(old) = self.segments.insert(offset, data.to_vec()) {
                        self.buffered -= old.len();
                    }
                    self.buffered += data.len();
                }
            }
        }
        Ok(self.buffered.saturating_sub(before))
    }

    /// Copies readable bytes into `buf` and consumes them.
    #[cfg(test)]
    pub(crate) fn read(&mut self, buf: &mut [u8]) -> ReadOutcome {
        let out = self.peek(buf);
        if let ReadOutcome::Data(n) = out {
            self.consume(n);
        }
        out
    }

    /// Copies readable bytes into `buf` without consuming them: the caller consumes what
    /// it could pass on ([`RecvHalf::consume`]), so bytes a full socket refused stay here.
    pub(crate) fn peek(&self, buf: &mut [u8]) -> ReadOutcome {
        if let Some(code) = self.reset {
            return ReadOutcome::Reset(code);
        }
        if self.ready.is_empty() {
            return if self.final_size == Some(self.read_offset) {
                ReadOutcome::Finished
            } else {
                ReadOutcome::Blocked
            };
        }
        let n = buf.len().min(self.ready.len());
        let (a, b) = self.ready.as_slices();
        if n <= a.len() {
            buf[..n].copy_from_slice(&a[..n]);
        } else {
            buf[..a.len()].copy_from_slice(a);
            buf[a.len()..n].copy_from_slice(&b[..n - a.len()]);
        }
        ReadOutcome::Data(n)
    }

    /// Drops the first `n` readable bytes (at most what is ready), as a read of them would.
    pub(crate) fn consume(&mut self, n: usize) {
        let n = n.min(self.ready.len());
        self.ready.drain(..n);
        self.buffered -= n;
        self.read_offset += n as u64;
        // A drained buffer gives its memory back: otherwise every stream keeps the most it
        // ever held, and a thousand streams that each once filled up hold that many peaks.
        if self.ready.is_empty() && self.ready.capacity() > READY_KEEP {
            self.ready = VecDeque::new();
        }
    }

    /// A new credit limit to announce, once the reader consumed a quarter of the window.
    ///
    /// Why a quarter, not half: on a lossy long path the read point lags the send point by
    /// the data waiting behind the oldest hole, which can exceed the half window left ahead
    /// of the reader just before a half-window update, stalling the sender on credit
    /// (evidence: docs/experiments/code-evidence.md#credit-update-quarter).
    ///
    /// `now` and `srtt` feed the autotuner, if any, which may widen the window first.
    pub(crate) fn credit_update(&mut self, now: Instant, srtt: Duration) -> Option<u64> {
        if self.final_size.is_some() || self.reset.is_some() {
            return None;
        }
        if let Some(t) = &mut self.tuner {
            let readable = self.ready.len() as u64;
            self.window = t.window(self.window, now, srtt, self.read_offset, readable);
        }
        let target = self.read_offset + self.window;
        // `saturating_sub`: granted credit is never taken back, even if it ran ahead.
        if target.saturating_sub(self.max_data) >= (self.window / 4).max(1) {
            self.max_data = target;
            Some(target)
        } else {
            None
        }
    }

    /// With a tuner, widens the window to `window` (at most the tuner's cap; never
    /// narrows it): the path's measured bandwidth-delay product arrived after the stream
    /// opened. Returns whether it widened.
    pub(crate) fn widen(&mut self, window: u64) -> bool {
        let Some(t) = &mut self.tuner else {
            return false;
        };
        let w = window.min(t.cap);
        if w <= self.window {
            return false;
        }
        self.window = w;
        t.best = t.best.max(w / 2);
        true
    }

    /// Raises the credit to a window ahead of the read point if it is short of that
    /// (a new stream whose agreed initial credit is below this end's window); returns
    /// the new limit to announce.
    pub(crate) fn open_window(&mut self) -> Option<u64> {
        let target = self.read_offset + self.window;
        (target > self.max_data).then(|| {
            self.max_data = target;
            target
        })
    }

    /// How far ahead of the read point credit is granted now.
    pub(crate) fn window(&self) -> u64 {
        self.window
    }

    /// The bytes a read would return, as the two halves of the ring.
    pub(crate) fn ready_slices(&self) -> (&[u8], &[u8]) {
        self.ready.as_slices()
    }

    /// Bytes a read could return now.
    pub(crate) fn ready_len(&self) -> usize {
        self.ready.len()
    }

    /// Whether a read would return something other than `Blocked`.
    pub(crate) fn is_readable(&self) -> bool {
        self.reset.is_some() || !self.ready.is_empty() || self.final_size == Some(self.read_offset)
    }

    /// Whether the application has seen the end (FIN read or reset).
    pub(crate) fn is_done(&self) -> bool {
        self.reset.is_some() || (self.final_size == Some(self.read_offset) && self.ready.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn out_of_order_reassembly() {
        let mut r = RecvHalf::new(1000, 1000, None);
        assert_eq!(r.insert(5, b"fghij", false), Ok(5));
        assert_eq!(r.read(&mut [0; 10]), ReadOutcome::Blocked);
        assert_eq!(r.insert(10, b"k", true), Ok(1));
        assert_eq!(r.insert(0, b"abcde", false), Ok(5));
        let mut buf = [0u8; 20];
        assert_eq!(r.read(&mut buf), ReadOutcome::Data(11));
        assert_eq!(&buf[..11], b"abcdefghijk");
        assert_eq!(r.read(&mut buf), ReadOutcome::Finished);
        assert!(r.is_done());
    }

    #[test]
    fn duplicates_and_overlaps_are_trimmed() {
        let mut r = RecvHalf::new(1000, 1000, None);
        r.insert(0, b"abc", false).unwrap();
        assert_eq!(r.insert(0, b"abc", false), Ok(0));
        r.insert(2, b"cde", false).unwrap();
        let mut buf = [0u8; 10];
        assert_eq!(r.read(&mut buf), ReadOutcome::Data(5));
        assert_eq!(&buf[..5], b"abcde");
    }

    #[test]
    fn flow_control_and_final_size_violations() {
        let mut r = RecvHalf::new(10, 10, None);
        assert_eq!(r.insert(5, b"123456", false), Err(StreamError::FlowControl));
        r.insert(0, b"12", true).unwrap();
        assert_eq!(r.insert(2, b"3", false), Err(StreamError::FinalSize));
    }

    #[test]
    fn a_drained_receive_buffer_gives_back_its_memory() {
        let mut r = RecvHalf::new(1 << 20, 1 << 20, None);
        r.insert(0, &vec![1; 256 << 10], false).unwrap();
        let mut buf = vec![0u8; 200 << 10];
        assert_eq!(r.read(&mut buf), ReadOutcome::Data(200 << 10));
        assert!(
            r.ready.capacity() >= 56 << 10,
            "bytes still queued keep their room"
        );
        assert_eq!(r.read(&mut buf), ReadOutcome::Data(56 << 10));
        assert!(r.ready.capacity() <= READY_KEEP);
        // A small buffer is kept as it is: no allocation churn on every drained read.
        r.insert(256 << 10, &[2; 4096], false).unwrap();
        assert_eq!(r.read(&mut buf), ReadOutcome::Data(4096));
        assert!(r.ready.capacity() >= 4096);
    }

    const SRTT: Duration = Duration::from_millis(100);

    #[test]
    fn credit_returns_as_reader_consumes() {
        let t0 = crate::test_clock::base();
        let mut r = RecvHalf::new(100, 100, None);
        r.insert(0, &[1; 60], false).unwrap();
        assert_eq!(r.credit_update(t0, SRTT), None);
        r.read(&mut [0; 24]);
        assert_eq!(
            r.credit_update(t0, SRTT),
            None,
            "less than a quarter consumed"
        );
        r.read(&mut [0; 1]);
        assert_eq!(r.credit_update(t0, SRTT), Some(125), "a quarter consumed");
        assert_eq!(r.credit_update(t0, SRTT), None);
        r.read(&mut [0; 35]);
        assert_eq!(r.credit_update(t0, SRTT), Some(160));
    }

    /// A tuned receive half: `initial` credit, a 256-byte starting window, cap 4096.
    fn tuned(initial: u64) -> RecvHalf {
        RecvHalf::new(initial, 256, Some(CreditTuner::new(256, 4096)))
    }

    /// Delivers `n` more bytes in order and reads them all at `at`; returns the update.
    fn arrive_and_read(r: &mut RecvHalf, n: usize, at: Instant) -> Option<u64> {
        let off = r.contiguous_end;
        r.insert(off, &vec![7; n], false).unwrap();
        assert_eq!(r.read(&mut vec![0; n]), ReadOutcome::Data(n));
        r.credit_update(at, SRTT)
    }

    #[test]
    fn autotune_grows_when_the_reader_keeps_up_with_a_credit_bound_sender() {
        let t0 = crate::test_clock::base();
        let mut r = tuned(256);
        // The reader takes everything at once: each round trip the sender fills the
        // credit, so reads per round trip track the window and it keeps growing.
        let mut at = t0;
        let mut windows = vec![r.window()];
        for _ in 0..8 {
            let grant = r.max_data - r.read_offset;
            for _ in 0..4 {
                arrive_and_read(&mut r, (grant / 4) as usize, at);
                at += SRTT / 4;
            }
            windows.push(r.window());
        }
        assert!(windows.windows(2).all(|w| w[1] >= w[0]), "{windows:?}");
        assert!(
            windows[3] > 2 * windows[0],
            "grows within a few round trips: {windows:?}"
        );
        assert_eq!(r.window(), 4096, "and stops at the cap: {windows:?}");
    }

    #[test]
    fn autotune_does_not_grow_for_a_lagging_reader() {
        let t0 = crate::test_clock::base();
        let mut r = tuned(256);
        // A sender that always fills the credit, a reader that takes 64 bytes per
        // quarter round trip and always leaves some behind: the reader is the bottleneck.
        let mut at = t0;
        for _ in 0..64 {
            let room = r.max_data - r.contiguous_end;
            let off = r.contiguous_end;
            r.insert(off, &vec![1; room as usize], false).unwrap();
            assert_eq!(r.read(&mut [0; 64]), ReadOutcome::Data(64));
            let _ = r.credit_update(at, SRTT);
            at += SRTT / 4;
        }
        assert_eq!(r.window(), 256);
        assert!(
            r.max_data - r.read_offset <= 256,
            "credit runs the window ahead"
        );
    }

    #[test]
    fn autotune_never_takes_back_granted_credit() {
        let t0 = crate::test_clock::base();
        // The initial credit (the handshake's) is larger than the starting window.
        let mut r = tuned(1000);
        let mut at = t0;
        let mut granted = r.max_data;
        for step in 0..40 {
            let n = if step % 3 == 0 { 10 } else { 1 };
            if r.contiguous_end + n < r.max_data {
                if let Some(max) = arrive_and_read(&mut r, n as usize, at) {
                    assert!(max > granted, "an update only raises the limit");
                }
            }
            assert!(r.max_data >= granted);
            granted = r.max_data;
            at += SRTT / 8;
        }
        assert_eq!(
            r.max_data, 1000,
            "a slow reader gets no credit beyond the initial"
        );
    }

    #[test]
    fn without_a_tuner_the_window_is_fixed() {
        let t0 = crate::test_clock::base();
        let mut r = RecvHalf::new(256, 256, None);
        let mut at = t0;
        for _ in 0..32 {
            let grant = (r.max_data - r.read_offset) as usize;
            arrive_and_read(&mut r, grant, at);
            at += SRTT;
        }
        assert_eq!(r.window(), 256);
        assert_eq!(r.max_data, r.read_offset + 256);
    }

    #[test]
    fn send_respects_credit_and_buffer() {
        let mut s = SendHalf::new(5, 8);
        assert_eq!(s.write(b"012", 2), 2, "a cap below the buffer binds");
        assert_eq!(s.write(b"23456789", usize::MAX), 6);
        assert!(!s.is_writable(usize::MAX));
        assert_eq!(s.sendable(), 5);
        let mut out = [0u8; 8];
        assert_eq!(s.peek_frame(100), (0, 5, false));
        assert!(!s.take_into(&mut out[..5]));
        assert_eq!(&out[..5], b"01234");
        assert_eq!(s.sendable(), 0);
        s.max_data = 100;
        s.fin_requested = true;
        assert_eq!(s.peek_frame(2), (5, 2, false));
        assert!(!s.take_into(&mut out[5..7]));
        assert_eq!(s.peek_frame(2), (7, 1, true));
        assert!(s.take_into(&mut out[7..]));
        assert_eq!(&out, b"01234567");
        assert!(s.fin_sent);
    }
}
