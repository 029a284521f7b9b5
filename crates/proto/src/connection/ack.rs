//! The receive side's ACK state: which packets arrived, and when an ACK is due.

use crate::wire::{self, Ack, LateArrivals, PathAck};
use ctcp_rlnc::DecoderStatus;
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// What the next ACK reports and when it is due.
#[derive(Debug, Default)]
pub(super) struct AckState {
    pub(super) largest: Option<u64>,
    pub(super) largest_time: Option<Instant>,
    pub(super) bitmap: u64,
    /// Packets that arrived past the bitmap's reach, oldest first, until an ACK reports them.
    pub(super) late: VecDeque<u64>,
    pub(super) unacked_eliciting: u32,
    pub(super) pending: bool,
    pub(super) immediate: bool,
    pub(super) deadline: Option<Instant>,
    /// The lowest ack-eliciting packet recorded since the last ACK went out.
    pub(super) unreported_from: Option<u64>,
    /// ACKs taken before a batch of arrivals pushed unreported packets out of the bitmap's
    /// reach, oldest first, each to go out alone ahead of anything else (see
    /// [`AckState::would_drop_unreported`]).
    pub(super) owed: VecDeque<Ack>,
    /// Multipath: the packet that revealed this path's newest hole, while a faster path
    /// still owes the sender reports of this path's packet numbers
    /// ([`AckState::path_ack_due`]).
    pub(super) hole_from: Option<u64>,
    /// The largest packet number such a report last carried.
    pub(super) path_acked: Option<u64>,
}

impl AckState {
    /// Whether recording packet `pn` would leave an ack-eliciting packet that no ACK has
    /// reported yet beyond the bitmap's reach (64 below the largest). Why it matters: a
    /// receiver that reads many datagrams before it sends (the runtime drains its socket,
    /// then polls) otherwise reports only the newest 65 of them, and the sender cannot
    /// tell the rest from losses.
    pub(super) fn would_drop_unreported(&self, pn: u64) -> bool {
        self.largest.is_some_and(|l| pn > l) && self.unreported_from.is_some_and(|u| pn > u + 64)
    }

    /// Records packet `pn`. Only ack-eliciting packets make an ACK due: ACK-only packets
    /// are tracked in `largest`/`bitmap` (so the next ACK reports them) but never answered
    /// on their own, or a bulk sender would piggyback an ACK of ACKs (20–26 bytes) on
    /// most of its data packets (≈ 1.5 % of the link).
    pub(super) fn on_packet(&mut self, pn: u64, now: Instant, eliciting: bool) {
        match self.largest {
            None => {
                self.largest = Some(pn);
                self.largest_time = Some(now);
                self.bitmap = 0;
            }
            Some(l) if pn > l => {
                let shift = pn - l;
                self.bitmap = if shift > 64 {
                    0
                } else {
                    (self.bitmap << (shift - 1) << 1) | (1u64 << (shift - 1))
                };
                if shift > 1 && eliciting {
                    self.immediate = true; // a hole: tell the sender now
                    self.hole_from = Some(pn);
                }
                self.largest = Some(pn);
                self.largest_time = Some(now);
            }
            Some(l) => {
                let d = l - pn;
                if (1..=64).contains(&d) {
                    self.bitmap |= 1 << (d - 1);
                } else if d > 64 {
                    // Bounded: under a burst of late arrivals the oldest go unreported
                    // (read as lost, as all of them were before the list existed).
                    if self.late.len() >= LATE_QUEUE {
                        self.late.pop_front();
                    }
                    self.late.push_back(pn);
                }
                // A late arrival may cancel a loss declaration.
                self.immediate |= eliciting;
            }
        }
        if !eliciting {
            return;
        }
        self.unreported_from = Some(self.unreported_from.map_or(pn, |u| u.min(pn)));
        self.pending = true;
        self.unacked_eliciting += 1;
        if self.unacked_eliciting >= 2 {
            self.immediate = true;
        }
    }
}

/// Packets past the one that revealed a hole during which faster paths keep reporting this
/// path's packet numbers: the sender declares the hole lost once it lies its packet
/// threshold (3, more under measured reordering) below the largest reported, and each
/// report rides a faster path's own ACK, so the reports follow this path's arrivals.
const PATH_ACK_SPAN: u64 = 16;

impl AckState {
    /// The report of this path's packet numbers (wire path `path`) that a faster path's
    /// next ACK should carry, if one is due: a hole was seen within the last
    /// [`PATH_ACK_SPAN`] packets and packets arrived since the last report. Why: this
    /// path's own ACK takes its own return trip, and on a long path the hole's repair
    /// then waits that long (see [`wire::PathAck`]).
    pub(super) fn path_ack_due(&self, path: u8) -> Option<PathAck> {
        let largest = self.largest?;
        self.hole_from?;
        if self.path_acked.is_some_and(|r| r >= largest) {
            return None;
        }
        Some(PathAck {
            path,
            largest_pn: largest,
            pn_bitmap: self.bitmap,
        })
    }

    /// The report from [`AckState::path_ack_due`] went out.
    pub(super) fn on_path_ack_sent(&mut self) {
        self.path_acked = self.largest;
        if let (Some(from), Some(largest)) = (self.hole_from, self.largest) {
            if largest >= from + PATH_ACK_SPAN {
                self.hole_from = None;
            }
        }
    }
}

/// Late arrivals past the ACK bitmap waiting to be reported: four ACKs' worth.
const LATE_QUEUE: usize = 4 * wire::MAX_LATE;

/// ACKs taken in one batch of arrivals at most (65 packets each): past that, the oldest
/// packets of a larger batch go unreported.
pub(super) const OWED_ACKS: usize = 64;

impl AckState {
    /// The ACK that would go out at `now`, if one is pending; `status` is the decoder's.
    pub(super) fn pending(&self, now: Instant, status: DecoderStatus) -> Option<Ack> {
        if !self.pending {
            return None;
        }
        let largest = self.largest?;
        let delay = self
            .largest_time
            .map_or(Duration::ZERO, |t| now.saturating_duration_since(t));
        Some(Ack {
            next_in_order: status.next_in_order,
            deficit: status.deficit,
            highest_seen: status.highest_seen.map_or(0, |h| h + 1),
            largest_pn: largest,
            pn_bitmap: self.bitmap,
            ack_delay_us: u32::try_from(delay.as_micros()).unwrap_or(u32::MAX),
            reorder_pkts: 0,
            late: {
                let mut late = LateArrivals::default();
                for &pn in self.late.iter().take(wire::MAX_LATE) {
                    late.push(largest.saturating_sub(pn));
                }
                late
            },
        })
    }

    /// Clears the pending state an ACK from [`AckState::pending`] just reported.
    pub(super) fn on_sent(&mut self) {
        self.unreported_from = None;
        // `pending` looked at (at most) this many of the oldest.
        let reported = self.late.len().min(wire::MAX_LATE);
        self.late.drain(..reported);
        self.pending = false;
        self.immediate = false;
        self.unacked_eliciting = 0;
        self.deadline = None;
    }
}

#[cfg(test)]
mod tests {
    use super::AckState;
    use std::time::{Duration, Instant};

    #[test]
    fn arrivals_past_the_bitmap_wait_for_the_next_ack() {
        #[allow(clippy::disallowed_methods)] // a fixed base instant for the test
        let t = Instant::now();
        let mut a = AckState::default();
        a.on_packet(200, t, true);
        a.on_packet(136, t, true); // 64 behind: in the bitmap
        a.on_packet(135, t, true); // 65 behind: past it
        a.on_packet(10, t, true);
        assert_eq!(a.bitmap >> 63, 1);
        assert_eq!(a.late.iter().copied().collect::<Vec<_>>(), [135, 10]);
        assert!(a.immediate, "a late arrival is reported at once");
        for pn in 0..2 * super::LATE_QUEUE as u64 {
            a.on_packet(pn, t, true);
        }
        assert_eq!(a.late.len(), super::LATE_QUEUE, "bounded");
        assert_eq!(a.late.back(), Some(&(2 * super::LATE_QUEUE as u64 - 1)));
    }

    /// A hole makes this path's packet numbers due on a faster path, once per new
    /// arrival, for [`super::PATH_ACK_SPAN`] packets past the one that revealed it.
    #[test]
    fn a_hole_is_reported_for_a_span_of_arrivals() {
        #[allow(clippy::disallowed_methods)] // a fixed base instant for the test
        let t = Instant::now();
        let mut a = AckState::default();
        for pn in 0..10 {
            a.on_packet(pn, t, true);
        }
        assert_eq!(a.path_ack_due(0), None, "no hole, nothing to report");
        a.on_packet(11, t, true); // 10 is missing
        let r = a.path_ack_due(3).expect("a hole is due");
        assert_eq!((r.path, r.largest_pn), (3, 11));
        assert_eq!(r.pn_bitmap & 0b11, 0b10, "10 missing, 9 received");
        a.on_path_ack_sent();
        assert_eq!(a.path_ack_due(3), None, "nothing new since");
        a.on_packet(12, t, true);
        assert_eq!(a.path_ack_due(3).map(|r| r.largest_pn), Some(12));
        for pn in 13..=11 + super::PATH_ACK_SPAN {
            a.on_packet(pn, t, true);
            a.on_path_ack_sent();
        }
        assert_eq!(a.path_ack_due(3), None, "the span is over");
        // ACK-only packets never open a report.
        a.on_packet(100, t, false);
        assert_eq!(a.path_ack_due(3), None);
    }

    #[test]
    fn ack_only_packets_are_tracked_but_not_answered() {
        #[allow(clippy::disallowed_methods)] // a fixed base instant for the test
        let t = Instant::now();
        let mut a = AckState::default();
        a.on_packet(0, t, false);
        a.on_packet(2, t, false); // a hole among ACK-only packets
        assert!(
            !a.pending && !a.immediate,
            "ACK-only packets make no ACK due"
        );
        assert_eq!(a.largest, Some(2));
        a.on_packet(3, t + Duration::from_millis(1), true);
        assert!(a.pending, "an eliciting packet makes an ACK due");
        // The next ACK reports the ACK-only packets too.
        assert_eq!(a.largest, Some(3));
        assert_eq!(a.bitmap & 0b111, 0b101, "pn 2 and 0 seen, pn 1 missing");
        a.on_packet(4, t, true);
        assert!(
            a.immediate,
            "every second eliciting packet is acknowledged at once"
        );
    }
}
