//! SSSE3 backend: 16-byte split-nibble lookups with PSHUFB and masked final vectors.
//! Multi-source and multi-output forms loop over the single-output kernel.
#![allow(unsafe_code)]

use crate::tables::{NIBBLE, TAIL_MASK};
use std::arch::x86_64::*;

/// Whether this CPU runs the SSSE3 backend.
pub(crate) fn supported() -> bool {
    is_x86_feature_detected!("ssse3")
}

#[inline(always)]
unsafe fn tables(c: u8) -> (__m128i, __m128i) {
    let t = NIBBLE.0[c as usize].as_ptr();
    // SAFETY: one table entry is 32 readable bytes.
    unsafe { (_mm_loadu_si128(t.cast()), _mm_loadu_si128(t.add(16).cast())) }
}

#[inline(always)]
unsafe fn mul(lo: __m128i, hi: __m128i, x: __m128i) -> __m128i {
    // SAFETY: register-only intrinsics in ssse3-enabled callers.
    unsafe {
        let mask = _mm_set1_epi8(0x0f);
        let l = _mm_and_si128(x, mask);
        let h = _mm_and_si128(_mm_srli_epi64(x, 4), mask);
        _mm_xor_si128(_mm_shuffle_epi8(lo, l), _mm_shuffle_epi8(hi, h))
    }
}

#[inline(always)]
unsafe fn tail_mask(r: usize) -> __m128i {
    // SAFETY: 1 <= r <= 15, so 16+r..32+r lies inside the 64-byte mask.
    unsafe { _mm_loadu_si128(TAIL_MASK.0.as_ptr().add(16 + r).cast()) }
}

/// Which operation a pass performs.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Op {
    MulAdd,
    Mul,
    Add,
}

#[target_feature(enable = "ssse3")]
unsafe fn run(op: Op, dst: *mut u8, src: *const u8, n: usize, c: u8) {
    // SAFETY: `dst` and `src` each cover `n >= 16` bytes (the safe wrappers check length
    // equality and fall back below 16); every offset stays within `n`. For `Mul` in place
    // (`dst == src`, used by `scale`) the final vector is blended so no byte is scaled twice.
    unsafe {
        let (lo, hi) = tables(c);
        let mut i = 0;
        let step = |at: usize, mask: __m128i| {
            let x = _mm_loadu_si128(src.add(at).cast());
            let d = _mm_loadu_si128(dst.add(at).cast());
            let v = match op {
                Op::MulAdd => _mm_xor_si128(d, _mm_and_si128(mul(lo, hi, x), mask)),
                Op::Add => _mm_xor_si128(d, _mm_and_si128(x, mask)),
                Op::Mul => _mm_or_si128(
                    _mm_and_si128(mul(lo, hi, x), mask),
                    _mm_andnot_si128(mask, d),
                ),
            };
            _mm_storeu_si128(dst.add(at).cast(), v);
        };
        let all = _mm_set1_epi8(-1);
        while i + 16 <= n {
            step(i, all);
            i += 16;
        }
        if i < n {
            step(n - 16, tail_mask(n - i));
        }
    }
}

single_op_entry_points!(16);
looped_multi_forms!();
