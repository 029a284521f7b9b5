//! One network path of a session (issue 29, after quinn's `PathData`): where it leads,
//! whether the peer proved it is there, and everything measured and controlled on it
//! alone (its packet numbers and sent ledger, RTT, loss, burst and reorder estimates,
//! congestion controller, pacer, the receive side's ACK state and replay window).
//!
//! Each path numbers its packets on its own, so an ACK (which travels on the path whose
//! packets it reports) settles that path's ledger only, and one path's delay never reads
//! as another's reordering or loss. A single-path session is path 0 and behaves exactly
//! as the session did before paths existed.

use super::ack::AckState;
use crate::cc::{new_controller, CcConfig, Controller};
use crate::config::TransportConfig;
use crate::crypto::ReplayWindow;
use crate::estimate::loss::LossEstimator;
use crate::estimate::reorder::ReorderEstimator;
use crate::pacer::Pacer;
use crate::rtt::RttEstimator;
use crate::sent::SentLedger;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// Challenges sent for one address before it is given up (each a PTO apart).
const CHALLENGE_TRIES: u8 = 5;

/// How long after a challenge to an address was created it may be started again (when
/// its copies went unanswered).
pub(super) const RECHALLENGE_AFTER: Duration = Duration::from_secs(2);

/// How often a path declared dead (or kept as standby) is probed.
pub(super) const PROBE_INTERVAL: Duration = Duration::from_millis(500);

/// Arrival gaps a busy path may stay silent, while another path is heard, before it is
/// declared dead: a live path's answers come every gap or two, and even at 20 % loss
/// eight ACKs lost in a row happen about once in 400,000.
const SILENT_GAPS: u32 = 8;

/// Shortest silence that declares a path dead from the other paths' evidence: below it,
/// receive batching and scheduling noise in the drivers move arrivals by as much.
const SILENT_FLOOR: Duration = Duration::from_millis(20);

/// Arrival gaps measured before a path's silence is judged against them.
const GAP_SAMPLES: u32 = 8;

/// Path validation: the address the path sends to is one the peer answered a challenge
/// from (or, for path 0, the handshake's), so a datagram with a forged or rewritten
/// source address never moves traffic.
#[derive(Debug, Default)]
pub(super) struct Validation {
    /// Whether `remote` is validated (data may be sent there).
    pub(super) validated: bool,
    /// A challenge out to an address, waiting for its response.
    pub(super) challenge: Option<Challenge>,
    /// A challenge the peer sent on this path: (token, the address it came from), echoed
    /// once on this path to that address.
    pub(super) respond: Option<(u64, SocketAddr)>,
}

/// A challenge in flight.
#[derive(Debug, Clone, Copy)]
pub(super) struct Challenge {
    /// Where it goes (the address being validated).
    pub(super) addr: SocketAddr,
    /// The token the response must echo.
    pub(super) token: u64,
    /// When it was created (due at once).
    pub(super) created: Instant,
    /// When it was last sent (`None`: not yet).
    pub(super) sent: Option<Instant>,
    /// Copies sent.
    pub(super) tries: u8,
}

/// Whether the peer is answering on a path.
#[derive(Debug, Default)]
pub(super) struct Liveness {
    /// The first ack-eliciting packet sent since the path was last heard from.
    pub(super) waiting_since: Option<Instant>,
    /// Declared dead: nothing heard for [`PathData::dead_after`] while waiting. Only
    /// probes go out on it until it answers again.
    pub(super) dead: bool,
    /// Taken down by the application (its socket reports a link error, or its interface
    /// or address is gone): nothing at all goes out on it, not even probes, until the
    /// application brings it back up and it validates again.
    pub(super) down: bool,
    /// When the next probe of a dead or standby path is due.
    pub(super) next_probe: Option<Instant>,
    /// When an authenticated packet last arrived on the path from its address.
    pub(super) heard: Option<Instant>,
    /// The arrival before `heard` at an earlier instant (a batch read at one instant
    /// counts once).
    pub(super) heard_before: Option<Instant>,
    /// Smoothed gap between arrivals (each sample at most the path's smoothed RTT, so an
    /// idle spell does not inflate it for long).
    pub(super) gap: Duration,
    /// Gaps measured, up to [`GAP_SAMPLES`].
    pub(super) gap_samples: u32,
}

/// Timers of one path.
#[derive(Debug, Default)]
pub(super) struct PathTimers {
    /// When the next packet in flight crosses the loss-detection time threshold.
    pub(super) loss_time: Option<Instant>,
    /// When the pacer next lets a datagram out, if it is what holds data back.
    pub(super) pacer_wakeup: Option<Instant>,
    /// When the reordering estimator last began a round.
    pub(super) last_round: Option<Instant>,
}

/// One path: see the module docs.
#[derive(Debug)]
pub(super) struct PathData {
    /// The path id on the wire (in the data packet's type byte).
    pub(super) id: u8,
    /// The validated address datagrams on this path go to.
    pub(super) remote: SocketAddr,
    /// Every datagram sent on this path whose fate is open.
    pub(super) sent: SentLedger,
    pub(super) cc: Box<dyn Controller>,
    pub(super) rtt: RttEstimator,
    pub(super) pacer: Pacer,
    pub(super) loss: LossEstimator,
    pub(super) reorder: ReorderEstimator,
    /// The receive side: what arrived on this path and when an ACK for it is due.
    pub(super) ack: AckState,
    /// The receive side's replay window over this path's packet numbers.
    pub(super) replay: ReplayWindow,
    pub(super) timers: PathTimers,
    pub(super) validation: Validation,
    pub(super) liveness: Liveness,
    /// Bytes of every datagram sent on this path (what it carried, for metrics).
    pub(super) bytes_sent: u64,
    /// Until when the sources sent here get copies on a faster path
    /// (`Paths::begin_warm_up`).
    pub(super) warm_until: Option<Instant>,
}

impl PathData {
    /// A path to `remote`; `validated` for path 0 (the handshake proved the address).
    pub(super) fn new(
        id: u8,
        remote: SocketAddr,
        validated: bool,
        config: &TransportConfig,
    ) -> Self {
        let cc_cfg = CcConfig {
            initial_window: config.initial_window,
            max_rate_bps: config.max_rate_bps,
            mtu: config.max_datagram,
            ..CcConfig::default()
        };
        PathData {
            id,
            remote,
            sent: SentLedger::default(),
            cc: new_controller(config.congestion, &cc_cfg),
            rtt: RttEstimator::new(config.initial_rtt),
            pacer: Pacer::new(config.max_datagram),
            loss: LossEstimator::default(),
            reorder: ReorderEstimator::new(),
            ack: AckState::default(),
            replay: ReplayWindow::default(),
            timers: PathTimers::default(),
            validation: Validation {
                validated,
                ..Validation::default()
            },
            liveness: Liveness::default(),
            bytes_sent: 0,
            warm_until: None,
        }
    }

    /// Whether data may go out on this path now: validated, not declared dead, not down.
    pub(super) fn usable(&self) -> bool {
        self.validation.validated && !self.liveness.dead && !self.liveness.down
    }

    /// Whether the congestion window has room for another packet: the send loop's test
    /// for new data, and the runtime's for whether a write is worth waking it.
    pub(super) fn window_open(&self) -> bool {
        self.sent.in_flight() < self.cc.window()
    }

    /// Brings a path that was down back as a fresh path to the same address: its
    /// estimators and controller start over (what they learned may not hold for the link
    /// that came back), it must validate again (`token` starts the challenge), and its
    /// packet numbers, sent ledger and receive side carry on (the peer's replay window
    /// and ACK state follow those numbers).
    pub(super) fn restart(&mut self, now: Instant, token: u64, config: &TransportConfig) {
        let fresh = PathData::new(self.id, self.remote, false, config);
        self.cc = fresh.cc;
        self.rtt = fresh.rtt;
        self.pacer = fresh.pacer;
        self.loss = fresh.loss;
        self.reorder = fresh.reorder;
        self.timers = fresh.timers;
        self.validation = fresh.validation;
        self.liveness = fresh.liveness;
        self.warm_until = None;
        self.challenge(now, self.remote, token);
    }

    /// Whether a challenge is out and not given up.
    pub(super) fn challenging(&self) -> bool {
        self.validation
            .challenge
            .is_some_and(|c| c.tries < CHALLENGE_TRIES)
    }

    /// Silence after which a path that owes answers is declared dead: three probe
    /// timeouts of its own round trip (a path losing even 20 % answers within one almost
    /// always), and at least 100 ms (a path with a tiny RTT must not flap on scheduling
    /// noise).
    pub(super) fn dead_after(&self, max_ack_delay: Duration) -> Duration {
        (self.rtt.pto(max_ack_delay) * 3).max(Duration::from_millis(100))
    }

    /// When the silence on this path becomes death, if it is waiting for an answer.
    pub(super) fn dead_deadline(&self, max_ack_delay: Duration) -> Option<Instant> {
        if self.liveness.dead {
            return None;
        }
        self.liveness
            .waiting_since
            .map(|t| t + self.dead_after(max_ack_delay))
    }

    /// An ack-eliciting packet left on this path.
    pub(super) fn on_eliciting_sent(&mut self, now: Instant) {
        self.liveness.waiting_since.get_or_insert(now);
    }

    /// An authenticated packet arrived on this path at `now`: it lives. Returns whether
    /// it had been declared dead (it comes back into use).
    pub(super) fn on_heard(&mut self, now: Instant) -> bool {
        let l = &mut self.liveness;
        l.waiting_since = None;
        if let Some(last) = l.heard.filter(|&t| now > t) {
            let sample = (now - last).min(self.rtt.srtt());
            l.gap = if l.gap_samples == 0 {
                sample
            } else {
                (l.gap * 7 + sample) / 8
            };
            l.gap_samples = (l.gap_samples + 1).min(GAP_SAMPLES);
            l.heard_before = Some(last);
        }
        l.heard = Some(now);
        std::mem::take(&mut l.dead)
    }

    /// How long this path may stay silent while another path is heard before it is
    /// declared dead: [`SILENT_GAPS`] of its arrival gaps, four RTT variations (a jittery
    /// path's answers bunch and spread by that much), and at least [`SILENT_FLOOR`].
    /// `None` until enough gaps are measured (a path that was never busy has no cadence
    /// to miss).
    pub(super) fn silent_after(&self) -> Option<Duration> {
        (self.liveness.gap_samples >= GAP_SAMPLES).then(|| {
            (self.liveness.gap * SILENT_GAPS)
                .max(self.rtt.rttvar() * 4)
                .max(SILENT_FLOOR)
        })
    }

    /// Starts validating `addr` with `token` (replacing any challenge in flight).
    pub(super) fn challenge(&mut self, now: Instant, addr: SocketAddr, token: u64) {
        self.validation.challenge = Some(Challenge {
            addr,
            token,
            created: now,
            sent: None,
            tries: 0,
        });
    }

    /// The challenge to send now, if one is due: (address, token).
    pub(super) fn challenge_due(
        &self,
        now: Instant,
        max_ack_delay: Duration,
    ) -> Option<(SocketAddr, u64)> {
        let c = self.validation.challenge?;
        let due = c
            .sent
            .is_none_or(|t| now >= t + self.rtt.pto(max_ack_delay));
        (due && c.tries < CHALLENGE_TRIES).then_some((c.addr, c.token))
    }

    /// The challenge went out.
    pub(super) fn on_challenge_sent(&mut self, now: Instant) {
        if let Some(c) = self.validation.challenge.as_mut() {
            c.sent = Some(now);
            c.tries += 1;
        }
    }

    /// When the next challenge copy is due, if one is out and not given up.
    pub(super) fn challenge_deadline(&self, max_ack_delay: Duration) -> Option<Instant> {
        let c = self.validation.challenge?;
        if c.tries >= CHALLENGE_TRIES {
            return None;
        }
        Some(
            c.sent
                .map_or(c.created, |t| t + self.rtt.pto(max_ack_delay)),
        )
    }

    /// A response echoing `token` arrived on this path from `from`: the address is
    /// validated if it answers the challenge in flight, and becomes the path's. Returns
    /// whether it did.
    pub(super) fn on_response(&mut self, token: u64, from: SocketAddr) -> bool {
        match self.validation.challenge {
            Some(c) if c.token == token && c.addr == from => {
                self.validation.challenge = None;
                self.validation.validated = true;
                self.remote = from;
                true
            }
            _ => false,
        }
    }
}
