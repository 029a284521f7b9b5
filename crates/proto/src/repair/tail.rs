//! Tail repairs: how many repairs cover a flight when the sender falls idle, so its
//! likely losses are repaired now rather than a round trip later.

use crate::config::RepairPriority;
use crate::sent::TailCensus;

/// Chance a tiny flight may fail to decode despite its tail repairs (see
/// [`tiny_flight_repairs`]).
const TINY_FLIGHT_FAILURE: f64 = 0.01;

/// Flights of at most this many symbols (sources and reactive repairs) give the symbols
/// sent after their newest speculative repair a tail budget of their own ([`budget`]).
const TINY_FLIGHT_SOURCES: u32 = 8;

/// What the loss rate for tail repairs is estimated from ([`TailLossSamples::loss`]).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct TailLossSamples {
    /// Our direction's loss estimate and the outcomes it rests on.
    pub(crate) own_p: f64,
    /// Outcomes behind `own_p`.
    pub(crate) own_samples: u64,
    /// The handshake train towards the peer: (copies that arrived, copies sent).
    pub(crate) train_out: Option<(u32, u32)>,
    /// The handshake train towards us: (copies that arrived, copies sent).
    pub(crate) train_in: Option<(u32, u32)>,
    /// Authenticated data packets received from the peer.
    pub(crate) rx_packets: u64,
    /// The highest data packet number received from the peer.
    pub(crate) rx_largest: Option<u64>,
}

impl TailLossSamples {
    /// Loss rate for tail repairs: our direction's estimate, or the peer-to-us loss rate
    /// if that is higher. Why: a receiver sends only a few control symbols (flow-control
    /// credit), too few for its own estimate, and losing one, then its probes, idles the
    /// sender for seconds on a long lossy path (evidence:
    /// docs/experiments/code-evidence.md#tail-loss). The incoming rate needs 64 packets to
    /// count, or a handshake train.
    ///
    /// The handshake train's copies count as outcomes of their direction from the start
    /// (both rates then blend them with what the data packets show, so they fade as those
    /// accumulate): a fresh session has no estimate yet, and without one the first small
    /// flights (a proxied request, its OPEN, the reply) went without tail repairs, each
    /// loss waiting out a probe timeout of three handshake RTTs, doubled for each lost
    /// probe (evidence: docs/experiments/code-evidence.md#tail-loss-train).
    pub(crate) fn loss(&self) -> f64 {
        let (hs_got, hs_sent) = self.train_in.unwrap_or((0, 0));
        let received = self.rx_packets + u64::from(hs_got);
        let sent = self.rx_largest.map_or(0, |h| h + 1) + u64::from(hs_sent);
        let incoming = if (hs_sent > 0 || self.rx_packets >= 64) && sent > 0 {
            1.0 - received as f64 / sent as f64
        } else {
            0.0
        };
        let own = match self.train_out {
            Some((got, sent)) if sent > 0 => {
                let n = self.own_samples as f64;
                (self.own_p * n + f64::from(sent - got)) / (n + f64::from(sent))
            }
            _ => self.own_p,
        };
        own.max(incoming.clamp(0.0, 0.5))
    }
}

/// Tail repairs for the flight now out: enough that, with the speculative repairs
/// already in flight, the flight's expected losses plus two standard deviations arrive
/// despite the loss rate: `⌈(λ + 2√λ)/(1−p)⌉ − speculative repairs in flight`, `λ = p ×
/// (sources + reactive repairs in flight) + overdue ones` (overdue: see
/// [`TailCensus::overdue`]); a reactive repair counts like a source because it is owed for
/// a known hole, and losing it leaves that hole open. In a flight of a few symbols, at
/// least what those sent after the newest speculative repair need alone. Zero on a
/// loss-free path. Computed afresh after each round of reactive repairs. Why: at the end
/// of a burst a loss waits a round trip for the ACK that reports it and another for the
/// repair, and at high loss the repairs of the last round are lost in turn, so a
/// transfer's last holes wait on chains of lost repairs (evidence:
/// docs/experiments/code-evidence.md#tail-budget).
///
/// Overdue packets are taken as lost (a source or reactive repair adds a whole expected
/// loss, a speculative repair covers nothing): RACK declares them only once a later packet
/// is acknowledged, and a receiver's rare ack-eliciting packets may have none. Counting
/// them as in flight left a receiver's new credit update without a tail repair while an
/// old lost one sat there, holding the peer on its credit limit (evidence:
/// docs/experiments/code-evidence.md#tail-budget-overdue).
///
/// Under [`RepairPriority::Bandwidth`] only a flight of one or two symbols gets a budget:
/// its loss would otherwise wait for a probe, since nothing follows it to reveal the hole.
pub(crate) fn budget(p: f64, c: &TailCensus, priority: RepairPriority) -> u32 {
    if p <= 0.0 {
        return 0;
    }
    let sources = c.fresh + c.overdue;
    if priority == RepairPriority::Bandwidth && sources > 2 {
        return 0;
    }
    // Repairs already in flight count against the flight's need, but in a flight of a
    // few symbols those sent after the last of them get their own: otherwise a request
    // written just after its stream's OPEN had gone out with its tail repairs went
    // unprotected. Not in a bulk flight, where the flight-wide margin already covers
    // them: there the rule fired at every short pause of the application and only added
    // repairs (evidence: docs/experiments/code-evidence.md#tail-budget-own).
    let own = if sources <= TINY_FLIGHT_SOURCES {
        need(p, c.uncovered, 0)
    } else {
        0.0
    };
    // At most one repair per source, except that a flight of one or two symbols (the
    // tail a receiver sends: flow-control credit; a request or a short reply) may take
    // three, sized for a 99 % decode rather than by the normal approximation, which
    // gives one symbol at 30 % two repairs (all three lost 2.7 % of the time): its
    // probes wait a PTO of three handshake RTTs at first, and at 30 % loss a credit
    // update and its one repair are both lost often enough to idle a transfer (evidence:
    // docs/experiments/code-evidence.md#tail-budget-cap).
    let cap = f64::from(sources.max(3.min(sources * 3)));
    let budget = (need(p, c.fresh, c.overdue) - f64::from(c.repairs))
        .max(own)
        .clamp(0.0, cap);
    budget as u32
}

/// Repairs a flight of `fresh` symbols in flight and `overdue` ones taken as lost needs
/// at loss rate `p` (see [`budget`]).
fn need(p: f64, fresh: u32, overdue: u32) -> f64 {
    // A flight that arrives whole with probability 1 − TINY_FLIGHT_FAILURE or better
    // needs no speculative repair: its rare loss is repaired reactively. The normal
    // approximation gives at least one repair for any λ > 0 (2√λ dominates small λ), so
    // on a nearly clean path an application-limited sender, idle after every write, paid
    // one repair per write.
    if overdue == 0 && 1.0 - (1.0 - p).powf(f64::from(fresh)) <= TINY_FLIGHT_FAILURE {
        return 0.0;
    }
    let lambda = p * f64::from(fresh) + f64::from(overdue);
    let normal = ((lambda + 2.0 * lambda.sqrt()) / (1.0 - p).max(0.05)).ceil();
    if overdue == 0 && fresh <= 2 {
        normal.max(f64::from(tiny_flight_repairs(fresh, p)))
    } else {
        normal
    }
}

/// Repairs that let a flight of `k` symbols decode with probability 1 −
/// [`TINY_FLIGHT_FAILURE`] at loss rate `p`: the smallest `r` with P(fewer than `k` of
/// `k + r` arrive) ≤ that, at most 3.
pub(super) fn tiny_flight_repairs(k: u32, p: f64) -> u32 {
    if k == 0 || p <= 0.0 {
        return 0;
    }
    let q = 1.0 - p;
    (0..=3)
        .find(|&r| {
            let n = k + r;
            // P(fewer than k arrive) = Σ_{i<k} C(n, i) q^i p^(n−i)
            let mut fail = 0.0;
            let mut c = 1.0;
            for i in 0..k {
                if i > 0 {
                    c = c * f64::from(n - i + 1) / f64::from(i);
                }
                fail += c * q.powi(i as i32) * p.powi((n - i) as i32);
            }
            fail <= TINY_FLIGHT_FAILURE
        })
        .unwrap_or(3)
}
