//! AVX2 + GFNI backend, for CPUs with GFNI but no AVX-512 (e.g. Intel's hybrid client
//! parts): one 32-byte VGF2P8AFFINEQB per vector with the coefficient's bit matrix, and a
//! masked overlapping final vector instead of a scalar tail.
#![allow(unsafe_code)]

use crate::backend::scalar;
use crate::tables::{AFFINE, TAIL_MASK};
use std::arch::x86_64::*;

/// Whether this CPU runs the AVX2 + GFNI backend.
pub(crate) fn supported() -> bool {
    is_x86_feature_detected!("avx2") && is_x86_feature_detected!("gfni")
}

/// The multiply-by-`c` matrix in every 64-bit lane.
#[inline(always)]
unsafe fn matrix(c: u8) -> __m256i {
    // SAFETY: register-only intrinsic in avx-enabled callers.
    unsafe { _mm256_set1_epi64x(AFFINE[c as usize] as i64) }
}

#[inline(always)]
unsafe fn mul(m: __m256i, x: __m256i) -> __m256i {
    // SAFETY: register-only intrinsic in gfni+avx-enabled callers.
    unsafe { _mm256_gf2p8affine_epi64_epi8::<0>(x, m) }
}

#[inline(always)]
unsafe fn load(p: *const u8) -> __m256i {
    // SAFETY: callers pass a pointer with 32 readable bytes.
    unsafe { _mm256_loadu_si256(p.cast()) }
}

#[inline(always)]
unsafe fn store(p: *mut u8, v: __m256i) {
    // SAFETY: callers pass a pointer with 32 writable bytes.
    unsafe { _mm256_storeu_si256(p.cast(), v) }
}

/// Where the vector covering byte `i` of `n` starts, and which of its lanes are new: a
/// full vector at `i`, or the last 32 bytes with only the lanes past `i` selected.
#[inline(always)]
unsafe fn step(i: usize, n: usize) -> (usize, __m256i) {
    // SAFETY: n >= 32 (callers fall back to scalar below), so n - 32 >= 0, and for a
    // partial vector 1 <= n - i <= 31, so the mask window lies inside TAIL_MASK.
    unsafe {
        if i + 32 <= n {
            (i, _mm256_set1_epi8(-1))
        } else {
            (n - 32, load(TAIL_MASK.0.as_ptr().add(n - i)))
        }
    }
}

/// Which single-source operation a pass performs.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Op {
    MulAdd,
    Mul,
    Add,
}

#[target_feature(enable = "avx2,gfni")]
unsafe fn run(op: Op, dst: *mut u8, src: *const u8, n: usize, c: u8) {
    // SAFETY: `dst` and `src` each cover `n >= 32` bytes; every vector lies within `n`.
    // The overlapping final vector only changes its new lanes (product masked for the
    // xor forms, blended for `Mul`, which may run in place for `scale`).
    unsafe {
        let m = matrix(c);
        let one = |at: usize, mask: __m256i| {
            let x = load(src.add(at));
            let v = match op {
                Op::MulAdd => {
                    _mm256_xor_si256(load(dst.add(at)), _mm256_and_si256(mul(m, x), mask))
                }
                Op::Add => _mm256_xor_si256(load(dst.add(at)), _mm256_and_si256(x, mask)),
                Op::Mul => _mm256_blendv_epi8(load(dst.add(at)), mul(m, x), mask),
            };
            store(dst.add(at), v);
        };
        let all = _mm256_set1_epi8(-1);
        let mut i = 0;
        while i + 128 <= n {
            one(i, all);
            one(i + 32, all);
            one(i + 64, all);
            one(i + 96, all);
            i += 128;
        }
        while i < n {
            let (at, mask) = step(i, n);
            one(at, mask);
            i = at + 32;
        }
    }
}

/// `dst ^= Σ coefs[j]·srcs[j]`, 128 bytes of `dst` in four accumulators across all sources.
#[target_feature(enable = "avx2,gfni")]
unsafe fn dot_add_impl(dst: &mut [u8], srcs: &[&[u8]], coefs: &[u8]) {
    let n = dst.len();
    // SAFETY: every source has `n >= 32` bytes (checked by the public API and the
    // wrapper); offsets stay within `n`; the final vector's product is masked.
    unsafe {
        let d = dst.as_mut_ptr();
        let mut i = 0;
        while i + 128 <= n {
            let mut a = [
                load(d.add(i)),
                load(d.add(i + 32)),
                load(d.add(i + 64)),
                load(d.add(i + 96)),
            ];
            for (s, &c) in srcs.iter().zip(coefs) {
                let m = matrix(c);
                let p = s.as_ptr().add(i);
                for (q, acc) in a.iter_mut().enumerate() {
                    *acc = _mm256_xor_si256(*acc, mul(m, load(p.add(32 * q))));
                }
            }
            for (q, acc) in a.iter().enumerate() {
                store(d.add(i + 32 * q), *acc);
            }
            i += 128;
        }
        while i < n {
            let (at, mask) = step(i, n);
            let mut acc = _mm256_setzero_si256();
            for (s, &c) in srcs.iter().zip(coefs) {
                acc = _mm256_xor_si256(acc, mul(matrix(c), load(s.as_ptr().add(at))));
            }
            let v = _mm256_xor_si256(load(d.add(at)), _mm256_and_si256(acc, mask));
            store(d.add(at), v);
            i = at + 32;
        }
    }
}

/// `dsts[o] ^= Σ_j coefs[o·k + j]·srcs[j]` for up to 4 outputs, each source vector loaded
/// once for all outputs. With one source this is `mad_multi`.
#[target_feature(enable = "avx2,gfni")]
unsafe fn dot_add_multi_impl(dsts: &mut [&mut [u8]], srcs: &[&[u8]], coefs: &[u8]) {
    let k = srcs.len();
    let m = dsts.len().min(4);
    let n = dsts.first().map_or(0, |d| d.len());
    // SAFETY: all buffers have `n >= 32` bytes and `coefs` has m·k entries (checked by
    // the public API and the wrapper); offsets stay within `n`.
    unsafe {
        let mut i = 0;
        while i < n {
            let (at, mask) = step(i, n);
            let mut acc = [_mm256_setzero_si256(); 4];
            for (j, s) in srcs.iter().enumerate() {
                let x = load(s.as_ptr().add(at));
                for (o, a) in acc.iter_mut().take(m).enumerate() {
                    let c = *coefs.get_unchecked(o * k + j);
                    *a = _mm256_xor_si256(*a, mul(matrix(c), x));
                }
            }
            for (o, d) in dsts.iter_mut().take(m).enumerate() {
                let dp = d.as_mut_ptr().add(at);
                store(
                    dp,
                    _mm256_xor_si256(load(dp), _mm256_and_si256(acc[o], mask)),
                );
            }
            i = at + 32;
        }
    }
}

// Safe entry points. Each is only installed in the kernel table after `supported()`
// returned true, and falls back to scalar for buffers shorter than one vector.

single_op_entry_points!(32);

pub(crate) fn dot_add(dst: &mut [u8], srcs: &[&[u8]], coefs: &[u8]) {
    if dst.len() < 32 {
        return scalar::dot_add(dst, srcs, coefs);
    }
    // SAFETY: as above; the public API checked every source length.
    unsafe { dot_add_impl(dst, srcs, coefs) }
}

pub(crate) fn mad_multi(dsts: &mut [&mut [u8]], src: &[u8], coefs: &[u8]) {
    dot_add_multi(dsts, &[src], coefs)
}

pub(crate) fn dot_add_multi(dsts: &mut [&mut [u8]], srcs: &[&[u8]], coefs: &[u8]) {
    if dsts.first().is_none_or(|d| d.len() < 32) {
        return scalar::dot_add_multi(dsts, srcs, coefs);
    }
    // SAFETY: as above.
    unsafe { dot_add_multi_impl(dsts, srcs, coefs) }
}
