//! AVX2 backend: 32-byte split-nibble lookups with VPSHUFB, one-pass multi-source and
//! multi-output kernels, and masked final vectors instead of scalar tails.
#![allow(unsafe_code)]

use crate::backend::scalar;
use crate::tables::{NIBBLE, TAIL_MASK};
use std::arch::x86_64::*;

/// Whether this CPU runs the AVX2 backend.
pub(crate) fn supported() -> bool {
    is_x86_feature_detected!("avx2")
}

#[inline(always)]
unsafe fn tables(c: u8) -> (__m256i, __m256i) {
    let t = NIBBLE.0[c as usize].as_ptr();
    // SAFETY: `t` points at 32 readable bytes (one table entry); unaligned loads are allowed.
    unsafe {
        (
            _mm256_broadcastsi128_si256(_mm_loadu_si128(t.cast())),
            _mm256_broadcastsi128_si256(_mm_loadu_si128(t.add(16).cast())),
        )
    }
}

#[inline(always)]
unsafe fn split(x: __m256i) -> (__m256i, __m256i) {
    // SAFETY: register-only intrinsics, called from avx2-enabled functions.
    unsafe {
        let mask = _mm256_set1_epi8(0x0f);
        (
            _mm256_and_si256(x, mask),
            _mm256_and_si256(_mm256_srli_epi64(x, 4), mask),
        )
    }
}

#[inline(always)]
unsafe fn mul(lo: __m256i, hi: __m256i, l: __m256i, h: __m256i) -> __m256i {
    // SAFETY: register-only intrinsics.
    unsafe { _mm256_xor_si256(_mm256_shuffle_epi8(lo, l), _mm256_shuffle_epi8(hi, h)) }
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

#[inline(always)]
unsafe fn tail_mask(r: usize) -> __m256i {
    // SAFETY: 1 <= r <= 31, so r..r+32 lies inside the 64-byte mask.
    unsafe { load(TAIL_MASK.0.as_ptr().add(r)) }
}

#[target_feature(enable = "avx2")]
unsafe fn mul_add_impl(dst: &mut [u8], src: &[u8], c: u8) {
    let n = dst.len();
    // SAFETY: every pointer offset below stays within `n` bytes of `dst` and `src`, which
    // have equal length (checked by the public API); the tail vector starts at n - 32 >= 0.
    unsafe {
        let (lo, hi) = tables(c);
        let (d, s) = (dst.as_mut_ptr(), src.as_ptr());
        let mut i = 0;
        while i + 128 <= n {
            for q in 0..4 {
                let at = i + 32 * q;
                let (l, h) = split(load(s.add(at)));
                store(
                    d.add(at),
                    _mm256_xor_si256(load(d.add(at)), mul(lo, hi, l, h)),
                );
            }
            i += 128;
        }
        while i + 64 <= n {
            let (l0, h0) = split(load(s.add(i)));
            let (l1, h1) = split(load(s.add(i + 32)));
            store(
                d.add(i),
                _mm256_xor_si256(load(d.add(i)), mul(lo, hi, l0, h0)),
            );
            store(
                d.add(i + 32),
                _mm256_xor_si256(load(d.add(i + 32)), mul(lo, hi, l1, h1)),
            );
            i += 64;
        }
        if i + 32 <= n {
            let (l, h) = split(load(s.add(i)));
            store(
                d.add(i),
                _mm256_xor_si256(load(d.add(i)), mul(lo, hi, l, h)),
            );
            i += 32;
        }
        if i < n {
            let at = n - 32;
            let (l, h) = split(load(s.add(at)));
            let p = _mm256_and_si256(mul(lo, hi, l, h), tail_mask(n - i));
            store(d.add(at), _mm256_xor_si256(load(d.add(at)), p));
        }
    }
}

#[target_feature(enable = "avx2")]
unsafe fn mul_impl(dst: &mut [u8], src: &[u8], c: u8) {
    let n = dst.len();
    // SAFETY: as in `mul_add_impl`; overlapping the final vector is harmless because every
    // output byte is recomputed from `src` (distinct from `dst` by the borrow rules).
    unsafe {
        let (lo, hi) = tables(c);
        let (d, s) = (dst.as_mut_ptr(), src.as_ptr());
        let mut i = 0;
        while i + 32 <= n {
            let (l, h) = split(load(s.add(i)));
            store(d.add(i), mul(lo, hi, l, h));
            i += 32;
        }
        if i < n {
            let at = n - 32;
            let (l, h) = split(load(s.add(at)));
            store(d.add(at), mul(lo, hi, l, h));
        }
    }
}

#[target_feature(enable = "avx2")]
unsafe fn scale_impl(buf: &mut [u8], c: u8) {
    let n = buf.len();
    // SAFETY: offsets stay within `n`; the final vector blends so bytes already scaled
    // keep their value.
    unsafe {
        let (lo, hi) = tables(c);
        let b = buf.as_mut_ptr();
        let mut i = 0;
        while i + 32 <= n {
            let (l, h) = split(load(b.add(i)));
            store(b.add(i), mul(lo, hi, l, h));
            i += 32;
        }
        if i < n {
            let at = n - 32;
            let old = load(b.add(at));
            let (l, h) = split(old);
            store(
                b.add(at),
                _mm256_blendv_epi8(old, mul(lo, hi, l, h), tail_mask(n - i)),
            );
        }
    }
}

#[target_feature(enable = "avx2")]
unsafe fn add_impl(dst: &mut [u8], src: &[u8]) {
    let n = dst.len();
    // SAFETY: as in `mul_add_impl`.
    unsafe {
        let (d, s) = (dst.as_mut_ptr(), src.as_ptr());
        let mut i = 0;
        while i + 64 <= n {
            store(d.add(i), _mm256_xor_si256(load(d.add(i)), load(s.add(i))));
            store(
                d.add(i + 32),
                _mm256_xor_si256(load(d.add(i + 32)), load(s.add(i + 32))),
            );
            i += 64;
        }
        if i + 32 <= n {
            store(d.add(i), _mm256_xor_si256(load(d.add(i)), load(s.add(i))));
            i += 32;
        }
        if i < n {
            let at = n - 32;
            let x = _mm256_and_si256(load(s.add(at)), tail_mask(n - i));
            store(d.add(at), _mm256_xor_si256(load(d.add(at)), x));
        }
    }
}

/// `dst ^= Σ coefs[j]·srcs[j]`, 64 bytes of `dst` kept in registers across all sources.
#[target_feature(enable = "avx2")]
unsafe fn dot_add_impl(dst: &mut [u8], srcs: &[&[u8]], coefs: &[u8]) {
    let n = dst.len();
    // SAFETY: every source has `n` bytes (checked by the public API); offsets stay within
    // `n`; the tail vector starts at n - 32 >= 0 and its product is masked to new lanes.
    unsafe {
        let d = dst.as_mut_ptr();
        let mut i = 0;
        // 128 bytes per pass: four accumulators amortise each source's table loads.
        while i + 128 <= n {
            let mut a = [
                load(d.add(i)),
                load(d.add(i + 32)),
                load(d.add(i + 64)),
                load(d.add(i + 96)),
            ];
            for (s, &c) in srcs.iter().zip(coefs) {
                let (lo, hi) = tables(c);
                let p = s.as_ptr().add(i);
                for (q, acc) in a.iter_mut().enumerate() {
                    let (l, h) = split(load(p.add(32 * q)));
                    *acc = _mm256_xor_si256(*acc, mul(lo, hi, l, h));
                }
            }
            for (q, acc) in a.iter().enumerate() {
                store(d.add(i + 32 * q), *acc);
            }
            i += 128;
        }
        while i + 64 <= n {
            let mut a0 = load(d.add(i));
            let mut a1 = load(d.add(i + 32));
            for (s, &c) in srcs.iter().zip(coefs) {
                let (lo, hi) = tables(c);
                let (l0, h0) = split(load(s.as_ptr().add(i)));
                let (l1, h1) = split(load(s.as_ptr().add(i + 32)));
                a0 = _mm256_xor_si256(a0, mul(lo, hi, l0, h0));
                a1 = _mm256_xor_si256(a1, mul(lo, hi, l1, h1));
            }
            store(d.add(i), a0);
            store(d.add(i + 32), a1);
            i += 64;
        }
        while i < n {
            let (at, mask) = if i + 32 <= n {
                (i, _mm256_set1_epi8(-1))
            } else {
                (n - 32, tail_mask(n - i))
            };
            let mut acc = _mm256_setzero_si256();
            for (s, &c) in srcs.iter().zip(coefs) {
                let (lo, hi) = tables(c);
                let (l, h) = split(load(s.as_ptr().add(at)));
                acc = _mm256_xor_si256(acc, mul(lo, hi, l, h));
            }
            store(
                d.add(at),
                _mm256_xor_si256(load(d.add(at)), _mm256_and_si256(acc, mask)),
            );
            i = at + 32;
        }
    }
}

/// `dsts[o] ^= coefs[o]·src` for up to 4 outputs, each source vector split once.
#[target_feature(enable = "avx2")]
unsafe fn mad_multi_impl(dsts: &mut [&mut [u8]], src: &[u8], coefs: &[u8]) {
    let n = src.len();
    let m = dsts.len().min(4);
    // SAFETY: every destination has `n` bytes (checked by the public API); offsets as above.
    unsafe {
        let mut t = [(_mm256_setzero_si256(), _mm256_setzero_si256()); 4];
        for (o, &c) in coefs.iter().take(m).enumerate() {
            t[o] = tables(c);
        }
        let mut i = 0;
        while i < n {
            let (at, mask) = if i + 32 <= n {
                (i, _mm256_set1_epi8(-1))
            } else {
                (n - 32, tail_mask(n - i))
            };
            let (l, h) = split(load(src.as_ptr().add(at)));
            for (o, d) in dsts.iter_mut().take(m).enumerate() {
                let p = _mm256_and_si256(mul(t[o].0, t[o].1, l, h), mask);
                let dp = d.as_mut_ptr().add(at);
                store(dp, _mm256_xor_si256(load(dp), p));
            }
            i = at + 32;
        }
    }
}

/// `dsts[o] ^= Σ_j coefs[o·k + j]·srcs[j]` for up to 4 outputs: each source vector is
/// loaded and split once for all outputs.
#[target_feature(enable = "avx2")]
unsafe fn dot_add_multi_impl(dsts: &mut [&mut [u8]], srcs: &[&[u8]], coefs: &[u8]) {
    let k = srcs.len();
    let m = dsts.len().min(4);
    let n = dsts.first().map_or(0, |d| d.len());
    // SAFETY: all buffers have `n` bytes and `coefs` has m·k entries (checked by the
    // public API); offsets stay within `n`.
    unsafe {
        let mut i = 0;
        while i < n {
            let (at, mask) = if i + 32 <= n {
                (i, _mm256_set1_epi8(-1))
            } else {
                (n - 32, tail_mask(n - i))
            };
            let mut acc = [_mm256_setzero_si256(); 4];
            for (j, s) in srcs.iter().enumerate() {
                let (l, h) = split(load(s.as_ptr().add(at)));
                for (o, a) in acc.iter_mut().take(m).enumerate() {
                    let (lo, hi) = tables(*coefs.get_unchecked(o * k + j));
                    *a = _mm256_xor_si256(*a, mul(lo, hi, l, h));
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

pub(crate) fn mul_add(dst: &mut [u8], src: &[u8], c: u8) {
    if dst.len() < 32 {
        return scalar::mul_add_slice(dst, src, c);
    }
    // SAFETY: AVX2 presence was checked before this backend was selected; lengths equal.
    unsafe { mul_add_impl(dst, src, c) }
}

pub(crate) fn mul_slice(dst: &mut [u8], src: &[u8], c: u8) {
    if dst.len() < 32 {
        return scalar::mul_slice(dst, src, c);
    }
    // SAFETY: as above.
    unsafe { mul_impl(dst, src, c) }
}

pub(crate) fn scale(buf: &mut [u8], c: u8) {
    if buf.len() < 32 {
        return scalar::scale_slice(buf, c);
    }
    // SAFETY: as above.
    unsafe { scale_impl(buf, c) }
}

pub(crate) fn add(dst: &mut [u8], src: &[u8]) {
    if dst.len() < 32 {
        return scalar::add_slice(dst, src);
    }
    // SAFETY: as above.
    unsafe { add_impl(dst, src) }
}

pub(crate) fn dot_add(dst: &mut [u8], srcs: &[&[u8]], coefs: &[u8]) {
    if dst.len() < 32 {
        return scalar::dot_add(dst, srcs, coefs);
    }
    // SAFETY: as above; the public API checked every source length.
    unsafe { dot_add_impl(dst, srcs, coefs) }
}

pub(crate) fn mad_multi(dsts: &mut [&mut [u8]], src: &[u8], coefs: &[u8]) {
    if src.len() < 32 {
        return scalar::mad_multi(dsts, src, coefs);
    }
    // SAFETY: as above.
    unsafe { mad_multi_impl(dsts, src, coefs) }
}

pub(crate) fn dot_add_multi(dsts: &mut [&mut [u8]], srcs: &[&[u8]], coefs: &[u8]) {
    if dsts.first().is_none_or(|d| d.len() < 32) {
        return scalar::dot_add_multi(dsts, srcs, coefs);
    }
    // SAFETY: as above.
    unsafe { dot_add_multi_impl(dsts, srcs, coefs) }
}
