//! The session's flow-control credit as the handshake and the path measurement set it:
//! the credit streams and the session start with, and the window autotuned streams start
//! from (`TransportConfig::credit_autotune`).

use super::{OwnedFrame, Streams};
use std::time::Duration;

/// How many of the incoming path's measured bandwidth-delay products an autotuned stream
/// starts its window at: one round trip in flight, about 1.25 more of data held behind a
/// hole until its repair crosses (on a lossy long path there is nearly always one), and
/// room for a sender still doubling in slow start (why not 2: docs/experiments/
/// relay-p99.md, "Session 22").
const START_WINDOW_BDPS: f64 = 4.0;

impl Streams {
    /// Negotiated parameters before any stream exists: the session's credit both ways
    /// restarts at `session_credit`, and every stream's will start at `stream_credit`.
    pub(crate) fn apply_initial_credit(&mut self, stream_credit: u64, session_credit: u64) {
        self.peer_max_data = session_credit;
        self.local_max_data = session_credit;
        self.stream_credit = stream_credit;
        self.session_credit = session_credit;
    }

    /// The initial credits, per stream and per session, as settled by the handshake (or
    /// this end's offer before it is).
    pub(crate) fn initial_credit(&self) -> (u64, u64) {
        (self.stream_credit, self.session_credit)
    }

    /// The handshake measured the path towards us at `bytes_per_s` with round trip `rtt`:
    /// autotuned streams start with a window of [`START_WINDOW_BDPS`] times that product
    /// (if above the floor; open ones widen to it), so a sender that starts at the path's
    /// rate does not wait on credit while the tuner measures the reader.
    pub(crate) fn note_incoming_path(&mut self, bytes_per_s: f64, rtt: Duration) {
        let bdp = bytes_per_s * rtt.as_secs_f64();
        if !(bdp.is_finite() && bdp > 0.0) {
            return;
        }
        // Saturating float-to-int conversion; the window is capped where it is used.
        let start = (START_WINDOW_BDPS * bdp) as u64;
        if start <= self.start_window {
            // Windows never shrink, and a repeated measurement costs no pass over the
            // streams.
            return;
        }
        self.start_window = start;
        // Streams opened before the measurement came (a client that opens as soon as the
        // handshake ends), while they are few; untuned streams are left as they are.
        for (&id, s) in &mut self.map {
            let before = s.recv.window();
            if !s.recv.widen(self.start_window) {
                continue;
            }
            self.stream_windows += s.recv.window() - before;
            if let Some(max) = s.recv.open_window() {
                self.control
                    .push_back(OwnedFrame::MaxStreamData { id, max });
            }
        }
    }
}
