//! Element arithmetic in GF(2^8) with the polynomial x^8 + x^4 + x^3 + x^2 + 1 (0x11D).

/// The reduction polynomial, as used by ISA-L, Jerasure (w = 8), reed-solomon-erasure and RFC 8681.
pub const POLYNOMIAL: u16 = 0x11D;

const fn build_exp_log() -> ([u8; 512], [u8; 256]) {
    let mut exp = [0u8; 512];
    let mut log = [0u8; 256];
    let mut x: u16 = 1;
    let mut i = 0;
    while i < 255 {
        exp[i] = x as u8;
        exp[i + 255] = x as u8;
        log[x as usize] = i as u8;
        x <<= 1;
        if x & 0x100 != 0 {
            x ^= POLYNOMIAL;
        }
        i += 1;
    }
    // exp[510], exp[511] are never read by `mul` (log a + log b <= 508) but keep them defined.
    exp[510] = exp[0];
    exp[511] = exp[1];
    (exp, log)
}

const EXP_LOG: ([u8; 512], [u8; 256]) = build_exp_log();
/// `EXP[i] = g^i` for the generator g = 2, doubled so `EXP[log a + log b]` needs no reduction.
pub(crate) static EXP: [u8; 512] = EXP_LOG.0;
/// `LOG[a] = log_g(a)`; `LOG[0]` is meaningless and never read.
pub(crate) static LOG: [u8; 256] = EXP_LOG.1;

pub(crate) const fn slow_mul(a: u8, b: u8) -> u8 {
    let mut a = a as u16;
    let mut b = b;
    let mut p: u16 = 0;
    while b != 0 {
        if b & 1 != 0 {
            p ^= a;
        }
        a <<= 1;
        if a & 0x100 != 0 {
            a ^= POLYNOMIAL;
        }
        b >>= 1;
    }
    p as u8
}

const fn build_mul_table() -> [[u8; 256]; 256] {
    let mut t = [[0u8; 256]; 256];
    let mut c = 0;
    while c < 256 {
        let mut x = 0;
        while x < 256 {
            t[c][x] = slow_mul(c as u8, x as u8);
            x += 1;
        }
        c += 1;
    }
    t
}

/// `MUL_TABLE[c][x] = c·x`: one 256-byte product row per coefficient (64 KiB in all).
/// The scalar backend indexes one row per call, so it needs no log/exp and no branches.
pub static MUL_TABLE: [[u8; 256]; 256] = build_mul_table();

/// Multiplies two field elements.
#[inline]
pub fn mul(a: u8, b: u8) -> u8 {
    MUL_TABLE[a as usize][b as usize]
}

/// The multiplicative inverse of `a`, or `None` for zero.
#[inline]
pub fn checked_inv(a: u8) -> Option<u8> {
    if a == 0 {
        None
    } else {
        Some(EXP[255 - LOG[a as usize] as usize])
    }
}

/// The multiplicative inverse of `a`.
///
/// # Panics
/// Panics if `a` is zero, which has no inverse.
#[inline]
pub fn inv(a: u8) -> u8 {
    match checked_inv(a) {
        Some(v) => v,
        None => panic!("gf256::inv: zero has no multiplicative inverse"),
    }
}

/// `a / b`.
///
/// # Panics
/// Panics if `b` is zero.
#[inline]
pub fn div(a: u8, b: u8) -> u8 {
    mul(a, inv(b))
}

/// `g^n` for the field generator g = 2 (n taken modulo 255).
#[inline]
pub fn exp(n: usize) -> u8 {
    EXP[n % 255]
}

/// `a^n`.
pub fn pow(a: u8, n: u32) -> u8 {
    if n == 0 {
        return 1;
    }
    if a == 0 {
        return 0;
    }
    let l = (LOG[a as usize] as u64 * n as u64) % 255;
    EXP[l as usize]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_matches_shift_and_add() {
        for a in 0..=255u8 {
            for b in 0..=255u8 {
                assert_eq!(mul(a, b), slow_mul(a, b));
            }
        }
    }

    #[test]
    fn every_nonzero_element_has_an_inverse() {
        assert_eq!(checked_inv(0), None);
        for a in 1..=255u8 {
            assert_eq!(mul(a, inv(a)), 1, "a = {a}");
            assert_eq!(div(a, a), 1);
        }
    }

    #[test]
    fn field_axioms_exhaustive_on_pairs_and_sampled_triples() {
        for a in 0..=255u8 {
            assert_eq!(mul(a, 1), a);
            assert_eq!(mul(a, 0), 0);
            for b in 0..=255u8 {
                assert_eq!(mul(a, b), mul(b, a));
            }
        }
        // Associativity and distributivity over a broad deterministic sample of triples.
        for a in (0..=255u8).step_by(3) {
            for b in (0..=255u8).step_by(5) {
                for c in (0..=255u8).step_by(7) {
                    assert_eq!(mul(mul(a, b), c), mul(a, mul(b, c)));
                    assert_eq!(mul(a, b ^ c), mul(a, b) ^ mul(a, c));
                }
            }
        }
    }

    #[test]
    fn pow_matches_repeated_mul() {
        for a in [0u8, 1, 2, 3, 29, 200, 255] {
            let mut acc = 1u8;
            for n in 0..300u32 {
                assert_eq!(pow(a, n), acc, "a={a} n={n}");
                acc = mul(acc, a);
            }
        }
    }
}
