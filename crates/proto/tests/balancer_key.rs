//! A stateless L4 balancer in front of several gateway instances keeps a session on one
//! instance by hashing its connection id (`configs/reverse-balancer.nft`). That works only
//! if every datagram a client sends carries the id at the offset its type byte names
//! (`wire::conn_id_offset`): the handshake train and its retransmitted copies, data,
//! keepalives, the datagrams sent after the client's address changed (NAT rebinding) and
//! the close. This drives one session through all of those and checks every datagram.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::Duo;
use ctcp_proto::wire::{self, CONN_ID_LEN};
use ctcp_proto::TransportConfig;
use std::net::SocketAddr;
use std::time::Duration;

/// The connection id a balancer reads from `d`: the bytes at the offset `d`'s type names.
fn balancer_key(d: &[u8]) -> Option<u32> {
    let at = wire::conn_id_offset(*d.first()?)?;
    let id = d.get(at..at + CONN_ID_LEN)?;
    Some(u32::from_le_bytes(id.try_into().ok()?))
}

/// Pumps the handshake with the client's first 800 ms of datagrams lost, so the handshake
/// train and the retransmitted INITIATE groups after it all go out; returns every client
/// datagram.
fn establish_through_loss(d: &mut Duo) -> Vec<Vec<u8>> {
    let mut sent = Vec::new();
    let mut out = Vec::new();
    for _ in 0..800 {
        d.now += Duration::from_millis(1);
        while let Some(t) = d.cli.poll_transmit(d.now, &mut out) {
            sent.push(out[..t.size].to_vec());
        }
        d.cli.handle_timeout(d.now);
    }
    let initiates = sent.iter().filter(|p| p[0] == wire::TYPE_INITIATE).count();
    assert!(initiates > 16, "only {initiates} INITIATE copies went out");
    sent.extend(d.establish());
    sent
}

/// Carries a stream's data, the client's address changing to `rebound` once the first
/// bytes arrived; returns every client datagram.
fn transfer_while_rebinding(d: &mut Duo, rebound: SocketAddr) -> Vec<Vec<u8>> {
    let s = d.open_stream();
    let data: Vec<u8> = (0..300_000u32).map(|i| (i * 7) as u8).collect();
    let (got, sent) = d.transfer(s, &data, 10_000, |d, got| {
        if !got.is_empty() {
            d.ca = rebound;
        }
    });
    assert!(
        got == data,
        "received {} of {} bytes",
        got.len(),
        data.len()
    );
    let h = d.srv.handles()[0];
    assert_eq!(
        d.srv.connection(h).unwrap().remote(),
        rebound,
        "the server followed the rebinding"
    );
    sent
}

#[test]
fn every_client_datagram_carries_the_connection_id_where_the_balancer_reads_it() {
    let mut d = Duo::new(TransportConfig::default());
    let id = d.h.0;
    let mut sent = establish_through_loss(&mut d);
    sent.extend(transfer_while_rebinding(
        &mut d,
        ([192, 0, 2, 77], 40_000).into(),
    ));

    // Idle: keepalives. Then the close.
    for _ in 0..4 {
        sent.extend(d.step(Duration::from_secs(3)));
    }
    d.cli.connection_mut(d.h).unwrap().close(0, "done");
    sent.extend(d.step(Duration::from_millis(1)));

    let data_packets = sent.iter().filter(|p| p[0] == wire::TYPE_DATA).count();
    assert!(data_packets > 200, "only {data_packets} DATA packets");
    for (i, p) in sent.iter().enumerate() {
        assert!(
            matches!(p[0], wire::TYPE_INITIATE | wire::TYPE_DATA),
            "datagram {i}: type {:#04x}",
            p[0]
        );
        assert_eq!(
            balancer_key(p),
            Some(id),
            "datagram {i} of type {:#04x}",
            p[0]
        );
    }
}

/// The offsets the shipped ruleset hashes (`@th,BITS,32`, counted from the UDP header)
/// are the ones the wire module defines.
#[test]
fn the_shipped_balancer_ruleset_hashes_the_connection_id_bytes() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../configs/reverse-balancer.nft"
    );
    let rules = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let bits = |at: usize| format!("@th,{},{}", (8 + at) * 8, CONN_ID_LEN * 8);
    for (ty, at) in [
        (wire::TYPE_INITIATE, wire::HANDSHAKE_CONN_ID_OFFSET),
        (wire::TYPE_DATA, wire::CONN_ID_OFFSET),
    ] {
        assert_eq!(wire::conn_id_offset(ty), Some(at));
        assert!(
            rules.contains(&bits(at)),
            "{path} does not hash {} (type {ty:#04x})",
            bits(at)
        );
    }
    assert!(
        rules.contains(&format!("@th,64,8 {:#04x}", wire::TYPE_INITIATE)),
        "{path} does not tell INITIATE apart by its type byte"
    );
}
