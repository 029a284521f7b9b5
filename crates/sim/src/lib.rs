//! Deterministic link simulator on virtual time for ctcp.
//!
//! Two or more sans-IO [`Endpoint`]s (ctcp-proto connections through an
//! adapter, or the [`TcpSender`]/[`TcpReceiver`] model of a kernel TCP flow)
//! exchange datagrams over chains of link [`Node`]s. Nothing reads the real
//! clock: [`Sim`] keeps a virtual `Instant` that jumps from event to event,
//! so a 30 s transfer over a 500 ms satellite path runs in milliseconds, and
//! every random choice comes from the [`Seed`], so a run replays exactly.
//!
//! # Model
//!
//! A **node** holds packets in a queue ordered by release time. The built-in
//! ones:
//!
//! | node | behaviour |
//! |---|---|
//! | [`Delay`] | every packet leaves exactly `d` after arrival (propagation) |
//! | [`Jitter`] | extra uniform delay in `[0, max]`; without `allow_reorder` order is kept |
//! | [`Rate`] | bottleneck: drop-tail byte queue drained at `bits_per_sec`; a packet leaves when its last bit is serialised |
//! | [`Bernoulli`] | independent loss with probability `p` |
//! | [`GilbertElliott`] | two-state bursty loss, [`GilbertElliott::from_mean_burst`] from mean loss and mean burst length |
//! | [`Reorder`] | holds a fraction `prob` of packets back by `extra_delay` |
//! | [`Duplicate`] | sends a fraction `p` of packets twice |
//! | [`Corrupt`] | flips one random bit in a fraction `p` of packets |
//! | [`Mtu`] | drops packets longer than the MTU |
//!
//! Every node counts packets and bytes in, dropped and out ([`NodeStats`]).
//! Each node draws from its own random stream derived from the seed and its
//! index, so adding a node does not perturb the others.
//!
//! A **path** is a chain of node ids. A node may sit on several paths: put
//! one [`Rate`] on the forward paths of two flows and they share a
//! bottleneck. A **flow** is (client, server, forward path, return path);
//! the simulator counts datagrams and bytes offered and delivered per flow
//! and direction ([`FlowStats`]).
//!
//! A typical satellite or long-haul link, one direction, as built by
//! [`LinkSpec`]:
//!
//! ```text
//! endpoint → Mtu → Rate (queue) → Delay → Jitter → loss → Reorder → Duplicate → Corrupt → endpoint
//! ```
//!
//! The queue sits at the sender side of the bottleneck, propagation follows,
//! and channel impairments come last, so a packet lost on the radio channel
//! has still consumed bottleneck capacity, as it does on a real link.
//!
//! # Event loop
//!
//! Each step moves the clock to the earliest node release or endpoint
//! `poll_timeout`, pops every due packet (routing it to the next hop or
//! delivering it with `handle_datagram`), calls `handle_timeout` on every
//! endpoint whose deadline has passed, then drains `poll_transmit` of every
//! endpoint into its path. Runs are bounded: [`Sim::run_until`],
//! [`Sim::run_for`], [`Sim::run_while`] return a [`SimError`] (with the
//! seed) instead of hanging when the step bound or the same-instant bound
//! is hit.
//!
//! ```
//! use std::time::Duration;
//! use ctcp_sim::{tcp_pair, LinkSpec, Seed, Sim, TcpConfig, TcpReceiver};
//!
//! let mut sim = Sim::with_seed(Seed::from_env_or(1));
//! let (fwd, ret) = sim.add_link(&LinkSpec::new(10_000_000, Duration::from_millis(100)));
//! let (tx, rx) = tcp_pair(TcpConfig::default());
//! let flow = sim.add_flow(tx, rx, fwd, ret);
//! sim.run_for(Duration::from_secs(2)).unwrap();
//! let rx: &TcpReceiver = sim.server(flow).unwrap();
//! assert!(rx.bytes_delivered() > 0);
//! ```
//!
//! # Replaying a failure
//!
//! Tests take their seed from [`Seed::from_env_or`], which prints
//! `ctcp-sim seed = N (replay with CTCP_SIM_SEED=N)`; the harness shows that
//! line when the test fails. Rerun with `CTCP_SIM_SEED=N`.

#![deny(unsafe_code)]

pub mod ctcp;
pub mod datagram;
mod link;
pub mod multipath;
mod node;
mod nodes;
mod outage;
mod seed;
mod sim;
mod tcp;

pub use link::{LinkSpec, LossModel};
pub use node::{Direction, FlowId, Node, NodeStats, Packet, ReleaseQueue, SimRng};
pub use nodes::{
    Bernoulli, Corrupt, Delay, Duplicate, GilbertElliott, Jitter, JitterDist, Mtu, Rate, Reorder,
};
pub use outage::Outage;
pub use seed::{Seed, SEED_ENV};
pub use sim::{
    AsAny, DirStats, Endpoint, FlowStats, NodeId, PathId, Side, Sim, SimError, TraceEvent,
    TraceKind, DEFAULT_SAME_INSTANT_LIMIT, DEFAULT_STEP_LIMIT, DEFAULT_TRANSMIT_LIMIT,
};
pub use tcp::{
    tcp_pair, CcAlgorithm, TcpConfig, TcpReceiver, TcpReceiverStats, TcpSender, TcpSenderStats,
    HEADER_BYTES, MAX_SACK_BLOCKS,
};

/// Jain's fairness index of `x`: `(Σx)² / (n·Σx²)`, 1 for equal shares,
/// `1/n` when one party takes everything. Returns 1 for an empty or
/// all-zero input.
#[must_use]
pub fn jain(x: &[f64]) -> f64 {
    let sum: f64 = x.iter().sum();
    let sq: f64 = x.iter().map(|v| v * v).sum();
    if x.is_empty() || sq == 0.0 {
        return 1.0;
    }
    sum * sum / (x.len() as f64 * sq)
}

#[cfg(test)]
mod tests {
    use super::jain;

    #[test]
    fn jain_bounds() {
        assert!((jain(&[1.0, 1.0, 1.0]) - 1.0).abs() < 1e-12);
        assert!((jain(&[1.0, 0.0]) - 0.5).abs() < 1e-12);
        assert!((jain(&[3.0, 1.0]) - 0.8).abs() < 1e-12);
    }
}
