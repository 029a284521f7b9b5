//! Congestion avoidance phase: H-TCP growth (Leith & Shorten), as in CTCP v2.
//!
//! The increase per round trip depends on the time Δ since the last backoff, not on the RTT,
//! so the window opens quickly on long-RTT paths once the link has been quiet for a second:
//! `α(Δ) = 1` for `Δ ≤ 1 s`, else `1 + 10(Δ−1) + ((Δ−1)/2)²` packets per RTT.
//!
//! `α` is scaled with the path's RTT ([`alpha_scale`]) and capped twice:
//! - at half the window per round trip: growth in congestion avoidance never outruns slow
//!   start (×2 per RTT), and the overshoot into a queue within one round is bounded by
//!   `cwnd/2`, however long the flow has gone without a backoff;
//! - after a backoff, at the window a Cubic flow (RFC 9438, `C = 0.4`, `β = 0.7`) that saw
//!   the same congestion event would have Δ + srtt later ([`CubicBound`]): never more
//!   aggressive than the TCP it shares a bottleneck with. H-TCP's α grows with Δ whatever
//!   the window, so on a long path with a small BDP it outgrew Cubic many times over
//!   (evidence: docs/experiments/code-evidence.md#cubic-bound). On a lossy path the bound
//!   costs nothing: the gate lets only queue-full losses back off, and `β = RTT_min/RTT`
//!   leaves the window at the BDP, so growth only refills the queue.
//!
//! (Standard H-TCP also scales α by 2(1−β); CTCP's β = RTT_min/RTT is close to 1 whenever
//! the queue is small, which would all but stop growth after every gentle cut.)

use crate::cc::cubic;
use std::time::Duration;

/// RTT at which H-TCP's α is applied unscaled (see [`alpha_scale`]).
const ALPHA_RTT_REFERENCE: f64 = 0.05;

/// Δ below which H-TCP grows like Reno (1 packet per RTT).
const LOW_SPEED: f64 = 1.0;

/// H-TCP's increase in packets per round trip, `Δ` after the last backoff (unscaled).
pub(super) fn htcp_alpha(delta: Duration) -> f64 {
    let d = delta.as_secs_f64() - LOW_SPEED;
    if d <= 0.0 {
        1.0
    } else {
        1.0 + 10.0 * d + (d / 2.0) * (d / 2.0)
    }
}

/// H-TCP's RTT scaling of α (α × RTT/50 ms, within [0.2, 1]): α(Δ) is a per-RTT increase
/// driven by wall-clock time, so without it a short-RTT flow would add far more per second
/// than a long one and crowd out Cubic. The reference is tuned for fairness against one
/// Cubic flow with β from the path floor, whose cuts drain the whole queue: a longer one
/// scales short paths down too far and leaves ctcp too little of the link (evidence:
/// docs/experiments/code-evidence.md#alpha-scale). From 50 ms up the scale is 1 and the
/// Cubic bound ([`CubicBound`]) keeps growth fair.
pub(super) fn alpha_scale(min_rtt: Duration) -> f64 {
    (min_rtt.as_secs_f64() / ALPHA_RTT_REFERENCE).clamp(0.2, 1.0)
}

/// The window a Cubic flow would have after the congestion event that set [`Self::w_max`]:
/// `W(t) = C(t−K)³ + W_max` with `K = ∛(W_max(1−β)/C)` (RFC 9438's `C` and `β`), so
/// `W(0) = β·W_max`, or on a noisy path from the window the cut left ([`Self::k`]).
/// CTCP's own cut may be deeper (`β = RTT_min/RTT` down to 0.5); H-TCP then regrows freely
/// up to Cubic's curve and follows it from there.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct CubicBound {
    /// Window in packets just before the backoff.
    pub(super) w_max: f64,
    /// Smoothed RTT: the bound looks one round trip ahead, as Cubic's target does.
    pub(super) srtt: Duration,
    /// The window the cut left, when the curve starts there (see [`CubicBound::k`]).
    pub(super) from: Option<f64>,
}

impl CubicBound {
    /// Seconds from the event until the curve is back at `w_max`: RFC 9438's fixed-β
    /// `K = ∛(W_max(1−β)/C)`, or, with `from`, RFC 9438's `K = ∛((W_max − cwnd_epoch)/C)`
    /// (the curve starts at the window the cut left), never more than the fixed-β one.
    pub(super) fn k(&self) -> f64 {
        let c = cubic::C;
        let fixed = (self.w_max * (1.0 - cubic::BETA) / c).cbrt();
        self.from
            .map_or(fixed, |w| ((self.w_max - w).max(0.0) / c).cbrt().min(fixed))
    }

    /// Cubic's window `t` after the event.
    pub(super) fn window(&self, t: Duration) -> f64 {
        let x = t.as_secs_f64() - self.k();
        cubic::C * x * x * x + self.w_max
    }

    /// Cubic's increase over the next round trip from `cwnd`, `Δ` after the event: at
    /// least one packet per RTT, so a flow below Cubic's curve still grows like Reno.
    fn alpha(&self, cwnd: f64, delta: Duration) -> f64 {
        (self.window(delta + self.srtt) - cwnd).max(1.0)
    }
}

/// H-TCP's α, scaled and capped (see the module docs), in packets per round trip.
pub(super) fn effective_alpha(
    cwnd: f64,
    delta: Duration,
    scale: f64,
    bound: Option<CubicBound>,
) -> f64 {
    let alpha = (htcp_alpha(delta) * scale).min((cwnd / 2.0).max(1.0));
    bound.map_or(alpha, |b| alpha.min(b.alpha(cwnd, delta)))
}

/// The window after `acked` packets were acknowledged in congestion avoidance:
/// `cwnd += α/cwnd` per packet (fractions accumulate in the `f64` window).
pub(super) fn grow(
    cwnd: f64,
    acked: u64,
    delta: Duration,
    scale: f64,
    bound: Option<CubicBound>,
) -> f64 {
    let cwnd = cwnd.max(1.0);
    cwnd + effective_alpha(cwnd, delta, scale, bound) * acked as f64 / cwnd
}
