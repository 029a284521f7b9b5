//! The endpoint trait, the network arena and the event loop.

use std::any::Any;
use std::time::{Duration, Instant};

use rand::SeedableRng;

use crate::node::{Direction, FlowId, Node, NodeStats, Packet, SimRng};
use crate::seed::{Seed, SEED_ENV};

/// Upcasting helper so the simulator can hand endpoints back as their
/// concrete type. Implemented for every `'static` type; never implement it
/// by hand.
pub trait AsAny: Any {
    /// `self` as `&dyn Any`.
    fn as_any(&self) -> &dyn Any;
    /// `self` as `&mut dyn Any`.
    fn as_any_mut(&mut self) -> &mut dyn Any;
}

impl<T: Any> AsAny for T {
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

/// A sans-IO endpoint the simulator drives (quinn-proto style): datagrams
/// and timeouts in, datagrams and the next deadline out.
pub trait Endpoint: AsAny {
    /// A datagram arrived from the peer at `now`.
    fn handle_datagram(&mut self, now: Instant, datagram: &[u8]);
    /// The next datagram to send; called repeatedly until `None` after every
    /// event.
    fn poll_transmit(&mut self, now: Instant) -> Option<Vec<u8>>;
    /// When the endpoint next wants [`handle_timeout`](Self::handle_timeout).
    fn poll_timeout(&self) -> Option<Instant>;
    /// The deadline from [`poll_timeout`](Self::poll_timeout) has passed.
    fn handle_timeout(&mut self, now: Instant);
    /// A datagram arrived on lane `lane` of the flow (one of several parallel links, see
    /// [`Sim::add_lane`]); single-link endpoints need not override it.
    fn handle_datagram_on(&mut self, now: Instant, lane: usize, datagram: &[u8]) {
        let _ = lane;
        self.handle_datagram(now, datagram);
    }
    /// The next datagram to send and the lane it takes; single-link endpoints need not
    /// override it (lane 0).
    fn poll_transmit_on(&mut self, now: Instant) -> Option<(usize, Vec<u8>)> {
        self.poll_transmit(now).map(|d| (0, d))
    }
}

/// Index of a node in a [`Sim`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId(pub(crate) usize);

/// Index of a path in a [`Sim`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PathId(pub(crate) usize);

/// One end of a flow.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Side {
    /// Sends on the forward path, receives on the return path.
    Client,
    /// Sends on the return path, receives on the forward path.
    Server,
}

/// Counters for one direction of one flow.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DirStats {
    /// Datagrams the sending endpoint offered to the path.
    pub offered_datagrams: u64,
    /// Bytes the sending endpoint offered.
    pub offered_bytes: u64,
    /// Datagrams handed to the receiving endpoint (duplicates included).
    pub delivered_datagrams: u64,
    /// Bytes handed to the receiving endpoint.
    pub delivered_bytes: u64,
}

/// Counters for both directions of a flow.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FlowStats {
    /// Client to server.
    pub forward: DirStats,
    /// Server to client.
    pub ret: DirStats,
}

impl FlowStats {
    /// The counters of one direction.
    #[must_use]
    pub fn dir(&self, direction: Direction) -> &DirStats {
        match direction {
            Direction::Forward => &self.forward,
            Direction::Return => &self.ret,
        }
    }
}

/// What happened to a datagram at the flow's edges (see [`Sim::enable_trace`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TraceKind {
    /// An endpoint offered it to the path.
    Offered,
    /// It reached the other endpoint.
    Delivered,
}

/// One recorded event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceEvent {
    /// Virtual time since the simulation epoch.
    pub at: Duration,
    /// Flow of the datagram.
    pub flow: FlowId,
    /// Direction of the datagram.
    pub direction: Direction,
    /// What happened.
    pub kind: TraceKind,
    /// Packet id (see [`Packet::id`]).
    pub id: u64,
    /// Datagram length.
    pub len: usize,
}

/// Why a run stopped early.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SimError {
    /// The total step bound was reached.
    #[error("step limit {limit} reached at t={at:?} (replay with {SEED_ENV}={seed})")]
    StepLimit {
        /// The bound.
        limit: u64,
        /// Virtual time since the epoch.
        at: Duration,
        /// The simulation seed.
        seed: u64,
    },
    /// Too many steps without virtual time advancing (an endpoint keeps
    /// asking for a timeout in the past, or a node releases forever).
    #[error("livelock: {steps} steps at t={at:?} without time advancing (replay with {SEED_ENV}={seed})")]
    Livelock {
        /// Steps taken at the same instant.
        steps: u64,
        /// Virtual time since the epoch.
        at: Duration,
        /// The simulation seed.
        seed: u64,
    },
    /// An endpoint returned datagrams from `poll_transmit` without end.
    #[error("endpoint of flow {flow} side {side:?} sent over {limit} datagrams in one instant at t={at:?} (replay with {SEED_ENV}={seed})")]
    TransmitFlood {
        /// Flow index.
        flow: usize,
        /// Which endpoint.
        side: Side,
        /// The per-instant bound.
        limit: u64,
        /// Virtual time since the epoch.
        at: Duration,
        /// The simulation seed.
        seed: u64,
    },
    /// `run_while`'s condition still held but nothing was left to happen.
    #[error("stalled at t={at:?}: no pending events but the condition still holds (replay with {SEED_ENV}={seed})")]
    Stalled {
        /// Virtual time since the epoch.
        at: Duration,
        /// The simulation seed.
        seed: u64,
    },
}

struct NodeSlot {
    node: Box<dyn Node>,
    rng: SimRng,
}

struct Flow {
    client: Box<dyn Endpoint>,
    server: Box<dyn Endpoint>,
    forward: PathId,
    ret: PathId,
    /// Parallel links beyond the first (lane `i + 1`): (forward, return) paths.
    lanes: Vec<(PathId, PathId)>,
    stats: FlowStats,
}

/// Default bound on the total number of steps of one `run_*` call.
pub const DEFAULT_STEP_LIMIT: u64 = 200_000_000;
/// Default bound on steps at one virtual instant.
pub const DEFAULT_SAME_INSTANT_LIMIT: u64 = 100_000;
/// Default bound on datagrams one endpoint may emit at one instant.
pub const DEFAULT_TRANSMIT_LIMIT: u64 = 1_000_000;

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0100_0000_01b3;

fn fnv(mut h: u64, bytes: &[u8]) -> u64 {
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(FNV_PRIME);
    }
    h
}

/// The simulator: an arena of [`Node`]s, paths (chains of node ids, a node
/// may sit on several paths), flows (two endpoints plus a forward and a
/// return path) and a virtual clock.
///
/// Each step advances the clock to the earliest of every node's
/// [`Node::next_event`] and every endpoint's [`Endpoint::poll_timeout`],
/// releases due packets from nodes (routing them to the next node or
/// delivering them), fires due endpoint timeouts, then drains
/// [`Endpoint::poll_transmit`] of every endpoint into its path.
pub struct Sim {
    seed: u64,
    epoch: Instant,
    now: Instant,
    nodes: Vec<NodeSlot>,
    paths: Vec<Vec<NodeId>>,
    flows: Vec<Flow>,
    next_packet_id: u64,
    steps: u64,
    step_limit: u64,
    same_instant: u64,
    same_instant_limit: u64,
    transmit_limit: u64,
    digest: u64,
    trace: Option<Vec<TraceEvent>>,
}

impl std::fmt::Debug for Sim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sim")
            .field("seed", &self.seed)
            .field("elapsed", &self.elapsed())
            .field("nodes", &self.nodes.len())
            .field("paths", &self.paths.len())
            .field("flows", &self.flows.len())
            .field("steps", &self.steps)
            .finish_non_exhaustive()
    }
}

impl Sim {
    /// A simulator whose virtual clock starts at `epoch`.
    #[must_use]
    pub fn new(seed: impl Into<Seed>, epoch: Instant) -> Self {
        Self {
            seed: seed.into().0,
            epoch,
            now: epoch,
            nodes: Vec::new(),
            paths: Vec::new(),
            flows: Vec::new(),
            next_packet_id: 0,
            steps: 0,
            step_limit: DEFAULT_STEP_LIMIT,
            same_instant: 0,
            same_instant_limit: DEFAULT_SAME_INSTANT_LIMIT,
            transmit_limit: DEFAULT_TRANSMIT_LIMIT,
            digest: FNV_OFFSET,
            trace: None,
        }
    }

    /// A simulator whose epoch is the real current instant (convenience for
    /// tests; the run itself never reads the clock again).
    #[must_use]
    pub fn with_seed(seed: impl Into<Seed>) -> Self {
        // The one place the simulator reads the real clock: `Instant` has no
        // public constructor, so the virtual epoch has to come from `now()`.
        #[allow(clippy::disallowed_methods)]
        let epoch = Instant::now();
        Self::new(seed, epoch)
    }

    /// The seed.
    #[must_use]
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// Current virtual time.
    #[must_use]
    pub fn now(&self) -> Instant {
        self.now
    }

    /// The instant the virtual clock started at.
    #[must_use]
    pub fn epoch(&self) -> Instant {
        self.epoch
    }

    /// Virtual time elapsed since the epoch.
    #[must_use]
    pub fn elapsed(&self) -> Duration {
        self.now - self.epoch
    }

    /// Steps taken so far.
    #[must_use]
    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// Bound on the steps of one `run_*` call (default
    /// [`DEFAULT_STEP_LIMIT`]).
    pub fn set_step_limit(&mut self, limit: u64) {
        self.step_limit = limit;
    }

    /// Bound on consecutive steps without time advancing (default
    /// [`DEFAULT_SAME_INSTANT_LIMIT`]).
    pub fn set_same_instant_limit(&mut self, limit: u64) {
        self.same_instant_limit = limit;
    }

    /// Record every offered and delivered datagram (see [`Sim::trace`]).
    pub fn enable_trace(&mut self) {
        self.trace.get_or_insert_with(Vec::new);
    }

    /// Recorded events, if [`Sim::enable_trace`] was called.
    #[must_use]
    pub fn trace(&self) -> Option<&[TraceEvent]> {
        self.trace.as_deref()
    }

    /// A running hash over every offered and delivered datagram (time, flow,
    /// direction, bytes). Same seed and same endpoints ⇒ same digest.
    #[must_use]
    pub fn digest(&self) -> u64 {
        self.digest
    }

    /// Add a node; its random stream is derived from the seed and its index.
    pub fn add_node(&mut self, node: impl Node + 'static) -> NodeId {
        self.add_boxed_node(Box::new(node))
    }

    /// Add a boxed node.
    pub fn add_boxed_node(&mut self, node: Box<dyn Node>) -> NodeId {
        let id = self.nodes.len();
        let mut rng = SimRng::seed_from_u64(self.seed);
        rng.set_stream(id as u64 + 1);
        self.nodes.push(NodeSlot { node, rng });
        NodeId(id)
    }

    /// Add a path: packets visit `nodes` in order. An empty path delivers
    /// instantly. A node may appear on several paths (a shared bottleneck).
    ///
    /// # Panics
    /// If a node id does not belong to this simulator.
    pub fn add_path(&mut self, nodes: impl IntoIterator<Item = NodeId>) -> PathId {
        let nodes: Vec<NodeId> = nodes.into_iter().collect();
        for n in &nodes {
            assert!(n.0 < self.nodes.len(), "unknown node {n:?}");
        }
        self.paths.push(nodes);
        PathId(self.paths.len() - 1)
    }

    /// The nodes of a path.
    #[must_use]
    pub fn path(&self, path: PathId) -> &[NodeId] {
        &self.paths[path.0]
    }

    /// Add a flow: `client` sends on `forward`, `server` on `ret`.
    ///
    /// # Panics
    /// If a path id does not belong to this simulator.
    pub fn add_flow(
        &mut self,
        client: impl Endpoint,
        server: impl Endpoint,
        forward: PathId,
        ret: PathId,
    ) -> FlowId {
        self.add_boxed_flow(Box::new(client), Box::new(server), forward, ret)
    }

    /// Add a flow of boxed endpoints.
    ///
    /// # Panics
    /// If a path id does not belong to this simulator.
    pub fn add_boxed_flow(
        &mut self,
        client: Box<dyn Endpoint>,
        server: Box<dyn Endpoint>,
        forward: PathId,
        ret: PathId,
    ) -> FlowId {
        assert!(forward.0 < self.paths.len() && ret.0 < self.paths.len());
        self.flows.push(Flow {
            client,
            server,
            forward,
            ret,
            lanes: Vec::new(),
            stats: FlowStats::default(),
        });
        FlowId(self.flows.len() - 1)
    }

    /// Adds a parallel link to `flow` (multipath): datagrams the endpoints send on the
    /// returned lane take `forward` (client to server) and `ret`; lane 0 is the flow's own
    /// pair of paths.
    ///
    /// # Panics
    /// If a path id does not belong to this simulator.
    pub fn add_lane(&mut self, flow: FlowId, forward: PathId, ret: PathId) -> usize {
        assert!(forward.0 < self.paths.len() && ret.0 < self.paths.len());
        let f = &mut self.flows[flow.0];
        f.lanes.push((forward, ret));
        f.lanes.len()
    }

    /// Number of flows.
    #[must_use]
    pub fn flow_count(&self) -> usize {
        self.flows.len()
    }

    /// A node's counters.
    #[must_use]
    pub fn node_stats(&self, node: NodeId) -> &NodeStats {
        self.nodes[node.0].node.stats()
    }

    /// A node's diagnostic name.
    #[must_use]
    pub fn node_name(&self, node: NodeId) -> &'static str {
        self.nodes[node.0].node.name()
    }

    /// A flow's counters.
    #[must_use]
    pub fn flow_stats(&self, flow: FlowId) -> &FlowStats {
        &self.flows[flow.0].stats
    }

    /// An endpoint as a trait object.
    #[must_use]
    pub fn endpoint(&self, flow: FlowId, side: Side) -> &dyn Endpoint {
        let f = &self.flows[flow.0];
        match side {
            Side::Client => f.client.as_ref(),
            Side::Server => f.server.as_ref(),
        }
    }

    /// An endpoint as a mutable trait object (e.g. to write stream data into
    /// it between runs).
    pub fn endpoint_mut(&mut self, flow: FlowId, side: Side) -> &mut dyn Endpoint {
        let f = &mut self.flows[flow.0];
        match side {
            Side::Client => f.client.as_mut(),
            Side::Server => f.server.as_mut(),
        }
    }

    /// An endpoint as its concrete type, `None` if it is not a `T`.
    #[must_use]
    pub fn get<T: Endpoint>(&self, flow: FlowId, side: Side) -> Option<&T> {
        self.endpoint(flow, side).as_any().downcast_ref::<T>()
    }

    /// An endpoint as its mutable concrete type, `None` if it is not a `T`.
    pub fn get_mut<T: Endpoint>(&mut self, flow: FlowId, side: Side) -> Option<&mut T> {
        self.endpoint_mut(flow, side)
            .as_any_mut()
            .downcast_mut::<T>()
    }

    /// The client endpoint of `flow` as a `T`.
    #[must_use]
    pub fn client<T: Endpoint>(&self, flow: FlowId) -> Option<&T> {
        self.get(flow, Side::Client)
    }

    /// The server endpoint of `flow` as a `T`.
    #[must_use]
    pub fn server<T: Endpoint>(&self, flow: FlowId) -> Option<&T> {
        self.get(flow, Side::Server)
    }

    /// The earliest pending event (node release or endpoint timeout).
    #[must_use]
    pub fn next_event(&self) -> Option<Instant> {
        let nodes = self.nodes.iter().filter_map(|s| s.node.next_event());
        let eps = self
            .flows
            .iter()
            .flat_map(|f| [f.client.poll_timeout(), f.server.poll_timeout()])
            .flatten();
        nodes.chain(eps).min()
    }

    /// Run until virtual time reaches `deadline` (events at exactly
    /// `deadline` are processed). The clock ends at `deadline`.
    ///
    /// # Errors
    /// A [`SimError`] if a step bound is hit.
    pub fn run_until(&mut self, deadline: Instant) -> Result<(), SimError> {
        let start = self.steps;
        // Let endpoints emit their first datagrams even if they set no timer.
        self.drain_transmits()?;
        loop {
            match self.next_event() {
                Some(t) if t <= deadline => {
                    self.check_steps(start)?;
                    self.step_at(t)?;
                }
                _ => break,
            }
        }
        if deadline > self.now {
            self.now = deadline;
            self.same_instant = 0;
        }
        Ok(())
    }

    /// Run for `d` of virtual time.
    ///
    /// # Errors
    /// A [`SimError`] if a step bound is hit.
    pub fn run_for(&mut self, d: Duration) -> Result<(), SimError> {
        self.run_until(self.now + d)
    }

    /// Run while `cond(self)` holds (checked before every step).
    ///
    /// # Errors
    /// [`SimError::Stalled`] if the condition holds but no event is pending;
    /// another [`SimError`] if a step bound is hit.
    pub fn run_while(&mut self, mut cond: impl FnMut(&Sim) -> bool) -> Result<(), SimError> {
        let start = self.steps;
        self.drain_transmits()?;
        while cond(self) {
            let Some(t) = self.next_event() else {
                return Err(SimError::Stalled {
                    at: self.elapsed(),
                    seed: self.seed,
                });
            };
            self.check_steps(start)?;
            self.step_at(t)?;
        }
        Ok(())
    }

    /// Run while `cond` holds but stop at `deadline`; returns whether the
    /// condition became false (`true`) or the deadline came first (`false`).
    ///
    /// # Errors
    /// A [`SimError`] if a step bound is hit or the run stalls.
    pub fn run_while_until(
        &mut self,
        deadline: Instant,
        mut cond: impl FnMut(&Sim) -> bool,
    ) -> Result<bool, SimError> {
        let start = self.steps;
        self.drain_transmits()?;
        while cond(self) {
            match self.next_event() {
                Some(t) if t <= deadline => {
                    self.check_steps(start)?;
                    self.step_at(t)?;
                }
                Some(_) => {
                    self.now = self.now.max(deadline);
                    return Ok(false);
                }
                None => {
                    return Err(SimError::Stalled {
                        at: self.elapsed(),
                        seed: self.seed,
                    })
                }
            }
        }
        Ok(true)
    }

    fn check_steps(&self, start: u64) -> Result<(), SimError> {
        if self.steps - start >= self.step_limit {
            return Err(SimError::StepLimit {
                limit: self.step_limit,
                at: self.elapsed(),
                seed: self.seed,
            });
        }
        Ok(())
    }

    /// Process every event due at `t` (or now, if `t` is in the past).
    fn step_at(&mut self, t: Instant) -> Result<(), SimError> {
        self.steps += 1;
        if t > self.now {
            self.now = t;
            self.same_instant = 0;
        } else {
            self.same_instant += 1;
            if self.same_instant > self.same_instant_limit {
                return Err(SimError::Livelock {
                    steps: self.same_instant,
                    at: self.elapsed(),
                    seed: self.seed,
                });
            }
        }
        let now = self.now;
        for i in 0..self.nodes.len() {
            while let Some(packet) = self.nodes[i].node.pop(now) {
                self.forward(packet);
            }
        }
        for f in &mut self.flows {
            if f.client.poll_timeout().is_some_and(|d| d <= now) {
                f.client.handle_timeout(now);
            }
            if f.server.poll_timeout().is_some_and(|d| d <= now) {
                f.server.handle_timeout(now);
            }
        }
        self.drain_transmits()
    }

    fn drain_transmits(&mut self) -> Result<(), SimError> {
        let now = self.now;
        for fi in 0..self.flows.len() {
            for side in [Side::Client, Side::Server] {
                let mut count = 0u64;
                loop {
                    let f = &mut self.flows[fi];
                    let ep = match side {
                        Side::Client => &mut f.client,
                        Side::Server => &mut f.server,
                    };
                    let Some((lane, data)) = ep.poll_transmit_on(now) else {
                        break;
                    };
                    count += 1;
                    if count > self.transmit_limit {
                        return Err(SimError::TransmitFlood {
                            flow: fi,
                            side,
                            limit: self.transmit_limit,
                            at: self.elapsed(),
                            seed: self.seed,
                        });
                    }
                    let direction = match side {
                        Side::Client => Direction::Forward,
                        Side::Server => Direction::Return,
                    };
                    self.offer(FlowId(fi), direction, lane, data);
                }
            }
        }
        Ok(())
    }

    fn record(&mut self, kind: TraceKind, packet: &Packet) {
        let at = self.now - self.epoch;
        let mut h = self.digest;
        h = fnv(h, &(at.as_nanos() as u64).to_le_bytes());
        h = fnv(
            h,
            &[
                packet.flow.0 as u8,
                packet.direction as u8,
                kind as u8,
                (packet.len() & 0xff) as u8,
                (packet.len() >> 8) as u8,
            ],
        );
        if kind == TraceKind::Delivered {
            h = fnv(h, &packet.data);
        }
        self.digest = h;
        if let Some(trace) = &mut self.trace {
            trace.push(TraceEvent {
                at,
                flow: packet.flow,
                direction: packet.direction,
                kind,
                id: packet.id,
                len: packet.len(),
            });
        }
    }

    fn offer(&mut self, flow: FlowId, direction: Direction, lane: usize, data: Vec<u8>) {
        let lanes = self.flows[flow.0].lanes.len();
        let packet = Packet {
            data,
            flow,
            direction,
            id: self.next_packet_id,
            sent_at: self.now,
            hop: 0,
            // A lane the flow does not have falls back to its own paths.
            lane: if lane <= lanes { lane } else { 0 },
        };
        self.next_packet_id += 1;
        let stats = &mut self.flows[flow.0].stats;
        let d = match direction {
            Direction::Forward => &mut stats.forward,
            Direction::Return => &mut stats.ret,
        };
        d.offered_datagrams += 1;
        d.offered_bytes += packet.len() as u64;
        self.record(TraceKind::Offered, &packet);
        self.forward(packet);
    }

    /// Send `packet` to its next hop, or deliver it.
    fn forward(&mut self, mut packet: Packet) {
        let f = &self.flows[packet.flow.0];
        let (forward, ret) = match packet.lane {
            0 => (f.forward, f.ret),
            l => f.lanes[l - 1],
        };
        let path = match packet.direction {
            Direction::Forward => forward,
            Direction::Return => ret,
        };
        let now = self.now;
        if let Some(&node) = self.paths[path.0].get(packet.hop) {
            packet.hop += 1;
            let slot = &mut self.nodes[node.0];
            slot.node.push(now, packet, &mut slot.rng);
            return;
        }
        self.record(TraceKind::Delivered, &packet);
        let f = &mut self.flows[packet.flow.0];
        let (d, ep) = match packet.direction {
            Direction::Forward => (&mut f.stats.forward, &mut f.server),
            Direction::Return => (&mut f.stats.ret, &mut f.client),
        };
        d.delivered_datagrams += 1;
        d.delivered_bytes += packet.len() as u64;
        ep.handle_datagram_on(now, packet.lane, &packet.data);
    }
}
