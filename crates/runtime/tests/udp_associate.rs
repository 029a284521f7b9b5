//! SOCKS UDP ASSOCIATE through the tunnel on loopback (issue 27): a small SOCKS UDP
//! client, a UDP echo server behind the reverse side; bad input is dropped and counted.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use ctcp_runtime::datagram::COUNTERS;
use ctcp_runtime::metrics::render;
use ctcp_runtime::status::parse;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UdpSocket};

mod common;
use common::*;

async fn udp_echo() -> SocketAddr {
    let s = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let a = s.local_addr().unwrap();
    tokio::spawn(async move {
        let mut buf = vec![0u8; 65536];
        while let Ok((n, from)) = s.recv_from(&mut buf).await {
            let _ = s.send_to(&buf[..n], from).await;
        }
    });
    a
}

/// Greeting, then UDP ASSOCIATE naming `client`; returns the control connection and the
/// relay address the proxy bound.
async fn associate(proxy: SocketAddr, client: SocketAddr) -> (TcpStream, SocketAddr) {
    let mut tcp = TcpStream::connect(proxy).await.unwrap();
    tcp.write_all(&[5, 1, 0]).await.unwrap();
    let mut m = [0u8; 2];
    tcp.read_exact(&mut m).await.unwrap();
    assert_eq!(m, [5, 0]);
    let SocketAddr::V4(c) = client else { panic!() };
    let mut req = vec![5, 3, 0, 1];
    req.extend_from_slice(&c.ip().octets());
    req.extend_from_slice(&c.port().to_be_bytes());
    tcp.write_all(&req).await.unwrap();
    let mut rep = [0u8; 10];
    tcp.read_exact(&mut rep).await.unwrap();
    assert_eq!(&rep[..4], &[5, 0, 0, 1], "UDP ASSOCIATE succeeded");
    let relay = SocketAddr::from((
        [rep[4], rep[5], rep[6], rep[7]],
        u16::from_be_bytes([rep[8], rep[9]]),
    ));
    (tcp, relay)
}

fn socks_udp(frag: u8, target: SocketAddr, data: &[u8]) -> Vec<u8> {
    let SocketAddr::V4(t) = target else { panic!() };
    let mut p = vec![0, 0, frag, 1];
    p.extend_from_slice(&t.ip().octets());
    p.extend_from_slice(&t.port().to_be_bytes());
    p.extend_from_slice(data);
    p
}

async fn recv_timeout(s: &UdpSocket, buf: &mut [u8], t: Duration) -> Option<usize> {
    match tokio::time::timeout(t, s.recv(buf)).await {
        Ok(Ok(n)) => Some(n),
        // The relay socket is gone (association over): the kernel refuses.
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused => None,
        Ok(Err(e)) => panic!("recv: {e}"),
        Err(_) => None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn udp_associate_relays_datagrams_and_drops_bad_input() {
    let p = pair().await;
    let echo = udp_echo().await;
    let client = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let (ctl, relay) = associate(p.fwd.local_addr, client.local_addr().unwrap()).await;
    client.connect(relay).await.unwrap();
    let mut buf = vec![0u8; 65536];
    // A good datagram comes back with the echo server as its source. The first may race
    // the session's readiness: retry a few times.
    let mut got = None;
    for i in 0..20u8 {
        client.send(&socks_udp(0, echo, &[i; 100])).await.unwrap();
        if let Some(n) = recv_timeout(&client, &mut buf, Duration::from_millis(500)).await {
            got = Some(buf[..n].to_vec());
            break;
        }
    }
    let got = got.expect("an echo through the tunnel");
    let expect_head = socks_udp(0, echo, &[]);
    assert_eq!(&got[..expect_head.len()], &expect_head[..]);
    assert_eq!(got.len(), expect_head.len() + 100);

    let frag = COUNTERS.dropped_fragment.load(Ordering::Relaxed);
    let bad = COUNTERS.dropped_bad_header.load(Ordering::Relaxed);
    let wrong = COUNTERS.dropped_wrong_source.load(Ordering::Relaxed);
    // A fragment, an unknown ATYP, a header too short: dropped, no answer.
    client.send(&socks_udp(1, echo, b"frag")).await.unwrap();
    client
        .send(&[0, 0, 0, 9, 1, 2, 3, 4, 0, 53, 1])
        .await
        .unwrap();
    client.send(&[0, 0]).await.unwrap();
    // From another socket: not the associated client.
    let stranger = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    stranger
        .send_to(&socks_udp(0, echo, b"stranger"), relay)
        .await
        .unwrap();
    assert!(recv_timeout(&client, &mut buf, Duration::from_millis(300))
        .await
        .is_none());
    assert!(recv_timeout(&stranger, &mut buf, Duration::from_millis(50))
        .await
        .is_none());
    assert!(COUNTERS.dropped_fragment.load(Ordering::Relaxed) > frag);
    assert!(COUNTERS.dropped_bad_header.load(Ordering::Relaxed) >= bad + 2);
    assert!(COUNTERS.dropped_wrong_source.load(Ordering::Relaxed) > wrong);
    // Still serving: 50 datagrams, all back (loopback loses nothing).
    let mut back = 0;
    for i in 0..50u8 {
        client.send(&socks_udp(0, echo, &[i; 1000])).await.unwrap();
        if recv_timeout(&client, &mut buf, Duration::from_secs(2))
            .await
            .is_some()
        {
            back += 1;
        }
    }
    assert_eq!(back, 50);
    // The OpenMetrics endpoint shows them: datagrams both ways, flows, drops by reason.
    let value = |text: &str, name: &str, labels: &[(&str, &str)]| {
        parse(text)
            .into_iter()
            .find(|s| s.name == name && labels.iter().all(|(k, v)| s.label(k) == Some(v)))
            .map(|s| s.value)
    };
    for d in [&p.fwd.driver, &p.rev.driver] {
        let text = render(d);
        for name in [
            "ctcp_udp_datagrams_sent_total",
            "ctcp_udp_datagrams_received_total",
        ] {
            assert!(value(&text, name, &[]).unwrap() >= 51.0, "{name}: {text}");
        }
        assert!(value(&text, "ctcp_udp_datagram_repairs_sent_total", &[]).is_some());
        assert!(value(&text, "ctcp_udp_datagrams_recovered_total", &[]).is_some());
        assert!(value(&text, "ctcp_udp_flows_opened_total", &[]).unwrap() >= 2.0);
        assert!(value(&text, "ctcp_udp_associations_total", &[]).unwrap() >= 1.0);
        assert!(
            value(
                &text,
                "ctcp_udp_relayed_total",
                &[("direction", "to_tunnel")]
            )
            .unwrap()
                >= 102.0
        );
        for (reason, at_least) in [
            ("fragment", 1.0),
            ("bad_header", 2.0),
            ("wrong_source", 1.0),
        ] {
            assert!(
                value(&text, "ctcp_udp_dropped_total", &[("reason", reason)]).unwrap() >= at_least,
                "{reason}: {text}"
            );
        }
        for reason in [
            "expired",
            "queue_overflow",
            "inbox_overflow",
            "denied",
            "unrelayed",
            "reply",
        ] {
            assert!(
                value(&text, "ctcp_udp_dropped_total", &[("reason", reason)]).is_some(),
                "{reason}"
            );
        }
        assert!(value(&text, "ctcp_udp_flows_closed_total", &[("reason", "idle")]).is_some());
    }
    // The association ends with its control connection.
    drop(ctl);
    tokio::time::sleep(Duration::from_millis(200)).await;
    client.send(&socks_udp(0, echo, b"late")).await.unwrap();
    assert!(recv_timeout(&client, &mut buf, Duration::from_millis(300))
        .await
        .is_none());
}

fn socks_udp_domain(host: &str, port: u16, data: &[u8]) -> Vec<u8> {
    let mut p = vec![0, 0, 0, 3, host.len() as u8];
    p.extend_from_slice(host.as_bytes());
    p.extend_from_slice(&port.to_be_bytes());
    p.extend_from_slice(data);
    p
}

/// A domain-name target is resolved on the reverse side in a task of its own: the flow
/// to `localhost` answers, with its name as the reply's source, and a name that does not
/// resolve costs its own datagrams (counted as denied) while another flow keeps working.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn udp_associate_resolves_domain_targets_off_the_flow_path() {
    let p = pair().await;
    let echo = udp_echo().await;
    let client = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let (_ctl, relay) = associate(p.fwd.local_addr, client.local_addr().unwrap()).await;
    client.connect(relay).await.unwrap();
    let mut buf = vec![0u8; 65536];
    let head = socks_udp_domain("localhost", echo.port(), &[]);
    let mut got = None;
    for i in 0..20u8 {
        client
            .send(&socks_udp_domain("localhost", echo.port(), &[i; 64]))
            .await
            .unwrap();
        if let Some(n) = recv_timeout(&client, &mut buf, Duration::from_millis(500)).await {
            got = Some(buf[..n].to_vec());
            break;
        }
    }
    let got = got.expect("an echo from a flow named by its domain");
    assert_eq!(&got[..head.len()], &head[..]);
    assert_eq!(got.len(), head.len() + 64);

    let denied = COUNTERS.dropped_denied.load(Ordering::Relaxed);
    client
        .send(&socks_udp_domain("no-such-host.invalid", 53, b"q"))
        .await
        .unwrap();
    // Meanwhile a flow by address answers every datagram.
    for i in 0..10u8 {
        client.send(&socks_udp(0, echo, &[i; 200])).await.unwrap();
        let n = recv_timeout(&client, &mut buf, Duration::from_secs(2))
            .await
            .expect("the address flow answers while the name resolves");
        assert_eq!(n, socks_udp(0, echo, &[]).len() + 200);
    }
    // The name's lookup ends (failing) within its timeout; its datagram is counted.
    for _ in 0..60 {
        if COUNTERS.dropped_denied.load(Ordering::Relaxed) > denied {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the unresolvable name's datagram was never counted as denied");
}

/// A flow's datagrams carry its target only on the first 8 and every 64th after: a
/// reverse side that forgot the flow (here: closed it idle) drops the short-header ones
/// in between (counted as `no_flow`) and routes the flow again from the 64th on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reverse_that_forgot_a_flow_relearns_it_from_the_next_full_header() {
    let p = pair_with(
        &[7; 32],
        &[7; 32],
        ctcp_runtime::Acl::allow_all(),
        |_, r| {
            r.udp_flows.idle_timeout = Duration::from_millis(300);
        },
    )
    .await;
    let echo = udp_echo().await;
    let client = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let (_ctl, relay) = associate(p.fwd.local_addr, client.local_addr().unwrap()).await;
    client.connect(relay).await.unwrap();
    let mut buf = vec![0u8; 65536];
    // Datagram i of the flow carries i in its payload; the first may race the session.
    let mut next = 0u8;
    let mut up = false;
    while next < 20 && !up {
        client.send(&socks_udp(0, echo, &[next; 32])).await.unwrap();
        next += 1;
        up = recv_timeout(&client, &mut buf, Duration::from_millis(500))
            .await
            .is_some();
    }
    assert!(up, "an echo through the tunnel");
    // Past the first 8 (full headers), the flow's datagrams carry only its id.
    while next < 12 {
        client.send(&socks_udp(0, echo, &[next; 32])).await.unwrap();
        next += 1;
        assert!(recv_timeout(&client, &mut buf, Duration::from_secs(2))
            .await
            .is_some());
    }
    // The reverse side closes the idle flow; the forward keeps it.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let no_flow = COUNTERS.dropped_no_flow.load(Ordering::Relaxed);
    for i in next..=70 {
        client.send(&socks_udp(0, echo, &[i; 32])).await.unwrap();
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let head = socks_udp(0, echo, &[]).len();
    let mut echoed = Vec::new();
    while let Some(n) = recv_timeout(&client, &mut buf, Duration::from_millis(700)).await {
        assert_eq!(n, head + 32);
        echoed.push(buf[head]);
    }
    echoed.sort_unstable();
    assert_eq!(
        echoed,
        (64..=70).collect::<Vec<u8>>(),
        "relearnt at the 64th"
    );
    assert!(
        COUNTERS.dropped_no_flow.load(Ordering::Relaxed) >= no_flow + u64::from(64 - next),
        "the short-header datagrams of the forgotten flow are counted"
    );
}
