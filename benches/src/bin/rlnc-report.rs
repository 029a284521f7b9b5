//! RLNC encode/decode throughput against reed-solomon-erasure block codes of the same data
//! and loss pattern, measured in the same run, one thread.
//! `cargo run --release -p ctcp-benches --bin rlnc-report`
#![allow(clippy::expect_used)] // fixed, valid parameters

use ctcp_rlnc::{CodecConfig, Decoder, Encoder, RepairHeader};
use rand::{seq::SliceRandom, SeedableRng};
use rand_chacha::ChaCha8Rng;
use reed_solomon_erasure::galois_8::ReedSolomon;
use std::hint::black_box;
use std::time::Duration;

const S: usize = 1408;

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
        "GF(256) backend: {}, symbol size {S} B",
        ctcp_gf256::backend()
    );
    println!(
        "{:>6} {:>5} {:>4} | {:>10} {:>10} {:>6} | {:>10} {:>10} {:>6}",
        "window", "loss", "m", "rlnc enc", "rse enc", "ratio", "rlnc dec", "rse rec", "ratio"
    );
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    for &k in &[16usize, 64, 256] {
        for &loss in &[0.10f64, 0.30] {
            // Repairs to match the loss rate (at least one).
            let m = ((k as f64 * loss / (1.0 - loss)).ceil() as usize).max(1);
            let lost_n = ((k as f64 * loss).round() as usize).min(m);
            let data: Vec<Vec<u8>> = (0..k)
                .map(|i| (0..S - 2).map(|j| (i * 31 + j * 7) as u8).collect())
                .collect();
            let src_bytes = k * (S - 2);
            let cfg = CodecConfig {
                symbol_size: S,
                window: 4096,
            };

            // Encoder: push k sources, build m repairs over the whole window, retire.
            let mut enc = Encoder::new(cfg);
            let mut out = vec![vec![0u8; S]; m];
            let enc_rate = gbit(src_bytes, || {
                let first = enc.next_id();
                for d in &data {
                    enc.push(d).expect("window has room");
                }
                for o in out.iter_mut() {
                    black_box(enc.repair(first, k as u16, o).expect("valid range"));
                }
                enc.retire_through(enc.next_id() - 1);
            });

            // Decoder: the same loss pattern each time; repairs prepared once.
            let mut ids: Vec<usize> = (0..k).collect();
            ids.shuffle(&mut rng);
            let lost: Vec<usize> = ids[..lost_n].to_vec();
            let mut enc = Encoder::new(cfg);
            for d in &data {
                enc.push(d).expect("room");
            }
            let repairs: Vec<_> = (0..m + 2)
                .map(|_| {
                    let mut o = vec![0u8; S];
                    let h = enc.repair(0, k as u16, &mut o).expect("range");
                    (h, o)
                })
                .collect();
            // One long-lived decoder, as a session holds it: each round decodes the next k
            // ids of its sliding window (repair headers shifted to them), hands the
            // symbols out and retires them.
            let mut dec = Decoder::new(cfg);
            let mut base = 0u64;
            let dec_rate = gbit(src_bytes, || {
                for (i, d) in data.iter().enumerate() {
                    if !lost.contains(&i) {
                        dec.receive_source(base + i as u64, d).expect("in window");
                    }
                }
                for (h, o) in &repairs {
                    if dec.status().next_in_order == base + k as u64 {
                        break;
                    }
                    let h = RepairHeader {
                        first: base + h.first,
                        ..h.clone()
                    };
                    dec.receive_repair(&h, o).expect("in window");
                }
                assert_eq!(
                    dec.status().next_in_order,
                    base + k as u64,
                    "decode incomplete"
                );
                while let Some(x) = dec.poll_decoded() {
                    black_box(x);
                }
                base += k as u64;
                dec.retire_below(base);
            });

            // reed-solomon-erasure: k data + m parity shards (at most 256 shards in total).
            let (rse_enc, rse_rec) = if k + m <= 256 {
                let rs = ReedSolomon::new(k, m).expect("valid");
                let mut shards: Vec<Vec<u8>> = data
                    .iter()
                    .map(|d| {
                        let mut v = d.clone();
                        v.resize(S, 0);
                        v
                    })
                    .collect();
                shards.extend((0..m).map(|_| vec![0u8; S]));
                let e = gbit(src_bytes, || {
                    rs.encode(black_box(&mut shards)).expect("encode")
                });
                let r = gbit(src_bytes, || {
                    let mut opt: Vec<Option<Vec<u8>>> = shards.iter().cloned().map(Some).collect();
                    for &i in &lost {
                        opt[i] = None;
                    }
                    rs.reconstruct_data(&mut opt).expect("reconstruct");
                    black_box(&opt);
                });
                (e, r)
            } else {
                (f64::NAN, f64::NAN)
            };
            println!(
                "{k:>6} {:>4.0}% {m:>4} | {enc_rate:>7.1} Gb {rse_enc:>7.1} Gb {:>6.2} | {dec_rate:>7.1} Gb {rse_rec:>7.1} Gb {:>6.2}",
                loss * 100.0,
                enc_rate / rse_enc,
                dec_rate / rse_rec
            );
        }
    }
    println!("(k + m > 256 does not fit reed-solomon-erasure's GF(256) shard limit: NaN)");
}
