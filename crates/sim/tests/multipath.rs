//! Multipath on virtual time (issue 29): aggregation of a long fat path and a short lossy
//! one, failover when either dies and its return, two very lossy paths, the redundant
//! policy's delay and the failover policy's standby. Seeded; every transfer byte-exact.
//! The full-size figures come from `examples/multipath.rs` (BENCHMARKS.md).
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers

use ctcp_proto::{PathPolicy, TransportConfig};
use ctcp_sim::ctcp::Pace;
use ctcp_sim::multipath::{run_multipath, MultipathReport, MultipathSpec, PathSpec};
use ctcp_sim::{LinkSpec, LossModel};
use std::time::Duration;

const SEED: u64 = 29;

fn link(mbit: u64, rtt_ms: u64, loss: f64) -> LinkSpec {
    LinkSpec {
        loss: LossModel::Bernoulli(loss),
        ..LinkSpec::new(mbit * 1_000_000, Duration::from_millis(rtt_ms))
    }
}

fn spec(paths: Vec<PathSpec>, total: u64, policy: PathPolicy) -> MultipathSpec {
    MultipathSpec {
        paths,
        config: TransportConfig {
            stream_send_buffer: 4 << 20,
            path_policy: policy,
            ..TransportConfig::default()
        },
        total,
        pace: None,
        seed: SEED,
        deadline: Duration::from_secs(300),
    }
}

/// The pair: 10 Mbit/s, 600 ms, 1 % and 5 Mbit/s, 60 ms, 5 %.
fn pair() -> (PathSpec, PathSpec) {
    (
        PathSpec::new(link(10, 600, 0.01)),
        PathSpec::new(link(5, 60, 0.05)),
    )
}

#[test]
fn two_paths_aggregate_their_capacity() {
    let (long, short) = pair();
    let r = run_multipath(&spec(vec![long, short], 40_000_000, PathPolicy::Aggregate)).unwrap();
    let ideal = (10.0 * 0.99 + 5.0 * 0.95) * 1e6;
    eprintln!(
        "aggregate: {:.2} Mbit/s after 10 s, {:.2} over the transfer, wire {:.3}",
        r.goodput_after_10s_bps / 1e6,
        r.goodput_bps / 1e6,
        r.wire_per_goodput
    );
    assert!(r.bytes_ok);
    assert!(
        r.goodput_after_10s_bps >= 0.9 * ideal,
        "steady state below 0.9 of the sum"
    );
    assert!(
        r.goodput_bps >= 0.8 * ideal,
        "whole transfer below 0.8 of the sum"
    );
    // More than the better path alone could carry.
    assert!(r.goodput_after_10s_bps > 9.9e6 * 1.3);
    // Losses of the 600 ms path were repaired from the 60 ms path's reports of them.
    let reported = r.sender_stats.map_or(0, |s| s.reported_losses);
    assert!(reported > 0, "no loss owed from a PATH_ACK");
}

/// The failover scenario: path `dies` down from 15 s to 35 s of a transfer long enough
/// to outlast it; returns the stall around the cut and when each path was busy again.
fn failover(dies: usize) -> (Duration, Vec<Option<Duration>>) {
    let r = failover_run(dies, SEED);
    let (down, up) = (Duration::from_secs(15), Duration::from_secs(35));
    let (stall, at) = r.longest_stall_in(down, down + Duration::from_secs(5));
    let back = (0..2)
        .map(|i| r.path_busy_after(i, up, Duration::from_millis(500), 50))
        .collect();
    eprintln!("path {dies} down: stall {stall:?} at {at:?}, busy again {back:?}");
    (stall, back)
}

/// The failover scenario's run with `seed`: path `dies` down from 15 s to 35 s of 60 MB,
/// byte-exact.
fn failover_run(dies: usize, seed: u64) -> MultipathReport {
    let (long, short) = pair();
    let (down, up) = (Duration::from_secs(15), Duration::from_secs(35));
    let mut paths = vec![long, short];
    paths[dies] = paths[dies].clone().down(down, up);
    let mut s = spec(paths, 60_000_000, PathPolicy::Aggregate);
    s.seed = seed;
    let r = run_multipath(&s).unwrap();
    assert!(r.bytes_ok, "the transfer survives the outage byte-exact");
    r
}

/// Every path carried data again within 5 s of the dead one's return at `up`.
fn assert_busy_again(back: &[Option<Duration>], up: Duration) {
    for (i, t) in back.iter().enumerate() {
        let t = t.unwrap_or_else(|| panic!("path {i} never busy again"));
        assert!(
            t < up + Duration::from_secs(5),
            "path {i} busy only at {t:?}"
        );
    }
}

#[test]
fn the_short_path_dies_and_returns() {
    let up = Duration::from_secs(35);
    let (stall, back) = failover(1);
    // The survivor's round trip is 600 ms: 2 × 600 ms + 200 ms.
    assert!(stall <= Duration::from_millis(1400), "stall {stall:?}");
    assert_busy_again(&back, up);
}

#[test]
fn the_long_path_dies_and_returns() {
    let up = Duration::from_secs(35);
    let (stall, back) = failover(0);
    // The survivor's round trip is 60 ms: 2 × 60 ms + 200 ms. The long path's silence is
    // read from the short path's answers, its flight repaired over the short one at once.
    assert!(stall <= Duration::from_millis(320), "stall {stall:?}");
    assert_busy_again(&back, up);
}

/// The stall bound over the whole transfer, not only from the cut: with both
/// paths up, a loss on the 600 ms path is reported over the 60 ms one (a PATH_ACK beside
/// its ACKs, or alone when nothing else goes there, as for the transfer's last packets)
/// and repaired there, so no loss waits for the long path's own ACK, before the cut or
/// after the return. Virtual time, three seeds.
#[test]
fn no_stall_of_the_whole_transfer_outlasts_the_bound_when_the_long_path_dies() {
    for seed in [SEED, 2, 3] {
        let r = failover_run(0, seed);
        eprintln!(
            "seed {seed}: longest stall {:?} at {:?}",
            r.longest_stall, r.longest_stall_at
        );
        // 2 × 60 ms + 200 ms = 320 ms, the survivor's bound, from the first byte to the
        // last; asserted with a margin for what a real link adds (queueing, scheduling).
        assert!(
            r.longest_stall <= Duration::from_millis(250),
            "seed {seed}: stall {:?} at {:?}",
            r.longest_stall,
            r.longest_stall_at
        );
    }
}

#[test]
fn two_lossy_paths_stay_efficient() {
    let lossy = PathSpec::new(link(10, 100, 0.2));
    let r = run_multipath(&spec(
        vec![lossy.clone(), lossy],
        30_000_000,
        PathPolicy::Aggregate,
    ))
    .unwrap();
    let ideal = 2.0 * 10e6 * 0.8;
    eprintln!(
        "2 x 20 %: efficiency {:.3} after 10 s ({:.3} over the transfer), wire {:.3}",
        r.goodput_after_10s_bps / ideal,
        r.goodput_bps / ideal,
        r.wire_per_goodput
    );
    assert!(r.bytes_ok);
    assert!(r.goodput_after_10s_bps >= 0.9 * ideal);
    assert!(
        r.wire_per_goodput <= 1.05 / 0.8,
        "wire {}",
        r.wire_per_goodput
    );
}

#[test]
fn redundant_copies_keep_delay_low() {
    let paths = vec![
        PathSpec::new(link(10, 60, 0.05)),
        PathSpec::new(link(10, 100, 0.05)),
    ];
    let mut s = spec(paths, 2_000_000, PathPolicy::Redundant);
    // 1 Mbit/s from the application: 1250 bytes every 10 ms.
    s.pace = Some(Pace {
        chunk: 1250,
        every: Duration::from_millis(10),
    });
    let r = run_multipath(&s).unwrap();
    eprintln!("redundant: p99 extra delay {:.1} ms", r.p99_extra_delay_ms);
    assert!(r.bytes_ok);
    // Half the faster path's round trip.
    assert!(
        r.p99_extra_delay_ms <= 30.0,
        "p99 {} ms",
        r.p99_extra_delay_ms
    );
}

#[test]
fn failover_policy_keeps_the_standby_path_to_probes() {
    let (down, up) = (Duration::from_secs(6), Duration::from_secs(12));
    let paths = vec![
        PathSpec::new(link(10, 100, 0.01)).down(down, up),
        PathSpec::new(link(10, 100, 0.01)),
    ];
    let r = run_multipath(&spec(paths, 20_000_000, PathPolicy::Failover)).unwrap();
    assert!(r.bytes_ok);
    let sent = |t: Duration, i: usize| {
        r.sent_per_path
            .iter()
            .find(|(u, _)| *u >= t)
            .map_or(0, |(_, c)| c[i])
    };
    // Standing by from 2 s to the cut: probes only (each end probes twice a second, and
    // acknowledges the other's: four datagrams a second from the client).
    let standby = sent(down, 1) - sent(Duration::from_secs(2), 1);
    assert!(standby <= 20, "{standby} datagrams on the standby path");
    // It takes over while the active path is down.
    let took_over = sent(up, 1) - sent(down + Duration::from_secs(1), 1);
    assert!(
        took_over > 1000,
        "{took_over} datagrams on the standby path during the outage"
    );
}

/// The 600 ms path answering again while the 60 ms one carries everything: its first
/// sources arrive a 300 ms one-way delay late, and the short path's later ones wait
/// behind them at the peer. Coded copies of the returning path's sources on the short
/// path keep in-order delivery moving: no stall in the five seconds after the return
/// comes near that one-way delay. Virtual time, three seeds.
#[test]
fn the_long_paths_return_does_not_hold_delivery_for_its_one_way_delay() {
    let up = Duration::from_secs(35);
    for seed in [SEED, 2, 3] {
        let r = failover_run(0, seed);
        let (stall, at) = r.longest_stall_in(up, up + Duration::from_secs(5));
        eprintln!("seed {seed}: longest stall after the return {stall:?} at {at:?}");
        assert!(
            stall < Duration::from_millis(200),
            "seed {seed}: stall {stall:?} at {at:?}"
        );
    }
}
