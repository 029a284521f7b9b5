//! Timers: when the session must be woken, and what is due when it is (idle timeout,
//! keepalive, delayed ACKs, loss detection, tail probes).

use super::{Connection, ConnectionError, State};
use std::time::{Duration, Instant};

/// When the session must next act, and the probe state.
#[derive(Debug, Default)]
pub(super) struct Timers {
    /// When the last ack-eliciting packet left (the probe timer runs from there).
    pub(super) last_ack_eliciting_sent: Option<Instant>,
    /// Probes sent since the last ACK that acknowledged something new.
    pub(super) pto_count: u32,
    /// When the last datagram left (the keepalive runs from there).
    pub(super) last_sent: Option<Instant>,
    /// A PING is due.
    pub(super) ping_pending: bool,
}

impl Connection {
    /// Whether the probe timer must run: packets are in flight, or symbols are still
    /// unacknowledged with nothing in flight. The second case is the liveness guarantee:
    /// repair accounting bounds its debt by the peer's deficit, and a receiver that never
    /// saw a lost tail reports none, so without it a tail whose last repairs were lost
    /// (proactive ones owe nothing) waited for the next keepalive (evidence:
    /// docs/experiments/code-evidence.md#tail-unresolved).
    fn tail_unresolved(&self) -> bool {
        self.paths.iter().any(|p| p.sent.in_flight() > 0) || !self.encoder.is_empty()
    }

    /// The probe timeout, on the lead path's RTT (see `Paths::lead`).
    fn pto(&self) -> Duration {
        // Capped at 4x: on a lossy link a probe is itself lost often, and a tail symbol
        // (e.g. the one carrying flow-control credit) must not wait many seconds (8x was
        // 5.6 s at 600 ms).
        let rtt = &self.paths.get(self.paths.lead()).rtt;
        rtt.pto(self.config.max_ack_delay) * 2u32.saturating_pow(self.timers.pto_count.min(2))
    }

    /// When [`Connection::handle_timeout`] must be called next.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let mut t: Option<Instant> = None;
        let mut add = |x: Option<Instant>| {
            if let Some(x) = x {
                t = Some(t.map_or(x, |t: Instant| t.min(x)));
            }
        };
        match &self.state {
            State::Drained => return None,
            State::Handshake {
                next_send,
                rejected,
                ..
            } => {
                add(Some(*next_send));
                add(rejected.map(|r| r.0));
                add(Some(self.created + self.config.handshake_timeout));
                return t;
            }
            State::Closing { .. } => return Some(self.created), // flush immediately
            State::Established => {}
        }
        add(Some(self.recv.last_received + self.config.idle_timeout));
        add(self.timers.last_sent.map(|s| s + self.config.keepalive));
        for p in self.paths.iter() {
            add(p.ack.deadline.filter(|_| p.ack.pending));
            add(p.timers.loss_time);
            add(p.timers.pacer_wakeup);
        }
        add(self.paths_timeout()); // issue 29: deaths, challenges, probes
        add(self.datagram_wakeup()); // issue 27 hook
        add(self.hs.probe_deadline());
        add(self.hs.release_deadline());
        if self.tail_unresolved() {
            add(self.timers.last_ack_eliciting_sent.map(|s| s + self.pto()));
        }
        t
    }

    /// Runs timers that are due.
    pub fn handle_timeout(&mut self, now: Instant) {
        match &self.state {
            State::Drained | State::Closing { .. } => return,
            State::Handshake { rejected, .. } => {
                if let Some((at, reason, peer_version)) = *rejected {
                    if now >= at {
                        self.lose(ConnectionError::Rejected {
                            reason,
                            peer_version,
                        });
                        return;
                    }
                }
                if now >= self.created + self.config.handshake_timeout {
                    self.lose(ConnectionError::HandshakeTimeout);
                }
                return;
            }
            State::Established => {}
        }
        if now >= self.recv.last_received + self.config.idle_timeout {
            self.lose(ConnectionError::IdleTimeout);
            return;
        }
        if self.hs.probe_deadline().is_some_and(|d| now >= d) {
            self.finish_train_probe(now);
        }
        self.hs.release_held(now);
        if self
            .timers
            .last_sent
            .is_some_and(|s| now >= s + self.config.keepalive)
        {
            self.timers.ping_pending = true;
        }
        for i in 0..self.paths.len() {
            let p = self.paths.get_mut(i);
            if p.ack.pending && p.ack.deadline.is_some_and(|d| now >= d) {
                p.ack.immediate = true;
            }
            if p.timers.loss_time.is_some_and(|t| now >= t) {
                self.detect_lost(now, i);
                self.trim_sent(i);
                self.owe_tail_shortfall();
            }
        }
        self.check_paths(now);
        if self.tail_unresolved()
            && self
                .timers
                .last_ack_eliciting_sent
                .is_some_and(|s| now >= s + self.pto())
        {
            // Tail loss probe: one repair covering everything unacknowledged.
            self.timers.pto_count += 1;
            // Two probes when loss is significant, so one loss does not cost another PTO.
            let lead = self.paths.get(self.paths.lead());
            let probes = if lead.loss.p() > 0.05 { 2 } else { 1 };
            // The tail's fate is unknown: probes cover everything sent.
            self.repair.on_probe(probes, self.unacked());
            self.timers.last_ack_eliciting_sent = Some(now);
            if self.encoder.is_empty() {
                self.timers.ping_pending = true;
            }
        }
    }
}
