//! [`Outage`]: a link that goes down and comes back on a schedule (an interface pulled,
//! a radio out of coverage), for multipath failover scenarios.

use std::time::Instant;

use crate::node::{Node, NodeStats, Packet, ReleaseQueue, SimRng};

/// Drops every packet that arrives while the link is down, passes the rest at once.
/// Down during each `[from, to)` window of the schedule (virtual time).
#[derive(Debug)]
pub struct Outage {
    down: Vec<(Instant, Instant)>,
    queue: ReleaseQueue,
}

impl Outage {
    /// A link down during each `[from, to)` window.
    #[must_use]
    pub fn new(down: Vec<(Instant, Instant)>) -> Self {
        Self {
            down,
            queue: ReleaseQueue::new(),
        }
    }

    /// Whether the link is down at `now`.
    #[must_use]
    pub fn is_down(&self, now: Instant) -> bool {
        self.down.iter().any(|&(from, to)| now >= from && now < to)
    }
}

impl Node for Outage {
    fn name(&self) -> &'static str {
        "outage"
    }
    fn push(&mut self, now: Instant, packet: Packet, _rng: &mut SimRng) {
        self.queue.arrived(&packet);
        if self.is_down(now) {
            self.queue.drop_packet(packet);
        } else {
            self.queue.schedule(now, packet);
        }
    }
    crate::nodes::queue_accessors!();
}
