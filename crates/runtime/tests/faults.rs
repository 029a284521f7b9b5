//! Faults on the path between the two roles, on real sockets: a UDP relay between the
//! forward and the reverse that can black-hole traffic for a while (a link outage) and
//! move its reverse-facing socket to a new port (NAT rebinding). Outage lengths scale
//! with `CTCP_FAULT_SCALE` (1 in `cargo test`: a 3 s outage; 10 gives the 30 s).
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] fns

mod common;
use common::*;

use sha2::{Digest, Sha256};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UdpSocket;
use tokio::sync::mpsc;
use tokio::time::Instant;

/// Seconds of outage per unit of scale.
fn scale() -> u64 {
    std::env::var("CTCP_FAULT_SCALE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1)
}

enum Cmd {
    /// Drop everything, both ways, for this long.
    Outage(Duration),
    /// Continue from a new reverse-facing port.
    Rebind,
}

/// A one-client UDP relay: the forward talks to `addr`, the relay talks to the reverse.
struct Relay {
    addr: SocketAddr,
    cmd: mpsc::UnboundedSender<Cmd>,
    /// Every datagram the forward sent towards the reverse (the first 4,096).
    captured: Arc<StdMutex<Vec<Vec<u8>>>>,
}

async fn relay(reverse: SocketAddr) -> Relay {
    let front = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let addr = front.local_addr().unwrap();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let captured: Arc<StdMutex<Vec<Vec<u8>>>> = Arc::default();
    let log = captured.clone();
    tokio::spawn(async move {
        let mut back = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        back.connect(reverse).await.unwrap();
        let mut client: Option<SocketAddr> = None;
        let mut dark_until = Instant::now();
        let (mut a, mut b) = (vec![0u8; 65536], vec![0u8; 65536]);
        loop {
            tokio::select! {
                r = front.recv_from(&mut a) => {
                    let Ok((n, from)) = r else { return };
                    client = Some(from);
                    {
                        let mut log = log.lock().unwrap();
                        if log.len() < 4096 {
                            log.push(a[..n].to_vec());
                        }
                    }
                    if Instant::now() >= dark_until {
                        let _ = back.send(&a[..n]).await;
                    }
                }
                r = back.recv(&mut b) => {
                    let Ok(n) = r else { return };
                    if let (Some(c), true) = (client, Instant::now() >= dark_until) {
                        let _ = front.send_to(&b[..n], c).await;
                    }
                }
                c = rx.recv() => match c {
                    Some(Cmd::Outage(d)) => dark_until = Instant::now() + d,
                    Some(Cmd::Rebind) => {
                        let s = UdpSocket::bind("127.0.0.1:0").await.unwrap();
                        s.connect(reverse).await.unwrap();
                        back = s;
                    }
                    None => return,
                },
            }
        }
    });
    Relay {
        addr,
        cmd: tx,
        captured,
    }
}

/// A pair whose forward reaches the reverse through a relay, with the given idle timeout.
async fn pair_via_relay(idle: Duration) -> (Pair, Relay) {
    let psk = [3u8; 32];
    // The reverse must exist before the relay; build it first, then point the forward.
    let rev = {
        let mut rs = ctcp_runtime::ReverseSettings::new(ctcp_proto::Psk::new(&psk).unwrap());
        rs.listen = "127.0.0.1:0".parse().unwrap();
        // The targets are on loopback, which the default ACL denies.
        rs.acl = ctcp_runtime::Acl::allow_all();
        rs.transport.idle_timeout = idle;
        rs.transport.keepalive = Duration::from_millis(300);
        ctcp_runtime::start_reverse(rs).await.unwrap()
    };
    let r = relay(rev.local_addr).await;
    let mut fs =
        ctcp_runtime::ForwardSettings::new(r.addr.to_string(), ctcp_proto::Psk::new(&psk).unwrap());
    fs.listen = "127.0.0.1:0".parse().unwrap();
    fs.transport.idle_timeout = idle;
    fs.transport.keepalive = Duration::from_millis(300);
    let fwd = ctcp_runtime::start_forward(fs).await.unwrap();
    (Pair { fwd, rev }, r)
}

/// Echoes `data` through the pair while `fault` runs once `trigger` bytes came back.
async fn echo_with_fault(
    p: &Pair,
    data: Vec<u8>,
    trigger: usize,
    fault: impl FnOnce(),
) -> Result<Vec<u8>, String> {
    let echo = echo_server().await;
    let s = socks(p.fwd.local_addr, &v4(echo), echo.port(), 1)
        .await
        .map_err(|c| format!("SOCKS reply {c}"))?;
    let (mut r, mut w) = s.into_split();
    let writer = tokio::spawn(async move {
        w.write_all(&data).await.map_err(|e| e.to_string())?;
        w.shutdown().await.map_err(|e| e.to_string())
    });
    let mut back = Vec::new();
    let mut buf = vec![0u8; 65536];
    let mut fault = Some(fault);
    loop {
        match r.read(&mut buf).await {
            Ok(0) => break,
            Ok(n) => back.extend_from_slice(&buf[..n]),
            Err(e) => return Err(format!("read error after {} bytes: {e}", back.len())),
        }
        if back.len() >= trigger {
            if let Some(f) = fault.take() {
                f();
            }
        }
    }
    writer.await.unwrap()?;
    Ok(back)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_shorter_than_the_idle_timeout_resumes_byte_exact() {
    let outage = Duration::from_secs(3 * scale());
    let (p, relay) = pair_via_relay(outage * 2).await;
    let data = pattern(21, 8 << 20);
    let cmd = relay.cmd.clone();
    let started = Instant::now();
    let back = tokio::time::timeout(
        outage + 4 * T,
        echo_with_fault(&p, data.clone(), 2 << 20, move || {
            cmd.send(Cmd::Outage(outage)).unwrap();
        }),
    )
    .await
    .expect("no hang")
    .expect("the transfer survives the outage");
    assert_eq!(back.len(), data.len());
    assert_eq!(Sha256::digest(&back), Sha256::digest(&data));
    assert!(started.elapsed() >= outage, "the outage did not happen");
    eprintln!(
        "{} MB echoed across a {outage:?} outage in {:?}",
        data.len() >> 20,
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_longer_than_the_idle_timeout_ends_cleanly_then_recovers() {
    let idle = Duration::from_secs(2 * scale());
    let (p, relay) = pair_via_relay(idle).await;
    let cmd = relay.cmd.clone();
    let outage = idle * 3;
    let started = Instant::now();
    let result = tokio::time::timeout(
        outage + T,
        echo_with_fault(&p, pattern(22, 64 << 20), 1 << 20, move || {
            cmd.send(Cmd::Outage(outage)).unwrap();
        }),
    )
    .await
    .expect("the client connection hung during the outage");
    let ended = started.elapsed();
    assert!(
        result.is_err(),
        "a transfer cannot complete across a dead link"
    );
    eprintln!("outage {outage:?}, idle timeout {idle:?}: client saw {result:?} after {ended:?}");
    assert!(
        ended < outage,
        "the error came only after the link returned"
    );
    // After the link returns, the forward re-establishes a session and serves again.
    tokio::time::sleep_until(started + outage).await;
    let echo = echo_server().await;
    let data = pattern(23, 1 << 20);
    let back = tokio::time::timeout(4 * T, async {
        loop {
            if let Ok(s) = socks(p.fwd.local_addr, &v4(echo), echo.port(), 1).await {
                let (mut r, mut w) = s.into_split();
                let d = data.clone();
                tokio::spawn(async move {
                    let _ = w.write_all(&d).await;
                    let _ = w.shutdown().await;
                });
                let mut back = Vec::new();
                if r.read_to_end(&mut back).await.is_ok() && back.len() == data.len() {
                    return back;
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await
    .expect("no new session after the outage");
    assert_eq!(Sha256::digest(&back), Sha256::digest(&data));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nat_rebinding_mid_transfer_keeps_the_session() {
    let (p, relay) = pair_via_relay(Duration::from_secs(10)).await;
    let data = pattern(24, 16 << 20);
    let cmd = relay.cmd.clone();
    let back = tokio::time::timeout(
        4 * T,
        echo_with_fault(&p, data.clone(), 4 << 20, move || {
            cmd.send(Cmd::Rebind).unwrap();
        }),
    )
    .await
    .expect("no hang")
    .expect("the transfer survives the address change");
    assert_eq!(Sha256::digest(&back), Sha256::digest(&data));
    let m = ctcp_runtime::metrics::render(&p.rev.driver);
    assert!(
        m.contains("ctcp_sessions 1"),
        "the reverse should still hold exactly one session: {m}"
    );
}

/// Datagrams per kind for the flood: `CTCP_HOSTILE_N`, else 20,000.
fn flood_n() -> usize {
    std::env::var("CTCP_HOSTILE_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_random_and_replayed_datagrams_at_the_reverse_changes_nothing() {
    let (p, relay) = pair_via_relay(Duration::from_secs(30)).await;
    let data = pattern(25, 2 << 20);
    let back = tokio::time::timeout(T, echo_with_fault(&p, data.clone(), usize::MAX, || {}))
        .await
        .expect("no hang")
        .expect("transfer");
    assert_eq!(Sha256::digest(&back), Sha256::digest(&data));
    let captured = relay.captured.lock().unwrap().clone();
    assert!(
        captured.len() > 100,
        "captured {} datagrams",
        captured.len()
    );

    // An attacker's socket floods the reverse's real UDP port.
    let n = flood_n();
    let sock = Arc::new(UdpSocket::bind("127.0.0.1:0").await.unwrap());
    sock.connect(p.rev.local_addr).await.unwrap();
    let replies = Arc::new(StdMutex::new(Vec::<usize>::new()));
    let (rx, sink) = (sock.clone(), replies.clone());
    let task = tokio::spawn(async move {
        let mut buf = vec![0u8; 65536];
        while let Ok(len) = rx.recv(&mut buf).await {
            sink.lock().unwrap().push(len);
        }
    });
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let mut buf = vec![0u8; 1500];
    let mut largest_sent = 0;
    for i in 0..2 * n {
        let d: &[u8] = if i % 2 == 0 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let len = (x % 1400) as usize + 1;
            for b in buf[..len].iter_mut() {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                *b = x as u8;
            }
            buf[0] = (x % 5) as u8; // reach each packet type's parser
            &buf[..len]
        } else {
            &captured[(i / 2) % captured.len()]
        };
        largest_sent = largest_sent.max(d.len());
        let _ = sock.send(d).await;
        if i % 512 == 0 {
            tokio::task::yield_now().await;
        }
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    task.abort();
    let replies = replies.lock().unwrap().clone();
    eprintln!(
        "{n} random + {n} replayed datagrams at the reverse: {} replies, largest {:?} bytes",
        replies.len(),
        replies.iter().max()
    );
    // Only stateless resets (17 B), unsigned REJECTs of INITIATE-shaped random datagrams
    // (23 B, "bad MAC" or "another version") or ACCEPTs answering replayed INITIATE
    // copies (as long as the copy, never longer than anything sent) may answer,
    // rate-limited.
    use ctcp_proto::wire::{ACCEPT_LEN, REJECT_LEN, RESET_LEN};
    assert!(
        replies.iter().all(|&l| l == RESET_LEN
            || l == REJECT_LEN
            || (ACCEPT_LEN..=largest_sent).contains(&l)),
        "{replies:?}"
    );
    assert!(replies.len() < n / 10, "{} replies", replies.len());

    // The real session is untouched and still carries data.
    let m = ctcp_runtime::metrics::render(&p.rev.driver);
    assert!(m.contains("ctcp_sessions 1"), "{m}");
    let data = pattern(26, 1 << 20);
    let back = tokio::time::timeout(T, echo_with_fault(&p, data.clone(), usize::MAX, || {}))
        .await
        .expect("no hang after the flood")
        .expect("transfer after the flood");
    assert_eq!(Sha256::digest(&back), Sha256::digest(&data));
}
