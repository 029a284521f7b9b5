//! CTCP v2 congestion control: slow start with a delay-based exit, H-TCP growth, and a
//! backoff of `β = RTT_min/RTT` only when loss coincides with queueing delay, at most once
//! per round trip. Random loss on an empty queue (what the network code repairs) never
//! shrinks the window; a full drop-tail queue (srtt ≫ RTT_min) does, so the flow shares a
//! bottleneck with Cubic. Before the windowed RTT_min would expire under a queue that never
//! empties, one loss-free `β` cut drains it (`backoff::should_drain`), so the flow does not
//! keep a full buffer standing once it has forgotten the propagation delay.
//!
//! Slow start opens with a start-up probe (`probe.rs`): the first flight goes out as a fast
//! packet train, the ACK dispersion gives the bottleneck rate, and the window jumps to
//! 85 % of the BDP it implies instead of doubling up to it round by round. When the
//! handshake already measured the path (its packet trains, see `wire::Initiate`), that
//! estimate makes the jump (to the whole BDP, see [`PATH_JUMP_FRACTION`]) before the first
//! flight and the probe is skipped, saving the probe's round trip.
//!
//! One phase per file: start-up probe (`probe.rs`), slow start (`slow_start.rs`), growth
//! (`growth.rs`), backoff (`backoff.rs`); this file only sequences them.

use super::{cwnd_limited, in_recovery, CcConfig, Controller};
use crate::rtt::RttEstimator;
use std::time::{Duration, Instant};

mod backoff;
mod delivery;
mod elastic;
mod growth;
mod probe;
mod refill;
mod slow_start;
#[cfg(test)]
mod tests;

#[cfg(test)]
use growth::htcp_alpha;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    SlowStart,
    Growth,
}

/// The CTCP v2 controller (see the module docs).
#[derive(Debug, Clone)]
pub(crate) struct Ctcp {
    cfg: CcConfig,
    /// Window in packets with its fractional part (H-TCP adds `α/cwnd` per ACK).
    cwnd: f64,
    phase: Phase,
    /// Start of the H-TCP Δ clock: the last backoff, or the delay-based slow-start exit.
    epoch: Option<Instant>,
    /// When the last backoff happened; losses of packets sent before it are the same round.
    recovery_start: Option<Instant>,
    /// β of the last backoff (½ before any): whether that cut drained the queue.
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
    /// The start-up packet train and its rate estimate.
    probe: probe::Probe,
    /// Bottleneck rate the start-up probe measured, in packets per second.
    startup_rate: Option<f64>,
    /// RTT_min at the last ACK or loss, once there is a sample.
    min_rtt: Option<Duration>,
    /// The BDP in packets the start-up probe measured (only when the train was dispersed):
    /// slow start grows conservatively above it.
    ss_bdp: Option<f64>,
    /// While the first flight after a start-up jump is out: (rate it is paced at, in
    /// packets per second; until when, from the first send after the jump).
    jump_round: Option<(f64, Option<Instant>)>,
    /// When a handshake path estimate set the window, and the rate it measured in packets
    /// per second: each flight from idle in slow start is paced at that rate for a round
    /// (the bulk of a proxied transfer follows a small reply a round trip later).
    path: Option<(Instant, f64)>,
    /// Send times whose losses the latest gated backoff answered (see
    /// [`Controller::congestion_span`]).
    congestion_span: Option<(Instant, Instant)>,
    /// Window just before the last backoff or drain (none before the first; a drain on a
    /// noisy path keeps the one before it): the congestion event Cubic's curve, which
    /// bounds growth, starts from.
    w_max: Option<f64>,
    /// The window the last cut left, when the Cubic bound's curve starts there (a cut
    /// on a noisy path, see `Ctcp::cut`).
    bound_from: Option<f64>,
    /// After a delay-rise exit from slow start, the rounds in which a round minimum back
    /// under the exit threshold resumes it ([`slow_start::Resume`]).
    resume: Option<slow_start::Resume>,
    /// Delivery rate and its recent highest, which confirm a delay rise on a noisy path.
    delivery: delivery::DeliveryRate,
    /// Most packets in flight at once so far in slow start (kept across a stale
    /// estimate's reset): the flights an application-limited flow has been sending.
    flight_peak: u64,
    /// How the queue answered the last cut: whether a sender that ignores loss holds it.
    elastic: elastic::Elasticity,
    /// When the last backoff answered a queue clear of twice the delay noise
    /// ([`backoff::clear_queue`]): no refill ([`refill`]) for a while after it.
    last_clear_cut: Option<Instant>,
}

/// Fraction of the BDP a handshake path estimate makes the window jump to. Higher than the
/// start-up probe's [`probe::JUMP_FRACTION`]: the handshake train is sent back to back and
/// its rate is taken over the packet times it spans, so it is not inflated the way the
/// probe's paced train is; its round is paced at that rate, so even a full BDP builds no
/// queue of its own (evidence: docs/experiments/code-evidence.md#path-jump-fraction).
const PATH_JUMP_FRACTION: f64 = 1.0;
/// A handshake path estimate is used for a flight from idle only this soon after it was
/// made (the `RTT_min` window): an older one may describe another path or load.
const PATH_ESTIMATE_TTL: Duration = Duration::from_secs(10);

impl Ctcp {
    /// A controller in slow start at `cfg.initial_window`.
    pub(crate) fn new(cfg: CcConfig) -> Self {
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
            probe: probe::Probe::new(),
            startup_rate: None,
            ss_bdp: None,
            min_rtt: None,
            jump_round: None,
            path: None,
            congestion_span: None,
            w_max: None,
            bound_from: None,
            resume: None,
            delivery: delivery::DeliveryRate::default(),
            flight_peak: 0,
            elastic: elastic::Elasticity::default(),
            last_clear_cut: None,
        }
    }

    /// Bottleneck rate in packets per second that the start-up probe measured from the
    /// first flight's ACK dispersion, if it made an estimate.
    #[cfg(test)]
    pub(crate) fn startup_rate(&self) -> Option<f64> {
        self.startup_rate
    }

    /// A start-up probe result (or a handshake path estimate): in slow start, raise the
    /// window to `fraction` ([`probe::JUMP_FRACTION`] or [`PATH_JUMP_FRACTION`]) of
    /// `rate × RTT_min` (never lower it); slow start and its delay exit go on from there.
    fn jump(&mut self, now: Instant, est: Option<probe::Estimate>, fraction: f64) {
        let Some(est) = est.filter(|e| e.rate.is_finite() && e.rate > 0.0) else {
            return;
        };
        let rate = est.rate;
        self.startup_rate = Some(rate);
        let Some(min_rtt) = self.min_rtt.filter(|_| self.phase == Phase::SlowStart) else {
            return;
        };
        let bdp = rate * min_rtt.as_secs_f64();
        if est.dispersed {
            self.ss_bdp = Some(bdp);
        }
        let target = fraction * bdp;
        if target > self.cwnd {
            self.cwnd = target;
            self.clamp();
            self.jump_round = Some((rate, Some(now + min_rtt)));
        }
    }

    /// β applied by the last backoff (0.5 before any): `RTT_min / round_min`, clamped.
    #[cfg(test)]
    pub(crate) fn last_beta(&self) -> f64 {
        self.last_beta
    }

    /// Number of backoffs so far (gated congestion events, at most one per round).
    #[cfg(test)]
    pub(crate) fn backoffs(&self) -> u64 {
        self.backoffs
    }

    /// Deliberate loss-free cuts made to drain a standing queue before the minimum RTT
    /// expires (see `backoff::should_drain`).
    #[cfg(test)]
    pub(crate) fn drains(&self) -> u64 {
        self.drains
    }

    /// Lost packets reported in congestion events that did not back off: random loss on
    /// an empty queue, or more loss from a round already backed off.
    #[cfg(test)]
    pub(crate) fn ignored_losses(&self) -> u64 {
        self.ignored_losses
    }

    /// Current H-TCP increase in packets per round trip at `now` (after scaling and caps).
    #[cfg(test)]
    pub(crate) fn alpha(&self, now: Instant) -> f64 {
        growth::effective_alpha(self.cwnd, self.delta(now), self.alpha_scale, self.bound())
    }

    /// The Cubic curve that bounds growth since the last backoff, once there was one.
    fn bound(&self) -> Option<growth::CubicBound> {
        self.w_max.map(|w_max| growth::CubicBound {
            w_max,
            srtt: self.srtt.unwrap_or_default(),
            from: self.bound_from,
        })
    }

    fn delta(&self, now: Instant) -> Duration {
        self.epoch
            .map_or(Duration::ZERO, |e| now.saturating_duration_since(e))
    }

    /// `cwnd ← β·cwnd`, start a recovery period and restart the H-TCP clock; `noisy` is
    /// [`Self::noisy`] as the caller judged it before the cut.
    fn cut(&mut self, now: Instant, rtt: &RttEstimator, noisy: bool) {
        // The time one packet takes at the current rate (srtt per window).
        let packet_time = rtt.srtt().div_f64(self.cwnd.max(1.0));
        self.elastic.judge(rtt.min_rtt());
        let beta = self
            .elastic
            .beta(backoff::beta_now(rtt, packet_time), self.cwnd);
        self.elastic
            .on_cut(now, rtt.round_min(), rtt.srtt(), self.cwnd, beta);
        // Cubic's fast convergence (RFC 9438 §4.7): a cut below the last cut's window means
        // the flow's share is shrinking (a newcomer), so the curve aims lower and leaves it
        // room, as the Cubic flow it is fair to would.
        self.w_max = Some(match self.w_max {
            Some(prev) if self.cwnd < prev => self.cwnd * (1.0 + crate::cc::cubic::BETA) / 2.0,
            _ => self.cwnd,
        });
        self.cwnd *= beta;
        // On a noisy path the curve starts at the window the cut left (RFC 9438's K): after
        // a cut shallower than Cubic's β the fixed-β curve starts below the window and
        // holds growth near a packet per round for seconds. Without noise the fixed-β
        // curve stays, which the fairness rows against Cubic are tuned with.
        self.bound_from = noisy.then_some(self.cwnd);
        self.last_beta = beta;
        self.recovery_start = Some(now);
        self.epoch = Some(now);
        self.phase = Phase::Growth;
        self.resume = None;
        self.clamp();
    }

    /// CTCP's gate ([`backoff::queueing`]); on a path with material delay noise (`noisy`,
    /// [`backoff::noisy`]) a rise that is not clear of the noise ([`backoff::clear_queue`])
    /// counts only if the window can hold a queue at the recent delivery rate
    /// ([`backoff::window_holds_queue`]).
    fn congested(&self, rtt: &RttEstimator, noisy: bool) -> bool {
        if !backoff::queueing(rtt) {
            return false;
        }
        !noisy
            || backoff::clear_queue(rtt)
            || backoff::window_holds_queue(self.cwnd, self.delivery.max_rate(), rtt.srtt())
    }

    /// Whether to drain a standing queue now ([`backoff::should_drain`]), if it is the
    /// flow's own: on a path with material delay noise, a round minimum not clear of twice
    /// the noise must be confirmed by the window, as the gate's rise is
    /// ([`Self::congested`]). Why: FIFO jitter keeps the round minimum above the path
    /// minimum with no queue at all, and a drain every min-RTT window then held the window
    /// under the pipe (evidence: docs/experiments/jitter.md, "Drains confirmed by the
    /// delivery rate").
    fn drain_due(&self, now: Instant, rtt: &RttEstimator) -> bool {
        if self.phase != Phase::Growth || !backoff::should_drain(now, self.last_drain, rtt) {
            return false;
        }
        !self.noisy(rtt)
            || backoff::drain_clear(rtt)
            || backoff::window_holds_queue(self.cwnd, self.delivery.max_rate(), rtt.srtt())
    }

    /// A deliberate cut to drain a standing queue ([`Self::drain_due`]). On a noisy path
    /// it leaves the Cubic bound's curve as it was, and with the curve's epoch H-TCP's
    /// clock: a drain comes every min-RTT window there, and restarting the curve each time
    /// held the window near an old `w_max` for K seconds, below the pipe (evidence:
    /// docs/experiments/jitter.md, session 29).
    fn drain(&mut self, now: Instant, rtt: &RttEstimator) {
        let bound = (self.w_max, self.epoch, self.bound_from);
        let noisy = self.noisy(rtt);
        self.cut(now, rtt, noisy);
        if noisy && bound.0.is_some() {
            (self.w_max, self.epoch, self.bound_from) = bound;
        }
        self.last_drain = Some(now);
        self.drains += 1;
    }

    /// The window growth must not leave this one under ([`refill`]): on a noisy path, with
    /// a delivery rate measured, while the delay is not clear of twice the noise (a queue
    /// jitter does not make) and no cut on such a queue came within [`refill::QUIET`].
    fn refill_target(&self, now: Instant, rtt: &RttEstimator) -> Option<f64> {
        let recent_clear = self
            .last_clear_cut
            .is_some_and(|c| now.saturating_duration_since(c) < refill::QUIET);
        if recent_clear || !self.noisy(rtt) || backoff::clear_queue(rtt) {
            return None;
        }
        let noise = backoff::noise(rtt);
        self.delivery
            .max_rate()
            .map(|r| refill::target(r, rtt.min_rtt(), noise))
    }

    /// The window after `acked` packets were acknowledged with the window full: slow
    /// start's or H-TCP's growth, and on a noisy path at least the refill ([`refill`]).
    fn grown(&self, now: Instant, acked: u64, rtt: &RttEstimator) -> f64 {
        match self.phase {
            Phase::SlowStart => slow_start::grow(
                self.cwnd,
                acked,
                self.ss_bdp.filter(|_| !slow_start::noisy(rtt)),
            ),
            Phase::Growth => {
                let grown = growth::grow(
                    self.cwnd,
                    acked,
                    self.delta(now),
                    self.alpha_scale,
                    self.bound(),
                );
                self.refill_target(now, rtt)
                    .map_or(grown, |t| refill::refill(self.cwnd, grown, acked, t))
            }
        }
    }

    /// [`backoff::noisy`] at this window's packet time (`srtt / cwnd`).
    fn noisy(&self, rtt: &RttEstimator) -> bool {
        backoff::noisy(rtt, rtt.srtt().div_f64(self.cwnd.max(1.0)))
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
    fn on_sent(&mut self, now: Instant, packets: u64, in_flight: u64) {
        let from_idle = self.phase == Phase::SlowStart && in_flight <= packets;
        if let (Some((at, rate)), Phase::SlowStart) = (self.path, self.phase) {
            let round_end = now + self.min_rtt.unwrap_or_default();
            if from_idle && now.saturating_duration_since(at) > PATH_ESTIMATE_TTL {
                // Too old to trust for a flight that starts from idle: back to the initial
                // window and a probe train of its own, but never below the flights the
                // flow has been sending (each acknowledged), or an application-limited
                // flow's next burst (a DNS gateway's) waits a round trip, past its deadline.
                let peak = self.flight_peak;
                *self = Ctcp::new(self.cfg.clone());
                self.flight_peak = peak;
                self.cwnd = self.cwnd.max(peak as f64);
                self.clamp();
            } else if matches!(self.jump_round, Some((_, None))) || from_idle {
                // The first send after the estimate, or a new flight from idle: pace this
                // round at the measured rate.
                self.jump_round = Some((rate, Some(round_end)));
            }
        }
        if self.phase == Phase::SlowStart {
            self.flight_peak = self.flight_peak.max(in_flight);
        }
        let est = self.probe.on_sent(now, packets, from_idle);
        self.jump(now, est, probe::JUMP_FRACTION);
    }

    fn on_ack(&mut self, now: Instant, acked: u64, in_flight: u64, rtt: &RttEstimator) {
        self.srtt = Some(rtt.srtt());
        if rtt.has_samples() {
            self.alpha_scale = growth::alpha_scale(rtt.min_rtt());
            self.min_rtt = Some(rtt.min_rtt());
            self.elastic.on_sample(now, rtt.latest());
        }
        if acked > 0 {
            self.delivery.on_ack(now, acked, rtt.srtt());
            let est = self.probe.on_ack(now, acked, rtt.min_rtt());
            self.jump(now, est, probe::JUMP_FRACTION);
        }
        if self
            .jump_round
            .is_some_and(|(_, until)| until.is_some_and(|u| now >= u))
        {
            self.jump_round = None;
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
                self.resume = None;
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
        if self.drain_due(now, rtt) {
            self.drain(now, rtt);
            return;
        }
        if self.phase == Phase::SlowStart && slow_start::delay_rise(rtt) {
            self.phase = Phase::Growth;
            self.epoch = Some(now);
            self.resume = Some(slow_start::Resume::new(now, rtt.srtt()));
        } else if let Some(r) = self.resume.as_mut() {
            match r.on_ack(now, rtt) {
                Some(true) => {
                    self.phase = Phase::SlowStart;
                    self.epoch = None;
                    self.resume = None;
                }
                Some(false) => self.resume = None,
                None => {}
            }
        }
        self.cwnd = self.grown(now, acked, rtt);
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
        if rtt.has_samples() {
            self.min_rtt = Some(rtt.min_rtt());
        }
        let est = self.probe.on_loss(now, lost);
        self.jump(now, est, probe::JUMP_FRACTION);
        let noisy = self.noisy(rtt);
        // On a noisy path a loss from the last backoff's span (packets sent into the queue
        // it answered, until half a round trip after the cut) is the same event: the
        // smoothed and windowed delays still show that queue while the cut drains it, and
        // read as a new one.
        let span_end = self.congestion_span.map(|(_, end)| end).filter(|_| noisy);
        if in_recovery(self.recovery_start, sent_time)
            || in_recovery(span_end, sent_time)
            || !self.congested(rtt, noisy)
            || self.probe.in_train(sent_time)
        {
            self.ignored_losses += lost;
            return;
        }
        // The overflow that triggered this was sent about one srtt ago (the loss took
        // that long to show); packets sent since then into the same full queue, and
        // those sent while the cut drains it, are lost to it too.
        let srtt = rtt.srtt();
        self.congestion_span = Some((
            sent_time.min(now.checked_sub(srtt.mul_f64(1.5)).unwrap_or(sent_time)),
            now + srtt / 2,
        ));
        if backoff::clear_queue(rtt) {
            self.last_clear_cut = Some(now);
        }
        self.cut(now, rtt, noisy);
        self.backoffs += 1;
        if backoff::BETA_MIN < self.last_beta && self.last_beta < backoff::BETA_MAX {
            // An unclamped β = RTT_min/round_min drains the standing queue (one clamped
            // at BETA_MIN leaves part of a deeper one, at BETA_MAX most of it), so it renews
            // the minimum RTT as a deliberate drain would. Otherwise, after a queue that
            // stood for seconds, the minimum's sample is old, a drain comes due right after
            // the backoff and cuts again, leaving the window well under a BDP and the link
            // partly idle for seconds.
            self.last_drain = Some(now);
        }
    }

    fn congestion_span(&self) -> Option<(Instant, Instant)> {
        self.congestion_span
    }

    fn backoffs(&self) -> u64 {
        self.backoffs + self.drains
    }

    /// Jumps as the start-up probe would, but to [`PATH_JUMP_FRACTION`] of the BDP, with
    /// the same paced round (from the next send, and again for each flight from idle while
    /// in slow start), unless a probe or an earlier estimate already jumped or slow start
    /// is over; the probe is then skipped.
    fn on_path_estimate(&mut self, now: Instant, rate: f64, exact: bool, rtt: &RttEstimator) {
        if self.phase != Phase::SlowStart
            || self.startup_rate.is_some()
            || !rtt.has_samples()
            || !(rate.is_finite() && rate > 0.0)
        {
            return;
        }
        self.min_rtt = Some(rtt.min_rtt());
        self.srtt = Some(rtt.srtt());
        self.probe.skip();
        self.jump(
            now,
            Some(probe::Estimate {
                rate,
                dispersed: exact,
            }),
            PATH_JUMP_FRACTION,
        );
        // Only a jump paces later flights at the rate: an estimate below the initial
        // window (a loopback train too short to measure) leaves slow start as it is.
        if let Some((rate, _)) = self.jump_round {
            self.jump_round = Some((rate, None));
            self.path = Some((now, rate));
        }
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

    /// The first flight goes out as a train ([`probe::train_gain`]); the flight after a
    /// start-up jump at the measured bottleneck rate (the gain that makes
    /// `gain × window / srtt` that rate, within [1, slow-start gain]), so the jump itself
    /// builds no queue that would end slow start below the BDP; then the default.
    fn pacing_gain(&self, srtt: Duration) -> f64 {
        let ss = crate::pacer::SLOW_START_GAIN;
        if self.phase == Phase::SlowStart && self.probe.sending_train() {
            probe::train_gain(srtt, ss)
        } else if let Some((rate, _)) = self.jump_round.filter(|_| self.phase == Phase::SlowStart) {
            (rate * srtt.as_secs_f64() / self.cwnd.max(1.0)).clamp(1.0, ss)
        } else {
            super::phase_pacing_gain(self.phase == Phase::SlowStart)
        }
    }

    #[cfg(test)]
    fn name(&self) -> &'static str {
        "ctcp"
    }
}
