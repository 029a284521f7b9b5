//! Demultiplexes datagrams to sessions and runs the handshake.
//!
//! One `Endpoint` per UDP socket. The client side calls [`Endpoint::connect`]; the server
//! side accepts sessions from INITIATEs that carry a valid PSK MAC. Nothing is allocated
//! for a datagram until it has authenticated, and the only unsolicited replies (ACCEPT,
//! stateless RESET) are never larger than the datagram that caused them.

use crate::config::TransportConfig;
use crate::connection::{BatchTransmit, Connection, Event, Role, Transmit};
use crate::crypto::Psk;
use crate::wire::{self, Accept, Initiate, Reject, Reset, RANDOM_LEN};
use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha20Rng;
use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

mod admission;

/// Names a session within an endpoint (its connection id).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnectionHandle(pub u32);

/// The shard that owns connection id `conn_id` when `shards` endpoints (one per worker)
/// share one socket address: the id's four wire bytes (little-endian) read as a
/// big-endian number, modulo `shards`. Every datagram names its connection id, so
/// whichever shard reads it can hand it to the owner; the big-endian reading is what a
/// kernel socket-selection program's word load sees (the runtime's reuseport filter), so
/// the kernel computes the same index from the packet.
pub fn shard_of(conn_id: u32, shards: usize) -> usize {
    let key = conn_id.swap_bytes();
    match u32::try_from(shards) {
        Ok(0) => 0,
        Ok(n) => (key % n) as usize,
        // More shards than ids: every id is its own shard.
        Err(_) => key as usize,
    }
}

/// Which connection ids an endpoint owns when it is one of several shards behind one
/// socket address (see [`shard_of`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    /// This endpoint's index, `0..count`.
    pub index: usize,
    /// How many shards there are.
    pub count: usize,
}

impl Shard {
    /// Whether `conn_id` belongs to this shard.
    pub fn owns(self, conn_id: u32) -> bool {
        shard_of(conn_id, self.count) == self.index
    }
}

/// Endpoint-wide settings.
#[derive(Debug, Clone)]
pub struct EndpointConfig {
    /// The pre-shared key both sides hold.
    pub psk: Arc<Psk>,
    /// Transport parameters for every session.
    pub transport: Arc<TransportConfig>,
    /// Whether to accept sessions (reverse proxy) or only initiate them (forward proxy).
    pub accept_sessions: bool,
    /// Most concurrent sessions accepted.
    pub max_sessions: usize,
    /// Handshakes accepted per second (token bucket); excess INITIATEs are dropped.
    pub handshake_rate: u32,
    /// Largest accepted difference between a client's handshake timestamp and our clock.
    pub max_clock_skew: Duration,
    /// Set when this endpoint is one shard of several: the sessions it starts get ids it
    /// owns, so the peer's datagrams are steered back to it.
    pub shard: Option<Shard>,
    /// Live sessions of every shard of the process, when several share
    /// [`EndpointConfig::max_sessions`]; `None` counts this endpoint's sessions alone.
    pub session_count: Option<Arc<AtomicUsize>>,
}

impl EndpointConfig {
    /// Default of [`EndpointConfig::max_sessions`] (and of the reverse proxy's
    /// `max_sessions` setting).
    pub const DEFAULT_MAX_SESSIONS: usize = 256;
    /// Default of [`EndpointConfig::handshake_rate`] (and of the reverse proxy's
    /// `handshake_rate` setting).
    pub const DEFAULT_HANDSHAKE_RATE: u32 = 64;

    /// Settings with defaults for everything but the key.
    pub fn new(psk: Psk, transport: TransportConfig, accept_sessions: bool) -> Self {
        EndpointConfig {
            psk: Arc::new(psk),
            transport: Arc::new(transport),
            accept_sessions,
            max_sessions: Self::DEFAULT_MAX_SESSIONS,
            handshake_rate: Self::DEFAULT_HANDSHAKE_RATE,
            max_clock_skew: Duration::from_secs(120),
            shard: None,
            session_count: None,
        }
    }
}

/// Why a datagram was dropped; counted for metrics and tests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DropCounters {
    /// Datagrams that did not parse.
    pub malformed: u64,
    /// Handshakes with a bad MAC, stale timestamp, or replayed random; resets with a bad
    /// token.
    pub bad_handshake: u64,
    /// Handshakes refused by the rate limit or the session limit, or naming a connection id
    /// a live session already has (another client's handshake).
    pub refused: u64,
    /// Data, accept and reset packets for unknown sessions.
    pub unknown_session: u64,
    /// Stateless resets sent.
    pub resets_sent: u64,
    /// REJECTs sent (answers to refused INITIATEs).
    pub rejects_sent: u64,
}

/// How often each kind of refused handshake is logged at warn level; the ones in between
/// are counted and reported with the next warning.
const WARN_INTERVAL: Duration = Duration::from_secs(10);
/// REJECTs sent per second at most (token bucket), like stateless resets.
const REJECT_RATE: f64 = 16.0;

/// The kinds of refused handshake that are worth an operator's attention.
#[derive(Debug, Clone, Copy)]
enum Refusal {
    Auth,
    Version,
    Params,
}

/// Rate limit for the warn-level log of refused handshakes: one per kind per
/// [`WARN_INTERVAL`], so a flood of forged INITIATEs cannot flood the log.
#[derive(Debug, Default)]
struct WarnLimiter {
    last: [Option<Instant>; 3],
    suppressed: [u64; 3],
}

impl WarnLimiter {
    /// Whether to log now, and how many were suppressed since the last log.
    fn allow(&mut self, kind: Refusal, now: Instant) -> Option<u64> {
        let i = kind as usize;
        if self.last[i].is_some_and(|t| now.saturating_duration_since(t) < WARN_INTERVAL) {
            self.suppressed[i] += 1;
            return None;
        }
        self.last[i] = Some(now);
        Some(std::mem::take(&mut self.suppressed[i]))
    }
}

/// A UDP endpoint's worth of sessions.
#[derive(Debug)]
pub struct Endpoint {
    config: EndpointConfig,
    rng: ChaCha20Rng,
    connections: HashMap<u32, Connection>,
    order: Vec<u32>,
    cursor: usize,
    /// Client randoms of accepted handshakes, for replay rejection, with their expiry.
    seen_randoms: HashMap<[u8; RANDOM_LEN], Instant>,
    /// Datagrams to send before any session's: (destination, path id, bytes).
    outbox: VecDeque<(SocketAddr, u8, Vec<u8>)>,
    handshake_tokens: f64,
    reset_tokens: f64,
    reject_tokens: f64,
    /// False once [`Endpoint::stop_accepting`] ran: INITIATEs are refused as busy.
    accepting: bool,
    warn: WarnLimiter,
    last_refill: Option<Instant>,
    wall_clock: Option<(Instant, u64)>,
    drops: DropCounters,
}

impl Endpoint {
    /// Creates an endpoint; `seed` drives every random choice (ids, handshake randoms, keys).
    pub fn new(config: EndpointConfig, seed: [u8; 32]) -> Self {
        Endpoint {
            handshake_tokens: f64::from(config.handshake_rate),
            reset_tokens: 16.0,
            reject_tokens: REJECT_RATE,
            accepting: true,
            warn: WarnLimiter::default(),
            config,
            rng: ChaCha20Rng::from_seed(seed),
            connections: HashMap::new(),
            order: Vec::new(),
            cursor: 0,
            seen_randoms: HashMap::new(),
            outbox: VecDeque::new(),
            last_refill: None,
            wall_clock: None,
            drops: DropCounters::default(),
        }
    }

    /// Tells the endpoint the wall-clock time (ms since the Unix epoch) at `now`, for
    /// handshake timestamps. Without it, timestamps are neither sent meaningfully nor checked.
    pub fn set_wall_clock(&mut self, now: Instant, unix_ms: u64) {
        self.wall_clock = Some((now, unix_ms));
    }

    fn unix_ms(&self, now: Instant) -> Option<u64> {
        self.wall_clock
            .map(|(at, ms)| ms + now.saturating_duration_since(at).as_millis() as u64)
    }

    /// Stops accepting new sessions (graceful shutdown): an INITIATE with a valid MAC is
    /// answered with a signed busy REJECT, and live sessions carry on.
    pub fn stop_accepting(&mut self) {
        self.accepting = false;
    }

    /// Datagrams dropped and why.
    pub fn drops(&self) -> DropCounters {
        self.drops
    }

    /// Number of live sessions.
    pub fn connection_count(&self) -> usize {
        self.connections.len()
    }

    /// Live sessions counted against [`EndpointConfig::max_sessions`]: every shard's when
    /// they share a count, else this endpoint's.
    fn sessions_held(&self) -> usize {
        self.config
            .session_count
            .as_ref()
            .map_or(self.connections.len(), |c| c.load(Ordering::Relaxed))
    }

    /// Handles of all live sessions.
    pub fn handles(&self) -> Vec<ConnectionHandle> {
        self.order.iter().map(|&c| ConnectionHandle(c)).collect()
    }

    /// A session.
    pub fn connection(&self, h: ConnectionHandle) -> Option<&Connection> {
        self.connections.get(&h.0)
    }

    /// A session, mutably (stream API).
    pub fn connection_mut(&mut self, h: ConnectionHandle) -> Option<&mut Connection> {
        self.connections.get_mut(&h.0)
    }

    /// Starts a session to `remote`.
    pub fn connect(&mut self, now: Instant, remote: SocketAddr) -> ConnectionHandle {
        let shard = self.config.shard;
        let mut conn_id = self.rng.next_u32();
        while self.connections.contains_key(&conn_id) || shard.is_some_and(|s| !s.owns(conn_id)) {
            conn_id = self.rng.next_u32();
        }
        let mut client_random = [0u8; RANDOM_LEN];
        self.rng.fill_bytes(&mut client_random);
        let mut initiate = Initiate {
            conn_id,
            client_random,
            timestamp_ms: self.unix_ms(now).unwrap_or(0),
            train: 0,
            params: self.config.transport.params(),
            len: wire::INITIATE_LEN,
            mac: [0; wire::MAC_LEN],
        };
        self.config.psk.sign_initiate(&mut initiate);
        let conn = Connection::new(
            Role::Client(initiate),
            conn_id,
            remote,
            now,
            self.config.transport.clone(),
            self.config.psk.clone(),
        );
        self.insert(conn_id, conn);
        ConnectionHandle(conn_id)
    }

    fn insert(&mut self, id: u32, conn: Connection) {
        self.connections.insert(id, conn);
        self.order.push(id);
        if let Some(c) = &self.config.session_count {
            c.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn refill(&mut self, now: Instant) {
        let elapsed = self
            .last_refill
            .map_or(Duration::ZERO, |t| now.saturating_duration_since(t));
        self.last_refill = Some(now);
        let rate = f64::from(self.config.handshake_rate);
        self.handshake_tokens =
            (self.handshake_tokens + rate * elapsed.as_secs_f64()).min(rate.max(1.0));
        self.reset_tokens = (self.reset_tokens + 16.0 * elapsed.as_secs_f64()).min(16.0);
        self.reject_tokens =
            (self.reject_tokens + REJECT_RATE * elapsed.as_secs_f64()).min(REJECT_RATE);
    }

    /// Processes one received datagram. `data` is decrypted in place.
    pub fn handle_datagram(&mut self, now: Instant, from: SocketAddr, data: &mut [u8]) {
        self.refill(now);
        let Ok((ty, conn_id)) = wire::peek_conn_id(data) else {
            self.drops.malformed += 1;
            return;
        };
        match ty {
            ty if wire::data_path(ty).is_some() => {
                if let Some(c) = self.connections.get_mut(&conn_id) {
                    c.handle_data(now, from, data);
                } else {
                    self.drops.unknown_session += 1;
                    self.maybe_reset(from, conn_id, data.len());
                }
            }
            wire::TYPE_INITIATE => self.handle_initiate(now, from, conn_id, data),
            wire::TYPE_ACCEPT => {
                let Ok(accept) = Accept::parse(data) else {
                    self.drops.malformed += 1;
                    return;
                };
                if let Some(c) = self.connections.get_mut(&conn_id) {
                    c.handle_accept(now, &accept);
                } else {
                    self.drops.unknown_session += 1;
                }
            }
            wire::TYPE_REJECT => {
                let Ok(reject) = Reject::parse(data) else {
                    self.drops.malformed += 1;
                    return;
                };
                if let Some(c) = self.connections.get_mut(&conn_id) {
                    c.handle_reject(now, &reject);
                } else {
                    self.drops.unknown_session += 1;
                }
            }
            wire::TYPE_RESET => {
                let Ok(reset) = Reset::parse(data) else {
                    self.drops.malformed += 1;
                    return;
                };
                if self.config.psk.verify_reset(&reset).is_err() {
                    self.drops.bad_handshake += 1;
                } else if let Some(c) = self.connections.get_mut(&conn_id) {
                    c.handle_reset();
                } else {
                    self.drops.unknown_session += 1;
                }
            }
            _ => self.drops.malformed += 1,
        }
    }

    fn maybe_reset(&mut self, to: SocketAddr, conn_id: u32, incoming_len: usize) {
        // Answer only DATA packets that carry something: never amplify, and never answer a
        // reset-sized packet (no reset loops; RESET_LEN < MIN_DATA_LEN is asserted).
        if incoming_len <= wire::MIN_DATA_LEN || self.reset_tokens < 1.0 {
            return;
        }
        self.reset_tokens -= 1.0;
        let reset = Reset {
            conn_id,
            token: self.config.psk.reset_token(conn_id),
        };
        let mut out = Vec::with_capacity(wire::RESET_LEN);
        reset.emit(&mut out);
        self.outbox.push_back((to, 0, out));
        self.drops.resets_sent += 1;
    }

    /// The next datagram to send, round-robin across sessions.
    #[must_use]
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
        if let Some((to, path, bytes)) = self.outbox.pop_front() {
            buf.clear();
            buf.extend_from_slice(&bytes);
            return Some(Transmit {
                destination: to,
                size: bytes.len(),
                path,
            });
        }
        let n = self.order.len();
        for i in 0..n {
            let idx = (self.cursor + i) % n;
            let id = self.order[idx];
            if let Some(c) = self.connections.get_mut(&id) {
                if let Some(t) = c.poll_transmit(now, buf) {
                    self.cursor = (idx + 1) % n;
                    return Some(t);
                }
            }
        }
        None
    }

    /// Writes a batch of datagrams for one destination into `buf` (cleared first), for one
    /// GSO send: up to `max_datagrams` of them, each [`BatchTransmit::segment_size`] bytes
    /// but the last, which may be shorter. Each datagram is built and sealed where it is
    /// sent from; the caller hands `buf[..size]` to the socket as is. One session fills a
    /// batch; the next call starts with the next session (round-robin).
    #[must_use]
    pub fn poll_transmit_batch(
        &mut self,
        now: Instant,
        max_datagrams: usize,
        buf: &mut Vec<u8>,
    ) -> Option<BatchTransmit> {
        buf.clear();
        if let Some((to, path, bytes)) = self.outbox.pop_front() {
            buf.extend_from_slice(&bytes);
            return Some(BatchTransmit {
                destination: to,
                size: bytes.len(),
                segment_size: bytes.len(),
                path,
            });
        }
        let n = self.order.len();
        for i in 0..n {
            let idx = (self.cursor + i) % n;
            let id = self.order[idx];
            let Some(c) = self.connections.get_mut(&id) else {
                continue;
            };
            let Some(first) = c.poll_transmit_append(now, buf) else {
                continue;
            };
            self.cursor = (idx + 1) % n;
            let segment_size = first.size;
            for _ in 1..max_datagrams {
                let start = buf.len();
                let Some(t) = c.poll_transmit_append(now, buf) else {
                    break;
                };
                if t.destination != first.destination
                    || t.path != first.path
                    || t.size > segment_size
                {
                    // Cannot ride this batch (a full datagram behind a short one): it goes
                    // first in the next.
                    let held = buf.split_off(start);
                    self.outbox.push_front((t.destination, t.path, held));
                    break;
                }
                if t.size < segment_size {
                    break;
                }
            }
            return Some(BatchTransmit {
                destination: first.destination,
                size: buf.len(),
                segment_size,
                path: first.path,
            });
        }
        None
    }

    /// Earliest time [`Endpoint::handle_timeout`] must run.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.connections
            .values()
            .filter_map(|c| c.poll_timeout())
            .min()
    }

    /// Runs due timers of every session.
    pub fn handle_timeout(&mut self, now: Instant) {
        for c in self.connections.values_mut() {
            if c.poll_timeout().is_some_and(|t| t <= now) {
                c.handle_timeout(now);
            }
        }
    }

    /// The next event of any session. Drained sessions are dropped once their events are out.
    pub fn poll_event(&mut self) -> Option<(ConnectionHandle, Event)> {
        for &id in &self.order {
            if let Some(c) = self.connections.get_mut(&id) {
                if let Some(e) = c.poll_event() {
                    return Some((ConnectionHandle(id), e));
                }
            }
        }
        let drained: Vec<u32> = self
            .order
            .iter()
            .copied()
            .filter(|id| self.connections.get(id).is_none_or(|c| c.is_drained()))
            .collect();
        for id in drained {
            if self.connections.remove(&id).is_some() {
                if let Some(c) = &self.config.session_count {
                    c.fetch_sub(1, Ordering::Relaxed);
                }
            }
            self.order.retain(|&x| x != id);
        }
        if self.cursor >= self.order.len() {
            self.cursor = 0;
        }
        None
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        // The shared count outlives this shard: give back the sessions it still held.
        if let Some(c) = &self.config.session_count {
            c.fetch_sub(self.connections.len(), Ordering::Relaxed);
        }
    }
}
