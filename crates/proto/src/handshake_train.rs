//! The handshake as a bandwidth probe.
//!
//! Why: a cold flow on a long path otherwise spends a round trip on its start-up probe
//! (`cc::ctcp` sends its first flight as a packet train and waits for the ACKs' spacing)
//! after already spending one on the handshake; at 500 ms that is 0.5 s of a 17 s, 20 MB
//! transfer. The handshake can take the same measurement for free: the client sends its
//! first INITIATE copies back to back, padded to full datagrams (a *train*); the bottleneck
//! spaces them out, the server reports how they arrived in every ACCEPT, and each copy
//! draws an ACCEPT of the same size. Odd positions are answered as they arrive, so the
//! client reads the server's report on the schedule it always had; even positions are
//! held until the train has passed the server and then sent back to back, so the
//! downlink alone spaces them (answered as they arrived, they were spaced by the slower
//! of the two directions, and a satellite's fast downlink read as its slow return link).
//! The client then knows the rate towards the server (from the report) and the rate back
//! (from the burst's spacing), and tells the server the latter in a PATH frame. Both
//! controllers start their first flight near the link rate
//! ([`crate::cc::Controller::on_path_estimate`]).
//!
//! The measurement is the start-up probe's, and so is its use: the copies between the
//! first and the last to arrive passed the bottleneck over the arrival span, lost ones
//! included (random loss on a satellite channel comes after the queue; counting only the
//! arrivals read 30 % loss as a link 30 % slower), and the window jumps to the BDP it
//! implies (the probe: 85 % of it; see `cc::ctcp`), slow start with its delay exit going
//! on from there. Amplification stays impossible: an ACCEPT is never larger than the
//! INITIATE that drew it.

use std::time::{Duration, Instant};

/// Train copies counted at most (positions 1..=64 fit the arrival bitmap).
pub(crate) const MAX_TRAIN: u8 = 64;
/// INITIATE copies in the train for a configured count: at most [`MAX_TRAIN`].
pub(crate) fn train_len(configured: u8) -> u8 {
    configured.min(MAX_TRAIN)
}

/// Arrivals more than this after the train's first are not part of it (a late or replayed
/// copy must not stretch the span).
const TRAIN_WINDOW: Duration = Duration::from_secs(1);
/// The client ends the measurement when no train ACCEPT arrived for this long (or three
/// mean gaps, on a link slow enough to space them further).
pub(crate) const QUIET: Duration = Duration::from_millis(25);
/// The server sends a train's held ACCEPTs (even positions) back to back once no copy arrived
/// for this long (or three mean gaps, on a slow uplink): see [`Arrivals::release_deadline`].
pub(crate) const RELEASE_QUIET: Duration = Duration::from_millis(5);
/// The client waits at least this long after the first ACCEPT for the held ACCEPTs, which
/// the server sends once the train has passed it (or twice the first
/// copy's round trip, if longer: the uplink's train span can exceed a short round trip).
pub(crate) const BURST_WAIT: Duration = Duration::from_millis(250);
/// Shortest arrival span taken at face value: below it, timer and batching noise may
/// dominate (a 16-copy train spans 1 ms at 170 Mbit/s), so the rate is taken over this span
/// instead, a lower bound, and reported as inexact.
pub(crate) const MIN_SPAN: Duration = Duration::from_millis(1);
/// Fewest arrivals for an estimate.
pub(crate) const MIN_ARRIVALS: u32 = 4;

/// Arrivals of one handshake train: which positions came, and when the first and the last.
#[derive(Debug, Default, Clone)]
pub(crate) struct Arrivals {
    seen: u64,
    first: Option<Instant>,
    last: Option<Instant>,
}

/// What a train's arrivals show: positions received, positions spanned (highest − lowest
/// received), and the time from the first arrival to the last.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Report {
    pub(crate) seen: u32,
    pub(crate) spread: u32,
    pub(crate) span: Duration,
}

impl Arrivals {
    /// Records train position `pos` (from 1) arriving at `now`. Returns whether it counted:
    /// position 0 (not a train copy), a repeated position, or an arrival past
    /// [`TRAIN_WINDOW`] does not.
    pub(crate) fn record(&mut self, pos: u8, now: Instant) -> bool {
        if pos == 0 || pos > MAX_TRAIN {
            return false;
        }
        let bit = 1u64 << (pos - 1);
        if self.seen & bit != 0
            || self
                .first
                .is_some_and(|f| now.saturating_duration_since(f) > TRAIN_WINDOW)
        {
            return false;
        }
        self.seen |= bit;
        self.first.get_or_insert(now);
        self.last = Some(now);
        true
    }

    /// Distinct positions received.
    pub(crate) fn count(&self) -> u32 {
        self.seen.count_ones()
    }

    /// Positions up to and including the highest received (0 before any): the copies
    /// known to have been sent.
    pub(crate) fn highest(&self) -> u32 {
        64 - self.seen.leading_zeros()
    }

    /// The arrivals so far.
    pub(crate) fn report(&self) -> Report {
        let spread = if self.seen == 0 {
            0
        } else {
            (63 - self.seen.leading_zeros()) - self.seen.trailing_zeros()
        };
        Report {
            seen: self.count(),
            spread,
            span: self.span(),
        }
    }

    /// Time from the first counted arrival to the last.
    pub(crate) fn span(&self) -> Duration {
        match (self.first, self.last) {
            (Some(f), Some(l)) => l.saturating_duration_since(f),
            _ => Duration::ZERO,
        }
    }

    /// When the measurement may end: [`QUIET`] (or three mean gaps) after the last arrival.
    pub(crate) fn quiet_deadline(&self) -> Option<Instant> {
        self.quiet_after(QUIET)
    }

    /// When the server may take the train as passed and send its held ACCEPTs:
    /// [`RELEASE_QUIET`] (or three mean gaps) after the last copy.
    pub(crate) fn release_deadline(&self) -> Option<Instant> {
        self.quiet_after(RELEASE_QUIET)
    }

    fn quiet_after(&self, floor: Duration) -> Option<Instant> {
        let last = self.last?;
        let gaps = self.count().saturating_sub(1).max(1);
        Some(last + floor.max(self.span() * 3 / gaps))
    }
}

/// The rate a train's arrivals show, in packets per second (`spread` packet times over
/// `span`), and whether it is exact (the span was long enough to measure) or a lower bound.
/// None with fewer than [`MIN_ARRIVALS`] arrivals.
pub(crate) fn rate(r: Report) -> Option<(f64, bool)> {
    if r.seen < MIN_ARRIVALS || r.spread == 0 {
        return None;
    }
    let exact = r.span >= MIN_SPAN;
    Some((
        f64::from(r.spread) / r.span.max(MIN_SPAN).as_secs_f64(),
        exact,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[allow(clippy::disallowed_methods)] // a fixed base instant for the test
    fn arrivals_count_distinct_positions_within_the_window() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut a = Arrivals::default();
        assert!(!a.record(0, t0), "position 0 is not a train copy");
        assert!(a.record(1, t0));
        assert!(
            !a.record(1, t0 + ms(1)),
            "a repeated position does not count"
        );
        assert!(a.record(3, t0 + ms(2)));
        assert!(!a.record(65, t0 + ms(3)));
        assert!(
            !a.record(4, t0 + ms(1001)),
            "too late to be part of the train"
        );
        assert_eq!(
            a.report(),
            Report {
                seen: 2,
                spread: 2,
                span: ms(2)
            }
        );
        assert_eq!(a.quiet_deadline(), Some(t0 + ms(2) + QUIET));
    }

    #[test]
    fn rate_is_positions_spanned_over_time_with_a_floor() {
        let report = |seen, spread, us| Report {
            seen,
            spread,
            span: Duration::from_micros(us),
        };
        // 12 of 16 arrived, the first and the last among them: 15 packet times.
        let (r, exact) = rate(report(12, 15, 18_000)).unwrap();
        assert!((r - 15.0 / 0.018).abs() < 1e-6 && exact);
        // Too short to measure: a lower bound over MIN_SPAN.
        let (r, exact) = rate(report(16, 15, 10)).unwrap();
        assert!((r - 15.0 / MIN_SPAN.as_secs_f64()).abs() < 1e-6 && !exact);
        assert!(rate(report(MIN_ARRIVALS - 1, 9, 5_000)).is_none());
    }

    #[test]
    #[allow(clippy::disallowed_methods)] // a fixed base instant for the test
    fn lost_copies_between_arrivals_count_as_passed() {
        let t0 = Instant::now();
        let mut a = Arrivals::default();
        for (pos, us) in [(2u8, 0u64), (3, 1000), (5, 3000), (9, 7000)] {
            assert!(a.record(pos, t0 + Duration::from_micros(us)));
        }
        let r = a.report();
        assert_eq!((r.seen, r.spread), (4, 7));
        let (pps, _) = rate(r).unwrap();
        assert!((pps - 1000.0).abs() < 1e-6, "{pps}");
    }
}
