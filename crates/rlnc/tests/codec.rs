//! Codec properties: any innovative set decodes byte-exact; deficits are exact; a clean
//! path does no arithmetic; hostile input never panics and memory stays bounded.

use ctcp_rlnc::{CodecConfig, Coefficients, Decoder, Encoder, Received, Recoder, RepairHeader};
use proptest::prelude::*;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const CFG: CodecConfig = CodecConfig {
    symbol_size: 128,
    window: 256,
};

fn payload(id: u64, rng: &mut ChaCha8Rng) -> Vec<u8> {
    let len = rng.gen_range(0..=CFG.max_payload());
    (0..len)
        .map(|i| (id as u8).wrapping_mul(31).wrapping_add(i as u8))
        .collect()
}

fn drain(dec: &mut Decoder, got: &mut [Option<Vec<u8>>]) {
    while let Some((id, p)) = dec.poll_decoded() {
        assert!(got[id as usize].is_none(), "symbol {id} released twice");
        got[id as usize] = Some(p.to_vec());
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Lose sources at random, send enough repairs over the window: everything decodes.
    #[test]
    fn random_loss_with_enough_repairs_decodes(seed in any::<u64>(), k in 1usize..120, loss in 0.0f64..0.6) {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut enc = Encoder::new(CFG);
        let mut dec = Decoder::new(CFG);
        let data: Vec<Vec<u8>> = (0..k as u64).map(|id| payload(id, &mut rng)).collect();
        let mut got = vec![None; k];
        let mut lost = 0;
        let mut lost_ids = Vec::new();
        let mut highest = None;
        for d in &data {
            let id = enc.push(d).unwrap();
            if rng.gen_bool(loss) { lost += 1; lost_ids.push(id); } else { dec.receive_source(id, d).unwrap(); highest = Some(id); }
        }
        drain(&mut dec, &mut got);
        // The receiver can only know of losses below the highest id it has seen.
        let visible = lost_ids.iter().filter(|&&id| highest.is_some_and(|h| id < h)).count();
        prop_assert_eq!(dec.status().deficit as usize, visible);
        let mut out = vec![0u8; CFG.symbol_size];
        let mut sent = 0;
        while dec.status().next_in_order < k as u64 {
            let h = enc.repair(0, k as u16, &mut out).unwrap();
            dec.receive_repair(&h, &out).unwrap();
            sent += 1;
            prop_assert!(sent <= lost + 8, "needed {} repairs for {} losses", sent, lost);
        }
        drain(&mut dec, &mut got);
        for (i, d) in data.iter().enumerate() {
            prop_assert_eq!(got[i].as_ref(), Some(d));
        }
        prop_assert_eq!(dec.status().deficit, 0);
    }

    /// A long transfer through a sliding window: sources arrive out of order within a
    /// reordering distance, some are lost, repairs over the live window fill the holes at
    /// random moments, and both ends retire as the in-order point moves. The arenas grow
    /// from their first slots while symbols are live, at ids that wrap the ring; every
    /// symbol comes out intact, once.
    #[test]
    fn a_sliding_window_that_grows_keeps_every_symbol(seed in any::<u64>(), reorder in 1usize..300, loss in 0.0f64..0.3) {
        let cfg = CodecConfig { symbol_size: 64, window: 1024 };
        let n = 3000u64;
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut enc = Encoder::new(cfg);
        let mut dec = Decoder::new(cfg);
        let data: Vec<Vec<u8>> = (0..n)
            .map(|id| (0..rng.gen_range(1..=cfg.max_payload())).map(|i| (id as u8) ^ (i as u8).wrapping_mul(7)).collect())
            .collect();
        let mut got = vec![None; n as usize];
        let mut flight: Vec<u64> = Vec::new();
        let mut out = vec![0u8; cfg.symbol_size];
        for id in 0..=n {
            let catch_up = id == n || enc.is_full() || rng.gen_bool(0.005);
            if catch_up && !enc.is_empty() {
                for f in flight.drain(..) {
                    dec.receive_source(f, &data[f as usize]).unwrap();
                }
                let mut repairs = 0;
                while dec.next_in_order() < enc.next_id() {
                    let first = enc.first_id();
                    let h = enc.repair(first, (enc.next_id() - first) as u16, &mut out).unwrap();
                    dec.receive_repair(&h, &out).unwrap();
                    repairs += 1;
                    prop_assert!(repairs <= cfg.window + 8);
                }
                drain(&mut dec, &mut got);
                let nio = dec.next_in_order();
                enc.retire_through(nio - 1);
                dec.retire_below(nio);
            }
            if id == n {
                break;
            }
            prop_assert_eq!(enc.push(&data[id as usize]).unwrap(), id);
            flight.push(id);
            if flight.len() > reorder {
                let f = flight.swap_remove(rng.gen_range(0..flight.len()));
                if !rng.gen_bool(loss) {
                    dec.receive_source(f, &data[f as usize]).unwrap();
                    drain(&mut dec, &mut got);
                }
            }
        }
        for (i, d) in data.iter().enumerate() {
            prop_assert_eq!(got[i].as_ref(), Some(d), "symbol {}", i);
        }
    }

    /// With too few repairs the deficit equals the true shortfall.
    #[test]
    fn deficit_is_exact_shortfall(seed in any::<u64>(), k in 4usize..100) {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut enc = Encoder::new(CFG);
        let mut dec = Decoder::new(CFG);
        let mut lost = 0u32;
        for id in 0..k as u64 {
            let d = payload(id, &mut rng);
            enc.push(&d).unwrap();
            // Always deliver the last one so the shortfall is visible.
            if id + 1 < k as u64 && rng.gen_bool(0.3) { lost += 1; } else { dec.receive_source(id, &d).unwrap(); }
        }
        let repairs = rng.gen_range(0..=lost);
        let mut out = vec![0u8; CFG.symbol_size];
        let mut innovative = 0;
        for _ in 0..repairs {
            let h = enc.repair(0, k as u16, &mut out).unwrap();
            if dec.receive_repair(&h, &out).unwrap() == Received::New { innovative += 1; }
        }
        prop_assert_eq!(dec.status().deficit, lost - innovative);
    }

    /// Arbitrary operations never panic and never hold more than the window.
    #[test]
    fn hostile_input_never_panics(ops in proptest::collection::vec((0u8..4, any::<u64>(), any::<u16>(), proptest::collection::vec(any::<u8>(), 0..200)), 0..60)) {
        let mut dec = Decoder::new(CFG);
        for (op, id, count, bytes) in ops {
            let id = id % 600;
            match op {
                0 => { let _ = dec.receive_source(id, &bytes); }
                1 => {
                    let h = RepairHeader { first: id, count, coefficients: Coefficients::Key(count) };
                    let _ = dec.receive_repair(&h, &bytes);
                }
                2 => {
                    let h = RepairHeader { first: id, count: count % 300, coefficients: Coefficients::Explicit(bytes.clone()) };
                    let mut coded = bytes.clone();
                    coded.resize(CFG.symbol_size, 0);
                    let _ = dec.receive_repair(&h, &coded);
                }
                _ => dec.retire_below(id),
            }
            while dec.poll_decoded().is_some() {}
            prop_assert!(dec.status().rank as usize <= CFG.window);
        }
    }
}

#[test]
fn clean_path_does_no_field_arithmetic() {
    let mut enc = Encoder::new(CFG);
    let mut dec = Decoder::new(CFG);
    for i in 0..10_000u64 {
        let p = vec![i as u8; 100];
        let id = enc.push(&p).unwrap();
        assert_eq!(dec.receive_source(id, &p).unwrap(), Received::New);
        assert_eq!(
            dec.poll_decoded().map(|(i, p)| (i, p.to_vec())),
            Some((id, p))
        );
        enc.retire_through(id);
        dec.retire_below(id + 1);
    }
    assert_eq!(dec.field_ops(), 0);
    assert_eq!(dec.status().next_in_order, 10_000);
}

#[test]
fn non_innovative_repairs_are_rare() {
    // Lose every source of a 32-symbol window; count repairs beyond 32 needed to decode.
    let cfg = CodecConfig {
        symbol_size: 64,
        window: 64,
    };
    let mut extra = 0u64;
    let windows = 2000u64;
    for w in 0..windows {
        let mut enc = Encoder::new(cfg);
        let mut dec = Decoder::new(cfg);
        for i in 0..32u64 {
            enc.push(&[(w + i) as u8; 10]).unwrap();
        }
        // Advance the key so windows use different coefficients.
        let mut out = vec![0u8; cfg.symbol_size];
        for _ in 0..(w % 500) {
            enc.repair(0, 32, &mut out).unwrap();
        }
        let mut sent = 0;
        while dec.status().next_in_order < 32 {
            let h = enc.repair(0, 32, &mut out).unwrap();
            dec.receive_repair(&h, &out).unwrap();
            sent += 1;
        }
        extra += sent - 32;
    }
    let per_window = extra as f64 / windows as f64 / 32.0;
    println!("extra repairs per symbol: {:.4} %", per_window * 100.0);
    assert!(per_window <= 0.005, "non-innovative overhead {per_window}");
}

#[test]
fn decoded_in_any_order_and_released_at_once() {
    let mut enc = Encoder::new(CFG);
    let mut dec = Decoder::new(CFG);
    let data: Vec<Vec<u8>> = (0..5u8).map(|i| vec![i; 20 + i as usize]).collect();
    for d in &data {
        enc.push(d).unwrap();
    }
    // Lose 1; receive 4,3 first (out of order), then a repair, then 0 and 2.
    dec.receive_source(4, &data[4]).unwrap();
    assert_eq!(
        dec.poll_decoded().map(|(i, _)| i),
        Some(4),
        "released on arrival"
    );
    dec.receive_source(3, &data[3]).unwrap();
    let mut out = vec![0u8; CFG.symbol_size];
    let h = enc.repair(0, 5, &mut out).unwrap();
    dec.receive_repair(&h, &out).unwrap();
    dec.receive_source(0, &data[0]).unwrap();
    assert_eq!(
        dec.status().deficit,
        1,
        "1 and 2 missing, one equation held"
    );
    assert_eq!(dec.status().rank, 1);
    assert_eq!(dec.status().seen, 2, "0 known, 1 is a pivot");
    dec.receive_source(2, &data[2]).unwrap();
    let mut got: Vec<(u64, Vec<u8>)> = Vec::new();
    while let Some((i, p)) = dec.poll_decoded() {
        got.push((i, p.to_vec()));
    }
    got.sort();
    assert_eq!(
        got.iter().map(|g| g.0).collect::<Vec<_>>(),
        vec![0, 1, 2, 3]
    );
    assert_eq!(got[1].1, data[1]);
    assert_eq!(
        dec.receive_source(1, &data[1]).unwrap(),
        Received::Duplicate
    );
}

#[test]
fn encoder_window_back_pressure_and_retire() {
    let cfg = CodecConfig {
        symbol_size: 64,
        window: 4,
    };
    let mut enc = Encoder::new(cfg);
    for _ in 0..4 {
        enc.push(b"x").unwrap();
    }
    assert!(enc.is_full());
    assert!(enc.push(b"y").is_err());
    enc.retire_through(1);
    assert_eq!(enc.first_id(), 2);
    enc.push(b"z").unwrap();
    assert_eq!(enc.source(4), Some(&b"z"[..]));
    assert!(enc.source(1).is_none());
    assert!(enc.push(&[0; 63]).is_err(), "payload beyond the symbol");
    let mut out = vec![0u8; 64];
    assert!(enc.repair(0, 2, &mut out).is_err(), "retired range");
    enc.retire_through(u64::MAX);
    assert!(enc.is_empty());
}

/// A symbol built in place over a dirty slot is the symbol `push` stores: same payload,
/// same repairs (the slot's tail is zeroed); an empty build adds nothing, a full window
/// never calls the builder, and a builder that overclaims is refused.
#[test]
fn symbols_built_in_place_equal_pushed_ones() {
    let cfg = CodecConfig {
        symbol_size: 64,
        window: 4,
    };
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let mut pushed = Encoder::new(cfg);
    let mut built = Encoder::new(cfg);
    for round in 0..6u64 {
        for _ in 0..2 {
            let len = rng.gen_range(1..=cfg.max_payload());
            let data: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
            let a = pushed.push(&data).unwrap();
            let b = built
                .push_with(|area| {
                    assert_eq!(area.len(), cfg.max_payload());
                    area.fill(0xa5);
                    area[..len].copy_from_slice(&data);
                    len
                })
                .unwrap();
            assert_eq!(b, Some(a));
            assert_eq!(built.source(a), Some(&data[..]));
        }
        assert_eq!(built.push_with(|_| 0).unwrap(), None, "an empty build");
        assert_eq!(built.next_id(), pushed.next_id());
        let (mut x, mut y) = (vec![0u8; 64], vec![0u8; 64]);
        let first = pushed.first_id();
        let hx = pushed.repair(first, 2, &mut x).unwrap();
        let hy = built.repair(first, 2, &mut y).unwrap();
        assert_eq!((hx, &x), (hy, &y), "round {round}");
        pushed.retire_through(first + 1);
        built.retire_through(first + 1);
    }
    let mut built_full = Encoder::new(cfg);
    for _ in 0..4 {
        built_full.push(b"x").unwrap();
    }
    assert!(built_full
        .push_with(|_| unreachable!("a full window calls no builder"))
        .is_err());
    let mut over = Encoder::new(cfg);
    assert!(over.push_with(|area| area.len() + 1).is_err());
    assert!(over.is_empty());
}

#[test]
fn out_of_window_is_refused_not_stored() {
    let mut dec = Decoder::new(CFG);
    assert!(dec.receive_source(CFG.window as u64, b"far").is_err());
    let h = RepairHeader {
        first: 0,
        count: u16::MAX,
        coefficients: Coefficients::Key(1),
    };
    assert!(dec.receive_repair(&h, &[0; CFG.symbol_size]).is_err());
    let h = RepairHeader {
        first: 0,
        count: 3,
        coefficients: Coefficients::Explicit(vec![1, 2]),
    };
    assert!(dec.receive_repair(&h, &[0; CFG.symbol_size]).is_err());
}

#[test]
fn recoded_symbols_decode() {
    let mut enc = Encoder::new(CFG);
    let mut relay = Recoder::new(CFG, 99);
    let mut dec = Decoder::new(CFG);
    let data: Vec<Vec<u8>> = (0..20u8).map(|i| vec![i.wrapping_mul(7); 50]).collect();
    let mut out = vec![0u8; CFG.symbol_size];
    for d in &data {
        let id = enc.push(d).unwrap();
        if !id.is_multiple_of(3) {
            relay.add_source(id, d).unwrap();
        }
    }
    for _ in 0..10 {
        let h = enc.repair(0, 20, &mut out).unwrap();
        relay.add_repair(&h, &out).unwrap();
    }
    let mut rounds = 0;
    while dec.status().next_in_order < 20 {
        let h = relay.recode(&mut out).unwrap();
        assert!(matches!(h.coefficients, Coefficients::Explicit(_)));
        dec.receive_repair(&h, &out).unwrap();
        rounds += 1;
        assert!(rounds < 30);
    }
    let mut got = vec![None; 20];
    drain(&mut dec, &mut got);
    for (i, d) in data.iter().enumerate() {
        assert_eq!(got[i].as_ref(), Some(d));
    }
}

/// Giving up on lost symbols moves the frontier past them, keeps decoding what comes
/// after, and never releases a given-up symbol or blocks the window.
#[test]
fn give_up_skips_lost_symbols_and_keeps_decoding() {
    let cfg = CodecConfig {
        symbol_size: 128,
        window: 16,
    };
    let mut enc = Encoder::new(CodecConfig { window: 8, ..cfg });
    let mut dec = Decoder::new(cfg);
    let mut out = vec![0u8; cfg.symbol_size];
    let mut released = Vec::new();
    for round in 0..40u64 {
        if enc.is_full() {
            enc.retire_through(enc.first_id());
        }
        let id = enc.push(&[round as u8; 10]).unwrap();
        assert_eq!(id, round);
        // Every third symbol is lost and never repaired: given up once the sender's
        // window has moved past it.
        if round % 3 != 1 {
            dec.receive_source(id, &[round as u8; 10]).unwrap();
        }
        dec.give_up_below(enc.first_id());
        while let Some((i, p)) = dec.poll_decoded() {
            assert_eq!(p, &[i as u8; 10][..]);
            released.push(i);
        }
    }
    // 0..40 less the 13 lost; the window is 32..40.
    assert_eq!(released.len(), 27);
    assert_eq!(dec.status().next_in_order, 34);
    // 34 and 37 are missing in the live window: two repairs over it decode both.
    let first = enc.first_id();
    let count = (enc.next_id() - first) as u16;
    for _ in 0..2 {
        let h = enc.repair(first, count, &mut out).unwrap();
        assert_eq!(dec.receive_repair(&h, &out), Ok(Received::New));
    }
    let mut got: Vec<u64> = std::iter::from_fn(|| dec.poll_decoded().map(|(i, _)| i)).collect();
    got.sort_unstable();
    assert_eq!(got, vec![34, 37]);
    assert_eq!(dec.status().next_in_order, 40);
}
