//! Repairs owed to the peer, each with the end of the range it must cover.
//!
//! Why each owed repair keeps its own end: a repair can only help decode symbols below
//! its end, and decoding advances in order, so the repair that replaces a lost one must
//! reach no further than the hole it was owed for. With a single high-water end, the
//! replacement for a lost repair also spanned every newer hole, which waited for their own
//! repairs, one of which was lost in turn, so the in-order point could stand still for
//! seconds (evidence: docs/experiments/code-evidence.md#repair-debt-ends).

use ctcp_rlnc::SymbolId;
use std::collections::VecDeque;

/// Owed repairs as range ends (exclusive), ascending: the oldest hole is repaired first.
#[derive(Debug, Default, Clone)]
pub(crate) struct RepairDebt {
    ends: VecDeque<SymbolId>,
}

impl RepairDebt {
    /// Repairs owed.
    pub(crate) fn len(&self) -> u32 {
        u32::try_from(self.ends.len()).unwrap_or(u32::MAX)
    }

    /// Whether nothing is owed.
    pub(crate) fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// Owes one repair that must cover symbols below `end`.
    pub(crate) fn owe(&mut self, end: SymbolId) {
        let at = self.ends.partition_point(|&e| e <= end);
        self.ends.insert(at, end);
    }

    /// Owes at least `n` repairs in all, the added ones covering everything below `end`
    /// (the deficit safety net, where which symbols are missing is unknown).
    pub(crate) fn owe_at_least(&mut self, n: u32, end: SymbolId) {
        while self.len() < n {
            self.owe(end);
        }
    }

    /// Owes repairs until at least `n` of them cover everything below `end` (tail
    /// probes: the fate of the whole flight is unknown).
    pub(crate) fn owe_spanning(&mut self, n: u32, end: SymbolId) {
        let spanning = self.ends.iter().rev().take_while(|&&e| e >= end).count();
        for _ in spanning..n as usize {
            self.owe(end);
        }
    }

    /// Keeps at most `n` owed repairs, dropping those with the lowest ends: a repair
    /// reaching further can fill any hole a shorter one could (which holes are open is
    /// unknown when the peer reports fewer than are owed), though it decodes only once the
    /// newer holes in its range are filled too.
    pub(crate) fn cap(&mut self, n: u32) {
        while self.len() > n {
            self.ends.pop_front();
        }
    }

    /// Forgets repairs whose range the peer now holds in full (all symbols below
    /// `covered`).
    pub(crate) fn settle_below(&mut self, covered: SymbolId) {
        while self.ends.front().is_some_and(|&e| e <= covered) {
            self.ends.pop_front();
        }
    }

    /// Owed repairs for symbols `id` and above (their range ends beyond `id`).
    pub(crate) fn count_from(&self, id: SymbolId) -> u32 {
        let below = self.ends.partition_point(|&e| e <= id);
        u32::try_from(self.ends.len() - below).unwrap_or(u32::MAX)
    }

    /// The lowest end owed (the next repair [`RepairDebt::take`] would give).
    pub(crate) fn first(&self) -> Option<SymbolId> {
        self.ends.front().copied()
    }

    /// Takes the next repair to send: the end of its range.
    pub(crate) fn take(&mut self) -> Option<SymbolId> {
        self.ends.pop_front()
    }

    /// Forgets everything owed.
    pub(crate) fn clear(&mut self) {
        self.ends.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oldest_hole_is_repaired_first() {
        let mut d = RepairDebt::default();
        d.owe(40);
        d.owe(12);
        d.owe(40);
        d.owe(25);
        assert_eq!(d.len(), 4);
        assert_eq!(d.take(), Some(12));
        assert_eq!(d.take(), Some(25));
        assert_eq!(d.take(), Some(40));
        assert_eq!(d.take(), Some(40));
        assert_eq!(d.take(), None);
        assert!(d.is_empty());
    }

    #[test]
    fn cap_keeps_the_furthest_reaching() {
        let mut d = RepairDebt::default();
        for e in [5, 9, 3, 7] {
            d.owe(e);
        }
        d.cap(2);
        assert_eq!(d.take(), Some(7));
        assert_eq!(d.take(), Some(9));
        d.cap(0);
        assert!(d.is_empty());
    }

    #[test]
    fn settled_ranges_are_forgotten() {
        let mut d = RepairDebt::default();
        for e in [5, 9, 3, 7] {
            d.owe(e);
        }
        d.settle_below(7);
        assert_eq!(d.len(), 1);
        assert_eq!(d.take(), Some(9));
    }

    #[test]
    fn probes_span_the_whole_flight() {
        let mut d = RepairDebt::default();
        d.owe(4);
        d.owe(6);
        d.owe_spanning(2, 10);
        assert_eq!(d.len(), 4, "narrow entries do not count as spanning");
        d.owe_spanning(2, 10);
        assert_eq!(d.len(), 4);
        assert_eq!(d.take(), Some(4));
        assert_eq!(d.take(), Some(6));
        assert_eq!(d.take(), Some(10));
        assert_eq!(d.take(), Some(10));
        // Empty and over-sized operations are no-ops.
        d.cap(5);
        d.settle_below(100);
        assert_eq!(d.take(), None);
    }

    #[test]
    fn owe_at_least_tops_up_only() {
        let mut d = RepairDebt::default();
        d.owe(4);
        d.owe_at_least(3, 10);
        assert_eq!(d.len(), 3);
        d.owe_at_least(2, 99);
        assert_eq!(d.len(), 3);
        assert_eq!(d.take(), Some(4));
        assert_eq!(d.take(), Some(10));
        d.clear();
        assert!(d.is_empty());
    }
}
