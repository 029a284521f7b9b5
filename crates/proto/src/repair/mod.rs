//! The repair scheduler: which repair the sender owes next, and why.
//!
//! It owns every piece of repair state: the repairs owed for declared losses and reported
//! deficits ([`RepairDebt`]), the start-up margin copies, the stall watch on the peer's
//! in-order point, the proactive credit the loss rate earns per source, the tail budget
//! for an idle sender, and the redundancy policy. It never sees a packet: the connection
//! feeds it the peer's ACKs and the losses the sent ledger declares, described by plain
//! numbers ([`AckSummary`], [`Unacked`], [`crate::sent::SentKind`]), and asks it for the
//! next repair ([`RepairScheduler::next_repair`], [`RepairScheduler::tail_repair`]).
//! Which symbols a repair combines is the encoder's business; the scheduler only names
//! the range's end.

mod debt;
mod inputs;
mod redundancy;
mod tail;
#[cfg(test)]
mod tests;

use self::debt::RepairDebt;
pub(crate) use self::inputs::{AckSummary, RatioInputs, Unacked};
use self::redundancy::RedundancyPolicy;
pub(crate) use self::redundancy::MAX_BLOCK;
pub(crate) use self::tail::{budget as tail_budget, TailLossSamples};
use crate::sent::{InFlightAfter, SentKind};
use ctcp_rlnc::SymbolId;
use std::time::{Duration, Instant};

/// RTT (seconds) from which proactive repair (`TransportConfig::proactive_repair`) runs at
/// its full share; below, the share shrinks in proportion and reactive repair carries the
/// rest: on short paths reactive repair is cheap and proactive repairs mostly land where
/// nothing is missing (evidence: docs/experiments/code-evidence.md#proactive-full-rtt).
const PROACTIVE_FULL_RTT: f64 = 0.5;
/// With proactive repair on, reactive repairs end at the hole they were owed for only on
/// paths with an srtt below this, where reactive repair carries most losses and a repair
/// spanning later losses stalls in-order delivery; on long paths, where proactive repairs
/// spanning the window arrive all the time, full-range reactive repairs combine better
/// with them (evidence: docs/experiments/code-evidence.md#narrow-reactive-below). Without
/// proactive repair they always end at their hole.
const NARROW_REACTIVE_BELOW: Duration = Duration::from_millis(250);

/// Minimum RTTs from the start of a busy spell during which lost reactive repairs get
/// margin copies ([`RepairScheduler::in_startup`]).
const STARTUP_RTTS: u32 = 4;

/// Loss-detection delays (≈ 1.1 srtt each) the peer's in-order point may stand still
/// while symbols are unacknowledged before the stall watch owes a repair for its hole
/// (`RepairScheduler::watch_in_order_point`).
pub const STALL_ROUNDS: u32 = 2;

/// Shortest stand-still the stall watch answers: on short paths a hole's repairs take
/// that long anyway, and firing sooner sent redundant repairs (evidence:
/// docs/experiments/code-evidence.md#stall-floor).
const STALL_FLOOR: Duration = Duration::from_millis(250);

/// Ends of once-lost reactive repairs remembered at most (`RepairScheduler::lost_once`).
const LOST_ONCE_KEPT: usize = 64;

/// Loss rate below which a multipath session's second lost repair for one hole owes a
/// margin copy: the copies cost about p² per hole, negligible at low loss and a visible
/// share of the wire at 20–30 %; a single path keeps its wire (evidence:
/// docs/experiments/multipath.md, "Stalls of the whole transfer").
const SECOND_LOSS_MARGIN_BELOW: f64 = 0.1;

/// The proactive credit banked at most, so a long idle period does not bank a burst of
/// repairs.
const MAX_CREDIT: f64 = 8.0;

/// Why a repair is sent: it decides what the repair's loss owes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RepairOrigin {
    /// Reactive: owed for a declared loss or a reported deficit (a lost one is owed again).
    Debt,
    /// Proactive, from the loss-rate credit.
    Credit,
    /// Sent into an idle tail ([`RepairScheduler::tail_repair`]); speculative like
    /// `Credit`.
    Tail,
    /// An extra copy beside the replacements of lost reactive repairs, one per two of them,
    /// early in a busy spell ([`RepairScheduler::in_startup`]); speculative like `Credit`.
    Margin,
    /// A coded copy of one source on a faster path while the path that carried it warms
    /// up (issue 29, `Paths::begin_warm_up`): it stands in for an original still on its
    /// way, so its loss owes a repair as a lost source would, and it covers no declared
    /// hole (the cap on owed repairs does not count it).
    Copy,
}

/// A repair to send now: its origin and the exclusive end of the range it spans (from
/// the encoder's first unacknowledged symbol).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RepairPlan {
    /// Why it is sent.
    pub(crate) origin: RepairOrigin,
    /// Owed by the stall watch (origin [`RepairOrigin::Debt`]).
    pub(crate) stall: bool,
    /// Exclusive end of its range.
    pub(crate) end: SymbolId,
}

/// All repair state of one sending direction.
#[derive(Debug)]
pub(crate) struct RepairScheduler {
    /// `TransportConfig::proactive_repair`.
    proactive: f64,
    redundancy: RedundancyPolicy,
    /// Proactive repairs earned by the loss rate, one per whole unit.
    credit: f64,
    /// Tail repairs still to send while the sender has no new source to send (see
    /// [`RepairScheduler::tail_repair`]): set once per idle spell, `None` again after the
    /// next source or reactive repair.
    tail_left: Option<u32>,
    /// Repairs owed for declared losses (and probes), each with the end of the range it
    /// must cover. Reactive repairs stop there instead of spanning the whole window, so
    /// they never include symbols sent since whose fate is unknown; a repair that also
    /// spans newer, meanwhile lost symbols cannot decode until those are repaired too, and
    /// at high loss the deficit then hardly ever reaches zero (in-order delivery stalled
    /// for hundreds of ms at 20 % loss).
    debt: RepairDebt,
    /// Start-up margin: for every second reactive repair lost early in a busy spell, the
    /// end of an extra copy to send beside their replacements, so a hole whose replacement
    /// is lost need not wait another round trip (see [`RepairScheduler::in_startup`]).
    margin: RepairDebt,
    /// Whether the next lost reactive repair of the start-up owes no margin copy: the
    /// losses alternate, the first, third, ... each owing one. Why one per two: one per
    /// loss (each with its own end) cost about p² of the start-up's sources, and at 30 %
    /// loss half of those copies arrived useless; a copy reaching the highest end among
    /// two losses stands in for either's replacement, so one per two halves the copies and
    /// the useless ones among them (evidence: docs/experiments/code-evidence.md#margin-skip).
    margin_skip: bool,
    /// Highest end among the lost reactive repairs since the last margin copy was owed.
    margin_end: Option<SymbolId>,
    /// Ends of reactive repairs lost once, above the peer's in-order point (at most
    /// [`LOST_ONCE_KEPT`]): a repair for such an end lost again owes a margin copy beside
    /// its replacement, so a hole waits for a third round trip only if both are lost.
    lost_once: std::collections::VecDeque<SymbolId>,
    /// Whether a second lost repair owes that margin copy: only with several paths and
    /// a low loss rate on the last ACK's path ([`SECOND_LOSS_MARGIN_BELOW`]).
    second_loss_margin: bool,
    /// When the stall watch last saw the peer's in-order point move, or fired (stamped as
    /// ACKs arrive; `None` with nothing unacknowledged): see
    /// [`RepairScheduler::watch_in_order_point`].
    in_order_since: Option<Instant>,
    /// A repair owed for the hole at the peer's in-order point by the stall watch: the end
    /// of its range. Kept apart from `debt` because the cap on owed repairs drops the
    /// lowest ends first, and this is one.
    stall_repair: Option<SymbolId>,
    /// When the current busy spell began: the first source sent with nothing
    /// unacknowledged (a stall of a busy flow does not start a new one).
    busy_since: Option<Instant>,
    /// The peer's in-order point: it holds every symbol below.
    peer_next_in_order: SymbolId,
    /// The peer's last reported decoder deficit.
    peer_deficit: u32,
    /// Symbols the peer lacked at its latest ACK: its deficit plus the sources sent no
    /// later than that ACK's packet it had not seen (see
    /// [`RepairScheduler::owe_tail_shortfall`]).
    peer_lacking: u32,
}

impl RepairScheduler {
    /// A scheduler with nothing owed; `proactive` is `TransportConfig::proactive_repair`
    /// (0, or not finite: repair only what the peer reports missing).
    pub(crate) fn new(proactive: f64) -> Self {
        RepairScheduler {
            proactive,
            redundancy: RedundancyPolicy::default(),
            credit: 0.0,
            tail_left: None,
            debt: RepairDebt::default(),
            margin: RepairDebt::default(),
            margin_skip: false,
            margin_end: None,
            lost_once: std::collections::VecDeque::new(),
            second_loss_margin: false,
            in_order_since: None,
            stall_repair: None,
            busy_since: None,
            peer_next_in_order: 0,
            peer_deficit: 0,
            peer_lacking: 0,
        }
    }

    /// Repairs owed right now (reactive ones, the stall watch's and margins aside).
    pub(crate) fn debt_len(&self) -> u32 {
        self.debt.len()
    }

    /// Whether a reactive repair is owed: a probe may send it past the congestion window.
    pub(crate) fn owes(&self) -> bool {
        !self.debt.is_empty()
    }

    /// Whether a reactive repair or the stall watch's is owed (what
    /// [`RepairScheduler::next_repair`] gives first).
    pub(crate) fn owes_reactive(&self) -> bool {
        !self.debt.is_empty() || self.stall_repair.is_some()
    }

    /// The peer's last reported decoder deficit.
    pub(crate) fn peer_deficit(&self) -> u32 {
        self.peer_deficit
    }

    /// The peer's in-order point: it holds every symbol below.
    pub(crate) fn peer_next_in_order(&self) -> SymbolId {
        self.peer_next_in_order
    }

    /// Whether proactive repair is configured (`proactive_repair` finite and positive).
    pub(crate) fn proactive_on(&self) -> bool {
        self.proactive.is_finite() && self.proactive > 0.0
    }

    /// Repairs per source symbol the loss-rate credit earns.
    pub(crate) fn repair_ratio(&self, r: &RatioInputs) -> f64 {
        if !self.proactive_on() {
            return 0.0; // off: repair only what the peer reports missing
        }
        // Size the decode block like the window the repairs cover: small blocks need
        // proportionally more redundancy and would overshoot the wire budget.
        let k = r.window.clamp(16, MAX_BLOCK as u64) as u32;
        let policy = self
            .redundancy
            .repair_ratio(k, r.p, Some(r.gilbert), r.srtt);
        // Wire budget: proactive repair stays near the expected loss (repairs are lost
        // too, hence p/(1-p)); reactive repair tops up the variance. Its share grows with
        // the RTT: a reactive repair costs a round trip of delay but is never wasted, while
        // a proactive one that lands where nothing is missing is (evidence:
        // docs/experiments/code-evidence.md#proactive-full-rtt). On short paths the round trip is cheap, so
        // repair is almost all reactive (share × srtt / 500 ms of the expected loss); from
        // 500 ms up, proactive repair carries its configured share of the loss.
        let share =
            self.proactive.min(4.0) * (r.srtt.as_secs_f64() / PROACTIVE_FULL_RTT).clamp(0.0, 1.0);
        let budget = if r.p < 0.5 {
            share * r.p / (1.0 - r.p)
        } else {
            share.min(1.0)
        };
        policy.min(budget)
    }

    /// Whether the busy spell is young: within [`STARTUP_RTTS`] minimum RTTs of its first
    /// source. Then lost reactive repairs get margin copies, one per two, beside their
    /// replacements (`margin_skip`). Why: without proactive repair each hole waits a
    /// round trip per lost repair, and in-order delivery waits for the longest such chain
    /// among the flight's holes, which on a long lossy path holds the delivered rate well
    /// under the link's for seconds (evidence:
    /// docs/experiments/code-evidence.md#startup-margin). The copies cost about p²/2 of the
    /// sources sent in the start-up, where the rest of a bulk transfer pays nothing.
    pub(crate) fn in_startup(&self, now: Instant, min_rtt: Duration) -> bool {
        self.busy_since
            .is_some_and(|t| now < t + min_rtt * STARTUP_RTTS)
    }

    /// The peer's cumulative symbol ACK: it holds every symbol below `next_in_order`
    /// (bounded by `next_id`, the first never sent). Returns the new in-order point if it
    /// moved, for the encoder to retire what lies below.
    pub(crate) fn on_in_order(
        &mut self,
        next_in_order: SymbolId,
        next_id: SymbolId,
    ) -> Option<SymbolId> {
        if next_in_order <= self.peer_next_in_order {
            return None;
        }
        self.peer_next_in_order = next_in_order.min(next_id);
        Some(self.peer_next_in_order)
    }

    /// The stall watch: a liveness guarantee for the hole at the peer's in-order point.
    ///
    /// Why: the cap on owed repairs reads the peer's deficit against the repairs in flight
    /// at their expected arrival rate, so with hundreds in flight it cannot see one repair
    /// too few, and when it drops the repair owed for the oldest hole, nothing ever owes it
    /// again: in-order delivery stands still until the coding window fills and tail
    /// repairs span it (evidence: docs/experiments/code-evidence.md#stall-watch). So when
    /// the in-order point has not moved (`moved` false) for [`STALL_ROUNDS`] loss-detection
    /// delays (`loss_delay`, at least [`STALL_FLOOR`]), about two lost repairs in a row
    /// (half a delay and no floor while a path of the session is dead, `path_died`: a
    /// hole its flight left that no ACK reported, a loss among what it sent before the
    /// failure whose ACKs died with it, is found only here),
    /// one repair is owed for that hole alone (its range ends just after it), unless the
    /// owed repairs already start with one for it, and the watch rearms. Checked as ACKs
    /// arrive, after [`RepairScheduler::on_in_order`]; `unacked_empty`: the encoder holds
    /// nothing. A lost stall repair is owed again like any reactive one.
    pub(crate) fn watch_in_order_point(
        &mut self,
        now: Instant,
        moved: bool,
        unacked_empty: bool,
        loss_delay: Duration,
        path_died: bool,
    ) {
        let covered = self.peer_next_in_order;
        if self.stall_repair.is_some_and(|e| e <= covered) {
            self.stall_repair = None;
        }
        if unacked_empty {
            self.in_order_since = None;
            return;
        }
        let since = match self.in_order_since {
            Some(t) if !moved => t,
            _ => {
                self.in_order_since = Some(now);
                return;
            }
        };
        // `covered` is the encoder's first id, so a non-empty encoder holds it.
        let wait = if path_died {
            loss_delay / 2
        } else {
            (loss_delay * STALL_ROUNDS).max(STALL_FLOOR)
        };
        if now >= since + wait {
            // Already owed and waiting for the window: sending it twice helps nothing.
            if self.debt.first().is_none_or(|e| e > covered + 1) {
                self.stall_repair = Some(covered + 1);
            }
            self.in_order_since = Some(now);
        }
    }

    /// The hole at the peer's in-order point is known lost (it went down with a path, and
    /// no ACK reported it): the stall watch's repair, which the deficit cap never drops,
    /// is owed for it now, unless the owed repairs already start with one for it.
    pub(crate) fn owe_hole(&mut self, now: Instant) {
        let covered = self.peer_next_in_order;
        if self.debt.first().is_none_or(|e| e > covered + 1) {
            self.stall_repair = Some(covered + 1);
            self.in_order_since = Some(now);
        }
    }

    /// A packet of `kind` was declared lost at `now`: a source the peer lacks, or a lost
    /// reactive repair, owes a repair ending just after what it carried (a lost
    /// speculative repair leaves nothing owed); early in a busy spell, every second lost
    /// reactive repair also owes a margin copy.
    pub(crate) fn on_lost(&mut self, now: Instant, min_rtt: Duration, kind: SentKind) {
        let covered = self.peer_next_in_order;
        let needed_end = match kind {
            SentKind::Source(id) => (id >= covered).then_some(id + 1),
            SentKind::Repair { end, origin } => {
                let owing = matches!(origin, RepairOrigin::Debt | RepairOrigin::Copy);
                (end > covered && owing).then_some(end)
            }
            SentKind::Control => None,
        };
        let Some(end) = needed_end else {
            return;
        };
        self.debt.owe(end);
        if self.second_loss_margin && matches!(kind, SentKind::Repair { .. }) {
            self.on_replacement_lost(end);
        }
        if self.in_startup(now, min_rtt) && matches!(kind, SentKind::Repair { .. }) {
            // One copy per two lost reactive repairs (the first, third, ... owe one), each
            // reaching the highest end among the losses since the last copy, so it can
            // stand in for whichever of their replacements is lost.
            self.margin_end = self.margin_end.max(Some(end));
            if !self.margin_skip {
                if let Some(e) = self.margin_end.take() {
                    self.margin.owe(e);
                }
            }
            self.margin_skip = !self.margin_skip;
        }
    }

    /// A reactive repair for `end` was lost: the second such loss for one end owes a
    /// margin copy beside the next replacement. Why: each lost replacement costs the hole
    /// another loss-detection round trip while in-order delivery waits, so a third round
    /// needs both of its repairs lost (evidence: docs/experiments/multipath.md, "Stalls of
    /// the whole transfer").
    fn on_replacement_lost(&mut self, end: SymbolId) {
        let covered = self.peer_next_in_order;
        self.lost_once.retain(|&e| e > covered);
        if let Some(at) = self.lost_once.iter().position(|&e| e == end) {
            self.lost_once.remove(at);
            self.margin.owe(end);
        } else {
            if self.lost_once.len() >= LOST_ONCE_KEPT {
                self.lost_once.pop_front();
            }
            self.lost_once.push_back(end);
        }
    }

    /// Bounds what is owed by what the peer reports lacking, after the ledger declared
    /// this ACK's losses (see [`RepairScheduler::on_lost`]).
    ///
    /// Reactive repair: the receiver's deficit, minus repairs already on their way
    /// (sent after the newest packet this ACK reflects), bounds what declared losses
    /// may ask for. Reactive repairs in flight were sent for losses this deficit already
    /// counts (each arrives with probability 1-p); proactive and tail repairs were sized
    /// for the expected losses of the sources beside them (s·p), which will be declared
    /// and owed on their own, so only what they carry beyond that covers the deficit.
    /// Only the sources sent before the newest of them count there: those sent later lie
    /// above every speculative repair's end, so no such repair was sized for them or can
    /// fill their holes. Charging them too let the cap owe, after a coding-window stall,
    /// narrow repairs for holes the stall's tail repairs were already filling as new
    /// sources went out (evidence: docs/experiments/code-evidence.md#unseen-cap).
    pub(crate) fn on_ack(&mut self, a: &AckSummary) {
        self.peer_deficit = a.deficit;
        self.second_loss_margin = a.multipath && a.p < SECOND_LOSS_MARGIN_BELOW;
        let covered = self.peer_next_in_order;
        let p = a.p;
        let speculative = (f64::from(a.after.speculative) * (1.0 - p)
            - f64::from(a.after.covered_sources) * p)
            .max(0.0);
        let surplus = (f64::from(a.after.reactive) * (1.0 - p) + speculative).floor() as u32;
        // The peer's deficit cannot count symbols it never saw (a lost tail): sources sent
        // no later than this ACK's packet that the peer has not seen are owed too.
        let unseen_to = a.first_source_after.unwrap_or(a.unacked.next);
        let mut unseen = unseen_to.saturating_sub(a.highest_seen.max(covered));
        if a.multipath {
            // Also owed for symbols above both (a dead path's flight): else the cap dropped
            // its oldest holes, and nothing decoded until every hole had its repair.
            unseen += u64::from(self.debt.count_from(unseen_to.max(a.highest_seen)));
        }
        // Speculative repairs the peer already holds lower its deficit and are not added
        // back: the deficit is the number of further equations the peer needs. Adding them
        // back let the cap owe narrow repairs for holes the tail had already filled, which
        // arrived useless after the last byte, and in an application-limited flow made the
        // cap the raw hole count; holes whose owed repairs the cap dropped after a
        // window-full stall are the stall watch's (evidence:
        // docs/experiments/code-evidence.md#no-held-add-back).
        let cap = a
            .deficit
            .saturating_add(u32::try_from(unseen).unwrap_or(u32::MAX));
        // Repairs in flight were already taken off the debt when sent: bound the debt by
        // what they leave uncovered, rather than subtracting them a second time.
        self.debt.settle_below(covered);
        self.debt.cap(cap.saturating_sub(surplus));
        self.margin.settle_below(covered);
        self.margin.cap(a.deficit);
        // Safety net: the receiver lacks symbols and no repair is on its way. Not while a
        // packet this ACK should already cover is still unresolved: that hole is most
        // likely a reordered packet on its way (RACK declares it lost in time if it is
        // not), and answering it at once sent a useless repair for many reordered packets
        // (evidence: docs/experiments/code-evidence.md#safety-net-waits).
        if a.deficit > 0
            && self.debt.is_empty()
            && a.after.reactive + a.after.speculative == 0
            && a.quiet
        {
            // The deficit comes from the peer: no more than the symbols it can lack. With
            // several paths it also counts sources still on their way on a slower path
            // (sent before sources that already arrived over a faster one): those are
            // not lacking, and owing them sent hundreds of spanning repairs at once.
            let on_way = if a.multipath { a.after.sources } else { 0 };
            let lacking = a.deficit.saturating_sub(on_way).min(a.unacked.len());
            self.debt.owe_at_least(lacking, a.unacked.next);
        }
        self.peer_lacking = cap;
    }

    /// In a tail (`tail`: the repairs in flight beyond the newest acknowledged packet, or
    /// `None` if a source is in flight there or a packet below it is unresolved), owes what
    /// the peer lacks beyond the repairs still on their way, counting each of those as
    /// arriving: a lost speculative repair owes nothing when declared, and the cap on owed
    /// repairs had already dropped the ones its tail stood in for, so when the tail's
    /// margin fell short nothing was owed until the probe timeout. Counting the repairs in
    /// flight at their expected arrivals instead owed mid-transfer on short paths
    /// (evidence: docs/experiments/code-evidence.md#owe-tail-shortfall). Run after each
    /// ACK and after losses declared by timer, when no ACK may follow (every last repair
    /// lost). `tail` is only asked for when the peer lacks something.
    pub(crate) fn owe_tail_shortfall(
        &mut self,
        unacked: Unacked,
        tail: impl FnOnce() -> Option<InFlightAfter>,
    ) {
        if self.peer_lacking == 0 || unacked.is_empty() {
            return;
        }
        let Some(in_flight) = tail() else {
            return;
        };
        let on_way = in_flight.reactive + in_flight.speculative;
        let lacking = self.peer_lacking.saturating_sub(on_way).min(unacked.len());
        self.debt.owe_at_least(lacking, unacked.next);
    }

    /// A tail loss probe fired: `probes` repairs spanning everything sent are owed (the
    /// tail's fate is unknown).
    pub(crate) fn on_probe(&mut self, probes: u32, unacked: Unacked) {
        self.debt.owe_spanning(probes, unacked.next);
    }

    /// The repair to send before any new source, if one is due, taken off what is owed:
    /// the stall watch's first, then reactive debt, then a whole unit of proactive credit,
    /// then a start-up margin copy. Only asked while symbols are unacknowledged and the
    /// congestion window (or a probe) lets a packet out; `srtt` decides how far a
    /// reactive repair reaches ([`NARROW_REACTIVE_BELOW`]).
    pub(crate) fn next_repair(&mut self, unacked: Unacked, srtt: Duration) -> Option<RepairPlan> {
        let origin = if self.stall_repair.is_some() || !self.debt.is_empty() {
            RepairOrigin::Debt
        } else if self.credit >= 1.0 {
            RepairOrigin::Credit
        } else if !self.margin.is_empty() {
            // Margin entries all end above the peer's in-order point (= the encoder's first
            // id): `on_ack` settles them as ACKs retire symbols, and `on_lost` owes none
            // below.
            RepairOrigin::Margin
        } else {
            return None;
        };
        Some(self.take(origin, unacked, srtt))
    }

    /// Nothing new to send (the application paused or finished, or flow control or the
    /// coding window holds it): the link would idle until the ACKs come back, so cover the
    /// flight's likely losses now instead of a round trip later. The first call of an idle
    /// spell sizes its budget with `budget` (see [`tail_budget`]); each call spends one.
    pub(crate) fn tail_repair(
        &mut self,
        unacked: Unacked,
        budget: impl FnOnce() -> u32,
    ) -> Option<RepairPlan> {
        let budget = self.tail_left.unwrap_or_else(budget);
        self.tail_left = Some(budget.saturating_sub(1));
        (budget > 0).then_some(RepairPlan {
            origin: RepairOrigin::Tail,
            stall: false,
            end: unacked.next,
        })
    }

    /// Takes the next repair of `origin` off what is owed and decides its range's end.
    fn take(&mut self, origin: RepairOrigin, unacked: Unacked, srtt: Duration) -> RepairPlan {
        // A reactive repair ends just after the hole it was owed for (always without
        // proactive repair; with it, only below NARROW_REACTIVE_BELOW); proactive, tail and
        // probe repairs, and reactive ones with no known end, span everything unacknowledged.
        let stall = origin == RepairOrigin::Debt && self.stall_repair.is_some();
        let owed = match origin {
            RepairOrigin::Debt if stall => self.stall_repair.take(),
            RepairOrigin::Debt => self.debt.take(),
            RepairOrigin::Margin => self.margin.take(),
            RepairOrigin::Credit | RepairOrigin::Tail | RepairOrigin::Copy => None,
        };
        let end = match owed {
            Some(e)
                if e > unacked.first
                    && (stall || !self.proactive_on() || srtt < NARROW_REACTIVE_BELOW) =>
            {
                e.min(unacked.next)
            }
            _ => unacked.next,
        };
        RepairPlan { origin, stall, end }
    }

    /// The repair `plan` went out: a new round of reactive repairs lets the next idle spell
    /// size its tail anew (the stall watch's one repair is not a round), and a proactive
    /// one spends its credit.
    pub(crate) fn on_repair_sent(&mut self, plan: &RepairPlan) {
        match plan.origin {
            RepairOrigin::Debt if !plan.stall => self.tail_left = None,
            RepairOrigin::Debt => {}
            RepairOrigin::Credit => self.credit -= 1.0,
            RepairOrigin::Tail | RepairOrigin::Margin | RepairOrigin::Copy => {}
        }
    }

    /// The encoder could not build a repair: forget everything owed rather than ask again.
    pub(crate) fn abandon(&mut self) {
        self.debt.clear();
        self.margin.clear();
        self.margin_skip = false;
        self.margin_end = None;
        self.stall_repair = None;
        self.credit = 0.0;
    }

    /// A source symbol is about to go out at `now` with nothing unacknowledged: a new busy
    /// spell begins.
    pub(crate) fn on_busy(&mut self, now: Instant) {
        self.busy_since = Some(now);
        self.margin_skip = false;
        self.margin_end = None;
    }

    /// A source symbol went out: the idle spell (if any) is over, and the loss rate earns
    /// `ratio` (from [`RepairScheduler::repair_ratio`]) proactive repairs.
    pub(crate) fn on_source_sent(&mut self, ratio: f64) {
        self.tail_left = None;
        self.credit += ratio;
        // Bound the credit so a long idle period does not bank a burst of repairs.
        self.credit = self.credit.min(MAX_CREDIT);
    }
}
