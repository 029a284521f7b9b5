//! Pacing: a token bucket in bytes that spreads a window over the round trip.
//!
//! Rate = `gain × window × mtu / srtt`. The gain is above 1 so pacing never holds the sender
//! below its window: 2.0 in slow start (the window doubles per round trip, the rate must
//! keep up) and 1.25 afterwards (as BBR/Linux `tcp_pacing_ca_ratio`). The bucket holds a
//! few datagrams (`clamp(window/8, 2, 10)`), so a sender that went quiet may send a short
//! burst, never a whole window; or one timer tick (1 ms) of the rate, up to 64 datagrams,
//! if that is more (a whole window only where the round trip is within a tick). Why the
//! tick: a runtime cannot sleep shorter than its tick, so a smaller bucket on a fast path
//! releases a few datagrams per wake-up (a GSO send and a wake-up each; evidence:
//! docs/experiments/code-evidence.md#moved-figures). At a pacing rate below 2 datagrams
//! per millisecond (23 Mbit/s of 1,452-byte datagrams) the tick never decides.

use std::time::{Duration, Instant};

/// Pacing gain for slow start.
pub(crate) const SLOW_START_GAIN: f64 = 2.0;
/// Pacing gain after slow start.
pub(crate) const CONGESTION_AVOIDANCE_GAIN: f64 = 1.25;
/// Fewest datagrams the bucket holds.
const MIN_BURST: u64 = 2;
/// Most datagrams the bucket holds by the window rule.
const MAX_BURST: u64 = 10;
/// The driver's timer granularity: a runtime sleeps at least about this long (tokio's
/// timer wheel ticks in milliseconds), so a bucket smaller than one tick of the rate would
/// cap a fast path at one bucket per tick, and it would only reach its rate by being
/// woken for other reasons (ACKs, stream writes), a few datagrams per wake-up.
const TIMER_TICK: Duration = Duration::from_millis(1);
/// Most datagrams the bucket holds by the tick rule: two GSO batches of 32.
const MAX_TICK_BURST: u64 = 64;

/// Token-bucket pacer (see the module docs). Call [`Pacer::delay`] before sending a
/// datagram and [`Pacer::on_sent`] after.
#[derive(Debug, Clone)]
pub(crate) struct Pacer {
    /// Available tokens in bytes (fractional: refills are rate × elapsed time).
    tokens: f64,
    /// Bucket size at the last refill, in bytes.
    capacity: f64,
    /// Bytes per second at the last refill.
    rate: f64,
    last: Option<Instant>,
    gain: f64,
}

impl Pacer {
    /// A pacer whose bucket starts full (`MIN_BURST`..`MAX_BURST` datagrams of `mtu`), with
    /// gain [`SLOW_START_GAIN`] until [`Pacer::set_gain`] says otherwise (the safe default:
    /// a lower gain would cap slow start's growth).
    pub(crate) fn new(mtu: usize) -> Self {
        let capacity = (MAX_BURST * mtu.max(1) as u64) as f64;
        Pacer {
            tokens: capacity,
            capacity,
            rate: 0.0,
            last: None,
            gain: SLOW_START_GAIN,
        }
    }

    /// Sets the pacing gain, e.g. [`SLOW_START_GAIN`] or [`CONGESTION_AVOIDANCE_GAIN`] by the
    /// controller's phase. Values below 1 are raised to 1 (pacing must not undercut the
    /// window).
    pub(crate) fn set_gain(&mut self, gain: f64) {
        self.gain = if gain.is_finite() {
            gain.max(1.0)
        } else {
            SLOW_START_GAIN
        };
    }

    /// The rate the last [`Pacer::delay`] computed, in bytes per second (0 before it).
    pub(crate) fn rate(&self) -> f64 {
        self.rate
    }

    /// Current pacing gain.
    #[cfg(test)]
    pub(crate) fn gain(&self) -> f64 {
        self.gain
    }

    /// When the next datagram of `mtu` bytes may leave: `None` if now, else the instant the
    /// bucket will hold enough tokens. A zero `srtt` disables pacing (no rate is known); a
    /// zero window counts as one packet, so the answer is always finite.
    pub(crate) fn delay(
        &mut self,
        now: Instant,
        window_packets: u64,
        srtt: Duration,
        mtu: usize,
    ) -> Option<Instant> {
        let mtu = mtu.max(1) as f64;
        if srtt.is_zero() {
            return None;
        }
        let window = window_packets.max(1);
        self.rate = self.gain * window as f64 * mtu / srtt.as_secs_f64();
        let by_window = (window / 8).clamp(MIN_BURST, MAX_BURST) as f64 * mtu;
        let by_tick = (self.rate * TIMER_TICK.as_secs_f64()).min(MAX_TICK_BURST as f64 * mtu);
        // At 10 Mbit/s (the simulator's and netbench's links) a tick holds about one
        // datagram: the window rule decides there.
        self.capacity = by_window.max(by_tick);
        self.refill(now);
        if self.tokens >= mtu {
            return None;
        }
        let wait = Duration::from_secs_f64((mtu - self.tokens) / self.rate);
        Some(now + wait.max(Duration::from_nanos(1)))
    }

    /// `bytes` left at `now`: take them from the bucket (it may go negative by less than one
    /// datagram only if the caller ignores [`Pacer::delay`]; the debt is repaid first).
    pub(crate) fn on_sent(&mut self, now: Instant, bytes: usize) {
        self.refill(now);
        self.tokens -= bytes as f64;
        // Never carry more than one bucket of debt: a caller that ignores pacing (e.g. a
        // handshake or an ACK-only datagram) does not stall later data for long.
        self.tokens = self.tokens.max(-self.capacity);
    }

    fn refill(&mut self, now: Instant) {
        if let Some(last) = self.last {
            let elapsed = now.saturating_duration_since(last).as_secs_f64();
            self.tokens += elapsed * self.rate;
        }
        self.tokens = self.tokens.clamp(-self.capacity, self.capacity);
        if self.last.is_none_or(|l| now > l) {
            self.last = Some(now);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_clock::base;

    const MTU: usize = 1200;

    /// Sends as fast as the pacer allows from `start` for `span`; returns datagrams sent.
    fn drive(p: &mut Pacer, start: Instant, span: Duration, window: u64, srtt: Duration) -> u64 {
        let mut now = start;
        let mut sent = 0;
        while now < start + span {
            match p.delay(now, window, srtt, MTU) {
                None => {
                    p.on_sent(now, MTU);
                    sent += 1;
                }
                Some(t) => {
                    assert!(t > now);
                    now = t;
                }
            }
        }
        sent
    }

    #[test]
    fn initial_burst_then_paced() {
        let t = base();
        let mut p = Pacer::new(MTU);
        p.set_gain(1.0);
        // window 80 → burst 10 datagrams; rate 80 × 1200 B / 100 ms.
        let mut burst = 0;
        while p.delay(t, 80, Duration::from_millis(100), MTU).is_none() {
            p.on_sent(t, MTU);
            burst += 1;
        }
        assert_eq!(burst, 10);
        let next = p.delay(t, 80, Duration::from_millis(100), MTU);
        let gap = next.map(|n| n - t);
        // One datagram every 100 ms / 80 = 1.25 ms.
        assert!(
            gap.is_some_and(|g| g > Duration::from_micros(1240) && g < Duration::from_micros(1260)),
            "{gap:?}"
        );
    }

    #[test]
    fn average_rate_matches_gain_window_over_srtt() {
        let t = base();
        for gain in [CONGESTION_AVOIDANCE_GAIN, SLOW_START_GAIN] {
            let mut p = Pacer::new(MTU);
            p.set_gain(gain);
            let sent = drive(
                &mut p,
                t,
                Duration::from_secs(1),
                100,
                Duration::from_millis(200),
            );
            // gain × 100 packets per 200 ms over 1 s, plus the initial burst.
            let expect = gain * 500.0 + 10.0;
            assert!(
                (sent as f64 - expect).abs() <= 2.0,
                "gain {gain}: {sent} vs {expect}"
            );
        }
    }

    #[test]
    fn burst_capacity_scales_with_window() {
        let t = base();
        let mut p = Pacer::new(MTU);
        let srtt = Duration::from_millis(100);
        // Small window: 2 datagrams of burst.
        assert!(p.delay(t, 4, srtt, MTU).is_none());
        let mut n = 0;
        while p.delay(t, 4, srtt, MTU).is_none() {
            p.on_sent(t, MTU);
            n += 1;
        }
        assert_eq!(n, 2);
        // After a long idle the bucket refills to window/8 = 5 datagrams only.
        let later = t + Duration::from_secs(10);
        let mut n = 0;
        while p.delay(later, 40, srtt, MTU).is_none() {
            p.on_sent(later, MTU);
            n += 1;
        }
        assert_eq!(n, 5);
    }

    #[test]
    fn a_fast_path_bucket_holds_one_timer_tick_of_the_rate() {
        let t = base();
        let drain = |p: &mut Pacer, now: Instant, window: u64, srtt: Duration| {
            let mut n = 0;
            while p.delay(now, window, srtt, MTU).is_none() {
                p.on_sent(now, MTU);
                n += 1;
            }
            n
        };
        // 40 packets per ms at gain 1: the window rule's 5 would cap it at 5 per tick.
        let mut p = Pacer::new(MTU);
        p.set_gain(1.0);
        let ms = Duration::from_millis(1);
        drain(&mut p, t, 40, ms);
        assert_eq!(drain(&mut p, t + Duration::from_secs(1), 40, ms), 40);
        // 800 packets per ms: one tick's worth is capped at 64.
        assert_eq!(drain(&mut p, t + Duration::from_secs(2), 800, ms), 64);
        // 80 packets per 100 ms: under one per tick, the window rule's 10 decides.
        let srtt = Duration::from_millis(100);
        assert_eq!(drain(&mut p, t + Duration::from_secs(3), 80, srtt), 10);
    }

    #[test]
    fn degenerate_inputs_never_stall() {
        let t = base();
        let mut p = Pacer::new(MTU);
        for _ in 0..100 {
            p.on_sent(t, MTU);
        }
        // Zero srtt: no pacing.
        assert_eq!(p.delay(t, 10, Duration::ZERO, MTU), None);
        // Zero window: treated as one packet per srtt, a finite wait.
        let d = p.delay(t, 0, Duration::from_millis(100), MTU);
        assert!(
            d.is_some_and(|d| d <= t + Duration::from_millis(300)),
            "{d:?}"
        );
        // Debt is bounded by one bucket even if pacing was ignored.
        let d = p.delay(t, 1000, Duration::from_millis(100), MTU);
        assert!(
            d.is_some_and(|d| d <= t + Duration::from_millis(2)),
            "{d:?}"
        );
    }

    #[test]
    fn gain_below_one_is_raised() {
        let mut p = Pacer::new(MTU);
        p.set_gain(0.5);
        assert_eq!(p.gain(), 1.0);
        p.set_gain(f64::NAN);
        assert_eq!(p.gain(), SLOW_START_GAIN);
    }
}
