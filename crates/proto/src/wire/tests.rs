//! Round trips and rejections of every packet and chunk layout.

use super::data::{ACK_DELAY_MAX_US, LATE_BACK_MAX};
use super::*;
use ctcp_rlnc::{Coefficients, RepairHeader};

#[test]
fn varint_round_trip() {
    for v in [
        0u64,
        1,
        63,
        64,
        16383,
        16384,
        (1 << 30) - 1,
        1 << 30,
        VARINT_MAX,
    ] {
        let mut out = Vec::new();
        put_varint(&mut out, v);
        assert_eq!(out.len(), varint_len(v));
        assert_eq!(Reader::new(&out).varint("v").unwrap(), v);
    }
}

/// xorshift64, for property loops without a dependency.
fn xorshift(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

#[test]
fn expand_picks_the_closest_candidate() {
    const W: u64 = 1 << 32;
    const H: u64 = W / 2;
    // RFC 9000 §A.3's example (largest 0xa82f30ea, 16 bits 0x9b32 → 0xa82f9b32), above
    // a 32-bit window: scaled by 2^16, and with the window's worth of high bits set.
    assert_eq!(
        expand_u32(0xa82f_30ea_0000 + 1, 0x9b32_0000),
        0xa82f_9b32_0000
    );
    assert_eq!(expand_u32(0x1_a82f_30ea + 1, 0xa82f_9b32), 0x1_a82f_9b32);
    // Wrapping forwards over 2^32, and a late packet from before the wrap.
    assert_eq!(expand_u32(0xffff_fff0 + 1, 5), 0x1_0000_0005);
    assert_eq!(expand_u32(0x1_0000_0005 + 1, 0xffff_fff0), 0xffff_fff0);
    // Just below, at and above the largest.
    let l = 0x5_0000_1000u64;
    for v in [l - 2, l - 1, l, l + 1, l + 2, l + 1000] {
        assert_eq!(expand_u32(l + 1, low32(v)), v, "{v:#x}");
    }
    // The edges of the window (expected − 2^31, expected + 2^31].
    let e = 0x7_1234_5678u64;
    assert_eq!(expand_u32(e, low32(e + H)), e + H);
    assert_eq!(expand_u32(e, low32(e - H + 1)), e - H + 1);
    assert_eq!(expand_u32(e, low32(e - H)), e + H, "a tie resolves upwards");
    // No candidate below 0 or above u64::MAX.
    assert_eq!(expand_u32(0, 0xffff_ffff), 0xffff_ffff);
    assert_eq!(expand_u32(3, 0x8000_0004), 0x8000_0004);
    assert_eq!(expand_u32(u64::MAX, 0), 0xffff_ffff_0000_0000);
    assert_eq!(expand_u32(u64::MAX - 2, 0xffff_ffff), u64::MAX);
    assert_eq!(expand_u32(u64::MAX, 0x7fff_ffff), 0xffff_ffff_7fff_ffff);
}

#[test]
fn expand_is_exact_inside_the_window() {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for bits in [24u32, 32] {
        let half = 1i64 << (bits - 1);
        for _ in 0..100_000 {
            let v = xorshift(&mut x) >> (xorshift(&mut x) % 64);
            // An expected value within (v − half, v + half], i.e. v ∈ [e − half + 1, e + half].
            let d = (xorshift(&mut x) % (1 << bits)) as i64 - half + 1;
            let e = v.wrapping_add_signed(-d);
            if (d > 0 && e > v) || (d < 0 && e < v) {
                continue; // wrapped around 0 or u64::MAX
            }
            assert_eq!(expand_truncated(e, low32(v), bits), v, "v {v:#x} e {e:#x}");
        }
    }
}

#[test]
fn expand_u24_edges() {
    const H: u64 = 1 << 23;
    let e = 0x7_1234_5678u64;
    let t = |v: u64| low32(v) & 0xff_ffff;
    assert_eq!(expand_u24(e, t(e + H)), e + H);
    assert_eq!(expand_u24(e, t(e - H + 1)), e - H + 1);
    assert_eq!(expand_u24(e, t(e - H)), e + H, "a tie resolves upwards");
    assert_eq!(expand_u24(0, 0xff_ffff), 0xff_ffff);
    assert_eq!(expand_u24(u64::MAX, 0), 0xffff_ffff_ff00_0000);
    // Wrapping forwards over 2^24, and a late packet from before the wrap.
    assert_eq!(expand_u24(0xff_fff0 + 1, 5), 0x100_0005);
    assert_eq!(expand_u24(0x100_0005 + 1, 0xff_fff0), 0xff_fff0);
    // Bits above the window are ignored.
    assert_eq!(expand_u24(0x100, 0xab00_0101), 0x101);
}

#[test]
fn data_header_round_trip() {
    for (pn, largest) in [
        (0u64, None),
        (3, None),
        (7, Some(6)),
        (5, Some(9)),
        (0x1_0000_0003, Some(0xffff_fffe)),
        (0xffff_fffe, Some(0x1_0000_0003)),
        (0x1234_5678_9abc_def0, Some(0x1234_5678_9abc_de00)),
    ] {
        let h = DataHeader {
            conn_id: 0x00c0_ffee,
            path: 0,
            pn,
        };
        let mut out = Vec::new();
        h.emit(&mut out);
        assert_eq!(out.len(), DATA_HEADER_LEN);
        assert_eq!(DataHeader::parse(&out, largest).unwrap(), h);
        assert_eq!(peek_conn_id(&out).unwrap(), (TYPE_DATA, 0x00c0_ffee));
        assert!(DataHeader::parse(&out[..DATA_HEADER_LEN - 1], largest).is_err());
    }
    // The wire keeps 24 bits: a number 2^24 away from the reference is a different one.
    let mut out = Vec::new();
    DataHeader {
        conn_id: 1,
        path: 0,
        pn: 5,
    }
    .emit(&mut out);
    assert_eq!(
        DataHeader::parse(&out, Some(1 << 24)).unwrap().pn,
        (1 << 24) + 5
    );
}

#[test]
fn handshake_round_trip_and_sizes() {
    for len in [INITIATE_LEN, 1436] {
        let i = Initiate {
            conn_id: 7,
            client_random: [3; 32],
            timestamp_ms: 99,
            train: 4,
            params: Params {
                symbol_size: 1408,
                window: 16384,
                stream_window: 1 << 25,
                session_window: 1 << 26,
                features: 0,
            },
            len,
            mac: [5; 16],
        };
        let mut out = Vec::new();
        i.emit(&mut out);
        assert_eq!(out.len(), len);
        assert_eq!(Initiate::parse(&out).unwrap(), i);
        assert_eq!(peek_conn_id(&out).unwrap(), (TYPE_INITIATE, 7));
        // Padding must be zeros; a datagram too short for the MAC is truncated.
        if len > INITIATE_LEN {
            let mut bad = out.clone();
            bad[INITIATE_LEN] = 1;
            assert!(Initiate::parse(&bad).is_err());
        }
        assert!(Initiate::parse(&out[..INITIATE_LEN - 1]).is_err());
    }
    assert!(Initiate::parse(&vec![TYPE_INITIATE; MAX_HANDSHAKE_LEN + 1]).is_err());
    for len in [ACCEPT_LEN, 1436] {
        let a = Accept {
            conn_id: 7,
            server_random: [4; 32],
            train: 3,
            train_seen: 2,
            train_spread: 5,
            train_span_us: 1234,
            params: Params {
                symbol_size: 1408,
                window: 16384,
                stream_window: 1 << 25,
                session_window: 1 << 26,
                features: 0,
            },
            len,
            mac: [6; 16],
        };
        let mut out = Vec::new();
        a.emit(&mut out);
        assert_eq!(out.len(), len);
        assert_eq!(Accept::parse(&out).unwrap(), a);
        let mut bad = out.clone();
        bad[1] = VERSION + 1;
        assert_eq!(Accept::parse(&bad), Err(WireError::Version(VERSION + 1)));
        assert!(Accept::parse(&out[..ACCEPT_LEN - 1]).is_err());
    }
}

#[test]
fn rejects_round_trip_and_never_outgrow_an_initiate() {
    let params = Params {
        symbol_size: 1280,
        window: 4096,
        stream_window: 1,
        session_window: 2,
        features: 0,
    };
    for (reason, signed, len) in [
        (RejectReason::Auth, None, REJECT_LEN),
        (RejectReason::Version, None, REJECT_LEN),
        (
            RejectReason::Params,
            Some((params, [9; 16])),
            REJECT_SIGNED_LEN,
        ),
        (
            RejectReason::Busy,
            Some((params, [9; 16])),
            REJECT_SIGNED_LEN,
        ),
    ] {
        let r = Reject {
            version: 77,
            conn_id: 5,
            echo: [3; REJECT_ECHO_LEN],
            reason,
            signed,
        };
        let mut out = Vec::new();
        r.emit(&mut out);
        assert_eq!(out.len(), len);
        assert!(len <= INITIATE_LEN);
        assert_eq!(Reject::parse(&out).unwrap(), r);
        assert_eq!(peek_conn_id(&out).unwrap(), (TYPE_REJECT, 5));
        assert!(Reject::parse(&out[..len - 1]).is_err());
        let mut longer = out.clone();
        longer.push(0);
        assert!(Reject::parse(&longer).is_err());
    }
    // An unauthenticated REJECT also answers a version-5 INITIATE (63 bytes) without
    // outgrowing it: asserted at compile time beside the constants.
}

#[test]
fn params_negotiate_windows_down_and_refuse_a_symbol_size_mismatch() {
    let ours = Params {
        symbol_size: 1408,
        window: 16384,
        stream_window: 100,
        session_window: 200,
        features: 0,
    };
    let peer = Params {
        window: 4096,
        session_window: 300,
        ..ours
    };
    let got = ours.negotiate(&peer).unwrap();
    assert_eq!(
        (got.window, got.stream_window, got.session_window),
        (4096, 100, 200)
    );
    assert_eq!(
        got,
        peer.negotiate(&ours).unwrap(),
        "both ends settle the same"
    );
    let other = Params {
        symbol_size: 1280,
        ..ours
    };
    assert_eq!(
        ours.negotiate(&other),
        Err(ParamMismatch {
            parameter: "symbol_size",
            ours: 1408,
            peer: 1280
        })
    );
    // An unknown feature bit is refused; the datagram bit is optional and negotiated to
    // what both ends set.
    let unknown = Params {
        features: 1 << 7,
        ..ours
    };
    assert_eq!(ours.negotiate(&unknown).unwrap_err().parameter, "features");
    let with = Params {
        features: FEATURE_DATAGRAMS,
        ..ours
    };
    let without = Params {
        features: 0,
        ..ours
    };
    assert_eq!(with.negotiate(&with).unwrap().features, FEATURE_DATAGRAMS);
    assert_eq!(with.negotiate(&without).unwrap().features, 0);
    assert_eq!(without.negotiate(&with).unwrap().features, 0);
}

#[test]
fn datagram_chunks_round_trip_and_refuse_bad_lengths() {
    use ctcp_rlnc::{Coefficients, RepairHeader};
    let mut out = Vec::new();
    emit_datagram(&mut out, 0x0100_0005, b"hello");
    let got: Vec<_> = Chunks::new(&out, 64, 0)
        .with_datagram_base(0x0100_0000)
        .collect();
    assert_eq!(
        got,
        vec![Ok(Chunk::Datagram {
            id: 0x0100_0005,
            payload: b"hello"
        })]
    );
    let header = RepairHeader {
        first: 7,
        count: 3,
        coefficients: Coefficients::Key(42),
    };
    out.clear();
    emit_datagram_repair(&mut out, &header, &[1, 2, 3, 4]);
    assert_eq!(out.len(), DATAGRAM_REPAIR_HEADER_LEN + 4);
    let got: Vec<_> = Chunks::new(&out, 64, 0).collect();
    assert_eq!(
        got,
        vec![Ok(Chunk::DatagramRepair {
            header,
            data: &[1, 2, 3, 4]
        })]
    );
    // A datagram longer than a symbol, a repair of count 0 or longer than a symbol.
    out.clear();
    emit_datagram(&mut out, 1, &[0; 63]);
    assert!(Chunks::new(&out, 64, 0).next().unwrap().is_err());
    let bad = [CHUNK_DATAGRAM_REPAIR, 0, 0, 0, 0, 1, 0, 9, 9];
    assert!(Chunks::new(&bad, 64, 0).next().unwrap().is_err());
    let mut long = vec![CHUNK_DATAGRAM_REPAIR, 0, 0, 0, 1, 1, 0];
    long.extend_from_slice(&[0; 65]);
    assert!(Chunks::new(&long, 64, 0).next().unwrap().is_err());
}

#[test]
fn reset_round_trip_and_sizes() {
    let r = Reset {
        conn_id: u32::MAX,
        token: [8; RESET_TOKEN_LEN],
    };
    let mut out = Vec::new();
    r.emit(&mut out);
    assert_eq!(out.len(), RESET_LEN);
    assert_eq!(Reset::parse(&out).unwrap(), r);
    assert_eq!(peek_conn_id(&out).unwrap(), (TYPE_RESET, u32::MAX));
    assert!(Reset::parse(&out[..RESET_LEN - 1]).is_err());
    // The sizes docs/PROTOCOL.md states.
    assert_eq!(
        (
            DATA_HEADER_LEN,
            INITIATE_LEN,
            ACCEPT_LEN,
            RESET_LEN,
            MIN_DATA_LEN,
            REJECT_LEN,
            REJECT_SIGNED_LEN
        ),
        (8, 89, 87, 17, 24, 23, 65)
    );
}

#[test]
fn chunks_round_trip() {
    let ack = Ack {
        next_in_order: 5,
        deficit: 2,
        highest_seen: 9,
        largest_pn: 100,
        pn_bitmap: 0xff,
        ack_delay_us: 30,
        reorder_pkts: 3,
        late: {
            let mut l = LateArrivals::default();
            assert!(l.push(65) && l.push(99));
            l
        },
    };
    let mut out = Vec::new();
    ack.emit(&mut out);
    let ack_len = ack.encoded_len();
    assert_eq!(out.len(), ack_len);
    assert_eq!(ack_len, 1 + 1 + 1 + 1 + 2 + 8 + 1 + 1 + 1 + 2 + 2);
    assert!(ack.encoded_len_bound() >= ack_len);
    emit_source(&mut out, 42, b"hello");
    assert_eq!(out.len(), ack_len + SOURCE_HEADER_LEN + 5);
    let header = RepairHeader {
        first: 40,
        count: 3,
        coefficients: Coefficients::Key(77),
    };
    emit_repair(&mut out, &header, &[9u8; 64]);
    assert_eq!(
        out.len(),
        ack_len + SOURCE_HEADER_LEN + 5 + REPAIR_HEADER_LEN + 64
    );
    emit_ping(&mut out);
    emit_close(&mut out, 3, "bye");
    out.push(CHUNK_PADDING);
    out.extend_from_slice(&[0; 10]);
    let chunks: Vec<_> = Chunks::new(&out, 64, 41).collect::<Result<_, _>>().unwrap();
    assert_eq!(chunks.len(), 5);
    assert_eq!(chunks[0], Chunk::Ack(ack));
    assert_eq!(
        chunks[1],
        Chunk::Source {
            id: 42,
            payload: b"hello"
        }
    );
    assert_eq!(
        chunks[2],
        Chunk::Repair {
            header,
            data: &[9u8; 64]
        }
    );
    assert_eq!(chunks[3], Chunk::Ping);
    assert_eq!(
        chunks[4],
        Chunk::Close {
            code: 3,
            reason: b"bye"
        }
    );
}

#[test]
fn acks_round_trip_at_every_size_within_the_bounds() {
    let big = Ack {
        next_in_order: (1 << 62) - 1,
        deficit: u32::MAX,
        highest_seen: u64::MAX,
        largest_pn: (1 << 62) - 1,
        pn_bitmap: u64::MAX,
        ack_delay_us: u32::MAX,
        reorder_pkts: u16::MAX,
        late: {
            let mut l = LateArrivals::default();
            while l.push(LATE_BACK_MAX) {}
            l
        },
    };
    for ack in [Ack::default(), big] {
        let mut out = Vec::new();
        ack.emit(&mut out);
        assert_eq!(out.len(), ack.encoded_len());
        assert!(out.len() <= ack.encoded_len_bound());
        assert!(ack.encoded_len_bound() <= ACK_CHUNK_MAX_LEN);
        let parsed: Vec<_> = Chunks::new(&out, 64, 0).collect::<Result<_, _>>().unwrap();
        // What does not fit is sent at its cap: the delay and a highest id beyond the
        // varint range.
        let expect = Ack {
            ack_delay_us: ack.ack_delay_us.min(ACK_DELAY_MAX_US),
            highest_seen: ack.next_in_order
                + (ack.highest_seen - ack.next_in_order).min(VARINT_MAX),
            ..ack
        };
        assert_eq!(parsed, [Chunk::Ack(expect)]);
    }
    // An ACK field out of its type's range is malformed, not truncated.
    let mut out = vec![CHUNK_ACK, 0, 0];
    put_varint(&mut out, 1 << 40); // deficit
    assert!(Chunks::new(&out, 64, 0).next().unwrap().is_err());
}

#[test]
fn late_arrivals_are_bounded_and_beyond_the_bitmap() {
    let mut l = LateArrivals::default();
    assert!(!l.push(64), "the bitmap covers 64");
    assert!(!l.push(LATE_BACK_MAX + 1));
    for i in 0..MAX_LATE as u64 {
        assert!(l.push(65 + i));
    }
    assert!(!l.push(200), "full");
    assert_eq!(
        l.iter().collect::<Vec<_>>(),
        (65..65 + MAX_LATE as u64).collect::<Vec<_>>()
    );
    // A count above the cap, or a distance inside the bitmap, is malformed.
    for (count, back) in [(MAX_LATE as u64 + 1, 70), (1, 3)] {
        let mut out = Vec::new();
        Ack::default().emit(&mut out);
        out.pop(); // the empty late list's count
        put_varint(&mut out, count);
        for _ in 0..count {
            put_varint(&mut out, back);
        }
        let parsed: Result<Vec<_>, _> = Chunks::new(&out, 64, 0).collect();
        assert!(parsed.is_err(), "count {count} back {back}");
    }
}

#[test]
fn source_last_round_trips_and_rejects_what_cannot_be_a_symbol() {
    const S: usize = 64;
    let ack = Ack {
        next_in_order: 1,
        highest_seen: 2,
        largest_pn: 3,
        ..Ack::default()
    };
    // Behind an ACK, as a sender builds it: the payload is the rest of the plaintext.
    for len in [1usize, 5, S - 3, S - 2] {
        let payload: Vec<u8> = (0..len).map(|i| i as u8).collect();
        let mut out = Vec::new();
        ack.emit(&mut out);
        emit_source_last(&mut out, 9, &payload);
        assert_eq!(out.len(), ack.encoded_len() + SOURCE_LAST_HEADER_LEN + len);
        let chunks: Vec<_> = Chunks::new(&out, S, 0).collect::<Result<_, _>>().unwrap();
        assert_eq!(
            chunks,
            [
                Chunk::Ack(ack),
                Chunk::Source {
                    id: 9,
                    payload: &payload
                }
            ],
            "{len}"
        );
    }
    // The id is truncated and expanded as in the length form.
    let mut out = Vec::new();
    emit_source_last(&mut out, (1 << 32) + 7, b"ab");
    assert_eq!(
        Chunks::new(&out, S, 1 << 32).next(),
        Some(Ok(Chunk::Source {
            id: (1 << 32) + 7,
            payload: b"ab"
        }))
    );
    // A zero-length tail is an empty payload, as a length-form chunk of length 0 is.
    let mut out = Vec::new();
    emit_source_last(&mut out, 4, b"");
    assert_eq!(out.len(), SOURCE_LAST_HEADER_LEN);
    let chunks: Vec<_> = Chunks::new(&out, S, 0).collect();
    assert_eq!(
        chunks,
        [Ok(Chunk::Source {
            id: 4,
            payload: b""
        })]
    );
}

#[test]
fn source_last_takes_the_rest_of_the_packet_within_a_symbol() {
    const S: usize = 64;
    // A tail longer than S − 2 cannot be a symbol's payload.
    let mut out = Vec::new();
    emit_source_last(&mut out, 4, &[1u8; S - 1]);
    let chunks: Vec<_> = Chunks::new(&out, S, 0).collect();
    assert_eq!(chunks, [Err(WireError::Invalid("source length"))]);
    // Truncated inside the id: an error, and nothing after it.
    for cut in 1..SOURCE_LAST_HEADER_LEN {
        let chunks: Vec<_> = Chunks::new(&out[..cut], S, 0).collect();
        assert_eq!(chunks, [Err(WireError::Truncated("source id"))], "{cut}");
    }
    // Whatever follows a SOURCE_LAST is its payload, chunk-like bytes included.
    let mut out = Vec::new();
    emit_source_last(&mut out, 4, &[CHUNK_PING, CHUNK_PADDING]);
    let chunks: Vec<_> = Chunks::new(&out, S, 0).collect();
    assert_eq!(
        chunks,
        [Ok(Chunk::Source {
            id: 4,
            payload: &[CHUNK_PING, CHUNK_PADDING]
        })]
    );
    // The length form still parses, also with a chunk after it.
    let mut out = Vec::new();
    emit_source(&mut out, 4, b"xyz");
    emit_ping(&mut out);
    let chunks: Vec<_> = Chunks::new(&out, S, 0).collect::<Result<_, _>>().unwrap();
    assert_eq!(
        chunks,
        [
            Chunk::Source {
                id: 4,
                payload: b"xyz"
            },
            Chunk::Ping
        ]
    );
}

#[test]
fn symbol_ids_round_trip_around_the_receiver_frontier() {
    // (receiver's next_in_order, ids the sender may reference): its whole window either
    // side, and across 2^24 and 2^32 in both directions.
    let cases = [
        (0u64, vec![0u64, 1, 8191]),
        (5, vec![0, 4, 5, 6, 8200]),
        (
            0xffff_fff0,
            vec![0xffff_e000, 0xffff_ffff, 0x1_0000_0000, 0x1_0000_1ff0],
        ),
        (
            0x1_0000_0010,
            vec![0xffff_f000, 0xffff_ffff, 0x1_0000_0000, 0x1_0000_2010],
        ),
        (
            0x7_8000_0000,
            vec![0x7_7fff_e000, 0x7_7fff_ffff, 0x7_8000_0000, 0x7_8000_2000],
        ),
        (
            0xff_fff0,
            vec![0xff_e000, 0xff_ffff, 0x100_0000, 0x100_1ff0],
        ),
        (
            0x100_0010,
            vec![0xff_f000, 0xff_ffff, 0x100_0000, 0x100_2010],
        ),
    ];
    for (frontier, ids) in cases {
        for id in ids {
            let header = RepairHeader {
                first: id,
                count: 2,
                coefficients: Coefficients::Explicit(vec![1, 2]),
            };
            let mut out = Vec::new();
            emit_source(&mut out, id, b"x");
            emit_repair(&mut out, &header, &[3u8; 64]);
            let chunks: Vec<_> = Chunks::new(&out, 64, frontier)
                .collect::<Result<_, _>>()
                .unwrap();
            assert_eq!(
                chunks,
                [
                    Chunk::Source { id, payload: b"x" },
                    Chunk::Repair {
                        header,
                        data: &[3u8; 64]
                    }
                ],
                "frontier {frontier:#x} id {id:#x}"
            );
        }
    }
    // 24 bits on the wire: an id 2^24 away from the frontier reads as a nearer one.
    let mut out = Vec::new();
    emit_source(&mut out, 7, b"");
    assert_eq!(out.len(), SOURCE_HEADER_LEN);
    assert_eq!(
        Chunks::new(&out, 64, 1 << 24).next(),
        Some(Ok(Chunk::Source {
            id: (1 << 24) + 7,
            payload: b""
        }))
    );
    // A repair reconstructed next to u64::MAX still parses; the decoder range-checks it.
    let mut out = Vec::new();
    let header = RepairHeader {
        first: u64::MAX - 1,
        count: 9,
        coefficients: Coefficients::Key(1),
    };
    emit_repair(&mut out, &header, &[0u8; 64]);
    assert_eq!(
        Chunks::new(&out, 64, u64::MAX).next(),
        Some(Ok(Chunk::Repair {
            header,
            data: &[0u8; 64]
        }))
    );
}

#[test]
fn garbage_never_panics() {
    let mut x = 0x1234_5678u32;
    for len in 0..300 {
        let buf: Vec<u8> = (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                x as u8
            })
            .collect();
        let _ = Chunks::new(&buf, 64, 0).count();
        let _ = Chunks::new(&buf, 64, u64::MAX).count();
        let _ = peek_conn_id(&buf);
        let _ = Initiate::parse(&buf);
        let _ = Accept::parse(&buf);
        let _ = DataHeader::parse(&buf, None);
        let _ = DataHeader::parse(&buf, Some(u64::MAX));
    }
}

#[test]
fn path_acks_round_trip_and_reject_an_unknown_path() {
    for report in [
        PathAck::default(),
        PathAck {
            path: MAX_PATHS - 1,
            largest_pn: (1 << 62) - 1,
            pn_bitmap: u64::MAX - 4,
        },
    ] {
        let mut out = Vec::new();
        report.emit(&mut out);
        assert_eq!(out.len(), report.encoded_len());
        emit_ping(&mut out);
        let parsed: Vec<_> = Chunks::new(&out, 64, 0).collect::<Result<_, _>>().unwrap();
        assert_eq!(parsed, [Chunk::PathAck(report), Chunk::Ping]);
    }
    // A typical one: 14 bytes (packet numbers below 2^30).
    let typical = PathAck {
        path: 0,
        largest_pn: 1 << 20,
        pn_bitmap: 1,
    };
    assert_eq!(typical.encoded_len(), 14);
    // A path id a session cannot have is malformed; a cut chunk is truncated.
    let mut out = Vec::new();
    PathAck {
        path: MAX_PATHS,
        ..typical
    }
    .emit(&mut out);
    let first = Chunks::new(&out, 64, 0).next().unwrap();
    assert_eq!(first, Err(WireError::Invalid("path ack path")));
    let mut cut = Vec::new();
    typical.emit(&mut cut);
    cut.truncate(cut.len() - 1);
    assert!(matches!(
        Chunks::new(&cut, 64, 0).next(),
        Some(Err(WireError::Truncated(_)))
    ));
}
