//! Controller-only simulation (s2n-quic style): synthetic ACK/loss rounds, no network.

use super::*;
use crate::cc::{CcConfig, Controller};
use crate::test_clock::{base, ms};

/// A window-limited sender: every round trip the whole window is sent; a `loss` fraction
/// is reported lost in one congestion event at the end of the round, the rest is
/// acknowledged in ten batches, each with an RTT sample of `path_rtt`.
struct Sim {
    c: Ctcp,
    rtt: RttEstimator,
    now: Instant,
}

impl Sim {
    fn new(cfg: CcConfig) -> Self {
        Sim {
            c: Ctcp::new(cfg),
            rtt: RttEstimator::new(ms(100)),
            now: base(),
        }
    }

    fn round(&mut self, path_rtt: Duration, loss: f64) {
        self.round_sampled(path_rtt, loss, |_| path_rtt);
    }

    /// [`Sim::round`] whose ACKs come over `span`, batch `b`'s RTT sample `sample(b)`
    /// (delay that varies while the bottleneck's rate stays).
    fn round_sampled(&mut self, span: Duration, loss: f64, sample: impl Fn(u32) -> Duration) {
        let w = self.c.window();
        let lost = (w as f64 * loss).round() as u64;
        let delivered = w - lost;
        let start = self.now;
        for b in 0..10u32 {
            let n = delivered * u64::from(b + 1) / 10 - delivered * u64::from(b) / 10;
            self.now = start + span * (b + 1) / 10;
            self.rtt.update(self.now, sample(b), Duration::ZERO);
            if n > 0 {
                self.c.on_ack(self.now, n, w, &self.rtt);
            }
        }
        if lost > 0 {
            // The latest lost packet left at the start of this round.
            self.c.on_congestion_event(self.now, start, lost, &self.rtt);
        }
    }

    /// Slow start on an empty 100 ms path, then a 20 ms delay rise that ends it, then
    /// five loss-free rounds at `path_rtt` so srtt and the round minimum settle there.
    fn into_growth(path_rtt: Duration) -> Self {
        let mut s = Sim::new(CcConfig::default());
        for _ in 0..3 {
            s.round(ms(100), 0.0);
        }
        assert!(s.c.in_slow_start());
        for _ in 0..4 {
            s.round(ms(120), 0.0);
        }
        assert!(!s.c.in_slow_start(), "delay rise ends slow start");
        for _ in 0..5 {
            s.round(path_rtt, 0.0);
        }
        s
    }
}

#[test]
fn a_random_loss_in_slow_start_does_not_back_off() {
    let mut s = Sim::new(CcConfig::default());
    let mut prev = s.c.window();
    for _ in 0..8 {
        s.round(ms(100), 0.2);
        let w = s.c.window();
        assert!(w > prev, "window grows: {prev} -> {w}");
        prev = w;
    }
    assert!(s.c.in_slow_start());
    assert_eq!(s.c.backoffs(), 0);
    assert!(s.c.ignored_losses() > 0);
}

#[test]
fn a_random_loss_on_empty_queue_keeps_growing() {
    // The queue has drained: the path is back at its minimum RTT, with 20 % random loss.
    let mut s = Sim::into_growth(ms(100));
    let start = s.c.window();
    let mut prev = start;
    for _ in 0..100 {
        s.round(ms(100), 0.2);
        let w = s.c.window();
        assert!(w >= prev, "window never shrinks: {prev} -> {w}");
        prev = w;
    }
    assert_eq!(s.c.backoffs(), 0);
    assert!(
        prev > start + 1000,
        "H-TCP growth over 10 s: {start} -> {prev}"
    );
}

#[test]
fn b_loss_with_rtt_twice_min_backs_off_by_half() {
    let mut s = Sim::into_growth(ms(200));
    let before = s.c.window();
    s.c.on_congestion_event(s.now, s.now - ms(1), 1, &s.rtt);
    assert_eq!(s.c.backoffs(), 1);
    assert!(
        (s.c.last_beta() - 0.5).abs() < 1e-9,
        "beta {}",
        s.c.last_beta()
    );
    let after = s.c.window();
    assert!(after.abs_diff(before / 2) <= 1, "{before} -> {after}");
}

#[test]
fn c_loss_with_rtt_125_percent_of_min_backs_off_to_080() {
    let mut s = Sim::into_growth(ms(125));
    let before = s.c.window();
    s.c.on_congestion_event(s.now, s.now - ms(1), 3, &s.rtt);
    assert!(
        (s.c.last_beta() - 0.8).abs() < 1e-9,
        "beta {}",
        s.c.last_beta()
    );
    let after = s.c.window();
    assert!(after.abs_diff(before * 4 / 5) <= 1, "{before} -> {after}");
}

#[test]
fn d_at_most_one_backoff_per_round() {
    let mut s = Sim::into_growth(ms(200));
    let t = s.now;
    s.c.on_congestion_event(t, t - ms(10), 1, &s.rtt);
    let w = s.c.window();
    assert_eq!(s.c.backoffs(), 1);
    // More losses of packets sent before the backoff: same round, ignored.
    s.c.on_congestion_event(t + ms(20), t - ms(1), 5, &s.rtt);
    s.c.on_congestion_event(t + ms(150), t, 5, &s.rtt);
    assert_eq!(s.c.backoffs(), 1);
    assert_eq!(s.c.window(), w);
    assert_eq!(s.c.ignored_losses(), 10);
    // A loss of a packet sent after the backoff is a new round.
    s.c.on_congestion_event(t + ms(210), t + ms(5), 1, &s.rtt);
    assert_eq!(s.c.backoffs(), 2);
    assert!(s.c.window() < w);
    // Persistent congestion in the round simulation: one backoff every other round at most.
    let mut s = Sim::into_growth(ms(200));
    for _ in 0..20 {
        s.round(ms(200), 0.05);
    }
    assert!(
        s.c.backoffs() <= 10 && s.c.backoffs() >= 5,
        "{}",
        s.c.backoffs()
    );
}

#[test]
fn e_htcp_alpha_values() {
    let a = |s: f64| htcp_alpha(Duration::from_secs_f64(s));
    assert_eq!(a(0.0), 1.0);
    assert_eq!(a(0.5), 1.0);
    assert_eq!(a(1.0), 1.0);
    assert!((a(2.0) - 11.25).abs() < 1e-9);
    assert!((a(5.0) - 45.0).abs() < 1e-9);
    // Scaled by RTT/50 ms (floor 0.2, ceiling 1), capped at half the window per RTT.
    let alpha = |w, s, scale| growth::effective_alpha(w, Duration::from_secs(s), scale, None);
    assert!((alpha(1000.0, 5, 1.0) - 45.0).abs() < 1e-9);
    assert!((alpha(1000.0, 5, 0.4) - 18.0).abs() < 1e-9);
    assert_eq!(growth::alpha_scale(Duration::from_millis(5)), 0.2);
    assert!((growth::alpha_scale(Duration::from_millis(20)) - 0.4).abs() < 1e-12);
    assert_eq!(growth::alpha_scale(Duration::from_millis(100)), 1.0);
    assert!((alpha(20.0, 5, 1.0) - 10.0).abs() < 1e-9);
    // cwnd += α/cwnd per acked packet: a full window of ACKs adds ~α.
    let mut w = 100.0;
    for _ in 0..100 {
        w = growth::grow(w, 1, Duration::from_secs(2), 1.0, None);
    }
    assert!((w - 100.0 - 11.25).abs() < 0.7, "{w}");
}

/// After a backoff the window never grows past the one a Cubic flow that saw the same
/// congestion event would have (RFC 9438: `β·W_max` at once, back to `W_max` after `K`),
/// however large H-TCP's α has become; below that curve H-TCP's α applies unchanged.
#[test]
fn e_growth_after_a_backoff_stays_under_cubics_curve() {
    let srtt = ms(500);
    let bound = growth::CubicBound {
        w_max: 200.0,
        srtt,
        from: None,
    };
    let k: f64 = (200.0 * (1.0 - crate::cc::cubic::BETA) / crate::cc::cubic::C).cbrt();
    assert!((bound.window(Duration::ZERO) - 0.7 * 200.0).abs() < 1e-9);
    assert!((bound.window(Duration::from_secs_f64(k)) - 200.0).abs() < 1e-9);
    // Cut to 100 (β = 0.5): H-TCP's α (1 per RTT in the first second) is below the curve.
    let a = growth::effective_alpha(100.0, ms(200), 1.0, Some(bound));
    assert!((a - 1.0).abs() < 1e-9, "{a}");
    // Grow with an ACK every 1/cwnd of an RTT for 20 s of virtual time.
    let (mut w, mut t) = (100.0_f64, Duration::ZERO);
    let mut htcp_only = 100.0_f64;
    while t < Duration::from_secs(20) {
        let step = srtt.div_f64(w);
        w = growth::grow(w, 1, t, 1.0, Some(bound));
        htcp_only = growth::grow(htcp_only, 1, t, 1.0, None);
        t += step;
        let cubic = bound.window(t + srtt).max(w.min(100.0));
        assert!(w <= cubic + 1.0, "t {t:?}: {w} above Cubic's {cubic}");
    }
    // H-TCP alone would be far past the bound by now.
    assert!(htcp_only > 1.5 * w, "{htcp_only} vs {w}");
    assert!(
        w > 200.0,
        "past W_max Cubic (and the bound) grows again: {w}"
    );
}

#[test]
fn e_growth_follows_time_since_backoff() {
    let mut s = Sim::into_growth(ms(100));
    s.round(ms(110), 0.0); // a small standing queue
    s.c.on_congestion_event(s.now, s.now - ms(1), 1, &s.rtt);
    let t0 = s.now;
    assert!((s.c.alpha(t0) - growth::alpha_scale(ms(100))).abs() < 1e-9);
    assert!(s.c.alpha(t0 + Duration::from_secs(3)) > 10.0 * s.c.alpha(t0));
}

#[test]
fn f_slow_start_exits_on_delay_rise_without_shrinking() {
    let mut s = Sim::new(CcConfig::default());
    for _ in 0..3 {
        s.round(ms(100), 0.0);
    }
    // 10 ms of queueing is below clamp(100/8, 4, 16) = 12.5 ms: stay.
    for _ in 0..3 {
        s.round(ms(110), 0.0);
    }
    assert!(s.c.in_slow_start());
    let before = s.c.window();
    for _ in 0..2 {
        s.round(ms(115), 0.0);
    }
    assert!(!s.c.in_slow_start());
    assert!(s.c.window() >= before, "no reduction on a delay exit");
    assert_eq!(s.c.backoffs(), 0);
    assert_eq!(slow_start::delay_threshold(ms(20)), ms(4));
    assert_eq!(slow_start::delay_threshold(ms(80)), ms(10));
    assert_eq!(
        slow_start::delay_threshold(ms(500)),
        Duration::from_micros(62_500)
    );
    assert_eq!(slow_start::delay_threshold(ms(1000)), ms(64));
}

#[test]
fn f_gated_loss_ends_slow_start() {
    let mut s = Sim::new(CcConfig::default());
    s.round(ms(100), 0.0);
    // Two rounds of samples with 18 ms of queue (their minimum above min + 15 %): the gate
    // is open; no ACK in between, so the delay exit has not run.
    for _ in 0..10 {
        s.now += ms(25);
        s.rtt.update(s.now, ms(118), Duration::ZERO);
    }
    assert!(backoff::queueing(&s.rtt));
    assert!(s.c.in_slow_start());
    s.c.on_congestion_event(s.now, s.now - ms(1), 1, &s.rtt);
    assert!(!s.c.in_slow_start());
    assert_eq!(s.c.backoffs(), 1);
}

#[test]
fn g_min_rtt_expiry_lets_beta_recover_after_route_change() {
    let mut s = Sim::into_growth(ms(100));
    // Route change: the propagation delay is now 200 ms; a loss with a 250 ms RTT soon
    // after still compares against the old 100 ms minimum.
    for _ in 0..5 {
        s.round(ms(250), 0.0);
    }
    s.c.on_congestion_event(s.now, s.now - ms(1), 1, &s.rtt);
    assert!((s.c.last_beta() - 0.5).abs() < 1e-9);
    // After more than the 10 s window at the new RTT the minimum is 200 ms.
    for _ in 0..55 {
        s.round(ms(200), 0.0);
    }
    assert_eq!(s.rtt.min_rtt(), ms(200));
    for _ in 0..5 {
        s.round(ms(250), 0.0);
    }
    s.c.on_congestion_event(s.now, s.now - ms(1), 1, &s.rtt);
    assert_eq!(s.c.backoffs(), 2);
    assert!(
        (s.c.last_beta() - 0.8).abs() < 1e-9,
        "beta {}",
        s.c.last_beta()
    );
}

/// A competitor's standing queue drifts the windowed RTT_min up (100 → 175 ms: every
/// sample of the last 10 s saw the queue); a loss with the queue full (190 ms) is within
/// 15 % of that minimum, but 90 % above the path floor of the last minute, so it is
/// congestion: read as channel loss, H-TCP's growth would run the window far past a
/// competing Cubic flow's share.
#[test]
fn a_full_queue_is_congestion_even_after_the_min_rtt_drifted_up() {
    let mut s = Sim::into_growth(ms(100));
    for _ in 0..70 {
        s.round(ms(175), 0.0);
    }
    assert_eq!(s.rtt.min_rtt(), ms(175), "the 10 s minimum has drifted");
    assert_eq!(s.rtt.floor_rtt(), ms(100), "the floor remembers the path");
    for _ in 0..3 {
        s.round(ms(190), 0.0);
    }
    let before = s.c.window();
    s.c.on_congestion_event(s.now, s.now - ms(1), 5, &s.rtt);
    assert_eq!(s.c.backoffs(), 1, "a full queue is congestion");
    assert!(s.c.window() < before, "{before} -> {}", s.c.window());

    // A route onto a path 20 % longer is not mistaken for a queue once the minimum has
    // followed it: random loss there keeps the window growing.
    let mut s = Sim::into_growth(ms(100));
    for _ in 0..100 {
        s.round(ms(120), 0.0);
    }
    assert_eq!(s.rtt.min_rtt(), ms(120));
    assert_eq!(s.rtt.floor_rtt(), ms(100));
    let start = s.c.window();
    for _ in 0..20 {
        s.round(ms(120), 0.2);
    }
    assert_eq!(s.c.backoffs(), 0);
    assert!(s.c.window() > start);
}

#[test]
fn jitter_alone_is_not_queueing() {
    // Samples alternate 100/180 ms with no queue: srtt ≈ 140 ms and the round minimum
    // 100 ms. The sample-to-sample noise lifts the gate, so a loss here is channel loss.
    let mut s = Sim::into_growth(ms(100));
    for i in 0..40 {
        s.now += ms(10);
        let sample = if i % 2 == 0 { ms(100) } else { ms(180) };
        s.rtt.update(s.now, sample, Duration::ZERO);
    }
    assert!(s.rtt.jitter() > ms(40));
    assert!(!backoff::queueing(&s.rtt));
    let before = s.c.window();
    s.c.on_congestion_event(s.now, s.now - ms(1), 1, &s.rtt);
    assert_eq!(s.c.backoffs(), 0);
    assert_eq!(s.c.window(), before);
}

#[test]
fn one_round_of_raised_delay_is_not_a_queue() {
    // FIFO jitter lifts a whole round's samples 20 ms (above RTT_min + 15 %) with the
    // round before at the path's delay: a loss now is channel loss. Two such rounds are a
    // standing queue, and the same loss backs off.
    let mut s = Sim::into_growth(ms(100));
    s.round(ms(100), 0.0);
    s.round(ms(120), 0.0);
    assert!(s.rtt.round_min() >= ms(120));
    assert!(!backoff::queueing(&s.rtt), "one round: noise");
    let before = s.c.window();
    s.c.on_congestion_event(s.now, s.now - ms(1), 1, &s.rtt);
    assert_eq!(s.c.backoffs(), 0);
    assert_eq!(s.c.window(), before);
    s.round(ms(120), 0.0);
    s.round(ms(120), 0.0);
    assert!(backoff::queueing(&s.rtt), "two rounds: a queue");
    s.c.on_congestion_event(s.now, s.now - ms(1), 1, &s.rtt);
    assert_eq!(s.c.backoffs(), 1);
}

#[test]
fn a_delay_rise_the_delivery_rate_does_not_confirm_is_noise() {
    // The window was acknowledged every 100 ms, so the pipe holds it; then samples swing
    // 150/190 ms (±20 ms of noise): srtt ≈ 170 ms passes the gate's srtt test but not with
    // the noise counted twice, and at that srtt the recent delivery rate fills 1.7 windows.
    // The window cannot hold a queue of its own: a loss now is channel loss.
    let mut s = Sim::into_growth(ms(100));
    for _ in 0..5 {
        s.round(ms(100), 0.0);
    }
    for i in 0..40 {
        s.now += ms(10);
        let sample = if i % 2 == 0 { ms(150) } else { ms(190) };
        s.rtt.update(s.now, sample, Duration::ZERO);
    }
    assert!(backoff::queueing(&s.rtt) && !backoff::clear_queue(&s.rtt));
    let before = s.c.window();
    s.c.on_congestion_event(s.now, s.now - ms(1), 1, &s.rtt);
    assert_eq!(s.c.backoffs(), 0);
    assert_eq!(s.c.window(), before);
}

#[test]
fn queue_under_jitter_still_backs_off() {
    // The same ±40 ms noise on top of a standing queue of 60 ms (samples 160/240 ms): the
    // noise allowance is capped at a quarter of RTT_min, so the queue still reads as one.
    let mut s = Sim::into_growth(ms(100));
    for i in 0..40 {
        s.now += ms(10);
        let sample = if i % 2 == 0 { ms(160) } else { ms(240) };
        s.rtt.update(s.now, sample, Duration::ZERO);
    }
    assert!(backoff::queueing(&s.rtt));
    s.c.on_congestion_event(s.now, s.now - ms(1), 1, &s.rtt);
    assert_eq!(s.c.backoffs(), 1);
}

#[test]
fn steady_delay_noise_is_measured() {
    // Consecutive samples 10 ms apart: the estimate converges on 10 ms; a constant RTT
    // (a queue that stands still) lets it decay.
    let mut s = Sim::into_growth(ms(100));
    for i in 0..200 {
        s.now += ms(5);
        s.rtt.update(s.now, ms(100 + 10 * (i % 2)), Duration::ZERO);
    }
    assert!(s.rtt.jitter() > ms(9) && s.rtt.jitter() <= ms(10));
    for _ in 0..200 {
        s.now += ms(5);
        s.rtt.update(s.now, ms(150), Duration::ZERO);
    }
    assert!(s.rtt.jitter() < ms(1));
}

#[test]
fn beta_is_clamped() {
    assert_eq!(backoff::beta(ms(100), ms(400)), 0.5);
    assert_eq!(backoff::beta(ms(100), ms(100)), backoff::BETA_MAX);
    assert_eq!(backoff::beta(ms(100), Duration::ZERO), backoff::BETA_MAX);
    assert!((backoff::beta(ms(100), ms(125)) - 0.8).abs() < 1e-12);
}

#[test]
fn max_rate_caps_window() {
    let cfg = CcConfig {
        max_rate_bps: Some(10_000_000),
        mtu: 1250,
        ..CcConfig::default()
    };
    let mut s = Sim::new(cfg);
    assert_eq!(s.c.window(), 32, "no cap before an RTT is known");
    for _ in 0..20 {
        s.round(ms(100), 0.0);
    }
    assert_eq!(s.c.window(), 100);
}

#[test]
fn app_limited_does_not_grow() {
    let mut s = Sim::new(CcConfig::default());
    let now = s.now + ms(100);
    s.rtt.update(now, ms(100), Duration::ZERO);
    s.c.on_ack(now, 1, 2, &s.rtt);
    assert_eq!(s.c.window(), 32);
    s.c.on_ack(now, 1, 31, &s.rtt);
    assert_eq!(s.c.window(), 33);
}

#[test]
fn window_never_below_min() {
    let mut s = Sim::into_growth(ms(300));
    for i in 0..50u64 {
        let t = s.now + ms(i * 400);
        s.c.on_congestion_event(t, t - ms(1), 1, &s.rtt);
    }
    assert_eq!(s.c.window(), 2);
}

#[test]
fn standing_queue_is_drained_before_min_rtt_expires() {
    // A self-inflicted standing queue: every sample 130 ms on a 100 ms path, no loss.
    let mut s = Sim::into_growth(ms(100));
    let mut drained_at = None;
    for i in 0..100u32 {
        s.round(ms(130), 0.0);
        if s.c.drains() == 1 && drained_at.is_none() {
            drained_at = Some(i);
        }
    }
    // The 100 ms minimum was last seen ~0.5 s before; the drain comes at 80 % of 10 s.
    let at = drained_at.expect("drained once");
    assert!((55..=70).contains(&at), "drained in round {at}");
    assert!((s.c.last_beta() - 100.0 / 130.0).abs() < 1e-9);
    assert_eq!(s.c.backoffs(), 0, "a drain is not a loss backoff");
}

#[test]
fn a_backoff_that_drains_the_queue_postpones_the_deliberate_drain() {
    // The same standing queue, but a queue-overflow loss shortly before the drain would
    // come due: the backoff's β = RTT_min/RTT drains the queue, so no second cut follows
    // on its heels (two cuts in a row would leave the window well under a BDP for seconds).
    let mut s = Sim::into_growth(ms(100));
    for _ in 0..50 {
        s.round(ms(130), 0.0);
    }
    assert_eq!(s.c.drains(), 0, "not due yet");
    s.c.on_congestion_event(s.now, s.now - ms(130), 5, &s.rtt);
    assert_eq!(s.c.backoffs(), 1);
    for _ in 0..20 {
        s.round(ms(130), 0.0);
    }
    assert_eq!(s.c.drains(), 0, "the backoff counted as the drain");
}

#[test]
fn no_drain_for_fifo_jitter_the_delivery_rate_does_not_confirm() {
    // FIFO jitter on a 100 ms path: the window is still acknowledged every 100 ms (the
    // bottleneck's rate), but the samples read 130/140 ms, so the round minimum stands
    // above the drain threshold for the whole min-RTT window. At srtt ≈ 135 ms that rate
    // fills 1.35 windows: the window holds no queue of its own, and a drain would only
    // put it further under the pipe.
    let mut s = Sim::into_growth(ms(100));
    for _ in 0..5 {
        s.round(ms(100), 0.0);
    }
    // 9 s: past the drain's horizon (80 % of the 10 s min-RTT window), not the window's end.
    for _ in 0..90 {
        s.round_sampled(ms(100), 0.0, |b| if b % 2 == 0 { ms(130) } else { ms(140) });
    }
    assert!(
        backoff::should_drain(s.now, None, &s.rtt),
        "the delay alone asks for one"
    );
    assert_eq!(s.c.drains(), 0);
    assert_eq!(s.c.backoffs(), 0);
}

#[test]
fn no_drain_without_standing_queue() {
    let mut s = Sim::into_growth(ms(100));
    for _ in 0..200 {
        s.round(ms(101), 0.0);
    }
    assert_eq!(s.c.drains(), 0);
}

/// Start-up probe, controller only: a first flight of `train` packets sent 0.5 ms apart
/// (faster than the bottleneck) crosses a bottleneck of `rate` packets per second on a
/// `path_rtt` path; the receiver ACKs every second packet as it arrives. Every `lose_every`-th
/// packet is lost after the bottleneck and declared lost at the next ACK. With
/// `aggregate`, every ACK arrives at the same instant (ACK compression: no dispersion).
/// Returns the controller after the train's ACKs and the first send after them.
fn startup(
    train: u64,
    rate: f64,
    path_rtt: Duration,
    lose_every: Option<u64>,
    aggregate: bool,
) -> (Ctcp, RttEstimator, Instant) {
    let c = Ctcp::new(CcConfig::default());
    let rtt = RttEstimator::new(ms(100));
    startup_from(c, rtt, base(), train, rate, path_rtt, lose_every, aggregate)
}

/// [`startup`] with a given controller and estimator, the train starting at `t0`.
#[allow(clippy::too_many_arguments)]
fn startup_from(
    mut c: Ctcp,
    mut rtt: RttEstimator,
    t0: Instant,
    train: u64,
    rate: f64,
    path_rtt: Duration,
    lose_every: Option<u64>,
    aggregate: bool,
) -> (Ctcp, RttEstimator, Instant) {
    let gap = Duration::from_micros(500);
    for i in 0..train {
        c.on_sent(t0 + gap * i as u32, 1, i + 1);
    }
    let service = Duration::from_secs_f64(1.0 / rate);
    // Packet i leaves the bottleneck at t0 + (i+1)·service (it is faster than the sender's
    // 0.5 ms spacing only if rate < 2000/s), its ACK comes half a round trip later.
    let ack_at = |i: u64| {
        if aggregate {
            t0 + path_rtt + service * train as u32
        } else {
            t0 + path_rtt + service * (i + 1) as u32
        }
    };
    let mut in_flight = train;
    let mut pending_loss = 0;
    let mut acked = 0;
    for i in 0..train {
        if lose_every.is_some_and(|k| i % k == k - 1) {
            pending_loss += 1;
            continue;
        }
        acked += 1;
        if acked % 2 == 0 || i == train - 1 {
            let now = ack_at(i);
            let n = if acked % 2 == 0 { 2 } else { 1 };
            in_flight -= n;
            rtt.update(now, now - (t0 + gap * i as u32), Duration::ZERO);
            c.on_ack(now, n, in_flight, &rtt);
            if pending_loss > 0 {
                in_flight -= pending_loss;
                c.on_congestion_event(now, t0, pending_loss, &rtt);
                pending_loss = 0;
            }
        }
    }
    // The sender goes on sending; the first send after the ACKs went quiet ends the probe.
    let now = ack_at(train - 1) + ms(30);
    c.on_sent(now, 1, in_flight + 1);
    (c, rtt, now)
}

#[test]
fn startup_jump_lands_between_half_and_one_bdp() {
    for (rtt_ms, lose_every) in [(500, None), (600, None), (500, Some(5)), (600, Some(4))] {
        let path = ms(rtt_ms);
        // 10 Mbit/s of 1386-byte datagrams.
        let rate = 10e6 / 8.0 / 1386.0;
        let bdp = rate * path.as_secs_f64();
        let (c, _, _) = startup(32, rate, path, lose_every, false);
        let w = c.window() as f64;
        assert!(
            (0.5 * bdp..=1.0 * bdp).contains(&w),
            "rtt {rtt_ms} loss {lose_every:?}: window {w} for BDP {bdp:.0}"
        );
        assert!(c.in_slow_start(), "the jump does not end slow start");
        let r = c.startup_rate().unwrap_or(0.0);
        assert!((r - rate).abs() < 0.15 * rate, "estimate {r} vs {rate}");
    }
}

#[test]
fn startup_no_jump_without_dispersion() {
    // All ACKs of the train arrive at once: their spacing says nothing about the path.
    let (c, _, _) = startup(32, 900.0, ms(500), None, true);
    assert_eq!(c.startup_rate(), None);
    assert!(c.window() <= 64, "window {}", c.window());
    // A train too short to measure (application limited: the window does not grow).
    let (c, _, _) = startup(6, 900.0, ms(500), None, false);
    assert_eq!(c.startup_rate(), None);
    assert_eq!(c.window(), 32);
}

/// Two packets sent at `t0` on a 500 ms path, `acked` of them acknowledged one RTT later
/// (the rest still in flight): an application-limited first flight.
fn after_short_flight(acked: u64) -> (Ctcp, RttEstimator, Instant) {
    let mut c = Ctcp::new(CcConfig::default());
    let mut rtt = RttEstimator::new(ms(100));
    let t0 = base();
    c.on_sent(t0, 1, 1);
    c.on_sent(t0 + ms(1), 1, 2);
    rtt.update(t0 + ms(501), ms(500), Duration::ZERO);
    c.on_ack(t0 + ms(501), acked, 2 - acked, &rtt);
    (c, rtt, t0)
}

#[test]
fn startup_train_rearms_after_an_application_limited_flight() {
    // A proxy session: the first flights are a packet or two (OPEN, its result, a
    // request), acknowledged before the bulk reply starts from an empty pipe.
    let (c, rtt, t0) = after_short_flight(2);
    assert_eq!(c.startup_rate(), None);
    // The reply: a full first flight, dispersed by a 900 packet/s bottleneck.
    let (c, _, _) = startup_from(c, rtt, t0 + ms(1000), 32, 900.0, ms(500), None, false);
    let bdp = 900.0 * 0.5;
    let r = c.startup_rate().unwrap_or(0.0);
    assert!((r - 900.0).abs() < 0.15 * 900.0, "estimate {r}");
    let w = c.window() as f64;
    assert!((0.5 * bdp..=bdp).contains(&w), "window {w} for BDP {bdp}");
}

#[test]
fn startup_train_does_not_rearm_while_packets_are_in_flight() {
    // The short flight is still unacknowledged when the bulk data starts: its ACK would
    // be read as the train's, so no new train starts until the pipe is empty.
    let (mut c, _, t0) = after_short_flight(1);
    c.on_sent(t0 + ms(600), 1, 2);
    assert!(!c.probe.sending_train());
}

#[test]
fn startup_no_jump_on_a_short_path() {
    // 20 ms, 10 Mbit/s: the BDP (18 packets) is below the initial window: the rate is
    // measured but there is nothing to jump to (the train's own queue may end slow start).
    let (c, _, _) = startup(32, 900.0, ms(20), None, false);
    assert!(c.startup_rate().is_some());
    assert!(c.window() <= 64, "window {}", c.window());
}

#[test]
fn startup_slow_start_grows_gently_above_the_measured_bdp() {
    let rate = 900.0;
    let path = ms(500);
    let (mut c, mut rtt, mut now) = startup(32, rate, path, None, false);
    let bdp = rate * path.as_secs_f64();
    let w0 = c.window() as f64;
    assert!(w0 < bdp);
    // One loss-free round at the path RTT: up to the BDP by doubling, then a quarter of
    // the excess ACKs.
    let acked = c.window();
    for _ in 0..acked {
        now += Duration::from_secs_f64(1.0 / rate);
        rtt.update(now, path, Duration::ZERO);
        c.on_ack(now, 1, acked, &rtt);
    }
    let expect = bdp + (w0 + acked as f64 - bdp) / slow_start::CONSERVATIVE_DIVISOR;
    assert!(c.in_slow_start());
    assert!(
        (c.window() as f64 - expect).abs() <= 2.0,
        "window {} expected {expect:.0}",
        c.window()
    );
    // Without a measured BDP slow start doubles.
    assert_eq!(slow_start::grow(100.0, 100, None), 200.0);
    assert_eq!(slow_start::grow(100.0, 100, Some(140.0)), 155.0);
    assert_eq!(slow_start::grow(200.0, 100, Some(140.0)), 225.0);
}

#[test]
fn startup_train_is_paced_fast_then_normal() {
    let mut s = Sim::new(CcConfig::default());
    let srtt = ms(500);
    // Before any ACK: the first flight leaves within the train span.
    assert!((s.c.pacing_gain(srtt) - 20.0).abs() < 1e-9);
    assert_eq!(
        s.c.pacing_gain(ms(20)),
        crate::pacer::SLOW_START_GAIN,
        "never below the slow-start gain"
    );
    s.round(ms(100), 0.0);
    assert_eq!(s.c.pacing_gain(srtt), crate::pacer::SLOW_START_GAIN);
    let mut s = Sim::into_growth(ms(100));
    s.round(ms(100), 0.0);
    assert_eq!(
        s.c.pacing_gain(srtt),
        crate::pacer::CONGESTION_AVOIDANCE_GAIN
    );
}

#[test]
fn startup_jump_round_is_paced_at_the_measured_rate() {
    let rate = 900.0;
    let (c, _, _) = startup(32, rate, ms(500), None, false);
    let srtt = ms(500);
    // gain × window / srtt = the measured rate.
    let paced = c.pacing_gain(srtt) * c.window() as f64 / srtt.as_secs_f64();
    let measured = c.startup_rate().unwrap_or(0.0);
    assert!(
        (paced - measured).abs() < 0.02 * measured,
        "{paced} vs {measured}"
    );
}

#[test]
fn startup_train_loss_is_not_congestion() {
    // The train queues behind itself (RTT 100 → 175 ms on a 100 ms path), and one of its
    // packets is lost: srtt passes the CTCP gate, but the queue was the probe's own.
    let mut c = Ctcp::new(CcConfig::default());
    let mut rtt = RttEstimator::new(ms(100));
    let t0 = base();
    for i in 0..32u32 {
        c.on_sent(t0 + Duration::from_micros(500) * i, 1, u64::from(i) + 1);
    }
    for i in 0..16u32 {
        let now = t0 + ms(100) + ms(1) * i;
        rtt.update(now, ms(100) + ms(5 * u64::from(i)), Duration::ZERO);
        c.on_ack(now, 2, u64::from(32 - 2 * i), &rtt);
    }
    assert!(backoff::queueing(&rtt));
    c.on_congestion_event(t0 + ms(116), t0 + ms(10), 1, &rtt);
    assert_eq!(c.backoffs(), 0);
    // A loss of a packet sent after the train, with the same queue, is congestion.
    c.on_congestion_event(t0 + ms(117), t0 + ms(105), 1, &rtt);
    assert_eq!(c.backoffs(), 1);
}

#[test]
fn a_gated_backoff_marks_its_round_as_congestion_loss_and_random_loss_does_not() {
    // Random loss on an empty queue: no backoff, so nothing is put down to congestion.
    let mut s = Sim::into_growth(ms(100));
    s.round(ms(100), 0.2);
    assert_eq!(s.c.congestion_span(), None);
    // Loss with the queue at twice the path delay: the backoff claims the round that
    // overflowed (sent about one srtt ago) and what is sent while the cut drains it.
    let mut s = Sim::into_growth(ms(200));
    let sent = s.now - ms(190);
    s.c.on_congestion_event(s.now, sent, 3, &s.rtt);
    let (from, to) =
        s.c.congestion_span()
            .expect("a gated backoff sets the span");
    assert!(from <= sent && sent <= to, "the triggering send is inside");
    assert!(to > s.now, "sends during the drain are inside");
    assert!(
        s.now.duration_since(from) <= ms(400),
        "the span reaches back about one and a half srtt, not the whole history"
    );
}

/// A controller given a handshake path estimate of `rate` packets/s at a 500 ms RTT.
fn with_path_estimate(rate: f64) -> (Ctcp, RttEstimator, Instant) {
    let mut c = Ctcp::new(CcConfig::default());
    let mut rtt = RttEstimator::new(ms(100));
    let t0 = base();
    rtt.update(t0, ms(500), Duration::ZERO);
    c.on_path_estimate(t0, rate, true, &rtt);
    (c, rtt, t0)
}

#[test]
fn a_path_estimate_jumps_to_the_bdp_and_skips_the_probe() {
    let (c, rtt, _) = with_path_estimate(860.0);
    let bdp = 860.0 * 0.5;
    let w = c.window() as f64;
    assert!(
        (0.95 * bdp..=1.05 * bdp).contains(&w),
        "window {w}, BDP {bdp}"
    );
    assert!(c.in_slow_start());
    // The first round is paced at the measured rate, not as a train.
    let gain = c.pacing_gain(rtt.srtt());
    let rate = gain * w / rtt.srtt().as_secs_f64();
    assert!((rate - 860.0).abs() < 1.0, "paced at {rate} packets/s");
}

#[test]
fn each_flight_from_idle_in_slow_start_is_paced_at_the_path_rate() {
    let (mut c, mut rtt, t0) = with_path_estimate(860.0);
    // A small reply goes out; its ACK comes back after the paced round is over.
    c.on_sent(t0 + ms(10), 1, 1);
    rtt.update(t0 + ms(510), ms(500), Duration::ZERO);
    c.on_ack(t0 + ms(510), 1, 0, &rtt);
    c.on_ack(t0 + ms(900), 0, 0, &rtt);
    let idle_gain = c.pacing_gain(rtt.srtt());
    // The bulk flight starts from idle a round trip later: paced at the rate again.
    c.on_sent(t0 + ms(1000), 1, 1);
    let w = c.window() as f64;
    let rate = c.pacing_gain(rtt.srtt()) * w / rtt.srtt().as_secs_f64();
    assert!((rate - 860.0).abs() < 1.0, "paced at {rate} packets/s");
    assert!(
        idle_gain > c.pacing_gain(rtt.srtt()),
        "without the round: slow-start gain"
    );
}

#[test]
fn a_stale_path_estimate_falls_back_to_the_initial_window_and_a_probe() {
    let (mut c, _, t0) = with_path_estimate(860.0);
    assert!(c.window() > CcConfig::default().initial_window);
    c.on_sent(t0 + PATH_ESTIMATE_TTL + ms(1), 1, 1);
    assert_eq!(c.window(), CcConfig::default().initial_window);
    assert!(c.probe.sending_train(), "the flight is a probe train again");
}

#[test]
fn a_stale_estimate_keeps_a_window_for_the_flights_the_flow_has_been_sending() {
    // An application-limited flow (a DNS gateway) sent bursts of 40 packets under the
    // estimate's window; after the estimate went stale, its next burst from idle still
    // fits the window, while a probe train starts again.
    let (mut c, _, t0) = with_path_estimate(860.0);
    c.on_sent(t0 + ms(10), 40, 40);
    c.on_sent(t0 + PATH_ESTIMATE_TTL + ms(1), 1, 1);
    assert_eq!(c.window(), 40);
    assert!(c.probe.sending_train());
}

#[test]
fn jitter_beyond_packet_times_lifts_beta() {
    // Samples alternating 220/230 ms (jitter 10 ms) over a 180 ms minimum.
    let t = base();
    let mut rtt = RttEstimator::new(ms(200));
    rtt.update(t, ms(180), Duration::ZERO);
    for i in 1..400u64 {
        rtt.update(t + ms(i), ms(220 + 10 * (i % 2)), Duration::ZERO);
    }
    let plain = backoff::beta(rtt.min_rtt(), rtt.round_min());
    // At 1 ms per packet the noise is 3 × (10 − 2) ms, capped at 180/8 = 22.5 ms.
    let lifted = backoff::beta_now(&rtt, ms(1));
    let expect = (180.0 + 22.5) / 220.0;
    assert!((lifted - expect).abs() < 0.01, "{lifted} vs {expect}");
    assert!(lifted > plain + 0.1);
    // Variation within two packet times is a queue's own movement: no lift.
    assert_eq!(backoff::beta_now(&rtt, ms(5)), plain);
}

#[test]
fn a_shrinking_share_aims_lower_after_the_next_cut() {
    // Cubic's fast convergence: a cut at a window below the last cut's w_max sets w_max to
    // 0.85 of the window, so growth leaves room for a newcomer; a cut above it does not.
    let mut s = Sim::into_growth(ms(100));
    s.c.cwnd = 200.0;
    let noisy = s.c.noisy(&s.rtt);
    s.c.cut(s.now, &s.rtt, noisy);
    assert_eq!(s.c.w_max, Some(200.0));
    s.c.cwnd = 150.0;
    let noisy = s.c.noisy(&s.rtt);
    s.c.cut(s.now, &s.rtt, noisy);
    assert_eq!(
        s.c.w_max,
        Some(150.0 * (1.0 + crate::cc::cubic::BETA) / 2.0)
    );
    s.c.cwnd = 300.0;
    let noisy = s.c.noisy(&s.rtt);
    s.c.cut(s.now, &s.rtt, noisy);
    assert_eq!(s.c.w_max, Some(300.0));
}

#[test]
fn f_slow_start_resumes_when_the_delay_rise_was_noise() {
    let mut s = Sim::new(CcConfig::default());
    for _ in 0..3 {
        s.round(ms(100), 0.0);
    }
    for _ in 0..2 {
        s.round(ms(115), 0.0);
    }
    assert!(!s.c.in_slow_start(), "delay rise ends slow start");
    // The next round's minimum is back at the path's delay: the rise was not a queue.
    s.round(ms(100), 0.0);
    s.round(ms(100), 0.0);
    assert!(
        s.c.in_slow_start(),
        "a round under the threshold resumes slow start"
    );
    let before = s.c.window();
    s.round(ms(100), 0.0);
    assert!(s.c.window() >= before * 2 - 1, "doubling again");
}

#[test]
fn f_a_standing_queue_keeps_the_delay_exit() {
    let mut s = Sim::new(CcConfig::default());
    for _ in 0..3 {
        s.round(ms(100), 0.0);
    }
    for _ in 0..2 {
        s.round(ms(115), 0.0);
    }
    assert!(!s.c.in_slow_start());
    // The queue stands through the resume rounds: the exit holds, and once they are over
    // a round at the path's delay (the queue drained by growth's own pacing) no longer
    // brings slow start back.
    for _ in 0..=slow_start::RESUME_ROUNDS {
        s.round(ms(115), 0.0);
        assert!(!s.c.in_slow_start());
    }
    s.round(ms(100), 0.0);
    s.round(ms(100), 0.0);
    assert!(!s.c.in_slow_start());
}

#[test]
fn on_a_noisy_path_the_cubic_curve_starts_at_the_window_the_cut_left() {
    let srtt = ms(500);
    let fixed = growth::CubicBound {
        w_max: 400.0,
        srtt,
        from: None,
    };
    let from = growth::CubicBound {
        from: Some(340.0),
        ..fixed
    };
    // RFC 9438: K = ∛((W_max − cwnd_epoch)/C), so W(0) is the window the cut left.
    assert!((from.k() - (60.0f64 / crate::cc::cubic::C).cbrt()).abs() < 1e-9);
    assert!((from.window(Duration::ZERO) - 340.0).abs() < 1e-6);
    assert!((fixed.window(Duration::ZERO) - 400.0 * crate::cc::cubic::BETA).abs() < 1e-6);
    assert!(from.window(ms(3000)) > fixed.window(ms(3000)));
    // A cut deeper than Cubic's β keeps the fixed-β K: the curve never starts later.
    let deep = growth::CubicBound {
        from: Some(200.0),
        ..fixed
    };
    assert!((deep.k() - fixed.k()).abs() < 1e-9);
}

#[test]
fn a_drain_on_a_noisy_path_leaves_the_cubic_curve_as_it_was() {
    // FIFO-like jitter on a 100 ms path whose window holds what it delivers: samples
    // alternate 250/260 ms while the window is acknowledged over 255 ms, so the path reads
    // noisy and the drain is confirmed. A gated loss sets the curve (a β clamped at its
    // floor, which does not stand in for the drain); the drain that comes due later must
    // not restart it.
    let mut s = Sim::into_growth(ms(100));
    let jittered = |b: u32| {
        if b.is_multiple_of(2) {
            ms(250)
        } else {
            ms(260)
        }
    };
    for _ in 0..20 {
        s.round_sampled(ms(255), 0.0, jittered);
    }
    assert!(s.c.noisy(&s.rtt), "the path reads noisy");
    s.c.on_congestion_event(s.now, s.now - ms(255), 1, &s.rtt);
    assert_eq!(s.c.backoffs(), 1);
    let curve = (s.c.w_max, s.c.epoch, s.c.bound_from);
    assert!(
        curve.2.is_some(),
        "a noisy cut starts the curve at the window it left"
    );
    for _ in 0..100 {
        s.round_sampled(ms(255), 0.0, jittered);
        if s.c.drains() > 0 {
            break;
        }
    }
    assert_eq!(s.c.drains(), 1, "the drain came due");
    assert_eq!((s.c.w_max, s.c.epoch, s.c.bound_from), curve);
}

/// FIFO-like jitter that holds every sample `lo`–`hi` ms above a 100 ms path minimum.
fn alternating(lo: u64, hi: u64) -> impl Fn(u32) -> Duration {
    move |b: u32| if b.is_multiple_of(2) { ms(lo) } else { ms(hi) }
}

/// Growth on a 100 ms path whose samples then alternate 150/170 ms over 160 ms rounds: a
/// rise the gate reads as a queue, not clear of twice the noise, and a window that
/// delivers what it holds (Little's law), so the delivery rate confirms it and a loss cuts.
fn into_noisy_growth() -> Sim {
    let mut s = Sim::into_growth(ms(100));
    for _ in 0..20 {
        s.round_sampled(ms(160), 0.0, alternating(150, 170));
    }
    s
}

#[test]
fn on_a_noisy_path_a_cut_on_ambiguous_delay_is_refilled_within_a_few_rounds() {
    let mut s = into_noisy_growth();
    let jitter = alternating(150, 170);
    assert!(s.c.noisy(&s.rtt), "the path reads noisy");
    assert!(backoff::queueing(&s.rtt) && !backoff::clear_queue(&s.rtt));
    let before = s.c.window();
    s.c.on_congestion_event(s.now, s.now - ms(160), 1, &s.rtt);
    assert_eq!(s.c.backoffs(), 1);
    assert!(
        s.c.window() * 10 < before * 9,
        "{} of {before}",
        s.c.window()
    );
    for _ in 0..3 {
        s.round_sampled(ms(160), 0.0, &jitter);
    }
    assert!(
        s.c.window() >= before,
        "refilled to the rate it delivered: {} of {before}",
        s.c.window()
    );
}

#[test]
fn after_a_cut_on_a_clear_queue_there_is_no_refill() {
    // As above, but the cut meets a queue far clear of the noise (260 ms over 100): a
    // competitor's. The window must stay where the cut left it (plus growth) even once the
    // delay falls back to the ambiguous band.
    let mut s = into_noisy_growth();
    let jitter = alternating(150, 170);
    for _ in 0..2 {
        s.round_sampled(ms(260), 0.0, alternating(250, 270));
    }
    assert!(backoff::clear_queue(&s.rtt));
    let before = s.c.window();
    s.c.on_congestion_event(s.now, s.now - ms(260), 1, &s.rtt);
    assert_eq!(s.c.backoffs(), 1);
    for _ in 0..4 {
        s.round_sampled(ms(160), 0.0, &jitter);
    }
    assert!(!backoff::clear_queue(&s.rtt), "back in the ambiguous band");
    assert!(
        s.c.window() * 20 < before * 19,
        "no refill: {} of {before}",
        s.c.window()
    );
}
