//! The scalar reference backend: one 256-byte product row per coefficient.
//!
//! Every SIMD backend is tested against these functions. They are also the fallback on
//! CPUs with no supported vector extension.

use crate::field::MUL_TABLE;

/// `dst ^= src`.
pub(crate) fn add_slice(dst: &mut [u8], src: &[u8]) {
    // u64 lanes: the compiler vectorises this loop without any target feature.
    let (d8, dt) = dst.split_at_mut(dst.len() / 8 * 8);
    let (s8, st) = src.split_at(d8.len());
    for (d, s) in d8.chunks_exact_mut(8).zip(s8.chunks_exact(8)) {
        let mut a = [0u8; 8];
        a.copy_from_slice(d);
        let mut b = [0u8; 8];
        b.copy_from_slice(s);
        d.copy_from_slice(&(u64::from_ne_bytes(a) ^ u64::from_ne_bytes(b)).to_ne_bytes());
    }
    for (d, s) in dt.iter_mut().zip(st) {
        *d ^= s;
    }
}

/// `dst ^= c·src` for `c` not in {0, 1}.
pub(crate) fn mul_add_slice(dst: &mut [u8], src: &[u8], c: u8) {
    let row = &MUL_TABLE[c as usize];
    for (d, s) in dst.iter_mut().zip(src) {
        *d ^= row[*s as usize];
    }
}

/// `dst = c·src` for `c` not in {0, 1}.
pub(crate) fn mul_slice(dst: &mut [u8], src: &[u8], c: u8) {
    let row = &MUL_TABLE[c as usize];
    for (d, s) in dst.iter_mut().zip(src) {
        *d = row[*s as usize];
    }
}

/// `buf = c·buf` for `c` not in {0, 1}.
pub(crate) fn scale_slice(buf: &mut [u8], c: u8) {
    let row = &MUL_TABLE[c as usize];
    for b in buf.iter_mut() {
        *b = row[*b as usize];
    }
}

/// `dst ^= c·src` for any `c`, including 0 and 1.
pub(crate) fn mul_add_any(dst: &mut [u8], src: &[u8], c: u8) {
    match c {
        0 => {}
        1 => add_slice(dst, src),
        c => mul_add_slice(dst, src, c),
    }
}

/// `dst ^= Σ coefs[i]·srcs[i]`, one source at a time: the scalar kernel, and the vector
/// backends' path for buffers shorter than one vector.
pub(crate) fn dot_add(dst: &mut [u8], srcs: &[&[u8]], coefs: &[u8]) {
    for (s, &c) in srcs.iter().zip(coefs) {
        mul_add_any(dst, s, c);
    }
}

/// `dsts[j] ^= coefs[j]·src`, one destination at a time (see [`dot_add`]).
pub(crate) fn mad_multi(dsts: &mut [&mut [u8]], src: &[u8], coefs: &[u8]) {
    for (d, &c) in dsts.iter_mut().zip(coefs) {
        mul_add_any(d, src, c);
    }
}

/// `dsts[j] ^= Σ_i coefs[j·k + i]·srcs[i]`, one destination at a time (see [`dot_add`]).
pub(crate) fn dot_add_multi(dsts: &mut [&mut [u8]], srcs: &[&[u8]], coefs: &[u8]) {
    let k = srcs.len();
    for (j, d) in dsts.iter_mut().enumerate() {
        dot_add(d, srcs, &coefs[j * k..(j + 1) * k]);
    }
}
