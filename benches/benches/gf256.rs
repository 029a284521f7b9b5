//! Criterion benchmarks of the GF(256) kernels per backend and size, with XOR, memcpy and
//! reed-solomon-erasure baselines in the same run. Ratios: `--bin gf256-report`.
#![allow(missing_docs)] // criterion_group! generates undocumented functions

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use ctcp_gf256::{with_backend, Backend};
use std::hint::black_box;
use std::time::Duration;

fn kernels(c: &mut Criterion) {
    let mut g = c.benchmark_group("gf256");
    g.measurement_time(Duration::from_secs(1))
        .warm_up_time(Duration::from_millis(300));
    for &n in &[64usize, 1408, 1500, 16 << 10, 64 << 10] {
        let src: Vec<u8> = (0..n).map(|i| i as u8).collect();
        let mut dst = vec![1u8; n];
        g.throughput(Throughput::Bytes(n as u64));
        g.bench_with_input(BenchmarkId::new("memcpy", n), &n, |b, _| {
            b.iter(|| dst.copy_from_slice(black_box(&src)))
        });
        g.bench_with_input(BenchmarkId::new("rse_mul_slice_xor", n), &n, |b, _| {
            b.iter(|| {
                reed_solomon_erasure::galois_8::mul_slice_xor(0x8e, black_box(&src), &mut dst)
            })
        });
        for &be in Backend::all().iter().filter(|b| b.is_supported()) {
            with_backend(be, |s| {
                g.bench_with_input(BenchmarkId::new(format!("{be}/xor"), n), &n, |b, _| {
                    b.iter(|| s.add_slice(&mut dst, black_box(&src)))
                });
                g.bench_with_input(BenchmarkId::new(format!("{be}/mul_add"), n), &n, |b, _| {
                    b.iter(|| s.mul_add_slice(&mut dst, black_box(&src), 0x8e))
                });
                g.bench_with_input(BenchmarkId::new(format!("{be}/mul"), n), &n, |b, _| {
                    b.iter(|| s.mul_slice(&mut dst, black_box(&src), 0x8e))
                });
            });
        }
    }
    g.finish();
}

criterion_group!(benches, kernels);
criterion_main!(benches);
