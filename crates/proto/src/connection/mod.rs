//! One session between a forward and a reverse proxy: handshake, coded reliability,
//! congestion control, streams and lifecycle, as a pure state machine.
//!
//! Shaped like `quinn_proto::Connection`: feed it datagrams and timeouts with the current
//! `Instant`, then drain [`Connection::poll_transmit`], [`Connection::poll_event`] and
//! [`Connection::poll_timeout`].
//!
//! A `Connection` is a composition of owned parts, each with its own narrow API: the
//! paths (`paths`, each a `path::PathData` with its own sent ledger, ACK state, congestion
//! controller, RTT estimator, pacer and estimators), the repair scheduler
//! (`crate::repair`), the streams (`crate::streams`) and the handshake's state
//! (`handshake`). This file holds the composition and the session's lifecycle; the entry
//! points live by concern in `handshake` (ACCEPT, train, PATH), `receive` (data packets
//! in), `recovery` (ACKs, loss declaration, what losses owe), `timers`, `transmit` (what
//! the next datagram carries), `multipath` (opening, validating, declaring dead and
//! probing paths) and `streams_api`.

use crate::config::TransportConfig;
use crate::crypto::{PacketKey, Psk};
use crate::datagram::Datagrams;
use crate::frame::{OpenResult, StreamId, Target};
use crate::repair::RepairScheduler;
use crate::streams::Streams;
use crate::wire::{
    self, Initiate, ParamMismatch, RejectReason, DATA_HEADER_LEN, RANDOM_LEN, TAG_LEN,
};
use ctcp_rlnc::{CodecConfig, Decoder, Encoder};
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;
use thiserror::Error;

mod ack;
mod datagram;
mod handshake;
mod multipath;
mod path;
mod paths;
mod receive;
mod recovery;
mod stats;
mod streams_api;
mod timers;
mod transmit;

use self::handshake::Handshake;
pub use self::multipath::{PathError, PathInfo};
use self::paths::Paths;
pub use self::stats::ConnectionStats;
use self::timers::Timers;
pub use crate::repair::STALL_ROUNDS;
pub use crate::streams::RESET_REFUSED;

/// Which end of the session this is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// The forward proxy: starts the handshake and opens streams.
    Client,
    /// The reverse proxy: accepts sessions.
    Server,
}

/// Why a session ended.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum ConnectionError {
    /// Nothing authenticated arrived from the peer for the idle timeout.
    #[error("peer silent for the idle timeout")]
    IdleTimeout,
    /// The handshake did not complete in time and nothing answered it (peer down, path
    /// blocked, or a peer too old to say why it refused).
    #[error("handshake timed out: no answer from the peer")]
    HandshakeTimeout,
    /// The peer answered the handshake with a refusal (see [`RejectReason`]).
    #[error("{}", rejected_text(*.reason, *.peer_version))]
    Rejected {
        /// Why.
        reason: RejectReason,
        /// The protocol version the peer speaks.
        peer_version: u8,
    },
    /// A transport parameter both ends must share differs.
    #[error(
        "incompatible transport parameter {}: ours {}, the peer's {}",
        .0.parameter,
        .0.ours,
        .0.peer
    )]
    Incompatible(ParamMismatch),
    /// The peer closed the session. The reason is the peer's text, printed escaped.
    #[error("closed by peer (code {code}): \"{}\"", reason.escape_debug())]
    PeerClosed {
        /// Close code.
        code: u16,
        /// Reason text.
        reason: String,
    },
    /// We closed the session.
    #[error("closed locally")]
    LocallyClosed,
    /// The peer has no state for this session (it restarted).
    #[error("peer restarted (stateless reset)")]
    PeerRestarted,
    /// The peer broke the protocol.
    #[error("protocol violation: {0}")]
    Protocol(&'static str),
}

fn rejected_text(reason: RejectReason, peer_version: u8) -> String {
    match reason {
        RejectReason::Version if peer_version != wire::VERSION => format!(
            "the peer answered but speaks protocol version {peer_version} (ours {}): upgrade both sides",
            wire::VERSION
        ),
        RejectReason::Auth | RejectReason::Version => {
            "the peer answered but the handshake failed (different key or version)".into()
        }
        RejectReason::Params => "the peer refused our transport parameters".into(),
        RejectReason::Busy => {
            "the peer refused the session (at its session limit, or shutting down)".into()
        }
    }
}

/// Something the application should act on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// The handshake completed.
    Connected,
    /// The peer opened a stream towards `target`.
    StreamOpened {
        /// The stream.
        id: StreamId,
        /// Where to connect.
        target: Target,
    },
    /// The peer reported the connect result of a stream we opened.
    OpenResult {
        /// The stream.
        id: StreamId,
        /// How the connect went.
        code: OpenResult,
    },
    /// A stream has data, a FIN or a reset to read.
    StreamReadable(StreamId),
    /// A stream that refused a write can take more.
    StreamWritable(StreamId),
    /// Datagrams arrived: read them with [`Connection::poll_datagram`] (sent when the
    /// inbox turns non-empty).
    DatagramReceived,
    /// The session ended; no further events follow.
    ConnectionLost(ConnectionError),
}

/// Errors of the stream API.
#[derive(Debug, Error, Clone, Copy, PartialEq, Eq)]
pub enum StreamApiError {
    /// No such stream (never opened, or already finished and forgotten).
    #[error("unknown stream")]
    UnknownStream,
    /// The session is not established or has ended.
    #[error("session not established")]
    NotConnected,
    /// Too many open streams.
    #[error("stream limit reached")]
    TooManyStreams,
    /// The stream was reset; nothing more can be written.
    #[error("stream reset")]
    Reset,
}

/// A datagram to send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transmit {
    /// Destination address.
    pub destination: SocketAddr,
    /// Bytes written into the caller's buffer.
    pub size: usize,
    /// The wire id of the path it belongs to (0 for handshake packets, resets and every
    /// packet of a single-path session): a multipath driver sends it from that path's
    /// local socket.
    pub path: u8,
}

/// A GSO batch written by [`crate::Endpoint::poll_transmit_batch`]: `size` bytes for
/// `destination`, datagrams of `segment_size` bytes each but the last.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchTransmit {
    /// Destination address.
    pub destination: SocketAddr,
    /// Bytes written into the caller's buffer, every datagram of the batch.
    pub size: usize,
    /// Length of each datagram but the last (which may be shorter); equal to `size` for
    /// a batch of one.
    pub segment_size: usize,
    /// The wire id of the path every datagram of the batch belongs to (see
    /// [`Transmit::path`]).
    pub path: u8,
}

#[derive(Debug)]
enum State {
    /// Client waiting for ACCEPT.
    Handshake {
        /// The signed INITIATE outside the train (position 0, unpadded).
        initiate: Initiate,
        next_send: Instant,
        attempts: u32,
        /// An unauthenticated REJECT arrived: the session fails at this time with its
        /// reason and the peer's version, unless an ACCEPT comes first (a forged REJECT
        /// must not beat the real server's answer).
        rejected: Option<(Instant, RejectReason, u8)>,
    },
    /// Keys in place.
    Established,
    /// Sending CLOSE (with this code and reason) a few times, then gone.
    Closing {
        remaining_sends: u8,
        code: u16,
        reason: String,
    },
    /// Nothing more to do.
    Drained,
}

/// The session's packet protection: keys once the handshake has them (each path keeps the
/// replay window of its own packet numbers).
#[derive(Debug, Default)]
struct PacketKeys {
    tx: Option<PacketKey>,
    rx: Option<PacketKey>,
}

/// The receive side: the decoder and what arrived when (each path keeps the ACK state of
/// its own packets).
#[derive(Debug)]
struct Receiver {
    decoder: Decoder,
    /// When the peer was last heard from (authenticated).
    last_received: Instant,
    /// Authenticated data packets received; with the highest of their numbers
    /// (`ack.largest`), the peer-to-us loss rate, a prior for our own direction when we
    /// send too little to measure it (see `TailLossSamples::loss`).
    rx_packets: u64,
}

/// Reusable buffers of the send path.
#[derive(Debug)]
struct Buffers {
    /// Where the datagram being written starts in the caller's buffer.
    start: usize,
    /// One repair symbol.
    repair: Vec<u8>,
}

impl Receiver {
    /// Nothing received yet; the decoder holds twice our window (at least twice the
    /// peer's encoder window, which negotiation can only shrink).
    fn new(config: &TransportConfig, now: Instant) -> Self {
        Receiver {
            decoder: Decoder::new(CodecConfig {
                symbol_size: config.symbol_size,
                window: 2 * config.window,
            }),
            last_received: now,
            rx_packets: 0,
        }
    }
}

impl Buffers {
    fn new(symbol_size: usize) -> Self {
        Buffers {
            start: 0,
            repair: vec![0; symbol_size],
        }
    }
}

/// How the endpoint creates a connection.
#[derive(Debug)]
pub(crate) enum Role {
    /// A client: the signed INITIATE (position 0, unpadded) it sends copies of.
    Client(Initiate),
    /// A server that verified an INITIATE: its keys (send, receive) and both randoms.
    Server {
        keys: Box<(PacketKey, PacketKey)>,
        client_random: [u8; RANDOM_LEN],
        server_random: [u8; RANDOM_LEN],
    },
}

/// A session. Created by [`crate::Endpoint`].
#[derive(Debug)]
pub struct Connection {
    side: Side,
    conn_id: u32,
    state: State,
    config: Arc<TransportConfig>,
    psk: Arc<Psk>,
    keys: PacketKeys,
    created: Instant,
    /// The paths (issue 29): each one's address, validation, sent ledger, RTT, loss and
    /// reorder estimates, congestion controller, pacer and receive-side ACK state. A
    /// single-path session has path 0 only.
    paths: Paths,
    /// One coding window over every path: a repair on any path heals a loss on any.
    encoder: Encoder,
    /// What repairs are owed or earned, and which goes next.
    repair: RepairScheduler,
    timers: Timers,
    /// The handshake's state beyond the [`State::Handshake`] variant: randoms, the train
    /// measurement and the ACCEPTs to send (some of it outlives the handshake).
    hs: Handshake,
    bufs: Buffers,
    recv: Receiver,
    streams: Streams,
    /// Datagrams (issue 27): queues, their coder, counters.
    dgram: Datagrams,
    events: VecDeque<Event>,
    stats: ConnectionStats,
}

impl Connection {
    pub(crate) fn new(
        role: Role,
        conn_id: u32,
        remote: SocketAddr,
        now: Instant,
        config: Arc<TransportConfig>,
        psk: Arc<Psk>,
    ) -> Self {
        let (side, state, keys, hs) = match role {
            Role::Client(initiate) => {
                let hs = Handshake::client(initiate.client_random, config.handshake_train > 0);
                let state = State::Handshake {
                    initiate,
                    next_send: now,
                    attempts: 0,
                    rejected: None,
                };
                (Side::Client, state, PacketKeys::default(), hs)
            }
            Role::Server {
                keys,
                client_random,
                server_random,
            } => {
                let (tx, rx) = *keys;
                let keys = PacketKeys {
                    tx: Some(tx),
                    rx: Some(rx),
                };
                let hs = Handshake::server(client_random, server_random);
                (Side::Server, State::Established, keys, hs)
            }
        };
        Connection {
            side,
            conn_id,
            state,
            psk,
            keys,
            created: now,
            paths: Paths::new(remote, &config),
            encoder: Encoder::new(CodecConfig {
                symbol_size: config.symbol_size,
                window: config.window,
            }),
            repair: RepairScheduler::new(config.proactive_repair),
            timers: Timers::default(),
            hs,
            bufs: Buffers::new(config.symbol_size),
            recv: Receiver::new(&config, now),
            streams: Streams::new(side, conn_id, &config),
            dgram: Datagrams::new(config.symbol_size),
            events: VecDeque::new(),
            stats: ConnectionStats::default(),
            config,
        }
    }

    /// The session's connection id.
    pub fn id(&self) -> u32 {
        self.conn_id
    }

    /// Which end this is.
    pub fn side(&self) -> Side {
        self.side
    }

    /// The peer's current address on path 0 (it follows NAT rebinding once the new
    /// address answers a challenge).
    pub fn remote(&self) -> SocketAddr {
        self.paths.get(0).remote
    }

    /// Whether the handshake completed and the session has not ended.
    pub fn is_established(&self) -> bool {
        matches!(self.state, State::Established)
    }

    /// Whether the session has ended and can be dropped.
    pub fn is_drained(&self) -> bool {
        matches!(self.state, State::Drained)
    }

    /// Stream bytes sent so far (first transmissions), without building the whole
    /// [`ConnectionStats`]: cheap enough to read after every datagram.
    pub fn stream_bytes_sent(&self) -> u64 {
        self.streams.data_sent()
    }

    /// Counters for logs and metrics.
    pub fn stats(&self) -> ConnectionStats {
        let mut s = self.stats;
        // The lead path's measurements; window and flight are the sum over paths.
        let lead = self.paths.lead();
        let p = self.paths.get(lead);
        s.srtt = p.rtt.srtt();
        s.min_rtt = p.rtt.min_rtt();
        s.round_min = p.rtt.round_min();
        s.slow_start = p.cc.in_slow_start();
        s.in_flight = self.paths.iter().map(|p| p.sent.in_flight()).sum();
        s.repair_debt = self.repair.debt_len();
        s.stream_bytes_sent = self.stream_bytes_sent();
        s.peer_deficit = self.repair.peer_deficit();
        s.unacked_symbols = self.encoder.len() as u64;
        s.cwnd = self.paths.iter().map(|p| p.cc.window()).sum();
        s.loss = p.loss.short();
        s.repair_ratio = self.current_repair_ratio(lead);
        s.backoffs = self.paths.iter().map(|p| p.cc.backoffs()).sum();
        s.jitter = p.rtt.jitter();
        s.paths = self.paths.len() as u8;
        s.path_changes = self.paths.changes;
        s
    }

    /// Number of open streams.
    pub fn stream_count(&self) -> usize {
        self.streams.len()
    }

    /// Whether closing now loses nothing: no stream is open and every source symbol sent
    /// has been acknowledged (stream data leaves the stream once it is in a symbol, so an
    /// empty stream table alone does not mean the peer has it).
    pub fn is_quiescent(&self) -> bool {
        self.streams.is_idle() && self.encoder.is_empty()
    }

    /// The parameters the session runs with (negotiated once established).
    pub fn params(&self) -> wire::Params {
        // The windows are the credits streams and the session started with; each end's
        // own window (how far it grants beyond them) stays its own.
        let (stream_window, session_window) = self.streams.initial_credit();
        wire::Params {
            stream_window,
            session_window,
            ..self.config.params()
        }
    }

    pub(crate) fn handle_reset(&mut self) {
        if !matches!(self.state, State::Drained) {
            self.lose(ConnectionError::PeerRestarted);
        }
    }

    /// Next event for the application.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// Closes the session gracefully.
    pub fn close(&mut self, code: u16, reason: &str) {
        if matches!(self.state, State::Drained | State::Closing { .. }) {
            return;
        }
        if self.keys.tx.is_none() {
            self.state = State::Drained;
            self.events
                .push_back(Event::ConnectionLost(ConnectionError::LocallyClosed));
            return;
        }
        self.state = State::Closing {
            remaining_sends: 3,
            code,
            reason: reason.to_owned(),
        };
        self.events
            .push_back(Event::ConnectionLost(ConnectionError::LocallyClosed));
    }

    fn close_with(&mut self, err: ConnectionError) {
        tracing::debug!(conn = self.conn_id, error = %err, "closing session");
        let reason = err.to_string();
        self.close(1, &reason);
    }

    fn lose(&mut self, err: ConnectionError) {
        tracing::debug!(conn = self.conn_id, error = %err, "session lost");
        self.state = State::Drained;
        self.events.push_back(Event::ConnectionLost(err));
    }

    /// Bytes a repair datagram carries beyond its symbol: `symbol_size` plus this must
    /// fit `max_datagram` (ACKs then ride in source packets, which shrink to make room).
    pub fn max_overhead() -> usize {
        DATA_HEADER_LEN + wire::REPAIR_HEADER_LEN + TAG_LEN
    }
}
