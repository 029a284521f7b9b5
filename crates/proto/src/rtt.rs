//! Round-trip time estimation.
//!
//! [`RttEstimator`] keeps the RFC 9002 smoothed RTT and variance (used for timers and
//! pacing), a *windowed* minimum RTT (the propagation delay, used by CTCP's backoff
//! `β = RTT_min/RTT`; windowed so that a lasting route change does not lock in a stale
//! minimum, as in BBR) and the minimum over the last round trip (CTCP's "current-RTT
//! minimum", which shows a standing queue without being fooled by a single late sample).
//!
//! Both minima use Kathleen Nichols' windowed filter (three samples, O(1) per update, as
//! in Linux `lib/win_minmax.c`), so feeding one sample per ACK costs a few comparisons.

use std::time::{Duration, Instant};

/// Default length of the window over which [`RttEstimator::min_rtt`] is the minimum (as BBR).
pub(crate) const DEFAULT_MIN_RTT_WINDOW: Duration = Duration::from_secs(10);

/// Length of [`RttEstimator::floor_rtt`]'s window in min-RTT windows: long enough to
/// outlast a standing queue's drift of the min-RTT filter (a competing Cubic flow can keep
/// a queue standing for several min-RTT windows), short enough that a route onto a longer
/// path is believed within a minute (evidence:
/// docs/experiments/code-evidence.md#floor-windows).
pub(crate) const FLOOR_WINDOWS: u32 = 6;

/// Weight of [`RttEstimator::jitter`]'s moving average: the mean over about this many
/// samples.
const JITTER_GAIN: u32 = 16;

/// Lower bound on the variance term of the probe timeout (RFC 9002 `kGranularity`).
const GRANULARITY: Duration = Duration::from_millis(1);

#[derive(Debug, Clone, Copy)]
struct Sample {
    time: Instant,
    value: Duration,
}

/// Kathleen Nichols' windowed minimum: the best, second-best and third-best samples of
/// successive sub-windows. Returns the minimum of (roughly) the last `win`.
#[derive(Debug, Clone, Default)]
struct WindowedMin {
    s: Option<[Sample; 3]>,
}

impl WindowedMin {
    fn get(&self) -> Option<Duration> {
        self.s.map(|s| s[0].value)
    }

    fn time(&self) -> Option<Instant> {
        self.s.map(|s| s[0].time)
    }

    fn update(&mut self, win: Duration, time: Instant, value: Duration) {
        let val = Sample { time, value };
        let Some(s) = self.s.as_mut() else {
            self.s = Some([val; 3]);
            return;
        };
        // A new minimum, or nothing left in the window: restart from this sample.
        if value <= s[0].value || time.saturating_duration_since(s[2].time) > win {
            *s = [val; 3];
            return;
        }
        if value <= s[1].value {
            s[1] = val;
            s[2] = val;
        } else if value <= s[2].value {
            s[2] = val;
        }
        // Age the sub-window samples.
        let dt = time.saturating_duration_since(s[0].time);
        if dt > win {
            s[0] = s[1];
            s[1] = s[2];
            s[2] = val;
            if time.saturating_duration_since(s[0].time) > win {
                s[0] = s[1];
                s[1] = s[2];
                s[2] = val;
            }
        } else if s[1].time == s[0].time && dt > win / 4 {
            s[1] = val;
            s[2] = val;
        } else if s[2].time == s[1].time && dt > win / 2 {
            s[2] = val;
        }
    }
}

/// RTT estimator: RFC 9002 smoothing plus the windowed minima CTCP's congestion control
/// needs. All time comes in as arguments (sans-IO).
#[derive(Debug, Clone)]
pub(crate) struct RttEstimator {
    initial: Duration,
    latest: Duration,
    smoothed: Duration,
    var: Duration,
    has_samples: bool,
    min_window: Duration,
    min_filter: WindowedMin,
    floor_filter: WindowedMin,
    round_filter: WindowedMin,
    /// Minimum over about the last two smoothed RTTs (see [`Self::two_round_min`]).
    two_round_filter: WindowedMin,
    jitter: Duration,
    /// As `jitter`, but the plain mean until [`JITTER_GAIN`] differences are in.
    early_jitter: Duration,
    /// Sample-to-sample differences seen so far (counted up to [`JITTER_GAIN`]).
    jitter_samples: u32,
}

impl RttEstimator {
    /// Creates an estimator that reports `initial_rtt` (and half of it as variance) until
    /// the first sample arrives, with the default 10 s min-RTT window.
    pub(crate) fn new(initial_rtt: Duration) -> Self {
        RttEstimator {
            initial: initial_rtt,
            latest: initial_rtt,
            smoothed: initial_rtt,
            var: initial_rtt / 2,
            has_samples: false,
            min_window: DEFAULT_MIN_RTT_WINDOW,
            min_filter: WindowedMin::default(),
            floor_filter: WindowedMin::default(),
            round_filter: WindowedMin::default(),
            two_round_filter: WindowedMin::default(),
            jitter: Duration::ZERO,
            early_jitter: Duration::ZERO,
            jitter_samples: 0,
        }
    }

    /// Sets the window of [`Self::min_rtt`]: longer is steadier, shorter follows route
    /// changes sooner. Zero is raised to 1 ms.
    #[must_use]
    #[cfg(test)]
    pub(crate) fn with_min_rtt_window(mut self, window: Duration) -> Self {
        self.min_window = window.max(Duration::from_millis(1));
        self
    }

    /// Window over which [`Self::min_rtt`] is a minimum.
    pub(crate) fn min_rtt_window(&self) -> Duration {
        self.min_window
    }

    /// Feeds one RTT sample taken at `now`; `ack_delay` is the time the peer held the ACK.
    ///
    /// The minima see the raw sample (as RFC 9002's `min_rtt`, so a misreported delay
    /// cannot pull them below the path's true RTT); the smoothed RTT sees the sample minus
    /// `ack_delay` when that still leaves it at or above the minimum.
    pub(crate) fn update(&mut self, now: Instant, sample: Duration, ack_delay: Duration) {
        if self.has_samples {
            let step = sample.abs_diff(self.latest);
            self.jitter = (self.jitter * (JITTER_GAIN - 1) + step) / JITTER_GAIN;
            self.jitter_samples = (self.jitter_samples + 1).min(JITTER_GAIN);
            let n = self.jitter_samples;
            self.early_jitter = (self.early_jitter * (n - 1) + step) / n;
        }
        self.latest = sample;
        self.min_filter.update(self.min_window, now, sample);
        self.floor_filter
            .update(self.min_window * FLOOR_WINDOWS, now, sample);
        let min = self.min_filter.get().unwrap_or(sample);
        if !self.has_samples {
            self.has_samples = true;
            self.smoothed = sample;
            self.var = sample / 2;
        } else {
            let adjusted = match sample.checked_sub(ack_delay) {
                Some(a) if a >= min => a,
                _ => sample,
            };
            let dev = self.smoothed.abs_diff(adjusted);
            self.var = (self.var * 3 + dev) / 4;
            self.smoothed = (self.smoothed * 7 + adjusted) / 8;
        }
        self.round_filter
            .update(self.smoothed.max(Duration::from_micros(1)), now, sample);
        self.two_round_filter.update(
            (self.smoothed * 2).max(Duration::from_micros(1)),
            now,
            sample,
        );
    }

    /// Minimum RTT sample within (about) the last two smoothed RTTs: above
    /// [`Self::min_rtt`] it means a queue that stood for two rounds. Why two: FIFO jitter
    /// moves the samples slowly, so one round's minimum can sit a round's worth of noise
    /// above the path's minimum with no queue at all, and a random loss then read as
    /// congestion (docs/experiments/jitter.md, "Sustained queue").
    pub(crate) fn two_round_min(&self) -> Duration {
        self.two_round_filter.get().unwrap_or(self.initial)
    }

    /// Smoothed RTT (RFC 9002); the initial RTT before the first sample.
    pub(crate) fn srtt(&self) -> Duration {
        self.smoothed
    }

    /// RTT variance (RFC 9002 `rttvar`).
    pub(crate) fn rttvar(&self) -> Duration {
        self.var
    }

    /// The most recent raw sample; the initial RTT before the first sample.
    pub(crate) fn latest(&self) -> Duration {
        self.latest
    }

    /// Minimum RTT over the last [`Self::min_rtt_window`] (default 10 s): the estimated
    /// propagation delay. The initial RTT before the first sample.
    pub(crate) fn min_rtt(&self) -> Duration {
        self.min_filter.get().unwrap_or(self.initial)
    }

    /// Minimum RTT over [`FLOOR_WINDOWS`] min-RTT windows (60 s by default): the path's
    /// delay as it was before any queue that has stood for a whole min-RTT window. Why:
    /// when a competing loss-based flow keeps the bottleneck queue from emptying,
    /// [`Self::min_rtt`] rises to the standing level, and a congestion gate judged
    /// against it alone reads a full queue as an empty one (see the CTCP controller's
    /// backoff gate). The initial RTT before the first sample.
    pub(crate) fn floor_rtt(&self) -> Duration {
        self.floor_filter.get().unwrap_or(self.initial)
    }

    /// Time since the sample that [`Self::min_rtt`] reports was taken (zero before any):
    /// when it nears [`Self::min_rtt_window`] the minimum is about to expire, and a sender
    /// that keeps a standing queue should drain it so the true minimum is seen again.
    pub(crate) fn min_rtt_age(&self, now: Instant) -> Duration {
        self.min_filter
            .time()
            .map_or(Duration::ZERO, |t| now.saturating_duration_since(t))
    }

    /// Minimum RTT sample within (about) the last smoothed RTT: CTCP's "current-RTT
    /// minimum". Above [`Self::min_rtt`] it means a standing queue, not a one-off spike.
    pub(crate) fn round_min(&self) -> Duration {
        self.round_filter.get().unwrap_or(self.initial)
    }

    /// Delay noise: the moving average of the difference between consecutive RTT samples.
    /// A queue moves the RTT by about a packet time per sample; jitter (radio scheduling,
    /// route flaps, a jittery emulator) by a fraction of its spread, so thresholds that tell
    /// a queue by the RTT's rise above its minimum must add a multiple of this.
    /// Starts from zero, so a step in the first samples (a queue forming) is not taken
    /// for noise.
    pub(crate) fn jitter(&self) -> Duration {
        self.jitter
    }

    /// [`Self::jitter`] measured from the first samples on: their plain mean until 16
    /// differences are in, then the same moving average. Why: started at zero, the average
    /// understates the jitter slow start judges its first rounds against, and the exit
    /// fires on noise; a one-off step weighs as much here, so only slow start's exits use
    /// it (evidence: docs/experiments/jitter.md, "Second pass").
    pub(crate) fn early_jitter(&self) -> Duration {
        self.early_jitter
    }

    /// Probe timeout: `srtt + max(4·rttvar, 1 ms) + max_ack_delay` (RFC 9002 §6.2.1).
    pub(crate) fn pto(&self, max_ack_delay: Duration) -> Duration {
        self.smoothed + (self.var * 4).max(GRANULARITY) + max_ack_delay
    }

    /// Whether at least one sample has been fed.
    pub(crate) fn has_samples(&self) -> bool {
        self.has_samples
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_clock::{base, ms};

    #[test]
    fn initial_values_before_samples() {
        let r = RttEstimator::new(ms(100));
        assert!(!r.has_samples());
        assert_eq!(r.srtt(), ms(100));
        assert_eq!(r.rttvar(), ms(50));
        assert_eq!(r.min_rtt(), ms(100));
        assert_eq!(r.round_min(), ms(100));
        assert_eq!(r.pto(ms(5)), ms(100 + 200 + 5));
    }

    #[test]
    fn jitter_is_measured_from_the_first_samples() {
        // Samples alternating 40 ms apart: after a handful the early estimate is 40 ms, not
        // the fraction the moving average started at zero shows (12 ms after five).
        let t = base();
        let mut r = RttEstimator::new(ms(500));
        for i in 0..6 {
            r.update(t + ms(i), ms(480 + 40 * (i % 2)), ms(0));
        }
        assert_eq!(r.early_jitter(), ms(40));
        assert!(r.jitter() < ms(15));
    }

    #[test]
    fn first_sample_sets_srtt_and_var() {
        let t = base();
        let mut r = RttEstimator::new(ms(333));
        r.update(t, ms(80), ms(0));
        assert!(r.has_samples());
        assert_eq!(r.srtt(), ms(80));
        assert_eq!(r.rttvar(), ms(40));
        assert_eq!(r.latest(), ms(80));
        assert_eq!(r.min_rtt(), ms(80));
    }

    #[test]
    fn rfc9002_smoothing_and_ack_delay() {
        let t = base();
        let mut r = RttEstimator::new(ms(100));
        r.update(t, ms(100), ms(0));
        // 120 - 10 = 110 >= min 100: subtracted. srtt = (7*100 + 110)/8, var = (3*50 + 10)/4.
        r.update(t + ms(100), ms(120), ms(10));
        assert_eq!(r.srtt(), Duration::from_micros(101_250));
        assert_eq!(r.rttvar(), ms(40));
        assert_eq!(r.latest(), ms(120));
        // 104 - 10 = 94 < min 100: not subtracted.
        let mut r2 = RttEstimator::new(ms(100));
        r2.update(t, ms(100), ms(0));
        r2.update(t + ms(100), ms(104), ms(10));
        assert_eq!(r2.srtt(), Duration::from_micros(100_500));
    }

    #[test]
    fn pto_has_granularity_floor() {
        let t = base();
        let mut r = RttEstimator::new(ms(100));
        for i in 0..200 {
            r.update(t + ms(i * 10), ms(50), ms(0));
        }
        assert!(r.rttvar() < Duration::from_micros(250));
        assert_eq!(r.pto(ms(5)), ms(50) + ms(1) + ms(5));
    }

    #[test]
    fn min_rtt_expires_after_window() {
        let t = base();
        let mut r = RttEstimator::new(ms(100));
        for i in 0..50 {
            r.update(t + ms(i * 100), ms(100), ms(0));
        }
        assert_eq!(r.min_rtt(), ms(100));
        // Route change at 5 s: RTT now 200 ms. The last 100 ms sample was at 4.9 s.
        let mut at_14s = None;
        let mut age_14s = None;
        for i in 50..200 {
            let now = t + ms(i * 100);
            r.update(now, ms(200), ms(0));
            if i == 140 {
                at_14s = Some(r.min_rtt());
                age_14s = Some(r.min_rtt_age(now));
            }
        }
        assert_eq!(at_14s, Some(ms(100)), "still inside the 10 s window");
        assert_eq!(age_14s, Some(ms(9_100)));
        assert_eq!(r.min_rtt(), ms(200), "expired after the window");
    }

    #[test]
    fn min_rtt_window_is_configurable() {
        let t = base();
        let mut r = RttEstimator::new(ms(100)).with_min_rtt_window(Duration::from_secs(1));
        r.update(t, ms(50), ms(0));
        r.update(t + ms(500), ms(90), ms(0));
        assert_eq!(r.min_rtt(), ms(50));
        r.update(t + ms(1600), ms(90), ms(0));
        assert_eq!(r.min_rtt(), ms(90));
    }

    #[test]
    fn round_min_tracks_last_round_only() {
        let t = base();
        let mut r = RttEstimator::new(ms(100));
        let mut now = t;
        for _ in 0..100 {
            now += ms(10);
            r.update(now, ms(100), ms(0));
        }
        // A queue builds: samples rise to 130 ms and stay.
        for _ in 0..300 {
            now += ms(10);
            r.update(now, ms(130), ms(0));
        }
        assert_eq!(r.min_rtt(), ms(100));
        assert_eq!(r.round_min(), ms(130));
        // One low outlier within the round pulls the round minimum down.
        now += ms(10);
        r.update(now, ms(101), ms(0));
        assert_eq!(r.round_min(), ms(101));
        // ...but only for about one round.
        for _ in 0..40 {
            now += ms(10);
            r.update(now, ms(130), ms(0));
        }
        assert_eq!(r.round_min(), ms(130));
    }

    #[test]
    fn two_round_min_needs_two_rounds_of_high_samples() {
        let t0 = base();
        let mut r = RttEstimator::new(ms(100));
        for i in 0..20 {
            r.update(t0 + ms(10 * i), ms(100), Duration::ZERO);
        }
        // One round (≈ srtt) of samples at 130 ms lifts the round minimum only.
        for i in 20..33 {
            r.update(t0 + ms(10 * i), ms(130), Duration::ZERO);
        }
        assert_eq!(r.round_min(), ms(130));
        assert_eq!(r.two_round_min(), ms(100));
        // A second round of them: the queue has stood for two rounds.
        for i in 33..60 {
            r.update(t0 + ms(10 * i), ms(130), Duration::ZERO);
        }
        assert_eq!(r.two_round_min(), ms(130));
    }

    #[test]
    fn single_spike_does_not_raise_round_min() {
        let t = base();
        let mut r = RttEstimator::new(ms(100));
        let mut now = t;
        for _ in 0..100 {
            now += ms(5);
            r.update(now, ms(100), ms(0));
        }
        now += ms(5);
        r.update(now, ms(400), ms(0));
        assert_eq!(r.round_min(), ms(100));
        assert_eq!(r.latest(), ms(400));
    }
}
