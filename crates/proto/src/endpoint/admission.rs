//! Session admission: checking an INITIATE for a new session (authentication, clock
//! skew, replay, parameters, rate and session limits), answering refusals with REJECTs,
//! and creating the server's connection.

use super::{Endpoint, Refusal};
use crate::connection::{Connection, Role};
use crate::wire::{self, Initiate, Reject, RejectReason, RANDOM_LEN};
use rand::RngCore;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

impl Endpoint {
    /// Queues a REJECT of the INITIATE `request` (raw bytes) to `to`, if the rate limit
    /// allows and it is no larger than the request (never an amplifier). A signed one
    /// needs the verified INITIATE's client random and carries our parameters.
    fn reject(
        &mut self,
        to: SocketAddr,
        conn_id: u32,
        request: &[u8],
        reason: RejectReason,
        signed_for: Option<&[u8; RANDOM_LEN]>,
    ) {
        let Some(echo) = Reject::echo_of(request) else {
            return;
        };
        let mut reject = Reject {
            version: wire::VERSION,
            conn_id,
            echo,
            reason,
            signed: None,
        };
        if let Some(client_random) = signed_for {
            reject.signed = Some((self.config.transport.params(), [0; wire::MAC_LEN]));
            self.config.psk.sign_reject(&mut reject, client_random);
        }
        let len = if reject.signed.is_some() {
            wire::REJECT_SIGNED_LEN
        } else {
            wire::REJECT_LEN
        };
        if request.len() < len || self.reject_tokens < 1.0 {
            return;
        }
        self.reject_tokens -= 1.0;
        let mut out = Vec::with_capacity(len);
        reject.emit(&mut out);
        self.outbox.push_back((to, 0, out));
        self.drops.rejects_sent += 1;
    }

    pub(super) fn handle_initiate(
        &mut self,
        now: Instant,
        from: SocketAddr,
        conn_id: u32,
        data: &[u8],
    ) {
        if !self.config.accept_sessions {
            self.drops.malformed += 1;
            return;
        }
        let Some(init) = self.verified_initiate(now, from, conn_id, data) else {
            return;
        };
        if let Some(existing) = self.connections.get_mut(&init.conn_id) {
            if existing.answers_handshake(&init.client_random) {
                // A retransmitted INITIATE: answer again (to the session's address, not
                // necessarily the sender's).
                existing.on_initiate(now, &init);
            } else {
                // Another client drew an id in use (32 random bits, so rare but possible).
                // Refuse it: the live session keeps its id, keys and address, and the new
                // client's handshake times out, after which it connects again with a
                // fresh id.
                self.drops.refused += 1;
                tracing::debug!(%from, conn = init.conn_id, "handshake refused: connection id in use");
            }
            return;
        }
        if !self.is_fresh(now, from, &init) {
            return;
        }
        let Some(params) = self.negotiate(now, from, &init, data) else {
            return;
        };
        if !self.has_room(from, &init, data) {
            return;
        }
        self.handshake_tokens -= 1.0;
        self.seen_randoms
            .insert(init.client_random, now + 2 * self.config.max_clock_skew);
        let mut server_random = [0u8; RANDOM_LEN];
        self.rng.fill_bytes(&mut server_random);
        let (c2s, s2c) = self
            .config
            .psk
            .session_keys(&init.client_random, &server_random);
        let mut conn = Connection::new(
            Role::Server {
                keys: Box::new((s2c, c2s)),
                client_random: init.client_random,
                server_random,
            },
            init.conn_id,
            from,
            now,
            if params == self.config.transport.params() {
                self.config.transport.clone()
            } else {
                Arc::new(self.config.transport.with_params(&params))
            },
            self.config.psk.clone(),
        );
        // Streams and the session start with the agreed credit, not this end's offer.
        conn.apply_params(&params);
        conn.on_initiate(now, &init);
        tracing::debug!(%from, conn = init.conn_id, "session accepted");
        self.insert(init.conn_id, conn);
    }

    /// Parses and authenticates an INITIATE, answering a wrong version or key with a
    /// REJECT where that is safe.
    fn verified_initiate(
        &mut self,
        now: Instant,
        from: SocketAddr,
        conn_id: u32,
        data: &[u8],
    ) -> Option<Initiate> {
        let init = match Initiate::parse(data) {
            Ok(init) => init,
            Err(e) => {
                self.drops.malformed += 1;
                if let wire::WireError::Version(v) = e {
                    if let Some(suppressed) = self.warn.allow(Refusal::Version, now) {
                        tracing::warn!(%from, version = v, ours = wire::VERSION, suppressed, "handshake from {from} uses another protocol version: upgrade both sides");
                    }
                    self.reject(from, conn_id, data, RejectReason::Version, None);
                }
                return None;
            }
        };
        if self.config.psk.verify_initiate(&init).is_err() {
            self.drops.bad_handshake += 1;
            if let Some(suppressed) = self.warn.allow(Refusal::Auth, now) {
                tracing::warn!(%from, suppressed, "handshake from {from} failed authentication — key mismatch?");
            } else {
                tracing::debug!(%from, "handshake with a bad MAC (wrong PSK?)");
            }
            self.reject(from, conn_id, data, RejectReason::Auth, None);
            return None;
        }
        Some(init)
    }

    /// Whether a new INITIATE is within the allowed clock skew and not a replay.
    fn is_fresh(&mut self, now: Instant, from: SocketAddr, init: &Initiate) -> bool {
        if let Some(ours) = self.unix_ms(now) {
            if ours.abs_diff(init.timestamp_ms) > self.config.max_clock_skew.as_millis() as u64 {
                self.drops.bad_handshake += 1;
                tracing::debug!(%from, "handshake timestamp outside the allowed clock skew");
                return false;
            }
        }
        self.seen_randoms.retain(|_, exp| *exp > now);
        if self.seen_randoms.contains_key(&init.client_random) {
            self.drops.bad_handshake += 1;
            tracing::debug!(%from, "replayed handshake dropped");
            return false;
        }
        true
    }

    /// The parameters a new session runs with, or `None` (and a signed REJECT) if the
    /// client's differ where both must agree.
    fn negotiate(
        &mut self,
        now: Instant,
        from: SocketAddr,
        init: &Initiate,
        data: &[u8],
    ) -> Option<wire::Params> {
        match self.config.transport.params().negotiate(&init.params) {
            Ok(p) => Some(p),
            Err(m) => {
                self.drops.refused += 1;
                if let Some(suppressed) = self.warn.allow(Refusal::Params, now) {
                    tracing::warn!(%from, parameter = m.parameter, ours = m.ours, peer = m.peer, suppressed,
                        "handshake from {from} refused: {} differs (ours {}, the peer's {})", m.parameter, m.ours, m.peer);
                }
                self.reject(
                    from,
                    init.conn_id,
                    data,
                    RejectReason::Params,
                    Some(&init.client_random),
                );
                None
            }
        }
    }

    /// Whether a new session may start now: the endpoint accepts sessions and is within
    /// its handshake rate and session limits (a REJECT says which is not, where it helps).
    fn has_room(&mut self, from: SocketAddr, init: &Initiate, data: &[u8]) -> bool {
        if !self.accepting {
            self.drops.refused += 1;
            tracing::debug!(%from, "handshake refused: shutting down");
            self.reject(
                from,
                init.conn_id,
                data,
                RejectReason::Busy,
                Some(&init.client_random),
            );
            return false;
        }
        let held = self.sessions_held();
        if self.handshake_tokens < 1.0 || held >= self.config.max_sessions {
            self.drops.refused += 1;
            tracing::info!(%from, sessions = held, "handshake refused: session or rate limit reached");
            if held >= self.config.max_sessions {
                self.reject(
                    from,
                    init.conn_id,
                    data,
                    RejectReason::Busy,
                    Some(&init.client_random),
                );
            }
            return false;
        }
        true
    }
}
