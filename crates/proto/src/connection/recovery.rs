//! Loss recovery on the sending side: reading ACKs through the sent ledger, declaring
//! losses (RACK-style), and telling the repair scheduler what they owe.

use super::Connection;
use crate::repair::{AckSummary, RatioInputs, TailLossSamples, Unacked};
use crate::sent::InFlightAfter;
use crate::wire::{Ack, PathAck};
use std::time::{Duration, Instant};

/// Packet-number threshold for declaring loss when no reordering has been measured.
const PACKET_THRESHOLD: u64 = 3;

impl Connection {
    /// The encoder's unacknowledged symbols.
    pub(super) fn unacked(&self) -> Unacked {
        Unacked {
            first: self.encoder.first_id(),
            next: self.encoder.next_id(),
        }
    }

    /// Repairs per source symbol the loss-rate credit earns now on path index `i`.
    pub(super) fn current_repair_ratio(&self, i: usize) -> f64 {
        let p = self.paths.get(i);
        self.repair.repair_ratio(&RatioInputs {
            window: p.cc.window(),
            p: p.loss.p(),
            gilbert: p.loss.gilbert(),
            srtt: p.rtt.srtt(),
        })
    }

    /// What the loss rate for tail repairs on path index `i` is estimated from.
    pub(super) fn tail_loss_samples(&self, i: usize) -> TailLossSamples {
        let p = self.paths.get(i);
        TailLossSamples {
            own_p: p.loss.p(),
            own_samples: p.loss.samples(),
            train_out: self.hs.loss_out,
            train_in: self.hs.loss_in,
            rx_packets: self.recv.rx_packets,
            rx_largest: p.ack.largest,
        }
    }

    /// An ACK from the peer for path index `i` (it came on that path): the path's ledger
    /// settles what it reports, the path's estimators and controller learn from it, and
    /// the repair scheduler owes what it shows missing.
    pub(super) fn on_ack(&mut self, now: Instant, i: usize, ack: &Ack) {
        let p = self.paths.get_mut(i);
        if ack.largest_pn >= p.sent.next_pn() {
            return; // acknowledges something never sent: ignore
        }
        // An ACK a newer one overtook on the way (the return path reorders) shows the
        // peer's decoder as it was: its deficit counts holes since filled or already owed
        // for, so the repair scheduler does not act on it (each such deficit owed a batch
        // of useless repairs on a jittery path).
        let stale = p.sent.largest_acked().is_some_and(|l| ack.largest_pn < l);
        let acked = p.sent.on_ack(now, ack, p.rtt.min_rtt());
        for (d, by) in acked.late {
            p.reorder.on_late_arrival(d, by);
        }
        if p.timers.last_round.is_none_or(|t| now >= t + p.rtt.srtt()) {
            p.timers.last_round = Some(now);
            p.reorder.on_round();
        }
        if let Some((pn, sent_time, eliciting)) = acked.largest {
            if pn == ack.largest_pn && eliciting {
                let delay = Duration::from_micros(u64::from(ack.ack_delay_us));
                p.rtt
                    .update(now, now.saturating_duration_since(sent_time), delay);
            }
            self.timers.pto_count = 0;
        }
        // Symbol-level cumulative ACK: lost ACKs never read as data loss.
        let moved = self
            .repair
            .on_in_order(ack.next_in_order, self.encoder.next_id());
        if let Some(covered) = moved {
            self.encoder.retire_through(covered - 1);
        }
        let (_, delay) = self.loss_thresholds(i);
        let empty = self.encoder.is_empty();
        // A dead path's flight may hold holes no ACK will report.
        let died = self.paths.any_dead();
        self.repair
            .watch_in_order_point(now, moved.is_some(), empty, delay, died);
        let covered = self.repair.peer_next_in_order();
        let ack_index = self.paths.get(i).sent.index_after(ack.largest_pn);
        self.settle_covered(now, i, acked.newly_acked, ack.next_in_order, covered);
        self.lose_dead_paths_hole(now, i, covered);
        self.detect_lost(now, i);
        if !stale {
            let summary = self.ack_summary(i, ack, ack_index);
            self.repair.on_ack(&summary);
        }
        self.owe_tail_shortfall();
        self.trim_sent(i);
    }

    /// What the repair scheduler reads from an ACK on path index `i`: the peer's deficit
    /// against what every live path still has on its way (`ack_index`: the ledger entries
    /// the ACK should cover).
    fn ack_summary(&mut self, i: usize, ack: &Ack, ack_index: usize) -> AckSummary {
        let p = self.paths.get_mut(i);
        let (mut after, mut first_source_after) = p.sent.sent_after(ack.largest_pn);
        let unresolved = p.sent.unresolved_before(ack_index);
        let mut repairs_in_flight = p.sent.repairs_in_flight();
        let (id, loss_p) = (p.id, p.loss.p());
        // The other paths' flights are on their way too: a repair there covers this
        // ACK's deficit as well (one coding window spans the paths). Not a dead path's:
        // its repairs cannot be counted on, and its sources are either settled as the
        // in-order point passes them or found lost when it reaches them.
        for q in self
            .paths
            .iter_mut()
            .filter(|q| q.id != id && !q.liveness.dead)
        {
            let (f, first) = q.sent.unacked_flight();
            after.add(&f);
            first_source_after = match (first_source_after, first) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            repairs_in_flight |= q.sent.repairs_in_flight();
        }
        AckSummary {
            deficit: ack.deficit,
            highest_seen: ack.highest_seen,
            after,
            first_source_after,
            quiet: !repairs_in_flight && !unresolved,
            p: loss_p,
            unacked: self.unacked(),
            multipath: self.paths.len() > 1,
        }
    }

    /// A report of another path's packet numbers that rode path index `carrier` (see
    /// `wire::PathAck`): that path's RACK packet rule runs on it with that path's
    /// threshold, and what it shows lost owes its repair now, so a hole on a long path is
    /// repaired a short path's round trip after it showed rather than the long path's.
    /// Nothing else changes: the path's own ACKs still acknowledge, sample its RTT, clock
    /// its controller and declare the loss for its controller and estimators
    /// (`SentLedger::owe_reported_losses`). A report of the carrier itself, of an unknown
    /// path or of packets never sent is ignored.
    pub(super) fn on_path_ack(&mut self, now: Instant, carrier: usize, report: &PathAck) {
        let Some(k) = self.paths.index_of(report.path).filter(|&k| k != carrier) else {
            return;
        };
        if report.largest_pn >= self.paths.get(k).sent.next_pn() {
            return;
        }
        let (pkt_threshold, _) = self.loss_thresholds(k);
        let p = self.paths.get_mut(k);
        let min_rtt = p.rtt.min_rtt();
        let repair = &mut self.repair;
        let owed = p.sent.owe_reported_losses(
            report.largest_pn,
            report.pn_bitmap,
            pkt_threshold,
            |kind| repair.on_lost(now, min_rtt, kind),
        );
        self.stats.reported_losses += owed;
    }

    /// Settles what the peer's in-order point made obsolete, after an ACK on path index
    /// `i` that acknowledged `newly_acked` packets and reported `reported` (the session's
    /// point is `covered`, the highest any ACK reported). Path `i`'s controller learns of
    /// both at once.
    ///
    /// With one path everything below `covered` is settled. With several, path `i`
    /// settles only what its own ACK's point covers, and the other paths only if they
    /// are dead: a faster path's ACKs report the point a long path's packets passed a
    /// long one-way delay before that path's own ACKs arrive, and settled then, those
    /// packets left its flight early (its controller clocked by another path) and its own
    /// ACK of them found nothing to take an RTT sample from, so its RTT estimate froze
    /// at a queue-free value and its congestion gate stopped seeing its queue. A dead
    /// path's flight is settled by any path's ACK (its own will not come).
    fn settle_covered(
        &mut self,
        now: Instant,
        i: usize,
        newly_acked: u64,
        reported: u64,
        covered: u64,
    ) {
        let multipath = self.paths.len() > 1;
        let own = if multipath {
            reported.min(covered)
        } else {
            covered
        };
        for (j, q) in self.paths.iter_mut().enumerate() {
            let mut n = 0;
            if j == i {
                n = newly_acked + q.sent.settle_covered(own);
            } else if q.liveness.dead {
                n = q.sent.settle_covered(covered);
            }
            if n > 0 {
                q.cc.on_ack(now, n, q.sent.in_flight(), &q.rtt);
            }
        }
    }

    /// Owes what the peer lacks beyond the repairs on their way, if the flight is a tail
    /// (see `RepairScheduler::owe_tail_shortfall`).
    pub(super) fn owe_tail_shortfall(&mut self) {
        let unacked = self.unacked();
        let paths = &mut self.paths;
        self.repair.owe_tail_shortfall(unacked, || {
            // A tail only if it is one on every path.
            let mut total = InFlightAfter::default();
            for p in paths.iter_mut() {
                total.add(&p.sent.tail_flight()?);
            }
            Some(total)
        });
    }

    /// RACK-style thresholds: (packets, time after send) past which an unacknowledged
    /// packet is lost. Both grow with the measured reordering, so late is not lost.
    pub(super) fn loss_thresholds(&self, i: usize) -> (u64, Duration) {
        let p = self.paths.get(i);
        let base = p.rtt.srtt().max(p.rtt.latest());
        let (pkts, reo) = p.reorder.loss_threshold(p.rtt.min_rtt());
        (pkts.max(PACKET_THRESHOLD), base + reo.max(base / 8))
    }

    /// Declares losses in path index `i`'s ledger, owes the repairs they call for and
    /// tells the path's controller.
    pub(super) fn detect_lost(&mut self, now: Instant, i: usize) {
        let (pkt_threshold, delay) = self.loss_thresholds(i);
        let p = self.paths.get_mut(i);
        let min_rtt = p.rtt.min_rtt();
        let repair = &mut self.repair;
        let Some(scan) = p.sent.detect_lost(now, pkt_threshold, delay, |kind| {
            repair.on_lost(now, min_rtt, kind);
        }) else {
            return;
        };
        p.timers.loss_time = scan.loss_time;
        if let Some(t) = scan.latest_lost_time {
            self.stats.lost += scan.lost;
            p.cc.on_congestion_event(now, t, scan.lost, &p.rtt);
        }
    }

    /// Drops settled packets from the front of the sent ledger and feeds the loss
    /// estimator their outcomes, in transmission order. A packet the cumulative ACK made
    /// obsolete counts as lost when an ACK showed it missing (the peer decoded around it)
    /// and is left out when its fate is unknown; counting only individually acknowledged
    /// and declared-lost packets under-read the loss rate, because losses that proactive
    /// repair covered before detection never got an outcome.
    pub(super) fn trim_sent(&mut self, i: usize) {
        let path = self.paths.get_mut(i);
        let (cc, loss, stats) = (&path.cc, &mut path.loss, &mut self.stats);
        path.sent.trim(|p| {
            let resolved = p.delivered || p.lost || p.vanished;
            if p.ack_eliciting && resolved {
                stats.packets_resolved += 1;
                stats.packets_resolved_lost += u64::from(!p.delivered);
            }
            if p.ack_eliciting {
                let congestion = cc
                    .congestion_span()
                    .is_some_and(|(from, to)| p.time >= from && p.time <= to);
                // The round the controller backed off for stays out of the random-loss
                // estimate (see `Controller::congestion_span`), deliveries and losses
                // alike: dropping only its losses would bias the estimate low.
                if !congestion && resolved {
                    loss.on_outcome(p.delivered);
                }
            }
        });
    }
}
