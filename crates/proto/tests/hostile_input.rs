//! Hostile input at a server endpoint: random datagrams and replays of a real session's
//! captured datagrams (200,000 of each in `cargo test`; `CTCP_HOSTILE_N=1000000` for the
//! full run recorded in SECURITY.md). Nothing may panic, no state may grow, and nothing
//! may be sent back that is larger than what provoked it (no amplification).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::disallowed_methods)] // test helpers; a fixed base Instant

mod common;
use common::Duo;
use ctcp_proto::{Endpoint, EndpointConfig, Psk, Target, TransportConfig};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// Datagrams per test: `CTCP_HOSTILE_N`, else 200,000.
fn n() -> usize {
    std::env::var("CTCP_HOSTILE_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200_000)
}

fn server(psk: &Psk) -> Endpoint {
    Endpoint::new(
        EndpointConfig::new(psk.clone(), TransportConfig::default(), true),
        [1; 32],
    )
}

/// Feeds `data` from `from`, checks every reply against the size of `data` and records
/// the reply sizes.
fn feed(ep: &mut Endpoint, now: Instant, from: SocketAddr, data: &[u8], replies: &mut Vec<usize>) {
    let mut d = data.to_vec();
    ep.handle_datagram(now, from, &mut d);
    let mut out = Vec::new();
    while let Some(t) = ep.poll_transmit(now, &mut out) {
        assert!(
            t.size <= data.len(),
            "reply of {} bytes to a {}-byte datagram",
            t.size,
            data.len()
        );
        replies.push(t.size);
    }
}

#[test]
fn random_datagrams_leave_no_state_and_no_amplification() {
    let n = n();
    let psk = Psk::new(&[9; 32]).unwrap();
    let mut ep = server(&psk);
    let mut rng = ChaCha8Rng::seed_from_u64(0xbad);
    let t0 = Instant::now();
    let mut replies = Vec::new();
    let mut buf = vec![0u8; 1500];
    for i in 0..n {
        let len = rng.gen_range(0..=1500);
        rng.fill(&mut buf[..len]);
        // Half of them wear a valid version/type prefix to reach the deeper parsers.
        if len > 1 && i % 2 == 0 {
            buf[0] = rng.gen_range(0..=4);
        }
        let from: SocketAddr = ([10, 0, (i >> 8) as u8, i as u8], 4000 + (i % 7) as u16).into();
        let now = t0 + Duration::from_micros(i as u64);
        feed(&mut ep, now, from, &buf[..len], &mut replies);
    }
    assert_eq!(ep.connection_count(), 0, "random bytes created a session");
    let d = ep.drops();
    eprintln!(
        "{n} random datagrams: {d:?}, {} replies (all smaller than their trigger)",
        replies.len()
    );
    assert_eq!(d.malformed + d.bad_handshake + d.unknown_session, n as u64);
    // The only replies are rate-limited stateless resets and unauthenticated REJECTs
    // (INITIATE-shaped datagrams of another version or with a bad MAC), each smaller than
    // its trigger (checked in `feed`).
    assert!(replies
        .iter()
        .all(|&s| s == ctcp_proto::wire::RESET_LEN || s == ctcp_proto::wire::REJECT_LEN));
    assert_eq!(replies.len() as u64, d.resets_sent + d.rejects_sent);
}

#[test]
fn replayed_datagrams_change_nothing() {
    let n = n();
    let mut d = Duo::new(TransportConfig::default());
    // Run a real session: handshake, one stream with 200 KB, capturing client datagrams.
    let mut captured = d.establish();
    let c = d.cli.connection_mut(d.h).unwrap();
    let id = c.open_stream(Target::Domain("x.test".into(), 80)).unwrap();
    let chunk = vec![0x42u8; 8192];
    let mut sent = 0usize;
    for _ in 0..20_000 {
        if sent < 200_000 {
            sent += d
                .cli
                .connection_mut(d.h)
                .unwrap()
                .write(id, &chunk)
                .unwrap_or(0);
        }
        captured.extend(d.step(Duration::from_micros(200)));
        if sent >= 200_000 && captured.len() > 100 {
            break;
        }
    }
    let (mut srv, ca, mut now) = (d.srv, d.ca, d.now);
    assert_eq!(srv.connection_count(), 1, "the session did not come up");
    assert!(
        captured.len() > 100,
        "captured {} datagrams",
        captured.len()
    );
    // What the session itself still had to send (the handshake train's held ACCEPTs go
    // once the train has passed) leaves before the replays, so any reply is to them.
    now += Duration::from_millis(100);
    srv.handle_timeout(now);
    let mut out = Vec::new();
    while srv.poll_transmit(now, &mut out).is_some() {}
    let sessions = srv.connection_count();
    let before = srv.drops();
    // Replays from the original address and from a stranger's.
    let mut replies = Vec::new();
    let stranger: SocketAddr = ([10, 9, 9, 9], 6000).into();
    for i in 0..n {
        let d = &captured[i % captured.len()];
        let from = if i % 2 == 0 { ca } else { stranger };
        now += Duration::from_micros(1);
        feed(&mut srv, now, from, d, &mut replies);
    }
    assert_eq!(
        srv.connection_count(),
        sessions,
        "a replay created a session"
    );
    let after = srv.drops();
    eprintln!(
        "{n} replays of {} captured datagrams: drops before {before:?}, after {after:?}, {} replies",
        captured.len(),
        replies.len()
    );
    // No answers at all: the captured handshake's INITIATE copies are replayed, but the
    // client has sent data since, so the server knows it holds an ACCEPT.
    let initiates = captured
        .iter()
        .filter(|d| d[0] == ctcp_proto::wire::TYPE_INITIATE)
        .count();
    assert!(initiates > 0);
    assert!(replies.is_empty(), "{} replies", replies.len());
}
