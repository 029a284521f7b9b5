//! [`LinkSpec`]: the common link in one struct.

use std::time::Duration;

use crate::nodes::{
    Bernoulli, Corrupt, Delay, Duplicate, GilbertElliott, Jitter, JitterDist, Mtu, Rate, Reorder,
};
use crate::sim::{NodeId, PathId, Sim};

/// Random loss on a link.
#[derive(Clone, Copy, Debug, PartialEq, Default)]
pub enum LossModel {
    /// No random loss.
    #[default]
    None,
    /// Independent loss with this probability.
    Bernoulli(f64),
    /// Simple Gilbert bursty loss.
    Gilbert {
        /// Mean loss rate.
        mean: f64,
        /// Mean burst length in packets.
        burst: f64,
    },
}

impl LossModel {
    /// The long-run share of packets lost.
    #[must_use]
    pub fn mean(&self) -> f64 {
        match *self {
            LossModel::None => 0.0,
            LossModel::Bernoulli(p) => p,
            LossModel::Gilbert { mean, .. } => mean,
        }
    }
}

/// One direction of a typical link, built into a path as
///
/// `Mtu → Rate → Delay → Jitter → loss → Reorder → Duplicate → Corrupt`
///
/// i.e. the bottleneck queue sits at the sender side (a satellite modem or
/// access router), propagation follows, and the random impairments of the
/// channel come after the queue, so a packet lost on the channel still used
/// its share of the bottleneck. Zero/`None` parts are left out.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LinkSpec {
    /// Bottleneck rate in bit/s; `None` for no rate limit (and no queue).
    pub rate_bps: Option<u64>,
    /// One-way propagation delay.
    pub one_way_delay: Duration,
    /// Drop-tail queue in bytes; `None` for one bandwidth-delay product of
    /// the round trip (`rate · 2 · one_way_delay`), at least 3000 bytes.
    pub queue_bytes: Option<usize>,
    /// Random loss.
    pub loss: LossModel,
    /// Reordering: (probability, extra delay of a held-back packet).
    pub reorder: Option<(f64, Duration)>,
    /// Duplication probability.
    pub duplicate: f64,
    /// Corruption probability (one flipped bit).
    pub corrupt: f64,
    /// Jitter spread (extra one-way delay drawn per packet, see [`JitterDist`]).
    pub jitter: Option<Duration>,
    /// How jitter is drawn.
    pub jitter_dist: JitterDist,
    /// Whether jitter may reorder packets (otherwise a packet never overtakes the one
    /// ahead of it, and jitter only bunches packets).
    pub jitter_reorder: bool,
    /// Maximum datagram size.
    pub mtu: Option<usize>,
}

impl LinkSpec {
    /// A clean link of `rate_bps` and round-trip time `rtt` (each direction
    /// gets `rtt / 2`) with a one-BDP queue.
    #[must_use]
    pub fn new(rate_bps: u64, rtt: Duration) -> Self {
        Self {
            rate_bps: Some(rate_bps),
            one_way_delay: rtt / 2,
            queue_bytes: None,
            loss: LossModel::None,
            reorder: None,
            duplicate: 0.0,
            corrupt: 0.0,
            jitter: None,
            jitter_dist: JitterDist::Uniform,
            jitter_reorder: false,
            mtu: None,
        }
    }

    /// With this loss model.
    #[must_use]
    pub fn loss(mut self, loss: LossModel) -> Self {
        self.loss = loss;
        self
    }

    /// With this queue size in bytes.
    #[must_use]
    pub fn queue_bytes(mut self, bytes: usize) -> Self {
        self.queue_bytes = Some(bytes);
        self
    }

    /// With reordering.
    #[must_use]
    pub fn reorder(mut self, prob: f64, extra_delay: Duration) -> Self {
        self.reorder = Some((prob, extra_delay));
        self
    }

    /// With duplication.
    #[must_use]
    pub fn duplicate(mut self, p: f64) -> Self {
        self.duplicate = p;
        self
    }

    /// With corruption.
    #[must_use]
    pub fn corrupt(mut self, p: f64) -> Self {
        self.corrupt = p;
        self
    }

    /// With jitter.
    #[must_use]
    pub fn jitter(mut self, max: Duration) -> Self {
        self.jitter = Some(max);
        self
    }

    /// With round-trip jitter of `±spread/2` around the current RTT: each direction's
    /// fixed delay drops by `spread/4` and gains `spread/2` of jitter drawn from `dist`
    /// (mean `spread/4` for both distributions), so the mean RTT is unchanged and, for the
    /// uniform, the RTT ranges over `rtt ± spread/2`.
    #[must_use]
    pub fn rtt_jitter(mut self, spread: Duration, dist: JitterDist, reorder: bool) -> Self {
        self.one_way_delay = self.one_way_delay.saturating_sub(spread / 4);
        self.jitter = Some(spread / 2);
        self.jitter_dist = dist;
        self.jitter_reorder = reorder;
        self
    }

    /// With an MTU.
    #[must_use]
    pub fn mtu(mut self, bytes: usize) -> Self {
        self.mtu = Some(bytes);
        self
    }

    /// The queue size this spec uses for its rate node.
    #[must_use]
    pub fn effective_queue_bytes(&self) -> usize {
        match (self.queue_bytes, self.rate_bps) {
            (Some(q), _) => q,
            (None, Some(rate)) => {
                let bdp = rate as f64 * 2.0 * self.one_way_delay.as_secs_f64() / 8.0;
                (bdp as usize).max(3000)
            }
            (None, None) => 0,
        }
    }

    /// Add the nodes of one direction to `sim` (in the order documented on
    /// [`LinkSpec`]) without making a path.
    pub fn build_nodes(&self, sim: &mut Sim) -> Vec<NodeId> {
        let mut ids = Vec::new();
        if let Some(mtu) = self.mtu {
            ids.push(sim.add_node(Mtu::new(mtu)));
        }
        if let Some(rate) = self.rate_bps {
            ids.push(sim.add_node(Rate::new(rate, self.effective_queue_bytes())));
        }
        if !self.one_way_delay.is_zero() {
            ids.push(sim.add_node(Delay::new(self.one_way_delay)));
        }
        if let Some(j) = self.jitter {
            ids.push(sim.add_node(Jitter::new(j, self.jitter_reorder).with_dist(self.jitter_dist)));
        }
        match self.loss {
            LossModel::None => {}
            LossModel::Bernoulli(p) => ids.push(sim.add_node(Bernoulli::new(p))),
            LossModel::Gilbert { mean, burst } => {
                ids.push(sim.add_node(GilbertElliott::from_mean_burst(mean, burst)));
            }
        }
        if let Some((p, extra)) = self.reorder {
            ids.push(sim.add_node(Reorder::new(p, extra)));
        }
        if self.duplicate > 0.0 {
            ids.push(sim.add_node(Duplicate::new(self.duplicate)));
        }
        if self.corrupt > 0.0 {
            ids.push(sim.add_node(Corrupt::new(self.corrupt)));
        }
        ids
    }

    /// Add one direction to `sim` as a path.
    pub fn build_path(&self, sim: &mut Sim) -> PathId {
        let ids = self.build_nodes(sim);
        sim.add_path(ids)
    }
}

// Here rather than in sim.rs, so the simulator core knows nothing of link specs: link.rs
// builds on sim.rs and not the other way round.
impl Sim {
    /// Build the forward and return paths of `spec` (see [`LinkSpec`]).
    pub fn add_link(&mut self, spec: &LinkSpec) -> (PathId, PathId) {
        self.add_asymmetric_link(spec, spec)
    }

    /// Add a link whose two directions differ (a satellite return link at a tenth of the
    /// forward rate): `forward` carries the client's packets, `ret` the server's.
    pub fn add_asymmetric_link(&mut self, forward: &LinkSpec, ret: &LinkSpec) -> (PathId, PathId) {
        let f = forward.build_path(self);
        let r = ret.build_path(self);
        (f, r)
    }
}
