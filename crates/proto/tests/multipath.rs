//! Multipath (issue 29) at the endpoint level, lossless and instant: paths open and
//! validate, a spoofed source address never moves traffic, and a thousand path changes
//! (rebinding and path flaps) leave the state bounded.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::disallowed_methods)] // test helpers; a fixed base Instant

mod common;
use common::Duo;
use ctcp_proto::wire::MAX_PATHS;
use ctcp_proto::TransportConfig;
use std::net::SocketAddr;
use std::time::Duration;

/// Moves every pending datagram both ways once: the client's arrive at the server from
/// `from` (its current source address); the server's reach the client if addressed to
/// `from` or to any of `client_addrs` (a datagram to any other address is counted in
/// `stray` and dropped), from the server address the client's path of that id uses (the
/// reverse answers each path on the address it came to).
fn pump(d: &mut Duo, from: SocketAddr, client_addrs: &[SocketAddr], stray: &mut Vec<SocketAddr>) {
    d.now += Duration::from_millis(1);
    let mut out = Vec::new();
    while let Some(t) = d.cli.poll_transmit(d.now, &mut out) {
        let mut b = out[..t.size].to_vec();
        d.srv.handle_datagram(d.now, from, &mut b);
    }
    let paths = d.cli.connection(d.h).unwrap().paths();
    while let Some(t) = d.srv.poll_transmit(d.now, &mut out) {
        if t.destination == from || client_addrs.contains(&t.destination) {
            let id = ctcp_proto::wire::data_path(out[0]).unwrap_or(0);
            let src = paths.iter().find(|p| p.id == id).map_or(d.sa, |p| p.remote);
            let mut b = out[..t.size].to_vec();
            d.cli.handle_datagram(d.now, src, &mut b);
        } else {
            stray.push(t.destination);
        }
    }
    d.cli.handle_timeout(d.now);
    d.srv.handle_timeout(d.now);
}

fn server_remote(d: &Duo) -> SocketAddr {
    let h = d.srv.handles()[0];
    d.srv.connection(h).unwrap().remote()
}

#[test]
fn a_spoofed_source_address_never_moves_traffic() {
    let mut d = Duo::new(TransportConfig::default());
    d.establish();
    d.open_stream();
    let spoofed: SocketAddr = ([192, 0, 2, 66], 6666).into();
    let mut stray = Vec::new();
    // An on-path attacker takes the client's next authenticated datagrams and replays
    // them from its own address first (the originals arrive after, as old news).
    for _ in 0..200 {
        d.now += Duration::from_millis(1);
        let mut out = Vec::new();
        let mut captured = Vec::new();
        while let Some(t) = d.cli.poll_transmit(d.now, &mut out) {
            captured.push(out[..t.size].to_vec());
        }
        for c in &captured {
            d.srv.handle_datagram(d.now, spoofed, &mut c.clone());
            d.srv.handle_datagram(d.now, d.ca, &mut c.clone());
        }
        let ca = d.ca;
        pump(&mut d, ca, &[], &mut stray);
    }
    assert_eq!(
        server_remote(&d),
        d.ca,
        "traffic moved to the spoofed address"
    );
    // The only datagrams to the spoofed address are the challenges, a few and bounded.
    let to_spoofed = stray.iter().filter(|&&a| a == spoofed).count();
    assert!(to_spoofed > 0, "the new address was challenged");
    assert!(
        to_spoofed <= 5,
        "{to_spoofed} datagrams went to the spoofed address"
    );
    assert!(d.cli.connection(d.h).unwrap().is_established());
}

#[test]
fn a_rebinding_answered_moves_the_path() {
    let mut d = Duo::new(TransportConfig::default());
    d.establish();
    let new: SocketAddr = ([10, 1, 0, 9], 5999).into();
    let mut stray = Vec::new();
    for _ in 0..50 {
        pump(&mut d, new, &[new], &mut stray);
    }
    assert_eq!(
        server_remote(&d),
        new,
        "a validated new address is followed"
    );
}

#[test]
fn paths_open_validate_and_carry_data() {
    let mut d = Duo::new(TransportConfig::default());
    d.establish();
    let second: SocketAddr = ([10, 1, 0, 2], 7001).into();
    let id = d
        .cli
        .connection_mut(d.h)
        .unwrap()
        .add_path(d.now, second)
        .unwrap();
    assert_eq!(id, 1);
    let mut stray = Vec::new();
    let ca = d.ca;
    for _ in 0..50 {
        pump(&mut d, ca, &[ca], &mut stray);
    }
    let paths = d.cli.connection(d.h).unwrap().paths();
    assert_eq!(paths.len(), 2);
    assert!(paths.iter().all(|p| p.validated), "{paths:?}");
    let srv = d.srv.connection(d.srv.handles()[0]).unwrap().paths();
    assert_eq!(srv.len(), 2, "the server learned the path");
    assert!(srv.iter().all(|p| p.validated), "{srv:?}");
}

#[test]
fn a_thousand_path_changes_leave_state_bounded() {
    let mut d = Duo::new(TransportConfig::default());
    d.establish();
    d.open_stream();
    let mut stray = Vec::new();
    let mut addrs = Vec::new();
    for k in 0..1000u32 {
        // Alternately: the client's address changes (rebinding), or a path goes away and
        // a new one opens to another server address (an interface flap).
        let from: SocketAddr = ([10, 2, (k >> 8) as u8, k as u8], 4000).into();
        addrs.push(from);
        if k % 2 == 1 {
            let c = d.cli.connection_mut(d.h).unwrap();
            let ids: Vec<u8> = c.paths().iter().map(|p| p.id).filter(|&i| i != 0).collect();
            if ids.len() >= 3 {
                assert!(c.remove_path(d.now, ids[0]));
            }
            let to: SocketAddr = ([10, 1, 0, 2], 7001 + (k % 50) as u16).into();
            c.add_path(d.now, to).unwrap();
        }
        for _ in 0..5 {
            pump(
                &mut d,
                from,
                &addrs[addrs.len().saturating_sub(2)..],
                &mut stray,
            );
        }
        let c = d.cli.connection(d.h).unwrap();
        assert!(c.paths().len() <= usize::from(MAX_PATHS));
        let s = d.srv.connection(d.srv.handles()[0]).unwrap();
        assert!(s.paths().len() <= usize::from(MAX_PATHS));
        assert!(s.stats().in_flight < 1000 && c.stats().in_flight < 1000);
    }
    let s = d.srv.connection(d.srv.handles()[0]).unwrap();
    assert!(s.is_established() && d.cli.connection(d.h).unwrap().is_established());
    assert!(s.stats().path_changes >= 1000, "{}", s.stats().path_changes);
    assert_eq!(d.srv.connection_count(), 1);
}
