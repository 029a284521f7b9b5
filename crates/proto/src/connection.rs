//! One session between a forward and a reverse proxy: handshake, coded reliability,
//! congestion control, streams and lifecycle, as a pure state machine.
//!
//! Shaped like `quinn_proto::Connection`: feed it datagrams and timeouts with the current
//! `Instant`, then drain [`Connection::poll_transmit`], [`Connection::poll_event`] and
//! [`Connection::poll_timeout`].

use crate::cc::{new_controller, CcConfig, Controller};
use crate::config::TransportConfig;
use crate::crypto::{open_data, PacketKey, Psk, ReplayWindow};
use crate::estimate::loss::LossEstimator;
use crate::estimate::reorder::ReorderEstimator;
use crate::frame::{Frame, Frames, StreamId, Target};
use crate::handshake_train::{self, Arrivals};
use crate::pacer::Pacer;
use crate::redundancy::RedundancyPolicy;
use crate::repair_debt::RepairDebt;
use crate::rtt::RttEstimator;
use crate::stream::{ReadOutcome, RecvHalf, SendHalf, StreamError};
use crate::wire::{
    self, Accept, Ack, Chunk, Chunks, DataHeader, Initiate, DATA_HEADER_LEN, RANDOM_LEN, TAG_LEN,
};
use ctcp_rlnc::{CodecConfig, Decoder, Encoder, SymbolId};
use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use thiserror::Error;

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
    /// The handshake did not complete in time (wrong key, peer down, or path blocked).
    #[error("handshake timed out")]
    HandshakeTimeout,
    /// The peer closed the session.
    #[error("closed by peer (code {code}): {reason}")]
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
        /// 0 = connected, else a failure code.
        code: u8,
    },
    /// A stream has data, a FIN or a reset to read.
    StreamReadable(StreamId),
    /// A stream that refused a write can take more.
    StreamWritable(StreamId),
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
}

/// Counters for logs and metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ConnectionStats {
    /// Datagrams sent.
    pub datagrams_sent: u64,
    /// Datagrams received and authenticated.
    pub datagrams_received: u64,
    /// Bytes put on the wire.
    pub bytes_sent: u64,
    /// Source symbols sent.
    pub source_sent: u64,
    /// Repair symbols sent.
    pub repair_sent: u64,
    /// Bytes of source symbol payload sent.
    pub source_bytes_sent: u64,
    /// Bytes of repair symbols sent.
    pub repair_bytes_sent: u64,
    /// Repairs sent by origin: `[reactive (owed for a loss or deficit, or by the stall
    /// watch), proactive (the loss-rate credit), tail (sent into an idle tail), start-up
    /// margin (an extra copy for every second reactive repair lost early in a busy
    /// spell)]`, to see which one costs what.
    pub repair_origin: [u64; 4],
    /// Packets declared lost.
    pub lost: u64,
    /// Stream bytes delivered to the application.
    pub stream_bytes_read: u64,
    /// Smoothed RTT.
    pub srtt: Duration,
    /// Minimum RTT.
    pub min_rtt: Duration,
    /// Minimum RTT over the last round trip (queueing shows here first).
    pub round_min: Duration,
    /// Whether the congestion controller is in slow start.
    pub slow_start: bool,
    /// Packets in flight.
    pub in_flight: u64,
    /// Repairs owed to the peer right now.
    pub repair_debt: u32,
    /// The peer's last reported decoder deficit.
    pub peer_deficit: u32,
    /// Source symbols sent and not yet acknowledged in order.
    pub unacked_symbols: u64,
    /// Congestion window in packets.
    pub cwnd: u64,
    /// Short-term loss estimate.
    pub loss: f64,
    /// Current proactive repair ratio (repairs per source symbol).
    pub repair_ratio: f64,
    /// Stream bytes put into source symbols and sent (first transmissions; stream data is
    /// never re-sent, lost symbols are recovered by repairs).
    pub stream_bytes_sent: u64,
    /// Repair symbols received.
    pub repairs_received: u64,
    /// Repair symbols received that added nothing (every symbol they cover was already
    /// known or decodable): the sender's wasted redundancy, as seen by this receiver.
    pub repairs_useless: u64,
    /// Repairs sent because the peer's in-order point stood still for
    /// [`STALL_ROUNDS`] loss-detection delays, and at least 250 ms (counted among the
    /// reactive ones too).
    pub stall_repairs: u64,
}

#[derive(Debug, Clone, Copy)]
enum SentKind {
    /// Carried source symbol `id`.
    Source(SymbolId),
    /// Carried a repair whose range ends before `end`. Only a reactive one
    /// ([`RepairOrigin::Debt`], for a declared loss) is owed again when lost.
    Repair { end: SymbolId, origin: RepairOrigin },
    /// Only ACK/PING/CLOSE.
    Control,
}

#[derive(Debug, Clone, Copy)]
struct SentPacket {
    time: Instant,
    kind: SentKind,
    ack_eliciting: bool,
    in_flight: bool,
    acked: bool,
    lost: bool,
    /// Acknowledged by its own transmission number (also after a spurious loss).
    delivered: bool,
    /// Made obsolete by the cumulative symbol ACK without an acknowledgement of its own,
    /// although a later packet was acknowledged: the peer decoded around it, so it was lost.
    vanished: bool,
}

#[derive(Debug)]
enum State {
    /// Client waiting for ACCEPT.
    Handshake {
        /// The signed INITIATE outside the train (position 0, unpadded).
        initiate: Initiate,
        next_send: Instant,
        attempts: u32,
    },
    /// Keys in place.
    Established,
    /// Sending CLOSE a few times, then gone.
    Closing { remaining_sends: u8 },
    /// Nothing more to do.
    Drained,
}

#[derive(Debug)]
struct Stream {
    send: SendHalf,
    recv: RecvHalf,
    write_blocked: bool,
    read_notified: bool,
}

#[derive(Debug, Default)]
struct AckState {
    largest: Option<u64>,
    largest_time: Option<Instant>,
    bitmap: u64,
    unacked_eliciting: u32,
    pending: bool,
    immediate: bool,
    deadline: Option<Instant>,
}

impl AckState {
    /// Records packet `pn`. Only ack-eliciting packets make an ACK due: ACK-only packets
    /// are tracked in `largest`/`bitmap` (so the next ACK reports them) but never answered
    /// on their own, or a bulk sender would piggyback an ACK of ACKs (20–26 bytes) on
    /// most of its data packets (≈ 1.5 % of the link).
    fn on_packet(&mut self, pn: u64, now: Instant, eliciting: bool) {
        match self.largest {
            None => {
                self.largest = Some(pn);
                self.largest_time = Some(now);
                self.bitmap = 0;
            }
            Some(l) if pn > l => {
                let shift = pn - l;
                self.bitmap = if shift > 64 {
                    0
                } else {
                    (self.bitmap << (shift - 1) << 1) | (1u64 << (shift - 1))
                };
                if shift > 1 && eliciting {
                    self.immediate = true; // a hole: tell the sender now
                }
                self.largest = Some(pn);
                self.largest_time = Some(now);
            }
            Some(l) => {
                let d = l - pn;
                if (1..=64).contains(&d) {
                    self.bitmap |= 1 << (d - 1);
                }
                // A late arrival may cancel a loss declaration.
                self.immediate |= eliciting;
            }
        }
        if !eliciting {
            return;
        }
        self.pending = true;
        self.unacked_eliciting += 1;
        if self.unacked_eliciting >= 2 {
            self.immediate = true;
        }
    }
}

/// INITIATE copies per handshake attempt (see `poll_transmit`).
const HANDSHAKE_COPIES: u32 = 3;

/// How many declared-lost, already trimmed packets are remembered for spurious-loss
/// detection. Why: the sent log drops a lost packet at once, so when a reordered packet
/// (50 ms late on a 100 ms path) was declared lost at 3 packets' displacement, its ACK
/// found nothing, the reordering estimator never saw the late arrival, its thresholds
/// stayed at their floors, and every reordered packet cost a useless repair (2.6 %
/// overhead in the sweep's reordering row). A few hundred covers more than a round trip
/// of losses at the rates the thresholds matter for; the oldest are forgotten first.
const RECENT_LOST: usize = 256;

/// Packets in flight sent after a given packet number (see `Connection::sent_after`).
#[derive(Debug, Clone, Copy, Default)]
struct InFlightAfter {
    /// Repairs owed for declared losses or a reported deficit.
    reactive: u32,
    /// Proactive and tail repairs (not start-up margin copies, which stand in for a lost
    /// reactive repair's replacement and cover no hole of their own).
    speculative: u32,
    /// Source symbols.
    sources: u32,
}

/// Why a repair is sent: it decides what the repair's loss owes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RepairOrigin {
    /// Reactive: owed for a declared loss or a reported deficit (a lost one is owed again).
    Debt,
    /// Proactive, from the loss-rate credit.
    Credit,
    /// Sent into an idle tail ([`Connection::tail_budget`]); speculative like `Credit`.
    Tail,
    /// An extra copy beside the replacements of lost reactive repairs, one per two of them,
    /// early in a busy spell ([`Connection::in_startup`]); speculative like `Credit`.
    Margin,
}

/// A session. Created by [`crate::Endpoint`].
#[derive(Debug)]
pub struct Connection {
    side: Side,
    conn_id: u32,
    remote: SocketAddr,
    state: State,
    config: Arc<TransportConfig>,
    psk: Arc<Psk>,
    tx_key: Option<PacketKey>,
    rx_key: Option<PacketKey>,
    replay: ReplayWindow,
    /// Authenticated data packets received; with the highest of their numbers
    /// (`ack.largest`), the peer-to-us loss rate, a prior for our own direction when we
    /// send too little to measure it (see [`Connection::tail_loss`]).
    rx_packets: u64,
    created: Instant,

    // Sending.
    next_pn: u64,
    sent_base: u64,
    sent: VecDeque<SentPacket>,
    /// Packets declared lost and since trimmed from `sent`: (number, send time). An ACK
    /// that still names one shows it was only late; see [`RECENT_LOST`].
    recent_lost: VecDeque<(u64, Instant)>,
    in_flight: u64,
    largest_acked: Option<u64>,
    encoder: Encoder,
    cc: Box<dyn Controller>,
    rtt: RttEstimator,
    pacer: Pacer,
    loss: LossEstimator,
    reorder: ReorderEstimator,
    last_round: Option<Instant>,
    redundancy: RedundancyPolicy,
    repair_credit: f64,
    /// Tail repairs still to send while the sender has no new source to send (see
    /// [`Connection::tail_budget`]): set once per idle spell, `None` again after the next
    /// source or reactive repair.
    tail_repairs: Option<u32>,
    /// Repairs owed for declared losses (and probes), each with the end of the range it
    /// must cover. Reactive repairs stop there instead of spanning the whole window, so
    /// they never include symbols sent since whose fate is unknown; a repair that also
    /// spans newer, meanwhile lost symbols cannot decode until those are repaired too, and
    /// at high loss the deficit then hardly ever reaches zero (in-order delivery stalled
    /// for hundreds of ms at 20 % loss).
    debt: RepairDebt,
    /// Start-up margin: for every second reactive repair lost early in a busy spell, the
    /// end of an extra copy to send beside their replacements, so a hole whose replacement
    /// is lost need not wait another round trip (see [`Connection::in_startup`]).
    margin: RepairDebt,
    /// When the stall watch last saw the peer's in-order point move, or fired (stamped as
    /// ACKs arrive; `None` with nothing unacknowledged): see
    /// [`Connection::watch_in_order_point`].
    in_order_since: Option<Instant>,
    /// A repair owed for the hole at the peer's in-order point by the stall watch: the end
    /// of its range. Kept apart from `debt` because the cap on owed repairs drops the
    /// lowest ends first, and this is one.
    stall_repair: Option<SymbolId>,
    /// Whether the next lost reactive repair of the start-up owes no margin copy: the
    /// losses alternate, the first, third, ... each owing one. Why one per two: one per
    /// loss (each with its own end) cost about p² of the start-up's sources, and at 30 %
    /// loss half of those copies arrived useless; a copy reaching the highest end among
    /// two losses stands in for either's replacement. sim-sweep, four seeds at 500 ms /
    /// 30 %: copies 47–56 → 24–30, useless repairs 27–32 → 13–15, wire −0.002, 90 % of the
    /// link still within 2.28–2.41 s.
    margin_skip: bool,
    /// Highest end among the lost reactive repairs since the last margin copy was owed.
    margin_end: Option<SymbolId>,
    /// When the current busy spell began: the first source sent with nothing
    /// unacknowledged (a stall of a busy flow does not start a new one).
    busy_since: Option<Instant>,
    /// Ends of the speculative repairs (tail, proactive) the peer acknowledged
    /// and may still hold undecoded: each lowers its reported deficit without filling a
    /// hole above its end.
    held_speculative: Vec<SymbolId>,
    peer_next_in_order: SymbolId,
    peer_deficit: u32,
    loss_time: Option<Instant>,
    /// When the pacer next lets a datagram out, if it is what holds data back.
    pacer_wakeup: Option<Instant>,
    last_ack_eliciting_sent: Option<Instant>,
    pto_count: u32,
    last_sent: Option<Instant>,
    ping_pending: bool,
    close_frame: Option<(u16, String)>,
    /// ACCEPTs to send, one per INITIATE copy received (server; at most
    /// [`MAX_PENDING_ACCEPTS`]).
    accept_pending: VecDeque<Vec<u8>>,
    /// The handshake randoms (the server's is zero on the client until an ACCEPT).
    client_random: [u8; RANDOM_LEN],
    server_random: [u8; RANDOM_LEN],
    /// Handshake train arrivals: INITIATE copies on the server, ACCEPTs on the client.
    train_arrivals: Arrivals,
    /// ACCEPTs queued so far (server).
    accepts_queued: u32,
    /// The client's side of the handshake probe, until it has reported (see
    /// `handshake_train`).
    train_probe: Option<TrainProbe>,
    /// The handshake train as a loss sample, (copies that arrived, copies sent): of our
    /// own direction (client only: the server's report), and of the direction towards us
    /// (the server's INITIATEs up to the highest position seen; the client's ACCEPTs
    /// against the copies the server reported). See [`Connection::tail_loss`].
    train_loss_out: Option<(u32, u32)>,
    train_loss_in: Option<(u32, u32)>,
    /// A PATH frame from the client, applied with the next `now`.
    path_pending: Option<(u64, u64, bool)>,
    scratch: Vec<u8>,
    payload: Vec<u8>,
    repair_buf: Vec<u8>,

    // Receiving.
    decoder: Decoder,
    ack: AckState,
    last_received: Instant,

    // Streams.
    streams: BTreeMap<StreamId, Stream>,
    /// Upper bound of the bytes queued on all streams (exact after `send_buffered_exact`);
    /// checked against `config.session_send_buffer`.
    send_buffered: usize,
    /// A write was cut short by the session budget: wake blocked streams when it frees.
    budget_blocked: bool,
    /// The peer-stream limit has been reported at warn level for this session.
    stream_limit_logged: bool,
    next_local_stream: StreamId,
    highest_peer_stream: Option<StreamId>,
    control: VecDeque<OwnedFrame>,
    rr_cursor: StreamId,
    peer_max_data: u64,
    data_sent: u64,
    local_max_data: u64,
    data_received: u64,
    data_read: u64,

    events: VecDeque<Event>,
    stats: ConnectionStats,
}

/// The client's handshake-train measurement in progress.
#[derive(Debug, Clone)]
struct TrainProbe {
    /// When each train copy left (index: position − 1).
    sent: Vec<Instant>,
    /// Length of the train copies, and of the longest train ACCEPT received (a server
    /// with a smaller `max_datagram` pads its ACCEPTs less).
    len: usize,
    accept_len: usize,
    /// The server's arrival report with the most copies so far.
    report: handshake_train::Report,
    /// Shortest INITIATE → ACCEPT time of a train copy.
    rtt: Option<Duration>,
    /// The measurement ends at this time (reset by each train ACCEPT).
    deadline: Option<Instant>,
}

/// ACCEPTs queued at most; more INITIATE copies before the next send are not answered.
const MAX_PENDING_ACCEPTS: usize = 64;
/// ACCEPTs a session sends at most: a whole train, and retries for a few lost groups.
const MAX_ACCEPTS: u32 = handshake_train::MAX_TRAIN as u32 + 16;

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

#[derive(Debug, Clone)]
enum OwnedFrame {
    Path { rate: u64, rtt_us: u64, exact: bool },
    Open { id: StreamId, target: Target },
    OpenResult { id: StreamId, code: u8 },
    Reset { id: StreamId, code: u8 },
    MaxStreamData { id: StreamId, max: u64 },
    MaxData { max: u64 },
}

impl OwnedFrame {
    fn as_frame(&self) -> Frame<'static> {
        match self.clone() {
            OwnedFrame::Path {
                rate,
                rtt_us,
                exact,
            } => Frame::Path {
                rate,
                rtt_us,
                exact,
            },
            OwnedFrame::Open { id, target } => Frame::Open { id, target },
            OwnedFrame::OpenResult { id, code } => Frame::OpenResult { id, code },
            OwnedFrame::Reset { id, code } => Frame::Reset { id, code },
            OwnedFrame::MaxStreamData { id, max } => Frame::MaxStreamData { id, max },
            OwnedFrame::MaxData { max } => Frame::MaxData { max },
        }
    }
}

/// RTT (seconds) from which proactive repair (`TransportConfig::proactive_repair`) runs at
/// its full share; below, the share shrinks in proportion and reactive repair carries the
/// rest. Sim-sweep, 2 seeds,
/// 20 ms / 20 % loss: efficiency 0.849 with a 100 ms scale and a floor of ½ → 0.909.
const PROACTIVE_FULL_RTT: f64 = 0.5;
/// With proactive repair on, reactive repairs end at the hole they were owed for only on
/// paths with an srtt below this, where reactive repair carries most losses (20 ms /
/// 20 %: p99 delay 2.2 s → 0.1 s); on long paths, where proactive repairs spanning the
/// window arrive all the time, full-range reactive repairs combine better with them
/// (sim-sweep at 500 ms, share 0.9: wire 1.092 vs 1.103 and efficiency 0.925 vs 0.916 at
/// 5 % loss). Without proactive repair they always end at their hole.
const NARROW_REACTIVE_BELOW: Duration = Duration::from_millis(250);

/// Minimum RTTs from the start of a busy spell during which lost reactive repairs get
/// margin copies ([`Connection::in_startup`]).
const STARTUP_RTTS: u32 = 4;

/// Loss-detection delays (≈ 1.1 srtt each) the peer's in-order point may stand still
/// while symbols are unacknowledged before the stall watch owes a repair for its hole
/// ([`Connection::watch_in_order_point`]).
pub const STALL_ROUNDS: u32 = 2;

/// Shortest stand-still the stall watch answers: on short paths a hole's repairs take
/// that long anyway, and firing sooner sent redundant repairs (sim-sweep 20 ms / 20–30 %:
/// efficiency −0.003).
const STALL_FLOOR: Duration = Duration::from_millis(250);
/// Packet-number threshold for declaring loss when no reordering has been measured.
const PACKET_THRESHOLD: u64 = 3;
/// Stream reset code: the peer exceeded the stream limit.
pub const RESET_REFUSED: u8 = 0xfe;

impl Connection {
    pub(crate) fn new(
        role: Role,
        conn_id: u32,
        remote: SocketAddr,
        now: Instant,
        config: Arc<TransportConfig>,
        psk: Arc<Psk>,
    ) -> Self {
        let codec = CodecConfig {
            symbol_size: config.symbol_size,
            window: config.window,
        };
        let decoder = Decoder::new(CodecConfig {
            symbol_size: config.symbol_size,
            window: 2 * config.window,
        });
        let cc_cfg = CcConfig {
            initial_window: config.initial_window,
            max_rate_bps: config.max_rate_bps,
            mtu: config.max_datagram,
            ..CcConfig::default()
        };
        let (side, state, keys, client_random, server_random) = match role {
            Role::Client(initiate) => {
                let client_random = initiate.client_random;
                let state = State::Handshake {
                    initiate,
                    next_send: now,
                    attempts: 0,
                };
                (Side::Client, state, None, client_random, [0; RANDOM_LEN])
            }
            Role::Server {
                keys,
                client_random,
                server_random,
            } => (
                Side::Server,
                State::Established,
                Some(*keys),
                client_random,
                server_random,
            ),
        };
        let (tx_key, rx_key) = match keys {
            Some((tx, rx)) => (Some(tx), Some(rx)),
            None => (None, None),
        };
        let train_probe =
            (side == Side::Client && config.handshake_train > 0).then_some(TrainProbe {
                sent: Vec::new(),
                len: 0,
                accept_len: 0,
                report: handshake_train::Report::default(),
                rtt: None,
                deadline: None,
            });
        let stream_parity = match side {
            Side::Client => 0,
            Side::Server => 1,
        };
        Connection {
            side,
            conn_id,
            remote,
            state,
            psk,
            tx_key,
            rx_key,
            replay: ReplayWindow::default(),
            rx_packets: 0,
            created: now,
            next_pn: 0,
            sent_base: 0,
            sent: VecDeque::new(),
            recent_lost: VecDeque::new(),
            in_flight: 0,
            largest_acked: None,
            encoder: Encoder::new(codec),
            cc: new_controller(config.congestion, &cc_cfg),
            rtt: RttEstimator::new(config.initial_rtt),
            pacer: Pacer::new(config.max_datagram),
            loss: LossEstimator::default(),
            reorder: ReorderEstimator::new(),
            last_round: None,
            redundancy: RedundancyPolicy::default(),
            repair_credit: 0.0,
            tail_repairs: None,
            debt: RepairDebt::default(),
            margin: RepairDebt::default(),
            in_order_since: None,
            stall_repair: None,
            margin_skip: false,
            margin_end: None,
            busy_since: None,
            held_speculative: Vec::new(),
            peer_next_in_order: 0,
            peer_deficit: 0,
            loss_time: None,
            pacer_wakeup: None,
            last_ack_eliciting_sent: None,
            pto_count: 0,
            last_sent: None,
            ping_pending: false,
            close_frame: None,
            accept_pending: VecDeque::new(),
            client_random,
            server_random,
            train_arrivals: Arrivals::default(),
            train_loss_out: None,
            train_loss_in: None,
            accepts_queued: 0,
            train_probe,
            path_pending: None,
            scratch: Vec::with_capacity(config.symbol_size),
            send_buffered: 0,
            budget_blocked: false,
            stream_limit_logged: false,
            payload: Vec::with_capacity(config.symbol_size),
            repair_buf: vec![0; config.symbol_size],
            decoder,
            ack: AckState::default(),
            last_received: now,
            streams: BTreeMap::new(),
            next_local_stream: stream_parity,
            highest_peer_stream: None,
            control: VecDeque::new(),
            rr_cursor: 0,
            peer_max_data: config.session_window,
            data_sent: 0,
            local_max_data: config.session_window,
            data_received: 0,
            data_read: 0,
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

    /// The peer's current address (it follows NAT rebinding).
    pub fn remote(&self) -> SocketAddr {
        self.remote
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
        self.data_sent
    }

    /// Counters for logs and metrics.
    pub fn stats(&self) -> ConnectionStats {
        let mut s = self.stats;
        s.srtt = self.rtt.srtt();
        s.min_rtt = self.rtt.min_rtt();
        s.round_min = self.rtt.round_min();
        s.slow_start = self.cc.in_slow_start();
        s.in_flight = self.in_flight;
        s.repair_debt = self.debt.len();
        s.stream_bytes_sent = self.stream_bytes_sent();
        s.peer_deficit = self.peer_deficit;
        s.unacked_symbols = self.encoder.len() as u64;
        s.cwnd = self.cc.window();
        s.loss = self.loss.short();
        s.repair_ratio = self.current_repair_ratio();
        s
    }

    /// Number of open streams.
    pub fn stream_count(&self) -> usize {
        self.streams.len()
    }

    /// The stall watch: a liveness guarantee for the hole at the peer's in-order point.
    ///
    /// Why: the cap on owed repairs reads the peer's deficit against the repairs in flight
    /// at their expected arrival rate, so with hundreds in flight (600 ms / 30 %: σ ≈ 8) it
    /// cannot see one repair too few, and when it drops the repair owed for the oldest
    /// hole, nothing ever owes it again: in-order delivery stood still for 3.5 s (sim-sweep
    /// 600 ms / 30 %, seed offset 2) until the coding window filled and tail repairs
    /// spanned it. So when the in-order point has not moved for [`STALL_ROUNDS`]
    /// loss-detection delays (at least [`STALL_FLOOR`]), about two lost repairs in a row,
    /// one repair is owed for that hole alone (its range ends just after it), unless the
    /// owed repairs already start with one for it, and the watch rearms. Checked as ACKs
    /// arrive; a lost stall repair is owed again like any reactive one.
    fn watch_in_order_point(&mut self, now: Instant, moved: bool) {
        let covered = self.peer_next_in_order;
        if self.stall_repair.is_some_and(|e| e <= covered) {
            self.stall_repair = None;
        }
        if self.encoder.is_empty() {
            self.in_order_since = None;
            return;
        }
        let since = match self.in_order_since {
            Some(t) if !moved => t,
            _ => {
                self.in_order_since = Some(now);
                return;
            }
        };
        let (_, delay) = self.loss_thresholds();
        // `covered` is the encoder's first id, so a non-empty encoder holds it.
        if now >= since + (delay * STALL_ROUNDS).max(STALL_FLOOR) {
            // Already owed and waiting for the window: sending it twice helps nothing.
            if self.debt.first().is_none_or(|e| e > covered + 1) {
                self.stall_repair = Some(covered + 1);
            }
            self.in_order_since = Some(now);
        }
    }

    /// Whether the busy spell is young: within [`STARTUP_RTTS`] minimum RTTs of its first
    /// source. Then lost reactive repairs get margin copies, one per two, beside their
    /// replacements (`margin_skip`). Why: without proactive repair each hole waits a
    /// round trip per lost repair, and in-order delivery waits for the longest such chain
    /// among the flight's holes; at 500 ms / 20 % that held the delivered rate under 90 %
    /// of the link for 2.7–3.3 s (sim-sweep, four seeds). The copies cost about p²/2 of the
    /// sources sent in the start-up, where the rest of a bulk transfer pays nothing.
    fn in_startup(&self, now: Instant) -> bool {
        self.busy_since
            .is_some_and(|t| now < t + self.rtt.min_rtt() * STARTUP_RTTS)
    }

    /// Whether proactive repair is configured (`proactive_repair` finite and positive).
    fn proactive_on(&self) -> bool {
        self.config.proactive_repair.is_finite() && self.config.proactive_repair > 0.0
    }

    fn current_repair_ratio(&self) -> f64 {
        if !self.proactive_on() {
            return 0.0; // off: repair only what the peer reports missing
        }
        let g = self.loss.gilbert();
        // Size the decode block like the window the repairs cover: small blocks need
        // proportionally more redundancy and would overshoot the wire budget.
        let k = self
            .cc
            .window()
            .clamp(16, crate::redundancy::MAX_BLOCK as u64) as u32;
        let p = self.loss.p();
        let policy = self.redundancy.repair_ratio(k, p, Some(g), self.rtt.srtt());
        // Wire budget: proactive repair stays near the expected loss (repairs are lost
        // too, hence p/(1-p)); reactive repair tops up the variance. Its share grows with
        // the RTT: a reactive repair costs a round trip of delay but is never wasted, while
        // a proactive one that lands where nothing is missing is (34–45 % of them at 5 %
        // loss when both ran at full share). On short paths the round trip is cheap, so
        // repair is almost all reactive (share × srtt / 500 ms of the expected loss); from
        // 500 ms up, proactive repair carries its configured share of the loss.
        let share = self.config.proactive_repair.min(4.0)
            * (self.rtt.srtt().as_secs_f64() / PROACTIVE_FULL_RTT).clamp(0.0, 1.0);
        let budget = if p < 0.5 {
            share * p / (1.0 - p)
        } else {
            share.min(1.0)
        };
        policy.min(budget)
    }

    // ----- input -----------------------------------------------------------------------

    pub(crate) fn handle_accept(&mut self, now: Instant, accept: &Accept) {
        if self.side != Side::Client || matches!(self.state, State::Drained) {
            return;
        }
        if self.psk.verify_accept(accept, &self.client_random).is_err() {
            tracing::debug!(conn = self.conn_id, "dropping ACCEPT with a bad MAC");
            return;
        }
        if matches!(self.state, State::Handshake { .. }) {
            let (c2s, s2c) = self
                .psk
                .session_keys(&self.client_random, &accept.server_random);
            self.server_random = accept.server_random;
            self.tx_key = Some(c2s);
            self.rx_key = Some(s2c);
            self.state = State::Established;
            self.last_received = now;
            // Confirm the handshake to the server right away.
            self.ping_pending = true;
            self.events.push_back(Event::Connected);
            if let Some(p) = self.train_probe.as_mut() {
                p.deadline = Some(now + handshake_train::QUIET);
            }
        } else if accept.server_random != self.server_random {
            return;
        }
        self.on_train_accept(now, accept);
    }

    /// Client: a verified ACCEPT arrived at `now`; measure the train (see
    /// `handshake_train`).
    fn on_train_accept(&mut self, now: Instant, accept: &Accept) {
        let Some(p) = self.train_probe.as_mut() else {
            return;
        };
        if u32::from(accept.train_seen) > p.report.seen {
            p.report = handshake_train::Report {
                seen: accept.train_seen.into(),
                spread: accept.train_spread.into(),
                span: Duration::from_micros(accept.train_span_us.into()),
            };
        }
        if !self.train_arrivals.record(accept.train, now) {
            return;
        }
        p.accept_len = p.accept_len.max(accept.len);
        if let Some(&sent) = p.sent.get(usize::from(accept.train) - 1) {
            // Each ACCEPT answers its own copy: the round trip of that copy.
            let sample = now.saturating_duration_since(sent);
            if p.rtt.is_none() {
                // The handshake's round trip is the path's first RTT sample.
                self.rtt.update(now, sample, Duration::ZERO);
            }
            p.rtt = Some(p.rtt.map_or(sample, |r| r.min(sample)));
        }
        p.deadline = self.train_arrivals.quiet_deadline();
        if self.train_arrivals.count()
            >= u32::from(handshake_train::train_len(self.config.handshake_train))
        {
            self.finish_train_probe(now);
        }
    }

    /// Client: the handshake train is measured. Gives our controller the rate towards the
    /// server (the server's report) and queues a PATH frame with the rate back (the
    /// ACCEPTs' spacing) for the server's.
    fn finish_train_probe(&mut self, now: Instant) {
        let Some(p) = self.train_probe.take() else {
            return;
        };
        if p.sent.is_empty() {
            return;
        }
        if p.report.seen > 0 {
            // Each arrival drew one ACCEPT, so the server's count is also the ACCEPTs sent.
            let sent = u32::try_from(p.sent.len()).unwrap_or(u32::MAX);
            self.train_loss_out = Some((p.report.seen.min(sent), sent));
            self.train_loss_in = Some((
                self.train_arrivals.count().min(p.report.seen),
                p.report.seen,
            ));
        }
        let up = handshake_train::rate(p.report).map(|(pps, exact)| (pps * p.len as f64, exact));
        if let Some((bytes_per_s, exact)) = up {
            let pps = bytes_per_s / self.config.max_datagram as f64;
            self.cc.on_path_estimate(now, pps, exact, &self.rtt);
        }
        let back = handshake_train::rate(self.train_arrivals.report())
            .map(|(pps, exact)| (pps * p.accept_len as f64, exact));
        if let (Some((bytes_per_s, exact)), Some(rtt)) = (back, p.rtt) {
            // The ACCEPTs left as the INITIATEs arrived, so their spacing shows the slower
            // of the two directions. Sent as exact all the same: marking it a lower bound
            // unless clearly below the rate up (an asymmetric link's fast downlink reads as
            // its uplink) let the server's slow start double past the BDP on symmetric
            // links, which overflowed the queue (real kernel, 500 ms / 0 %: efficiency
            // 0.927 → 0.912, wire 1.046 → 1.066). On a link much faster back than up, the
            // server's slow start grows by a quarter per round above the uplink's BDP.
            tracing::debug!(
                conn = self.conn_id,
                up_bytes_per_s = up.map(|(u, _)| u),
                back_bytes_per_s = bytes_per_s,
                rtt_ms = rtt.as_secs_f64() * 1e3,
                "handshake train measured"
            );
            self.control.push_back(OwnedFrame::Path {
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
            || self.rx_packets > 0
            || self.accepts_queued >= MAX_ACCEPTS
        {
            return;
        }
        self.accepts_queued += 1;
        self.train_arrivals.record(init.train, now);
        let report = self.train_arrivals.report();
        if report.seen > 0 {
            self.train_loss_in = Some((report.seen, self.train_arrivals.highest()));
        }
        let mut accept = Accept {
            conn_id: self.conn_id,
            server_random: self.server_random,
            train: init.train,
            // Both at most 64 (`handshake_train::MAX_TRAIN`).
            train_seen: report.seen.min(255) as u8,
            train_spread: report.spread.min(255) as u8,
            train_span_us: report.span.as_micros().min(u128::from(u32::MAX)) as u32,
            len: init
                .len
                .min(self.config.max_datagram)
                .clamp(wire::ACCEPT_LEN, wire::MAX_HANDSHAKE_LEN),
            mac: [0; wire::MAC_LEN],
        };
        self.psk.sign_accept(&mut accept, &self.client_random);
        if self.accept_pending.len() < MAX_PENDING_ACCEPTS {
            let mut bytes = Vec::with_capacity(accept.len);
            accept.emit(&mut bytes);
            self.accept_pending.push_back(bytes);
        }
    }

    /// Whether an INITIATE with `client_random` is (a copy of) the one this server session
    /// accepted; another random naming its id is a different client.
    pub(crate) fn answers_handshake(&self, client_random: &[u8; RANDOM_LEN]) -> bool {
        self.side == Side::Server && *client_random == self.client_random
    }

    /// Server: applies a PATH frame received from the client.
    fn apply_path(&mut self, now: Instant) {
        let Some((rate, rtt_us, exact)) = self.path_pending.take() else {
            return;
        };
        if rate == 0 || rtt_us == 0 || rtt_us > 60_000_000 {
            return;
        }
        if !self.rtt.has_samples() {
            self.rtt
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
        self.cc.on_path_estimate(now, pps, exact, &self.rtt);
    }

    pub(crate) fn handle_reset(&mut self) {
        if !matches!(self.state, State::Drained) {
            self.lose(ConnectionError::PeerRestarted);
        }
    }

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
        // other packet) halves the ACKs under loss but cost 0.03 of efficiency at 20 ms /
        // 20 % and 0.04 with Gilbert bursts at 500 ms in the sim-sweep.
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

    fn new_stream(&self) -> Stream {
        Stream {
            send: SendHalf::new(self.config.stream_window, self.config.stream_send_buffer),
            recv: RecvHalf::new(self.config.stream_window),
            write_blocked: false,
            read_notified: false,
        }
    }

    fn on_ack(&mut self, now: Instant, ack: &Ack) {
        if ack.largest_pn >= self.next_pn {
            return; // acknowledges something never sent: ignore
        }
        let mut newly_acked = 0u64;
        let prev_largest = self.largest_acked;
        let min_rtt = self.rtt.min_rtt();
        let mut late: Vec<(u64, Duration)> = Vec::new();
        // Acknowledged after a later packet: it arrived out of order, by this many
        // packets and this long.
        let late_arrival = |pn: u64, sent: Instant| {
            prev_largest.filter(|&l| pn < l).map(|prev| {
                let late_by = now.saturating_duration_since(sent).saturating_sub(min_rtt);
                (prev - pn, late_by)
            })
        };
        let mut largest_newly_acked: Option<(u64, Instant, bool)> = None;
        let mut mark = |this: &mut Self, pn: u64| {
            if pn < this.sent_base {
                // Declared lost and trimmed, yet acknowledged: it was only late.
                let found = this.recent_lost.iter().rposition(|&(n, _)| n == pn);
                if let Some((_, sent_time)) = found.and_then(|i| this.recent_lost.remove(i)) {
                    late.extend(late_arrival(pn, sent_time));
                }
                return;
            }
            let Some(p) = this.sent.get_mut((pn - this.sent_base) as usize) else {
                return;
            };
            if p.acked {
                return;
            }
            p.acked = true;
            p.delivered = true;
            if let SentKind::Repair {
                end,
                origin: RepairOrigin::Credit | RepairOrigin::Tail,
            } = p.kind
            {
                this.held_speculative.push(end);
            }
            late.extend(late_arrival(pn, p.time));
            if p.lost {
                // Spurious loss: it was only late. Reordering, not congestion.
                return;
            }
            if p.in_flight {
                p.in_flight = false;
                this.in_flight -= 1;
                newly_acked += 1;
            }
            if largest_newly_acked.is_none_or(|(l, _, _)| pn > l) {
                largest_newly_acked = Some((pn, p.time, p.ack_eliciting));
            }
        };
        for i in (0..64u64).rev() {
            if ack.pn_bitmap & (1 << i) != 0 && ack.largest_pn > i {
                mark(self, ack.largest_pn - 1 - i);
            }
        }
        mark(self, ack.largest_pn);
        for (d, by) in late {
            self.reorder.on_late_arrival(d, by);
        }
        if self.last_round.is_none_or(|t| now >= t + self.rtt.srtt()) {
            self.last_round = Some(now);
            self.reorder.on_round();
        }
        if let Some((pn, sent_time, eliciting)) = largest_newly_acked {
            if pn == ack.largest_pn && eliciting {
                let delay = Duration::from_micros(u64::from(ack.ack_delay_us));
                self.rtt
                    .update(now, now.saturating_duration_since(sent_time), delay);
            }
            self.pto_count = 0;
        }
        self.largest_acked = Some(
            self.largest_acked
                .map_or(ack.largest_pn, |l| l.max(ack.largest_pn)),
        );

        // Symbol-level cumulative ACK: lost ACKs never read as data loss.
        let moved = ack.next_in_order > self.peer_next_in_order;
        if moved {
            self.peer_next_in_order = ack.next_in_order.min(self.encoder.next_id());
            self.encoder.retire_through(self.peer_next_in_order - 1);
        }
        self.watch_in_order_point(now, moved);
        let covered = self.peer_next_in_order;
        let ack_index = (ack.largest_pn + 1).saturating_sub(self.sent_base) as usize;
        for (i, p) in self.sent.iter_mut().enumerate() {
            if p.in_flight && !p.acked {
                let obsolete = match p.kind {
                    SentKind::Source(id) => id < covered,
                    SentKind::Repair { end, .. } => end <= covered,
                    SentKind::Control => false,
                };
                if obsolete {
                    p.in_flight = false;
                    p.acked = true;
                    p.vanished = i < ack_index;
                    self.in_flight -= 1;
                    newly_acked += 1;
                }
            }
        }
        self.peer_deficit = ack.deficit;
        if newly_acked > 0 {
            self.cc.on_ack(now, newly_acked, self.in_flight, &self.rtt);
        }
        self.detect_lost(now);
        // Reactive repair: the receiver's deficit, minus repairs already on their way
        // (sent after the newest packet this ACK reflects), bounds what declared losses
        // may ask for. Reactive repairs in flight were sent for losses this deficit already
        // counts (each arrives with probability 1-p); proactive and tail repairs were sized
        // for the expected losses of the sources beside them (s·p), which will be declared
        // and owed on their own, so only what they carry beyond that covers the deficit.
        let (in_flight, first_src_after) = self.sent_after(ack.largest_pn);
        let p = self.loss.p();
        let speculative = (f64::from(in_flight.speculative) * (1.0 - p)
            - f64::from(in_flight.sources) * p)
            .max(0.0);
        let surplus = (f64::from(in_flight.reactive) * (1.0 - p) + speculative).floor() as u32;
        // The peer's deficit cannot count symbols it never saw (a lost tail): sources sent
        // no later than this ACK's packet that the peer has not seen are owed too.
        let unseen = first_src_after
            .unwrap_or_else(|| self.encoder.next_id())
            .saturating_sub(ack.highest_seen.max(self.peer_next_in_order));
        // Speculative repairs the peer holds lower its deficit, but one that spans
        // everything decodes nothing until every hole below its end is filled, and fills
        // none above: counting them as filled holes let the cap drop the repairs owed for
        // true holes (600 ms / 10 %: twenty at once after a stall, each then left with
        // nothing on its way until the coding window filled: 4 s, twice).
        self.held_speculative.retain(|&e| e > covered);
        let excess = self
            .held_speculative
            .len()
            .saturating_sub(self.config.window);
        self.held_speculative.drain(..excess);
        let held = u32::try_from(self.held_speculative.len()).unwrap_or(u32::MAX);
        let cap = ack
            .deficit
            .saturating_add(u32::try_from(unseen).unwrap_or(u32::MAX))
            .saturating_add(held);
        // Repairs in flight were already taken off the debt when sent: bound the debt by
        // what they leave uncovered, rather than subtracting them a second time.
        self.debt.settle_below(covered);
        self.debt.cap(cap.saturating_sub(surplus));
        self.margin.settle_below(covered);
        self.margin.cap(ack.deficit);
        // Safety net: the receiver lacks symbols and no repair is on its way. Not while a
        // packet this ACK should already cover is still unresolved: that hole is most
        // likely a reordered packet on its way (RACK declares it lost in time if it is
        // not), and answering it at once sent a useless repair for about one in three
        // reordered packets (simulator, 2 % of packets 50 ms late at 100 ms).
        if ack.deficit > 0
            && self.debt.is_empty()
            && in_flight.reactive + in_flight.speculative == 0
            && !self.repairs_in_flight()
            && !self
                .sent
                .iter()
                .take(ack_index.min(self.sent.len()))
                .any(|p| p.in_flight && !p.acked)
        {
            // The deficit comes from the peer: no more than the symbols it can lack.
            let lacking = ack
                .deficit
                .min(u32::try_from(self.encoder.len()).unwrap_or(u32::MAX));
            self.debt.owe_at_least(lacking, self.encoder.next_id());
        }
        self.trim_sent();
    }

    /// Among packets sent after `pn`: what is in flight, and the first source symbol.
    fn sent_after(&self, pn: u64) -> (InFlightAfter, Option<SymbolId>) {
        self.in_flight_from((pn + 1).saturating_sub(self.sent_base) as usize)
    }

    /// From the `from`-th entry of the sent log on: what is in flight, and the first
    /// source symbol.
    fn in_flight_from(&self, from: usize) -> (InFlightAfter, Option<SymbolId>) {
        let mut n = InFlightAfter::default();
        let mut first = None;
        for p in self.sent.iter().skip(from) {
            match p.kind {
                SentKind::Repair { origin, .. } if p.in_flight => match origin {
                    RepairOrigin::Debt => n.reactive += 1,
                    RepairOrigin::Credit | RepairOrigin::Tail => n.speculative += 1,
                    // A margin copy in flight stands in for a replacement that is lost;
                    // it covers no hole of its own.
                    RepairOrigin::Margin => {}
                },
                SentKind::Source(id) => {
                    n.sources += u32::from(p.in_flight);
                    first.get_or_insert(id);
                }
                _ => {}
            }
        }
        (n, first)
    }

    fn repairs_in_flight(&self) -> bool {
        self.sent
            .iter()
            .any(|p| p.in_flight && matches!(p.kind, SentKind::Repair { .. }))
    }

    /// RACK-style thresholds: (packets, time after send) past which an unacknowledged
    /// packet is lost. Both grow with the measured reordering, so late is not lost.
    fn loss_thresholds(&self) -> (u64, Duration) {
        let base = self.rtt.srtt().max(self.rtt.latest());
        let (pkts, reo) = self.reorder.loss_threshold(self.rtt.min_rtt());
        (pkts.max(PACKET_THRESHOLD), base + reo.max(base / 8))
    }

    fn detect_lost(&mut self, now: Instant) {
        let Some(largest) = self.largest_acked else {
            return;
        };
        let (pkt_threshold, delay) = self.loss_thresholds();
        let startup = self.in_startup(now);
        let mut lost = 0u64;
        let mut latest_lost_time = None;
        let mut loss_time: Option<Instant> = None;
        let covered = self.peer_next_in_order;
        for i in 0..self.sent.len() {
            let pn = self.sent_base + i as u64;
            if pn >= largest {
                break;
            }
            let p = &mut self.sent[i];
            if p.acked || p.lost || !p.in_flight {
                continue;
            }
            if largest - pn >= pkt_threshold || now >= p.time + delay {
                p.lost = true;
                p.in_flight = false;
                self.in_flight -= 1;
                lost += 1;
                latest_lost_time = Some(p.time);
                let needed_end = match p.kind {
                    SentKind::Source(id) => (id >= covered).then_some(id + 1),
                    // A speculative repair that was lost leaves nothing owed.
                    SentKind::Repair { end, origin } => {
                        (end > covered && origin == RepairOrigin::Debt).then_some(end)
                    }
                    SentKind::Control => None,
                };
                if let Some(end) = needed_end {
                    self.debt.owe(end);
                    if startup && matches!(p.kind, SentKind::Repair { .. }) {
                        // One copy per two lost reactive repairs (the first, third, ...
                        // owe one), each reaching the highest end among the losses since
                        // the last copy, so it can stand in for whichever of their
                        // replacements is lost.
                        self.margin_end = self.margin_end.max(Some(end));
                        if !self.margin_skip {
                            if let Some(e) = self.margin_end.take() {
                                self.margin.owe(e);
                            }
                        }
                        self.margin_skip = !self.margin_skip;
                    }
                }
            } else {
                let t = p.time + delay;
                loss_time = Some(loss_time.map_or(t, |l: Instant| l.min(t)));
            }
        }
        self.loss_time = loss_time;
        if let Some(t) = latest_lost_time {
            self.stats.lost += lost;
            self.cc.on_congestion_event(now, t, lost, &self.rtt);
        }
    }

    /// Drops settled packets from the front of the sent log and feeds the loss estimator
    /// their outcomes, in transmission order (the Gilbert counts need the order). A packet
    /// the cumulative ACK made obsolete counts as lost when a later one was acknowledged
    /// (the peer decoded around it) and is left out when its fate is unknown; counting
    /// only individually acknowledged and declared-lost packets read 20 % loss as 12–18 %,
    /// because losses that proactive repair covered before detection never got an outcome.
    fn trim_sent(&mut self) {
        while let Some(p) = self.sent.front() {
            if p.in_flight {
                break;
            }
            if p.lost && !p.acked {
                if self.recent_lost.len() == RECENT_LOST {
                    self.recent_lost.pop_front();
                }
                self.recent_lost.push_back((self.sent_base, p.time));
            }
            if p.ack_eliciting {
                let congestion = self
                    .cc
                    .congestion_span()
                    .is_some_and(|(from, to)| p.time >= from && p.time <= to);
                // The round the controller backed off for stays out of the random-loss
                // estimate (see `Controller::congestion_span`), deliveries and losses
                // alike: dropping only its losses would bias the estimate low.
                if !congestion && (p.delivered || p.lost || p.vanished) {
                    self.loss.on_outcome(p.delivered);
                }
            }
            self.sent.pop_front();
            self.sent_base += 1;
        }
    }

    // ----- timers ----------------------------------------------------------------------

    /// Whether the probe timer must run: packets are in flight, or symbols are still
    /// unacknowledged with nothing in flight. The second case is the liveness guarantee:
    /// repair accounting bounds its debt by the peer's deficit, and a receiver that never
    /// saw a lost tail reports none, so without it a tail whose last repairs were lost
    /// (proactive ones owe nothing) waited for the next keepalive, 20 s in the simulator
    /// at 100 ms / 20 %.
    fn tail_unresolved(&self) -> bool {
        self.in_flight > 0 || !self.encoder.is_empty()
    }

    fn pto(&self) -> Duration {
        // Capped at 4x: on a lossy link a probe is itself lost often, and a tail symbol
        // (e.g. the one carrying flow-control credit) must not wait many seconds (8x was
        // 5.6 s at 600 ms).
        self.rtt.pto(self.config.max_ack_delay) * 2u32.saturating_pow(self.pto_count.min(2))
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
            State::Handshake { next_send, .. } => {
                add(Some(*next_send));
                add(Some(self.created + self.config.handshake_timeout));
                return t;
            }
            State::Closing { .. } => return Some(self.created), // flush immediately
            State::Established => {}
        }
        add(Some(self.last_received + self.config.idle_timeout));
        add(self.last_sent.map(|s| s + self.config.keepalive));
        add(self.ack.deadline.filter(|_| self.ack.pending));
        add(self.loss_time);
        add(self.pacer_wakeup);
        add(self.train_probe.as_ref().and_then(|p| p.deadline));
        if self.tail_unresolved() {
            add(self.last_ack_eliciting_sent.map(|s| s + self.pto()));
        }
        t
    }

    /// Runs timers that are due.
    pub fn handle_timeout(&mut self, now: Instant) {
        match &self.state {
            State::Drained | State::Closing { .. } => return,
            State::Handshake { .. } => {
                if now >= self.created + self.config.handshake_timeout {
                    self.lose(ConnectionError::HandshakeTimeout);
                }
                return;
            }
            State::Established => {}
        }
        if now >= self.last_received + self.config.idle_timeout {
            self.lose(ConnectionError::IdleTimeout);
            return;
        }
        if self
            .train_probe
            .as_ref()
            .and_then(|p| p.deadline)
            .is_some_and(|d| now >= d)
        {
            self.finish_train_probe(now);
        }
        if self
            .last_sent
            .is_some_and(|s| now >= s + self.config.keepalive)
        {
            self.ping_pending = true;
        }
        if self.ack.pending && self.ack.deadline.is_some_and(|d| now >= d) {
            self.ack.immediate = true;
        }
        if self.loss_time.is_some_and(|t| now >= t) {
            self.detect_lost(now);
            self.trim_sent();
        }
        if self.tail_unresolved()
            && self
                .last_ack_eliciting_sent
                .is_some_and(|s| now >= s + self.pto())
        {
            // Tail loss probe: one repair covering everything unacknowledged.
            self.pto_count += 1;
            // Two probes when loss is significant, so one loss does not cost another PTO.
            let probes = if self.loss.p() > 0.05 { 2 } else { 1 };
            // The tail's fate is unknown: probes cover everything sent.
            self.debt.owe_spanning(probes, self.encoder.next_id());
            self.last_ack_eliciting_sent = Some(now);
            if self.encoder.is_empty() {
                self.ping_pending = true;
            }
        }
    }

    // ----- output ----------------------------------------------------------------------

    /// Writes the next datagram into `buf` (cleared first), if one is due.
    #[must_use]
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
        buf.clear();
        if let Some(accept) = self.accept_pending.pop_front() {
            buf.extend_from_slice(&accept);
            return Some(self.transmit(buf));
        }
        match &mut self.state {
            State::Drained => return None,
            State::Handshake {
                initiate,
                next_send,
                attempts,
                ..
            } => {
                if now < *next_send {
                    return None;
                }
                let train = u32::from(handshake_train::train_len(self.config.handshake_train));
                if *attempts < train {
                    // A train copy: numbered, padded to a full datagram, sent back to back
                    // with the others (see `handshake_train`).
                    let mut copy = initiate.clone();
                    copy.train = (*attempts + 1) as u8;
                    copy.len = self
                        .config
                        .max_datagram
                        .clamp(wire::INITIATE_LEN, wire::MAX_HANDSHAKE_LEN);
                    self.psk.sign_initiate(&mut copy);
                    copy.emit(buf);
                    if let Some(p) = self.train_probe.as_mut() {
                        p.sent.push(now);
                        p.len = copy.len;
                    }
                } else {
                    initiate.emit(buf);
                }
                *attempts += 1;
                *next_send = now + handshake_wait(*attempts, train);
                return Some(self.transmit(buf));
            }
            State::Closing { remaining_sends } => {
                if *remaining_sends == 0 {
                    self.state = State::Drained;
                    return None;
                }
                *remaining_sends -= 1;
                let (code, reason) = self.close_frame.clone().unwrap_or((0, String::new()));
                self.begin_packet(buf);
                wire::emit_close(buf, code, &reason);
                return Some(self.finish_packet(now, buf, SentKind::Control, false));
            }
            State::Established => {}
        }

        let cwnd_open = self.in_flight < self.cc.window();
        self.pacer.set_gain(self.cc.pacing_gain(self.rtt.srtt()));
        let release = self.pacer.delay(
            now,
            self.cc.window(),
            self.rtt.srtt(),
            self.config.max_datagram,
        );
        let paced_ok = release.is_none_or(|t| t <= now);
        self.pacer_wakeup = if cwnd_open && !paced_ok {
            release
        } else {
            None
        };
        let probe = self.pto_count > 0 && !self.debt.is_empty();
        let can_send = (cwnd_open && paced_ok) || probe;

        let have_unacked = !self.encoder.is_empty();
        if can_send && have_unacked && self.stall_repair.is_some() {
            return Some(self.send_repair(now, buf, RepairOrigin::Debt));
        }
        if can_send && have_unacked && (!self.debt.is_empty() || self.repair_credit >= 1.0) {
            let origin = if !self.debt.is_empty() {
                RepairOrigin::Debt
            } else {
                RepairOrigin::Credit
            };
            return Some(self.send_repair(now, buf, origin));
        }
        // Margin entries all end above the peer's in-order point (= the encoder's first
        // id): on_ack settles them as it retires symbols, and detect_lost owes none below.
        if can_send && have_unacked && !self.margin.is_empty() {
            return Some(self.send_repair(now, buf, RepairOrigin::Margin));
        }
        if can_send && !self.encoder.is_full() && self.build_payload() {
            return Some(self.send_source(now, buf));
        }
        if can_send && have_unacked {
            // Nothing new to send (the application paused or finished, or flow control or
            // the coding window holds it): the link would idle until the ACKs come back,
            // so cover the flight's likely losses now instead of a round trip later.
            let budget = match self.tail_repairs {
                Some(left) => left,
                None => self.tail_budget(now),
            };
            self.tail_repairs = Some(budget.saturating_sub(1));
            if budget > 0 {
                return Some(self.send_repair(now, buf, RepairOrigin::Tail));
            }
        }
        if self.ping_pending {
            self.ping_pending = false;
            self.begin_packet(buf);
            self.emit_ack_if_pending(now, buf);
            wire::emit_ping(buf);
            return Some(self.finish_packet(now, buf, SentKind::Control, true));
        }
        if self.ack.pending && self.ack.immediate {
            self.begin_packet(buf);
            self.emit_ack_if_pending(now, buf);
            return Some(self.finish_packet(now, buf, SentKind::Control, false));
        }
        None
    }

    fn transmit(&mut self, buf: &[u8]) -> Transmit {
        self.stats.datagrams_sent += 1;
        self.stats.bytes_sent += buf.len() as u64;
        Transmit {
            destination: self.remote,
            size: buf.len(),
        }
    }

    fn begin_packet(&mut self, buf: &mut Vec<u8>) {
        DataHeader {
            conn_id: self.conn_id,
            pn: self.next_pn,
        }
        .emit(buf);
    }

    /// Appends the pending ACK if it fits in a packet that will hold `body` more bytes of
    /// chunks: full-size repairs leave no room for one (the ACK then rides the next source
    /// packet, or goes alone when nothing else is to be sent).
    fn emit_ack_if_fits(&mut self, now: Instant, buf: &mut Vec<u8>, body: usize) {
        let Some(ack) = self.pending_ack(now) else {
            return;
        };
        if buf.len() + ack.encoded_len() + body + TAG_LEN <= self.config.max_datagram {
            self.emit_ack(&ack, buf);
        }
    }

    /// The ACK that would go out at `now`, if one is pending.
    fn pending_ack(&self, now: Instant) -> Option<Ack> {
        if !self.ack.pending {
            return None;
        }
        let largest = self.ack.largest?;
        let status = self.decoder.status();
        let delay = self
            .ack
            .largest_time
            .map_or(Duration::ZERO, |t| now.saturating_duration_since(t));
        Some(Ack {
            next_in_order: status.next_in_order,
            deficit: status.deficit,
            highest_seen: status.highest_seen.map_or(0, |h| h + 1),
            largest_pn: largest,
            pn_bitmap: self.ack.bitmap,
            ack_delay_us: u32::try_from(delay.as_micros()).unwrap_or(u32::MAX),
            reorder_pkts: 0,
        })
    }

    fn emit_ack_if_pending(&mut self, now: Instant, buf: &mut Vec<u8>) {
        if let Some(ack) = self.pending_ack(now) {
            self.emit_ack(&ack, buf);
        }
    }

    /// Appends `ack` (from [`Connection::pending_ack`]) and clears what was pending.
    fn emit_ack(&mut self, ack: &Ack, buf: &mut Vec<u8>) {
        ack.emit(buf);
        self.ack.pending = false;
        self.ack.immediate = false;
        self.ack.unacked_eliciting = 0;
        self.ack.deadline = None;
    }

    fn finish_packet(
        &mut self,
        now: Instant,
        buf: &mut Vec<u8>,
        kind: SentKind,
        eliciting: bool,
    ) -> Transmit {
        let pn = self.next_pn;
        self.next_pn += 1;
        if let Some(key) = &self.tx_key {
            key.seal(pn, buf, DATA_HEADER_LEN);
        }
        let in_flight = eliciting;
        self.sent.push_back(SentPacket {
            time: now,
            kind,
            ack_eliciting: eliciting,
            in_flight,
            acked: false,
            lost: false,
            delivered: false,
            vanished: false,
        });
        if in_flight {
            self.in_flight += 1;
            self.cc.on_sent(now, 1, self.in_flight);
            self.last_ack_eliciting_sent = Some(now);
        }
        self.pacer.on_sent(now, buf.len());
        self.last_sent = Some(now);
        self.trim_sent();
        self.transmit(buf)
    }

    /// Loss rate for tail repairs: our direction's estimate, or the peer-to-us loss rate
    /// if that is higher. Why: a receiver sends only a few control symbols (flow-control
    /// credit), too few for its own estimate, and losing one stalls the sender; at 600 ms
    /// and 30 % loss one lost credit update, then its probes, idled a 20 MB transfer for
    /// 9 s in the simulator. The incoming rate needs 64 packets to count, or a handshake
    /// train.
    ///
    /// The handshake train's copies count as outcomes of their direction from the start
    /// (both rates then blend them with what the data packets show, so they fade as those
    /// accumulate): a fresh session has no estimate yet, and without one the first small
    /// flights (a proxied request, its OPEN, the reply) went without tail repairs, each
    /// loss waiting out a probe timeout of three handshake RTTs, doubled for each lost
    /// probe. Simulator, 500 ms / 30 %, 200 seeds of a 100-byte request and a 2 kB reply
    /// one second into a session: median 3.2 RTT and p90 11 RTT before, 1.0 and 1.0 with
    /// the train's sample (with [`tiny_flight_repairs`] too: 93 % within 1.5 RTT).
    fn tail_loss(&self) -> f64 {
        let (hs_got, hs_sent) = self.train_loss_in.unwrap_or((0, 0));
        let received = self.rx_packets + u64::from(hs_got);
        let sent = self.ack.largest.map_or(0, |h| h + 1) + u64::from(hs_sent);
        let incoming = if (hs_sent > 0 || self.rx_packets >= 64) && sent > 0 {
            1.0 - received as f64 / sent as f64
        } else {
            0.0
        };
        let own = match self.train_loss_out {
            Some((got, sent)) if sent > 0 => {
                let n = self.loss.samples() as f64;
                (self.loss.p() * n + f64::from(sent - got)) / (n + f64::from(sent))
            }
            _ => self.loss.p(),
        };
        own.max(incoming.clamp(0.0, 0.5))
    }

    /// Tail repairs for the flight now out: enough that, with the speculative repairs
    /// already in flight, the flight's expected losses plus two standard deviations arrive
    /// despite the loss rate: `⌈(λ + 2√λ)/(1−p)⌉ − speculative repairs in flight`, `λ = p ×
    /// (sources + reactive repairs in flight) + overdue ones` (overdue: see below); a
    /// reactive repair counts like a source because it is owed for a known hole, and
    /// losing it leaves that hole open. In a flight of a few symbols, at least what those
    /// sent after the newest speculative repair need alone. Zero on a loss-free path. Computed afresh after each round of reactive repairs. Why: at
    /// the end of a burst a loss waits a round trip for the ACK that reports it and another
    /// for the repair, and at high loss the repairs of the last round are lost in turn; at
    /// 500 ms / 20 % the last holes of a 20 MB transfer took 1.2–1.8 s to close (sim-sweep,
    /// four seeds: whole-transfer efficiency 0.909–0.921 with one budget per idle spell
    /// counting sources only, 0.935–0.938 now, for 0.1 % more repair).
    ///
    /// Packets still unacknowledged a loss-detection delay after they were sent, above the
    /// largest acknowledged and with the peer heard from since, are taken as lost (a source
    /// or reactive repair adds a whole expected loss, a speculative repair covers nothing):
    /// RACK declares them only once a later packet is acknowledged, and a receiver's rare
    /// ack-eliciting packets may have none. Counting them as in flight left a receiver's
    /// new credit update without a tail repair while an old lost one sat there, and at 600
    /// ms / 10 % three lost updates in a row held a 20 MB upload on its credit limit for
    /// 3.75 s (sim-sweep seed 0 after a change elsewhere: efficiency 0.899 against 0.929).
    fn tail_budget(&self, now: Instant) -> u32 {
        let p = self.tail_loss();
        if p <= 0.0 {
            return 0;
        }
        let (_, delay) = self.loss_thresholds();
        let (mut fresh, mut overdue, mut repairs) = (0u32, 0u32, 0u32);
        // Fresh symbols sent after the newest speculative repair in flight: no repair
        // covers them yet (each spans what was unacknowledged when it left).
        let mut uncovered = 0u32;
        let acked_below = self
            .largest_acked
            .map_or(0, |l| (l + 1).saturating_sub(self.sent_base));
        for (i, pkt) in self
            .sent
            .iter()
            .enumerate()
            .filter(|(_, pkt)| pkt.in_flight)
        {
            // Overdue: past the loss-detection delay, above everything acknowledged (below
            // it RACK declares the packet lost on its own timer), and the peer has been
            // heard from since (a silent peer is a dead one or a blackout, not a loss to
            // repair a whole flight for).
            let stale = now >= pkt.time + delay
                && i as u64 >= acked_below
                && self.last_received >= pkt.time + delay;
            match pkt.kind {
                SentKind::Source(_)
                | SentKind::Repair {
                    origin: RepairOrigin::Debt,
                    ..
                } => {
                    if stale {
                        overdue += 1;
                    } else {
                        fresh += 1;
                        uncovered += 1;
                    }
                }
                SentKind::Repair {
                    origin: RepairOrigin::Credit | RepairOrigin::Tail,
                    ..
                } if !stale => {
                    repairs += 1;
                    uncovered = 0;
                }
                _ => {}
            }
        }
        let sources = fresh + overdue;
        let need = |fresh: u32, overdue: u32| {
            let lambda = p * f64::from(fresh) + f64::from(overdue);
            let normal = ((lambda + 2.0 * lambda.sqrt()) / (1.0 - p).max(0.05)).ceil();
            if overdue == 0 && fresh <= 2 {
                normal.max(f64::from(tiny_flight_repairs(fresh, p)))
            } else {
                normal
            }
        };
        // Repairs already in flight count against the flight's need, but in a flight of a
        // few symbols those sent after the last of them get their own: otherwise a request
        // written just after its stream's OPEN had gone out with its tail repairs went
        // unprotected (simulator, 500 ms / 30 %, the OPEN and the request 1 ms apart on
        // each side: 71 % of exchanges within 1.5 RTT against 93 % with each side's two in
        // one flight). Not in a bulk flight, where the flight-wide margin already covers
        // them: there the rule fired at every short pause of the application and put 0.4 %
        // more on the wire (netbench 500 ms / 30 %: 282 tail repairs against 234).
        let own = if sources <= TINY_FLIGHT_SOURCES {
            need(uncovered, 0)
        } else {
            0.0
        };
        // At most one repair per source, except that a flight of one or two symbols (the
        // tail a receiver sends: flow-control credit; a request or a short reply) may take
        // three, sized for a 99 % decode rather than by the normal approximation, which
        // gives one symbol at 30 % two repairs (all three lost 2.7 % of the time): its
        // probes wait a PTO of three handshake RTTs at first, and at 30 % loss a credit
        // update and its one repair were both lost often enough to idle a 500 ms transfer
        // for 6 s.
        let cap = f64::from(sources.max(3.min(sources * 3)));
        let budget = (need(fresh, overdue) - f64::from(repairs))
            .max(own)
            .clamp(0.0, cap);
        budget as u32
    }

    fn send_repair(&mut self, now: Instant, buf: &mut Vec<u8>, origin: RepairOrigin) -> Transmit {
        let first = self.encoder.first_id();
        let next = self.encoder.next_id();
        // A reactive repair ends just after the hole it was owed for (always without
        // proactive repair; with it, only below NARROW_REACTIVE_BELOW); proactive, tail and
        // probe repairs, and reactive ones with no known end, span everything unacknowledged.
        let stall = origin == RepairOrigin::Debt && self.stall_repair.is_some();
        let owed = match origin {
            RepairOrigin::Debt if stall => self.stall_repair.take(),
            RepairOrigin::Debt => self.debt.take(),
            RepairOrigin::Margin => self.margin.take(),
            RepairOrigin::Credit | RepairOrigin::Tail => None,
        };
        let end = match owed {
            Some(e)
                if e > first
                    && (stall
                        || !self.proactive_on()
                        || self.rtt.srtt() < NARROW_REACTIVE_BELOW) =>
            {
                e.min(next)
            }
            _ => next,
        };
        let count = (end - first).min(u64::from(u16::MAX)) as u16;
        self.begin_packet(buf);
        let header = match self.encoder.repair(first, count, &mut self.repair_buf) {
            Ok(h) => h,
            Err(e) => {
                tracing::debug!(conn = self.conn_id, error = %e, "repair generation failed");
                self.debt.clear();
                self.margin.clear();
                self.margin_skip = false;
                self.margin_end = None;
                self.stall_repair = None;
                self.repair_credit = 0.0;
                self.emit_ack_if_pending(now, buf);
                return self.finish_packet(now, buf, SentKind::Control, false);
            }
        };
        let body = wire::repair_chunk_len(&header, self.repair_buf.len());
        self.emit_ack_if_fits(now, buf, body);
        wire::emit_repair(buf, &header, &self.repair_buf);
        match origin {
            // A new round of reactive repairs: the next idle spell sizes its tail anew (the
            // stall watch's one repair is not a round).
            RepairOrigin::Debt if !stall => self.tail_repairs = None,
            RepairOrigin::Debt => {}
            RepairOrigin::Credit => self.repair_credit -= 1.0,
            RepairOrigin::Tail | RepairOrigin::Margin => {}
        }
        self.stats.repair_origin[origin as usize] += 1;
        if stall {
            self.stats.stall_repairs += 1;
        }
        self.stats.repair_sent += 1;
        self.stats.repair_bytes_sent += self.repair_buf.len() as u64;
        let end = first + u64::from(count);
        self.finish_packet(now, buf, SentKind::Repair { end, origin }, true)
    }

    fn send_source(&mut self, now: Instant, buf: &mut Vec<u8>) -> Transmit {
        if self.encoder.is_empty() {
            self.busy_since = Some(now);
            self.margin_skip = false;
            self.margin_end = None;
        }
        let payload = std::mem::take(&mut self.payload);
        let id = match self.encoder.push(&payload) {
            Ok(id) => id,
            Err(e) => {
                // Cannot happen: we checked is_full and bounded the payload by the symbol size.
                tracing::error!(conn = self.conn_id, error = %e, "encoder refused a source symbol");
                self.payload = payload;
                self.begin_packet(buf);
                return self.finish_packet(now, buf, SentKind::Control, false);
            }
        };
        self.begin_packet(buf);
        self.emit_ack_if_pending(now, buf);
        // The SOURCE chunk is the packet's last, so it goes without its length.
        wire::emit_source_last(buf, id, &payload);
        self.stats.source_sent += 1;
        self.stats.source_bytes_sent += payload.len() as u64;
        self.payload = payload;
        self.tail_repairs = None;
        self.repair_credit += self.current_repair_ratio();
        // Bound the credit so a long idle period does not bank a burst of repairs.
        self.repair_credit = self.repair_credit.min(8.0);
        self.finish_packet(now, buf, SentKind::Source(id), true)
    }

    /// Fills `self.payload` with frames for one source symbol. Returns false if there is nothing to send.
    fn build_payload(&mut self) -> bool {
        // A symbol holds `S − 2` bytes of frames; the packet must also fit the datagram
        // limit with the ACK that will ride in front of it.
        let ack = self
            .pending_ack(self.ack.largest_time.unwrap_or(self.created))
            .map_or(0, |a| a.encoded_len_bound());
        let cap = (self.config.symbol_size - 2).min(
            self.config
                .max_datagram
                .saturating_sub(DATA_HEADER_LEN + TAG_LEN + wire::SOURCE_LAST_HEADER_LEN + ack),
        );
        self.payload.clear();
        // Control frames first: they unblock the peer.
        while let Some(f) = self.control.front() {
            let frame = f.as_frame();
            if self.payload.len() + frame.encoded_len() > cap {
                break;
            }
            frame.emit(&mut self.payload);
            self.control.pop_front();
        }
        // Then stream data, round-robin from the cursor. The frame that ends the payload
        // goes without its length: each frame is sized against that shorter header, so a
        // symbol fills exactly, and one left without room for its length ends the payload.
        // A frame that had room but turned out to be the last one (the data ran out) loses
        // its length afterwards: `open_tail` is where it starts.
        let ids: Vec<StreamId> = self
            .streams
            .range(self.rr_cursor..)
            .chain(self.streams.range(..self.rr_cursor))
            .filter(|(_, s)| s.send.has_frame())
            .map(|(id, _)| *id)
            .collect();
        let mut open_tail = None;
        for id in ids {
            let room = cap.saturating_sub(self.payload.len());
            let session_credit = self.peer_max_data.saturating_sub(self.data_sent) as usize;
            let Some(s) = self.streams.get_mut(&id) else {
                continue;
            };
            let header = crate::frame::stream_last_header_len(id, s.send.offset);
            if room <= header {
                break;
            }
            let max = (room - header).min(session_credit);
            if max == 0 && !(s.send.fin_requested && s.send.buffered() == 0) {
                continue;
            }
            let (offset, fin) = s.send.take(max, &mut self.scratch);
            self.data_sent += self.scratch.len() as u64;
            self.send_buffered = self.send_buffered.saturating_sub(self.scratch.len());
            let frame = Frame::Stream {
                id,
                offset,
                fin,
                data: &self.scratch,
            };
            let ends_payload = frame.encoded_len() > room;
            if ends_payload {
                frame.emit_last(&mut self.payload);
                open_tail = None;
            } else {
                open_tail = Some(self.payload.len());
                frame.emit(&mut self.payload);
            }
            if s.write_blocked && s.send.is_writable() {
                s.write_blocked = false;
                self.events.push_back(Event::StreamWritable(id));
            }
            self.rr_cursor = id + 1;
            self.maybe_forget(id);
            if ends_payload {
                break;
            }
        }
        if let Some(start) = open_tail {
            // Nothing followed that frame (only stream frames come after control frames).
            let dropped = crate::frame::drop_final_stream_length(&mut self.payload, start);
            debug_assert!(dropped, "the payload's final frame is a length-form STREAM");
        }
        if self.budget_blocked && self.send_buffered < self.config.session_send_buffer {
            self.budget_blocked = false;
            for (&id, s) in self.streams.iter_mut() {
                if s.write_blocked && s.send.is_writable() {
                    s.write_blocked = false;
                    self.events.push_back(Event::StreamWritable(id));
                }
            }
        }
        !self.payload.is_empty()
    }

    fn maybe_forget(&mut self, id: StreamId) {
        if let Some(s) = self.streams.get(&id) {
            let send_done = s.send.reset || (s.send.fin_sent && s.send.buffered() == 0);
            if send_done && s.recv.is_done() {
                self.streams.remove(&id);
            }
        }
    }

    /// Next event for the application.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    // ----- streams API -----------------------------------------------------------------

    /// Opens a stream to `target`; the peer learns of it with the first symbol.
    pub fn open_stream(&mut self, target: Target) -> Result<StreamId, StreamApiError> {
        if !self.is_established() {
            return Err(StreamApiError::NotConnected);
        }
        if self.streams.len() >= self.config.max_streams {
            return Err(StreamApiError::TooManyStreams);
        }
        let id = self.next_local_stream;
        self.next_local_stream += 2;
        self.streams.insert(id, self.new_stream());
        self.control.push_back(OwnedFrame::Open { id, target });
        Ok(id)
    }

    /// Queues bytes on a stream; returns how many were taken (0 = blocked until
    /// [`Event::StreamWritable`]).
    pub fn write(&mut self, id: StreamId, data: &[u8]) -> Result<usize, StreamApiError> {
        if matches!(self.state, State::Drained | State::Closing { .. }) {
            return Err(StreamApiError::NotConnected);
        }
        let s = self
            .streams
            .get_mut(&id)
            .ok_or(StreamApiError::UnknownStream)?;
        if s.send.reset {
            return Err(StreamApiError::Reset);
        }
        let budget = self.config.session_send_buffer;
        let mut room = budget.saturating_sub(self.send_buffered);
        if room < data.len() {
            // The running total only over-estimates (resets and forgotten streams do not
            // subtract); recount before refusing.
            self.send_buffered = self.streams.values().map(|s| s.send.buffered()).sum();
            room = budget.saturating_sub(self.send_buffered);
        }
        let Some(s) = self.streams.get_mut(&id) else {
            return Err(StreamApiError::UnknownStream);
        };
        let n = s.send.write(&data[..data.len().min(room)]);
        self.send_buffered += n;
        if n < data.len() {
            s.write_blocked = true;
            if room < data.len() {
                if !self.budget_blocked {
                    tracing::debug!(
                        budget,
                        "session send buffer full: stream writes wait for the peer"
                    );
                }
                self.budget_blocked = true;
            }
        }
        Ok(n)
    }

    /// Ends the sending direction of a stream (TCP half-close).
    pub fn finish(&mut self, id: StreamId) -> Result<(), StreamApiError> {
        let s = self
            .streams
            .get_mut(&id)
            .ok_or(StreamApiError::UnknownStream)?;
        s.send.fin_requested = true;
        Ok(())
    }

    /// Reads from a stream.
    pub fn read(&mut self, id: StreamId, buf: &mut [u8]) -> Result<ReadOutcome, StreamApiError> {
        let s = self
            .streams
            .get_mut(&id)
            .ok_or(StreamApiError::UnknownStream)?;
        let out = s.recv.read(buf);
        match out {
            ReadOutcome::Data(n) => {
                self.data_read += n as u64;
                self.stats.stream_bytes_read += n as u64;
                if let Some(max) = s.recv.credit_update() {
                    self.control
                        .push_back(OwnedFrame::MaxStreamData { id, max });
                }
                // A quarter of the window, like the streams' (see `RecvHalf::credit_update`).
                if self.local_max_data - self.data_read <= self.config.session_window / 4 * 3 {
                    self.local_max_data = self.data_read + self.config.session_window;
                    self.control.push_back(OwnedFrame::MaxData {
                        max: self.local_max_data,
                    });
                }
            }
            ReadOutcome::Blocked => s.read_notified = false,
            ReadOutcome::Finished | ReadOutcome::Reset(_) => {
                s.read_notified = false;
                self.maybe_forget(id);
            }
        }
        Ok(out)
    }

    /// Abruptly ends a stream in both directions.
    pub fn reset(&mut self, id: StreamId, code: u8) -> Result<(), StreamApiError> {
        let s = self
            .streams
            .get_mut(&id)
            .ok_or(StreamApiError::UnknownStream)?;
        s.send.reset = true;
        if s.recv.reset.is_none() {
            s.recv.reset = Some(code);
        }
        self.control.push_back(OwnedFrame::Reset { id, code });
        self.streams.remove(&id);
        Ok(())
    }

    /// Reports the connect result of a peer-opened stream (0 = connected).
    pub fn send_open_result(&mut self, id: StreamId, code: u8) -> Result<(), StreamApiError> {
        if !self.streams.contains_key(&id) {
            return Err(StreamApiError::UnknownStream);
        }
        self.control.push_back(OwnedFrame::OpenResult { id, code });
        Ok(())
    }

    /// Whether a write on `id` would take bytes now.
    pub fn is_writable(&self, id: StreamId) -> bool {
        self.streams.get(&id).is_some_and(|s| s.send.is_writable())
    }

    /// Closes the session gracefully.
    pub fn close(&mut self, code: u16, reason: &str) {
        if matches!(self.state, State::Drained | State::Closing { .. }) {
            return;
        }
        if self.tx_key.is_none() {
            self.state = State::Drained;
            self.events
                .push_back(Event::ConnectionLost(ConnectionError::LocallyClosed));
            return;
        }
        self.close_frame = Some((code, reason.to_owned()));
        self.state = State::Closing { remaining_sends: 3 };
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

/// How long the client waits after its `attempts`-th INITIATE before the next, with a
/// train of `train` copies first. The train goes back to back and counts as the first copy
/// of the first group; copies then go in threes 20 ms apart (each copy draws an ACCEPT), so
/// a lost datagram on a lossy link rarely costs the 300 ms timeout; the groups back off
/// gently, capped at 3 s. With single retransmissions a 30 %-loss path (both ways) failed
/// about one handshake in 500 within the 10 s timeout; with pairs, one first attempt in
/// eight at 20 % loss still waited the timeout (each copy makes the round trip with
/// probability 0.64), one in twenty with threes.
fn handshake_wait(attempts: u32, train: u32) -> Duration {
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

/// Chance a tiny flight may fail to decode despite its tail repairs (see
/// [`tiny_flight_repairs`]).
const TINY_FLIGHT_FAILURE: f64 = 0.01;

/// Flights of at most this many symbols (sources and reactive repairs) give the symbols
/// sent after their newest speculative repair a tail budget of their own
/// ([`Connection::tail_budget`]).
const TINY_FLIGHT_SOURCES: u32 = 8;

/// Repairs that let a flight of `k` symbols decode with probability 1 −
/// [`TINY_FLIGHT_FAILURE`] at loss rate `p`: the smallest `r` with P(fewer than `k` of
/// `k + r` arrive) ≤ that, at most 3.
fn tiny_flight_repairs(k: u32, p: f64) -> u32 {
    if k == 0 || p <= 0.0 {
        return 0;
    }
    let q = 1.0 - p;
    (0..=3)
        .find(|&r| {
            let n = k + r;
            // P(fewer than k arrive) = Σ_{i<k} C(n, i) q^i p^(n−i)
            let mut fail = 0.0;
            let mut c = 1.0;
            for i in 0..k {
                if i > 0 {
                    c = c * f64::from(n - i + 1) / f64::from(i);
                }
                fail += c * q.powi(i as i32) * p.powi((n - i) as i32);
            }
            fail <= TINY_FLIGHT_FAILURE
        })
        .unwrap_or(3)
}

#[cfg(test)]
mod tests {
    use super::{tiny_flight_repairs, AckState};
    use std::time::{Duration, Instant};

    #[test]
    fn ack_only_packets_are_tracked_but_not_answered() {
        #[allow(clippy::disallowed_methods)] // a fixed base instant for the test
        let t = Instant::now();
        let mut a = AckState::default();
        a.on_packet(0, t, false);
        a.on_packet(2, t, false); // a hole among ACK-only packets
        assert!(
            !a.pending && !a.immediate,
            "ACK-only packets make no ACK due"
        );
        assert_eq!(a.largest, Some(2));
        a.on_packet(3, t + Duration::from_millis(1), true);
        assert!(a.pending, "an eliciting packet makes an ACK due");
        // The next ACK reports the ACK-only packets too.
        assert_eq!(a.largest, Some(3));
        assert_eq!(a.bitmap & 0b111, 0b101, "pn 2 and 0 seen, pn 1 missing");
        a.on_packet(4, t, true);
        assert!(
            a.immediate,
            "every second eliciting packet is acknowledged at once"
        );
    }

    #[test]
    fn tiny_flights_get_repairs_for_a_99_percent_decode() {
        assert_eq!(tiny_flight_repairs(1, 0.0), 0, "a clean path needs none");
        assert_eq!(
            tiny_flight_repairs(0, 0.3),
            0,
            "nothing sent, nothing to cover"
        );
        // 0.05² = 0.25 % ≤ 1 %: one copy is enough at 5 %.
        assert_eq!(tiny_flight_repairs(1, 0.05), 1);
        // 0.08² = 0.64 %: still one at 8 %; 0.2² = 4 % needs a second (0.8 %).
        assert_eq!(tiny_flight_repairs(1, 0.08), 1);
        assert_eq!(tiny_flight_repairs(1, 0.2), 2);
        // 0.3³ = 2.7 %, 0.3⁴ = 0.8 %.
        assert_eq!(tiny_flight_repairs(1, 0.3), 3);
        // Two symbols at 30 %: P(≤ 1 of 5 arrive) = 3.1 %, so the cap of 3 holds.
        assert_eq!(tiny_flight_repairs(2, 0.3), 3);
        // Two at 5 %: P(≤ 1 of 3) = 0.7 %.
        assert_eq!(tiny_flight_repairs(2, 0.05), 1);
    }
}
