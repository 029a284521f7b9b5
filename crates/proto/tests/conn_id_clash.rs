//! Connection ids are 32 random bits chosen by the client, so two clients of one server can
//! draw the same id. The server must refuse the second handshake without disturbing the
//! live session: no new session, no answer to the newcomer, and the old session keeps its
//! keys and address.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::Duo;
use ctcp_proto::wire::{Initiate, INITIATE_LEN, MAC_LEN, RANDOM_LEN};
use ctcp_proto::{Psk, Target, TransportConfig};
use std::net::SocketAddr;

#[test]
fn a_handshake_naming_a_live_connection_id_is_refused_and_the_session_lives_on() {
    let mut d = Duo::new(TransportConfig::default());
    let _ = d.establish();
    let live = d.h.0;
    assert_eq!(d.srv.handles().first().map(|h| h.0), Some(live));

    // Another client (same PSK, as `Duo` uses) that drew the same id: its own random and a
    // valid MAC, sent a few times as its handshake retransmits.
    let psk = Psk::new(&[9; 32]).unwrap();
    let mut init = Initiate {
        conn_id: live,
        client_random: [0x77; RANDOM_LEN],
        timestamp_ms: 0,
        train: 0,
        params: TransportConfig::default().params(),
        len: INITIATE_LEN,
        mac: [0; MAC_LEN],
    };
    psk.sign_initiate(&mut init);
    let mut bytes = Vec::new();
    init.emit(&mut bytes);
    let other: SocketAddr = ([10, 3, 0, 1], 5000).into();
    let before = d.srv.drops();
    for _ in 0..3 {
        let mut b = bytes.clone();
        d.srv.handle_datagram(d.now, other, &mut b);
    }
    let after = d.srv.drops();
    assert_eq!(after.refused, before.refused + 3, "{after:?}");
    assert_eq!(d.srv.connection_count(), 1);
    let mut out = Vec::new();
    while let Some(t) = d.srv.poll_transmit(d.now, &mut out) {
        assert_ne!(t.destination, other, "the clashing client was answered");
    }

    // The live session still carries a stream end to end, from and to its own address.
    let id = d
        .cli
        .connection_mut(d.h)
        .unwrap()
        .open_stream(Target::Domain("x.test".into(), 80))
        .unwrap();
    let data: Vec<u8> = (0..100_000u32).map(|i| i as u8).collect();
    let (got, _) = d.transfer(id, &data, 5_000, |_, _| {});
    assert!(
        got == data,
        "received {} of {} bytes",
        got.len(),
        data.len()
    );
    assert_eq!(d.srv.connection_count(), 1);
}
