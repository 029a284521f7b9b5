//! Whether the bottleneck queue is held by a sender that does not back off on loss.
//!
//! A flow alone on its queue that cuts its window by `(1 − β)` at round minimum `T0`
//! sees the queue fall by `(1 − β)·T0` a round trip later: its window was `rate·T0`, and
//! that much less of it now waits. A competitor that backs off on the same losses (Cubic,
//! Reno, another ctcp) makes the queue fall further; one that does not (BBR v1 keeps up
//! to twice its estimated BDP in flight whatever it loses) leaves the flow's own share of
//! that fall only, so the fall over the fall the cut explains reads about the flow's share.
//! Against such a sender each deep cut hands it a higher delivery-rate sample, which its
//! max filter keeps, and the flow's share ratchets down (kernel Cubic and Reno fare the
//! same against kernel BBR on a shallow queue).
//!
//! When the moving average of that ratio falls under [`HELD_FRACTION`] (under a fair
//! share), cuts are no deeper than [`HELD_BETA`] until it is back above
//! [`RELEASE_FRACTION`] (evidence: docs/experiments/jitter.md, "A queue held by a sender
//! that ignores loss").

use std::time::{Duration, Instant};

/// The average fall under this fraction of `(1 − β)·T0`: another sender holds the queue
/// and leaves the flow less than an even share. A competitor that backs off with the flow
/// makes the fall larger than the flow's share (0.8 at an even share against Cubic).
const HELD_FRACTION: f64 = 0.5;

/// While held, the average fall must reach this fraction to release: the falls of the
/// shallow cuts made while held scatter widely around the flow's share, so a margin above
/// [`HELD_FRACTION`] keeps one high reading from ending the judgement.
const RELEASE_FRACTION: f64 = 0.7;

/// Weight of the newest cut in the moving average of falls.
const RATIO_GAIN: f64 = 0.25;

/// Deepest cut while another sender holds the queue: about the shallowest fixed cut with
/// which ctcp kept an even share against kernel BBR on a one-BDP queue (evidence in the
/// experiment named in the module docs).
const HELD_BETA: f64 = 0.85;

/// The response window: the queue's fall shows one round trip after the cut and is read
/// over the next round only, as the cut's own round minimum is; a longer window catches
/// the competitor's own periodic drains (BBR's gain cycle and ProbeRTT).
const RESPONSE_ROUNDS: u32 = 1;

/// A cut whose queue response is being watched.
#[derive(Debug, Clone, Copy)]
struct Cut {
    at: Instant,
    srtt: Duration,
    /// Round minimum at the cut.
    t0: Duration,
    /// Window before the cut.
    cwnd: f64,
    /// `1 − β`.
    depth: f64,
}

/// The queue's response to the last cut (see the module docs).
#[derive(Debug, Clone)]
pub(super) struct Elasticity {
    cut: Option<Cut>,
    /// Lowest RTT sample in the cut's response window.
    low: Option<Duration>,
    /// Moving average of the judged cuts' fall over the fall they alone explain.
    ratio: f64,
    held: bool,
}

impl Default for Elasticity {
    fn default() -> Self {
        Elasticity {
            cut: None,
            low: None,
            ratio: 1.0,
            held: false,
        }
    }
}

impl Elasticity {
    /// Whether the last cut that could be judged left the queue to another sender.
    #[cfg(test)]
    pub(super) fn held(&self) -> bool {
        self.held
    }

    /// The cut for a window of `cwnd` packets: `beta`, or while another sender holds the
    /// queue no deeper than [`HELD_BETA`], yet deep enough to be judged
    /// ([`MIN_JUDGED_PACKETS`]) so that the judgement can end.
    pub(super) fn beta(&self, beta: f64, cwnd: f64) -> f64 {
        if !self.held || cwnd < MIN_JUDGED_WINDOW {
            return beta;
        }
        let judged = 1.0 - MIN_JUDGED_PACKETS / cwnd.max(1.0);
        beta.max(HELD_BETA.min(judged))
    }

    /// Judges the previous cut's response, before a new cut picks its β.
    pub(super) fn judge(&mut self, min_rtt: Duration) {
        let (Some(c), Some(low)) = (self.cut.take(), self.low.take()) else {
            return;
        };
        // A fall smaller than the delay noise floor cannot be told from none: keep the
        // last judgement (a cut at β near 1 drains almost nothing by design).
        // Fall the cut alone explains: `(1 − β)·T0`.
        let expected = c.t0.mul_f64(c.depth);
        if expected < min_judged(min_rtt)
            || c.cwnd * c.depth < MIN_JUDGED_PACKETS
            || c.cwnd < MIN_JUDGED_WINDOW
        {
            return;
        }
        let fell = c.t0.saturating_sub(low);
        let ratio = fell.as_secs_f64() / expected.as_secs_f64();
        // Capped at 1: a competitor's drain (BBR's ProbeRTT) reads several times the cut,
        // and one such reading must not end the judgement.
        self.ratio += (ratio.min(1.0) - self.ratio) * RATIO_GAIN;
        self.held = self.ratio
            < if self.held {
                RELEASE_FRACTION
            } else {
                HELD_FRACTION
            };
    }

    /// Records a cut of `cwnd` packets by `beta` made at `now`.
    pub(super) fn on_cut(
        &mut self,
        now: Instant,
        t0: Duration,
        srtt: Duration,
        cwnd: f64,
        beta: f64,
    ) {
        self.cut = Some(Cut {
            at: now,
            srtt,
            t0,
            cwnd,
            depth: (1.0 - beta).max(0.0),
        });
        self.low = None;
    }

    /// Feeds an RTT sample taken at `now`.
    pub(super) fn on_sample(&mut self, now: Instant, sample: Duration) {
        let Some(c) = self.cut else { return };
        let from = c.at + c.srtt;
        if now >= from && now <= from + c.srtt * RESPONSE_ROUNDS {
            self.low = Some(self.low.map_or(sample, |l| l.min(sample)));
        }
    }
}

/// Fewest packets a judged cut takes out: a queue moves in whole packets, and the
/// competitor's growth within the round is of that order, so a cut of one or two packets
/// shows no fall even when alone.
const MIN_JUDGED_PACKETS: f64 = 4.0;

/// Smallest window whose cuts are judged: below it the queue's steps of whole packets are
/// a large part of any fall, and a competitor's growth of a packet or two within the round
/// reads as a queue it holds.
const MIN_JUDGED_WINDOW: f64 = 16.0;

/// Smallest expected fall worth judging: 2 ms or a sixteenth of `RTT_min`.
fn min_judged(min_rtt: Duration) -> Duration {
    Duration::from_millis(2).max(min_rtt / 16)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    /// `n` cuts of a 100-packet window by β = 0.5 at a 200 ms round minimum, each
    /// answered a round trip later by the lowest sample `low_ms`.
    fn cuts(e: &mut Elasticity, n: u32, low_ms: u32) {
        let mut t = crate::test_clock::base();
        for _ in 0..n {
            e.judge(100 * MS);
            e.on_cut(t, 200 * MS, 200 * MS, 100.0, 0.5);
            e.on_sample(t + 100 * MS, MS); // before the response window: ignored
            e.on_sample(t + 300 * MS, low_ms * MS);
            t += 2000 * MS;
        }
        e.judge(100 * MS);
    }

    #[test]
    fn a_queue_that_falls_by_the_cut_is_the_flows_own() {
        let mut e = Elasticity::default();
        cuts(&mut e, 20, 101);
        assert!(!e.held());
        assert_eq!(e.beta(0.5, 100.0), 0.5);
    }

    #[test]
    fn a_queue_that_falls_by_a_fraction_of_the_cut_is_held_until_it_falls_fully() {
        let mut e = Elasticity::default();
        // The flow's share was a fifth: the queue fell by a fifth of what the cut removed.
        cuts(&mut e, 2, 180);
        assert!(!e.held(), "one or two cuts do not decide");
        cuts(&mut e, 6, 180);
        assert!(e.held());
        assert_eq!(e.beta(0.5, 100.0), HELD_BETA);
        // Never deeper than the measured β, never too shallow to be judged.
        assert_eq!(e.beta(0.9, 100.0), 0.9);
        assert!((e.beta(0.5, 20.0) - 0.8).abs() < 1e-9);
        // Under the judged window nothing changes.
        assert_eq!(e.beta(0.5, 10.0), 0.5);
        cuts(&mut e, 20, 100);
        assert!(!e.held());
    }

    #[test]
    fn small_cuts_and_windows_are_not_judged() {
        let mut e = Elasticity::default();
        let t = crate::test_clock::base();
        for k in 0..20 {
            let at = t + 2000 * MS * k;
            e.judge(100 * MS);
            // (1 − 0.98) × 200 ms = 4 ms, under 100 ms / 16.
            e.on_cut(at, 200 * MS, 200 * MS, 1000.0, 0.98);
            e.on_sample(at + 300 * MS, 200 * MS);
            e.judge(100 * MS);
            // A window under MIN_JUDGED_WINDOW.
            e.on_cut(at, 200 * MS, 200 * MS, 10.0, 0.5);
            e.on_sample(at + 300 * MS, 200 * MS);
        }
        e.judge(100 * MS);
        assert!(!e.held());
    }

    #[test]
    fn no_sample_in_the_response_window_judges_nothing() {
        let mut e = Elasticity::default();
        let t = crate::test_clock::base();
        for k in 0..20 {
            let at = t + 2000 * MS * k;
            e.judge(100 * MS);
            e.on_cut(at, 200 * MS, 200 * MS, 100.0, 0.5);
            e.on_sample(at + 1000 * MS, 200 * MS); // after the window
        }
        e.judge(100 * MS);
        assert!(!e.held());
    }
}
