//! NewReno (RFC 9002 §7 / RFC 6582) in packets: slow start to `ssthresh`, then one packet
//! per round trip; every congestion event halves the window, once per round trip. The
//! textbook loss-based reference for simulations.

use super::{cwnd_limited, in_recovery, CcConfig, Controller};
use crate::rtt::RttEstimator;
use std::time::Instant;

/// The NewReno controller.
#[derive(Debug, Clone)]
pub(crate) struct NewReno {
    cfg: CcConfig,
    cwnd: f64,
    ssthresh: f64,
    recovery_start: Option<Instant>,
}

impl NewReno {
    /// A controller in slow start at `cfg.initial_window`.
    pub(crate) fn new(cfg: CcConfig) -> Self {
        let cwnd = cfg
            .initial_window
            .clamp(cfg.min_window.max(1), cfg.max_window.max(1)) as f64;
        NewReno {
            cfg,
            cwnd,
            ssthresh: f64::INFINITY,
            recovery_start: None,
        }
    }
}

impl Controller for NewReno {
    fn on_sent(&mut self, _now: Instant, _packets: u64, _in_flight: u64) {}

    fn on_ack(&mut self, _now: Instant, acked: u64, in_flight: u64, _rtt: &RttEstimator) {
        if acked == 0 || !cwnd_limited(acked, in_flight, self.window()) {
            return;
        }
        if self.cwnd < self.ssthresh {
            self.cwnd += acked as f64;
        } else {
            self.cwnd += acked as f64 / self.cwnd;
        }
        self.cwnd = self.cwnd.min(self.cfg.max_window as f64);
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
        self.cwnd = (self.cwnd / 2.0).max(self.cfg.min_window as f64);
        self.ssthresh = self.cwnd;
    }

    fn window(&self) -> u64 {
        ((self.cwnd + 1e-9) as u64).max(self.cfg.min_window)
    }

    fn in_slow_start(&self) -> bool {
        self.cwnd < self.ssthresh
    }

    #[cfg(test)]
    fn name(&self) -> &'static str {
        "newreno"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_clock::base;
    use std::time::Duration;

    #[test]
    fn halves_once_per_round_then_grows_one_per_rtt() {
        let mut c = NewReno::new(CcConfig::default());
        let r = RttEstimator::new(Duration::from_millis(100));
        let t = base();
        c.on_ack(t, 32, 0, &r);
        assert_eq!(c.window(), 64);
        c.on_congestion_event(t, t - Duration::from_millis(1), 1, &r);
        assert_eq!(c.window(), 32);
        assert!(!c.in_slow_start());
        c.on_congestion_event(t + Duration::from_millis(5), t, 1, &r);
        assert_eq!(c.window(), 32);
        for _ in 0..32 {
            c.on_ack(t, 1, 32, &r);
        }
        assert_eq!(c.window(), 32);
        c.on_ack(t, 1, 32, &r);
        assert_eq!(c.window(), 33);
        c.on_congestion_event(
            t + Duration::from_millis(10),
            t + Duration::from_millis(1),
            1,
            &r,
        );
        assert_eq!(c.window(), 16);
    }

    #[test]
    fn floor_at_min_window() {
        let mut c = NewReno::new(CcConfig::default());
        let r = RttEstimator::new(Duration::from_millis(100));
        let t = base();
        for i in 0..20u64 {
            let now = t + Duration::from_secs(i);
            c.on_congestion_event(now, now, 1, &r);
        }
        assert_eq!(c.window(), 2);
    }
}
