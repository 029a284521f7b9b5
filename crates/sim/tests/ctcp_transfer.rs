//! ctcp over the simulated link: integrity, goodput and efficiency in virtual time.

use ctcp_proto::TransportConfig;
use ctcp_sim::ctcp::run_transfer;
use ctcp_sim::{LinkSpec, Seed};
use std::time::Duration;

#[test]
fn clean_link_small_transfer() {
    let link = LinkSpec::new(10_000_000, Duration::from_millis(100));
    let r = run_transfer(
        &link,
        TransportConfig::default(),
        2_000_000,
        Seed::from_env_or(1),
        Duration::from_secs(60),
    )
    .unwrap();
    println!("{r:?}");
    assert!(r.bytes_ok);
}
