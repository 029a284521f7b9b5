//! The receive path: authenticating a data packet, feeding its chunks to the decoder and
//! the ACK machinery, and delivering decoded frames to streams.

use super::*;

impl Connection {
    /// Processes an authenticated-or-not data packet addressed to this session.
    pub(crate) fn handle_data(&mut self, now: Instant, from: SocketAddr, packet: &mut [u8]) {
        if matches!(self.state, State::Drained) {
            return;
        }
        let Some(key) = self.rx_key.as_ref() else {
            return;
        };
        let (header, plain) = match open_data(key, &mut self.replay, packet) {
            Ok(opened) => opened,
            Err(e) => {
                tracing::trace!(conn = self.conn_id, error = %e, "dropping data packet");
                return;
            }
        };
        let newest = self.ack.largest.is_none_or(|l| header.pn > l);
        if from != self.remote && newest {
            tracing::debug!(conn = self.conn_id, old = %self.remote, new = %from, "peer address changed");
            self.remote = from;
        }
        self.last_received = now;
        self.stats.datagrams_received += 1;
        // Copy out: chunk processing borrows self mutably.
        let plain = plain.to_vec();
        // Before this packet's symbols reach the decoder: the ACK taken must not report
        // them as decoded while its packet numbers leave this packet out.
        if self.ack.would_drop_unreported(header.pn) && self.ack.owed.len() < OWED_ACKS {
            if let Some(ack) = self.pending_ack(now) {
                self.ack_sent();
                self.ack.owed.push_back(ack);
            }
        }
        let mut eliciting = false;
        let expected_id = self.decoder.next_in_order();
        for chunk in Chunks::new(&plain, self.config.symbol_size, expected_id) {
            let Ok(chunk) = chunk else {
                tracing::debug!(
                    conn = self.conn_id,
                    "malformed chunk; rest of packet ignored"
                );
                break;
            };
            match chunk {
                Chunk::Ack(ack) => self.on_ack(now, &ack),
                Chunk::Source { id, payload } => {
                    eliciting = true;
                    let _ = self.decoder.receive_source(id, payload);
                }
                Chunk::Repair { header, data } => {
                    eliciting = true;
                    let r = self.decoder.receive_repair(&header, data);
                    self.stats.repairs_received += 1;
                    if !matches!(r, Ok(ctcp_rlnc::Received::New)) {
                        self.stats.repairs_useless += 1;
                    }
                }
                Chunk::Ping => eliciting = true,
                Chunk::Close { code, reason } => {
                    let reason = String::from_utf8_lossy(reason).into_owned();
                    self.lose(ConnectionError::PeerClosed { code, reason });
                    return;
                }
            }
        }
        if matches!(self.state, State::Handshake { .. }) {
            return;
        }
        self.rx_packets += 1;
        self.ack.on_packet(header.pn, now, eliciting);
        if self.ack.pending && self.ack.deadline.is_none() {
            let delay = self.config.max_ack_delay.min(self.rtt.srtt() / 4);
            self.ack.deadline = Some(now + delay);
        }
        self.drain_decoder();
        self.apply_path(now);
        let status = self.decoder.status();
        // Every packet while symbols are missing: ACKing only new holes (or only every
        // other packet) halves the ACKs under loss but slows recovery (evidence:
        // docs/experiments/code-evidence.md#ack-every-packet-under-deficit).
        if status.deficit > 0 {
            self.ack.immediate = true;
        }
        if let Some(h) = status.highest_seen {
            let floor = (h + 1).saturating_sub(self.config.window as u64);
            self.decoder.retire_below(floor);
        }
    }

    fn drain_decoder(&mut self) {
        while let Some((_, payload)) = self.decoder.poll_decoded() {
            let payload = payload.to_vec();
            if let Err(e) = self.on_symbol(&payload) {
                self.close_with(e);
                return;
            }
        }
    }

    fn on_symbol(&mut self, payload: &[u8]) -> Result<(), ConnectionError> {
        for frame in Frames::new(payload) {
            let frame = frame.map_err(|_| ConnectionError::Protocol("malformed frame"))?;
            match frame {
                Frame::Open { id, target } => {
                    if self.peer_stream(id)? {
                        self.events.push_back(Event::StreamOpened { id, target });
                    }
                }
                Frame::OpenResult { id, code } => {
                    if self.streams.contains_key(&id) {
                        self.events.push_back(Event::OpenResult { id, code });
                    }
                }
                Frame::Stream {
                    id,
                    offset,
                    fin,
                    data,
                } => {
                    if self.is_peer_initiated(id) && !self.peer_stream(id)? {
                        continue;
                    }
                    let Some(s) = self.streams.get_mut(&id) else {
                        continue;
                    };
                    let new = s.recv.insert(offset, data, fin).map_err(|e| match e {
                        StreamError::FlowControl => {
                            ConnectionError::Protocol("stream flow control")
                        }
                        StreamError::FinalSize => ConnectionError::Protocol("final size"),
                    })?;
                    self.data_received += new as u64;
                    if self.data_received > self.local_max_data {
                        return Err(ConnectionError::Protocol("session flow control"));
                    }
                    if s.recv.is_readable() && !s.read_notified {
                        s.read_notified = true;
                        self.events.push_back(Event::StreamReadable(id));
                    }
                }
                Frame::Reset { id, code } => {
                    if let Some(s) = self.streams.get_mut(&id) {
                        s.recv.reset = Some(code);
                        s.send.reset = true;
                        s.read_notified = true;
                        self.events.push_back(Event::StreamReadable(id));
                    }
                }
                Frame::MaxStreamData { id, max } => {
                    if let Some(s) = self.streams.get_mut(&id) {
                        s.send.max_data = s.send.max_data.max(max);
                    }
                }
                Frame::MaxData { max } => self.peer_max_data = self.peer_max_data.max(max),
                Frame::Path {
                    rate,
                    rtt_us,
                    exact,
                } => {
                    if self.side == Side::Server {
                        self.path_pending = Some((rate, rtt_us, exact));
                    }
                }
            }
        }
        Ok(())
    }

    fn is_peer_initiated(&self, id: StreamId) -> bool {
        let peer_parity = match self.side {
            Side::Client => 1,
            Side::Server => 0,
        };
        id & 1 == peer_parity
    }

    /// Makes sure a peer-initiated stream exists; false if it is closed and forgotten.
    fn peer_stream(&mut self, id: StreamId) -> Result<bool, ConnectionError> {
        if !self.is_peer_initiated(id) {
            return Ok(self.streams.contains_key(&id));
        }
        if self.streams.contains_key(&id) {
            return Ok(true);
        }
        if self.highest_peer_stream.is_some_and(|h| id <= h) {
            return Ok(false);
        }
        self.highest_peer_stream = Some(id);
        if self.streams.len() >= self.config.max_streams {
            if self.stream_limit_logged {
                tracing::debug!(conn = self.conn_id, id, "stream limit: refusing stream");
            } else {
                self.stream_limit_logged = true;
                tracing::warn!(
                    conn = self.conn_id,
                    limit = self.config.max_streams,
                    "peer opened more streams than max_streams allows; refusing the excess \
                     (logged once per session)"
                );
            }
            self.control.push_back(OwnedFrame::Reset {
                id,
                code: RESET_REFUSED,
            });
            return Ok(false);
        }
        self.streams.insert(id, self.new_stream());
        Ok(true)
    }
}
