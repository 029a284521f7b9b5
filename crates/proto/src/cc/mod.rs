//! Congestion control behind a small trait, so the connection can run CTCP v2 while a
//! simulation runs Cubic or NewReno beside it (quinn-proto's controller-trait shape,
//! s2n-quic's one-phase-per-file layout).
//!
//! Windows are in packets (datagrams), repairs included; time always comes in as `now`.

use crate::rtt::RttEstimator;
use std::time::{Duration, Instant};

pub(crate) mod ctcp;
pub(crate) mod cubic;
pub(crate) mod new_reno;

pub(crate) use ctcp::Ctcp;
pub(crate) use cubic::Cubic;
pub(crate) use new_reno::NewReno;

/// The pacing gain of a phase: [`crate::pacer::SLOW_START_GAIN`] in slow start,
/// [`crate::pacer::CONGESTION_AVOIDANCE_GAIN`] after (the default of
/// [`Controller::pacing_gain`]).
pub(crate) fn phase_pacing_gain(slow_start: bool) -> f64 {
    if slow_start {
        crate::pacer::SLOW_START_GAIN
    } else {
        crate::pacer::CONGESTION_AVOIDANCE_GAIN
    }
}

/// A congestion controller. Methods take `now` (sans-IO) and counts in packets.
pub(crate) trait Controller: std::fmt::Debug + Send {
    /// `packets` were sent at `now`; `in_flight` is the count in flight after the send.
    fn on_sent(&mut self, now: Instant, packets: u64, in_flight: u64);
    /// `acked` packets were newly acknowledged at `now`; `in_flight` is the count still in
    /// flight after removing them. A sender using less than half its window (application
    /// limited) does not grow it.
    fn on_ack(&mut self, now: Instant, acked: u64, in_flight: u64, rtt: &RttEstimator);
    /// Loss detected of packets sent at `sent_time` (the latest lost packet's send time).
    /// The controller decides whether it is congestion.
    fn on_congestion_event(
        &mut self,
        now: Instant,
        sent_time: Instant,
        lost: u64,
        rtt: &RttEstimator,
    );
    /// A rate the handshake measured for this direction of the path, in full-size packets
    /// per second (see `wire::Initiate`), with `rtt` holding the handshake's RTT sample.
    /// `exact`: the train was spread out by the bottleneck, so `rate` is its rate rather
    /// than a lower bound. A controller may start its first flight from it instead of
    /// probing. Default: ignored.
    fn on_path_estimate(&mut self, now: Instant, rate: f64, exact: bool, rtt: &RttEstimator) {
        let _ = (now, rate, exact, rtt);
    }
    /// Congestion window in packets, repairs included.
    fn window(&self) -> u64;
    /// Whether the controller is still in slow start (the pacer uses a higher gain there).
    fn in_slow_start(&self) -> bool;
    /// Pacing gain the connection should use now, at smoothed RTT `srtt` (the pacer sends
    /// `gain × window / srtt`). Default: [`crate::pacer::SLOW_START_GAIN`] in slow start,
    /// [`crate::pacer::CONGESTION_AVOIDANCE_GAIN`] after. A controller may ask for more,
    /// e.g. to send its first flight as a fast packet train.
    fn pacing_gain(&self, srtt: Duration) -> f64 {
        let _ = srtt;
        phase_pacing_gain(self.in_slow_start())
    }
    /// Send times whose losses the controller put down to congestion at its latest
    /// backoff (the round that overflowed a queue), if it tells them apart from random
    /// loss at all. Default: none. The connection keeps such losses out of the loss-rate
    /// estimate that sizes proactive redundancy: a queue overflow is answered by the
    /// backoff, and repair sized for it afterwards is waste (at 0 % random loss a single
    /// overflow of 87 packets made a real-kernel 500 ms transfer send 9 % repairs for
    /// seconds). The losses are still repaired.
    fn congestion_span(&self) -> Option<(Instant, Instant)> {
        None
    }
    /// Window reductions so far (congestion events acted on). Default: not counted.
    fn backoffs(&self) -> u64 {
        0
    }
    /// Short name for logs and stats.
    #[cfg(test)]
    fn name(&self) -> &'static str;
}

/// Which congestion controller a connection uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ControllerKind {
    /// CTCP v2: H-TCP growth, backoff only on loss with queueing delay (the default).
    #[default]
    Ctcp,
    /// RFC 9438 Cubic: loss-based, models competing kernel TCP.
    Cubic,
    /// RFC 6582/9002 NewReno: the textbook loss-based reference.
    NewReno,
}

/// Parameters shared by every controller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CcConfig {
    /// Window at start, in packets. Default `TransportConfig::initial_window` (32): with pacing an initial flight of 32
    /// datagrams (~46 kB) does not burst, and on a 500 ms / 10 Mbit/s path (BDP ≈ 430
    /// datagrams) slow start reaches the BDP in 4 rounds instead of 6 from 10, which the
    /// "90 % of the link within 6 RTTs" target needs.
    pub initial_window: u64,
    /// Floor of the window in packets (default 2: one to send, one to keep the ACK clock).
    pub min_window: u64,
    /// Ceiling of the window in packets. Default 2^20: far above any BDP we meet, so the
    /// window is never capped below the BDP (CTCP's 1000-packet cap limited it to
    /// ~23 Mbit/s at 500 ms).
    pub max_window: u64,
    /// Optional sending-rate ceiling in bits per second: the window never exceeds
    /// `max_rate × srtt / mtu`. Never a fixed-rate mode: loss still backs off below it.
    pub max_rate_bps: Option<u64>,
    /// Datagram size in bytes, to convert `max_rate_bps` into packets.
    pub mtu: usize,
}

impl Default for CcConfig {
    /// The transport's defaults for what it sets ([`crate::TransportConfig`]'s
    /// `initial_window`, `max_rate_bps` and `max_datagram`), the bounds above for the rest.
    fn default() -> Self {
        let t = crate::TransportConfig::default();
        CcConfig {
            initial_window: t.initial_window,
            min_window: 2,
            max_window: 1 << 20,
            max_rate_bps: t.max_rate_bps,
            mtu: t.max_datagram,
        }
    }
}

impl CcConfig {
    /// Window ceiling in packets at this smoothed RTT: `max_window`, lowered to
    /// `max_rate × srtt / mtu` when a rate ceiling is configured (never below `min_window`).
    pub(crate) fn ceiling(&self, srtt: Duration) -> u64 {
        let mut cap = self.max_window.max(self.min_window);
        if let Some(rate) = self.max_rate_bps {
            let bytes = rate as f64 / 8.0 * srtt.as_secs_f64();
            let pkts = (bytes / self.mtu.max(1) as f64).floor() as u64;
            cap = cap.min(pkts.max(self.min_window));
        }
        cap
    }
}

/// Builds a boxed controller of `kind` from `cfg`.
pub(crate) fn new_controller(kind: ControllerKind, cfg: &CcConfig) -> Box<dyn Controller> {
    match kind {
        ControllerKind::Ctcp => Box::new(Ctcp::new(cfg.clone())),
        ControllerKind::Cubic => Box::new(Cubic::new(cfg.clone())),
        ControllerKind::NewReno => Box::new(NewReno::new(cfg.clone())),
    }
}

/// Whether the sender is using enough of its window for growth to be meaningful: at least
/// half of it was in flight when this ACK arrived (RFC 9002 §7.8 / RFC 7661 spirit).
fn cwnd_limited(acked: u64, in_flight: u64, window: u64) -> bool {
    in_flight.saturating_add(acked).saturating_mul(2) >= window
}

/// Whether a loss of a packet sent at `sent_time` belongs to a recovery period that
/// started at `recovery_start` (and so must not back off again: once per round).
fn in_recovery(recovery_start: Option<Instant>, sent_time: Instant) -> bool {
    recovery_start.is_some_and(|r| sent_time <= r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn factory_builds_each_kind() {
        let cfg = CcConfig::default();
        assert_eq!(new_controller(ControllerKind::Ctcp, &cfg).name(), "ctcp");
        assert_eq!(new_controller(ControllerKind::Cubic, &cfg).name(), "cubic");
        assert_eq!(
            new_controller(ControllerKind::NewReno, &cfg).name(),
            "newreno"
        );
        for k in [
            ControllerKind::Ctcp,
            ControllerKind::Cubic,
            ControllerKind::NewReno,
        ] {
            let c = new_controller(k, &cfg);
            assert_eq!(c.window(), 32);
            assert!(c.in_slow_start());
        }
    }

    #[test]
    fn ceiling_from_rate() {
        let cfg = CcConfig {
            max_rate_bps: Some(10_000_000),
            mtu: 1250,
            ..CcConfig::default()
        };
        // 10 Mbit/s × 100 ms = 125 kB = 100 packets of 1250 B.
        assert_eq!(cfg.ceiling(Duration::from_millis(100)), 100);
        assert_eq!(cfg.ceiling(Duration::ZERO), 2);
        assert_eq!(CcConfig::default().ceiling(Duration::from_secs(1)), 1 << 20);
    }

    #[test]
    fn cwnd_limited_rule() {
        assert!(cwnd_limited(1, 15, 32));
        assert!(!cwnd_limited(1, 14, 32));
    }
}
