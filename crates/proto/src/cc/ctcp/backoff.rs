//! Backoff: CTCP's loss-with-queueing gate and `β = RTT_min / RTT`.
//!
//! A loss is congestion only if it coincides with queueing delay: the smoothed RTT exceeds
//! `RTT_min + max(5 ms, 30 % RTT_min)` or the minimum RTT of the last two rounds exceeds
//! `RTT_min + max(2 ms, 15 % RTT_min)` (CTCP's 5 ms / 2 ms, scaled on longer paths; two
//! rounds because a queue stands, while jitter behind a FIFO lifts a single round's
//! minimum for a round at a time), or
//! exceeds the minimum of the last minute by half of it (a queue another flow never let
//! empty, which the windowed RTT_min has drifted up to).
//! Otherwise it is channel loss on a short queue; the code repairs it and the window is
//! left alone. On a path whose delay noise is material ([`noisy`]) a rise within twice the
//! noise must also be confirmed by the delivery rate: the window must hold at least what
//! the bottleneck delivered per round trip ([`window_holds_queue`]), since below the pipe
//! there is no queue of the flow's own for the delay to show.
//!
//! On congestion `cwnd ← β·cwnd` with `β = RTT_min / round_min`, clamped to `[0.5, 0.98]`.
//! The current RTT is the *round minimum* (the smallest sample of the last round trip), not
//! srtt or the latest sample: it measures the standing queue, so `β·cwnd` is the window that
//! just drains it, while a single late sample (MAC scheduling, reordering — the jitter that
//! collapsed CTCP on WiMax) does not deepen the cut. The lower clamp keeps a full deep
//! buffer from halving more than Reno does (and CTCP from yielding everything); the upper
//! one keeps every gated backoff a cut without cutting 20 % on every transient queue, as
//! H-TCP's own 0.8 ceiling would (design.md asks for β in [0.5, 1)). When a competing Cubic
//! flow keeps the queue from ever emptying, RTT_min drifts up to the standing level: the
//! deliberate drain (`should_drain`) renews the minimum where it can, the gate's path floor
//! keeps a full queue reading as congestion where it cannot, and β's `RTT_min` is the
//! smaller of the windowed minimum and that floor ([`beta_now`]).

use crate::rtt::RttEstimator;
use std::time::{Duration, Instant};

/// srtt above `RTT_min` by more than this means a queue.
pub(super) const SRTT_QUEUE: Duration = Duration::from_millis(5);
/// Round minimum above `RTT_min` by more than this means a standing queue.
pub(super) const ROUND_MIN_QUEUE: Duration = Duration::from_millis(2);
/// The gate's thresholds as fractions of `RTT_min`, where larger than the fixed ones:
/// a standing queue under 15 % of the path's delay (srtt within 30 %) is the queue the
/// flow needs to keep the link busy through its own window's ups and downs, not
/// congestion. With thresholds of a few percent, every round of a lossy path had a loss
/// while the queue held a packet or two, so the window sat at the BDP with the link idle
/// after every cut; a competing Cubic keeps the queue far above either threshold
/// (evidence: docs/experiments/code-evidence.md#queue-fractions).
pub(super) const ROUND_MIN_QUEUE_FRACTION: f64 = 0.15;
/// See [`ROUND_MIN_QUEUE_FRACTION`].
pub(super) const SRTT_QUEUE_FRACTION: f64 = 0.3;
/// Round minimum above the path floor ([`RttEstimator::floor_rtt`]) by more than this
/// fraction of it means a standing queue, whatever the min-RTT window says. Why: with a
/// Cubic flow keeping the bottleneck queue from emptying for a whole window, the windowed
/// RTT_min rose to the standing level and the gate above, judged against it, closed: the
/// queue's full depth no longer exceeded the drifted minimum by the gate's fraction, so
/// every loss read as channel loss, H-TCP grew the window far past the BDP and Cubic fell
/// into retransmission timeouts (evidence:
/// docs/experiments/code-evidence.md#floor-queue-fraction).
/// Half the floor is far above the queue a lone ctcp keeps on a lossy path (it backs off
/// at 15 % over its own minimum), so on such paths nothing changes; a route that lengthens
/// the path by more than half reads as a queue until the floor's window passes, costing
/// only backoffs of β = RTT_min/RTT ≈ [`BETA_MAX`].
pub(super) const FLOOR_QUEUE_FRACTION: f64 = 0.5;
/// Deepest backoff.
pub(super) const BETA_MIN: f64 = 0.5;
/// Shallowest backoff.
pub(super) const BETA_MAX: f64 = 0.98;

/// CTCP's gate: whether the path shows queueing delay right now.
pub(super) fn queueing(rtt: &RttEstimator) -> bool {
    queue_above(rtt, noise(rtt))
}

/// [`queueing`] with the delay noise counted twice: a rise this far above the minimum is a
/// queue however noisy the path, so the delivery-rate confirmation
/// ([`window_holds_queue`]) is not asked for (a competing flow's queue under jitter still
/// reads as one).
pub(super) fn clear_queue(rtt: &RttEstimator) -> bool {
    queue_above(rtt, noise(rtt) * 2)
}

fn queue_above(rtt: &RttEstimator, noise: Duration) -> bool {
    let min = rtt.min_rtt();
    // CTCP's fixed 5 ms / 2 ms are ~1 % of a satellite RTT, where pacing alone makes
    // queues that large; scale them with RTT_min on longer paths (see the constants), and
    // lift them above the delay noise.
    rtt.srtt() > min + SRTT_QUEUE.max(min.mul_f64(SRTT_QUEUE_FRACTION)) + noise
        || rtt.two_round_min()
            > min + ROUND_MIN_QUEUE.max(min.mul_f64(ROUND_MIN_QUEUE_FRACTION)) + noise
        || rtt.round_min() > floor_threshold(rtt.floor_rtt()) + noise
}

/// Whether delay noise is material next to the gate's thresholds: the RTT's
/// sample-to-sample jitter beyond two packet times (what a queue's own movement shows, as
/// in [`beta_now`]), × [`NOISE_MULTIPLE`], is at least `RTT_min / NOISY_DIVISOR`.
/// On such a path the gate asks the delivery rate to confirm a delay rise
/// ([`window_holds_queue`]); on a path without jitter nothing changes.
pub(super) fn noisy(rtt: &RttEstimator, packet_time: Duration) -> bool {
    let jitter = rtt.jitter().saturating_sub(packet_time * 2);
    jitter * NOISE_MULTIPLE >= rtt.min_rtt() / NOISY_DIVISOR
}

/// See [`noisy`]: a sixteenth of `RTT_min`, about a third of the gate's standing-queue
/// threshold (15 %), is where noise starts to decide what the gate reads.
pub(super) const NOISY_DIVISOR: u32 = 16;

/// Whether a window of `cwnd` packets can hold a queue of the flow's own: at least the
/// packets the bottleneck delivers in a round trip at the highest recent delivery rate
/// (`max_rate`, packets per second; true before there is one).
///
/// Why: a queue builds only from what the window holds beyond the pipe, and the pipe at
/// the current round trip is `rate × srtt`; below it the delivery rate follows the
/// window and a delay rise is delay noise, not a queue. With a standing queue the window
/// is the pipe plus the queue and srtt has risen with it, so the test holds (evidence:
/// docs/experiments/jitter.md, "A delivery-confirmed gate").
pub(super) fn window_holds_queue(cwnd: f64, max_rate: Option<f64>, srtt: Duration) -> bool {
    max_rate.is_none_or(|r| cwnd >= r * srtt.as_secs_f64())
}

/// Delay noise a queue must exceed: [`NOISE_MULTIPLE`] × the RTT's sample-to-sample
/// variation (`RttEstimator::jitter`), at most a quarter of `RTT_min`.
///
/// Why: jitter keeps the round minimum above the windowed minimum with no queue at all,
/// and random loss then read as congestion; the cap keeps a competing flow's queue, whose
/// movement also shows as sample-to-sample variation, from hiding itself (figures in
/// docs/experiments/jitter.md).
pub(super) fn noise(rtt: &RttEstimator) -> Duration {
    (rtt.jitter() * NOISE_MULTIPLE).min(rtt.min_rtt() / 4)
}

/// [`noise`] from [`RttEstimator::early_jitter`], for slow start's exits, which judge the
/// first rounds.
pub(super) fn early_noise(rtt: &RttEstimator) -> Duration {
    (rtt.early_jitter() * NOISE_MULTIPLE).min(rtt.min_rtt() / 4)
}

/// See [`noise`]: FIFO jitter of spread `J` moves consecutive samples by about `J/10` to
/// `J/2`, while the minimum of a round's samples stays within about `J/3` of the path
/// minimum.
pub(super) const NOISE_MULTIPLE: u32 = 3;

/// The round minimum above which the path floor alone says "queue" (see
/// [`FLOOR_QUEUE_FRACTION`]).
fn floor_threshold(floor: Duration) -> Duration {
    floor + ROUND_MIN_QUEUE.max(floor.mul_f64(FLOOR_QUEUE_FRACTION))
}

/// `β = min_rtt / current`, clamped to `[BETA_MIN, BETA_MAX]`.
pub(super) fn beta(min_rtt: Duration, current: Duration) -> f64 {
    let cur = current.as_secs_f64();
    if cur <= 0.0 {
        return BETA_MAX;
    }
    (min_rtt.as_secs_f64() / cur).clamp(BETA_MIN, BETA_MAX)
}

/// β for the path as the estimator sees it now: `base / round_min` (see the module docs for
/// the round minimum), where `base` is the path floor ([`RttEstimator::floor_rtt`]) while
/// the windowed RTT_min stays within the floor's queue threshold, else RTT_min.
///
/// Why the floor: a drifted RTT_min made β drift towards 1 with it, so each cut left more
/// of the queue standing and the minimum drifted further, until ctcp took most of a link
/// shared with Cubic; with the floor the queue empties at each cut (evidence:
/// docs/experiments/code-evidence.md#beta-floor). Why not always: after a route change
/// that lengthens the path by more than half, the windowed minimum has the new delay after
/// one window while the floor keeps the old one for six; cuts of `old/new` on every gated
/// loss would shrink the window to its minimum on a lossy path. A minimum that far above
/// the floor is read as a new path, as the gate's threshold reads it.
///
/// The base is raised by the delay noise (the RTT's sample-to-sample jitter beyond two
/// packet times, × [`NOISE_MULTIPLE`], at most `RTT_min/8`): under jitter the windowed
/// minimum is a rare low sample, not the RTT an empty queue shows, so `RTT_min/round_min`
/// cuts a window just above the BDP far below it. A queue moves the RTT by about a packet
/// time per sample, so that much variation is not noise: a competing Cubic flow's queue
/// must still make the cut deep enough to share (evidence: docs/experiments/jitter.md,
/// "Second pass").
pub(super) fn beta_now(rtt: &RttEstimator, packet_time: Duration) -> f64 {
    let (min, floor) = (rtt.min_rtt(), rtt.floor_rtt());
    let base = if min <= floor_threshold(floor) {
        min.min(floor)
    } else {
        min
    };
    let jitter = rtt.jitter().saturating_sub(packet_time * 2);
    beta(
        base + (jitter * NOISE_MULTIPLE).min(min / 8),
        rtt.round_min(),
    )
}

/// Fraction of the min-RTT window after which a standing queue is drained on purpose.
const DRAIN_AFTER: f64 = 0.8;

/// Whether to drain a standing queue now, without loss: the minimum RTT is about to expire
/// (its sample is older than 80 % of the window) while the last round still shows queueing
/// (`round_min > RTT_min + 2 ms`), and no drain happened within that time (`last_drain`).
/// Regular loss backoffs do not count: a `β` cut clamped at [`BETA_MAX`] need not empty
/// the queue.
///
/// Why: the windowed minimum forgets the propagation delay if the queue never empties for a
/// whole window; β = RTT_min/RTT then tends to 1 and the flow would keep a full buffer
/// standing forever (bufferbloat, and a flow that stops yielding to Cubic). One deliberate
/// `β` cut lets a self-inflicted queue empty, so a fresh minimum sample renews the filter;
/// after a genuine route change it costs one cut, then the minimum expires as intended.
pub(super) fn should_drain(now: Instant, last_drain: Option<Instant>, rtt: &RttEstimator) -> bool {
    let horizon = rtt.min_rtt_window().mul_f64(DRAIN_AFTER);
    rtt.has_samples()
        && rtt.min_rtt_age(now) >= horizon
        && last_drain.is_none_or(|c| now.saturating_duration_since(c) >= horizon)
        && round_min_above_drain(rtt, noise(rtt))
}

/// [`should_drain`]'s delay test with the delay noise counted twice: a round minimum this
/// far above the minimum is a standing queue however noisy the path (as [`clear_queue`]
/// is for the gate).
pub(super) fn drain_clear(rtt: &RttEstimator) -> bool {
    round_min_above_drain(rtt, noise(rtt) * 2)
}

fn round_min_above_drain(rtt: &RttEstimator, noise: Duration) -> bool {
    rtt.round_min() > rtt.min_rtt() + ROUND_MIN_QUEUE + noise
}
