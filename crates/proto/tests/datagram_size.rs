//! Every datagram stays within `max_datagram`, also when ACKs, repairs and full source
//! symbols compete for the same packet (both directions busy, packets lost); and source
//! packets are exactly as long as their frames in the length-less form that ends them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::Duo;
use ctcp_proto::{ReadOutcome, TransportConfig};
use std::time::Duration;

#[test]
fn busy_lossy_bidirectional_traffic_never_exceeds_max_datagram() {
    let config = TransportConfig::default();
    let max = config.max_datagram;
    let mut d = Duo::new(config);
    let _ = d.establish();
    let id = d.open_stream();
    let chunk = vec![0x5au8; 32 << 10];
    let (mut sizes, mut full, mut n) = (Vec::new(), 0usize, 0u64);
    let mut out = Vec::new();
    let mut buf = vec![0u8; 64 << 10];
    let (mut up, mut down) = (0usize, 0usize);
    for _ in 0..3000 {
        d.now += Duration::from_millis(1);
        let c = d.cli.connection_mut(d.h).unwrap();
        while up < (4 << 20) {
            match c.write(id, &chunk) {
                Ok(k) if k > 0 => up += k,
                _ => break,
            }
        }
        while let Ok(ReadOutcome::Data(_)) = c.read(d.now, id, &mut buf) {}
        for h in d.srv.handles() {
            let s = d.srv.connection_mut(h).unwrap();
            while let Ok(ReadOutcome::Data(_)) = s.read(d.now, id, &mut buf) {}
            while down < (4 << 20) {
                match s.write(id, &chunk) {
                    Ok(k) if k > 0 => down += k,
                    _ => break,
                }
            }
        }
        // Every 9th datagram each way is lost, so both sides send repairs and ACK holes.
        while let Some(t) = d.cli.poll_transmit(d.now, &mut out) {
            sizes.push(t.size);
            n += 1;
            if n % 9 != 0 {
                let mut p = out[..t.size].to_vec();
                d.srv.handle_datagram(d.now, d.ca, &mut p);
            }
        }
        while let Some(t) = d.srv.poll_transmit(d.now, &mut out) {
            sizes.push(t.size);
            n += 1;
            if n % 9 != 0 {
                let mut p = out[..t.size].to_vec();
                d.cli.handle_datagram(d.now, d.sa, &mut p);
            }
        }
        d.cli.handle_timeout(d.now);
        d.srv.handle_timeout(d.now);
    }
    let stats = d.cli.connection(d.h).unwrap().stats();
    assert!(
        stats.repair_sent > 0,
        "the loss pattern should draw repairs"
    );
    assert!(up > 1 << 20 && down > 1 << 20, "both directions moved data");
    for &s in &sizes {
        assert!(s <= max, "a {s}-byte datagram exceeds max_datagram {max}");
        full += usize::from(s + 16 > max);
    }
    // An eighth: about 15 % of them are full-size repairs and source packets here, the
    // rest ACK-only packets and sources shrunk for an ACK.
    assert!(
        full > sizes.len() / 8,
        "only {full} of {} datagrams are near full size",
        sizes.len()
    );
}

/// A handshake starts with a train of full-size INITIATE copies sent back to back (it
/// measures the path), then small copies go in threes 20 ms apart, the train counting as
/// the first group's first, so one lost datagram on a lossy path rarely costs the timeout.
/// Without a train the groups are three small copies from the start.
#[test]
fn handshake_attempts_go_out_as_a_train_then_in_threes() {
    use ctcp_proto::wire::{INITIATE_LEN, TYPE_INITIATE};
    for train in [16u8, 0] {
        let config = TransportConfig {
            handshake_train: train,
            ..TransportConfig::default()
        };
        let max = config.max_datagram;
        let mut d = Duo::new(config);
        let mut out = Vec::new();
        let mut sends = Vec::new();
        for ms in 0..700u64 {
            let now = d.now + Duration::from_millis(ms);
            d.cli.handle_timeout(now);
            while let Some(t) = d.cli.poll_transmit(now, &mut out) {
                assert_eq!(out[0], TYPE_INITIATE);
                sends.push((ms, t.size));
            }
        }
        let mut want: Vec<(u64, usize)> = vec![(0, max); usize::from(train)];
        let small = [0, 20, 40, 340, 360, 380];
        let skip = usize::from(train > 0);
        want.extend(small[skip..].iter().map(|&ms| (ms, INITIATE_LEN)));
        assert_eq!(
            sends, want,
            "INITIATE (send ms, size) with a train of {train}"
        );
    }
}

/// Every ACCEPT is at most as large as the INITIATE that drew it (no amplification), and
/// each train copy draws one: odd positions at once, even ones back to back once the train
/// has passed the server (so the downlink alone spaces them).
#[test]
fn accepts_never_exceed_the_initiate_that_drew_them() {
    use ctcp_proto::wire::TYPE_ACCEPT;
    let mut d = Duo::new(TransportConfig::default());
    let mut out = Vec::new();
    let mut initiates = Vec::new();
    while let Some(t) = d.cli.poll_transmit(d.now, &mut out) {
        initiates.push(out[..t.size].to_vec());
    }
    assert_eq!(initiates.len(), 16);
    let from = ([10, 0, 0, 1], 4000).into();
    let mut accepts = Vec::new();
    for (i, init) in initiates.iter().enumerate() {
        let now = d.now + Duration::from_millis(i as u64);
        let mut b = init.clone();
        d.srv.handle_datagram(now, from, &mut b);
        d.srv.handle_timeout(now);
        while let Some(t) = d.srv.poll_transmit(now, &mut out) {
            accepts.push((i, out[0], t.size));
        }
        // Odd positions (1, 3, ...) are answered at once, even ones held.
        assert_eq!(
            accepts.len(),
            i / 2 + 1,
            "copy {i}: even positions are held"
        );
    }
    let passed = d.now + Duration::from_millis(100);
    d.srv.handle_timeout(passed);
    while let Some(t) = d.srv.poll_transmit(passed, &mut out) {
        accepts.push((16, out[0], t.size));
    }
    assert_eq!(accepts.len(), 16, "an ACCEPT per copy");
    for (i, kind, size) in accepts {
        assert_eq!(kind, TYPE_ACCEPT);
        assert!(
            size <= initiates[0].len(),
            "ACCEPT {size} > INITIATE after copy {i}"
        );
    }
}

/// A bulk sender's source packets fill their symbol exactly: the STREAM frame that ends
/// the symbol carries no length and takes every byte up to `S − 2`. A small write's
/// packet is exactly as long as its frame in that form too (its length is dropped after
/// the fact, as nothing follows it).
#[test]
fn source_packets_end_with_a_length_less_stream_frame() {
    use ctcp_proto::wire::{DATA_HEADER_LEN, REPAIR_HEADER_LEN, SOURCE_LAST_HEADER_LEN, TAG_LEN};
    let config = TransportConfig::default();
    let (s, max) = (config.symbol_size, config.max_datagram);
    let mut d = Duo::new(config);
    let _ = d.establish();
    let id = d.open_stream();
    let framing = DATA_HEADER_LEN + SOURCE_LAST_HEADER_LEN + TAG_LEN;
    let (mut written, mut got) = (0usize, 0usize);
    let total = 2 << 20;
    let chunk = vec![0x3cu8; 64 << 10];
    let mut buf = vec![0u8; 64 << 10];
    let (mut full, mut sources, mut sizes) = (0usize, 0usize, Vec::new());
    let repair = DATA_HEADER_LEN + REPAIR_HEADER_LEN + s + TAG_LEN;
    let mut out = Vec::new();
    let mut srv_handle = None;
    for _ in 0..20_000 {
        d.now += Duration::from_micros(500);
        let c = d.cli.connection_mut(d.h).unwrap();
        while written < total {
            match c.write(id, &chunk[..chunk.len().min(total - written)]) {
                Ok(k) if k > 0 => written += k,
                _ => break,
            }
        }
        while let Some(t) = d.cli.poll_transmit(d.now, &mut out) {
            sizes.push(t.size);
            // Source packets (not repairs, not the few small ones where the writer ran dry).
            if t.size > s / 2 && t.size != repair {
                sources += 1;
                full += usize::from(t.size == framing + s - 2 || t.size == max);
            }
            let mut p = out[..t.size].to_vec();
            d.srv.handle_datagram(d.now, d.ca, &mut p);
        }
        while let Some(t) = d.srv.poll_transmit(d.now, &mut out) {
            let mut p = out[..t.size].to_vec();
            d.cli.handle_datagram(d.now, d.sa, &mut p);
        }
        d.cli.handle_timeout(d.now);
        d.srv.handle_timeout(d.now);
        let h = *srv_handle.get_or_insert_with(|| d.srv.handles()[0]);
        while let Ok(ReadOutcome::Data(n)) =
            d.srv.connection_mut(h).unwrap().read(d.now, id, &mut buf)
        {
            assert!(buf[..n].iter().all(|&b| b == 0x3c));
            got += n;
        }
        if got == total {
            break;
        }
    }
    assert_eq!(got, total);
    // Every full symbol's packet: 8 + 4 + 1406 + 16 bytes, or at most 1452 with an ACK in
    // front (S − 2 minus the ACK's size in frames then).
    assert!(
        sources > 1000 && full * 20 >= sources * 19,
        "{full} of {sources} source packets fill their symbol; sizes {:?}",
        histogram(&sizes)
    );

    small_write_is_one_length_less_frame(&mut d, id, total as u64, srv_handle.unwrap());
}

/// Packet sizes and how often each was sent.
fn histogram(sizes: &[usize]) -> std::collections::BTreeMap<usize, usize> {
    let mut h = std::collections::BTreeMap::new();
    for &x in sizes {
        *h.entry(x).or_insert(0) += 1;
    }
    h
}

/// After a bulk transfer of `offset` bytes on stream `id`, a small write on the idle stream
/// goes out as one source packet holding one STREAM frame in its length-less form (and
/// maybe an ACK), and reaches the server's session `h`.
fn small_write_is_one_length_less_frame(
    d: &mut Duo,
    id: ctcp_proto::StreamId,
    offset: u64,
    h: ctcp_proto::ConnectionHandle,
) {
    use ctcp_proto::wire::{
        varint_len, ACK_CHUNK_MAX_LEN, DATA_HEADER_LEN, SOURCE_LAST_HEADER_LEN, TAG_LEN,
    };
    // STREAM_LAST's header as docs/PROTOCOL.md gives it: type, stream id, offset.
    let stream_last_header_len = |id: u64, offset: u64| 1 + varint_len(id) + varint_len(offset);
    let framing = DATA_HEADER_LEN + SOURCE_LAST_HEADER_LEN + TAG_LEN;
    let (mut out, mut buf) = (Vec::new(), vec![0u8; 64 << 10]);
    // Now a small write on the idle stream: one source packet holding one STREAM frame
    // in its length-less form (and maybe an ACK).
    for _ in 0..200 {
        let _ = d.step(Duration::from_millis(5));
    }
    let c = d.cli.connection_mut(d.h).unwrap();
    assert_eq!(c.write(id, &[7u8; 100]).unwrap(), 100);
    let t = d.cli.poll_transmit(d.now, &mut out).unwrap();
    let expect = framing + stream_last_header_len(id, offset) + 100;
    assert!(
        t.size == expect || (expect + 15..=expect + ACK_CHUNK_MAX_LEN).contains(&t.size),
        "a {}-byte packet, expected {expect} (+ an ACK of 15 to {ACK_CHUNK_MAX_LEN})",
        t.size
    );
    let mut p = out[..t.size].to_vec();
    d.srv.handle_datagram(d.now, d.ca, &mut p);
    assert_eq!(
        d.srv.connection_mut(h).unwrap().read(d.now, id, &mut buf),
        Ok(ReadOutcome::Data(100))
    );
    assert_eq!(&buf[..100], &[7u8; 100]);
}
