//! A forward given several reverse gateways (`peer = "A,B"`) moves on to the next one when
//! the current one stops answering or goes away, and new streams keep working.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] fns

mod common;

use common::{echo_server, pattern, round_trip, T};
use ctcp_proto::Psk;
use ctcp_runtime::{start_forward, start_reverse, Acl, ForwardSettings, ReverseSettings, Running};
use std::time::Duration;

async fn reverse() -> Running {
    let mut rs = ReverseSettings::new(Psk::new(&[7; 32]).unwrap());
    rs.listen = "127.0.0.1:0".parse().unwrap();
    rs.acl = Acl::allow_all();
    rs.drain_timeout = Duration::from_millis(200);
    start_reverse(rs).await.unwrap()
}

async fn forward(peer: String) -> Running {
    let mut fs = ForwardSettings::new(peer, Psk::new(&[7; 32]).unwrap());
    fs.listen = "127.0.0.1:0".parse().unwrap();
    fs.transport.handshake_timeout = Duration::from_secs(1);
    start_forward(fs).await.unwrap()
}

/// Retries a round trip until it succeeds or `T` passes: SOCKS clients are refused while
/// the forward moves to the next gateway (a refused attempt panics inside its own task).
async fn round_trip_eventually(proxy: std::net::SocketAddr, data: &[u8]) -> Duration {
    let target = echo_server().await;
    let start = tokio::time::Instant::now();
    loop {
        let d = data.to_vec();
        let attempt = tokio::spawn(async move { round_trip(proxy, target, &d).await });
        if let Ok(Ok(back)) = tokio::time::timeout(Duration::from_secs(5), attempt).await {
            assert_eq!(back, data, "byte-exact");
            return start.elapsed();
        }
        assert!(start.elapsed() < T, "no gateway took the streams");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn a_gateway_that_never_answers_is_skipped() {
    // The first peer is a UDP port nobody listens on.
    let dead = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let dead_addr = dead.local_addr().unwrap();
    drop(dead);
    let live = reverse().await;
    let fwd = forward(format!("{dead_addr},{}", live.local_addr)).await;
    let data = pattern(1, 200_000);
    let took = round_trip_eventually(fwd.local_addr, &data).await;
    println!("streams through the second gateway after {took:?}");
}

#[tokio::test]
async fn streams_move_to_the_next_gateway_when_one_goes_away() {
    let a = reverse().await;
    let b = reverse().await;
    let fwd = forward(format!("{},{}", a.local_addr, b.local_addr)).await;
    let data = pattern(2, 300_000);
    round_trip_eventually(fwd.local_addr, &data).await;
    assert!(
        !a.driver.stats().is_empty(),
        "the first gateway took the session"
    );
    // The first gateway shuts down: its session closes and the forward moves on.
    let _ = a.shutdown.send(true);
    let _ = tokio::time::timeout(T, a.done).await;
    let took = round_trip_eventually(fwd.local_addr, &data).await;
    println!("streams through the second gateway {took:?} after the first went away");
    assert!(!b.driver.stats().is_empty(), "the second gateway took over");
}
