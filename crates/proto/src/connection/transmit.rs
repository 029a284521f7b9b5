//! The send path: choosing what the next datagram carries (handshake copies, repairs owed
//! or speculative, new source symbols, ACKs) and sealing it.

use super::*;

impl Connection {
    /// Writes the next datagram into `buf` (cleared first), if one is due.
    #[must_use]
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
        buf.clear();
        if let Some(accept) = self.accept_pending.pop_front() {
            buf.extend_from_slice(&accept);
            return Some(self.transmit(buf));
        }
        match &mut self.state {
            State::Drained => return None,
            State::Handshake {
                initiate,
                next_send,
                attempts,
                ..
            } => {
                if now < *next_send {
                    return None;
                }
                let train = u32::from(handshake_train::train_len(self.config.handshake_train));
                if *attempts < train {
                    // A train copy: numbered, padded to a full datagram, sent back to back
                    // with the others (see `handshake_train`).
                    let mut copy = initiate.clone();
                    copy.train = (*attempts + 1) as u8;
                    copy.len = self
                        .config
                        .max_datagram
                        .clamp(wire::INITIATE_LEN, wire::MAX_HANDSHAKE_LEN);
                    self.psk.sign_initiate(&mut copy);
                    copy.emit(buf);
                    if let Some(p) = self.train_probe.as_mut() {
                        p.sent.push(now);
                        p.len = copy.len;
                    }
                } else {
                    initiate.emit(buf);
                }
                *attempts += 1;
                *next_send = now + handshake_wait(*attempts, train);
                return Some(self.transmit(buf));
            }
            State::Closing { remaining_sends } => {
                if *remaining_sends == 0 {
                    self.state = State::Drained;
                    return None;
                }
                *remaining_sends -= 1;
                let (code, reason) = self.close_frame.clone().unwrap_or((0, String::new()));
                self.begin_packet(buf);
                wire::emit_close(buf, code, &reason);
                return Some(self.finish_packet(now, buf, SentKind::Control, false));
            }
            State::Established => {}
        }

        if let Some(ack) = self.ack.owed.pop_front() {
            // Taken while a batch of arrivals was read (`AckState::owed`): alone, at once.
            self.begin_packet(buf);
            ack.emit(buf);
            return Some(self.finish_packet(now, buf, SentKind::Control, false));
        }
        let cwnd_open = self.in_flight < self.cc.window();
        self.pacer.set_gain(self.cc.pacing_gain(self.rtt.srtt()));
        let release = self.pacer.delay(
            now,
            self.cc.window(),
            self.rtt.srtt(),
            self.config.max_datagram,
        );
        let paced_ok = release.is_none_or(|t| t <= now);
        self.pacer_wakeup = if cwnd_open && !paced_ok {
            release
        } else {
            None
        };
        let probe = self.pto_count > 0 && !self.debt.is_empty();
        let can_send = (cwnd_open && paced_ok) || probe;

        let have_unacked = !self.encoder.is_empty();
        if can_send && have_unacked && self.stall_repair.is_some() {
            return Some(self.send_repair(now, buf, RepairOrigin::Debt));
        }
        if can_send && have_unacked && (!self.debt.is_empty() || self.repair_credit >= 1.0) {
            let origin = if !self.debt.is_empty() {
                RepairOrigin::Debt
            } else {
                RepairOrigin::Credit
            };
            return Some(self.send_repair(now, buf, origin));
        }
        // Margin entries all end above the peer's in-order point (= the encoder's first
        // id): on_ack settles them as it retires symbols, and detect_lost owes none below.
        if can_send && have_unacked && !self.margin.is_empty() {
            return Some(self.send_repair(now, buf, RepairOrigin::Margin));
        }
        if can_send && !self.encoder.is_full() && self.build_payload() {
            return Some(self.send_source(now, buf));
        }
        if can_send && have_unacked {
            // Nothing new to send (the application paused or finished, or flow control or
            // the coding window holds it): the link would idle until the ACKs come back,
            // so cover the flight's likely losses now instead of a round trip later.
            let budget = match self.tail_repairs {
                Some(left) => left,
                None => self.tail_budget(now),
            };
            self.tail_repairs = Some(budget.saturating_sub(1));
            if budget > 0 {
                return Some(self.send_repair(now, buf, RepairOrigin::Tail));
            }
        }
        if self.ping_pending {
            self.ping_pending = false;
            self.begin_packet(buf);
            self.emit_ack_if_pending(now, buf);
            wire::emit_ping(buf);
            return Some(self.finish_packet(now, buf, SentKind::Control, true));
        }
        if self.ack.pending && self.ack.immediate {
            self.begin_packet(buf);
            self.emit_ack_if_pending(now, buf);
            return Some(self.finish_packet(now, buf, SentKind::Control, false));
        }
        None
    }

    fn transmit(&mut self, buf: &[u8]) -> Transmit {
        self.stats.datagrams_sent += 1;
        self.stats.bytes_sent += buf.len() as u64;
        Transmit {
            destination: self.remote,
            size: buf.len(),
        }
    }

    fn begin_packet(&mut self, buf: &mut Vec<u8>) {
        DataHeader {
            conn_id: self.conn_id,
            pn: self.next_pn,
        }
        .emit(buf);
    }

    /// Appends the pending ACK if it fits in a packet that will hold `body` more bytes of
    /// chunks: full-size repairs leave no room for one (the ACK then rides the next source
    /// packet, or goes alone when nothing else is to be sent).
    fn emit_ack_if_fits(&mut self, now: Instant, buf: &mut Vec<u8>, body: usize) {
        let Some(ack) = self.pending_ack(now) else {
            return;
        };
        if buf.len() + ack.encoded_len() + body + TAG_LEN <= self.config.max_datagram {
            self.emit_ack(&ack, buf);
        }
    }

    /// The ACK that would go out at `now`, if one is pending.
    pub(super) fn pending_ack(&self, now: Instant) -> Option<Ack> {
        if !self.ack.pending {
            return None;
        }
        let largest = self.ack.largest?;
        let status = self.decoder.status();
        let delay = self
            .ack
            .largest_time
            .map_or(Duration::ZERO, |t| now.saturating_duration_since(t));
        Some(Ack {
            next_in_order: status.next_in_order,
            deficit: status.deficit,
            highest_seen: status.highest_seen.map_or(0, |h| h + 1),
            largest_pn: largest,
            pn_bitmap: self.ack.bitmap,
            ack_delay_us: u32::try_from(delay.as_micros()).unwrap_or(u32::MAX),
            reorder_pkts: 0,
            late: {
                let mut late = LateArrivals::default();
                for &pn in self.ack.late.iter().take(wire::MAX_LATE) {
                    late.push(largest.saturating_sub(pn));
                }
                late
            },
        })
    }

    fn emit_ack_if_pending(&mut self, now: Instant, buf: &mut Vec<u8>) {
        if let Some(ack) = self.pending_ack(now) {
            self.emit_ack(&ack, buf);
        }
    }

    /// Appends `ack` (from [`Connection::pending_ack`]) and clears what was pending.
    fn emit_ack(&mut self, ack: &Ack, buf: &mut Vec<u8>) {
        ack.emit(buf);
        self.ack_sent();
    }

    /// Clears the pending state an ACK from [`Connection::pending_ack`] just reported.
    pub(super) fn ack_sent(&mut self) {
        self.ack.unreported_from = None;
        // `pending_ack` looked at (at most) this many of the oldest.
        let reported = self.ack.late.len().min(wire::MAX_LATE);
        self.ack.late.drain(..reported);
        self.ack.pending = false;
        self.ack.immediate = false;
        self.ack.unacked_eliciting = 0;
        self.ack.deadline = None;
    }

    fn finish_packet(
        &mut self,
        now: Instant,
        buf: &mut Vec<u8>,
        kind: SentKind,
        eliciting: bool,
    ) -> Transmit {
        let pn = self.next_pn;
        self.next_pn += 1;
        if let Some(key) = &self.tx_key {
            key.seal(pn, buf, DATA_HEADER_LEN);
        }
        let in_flight = eliciting;
        self.sent.push_back(SentPacket {
            time: now,
            kind,
            ack_eliciting: eliciting,
            in_flight,
            acked: false,
            lost: false,
            delivered: false,
            vanished: false,
            missed: false,
        });
        if in_flight {
            self.in_flight += 1;
            self.cc.on_sent(now, 1, self.in_flight);
            self.last_ack_eliciting_sent = Some(now);
        }
        self.pacer.on_sent(now, buf.len());
        self.last_sent = Some(now);
        self.trim_sent();
        self.transmit(buf)
    }

    fn send_repair(&mut self, now: Instant, buf: &mut Vec<u8>, origin: RepairOrigin) -> Transmit {
        let first = self.encoder.first_id();
        let next = self.encoder.next_id();
        // A reactive repair ends just after the hole it was owed for (always without
        // proactive repair; with it, only below NARROW_REACTIVE_BELOW); proactive, tail and
        // probe repairs, and reactive ones with no known end, span everything unacknowledged.
        let stall = origin == RepairOrigin::Debt && self.stall_repair.is_some();
        let owed = match origin {
            RepairOrigin::Debt if stall => self.stall_repair.take(),
            RepairOrigin::Debt => self.debt.take(),
            RepairOrigin::Margin => self.margin.take(),
            RepairOrigin::Credit | RepairOrigin::Tail => None,
        };
        let end = match owed {
            Some(e)
                if e > first
                    && (stall
                        || !self.proactive_on()
                        || self.rtt.srtt() < NARROW_REACTIVE_BELOW) =>
            {
                e.min(next)
            }
            _ => next,
        };
        let count = (end - first).min(u64::from(u16::MAX)) as u16;
        self.begin_packet(buf);
        let header = match self.encoder.repair(first, count, &mut self.repair_buf) {
            Ok(h) => h,
            Err(e) => {
                tracing::debug!(conn = self.conn_id, error = %e, "repair generation failed");
                self.debt.clear();
                self.margin.clear();
                self.margin_skip = false;
                self.margin_end = None;
                self.stall_repair = None;
                self.repair_credit = 0.0;
                self.emit_ack_if_pending(now, buf);
                return self.finish_packet(now, buf, SentKind::Control, false);
            }
        };
        let body = wire::repair_chunk_len(&header, self.repair_buf.len());
        self.emit_ack_if_fits(now, buf, body);
        wire::emit_repair(buf, &header, &self.repair_buf);
        match origin {
            // A new round of reactive repairs: the next idle spell sizes its tail anew (the
            // stall watch's one repair is not a round).
            RepairOrigin::Debt if !stall => self.tail_repairs = None,
            RepairOrigin::Debt => {}
            RepairOrigin::Credit => self.repair_credit -= 1.0,
            RepairOrigin::Tail | RepairOrigin::Margin => {}
        }
        self.stats.repair_origin[origin as usize] += 1;
        if stall {
            self.stats.stall_repairs += 1;
        }
        self.stats.repair_sent += 1;
        self.stats.repair_bytes_sent += self.repair_buf.len() as u64;
        let end = first + u64::from(count);
        self.finish_packet(now, buf, SentKind::Repair { end, origin }, true)
    }

    fn send_source(&mut self, now: Instant, buf: &mut Vec<u8>) -> Transmit {
        if self.encoder.is_empty() {
            self.busy_since = Some(now);
            self.margin_skip = false;
            self.margin_end = None;
        }
        let payload = std::mem::take(&mut self.payload);
        let id = match self.encoder.push(&payload) {
            Ok(id) => id,
            Err(e) => {
                // Cannot happen: we checked is_full and bounded the payload by the symbol size.
                tracing::error!(conn = self.conn_id, error = %e, "encoder refused a source symbol");
                self.payload = payload;
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
        self.payload = payload;
        self.tail_repairs = None;
        self.repair_credit += self.current_repair_ratio();
        // Bound the credit so a long idle period does not bank a burst of repairs.
        self.repair_credit = self.repair_credit.min(8.0);
        self.finish_packet(now, buf, SentKind::Source(id), true)
    }

    /// Fills `self.payload` with frames for one source symbol. Returns false if there is nothing to send.
    fn build_payload(&mut self) -> bool {
        // A symbol holds `S − 2` bytes of frames; the packet must also fit the datagram
        // limit with the ACK that will ride in front of it.
        let ack = self
            .pending_ack(self.ack.largest_time.unwrap_or(self.created))
            .map_or(0, |a| a.encoded_len_bound());
        let cap = (self.config.symbol_size - 2).min(
            self.config
                .max_datagram
                .saturating_sub(DATA_HEADER_LEN + TAG_LEN + wire::SOURCE_LAST_HEADER_LEN + ack),
        );
        self.payload.clear();
        // Control frames first: they unblock the peer.
        while let Some(f) = self.control.front() {
            let frame = f.as_frame();
            if self.payload.len() + frame.encoded_len() > cap {
                break;
            }
            frame.emit(&mut self.payload);
            self.control.pop_front();
        }
        // Then stream data, round-robin from the cursor. The frame that ends the payload
        // goes without its length: each frame is sized against that shorter header, so a
        // symbol fills exactly, and one left without room for its length ends the payload.
        // A frame that had room but turned out to be the last one (the data ran out) loses
        // its length afterwards: `open_tail` is where it starts.
        let ids: Vec<StreamId> = self
            .streams
            .range(self.rr_cursor..)
            .chain(self.streams.range(..self.rr_cursor))
            .filter(|(_, s)| s.send.has_frame())
            .map(|(id, _)| *id)
            .collect();
        let mut open_tail = None;
        for id in ids {
            let room = cap.saturating_sub(self.payload.len());
            let session_credit = self.peer_max_data.saturating_sub(self.data_sent) as usize;
            let Some(s) = self.streams.get_mut(&id) else {
                continue;
            };
            let header = crate::frame::stream_last_header_len(id, s.send.offset);
            if room <= header {
                break;
            }
            let max = (room - header).min(session_credit);
            if max == 0 && !(s.send.fin_requested && s.send.buffered() == 0) {
                continue;
            }
            let (offset, fin) = s.send.take(max, &mut self.scratch);
            self.data_sent += self.scratch.len() as u64;
            self.send_buffered = self.send_buffered.saturating_sub(self.scratch.len());
            let frame = Frame::Stream {
                id,
                offset,
                fin,
                data: &self.scratch,
            };
            let ends_payload = frame.encoded_len() > room;
            if ends_payload {
                frame.emit_last(&mut self.payload);
                open_tail = None;
            } else {
                open_tail = Some(self.payload.len());
                frame.emit(&mut self.payload);
            }
            if s.write_blocked && s.send.is_writable() {
                s.write_blocked = false;
                self.events.push_back(Event::StreamWritable(id));
            }
            self.rr_cursor = id + 1;
            self.maybe_forget(id);
            if ends_payload {
                break;
            }
        }
        if let Some(start) = open_tail {
            // Nothing followed that frame (only stream frames come after control frames).
            let dropped = crate::frame::drop_final_stream_length(&mut self.payload, start);
            debug_assert!(dropped, "the payload's final frame is a length-form STREAM");
        }
        if self.budget_blocked && self.send_buffered < self.config.session_send_buffer {
            self.budget_blocked = false;
            for (&id, s) in self.streams.iter_mut() {
                if s.write_blocked && s.send.is_writable() {
                    s.write_blocked = false;
                    self.events.push_back(Event::StreamWritable(id));
                }
            }
        }
        !self.payload.is_empty()
    }
}
