//! Cubic (RFC 9438) in packets: `W(t) = C(t−K)³ + W_max` with `C = 0.4`, `β = 0.7`, fast
//! convergence and the Reno-friendly region. Every congestion event is congestion (once per
//! round trip). Used to model competing kernel TCP in simulations and as a comparison.

use super::{cwnd_limited, in_recovery, CcConfig, Controller};
use crate::rtt::RttEstimator;
use std::time::Instant;

/// RFC 9438 `C` in packets / s³.
pub(crate) const C: f64 = 0.4;
/// RFC 9438 multiplicative decrease factor.
pub(crate) const BETA: f64 = 0.7;

/// The RFC 9438 Cubic controller.
#[derive(Debug, Clone)]
pub(crate) struct Cubic {
    cfg: CcConfig,
    cwnd: f64,
    ssthresh: f64,
    w_max: f64,
    /// Seconds from the epoch start until `W(t)` reaches `w_max`.
    k: f64,
    epoch_start: Option<Instant>,
    /// Reno-friendly estimate `W_est`.
    w_est: f64,
    cwnd_prior: f64,
    recovery_start: Option<Instant>,
}

impl Cubic {
    /// A controller in slow start at `cfg.initial_window`.
    pub(crate) fn new(cfg: CcConfig) -> Self {
        let cwnd = cfg
            .initial_window
            .clamp(cfg.min_window.max(1), cfg.max_window.max(1)) as f64;
        Cubic {
            cfg,
            cwnd,
            ssthresh: f64::INFINITY,
            w_max: cwnd,
            k: 0.0,
            epoch_start: None,
            w_est: cwnd,
            cwnd_prior: cwnd,
            recovery_start: None,
        }
    }

    /// `W_max`: the window before the last reduction (after fast convergence).
    #[cfg(test)]
    pub(crate) fn w_max(&self) -> f64 {
        self.w_max
    }

    /// `K` in seconds: when the cubic curve returns to `W_max` after the last reduction.
    #[cfg(test)]
    pub(crate) fn k(&self) -> f64 {
        self.k
    }

    fn w_cubic(&self, t: f64) -> f64 {
        C * (t - self.k).powi(3) + self.w_max
    }

    fn clamp(&mut self) {
        self.cwnd = self
            .cwnd
            .clamp(self.cfg.min_window as f64, self.cfg.max_window as f64);
    }
}

impl Controller for Cubic {
    fn on_sent(&mut self, _now: Instant, _packets: u64, _in_flight: u64) {}

    fn on_ack(&mut self, now: Instant, acked: u64, in_flight: u64, rtt: &RttEstimator) {
        if acked == 0 || !cwnd_limited(acked, in_flight, self.window()) {
            return;
        }
        if self.cwnd < self.ssthresh {
            self.cwnd += acked as f64;
            self.clamp();
            return;
        }
        let epoch = match self.epoch_start {
            Some(e) => e,
            None => {
                // Congestion avoidance entered without a reduction (slow start hit ssthresh).
                self.epoch_start = Some(now);
                self.w_max = self.cwnd;
                self.k = 0.0;
                self.w_est = self.cwnd;
                self.cwnd_prior = self.cwnd;
                now
            }
        };
        let t = now.saturating_duration_since(epoch).as_secs_f64();
        let alpha_cubic = if self.w_est >= self.cwnd_prior {
            1.0
        } else {
            3.0 * (1.0 - BETA) / (1.0 + BETA)
        };
        self.w_est += alpha_cubic * acked as f64 / self.cwnd;
        if self.w_cubic(t) < self.w_est {
            self.cwnd = self.w_est;
        } else {
            let target = self
                .w_cubic(t + rtt.srtt().as_secs_f64())
                .clamp(self.cwnd, 1.5 * self.cwnd);
            self.cwnd += (target - self.cwnd) / self.cwnd * acked as f64;
        }
        self.clamp();
    }

    fn on_congestion_event(
        &mut self,
        now: Instant,
        sent_time: Instant,
        _lost: u64,
        _rtt: &RttEstimator,
    ) {
        if in_recovery(self.recovery_start, sent_time) {
            return;
        }
        self.recovery_start = Some(now);
        self.cwnd_prior = self.cwnd;
        // Fast convergence: release bandwidth to newer flows when W_max keeps shrinking.
        self.w_max = if self.cwnd < self.w_max {
            self.cwnd * (1.0 + BETA) / 2.0
        } else {
            self.cwnd
        };
        self.cwnd = (self.cwnd * BETA).max(self.cfg.min_window as f64);
        self.ssthresh = self.cwnd;
        self.k = ((self.w_max - self.cwnd).max(0.0) / C).cbrt();
        self.epoch_start = Some(now);
        self.w_est = self.cwnd;
        self.clamp();
    }

    fn window(&self) -> u64 {
        ((self.cwnd + 1e-9) as u64).max(self.cfg.min_window)
    }

    fn in_slow_start(&self) -> bool {
        self.cwnd < self.ssthresh
    }

    #[cfg(test)]
    fn name(&self) -> &'static str {
        "cubic"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_clock::{base, ms};
    use std::time::Duration;

    /// Acks a full window per round trip of `rtt` in ten batches.
    fn round(c: &mut Cubic, r: &mut RttEstimator, now: &mut Instant, rtt: Duration) {
        let w = c.window();
        for b in 0..10u32 {
            let n = w * u64::from(b + 1) / 10 - w * u64::from(b) / 10;
            *now += rtt / 10;
            r.update(*now, rtt, Duration::ZERO);
            if n > 0 {
                c.on_ack(*now, n, w, r);
            }
        }
    }

    #[test]
    fn slow_start_doubles_and_loss_multiplies_by_07() {
        let mut c = Cubic::new(CcConfig::default());
        let mut r = RttEstimator::new(ms(100));
        let mut now = base();
        round(&mut c, &mut r, &mut now, ms(100));
        assert_eq!(c.window(), 64);
        c.on_congestion_event(now, now - ms(1), 1, &r);
        assert_eq!(c.window(), 44);
        assert!(!c.in_slow_start());
        // Same round: ignored.
        c.on_congestion_event(now + ms(10), now - ms(2), 1, &r);
        assert_eq!(c.window(), 44);
    }

    #[test]
    fn returns_to_w_max_after_k() {
        let mut c = Cubic::new(CcConfig {
            initial_window: 1000,
            ..CcConfig::default()
        });
        let mut r = RttEstimator::new(ms(100));
        let mut now = base();
        r.update(now, ms(100), Duration::ZERO);
        c.on_congestion_event(now, now - ms(1), 1, &r);
        assert_eq!(c.window(), 700);
        // K = cbrt(300 / 0.4) ≈ 9.09 s.
        assert!((c.k() - (300.0f64 / 0.4).cbrt()).abs() < 1e-9);
        let start = now;
        while now < start + Duration::from_secs_f64(c.k()) - ms(100) {
            round(&mut c, &mut r, &mut now, ms(100));
        }
        let w = c.window();
        assert!((980..=1010).contains(&w), "near W_max at K: {w}");
        // Concave then convex: well above W_max a few seconds later.
        for _ in 0..50 {
            round(&mut c, &mut r, &mut now, ms(100));
        }
        assert!(c.window() > 1040, "{}", c.window());
    }

    #[test]
    fn fast_convergence_lowers_w_max() {
        let mut c = Cubic::new(CcConfig {
            initial_window: 1000,
            ..CcConfig::default()
        });
        let r = RttEstimator::new(ms(100));
        let now = base();
        c.on_congestion_event(now, now - ms(1), 1, &r);
        c.on_congestion_event(now + ms(200), now + ms(100), 1, &r);
        // 700 < W_max 1000: W_max = 700 × 1.7 / 2.
        assert!((c.w_max() - 595.0).abs() < 1e-9);
        assert_eq!(c.window(), 490);
    }

    #[test]
    fn reno_friendly_region_on_short_rtt() {
        // Small window, 10 ms RTT: the cubic curve is flat for seconds, the Reno estimate
        // (0.53 packets per RTT) governs.
        let mut c = Cubic::new(CcConfig {
            initial_window: 20,
            ..CcConfig::default()
        });
        let mut r = RttEstimator::new(ms(10));
        let mut now = base();
        r.update(now, ms(10), Duration::ZERO);
        c.on_congestion_event(now, now - ms(1), 1, &r);
        assert_eq!(c.window(), 14);
        for _ in 0..10 {
            round(&mut c, &mut r, &mut now, ms(10));
        }
        // W_cubic(0.1 s) ≈ 14.0; Reno-friendly ≈ 14 + 10 × 0.53.
        let w = c.window();
        assert!((18..=20).contains(&w), "{w}");
    }
}
