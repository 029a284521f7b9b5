//! The ledger's running account of its flight: counts by kind (all of it, and beyond the
//! largest acknowledged), the packets in flight ordered by the cumulative ACK that makes
//! them obsolete, and the speculative repairs in flight. With them, reading an ACK costs
//! what the ACK changes rather than the length of the ledger: per-ACK work that grows
//! with the window lets a sender short of CPU fall further behind as its window grows
//! (docs/experiments/stuck-session.md).

use super::{InFlightAfter, SentKind, SentLedger};
use crate::repair::RepairOrigin;
use ctcp_rlnc::SymbolId;

/// Packets in flight by what they carry.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct FlightCounts {
    pub(super) sources: u32,
    /// Repairs owed for declared losses or a deficit ([`RepairOrigin::Debt`]).
    pub(super) reactive: u32,
    /// Proactive and tail repairs.
    pub(super) speculative: u32,
    /// Start-up margin copies and warm-up copies ([`RepairOrigin::Copy`]): repairs that
    /// cover no declared hole.
    pub(super) margin: u32,
}

impl FlightCounts {
    /// Counts a packet of `kind` entering (`+1`) or leaving (`-1`) flight.
    pub(super) fn add(&mut self, kind: SentKind, delta: i32) {
        let slot = match kind {
            SentKind::Source(_) => &mut self.sources,
            SentKind::Repair { origin, .. } => match origin {
                RepairOrigin::Debt => &mut self.reactive,
                RepairOrigin::Credit | RepairOrigin::Tail => &mut self.speculative,
                RepairOrigin::Margin | RepairOrigin::Copy => &mut self.margin,
            },
            SentKind::Control => return,
        };
        *slot = slot.saturating_add_signed(delta);
    }

    /// Whether a repair of any kind is counted.
    pub(super) fn has_repairs(&self) -> bool {
        self.reactive + self.speculative + self.margin > 0
    }
}

/// The symbol the peer's cumulative ACK must reach for a packet of `kind` to be obsolete
/// (see [`SentLedger::settle_covered`]): past a source symbol, or to a repair's end.
pub(super) fn settle_key(kind: SentKind) -> Option<SymbolId> {
    match kind {
        SentKind::Source(id) => Some(id + 1),
        SentKind::Repair { end, .. } => Some(end),
        SentKind::Control => None,
    }
}

/// Whether `kind` is a speculative (proactive or tail) repair.
pub(super) fn is_speculative(kind: SentKind) -> bool {
    matches!(
        kind,
        SentKind::Repair {
            origin: RepairOrigin::Credit | RepairOrigin::Tail,
            ..
        }
    )
}

impl SentLedger {
    /// Accounts packet `pn` of `kind` entering flight.
    pub(super) fn entered_flight(&mut self, pn: u64, kind: SentKind) {
        self.flight.add(kind, 1);
        self.beyond.add(kind, 1);
        if let Some(key) = settle_key(kind) {
            // Entries of packets that left flight otherwise wait for the cumulative ACK;
            // when they outnumber the ledger, start over from the packets in flight.
            if self.settle_queue.len() >= 2 * self.sent.len() + 1024 {
                self.rebuild_settle_queue();
            }
            self.settle_queue.push(key, pn);
        }
        if is_speculative(kind) {
            self.speculative.push_back(pn);
        }
    }

    /// Accounts packet `pn` of `kind` leaving flight.
    pub(super) fn left_flight(&mut self, pn: u64, kind: SentKind) {
        self.flight.add(kind, -1);
        if self.largest_acked.is_none_or(|l| pn > l) {
            self.beyond.add(kind, -1);
        }
    }

    /// Moves the largest acknowledged up to `pn`: what is still in flight at or below it
    /// no longer counts as beyond it. Each packet crosses once.
    pub(super) fn advance_largest(&mut self, pn: u64) {
        if self.largest_acked.is_some_and(|l| l >= pn) {
            return;
        }
        let from = self
            .largest_acked
            .map_or(self.base, |l| l + 1)
            .max(self.base);
        let start = (from - self.base) as usize;
        let end = ((pn + 1).saturating_sub(self.base) as usize).min(self.sent.len());
        for i in start.min(end)..end {
            let p = self.sent[i];
            if p.in_flight {
                self.beyond.add(p.kind, -1);
            }
        }
        self.largest_acked = Some(pn);
    }

    /// The settle queue from the packets in flight alone.
    fn rebuild_settle_queue(&mut self) {
        let base = self.base;
        self.settle_queue = self
            .sent
            .iter()
            .enumerate()
            .filter(|(_, p)| p.in_flight)
            .filter_map(|(i, p)| settle_key(p.kind).map(|k| (k, base + i as u64)))
            .collect();
    }

    /// The number of the newest speculative repair in flight, dropping the ones met that
    /// left flight (they never return to it).
    pub(super) fn newest_speculative(&mut self) -> Option<u64> {
        let in_flight = |ledger: &Self, pn: u64| {
            pn.checked_sub(ledger.base)
                .and_then(|i| ledger.sent.get(i as usize))
                .is_some_and(|p| p.in_flight)
        };
        while let Some(&pn) = self.speculative.back() {
            if in_flight(self, pn) {
                break;
            }
            self.speculative.pop_back();
        }
        while let Some(&pn) = self.speculative.front() {
            if in_flight(self, pn) {
                break;
            }
            self.speculative.pop_front();
        }
        self.speculative.back().copied()
    }

    /// [`SentLedger::in_flight_from`] by walking the ledger from `from` to its end.
    pub(super) fn walk_from(&self, from: usize) -> (InFlightAfter, Option<SymbolId>) {
        let mut n = InFlightAfter::default();
        let mut first = None;
        for p in self.sent.iter().skip(from) {
            match p.kind {
                SentKind::Repair { origin, .. } if p.in_flight => match origin {
                    RepairOrigin::Debt => n.reactive += 1,
                    RepairOrigin::Credit | RepairOrigin::Tail => {
                        n.speculative += 1;
                        n.covered_sources = n.sources;
                    }
                    // A margin copy in flight stands in for a replacement that is lost, a
                    // warm-up copy for an original on its way; neither covers a hole.
                    RepairOrigin::Margin | RepairOrigin::Copy => {}
                },
                SentKind::Source(id) => {
                    n.sources += u32::from(p.in_flight);
                    first.get_or_insert(id);
                }
                SentKind::Repair { .. } | SentKind::Control => {}
            }
        }
        (n, first)
    }
}
