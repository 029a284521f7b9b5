//! Loss and burstiness estimation from per-transmission outcomes.
//!
//! Fed one outcome per transmission number, in order. Keeps a short EWMA (μ = 1/128, as
//! CTCP), a long one (μ = 1/2048), and Gilbert two-state transition counts with the same
//! long memory: `p_GB = n(recv→lost)/n(recv)`, `p_BG = n(lost→recv)/n(lost)`, mean burst
//! length `1/p_BG`.
//!
//! Both EWMAs start as a plain running mean (μ = max(μ, 1/n)), so the first hundred
//! outcomes already give an unbiased estimate instead of one pulled towards an arbitrary
//! starting value.

/// Weight of a new outcome in the short-term EWMA (CTCP's μ).
pub(crate) const SHORT_MU: f64 = 1.0 / 128.0;
/// Weight of a new outcome in the long-term EWMA.
pub(crate) const LONG_MU: f64 = 1.0 / 2048.0;
/// Per-outcome decay of the Gilbert transition counts (memory of ~4096 transmissions,
/// enough for ~50 bursts at 5 % loss and mean burst 4).
const GILBERT_DECAY: f64 = 1.0 - 1.0 / 4096.0;
/// Standard deviations by which the short EWMA must undercut the long one before
/// [`LossEstimator::p`] believes the loss rate fell.
const DROP_SIGMAS: f64 = 3.0;

/// Parameters of a simple Gilbert loss model: a good state that delivers and a bad state
/// that loses, with per-transmission transition probabilities.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct GilbertParams {
    /// P(next lost | this delivered): good → bad.
    pub p_gb: f64,
    /// P(next delivered | this lost): bad → good. Mean burst length is `1/p_bg`.
    pub p_bg: f64,
}

impl GilbertParams {
    /// Mean number of consecutive losses, `1/p_bg`.
    #[cfg(test)]
    pub(crate) fn mean_burst(&self) -> f64 {
        1.0 / self.p_bg.max(f64::MIN_POSITIVE)
    }

    /// Stationary loss rate of the chain, `p_gb / (p_gb + p_bg)`.
    #[cfg(test)]
    pub(crate) fn loss_rate(&self) -> f64 {
        let s = self.p_gb + self.p_bg;
        if s > 0.0 {
            self.p_gb / s
        } else {
            0.0
        }
    }
}

impl Default for GilbertParams {
    /// A loss-free, memoryless path.
    fn default() -> Self {
        GilbertParams {
            p_gb: 0.0,
            p_bg: 1.0,
        }
    }
}

/// Loss-rate and burstiness estimator (see the module docs).
#[derive(Debug, Clone, Default)]
pub(crate) struct LossEstimator {
    short: f64,
    long: f64,
    /// Outcomes seen (saturating), for the running-mean start.
    n: u64,
    last_lost: Option<bool>,
    /// Decayed transition counts.
    from_recv: f64,
    recv_to_lost: f64,
    from_lost: f64,
    lost_to_recv: f64,
}

impl LossEstimator {
    /// An estimator that has seen nothing (all estimates 0, memoryless).
    #[cfg(test)]
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Records the outcome of the next transmission in transmission-number order.
    pub(crate) fn on_outcome(&mut self, delivered: bool) {
        let x = if delivered { 0.0 } else { 1.0 };
        self.n = self.n.saturating_add(1);
        let start = 1.0 / self.n as f64;
        self.short += (x - self.short) * SHORT_MU.max(start);
        self.long += (x - self.long) * LONG_MU.max(start);
        if let Some(prev_lost) = self.last_lost {
            self.from_recv *= GILBERT_DECAY;
            self.recv_to_lost *= GILBERT_DECAY;
            self.from_lost *= GILBERT_DECAY;
            self.lost_to_recv *= GILBERT_DECAY;
            if prev_lost {
                self.from_lost += 1.0;
                if delivered {
                    self.lost_to_recv += 1.0;
                }
            } else {
                self.from_recv += 1.0;
                if !delivered {
                    self.recv_to_lost += 1.0;
                }
            }
        }
        self.last_lost = Some(!delivered);
    }

    /// Outcomes recorded so far (saturating).
    pub(crate) fn samples(&self) -> u64 {
        self.n
    }

    /// Short-term loss rate (EWMA, μ = 1/128).
    pub(crate) fn short(&self) -> f64 {
        self.short
    }

    /// Long-term loss rate (EWMA, μ = 1/2048).
    #[cfg(test)]
    pub(crate) fn long(&self) -> f64 {
        self.long
    }

    /// Conservative loss rate for choosing redundancy: `max(short, long)`, except that once
    /// the short estimate is more than 3σ (of its own sampling noise at the long rate)
    /// below the long one, the loss rate has really fallen and the short one is used.
    /// A rise shows at once (through `max`); a fall does after about a hundred outcomes.
    pub(crate) fn p(&self) -> f64 {
        let l = self.long;
        let sigma = (l * (1.0 - l) * SHORT_MU / (2.0 - SHORT_MU)).sqrt();
        if self.short < l - DROP_SIGMAS * sigma {
            self.short
        } else {
            self.short.max(l)
        }
    }

    /// Steady loss rate for forward erasure coding (datagrams, issue 27): the long-term
    /// rate while the short one stays within 2σ of it (its sampling noise: taking the
    /// larger of the two, as [`LossEstimator::p`] does, pays for that noise in repairs),
    /// the short one once it leaves that band (a real change).
    pub(crate) fn steady(&self) -> f64 {
        let l = self.long;
        let sigma = (l * (1.0 - l) * SHORT_MU / (2.0 - SHORT_MU)).sqrt();
        if (self.short - l).abs() > 2.0 * sigma {
            self.short
        } else {
            l
        }
    }

    /// `p_GB = n(recv→lost)/n(recv)`; 0 before any delivered transmission was followed.
    pub(crate) fn p_gb(&self) -> f64 {
        if self.from_recv > 0.0 {
            self.recv_to_lost / self.from_recv
        } else {
            0.0
        }
    }

    /// `p_BG = n(lost→recv)/n(lost)`; 1 (memoryless) before any loss was followed.
    pub(crate) fn p_bg(&self) -> f64 {
        if self.from_lost > 0.0 {
            self.lost_to_recv / self.from_lost
        } else {
            1.0
        }
    }

    /// Mean loss burst length `1/p_BG` (1 for isolated losses).
    #[cfg(test)]
    pub(crate) fn mean_burst(&self) -> f64 {
        1.0 / self.p_bg().max(f64::MIN_POSITIVE)
    }

    /// The Gilbert model parameters estimated so far.
    pub(crate) fn gilbert(&self) -> GilbertParams {
        GilbertParams {
            p_gb: self.p_gb(),
            p_bg: self.p_bg(),
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Tiny deterministic PRNG for tests (xorshift64*), uniform in [0, 1).
    pub(crate) struct XorShift(pub(crate) u64);

    impl XorShift {
        pub(crate) fn next_f64(&mut self) -> f64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            (self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64
        }
    }

    fn bernoulli(e: &mut LossEstimator, rng: &mut XorShift, p: f64, n: usize) {
        for _ in 0..n {
            e.on_outcome(rng.next_f64() >= p);
        }
    }

    #[test]
    fn empty_estimator_is_clean_and_memoryless() {
        let e = LossEstimator::new();
        assert_eq!(e.p(), 0.0);
        assert_eq!(e.gilbert(), GilbertParams::default());
        assert_eq!(e.mean_burst(), 1.0);
    }

    #[test]
    fn converges_for_bernoulli_streams() {
        for (seed, p) in [(1u64, 0.01), (2, 0.05), (3, 0.10), (4, 0.20), (5, 0.30)] {
            let mut e = LossEstimator::new();
            let mut rng = XorShift(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15));
            bernoulli(&mut e, &mut rng, p, 50_000);
            assert!(
                (e.long() - p).abs() < 0.25 * p + 0.004,
                "long {} vs {p}",
                e.long()
            );
            assert!(
                (e.short() - p).abs() < 0.6 * p + 0.02,
                "short {} vs {p}",
                e.short()
            );
            assert!(e.p() >= e.long() - 1e-12 || e.p() == e.short());
            // Memoryless: p_GB ≈ p, mean burst ≈ 1/(1-p).
            assert!(
                (e.p_gb() - p).abs() < 0.3 * p + 0.005,
                "p_gb {} vs {p}",
                e.p_gb()
            );
            assert!(
                (e.mean_burst() - 1.0 / (1.0 - p)).abs() < 0.15,
                "burst {}",
                e.mean_burst()
            );
        }
    }

    #[test]
    fn running_mean_start_is_unbiased() {
        let mut e = LossEstimator::new();
        let mut rng = XorShift(77);
        bernoulli(&mut e, &mut rng, 0.2, 300);
        assert!((e.long() - 0.2).abs() < 0.06, "{}", e.long());
    }

    #[test]
    fn rise_shows_at_once_fall_after_short_memory() {
        let mut e = LossEstimator::new();
        let mut rng = XorShift(99);
        bernoulli(&mut e, &mut rng, 0.02, 20_000);
        bernoulli(&mut e, &mut rng, 0.20, 300);
        assert!(e.p() > 0.12, "rise tracked by the short EWMA: {}", e.p());
        let mut e = LossEstimator::new();
        bernoulli(&mut e, &mut rng, 0.20, 20_000);
        bernoulli(&mut e, &mut rng, 0.01, 1_000);
        assert!(e.long() > 0.1);
        assert!(e.p() < 0.06, "fall tracked once significant: {}", e.p());
    }

    #[test]
    fn conservative_on_noise() {
        // Short EWMA dips by chance on a steady 5 % path: p() stays at least near long().
        let mut e = LossEstimator::new();
        let mut rng = XorShift(5);
        let mut below = 0;
        for _ in 0..100 {
            bernoulli(&mut e, &mut rng, 0.05, 1000);
            if e.p() < 0.8 * e.long() {
                below += 1;
            }
        }
        assert!(below <= 3, "{below}");
    }

    #[test]
    fn detects_bursts_of_gilbert_stream() {
        // Mean loss 5 %, mean burst 4: p_bg = 0.25, p_gb = 0.25 × 0.05 / 0.95.
        let (p_bg, p_gb) = (0.25, 0.25 * 0.05 / 0.95);
        let mut e = LossEstimator::new();
        let mut rng = XorShift(0xDEAD_BEEF);
        let mut bad = false;
        for _ in 0..200_000 {
            let u = rng.next_f64();
            bad = if bad { u >= p_bg } else { u < p_gb };
            e.on_outcome(!bad);
        }
        let g = e.gilbert();
        assert!(
            (e.mean_burst() - 4.0).abs() < 1.0,
            "mean burst {}",
            e.mean_burst()
        );
        assert!((g.p_gb - p_gb).abs() < 0.006, "p_gb {}", g.p_gb);
        assert!((g.loss_rate() - 0.05).abs() < 0.02, "{}", g.loss_rate());
        assert!((e.long() - 0.05).abs() < 0.025, "{}", e.long());
    }

    #[test]
    fn gilbert_params_helpers() {
        let g = GilbertParams {
            p_gb: 0.01,
            p_bg: 0.25,
        };
        assert!((g.mean_burst() - 4.0).abs() < 1e-12);
        assert!((g.loss_rate() - 0.01 / 0.26).abs() < 1e-12);
    }
}
