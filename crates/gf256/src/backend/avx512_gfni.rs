//! AVX-512 + GFNI backend: one GF2P8AFFINEQB per 64 bytes with the bit matrix of the
//! coefficient (see `tables::AFFINE`), and masked loads and stores for the final partial
//! vector, so there is no tail loop and no minimum length.
#![allow(unsafe_code)]

use crate::tables::AFFINE;
use std::arch::x86_64::*;

/// Whether this CPU runs the AVX-512 + GFNI backend.
pub(crate) fn supported() -> bool {
    is_x86_feature_detected!("avx512f")
        && is_x86_feature_detected!("avx512bw")
        && is_x86_feature_detected!("gfni")
}

/// The multiply-by-`c` matrix in every 64-bit lane.
#[inline(always)]
unsafe fn matrix(c: u8) -> __m512i {
    // SAFETY: register-only intrinsic in avx512f-enabled callers.
    unsafe { _mm512_set1_epi64(AFFINE[c as usize] as i64) }
}

#[inline(always)]
unsafe fn mul(m: __m512i, x: __m512i) -> __m512i {
    // SAFETY: register-only intrinsic in gfni+avx512f-enabled callers.
    unsafe { _mm512_gf2p8affine_epi64_epi8::<0>(x, m) }
}

/// The lanes of the 64-byte vector at `i` that lie inside `n`.
#[inline(always)]
fn lanes(i: usize, n: usize) -> __mmask64 {
    let r = n - i;
    if r >= 64 {
        !0
    } else {
        (1u64 << r) - 1
    }
}

/// Loads the lanes of `p` selected by `k` (all ones: a plain load), zeroing the others.
#[inline(always)]
unsafe fn load(p: *const u8, k: __mmask64) -> __m512i {
    // SAFETY: callers pass a pointer whose lanes selected by `k` are readable; masked-off
    // lanes are not accessed and cannot fault.
    unsafe {
        if k == !0 {
            _mm512_loadu_si512(p.cast())
        } else {
            _mm512_maskz_loadu_epi8(k, p.cast())
        }
    }
}

/// Stores the lanes of `v` selected by `k` (all ones: a plain store).
#[inline(always)]
unsafe fn store(p: *mut u8, k: __mmask64, v: __m512i) {
    // SAFETY: callers pass a pointer whose lanes selected by `k` are writable.
    unsafe {
        if k == !0 {
            _mm512_storeu_si512(p.cast(), v)
        } else {
            _mm512_mask_storeu_epi8(p.cast(), k, v)
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

#[target_feature(enable = "avx512f,avx512bw,gfni")]
unsafe fn run(op: Op, dst: *mut u8, src: *const u8, n: usize, c: u8) {
    // SAFETY: `dst` and `src` each cover `n` bytes (equal lengths checked by the public
    // API); full vectors stay below `n` and the final partial one is masked to it. In
    // place (`dst == src`, `scale`) each vector is read before it is written.
    unsafe {
        let m = matrix(c);
        let one = |i: usize, k: __mmask64| {
            let x = load(src.add(i), k);
            let v = match op {
                Op::MulAdd => _mm512_xor_si512(load(dst.add(i), k), mul(m, x)),
                Op::Mul => mul(m, x),
                Op::Add => _mm512_xor_si512(load(dst.add(i), k), x),
            };
            store(dst.add(i), k, v);
        };
        let mut i = 0;
        while i + 256 <= n {
            one(i, !0);
            one(i + 64, !0);
            one(i + 128, !0);
            one(i + 192, !0);
            i += 256;
        }
        while i + 64 <= n {
            one(i, !0);
            i += 64;
        }
        if i < n {
            one(i, lanes(i, n));
        }
    }
}

/// `dst ^= Σ coefs[j]·srcs[j]` in sweeps of up to 512 bytes: eight accumulators stay in
/// registers while every source streams its 512 contiguous bytes through, so a symbol of
/// ~1.4 KB costs three sweeps over the sources.
#[target_feature(enable = "avx512f,avx512bw,gfni")]
unsafe fn dot_add_impl(dst: &mut [u8], srcs: &[&[u8]], coefs: &[u8]) {
    let n = dst.len();
    let mut i = 0;
    // SAFETY (all calls): forwarded contract; each sweep covers [i, min(i + 64·N, n)).
    unsafe {
        while n - i >= 512 {
            dot_sweep::<8>(dst, srcs, coefs, i);
            i += 512;
        }
        match (n - i).div_ceil(64) {
            0 => {}
            1 => dot_sweep::<1>(dst, srcs, coefs, i),
            2 => dot_sweep::<2>(dst, srcs, coefs, i),
            3 => dot_sweep::<3>(dst, srcs, coefs, i),
            4 => dot_sweep::<4>(dst, srcs, coefs, i),
            5 => dot_sweep::<5>(dst, srcs, coefs, i),
            6 => dot_sweep::<6>(dst, srcs, coefs, i),
            7 => dot_sweep::<7>(dst, srcs, coefs, i),
            _ => dot_sweep::<8>(dst, srcs, coefs, i),
        }
    }
}

/// One sweep of `dot_add_impl` over `N` vectors from byte `i`; the last may be partial.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,gfni")]
unsafe fn dot_sweep<const N: usize>(dst: &mut [u8], srcs: &[&[u8]], coefs: &[u8], i: usize) {
    let n = dst.len();
    // SAFETY: every source has `n` bytes (checked by the public API); vector q covers
    // [i + 64q, i + 64q + 64) masked to `n`, and the caller passes N <= ceil((n - i) / 64).
    unsafe {
        let d = dst.as_mut_ptr().add(i);
        let mut k = [!0u64; N];
        k[N - 1] = lanes(i + 64 * (N - 1), n);
        let mut a = [_mm512_setzero_si512(); N];
        for q in 0..N {
            a[q] = load(d.add(64 * q), k[q]);
        }
        for (s, &c) in srcs.iter().zip(coefs) {
            let m = matrix(c);
            let p = s.as_ptr().add(i);
            for q in 0..N {
                a[q] = _mm512_xor_si512(a[q], mul(m, load(p.add(64 * q), k[q])));
            }
        }
        for q in 0..N {
            store(d.add(64 * q), k[q], a[q]);
        }
    }
}

/// `dsts[o] ^= coefs[o]·src` for up to 4 outputs, each source vector loaded once.
#[target_feature(enable = "avx512f,avx512bw,gfni")]
unsafe fn mad_multi_impl(dsts: &mut [&mut [u8]], src: &[u8], coefs: &[u8]) {
    let n = src.len();
    let m = dsts.len().min(4);
    // SAFETY: every destination has `n` bytes (checked by the public API); accesses are
    // masked to lanes below `n`.
    unsafe {
        let mut t = [_mm512_setzero_si512(); 4];
        for (o, &c) in coefs.iter().take(m).enumerate() {
            t[o] = matrix(c);
        }
        let mut i = 0;
        while i < n {
            let k = lanes(i, n);
            let x = load(src.as_ptr().add(i), k);
            for (o, d) in dsts.iter_mut().take(m).enumerate() {
                let dp = d.as_mut_ptr().add(i);
                store(dp, k, _mm512_xor_si512(load(dp, k), mul(t[o], x)));
            }
            i += 64;
        }
    }
}

/// `dsts[o] ^= Σ_j coefs[o·k + j]·srcs[j]` for up to 4 outputs: each source vector is
/// loaded once for all outputs.
#[target_feature(enable = "avx512f,avx512bw,gfni")]
unsafe fn dot_add_multi_impl(dsts: &mut [&mut [u8]], srcs: &[&[u8]], coefs: &[u8]) {
    let k = srcs.len();
    let m = dsts.len().min(4);
    let n = dsts.first().map_or(0, |d| d.len());
    // SAFETY: all buffers have `n` bytes and `coefs` has m·k entries (checked by the
    // public API); accesses are masked to lanes below `n`.
    unsafe {
        let mut i = 0;
        while i < n {
            let lane = lanes(i, n);
            let mut acc = [_mm512_setzero_si512(); 4];
            for (j, s) in srcs.iter().enumerate() {
                let x = load(s.as_ptr().add(i), lane);
                for (o, a) in acc.iter_mut().take(m).enumerate() {
                    let c = *coefs.get_unchecked(o * k + j);
                    *a = _mm512_xor_si512(*a, mul(matrix(c), x));
                }
            }
            for (o, d) in dsts.iter_mut().take(m).enumerate() {
                let dp = d.as_mut_ptr().add(i);
                store(dp, lane, _mm512_xor_si512(load(dp, lane), acc[o]));
            }
            i += 64;
        }
    }
}

// Safe entry points. Each is only installed in the kernel table after `supported()`
// returned true; masked accesses serve every length, including those below one vector.

pub(crate) fn mul_add(dst: &mut [u8], src: &[u8], c: u8) {
    // SAFETY: AVX-512F/BW and GFNI were checked before this backend was selected; the
    // public API checked that the lengths are equal.
    unsafe { run(Op::MulAdd, dst.as_mut_ptr(), src.as_ptr(), dst.len(), c) }
}

pub(crate) fn mul_slice(dst: &mut [u8], src: &[u8], c: u8) {
    // SAFETY: as above.
    unsafe { run(Op::Mul, dst.as_mut_ptr(), src.as_ptr(), dst.len(), c) }
}

pub(crate) fn scale(buf: &mut [u8], c: u8) {
    let p = buf.as_mut_ptr();
    // SAFETY: as above, in place.
    unsafe { run(Op::Mul, p, p, buf.len(), c) }
}

pub(crate) fn add(dst: &mut [u8], src: &[u8]) {
    // SAFETY: as above.
    unsafe { run(Op::Add, dst.as_mut_ptr(), src.as_ptr(), dst.len(), 0) }
}

pub(crate) fn dot_add(dst: &mut [u8], srcs: &[&[u8]], coefs: &[u8]) {
    // SAFETY: as above; the public API checked every source length.
    unsafe { dot_add_impl(dst, srcs, coefs) }
}

pub(crate) fn mad_multi(dsts: &mut [&mut [u8]], src: &[u8], coefs: &[u8]) {
    // SAFETY: as above.
    unsafe { mad_multi_impl(dsts, src, coefs) }
}

pub(crate) fn dot_add_multi(dsts: &mut [&mut [u8]], srcs: &[&[u8]], coefs: &[u8]) {
    // SAFETY: as above.
    unsafe { dot_add_multi_impl(dsts, srcs, coefs) }
}
