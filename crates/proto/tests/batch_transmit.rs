//! `Endpoint::poll_transmit_batch` writes GSO batches: every datagram but a batch's last
//! is `segment_size` long, none is longer, and a bulk transfer pumped only through
//! batches (split at `segment_size`, as the kernel splits a GSO send) arrives whole.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::Duo;
use ctcp_proto::{Endpoint, ReadOutcome, TransportConfig};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// Sends every batch `from` has, split into datagrams, to `to`; returns batches sent.
fn pump(from: &mut Endpoint, to: &mut Endpoint, addr: SocketAddr, now: Instant) -> usize {
    let mut buf = Vec::new();
    let mut batches = 0;
    while let Some(b) = from.poll_transmit_batch(now, 16, &mut buf) {
        assert_eq!(b.size, buf.len());
        let segs: Vec<&[u8]> = buf.chunks(b.segment_size).collect();
        assert!(segs.len() <= 16);
        for (i, s) in segs.iter().enumerate() {
            assert!(i + 1 == segs.len() || s.len() == b.segment_size);
            to.handle_datagram(now, addr, &mut s.to_vec());
        }
        batches += 1;
    }
    batches
}

#[test]
fn batches_carry_a_bulk_transfer_whole() {
    let mut d = Duo::new(TransportConfig::default());
    let _ = d.establish();
    let id = d.open_stream();
    let total = 4usize << 20;
    let data: Vec<u8> = (0..total).map(|i| (i * 7 + i / 1000) as u8).collect();
    let (mut sent, mut got) = (0usize, Vec::with_capacity(total));
    let mut buf = vec![0u8; 64 << 10];
    let mut batches = 0;
    for _ in 0..20_000 {
        d.now += Duration::from_micros(200);
        let c = d.cli.connection_mut(d.h).unwrap();
        while sent < total {
            match c.write(id, &data[sent..(sent + (64 << 10)).min(total)]) {
                Ok(k) if k > 0 => sent += k,
                _ => break,
            }
        }
        if sent == total {
            let _ = c.finish(id);
        }
        batches += pump(&mut d.cli, &mut d.srv, d.ca, d.now);
        for h in d.srv.handles() {
            let s = d.srv.connection_mut(h).unwrap();
            while let Ok(ReadOutcome::Data(n)) = s.read(d.now, id, &mut buf) {
                got.extend_from_slice(&buf[..n]);
            }
        }
        pump(&mut d.srv, &mut d.cli, d.sa, d.now);
        d.cli.handle_timeout(d.now);
        d.srv.handle_timeout(d.now);
        if got.len() == total {
            break;
        }
    }
    assert_eq!(got.len(), total);
    assert!(got == data, "the bytes arrive as sent");
    // Full datagrams travel many to a batch.
    assert!(batches < 600, "{batches} batches for {total} bytes");
}
