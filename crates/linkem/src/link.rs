//! [`Link`]: one direction of the emulated link as a sans-IO state machine.
//!
//! Time only comes in as arguments, so the same code runs under the real
//! clock in the emulator and under virtual time in tests. Every packet gets
//! its release time when it is pushed (all random draws happen then, in a
//! fixed order), and waits in a binary heap keyed by release time, so
//! thousands of packets in flight cost one heap entry each and no timer.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, VecDeque};
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::config::{ConfigError, JitterDist, LinkConfig};
use crate::counters::Counters;

/// One direction of an emulated link.
///
/// [`push`](Self::push) packets as they arrive, then [`poll`](Self::poll)
/// until it returns `None` whenever [`next_release`](Self::next_release) has
/// come. See [`LinkConfig`] for the order of the impairments.
#[derive(Debug)]
pub struct Link {
    config: LinkConfig,
    rng: ChaCha8Rng,
    /// Whether the Gilbert-Elliott chain is in its bad state.
    gilbert_bad: bool,
    /// When the bottleneck finishes serialising the last accepted packet.
    busy_until: Option<Instant>,
    /// Remainder (in ns·bit/s) of the serialisation times, carried so that
    /// long back-to-back runs drain at exactly `rate_bps`.
    carry: u128,
    /// Departure time and size of every packet still in the bottleneck
    /// queue, oldest first (departures are FIFO, so this is sorted).
    queued: VecDeque<(Instant, u64)>,
    /// Sum of the sizes in `queued`.
    backlog: u64,
    /// Release time of the last in-order packet, the floor for the next one
    /// when jitter must not reorder.
    fifo_floor: Option<Instant>,
    heap: BinaryHeap<Scheduled>,
    /// Tie-breaker for equal release times: earlier scheduled leaves first.
    next_order: u64,
    /// Arrival number of the next pushed packet.
    next_seq: u64,
    /// Highest arrival number released so far, to count reordering.
    highest_released: Option<u64>,
    /// Whether the link is cut ([`Link::set_down`]).
    down: bool,
    counters: Counters,
}

/// A packet waiting in the heap for its release time.
#[derive(Debug)]
struct Scheduled {
    at: Instant,
    order: u64,
    seq: u64,
    packet: Vec<u8>,
}

impl PartialEq for Scheduled {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Scheduled {}
impl PartialOrd for Scheduled {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Scheduled {
    /// Reversed, so that `BinaryHeap` (a max-heap) pops the earliest.
    fn cmp(&self, other: &Self) -> Ordering {
        (other.at, other.order).cmp(&(self.at, self.order))
    }
}

impl Link {
    /// A link behaving as `config`, drawing from a ChaCha8 stream seeded with
    /// `config.seed`.
    ///
    /// # Errors
    /// The first invalid parameter (see [`LinkConfig::validate`]).
    pub fn new(config: LinkConfig) -> Result<Self, ConfigError> {
        config.validate()?;
        Ok(Self {
            rng: ChaCha8Rng::seed_from_u64(config.seed),
            config,
            gilbert_bad: false,
            busy_until: None,
            carry: 0,
            queued: VecDeque::new(),
            backlog: 0,
            fifo_floor: None,
            heap: BinaryHeap::new(),
            next_order: 0,
            next_seq: 0,
            highest_released: None,
            down: false,
            counters: Counters::default(),
        })
    }

    /// The configuration this link runs.
    #[must_use]
    pub fn config(&self) -> &LinkConfig {
        &self.config
    }

    /// Offers a packet that arrived at `now`. It is dropped (and counted) or
    /// scheduled for release; `now` must not go backwards between calls.
    pub fn push(&mut self, now: Instant, packet: Vec<u8>) {
        let len = packet.len() as u64;
        self.counters.packets_in += 1;
        self.counters.bytes_in += len;
        if self.down {
            // A cut link carries nothing and draws nothing, so the random stream
            // after the outage is the one the same pushes would have met anyway.
            self.counters.down_drops += 1;
            return;
        }
        let seq = self.next_seq;
        self.next_seq += 1;

        let Some(departed) = self.serialise(now, len) else {
            self.counters.queue_drops += 1;
            return;
        };
        if self.channel_loss() {
            self.counters.lost += 1;
            return;
        }

        let mut at = departed + self.config.delay + self.jitter();
        if !self.config.jitter_reorder {
            if let Some(floor) = self.fifo_floor {
                at = at.max(floor);
            }
            self.fifo_floor = Some(at);
        }
        if self.chance(self.config.reorder) {
            at += self.config.reorder_delay;
        }
        if self.chance(self.config.duplicate) {
            self.counters.duplicated += 1;
            self.schedule(at, seq, packet.clone());
        }
        self.schedule(at, seq, packet);
    }

    /// The next packet whose release time is at or before `now`, in release
    /// order (equal times in push order); `None` if none is due yet.
    #[must_use]
    pub fn poll(&mut self, now: Instant) -> Option<Vec<u8>> {
        if self.heap.peek()?.at > now {
            return None;
        }
        let Scheduled { seq, packet, .. } = self.heap.pop()?;
        self.counters.delivered += 1;
        self.counters.bytes_delivered += packet.len() as u64;
        match self.highest_released {
            Some(high) if seq < high => self.counters.reordered += 1,
            _ => self.highest_released = Some(seq),
        }
        Some(packet)
    }

    /// When the next packet is due, if any is in flight. A driver sleeps
    /// until then (or until the next push) and then polls.
    #[must_use]
    pub fn next_release(&self) -> Option<Instant> {
        self.heap.peek().map(|s| s.at)
    }

    /// Cuts the link (`true`) or restores it (`false`), as when a cable is pulled
    /// or a radio loses its carrier: going down, every packet in the queue or in
    /// flight is lost, and until the link is restored every packet pushed is
    /// dropped; all of them count as `down_drops`. Restored, the link starts
    /// empty with its impairments and random stream where they were.
    pub fn set_down(&mut self, down: bool) {
        if down && !self.down {
            self.counters.down_drops += self.heap.len() as u64;
            self.heap.clear();
            self.queued.clear();
            self.backlog = 0;
            self.busy_until = None;
            self.carry = 0;
            self.fifo_floor = None;
        }
        self.down = down;
    }

    /// Whether the link is down ([`Self::set_down`]).
    #[must_use]
    pub fn is_down(&self) -> bool {
        self.down
    }

    /// The counters so far.
    #[must_use]
    pub fn counters(&self) -> Counters {
        self.counters
    }

    /// Packets scheduled and not yet released (duplicates included).
    #[must_use]
    pub fn in_flight(&self) -> usize {
        self.heap.len()
    }

    /// Bytes in the bottleneck queue at `now`, including the packet being
    /// serialised (0 without a rate limit).
    #[must_use]
    pub fn backlog(&self, now: Instant) -> u64 {
        self.queued
            .iter()
            .filter(|(departs, _)| *departs > now)
            .map(|(_, len)| len)
            .sum()
    }

    /// Puts a packet of `len` bytes through the drop-tail queue and the
    /// bottleneck; returns when its last bit leaves, or `None` if the queue
    /// is full.
    fn serialise(&mut self, now: Instant, len: u64) -> Option<Instant> {
        let Some(rate) = self.config.rate_bps else {
            return Some(now);
        };
        while let Some(&(departs, size)) = self.queued.front() {
            if departs > now {
                break;
            }
            self.queued.pop_front();
            self.backlog -= size;
        }
        if self.backlog > 0 && self.backlog + len > self.config.queue_bytes {
            return None;
        }
        let start = match self.busy_until {
            Some(busy) if busy > now => busy,
            _ => {
                self.carry = 0;
                now
            }
        };
        let bit_ns = u128::from(len) * 8 * 1_000_000_000 + self.carry;
        let rate = u128::from(rate);
        self.carry = bit_ns % rate;
        let tx = Duration::from_nanos(u64::try_from(bit_ns / rate).unwrap_or(u64::MAX));
        let departs = start + tx;
        self.busy_until = Some(departs);
        self.queued.push_back((departs, len));
        self.backlog += len;
        Some(departs)
    }

    /// Draws the channel loss for one packet: steps the Gilbert-Elliott
    /// chain, then draws the Bernoulli loss; lost if either says so.
    fn channel_loss(&mut self) -> bool {
        let mut lost = false;
        if let Some(ge) = self.config.gilbert_elliott {
            let flip = if self.gilbert_bad { ge.r } else { ge.p };
            if self.chance(flip) {
                self.gilbert_bad = !self.gilbert_bad;
            }
            lost = self.gilbert_bad;
        }
        let bernoulli = self.chance(self.config.loss);
        lost || bernoulli
    }

    /// The jitter of one packet: uniform in `[0, jitter]` (one draw), or
    /// normal with mean `jitter / 2` and standard deviation `jitter / 4`
    /// clipped at 0 (two draws, Box-Muller).
    fn jitter(&mut self) -> Duration {
        if self.config.jitter.is_zero() {
            return Duration::ZERO;
        }
        let max = u64::try_from(self.config.jitter.as_nanos()).unwrap_or(u64::MAX);
        match self.config.jitter_dist {
            JitterDist::Uniform => Duration::from_nanos(self.rng.gen_range(0..=max)),
            JitterDist::Normal => {
                // u1 in (0, 1] so that ln(u1) is finite.
                let u1 = 1.0 - self.rng.gen::<f64>();
                let u2 = self.rng.gen::<f64>();
                let z = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
                let j = max as f64 * (0.5 + 0.25 * z);
                Duration::from_nanos(j.max(0.0) as u64)
            }
        }
    }

    /// True with probability `p`; draws nothing when `p` is 0, so a
    /// parameter left at zero does not shift the random stream.
    fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && self.rng.gen_bool(p)
    }

    fn schedule(&mut self, at: Instant, seq: u64, packet: Vec<u8>) {
        let order = self.next_order;
        self.next_order += 1;
        self.heap.push(Scheduled {
            at,
            order,
            seq,
            packet,
        });
    }
}

#[cfg(test)]
mod tests;
