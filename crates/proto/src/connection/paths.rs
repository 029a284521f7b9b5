//! The session's paths (issue 29): the set, bounded at [`MAX_PATHS`], and the scheduler
//! that decides which path the next packet takes.
//!
//! Scheduling: a packet goes to the usable path where it is expected to arrive first,
//! given each path's queue ahead of it (window and pacer), its rate and its one-way delay;
//! repairs and source symbols take the same order, so a repair goes where it arrives
//! soonest, and the coding window (one encoder for the session) spans every path, so a
//! repair on one path heals a loss on any. The policy decides which paths carry data at
//! all ([`PathPolicy`]).

use super::path::{PathData, PROBE_INTERVAL};
use crate::config::{PathPolicy, TransportConfig};
use crate::sent::SentLedger;
use crate::wire::MAX_PATHS;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// Copies owed at once: one window of small packets. Past it the redundant policy drops
/// its oldest (a copy that late is worth less than new data) and a warm-up queues none.
const MAX_COPIES: usize = 256;

/// A coded copy of a source symbol owed on another path.
#[derive(Debug, Clone, Copy)]
pub(super) struct CopyOwed {
    /// The path index that sends the copy.
    path: usize,
    /// The source symbol.
    id: u64,
    /// When the original is expected to arrive (a warm-up copy): a copy that cannot
    /// arrive before it is dropped. `None` for the redundant policy's copies.
    original_arrives: Option<Instant>,
}

/// The set of paths; see the module docs.
#[derive(Debug)]
pub(super) struct Paths {
    list: Vec<PathData>,
    policy: PathPolicy,
    /// Challenge tokens issued (the next is derived from it).
    tokens: u64,
    /// Path-change events seen: paths added, addresses changed, deaths and returns.
    pub(super) changes: u64,
    /// Copies owed: the redundant policy's, and those of a warming path's sources
    /// ([`Paths::begin_warm_up`]).
    copies: std::collections::VecDeque<CopyOwed>,
    /// The next packet number of each removed path id: an id used again continues there.
    retired: [u64; MAX_PATHS as usize],
}

impl Paths {
    /// Path 0 to `remote`, validated by the handshake.
    pub(super) fn new(remote: SocketAddr, config: &TransportConfig) -> Self {
        Paths {
            list: vec![PathData::new(0, remote, true, config)],
            policy: config.path_policy,
            tokens: 0,
            changes: 0,
            copies: std::collections::VecDeque::new(),
            retired: [0; MAX_PATHS as usize],
        }
    }

    /// Number of paths.
    pub(super) fn len(&self) -> usize {
        self.list.len()
    }

    /// Path at index `i` (index 0 is path 0).
    pub(super) fn get(&self, i: usize) -> &PathData {
        &self.list[i]
    }

    /// Path at index `i`, mutably.
    pub(super) fn get_mut(&mut self, i: usize) -> &mut PathData {
        &mut self.list[i]
    }

    /// Every path, mutably.
    pub(super) fn iter_mut(&mut self) -> impl Iterator<Item = &mut PathData> {
        self.list.iter_mut()
    }

    /// Every path.
    pub(super) fn iter(&self) -> impl Iterator<Item = &PathData> {
        self.list.iter()
    }

    /// Whether a path is declared dead (what it held may leave holes that no ACK reports).
    pub(super) fn any_dead(&self) -> bool {
        self.list.iter().any(|p| p.liveness.dead)
    }

    /// Index of the path with wire id `id`.
    pub(super) fn index_of(&self, id: u8) -> Option<usize> {
        self.list.iter().position(|p| p.id == id)
    }

    /// The path whose RTT the session-wide timers (probe timeout, keepalive) use: path 0
    /// while it is usable, else the first usable one, else path 0.
    pub(super) fn lead(&self) -> usize {
        if self.list.len() == 1 {
            return 0;
        }
        self.list.iter().position(PathData::usable).unwrap_or(0)
    }

    /// Adds a path with wire id `id` to `remote` (unvalidated: a challenge is queued).
    /// `None` if the id is taken or out of range.
    pub(super) fn add(
        &mut self,
        now: Instant,
        id: u8,
        remote: SocketAddr,
        config: &TransportConfig,
    ) -> Option<usize> {
        if id >= MAX_PATHS || self.index_of(id).is_some() {
            return None;
        }
        let mut p = PathData::new(id, remote, false, config);
        p.sent = SentLedger::starting_at(self.retired[usize::from(id)]);
        let token = self.next_token();
        p.challenge(now, remote, token);
        self.list.push(p);
        self.count_change();
        Some(self.list.len() - 1)
    }

    /// Removes path index `i` (never index 0): later indices shift down by one.
    pub(super) fn remove(&mut self, i: usize) {
        if i == 0 || i >= self.list.len() {
            return;
        }
        let p = self.list.remove(i);
        self.retired[usize::from(p.id)] = p.sent.next_pn();
        self.copies.retain(|c| c.path != i);
        for c in &mut self.copies {
            if c.path > i {
                c.path -= 1;
            }
        }
        self.count_change();
    }

    /// The lowest free path id, if any.
    pub(super) fn free_id(&self) -> Option<u8> {
        (1..MAX_PATHS).find(|&id| self.index_of(id).is_none())
    }

    /// A fresh challenge token: a counter through a 64-bit mix, so tokens of one session
    /// never repeat. Secrecy is not what protects validation: the response must arrive in
    /// an authenticated packet, which only the peer can make.
    pub(super) fn next_token(&mut self) -> u64 {
        self.tokens += 1;
        let mut z = self.tokens.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Counts a path-change event.
    pub(super) fn count_change(&mut self) {
        self.changes = self.changes.saturating_add(1);
    }

    /// Whether path index `i` may carry data under the policy: usable, and for
    /// `failover` the first usable path (the others stand by with probes only).
    pub(super) fn carries_data(&self, i: usize) -> bool {
        let p = &self.list[i];
        if !p.usable() {
            return false;
        }
        match self.policy {
            PathPolicy::Aggregate | PathPolicy::Redundant => true,
            PathPolicy::Failover => self.list.iter().position(PathData::usable) == Some(i),
        }
    }

    /// Whether path index `i` is probed rather than used: validated, but dead or (under
    /// `failover`) standing by; single-path sessions never probe.
    pub(super) fn probed(&self, i: usize) -> bool {
        let p = &self.list[i];
        self.list.len() > 1 && p.validation.validated && !p.liveness.down && !self.carries_data(i)
    }

    /// When the next probe of path index `i` is due, if it is probed.
    pub(super) fn probe_due(&self, i: usize) -> Option<Instant> {
        if !self.probed(i) {
            return None;
        }
        self.list[i].liveness.next_probe
    }

    /// Schedules the next probe of path index `i` after one went at `now`.
    pub(super) fn on_probe_sent(&mut self, i: usize, now: Instant) {
        self.list[i].liveness.next_probe = Some(now + PROBE_INTERVAL);
    }

    /// The paths that may carry data, earliest expected arrival first (see the module
    /// docs).
    pub(super) fn data_order(&self, now: Instant) -> PathOrder {
        let mut order = PathOrder::default();
        if self.list.len() == 1 {
            order.push(0);
            return order;
        }
        let mut keyed: Vec<(Duration, usize)> = (0..self.list.len())
            .filter(|&i| self.carries_data(i))
            .map(|i| (self.expected_arrival(i, now), i))
            .collect();
        keyed.sort();
        for (_, i) in keyed {
            order.push(i);
        }
        order
    }

    /// How long after `now` a packet sent on path index `i` is expected to arrive: the
    /// wait for its window (packets beyond it drain at `window / srtt`) and pacer, plus
    /// half its smoothed RTT (the one-way delay, queueing included).
    pub(super) fn expected_arrival(&self, i: usize, now: Instant) -> Duration {
        let p = &self.list[i];
        let srtt = p.rtt.srtt();
        let cwnd = p.cc.window().max(1);
        let in_flight = p.sent.in_flight();
        let window_wait = if in_flight < cwnd {
            Duration::ZERO
        } else {
            srtt.mul_f64((in_flight + 1 - cwnd) as f64 / cwnd as f64)
        };
        let pacer_wait = p
            .timers
            .pacer_wakeup
            .map_or(Duration::ZERO, |t| t.saturating_duration_since(now));
        window_wait.max(pacer_wait) + srtt / 2
    }

    /// Whether path index `i` carries reports of path index `k`'s packet numbers (a
    /// `PathAck` beside `i`'s own ACKs): `i` is usable and its smoothed round trip at most
    /// three quarters of `k`'s, so the report reaches the sender a worthwhile share of
    /// `k`'s one-way delay before `k`'s own ACK (paths of about equal delay gain nothing
    /// and would only carry more bytes).
    pub(super) fn reports_for(&self, i: usize, k: usize) -> bool {
        let (p, q) = (&self.list[i], &self.list[k]);
        i != k && p.usable() && p.rtt.srtt() * 4 <= q.rtt.srtt() * 3
    }

    /// Path index `i` came into use (validated, or answering again after it was declared
    /// dead) while a path with a clearly shorter round trip carries data: for one of its
    /// RTTs the sources it sends get coded copies on the fastest such path. Its first
    /// sources arrive a whole one-way delay late, while the fast path's later ones wait
    /// behind them at the peer; without copies in-order delivery stood still that long.
    pub(super) fn begin_warm_up(&mut self, i: usize, now: Instant) {
        let srtt = self.list[i].rtt.srtt();
        let faster = (0..self.list.len())
            .any(|k| k != i && self.carries_data(k) && self.list[k].rtt.srtt() * 4 <= srtt * 3);
        self.list[i].warm_until = faster.then(|| now + srtt);
    }

    /// Queues the copies owed for source symbol `id`, sent on path index `sent_on` at
    /// `now`: one on every other path carrying data (redundant policy), or one on the
    /// fastest other path while `sent_on` warms up ([`Paths::begin_warm_up`]).
    pub(super) fn queue_copies(&mut self, sent_on: usize, id: u64, now: Instant) {
        if self.policy == PathPolicy::Redundant {
            for i in 0..self.list.len() {
                if i != sent_on && self.carries_data(i) {
                    if self.copies.len() >= MAX_COPIES {
                        self.copies.pop_front();
                    }
                    self.copies.push_back(CopyOwed {
                        path: i,
                        id,
                        original_arrives: None,
                    });
                }
            }
            return;
        }
        let p = &self.list[sent_on];
        if p.warm_until.is_none_or(|t| now >= t) || self.copies.len() >= MAX_COPIES {
            return;
        }
        let srtt = p.rtt.srtt();
        let fastest = (0..self.list.len())
            .filter(|&k| k != sent_on && self.carries_data(k))
            .min_by_key(|&k| self.list[k].rtt.srtt())
            .filter(|&k| self.list[k].rtt.srtt() < srtt);
        if let Some(k) = fastest {
            self.copies.push_back(CopyOwed {
                path: k,
                id,
                original_arrives: Some(now + srtt / 2),
            });
        }
    }

    /// The next copy owed on path index `i`, still in the window from `first` on and, for
    /// a warm-up copy, able to arrive before its original: the symbol, and whether it is a
    /// warm-up copy.
    pub(super) fn take_copy(&mut self, i: usize, first: u64, now: Instant) -> Option<(u64, bool)> {
        let arrives = now + self.list[i].rtt.srtt() / 2;
        self.copies.retain(|c| {
            c.id >= first && (c.path != i || c.original_arrives.is_none_or(|t| arrives < t))
        });
        let pos = self.copies.iter().position(|c| c.path == i)?;
        self.copies
            .remove(pos)
            .map(|c| (c.id, c.original_arrives.is_some()))
    }
}

/// Path indices in scheduling order (at most [`MAX_PATHS`]).
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct PathOrder {
    len: usize,
    idx: [usize; MAX_PATHS as usize],
}

impl PathOrder {
    fn push(&mut self, i: usize) {
        if self.len < self.idx.len() {
            self.idx[self.len] = i;
            self.len += 1;
        }
    }

    /// The indices, in order.
    pub(super) fn as_slice(&self) -> &[usize] {
        &self.idx[..self.len]
    }
}
