//! CTCP v2 congestion control: slow start with a delay-based exit, H-TCP growth, and a
//! backoff of `β = RTT_min/RTT` only when loss coincides with queueing delay, at most once
//! per round trip. Random loss on an empty queue (what the network code repairs) never
//! shrinks the window; a full drop-tail queue (srtt ≫ RTT_min) does, so the flow shares a
//! bottleneck with Cubic. Before the windowed RTT_min would expire under a queue that never
//! empties, one loss-free `β` cut drains it (`backoff::should_drain`), so the flow does not
//! keep a full buffer standing once it has forgotten the propagation delay.
//!
//! One phase per file: slow start (`slow_start.rs`), growth (`growth.rs`), backoff
//! (`backoff.rs`); this file only sequences them.

use super::{cwnd_limited, in_recovery, CcConfig, Controller};
use crate::rtt::RttEstimator;
use std::time::{Duration, Instant};

mod backoff;
mod growth;
mod slow_start;
#[cfg(test)]
mod tests;

pub use growth::htcp_alpha;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    SlowStart,
    Growth,
}

/// The CTCP v2 controller (see the module docs).
#[derive(Debug, Clone)]
pub struct Ctcp {
    cfg: CcConfig,
    /// Window in packets with its fractional part (H-TCP adds `α/cwnd` per ACK).
    cwnd: f64,
    phase: Phase,
    /// Start of the H-TCP Δ clock: the last backoff, or the delay-based slow-start exit.
    epoch: Option<Instant>,
    /// When the last backoff happened; losses of packets sent before it are the same round.
    recovery_start: Option<Instant>,
    /// β of the last backoff (½ before any), scaling H-TCP's α.
    last_beta: f64,
    backoffs: u64,
    drains: u64,
    last_drain: Option<Instant>,
    ignored_losses: u64,
    /// srtt at the last ACK or loss, for the optional rate ceiling (none before).
    srtt: Option<Duration>,
    /// Consecutive RTT samples above the slow-start delay threshold.
    ss_rise: u32,
    /// H-TCP RTT scaling of α, from the latest RTT_min.
    alpha_scale: f64,
}

impl Ctcp {
    /// A controller in slow start at `cfg.initial_window`.
    pub fn new(cfg: CcConfig) -> Self {
        let cwnd = cfg
            .initial_window
            .clamp(cfg.min_window.max(1), cfg.max_window.max(1)) as f64;
        Ctcp {
            cfg,
            cwnd,
            phase: Phase::SlowStart,
            epoch: None,
            recovery_start: None,
            last_beta: backoff::BETA_MIN,
            backoffs: 0,
            drains: 0,
            last_drain: None,
            ignored_losses: 0,
            srtt: None,
            ss_rise: 0,
            alpha_scale: 1.0,
        }
    }

    /// β applied by the last backoff (0.5 before any): `RTT_min / round_min`, clamped.
    pub fn last_beta(&self) -> f64 {
        self.last_beta
    }

    /// Number of backoffs so far (gated congestion events, at most one per round).
    pub fn backoffs(&self) -> u64 {
        self.backoffs
    }

    /// Deliberate loss-free cuts made to drain a standing queue before the minimum RTT
    /// expires (see `backoff::should_drain`).
    pub fn drains(&self) -> u64 {
        self.drains
    }

    /// Lost packets reported in congestion events that did not back off: random loss on
    /// an empty queue, or more loss from a round already backed off.
    pub fn ignored_losses(&self) -> u64 {
        self.ignored_losses
    }

    /// Current H-TCP increase in packets per round trip at `now` (after scaling and cap).
    pub fn alpha(&self, now: Instant) -> f64 {
        growth::effective_alpha(self.cwnd, self.delta(now), self.alpha_scale)
    }

    fn delta(&self, now: Instant) -> Duration {
        self.epoch
            .map_or(Duration::ZERO, |e| now.saturating_duration_since(e))
    }

    /// `cwnd ← β·cwnd`, start a recovery period and restart the H-TCP clock.
    fn cut(&mut self, now: Instant, rtt: &RttEstimator) {
        let beta = backoff::beta_now(rtt);
        self.cwnd *= beta;
        self.last_beta = beta;
        self.recovery_start = Some(now);
        self.epoch = Some(now);
        self.phase = Phase::Growth;
        self.clamp();
    }

    fn ceiling(&self) -> u64 {
        self.srtt
            .map_or(self.cfg.max_window, |s| self.cfg.ceiling(s))
    }

    fn clamp(&mut self) {
        let ceiling = self.ceiling() as f64;
        self.cwnd = self.cwnd.min(ceiling).max(self.cfg.min_window as f64);
    }
}

impl Controller for Ctcp {
    fn on_sent(&mut self, _now: Instant, _packets: u64, _in_flight: u64) {}

    fn on_ack(&mut self, now: Instant, acked: u64, in_flight: u64, rtt: &RttEstimator) {
        self.srtt = Some(rtt.srtt());
        if rtt.has_samples() {
            self.alpha_scale = growth::alpha_scale(rtt.min_rtt());
        }
        if self.phase == Phase::SlowStart {
            // HyStart-style: judge the newest samples, not a smoothed or windowed value,
            // which lag a whole round while the window doubles.
            if slow_start::sample_rises(rtt) {
                self.ss_rise += 1;
            } else {
                self.ss_rise = 0;
            }
            if self.ss_rise >= slow_start::RISE_SAMPLES {
                self.phase = Phase::Growth;
                self.epoch = Some(now);
                // The queue we just built is (latest − min)·rate: drop back to the BDP the
                // samples show, so the queue drains instead of overflowing.
                let beta = (rtt.min_rtt().as_secs_f64() / rtt.latest().as_secs_f64().max(1e-9))
                    .clamp(0.5, 1.0);
                self.cwnd *= beta;
                self.clamp();
                return;
            }
        }
        if acked == 0 || !cwnd_limited(acked, in_flight, self.window()) {
            self.clamp();
            return;
        }
        if self.phase == Phase::Growth && backoff::should_drain(now, self.last_drain, rtt) {
            self.cut(now, rtt);
            self.last_drain = Some(now);
            self.drains += 1;
            return;
        }
        if self.phase == Phase::SlowStart && slow_start::delay_rise(rtt) {
            self.phase = Phase::Growth;
            self.epoch = Some(now);
        }
        self.cwnd = match self.phase {
            Phase::SlowStart => slow_start::grow(self.cwnd, acked),
            Phase::Growth => growth::grow(self.cwnd, acked, self.delta(now), self.alpha_scale),
        };
        self.clamp();
    }

    fn on_congestion_event(
        &mut self,
        now: Instant,
        sent_time: Instant,
        lost: u64,
        rtt: &RttEstimator,
    ) {
        self.srtt = Some(rtt.srtt());
        if in_recovery(self.recovery_start, sent_time) || !backoff::queueing(rtt) {
            self.ignored_losses += lost;
            return;
        }
        self.cut(now, rtt);
        self.backoffs += 1;
    }

    fn window(&self) -> u64 {
        let ceiling = self.ceiling();
        ((self.cwnd + 1e-9) as u64)
            .min(ceiling)
            .max(self.cfg.min_window)
    }

    fn in_slow_start(&self) -> bool {
        self.phase == Phase::SlowStart
    }

    fn name(&self) -> &'static str {
        "ctcp"
    }
}
