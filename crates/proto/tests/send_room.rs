//! `Connection::can_send_now` says when a writer may skip waking the send loop: false once
//! the sender's window is full (nothing written could leave before an acknowledgement),
//! true again as soon as the acknowledgements that make room arrive.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::Duo;
use ctcp_proto::TransportConfig;
use std::time::Duration;

#[test]
fn a_full_window_has_no_room_until_its_acknowledgements_arrive() {
    let mut d = Duo::new(TransportConfig::default());
    let _ = d.establish();
    let id = d.open_stream();
    let c = d.cli.connection_mut(d.h).unwrap();
    assert!(c.can_send_now(), "an idle established session has room");
    let data = vec![5u8; 4 << 20];
    let mut written = c.write(id, &data).unwrap();
    // Send without delivering anything, in small steps so the pacer lets packets go,
    // until the window is full.
    let (mut out, mut held) = (Vec::new(), Vec::new());
    for _ in 0..2_000 {
        d.now += Duration::from_micros(50);
        let c = d.cli.connection_mut(d.h).unwrap();
        written += c.write(id, &data[written..]).unwrap_or(0);
        while let Some(t) = d.cli.poll_transmit(d.now, &mut out) {
            held.push(out[..t.size].to_vec());
        }
        if !d.cli.connection(d.h).unwrap().can_send_now() {
            break;
        }
    }
    let c = d.cli.connection(d.h).unwrap();
    assert!(
        !c.can_send_now(),
        "{} datagrams sent unanswered",
        held.len()
    );
    assert!(held.len() >= 16, "{} datagrams", held.len());
    // Deliver them; the server's acknowledgements open the window again.
    for mut dgram in held {
        d.srv.handle_datagram(d.now, d.ca, &mut dgram);
    }
    while let Some(t) = d.srv.poll_transmit(d.now, &mut out) {
        let mut dgram = out[..t.size].to_vec();
        d.cli.handle_datagram(d.now, d.sa, &mut dgram);
    }
    assert!(d.cli.connection(d.h).unwrap().can_send_now());
}
