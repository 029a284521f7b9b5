//! The handshake on an existing session: the client taking the ACCEPT and measuring
//! the handshake train, the server answering INITIATE copies and applying the PATH frame.

use super::{Connection, ConnectionError, Event, Side, State};
use crate::handshake_train::{self, Arrivals};
use crate::streams::OwnedFrame;
use crate::wire::{self, Accept, Initiate, Reject, RejectReason, RANDOM_LEN};
use ctcp_rlnc::{CodecConfig, Encoder};
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// INITIATE copies per handshake attempt (see `poll_transmit`).
const HANDSHAKE_COPIES: u32 = 3;
/// ACCEPTs queued at most; more INITIATE copies before the next send are not answered.
const MAX_PENDING_ACCEPTS: usize = 64;
/// ACCEPTs a session sends at most: a whole train, and retries for a few lost groups.
const MAX_ACCEPTS: u32 = handshake_train::MAX_TRAIN as u32 + 16;

/// The handshake's state that is not the client's INITIATE schedule
/// ([`State::Handshake`]): the randoms both keys derive from, the handshake train's
/// measurement, and the server's ACCEPTs. The train's loss samples and the PATH frame
/// outlive the handshake.
#[derive(Debug)]
pub(super) struct Handshake {
    /// ACCEPTs to send, one per INITIATE copy received (server; at most
    /// [`MAX_PENDING_ACCEPTS`]).
    pub(super) accept_pending: VecDeque<Vec<u8>>,
    /// The ACCEPTs of even train positions (server), held until the train has passed
    /// ([`Arrivals::release_deadline`]) and then sent back to back: an ACCEPT sent as its
    /// copy arrived would be spaced by the uplink, and a downlink faster than the uplink
    /// would read as the uplink's rate.
    pub(super) accept_held: VecDeque<Vec<u8>>,
    /// The handshake randoms (the server's is zero on the client until an ACCEPT).
    pub(super) client_random: [u8; RANDOM_LEN],
    pub(super) server_random: [u8; RANDOM_LEN],
    /// Handshake train arrivals: INITIATE copies on the server, ACCEPTs on the client.
    pub(super) arrivals: Arrivals,
    /// ACCEPTs queued so far (server).
    pub(super) accepts_queued: u32,
    /// The client's side of the handshake probe, until it has reported (see
    /// `handshake_train`).
    pub(super) probe: Option<TrainProbe>,
    /// The handshake train as a loss sample, (copies that arrived, copies sent): of our
    /// own direction (client only: the server's report), and of the direction towards us
    /// (the server's INITIATEs up to the highest position seen; the client's ACCEPTs
    /// against the copies the server reported). See `TailLossSamples::loss`.
    pub(super) loss_out: Option<(u32, u32)>,
    pub(super) loss_in: Option<(u32, u32)>,
    /// A PATH frame from the client, applied with the next `now`.
    pub(super) path_pending: Option<(u64, u64, bool)>,
}

/// The client's handshake-train measurement in progress.
#[derive(Debug, Clone)]
pub(super) struct TrainProbe {
    /// When each train copy left (index: position − 1).
    pub(super) sent: Vec<Instant>,
    /// Length of the train copies, and of the longest train ACCEPT received (a server
    /// with a smaller `max_datagram` pads its ACCEPTs less).
    pub(super) len: usize,
    accept_len: usize,
    /// The server's arrival report with the most copies so far.
    report: handshake_train::Report,
    /// ACCEPTs of odd train positions, answered as their copies arrived: the own-rate
    /// measurement ends [`handshake_train::QUIET`] after the last of them.
    paced: Arrivals,
    /// ACCEPTs of even train positions: the burst the server sends once the train has
    /// passed it, spaced by the downlink alone (the PATH rate).
    burst: Arrivals,
    /// The own rate (the server's report) went to our controller; the PATH frame waits
    /// for the burst.
    up_done: bool,
    /// The burst measurement ends at this time.
    back_deadline: Option<Instant>,
    /// Shortest INITIATE → ACCEPT time of a train copy.
    rtt: Option<Duration>,
    /// The measurement ends at this time (reset by each train ACCEPT).
    pub(super) deadline: Option<Instant>,
}

impl Handshake {
    /// A client's, with a train measurement if `train`.
    pub(super) fn client(client_random: [u8; RANDOM_LEN], train: bool) -> Self {
        let mut hs = Handshake::server(client_random, [0; RANDOM_LEN]);
        hs.probe = train.then_some(TrainProbe {
            sent: Vec::new(),
            len: 0,
            accept_len: 0,
            report: handshake_train::Report::default(),
            paced: Arrivals::default(),
            burst: Arrivals::default(),
            up_done: false,
            back_deadline: None,
            rtt: None,
            deadline: None,
        });
        hs
    }

    /// A server's, for the INITIATE with `client_random` it accepted.
    pub(super) fn server(client_random: [u8; RANDOM_LEN], server_random: [u8; RANDOM_LEN]) -> Self {
        Handshake {
            accept_pending: VecDeque::new(),
            accept_held: VecDeque::new(),
            client_random,
            server_random,
            arrivals: Arrivals::default(),
            accepts_queued: 0,
            probe: None,
            loss_out: None,
            loss_in: None,
            path_pending: None,
        }
    }

    /// When the train measurement ends, if one runs.
    pub(super) fn probe_deadline(&self) -> Option<Instant> {
        let p = self.probe.as_ref()?;
        if p.up_done {
            p.back_deadline
        } else {
            p.deadline
        }
    }

    /// When the held train ACCEPTs go out, if any are held (server).
    pub(super) fn release_deadline(&self) -> Option<Instant> {
        if self.accept_held.is_empty() {
            return None;
        }
        self.arrivals.release_deadline()
    }

    /// Sends the held train ACCEPTs if the train has passed by `now` (server).
    pub(super) fn release_held(&mut self, now: Instant) {
        if self.release_deadline().is_some_and(|d| now >= d) {
            self.accept_pending.append(&mut self.accept_held);
        }
    }
}

impl Connection {
    pub(crate) fn handle_accept(&mut self, now: Instant, accept: &Accept) {
        if self.side != Side::Client || matches!(self.state, State::Drained) {
            return;
        }
        if self
            .psk
            .verify_accept(accept, &self.hs.client_random)
            .is_err()
        {
            tracing::debug!(conn = self.conn_id, "dropping ACCEPT with a bad MAC");
            return;
        }
        if matches!(self.state, State::Handshake { .. }) {
            // The server settled the parameters (the windows at the smaller of both
            // offers); a mismatch of what must match means it ignored ours.
            let params = match self.config.params().negotiate(&accept.params) {
                Ok(p) => p,
                Err(m) => {
                    self.lose(ConnectionError::Incompatible(m));
                    return;
                }
            };
            self.apply_params(&params);
            let (c2s, s2c) = self
                .psk
                .session_keys(&self.hs.client_random, &accept.server_random);
            self.hs.server_random = accept.server_random;
            self.keys.tx = Some(c2s);
            self.keys.rx = Some(s2c);
            self.state = State::Established;
            self.recv.last_received = now;
            // Confirm the handshake to the server right away.
            self.timers.ping_pending = true;
            self.events.push_back(Event::Connected);
            if let Some(p) = self.hs.probe.as_mut() {
                p.deadline = Some(now + handshake_train::QUIET);
            }
        } else if accept.server_random != self.hs.server_random {
            return;
        }
        self.on_train_accept(now, accept);
    }

    /// Client: a REJECT arrived for this session's handshake. A signed one (the server
    /// verified our INITIATE, so it holds our key) ends the handshake at once; an unsigned
    /// one (bad MAC, other version) could be forged by anyone who saw the INITIATE, so it
    /// ends the handshake only if no ACCEPT arrives within [`Connection::reject_grace`].
    pub(crate) fn handle_reject(&mut self, now: Instant, reject: &Reject) {
        let grace = self.reject_grace();
        let State::Handshake { rejected, .. } = &mut self.state else {
            return;
        };
        if reject.echo[..] != self.hs.client_random[..wire::REJECT_ECHO_LEN] {
            tracing::debug!(
                conn = self.conn_id,
                "dropping a REJECT that does not echo our handshake"
            );
            return;
        }
        if !reject.reason.is_signed() {
            if rejected.is_none() {
                *rejected = Some((now + grace, reject.reason, reject.version));
            }
            return;
        }
        if self
            .psk
            .verify_reject(reject, &self.hs.client_random)
            .is_err()
        {
            tracing::debug!(conn = self.conn_id, "dropping a REJECT with a bad MAC");
            return;
        }
        let err = match (reject.reason, &reject.signed) {
            (RejectReason::Params, Some((theirs, _))) => {
                match self.config.params().negotiate(theirs) {
                    Err(m) => ConnectionError::Incompatible(m),
                    Ok(_) => ConnectionError::Rejected {
                        reason: RejectReason::Params,
                        peer_version: reject.version,
                    },
                }
            }
            (reason, _) => ConnectionError::Rejected {
                reason,
                peer_version: reject.version,
            },
        };
        self.lose(err);
    }

    /// How long an unsigned REJECT waits for an ACCEPT to override it: longer than the
    /// round trip the configuration expects, so the real server's answer beats a REJECT
    /// forged near the client, and short enough that a wrong key shows within a second on
    /// terrestrial paths.
    pub(super) fn reject_grace(&self) -> Duration {
        (self.config.initial_rtt * 3).max(Duration::from_millis(500))
    }

    /// Adopts negotiated parameters before any stream exists: the coding window shrinks to
    /// what both ends sized (the encoder is empty, so it is rebuilt; the decoder already
    /// holds twice our own window, at least twice the peer's encoder window), and streams
    /// and the session start with the agreed credit.
    pub(crate) fn apply_params(&mut self, p: &wire::Params) {
        if *p == self.config.params() {
            return;
        }
        let cfg = self.config.with_params(p);
        if cfg.window != self.config.window {
            self.encoder = Encoder::new(CodecConfig {
                symbol_size: cfg.symbol_size,
                window: cfg.window,
            });
        }
        self.streams
            .apply_initial_credit(p.stream_window, p.session_window);
        self.config = Arc::new(cfg);
    }

    /// Client: a verified ACCEPT arrived at `now`; measure the train (see
    /// `handshake_train`).
    fn on_train_accept(&mut self, now: Instant, accept: &Accept) {
        let Some(p) = self.hs.probe.as_mut() else {
            return;
        };
        if u32::from(accept.train_seen) > p.report.seen {
            p.report = handshake_train::Report {
                seen: accept.train_seen.into(),
                spread: accept.train_spread.into(),
                span: Duration::from_micros(accept.train_span_us.into()),
            };
        }
        if !self.hs.arrivals.record(accept.train, now) {
            return;
        }
        p.accept_len = p.accept_len.max(accept.len);
        let first = self.hs.arrivals.count() == 1;
        if accept.train.is_multiple_of(2) {
            p.burst.record(accept.train, now);
        } else {
            p.paced.record(accept.train, now);
        }
        if let Some(&sent) = p.sent.get(usize::from(accept.train) - 1) {
            // Each ACCEPT answers its own copy: the round trip of that copy.
            let sample = now.saturating_duration_since(sent);
            if p.rtt.is_none() {
                // The handshake's round trip is the path's first RTT sample.
                self.paths
                    .get_mut(0)
                    .rtt
                    .update(now, sample, Duration::ZERO);
            }
            p.rtt = Some(p.rtt.map_or(sample, |r| r.min(sample)));
        }
        if first {
            let wait = p.rtt.map_or(Duration::ZERO, |r| r * 2);
            p.back_deadline = Some(now + handshake_train::BURST_WAIT.max(wait));
        }
        if accept.train.is_multiple_of(2) {
            p.back_deadline = p.burst.quiet_deadline();
        } else {
            p.deadline = p.paced.quiet_deadline();
        }
        let n = u32::from(handshake_train::train_len(self.config.handshake_train));
        if !p.up_done && p.paced.count() >= n.div_ceil(2) {
            self.finish_own_rate(now);
        }
        if self.hs.arrivals.count() >= n {
            self.finish_train_probe(now);
        }
    }

    /// Client: the paced half of the train is in (or went quiet): gives our controller
    /// the rate towards the server (the server's report), on the schedule the whole train
    /// had when every ACCEPT left as its copy arrived.
    fn finish_own_rate(&mut self, now: Instant) {
        let Some(p) = self.hs.probe.as_mut() else {
            return;
        };
        if p.up_done {
            return;
        }
        p.up_done = true;
        if p.sent.is_empty() {
            return;
        }
        let up = handshake_train::rate(p.report).map(|(pps, exact)| (pps * p.len as f64, exact));
        if let Some((bytes_per_s, exact)) = up {
            let pps = bytes_per_s / self.config.max_datagram as f64;
            let path = self.paths.get_mut(0);
            path.cc.on_path_estimate(now, pps, exact, &path.rtt);
        }
    }

    /// Client: the handshake train is measured. Gives our controller the rate towards the
    /// server (the server's report) and queues a PATH frame with the rate back (the
    /// ACCEPTs' spacing) for the server's.
    pub(super) fn finish_train_probe(&mut self, now: Instant) {
        if self.hs.probe.as_ref().is_some_and(|p| !p.up_done) {
            self.finish_own_rate(now);
            if self.hs.arrivals.count()
                < u32::from(handshake_train::train_len(self.config.handshake_train))
            {
                return;
            }
        }
        let Some(p) = self.hs.probe.take() else {
            return;
        };
        if p.sent.is_empty() {
            return;
        }
        if p.report.seen > 0 {
            // Each arrival drew one ACCEPT, so the server's count is also the ACCEPTs sent.
            let sent = u32::try_from(p.sent.len()).unwrap_or(u32::MAX);
            self.hs.loss_out = Some((p.report.seen.min(sent), sent));
            self.hs.loss_in = Some((self.hs.arrivals.count().min(p.report.seen), p.report.seen));
        }
        let up = handshake_train::rate(p.report).map(|(pps, _)| pps * p.len as f64);
        // Only even positions are in the burst: positions spanned count two per gap.
        let mut burst = p.burst.report();
        burst.spread /= 2;
        let back =
            handshake_train::rate(burst).map(|(pps, exact)| (pps * p.accept_len as f64, exact));
        if let (Some((bytes_per_s, exact)), Some(rtt)) = (back, p.rtt) {
            // The server sent the even positions' ACCEPTs back to back once the train had
            // passed it, so their spacing is the downlink's alone, also where the downlink
            // is faster than the uplink (an ACCEPT sent as its copy arrived was spaced by
            // the slower of the two, and a satellite's return link capped the server's
            // first window at the uplink's BDP: docs/experiments/jitter.md, "Asymmetric
            // 600 ms").
            tracing::debug!(
                conn = self.conn_id,
                up_bytes_per_s = up,
                back_bytes_per_s = bytes_per_s,
                rtt_ms = rtt.as_secs_f64() * 1e3,
                "handshake train measured"
            );
            self.streams.note_incoming_path(bytes_per_s, rtt);
            self.streams.push_control(OwnedFrame::Path {
                rate: bytes_per_s as u64,
                rtt_us: rtt.as_micros().clamp(1, u128::from(u64::MAX)) as u64,
                exact,
            });
        }
    }

    /// Server: an INITIATE copy of this session's handshake arrived at `now` (MAC and
    /// replay checks passed). Records it if it is a train copy and queues an ACCEPT of the
    /// same size, reporting the train so far.
    ///
    /// Once the client has sent authenticated data it holds an ACCEPT, so later copies
    /// (replays, or stragglers) are not answered; nor are more than
    /// [`MAX_ACCEPTS`] in all, so a replayer cannot crowd the session's own traffic.
    pub(crate) fn on_initiate(&mut self, now: Instant, init: &Initiate) {
        if !self.answers_handshake(&init.client_random)
            || self.recv.rx_packets > 0
            || self.hs.accepts_queued >= MAX_ACCEPTS
        {
            return;
        }
        self.hs.accepts_queued += 1;
        self.hs.arrivals.record(init.train, now);
        let report = self.hs.arrivals.report();
        if report.seen > 0 {
            self.hs.loss_in = Some((report.seen, self.hs.arrivals.highest()));
        }
        // Even positions wait for the burst; odd ones go at once, so the client's own-rate
        // measurement sees the paced ACCEPTs it always did.
        let held = init.train > 0 && init.train.is_multiple_of(2);
        let mut accept = Accept {
            conn_id: self.conn_id,
            server_random: self.hs.server_random,
            train: init.train,
            // Both at most 64 (`handshake_train::MAX_TRAIN`).
            train_seen: report.seen.min(255) as u8,
            train_spread: report.spread.min(255) as u8,
            train_span_us: report.span.as_micros().min(u128::from(u32::MAX)) as u32,
            len: init
                .len
                .min(self.config.max_datagram)
                .clamp(wire::ACCEPT_LEN, wire::MAX_HANDSHAKE_LEN),
            // What the session runs with: the credits settled, not this end's own windows.
            params: self.params(),
            mac: [0; wire::MAC_LEN],
        };
        self.psk.sign_accept(&mut accept, &self.hs.client_random);
        if self.hs.accept_pending.len() + self.hs.accept_held.len() < MAX_PENDING_ACCEPTS {
            let mut bytes = Vec::with_capacity(accept.len);
            accept.emit(&mut bytes);
            if held {
                self.hs.accept_held.push_back(bytes);
            } else {
                self.hs.accept_pending.push_back(bytes);
            }
        }
    }

    /// Whether an INITIATE with `client_random` is (a copy of) the one this server session
    /// accepted; another random naming its id is a different client.
    pub(crate) fn answers_handshake(&self, client_random: &[u8; RANDOM_LEN]) -> bool {
        self.side == Side::Server && *client_random == self.hs.client_random
    }

    /// Server: applies a PATH frame received from the client.
    pub(super) fn apply_path(&mut self, now: Instant) {
        let Some((rate, rtt_us, exact)) = self.hs.path_pending.take() else {
            return;
        };
        if rate == 0 || rtt_us == 0 || rtt_us > 60_000_000 {
            return;
        }
        let path = self.paths.get_mut(0);
        if !path.rtt.has_samples() {
            path.rtt
                .update(now, Duration::from_micros(rtt_us), Duration::ZERO);
        }
        let pps = rate as f64 / self.config.max_datagram as f64;
        tracing::debug!(
            conn = self.conn_id,
            pps,
            rtt_us,
            exact,
            "path estimate from the handshake"
        );
        path.cc.on_path_estimate(now, pps, exact, &path.rtt);
    }
}

/// How long the client waits after its `attempts`-th INITIATE before the next, with a
/// train of `train` copies first. The train goes back to back and counts as the first copy
/// of the first group; copies then go in threes 20 ms apart (each copy draws an ACCEPT), so
/// a lost datagram on a lossy link rarely costs the 300 ms timeout; the groups back off
/// gently, capped at 3 s. With single retransmissions a 30 %-loss path (both ways) failed
/// about one handshake in 500 within the 10 s timeout; with pairs, one first attempt in
/// eight at 20 % loss still waited the timeout (each copy makes the round trip with
/// probability 0.64), one in twenty with threes.
pub(super) fn handshake_wait(attempts: u32, train: u32) -> Duration {
    if attempts < train {
        return Duration::ZERO;
    }
    // Position in the groups of three, the whole train counting as one copy.
    let n = attempts - train + u32::from(train > 0);
    if !n.is_multiple_of(HANDSHAKE_COPIES) {
        Duration::from_millis(20)
    } else {
        Duration::from_millis(300)
            .mul_f64(1.5f64.powi((n / HANDSHAKE_COPIES - 1).min(6) as i32))
            .min(Duration::from_secs(3))
    }
}
