//! Losses known other than from a path's own ACKs (multipath): another path's report of
//! its packet numbers, its death, and the peer's in-order point reaching a hole a dead
//! path left.

use super::{SentKind, SentLedger};
use ctcp_rlnc::SymbolId;
use std::time::Instant;

impl SentLedger {
    /// Owes the repairs of the packets in flight that a report of the peer's received
    /// packet numbers (another path's `PathAck`: `largest` received, bit i of `bitmap` for
    /// `largest − 1 − i`) shows missing `pkt_threshold` or more below `largest` (the RACK
    /// packet rule of [`SentLedger::detect_lost`], read from the report), calling
    /// `on_lost` with each one's kind, oldest first; returns how many. The packets stay
    /// in flight, marked `repaired`: the path's own ACK declares them lost as before (for
    /// its controller, its flight and its loss estimate) without owing them again. Why
    /// not declare them here: a loss known a long path's one-way delay early left flight
    /// that early too, and on a full queue each such early exit let one more packet into
    /// it (evidence: docs/experiments/code-evidence.md#moved-figures).
    /// Below the bitmap's reach the report says nothing. The caller checked `largest` <
    /// [`SentLedger::next_pn`].
    pub(crate) fn owe_reported_losses(
        &mut self,
        largest: u64,
        bitmap: u64,
        pkt_threshold: u64,
        mut on_lost: impl FnMut(SentKind),
    ) -> u64 {
        let Some(top) = largest.checked_sub(pkt_threshold.max(1)) else {
            return 0;
        };
        let mut n = 0;
        let from = largest.saturating_sub(64).max(self.base);
        for pn in from..=top {
            // 1 ≤ largest − pn ≤ 64 here: the bit for pn is in the bitmap.
            if bitmap & (1 << (largest - pn - 1)) != 0 {
                continue;
            }
            let Some(p) = self.sent.get_mut((pn - self.base) as usize) else {
                break;
            };
            if p.acked || p.lost || p.repaired || !p.in_flight {
                continue;
            }
            p.repaired = true;

            n += 1;
            on_lost(p.kind);
        }
        n
    }

    /// Declares lost the source packet carrying symbol `id` if it is in flight and was
    /// sent at or before `sent_by`; returns its kind if it was.
    pub(crate) fn lose_source(&mut self, id: SymbolId, sent_by: Instant) -> Option<SentKind> {
        // Packets that left flight otherwise sit at the top of the queue until met.
        while let Some((key, pn)) = self.settle_queue.peek() {
            let i = pn.checked_sub(self.base).map(|i| i as usize);
            let p = i.and_then(|i| self.sent.get(i));
            if p.is_some_and(|p| p.in_flight && !p.acked) {
                if key != id + 1 {
                    return None;
                }
                break;
            }
            self.settle_queue.pop();
        }
        let (_, pn) = self.settle_queue.peek()?;
        let p = self.sent.get_mut((pn - self.base) as usize)?;
        if !matches!(p.kind, SentKind::Source(s) if s == id) || p.time > sent_by {
            return None;
        }
        p.lost = true;
        p.in_flight = false;
        self.in_flight -= 1;
        let kind = p.kind;
        self.left_flight(pn, kind);
        Some(kind)
    }

    /// Declares lost every packet in flight that `lost` accepts by send time and kind (its
    /// path died), calling `on_lost` with each one's kind, oldest first; returns how many.
    pub(crate) fn declare_lost_sent(
        &mut self,
        lost: impl Fn(Instant, SentKind) -> bool,
        mut on_lost: impl FnMut(SentKind),
    ) -> u64 {
        let mut n = 0;
        for i in 0..self.sent.len() {
            let p = &mut self.sent[i];
            if !p.in_flight || p.acked || !lost(p.time, p.kind) {
                continue;
            }
            p.lost = true;
            p.in_flight = false;
            n += 1;
            let kind = p.kind;
            if !p.repaired {
                on_lost(kind);
            }
            // The kept flight counts follow every packet out, as the ACK and RACK paths do.
            self.left_flight(self.base + i as u64, kind);
        }
        self.in_flight -= n;
        n
    }
}

#[cfg(test)]
mod tests {
    use super::super::{SentKind, SentLedger};
    use crate::wire::Ack;
    use std::time::{Duration, Instant};

    /// A hole deep enough in the report owes its repair at once, however far the path's
    /// own ACKs lag; it stays in flight until they declare it lost, which owes nothing
    /// more. A shallow hole and the reported packets are left alone.
    #[test]
    #[allow(clippy::disallowed_methods)] // a base instant for the test; time is offsets
    fn a_reported_hole_owes_its_repair_once_and_stays_in_flight() {
        let t0 = Instant::now();
        let mut l = SentLedger::starting_at(0);
        for id in 0..20 {
            l.on_sent(t0 + Duration::from_millis(id), SentKind::Source(id), true);
        }
        // Received 0..=12 except 5 and 11: bit i is 11 − i.
        let largest = 12u64;
        let bitmap = (0..12u64)
            .filter(|&pn| pn != 5 && pn != 11)
            .fold(0u64, |b, pn| b | 1 << (largest - 1 - pn));
        let mut owed = Vec::new();
        assert_eq!(
            l.owe_reported_losses(largest, bitmap, 3, |k| owed.push(k)),
            1
        );
        assert!(matches!(owed[..], [SentKind::Source(5)]));
        assert_eq!(l.in_flight(), 20, "nothing left flight");
        assert_eq!(l.largest_acked, None, "nothing acknowledged");
        assert_eq!(
            l.owe_reported_losses(largest, bitmap, 3, |_| {}),
            0,
            "owed once"
        );
        // 13 and 14 arrived: 11 is three below the new largest.
        let bitmap = bitmap << 2 | 0b11;
        assert_eq!(l.owe_reported_losses(14, bitmap, 3, |_| {}), 1);
        // The path's own ACK of the same packets declares both lost, owing nothing.
        let ack = Ack {
            largest_pn: 14,
            pn_bitmap: bitmap,
            ..Ack::default()
        };
        l.on_ack(
            t0 + Duration::from_millis(30),
            &ack,
            Duration::from_millis(10),
        );
        let mut again = 0;
        let scan = l.detect_lost(
            t0 + Duration::from_millis(30),
            3,
            Duration::from_secs(1),
            |_| {
                again += 1;
            },
        );
        assert_eq!(scan.map(|s| s.lost), Some(2));
        assert_eq!(again, 0, "their repairs were owed already");
        assert_eq!(l.in_flight(), 5);
    }
}
