//! GF(2^8) arithmetic and slice kernels for ctcp's network coding.
//!
//! Every coded packet passes through these functions, so they set the speed ceiling of the
//! whole transport. The field uses the polynomial 0x11D (ISA-L, Jerasure w = 8,
//! reed-solomon-erasure, RFC 8681). Addition is XOR.
//!
//! The slice functions dispatch once, at first use, to the fastest backend the CPU supports.
//! `CTCP_GF256_BACKEND=scalar|ssse3|avx2|avx2-gfni|avx512-gfni|neon` forces one (for tests
//! and benchmarks); [`backend()`] names the active one. No `-C target-cpu` is needed: one
//! portable binary runs at the speed of whatever CPU it lands on.
//!
//! # Backends
//!
//! | backend | instructions | per vector |
//! |---|---|---|
//! | `scalar` | a 256-byte product row per coefficient | 1 byte |
//! | `ssse3` | PSHUFB split nibble | 16 bytes |
//! | `avx2` | VPSHUFB split nibble, one-pass multi-source/multi-output | 32 bytes |
//! | `avx2-gfni` | VGF2P8AFFINEQB with the coefficient's 8×8 bit matrix | 32 bytes |
//! | `avx512-gfni` | the same on 64-byte vectors, masked tails | 64 bytes |
//! | `neon` (AArch64) | TBL split nibble | 16 bytes |
//!
//! GFNI's `gf2p8mulb` multiplies modulo 0x11B (the AES field) and cannot serve 0x11D, so the
//! GFNI backends use the affine instruction with a per-coefficient bit matrix; a unit test
//! emulates that instruction to check all 256 matrices on any CPU. Every backend the CPU
//! supports is diffed against the scalar reference by the property tests; the NEON backend
//! is cross-compiled and run under qemu-aarch64 in CI.
#![deny(unsafe_code)]

mod backend;
mod field;
mod tables;

pub use backend::Backend;
pub use field::{checked_inv, div, exp, inv, mul, pow, MUL_TABLE, POLYNOMIAL};

/// Largest number of outputs the multi-output kernels compute in one pass. Longer output
/// lists are processed in groups of this size.
pub const MAX_MULTI: usize = 4;

/// The backend the slice functions use in this process.
pub fn backend() -> Backend {
    backend::active().backend
}

/// Runs `f` against a specific backend's kernels, for tests and benchmarks that compare
/// backends in one process. Returns `None` if the CPU does not support `backend`.
pub fn with_backend<R>(backend: Backend, f: impl FnOnce(&Slices) -> R) -> Option<R> {
    backend.kernels().map(|k| f(&Slices { k }))
}

#[track_caller]
fn check_len(what: &str, dst: usize, src: usize) {
    assert!(
        dst == src,
        "gf256::{what}: length mismatch (destination {dst} bytes, source {src} bytes)"
    );
}

/// The slice operations bound to one backend. The free functions of this crate use the
/// process-wide backend; [`with_backend`] hands out others.
#[derive(Clone, Copy)]
pub struct Slices {
    k: backend::Kernels,
}

impl Slices {
    /// The slice operations of the process-wide backend.
    pub fn active() -> Slices {
        Slices {
            k: *backend::active(),
        }
    }

    /// Which backend these operations run on.
    pub fn backend(&self) -> Backend {
        self.k.backend
    }

    /// `dst ^= src` (field addition).
    ///
    /// # Panics
    /// Panics if the lengths differ.
    #[track_caller]
    pub fn add_slice(&self, dst: &mut [u8], src: &[u8]) {
        check_len("add_slice", dst.len(), src.len());
        (self.k.add)(dst, src)
    }

    /// `dst ^= c·src`: the inner loop of encoding and elimination.
    ///
    /// # Panics
    /// Panics if the lengths differ.
    #[track_caller]
    pub fn mul_add_slice(&self, dst: &mut [u8], src: &[u8], c: u8) {
        check_len("mul_add_slice", dst.len(), src.len());
        match c {
            0 => {}
            1 => (self.k.add)(dst, src),
            c => (self.k.mul_add)(dst, src, c),
        }
    }

    /// `dst = c·src`.
    ///
    /// # Panics
    /// Panics if the lengths differ.
    #[track_caller]
    pub fn mul_slice(&self, dst: &mut [u8], src: &[u8], c: u8) {
        check_len("mul_slice", dst.len(), src.len());
        match c {
            0 => dst.fill(0),
            1 => dst.copy_from_slice(src),
            c => (self.k.mul)(dst, src, c),
        }
    }

    /// `buf = c·buf`, in place (row normalisation).
    pub fn scale_slice(&self, buf: &mut [u8], c: u8) {
        match c {
            0 => buf.fill(0),
            1 => {}
            c => (self.k.scale)(buf, c),
        }
    }

    /// `dst = Σ coefs[i]·srcs[i]`: k sources into one destination in one pass.
    ///
    /// # Panics
    /// Panics if `srcs` and `coefs` differ in length or any source differs from `dst` in length.
    #[track_caller]
    pub fn dot_slice(&self, dst: &mut [u8], srcs: &[&[u8]], coefs: &[u8]) {
        dst.fill(0);
        self.dot_add_slice(dst, srcs, coefs);
    }

    /// `dst ^= Σ coefs[i]·srcs[i]`.
    ///
    /// # Panics
    /// Panics if `srcs` and `coefs` differ in length or any source differs from `dst` in length.
    #[track_caller]
    pub fn dot_add_slice(&self, dst: &mut [u8], srcs: &[&[u8]], coefs: &[u8]) {
        check_len("dot_add_slice (coefficients)", srcs.len(), coefs.len());
        for s in srcs {
            check_len("dot_add_slice", dst.len(), s.len());
        }
        if !srcs.is_empty() {
            (self.k.dot_add)(dst, srcs, coefs)
        }
    }

    /// `dsts[j] ^= coefs[j]·src`: one source into several destinations in one pass
    /// (elimination of one pivot row from several rows).
    ///
    /// # Panics
    /// Panics if `dsts` and `coefs` differ in length or any destination differs from `src`.
    #[track_caller]
    pub fn mad_multi(&self, dsts: &mut [&mut [u8]], src: &[u8], coefs: &[u8]) {
        check_len("mad_multi (coefficients)", dsts.len(), coefs.len());
        for d in dsts.iter() {
            check_len("mad_multi", d.len(), src.len());
        }
        for (ds, cs) in dsts.chunks_mut(MAX_MULTI).zip(coefs.chunks(MAX_MULTI)) {
            (self.k.mad_multi)(ds, src, cs)
        }
    }

    /// `dsts[j] = Σ_i coefs[j·k + i]·srcs[i]` with k = `srcs.len()` (row-major coefficients):
    /// k sources into several outputs in one pass (repair generation, block encoding).
    ///
    /// # Panics
    /// Panics if `coefs.len() != dsts.len() · srcs.len()` or any buffer length differs.
    #[track_caller]
    pub fn dot_multi(&self, dsts: &mut [&mut [u8]], srcs: &[&[u8]], coefs: &[u8]) {
        for d in dsts.iter_mut() {
            d.fill(0);
        }
        self.dot_add_multi(dsts, srcs, coefs);
    }

    /// `dsts[j] ^= Σ_i coefs[j·k + i]·srcs[i]`; see [`Slices::dot_multi`].
    ///
    /// # Panics
    /// As [`Slices::dot_multi`].
    #[track_caller]
    pub fn dot_add_multi(&self, dsts: &mut [&mut [u8]], srcs: &[&[u8]], coefs: &[u8]) {
        let k = srcs.len();
        check_len("dot_multi (coefficients)", coefs.len(), dsts.len() * k);
        for d in dsts.iter() {
            for s in srcs {
                check_len("dot_multi", d.len(), s.len());
            }
        }
        if k == 0 {
            return;
        }
        for (ds, cs) in dsts.chunks_mut(MAX_MULTI).zip(coefs.chunks(MAX_MULTI * k)) {
            (self.k.dot_add_multi)(ds, srcs, cs)
        }
    }
}

/// `dst ^= src` on the active backend. See [`Slices::add_slice`].
///
/// # Panics
/// Panics if the lengths differ.
#[track_caller]
pub fn add_slice(dst: &mut [u8], src: &[u8]) {
    Slices::active().add_slice(dst, src)
}

/// `dst ^= c·src` on the active backend. See [`Slices::mul_add_slice`].
///
/// # Panics
/// Panics if the lengths differ.
#[track_caller]
pub fn mul_add_slice(dst: &mut [u8], src: &[u8], c: u8) {
    Slices::active().mul_add_slice(dst, src, c)
}

/// `dst = c·src` on the active backend. See [`Slices::mul_slice`].
///
/// # Panics
/// Panics if the lengths differ.
#[track_caller]
pub fn mul_slice(dst: &mut [u8], src: &[u8], c: u8) {
    Slices::active().mul_slice(dst, src, c)
}

/// `buf = c·buf` on the active backend. See [`Slices::scale_slice`].
pub fn scale_slice(buf: &mut [u8], c: u8) {
    Slices::active().scale_slice(buf, c)
}

/// `dst = Σ coefs[i]·srcs[i]` on the active backend. See [`Slices::dot_slice`].
///
/// # Panics
/// Panics on any length mismatch.
#[track_caller]
pub fn dot_slice(dst: &mut [u8], srcs: &[&[u8]], coefs: &[u8]) {
    Slices::active().dot_slice(dst, srcs, coefs)
}

/// `dst ^= Σ coefs[i]·srcs[i]` on the active backend. See [`Slices::dot_add_slice`].
///
/// # Panics
/// Panics on any length mismatch.
#[track_caller]
pub fn dot_add_slice(dst: &mut [u8], srcs: &[&[u8]], coefs: &[u8]) {
    Slices::active().dot_add_slice(dst, srcs, coefs)
}

/// `dsts[j] ^= coefs[j]·src` on the active backend. See [`Slices::mad_multi`].
///
/// # Panics
/// Panics on any length mismatch.
#[track_caller]
pub fn mad_multi(dsts: &mut [&mut [u8]], src: &[u8], coefs: &[u8]) {
    Slices::active().mad_multi(dsts, src, coefs)
}

/// `dsts[j] = Σ_i coefs[j·k + i]·srcs[i]` on the active backend. See [`Slices::dot_multi`].
///
/// # Panics
/// Panics on any length mismatch.
#[track_caller]
pub fn dot_multi(dsts: &mut [&mut [u8]], srcs: &[&[u8]], coefs: &[u8]) {
    Slices::active().dot_multi(dsts, srcs, coefs)
}
