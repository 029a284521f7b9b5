//! Resource limits of a session: the send-side memory budget across streams and the
//! stream count limit.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::Duo;
use ctcp_proto::{Event, Target, TransportConfig};
use std::time::Duration;

#[test]
fn streams_share_the_session_send_budget_and_wake_when_it_frees() {
    let config = TransportConfig {
        session_send_buffer: 1 << 20,
        stream_send_buffer: 512 << 10,
        ..TransportConfig::default()
    };
    let mut d = Duo::new(config);
    let _ = d.establish();
    let chunk = vec![7u8; 64 << 10];
    let c = d.cli.connection_mut(d.h).unwrap();
    let ids: Vec<_> = (0..8)
        .map(|_| c.open_stream(Target::Domain("t.test".into(), 1)).unwrap())
        .collect();
    // Without pumping, eight streams of 512 KiB each may queue 1 MiB in all.
    let mut queued = 0;
    for &id in &ids {
        while let Ok(n) = c.write(id, &chunk) {
            if n == 0 {
                break;
            }
            queued += n;
        }
    }
    assert_eq!(
        queued,
        1 << 20,
        "queued {queued} bytes against a 1 MiB budget"
    );
    // Pumping sends data out; blocked streams are told they may write again.
    let mut woken = 0;
    for _ in 0..2000 {
        d.step(Duration::from_millis(1));
        let c = d.cli.connection_mut(d.h).unwrap();
        while let Some(ev) = c.poll_event() {
            if matches!(ev, Event::StreamWritable(_)) {
                woken += 1;
            }
        }
        if woken > 0 {
            break;
        }
    }
    assert!(woken > 0, "no stream was woken after the budget freed");
}

#[test]
fn opening_more_streams_than_allowed_fails_cleanly() {
    let config = TransportConfig {
        max_streams: 4,
        ..TransportConfig::default()
    };
    let mut d = Duo::new(config);
    let _ = d.establish();
    let c = d.cli.connection_mut(d.h).unwrap();
    for _ in 0..4 {
        c.open_stream(Target::Domain("t.test".into(), 1)).unwrap();
    }
    assert!(c.open_stream(Target::Domain("t.test".into(), 1)).is_err());
}

#[test]
fn the_session_limit_and_the_handshake_rate_refuse_the_excess() {
    use ctcp_proto::{Endpoint, EndpointConfig, Psk};
    use std::net::SocketAddr;
    // Each case: (max_sessions, handshake_rate) and how many of five clients get in.
    for (max_sessions, rate, admitted) in [(2usize, 64u32, 2usize), (256, 1, 1)] {
        let psk = Psk::new(&[9; 32]).unwrap();
        let mut sc = EndpointConfig::new(psk.clone(), TransportConfig::default(), true);
        sc.max_sessions = max_sessions;
        sc.handshake_rate = rate;
        let mut srv = Endpoint::new(sc, [1; 32]);
        let sa: SocketAddr = ([10, 1, 0, 2], 7000).into();
        // A fixed base instant (from the pump helper, which owns the clock read).
        let t0 = Duo::new(TransportConfig::default()).now;
        let now = t0;
        let mut clients: Vec<(Endpoint, SocketAddr)> = (0..5u8)
            .map(|i| {
                let mut c = Endpoint::new(
                    EndpointConfig::new(psk.clone(), TransportConfig::default(), false),
                    [10 + i; 32],
                );
                c.connect(now, sa);
                (c, ([10, 2, 0, i], 5000).into())
            })
            .collect();
        let mut out = Vec::new();
        // 200 ms: well inside one second, so a rate of 1/s admits one handshake.
        for step in 0..200u64 {
            let now = t0 + Duration::from_millis(step);
            for (c, ca) in clients.iter_mut() {
                while let Some(t) = c.poll_transmit(now, &mut out) {
                    let mut b = out[..t.size].to_vec();
                    srv.handle_datagram(now, *ca, &mut b);
                }
            }
            while let Some(t) = srv.poll_transmit(now, &mut out) {
                let mut b = out[..t.size].to_vec();
                if let Some((c, _)) = clients.iter_mut().find(|(_, a)| *a == t.destination) {
                    c.handle_datagram(now, sa, &mut b);
                }
            }
        }
        assert_eq!(
            srv.connection_count(),
            admitted,
            "limit {max_sessions}, rate {rate}"
        );
        assert!(srv.drops().refused >= (5 - admitted) as u64);
    }
}

#[test]
fn shards_share_the_session_limit_and_clients_draw_ids_they_own() {
    use ctcp_proto::{shard_of, Endpoint, EndpointConfig, Psk, Shard};
    use std::net::SocketAddr;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    let psk = Psk::new(&[9; 32]).unwrap();
    let count = Arc::new(AtomicUsize::new(0));
    // Two server shards with one limit of 3 sessions between them.
    let mut shards: Vec<Endpoint> = (0..2)
        .map(|index| {
            let mut sc = EndpointConfig::new(psk.clone(), TransportConfig::default(), true);
            sc.max_sessions = 3;
            sc.shard = Some(Shard { index, count: 2 });
            sc.session_count = Some(count.clone());
            Endpoint::new(sc, [1 + index as u8; 32])
        })
        .collect();
    let sa: SocketAddr = ([10, 1, 0, 2], 7000).into();
    let t0 = Duo::new(TransportConfig::default()).now;
    // Six clients, three drawing ids of each shard.
    let mut clients: Vec<(Endpoint, SocketAddr, usize)> = (0..6u8)
        .map(|i| {
            let mut cc = EndpointConfig::new(psk.clone(), TransportConfig::default(), false);
            let shard = Shard {
                index: usize::from(i % 2),
                count: 2,
            };
            cc.shard = Some(shard);
            let mut c = Endpoint::new(cc, [10 + i; 32]);
            let h = c.connect(t0, sa);
            assert!(
                shard.owns(h.0),
                "client {i} drew id {} outside its shard",
                h.0
            );
            assert_eq!(shard_of(h.0, 2), shard.index);
            (c, ([10, 2, 0, i], 5000).into(), shard.index)
        })
        .collect();
    let mut out = Vec::new();
    for step in 0..200u64 {
        let now = t0 + Duration::from_millis(step);
        for (c, ca, shard) in clients.iter_mut() {
            while let Some(t) = c.poll_transmit(now, &mut out) {
                let mut b = out[..t.size].to_vec();
                shards[*shard].handle_datagram(now, *ca, &mut b);
            }
        }
        for srv in shards.iter_mut() {
            while let Some(t) = srv.poll_transmit(now, &mut out) {
                let mut b = out[..t.size].to_vec();
                if let Some((c, _, _)) = clients.iter_mut().find(|(_, a, _)| *a == t.destination) {
                    c.handle_datagram(now, sa, &mut b);
                }
            }
        }
    }
    let held: usize = shards.iter().map(Endpoint::connection_count).sum();
    assert_eq!(
        held, 3,
        "the shards admitted {held} sessions under a shared limit of 3"
    );
    assert_eq!(count.load(Ordering::Relaxed), 3);
    drop(shards);
    assert_eq!(
        count.load(Ordering::Relaxed),
        0,
        "dropped shards give their sessions back"
    );
}
