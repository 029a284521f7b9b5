//! How many repair symbols to send: proactively per block of new source symbols, and
//! reactively when an ACK shows the decoder short of symbols.
//!
//! **Proactive.** For `k` new source symbols, send `n − k` repairs, where `n` is the fewest
//! transmissions such that at least `k` arrive with the target probability, so the block
//! decodes without a feedback round. For random loss that is the binomial tail
//! `P[Bin(n, 1−p) ≥ k] ≥ target` (k = 32, p = 10 %: n = 38 / 41 / 43 for 90 / 99 / 99.9 %);
//! for bursty loss a forward recursion over the two states of a Gilbert chain. Below
//! p = 0.1 % nothing is sent: FEC on a clean link only wastes capacity.
//!
//! **Target.** A failed block costs a feedback round, which costs more on a long path, so
//! the target rises with the RTT: failure probability 10 % at ≤ 20 ms, 1 % at 100 ms,
//! 0.1 % at ≥ 500 ms, a straight line on log–log axes between (`fail = 0.1·(rtt/20 ms)^−1.43`).
//!
//! **Cost.** Results are memoised on a quantised key (p and p_BG on a 2.5 % log grid,
//! rounded towards more repair; the failure target likewise), so a per-ACK call is a
//! couple of logarithms and a hash lookup; a miss costs O(k·n) (≈ 1.5 k operations for
//! k = 32, ≈ 90 µs for k = 256, ≈ 1 ms for k = 1024). Blocks above 64 are computed at the
//! largest point ≤ k of a grid four points per octave (64, 76, 90, 107, 128, …) and above
//! [`MAX_BLOCK`] at [`MAX_BLOCK`], and that repair *ratio* is applied to k: it
//! over-provisions slightly (the ratio needed falls as k grows) and keeps the memo small
//! when k follows the window.
//!
//! **Choosing k.** The ratio falls steeply with k (p = 5 %, 99.9 %: 17 % at k = 64,
//! 10.5 % at 256, 7.7 % at 1024), so k should be what is sent per feedback round (about
//! the window), not a small constant, to stay near the wire budget `1.05/(1−p)`.
//!
//! The GF(256) rank deficiency of dense random repairs (a repair is dependent with
//! probability ~1/256) is ignored: it is far below the targets' failure budgets.

use crate::estimate::loss::GilbertParams;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

/// Loss rate below which no proactive repair is sent.
pub(crate) const CLEAN_LOSS: f64 = 0.001;
/// Largest block computed exactly; larger ones scale its repair ratio.
pub(crate) const MAX_BLOCK: u32 = 1024;
/// Blocks up to this size are computed at their exact k.
const EXACT_BLOCK: u32 = 64;
/// Highest loss rate planned for; estimates above are clamped (beyond it no code helps).
const MAX_LOSS: f64 = 0.9;
/// Ratio between adjacent grid points of the memo key.
const GRID: f64 = 1.025;
/// Memo entries kept before the memo is cleared.
const MEMO_LIMIT: usize = 4096;
/// Decode-failure probability at and below [`RTT_LOW`].
const FAIL_HIGH: f64 = 0.1;
/// Decode-failure probability at and above [`RTT_HIGH`].
const FAIL_LOW: f64 = 0.001;
/// RTT at and below which the target is 90 %.
const RTT_LOW: Duration = Duration::from_millis(20);
/// RTT at and above which the target is 99.9 %.
const RTT_HIGH: Duration = Duration::from_millis(500);

/// A loss process to plan repairs for.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum LossModel {
    /// Independent loss with probability `p` per transmission.
    Bernoulli {
        /// Loss probability.
        p: f64,
    },
    /// Simple Gilbert chain (good state delivers, bad state loses), starting stationary.
    Gilbert(GilbertParams),
}

/// Decode target for a path with this RTT: 0.9 at ≤ 20 ms, 0.99 at 100 ms, 0.999 at
/// ≥ 500 ms, log-linear in between (see the module docs).
#[cfg(test)]
pub(crate) fn target_probability(rtt: Duration) -> f64 {
    1.0 - failure_budget(rtt)
}

fn failure_budget(rtt: Duration) -> f64 {
    if rtt <= RTT_LOW {
        return FAIL_HIGH;
    }
    if rtt >= RTT_HIGH {
        return FAIL_LOW;
    }
    let x = (rtt.as_secs_f64() / RTT_LOW.as_secs_f64()).ln()
        / (RTT_HIGH.as_secs_f64() / RTT_LOW.as_secs_f64()).ln();
    (FAIL_HIGH.ln() + x * (FAIL_LOW.ln() - FAIL_HIGH.ln())).exp()
}

/// Probability that at least `k` of `n` transmissions arrive under `model`.
#[cfg(test)]
pub(crate) fn decode_probability(k: u32, n: u32, model: LossModel) -> f64 {
    let mut dp = Recursion::new(k, model);
    for _ in 0..n {
        dp.step();
    }
    dp.done
}

/// Fewest transmissions `n ≥ k` such that at least `k` arrive with probability ≥ `target`
/// under `model`; at most `16·k + 256` (hopeless loss rates are not chased).
pub(crate) fn transmissions_needed(k: u32, model: LossModel, target: f64) -> u32 {
    if k == 0 {
        return 0;
    }
    let n_max = k.saturating_mul(16).saturating_add(256);
    let mut dp = Recursion::new(k, model);
    for n in 1..=n_max {
        dp.step();
        if n >= k && dp.done >= target {
            return n;
        }
    }
    n_max
}

/// Forward recursion over (symbols delivered so far < k, chain state), with the mass
/// that reached k delivered absorbed in `done`.
struct Recursion {
    /// Mass in the good (delivering) state by count delivered.
    good: Vec<f64>,
    /// Mass in the bad (losing) state by count delivered.
    bad: Vec<f64>,
    done: f64,
    p_gb: f64,
    p_bg: f64,
    /// Number of leading entries that can be non-zero.
    reach: usize,
}

impl Recursion {
    fn new(k: u32, model: LossModel) -> Self {
        let k = k.max(1) as usize;
        // A Bernoulli process is the Gilbert chain with p_gb = p, p_bg = 1 − p.
        let (p_gb, p_bg) = match model {
            LossModel::Bernoulli { p } => {
                let p = p.clamp(0.0, 1.0);
                (p, 1.0 - p)
            }
            LossModel::Gilbert(g) => (g.p_gb.clamp(0.0, 1.0), g.p_bg.clamp(0.0, 1.0)),
        };
        let s = p_gb + p_bg;
        let pi_bad = if s > 0.0 { p_gb / s } else { 0.0 };
        let mut good = vec![0.0; k];
        let mut bad = vec![0.0; k];
        // The state "before" the first transmission is stationary; the first transition
        // then leaves it stationary.
        good[0] = 1.0 - pi_bad;
        bad[0] = pi_bad;
        Recursion {
            good,
            bad,
            done: 0.0,
            p_gb,
            p_bg,
            reach: 1,
        }
    }

    /// One more transmission: move the chain, deliver in the good state.
    fn step(&mut self) {
        let k = self.good.len();
        let top = self.reach.min(k) - 1;
        for j in (0..=top).rev() {
            let (g, b) = (self.good[j], self.bad[j]);
            let to_good = g * (1.0 - self.p_gb) + b * self.p_bg;
            let to_bad = g * self.p_gb + b * (1.0 - self.p_bg);
            self.bad[j] = to_bad;
            if j + 1 == k {
                self.done += to_good;
            } else {
                self.good[j + 1] = to_good;
            }
        }
        self.good[0] = 0.0;
        self.reach = (self.reach + 1).min(k);
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Key {
    k: u32,
    /// Grid index of p (rounded up).
    p: i32,
    /// Grid index of p_BG (rounded down: burstier), for bursty loss.
    p_bg: Option<i32>,
    /// Grid index of the failure budget (rounded down: stricter).
    fail: i32,
}

/// The block size a query for `k` is computed at: k up to 64, else the largest point ≤ k
/// of a grid four points per octave from 64, at most [`MAX_BLOCK`].
fn block_grid(k: u32) -> u32 {
    if k <= EXACT_BLOCK {
        return k;
    }
    let steps = (4.0 * (f64::from(k) / f64::from(EXACT_BLOCK)).log2()).floor();
    let g = (f64::from(EXACT_BLOCK) * (steps / 4.0).exp2()).floor() as u32;
    g.clamp(EXACT_BLOCK, k).min(MAX_BLOCK)
}

/// `count` computed for a block of `kb` scaled to a block of `k`, rounded up.
fn scale(count: u32, kb: u32, k: u32) -> u32 {
    if k == kb {
        count
    } else {
        (f64::from(count) * f64::from(k) / f64::from(kb)).ceil() as u32
    }
}

fn grid_up(x: f64) -> i32 {
    (x.ln() / GRID.ln()).ceil() as i32
}

fn grid_down(x: f64) -> i32 {
    (x.ln() / GRID.ln()).floor() as i32
}

fn grid_value(i: i32) -> f64 {
    GRID.powi(i)
}

impl Key {
    fn model(&self) -> LossModel {
        let p = grid_value(self.p).min(MAX_LOSS);
        match self.p_bg {
            None => LossModel::Bernoulli { p },
            Some(i) => {
                let p_bg = grid_value(i).min(1.0);
                // Keep the stationary loss at p; only the burst length comes from p_BG.
                let p_gb = (p * p_bg / (1.0 - p)).min(1.0);
                LossModel::Gilbert(GilbertParams { p_gb, p_bg })
            }
        }
    }

    fn target(&self) -> f64 {
        1.0 - grid_value(self.fail)
    }
}

#[derive(Debug, Default)]
struct Memo {
    table: HashMap<Key, u32>,
    /// Failure budget for the RTT of the latest proactive query, used by reactive repair.
    reactive_fail: Option<f64>,
}

/// Chooses proactive and reactive repair counts (see the module docs). Methods take `&self`
/// (the memo sits behind a mutex), so it can be queried from read-only paths.
#[derive(Debug, Default)]
pub(crate) struct RedundancyPolicy {
    memo: Mutex<Memo>,
}

impl Clone for RedundancyPolicy {
    /// A fresh policy (the memo is only a cache).
    fn clone(&self) -> Self {
        Self::default()
    }
}

impl RedundancyPolicy {
    /// A policy with an empty memo.
    #[cfg(test)]
    pub(crate) fn new() -> Self {
        Self::default()
    }

    fn memo(&self) -> std::sync::MutexGuard<'_, Memo> {
        self.memo
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn lookup(&self, key: Key) -> u32 {
        let mut memo = self.memo();
        if let Some(&n) = memo.table.get(&key) {
            return n;
        }
        let n = transmissions_needed(key.k, key.model(), key.target());
        if memo.table.len() >= MEMO_LIMIT {
            memo.table.clear();
        }
        memo.table.insert(key, n);
        n
    }

    /// Whether `gilbert` describes loss burstier than independent loss at rate `p`
    /// (independent loss has `p_BG = 1 − p`; a margin keeps estimator noise out).
    fn bursty(p: f64, gilbert: Option<GilbertParams>) -> Option<f64> {
        let g = gilbert?;
        (g.p_bg.is_finite() && g.p_bg > 0.0 && g.p_bg < 0.9 * (1.0 - p)).then_some(g.p_bg)
    }

    /// Proactive repairs to send with a block of `k` new source symbols, at estimated loss
    /// `p` (e.g. [`LossEstimator::p`](crate::estimate::loss::LossEstimator::p)), burstiness
    /// `gilbert` (used when it is burstier than independent loss; the stationary loss is
    /// taken from `p`) and path RTT `rtt` (which sets the target). 0 below 0.1 % loss.
    pub(crate) fn repairs_per_block(
        &self,
        k: u32,
        p: f64,
        gilbert: Option<GilbertParams>,
        rtt: Duration,
    ) -> u32 {
        let fail = failure_budget(rtt);
        self.memo().reactive_fail = Some(fail);
        if k == 0 || p.is_nan() || p < CLEAN_LOSS {
            return 0;
        }
        let p = p.min(MAX_LOSS);
        let kb = block_grid(k);
        let key = Key {
            k: kb,
            p: grid_up(p),
            p_bg: Self::bursty(p, gilbert).map(grid_down),
            fail: grid_down(fail),
        };
        let n = self.lookup(key);
        scale(n.saturating_sub(kb), kb, k)
    }

    /// Proactive repairs per source symbol, `(n − k)/k`, for the same inputs as
    /// [`Self::repairs_per_block`].
    pub(crate) fn repair_ratio(
        &self,
        k: u32,
        p: f64,
        gilbert: Option<GilbertParams>,
        rtt: Duration,
    ) -> f64 {
        if k == 0 {
            return 0.0;
        }
        f64::from(self.repairs_per_block(k, p, gilbert, rtt)) / f64::from(k)
    }

    /// Repairs to send in one go when an ACK shows the decoder `deficit` symbols short for
    /// longer than ~1.25 srtt: the fewest `n ≥ deficit` such that at least `deficit` arrive
    /// at loss `p` with the target probability of the RTT last passed to
    /// [`Self::repairs_per_block`]/[`Self::repair_ratio`] (99 % before any).
    #[cfg(test)]
    pub(crate) fn reactive_repairs(&self, deficit: u32, p: f64) -> u32 {
        let fail = self.memo().reactive_fail.unwrap_or(0.01);
        self.reactive(deficit, p, fail)
    }

    /// [`Self::reactive_repairs`] with the target for an explicit `rtt`.
    #[cfg(test)]
    pub(crate) fn reactive_repairs_for(&self, deficit: u32, p: f64, rtt: Duration) -> u32 {
        self.reactive(deficit, p, failure_budget(rtt))
    }

    #[cfg(test)]
    fn reactive(&self, deficit: u32, p: f64, fail: f64) -> u32 {
        if deficit == 0 {
            return 0;
        }
        // Even on a "clean" path a deficit means something was lost: plan for ≥ 0.1 %.
        let p = if p.is_finite() {
            p.clamp(CLEAN_LOSS, MAX_LOSS)
        } else {
            CLEAN_LOSS
        };
        let kb = deficit.min(MAX_BLOCK);
        let key = Key {
            k: kb,
            p: grid_up(p),
            p_bg: None,
            fail: grid_down(fail),
        };
        let n = self.lookup(key);
        if deficit == kb {
            n
        } else {
            (f64::from(n) * f64::from(deficit) / f64::from(kb)).ceil() as u32
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_clock::ms;

    fn bern(p: f64) -> LossModel {
        LossModel::Bernoulli { p }
    }

    #[test]
    fn binomial_k32_p10_matches_design() {
        assert_eq!(transmissions_needed(32, bern(0.10), 0.90), 38);
        assert_eq!(transmissions_needed(32, bern(0.10), 0.99), 41);
        assert_eq!(transmissions_needed(32, bern(0.10), 0.999), 43);
    }

    #[test]
    fn policy_k32_p10_matches_design_through_memo_and_rtt_target() {
        let pol = RedundancyPolicy::new();
        assert_eq!(pol.repairs_per_block(32, 0.10, None, ms(20)), 6);
        assert_eq!(pol.repairs_per_block(32, 0.10, None, ms(100)), 9);
        assert_eq!(pol.repairs_per_block(32, 0.10, None, ms(500)), 11);
        assert_eq!(pol.repairs_per_block(32, 0.10, None, ms(600)), 11);
        assert!((pol.repair_ratio(32, 0.10, None, ms(100)) - 9.0 / 32.0).abs() < 1e-12);
    }

    #[test]
    fn binomial_tail_matches_closed_form() {
        // P[Bin(5, 0.8) ≥ 4] = 5·0.8⁴·0.2 + 0.8⁵.
        let exact = 5.0 * 0.8f64.powi(4) * 0.2 + 0.8f64.powi(5);
        assert!((decode_probability(4, 5, bern(0.2)) - exact).abs() < 1e-12);
        assert_eq!(decode_probability(4, 3, bern(0.2)), 0.0);
        assert!((decode_probability(3, 3, bern(0.0)) - 1.0).abs() < 1e-12);
    }

    #[test]
    fn target_rises_with_rtt_log_linearly() {
        assert!((target_probability(ms(5)) - 0.9).abs() < 1e-12);
        assert!((target_probability(ms(20)) - 0.9).abs() < 1e-12);
        assert!((target_probability(ms(100)) - 0.99).abs() < 1e-9);
        assert!((target_probability(ms(500)) - 0.999).abs() < 1e-12);
        assert!((target_probability(ms(2000)) - 0.999).abs() < 1e-12);
        // Geometric midpoint of 20 and 100 ms: failure budget √(0.1 × 0.01).
        let mid = Duration::from_secs_f64((0.02f64 * 0.1).sqrt());
        assert!((1.0 - target_probability(mid) - (0.001f64).sqrt()).abs() < 1e-9);
        let mut prev = 0.0;
        for r in (0..700).step_by(10) {
            let t = target_probability(ms(r));
            assert!(t >= prev);
            prev = t;
        }
    }

    #[test]
    fn clean_link_gets_no_proactive_repair() {
        let pol = RedundancyPolicy::new();
        assert_eq!(pol.repairs_per_block(64, 0.0, None, ms(500)), 0);
        assert_eq!(pol.repairs_per_block(64, 0.0009, None, ms(500)), 0);
        assert_eq!(pol.repairs_per_block(64, f64::NAN, None, ms(500)), 0);
        assert_eq!(pol.repair_ratio(0, 0.2, None, ms(500)), 0.0);
        assert!(pol.repairs_per_block(64, 0.002, None, ms(500)) >= 1);
    }

    #[test]
    fn gilbert_recursion_reduces_to_bernoulli_when_memoryless() {
        let g = LossModel::Gilbert(GilbertParams {
            p_gb: 0.1,
            p_bg: 0.9,
        });
        for n in 32..50 {
            let a = decode_probability(32, n, g);
            let b = decode_probability(32, n, bern(0.1));
            assert!((a - b).abs() < 1e-12, "n {n}: {a} vs {b}");
        }
    }

    #[test]
    fn gilbert_recursion_matches_enumeration() {
        // Brute force over all 2^8 loss patterns of a small chain.
        let g = GilbertParams {
            p_gb: 0.2,
            p_bg: 0.4,
        };
        let pi_bad = g.p_gb / (g.p_gb + g.p_bg);
        let (k, n) = (5u32, 8u32);
        let mut total = 0.0;
        for mask in 0u32..(1 << n) {
            let mut prob = 1.0;
            let mut prev_bad: Option<bool> = None;
            for i in 0..n {
                let bad = mask & (1 << i) != 0;
                prob *= match prev_bad {
                    None => {
                        if bad {
                            pi_bad
                        } else {
                            1.0 - pi_bad
                        }
                    }
                    Some(false) => {
                        if bad {
                            g.p_gb
                        } else {
                            1.0 - g.p_gb
                        }
                    }
                    Some(true) => {
                        if bad {
                            1.0 - g.p_bg
                        } else {
                            g.p_bg
                        }
                    }
                };
                prev_bad = Some(bad);
            }
            if n - mask.count_ones() >= k {
                total += prob;
            }
        }
        assert!((decode_probability(k, n, LossModel::Gilbert(g)) - total).abs() < 1e-12);
    }

    #[test]
    fn bursty_loss_needs_more_repair() {
        let pol = RedundancyPolicy::new();
        let bursty = GilbertParams {
            p_gb: 0.25 * 0.05 / 0.95,
            p_bg: 0.25,
        };
        let iid = pol.repairs_per_block(64, 0.05, None, ms(100));
        let burst = pol.repairs_per_block(64, 0.05, Some(bursty), ms(100));
        assert!(burst > iid + 3, "bursty {burst} vs iid {iid}");
        // Memoryless Gilbert estimate: treated as independent loss.
        let plain = GilbertParams {
            p_gb: 0.05,
            p_bg: 0.95,
        };
        assert_eq!(pol.repairs_per_block(64, 0.05, Some(plain), ms(100)), iid);
    }

    #[test]
    fn memo_rounds_towards_more_repair() {
        let pol = RedundancyPolicy::new();
        for p in [0.003, 0.01, 0.0437, 0.1, 0.2, 0.3] {
            for rtt in [ms(20), ms(60), ms(100), ms(500)] {
                let exact = transmissions_needed(32, bern(p), target_probability(rtt)) - 32;
                let cached = pol.repairs_per_block(32, p, None, rtt);
                assert!(
                    cached >= exact && cached <= exact + 1,
                    "p {p} rtt {rtt:?}: {cached} vs {exact}"
                );
            }
        }
    }

    #[test]
    fn large_blocks_use_the_grid_ratio() {
        assert_eq!(block_grid(40), 40);
        assert_eq!(block_grid(64), 64);
        assert_eq!(block_grid(75), 64);
        assert_eq!(block_grid(77), 76);
        assert_eq!(block_grid(300), 256);
        assert_eq!(block_grid(1024), 1024);
        assert_eq!(block_grid(5000), 1024);
        let pol = RedundancyPolicy::new();
        let r1024 = pol.repairs_per_block(1024, 0.1, None, ms(100));
        let r4096 = pol.repairs_per_block(4096, 0.1, None, ms(100));
        assert_eq!(r4096, r1024 * 4);
        for k in [65u32, 100, 300, 430, 1000, 1024] {
            let exact = transmissions_needed(k, bern(0.1), 0.99) - k;
            let got = pol.repairs_per_block(k, 0.1, None, ms(100));
            // Conservative, but by at most a few percent of k.
            assert!(
                got >= exact && got <= exact + k / 25 + 2,
                "k {k}: {got} vs {exact}"
            );
        }
    }

    #[test]
    fn large_block_ratio_approaches_loss_rate() {
        let pol = RedundancyPolicy::new();
        let r64 = pol.repair_ratio(64, 0.05, None, ms(500));
        let r1024 = pol.repair_ratio(1024, 0.05, None, ms(500));
        assert!(r1024 < r64 * 0.5, "{r1024} vs {r64}");
        assert!(r1024 > 0.05 / 0.95);
    }

    #[test]
    fn reactive_covers_deficit_with_margin() {
        let pol = RedundancyPolicy::new();
        assert_eq!(pol.reactive_repairs(0, 0.1), 0);
        // Clean path: exactly the deficit (0.1 % floor adds nothing for small deficits).
        assert_eq!(pol.reactive_repairs(5, 0.0), 5);
        // 10 at 20 %, 99 %: P[Bin(n, 0.8) ≥ 10] ≥ 0.99.
        let n = pol.reactive_repairs_for(10, 0.2, ms(100));
        assert_eq!(n, transmissions_needed(10, bern(0.2), 0.99));
        assert!(decode_probability(10, n, bern(0.2)) >= 0.99);
        assert!(decode_probability(10, n - 1, bern(0.2)) < 0.99);
        // The target follows the RTT of the last proactive query.
        pol.repairs_per_block(32, 0.2, None, ms(500));
        assert_eq!(
            pol.reactive_repairs(10, 0.2),
            transmissions_needed(10, bern(0.2), 0.999)
        );
    }

    #[test]
    fn hopeless_loss_is_bounded() {
        assert_eq!(transmissions_needed(4, bern(1.0), 0.99), 4 * 16 + 256);
        let pol = RedundancyPolicy::new();
        let r = pol.repairs_per_block(32, 0.99, None, ms(100));
        assert!(r < 32 * 16 + 256);
    }
}
