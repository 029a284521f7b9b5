//! The built-in link nodes.

use std::time::{Duration, Instant};

use rand::Rng;

use crate::node::{Node, NodeStats, Packet, ReleaseQueue, SimRng};

fn check_prob(p: f64, what: &str) {
    assert!(
        (0.0..=1.0).contains(&p),
        "{what}: probability {p} is outside [0, 1]"
    );
}

macro_rules! queue_accessors {
    () => {
        fn pop(&mut self, now: Instant) -> Option<Packet> {
            self.queue.pop_due(now)
        }
        fn next_event(&self) -> Option<Instant> {
            self.queue.next_release()
        }
        fn stats(&self) -> &NodeStats {
            self.queue.stats()
        }
    };
}
pub(crate) use queue_accessors;

/// Fixed propagation delay: every packet leaves exactly `delay` after it
/// arrived. Order is preserved.
#[derive(Debug)]
pub struct Delay {
    delay: Duration,
    queue: ReleaseQueue,
}

impl Delay {
    /// A delay of `delay`.
    #[must_use]
    pub fn new(delay: Duration) -> Self {
        Self {
            delay,
            queue: ReleaseQueue::new(),
        }
    }
}

impl Node for Delay {
    fn name(&self) -> &'static str {
        "delay"
    }
    fn push(&mut self, now: Instant, packet: Packet, _rng: &mut SimRng) {
        self.queue.arrived(&packet);
        self.queue.schedule(now + self.delay, packet);
    }
    queue_accessors!();
}

/// How a [`Jitter`] node draws each packet's extra delay from its spread `J`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum JitterDist {
    /// Uniform in `[0, J]`.
    #[default]
    Uniform,
    /// Normal with mean `J/2` and standard deviation `J/4`, clipped to `[0, 2J]`: most
    /// draws within `[0, J]` like the uniform, with rare larger spikes.
    Normal,
}

/// Random extra delay drawn from `dist` with spread `max`. With `allow_reorder == false`
/// a packet never leaves before the one pushed ahead of it (its release time
/// is raised to the previous one), so jitter only bunches packets.
#[derive(Debug)]
pub struct Jitter {
    max: Duration,
    dist: JitterDist,
    allow_reorder: bool,
    last_release: Option<Instant>,
    queue: ReleaseQueue,
}

impl Jitter {
    /// Jitter of up to `max`.
    #[must_use]
    pub fn new(max: Duration, allow_reorder: bool) -> Self {
        Self {
            max,
            dist: JitterDist::Uniform,
            allow_reorder,
            last_release: None,
            queue: ReleaseQueue::new(),
        }
    }
}

impl Jitter {
    /// Draws from `dist` instead of the uniform.
    #[must_use]
    pub fn with_dist(mut self, dist: JitterDist) -> Self {
        self.dist = dist;
        self
    }

    fn draw(&self, rng: &mut SimRng) -> Duration {
        let max_ns = u64::try_from(self.max.as_nanos()).unwrap_or(u64::MAX);
        match self.dist {
            JitterDist::Uniform => Duration::from_nanos(rng.gen_range(0..=max_ns)),
            JitterDist::Normal => {
                // Box-Muller: one standard normal from two uniforms in (0, 1].
                let u1: f64 = 1.0 - rng.gen::<f64>();
                let u2: f64 = rng.gen::<f64>();
                let z = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
                let j = max_ns as f64;
                Duration::from_nanos((j / 2.0 + z * j / 4.0).clamp(0.0, 2.0 * j) as u64)
            }
        }
    }
}

impl Node for Jitter {
    fn name(&self) -> &'static str {
        "jitter"
    }
    fn push(&mut self, now: Instant, packet: Packet, rng: &mut SimRng) {
        self.queue.arrived(&packet);
        let mut at = now + self.draw(rng);
        if !self.allow_reorder {
            if let Some(last) = self.last_release {
                at = at.max(last);
            }
        }
        self.last_release = Some(at);
        self.queue.schedule(at, packet);
    }
    queue_accessors!();
}

/// A bottleneck: a drop-tail byte queue drained at `bits_per_sec`.
///
/// A packet is accepted if the backlog (bytes queued, including the packet
/// being serialised) plus its size fits in `queue_bytes` (a packet arriving
/// at an empty queue is always accepted). It leaves once its last bit is
/// sent: departure = max(arrival, previous departure) + len·8/rate, with the
/// rounding remainder carried so long runs are exact.
#[derive(Debug)]
pub struct Rate {
    bits_per_sec: u64,
    queue_bytes: usize,
    backlog: usize,
    busy_until: Option<Instant>,
    carry: u128,
    queue: ReleaseQueue,
}

impl Rate {
    /// A link of `bits_per_sec` with a `queue_bytes` drop-tail buffer.
    ///
    /// # Panics
    /// If `bits_per_sec` is zero.
    #[must_use]
    pub fn new(bits_per_sec: u64, queue_bytes: usize) -> Self {
        assert!(bits_per_sec > 0, "rate: bits_per_sec must be positive");
        Self {
            bits_per_sec,
            queue_bytes,
            backlog: 0,
            busy_until: None,
            carry: 0,
            queue: ReleaseQueue::new(),
        }
    }

    /// Bytes currently queued (including the packet being serialised).
    #[must_use]
    pub fn backlog(&self) -> usize {
        self.backlog
    }
}

impl Node for Rate {
    fn name(&self) -> &'static str {
        "rate"
    }
    fn push(&mut self, now: Instant, packet: Packet, _rng: &mut SimRng) {
        self.queue.arrived(&packet);
        if self.backlog > 0 && self.backlog + packet.len() > self.queue_bytes {
            self.queue.drop_packet(packet);
            return;
        }
        let start = match self.busy_until {
            Some(busy) if busy > now => busy,
            _ => {
                self.carry = 0;
                now
            }
        };
        let num = packet.len() as u128 * 8 * 1_000_000_000 + self.carry;
        let bps = u128::from(self.bits_per_sec);
        self.carry = num % bps;
        let tx = u64::try_from(num / bps).unwrap_or(u64::MAX);
        let depart = start + Duration::from_nanos(tx);
        self.busy_until = Some(depart);
        self.backlog += packet.len();
        self.queue.schedule(depart, packet);
    }
    fn pop(&mut self, now: Instant) -> Option<Packet> {
        let p = self.queue.pop_due(now)?;
        self.backlog -= p.len();
        Some(p)
    }
    fn next_event(&self) -> Option<Instant> {
        self.queue.next_release()
    }
    fn stats(&self) -> &NodeStats {
        self.queue.stats()
    }
}

/// Independent (Bernoulli) loss with probability `p` per packet.
#[derive(Debug)]
pub struct Bernoulli {
    p: f64,
    queue: ReleaseQueue,
}

impl Bernoulli {
    /// Loss with probability `p`.
    ///
    /// # Panics
    /// If `p` is outside `[0, 1]`.
    #[must_use]
    pub fn new(p: f64) -> Self {
        check_prob(p, "bernoulli");
        Self {
            p,
            queue: ReleaseQueue::new(),
        }
    }
}

impl Node for Bernoulli {
    fn name(&self) -> &'static str {
        "bernoulli"
    }
    fn push(&mut self, now: Instant, packet: Packet, rng: &mut SimRng) {
        self.queue.arrived(&packet);
        if rng.gen_bool(self.p) {
            self.queue.drop_packet(packet);
        } else {
            self.queue.schedule(now, packet);
        }
    }
    queue_accessors!();
}

/// Two-state Gilbert-Elliott bursty loss.
///
/// Per packet the chain first moves (good→bad with `p_gb`, bad→good with
/// `p_bg`), then the packet is lost with `loss_good` or `loss_bad` for the
/// new state. With `loss_good = 0`, `loss_bad = 1` the mean loss is
/// `p_gb / (p_gb + p_bg)` and the mean burst length `1 / p_bg`.
#[derive(Debug)]
pub struct GilbertElliott {
    p_gb: f64,
    p_bg: f64,
    loss_good: f64,
    loss_bad: f64,
    bad: bool,
    queue: ReleaseQueue,
}

impl GilbertElliott {
    /// A chain with explicit parameters, starting in the good state.
    ///
    /// # Panics
    /// If any probability is outside `[0, 1]`.
    #[must_use]
    pub fn new(p_gb: f64, p_bg: f64, loss_good: f64, loss_bad: f64) -> Self {
        for p in [p_gb, p_bg, loss_good, loss_bad] {
            check_prob(p, "gilbert-elliott");
        }
        Self {
            p_gb,
            p_bg,
            loss_good,
            loss_bad,
            bad: false,
            queue: ReleaseQueue::new(),
        }
    }

    /// The simple Gilbert model (good state lossless, bad state loses every
    /// packet) with mean loss `mean_loss` and mean burst length `mean_burst`
    /// packets: `p_bg = 1/burst`, `p_gb = mean·p_bg/(1−mean)`.
    ///
    /// # Panics
    /// If `mean_loss` is not in `[0, 1)`, `mean_burst < 1`, or the pair is
    /// unreachable (`p_gb > 1`).
    #[must_use]
    pub fn from_mean_burst(mean_loss: f64, mean_burst: f64) -> Self {
        assert!(
            (0.0..1.0).contains(&mean_loss),
            "gilbert: mean loss {mean_loss} not in [0, 1)"
        );
        assert!(mean_burst >= 1.0, "gilbert: mean burst {mean_burst} < 1");
        let p_bg = 1.0 / mean_burst;
        let p_gb = mean_loss * p_bg / (1.0 - mean_loss);
        Self::new(p_gb, p_bg, 0.0, 1.0)
    }

    /// Whether the chain is in the bad state.
    #[must_use]
    pub fn is_bad(&self) -> bool {
        self.bad
    }
}

impl Node for GilbertElliott {
    fn name(&self) -> &'static str {
        "gilbert-elliott"
    }
    fn push(&mut self, now: Instant, packet: Packet, rng: &mut SimRng) {
        self.queue.arrived(&packet);
        let flip = if self.bad { self.p_bg } else { self.p_gb };
        if rng.gen_bool(flip) {
            self.bad = !self.bad;
        }
        let loss = if self.bad {
            self.loss_bad
        } else {
            self.loss_good
        };
        if rng.gen_bool(loss) {
            self.queue.drop_packet(packet);
        } else {
            self.queue.schedule(now, packet);
        }
    }
    queue_accessors!();
}

/// With probability `prob` a packet is held back `extra_delay`, so packets
/// sent up to `extra_delay` after it overtake it. Others pass at once.
#[derive(Debug)]
pub struct Reorder {
    prob: f64,
    extra_delay: Duration,
    queue: ReleaseQueue,
}

impl Reorder {
    /// Hold back a fraction `prob` of packets by `extra_delay`.
    ///
    /// # Panics
    /// If `prob` is outside `[0, 1]`.
    #[must_use]
    pub fn new(prob: f64, extra_delay: Duration) -> Self {
        check_prob(prob, "reorder");
        Self {
            prob,
            extra_delay,
            queue: ReleaseQueue::new(),
        }
    }
}

impl Node for Reorder {
    fn name(&self) -> &'static str {
        "reorder"
    }
    fn push(&mut self, now: Instant, packet: Packet, rng: &mut SimRng) {
        self.queue.arrived(&packet);
        if rng.gen_bool(self.prob) {
            self.queue.stats_mut().reordered += 1;
            self.queue.schedule(now + self.extra_delay, packet);
        } else {
            self.queue.schedule(now, packet);
        }
    }
    queue_accessors!();
}

/// With probability `p` a packet is sent twice (the copy right after it).
#[derive(Debug)]
pub struct Duplicate {
    p: f64,
    queue: ReleaseQueue,
}

impl Duplicate {
    /// Duplicate a fraction `p` of packets.
    ///
    /// # Panics
    /// If `p` is outside `[0, 1]`.
    #[must_use]
    pub fn new(p: f64) -> Self {
        check_prob(p, "duplicate");
        Self {
            p,
            queue: ReleaseQueue::new(),
        }
    }
}

impl Node for Duplicate {
    fn name(&self) -> &'static str {
        "duplicate"
    }
    fn push(&mut self, now: Instant, packet: Packet, rng: &mut SimRng) {
        self.queue.arrived(&packet);
        if rng.gen_bool(self.p) {
            self.queue.stats_mut().duplicated += 1;
            self.queue.schedule(now, packet.clone());
        }
        self.queue.schedule(now, packet);
    }
    queue_accessors!();
}

/// With probability `p` one uniformly chosen bit of the packet is flipped.
#[derive(Debug)]
pub struct Corrupt {
    p: f64,
    queue: ReleaseQueue,
}

impl Corrupt {
    /// Corrupt a fraction `p` of packets.
    ///
    /// # Panics
    /// If `p` is outside `[0, 1]`.
    #[must_use]
    pub fn new(p: f64) -> Self {
        check_prob(p, "corrupt");
        Self {
            p,
            queue: ReleaseQueue::new(),
        }
    }
}

impl Node for Corrupt {
    fn name(&self) -> &'static str {
        "corrupt"
    }
    fn push(&mut self, now: Instant, mut packet: Packet, rng: &mut SimRng) {
        self.queue.arrived(&packet);
        if !packet.data.is_empty() && rng.gen_bool(self.p) {
            let bit = rng.gen_range(0..packet.data.len() * 8);
            packet.data[bit / 8] ^= 1 << (bit % 8);
            self.queue.stats_mut().corrupted += 1;
        }
        self.queue.schedule(now, packet);
    }
    queue_accessors!();
}

/// Drops every packet longer than `bytes`.
#[derive(Debug)]
pub struct Mtu {
    bytes: usize,
    queue: ReleaseQueue,
}

impl Mtu {
    /// An MTU of `bytes` (datagram payload bytes).
    #[must_use]
    pub fn new(bytes: usize) -> Self {
        Self {
            bytes,
            queue: ReleaseQueue::new(),
        }
    }
}

impl Node for Mtu {
    fn name(&self) -> &'static str {
        "mtu"
    }
    fn push(&mut self, now: Instant, packet: Packet, _rng: &mut SimRng) {
        self.queue.arrived(&packet);
        if packet.len() > self.bytes {
            self.queue.drop_packet(packet);
        } else {
            self.queue.schedule(now, packet);
        }
    }
    queue_accessors!();
}
