//! The send path: choosing what the next datagram carries (handshake copies, repairs owed
//! or speculative, new source symbols, ACKs) and sealing it.

use super::handshake::handshake_wait;
use super::{Connection, State, Transmit};
use crate::handshake_train;
use crate::repair::{tail_budget, RepairOrigin, RepairPlan};
use crate::sent::SentKind;
use crate::wire::{self, Ack, DataHeader, DATA_HEADER_LEN, TAG_LEN};
use std::net::SocketAddr;
use std::time::Instant;

impl Connection {
    /// Writes the next datagram into `buf` (cleared first), if one is due.
    #[must_use]
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
        buf.clear();
        self.poll_transmit_append(now, buf)
    }

    /// Appends the next datagram to `buf`, behind what it holds (a GSO batch being
    /// built), if one is due; the [`Transmit`]'s size is that datagram's.
    pub(crate) fn poll_transmit_append(
        &mut self,
        now: Instant,
        buf: &mut Vec<u8>,
    ) -> Option<Transmit> {
        self.bufs.start = buf.len();
        if let Some(accept) = self.hs.accept_pending.pop_front() {
            buf.extend_from_slice(&accept);
            return Some(self.transmit(buf, self.remote(), 0));
        }
        match &mut self.state {
            State::Drained => None,
            State::Handshake { .. } => self.poll_initiate(now, buf),
            State::Closing {
                remaining_sends,
                code,
                reason,
            } => {
                if *remaining_sends == 0 {
                    self.state = State::Drained;
                    return None;
                }
                *remaining_sends -= 1;
                let (code, reason) = (*code, reason.clone());
                let lead = self.paths.lead();
                self.begin_packet(buf, lead);
                wire::emit_close(buf, code, &reason);
                Some(self.finish_packet(now, buf, lead, SentKind::Control, false))
            }
            State::Established => self.poll_established(now, buf),
        }
    }

    /// The client's next INITIATE copy, if one is due: the train first, then the retries.
    fn poll_initiate(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
        let State::Handshake {
            initiate,
            next_send,
            attempts,
            ..
        } = &mut self.state
        else {
            return None;
        };
        if now < *next_send {
            return None;
        }
        let train = u32::from(handshake_train::train_len(self.config.handshake_train));
        if *attempts < train {
            // A train copy: numbered, padded to a full datagram, sent back to back with
            // the others (see `handshake_train`).
            let mut copy = initiate.clone();
            copy.train = (*attempts + 1) as u8;
            copy.len = self
                .config
                .max_datagram
                .clamp(wire::INITIATE_LEN, wire::MAX_HANDSHAKE_LEN);
            self.psk.sign_initiate(&mut copy);
            copy.emit(buf);
            if let Some(p) = self.hs.probe.as_mut() {
                p.sent.push(now);
                p.len = copy.len;
            }
        } else {
            initiate.emit(buf);
        }
        *attempts += 1;
        *next_send = now + handshake_wait(*attempts, train);
        Some(self.transmit(buf, self.remote(), 0))
    }

    /// What an established session sends next: first each path's control packets (owed
    /// ACKs, path validation, probes), then data on the paths that carry it, earliest
    /// expected arrival first, then ACKs of paths that carry none.
    fn poll_established(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
        for i in 0..self.paths.len() {
            if let Some(t) = self.poll_path_control(now, buf, i) {
                return Some(t);
            }
        }
        let order = self.paths.data_order(now);
        for (n, &i) in order.as_slice().iter().enumerate() {
            if let Some(t) = self.poll_path_data(now, buf, i, n == 0) {
                return Some(t);
            }
        }
        for i in 0..self.paths.len() {
            let ack = &self.paths.get(i).ack;
            if !order.as_slice().contains(&i) && ack.pending && ack.immediate {
                self.begin_packet(buf, i);
                self.emit_ack_if_pending(now, buf, i);
                return Some(self.finish_packet(now, buf, i, SentKind::Control, false));
            }
        }
        self.poll_path_reports(now, buf)
    }

    /// A report of a slower path's packet numbers alone on the fastest path that carries
    /// it, when that path has no ACK of its own to carry it: nothing arrives there (the
    /// last packets of a transfer all went over the slow path), and a hole among the slow
    /// path's last packets then waited for the slow path's own ACK, a long one-way delay.
    fn poll_path_reports(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
        let n = self.paths.len();
        if n < 2 {
            return None;
        }
        let k = (0..n).find(|&k| {
            let q = self.paths.get(k);
            q.ack.path_ack_due(q.id).is_some()
        })?;
        let i = (0..n)
            .filter(|&i| self.paths.reports_for(i, k))
            .min_by_key(|&i| self.paths.get(i).rtt.srtt())
            .filter(|&i| !self.paths.get(i).ack.pending)?;
        self.begin_packet(buf, i);
        self.emit_path_acks(buf, i, 0);
        Some(self.finish_packet(now, buf, i, SentKind::Control, false))
    }

    /// What path index `i` sends next: an owed ACK, a repair, a source symbol, a tail
    /// repair, a PING or a due ACK, in that order. Only the path where a packet arrives
    /// soonest (`soonest`, even while its window holds it back) takes an owed repair:
    /// on another it arrives later than it would after that wait, and a hole's repair
    /// sent over a long path holds in-order delivery for that path's one-way delay.
    fn poll_path_data(
        &mut self,
        now: Instant,
        buf: &mut Vec<u8>,
        i: usize,
        soonest: bool,
    ) -> Option<Transmit> {
        let p = self.paths.get_mut(i);
        let cwnd_open = p.window_open();
        p.pacer.set_gain(p.cc.pacing_gain(p.rtt.srtt()));
        let release = p
            .pacer
            .delay(now, p.cc.window(), p.rtt.srtt(), self.config.max_datagram);
        let paced_ok = release.is_none_or(|t| t <= now);
        p.timers.pacer_wakeup = if cwnd_open && !paced_ok {
            release
        } else {
            None
        };
        // Issue 27 hook: datagrams go first within the window (connection/datagram.rs).
        if let Some(t) = self.poll_datagram_transmit(now, buf, i, cwnd_open && paced_ok) {
            return Some(t);
        }
        let probe = self.timers.pto_count > 0 && self.repair.owes();
        let can_send = (cwnd_open && paced_ok) || probe;
        let have_unacked = !self.encoder.is_empty();
        let repair_here = soonest || !self.repair.owes_reactive();
        if can_send && have_unacked {
            let srtt = self.paths.get(i).rtt.srtt();
            if let Some(plan) = repair_here
                .then(|| self.repair.next_repair(self.unacked(), srtt))
                .flatten()
            {
                return Some(self.send_repair(now, buf, i, plan));
            }
            if let Some((id, warm_up)) = self.paths.take_copy(i, self.encoder.first_id(), now) {
                return Some(self.send_copy(now, buf, i, id, warm_up));
            }
        }
        if can_send && !self.encoder.is_full() {
            let was_empty = self.encoder.is_empty();
            if let Some(id) = self.build_source(i) {
                return Some(self.send_source(now, buf, i, id, was_empty));
            }
        }
        if can_send && have_unacked {
            if let Some(t) = self.poll_tail_repair(now, buf, i) {
                return Some(t);
            }
        }
        if self.timers.ping_pending {
            self.timers.ping_pending = false;
            self.begin_packet(buf, i);
            self.emit_ack_if_pending(now, buf, i);
            wire::emit_ping(buf);
            return Some(self.finish_packet(now, buf, i, SentKind::Control, true));
        }
        let ack = &self.paths.get(i).ack;
        if ack.pending && ack.immediate {
            self.begin_packet(buf, i);
            self.emit_ack_if_pending(now, buf, i);
            return Some(self.finish_packet(now, buf, i, SentKind::Control, false));
        }
        None
    }

    /// A tail repair on path index `i`, if the tail budget asks for one.
    fn poll_tail_repair(&mut self, now: Instant, buf: &mut Vec<u8>, i: usize) -> Option<Transmit> {
        let unacked = self.unacked();
        let samples = self.tail_loss_samples(i);
        let (_, delay) = self.loss_thresholds(i);
        let (sent, last_received) = (&self.paths.get(i).sent, self.recv.last_received);
        let priority = self.config.repair_priority;
        let plan = self.repair.tail_repair(unacked, || {
            let p = samples.loss();
            if p <= 0.0 {
                return 0;
            }
            tail_budget(p, &sent.tail_census(now, delay, last_received), priority)
        })?;
        Some(self.send_repair(now, buf, i, plan))
    }

    fn transmit(&mut self, buf: &[u8], destination: SocketAddr, path: u8) -> Transmit {
        let size = buf.len() - self.bufs.start;
        self.stats.datagrams_sent += 1;
        self.stats.bytes_sent += size as u64;
        Transmit {
            destination,
            size,
            path,
        }
    }

    /// Writes the header of the next packet on path index `i`.
    pub(super) fn begin_packet(&mut self, buf: &mut Vec<u8>, i: usize) {
        let p = self.paths.get(i);
        DataHeader {
            conn_id: self.conn_id,
            path: p.id,
            pn: p.sent.next_pn(),
        }
        .emit(buf);
    }

    /// Appends the pending ACK if it fits in a packet that will hold `body` more bytes of
    /// chunks: full-size repairs leave no room for one (the ACK then rides the next source
    /// packet, or goes alone when nothing else is to be sent).
    pub(super) fn emit_ack_if_fits(
        &mut self,
        now: Instant,
        buf: &mut Vec<u8>,
        i: usize,
        body: usize,
    ) {
        let Some(ack) = self.pending_ack(now, i) else {
            return;
        };
        let len = buf.len() - self.bufs.start;
        if len + ack.encoded_len() + body + TAG_LEN <= self.config.max_datagram {
            self.emit_ack(&ack, buf, i, body);
        }
    }

    /// The ACK of path index `i` that would go out at `now`, if one is pending.
    pub(super) fn pending_ack(&self, now: Instant, i: usize) -> Option<Ack> {
        self.paths
            .get(i)
            .ack
            .pending(now, self.recv.decoder.status())
    }

    /// Appends the pending ACK, if any, in a packet that holds at most a PING more.
    pub(super) fn emit_ack_if_pending(&mut self, now: Instant, buf: &mut Vec<u8>, i: usize) {
        if let Some(ack) = self.pending_ack(now, i) {
            self.emit_ack(&ack, buf, i, 1);
        }
    }

    /// Appends `ack` (from [`Connection::pending_ack`]) and clears what was pending, then
    /// the reports of slower paths' packet numbers this path carries (see
    /// [`Connection::path_acks_len`]) that fit in front of `body` more bytes.
    fn emit_ack(&mut self, ack: &Ack, buf: &mut Vec<u8>, i: usize, body: usize) {
        ack.emit(buf);
        self.paths.get_mut(i).ack.on_sent();
        self.emit_path_acks(buf, i, body);
    }

    /// Appends the reports of slower paths' packet numbers path index `i` carries that
    /// fit in front of `body` more bytes.
    fn emit_path_acks(&mut self, buf: &mut Vec<u8>, i: usize, body: usize) {
        if self.paths.len() < 2 {
            return;
        }
        for k in 0..self.paths.len() {
            if !self.paths.reports_for(i, k) {
                continue;
            }
            let q = self.paths.get(k);
            let Some(report) = q.ack.path_ack_due(q.id) else {
                continue;
            };
            let len = buf.len() - self.bufs.start;
            if len + report.encoded_len() + body + TAG_LEN <= self.config.max_datagram {
                report.emit(buf);
                self.paths.get_mut(k).ack.on_path_ack_sent();
            }
        }
    }

    /// Bytes of the reports of slower paths' packet numbers that path index `i`'s next
    /// ACK carries (multipath: a hole on a long path reaches the sender over a shorter
    /// one; see `wire::PathAck`). Zero with one path.
    fn path_acks_len(&self, i: usize) -> usize {
        if self.paths.len() < 2 {
            return 0;
        }
        (0..self.paths.len())
            .filter(|&k| self.paths.reports_for(i, k))
            .filter_map(|k| {
                let q = self.paths.get(k);
                q.ack.path_ack_due(q.id)
            })
            .map(|r| r.encoded_len())
            .sum()
    }

    /// Seals the packet being written for path index `i`, records it in the path's
    /// ledger, controller and pacer, and hands it to the path's address.
    pub(super) fn finish_packet(
        &mut self,
        now: Instant,
        buf: &mut Vec<u8>,
        i: usize,
        kind: SentKind,
        eliciting: bool,
    ) -> Transmit {
        let to = self.paths.get(i).remote;
        self.finish_packet_to(now, buf, i, kind, eliciting, to)
    }

    /// [`Connection::finish_packet`] to `to` (path validation answers where it was asked).
    pub(super) fn finish_packet_to(
        &mut self,
        now: Instant,
        buf: &mut Vec<u8>,
        i: usize,
        kind: SentKind,
        eliciting: bool,
        to: SocketAddr,
    ) -> Transmit {
        let p = self.paths.get_mut(i);
        let path = p.id;
        let header = DataHeader {
            conn_id: self.conn_id,
            path,
            pn: p.sent.next_pn(),
        };
        if let Some(key) = &self.keys.tx {
            key.seal_at(header.nonce_pn(), buf, self.bufs.start, DATA_HEADER_LEN);
        }
        let in_flight = p.sent.on_sent(now, kind, eliciting);
        if eliciting {
            p.cc.on_sent(now, 1, in_flight);
            p.on_eliciting_sent(now);
        }
        let len = buf.len() - self.bufs.start;
        p.pacer.on_sent(now, len);
        p.bytes_sent += len as u64;
        // Probes of a dead or standby path do not restart the session's probe timer: it
        // guards the data on the paths that carry it.
        if eliciting && !self.paths.probed(i) {
            self.timers.last_ack_eliciting_sent = Some(now);
        }
        self.timers.last_sent = Some(now);
        self.trim_sent(i);
        self.transmit(buf, to, path)
    }

    fn send_repair(
        &mut self,
        now: Instant,
        buf: &mut Vec<u8>,
        i: usize,
        plan: RepairPlan,
    ) -> Transmit {
        let first = self.encoder.first_id();
        let count = (plan.end - first).min(u64::from(u16::MAX)) as u16;
        self.begin_packet(buf, i);
        let header = match self.encoder.repair(first, count, &mut self.bufs.repair) {
            Ok(h) => h,
            Err(e) => {
                tracing::debug!(conn = self.conn_id, error = %e, "repair generation failed");
                self.repair.abandon();
                self.emit_ack_if_pending(now, buf, i);
                return self.finish_packet(now, buf, i, SentKind::Control, false);
            }
        };
        let body = wire::repair_chunk_len(&header, self.bufs.repair.len());
        self.emit_ack_if_fits(now, buf, i, body);
        wire::emit_repair(buf, &header, &self.bufs.repair);
        self.repair.on_repair_sent(&plan);
        self.stats.repair_origin[plan.origin as usize] += 1;
        if plan.stall {
            self.stats.stall_repairs += 1;
        }
        self.stats.repair_sent += 1;
        self.stats.repair_bytes_sent += self.bufs.repair.len() as u64;
        let end = first + u64::from(count);
        let origin: RepairOrigin = plan.origin;
        self.finish_packet(now, buf, i, SentKind::Repair { end, origin }, true)
    }

    /// A coded copy of source symbol `id` alone on path index `i` (the redundant policy,
    /// or a warming path's source): a one-symbol repair, which decodes that symbol if its
    /// first copy is lost or late. A warm-up copy (`warm_up`) stands in for an original
    /// still a long one-way delay away, so its loss owes a repair as a lost source would.
    fn send_copy(
        &mut self,
        now: Instant,
        buf: &mut Vec<u8>,
        i: usize,
        id: u64,
        warm_up: bool,
    ) -> Transmit {
        self.begin_packet(buf, i);
        let Ok(header) = self.encoder.repair(id, 1, &mut self.bufs.repair) else {
            self.emit_ack_if_pending(now, buf, i);
            return self.finish_packet(now, buf, i, SentKind::Control, false);
        };
        let body = wire::repair_chunk_len(&header, self.bufs.repair.len());
        self.emit_ack_if_fits(now, buf, i, body);
        wire::emit_repair(buf, &header, &self.bufs.repair);
        self.stats.repair_sent += 1;
        self.stats.repair_bytes_sent += self.bufs.repair.len() as u64;
        let kind = if warm_up {
            SentKind::Repair {
                end: id + 1,
                origin: RepairOrigin::Copy,
            }
        } else {
            // A redundant copy: not a repair the scheduler owes or counts; its loss owes
            // nothing.
            SentKind::Control
        };
        self.finish_packet(now, buf, i, kind, true)
    }

    /// Sends source symbol `id`, just built on path index `i` (`was_empty`: the encoder
    /// held nothing before it).
    fn send_source(
        &mut self,
        now: Instant,
        buf: &mut Vec<u8>,
        i: usize,
        id: u64,
        was_empty: bool,
    ) -> Transmit {
        if was_empty {
            self.repair.on_busy(now);
        }
        let len = self.encoder.source(id).map_or(0, <[u8]>::len);
        self.begin_packet(buf, i);
        if let Some(ack) = self.pending_ack(now, i) {
            // `build_source` left room for it and the reports it carries.
            let body = wire::SOURCE_LAST_HEADER_LEN + len;
            self.emit_ack(&ack, buf, i, body);
        }
        // The SOURCE chunk is the packet's last, so it goes without its length. The
        // payload is copied from the coding window into the datagram: the window's copy
        // is the one repairs are made of.
        let payload = self.encoder.source(id).unwrap_or_default();
        wire::emit_source_last(buf, id, payload);
        self.stats.source_sent += 1;
        self.stats.source_bytes_sent += len as u64;
        let ratio = self.current_repair_ratio(i);
        self.repair.on_source_sent(ratio);
        self.paths.queue_copies(i, id, now);
        self.finish_packet(now, buf, i, SentKind::Source(id), true)
    }

    /// Builds the next source symbol's frames straight into the encoder's window and
    /// returns its id, or `None` if there is nothing to send (or the window is full).
    fn build_source(&mut self, i: usize) -> Option<u64> {
        // A symbol holds `S − 2` bytes of frames; the packet must also fit the datagram
        // limit with the ACK that will ride in front of it.
        let at = self.paths.get(i).ack.largest_time.unwrap_or(self.created);
        let ack = self
            .pending_ack(at, i)
            .map_or(0, |a| a.encoded_len_bound() + self.path_acks_len(i));
        let cap = (self.config.symbol_size - 2).min(
            self.config
                .max_datagram
                .saturating_sub(DATA_HEADER_LEN + TAG_LEN + wire::SOURCE_LAST_HEADER_LEN + ack),
        );
        self.streams.set_send_rate(self.paths.get(i).pacer.rate());
        let (streams, config, events) = (&mut self.streams, &self.config, &mut self.events);
        match self
            .encoder
            .push_with(|area| streams.fill_payload(area, cap, config, events))
        {
            Ok(id) => id,
            Err(e) => {
                // Cannot happen: the caller checked is_full, and the payload is bounded by
                // the area it was written into.
                tracing::error!(conn = self.conn_id, error = %e, "encoder refused a source symbol");
                None
            }
        }
    }
}
