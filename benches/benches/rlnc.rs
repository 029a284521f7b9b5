//! Criterion benchmarks of the RLNC codec at window 16, 64 and 256 with 10 % and 30 %
//! loss, with reed-solomon-erasure's encode and reconstruct of the same data and loss
//! pattern in the same run. Ratios: `--bin rlnc-report`.
#![allow(missing_docs)] // criterion_group! generates undocumented functions

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use ctcp_benches::rlnc_case::RlncCase;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use std::time::Duration;

fn codec(c: &mut Criterion) {
    let mut g = c.benchmark_group("rlnc");
    g.measurement_time(Duration::from_secs(1))
        .warm_up_time(Duration::from_millis(300));
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    for &k in &[16usize, 64, 256] {
        for &loss in &[0.10f64, 0.30] {
            let mut case = RlncCase::new(k, loss, &mut rng);
            let id = format!("w{k}/loss{}", (loss * 100.0) as u32);
            g.throughput(Throughput::Bytes(case.source_bytes() as u64));
            g.bench_function(BenchmarkId::new("encode", &id), |b| {
                b.iter(|| case.encode_round())
            });
            g.bench_function(BenchmarkId::new("decode", &id), |b| {
                b.iter(|| case.decode_round())
            });
            if case.has_rse() {
                g.bench_function(BenchmarkId::new("rse_encode", &id), |b| {
                    b.iter(|| case.rse_encode())
                });
                g.bench_function(BenchmarkId::new("rse_reconstruct", &id), |b| {
                    b.iter(|| case.rse_reconstruct())
                });
            }
        }
    }
    g.finish();
}

criterion_group!(benches, codec);
criterion_main!(benches);
