//! Criterion benchmark of data-packet protection (`ctcp_proto::crypto::PacketKey`: AES-256-GCM
//! with its full 16-byte tag since protocol version 9) against two baselines in the same
//! run: ring's AES-256-GCM used directly (the primitive `PacketKey` builds on, so the
//! difference is `PacketKey`'s own cost) and RustCrypto's `aes-gcm` with a 96-bit tag (the
//! one-pass way to keep the short tag of versions 5–8).
//! One full data packet: 8-byte header as associated data, 1422-byte body.
// criterion_group! generates undocumented functions; the setup calls use fixed 32-byte
// keys and datagram-sized inputs, so their expect()s cannot fail.
#![allow(missing_docs, clippy::expect_used)]

use aes_gcm::{AeadInPlace, KeyInit};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use ctcp_proto::crypto::Psk;
use ring::aead;
use std::hint::black_box;
use std::time::Duration;

type Gcm96 =
    aes_gcm::AesGcm<aes_gcm::aes::Aes256, aes_gcm::aead::consts::U12, aes_gcm::aead::consts::U12>;

const HEADER: usize = 8;
const BODY: usize = 1422;

fn nonce(pn: u64) -> [u8; 12] {
    let mut n = [0u8; 12];
    n[4..].copy_from_slice(&pn.to_be_bytes());
    n
}

fn packet(c: &mut Criterion) {
    let mut g = c.benchmark_group("packet");
    g.measurement_time(Duration::from_secs(2))
        .warm_up_time(Duration::from_millis(300))
        .throughput(Throughput::Bytes(BODY as u64));
    let key = [7u8; 32];
    let header = [3u8; HEADER];

    // ctcp's PacketKey (keys from the session schedule; the key itself does not matter).
    let psk = Psk::new(&key).expect("32-byte PSK");
    let (k, _) = psk.session_keys(&[1; 32], &[2; 32]);
    let mut sealed = header.to_vec();
    sealed.resize(HEADER + BODY, 0x5a);
    k.seal(1, &mut sealed, HEADER);
    let mut buf = Vec::with_capacity(HEADER + BODY + 16);
    g.bench_function("ctcp_seal", |b| {
        b.iter(|| {
            buf.clear();
            buf.extend_from_slice(&header);
            buf.resize(HEADER + BODY, 0x5a);
            k.seal(black_box(1), &mut buf, HEADER);
        })
    });
    g.bench_function("ctcp_open", |b| {
        b.iter(|| {
            buf.clear();
            buf.extend_from_slice(&sealed);
            k.open(black_box(1), &mut buf, HEADER).map(|p| p.len())
        })
    });

    // Baseline: ring, full tag.
    let rk = aead::LessSafeKey::new(
        aead::UnboundKey::new(&aead::AES_256_GCM, &key).expect("32-byte AES key"),
    );
    let mut ring_sealed = vec![0x5au8; BODY];
    let tag = rk
        .seal_in_place_separate_tag(
            aead::Nonce::assume_unique_for_key(nonce(1)),
            aead::Aad::from(&header),
            &mut ring_sealed,
        )
        .expect("seal");
    ring_sealed.extend_from_slice(tag.as_ref());
    let mut body = vec![0x5au8; BODY + 16];
    g.bench_function("ring_seal_128", |b| {
        b.iter(|| {
            body.truncate(BODY);
            let t = rk
                .seal_in_place_separate_tag(
                    aead::Nonce::assume_unique_for_key(nonce(black_box(1))),
                    aead::Aad::from(&header),
                    &mut body,
                )
                .expect("seal");
            body.extend_from_slice(t.as_ref());
        })
    });
    g.bench_function("ring_open_128", |b| {
        b.iter(|| {
            body.clear();
            body.extend_from_slice(&ring_sealed);
            rk.open_in_place(
                aead::Nonce::assume_unique_for_key(nonce(black_box(1))),
                aead::Aad::from(&header),
                &mut body,
            )
            .map(|p| p.len())
        })
    });

    // Baseline: RustCrypto aes-gcm, 96-bit tag.
    let rc = Gcm96::new((&key).into());
    let mut rc_body = vec![0x5au8; BODY];
    let rc_tag = rc
        .encrypt_in_place_detached((&nonce(1)).into(), &header, &mut rc_body)
        .expect("seal");
    g.bench_function("rustcrypto_seal_96", |b| {
        b.iter(|| {
            body.clear();
            body.resize(BODY, 0x5a);
            rc.encrypt_in_place_detached((&nonce(black_box(1))).into(), &header, &mut body)
                .map(|t| t[0])
        })
    });
    g.bench_function("rustcrypto_open_96", |b| {
        b.iter(|| {
            body.clear();
            body.extend_from_slice(&rc_body);
            rc.decrypt_in_place_detached((&nonce(black_box(1))).into(), &header, &mut body, &rc_tag)
                .is_ok()
        })
    });
    g.finish();
}

criterion_group!(benches, packet);
criterion_main!(benches);
