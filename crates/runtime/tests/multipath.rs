//! Multipath through the real sockets (issue 29): a forward with two paths, bound to
//! 127.0.0.1 and 127.0.0.2, carries a SOCKS stream byte-exact; the reverse takes the
//! second path from its own source address and answers it there.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] fns

mod common;

use common::{echo_server, pair_with, pattern, round_trip, T};
use ctcp_config::PathBind;
use ctcp_proto::{PathInfo, PathPolicy};
use ctcp_runtime::Acl;

/// Echoes 4 MiB through a two-path pair whose both ends use `policy`, the reverse with
/// `workers` shards; returns the session's paths as the forward and the reverse see them.
async fn echo_over_two_paths(policy: PathPolicy, workers: usize) -> (Vec<PathInfo>, Vec<PathInfo>) {
    let p = pair_with(&[7; 32], &[7; 32], Acl::allow_all(), |f, r| {
        f.paths = vec![
            PathBind::Address("127.0.0.1".parse().unwrap()),
            PathBind::Address("127.0.0.2".parse().unwrap()),
        ];
        f.transport.path_policy = policy;
        r.transport.path_policy = policy;
        r.workers = workers;
    })
    .await;
    let target = echo_server().await;
    let data = pattern(29, 4 << 20);
    let back = tokio::time::timeout(T, round_trip(p.fwd.local_addr, target, &data))
        .await
        .expect("round trip in time");
    assert!(
        back == data,
        "echo differs ({} of {} bytes)",
        back.len(),
        data.len()
    );
    let (h, ..) = p.fwd.driver.stats()[0];
    let fwd = p.fwd.driver.paths(h);
    let rev = p.rev.driver.stats();
    assert_eq!(rev.len(), 1, "one session, whichever shard it is on");
    let rev = p.rev.driver.paths(rev[0].0);
    assert_eq!(fwd.len(), 2, "the forward opened its second path: {fwd:?}");
    assert_eq!(rev.len(), 2, "the reverse took the second path: {rev:?}");
    assert!(
        fwd.iter().chain(&rev).all(|p| p.validated),
        "{fwd:?} {rev:?}"
    );
    let ips: Vec<_> = rev.iter().map(|p| p.remote.ip().to_string()).collect();
    assert_eq!(
        ips,
        ["127.0.0.1", "127.0.0.2"],
        "the reverse answers each path where it came from"
    );
    let text = ctcp_runtime::metrics::render(&p.fwd.driver);
    for id in [0, 1] {
        assert!(
            text.lines()
                .any(|l| l.starts_with("ctcp_path_bytes_sent_total{")
                    && l.contains(&format!("path=\"{id}\""))),
            "per-path metrics of path {id}:\n{text}"
        );
    }
    (fwd, rev)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redundant_two_paths_both_carry_the_stream_each_way() {
    let (fwd, rev) = echo_over_two_paths(PathPolicy::Redundant, 1).await;
    assert_each_path_carried_data(&fwd, &rev);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aggregate_two_paths_carry_a_stream_byte_exact() {
    // Where aggregate puts each packet depends on the paths' queues (on loopback the
    // first path's window rarely fills), so only validation and exactness are asserted.
    let (fwd, rev) = echo_over_two_paths(PathPolicy::Aggregate, 1).await;
    assert!(
        fwd.iter().chain(&rev).all(|p| p.sent > 0),
        "{fwd:?} {rev:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sharded_reverse_keeps_every_path_on_the_session_shard() {
    // Two reverse shards: the second path's challenge, answers and data reach the shard
    // that owns the session (steered or routed by connection id), so it validates there
    // and carries the copies the redundant policy sends.
    let (fwd, rev) = echo_over_two_paths(PathPolicy::Redundant, 2).await;
    assert_each_path_carried_data(&fwd, &rev);
}

/// 4 MiB each way is ~3,000 full datagrams; under the redundant policy the other path
/// carries coded copies of them, as many as its window takes (how many depends on the
/// load). 128 KiB on a path is ~90 full datagrams: several times what its
/// ACKs (tens of bytes each) and challenges add up to here.
fn assert_each_path_carried_data(fwd: &[PathInfo], rev: &[PathInfo]) {
    eprintln!("forward paths: {fwd:?}\nreverse paths: {rev:?}");
    for (side, paths) in [("forward", fwd), ("reverse", rev)] {
        for p in paths {
            assert!(
                p.bytes_sent >= 128 << 10,
                "{side} path {} sent {} bytes in {} datagrams",
                p.id,
                p.bytes_sent,
                p.sent
            );
        }
    }
}
