//! Every backend this CPU supports, diffed against the scalar reference; plus
//! reed-solomon-erasure's `galois_8` as an independent oracle.
#![allow(clippy::expect_used, clippy::unwrap_used)] // test helpers outside #[test] fns

use ctcp_gf256::{with_backend, Backend, Slices};
use proptest::prelude::*;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

fn backends() -> Vec<Backend> {
    let v: Vec<Backend> = Backend::all()
        .iter()
        .copied()
        .filter(|b| b.is_supported())
        .collect();
    eprintln!("testing backends: {v:?}");
    v
}

fn scalar() -> Slices {
    with_backend(Backend::Scalar, |s| *s).expect("scalar always runs")
}

fn bytes(rng: &mut ChaCha8Rng, n: usize) -> Vec<u8> {
    (0..n).map(|_| rng.gen()).collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// Single-source ops on random lengths, offsets and coefficients.
    #[test]
    fn single_ops_match_scalar(seed in any::<u64>(), len in 0usize..4096, doff in 0usize..64, soff in 0usize..64, c in any::<u8>()) {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let src_buf = bytes(&mut rng, len + soff);
        let dst_buf = bytes(&mut rng, len + doff);
        let src = &src_buf[soff..];
        let reference = scalar();
        for b in backends() {
            with_backend(b, |k| {
                let mut want = dst_buf.clone();
                let mut got = dst_buf.clone();
                reference.mul_add_slice(&mut want[doff..], src, c);
                k.mul_add_slice(&mut got[doff..], src, c);
                assert_eq!(got, want, "{b} mul_add len={len} c={c}");
                reference.mul_slice(&mut want[doff..], src, c);
                k.mul_slice(&mut got[doff..], src, c);
                assert_eq!(got, want, "{b} mul len={len} c={c}");
                reference.scale_slice(&mut want[doff..], c);
                k.scale_slice(&mut got[doff..], c);
                assert_eq!(got, want, "{b} scale len={len} c={c}");
                reference.add_slice(&mut want[doff..], src);
                k.add_slice(&mut got[doff..], src);
                assert_eq!(got, want, "{b} add len={len}");
            });
        }
    }

    /// Multi-source and multi-output forms, through the public chunking (> 4 outputs).
    #[test]
    fn multi_ops_match_scalar(seed in any::<u64>(), len in 0usize..2100, k in 1usize..=40, m in 1usize..=9, off in 0usize..40) {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let srcs_buf: Vec<Vec<u8>> = (0..k).map(|_| bytes(&mut rng, len + off)).collect();
        let srcs: Vec<&[u8]> = srcs_buf.iter().map(|s| &s[off..]).collect();
        let coefs = bytes(&mut rng, k * m);
        let dsts0: Vec<Vec<u8>> = (0..m).map(|_| bytes(&mut rng, len)).collect();
        let reference = scalar();
        for b in backends() {
            with_backend(b, |s| {
                let mut want = dsts0.clone();
                let mut got = dsts0.clone();
                {
                    let mut w: Vec<&mut [u8]> = want.iter_mut().map(|d| d.as_mut_slice()).collect();
                    let mut g: Vec<&mut [u8]> = got.iter_mut().map(|d| d.as_mut_slice()).collect();
                    reference.dot_add_multi(&mut w, &srcs, &coefs);
                    s.dot_add_multi(&mut g, &srcs, &coefs);
                }
                assert_eq!(got, want, "{b} dot_add_multi len={len} k={k} m={m}");
                {
                    let mut w: Vec<&mut [u8]> = want.iter_mut().map(|d| d.as_mut_slice()).collect();
                    let mut g: Vec<&mut [u8]> = got.iter_mut().map(|d| d.as_mut_slice()).collect();
                    reference.dot_multi(&mut w, &srcs, &coefs);
                    s.dot_multi(&mut g, &srcs, &coefs);
                }
                assert_eq!(got, want, "{b} dot_multi");
                {
                    let mut w: Vec<&mut [u8]> = want.iter_mut().map(|d| d.as_mut_slice()).collect();
                    let mut g: Vec<&mut [u8]> = got.iter_mut().map(|d| d.as_mut_slice()).collect();
                    reference.mad_multi(&mut w, srcs[0], &coefs[..m]);
                    s.mad_multi(&mut g, srcs[0], &coefs[..m]);
                }
                assert_eq!(got, want, "{b} mad_multi");
                let mut w1 = dsts0[0].clone();
                let mut g1 = dsts0[0].clone();
                reference.dot_add_slice(&mut w1, &srcs, &coefs[..k]);
                s.dot_add_slice(&mut g1, &srcs, &coefs[..k]);
                assert_eq!(g1, w1, "{b} dot_add");
                reference.dot_slice(&mut w1, &srcs, &coefs[..k]);
                s.dot_slice(&mut g1, &srcs, &coefs[..k]);
                assert_eq!(g1, w1, "{b} dot");
            });
        }
    }
}

#[test]
fn every_coefficient_on_every_backend() {
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let src = bytes(&mut rng, 1500);
    let dst = bytes(&mut rng, 1500);
    for b in backends() {
        with_backend(b, |k| {
            for c in 0..=255u8 {
                let mut got = dst.clone();
                k.mul_add_slice(&mut got, &src, c);
                for i in 0..src.len() {
                    assert_eq!(
                        got[i],
                        dst[i] ^ ctcp_gf256::mul(c, src[i]),
                        "{b} c={c} i={i}"
                    );
                }
            }
        });
    }
}

#[test]
fn reed_solomon_erasure_galois_8_agrees() {
    use reed_solomon_erasure::galois_8;
    let mut rng = ChaCha8Rng::seed_from_u64(9);
    for a in 0..=255u8 {
        for b in 0..=255u8 {
            assert_eq!(ctcp_gf256::mul(a, b), galois_8::mul(a, b));
        }
        if a != 0 {
            assert_eq!(ctcp_gf256::div(1, a), galois_8::div(1, a));
        }
    }
    let src = bytes(&mut rng, 1408);
    for c in [2u8, 3, 29, 142, 255] {
        let mut ours = bytes(&mut rng, 1408);
        let mut theirs = ours.clone();
        ctcp_gf256::mul_add_slice(&mut ours, &src, c);
        galois_8::mul_slice_xor(c, &src, &mut theirs);
        assert_eq!(ours, theirs, "c={c}");
    }
}

#[test]
fn forced_backend_is_reported() {
    // The process-wide choice is the best supported one unless CTCP_GF256_BACKEND forces it.
    if std::env::var("CTCP_GF256_BACKEND").is_err() {
        let best = *backends().last().expect("scalar at least");
        assert_eq!(ctcp_gf256::backend(), best);
    }
    assert_eq!("avx2".parse::<Backend>(), Ok(Backend::Avx2));
    assert!("nope".parse::<Backend>().is_err());
}

#[test]
#[should_panic(expected = "length mismatch")]
fn length_mismatch_panics_clearly() {
    ctcp_gf256::mul_add_slice(&mut [0u8; 10], &[0u8; 11], 3);
}
