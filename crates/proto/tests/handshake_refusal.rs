//! A handshake the server cannot or will not accept ends promptly, with a reason the
//! client can report: a wrong key, parameters that must match and do not, a server that is
//! shutting down. Windows are negotiated down instead. A REJECT is never larger than the
//! INITIATE that drew it, and an unauthenticated one cannot beat the real server's ACCEPT.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::disallowed_methods)] // a fixed base Instant

use ctcp_proto::wire::{self, RejectReason, TYPE_INITIATE, TYPE_REJECT};
use ctcp_proto::{
    ConnectionError, ConnectionHandle, Endpoint, EndpointConfig, Event, Psk, ReadOutcome, Target,
    TransportConfig,
};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

struct Pair {
    cli: Endpoint,
    srv: Endpoint,
    h: ConnectionHandle,
    now: Instant,
    start: Instant,
    ca: SocketAddr,
    sa: SocketAddr,
    /// Every server datagram as (size, type), and the size of the client datagram that
    /// drew it (the last one delivered before it).
    replies: Vec<(usize, u8, usize)>,
    lost: Option<(Duration, ConnectionError)>,
    connected: bool,
}

impl Pair {
    fn new(cli_key: u8, cli: TransportConfig, srv_key: u8, srv: TransportConfig) -> Pair {
        let srv = Endpoint::new(
            EndpointConfig::new(Psk::new(&[srv_key; 32]).unwrap(), srv, true),
            [1; 32],
        );
        let mut cli = Endpoint::new(
            EndpointConfig::new(Psk::new(&[cli_key; 32]).unwrap(), cli, false),
            [2; 32],
        );
        let now = Instant::now();
        let sa: SocketAddr = ([10, 1, 0, 2], 7000).into();
        let h = cli.connect(now, sa);
        Pair {
            cli,
            srv,
            h,
            now,
            start: now,
            ca: ([10, 1, 0, 1], 5000).into(),
            sa,
            replies: Vec::new(),
            lost: None,
            connected: false,
        }
    }

    /// One millisecond: every pending datagram both ways (no loss, no delay), then timers
    /// and the client's events.
    fn step(&mut self) {
        self.now += Duration::from_millis(1);
        let mut out = Vec::new();
        let mut last_len = 0;
        while let Some(t) = self.cli.poll_transmit(self.now, &mut out) {
            let mut d = out[..t.size].to_vec();
            last_len = d.len();
            self.srv.handle_datagram(self.now, self.ca, &mut d);
        }
        while let Some(t) = self.srv.poll_transmit(self.now, &mut out) {
            let mut d = out[..t.size].to_vec();
            self.replies.push((d.len(), d[0], last_len));
            self.cli.handle_datagram(self.now, self.sa, &mut d);
        }
        self.cli.handle_timeout(self.now);
        self.srv.handle_timeout(self.now);
        while let Some((_, e)) = self.cli.poll_event() {
            match e {
                Event::Connected => self.connected = true,
                Event::ConnectionLost(err) => {
                    self.lost.get_or_insert((self.now - self.start, err));
                }
                _ => {}
            }
        }
        while self.srv.poll_event().is_some() {}
    }

    /// Steps until the client's session is established or lost, at most `limit`.
    fn run(&mut self, limit: Duration) {
        while self.now - self.start < limit && !self.connected && self.lost.is_none() {
            self.step();
        }
    }
}

fn cfg(f: impl FnOnce(&mut TransportConfig)) -> TransportConfig {
    let mut c = TransportConfig::default();
    f(&mut c);
    c
}

#[test]
fn a_symbol_size_mismatch_is_refused_at_the_handshake_naming_both_values() {
    let mut p = Pair::new(
        9,
        cfg(|c| c.symbol_size = 1280),
        9,
        cfg(|c| c.symbol_size = 1408),
    );
    p.run(Duration::from_secs(5));
    assert!(!p.connected, "no session with different symbol sizes");
    let (at, err) = p.lost.clone().expect("the handshake ends");
    assert!(
        at < Duration::from_millis(100),
        "refused at once, not at a timeout: {at:?}"
    );
    assert_eq!(
        err,
        ConnectionError::Incompatible(wire::ParamMismatch {
            parameter: "symbol_size",
            ours: 1280,
            peer: 1408,
        })
    );
    let text = err.to_string();
    assert!(
        text.contains("symbol_size") && text.contains("1280") && text.contains("1408"),
        "{text}"
    );
    assert_eq!(p.srv.connection_count(), 0, "the server keeps no session");
    assert!(p.srv.drops().refused > 0);
    assert!(
        p.replies
            .iter()
            .all(|&(len, ty, req)| ty == TYPE_REJECT && len <= req),
        "{:?}",
        p.replies
    );
}

#[test]
fn windows_are_negotiated_down_and_the_session_carries_data() {
    let small = cfg(|c| {
        c.window = 2048;
        c.stream_window = 1 << 20;
        c.session_window = 4 << 20;
    });
    let mut p = Pair::new(9, TransportConfig::default(), 9, small);
    p.run(Duration::from_secs(5));
    assert!(p.connected, "lost: {:?}", p.lost);
    let cp = p.cli.connection(p.h).unwrap().params();
    let sh = p.srv.handles()[0];
    let sp = p.srv.connection(sh).unwrap().params();
    assert_eq!(cp, sp, "both ends run with the same parameters");
    assert_eq!(
        (cp.window, cp.stream_window, cp.session_window),
        (2048, 1 << 20, 4 << 20)
    );

    // 3 MB, more than the negotiated stream window: flow control must follow the
    // negotiated credit on both ends, or the receiver would refuse the excess.
    let id = p
        .cli
        .connection_mut(p.h)
        .unwrap()
        .open_stream(Target::Domain("t.test".into(), 1))
        .unwrap();
    let data: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
    let (mut written, mut got, mut buf) = (0, Vec::new(), vec![0u8; 64 << 10]);
    for _ in 0..60_000 {
        if written < data.len() {
            let c = p.cli.connection_mut(p.h).unwrap();
            written += c.write(id, &data[written..]).unwrap();
            if written == data.len() {
                c.finish(id).unwrap();
            }
        }
        p.step();
        let Some(c) = p.srv.connection_mut(sh) else {
            break;
        };
        while let Ok(ReadOutcome::Data(n)) = c.read(p.now, id, &mut buf) {
            got.extend_from_slice(&buf[..n]);
        }
        if got.len() == data.len() {
            break;
        }
    }
    assert!(p.lost.is_none(), "{:?}", p.lost);
    assert!(
        got == data,
        "byte-exact ({} of {} bytes)",
        got.len(),
        data.len()
    );
}

#[test]
fn a_wrong_key_is_reported_as_a_refusal_within_a_second_not_a_timeout() {
    let mut p = Pair::new(9, TransportConfig::default(), 8, TransportConfig::default());
    p.run(Duration::from_secs(15));
    let (at, err) = p.lost.clone().expect("the handshake ends");
    assert_eq!(
        err,
        ConnectionError::Rejected {
            reason: RejectReason::Auth,
            peer_version: wire::VERSION
        }
    );
    assert!(at <= Duration::from_secs(1), "{at:?}");
    assert!(err.to_string().contains("different key"), "{err}");
    assert_eq!(p.srv.connection_count(), 0);
    let drops = p.srv.drops();
    assert!(
        drops.bad_handshake > 0 && drops.rejects_sent > 0,
        "{drops:?}"
    );
    // Never an amplifier: each REJECT is smaller than the INITIATE that drew it, and the
    // server's answers stay within its rate limit.
    assert!(
        p.replies
            .iter()
            .all(|&(len, ty, req)| ty == TYPE_REJECT && len < req),
        "{:?}",
        p.replies
    );
    let bound = 16.0 + 16.0 * (p.now - p.start).as_secs_f64();
    assert!(drops.rejects_sent as f64 <= bound, "{drops:?}");
}

#[test]
fn an_unsigned_reject_does_not_beat_the_servers_accept() {
    let mut p = Pair::new(9, TransportConfig::default(), 9, TransportConfig::default());
    // Capture the client's first INITIATE and forge the short REJECT an on-path attacker
    // could build from it, delivered before the server's answer.
    let mut out = Vec::new();
    let t = p.cli.poll_transmit(p.now, &mut out).unwrap();
    let init = out[..t.size].to_vec();
    assert_eq!(init[0], TYPE_INITIATE);
    let forged = wire::Reject {
        version: wire::VERSION,
        conn_id: p.h.0,
        echo: wire::Reject::echo_of(&init).unwrap(),
        reason: RejectReason::Auth,
        signed: None,
    };
    let mut bytes = Vec::new();
    forged.emit(&mut bytes);
    p.cli.handle_datagram(p.now, p.sa, &mut bytes);
    let mut d = init;
    p.srv.handle_datagram(p.now, p.ca, &mut d);
    p.run(Duration::from_secs(3));
    assert!(p.connected, "the real ACCEPT wins: {:?}", p.lost);
    for _ in 0..2000 {
        p.step();
    }
    assert!(p.lost.is_none(), "{:?}", p.lost);
}

#[test]
fn a_reject_that_does_not_echo_the_handshake_is_ignored() {
    // The server is silent (wrong key and no rejects: a forged REJECT is all that comes).
    let mut p = Pair::new(
        9,
        cfg(|c| c.handshake_timeout = Duration::from_secs(2)),
        9,
        TransportConfig::default(),
    );
    let forged = wire::Reject {
        version: wire::VERSION,
        conn_id: p.h.0,
        echo: [0; wire::REJECT_ECHO_LEN],
        reason: RejectReason::Auth,
        signed: None,
    };
    let mut bytes = Vec::new();
    forged.emit(&mut bytes);
    p.cli.handle_datagram(p.now, p.sa, &mut bytes);
    p.run(Duration::from_secs(3));
    assert!(p.connected, "{:?}", p.lost);
}

#[test]
fn a_draining_server_refuses_new_sessions_as_busy() {
    let mut p = Pair::new(9, TransportConfig::default(), 9, TransportConfig::default());
    p.srv.stop_accepting();
    p.run(Duration::from_secs(5));
    let (at, err) = p.lost.clone().expect("refused");
    assert!(at < Duration::from_millis(100), "{at:?}");
    assert!(
        matches!(
            err,
            ConnectionError::Rejected {
                reason: RejectReason::Busy,
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(p.srv.connection_count(), 0);
}

#[test]
fn a_peers_close_reason_is_printed_escaped() {
    let err = ConnectionError::PeerClosed {
        code: 53121,
        reason: "\u{0}\u{1b}[31mred\n".into(),
    };
    let text = err.to_string();
    assert!(!text.chars().any(|c| c.is_control()), "{text:?}");
    assert!(text.contains("\\u{1b}[31mred\\n"), "{text}");
}

#[test]
fn a_peer_of_the_previous_protocol_version_is_refused_naming_both_versions() {
    // A server receives an INITIATE of the previous version (what an older forward or
    // relay sends): it answers with an unsigned REJECT that carries its own version.
    let mut p = Pair::new(9, TransportConfig::default(), 9, TransportConfig::default());
    let mut out = Vec::new();
    let t = p.cli.poll_transmit(p.now, &mut out).unwrap();
    let mut old = out[..t.size].to_vec();
    assert_eq!(old[0], TYPE_INITIATE);
    old[1] = wire::VERSION - 1;
    let echo = wire::Reject::echo_of(&old).unwrap();
    p.srv.handle_datagram(p.now, p.ca, &mut old.clone());
    assert_eq!(p.srv.connection_count(), 0);
    let mut reply = Vec::new();
    let t = p.srv.poll_transmit(p.now, &mut reply).expect("a REJECT");
    let reject = wire::Reject::parse(&reply[..t.size]).unwrap();
    assert_eq!(reject.version, wire::VERSION);
    assert_eq!(reject.reason, RejectReason::Version);
    assert_eq!(reject.echo, echo);
    // Refused by a server of the previous version, a client of ours names both (the
    // REJECT's version is the server's).
    let err = ConnectionError::Rejected {
        reason: RejectReason::Version,
        peer_version: wire::VERSION - 1,
    };
    let text = err.to_string();
    let want = format!(
        "speaks protocol version {} (ours {}): upgrade both sides",
        wire::VERSION - 1,
        wire::VERSION
    );
    assert!(text.contains(&want), "{text}");
}
