//! The relay role in one process: forward → relay → relay → reverse on loopback, each
//! segment its own session with its own key. Byte-exact transfers, connect results
//! passed back hop by hop, back-pressure from a slow last segment, and the loss and
//! return of a next hop. (`proxy-reverse/tests/relay_chain.rs` runs the binaries.)
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use ctcp_config::RelayConfig;
use ctcp_proto::Psk;
use ctcp_runtime::{start_forward, start_reverse, Acl, ForwardSettings, ReverseSettings, Running};
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// One key per segment: forward–relay1, relay1–relay2, relay2–reverse.
const KEYS: [[u8; 32]; 3] = [[1; 32], [2; 32], [3; 32]];

struct Chain {
    fwd: Running,
    relays: Vec<Running>,
    rev: Running,
}

fn reverse_settings(key: &[u8; 32], listen: SocketAddr) -> ReverseSettings {
    let mut rs = ReverseSettings::new(Psk::new(key).unwrap());
    rs.listen = listen;
    rs.acl = Acl::allow_all();
    rs.connect_timeout = Duration::from_secs(3);
    rs.drain_timeout = Duration::from_secs(20);
    rs.transport.idle_timeout = Duration::from_secs(3);
    rs.transport.keepalive = Duration::from_millis(500);
    rs
}

/// Starts the chain from its far end: the reverse, then relays toward the forward.
/// `relay_cfg` sets the relays' `[relay]` options; `tweak_rev` the last gateway's.
async fn chain(
    relays: usize,
    relay_cfg: &RelayConfig,
    tweak_rev: impl FnOnce(&mut ReverseSettings),
) -> Chain {
    let mut rs = reverse_settings(&KEYS[relays], "127.0.0.1:0".parse().unwrap());
    tweak_rev(&mut rs);
    let rev = start_reverse(rs).await.unwrap();
    let mut next = rev.local_addr;
    let mut started = Vec::new();
    for i in (0..relays).rev() {
        let rs = reverse_settings(&KEYS[i], "127.0.0.1:0".parse().unwrap()).relay_to(
            relay_cfg,
            next.to_string(),
            Psk::new(&KEYS[i + 1]).unwrap(),
        );
        let r = start_reverse(rs).await.unwrap();
        next = r.local_addr;
        started.insert(0, r);
    }
    let mut fs = ForwardSettings::new(next.to_string(), Psk::new(&KEYS[0]).unwrap());
    fs.listen = "127.0.0.1:0".parse().unwrap();
    fs.transport.idle_timeout = Duration::from_secs(3);
    fs.transport.keepalive = Duration::from_millis(500);
    let fwd = start_forward(fs).await.unwrap();
    Chain {
        fwd,
        relays: started,
        rev,
    }
}

/// CONNECT through the chain, retrying while its sessions come up.
async fn connect_when_ready(proxy: SocketAddr, target: SocketAddr) -> tokio::net::TcpStream {
    tokio::time::timeout(T, async {
        loop {
            if let Ok(s) = socks(proxy, &v4(target), target.port(), 1).await {
                return s;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("the chain never came up")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_relays_carry_a_transfer_byte_exact_both_ways() {
    let c = chain(2, &RelayConfig::default(), |_| {}).await;
    let echo = echo_server().await;
    drop(connect_when_ready(c.fwd.local_addr, echo).await);
    let data = pattern(28, 8 << 20);
    let back = tokio::time::timeout(T, round_trip(c.fwd.local_addr, echo, &data))
        .await
        .expect("no hang");
    assert!(
        back == data,
        "echoed bytes differ ({} of {})",
        back.len(),
        data.len()
    );
    // Several streams at once share each segment's session.
    let tasks: Vec<_> = (0..16u64)
        .map(|i| {
            let proxy = c.fwd.local_addr;
            tokio::spawn(async move {
                let d = pattern(i, 100_000 + i as usize * 1000);
                round_trip(proxy, echo, &d).await == d
            })
        })
        .collect();
    for t in tasks {
        assert!(tokio::time::timeout(T, t).await.unwrap().unwrap());
    }
    // One session per segment: the relays opened no more than one each downstream.
    for r in c.relays.iter().chain([&c.rev]) {
        assert_eq!(r.driver.stats().len(), 1);
    }
    // A relay's metrics list its upstream session and the one to its next hop, and its
    // totals count both: it received the echoed bytes from the next hop and the
    // original ones from upstream.
    let r = &c.relays[0];
    let next = r
        .next_hop_driver
        .as_ref()
        .expect("a relay has a next-hop driver");
    let text = ctcp_runtime::metrics::render_all(&r.driver, std::slice::from_ref(next));
    let infos = text
        .lines()
        .filter(|l| l.starts_with("ctcp_session_info{"))
        .count();
    assert_eq!(infos, 2, "{text}");
    assert!(
        text.contains(&format!("peer=\"{}\"", c.relays[1].local_addr)),
        "the next hop is listed as a session's peer: {text}"
    );
    let read = text
        .lines()
        .find_map(|l| l.strip_prefix("ctcp_process_stream_bytes_read_total "))
        .and_then(|v| v.trim().parse::<u64>().ok())
        .expect("stream bytes read");
    assert!(read >= 2 * data.len() as u64, "{read}");
    assert!(c.fwd.next_hop_driver.is_none() && c.rev.next_hop_driver.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_results_come_back_hop_by_hop_with_their_socks_codes() {
    let c = chain(2, &RelayConfig::default(), |r| {
        r.acl = Acl {
            rules: vec![ctcp_runtime::Rule {
                allow: false,
                net: "127.0.0.3/32".parse().unwrap(),
                ports: 0..=65535,
            }],
            default_allow: true,
        };
    })
    .await;
    let proxy = c.fwd.local_addr;
    let echo = echo_server().await;
    drop(connect_when_ready(proxy, echo).await);
    let closed = TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap()
        .local_addr()
        .unwrap();
    let r = tokio::time::timeout(T, async {
        (
            socks(proxy, &v4(closed), closed.port(), 1).await.err(),
            socks(proxy, &domain("nonexistent.invalid"), 80, 1)
                .await
                .err(),
            socks(proxy, &[1, 127, 0, 0, 3], 80, 1).await.err(),
            socks(proxy, &domain("localhost"), echo.port(), 1)
                .await
                .err(),
        )
    })
    .await
    .expect("no hang");
    assert_eq!(r.0, Some(0x05), "refused");
    assert_eq!(r.1, Some(0x04), "unresolvable name");
    assert_eq!(r.2, Some(0x02), "the last gateway's ACL denied it");
    assert_eq!(r.3, None, "a name the last gateway resolves connects");
}

/// A target that does not read: the client can push only what the buffers along the
/// chain hold (kernel socket buffers, the send buffers and each relay's credit), not
/// the whole stream, and every byte arrives once the target reads. The bound is the
/// configured relay buffer, not the stream (figures: docs/experiments/comment-figures.md).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_last_segment_back_pressures_the_client_through_the_relays() {
    let cfg = RelayConfig {
        buffer: 1 << 20,
        ..RelayConfig::default()
    };
    let c = chain(2, &cfg, |r| {
        r.transport.stream_window = 1 << 20;
        r.transport.session_window = 1 << 20;
    })
    .await;
    let (go_tx, go_rx) = tokio::sync::oneshot::channel::<()>();
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let target = l.local_addr().unwrap();
    let received = tokio::spawn(async move {
        let (mut s, _) = l.accept().await.unwrap();
        let _ = go_rx.await;
        let mut all = Vec::new();
        s.read_to_end(&mut all).await.unwrap();
        all
    });
    let s = connect_when_ready(c.fwd.local_addr, target).await;
    let (_r, mut w) = s.into_split();
    let data = pattern(5, 64 << 20);
    let mut pushed = 0usize;
    // Write until nothing more is taken for a second. One `write` call either takes
    // some bytes or none (it is cancel-safe), so `pushed` is exactly what the chain took.
    while pushed < data.len() {
        let end = (pushed + (64 << 10)).min(data.len());
        match tokio::time::timeout(Duration::from_secs(1), w.write(&data[pushed..end])).await {
            Ok(n) => pushed += n.unwrap(),
            Err(_) => break,
        }
    }
    eprintln!("client pushed {} KiB into a stalled chain", pushed >> 10);
    assert!(
        pushed < 32 << 20,
        "the chain took {pushed} bytes without the target reading: unbounded buffering"
    );
    // Let the target read; the rest flows and arrives intact.
    go_tx.send(()).unwrap();
    tokio::time::timeout(T, async {
        w.write_all(&data[pushed..]).await.unwrap();
        w.shutdown().await.unwrap();
    })
    .await
    .expect("writes resume once the target reads");
    let got = tokio::time::timeout(T, received).await.unwrap().unwrap();
    assert!(
        got == data,
        "{} of {} bytes, or different",
        got.len(),
        data.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn losing_the_next_hop_resets_streams_and_new_ones_work_once_it_returns() {
    // The last gateway cuts its streams at once when it stops.
    let c = chain(1, &RelayConfig::default(), |r| {
        r.drain_timeout = Duration::ZERO
    })
    .await;
    let echo = echo_server().await;
    let rev_addr = c.rev.local_addr;
    let s = connect_when_ready(c.fwd.local_addr, echo).await;
    let (mut r, mut w) = s.into_split();
    w.write_all(b"ping").await.unwrap();
    let mut buf = [0u8; 4];
    r.read_exact(&mut buf).await.unwrap();
    // The last gateway goes away (closing its sessions).
    c.rev.shutdown.send(true).unwrap();
    c.rev.done.await.unwrap().unwrap();
    let started = tokio::time::Instant::now();
    let end = tokio::time::timeout(Duration::from_secs(10), async {
        let mut buf = [0u8; 64];
        loop {
            match r.read(&mut buf).await {
                Ok(0) => return "eof",
                Err(_) => return "error",
                Ok(_) => {}
            }
        }
    })
    .await
    .expect("the client's connection hung after the next hop went away");
    eprintln!(
        "client connection ended ({end}) after {:?}",
        started.elapsed()
    );
    // While it is gone, new clients are refused promptly.
    let refused = tokio::time::timeout(
        Duration::from_secs(10),
        socks(c.fwd.local_addr, &v4(echo), echo.port(), 1),
    )
    .await
    .expect("a new client hung while the next hop was down");
    assert_eq!(refused.err(), Some(0x01));
    // It comes back on the same address: the relay reconnects, new streams work.
    let rev = start_reverse(reverse_settings(&KEYS[1], rev_addr))
        .await
        .unwrap();
    let s = connect_when_ready(c.fwd.local_addr, echo).await;
    drop(s);
    let d = pattern(9, 1 << 20);
    assert!(round_trip(c.fwd.local_addr, echo, &d).await == d);
    drop(rev);
}

/// SIGTERM on a relay (its shutdown) drains like a reverse proxy's: the open transfer
/// finishes byte-exact through it, new streams are refused meanwhile, and the relay's
/// role then stops (its next-hop session closed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_shutdown_lets_the_open_transfer_finish() {
    let c = chain(1, &RelayConfig::default(), |_| {}).await;
    let echo = echo_server().await;
    drop(connect_when_ready(c.fwd.local_addr, echo).await);
    let data = pattern(12, 16 << 20);
    let s = socks(c.fwd.local_addr, &v4(echo), echo.port(), 1)
        .await
        .expect("connect ok");
    let (mut r, mut w) = s.into_split();
    let payload = data.clone();
    let writer = tokio::spawn(async move {
        w.write_all(&payload).await.unwrap();
        w.shutdown().await.unwrap();
    });
    let mut back = vec![0u8; 1 << 20];
    r.read_exact(&mut back).await.unwrap();
    let relay = &c.relays[0];
    relay.shutdown.send(true).unwrap();
    // A new stream while the relay drains is refused, promptly.
    let refused = tokio::time::timeout(
        Duration::from_secs(10),
        socks(c.fwd.local_addr, &v4(echo), echo.port(), 1),
    )
    .await
    .expect("a new client hung while the relay drained");
    assert_eq!(refused.err(), Some(0x01));
    let mut rest = Vec::new();
    tokio::time::timeout(T, r.read_to_end(&mut rest))
        .await
        .expect("the open transfer hung while the relay drained")
        .unwrap();
    back.extend_from_slice(&rest);
    writer.await.unwrap();
    assert!(
        back == data,
        "byte-exact ({} of {} bytes)",
        back.len(),
        data.len()
    );
    let Chain { relays, .. } = c;
    for r in relays {
        tokio::time::timeout(T, r.done)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        let next = r.next_hop_driver.unwrap();
        tokio::time::timeout(Duration::from_secs(5), next.stopped())
            .await
            .expect("the next-hop driver stopped");
    }
}
