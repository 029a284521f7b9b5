//! The send path: choosing what the next datagram carries (handshake copies, repairs owed
//! or speculative, new source symbols, ACKs) and sealing it.

use super::handshake::handshake_wait;
use super::{Connection, State, Transmit};
use crate::handshake_train;
use crate::repair::{tail_budget, RepairOrigin, RepairPlan};
use crate::sent::SentKind;
use crate::wire::{self, Ack, DataHeader, DATA_HEADER_LEN, TAG_LEN};
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
            return Some(self.transmit(buf));
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
                self.begin_packet(buf);
                wire::emit_close(buf, code, &reason);
                Some(self.finish_packet(now, buf, SentKind::Control, false))
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
        Some(self.transmit(buf))
    }

    /// What an established session sends next: an owed ACK, a repair, a source symbol, a
    /// tail repair, a PING or a due ACK, in that order.
    fn poll_established(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
        if let Some(ack) = self.recv.ack.owed.pop_front() {
            // Taken while a batch of arrivals was read (`AckState::owed`): alone, at once.
            self.begin_packet(buf);
            ack.emit(buf);
            return Some(self.finish_packet(now, buf, SentKind::Control, false));
        }
        let cwnd_open = self.sent.in_flight() < self.cc.window();
        self.pacer.set_gain(self.cc.pacing_gain(self.rtt.srtt()));
        let release = self.pacer.delay(
            now,
            self.cc.window(),
            self.rtt.srtt(),
            self.config.max_datagram,
        );
        let paced_ok = release.is_none_or(|t| t <= now);
        self.timers.pacer_wakeup = if cwnd_open && !paced_ok {
            release
        } else {
            None
        };
        // Issue 27 hook: datagrams go first within the window (connection/datagram.rs).
        if let Some(t) = self.poll_datagram_transmit(now, buf, cwnd_open && paced_ok) {
            return Some(t);
        }
        let probe = self.timers.pto_count > 0 && self.repair.owes();
        let can_send = (cwnd_open && paced_ok) || probe;
        let have_unacked = !self.encoder.is_empty();
        if can_send && have_unacked {
            if let Some(plan) = self.repair.next_repair(self.unacked(), self.rtt.srtt()) {
                return Some(self.send_repair(now, buf, plan));
            }
        }
        if can_send && !self.encoder.is_full() && self.build_payload() {
            return Some(self.send_source(now, buf));
        }
        if can_send && have_unacked {
            let unacked = self.unacked();
            let samples = self.tail_loss_samples();
            let (_, delay) = self.loss_thresholds();
            let (sent, last_received) = (&self.sent, self.recv.last_received);
            let plan = self.repair.tail_repair(unacked, || {
                let p = samples.loss();
                if p <= 0.0 {
                    return 0;
                }
                tail_budget(p, &sent.tail_census(now, delay, last_received))
            });
            if let Some(plan) = plan {
                return Some(self.send_repair(now, buf, plan));
            }
        }
        if self.timers.ping_pending {
            self.timers.ping_pending = false;
            self.begin_packet(buf);
            self.emit_ack_if_pending(now, buf);
            wire::emit_ping(buf);
            return Some(self.finish_packet(now, buf, SentKind::Control, true));
        }
        if self.recv.ack.pending && self.recv.ack.immediate {
            self.begin_packet(buf);
            self.emit_ack_if_pending(now, buf);
            return Some(self.finish_packet(now, buf, SentKind::Control, false));
        }
        None
    }

    fn transmit(&mut self, buf: &[u8]) -> Transmit {
        let size = buf.len() - self.bufs.start;
        self.stats.datagrams_sent += 1;
        self.stats.bytes_sent += size as u64;
        Transmit {
            destination: self.remote,
            size,
        }
    }

    pub(super) fn begin_packet(&mut self, buf: &mut Vec<u8>) {
        DataHeader {
            conn_id: self.conn_id,
            pn: self.sent.next_pn(),
        }
        .emit(buf);
    }

    /// Appends the pending ACK if it fits in a packet that will hold `body` more bytes of
    /// chunks: full-size repairs leave no room for one (the ACK then rides the next source
    /// packet, or goes alone when nothing else is to be sent).
    pub(super) fn emit_ack_if_fits(&mut self, now: Instant, buf: &mut Vec<u8>, body: usize) {
        let Some(ack) = self.pending_ack(now) else {
            return;
        };
        let len = buf.len() - self.bufs.start;
        if len + ack.encoded_len() + body + TAG_LEN <= self.config.max_datagram {
            self.emit_ack(&ack, buf);
        }
    }

    /// The ACK that would go out at `now`, if one is pending.
    pub(super) fn pending_ack(&self, now: Instant) -> Option<Ack> {
        self.recv.ack.pending(now, self.recv.decoder.status())
    }

    fn emit_ack_if_pending(&mut self, now: Instant, buf: &mut Vec<u8>) {
        if let Some(ack) = self.pending_ack(now) {
            self.emit_ack(&ack, buf);
        }
    }

    /// Appends `ack` (from [`Connection::pending_ack`]) and clears what was pending.
    fn emit_ack(&mut self, ack: &Ack, buf: &mut Vec<u8>) {
        ack.emit(buf);
        self.recv.ack.on_sent();
    }

    pub(super) fn finish_packet(
        &mut self,
        now: Instant,
        buf: &mut Vec<u8>,
        kind: SentKind,
        eliciting: bool,
    ) -> Transmit {
        let pn = self.sent.next_pn();
        if let Some(key) = &self.keys.tx {
            key.seal_at(pn, buf, self.bufs.start, DATA_HEADER_LEN);
        }
        let in_flight = self.sent.on_sent(now, kind, eliciting);
        if eliciting {
            self.cc.on_sent(now, 1, in_flight);
            self.timers.last_ack_eliciting_sent = Some(now);
        }
        self.pacer.on_sent(now, buf.len() - self.bufs.start);
        self.timers.last_sent = Some(now);
        self.trim_sent();
        self.transmit(buf)
    }

    fn send_repair(&mut self, now: Instant, buf: &mut Vec<u8>, plan: RepairPlan) -> Transmit {
        let first = self.encoder.first_id();
        let count = (plan.end - first).min(u64::from(u16::MAX)) as u16;
        self.begin_packet(buf);
        let header = match self.encoder.repair(first, count, &mut self.bufs.repair) {
            Ok(h) => h,
            Err(e) => {
                tracing::debug!(conn = self.conn_id, error = %e, "repair generation failed");
                self.repair.abandon();
                self.emit_ack_if_pending(now, buf);
                return self.finish_packet(now, buf, SentKind::Control, false);
            }
        };
        let body = wire::repair_chunk_len(&header, self.bufs.repair.len());
        self.emit_ack_if_fits(now, buf, body);
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
        self.finish_packet(now, buf, SentKind::Repair { end, origin }, true)
    }

    fn send_source(&mut self, now: Instant, buf: &mut Vec<u8>) -> Transmit {
        if self.encoder.is_empty() {
            self.repair.on_busy(now);
        }
        let payload = std::mem::take(&mut self.bufs.payload);
        let id = match self.encoder.push(&payload) {
            Ok(id) => id,
            Err(e) => {
                // Cannot happen: we checked is_full and bounded the payload by the symbol size.
                tracing::error!(conn = self.conn_id, error = %e, "encoder refused a source symbol");
                self.bufs.payload = payload;
                self.begin_packet(buf);
                return self.finish_packet(now, buf, SentKind::Control, false);
            }
        };
        self.begin_packet(buf);
        self.emit_ack_if_pending(now, buf);
        // The SOURCE chunk is the packet's last, so it goes without its length.
        wire::emit_source_last(buf, id, &payload);
        self.stats.source_sent += 1;
        self.stats.source_bytes_sent += payload.len() as u64;
        self.bufs.payload = payload;
        let ratio = self.current_repair_ratio();
        self.repair.on_source_sent(ratio);
        self.finish_packet(now, buf, SentKind::Source(id), true)
    }

    /// Fills `self.bufs.payload` with frames for one source symbol. Returns false if there
    /// is nothing to send.
    fn build_payload(&mut self) -> bool {
        // A symbol holds `S − 2` bytes of frames; the packet must also fit the datagram
        // limit with the ACK that will ride in front of it.
        let ack = self
            .pending_ack(self.recv.ack.largest_time.unwrap_or(self.created))
            .map_or(0, |a| a.encoded_len_bound());
        let cap = (self.config.symbol_size - 2).min(
            self.config
                .max_datagram
                .saturating_sub(DATA_HEADER_LEN + TAG_LEN + wire::SOURCE_LAST_HEADER_LEN + ack),
        );
        self.streams
            .fill_payload(&mut self.bufs.payload, cap, &self.config, &mut self.events)
    }
}
