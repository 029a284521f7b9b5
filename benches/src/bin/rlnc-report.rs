//! RLNC encode/decode throughput against reed-solomon-erasure block codes of the same data
//! and loss pattern, measured in the same run, one thread.
//! `cargo run --release -p ctcp-benches --bin rlnc-report` (criterion: `--bench rlnc`)

use ctcp_benches::rlnc_case::{RlncCase, SYMBOL};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use std::time::Duration;

/// Best-of-5 Gbit/s of source data for `f`, which codes `bytes` of source per call.
fn gbit(bytes: usize, mut f: impl FnMut()) -> f64 {
    let reps = (32 << 20) / bytes + 1;
    let mut best = Duration::MAX;
    for _ in 0..5 {
        let t = ctcp_runtime::clock::now();
        for _ in 0..reps {
            f();
        }
        best = best.min(t.elapsed());
    }
    (bytes * reps) as f64 * 8.0 / best.as_secs_f64() / 1e9
}

fn main() {
    println!(
        "GF(256) backend: {}, symbol size {SYMBOL} B",
        ctcp_gf256::backend()
    );
    println!(
        "{:>6} {:>5} {:>4} | {:>10} {:>10} {:>6} | {:>10} {:>10} {:>6}",
        "window", "loss", "m", "rlnc enc", "rse enc", "ratio", "rlnc dec", "rse rec", "ratio"
    );
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    for &k in &[16usize, 64, 256] {
        for &loss in &[0.10f64, 0.30] {
            let mut c = RlncCase::new(k, loss, &mut rng);
            let n = c.source_bytes();
            let enc = gbit(n, || c.encode_round());
            let dec = gbit(n, || c.decode_round());
            let (rse_enc, rse_rec) = if c.has_rse() {
                (gbit(n, || c.rse_encode()), gbit(n, || c.rse_reconstruct()))
            } else {
                (f64::NAN, f64::NAN)
            };
            println!(
                "{k:>6} {:>4.0}% {:>4} | {enc:>7.1} Gb {rse_enc:>7.1} Gb {:>6.2} | {dec:>7.1} Gb {rse_rec:>7.1} Gb {:>6.2}",
                loss * 100.0,
                c.m,
                enc / rse_enc,
                dec / rse_rec
            );
        }
    }
    println!("(k + m > 256 does not fit reed-solomon-erasure's GF(256) shard limit: NaN)");
}
