//! Delivery rate: packets acknowledged per second over the last few round trips, and the
//! highest such rate of the last seconds (the bottleneck rate the flow has seen).
//!
//! Why: behind a FIFO that adds jitter, whole rounds' RTTs sit tens of milliseconds above
//! the path minimum with no queue at all, so the congestion gate's delay tests pass on
//! noise and a random loss cuts a window that was already under the pipe; Cubic's bound
//! then holds growth near one packet per round for seconds (docs/experiments/jitter.md,
//! "A delivery-confirmed gate"). A queue of the flow's own stands only while its window
//! holds more than the bottleneck delivers in a round trip, which this rate tells
//! (`backoff::window_holds_queue`).
//!
//! Each sample spans [`RATE_ROUNDS`] round trips: jitter moves single ACKs by up to its
//! spread, which over one round moves a rate by a quarter, while counts over longer spans
//! are nearly exact.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// Round trips one delivery-rate sample spans.
pub(super) const RATE_ROUNDS: u32 = 2;
/// How long the highest rate is remembered (the min-RTT window's length).
pub(super) const MAX_WINDOW: Duration = Duration::from_secs(10);
/// Checkpoints per round trip (at most [`MAX_MARKS`] per [`MAX_WINDOW`]).
const MARKS_PER_ROUND: u32 = 4;
/// Bound on either queue (checkpoints, maximum candidates): memory stays constant.
const MAX_MARKS: usize = 128;

/// Delivered packets over time and the windowed highest delivery rate (see the module
/// docs).
#[derive(Debug, Clone, Default)]
pub(super) struct DeliveryRate {
    delivered: u64,
    /// (time, packets delivered by then), oldest first; the front is the newest one at
    /// least a sample's span old.
    marks: VecDeque<(Instant, u64)>,
    /// Candidates for the windowed maximum, (time, packets per second), rates decreasing
    /// from the front.
    maxima: VecDeque<(Instant, f64)>,
}

impl DeliveryRate {
    /// Counts `acked` packets delivered at `now`; `srtt` sets the sample span.
    pub(super) fn on_ack(&mut self, now: Instant, acked: u64, srtt: Duration) {
        self.delivered = self.delivered.saturating_add(acked);
        let spacing = (srtt / MARKS_PER_ROUND).max(MAX_WINDOW / MAX_MARKS as u32);
        if self
            .marks
            .back()
            .is_some_and(|&(t, _)| now.saturating_duration_since(t) < spacing)
        {
            return;
        }
        self.marks.push_back((now, self.delivered));
        let span = srtt * RATE_ROUNDS;
        while self.marks.len() > MAX_MARKS
            || self
                .marks
                .get(1)
                .is_some_and(|&(t, _)| now.saturating_duration_since(t) >= span)
        {
            self.marks.pop_front();
        }
        let Some(&(t0, d0)) = self.marks.front() else {
            return;
        };
        let elapsed = now.saturating_duration_since(t0);
        if elapsed < span || elapsed.is_zero() {
            return;
        }
        let rate = (self.delivered - d0) as f64 / elapsed.as_secs_f64();
        while self.maxima.back().is_some_and(|&(_, r)| r <= rate) {
            self.maxima.pop_back();
        }
        self.maxima.push_back((now, rate));
        while self.maxima.len() > MAX_MARKS
            || self
                .maxima
                .front()
                .is_some_and(|&(t, _)| now.saturating_duration_since(t) > MAX_WINDOW)
        {
            self.maxima.pop_front();
        }
    }

    /// The highest delivery rate of the last [`MAX_WINDOW`] in packets per second, once a
    /// sample spanned [`RATE_ROUNDS`] round trips.
    pub(super) fn max_rate(&self) -> Option<f64> {
        self.maxima.front().map(|&(_, r)| r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_clock::{base, ms};

    /// 10 packets every 10 ms (1,000 per second) for `secs`, from `from`.
    fn feed(d: &mut DeliveryRate, from: Instant, secs: u64, per_tick: u64) -> Instant {
        let mut now = from;
        for _ in 0..secs * 100 {
            now += ms(10);
            d.on_ack(now, per_tick, ms(100));
        }
        now
    }

    #[test]
    fn no_rate_before_a_sample_spans_its_rounds() {
        let mut d = DeliveryRate::default();
        let t = base();
        d.on_ack(t, 10, ms(100));
        d.on_ack(t + ms(150), 10, ms(100));
        assert_eq!(d.max_rate(), None);
    }

    #[test]
    fn measures_a_steady_rate() {
        let mut d = DeliveryRate::default();
        feed(&mut d, base(), 3, 10);
        let r = d.max_rate().unwrap();
        assert!((r - 1000.0).abs() < 30.0, "{r}");
    }

    #[test]
    fn remembers_the_highest_rate_for_its_window_then_forgets_it() {
        let mut d = DeliveryRate::default();
        let t = feed(&mut d, base(), 3, 10);
        let t = feed(&mut d, t, 5, 5);
        let r = d.max_rate().unwrap();
        assert!(r > 950.0, "still remembered: {r}");
        feed(&mut d, t, 6, 5);
        let r = d.max_rate().unwrap();
        assert!((r - 500.0).abs() < 20.0, "forgotten after the window: {r}");
    }

    #[test]
    fn memory_is_bounded() {
        let mut d = DeliveryRate::default();
        let mut now = base();
        // A 1 ms round trip and a rising rate: every sample is a new maximum candidate.
        for i in 0..100_000u64 {
            now += Duration::from_micros(100);
            d.on_ack(now, 1 + i / 1000, ms(1));
        }
        assert!(d.marks.len() <= MAX_MARKS && d.maxima.len() <= MAX_MARKS);
    }
}
