//! The sent-packet ledger: every datagram sent since the oldest one whose fate is still
//! open, what it carried, and what the peer's ACKs said about it.
//!
//! It owns transmission numbers, the packets in flight and the largest acknowledged; it
//! reads ACK ranges, declares losses RACK-style and hands settled packets to the loss
//! estimator in transmission order. What a loss owes is the repair scheduler's business.

use crate::repair::RepairOrigin;
use crate::wire::Ack;
use ctcp_rlnc::SymbolId;
use flight::{settle_key, FlightCounts};
use settle::SettleQueue;
use std::collections::VecDeque;
use std::time::{Duration, Instant};

mod flight;
mod indirect;
mod settle;

/// How many declared-lost, already trimmed packets are remembered for spurious-loss
/// detection. Why: the sent log drops a lost packet at once, so when a reordered packet
/// (50 ms late on a 100 ms path) was declared lost at 3 packets' displacement, its ACK
/// found nothing, the reordering estimator never saw the late arrival, its thresholds
/// stayed at their floors, and every reordered packet cost a useless repair (evidence:
/// docs/experiments/code-evidence.md#recent-lost). A few hundred covers more than a round
/// trip of losses at the rates the thresholds matter for; the oldest are forgotten first.
const RECENT_LOST: usize = 256;

/// What a datagram carried.
#[derive(Debug, Clone, Copy)]
pub(crate) enum SentKind {
    /// Carried source symbol `id`.
    Source(SymbolId),
    /// Carried a repair whose range ends before `end`. Only a reactive one
    /// ([`RepairOrigin::Debt`], for a declared loss) is owed again when lost.
    Repair {
        /// Exclusive end of the repair's range.
        end: SymbolId,
        /// Why it was sent.
        origin: RepairOrigin,
    },
    /// Only ACK/PING/CLOSE.
    Control,
}

/// One datagram in the ledger.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SentPacket {
    /// When it left.
    pub(crate) time: Instant,
    /// What it carried.
    pub(crate) kind: SentKind,
    /// Whether it asks the peer for an ACK.
    pub(crate) ack_eliciting: bool,
    /// Counted in flight (ack-eliciting, neither acknowledged nor declared lost).
    pub(crate) in_flight: bool,
    /// Settled by an ACK (its own, or the cumulative symbol ACK).
    pub(crate) acked: bool,
    /// Declared lost.
    pub(crate) lost: bool,
    /// Acknowledged by its own transmission number (also after a spurious loss).
    pub(crate) delivered: bool,
    /// Made obsolete by the cumulative symbol ACK without an acknowledgement of its own,
    /// although an ACK that reported its neighbours did not report it: the peer decoded
    /// around it, so it was lost.
    pub(crate) vanished: bool,
    /// An ACK whose range (its largest packet and the 64 before it) covered this packet
    /// did not report it. Only such a packet, once the cumulative ACK makes it obsolete,
    /// was decoded around (lost): one the peer's ACKs skipped over (a receiver that read
    /// many datagrams before it answered reported only the newest 65) has an unknown fate
    /// and stays out of the loss estimate.
    pub(crate) missed: bool,
    /// Its repair was owed already, from another path's report (`indirect.rs`): declared
    /// lost later by the path's own ACK, it owes nothing more.
    pub(crate) repaired: bool,
}

/// Packets in flight sent after a given point of the ledger.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct InFlightAfter {
    /// Repairs owed for declared losses or a reported deficit.
    pub(crate) reactive: u32,
    /// Proactive and tail repairs (not start-up margin copies, which stand in for a lost
    /// reactive repair's replacement and cover no hole of their own).
    pub(crate) speculative: u32,
    /// Source symbols.
    pub(crate) sources: u32,
    /// Source symbols sent before the newest speculative repair (the ones such repairs
    /// can cover).
    pub(crate) covered_sources: u32,
}

impl InFlightAfter {
    /// Adds another path's share of the flight.
    pub(crate) fn add(&mut self, other: &InFlightAfter) {
        self.reactive += other.reactive;
        self.speculative += other.speculative;
        self.sources += other.sources;
        self.covered_sources += other.covered_sources;
    }
}

/// The flight as tail repairs see it (see `repair::tail_budget`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct TailCensus {
    /// Sources and reactive repairs in flight and not overdue.
    pub(crate) fresh: u32,
    /// Sources and reactive repairs past the loss-detection delay, above the largest
    /// acknowledged, with the peer heard from since: taken as lost.
    pub(crate) overdue: u32,
    /// Speculative repairs in flight and not overdue.
    pub(crate) repairs: u32,
    /// Fresh symbols sent after the newest speculative repair in flight: no repair
    /// covers them yet (each spans what was unacknowledged when it left).
    pub(crate) uncovered: u32,
}

/// What an ACK's packet numbers settled.
#[derive(Debug, Default)]
pub(crate) struct AckedPackets {
    /// Packets that left flight.
    pub(crate) newly_acked: u64,
    /// Packets acknowledged after a later one: (displacement in packets, lateness).
    pub(crate) late: Vec<(u64, Duration)>,
    /// The largest newly acknowledged packet: (number, send time, ack-eliciting).
    pub(crate) largest: Option<(u64, Instant, bool)>,
}

/// What a loss scan found.
#[derive(Debug, Default)]
pub(crate) struct LossScan {
    /// Packets declared lost.
    pub(crate) lost: u64,
    /// Send time of the newest of them.
    pub(crate) latest_lost_time: Option<Instant>,
    /// When the next packet crosses the time threshold.
    pub(crate) loss_time: Option<Instant>,
}

/// Sent packets from the oldest unsettled one on, indexed by transmission number.
#[derive(Debug, Default)]
pub(crate) struct SentLedger {
    next_pn: u64,
    /// Transmission number of `sent[0]`.
    base: u64,
    sent: VecDeque<SentPacket>,
    /// Packets declared lost and since trimmed from `sent`: (number, send time). An ACK
    /// that still names one shows it was only late; see [`RECENT_LOST`].
    recent_lost: VecDeque<(u64, Instant)>,
    in_flight: u64,
    largest_acked: Option<u64>,
    /// Every packet in flight, by kind (`flight.rs`).
    flight: FlightCounts,
    /// Packets in flight above the largest acknowledged (all of them before any ACK).
    beyond: FlightCounts,
    /// Packets that entered flight, by `settle_key` (smallest first) with their number;
    /// one that left flight otherwise is skipped when it surfaces.
    settle_queue: SettleQueue,
    /// Numbers of speculative repairs sent, oldest first; those that left flight are
    /// dropped from either end as they are met.
    speculative: VecDeque<u64>,
}

impl SentLedger {
    /// An empty ledger whose first datagram is numbered `pn` (a path id used again
    /// continues its numbers, so the peer's replay window and number reconstruction for
    /// it stay valid).
    pub(crate) fn starting_at(pn: u64) -> Self {
        SentLedger {
            next_pn: pn,
            base: pn,
            ..SentLedger::default()
        }
    }

    /// The largest packet number an ACK acknowledged so far.
    pub(crate) fn largest_acked(&self) -> Option<u64> {
        self.largest_acked
    }

    /// The number the next datagram gets.
    pub(crate) fn next_pn(&self) -> u64 {
        self.next_pn
    }

    /// Ack-eliciting packets in flight.
    pub(crate) fn in_flight(&self) -> u64 {
        self.in_flight
    }

    /// Packets in flight sent at or before `cutoff`, counted from the oldest and up to
    /// `enough` (the scan stops there, or at the first packet sent after `cutoff`).
    pub(crate) fn in_flight_sent_by(&self, cutoff: Instant, enough: u64) -> u64 {
        let mut n = 0;
        for p in self.sent.iter().take_while(|p| p.time <= cutoff) {
            n += u64::from(p.in_flight);
            if n >= enough {
                break;
            }
        }
        n
    }

    /// Records the datagram numbered [`SentLedger::next_pn`] as sent at `now`; an
    /// ack-eliciting one counts in flight. Returns the packets in flight.
    pub(crate) fn on_sent(&mut self, now: Instant, kind: SentKind, eliciting: bool) -> u64 {
        let pn = self.next_pn;
        if eliciting {
            self.entered_flight(pn, kind);
        }
        self.next_pn += 1;
        self.sent.push_back(SentPacket {
            time: now,
            kind,
            ack_eliciting: eliciting,
            in_flight: eliciting,
            acked: false,
            lost: false,
            delivered: false,
            vanished: false,
            missed: false,
            repaired: false,
        });
        self.in_flight += u64::from(eliciting);
        self.in_flight
    }

    /// Reads the packet numbers `ack` reports: marks them acknowledged, remembers which
    /// arrived late (`min_rtt` is the no-queue round trip they are measured against),
    /// marks what its range covered but did not report as missed, and moves the largest
    /// acknowledged. The caller checked `ack.largest_pn` < [`SentLedger::next_pn`].
    pub(crate) fn on_ack(&mut self, now: Instant, ack: &Ack, min_rtt: Duration) -> AckedPackets {
        let mut out = AckedPackets::default();
        let prev_largest = self.largest_acked;
        for back in ack.late.iter() {
            if let Some(pn) = ack.largest_pn.checked_sub(back) {
                self.mark(now, pn, prev_largest, min_rtt, &mut out);
            }
        }
        for i in (0..64u64).rev() {
            if ack.pn_bitmap & (1 << i) != 0 && ack.largest_pn > i {
                self.mark(now, ack.largest_pn - 1 - i, prev_largest, min_rtt, &mut out);
            }
        }
        self.mark(now, ack.largest_pn, prev_largest, min_rtt, &mut out);
        // What the ACK's range covers and it did not report is missing; below its range
        // the ACK says nothing (see `SentPacket::missed`).
        let range_start = ack
            .largest_pn
            .saturating_sub(64)
            .max(self.base)
            .saturating_sub(self.base) as usize;
        let range_end = (ack.largest_pn.saturating_sub(self.base) as usize).min(self.sent.len());
        for p in self.sent.range_mut(range_start.min(range_end)..range_end) {
            p.missed |= !p.acked;
        }
        self.advance_largest(ack.largest_pn);
        out
    }

    /// Marks packet `pn` acknowledged (see [`SentLedger::on_ack`]).
    fn mark(
        &mut self,
        now: Instant,
        pn: u64,
        prev_largest: Option<u64>,
        min_rtt: Duration,
        out: &mut AckedPackets,
    ) {
        // Acknowledged after a later packet: it arrived out of order, by this many
        // packets and this long.
        let late_arrival = |sent: Instant| {
            prev_largest.filter(|&l| pn < l).map(|prev| {
                let late_by = now.saturating_duration_since(sent).saturating_sub(min_rtt);
                (prev - pn, late_by)
            })
        };
        if pn < self.base {
            // Declared lost and trimmed, yet acknowledged: it was only late.
            let found = self.recent_lost.iter().rposition(|&(n, _)| n == pn);
            if let Some((_, sent_time)) = found.and_then(|i| self.recent_lost.remove(i)) {
                out.late.extend(late_arrival(sent_time));
            }
            return;
        }
        let Some(p) = self.sent.get_mut((pn - self.base) as usize) else {
            return;
        };
        if p.acked {
            return;
        }
        p.acked = true;
        p.delivered = true;
        out.late.extend(late_arrival(p.time));
        if p.lost {
            // Spurious loss: it was only late. Reordering, not congestion.
            return;
        }
        let (kind, time, eliciting) = (p.kind, p.time, p.ack_eliciting);
        if p.in_flight {
            p.in_flight = false;
            self.in_flight -= 1;
            out.newly_acked += 1;
            self.left_flight(pn, kind);
        }
        if out.largest.is_none_or(|(l, _, _)| pn > l) {
            out.largest = Some((pn, time, eliciting));
        }
    }

    /// Settles what the cumulative symbol ACK made obsolete (the peer holds every symbol
    /// below `covered`): sources below it and repairs ending at or below it. Returns how
    /// many packets left flight.
    pub(crate) fn settle_covered(&mut self, covered: SymbolId) -> u64 {
        // Only the packets whose key the ACK passed are visited: the queue holds every
        // packet in flight by key, so none is missed, and the order of settling is
        // immaterial (each is settled on its own).
        let mut settled = 0;
        while let Some((key, pn)) = self.settle_queue.peek() {
            if key > covered {
                break;
            }
            self.settle_queue.pop();
            let Some(p) = pn
                .checked_sub(self.base)
                .and_then(|i| self.sent.get_mut(i as usize))
            else {
                continue; // trimmed: it left flight long ago
            };
            // A hole another path's report showed stays for the path's own ACK to declare
            // lost (its controller and loss estimate see it as before the report).
            if p.in_flight && !p.acked && !p.repaired {
                p.in_flight = false;
                p.acked = true;
                p.vanished = p.missed;
                self.in_flight -= 1;
                settled += 1;
                let kind = p.kind;
                self.left_flight(pn, kind);
            }
        }
        debug_assert!(
            !self.sent.iter().any(|p| p.in_flight
                && !p.repaired
                && settle_key(p.kind).is_some_and(|k| k <= covered)),
            "the settle queue missed an obsolete packet"
        );
        settled
    }

    /// Declares lost every packet in flight below the largest acknowledged that is
    /// `pkt_threshold` packets or `delay` behind (RACK-style), calling `on_lost` with
    /// each one's kind, oldest first. `None` before anything was acknowledged.
    pub(crate) fn detect_lost(
        &mut self,
        now: Instant,
        pkt_threshold: u64,
        delay: Duration,
        mut on_lost: impl FnMut(SentKind),
    ) -> Option<LossScan> {
        let largest = self.largest_acked?;
        let mut scan = LossScan::default();
        for i in 0..self.sent.len() {
            let pn = self.base + i as u64;
            if pn >= largest {
                break;
            }
            let p = &mut self.sent[i];
            if p.acked || p.lost || !p.in_flight {
                continue;
            }
            // Also a packet no ACK's range covered (its ACK was lost): the cumulative ACK
            // made it obsolete above if the peer has it in order, and the peer's deficit
            // caps the repairs owed if it does not, while waiting for the time threshold
            // slows recovery whenever bunched ACKs leave such gaps (BENCHMARKS.md, issue 24).
            if largest - pn >= pkt_threshold || now >= p.time + delay {
                p.lost = true;
                p.in_flight = false;
                self.in_flight -= 1;
                scan.lost += 1;
                scan.latest_lost_time = Some(p.time);
                let (kind, repaired) = (p.kind, p.repaired);
                if !repaired {
                    on_lost(kind);
                }
                self.left_flight(pn, kind);
            } else {
                let t = p.time + delay;
                scan.loss_time = Some(scan.loss_time.map_or(t, |l: Instant| l.min(t)));
            }
        }
        Some(scan)
    }

    /// Drops settled packets from the front of the log, handing each to `settled` in
    /// transmission order (the Gilbert counts need the order), and remembers the lost
    /// ones for spurious-loss detection.
    pub(crate) fn trim(&mut self, mut settled: impl FnMut(&SentPacket)) {
        while let Some(p) = self.sent.front() {
            if p.in_flight {
                break;
            }
            if p.lost && !p.acked {
                if self.recent_lost.len() == RECENT_LOST {
                    self.recent_lost.pop_front();
                }
                self.recent_lost.push_back((self.base, p.time));
            }
            settled(p);
            self.sent.pop_front();
            self.base += 1;
        }
    }

    /// Log index just past packet `pn`: the entries an ACK of `pn` should cover.
    pub(crate) fn index_after(&self, pn: u64) -> usize {
        (pn + 1).saturating_sub(self.base) as usize
    }

    /// Whether a packet among the first `index` entries of the log (those an ACK should
    /// already cover) is still unacknowledged and in flight: most likely reordered, and
    /// RACK declares it lost in time if it is not.
    pub(crate) fn unresolved_before(&self, index: usize) -> bool {
        self.sent
            .iter()
            .take(index.min(self.sent.len()))
            .any(|p| p.in_flight && !p.acked)
    }

    /// Among packets sent after `pn`: what is in flight, and the first source symbol.
    pub(crate) fn sent_after(&mut self, pn: u64) -> (InFlightAfter, Option<SymbolId>) {
        self.in_flight_from(self.index_after(pn))
    }

    /// From the `from`-th entry of the log on: what is in flight, and the first source
    /// symbol.
    pub(crate) fn in_flight_from(&mut self, from: usize) -> (InFlightAfter, Option<SymbolId>) {
        let boundary = self
            .largest_acked
            .map_or(0, |l| (l + 1).saturating_sub(self.base) as usize);
        if from != boundary {
            return self.walk_from(from);
        }
        // From the largest acknowledged on (every ACK's case) the counts are kept; left
        // to walk: up to the first source symbol (the next entry, as a rule) and the
        // entries after the newest speculative repair in flight.
        let c = self.beyond;
        let mut n = InFlightAfter {
            reactive: c.reactive,
            speculative: c.speculative,
            sources: c.sources,
            covered_sources: 0,
        };
        let first = self.sent.iter().skip(from).find_map(|p| match p.kind {
            SentKind::Source(id) => Some(id),
            _ => None,
        });
        if let Some(at) = self
            .newest_speculative()
            .map(|pn| (pn - self.base) as usize)
            .filter(|&at| at >= from)
        {
            let later = self
                .sent
                .iter()
                .skip(at + 1)
                .filter(|p| p.in_flight && matches!(p.kind, SentKind::Source(_)))
                .count();
            n.covered_sources = n.sources.saturating_sub(later as u32);
        }
        debug_assert_eq!(
            (n, first),
            self.walk_from(from),
            "kept flight counts drifted"
        );
        (n, first)
    }

    /// The repairs in flight beyond the largest acknowledged packet, if the flight is a
    /// tail: something was acknowledged, nothing below it is unresolved and no source is
    /// in flight above it.
    pub(crate) fn tail_flight(&mut self) -> Option<InFlightAfter> {
        let largest = self.largest_acked?;
        let ack_index = self.index_after(largest).min(self.sent.len());
        if self.unresolved_before(ack_index) {
            return None;
        }
        let (in_flight, _) = self.in_flight_from(ack_index);
        (in_flight.sources == 0).then_some(in_flight)
    }

    /// What is in flight above the largest acknowledged packet (everything, before any
    /// ACK), and the first source symbol there: another path's share of a flight that
    /// one path's ACK cannot see (issue 29).
    pub(crate) fn unacked_flight(&mut self) -> (InFlightAfter, Option<SymbolId>) {
        self.in_flight_from(self.largest_acked.map_or(0, |l| self.index_after(l)))
    }

    /// Whether any repair is in flight.
    pub(crate) fn repairs_in_flight(&self) -> bool {
        let any = self.flight.has_repairs();
        debug_assert_eq!(
            any,
            self.sent
                .iter()
                .any(|p| p.in_flight && matches!(p.kind, SentKind::Repair { .. })),
            "kept flight counts drifted"
        );
        any
    }

    /// Counts the flight for tail repairs at `now`: a packet is overdue once `delay` past
    /// its send time, above everything acknowledged (below it RACK declares the packet
    /// lost on its own timer), with the peer heard from since (`last_received`; a silent
    /// peer is a dead one or a blackout, not a loss to repair a whole flight for).
    pub(crate) fn tail_census(
        &self,
        now: Instant,
        delay: Duration,
        last_received: Instant,
    ) -> TailCensus {
        let mut c = TailCensus::default();
        let acked_below = self
            .largest_acked
            .map_or(0, |l| (l + 1).saturating_sub(self.base));
        for (i, pkt) in self.sent.iter().enumerate().filter(|(_, p)| p.in_flight) {
            let stale = now >= pkt.time + delay
                && i as u64 >= acked_below
                && last_received >= pkt.time + delay;
            match pkt.kind {
                SentKind::Source(_)
                | SentKind::Repair {
                    origin: RepairOrigin::Debt,
                    ..
                } => {
                    if stale {
                        c.overdue += 1;
                    } else {
                        c.fresh += 1;
                        c.uncovered += 1;
                    }
                }
                SentKind::Repair {
                    origin: RepairOrigin::Credit | RepairOrigin::Tail,
                    ..
                } if !stale => {
                    c.repairs += 1;
                    c.uncovered = 0;
                }
                _ => {}
            }
        }
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A dead path's flight declared lost leaves nothing in the kept counts: they and a
    /// walk of the ledger agree (the walk is what `in_flight_from` checks them against).
    #[test]
    #[allow(clippy::disallowed_methods)] // a base instant for the test; no time passes
    fn declaring_a_whole_flight_lost_empties_the_kept_counts() {
        let now = Instant::now();
        let mut l = SentLedger::starting_at(0);
        for id in 0..30 {
            l.on_sent(now, SentKind::Source(id), true);
        }
        l.on_sent(
            now,
            SentKind::Repair {
                end: 30,
                origin: RepairOrigin::Debt,
            },
            true,
        );
        let mut kinds = 0;
        assert_eq!(l.declare_lost_sent(|_, _| true, |_| kinds += 1), 31);
        assert_eq!(kinds, 31);
        assert_eq!(l.in_flight(), 0);
        assert!(!l.repairs_in_flight());
        assert_eq!(l.in_flight_from(0).0, InFlightAfter::default());
    }

    /// A path declared dead at an estimated failure time: only what it sent from then on
    /// is lost; the older flight stays until the in-order point reaches a hole in it,
    /// which `lose_source` then declares (once, and only once it is overdue).
    #[test]
    #[allow(clippy::disallowed_methods)] // a base instant for the test; time is offsets
    fn a_flight_lost_from_a_time_keeps_the_older_part_for_the_in_order_point() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut l = SentLedger::starting_at(0);
        for id in 0..10 {
            l.on_sent(t0 + ms(id * 10), SentKind::Source(id), true);
        }
        assert_eq!(l.in_flight_sent_by(t0 + ms(25), 100), 3);
        assert_eq!(
            l.in_flight_sent_by(t0 + ms(95), 4),
            4,
            "the scan stops at enough"
        );
        let mut lost = Vec::new();
        let n = l.declare_lost_sent(|sent, _| sent >= t0 + ms(50), |k| lost.push(k));
        assert_eq!(n, 5);
        assert!(matches!(lost[0], SentKind::Source(5)));
        assert_eq!(l.in_flight(), 5);
        // The peer's in-order point reaches 2: 0 and 1 are settled, 2 is the hole.
        assert_eq!(l.settle_covered(2), 2);
        assert!(
            l.lose_source(3, t0 + ms(100)).is_none(),
            "not the first in flight"
        );
        assert!(l.lose_source(2, t0 + ms(10)).is_none(), "not overdue yet");
        assert!(matches!(
            l.lose_source(2, t0 + ms(20)),
            Some(SentKind::Source(2))
        ));
        assert!(l.lose_source(2, t0 + ms(20)).is_none(), "declared once");
        assert_eq!(l.in_flight(), 2);
        assert_eq!(l.in_flight_from(0).0.sources, 2);
    }
}
