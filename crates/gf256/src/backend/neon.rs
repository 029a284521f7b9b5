//! AArch64 NEON backend: 16-byte split-nibble lookups with TBL (`vqtbl1q_u8`) and masked
//! overlapping final vectors, for ARM gateways. NEON is part of the AArch64 baseline, so
//! this backend is available on every AArch64 CPU. Built and tested on x86-64 hosts by
//! cross-compiling to `aarch64-unknown-linux-gnu` and running the tests under qemu-user
//! (see `.ci/run`).
#![allow(unsafe_code)]

use crate::backend::scalar;
use crate::tables::{NIBBLE, TAIL_MASK};
use std::arch::aarch64::*;

/// Whether this CPU runs the NEON backend.
pub(crate) fn supported() -> bool {
    std::arch::is_aarch64_feature_detected!("neon")
}

#[inline(always)]
unsafe fn tables(c: u8) -> (uint8x16_t, uint8x16_t) {
    let t = NIBBLE.0[c as usize].as_ptr();
    // SAFETY: one table entry is 32 readable bytes.
    unsafe { (vld1q_u8(t), vld1q_u8(t.add(16))) }
}

#[inline(always)]
unsafe fn mul(lo: uint8x16_t, hi: uint8x16_t, x: uint8x16_t) -> uint8x16_t {
    // SAFETY: register-only intrinsics. TBL yields 0 for indices >= 16, and the byte
    // shift leaves 0..15, so only the low nibble needs a mask.
    unsafe {
        let l = vandq_u8(x, vdupq_n_u8(0x0f));
        let h = vshrq_n_u8::<4>(x);
        veorq_u8(vqtbl1q_u8(lo, l), vqtbl1q_u8(hi, h))
    }
}

#[inline(always)]
unsafe fn tail_mask(r: usize) -> uint8x16_t {
    // SAFETY: 1 <= r <= 15, so 16+r..32+r lies inside the 64-byte mask.
    unsafe { vld1q_u8(TAIL_MASK.0.as_ptr().add(16 + r)) }
}

/// Which operation a pass performs.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Op {
    MulAdd,
    Mul,
    Add,
}

#[target_feature(enable = "neon")]
unsafe fn run(op: Op, dst: *mut u8, src: *const u8, n: usize, c: u8) {
    // SAFETY: `dst` and `src` each cover `n >= 16` bytes (the safe wrappers check length
    // equality and fall back below 16); every offset stays within `n`. For `Mul` in place
    // (`dst == src`, used by `scale`) the final vector is blended so no byte is scaled twice.
    unsafe {
        let (lo, hi) = tables(c);
        let step = |at: usize, mask: uint8x16_t| {
            let x = vld1q_u8(src.add(at));
            let d = vld1q_u8(dst.add(at));
            let v = match op {
                Op::MulAdd => veorq_u8(d, vandq_u8(mul(lo, hi, x), mask)),
                Op::Add => veorq_u8(d, vandq_u8(x, mask)),
                Op::Mul => vbslq_u8(mask, mul(lo, hi, x), d),
            };
            vst1q_u8(dst.add(at), v);
        };
        let all = vdupq_n_u8(0xff);
        let mut i = 0;
        while i + 16 <= n {
            step(i, all);
            i += 16;
        }
        if i < n {
            step(n - 16, tail_mask(n - i));
        }
    }
}

pub(crate) fn mul_add(dst: &mut [u8], src: &[u8], c: u8) {
    if dst.len() < 16 {
        return scalar::mul_add_slice(dst, src, c);
    }
    // SAFETY: NEON checked at selection; equal lengths >= 16.
    unsafe { run(Op::MulAdd, dst.as_mut_ptr(), src.as_ptr(), dst.len(), c) }
}

pub(crate) fn mul_slice(dst: &mut [u8], src: &[u8], c: u8) {
    if dst.len() < 16 {
        return scalar::mul_slice(dst, src, c);
    }
    // SAFETY: as above.
    unsafe { run(Op::Mul, dst.as_mut_ptr(), src.as_ptr(), dst.len(), c) }
}

pub(crate) fn scale(buf: &mut [u8], c: u8) {
    if buf.len() < 16 {
        return scalar::scale_slice(buf, c);
    }
    let p = buf.as_mut_ptr();
    // SAFETY: as above, in place: each full vector is read before it is written, and the
    // final vector keeps already-scaled lanes through the mask.
    unsafe { run(Op::Mul, p, p, buf.len(), c) }
}

pub(crate) fn add(dst: &mut [u8], src: &[u8]) {
    if dst.len() < 16 {
        return scalar::add_slice(dst, src);
    }
    // SAFETY: as above.
    unsafe { run(Op::Add, dst.as_mut_ptr(), src.as_ptr(), dst.len(), 0) }
}

fn mul_add_any(dst: &mut [u8], src: &[u8], c: u8) {
    match c {
        0 => {}
        1 => add(dst, src),
        c => mul_add(dst, src, c),
    }
}

pub(crate) fn dot_add(dst: &mut [u8], srcs: &[&[u8]], coefs: &[u8]) {
    for (s, &c) in srcs.iter().zip(coefs) {
        mul_add_any(dst, s, c);
    }
}

pub(crate) fn mad_multi(dsts: &mut [&mut [u8]], src: &[u8], coefs: &[u8]) {
    for (d, &c) in dsts.iter_mut().zip(coefs) {
        mul_add_any(d, src, c);
    }
}

pub(crate) fn dot_add_multi(dsts: &mut [&mut [u8]], srcs: &[&[u8]], coefs: &[u8]) {
    let k = srcs.len();
    for (o, d) in dsts.iter_mut().enumerate() {
        dot_add(d, srcs, &coefs[o * k..(o + 1) * k]);
    }
}
