//! Slow start phase: the window doubles per round trip (`cwnd += acked`) and is left on a
//! delay rise (HyStart-style) rather than by waiting for loss, which on a lossy satellite
//! path would come from the channel, not from the queue. A congestion event that passes the
//! CTCP gate also ends it (see `backoff`); random loss on an empty queue does not.

use crate::rtt::RttEstimator;
use std::time::Duration;

/// Smallest delay rise that ends slow start (HyStart's lower clamp).
pub(super) const MIN_DELAY_RISE: Duration = Duration::from_millis(4);
/// Largest delay rise needed to end slow start (HyStart's upper clamp).
pub(super) const MAX_DELAY_RISE: Duration = Duration::from_millis(64);

/// The queueing delay that ends slow start at this minimum RTT:
/// `clamp(min_rtt / 8, 4 ms, 16 ms)`.
pub(super) fn delay_threshold(min_rtt: Duration) -> Duration {
    (min_rtt / 8).clamp(MIN_DELAY_RISE, MAX_DELAY_RISE)
}

/// Whether the last round's minimum RTT has risen above `min_rtt` by the threshold: a
/// queue is forming, the window has reached the path's capacity.
pub(super) fn delay_rise(rtt: &RttEstimator) -> bool {
    rtt.has_samples()
        && rtt.round_min()
            > rtt.min_rtt() + delay_threshold(rtt.min_rtt()) + super::backoff::early_noise(rtt)
}

/// Whether delay noise is large next to the slow-start delay threshold (half of it or
/// more). Why: jitter spreads a packet train as a slow bottleneck would, so a BDP measured
/// from one on such a path may be far too low, and growing conservatively above it costs
/// seconds at satellite RTTs; the delay exit, lifted above the noise, still ends slow start.
pub(super) fn noisy(rtt: &RttEstimator) -> bool {
    super::backoff::early_noise(rtt) * 2 >= delay_threshold(rtt.min_rtt())
}

/// Consecutive raised samples that end slow start (HyStart uses 8 per round).
pub(super) const RISE_SAMPLES: u32 = 8;

/// Whether the newest RTT sample shows queueing beyond the slow-start threshold.
pub(super) fn sample_rises(rtt: &RttEstimator) -> bool {
    rtt.has_samples()
        && rtt.latest()
            > rtt.min_rtt() + delay_threshold(rtt.min_rtt()) + super::backoff::early_noise(rtt) * 2
}

/// Growth divisor above a measured BDP (HyStart++'s conservative slow start, RFC 9406:
/// ×1.25 per round trip instead of ×2).
pub(super) const CONSERVATIVE_DIVISOR: f64 = 4.0;

/// The window after `acked` packets were acknowledged in slow start: `+acked` (doubling
/// per round trip) up to `bdp`, the start-up probe's measured BDP if it has one, and
/// `+acked/4` above it.
///
/// Why: once the window has reached the measured BDP, doubling again overshoots by up to
/// a BDP before the delay exit sees the queue one round later (a standing queue and, with
/// H-TCP growth on top, a drop-tail overflow seconds later). Growing by a quarter per
/// round still finds a larger true BDP if the estimate was low, and the delay exit still
/// ends slow start.
pub(super) fn grow(cwnd: f64, acked: u64, bdp: Option<f64>) -> f64 {
    let acked = acked as f64;
    match bdp {
        Some(b) if cwnd + acked > b => {
            let fast = (b - cwnd).max(0.0);
            cwnd + fast + (acked - fast) / CONSERVATIVE_DIVISOR
        }
        _ => cwnd + acked,
    }
}
