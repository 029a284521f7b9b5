//! How many repairs datagrams get: a rate per datagram sent, from the measured loss rate,
//! its burstiness and how many datagrams the deadline window holds.
//!
//! Datagrams are never retransmitted and a loss report comes a round trip late, so every
//! repair is sent ahead (forward erasure coding over the sliding window). The rate is the
//! smallest `m / n` for which a block of `n` datagrams (what one deadline holds) plus `m`
//! repairs loses more than `m` with probability at most [`TARGET`], losses coming in
//! bursts of the measured mean length (so `(n + m) / burst` independent trials). The
//! sliding window does better than that block code (each repair covers every datagram
//! still within the deadline, so a burst is repaired by repairs on both sides of it),
//! which is why the target is loose.
//!
//! That holds only while datagrams come close enough together for the window to fill. A
//! lone datagram (a DNS query, the first of a flow, one of a flow sparser than the flush
//! wait) has no followers to be coded with and no time to wait for them: it gets
//! [`lone_repairs`] repairs at once, as many as make the chance that it and all of them are
//! lost at most [`LONE_TARGET`], from a cautious loss estimate ([`cautious_loss`]) so that a
//! fresh session, whose estimate rests on a few outcomes, does not under-protect them.
//! Lone datagrams sent together (queries from clients started at once) share repairs
//! sized to the group ([`group_repairs`]).

/// Below this loss rate no repair is sent: the residual loss would already be this low.
pub(crate) const NEGLIGIBLE_LOSS: f64 = 0.002;
/// Block failure probability aimed at (see the module docs). Lower means more repairs,
/// and at 10 % loss the tail delay follows the repair rate closely (a cluster of losses
/// is released only once as many repairs as losses have arrived), so this is set as low
/// as keeps a 2 Mbit/s stream of 1,200-byte datagrams at 10 % loss within 1.35 × the IP
/// bytes it sends raw (BENCHMARKS.md, "UDP over the tunnel").
pub(crate) const TARGET: f64 = 0.055;
/// Most datagrams a repair combines (bounds the coding work per repair).
pub(crate) const MAX_SPAN: usize = 64;

/// Chance a lone datagram and all its repairs are lost, at most (per direction: a query and
/// its answer both must arrive, so a DNS exchange fails about twice as often). Not 10⁻³:
/// a 10 % link then sits on the edge between 2 and 3 repairs (0.1³ = 10⁻³), and an
/// estimate a hair either side of 0.1 picks 2, leaving an exchange 2·10⁻³ to fail.
pub(crate) const LONE_TARGET: f64 = 5e-4;
/// Most repairs a lone datagram gets (at 20 % loss 4 reach 3·10⁻⁴; beyond that the cost
/// grows faster than the gain).
pub(crate) const MAX_LONE_REPAIRS: u32 = 4;
/// Outcomes behind a loss estimate counted at most: the long EWMA's memory (μ = 1/2048).
const MAX_OUTCOMES: u64 = 2048;

/// A cautious loss rate from an estimate `p` resting on `n` outcomes: Laplace's rule of
/// succession, `(p·n + 1)/(n + 2)`. A fresh session's estimate rests on a handful of
/// handshake-train copies, and a loss rate read off 16 copies as 0 or 6 % may well be
/// 10 %: under-protecting a lone datagram costs it, over-protecting costs a few small
/// packets until the outcomes accumulate (with none: 0.5; 30 loss-free ones: 0.03).
pub(crate) fn cautious_loss(p: f64, n: u64) -> f64 {
    if p.is_nan() {
        return 0.5;
    }
    let n = n.min(MAX_OUTCOMES) as f64;
    ((p.clamp(0.0, 1.0) * n + 1.0) / (n + 2.0)).min(0.5)
}

/// Repairs sent right behind a lone datagram: the fewest `k` with `p · q^k ≤`
/// [`LONE_TARGET`], where `p` is the (cautious) loss rate and `q` the chance a packet is
/// lost right after a lost one (`1 − p_BG` of the Gilbert model; `p` itself for random
/// loss), since the repairs follow the datagram back to back. 0 below
/// [`NEGLIGIBLE_LOSS`]; at most [`MAX_LONE_REPAIRS`].
pub(crate) fn lone_repairs(p: f64, q: f64) -> u32 {
    if p.is_nan() || p < NEGLIGIBLE_LOSS {
        return 0;
    }
    let q = if q.is_nan() { p } else { q.max(p).min(1.0) };
    let mut all_lost = p.min(1.0);
    let mut k = 0;
    // The relative slack keeps 0.1³ (1.0000000000000002e-3 in floating point) at the target.
    while all_lost > LONE_TARGET * (1.0 + 1e-9) && k < MAX_LONE_REPAIRS {
        all_lost *= q;
        k += 1;
    }
    k
}

/// Repairs shared by `g` lone datagrams sent together (before the first one's repairs
/// left): `lone` for one; for more, at least `lone` and as many as make the chance that
/// more of the group and its repairs are lost than there are repairs at most
/// [`LONE_TARGET`], at loss rate `p`. At most `g ·` [`MAX_LONE_REPAIRS`].
pub(crate) fn group_repairs(p: f64, lone: u32, g: u32) -> u32 {
    if g <= 1 || lone == 0 || p.is_nan() {
        return lone;
    }
    let p = p.clamp(0.0, 0.5);
    let most = g.saturating_mul(MAX_LONE_REPAIRS);
    let mut k = lone;
    while k < most && binomial_tail((g + k) as usize, p, k as usize) > LONE_TARGET * (1.0 + 1e-9) {
        k += 1;
    }
    k
}

/// Repairs per datagram sent for loss rate `p`, mean loss burst `burst` (packets) and `n`
/// datagrams per deadline window. 0 below [`NEGLIGIBLE_LOSS`]; at least one repair per
/// deadline window above it; at most 2.
pub(crate) fn repair_rate(p: f64, burst: f64, n: usize) -> f64 {
    if p.is_nan() || p < NEGLIGIBLE_LOSS {
        return 0.0;
    }
    let p = p.min(0.5);
    let b = if burst.is_finite() {
        burst.clamp(1.0, 8.0)
    } else {
        1.0
    };
    let n = n.clamp(2, MAX_SPAN);
    let tail = |m: usize| {
        let trials = ((n + m) as f64 / b).ceil() as usize;
        binomial_tail(trials, p, (m as f64 / b).floor() as usize)
    };
    // Every loss must see a repair before it leaves the window (two deadlines): at low
    // loss the block rule alone asks fewer than one repair per window.
    let floor = 1.0 / n as f64;
    let mut above = tail(0);
    for m in 1..=2 * n {
        let t = tail(m);
        if t <= TARGET {
            // Between m − 1 repairs (failing more often than the target) and m: the
            // fraction of the last repair that brings the failure rate to the target,
            // interpolated in log space, so the rate moves smoothly with the loss.
            let frac = if above > t && t > 0.0 {
                ((above.ln() - TARGET.ln()) / (above.ln() - t.ln())).clamp(0.0, 1.0)
            } else {
                1.0
            };
            return ((m as f64 - 1.0 + frac) / n as f64).max(floor);
        }
        above = t;
    }
    2.0
}

/// `P[Binomial(n, p) > k]`.
fn binomial_tail(n: usize, p: f64, k: usize) -> f64 {
    if k >= n {
        return 0.0;
    }
    let q = 1.0 - p;
    // pmf(0) = q^n, pmf(i+1) = pmf(i) · (n − i)/(i + 1) · p/q.
    let mut pmf = q.powi(n as i32);
    let mut cdf = pmf;
    for i in 0..k {
        pmf *= (n - i) as f64 / (i + 1) as f64 * p / q;
        cdf += pmf;
    }
    (1.0 - cdf).max(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_loss_no_repairs() {
        assert_eq!(repair_rate(0.0, 1.0, 16), 0.0);
        assert_eq!(repair_rate(0.001, 1.0, 16), 0.0);
        assert_eq!(repair_rate(f64::NAN, 1.0, 16), 0.0);
    }

    #[test]
    fn rate_grows_with_loss_and_bursts_and_stays_above_the_erasure_minimum() {
        let mut last = 0.0;
        for p in [0.01, 0.05, 0.1, 0.2, 0.3] {
            let r = repair_rate(p, 1.0, 16);
            assert!(r > p / (1.0 - p), "p {p}: {r}");
            assert!(r >= last);
            last = r;
        }
        assert!(repair_rate(0.1, 3.0, 16) > repair_rate(0.1, 1.0, 16));
        assert!(repair_rate(0.6, 8.0, 2) <= 2.0);
    }

    #[test]
    fn every_window_gets_a_repair_at_low_loss() {
        // The block rule alone asks about one repair per 41 datagrams at 1 %, longer than
        // the two deadlines a loss is held for repair.
        for n in [8, 15, 31] {
            assert!(repair_rate(0.01, 1.0, n) >= 1.0 / n as f64);
            assert!(repair_rate(0.003, 1.0, n) >= 1.0 / n as f64);
        }
        // Where the block rule asks more, the floor changes nothing.
        assert!(repair_rate(0.1, 1.0, 15) > 2.0 / 15.0);
    }

    #[test]
    fn lone_datagrams_get_copies_sized_to_the_loss() {
        assert_eq!(lone_repairs(0.0, 0.0), 0);
        assert_eq!(lone_repairs(0.001, 0.001), 0);
        assert_eq!(lone_repairs(0.01, 0.01), 1); // 10⁻⁴
        assert_eq!(lone_repairs(0.02, 0.02), 1); // 4·10⁻⁴
        assert_eq!(lone_repairs(0.03, 0.03), 2); // 2.7·10⁻⁵ (1 gives 9·10⁻⁴)
        assert_eq!(lone_repairs(0.1, 0.1), 3); // 10⁻⁴ (2 give 10⁻³)
                                               // A 10 % link's estimate either side of 0.1 gets the same count.
        assert_eq!(lone_repairs(0.095, 0.095), 3);
        assert_eq!(lone_repairs(0.11, 0.11), 3);
        assert_eq!(lone_repairs(0.2, 0.2), 4); // 3.2·10⁻⁴ (3 give 1.6·10⁻³)
        assert_eq!(lone_repairs(0.5, 0.5), MAX_LONE_REPAIRS);
        // Lone datagrams sent together share repairs sized to the group.
        assert_eq!(group_repairs(0.1, 3, 1), 3);
        assert_eq!(group_repairs(0.1, 2, 2), 3); // 3 of 5 lost: 4.6·10⁻⁴
        assert_eq!(group_repairs(0.0, 0, 10), 0);
        for g in 2..=10u32 {
            let k = group_repairs(0.1, 3, g);
            assert!(k >= group_repairs(0.1, 3, g - 1), "{g}");
            assert!(binomial_tail((g + k) as usize, 0.1, k as usize) <= LONE_TARGET * 1.001);
        }
        // Bursty loss: a copy right behind a lost packet is lost more often.
        assert!(lone_repairs(0.05, 0.5) > lone_repairs(0.05, 0.05));
        for p in [0.01, 0.05, 0.1, 0.15, 0.2] {
            let k = lone_repairs(p, p);
            assert!(p.powi(k as i32 + 1) <= LONE_TARGET * 1.001 || k == MAX_LONE_REPAIRS);
        }
    }

    #[test]
    fn cautious_loss_leans_high_on_few_outcomes_and_converges() {
        assert_eq!(cautious_loss(0.0, 0), 0.5);
        assert!((cautious_loss(0.0, 30) - 1.0 / 32.0).abs() < 1e-12);
        // 16 train copies with one lost: about 11 %, not 6 %.
        assert!((cautious_loss(1.0 / 16.0, 16) - 2.0 / 18.0).abs() < 1e-12);
        assert!((cautious_loss(0.1, 1_000_000) - 0.1).abs() < 1e-3);
        assert!(cautious_loss(0.0, 1_000_000) < NEGLIGIBLE_LOSS);
        assert_eq!(cautious_loss(f64::NAN, 10), 0.5);
    }

    #[test]
    fn binomial_tail_matches_small_cases() {
        // n = 2, p = 0.5: P[X > 0] = 0.75, P[X > 1] = 0.25.
        assert!((binomial_tail(2, 0.5, 0) - 0.75).abs() < 1e-12);
        assert!((binomial_tail(2, 0.5, 1) - 0.25).abs() < 1e-12);
        assert_eq!(binomial_tail(2, 0.5, 2), 0.0);
    }
}
