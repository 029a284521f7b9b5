//! Multipath scenarios (issue 29): one ctcp session over several parallel links with
//! their own rate, delay and loss, each of which may go down and come back on a
//! schedule, on virtual time with a seed.

use std::time::{Duration, Instant};

use ctcp_proto::TransportConfig;

use crate::ctcp::{p99_delay, CtcpPeer, Pace};
use crate::link::LinkSpec;
use crate::outage::Outage;
use crate::seed::Seed;
use crate::sim::{Sim, SimError};

/// One path of a multipath scenario: a link (both directions alike) and when it is down,
/// as `[from, to)` offsets from the start.
#[derive(Debug, Clone)]
pub struct PathSpec {
    /// The link.
    pub link: LinkSpec,
    /// Outage windows, offsets from the start of the run.
    pub down: Vec<(Duration, Duration)>,
}

impl PathSpec {
    /// A path over `link` that never goes down.
    #[must_use]
    pub fn new(link: LinkSpec) -> Self {
        PathSpec {
            link,
            down: Vec::new(),
        }
    }

    /// This path down from `from` to `to` (offsets from the start).
    #[must_use]
    pub fn down(mut self, from: Duration, to: Duration) -> Self {
        self.down.push((from, to));
        self
    }
}

/// A transfer of `total` bytes from a client to a server over `paths` (path 0 is the
/// one the handshake takes; the client opens the others once connected).
#[derive(Debug, Clone)]
pub struct MultipathSpec {
    /// The paths.
    pub paths: Vec<PathSpec>,
    /// Transport settings of both ends (the policy is `path_policy`).
    pub config: TransportConfig,
    /// Bytes to move.
    pub total: u64,
    /// An application slower than the paths, if any.
    pub pace: Option<Pace>,
    /// The run's seed.
    pub seed: u64,
    /// Virtual time allowed.
    pub deadline: Duration,
}

/// What a multipath transfer did.
#[derive(Debug, Clone)]
pub struct MultipathReport {
    /// Whether every byte arrived intact with the FIN.
    pub bytes_ok: bool,
    /// Virtual time from the start to the last byte read.
    pub duration: Duration,
    /// Goodput in bit/s over the whole transfer from the stream's first byte read.
    pub goodput_bps: f64,
    /// Goodput in bit/s from 10 s after the first byte was read to the end.
    pub goodput_after_10s_bps: f64,
    /// Bytes the sender put on the wire (every path) per goodput byte.
    pub wire_per_goodput: f64,
    /// Longest time between two reads that delivered bytes, once delivery began.
    pub longest_stall: Duration,
    /// When the longest stall began (offset from the start).
    pub longest_stall_at: Duration,
    /// p99 over bytes of (read time − write time − the fastest path's one-way delay), ms.
    pub p99_extra_delay_ms: f64,
    /// Sender-side datagrams sent per path, sampled every 100 ms: (offset, per path).
    pub sent_per_path: Vec<(Duration, Vec<u64>)>,
    /// The receiver's reads: (offset from the start, cumulative bytes).
    pub progress: Vec<(Duration, u64)>,
    /// Sender statistics at the end.
    pub sender_stats: Option<ctcp_proto::ConnectionStats>,
    /// Receiver statistics at the end.
    pub receiver_stats: Option<ctcp_proto::ConnectionStats>,
    /// Bytes the receiver sent on each path (by path id): its ACKs and the reports of
    /// other paths' packet numbers that ride them, the return overhead per path.
    pub receiver_path_bytes: Vec<u64>,
}

impl MultipathReport {
    /// The longest time between two reads that delivered bytes, among the gaps that began
    /// in `[from, to)`: (gap, when it began).
    #[must_use]
    pub fn longest_stall_in(&self, from: Duration, to: Duration) -> (Duration, Duration) {
        self.progress
            .windows(2)
            .filter(|w| w[0].0 >= from && w[0].0 < to)
            .map(|w| (w[1].0 - w[0].0, w[0].0))
            .max()
            .unwrap_or_default()
    }

    /// The first sample offset at or after `from` from which path `i` sent at least
    /// `packets` datagrams within the following `window` (it carries data again).
    #[must_use]
    pub fn path_busy_after(
        &self,
        i: usize,
        from: Duration,
        window: Duration,
        packets: u64,
    ) -> Option<Duration> {
        let s = &self.sent_per_path;
        for (a, (t, counts)) in s.iter().enumerate() {
            if *t < from {
                continue;
            }
            let later = s[a..].iter().find(|(u, _)| *u >= *t + window)?;
            let base = counts.get(i).copied().unwrap_or(0);
            if later.1.get(i).copied().unwrap_or(0).saturating_sub(base) >= packets {
                return Some(*t);
            }
        }
        None
    }
}

/// Runs `spec`; see [`MultipathSpec`].
///
/// # Errors
/// Fails if the simulation hits its step bound or stalls.
pub fn run_multipath(spec: &MultipathSpec) -> Result<MultipathReport, SimError> {
    let mut sim = Sim::with_seed(Seed::from(spec.seed));
    let start = sim.now();
    let lanes = spec.paths.len().max(1);
    let mut routes = Vec::new();
    for p in &spec.paths {
        let windows: Vec<(Instant, Instant)> = p
            .down
            .iter()
            .map(|&(a, b)| (start + a, start + b))
            .collect();
        let mut dirs = Vec::new();
        for _ in 0..2 {
            let mut ids = vec![sim.add_node(Outage::new(windows.clone()))];
            ids.extend(p.link.build_nodes(&mut sim));
            dirs.push(sim.add_path(ids));
        }
        routes.push((dirs[0], dirs[1]));
    }
    let psk = b"multipath-simulation-key";
    let mut client =
        CtcpPeer::sender(spec.config.clone(), psk, spec.seed, start, spec.total).with_lanes(lanes);
    if let Some(pace) = spec.pace {
        client = client.with_pace(pace);
    }
    let server = CtcpPeer::receiver(spec.config.clone(), psk, spec.seed ^ 0xa5a5).with_lanes(lanes);
    let (f0, r0) = routes[0];
    let flow = sim.add_flow(client, server, f0, r0);
    for &(f, r) in routes.iter().skip(1) {
        sim.add_lane(flow, f, r);
    }
    let end = start + spec.deadline;
    let mut sent_per_path = Vec::new();
    loop {
        let step = (sim.now() + Duration::from_millis(100)).min(end);
        let done = sim.run_while_until(step, |s| {
            !s.server::<CtcpPeer>(flow)
                .is_some_and(|r| r.delivery.finished)
        })?;
        if let Some(c) = sim.client::<CtcpPeer>(flow) {
            let mut counts = vec![0; lanes];
            for p in c.paths() {
                if let Some(slot) = counts.get_mut(usize::from(p.id)) {
                    *slot = p.sent;
                }
            }
            sent_per_path.push((sim.now() - start, counts));
        }
        if done || sim.now() >= end {
            break;
        }
    }
    let fastest_owd = spec
        .paths
        .iter()
        .map(|p| p.link.one_way_delay)
        .min()
        .unwrap_or_default();
    let (Some(c), Some(r)) = (sim.client::<CtcpPeer>(flow), sim.server::<CtcpPeer>(flow)) else {
        return Err(SimError::Stalled {
            at: sim.elapsed(),
            seed: spec.seed,
        });
    };
    let d = &r.delivery;
    let first_read = d.progress.first().map_or(start, |&(t, _)| t);
    let last = d.finished_at.unwrap_or(sim.now());
    let rate = |from: Instant, bytes: u64| {
        let secs = last.saturating_duration_since(from).as_secs_f64();
        if secs > 0.0 {
            bytes as f64 * 8.0 / secs
        } else {
            0.0
        }
    };
    let after = first_read + Duration::from_secs(10);
    let at_after = d
        .progress
        .iter()
        .take_while(|(t, _)| *t <= after)
        .last()
        .map_or(0, |&(_, b)| b);
    let (mut longest_stall, mut longest_stall_at) = (Duration::ZERO, Duration::ZERO);
    for w in d.progress.windows(2) {
        let gap = w[1].0.saturating_duration_since(w[0].0);
        if gap > longest_stall {
            longest_stall = gap;
            longest_stall_at = w[0].0 - start;
        }
    }
    let wire = sim.flow_stats(flow).forward.offered_bytes as f64;
    Ok(MultipathReport {
        bytes_ok: d.bytes_ok == spec.total && d.bytes_bad == 0 && d.finished,
        duration: last - start,
        goodput_bps: rate(first_read, d.bytes_ok),
        goodput_after_10s_bps: if last > after {
            rate(after, d.bytes_ok - at_after)
        } else {
            rate(first_read, d.bytes_ok)
        },
        wire_per_goodput: wire / (d.bytes_ok as f64).max(1.0),
        longest_stall,
        longest_stall_at,
        p99_extra_delay_ms: p99_delay(&c.writes, &d.progress, fastest_owd),
        sent_per_path,
        progress: d.progress.iter().map(|&(t, b)| (t - start, b)).collect(),
        sender_stats: c.stats(),
        receiver_stats: r.stats(),
        receiver_path_bytes: {
            let mut bytes = vec![0; lanes];
            for p in r.paths() {
                if let Some(slot) = bytes.get_mut(usize::from(p.id)) {
                    *slot = p.bytes_sent;
                }
            }
            bytes
        },
    })
}
