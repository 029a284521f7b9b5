//! The session's side of datagrams (issue 27; the state is `crate::datagram`): the
//! application API, the packets that carry them, and the chunks that arrive.

use super::{Connection, Event, State, Transmit};
use crate::datagram::{policy, DatagramError, DatagramStats, Datagrams, Next, Protection};
use crate::sent::SentKind;
use crate::wire::{self, DATAGRAM_HEADER_LEN, DATA_HEADER_LEN, TAG_LEN};
use ctcp_rlnc::{RepairHeader, SymbolId};
use std::time::{Duration, Instant};

impl Connection {
    /// Largest datagram [`Connection::send_datagram`] takes, or `None` if the session has
    /// no datagrams (this end or the peer does not take them, or not established yet).
    pub fn max_datagram_size(&self) -> Option<usize> {
        if !self.config.datagrams || !self.is_established() {
            return None;
        }
        Some(
            (self.config.symbol_size - 2).min(
                self.config
                    .max_datagram
                    .saturating_sub(DATA_HEADER_LEN + TAG_LEN + DATAGRAM_HEADER_LEN),
            ),
        )
    }

    /// Queues an unreliable datagram for the peer: sent ahead of stream data as the
    /// congestion window allows, protected by repairs within the deadline
    /// (`TransportConfig::datagram_deadline`), never retransmitted. Beyond
    /// `TransportConfig::datagram_queue` queued datagrams the oldest is dropped.
    ///
    /// # Errors
    /// [`DatagramError::Disabled`] if the session has no datagrams,
    /// [`DatagramError::NotConnected`] before the handshake or after the end,
    /// [`DatagramError::TooLarge`] beyond [`Connection::max_datagram_size`].
    pub fn send_datagram(&mut self, now: Instant, data: &[u8]) -> Result<(), DatagramError> {
        if !self.is_established() {
            return Err(DatagramError::NotConnected);
        }
        let max = self.max_datagram_size().ok_or(DatagramError::Disabled)?;
        if data.len() > max {
            return Err(DatagramError::TooLarge {
                len: data.len(),
                max,
            });
        }
        let deadline = self.datagram_deadline();
        self.dgram
            .push(now, data, self.config.datagram_queue, deadline);
        Ok(())
    }

    /// The next datagram received from the peer, in arrival (or decoding) order.
    pub fn poll_datagram(&mut self) -> Option<Vec<u8>> {
        self.dgram.pop()
    }

    /// The session's datagram counters.
    pub fn datagram_stats(&self) -> DatagramStats {
        self.dgram.stats
    }

    fn datagram_deadline(&self) -> Duration {
        let lead = self.paths.get(self.paths.lead());
        Datagrams::deadline(self.config.datagram_deadline, lead.rtt.srtt())
    }

    /// When the datagram part must be woken (an unprotected datagram's repair).
    pub(super) fn datagram_wakeup(&self) -> Option<Instant> {
        self.dgram.wakeup
    }

    /// How datagrams are protected now: the repair rate for datagrams close together and
    /// the repairs behind a lone one, from our direction's loss (`policy`).
    fn datagram_protection(&self, deadline: Duration, i: usize) -> Protection {
        // Path `i`'s estimator once it has seen enough packets; before that its outcomes
        // blended with the handshake train's copies, which are then also the outcomes the
        // lone datagrams' cautious estimate rests on.
        let loss = &self.paths.get(i).loss;
        let samples = loss.samples();
        let (p, outcomes) = if samples >= 32 {
            (loss.steady(), samples)
        } else {
            let train = self.hs.loss_out.map_or(0, |(_, sent)| u64::from(sent));
            (self.tail_loss_samples(i).loss(), samples + train)
        };
        let p_bg = loss.gilbert().p_bg;
        let burst = 1.0 / p_bg.max(1e-6);
        let cautious = policy::cautious_loss(p, outcomes);
        Protection {
            rate: policy::repair_rate(p, burst, self.dgram.per_window(deadline)),
            lone: policy::lone_repairs(cautious, 1.0 - p_bg),
            loss: cautious,
        }
    }

    /// The transmit hook: the next datagram packet, if one is due and `can_send` (the
    /// window and pacer allow a packet). Datagrams go ahead of stream data.
    pub(super) fn poll_datagram_transmit(
        &mut self,
        now: Instant,
        buf: &mut Vec<u8>,
        i: usize,
        can_send: bool,
    ) -> Option<Transmit> {
        if !self.config.datagrams || !matches!(self.state, State::Established) {
            return None;
        }
        if !self.dgram.has_queued() && self.dgram.stats.sent == 0 {
            return None; // nothing ever sent: no coder, no repairs (stream-only sessions)
        }
        let deadline = self.datagram_deadline();
        let protection = self.datagram_protection(deadline, i);
        let next = self.dgram.poll_next(now, can_send, protection, deadline)?;
        self.begin_packet(buf, i);
        match next {
            Next::Source(id, data) => {
                self.emit_ack_if_fits(now, buf, i, DATAGRAM_HEADER_LEN + data.len());
                wire::emit_datagram(buf, id, &data);
            }
            Next::Repair(header) => {
                let data = self.dgram.repair_data();
                let len = wire::DATAGRAM_REPAIR_HEADER_LEN + data.len();
                // The ACK goes in front if it fits (borrowing `data` ends first).
                let data = data.to_vec();
                self.emit_ack_if_fits(now, buf, i, len);
                wire::emit_datagram_repair(buf, &header, &data);
            }
        }
        Some(self.finish_packet(now, buf, i, SentKind::Control, true))
    }

    /// The receive hook: a DATAGRAM chunk.
    pub(super) fn on_datagram(&mut self, id: SymbolId, payload: &[u8]) {
        if !self.config.datagrams {
            self.dgram.stats.rejected += 1;
            return;
        }
        if self
            .dgram
            .on_source(id, payload, self.config.datagram_queue)
        {
            self.events.push_back(Event::DatagramReceived);
        }
    }

    /// The receive hook: a DATAGRAM_REPAIR chunk.
    pub(super) fn on_datagram_repair(&mut self, header: &RepairHeader, data: &[u8]) {
        if !self.config.datagrams {
            self.dgram.stats.rejected += 1;
            return;
        }
        if self
            .dgram
            .on_repair(header, data, self.config.datagram_queue)
        {
            self.events.push_back(Event::DatagramReceived);
        }
    }
}
