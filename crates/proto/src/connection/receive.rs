//! The receive path: authenticating a data packet, feeding its chunks to the decoder and
//! the ACK machinery, and delivering decoded frames to streams.

use super::ack::OWED_ACKS;
use super::{Connection, ConnectionError, Side, State};
use crate::crypto::{open_data, ReplayWindow};
use crate::frame::{Frame, Frames};
use crate::wire::DataHeader;
use crate::wire::{Chunk, Chunks};
use std::net::SocketAddr;
use std::time::Instant;

impl Connection {
    /// Processes an authenticated-or-not data packet addressed to this session.
    pub(crate) fn handle_data(&mut self, now: Instant, from: SocketAddr, packet: &mut [u8]) {
        if matches!(self.state, State::Drained) {
            return;
        }
        let Some((i, header, plain)) = self.open_packet(now, from, packet) else {
            return;
        };
        let newest = self.paths.get(i).ack.largest.is_none_or(|l| header.pn > l);
        self.on_path_packet(now, i, from, newest);
        self.recv.last_received = now;
        self.stats.datagrams_received += 1;
        // `plain` borrows the caller's datagram, not the session: the chunks are read
        // where they were decrypted, with no copy.
        // Before this packet's symbols reach the decoder: the ACK taken must not report
        // them as decoded while its packet numbers leave this packet out.
        let ack = &self.paths.get(i).ack;
        if ack.would_drop_unreported(header.pn) && ack.owed.len() < OWED_ACKS {
            if let Some(ack) = self.pending_ack(now, i) {
                let state = &mut self.paths.get_mut(i).ack;
                state.on_sent();
                state.owed.push_back(ack);
            }
        }
        let Some(eliciting) = self.on_chunks(now, i, from, plain) else {
            return;
        };
        if matches!(self.state, State::Handshake { .. }) {
            return;
        }
        self.recv.rx_packets += 1;
        let srtt = self.paths.get(i).rtt.srtt();
        let ack = &mut self.paths.get_mut(i).ack;
        ack.on_packet(header.pn, now, eliciting);
        if ack.pending && ack.deadline.is_none() {
            let delay = self.config.max_ack_delay.min(srtt / 4);
            ack.deadline = Some(now + delay);
        }
        self.drain_decoder();
        self.apply_path(now);
        let status = self.recv.decoder.status();
        // Every packet while symbols are missing: ACKing only new holes (or only every
        // other packet) halves the ACKs under loss but slows recovery (evidence:
        // docs/experiments/code-evidence.md#ack-every-packet-under-deficit).
        if status.deficit > 0 {
            self.paths.get_mut(i).ack.immediate = true;
        }
        if let Some(h) = status.highest_seen {
            // Keeps window − 1 ids below the next new one, so that one still fits the
            // window's slots: keeping a whole window doubled the decoder's storage.
            let floor = (h + 2).saturating_sub(self.config.window as u64);
            self.recv.decoder.retire_below(floor);
        }
    }

    /// Authenticates `packet` against its path's replay window: (path index, header,
    /// plaintext). A packet on a path the peer opens creates it only once it
    /// authenticates, so forged datagrams allocate nothing.
    fn open_packet<'a>(
        &mut self,
        now: Instant,
        from: SocketAddr,
        packet: &'a mut [u8],
    ) -> Option<(usize, DataHeader, &'a [u8])> {
        let id = DataHeader::peek_path(packet).ok()?;
        let known = self.paths.index_of(id);
        let mut fresh = ReplayWindow::default();
        let key = self.keys.rx.as_ref()?;
        let replay = match known {
            Some(i) => &mut self.paths.get_mut(i).replay,
            None => &mut fresh,
        };
        let (header, plain) = match open_data(key, replay, packet) {
            Ok(o) => o,
            Err(e) => {
                tracing::trace!(conn = self.conn_id, error = %e, "dropping data packet");
                return None;
            }
        };
        let i = match known {
            Some(i) => i,
            None => {
                let i = self.path_for(now, id, from)?;
                self.paths.get_mut(i).replay = fresh;
                i
            }
        };
        Some((i, header, plain))
    }

    /// Processes a data packet's chunks; `None` if the peer closed the session. Returns
    /// whether the packet was ack-eliciting.
    fn on_chunks(
        &mut self,
        now: Instant,
        i: usize,
        from: SocketAddr,
        plain: &[u8],
    ) -> Option<bool> {
        let mut eliciting = false;
        let expected_id = self.recv.decoder.next_in_order();
        let chunks = Chunks::new(plain, self.config.symbol_size, expected_id)
            .with_datagram_base(self.dgram.expected_id()); // issue 27 hook
        for chunk in chunks {
            let Ok(chunk) = chunk else {
                tracing::debug!(
                    conn = self.conn_id,
                    "malformed chunk; rest of packet ignored"
                );
                break;
            };
            match chunk {
                Chunk::Ack(ack) => self.on_ack(now, i, &ack),
                Chunk::PathAck(report) => self.on_path_ack(now, i, &report),
                Chunk::PathChallenge(token) => {
                    eliciting = true;
                    // Echoed on this path to where it came from (the latest only).
                    self.paths.get_mut(i).validation.respond = Some((token, from));
                }
                Chunk::PathResponse(token) => self.on_path_response(now, i, token, from),
                Chunk::Source { id, payload } => {
                    eliciting = true;
                    let _ = self.recv.decoder.receive_source(id, payload);
                }
                Chunk::Repair { header, data } => {
                    eliciting = true;
                    let r = self.recv.decoder.receive_repair(&header, data);
                    self.stats.repairs_received += 1;
                    if !matches!(r, Ok(ctcp_rlnc::Received::New)) {
                        self.stats.repairs_useless += 1;
                    }
                }
                Chunk::Ping => eliciting = true,
                // Issue 27 hook: datagrams (connection/datagram.rs).
                Chunk::Datagram { id, payload } => {
                    eliciting = true;
                    self.on_datagram(id, payload);
                }
                Chunk::DatagramRepair { header, data } => {
                    eliciting = true;
                    self.on_datagram_repair(&header, data);
                }
                Chunk::Close { code, reason } => {
                    let reason = String::from_utf8_lossy(reason).into_owned();
                    self.lose(ConnectionError::PeerClosed { code, reason });
                    return None;
                }
            }
        }
        Some(eliciting)
    }

    /// Delivers every symbol the decoder releases, parsed where the decoder holds it
    /// (the frames' data is copied once, into its stream's receive buffer).
    fn drain_decoder(&mut self) {
        let Connection {
            recv,
            streams,
            config,
            events,
            hs,
            side,
            ..
        } = self;
        let mut failed = None;
        // Server: the train's copies (padded to about our datagram size) measured the
        // client's rate towards us; with the PATH frame's round trip it sizes the window
        // autotuned streams start with.
        let incoming = (*side == Side::Server)
            .then(|| crate::handshake_train::rate(hs.arrivals.report()))
            .flatten()
            .map(|(pps, _)| pps * config.max_datagram as f64);
        while let Some((_, payload)) = recv.decoder.poll_decoded() {
            let path = (*side == Side::Server).then_some(&mut hs.path_pending);
            if let Err(e) = on_symbol(payload, streams, config, events, path, incoming) {
                failed = Some(e);
                break;
            }
        }
        if let Some(e) = failed {
            self.close_with(e);
        }
    }
}

/// Applies one decoded symbol's frames; `path` is where a server keeps the PATH frame,
/// `incoming` the rate towards it that the handshake train showed (bytes per second).
fn on_symbol(
    payload: &[u8],
    streams: &mut crate::streams::Streams,
    config: &crate::TransportConfig,
    events: &mut std::collections::VecDeque<crate::Event>,
    mut path: Option<&mut Option<(u64, u64, bool)>>,
    incoming: Option<f64>,
) -> Result<(), ConnectionError> {
    for frame in Frames::new(payload) {
        let frame = frame.map_err(|_| ConnectionError::Protocol("malformed frame"))?;
        match frame {
            Frame::Path {
                rate,
                rtt_us,
                exact,
            } => {
                if let Some(p) = path.as_deref_mut() {
                    *p = Some((rate, rtt_us, exact));
                    // At once, not with the rest of the PATH frame after the packet: an
                    // OPEN in the same symbol must see it. The same bounds as there.
                    if let (Some(r), 1..=60_000_000) = (incoming, rtt_us) {
                        streams.note_incoming_path(r, std::time::Duration::from_micros(rtt_us));
                    }
                }
            }
            frame => streams.on_frame(frame, config, events)?,
        }
    }
    Ok(())
}
