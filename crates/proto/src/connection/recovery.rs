//! Loss recovery on the sending side: reading ACKs, declaring losses (RACK-style), owing
//! reactive repairs within the cap the peer's deficit sets, and the stall watch.

use super::*;

impl Connection {
    /// The stall watch: a liveness guarantee for the hole at the peer's in-order point.
    ///
    /// Why: the cap on owed repairs reads the peer's deficit against the repairs in flight
    /// at their expected arrival rate, so with hundreds in flight it cannot see one repair
    /// too few, and when it drops the repair owed for the oldest hole, nothing ever owes it
    /// again: in-order delivery stands still until the coding window fills and tail
    /// repairs span it (evidence: docs/experiments/code-evidence.md#stall-watch). So when
    /// the in-order point has not moved for [`STALL_ROUNDS`]
    /// loss-detection delays (at least [`STALL_FLOOR`]), about two lost repairs in a row,
    /// one repair is owed for that hole alone (its range ends just after it), unless the
    /// owed repairs already start with one for it, and the watch rearms. Checked as ACKs
    /// arrive; a lost stall repair is owed again like any reactive one.
    fn watch_in_order_point(&mut self, now: Instant, moved: bool) {
        let covered = self.peer_next_in_order;
        if self.stall_repair.is_some_and(|e| e <= covered) {
            self.stall_repair = None;
        }
        if self.encoder.is_empty() {
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
        let (_, delay) = self.loss_thresholds();
        // `covered` is the encoder's first id, so a non-empty encoder holds it.
        if now >= since + (delay * STALL_ROUNDS).max(STALL_FLOOR) {
            // Already owed and waiting for the window: sending it twice helps nothing.
            if self.debt.first().is_none_or(|e| e > covered + 1) {
                self.stall_repair = Some(covered + 1);
            }
            self.in_order_since = Some(now);
        }
    }

    /// Whether the busy spell is young: within [`STARTUP_RTTS`] minimum RTTs of its first
    /// source. Then lost reactive repairs get margin copies, one per two, beside their
    /// replacements (`margin_skip`). Why: without proactive repair each hole waits a
    /// round trip per lost repair, and in-order delivery waits for the longest such chain
    /// among the flight's holes, which on a long lossy path holds the delivered rate well
    /// under the link's for seconds (evidence:
    /// docs/experiments/code-evidence.md#startup-margin). The copies cost about p²/2 of the
    /// sources sent in the start-up, where the rest of a bulk transfer pays nothing.
    fn in_startup(&self, now: Instant) -> bool {
        self.busy_since
            .is_some_and(|t| now < t + self.rtt.min_rtt() * STARTUP_RTTS)
    }

    /// Whether proactive repair is configured (`proactive_repair` finite and positive).
    pub(super) fn proactive_on(&self) -> bool {
        self.config.proactive_repair.is_finite() && self.config.proactive_repair > 0.0
    }

    pub(super) fn current_repair_ratio(&self) -> f64 {
        if !self.proactive_on() {
            return 0.0; // off: repair only what the peer reports missing
        }
        let g = self.loss.gilbert();
        // Size the decode block like the window the repairs cover: small blocks need
        // proportionally more redundancy and would overshoot the wire budget.
        let k = self
            .cc
            .window()
            .clamp(16, crate::redundancy::MAX_BLOCK as u64) as u32;
        let p = self.loss.p();
        let policy = self.redundancy.repair_ratio(k, p, Some(g), self.rtt.srtt());
        // Wire budget: proactive repair stays near the expected loss (repairs are lost
        // too, hence p/(1-p)); reactive repair tops up the variance. Its share grows with
        // the RTT: a reactive repair costs a round trip of delay but is never wasted, while
        // a proactive one that lands where nothing is missing is (34–45 % of them at 5 %
        // loss when both ran at full share). On short paths the round trip is cheap, so
        // repair is almost all reactive (share × srtt / 500 ms of the expected loss); from
        // 500 ms up, proactive repair carries its configured share of the loss.
        let share = self.config.proactive_repair.min(4.0)
            * (self.rtt.srtt().as_secs_f64() / PROACTIVE_FULL_RTT).clamp(0.0, 1.0);
        let budget = if p < 0.5 {
            share * p / (1.0 - p)
        } else {
            share.min(1.0)
        };
        policy.min(budget)
    }

    pub(super) fn on_ack(&mut self, now: Instant, ack: &Ack) {
        if ack.largest_pn >= self.next_pn {
            return; // acknowledges something never sent: ignore
        }
        let mut newly_acked = 0u64;
        let prev_largest = self.largest_acked;
        let min_rtt = self.rtt.min_rtt();
        let mut late: Vec<(u64, Duration)> = Vec::new();
        // Acknowledged after a later packet: it arrived out of order, by this many
        // packets and this long.
        let late_arrival = |pn: u64, sent: Instant| {
            prev_largest.filter(|&l| pn < l).map(|prev| {
                let late_by = now.saturating_duration_since(sent).saturating_sub(min_rtt);
                (prev - pn, late_by)
            })
        };
        let mut largest_newly_acked: Option<(u64, Instant, bool)> = None;
        let mut mark = |this: &mut Self, pn: u64| {
            if pn < this.sent_base {
                // Declared lost and trimmed, yet acknowledged: it was only late.
                let found = this.recent_lost.iter().rposition(|&(n, _)| n == pn);
                if let Some((_, sent_time)) = found.and_then(|i| this.recent_lost.remove(i)) {
                    late.extend(late_arrival(pn, sent_time));
                }
                return;
            }
            let Some(p) = this.sent.get_mut((pn - this.sent_base) as usize) else {
                return;
            };
            if p.acked {
                return;
            }
            p.acked = true;
            p.delivered = true;
            late.extend(late_arrival(pn, p.time));
            if p.lost {
                // Spurious loss: it was only late. Reordering, not congestion.
                return;
            }
            if p.in_flight {
                p.in_flight = false;
                this.in_flight -= 1;
                newly_acked += 1;
            }
            if largest_newly_acked.is_none_or(|(l, _, _)| pn > l) {
                largest_newly_acked = Some((pn, p.time, p.ack_eliciting));
            }
        };
        for back in ack.late.iter() {
            if let Some(pn) = ack.largest_pn.checked_sub(back) {
                mark(self, pn);
            }
        }
        for i in (0..64u64).rev() {
            if ack.pn_bitmap & (1 << i) != 0 && ack.largest_pn > i {
                mark(self, ack.largest_pn - 1 - i);
            }
        }
        mark(self, ack.largest_pn);
        // What the ACK's range covers and it did not report is missing; below its range
        // the ACK says nothing (see `SentPacket::missed`).
        let range_start = ack
            .largest_pn
            .saturating_sub(64)
            .max(self.sent_base)
            .saturating_sub(self.sent_base) as usize;
        let range_end =
            (ack.largest_pn.saturating_sub(self.sent_base) as usize).min(self.sent.len());
        for p in self.sent.range_mut(range_start.min(range_end)..range_end) {
            p.missed |= !p.acked;
        }
        for (d, by) in late {
            self.reorder.on_late_arrival(d, by);
        }
        if self.last_round.is_none_or(|t| now >= t + self.rtt.srtt()) {
            self.last_round = Some(now);
            self.reorder.on_round();
        }
        if let Some((pn, sent_time, eliciting)) = largest_newly_acked {
            if pn == ack.largest_pn && eliciting {
                let delay = Duration::from_micros(u64::from(ack.ack_delay_us));
                self.rtt
                    .update(now, now.saturating_duration_since(sent_time), delay);
            }
            self.pto_count = 0;
        }
        self.largest_acked = Some(
            self.largest_acked
                .map_or(ack.largest_pn, |l| l.max(ack.largest_pn)),
        );

        // Symbol-level cumulative ACK: lost ACKs never read as data loss.
        let moved = ack.next_in_order > self.peer_next_in_order;
        if moved {
            self.peer_next_in_order = ack.next_in_order.min(self.encoder.next_id());
            self.encoder.retire_through(self.peer_next_in_order - 1);
        }
        self.watch_in_order_point(now, moved);
        let covered = self.peer_next_in_order;
        let ack_index = (ack.largest_pn + 1).saturating_sub(self.sent_base) as usize;
        for p in self.sent.iter_mut() {
            if p.in_flight && !p.acked {
                let obsolete = match p.kind {
                    SentKind::Source(id) => id < covered,
                    SentKind::Repair { end, .. } => end <= covered,
                    SentKind::Control => false,
                };
                if obsolete {
                    p.in_flight = false;
                    p.acked = true;
                    p.vanished = p.missed;
                    self.in_flight -= 1;
                    newly_acked += 1;
                }
            }
        }
        self.peer_deficit = ack.deficit;
        if newly_acked > 0 {
            self.cc.on_ack(now, newly_acked, self.in_flight, &self.rtt);
        }
        self.detect_lost(now);
        // Reactive repair: the receiver's deficit, minus repairs already on their way
        // (sent after the newest packet this ACK reflects), bounds what declared losses
        // may ask for. Reactive repairs in flight were sent for losses this deficit already
        // counts (each arrives with probability 1-p); proactive and tail repairs were sized
        // for the expected losses of the sources beside them (s·p), which will be declared
        // and owed on their own, so only what they carry beyond that covers the deficit.
        // Only the sources sent before the newest of them count there: those sent later lie
        // above every speculative repair's end, so no such repair was sized for them or can
        // fill their holes. Charging them too let the cap owe, after a coding-window stall,
        // narrow repairs for holes the stall's tail repairs were already filling as new
        // sources went out (evidence: docs/experiments/code-evidence.md#unseen-cap).
        let (in_flight, first_src_after) = self.sent_after(ack.largest_pn);
        let p = self.loss.p();
        let speculative = (f64::from(in_flight.speculative) * (1.0 - p)
            - f64::from(in_flight.covered_sources) * p)
            .max(0.0);
        let surplus = (f64::from(in_flight.reactive) * (1.0 - p) + speculative).floor() as u32;
        // The peer's deficit cannot count symbols it never saw (a lost tail): sources sent
        // no later than this ACK's packet that the peer has not seen are owed too.
        let unseen = first_src_after
            .unwrap_or_else(|| self.encoder.next_id())
            .saturating_sub(ack.highest_seen.max(self.peer_next_in_order));
        // Speculative repairs the peer already holds lower its deficit and are not added
        // back: the deficit is the number of further equations the peer needs. Adding them
        // back let the cap owe narrow repairs for holes the tail had already filled, which
        // arrived useless after the last byte, and in an application-limited flow made the
        // cap the raw hole count; holes whose owed repairs the cap dropped after a
        // window-full stall are the stall watch's (evidence:
        // docs/experiments/code-evidence.md#no-held-add-back).
        let cap = ack
            .deficit
            .saturating_add(u32::try_from(unseen).unwrap_or(u32::MAX));
        // Repairs in flight were already taken off the debt when sent: bound the debt by
        // what they leave uncovered, rather than subtracting them a second time.
        self.debt.settle_below(covered);
        self.debt.cap(cap.saturating_sub(surplus));
        self.margin.settle_below(covered);
        self.margin.cap(ack.deficit);
        // Safety net: the receiver lacks symbols and no repair is on its way. Not while a
        // packet this ACK should already cover is still unresolved: that hole is most
        // likely a reordered packet on its way (RACK declares it lost in time if it is
        // not), and answering it at once sent a useless repair for many reordered packets
        // (evidence: docs/experiments/code-evidence.md#safety-net-waits).
        if ack.deficit > 0
            && self.debt.is_empty()
            && in_flight.reactive + in_flight.speculative == 0
            && !self.repairs_in_flight()
            && !self.unresolved_before(ack_index)
        {
            // The deficit comes from the peer: no more than the symbols it can lack.
            let lacking = ack
                .deficit
                .min(u32::try_from(self.encoder.len()).unwrap_or(u32::MAX));
            self.debt.owe_at_least(lacking, self.encoder.next_id());
        }
        self.peer_lacking = ack
            .deficit
            .saturating_add(u32::try_from(unseen).unwrap_or(u32::MAX));
        self.owe_tail_shortfall();
        self.trim_sent();
    }

    /// In a tail (no source in flight beyond the newest acknowledged packet, and none
    /// unresolved below it), owes what the peer lacks beyond the repairs still on their
    /// way, counting each of those as arriving: a lost speculative repair owes nothing
    /// when declared, and the cap on owed repairs had already dropped the ones its tail
    /// stood in for, so when the tail's margin fell short nothing was owed until the probe
    /// timeout. Counting the repairs in flight at their expected arrivals instead owed
    /// mid-transfer on short paths (evidence:
    /// docs/experiments/code-evidence.md#owe-tail-shortfall). Run after each ACK
    /// and after losses declared by timer, when no ACK may follow (every last repair lost).
    pub(super) fn owe_tail_shortfall(&mut self) {
        if self.peer_lacking == 0 || self.encoder.is_empty() {
            return;
        }
        let Some(largest) = self.largest_acked else {
            return;
        };
        let ack_index =
            ((largest + 1).saturating_sub(self.sent_base) as usize).min(self.sent.len());
        if self.unresolved_before(ack_index) {
            return;
        }
        let (in_flight, _) = self.in_flight_from(ack_index);
        if in_flight.sources > 0 {
            return;
        }
        let on_way = in_flight.reactive + in_flight.speculative;
        let lacking = self
            .peer_lacking
            .saturating_sub(on_way)
            .min(u32::try_from(self.encoder.len()).unwrap_or(u32::MAX));
        self.debt.owe_at_least(lacking, self.encoder.next_id());
    }

    /// Whether a packet among the first `index` entries of the sent log (those an ACK
    /// should already cover) is still unacknowledged and in flight: most likely reordered,
    /// and RACK declares it lost in time if it is not.
    fn unresolved_before(&self, index: usize) -> bool {
        self.sent
            .iter()
            .take(index.min(self.sent.len()))
            .any(|p| p.in_flight && !p.acked)
    }

    /// Among packets sent after `pn`: what is in flight, and the first source symbol.
    fn sent_after(&self, pn: u64) -> (InFlightAfter, Option<SymbolId>) {
        self.in_flight_from((pn + 1).saturating_sub(self.sent_base) as usize)
    }

    /// From the `from`-th entry of the sent log on: what is in flight, and the first
    /// source symbol.
    fn in_flight_from(&self, from: usize) -> (InFlightAfter, Option<SymbolId>) {
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
                    // A margin copy in flight stands in for a replacement that is lost;
                    // it covers no hole of its own.
                    RepairOrigin::Margin => {}
                },
                SentKind::Source(id) => {
                    n.sources += u32::from(p.in_flight);
                    first.get_or_insert(id);
                }
                _ => {}
            }
        }
        (n, first)
    }

    fn repairs_in_flight(&self) -> bool {
        self.sent
            .iter()
            .any(|p| p.in_flight && matches!(p.kind, SentKind::Repair { .. }))
    }

    /// RACK-style thresholds: (packets, time after send) past which an unacknowledged
    /// packet is lost. Both grow with the measured reordering, so late is not lost.
    pub(super) fn loss_thresholds(&self) -> (u64, Duration) {
        let base = self.rtt.srtt().max(self.rtt.latest());
        let (pkts, reo) = self.reorder.loss_threshold(self.rtt.min_rtt());
        (pkts.max(PACKET_THRESHOLD), base + reo.max(base / 8))
    }

    pub(super) fn detect_lost(&mut self, now: Instant) {
        let Some(largest) = self.largest_acked else {
            return;
        };
        let (pkt_threshold, delay) = self.loss_thresholds();
        let startup = self.in_startup(now);
        let mut lost = 0u64;
        let mut latest_lost_time = None;
        let mut loss_time: Option<Instant> = None;
        let covered = self.peer_next_in_order;
        for i in 0..self.sent.len() {
            let pn = self.sent_base + i as u64;
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
                lost += 1;
                latest_lost_time = Some(p.time);
                let needed_end = match p.kind {
                    SentKind::Source(id) => (id >= covered).then_some(id + 1),
                    // A speculative repair that was lost leaves nothing owed.
                    SentKind::Repair { end, origin } => {
                        (end > covered && origin == RepairOrigin::Debt).then_some(end)
                    }
                    SentKind::Control => None,
                };
                if let Some(end) = needed_end {
                    self.debt.owe(end);
                    if startup && matches!(p.kind, SentKind::Repair { .. }) {
                        // One copy per two lost reactive repairs (the first, third, ...
                        // owe one), each reaching the highest end among the losses since
                        // the last copy, so it can stand in for whichever of their
                        // replacements is lost.
                        self.margin_end = self.margin_end.max(Some(end));
                        if !self.margin_skip {
                            if let Some(e) = self.margin_end.take() {
                                self.margin.owe(e);
                            }
                        }
                        self.margin_skip = !self.margin_skip;
                    }
                }
            } else {
                let t = p.time + delay;
                loss_time = Some(loss_time.map_or(t, |l: Instant| l.min(t)));
            }
        }
        self.loss_time = loss_time;
        if let Some(t) = latest_lost_time {
            self.stats.lost += lost;
            self.cc.on_congestion_event(now, t, lost, &self.rtt);
        }
    }

    /// Drops settled packets from the front of the sent log and feeds the loss estimator
    /// their outcomes, in transmission order (the Gilbert counts need the order). A packet
    /// the cumulative ACK made obsolete counts as lost when an ACK showed it missing (the
    /// peer decoded around it) and is left out when its fate is unknown; counting
    /// only individually acknowledged and declared-lost packets read 20 % loss as 12–18 %,
    /// because losses that proactive repair covered before detection never got an outcome.
    pub(super) fn trim_sent(&mut self) {
        while let Some(p) = self.sent.front() {
            if p.in_flight {
                break;
            }
            if p.lost && !p.acked {
                if self.recent_lost.len() == RECENT_LOST {
                    self.recent_lost.pop_front();
                }
                self.recent_lost.push_back((self.sent_base, p.time));
            }
            if p.ack_eliciting && (p.delivered || p.lost || p.vanished) {
                self.stats.packets_resolved += 1;
                self.stats.packets_resolved_lost += u64::from(!p.delivered);
            }
            if p.ack_eliciting {
                let congestion = self
                    .cc
                    .congestion_span()
                    .is_some_and(|(from, to)| p.time >= from && p.time <= to);
                // The round the controller backed off for stays out of the random-loss
                // estimate (see `Controller::congestion_span`), deliveries and losses
                // alike: dropping only its losses would bias the estimate low.
                if !congestion && (p.delivered || p.lost || p.vanished) {
                    self.loss.on_outcome(p.delivered);
                }
            }
            self.sent.pop_front();
            self.sent_base += 1;
        }
    }
}
