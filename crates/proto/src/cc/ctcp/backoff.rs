//! Backoff: CTCP's loss-with-queueing gate and `β = RTT_min / RTT`.
//!
//! A loss is congestion only if it coincides with queueing delay: the smoothed RTT exceeds
//! `RTT_min + 5 ms` or the last round's minimum RTT exceeds `RTT_min + 2 ms`. Otherwise it is
//! channel loss on an empty queue; the code repairs it and the window is left alone.
//!
//! On congestion `cwnd ← β·cwnd` with `β = RTT_min / round_min`, clamped to `[0.5, 0.95]`.
//! The current RTT is the *round minimum* (the smallest sample of the last round trip), not
//! srtt or the latest sample: it measures the standing queue, so `β·cwnd` is the window that
//! just drains it, while a single late sample (MAC scheduling, reordering — the jitter that
//! collapsed CTCP on WiMax) does not deepen the cut. The lower clamp keeps a full deep
//! buffer from halving more than Reno does (and CTCP from yielding everything); the upper
//! one keeps every gated backoff a real one.

use crate::rtt::RttEstimator;
use std::time::Duration;

/// srtt above `RTT_min` by more than this means a queue.
pub(super) const SRTT_QUEUE: Duration = Duration::from_millis(5);
/// Round minimum above `RTT_min` by more than this means a standing queue.
pub(super) const ROUND_MIN_QUEUE: Duration = Duration::from_millis(2);
/// Deepest backoff.
pub(super) const BETA_MIN: f64 = 0.5;
/// Shallowest backoff.
pub(super) const BETA_MAX: f64 = 0.95;

/// CTCP's gate: whether the path shows queueing delay right now.
pub(super) fn queueing(rtt: &RttEstimator) -> bool {
    let min = rtt.min_rtt();
    rtt.srtt() > min + SRTT_QUEUE || rtt.round_min() > min + ROUND_MIN_QUEUE
}

/// `β = min_rtt / current`, clamped to `[BETA_MIN, BETA_MAX]`.
pub(super) fn beta(min_rtt: Duration, current: Duration) -> f64 {
    let cur = current.as_secs_f64();
    if cur <= 0.0 {
        return BETA_MAX;
    }
    (min_rtt.as_secs_f64() / cur).clamp(BETA_MIN, BETA_MAX)
}

/// β for the path as the estimator sees it now (see the module docs for the RTT used).
pub(super) fn beta_now(rtt: &RttEstimator) -> f64 {
    beta(rtt.min_rtt(), rtt.round_min())
}
