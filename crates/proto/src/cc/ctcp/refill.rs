//! Refill: on a path with material delay noise, growth does not leave the window under
//! [`GAIN`] × the highest recent delivery rate × (`RTT_min` + the delay noise).
//!
//! Why: behind a FIFO that adds jitter, a window under the pipe and a window holding a
//! queue read the same to the congestion gate. The round trip sits tens of milliseconds
//! above the path minimum either way, and for a window-limited flow the delivery rate is
//! `cwnd / srtt` (Little's law), so the delivery-rate confirmation
//! (`backoff::window_holds_queue`) passes on the window's own rate. Random losses that
//! met such a reading cut windows already under the pipe, and the Cubic bound then let
//! them regrow by a few packets per round for seconds, with the link partly idle
//! (evidence: docs/experiments/jitter.md, session 31).
//!
//! The target is a BBR-style window: the rate the flow has delivered times a round trip,
//! with a gain. The round trip is `RTT_min` plus the noise allowance the gate uses, at
//! most 1.25 `RTT_min`; a FIFO holds the delay near the top of its jitter range at full
//! rate, which [`GAIN`] covers, and the margin above the pipe lets the delivery rate rise
//! when the pipe has room, so the target follows it up. A cut still cuts; on a noisy path
//! whose cuts answered only ambiguous delay, the refill restores the window within about a
//! round trip. After a cut on a queue clear of twice the noise (a competitor's, which
//! jitter does not make), there is no refill for [`QUIET`]: the flow yields its share as it
//! would on a clean path.

use std::time::Duration;

/// Multiple of `max_rate × (RTT_min + noise)` the window is refilled to.
pub(super) const GAIN: f64 = 1.45;

/// No refill for this long after a cut on a clear queue: the delivery rate's memory, so
/// the rate remembered from before a competitor arrived does not set the target.
pub(super) const QUIET: Duration = super::delivery::MAX_WINDOW;

/// The refill target in packets: [`GAIN`] × `max_rate` (packets per second) × (`min_rtt`
/// + `noise`).
pub(super) fn target(max_rate: f64, min_rtt: Duration, noise: Duration) -> f64 {
    GAIN * max_rate * (min_rtt + noise).as_secs_f64()
}

/// The window after `acked` packets were acknowledged: at least `grown` (what growth made
/// of `cwnd`), and under `target` the gap closes at its full size per round trip
/// (`gap / cwnd` per packet), never past the target.
pub(super) fn refill(cwnd: f64, grown: f64, acked: u64, target: f64) -> f64 {
    if cwnd >= target {
        return grown;
    }
    let filled = cwnd + (target - cwnd) * acked as f64 / cwnd.max(1.0);
    grown.max(filled.min(target))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gap_closes_in_a_round_trip_and_not_past_the_target() {
        let t = target(
            800.0,
            Duration::from_millis(400),
            Duration::from_millis(100),
        );
        assert!((t - GAIN * 400.0).abs() < 1e-9, "{t}");
        // One round trip's ACKs (a window's worth, one at a time).
        let mut w = 300.0;
        for _ in 0..300 {
            w = refill(w, w, 1, t);
        }
        assert!(w > t * 0.6 && w <= t, "{w} of {t}");
        for _ in 0..10_000 {
            w = refill(w, w, 1, t);
        }
        assert!(w <= t && w > t - 1.0, "{w} of {t}");
    }

    #[test]
    fn growth_above_the_target_is_left_alone() {
        assert_eq!(refill(600.0, 601.0, 1, 500.0), 601.0);
        // Growth faster than the refill wins.
        assert_eq!(refill(300.0, 400.0, 1, 500.0), 400.0);
    }
}
