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

/// Below this loss rate no repair is sent: the residual loss would already be this low.
pub(crate) const NEGLIGIBLE_LOSS: f64 = 0.002;
/// Block failure probability aimed at (see the module docs).
pub(crate) const TARGET: f64 = 0.06;
/// Most datagrams a repair combines (bounds the coding work per repair).
pub(crate) const MAX_SPAN: usize = 64;

/// Repairs per datagram sent for loss rate `p`, mean loss burst `burst` (packets) and `n`
/// datagrams per deadline window. 0 below [`NEGLIGIBLE_LOSS`]; at most 2.
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
            return (m as f64 - 1.0 + frac) / n as f64;
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
    fn binomial_tail_matches_small_cases() {
        // n = 2, p = 0.5: P[X > 0] = 0.75, P[X > 1] = 0.25.
        assert!((binomial_tail(2, 0.5, 0) - 0.75).abs() < 1e-12);
        assert!((binomial_tail(2, 0.5, 1) - 0.25).abs() < 1e-12);
        assert_eq!(binomial_tail(2, 0.5, 2), 0.0);
    }
}
