//! Prints GF(256) kernel throughput as ratios against baselines measured in the same run
//! (plain XOR, memcpy, reed-solomon-erasure), one thread, for every supported backend.
//! `cargo run --release -p ctcp-benches --bin gf256-report`
#![allow(clippy::expect_used)] // fixed, valid RS(10,4) parameters and shard shapes

use ctcp_gf256::{with_backend, Backend, Slices};
use reed_solomon_erasure::galois_8::{self, ReedSolomon};
use std::hint::black_box;
use std::time::Duration;

/// Best-of-7 GB/s of `f`, which processes `bytes` per call.
fn gbps(bytes: usize, mut f: impl FnMut()) -> f64 {
    let mut best = Duration::MAX;
    let iters = (64 << 20) / bytes.max(1) + 1;
    for _ in 0..7 {
        let t = ctcp_runtime::clock::now();
        for _ in 0..iters {
            f();
        }
        best = best.min(t.elapsed());
    }
    (bytes * iters) as f64 / best.as_secs_f64() / 1e9
}

fn main() {
    let sizes = [64usize, 1408, 1500, 16 << 10, 64 << 10];
    let backends: Vec<Backend> = Backend::all()
        .iter()
        .copied()
        .filter(|b| b.is_supported())
        .collect();
    println!("active backend: {}", ctcp_gf256::backend());
    let avx = with_backend(*backends.last().unwrap_or(&Backend::Scalar), |s| *s)
        .unwrap_or_else(Slices::active);
    for &n in &sizes {
        let src: Vec<u8> = (0..n).map(|i| (i * 7 + 3) as u8).collect();
        let mut dst = vec![0x5au8; n];
        // Baselines: the best plain XOR (our widest add_slice) and memcpy.
        let xor = gbps(n, || avx.add_slice(black_box(&mut dst), black_box(&src)));
        let memcpy = gbps(n, || black_box(&mut dst).copy_from_slice(black_box(&src)));
        let rse = gbps(n, || {
            galois_8::mul_slice_xor(black_box(0x8e), black_box(&src), black_box(&mut dst))
        });
        println!(
            "\n{n} B: xor {xor:.1} GB/s, memcpy {memcpy:.1} GB/s, rse mul_slice_xor {rse:.1} GB/s"
        );
        for &b in &backends {
            with_backend(b, |s| {
                let ma = gbps(n, || {
                    s.mul_add_slice(black_box(&mut dst), black_box(&src), 0x8e)
                });
                let mu = gbps(n, || {
                    s.mul_slice(black_box(&mut dst), black_box(&src), 0x8e)
                });
                let sc = gbps(n, || s.scale_slice(black_box(&mut dst), 0x8e));
                println!(
                    "  {b:<7} mul_add {ma:6.1} GB/s ({:.2}x xor, {:.2}x rse)  mul {mu:6.1}  scale {sc:6.1}",
                    ma / xor,
                    ma / rse
                );
            });
        }
    }
    // dot_slice over k sources vs the same work as k separate mul_add calls (1500 B).
    println!("\ndot_slice vs separate mul_add_slice calls, 1500 B:");
    let n = 1500;
    for k in [10usize, 16, 32] {
        let srcs_buf: Vec<Vec<u8>> = (0..k)
            .map(|j| (0..n).map(|i| (i * 13 + j) as u8).collect())
            .collect();
        let srcs: Vec<&[u8]> = srcs_buf.iter().map(|s| s.as_slice()).collect();
        let coefs: Vec<u8> = (0..k).map(|j| (j * 37 + 2) as u8).collect();
        let mut dst = vec![0u8; n];
        for &b in &backends {
            with_backend(b, |s| {
                let dot = gbps(n * k, || {
                    s.dot_slice(black_box(&mut dst), black_box(&srcs), &coefs)
                });
                let sep = gbps(n * k, || {
                    dst.fill(0);
                    for (src, &c) in srcs.iter().zip(&coefs) {
                        s.mul_add_slice(black_box(&mut dst), src, c);
                    }
                });
                println!(
                    "  {b:<7} k={k:2}: dot {dot:6.1} GB/s, separate {sep:6.1} GB/s, ratio {:.2}",
                    dot / sep
                );
            });
        }
    }
    // Reed-Solomon 10+4 encode of 1400-byte shards: our dot_multi vs reed-solomon-erasure.
    println!("\nReed-Solomon 10+4 encode, 1400-byte shards (source GB/s):");
    let (k, m, n) = (10usize, 4usize, 1400usize);
    let rs = ReedSolomon::new(k, m).expect("valid RS parameters");
    let mut shards: Vec<Vec<u8>> = (0..k + m)
        .map(|j| (0..n).map(|i| (i * 31 + j * 7) as u8).collect())
        .collect();
    let theirs = gbps(n * k, || rs.encode(black_box(&mut shards)).expect("encode"));
    // Same shape with a Cauchy-like parity matrix.
    let coefs: Vec<u8> = (0..m * k)
        .map(|x| ctcp_gf256::inv(((x / k) ^ (m + x % k)) as u8))
        .collect();
    let data: Vec<Vec<u8>> = shards[..k].to_vec();
    let srcs: Vec<&[u8]> = data.iter().map(|s| s.as_slice()).collect();
    let mut parity: Vec<Vec<u8>> = vec![vec![0u8; n]; m];
    for &b in &backends {
        with_backend(b, |s| {
            let ours = gbps(n * k, || {
                let mut p: Vec<&mut [u8]> = parity.iter_mut().map(|v| v.as_mut_slice()).collect();
                s.dot_multi(black_box(&mut p), black_box(&srcs), &coefs);
            });
            println!("  {b:<7} dot_multi {ours:6.2} GB/s vs reed-solomon-erasure {theirs:6.2} GB/s: {:.2}x", ours / theirs);
        });
    }
}
