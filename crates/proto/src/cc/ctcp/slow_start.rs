//! Slow start phase: the window doubles per round trip (`cwnd += acked`) and is left on a
//! delay rise (HyStart-style) rather than by waiting for loss, which on a lossy satellite
//! path would come from the channel, not from the queue. A congestion event that passes the
//! CTCP gate also ends it (see `backoff`); random loss on an empty queue does not. A
//! delay-rise exit is provisional for a few rounds ([`Resume`]): jitter lifts a round's
//! minimum and lets it fall back, a queue does not.

use crate::rtt::RttEstimator;
use std::time::{Duration, Instant};

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

/// Rounds after a delay-rise exit in which slow start may resume (HyStart++'s
/// `CSS_ROUNDS`, RFC 9406).
pub(super) const RESUME_ROUNDS: u32 = 5;

/// The rounds after a delay-rise exit from slow start, judged one by one: a round whose
/// minimum RTT is back under the exit threshold resumes slow start (RFC 9406 §4.3's
/// return from conservative slow start).
///
/// Why: behind a FIFO radio or a jittery emulator, delay that varies with no queue lifts
/// a round's minimum past the threshold while the window is a fraction of the BDP, and
/// H-TCP's growth then takes many seconds on a long path. A queue the window built stands
/// through the following rounds and keeps their minima above the threshold, so the exit
/// stays; jitter lets some round's minimum fall back, and the window goes on doubling.
#[derive(Debug, Clone, Copy)]
pub(super) struct Resume {
    round_end: Instant,
    rounds_left: u32,
}

impl Resume {
    /// The rounds after an exit at `now`, each one `srtt` long.
    pub(super) fn new(now: Instant, srtt: Duration) -> Self {
        Resume {
            round_end: now + srtt,
            rounds_left: RESUME_ROUNDS,
        }
    }

    /// At each ACK: `Some(true)` if a round just ended with its minimum under the exit
    /// threshold (resume slow start), `Some(false)` once the last round ended without
    /// (the exit stands), `None` while a round is still running.
    pub(super) fn on_ack(&mut self, now: Instant, rtt: &RttEstimator) -> Option<bool> {
        if now < self.round_end {
            return None;
        }
        if !delay_rise(rtt) {
            return Some(true);
        }
        self.rounds_left -= 1;
        if self.rounds_left == 0 {
            return Some(false);
        }
        self.round_end = now + rtt.srtt();
        None
    }
}
