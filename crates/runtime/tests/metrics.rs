//! The metrics an operator reads: process totals that outlive sessions, handshake and
//! SOCKS outcome counters, build info, and per-session rows labelled as the logs name
//! sessions. Real sockets on loopback, one process.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] fns

use ctcp_runtime::metrics::{render, HandshakeOutcome, SocksOutcome};
use ctcp_runtime::status::{parse, Sample};
use ctcp_runtime::{Acl, Driver, Rule};
use std::time::Duration;
use tokio::net::TcpListener;

mod common;
use common::*;

/// The value of the sample `name` whose labels include all of `labels`.
fn value(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    samples
        .iter()
        .find(|s| s.name == name && labels.iter().all(|(k, v)| s.label(k) == Some(v)))
        .map(|s| s.value)
}

/// Waits (with a deadline) until `driver` holds no session.
async fn no_sessions(driver: &Driver) {
    tokio::time::timeout(T, async {
        while !driver.sessions().is_empty() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the session ends");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn totals_outlive_the_session_and_outcomes_are_counted() {
    let deny = Rule {
        allow: false,
        net: "127.0.0.3/32".parse().unwrap(),
        ports: 0..=65535,
    };
    let p = pair_with(
        &[7; 32],
        &[7; 32],
        Acl {
            rules: vec![deny],
            default_allow: true,
        },
        |_, _| {},
    )
    .await;
    let proxy = p.fwd.local_addr;
    let echo = echo_server().await;
    let closed = TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap()
        .local_addr()
        .unwrap();
    let data = pattern(3, 1 << 20);
    tokio::time::timeout(T, async {
        assert_eq!(round_trip(proxy, echo, &data).await.len(), data.len());
        assert_eq!(
            socks(proxy, &v4(closed), closed.port(), 1).await.err(),
            Some(0x05)
        );
        assert_eq!(
            socks(proxy, &[1, 127, 0, 0, 3], 80, 1).await.err(),
            Some(0x02)
        );
        assert_eq!(
            socks(proxy, &v4(echo), echo.port(), 2).await.err(),
            Some(0x07)
        );
    })
    .await
    .expect("no hang");

    // While the session lives, its rows carry the same id as the live snapshot (and the
    // logs: `session=<decimal id>`).
    let live = p.rev.driver.sessions();
    assert_eq!(live.len(), 1);
    let id = live[0].handle.0.to_string();
    let m = parse(&render(&p.rev.driver));
    assert_eq!(
        value(
            &m,
            "ctcp_session_info",
            &[("session", &id), ("state", "established")]
        ),
        Some(1.0),
        "{m:?}"
    );
    assert!(
        value(&m, "ctcp_stream_bytes_sent_total", &[("session", &id)]).unwrap()
            >= data.len() as f64
    );

    // End the session: the forward shuts down and closes it.
    p.fwd.shutdown.send(true).unwrap();
    no_sessions(&p.rev.driver).await;
    no_sessions(&p.fwd.driver).await;

    let text = render(&p.rev.driver);
    let m = parse(&text);
    assert_eq!(value(&m, "ctcp_sessions", &[]), Some(0.0), "{text}");
    assert!(
        value(&m, "ctcp_process_stream_bytes_read_total", &[]).unwrap() >= data.len() as f64,
        "the ended session's bytes stay in the totals: {text}"
    );
    assert!(value(&m, "ctcp_process_datagrams_received_total", &[]).unwrap() > 0.0);
    assert!(value(&m, "ctcp_process_bytes_sent_total", &[]).unwrap() > 0.0);
    assert_eq!(value(&m, "ctcp_sessions_opened_total", &[]), Some(1.0));
    assert_eq!(
        value(
            &m,
            "ctcp_sessions_closed_total",
            &[("reason", "peer_closed")]
        ),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        value(&m, "ctcp_handshakes_total", &[("result", "ok")]),
        Some(1.0)
    );
    for (code, n) in [("0x00", 1.0), ("0x02", 1.0), ("0x05", 1.0)] {
        assert_eq!(
            value(&m, "ctcp_target_connects_total", &[("code", code)]),
            Some(n),
            "{code}: {text}"
        );
    }
    assert!(value(
        &m,
        "ctcp_build_info",
        &[("version", env!("CARGO_PKG_VERSION"))]
    )
    .is_some());

    let t = p.fwd.driver.totals();
    assert!(t.transport.stream_bytes_read >= data.len() as u64);
    assert_eq!(t.sessions_closed.get("local_close"), Some(&1));
    assert_eq!(t.handshakes.get(&HandshakeOutcome::Ok), Some(&1));
    assert_eq!(t.socks_handshakes.get(&SocksOutcome::Accepted), Some(&3));
    assert_eq!(t.socks_handshakes.get(&SocksOutcome::BadRequest), Some(&1));
    let replies: Vec<(u8, u64)> = t.socks_replies.into_iter().collect();
    assert_eq!(replies, [(0x00, 1), (0x02, 1), (0x05, 1), (0x07, 1)]);
    let m = parse(&render(&p.fwd.driver));
    assert_eq!(
        value(
            &m,
            "ctcp_socks_replies_total",
            &[("code", "0x07"), ("reply", "command_not_supported")]
        ),
        Some(1.0)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_key_counts_as_bad_mac_and_a_failed_handshake() {
    let p = pair_with(&[7; 32], &[8; 32], Acl::allow_all(), |f, _| {
        f.open_timeout = Duration::from_secs(3);
        f.transport.handshake_timeout = Duration::from_millis(500);
    })
    .await;
    let echo = echo_server().await;
    let r = tokio::time::timeout(T, socks(p.fwd.local_addr, &v4(echo), echo.port(), 1))
        .await
        .expect("no hang");
    assert_eq!(r.err(), Some(0x01));
    let rev = parse(&render(&p.rev.driver));
    assert!(value(&rev, "ctcp_handshakes_total", &[("result", "bad_mac")]).unwrap() > 0.0);
    assert_eq!(value(&rev, "ctcp_sessions_opened_total", &[]), Some(0.0));
    let fwd = p.fwd.driver.totals();
    // The reverse answers a bad MAC with an unsigned REJECT, which the forward trusts only
    // after a grace period as long as this test's handshake timeout: a refusal or a
    // timeout, whichever fires first.
    let failed: u64 = [HandshakeOutcome::Refused, HandshakeOutcome::Timeout]
        .iter()
        .filter_map(|o| fwd.handshakes.get(o))
        .sum();
    assert!(failed > 0, "{fwd:?}");
    assert_eq!(fwd.socks_replies.get(&0x01), Some(&1));
}
