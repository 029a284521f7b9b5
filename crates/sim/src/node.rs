//! The [`Node`] trait, packets, per-node counters and the release-time queue
//! every node is built on.

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::time::Instant;

/// Index of a flow in a [`Sim`](crate::Sim); packets carry it (here, below the simulator, so
/// nodes need nothing of it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FlowId(pub(crate) usize);

impl FlowId {
    /// The flow's position in insertion order.
    #[must_use]
    pub fn index(self) -> usize {
        self.0
    }
}

/// The random number generator handed to nodes. Each node of a [`crate::Sim`]
/// owns one, derived from the simulation seed and the node's index, so adding
/// a node never changes the random choices of the others.
pub type SimRng = rand_chacha::ChaCha8Rng;

/// Which way a packet travels inside a flow.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Direction {
    /// Client to server (the flow's forward path).
    Forward,
    /// Server to client (the flow's return path).
    Return,
}

/// A datagram in flight through the simulated network.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Packet {
    /// The datagram bytes (a node may corrupt them).
    pub data: Vec<u8>,
    /// The flow the packet belongs to.
    pub flow: FlowId,
    /// The direction inside the flow.
    pub direction: Direction,
    /// Unique id given when the endpoint offered the datagram; duplicates
    /// made by [`crate::Duplicate`] keep the id of their original.
    pub id: u64,
    /// When the endpoint offered the datagram to the network.
    pub sent_at: Instant,
    /// Index of the next hop on the packet's path (owned by the simulator).
    pub(crate) hop: usize,
    /// Which of the flow's parallel links it travels (0: the flow's own paths; see
    /// [`crate::Sim::add_lane`]).
    pub(crate) lane: usize,
}

impl Packet {
    /// A packet outside any simulator (for driving a node directly in tests).
    #[must_use]
    pub fn new(data: Vec<u8>, id: u64, sent_at: Instant) -> Self {
        Self {
            data,
            flow: FlowId(0),
            direction: Direction::Forward,
            id,
            sent_at,
            hop: 0,
            lane: 0,
        }
    }

    /// Length of the datagram in bytes.
    #[must_use]
    pub fn len(&self) -> usize {
        self.data.len()
    }

    /// Whether the datagram is empty.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }
}

/// Counters kept by every node.
///
/// `packets_in` counts pushes; `packets_out` counts pops. A node that
/// duplicates can have `packets_out > packets_in`; in steady state
/// `packets_in + duplicated = packets_dropped + packets_out + queued`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NodeStats {
    /// Packets pushed into the node.
    pub packets_in: u64,
    /// Bytes pushed into the node.
    pub bytes_in: u64,
    /// Packets the node dropped (loss, queue overflow, MTU).
    pub packets_dropped: u64,
    /// Bytes the node dropped.
    pub bytes_dropped: u64,
    /// Packets that left the node.
    pub packets_out: u64,
    /// Bytes that left the node.
    pub bytes_out: u64,
    /// Extra copies made by a duplicating node.
    pub duplicated: u64,
    /// Packets with a flipped bit.
    pub corrupted: u64,
    /// Packets held back by a reordering node.
    pub reordered: u64,
}

/// One element of a chained link. A node takes packets in with
/// [`push`](Node::push), keeps them in a queue ordered by release time, and
/// gives them back with [`pop`](Node::pop) once their release time has come.
///
/// The simulator calls `pop(now)` whenever `now >= next_event()`, repeatedly
/// until it returns `None`, and routes each packet to the next node of its
/// path (or to the destination endpoint).
pub trait Node {
    /// Short name for diagnostics (`"rate"`, `"delay"`, …).
    fn name(&self) -> &'static str;
    /// Accept a packet at `now`. Randomness comes only from `rng`.
    fn push(&mut self, now: Instant, packet: Packet, rng: &mut SimRng);
    /// A packet whose release time is `<= now`, earliest first (FIFO among
    /// equal release times).
    fn pop(&mut self, now: Instant) -> Option<Packet>;
    /// The release time of the earliest queued packet.
    fn next_event(&self) -> Option<Instant>;
    /// The node's counters.
    fn stats(&self) -> &NodeStats;
}

struct Entry {
    at: Instant,
    seq: u64,
    packet: Packet,
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        self.at == other.at && self.seq == other.seq
    }
}
impl Eq for Entry {}
impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Entry {
    // Reversed: `BinaryHeap` is a max-heap and we want the earliest first.
    fn cmp(&self, other: &Self) -> Ordering {
        (other.at, other.seq).cmp(&(self.at, self.seq))
    }
}

/// A queue of packets ordered by release time (FIFO among equal times) that
/// also keeps the node's [`NodeStats`]. Building block for [`Node`]s.
#[derive(Default)]
pub struct ReleaseQueue {
    heap: BinaryHeap<Entry>,
    seq: u64,
    stats: NodeStats,
}

impl std::fmt::Debug for ReleaseQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReleaseQueue")
            .field("len", &self.heap.len())
            .field("stats", &self.stats)
            .finish()
    }
}

impl ReleaseQueue {
    /// An empty queue.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Count a packet arriving at the node.
    pub fn arrived(&mut self, packet: &Packet) {
        self.stats.packets_in += 1;
        self.stats.bytes_in += packet.len() as u64;
    }

    /// Count and discard a dropped packet.
    pub fn drop_packet(&mut self, packet: Packet) {
        self.stats.packets_dropped += 1;
        self.stats.bytes_dropped += packet.len() as u64;
    }

    /// Queue `packet` for release at `at`.
    pub fn schedule(&mut self, at: Instant, packet: Packet) {
        let seq = self.seq;
        self.seq += 1;
        self.heap.push(Entry { at, seq, packet });
    }

    /// Take the earliest packet whose release time is `<= now`.
    pub fn pop_due(&mut self, now: Instant) -> Option<Packet> {
        if self.heap.peek()?.at > now {
            return None;
        }
        let entry = self.heap.pop()?;
        self.stats.packets_out += 1;
        self.stats.bytes_out += entry.packet.len() as u64;
        Some(entry.packet)
    }

    /// Release time of the earliest queued packet.
    #[must_use]
    pub fn next_release(&self) -> Option<Instant> {
        self.heap.peek().map(|e| e.at)
    }

    /// Number of queued packets.
    #[must_use]
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    /// Whether nothing is queued.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }

    /// The counters.
    #[must_use]
    pub fn stats(&self) -> &NodeStats {
        &self.stats
    }

    /// The counters, for node-specific ones (duplicated, corrupted, …).
    pub fn stats_mut(&mut self) -> &mut NodeStats {
        &mut self.stats
    }
}
