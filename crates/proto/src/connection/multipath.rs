//! The session's multipath entry points (issue 29): opening paths, validating addresses,
//! declaring paths dead and probing them back, and the control packets each path sends.
//! The per-path state is `path::PathData`, the set and the scheduler `paths::Paths`.

use super::{Connection, State, Transmit};
use crate::sent::SentKind;
use crate::wire::{self, MAX_PATHS};
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use thiserror::Error;

/// Why a path could not be added.
#[derive(Debug, Error, Clone, Copy, PartialEq, Eq)]
pub enum PathError {
    /// The session is not established (paths are added once it is).
    #[error("session not established")]
    NotConnected,
    /// The session has [`MAX_PATHS`] paths already.
    #[error("at most {MAX_PATHS} paths per session")]
    TooManyPaths,
}

/// One path as the application sees it (for logs, metrics and tests).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PathInfo {
    /// The path id on the wire.
    pub id: u8,
    /// Where its datagrams go.
    pub remote: SocketAddr,
    /// Whether the peer answered a challenge from that address (or the handshake did).
    pub validated: bool,
    /// Whether it was declared dead (only probes go out on it).
    pub dead: bool,
    /// Whether the application took it down ([`Connection::set_path_down`]): nothing
    /// goes out on it until [`Connection::set_path_up`].
    pub down: bool,
    /// Smoothed RTT measured on it.
    pub srtt: Duration,
    /// Its congestion window, in packets.
    pub cwnd: u64,
    /// Ack-eliciting packets in flight on it.
    pub in_flight: u64,
    /// Datagrams sent on it (its packet numbers used).
    pub sent: u64,
    /// Bytes sent on it, every datagram (full data packets and small control ones alike).
    pub bytes_sent: u64,
}

impl Connection {
    /// Opens another path to the peer at `remote` (which may be the session's address,
    /// for a path through another local interface: the caller sends the path's datagrams
    /// from the socket it chose for it). The path carries data once the peer answers its
    /// challenge. Returns its id.
    ///
    /// # Errors
    /// [`PathError::NotConnected`] before the handshake completes or after the end,
    /// [`PathError::TooManyPaths`] with [`MAX_PATHS`] paths already.
    pub fn add_path(&mut self, now: Instant, remote: SocketAddr) -> Result<u8, PathError> {
        if !self.is_established() {
            return Err(PathError::NotConnected);
        }
        let id = self.paths.free_id().ok_or(PathError::TooManyPaths)?;
        self.paths
            .add(now, id, remote, &self.config)
            .ok_or(PathError::TooManyPaths)?;
        tracing::debug!(conn = self.conn_id, path = id, %remote, "path added");
        Ok(id)
    }

    /// Closes path `id` (its interface went away): what it held in flight counts as lost
    /// and is repaired over the others. Path 0 stays (it dies and is probed instead).
    /// Returns whether a path was removed.
    pub fn remove_path(&mut self, now: Instant, id: u8) -> bool {
        let Some(i) = self.paths.index_of(id).filter(|_| id != 0) else {
            return false;
        };
        self.lose_path_flight(now, i, |_, _| true);
        self.paths.remove(i);
        tracing::debug!(conn = self.conn_id, path = id, "path removed");
        true
    }

    /// Takes path `id` down at once: its socket reported a link error (network
    /// unreachable, device gone, address not available) or its interface or address went
    /// away. Everything it holds in flight counts as lost and is repaired over the other
    /// paths now, without waiting for silence to show it; nothing goes out on it (no data,
    /// ACKs, challenges or probes) until [`Connection::set_path_up`]. Path 0 may go down
    /// too (the session lives while another path does). Returns whether the path was up;
    /// taking a down path down again does nothing.
    pub fn set_path_down(&mut self, now: Instant, id: u8) -> bool {
        let Some(i) = self.paths.index_of(id) else {
            return false;
        };
        let p = self.paths.get_mut(i);
        if p.liveness.down {
            return false;
        }
        p.liveness.down = true;
        p.validation.challenge = None;
        p.validation.respond = None;
        p.ack.owed.clear();
        tracing::debug!(conn = self.conn_id, path = id, "path down");
        // Dead as well: the other paths' ACK handling and repair accounting already treat
        // a dead path's flight as unreliable (`lose_dead_paths_hole`, repair coverage).
        self.declare_dead(now, i, None);
        true
    }

    /// Brings path `id` back up after [`Connection::set_path_down`] (its socket works
    /// again): it starts over as a fresh path to the same address, with a new challenge,
    /// and carries data once the peer answers it. On a path that is up but whose
    /// validation was given up, starts a new challenge (at most once per hold-off), so a
    /// path that came back while its challenges were lost validates eventually. Returns
    /// whether the path was down.
    pub fn set_path_up(&mut self, now: Instant, id: u8) -> bool {
        let Some(i) = self.paths.index_of(id) else {
            return false;
        };
        let p = self.paths.get(i);
        let down = p.liveness.down;
        // A challenge that was never sent, or given up at least a hold-off ago.
        let given_up = !p.validation.validated
            && !p.challenging()
            && p.validation
                .challenge
                .is_none_or(|c| now >= c.created + super::path::RECHALLENGE_AFTER);
        if !down && !given_up {
            return false;
        }
        let token = self.paths.next_token();
        let p = self.paths.get_mut(i);
        if down {
            p.restart(now, token, &self.config);
            tracing::debug!(
                conn = self.conn_id,
                path = id,
                "path up: validating it again"
            );
            self.paths.count_change();
        } else {
            let remote = p.remote;
            p.challenge(now, remote, token);
        }
        down
    }

    /// The session's paths.
    pub fn paths(&self) -> Vec<PathInfo> {
        self.paths
            .iter()
            .map(|p| PathInfo {
                id: p.id,
                remote: p.remote,
                validated: p.validation.validated,
                dead: p.liveness.dead,
                down: p.liveness.down,
                srtt: p.rtt.srtt(),
                cwnd: p.cc.window(),
                in_flight: p.sent.in_flight(),
                sent: p.sent.next_pn(),
                bytes_sent: p.bytes_sent,
            })
            .collect()
    }

    /// The path index an authenticated-to-be packet on wire path `id` belongs to, creating
    /// the path (unvalidated, with a challenge to `from`) if the peer opened it. `None` if
    /// the session is not established or has no room.
    pub(super) fn path_for(&mut self, now: Instant, id: u8, from: SocketAddr) -> Option<usize> {
        if let Some(i) = self.paths.index_of(id) {
            return Some(i);
        }
        if !matches!(self.state, State::Established) {
            return None;
        }
        let i = self.paths.add(now, id, from, &self.config)?;
        tracing::debug!(conn = self.conn_id, path = id, %from, "peer opened a path");
        Some(i)
    }

    /// An authenticated packet on path index `i` from `from`, the newest on that path if
    /// `newest`: a new address is challenged (traffic stays where it was until it
    /// answers), and a path heard from its own address lives.
    pub(super) fn on_path_packet(
        &mut self,
        now: Instant,
        i: usize,
        from: SocketAddr,
        newest: bool,
    ) {
        let p = self.paths.get_mut(i);
        if from == p.remote {
            if p.on_heard(now) {
                tracing::debug!(conn = self.conn_id, path = p.id, "path answers again");
                self.paths.count_change();
                self.paths.begin_warm_up(i, now);
            }
            self.check_silent_paths(now, i);
            return;
        }
        // A challenge to this address already out is not repeated; one given up is tried
        // again after a hold-off, so a replaying attacker draws a few small datagrams per
        // hold-off, never a stream.
        let retry = p
            .validation
            .challenge
            .is_none_or(|c| c.addr != from || now >= c.created + super::path::RECHALLENGE_AFTER);
        if newest && retry {
            tracing::debug!(conn = self.conn_id, path = p.id, old = %p.remote, new = %from, "peer address changed: challenging it");
            let token = self.paths.next_token();
            self.paths.get_mut(i).challenge(now, from, token);
            self.paths.count_change();
        }
    }

    /// A PATH_RESPONSE on path index `i` from `from`.
    pub(super) fn on_path_response(
        &mut self,
        now: Instant,
        i: usize,
        token: u64,
        from: SocketAddr,
    ) {
        let p = self.paths.get_mut(i);
        if p.on_response(token, from) {
            p.on_heard(now);
            tracing::debug!(conn = self.conn_id, path = p.id, %from, "path validated");
            self.paths.count_change();
            self.paths.begin_warm_up(i, now);
        }
    }

    /// Declares path index `i` dead: what it sent from `died` on (everything if `None`)
    /// is lost (repairs for it are owed, and go out on the paths that live), and it
    /// carries probes only until it answers again. What it sent before stays in flight:
    /// it may still arrive, and the cumulative ACK on another path settles it; a dead
    /// path's probes declare the rest lost once it is overdue.
    pub(super) fn declare_dead(&mut self, now: Instant, i: usize, died: Option<Instant>) {
        let p = self.paths.get_mut(i);
        p.liveness.dead = true;
        p.liveness.waiting_since = None;
        p.liveness.next_probe = None;
        p.timers.loss_time = None;
        tracing::debug!(
            conn = self.conn_id,
            path = p.id,
            "path silent: declared dead"
        );
        self.lose_path_flight(now, i, |sent, _| died.is_none_or(|d| sent >= d));
        self.paths.count_change();
    }

    /// The peer's in-order point `covered`, reported on path index `j`, waits for a source
    /// a dead path still holds in flight: if that source had time to arrive (half the dead
    /// path's RTT and four of its RTT variations) before the report left (half path `j`'s
    /// RTT ago) it is lost, and its repair is owed at once (`RepairScheduler::owe_hole`). A dead path's flight sent before its estimated death is kept (it may have
    /// arrived, and no ACK of that path reports it), so a random loss among it is only
    /// found here, one hole at a time, as the in-order point reaches it.
    pub(super) fn lose_dead_paths_hole(&mut self, now: Instant, j: usize, covered: u64) {
        if self.paths.len() < 2 {
            return;
        }
        let report = self.paths.get(j).rtt.srtt() / 2;
        for i in 0..self.paths.len() {
            let p = self.paths.get_mut(i);
            if i == j || !p.liveness.dead {
                continue;
            }
            let arrive = p.rtt.srtt() / 2 + p.rtt.rttvar() * 4;
            let Some(by) = now.checked_sub(arrive + report) else {
                continue;
            };
            if p.sent.lose_source(covered, by).is_some() {
                self.repair.owe_hole(now);
                self.stats.lost += 1;
                self.trim_sent(i);
            }
        }
    }

    /// Declares lost what path index `i` has in flight that `lost` accepts by send time
    /// and kind, and owes what that calls for.
    fn lose_path_flight(
        &mut self,
        now: Instant,
        i: usize,
        lost: impl Fn(Instant, SentKind) -> bool,
    ) {
        let p = self.paths.get_mut(i);
        let min_rtt = p.rtt.min_rtt();
        let repair = &mut self.repair;
        let n = p
            .sent
            .declare_lost_sent(lost, |kind| repair.on_lost(now, min_rtt, kind));
        self.stats.lost += n;
        self.trim_sent(i);
        self.owe_tail_shortfall();
    }

    /// Path index `j` was just heard at `now`: a busy path that has gone silent meanwhile
    /// is declared dead at once, without waiting out its own probe timeouts (on a long
    /// path, seconds of stalled delivery). Silent means: nothing heard on it for
    /// [`PathData::silent_after`](super::path::PathData::silent_after), packets on it that
    /// are overdue by as much (sent that long plus its minimum RTT ago, so a path that
    /// merely went idle is not silent), and path `j` heard at two instants since its
    /// silence began (one batch of arrivals read late after a scheduling pause, where
    /// every socket's packets wait alike, is not evidence).
    fn check_silent_paths(&mut self, now: Instant, j: usize) {
        /// Overdue packets that show silence; one tail loss alone does not.
        const OVERDUE: u64 = 3;
        if self.paths.len() < 2 {
            return;
        }
        let Some(before) = self.paths.get(j).liveness.heard_before else {
            return;
        };
        for i in 0..self.paths.len() {
            let p = self.paths.get(i);
            if i == j || !p.usable() || p.sent.in_flight() < OVERDUE {
                continue;
            }
            let (Some(heard), Some(after)) = (p.liveness.heard, p.silent_after()) else {
                continue;
            };
            if now < heard + after || before < heard + after / 2 {
                continue;
            }
            let Some(cutoff) = now.checked_sub(after + p.rtt.min_rtt()) else {
                continue;
            };
            if p.sent.in_flight_sent_by(cutoff, OVERDUE) >= OVERDUE {
                // The last answer left the peer when the path still worked: about half the
                // path's minimum RTT before it arrived (answers carry no queue). What was
                // sent before then reached the peer if the failure took both directions.
                let died = heard.checked_sub(p.rtt.min_rtt() / 2);
                tracing::debug!(
                    conn = self.conn_id,
                    path = p.id,
                    silent = ?(now - heard),
                    "path silent while another answers"
                );

                self.declare_dead(now, i, died);
            }
        }
    }

    /// Paths whose silence has become death by `now` are declared dead. All of them may
    /// be (a total outage): each is probed until one answers, and the idle timeout ends
    /// the session if none does. A single-path session never declares its path dead.
    pub(super) fn check_paths(&mut self, now: Instant) {
        if self.paths.len() < 2 {
            return;
        }
        let mad = self.config.max_ack_delay;
        for i in 0..self.paths.len() {
            if self
                .paths
                .get(i)
                .dead_deadline(mad)
                .is_some_and(|d| now >= d)
            {
                self.declare_dead(now, i, None);
            }
        }
    }

    /// The earliest path deadline: a death, a challenge copy or a probe.
    pub(super) fn paths_timeout(&self) -> Option<Instant> {
        if self.paths.len() < 2 && self.paths.get(0).validation.challenge.is_none() {
            return None;
        }
        let mad = self.config.max_ack_delay;
        (0..self.paths.len())
            .flat_map(|i| {
                let p = self.paths.get(i);
                let probe = self
                    .paths
                    .probed(i)
                    .then(|| p.liveness.next_probe.unwrap_or(self.recv.last_received));
                [p.dead_deadline(mad), p.challenge_deadline(mad), probe]
            })
            .flatten()
            .min()
    }

    /// Path index `i`'s control packet, if one is due: an ACK owed from a batch of
    /// arrivals, a challenge response, a challenge, or a probe of a dead or standby path.
    pub(super) fn poll_path_control(
        &mut self,
        now: Instant,
        buf: &mut Vec<u8>,
        i: usize,
    ) -> Option<Transmit> {
        if self.paths.get(i).liveness.down {
            return None;
        }
        if let Some(ack) = self.paths.get_mut(i).ack.owed.pop_front() {
            // Taken while a batch of arrivals was read (`AckState::owed`): alone, at once.
            self.begin_packet(buf, i);
            ack.emit(buf);
            return Some(self.finish_packet(now, buf, i, SentKind::Control, false));
        }
        if let Some((token, to)) = self.paths.get_mut(i).validation.respond.take() {
            self.begin_packet(buf, i);
            wire::emit_path_response(buf, token);
            return Some(self.finish_packet_to(now, buf, i, SentKind::Control, false, to));
        }
        let mad = self.config.max_ack_delay;
        if let Some((to, token)) = self.paths.get(i).challenge_due(now, mad) {
            self.paths.get_mut(i).on_challenge_sent(now);
            self.begin_packet(buf, i);
            wire::emit_path_challenge(buf, token);
            // Ack-eliciting, so the answer also measures the path's RTT.
            return Some(self.finish_packet_to(now, buf, i, SentKind::Control, true, to));
        }
        let probe_due = self.paths.probed(i) && self.paths.probe_due(i).is_none_or(|t| now >= t);
        if probe_due {
            // What a dead path still holds will not arrive once two of its RTTs have passed:
            // settle it before probing, so its ledger stays bounded however long the path
            // is down. Sources excepted: each is either settled as the peer's in-order point
            // passes it or found lost when that point reaches it (`lose_dead_paths_hole`),
            // so they are bounded by the flight at death, and a loss declared here would
            // owe a repair the deficit cap can drop before the hole is reached.
            let overdue = now.checked_sub(self.paths.get(i).rtt.srtt() * 2);
            self.lose_path_flight(now, i, |sent, kind| {
                !matches!(kind, SentKind::Source(_)) && overdue.is_some_and(|t| sent <= t)
            });
            self.paths.on_probe_sent(i, now);
            self.begin_packet(buf, i);
            self.emit_ack_if_pending(now, buf, i);
            wire::emit_ping(buf);
            let t = self.finish_packet(now, buf, i, SentKind::Control, true);
            // A probe of a dead path must not restart its death clock.
            if self.paths.get(i).liveness.dead {
                self.paths.get_mut(i).liveness.waiting_since = None;
            }
            return Some(t);
        }
        None
    }
}
