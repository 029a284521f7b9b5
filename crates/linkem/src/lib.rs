//! ctcp-linkem: a userspace network link emulator for end-to-end benchmarks
//! on kernels without `sch_netem`.
//!
//! Two network namespaces (or a line of them) are joined by two TUN devices per link; every IP packet
//! between them goes through a [`Link`] per direction, which applies
//! one-way delay, jitter (uniform or normal), a rate limit with a drop-tail byte queue,
//! Bernoulli and Gilbert-Elliott loss, reordering and duplication, all drawn
//! from a seeded ChaCha stream.
//!
//! The crate has two layers:
//! - the sans-IO core ([`Link`], [`LinkConfig`], [`Counters`]): no clock
//!   reads and no I/O, time comes in as an argument, so it is tested in
//!   virtual time and replays exactly for a seed;
//! - the I/O layer ([`Emulator`]): namespaces and addresses through `ip`
//!   ([`netns`]), TUN devices (tun-rs), a tokio loop sleeping on a
//!   high-resolution `timerfd` ([`timer`]), JSON-lines statistics
//!   ([`stats`]). The binary `ctcp-linkem` is its command line.
//!
//! `unsafe` is denied crate-wide; the `timerfd` is registered with tokio through the
//! safe (deprecated) `AsyncFd::new`, whose contract [`timer`] argues.
//!
//! # Running it
//!
//! ```text
//! ctcp-linkem --delay 250ms --rate 10mbit --queue 125000 --loss 0.05 --seed 1 \
//!     --ready-file /tmp/linkem.ready --stats-file /tmp/linkem.jsonl &
//! # wait for /tmp/linkem.ready (or the line `ready` on stderr), then:
//! ip netns exec ctcp-b some-server --listen 10.77.0.2 &
//! ip netns exec ctcp-a some-client 10.77.0.2
//! kill -TERM %1   # final statistics written, namespaces deleted
//! ```
//!
//! A chain ([`ChainConfig`], `--hop` once per link): namespaces `ctcp-a`, `ctcp-m1`, …,
//! `ctcp-b` in a line, link `k` joining `10.77.k.1` and `10.77.k.2`, every namespace
//! forwarding, so the ends reach each other across all the links:
//!
//! ```text
//! ctcp-linkem --hop delay=300ms,rate=10mbit,loss=1%,seed=7 \
//!     --hop delay=10ms,rate=50mbit,loss=15%,seed=8 --server-ns srv &
//! ip netns exec ctcp-a curl http://10.77.201.2:8000/   # a server in `srv`, two links away
//! ```
//!
//! Parallel paths (`--path` once per link, [`Topology::Parallel`]): the same two
//! namespaces joined by several links side by side, path `k` from `10.77.k.1` to
//! `10.77.k.2`, A's source address picking the path; `--control` takes a path down
//! and back up while traffic runs ([`control`]):
//!
//! ```text
//! ctcp-linkem --path delay=300ms,rate=10mbit,loss=1% --path delay=30ms,rate=5mbit,loss=5% \
//!     --control /tmp/linkem.ctl &
//! ip netns exec ctcp-a curl --interface 10.77.1.1 http://10.77.0.2:8000/   # over path 1
//! ctcp-linkem --control /tmp/linkem.ctl --ctl 'down 1'   # cut path 1 ('up 1' restores it)
//! ```
//!
//! ```
//! use std::time::{Duration, Instant};
//! use ctcp_linkem::{Link, LinkConfig};
//!
//! let mut link = Link::new(LinkConfig {
//!     delay: Duration::from_millis(250),
//!     rate_bps: Some(10_000_000),
//!     ..LinkConfig::default()
//! })
//! .unwrap();
//! let t0 = Instant::now();
//! link.push(t0, vec![0; 1500]);
//! // 1.2 ms to serialise 1500 bytes at 10 Mbit/s, then 250 ms of propagation.
//! assert_eq!(link.next_release(), Some(t0 + Duration::from_micros(251_200)));
//! assert!(link.poll(t0 + Duration::from_millis(251)).is_none());
//! assert!(link.poll(t0 + Duration::from_micros(251_200)).is_some());
//! ```
#![deny(unsafe_code)]

pub mod clock;
pub mod config;
pub mod control;
pub mod counters;
pub mod emulator;
pub mod link;
pub mod netns;
pub mod stats;
pub mod timer;
pub mod units;

pub use config::{ConfigError, GilbertElliott, JitterDist, LinkConfig, DEFAULT_QUEUE_BYTES};
pub use counters::Counters;
pub use emulator::{ChainConfig, Emulator, EmulatorConfig, EmulatorError, StatsOptions, Topology};
pub use link::Link;
pub use stats::{Lateness, StatsLine, StatsSink};
