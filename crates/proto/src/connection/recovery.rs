//! Loss recovery on the sending side: reading ACKs through the sent ledger, declaring
//! losses (RACK-style), and telling the repair scheduler what they owe.

use super::Connection;
use crate::repair::{AckSummary, RatioInputs, TailLossSamples, Unacked};
use crate::wire::Ack;
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

    /// Repairs per source symbol the loss-rate credit earns now.
    pub(super) fn current_repair_ratio(&self) -> f64 {
        self.repair.repair_ratio(&RatioInputs {
            window: self.cc.window(),
            p: self.loss.p(),
            gilbert: self.loss.gilbert(),
            srtt: self.rtt.srtt(),
        })
    }

    /// What the loss rate for tail repairs is estimated from.
    pub(super) fn tail_loss_samples(&self) -> TailLossSamples {
        TailLossSamples {
            own_p: self.loss.p(),
            own_samples: self.loss.samples(),
            train_out: self.hs.loss_out,
            train_in: self.hs.loss_in,
            rx_packets: self.recv.rx_packets,
            rx_largest: self.recv.ack.largest,
        }
    }

    /// An ACK from the peer: the ledger settles what it reports, the estimators and the
    /// controller learn from it, and the repair scheduler owes what it shows missing.
    pub(super) fn on_ack(&mut self, now: Instant, ack: &Ack) {
        if ack.largest_pn >= self.sent.next_pn() {
            return; // acknowledges something never sent: ignore
        }
        let acked = self.sent.on_ack(now, ack, self.rtt.min_rtt());
        for (d, by) in acked.late {
            self.reorder.on_late_arrival(d, by);
        }
        if self
            .timers
            .last_round
            .is_none_or(|t| now >= t + self.rtt.srtt())
        {
            self.timers.last_round = Some(now);
            self.reorder.on_round();
        }
        if let Some((pn, sent_time, eliciting)) = acked.largest {
            if pn == ack.largest_pn && eliciting {
                let delay = Duration::from_micros(u64::from(ack.ack_delay_us));
                self.rtt
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
        let (_, delay) = self.loss_thresholds();
        let empty = self.encoder.is_empty();
        self.repair
            .watch_in_order_point(now, moved.is_some(), empty, delay);
        let ack_index = self.sent.index_after(ack.largest_pn);
        let newly_acked =
            acked.newly_acked + self.sent.settle_covered(self.repair.peer_next_in_order());
        if newly_acked > 0 {
            self.cc
                .on_ack(now, newly_acked, self.sent.in_flight(), &self.rtt);
        }
        self.detect_lost(now);
        let (after, first_source_after) = self.sent.sent_after(ack.largest_pn);
        self.repair.on_ack(&AckSummary {
            deficit: ack.deficit,
            highest_seen: ack.highest_seen,
            after,
            first_source_after,
            quiet: !self.sent.repairs_in_flight() && !self.sent.unresolved_before(ack_index),
            p: self.loss.p(),
            unacked: self.unacked(),
        });
        self.owe_tail_shortfall();
        self.trim_sent();
    }

    /// Owes what the peer lacks beyond the repairs on their way, if the flight is a tail
    /// (see `RepairScheduler::owe_tail_shortfall`).
    pub(super) fn owe_tail_shortfall(&mut self) {
        let unacked = self.unacked();
        let sent = &mut self.sent;
        self.repair
            .owe_tail_shortfall(unacked, || sent.tail_flight());
    }

    /// RACK-style thresholds: (packets, time after send) past which an unacknowledged
    /// packet is lost. Both grow with the measured reordering, so late is not lost.
    pub(super) fn loss_thresholds(&self) -> (u64, Duration) {
        let base = self.rtt.srtt().max(self.rtt.latest());
        let (pkts, reo) = self.reorder.loss_threshold(self.rtt.min_rtt());
        (pkts.max(PACKET_THRESHOLD), base + reo.max(base / 8))
    }

    /// Declares losses in the sent ledger, owes the repairs they call for and tells the
    /// controller.
    pub(super) fn detect_lost(&mut self, now: Instant) {
        let (pkt_threshold, delay) = self.loss_thresholds();
        let min_rtt = self.rtt.min_rtt();
        let repair = &mut self.repair;
        let Some(scan) = self.sent.detect_lost(now, pkt_threshold, delay, |kind| {
            repair.on_lost(now, min_rtt, kind);
        }) else {
            return;
        };
        self.timers.loss_time = scan.loss_time;
        if let Some(t) = scan.latest_lost_time {
            self.stats.lost += scan.lost;
            self.cc.on_congestion_event(now, t, scan.lost, &self.rtt);
        }
    }

    /// Drops settled packets from the front of the sent ledger and feeds the loss
    /// estimator their outcomes, in transmission order. A packet the cumulative ACK made
    /// obsolete counts as lost when an ACK showed it missing (the peer decoded around it)
    /// and is left out when its fate is unknown; counting only individually acknowledged
    /// and declared-lost packets read 20 % loss as 12–18 %, because losses that proactive
    /// repair covered before detection never got an outcome.
    pub(super) fn trim_sent(&mut self) {
        let (cc, loss, stats) = (&self.cc, &mut self.loss, &mut self.stats);
        self.sent.trim(|p| {
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
