//! Backend selection: one table of kernel functions, chosen once at first use.

/// Safe entry points of the single-source operations for a backend module that defines
/// `enum Op { MulAdd, Mul, Add }` and `unsafe fn run(op, dst, src, n, c)` serving any
/// `n >= $width` (`dst == src` allowed for `Mul`, which `scale` uses in place). Shorter
/// buffers go to the scalar reference.
macro_rules! single_op_entry_points {
    ($width:expr) => {
        pub(crate) fn mul_add(dst: &mut [u8], src: &[u8], c: u8) {
            if dst.len() < $width {
                return $crate::backend::scalar::mul_add_slice(dst, src, c);
            }
            // SAFETY: this backend's `supported()` was checked before its kernels were
            // installed; the public API checked that the lengths are equal.
            unsafe { run(Op::MulAdd, dst.as_mut_ptr(), src.as_ptr(), dst.len(), c) }
        }

        pub(crate) fn mul_slice(dst: &mut [u8], src: &[u8], c: u8) {
            if dst.len() < $width {
                return $crate::backend::scalar::mul_slice(dst, src, c);
            }
            // SAFETY: as in `mul_add`.
            unsafe { run(Op::Mul, dst.as_mut_ptr(), src.as_ptr(), dst.len(), c) }
        }

        pub(crate) fn scale(buf: &mut [u8], c: u8) {
            if buf.len() < $width {
                return $crate::backend::scalar::scale_slice(buf, c);
            }
            let p = buf.as_mut_ptr();
            // SAFETY: as in `mul_add`; `run` reads each vector before writing it and
            // keeps already-scaled lanes of an overlapping final vector.
            unsafe { run(Op::Mul, p, p, buf.len(), c) }
        }

        pub(crate) fn add(dst: &mut [u8], src: &[u8]) {
            if dst.len() < $width {
                return $crate::backend::scalar::add_slice(dst, src);
            }
            // SAFETY: as in `mul_add`.
            unsafe { run(Op::Add, dst.as_mut_ptr(), src.as_ptr(), dst.len(), 0) }
        }
    };
}

/// Multi-source and multi-output forms as loops over the module's single-source
/// `mul_add` and `add`, for backends without one-pass kernels.
macro_rules! looped_multi_forms {
    () => {
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
    };
}

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2;
#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2_gfni;
#[cfg(target_arch = "x86_64")]
pub(crate) mod avx512_gfni;
#[cfg(target_arch = "aarch64")]
pub(crate) mod neon;
pub(crate) mod scalar;
#[cfg(target_arch = "x86_64")]
pub(crate) mod ssse3;

use std::sync::OnceLock;

/// A GF(256) slice-kernel implementation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Backend {
    /// Portable table-driven reference code.
    Scalar,
    /// x86-64 SSSE3: 16-byte PSHUFB split-nibble kernels.
    Ssse3,
    /// x86-64 AVX2: 32-byte VPSHUFB kernels with one-pass multi-source/-output forms.
    Avx2,
    /// x86-64 AVX2 + GFNI: one 32-byte GF2P8AFFINEQB per vector (CPUs with GFNI but
    /// without AVX-512).
    Avx2Gfni,
    /// x86-64 AVX-512 (F, BW) + GFNI: one 64-byte GF2P8AFFINEQB per vector, masked tails.
    Avx512Gfni,
    /// AArch64 NEON: 16-byte TBL split-nibble kernels.
    Neon,
}

impl Backend {
    /// The lower-case name used by `CTCP_GF256_BACKEND`.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Scalar => "scalar",
            Backend::Ssse3 => "ssse3",
            Backend::Avx2 => "avx2",
            Backend::Avx2Gfni => "avx2-gfni",
            Backend::Avx512Gfni => "avx512-gfni",
            Backend::Neon => "neon",
        }
    }

    /// Every backend this build knows, whether or not the CPU supports it, slowest
    /// first: the default is the last one the CPU supports.
    pub fn all() -> &'static [Backend] {
        &[
            Backend::Scalar,
            Backend::Neon,
            Backend::Ssse3,
            Backend::Avx2,
            Backend::Avx2Gfni,
            Backend::Avx512Gfni,
        ]
    }

    /// Whether this CPU can run the backend.
    pub fn is_supported(self) -> bool {
        match self {
            Backend::Scalar => true,
            #[cfg(target_arch = "x86_64")]
            Backend::Ssse3 => ssse3::supported(),
            #[cfg(target_arch = "x86_64")]
            Backend::Avx2 => avx2::supported(),
            #[cfg(target_arch = "x86_64")]
            Backend::Avx2Gfni => avx2_gfni::supported(),
            #[cfg(target_arch = "x86_64")]
            Backend::Avx512Gfni => avx512_gfni::supported(),
            #[cfg(target_arch = "aarch64")]
            Backend::Neon => neon::supported(),
            #[allow(unreachable_patterns)] // every arm above may be compiled in
            _ => false,
        }
    }

    /// The kernels of this backend, or `None` if the CPU lacks the instructions.
    pub(crate) fn kernels(self) -> Option<Kernels> {
        if !self.is_supported() {
            return None;
        }
        /// The kernel table of one backend module.
        macro_rules! kernels {
            ($backend:expr, $m:ident) => {
                Kernels {
                    backend: $backend,
                    add: $m::add,
                    mul_add: $m::mul_add,
                    mul: $m::mul_slice,
                    scale: $m::scale,
                    dot_add: $m::dot_add,
                    mad_multi: $m::mad_multi,
                    dot_add_multi: $m::dot_add_multi,
                }
            };
        }
        match self {
            Backend::Scalar => Some(Kernels::SCALAR),
            #[cfg(target_arch = "x86_64")]
            Backend::Ssse3 => Some(kernels!(self, ssse3)),
            #[cfg(target_arch = "x86_64")]
            Backend::Avx2 => Some(kernels!(self, avx2)),
            #[cfg(target_arch = "x86_64")]
            Backend::Avx2Gfni => Some(kernels!(self, avx2_gfni)),
            #[cfg(target_arch = "x86_64")]
            Backend::Avx512Gfni => Some(kernels!(self, avx512_gfni)),
            #[cfg(target_arch = "aarch64")]
            Backend::Neon => Some(kernels!(self, neon)),
            #[allow(unreachable_patterns)] // every arm above may be compiled in
            _ => None,
        }
    }
}

impl std::fmt::Display for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Backend {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Backend::all()
            .iter()
            .copied()
            .find(|b| b.name().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| format!("unknown GF(256) backend {s:?}"))
    }
}

/// `dsts[j] ^= coefs[j]·src` (one source, several outputs).
pub(crate) type MadMultiFn = fn(&mut [&mut [u8]], &[u8], &[u8]);
/// `dsts[j] ^= Σ_i coefs[j·k + i]·srcs[i]` (k sources, several outputs).
pub(crate) type DotMultiFn = fn(&mut [&mut [u8]], &[&[u8]], &[u8]);

/// Function pointers of one backend. Callers have already checked lengths and handled
/// the coefficients 0 and 1, so kernels see equal lengths and `c >= 2` (multi forms may see
/// any coefficient).
#[derive(Clone, Copy)]
pub(crate) struct Kernels {
    pub(crate) backend: Backend,
    pub(crate) add: fn(&mut [u8], &[u8]),
    pub(crate) mul_add: fn(&mut [u8], &[u8], u8),
    pub(crate) mul: fn(&mut [u8], &[u8], u8),
    pub(crate) scale: fn(&mut [u8], u8),
    /// `dst ^= Σ coefs[i]·srcs[i]`.
    pub(crate) dot_add: fn(&mut [u8], &[&[u8]], &[u8]),
    /// `dsts[j] ^= coefs[j]·src`, `dsts.len() <= 4`.
    pub(crate) mad_multi: MadMultiFn,
    /// `dsts[j] ^= Σ_i coefs[j·k + i]·srcs[i]`, `dsts.len() <= 4`, k = `srcs.len()`.
    pub(crate) dot_add_multi: DotMultiFn,
}

impl Kernels {
    pub(crate) const SCALAR: Kernels = Kernels {
        backend: Backend::Scalar,
        add: scalar::add_slice,
        mul_add: scalar::mul_add_slice,
        mul: scalar::mul_slice,
        scale: scalar::scale_slice,
        dot_add: scalar::dot_add,
        mad_multi: scalar::mad_multi,
        dot_add_multi: scalar::dot_add_multi,
    };
}

static ACTIVE: OnceLock<Kernels> = OnceLock::new();

/// The fastest backend this CPU supports.
pub(crate) fn best() -> Backend {
    Backend::all()
        .iter()
        .rev()
        .copied()
        .find(|b| b.is_supported())
        .unwrap_or(Backend::Scalar)
}

fn choose() -> Kernels {
    if let Ok(name) = std::env::var("CTCP_GF256_BACKEND") {
        match name.parse::<Backend>() {
            Ok(b) => match b.kernels() {
                Some(k) => return k,
                None => eprintln!(
                    "ctcp-gf256: backend {b} is not supported by this CPU; using {}",
                    best()
                ),
            },
            Err(e) => eprintln!("ctcp-gf256: {e} in CTCP_GF256_BACKEND; using {}", best()),
        }
    }
    best().kernels().unwrap_or(Kernels::SCALAR)
}

/// The kernels in use, chosen on first call.
#[inline]
pub(crate) fn active() -> &'static Kernels {
    ACTIVE.get_or_init(choose)
}
