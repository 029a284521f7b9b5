//! Congestion avoidance phase: H-TCP growth (Leith & Shorten), as in CTCP v2.
//!
//! The increase per round trip depends on the time Δ since the last backoff, not on the RTT,
//! so the window opens quickly on long-RTT paths once the link has been quiet for a second:
//! `α(Δ) = 1` for `Δ ≤ 1 s`, else `1 + 10(Δ−1) + ((Δ−1)/2)²` packets per RTT.
//!
//! As in H-TCP with adaptive backoff, `α` is scaled by `2(1−β)` (β of the last backoff), so
//! an AIMD flow that backs off gently also grows gently (`throughput ∝ √(α(1+β)/(1−β))`
//! stays comparable to a halving flow's); this is what keeps a flow whose β is near 1 from
//! taking a shared bottleneck from Cubic. The scaled `α` is then capped at half the window
//! per round trip: growth in congestion avoidance never outruns slow start (×2 per RTT),
//! and the overshoot into a queue within one round is bounded by `cwnd/2`, however long
//! the flow has gone without a backoff.

use std::time::Duration;

/// RTT at which H-TCP's α is applied unscaled (see [`alpha_scale`]).
const ALPHA_RTT_REFERENCE: f64 = 0.3;

/// Δ below which H-TCP grows like Reno (1 packet per RTT).
const LOW_SPEED: f64 = 1.0;

/// H-TCP's increase in packets per round trip, `Δ` after the last backoff (unscaled).
pub fn htcp_alpha(delta: Duration) -> f64 {
    let d = delta.as_secs_f64() - LOW_SPEED;
    if d <= 0.0 {
        1.0
    } else {
        1.0 + 10.0 * d + (d / 2.0) * (d / 2.0)
    }
}

/// H-TCP's RTT scaling of α (α × RTT/300 ms, within [0.2, 1]): α(Δ) is a per-RTT increase
/// driven by wall-clock time, so without it a short-RTT flow would add far more per second
/// than a long one and crowd out Cubic. The reference is tuned in the simulator against
/// one Cubic flow on 5 Mbit/s (sim-sweep fairness rows, mean of four start phases). With
/// the CTCP gate at 15 % of RTT_min, Jain at 100 ms was 0.927 with 200 ms (worst phase
/// 0.896), 0.971 with 250 ms, 0.995 with 300 ms (worst 0.982), while efficiency at 100 ms
/// and 0–30 % loss moved by at most 0.003; 20 ms sits on the 0.2 floor either way, and
/// paths of 300 ms and more are never boosted above 1.
///
/// (Standard H-TCP also scales by 2(1-β); CTCP's β = RTT_min/RTT is close to 1 whenever
/// the queue is small, which would all but stop growth after every gentle cut.)
pub(super) fn alpha_scale(min_rtt: Duration) -> f64 {
    (min_rtt.as_secs_f64() / ALPHA_RTT_REFERENCE).clamp(0.2, 1.0)
}

pub(super) fn effective_alpha(cwnd: f64, delta: Duration, scale: f64) -> f64 {
    (htcp_alpha(delta) * scale).min((cwnd / 2.0).max(1.0))
}

/// The window after `acked` packets were acknowledged in congestion avoidance:
/// `cwnd += α/cwnd` per packet (fractions accumulate in the `f64` window).
pub(super) fn grow(cwnd: f64, acked: u64, delta: Duration, scale: f64) -> f64 {
    let cwnd = cwnd.max(1.0);
    cwnd + effective_alpha(cwnd, delta, scale) * acked as f64 / cwnd
}
