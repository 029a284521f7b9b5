//! Datagrams through a coded session on virtual time (issue 27): a 2 Mbit/s stream of
//! 1,200-byte datagrams over a 10 Mbit/s, 100 ms link with random loss.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use ctcp_proto::TransportConfig;
use ctcp_sim::datagram::{run_datagrams, DatagramReport, DatagramSpec};
use ctcp_sim::{LinkSpec, LossModel, Seed};

/// 2 Mbit/s of 1,200-byte datagrams: one every 4.8 ms, for 30 s.
const SPEC: DatagramSpec = DatagramSpec {
    size: 1200,
    interval: Duration::from_micros(4800),
    count: 6250,
};

fn run(loss: LossModel, seed: u64) -> DatagramReport {
    let link = LinkSpec::new(10_000_000, Duration::from_millis(100)).loss(loss);
    let r = run_datagrams(
        &link,
        TransportConfig::default(),
        SPEC,
        Seed::from_env_or(seed),
    )
    .unwrap();
    println!(
        "{loss:?}: residual {:.3} %, wire {:.3}× ({:.3}× with IP/UDP headers), acks {:.3}×, \
         extra delay p50 {:?} p99 {:?}, sender {:?}, receiver {:?}",
        100.0 * r.residual_loss,
        r.wire_ratio,
        r.wire_ratio_ip,
        r.ack_ratio,
        r.extra_delay_quantile(0.5),
        r.extra_delay_quantile(0.99),
        r.sender,
        r.receiver
    );
    assert_eq!(r.bad, 0, "datagrams delivered twice or damaged");
    assert_eq!(r.sent, SPEC.count);
    r
}

#[test]
fn clean_link_costs_at_most_five_percent() {
    let r = run(LossModel::None, 1);
    assert_eq!(r.delivered, r.sent);
    assert!(r.wire_ratio <= 1.05, "{}", r.wire_ratio);
    assert!(r.extra_delay_quantile(0.99) <= Duration::from_millis(10));
}

#[test]
fn ten_percent_loss() {
    let r = run(LossModel::Bernoulli(0.10), 2);
    assert!(r.residual_loss <= 0.005, "{}", r.residual_loss);
    assert!(r.wire_ratio <= 1.35, "{}", r.wire_ratio);
    assert!(
        r.extra_delay_quantile(0.99) <= Duration::from_millis(60),
        "{:?}",
        r.extra_delay_quantile(0.99)
    );
}

#[test]
fn twenty_percent_loss() {
    let r = run(LossModel::Bernoulli(0.20), 3);
    assert!(r.residual_loss <= 0.01, "{}", r.residual_loss);
    assert!(r.wire_ratio <= 1.7, "{}", r.wire_ratio);
}
