//! Reordering estimation (after Ha & Tsuru, seed 002) and the RACK-style loss thresholds
//! derived from it, so that reordering is treated as neither loss nor congestion.
//!
//! Each late arrival (a transmission acknowledged or received after a later-numbered one)
//! is recorded with its displacement in transmission numbers and in time. The estimator
//! keeps exponentially decaying log-scale histograms (buckets 2^¼ ≈ 19 % wide) of both and
//! reports their 99th percentiles, rounded up to the top of the bucket. A transmission is
//! then declared lost only when it is later than the p99 displacement in both dimensions.
//!
//! Recording costs O(buckets) (≈130 multiplications) per *late arrival*; the percentiles
//! are cached, so [`ReorderEstimator::loss_threshold`] is O(1).

use std::time::Duration;

/// Packet threshold used when no reordering has been seen (RFC 9002 `kPacketThreshold`).
pub(crate) const MIN_PACKET_THRESHOLD: u64 = 3;
/// Quantile of late-arrival displacement that loss detection must cover.
const QUANTILE: f64 = 0.99;
/// Per-sample decay of the histograms: memory of roughly the last 500 late arrivals.
const SAMPLE_DECAY: f64 = 1.0 - 1.0 / 512.0;
/// Per-round decay applied by [`ReorderEstimator::on_round`].
const ROUND_DECAY: f64 = 0.75;
/// When [`ReorderEstimator::on_round`] finds less than this total weight, the histograms
/// are forgotten: ~20 quiet rounds after steady reordering stops (total ≈ 500), a few after
/// a lone late arrival (in the spirit of RACK's `reo_wnd` persistence of 16 recoveries).
const MIN_WEIGHT: f64 = 0.5;
/// Buckets: 0 for 0, then four per octave up to 2^32 (µs for time: ~71 minutes).
const BUCKETS: usize = 4 * 32 + 1;

/// Bucket of `v`: 0 for 0, else `4·⌊log2 v⌋ + (next two mantissa bits) + 1`.
fn bucket(v: u64) -> usize {
    let v = v.min(u64::from(u32::MAX));
    if v == 0 {
        return 0;
    }
    let e = 63 - v.leading_zeros() as usize;
    let sub = if e >= 2 {
        (v >> (e - 2)) & 3
    } else {
        (v << (2 - e)) & 3
    } as usize;
    (e * 4 + sub + 1).min(BUCKETS - 1)
}

/// Largest value that falls in bucket `i` (the conservative representative).
fn bucket_top(i: usize) -> u64 {
    if i == 0 {
        return 0;
    }
    let e = (i - 1) / 4;
    let sub = ((i - 1) % 4) as u64;
    ((5 + sub) << e).div_ceil(4) - 1
}

#[derive(Debug, Clone)]
struct DecayingHistogram {
    counts: Vec<f64>,
    total: f64,
    p99: u64,
}

impl DecayingHistogram {
    fn new() -> Self {
        DecayingHistogram {
            counts: vec![0.0; BUCKETS],
            total: 0.0,
            p99: 0,
        }
    }

    fn scale(&mut self, factor: f64) {
        for c in &mut self.counts {
            *c *= factor;
        }
        self.total *= factor;
    }

    fn age(&mut self) {
        self.scale(ROUND_DECAY);
        if self.total < MIN_WEIGHT {
            self.counts.iter_mut().for_each(|c| *c = 0.0);
            self.total = 0.0;
            self.p99 = 0;
        }
    }

    fn record(&mut self, v: u64) {
        self.scale(SAMPLE_DECAY);
        self.counts[bucket(v)] += 1.0;
        self.total += 1.0;
        let target = QUANTILE * self.total;
        let mut acc = 0.0;
        let mut idx = BUCKETS - 1;
        for (i, c) in self.counts.iter().enumerate() {
            acc += c;
            if acc >= target {
                idx = i;
                break;
            }
        }
        self.p99 = bucket_top(idx);
    }
}

/// Reordering estimator (see the module docs).
#[derive(Debug, Clone)]
pub(crate) struct ReorderEstimator {
    pkts: DecayingHistogram,
    micros: DecayingHistogram,
    late_arrivals: u64,
}

impl Default for ReorderEstimator {
    fn default() -> Self {
        Self::new()
    }
}

impl ReorderEstimator {
    /// An estimator that has seen no reordering (thresholds at their floors).
    pub(crate) fn new() -> Self {
        ReorderEstimator {
            pkts: DecayingHistogram::new(),
            micros: DecayingHistogram::new(),
            late_arrivals: 0,
        }
    }

    /// Records a late arrival: it came `displacement_pkts` transmission numbers and
    /// `late_by` after a later-sent transmission (e.g. a packet found lost-but-acked, or
    /// the receiver's measurement echoed in the ACK).
    pub(crate) fn on_late_arrival(&mut self, displacement_pkts: u64, late_by: Duration) {
        self.late_arrivals = self.late_arrivals.saturating_add(1);
        self.pkts.record(displacement_pkts);
        self.micros
            .record(u64::try_from(late_by.as_micros()).unwrap_or(u64::MAX));
    }

    /// Ages the estimate; call once per round trip. After ~20 rounds without late arrivals
    /// the thresholds fall back to their floors, so a path that stopped reordering gets fast
    /// loss detection back.
    pub(crate) fn on_round(&mut self) {
        self.pkts.age();
        self.micros.age();
    }

    /// Late arrivals recorded so far.
    #[cfg(test)]
    pub(crate) fn late_arrivals(&self) -> u64 {
        self.late_arrivals
    }

    /// p99 displacement of late arrivals, in transmission numbers (0 if none).
    #[cfg(test)]
    pub(crate) fn p99_displacement(&self) -> u64 {
        self.pkts.p99
    }

    /// p99 lateness of late arrivals (zero if none).
    pub(crate) fn p99_late_by(&self) -> Duration {
        Duration::from_micros(self.micros.p99)
    }

    /// RACK-style loss thresholds: a transmission is lost only if at least the returned
    /// number of later transmissions were acknowledged (`max(3, p99 displacement + 1)`)
    /// AND the returned time has passed since a later one was (`max(min_rtt/4, p99
    /// lateness)`).
    pub(crate) fn loss_threshold(&self, min_rtt: Duration) -> (u64, Duration) {
        let pkts = self.pkts.p99.saturating_add(1).max(MIN_PACKET_THRESHOLD);
        let time = (min_rtt / 4).max(self.p99_late_by());
        (pkts, time)
    }

    /// Applies [`Self::loss_threshold`]: whether a transmission with `later_acked` later
    /// transmissions acknowledged, the first of them `since_later_acked` ago, is lost.
    #[cfg(test)]
    pub(crate) fn is_lost(
        &self,
        later_acked: u64,
        since_later_acked: Duration,
        min_rtt: Duration,
    ) -> bool {
        let (pkts, time) = self.loss_threshold(min_rtt);
        later_acked >= pkts && since_later_acked >= time
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::estimate::loss::tests::XorShift;

    #[test]
    fn buckets_are_monotonic_and_tops_cover() {
        let mut prev = 0;
        for v in 0..5000u64 {
            let b = bucket(v);
            assert!(b >= prev);
            assert!(bucket_top(b) >= v, "v {v} bucket {b} top {}", bucket_top(b));
            if b > 0 {
                assert!(bucket_top(b - 1) < v);
            }
            prev = b;
        }
        assert_eq!(bucket(u64::MAX), BUCKETS - 1);
        // Bucket width ~19 %: the top overshoots by less than 25 %.
        assert!(bucket_top(bucket(50_000)) < 62_500);
    }

    #[test]
    fn floors_without_reordering() {
        let r = ReorderEstimator::new();
        assert_eq!(
            r.loss_threshold(Duration::from_millis(100)),
            (3, Duration::from_millis(25))
        );
        assert!(r.is_lost(3, Duration::from_millis(25), Duration::from_millis(100)));
        assert!(!r.is_lost(2, Duration::from_secs(1), Duration::from_millis(100)));
        assert!(!r.is_lost(100, Duration::from_millis(24), Duration::from_millis(100)));
    }

    #[test]
    fn two_percent_displaced_by_50ms_at_10mbps_are_not_lost() {
        // 10 Mbit/s, 1250 B datagrams: 1000 per second, so 50 ms late ≈ 50 transmissions.
        let mut r = ReorderEstimator::new();
        let mut rng = XorShift(0x1234_5678);
        let min_rtt = Duration::from_millis(20);
        let mut late = Vec::new();
        for _ in 0..100_000 {
            if rng.next_f64() < 0.02 {
                // Lateness 49-51 ms depending on where its successors fell.
                let late_by = Duration::from_micros(49_000 + (rng.next_f64() * 2000.0) as u64);
                let pkts = late_by.as_millis() as u64;
                r.on_late_arrival(pkts, late_by);
                late.push((pkts, late_by));
            }
        }
        let (pkts, time) = r.loss_threshold(min_rtt);
        assert!(time >= Duration::from_millis(51), "{time:?}");
        assert!(time < Duration::from_millis(65), "{time:?}");
        assert!(pkts > 51 && pkts < 70, "{pkts}");
        let declared = late
            .iter()
            .filter(|(p, t)| r.is_lost(*p, *t, min_rtt))
            .count();
        assert_eq!(declared, 0);
    }

    #[test]
    fn p99_ignores_rare_outliers() {
        let mut r = ReorderEstimator::new();
        for i in 0..1000 {
            if i % 500 == 0 {
                r.on_late_arrival(5000, Duration::from_secs(2));
            } else {
                r.on_late_arrival(4, Duration::from_millis(3));
            }
        }
        assert!(r.p99_displacement() <= 4, "{}", r.p99_displacement());
        assert!(r.p99_late_by() < Duration::from_millis(4));
    }

    #[test]
    fn forgets_after_quiet_rounds() {
        let mut r = ReorderEstimator::new();
        for _ in 0..100 {
            r.on_late_arrival(40, Duration::from_millis(40));
        }
        assert!(r.loss_threshold(Duration::from_millis(100)).1 >= Duration::from_millis(40));
        for _ in 0..10 {
            r.on_round();
        }
        assert!(
            r.p99_displacement() >= 40,
            "still remembered after 10 rounds"
        );
        for _ in 0..20 {
            r.on_round();
        }
        assert_eq!(
            r.loss_threshold(Duration::from_millis(100)),
            (3, Duration::from_millis(25))
        );
        assert_eq!(r.late_arrivals(), 100);
    }

    #[test]
    fn adapts_when_reordering_grows() {
        let mut r = ReorderEstimator::new();
        for _ in 0..500 {
            r.on_late_arrival(3, Duration::from_millis(2));
        }
        for _ in 0..50 {
            r.on_late_arrival(30, Duration::from_millis(30));
        }
        // 50 of the last ~550 (decayed): well above 1 %, the p99 moves up.
        assert!(r.p99_displacement() >= 30);
        assert!(r.p99_late_by() >= Duration::from_millis(30));
    }
}
