//! AArch64 NEON backend: 16-byte split-nibble lookups with TBL (`vqtbl1q_u8`) and masked
//! overlapping final vectors, for ARM gateways. NEON is part of the AArch64 baseline, so
//! this backend is available on every AArch64 CPU. Built and tested on x86-64 hosts by
//! cross-compiling to `aarch64-unknown-linux-gnu` and running the tests under qemu-user
//! (see `.ci/run`).
#![allow(unsafe_code)]

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

single_op_entry_points!(16);
looped_multi_forms!();
