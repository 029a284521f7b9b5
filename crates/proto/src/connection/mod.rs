//! One session between a forward and a reverse proxy: handshake, coded reliability,
//! congestion control, streams and lifecycle, as a pure state machine.
//!
//! Shaped like `quinn_proto::Connection`: feed it datagrams and timeouts with the current
//! `Instant`, then drain [`Connection::poll_transmit`], [`Connection::poll_event`] and
//! [`Connection::poll_timeout`].
//!
//! This file holds the session's state and lifecycle; its methods live by concern in
//! `handshake` (ACCEPT, train, PATH), `receive` (data packets in), `recovery` (ACKs, loss
//! declaration, reactive repair, the stall watch), `tail` (repairs when the sender falls
//! idle), `timers`, `transmit` (what the next datagram carries) and `streams_api`.

use crate::cc::{new_controller, CcConfig, Controller};
use crate::config::TransportConfig;
use crate::crypto::{open_data, PacketKey, Psk, ReplayWindow};
use crate::estimate::loss::LossEstimator;
use crate::estimate::reorder::ReorderEstimator;
use crate::frame::{Frame, Frames, OpenResult, StreamId, Target};
use crate::handshake_train::{self, Arrivals};
use crate::pacer::Pacer;
use crate::redundancy::RedundancyPolicy;
use crate::repair_debt::RepairDebt;
use crate::rtt::RttEstimator;
use crate::stream::{ReadOutcome, RecvHalf, SendHalf, StreamError};
use crate::wire::{
    self, Accept, Ack, Chunk, Chunks, DataHeader, Initiate, LateArrivals, ParamMismatch, Reject,
    RejectReason, DATA_HEADER_LEN, RANDOM_LEN, TAG_LEN,
};
use ctcp_rlnc::{CodecConfig, Decoder, Encoder, SymbolId};
use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use thiserror::Error;

mod handshake;
mod receive;
mod recovery;
mod streams_api;
mod tail;
mod timers;
mod transmit;

use handshake::handshake_wait;

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
    /// Ack-eliciting packets whose fate is known: acknowledged, declared lost, or decoded
    /// around after an ACK showed them missing. Packets in flight, and those the peer's
    /// ACKs never covered, are not counted.
    pub packets_resolved: u64,
    /// Of [`ConnectionStats::packets_resolved`], those that were lost (declared lost and
    /// never acknowledged, or decoded around).
    pub packets_resolved_lost: u64,
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
    /// Short-term loss estimate (the estimator's EWMA; [`ConnectionStats::loss_ratio`]
    /// is the session's measured ratio).
    pub loss: f64,
    /// Current proactive repair rate (repairs per source symbol the loss-rate credit adds;
    /// [`ConnectionStats::repairs_per_source`] counts every repair sent).
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
    /// Congestion backoffs the controller made (for CTCP: gated losses and drains).
    pub backoffs: u64,
    /// Delay noise (see `RttEstimator::jitter`).
    pub jitter: Duration,
}

impl ConnectionStats {
    /// Packets lost per packet resolved over the session (0 before any is resolved):
    /// packets still in flight count neither way.
    pub fn loss_ratio(&self) -> f64 {
        if self.packets_resolved == 0 {
            return 0.0;
        }
        self.packets_resolved_lost as f64 / self.packets_resolved as f64
    }

    /// Repair symbols sent per source symbol sent, every kind of repair counted.
    pub fn repairs_per_source(&self) -> f64 {
        if self.source_sent == 0 {
            return 0.0;
        }
        self.repair_sent as f64 / self.source_sent as f64
    }
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
    /// although an ACK that reported its neighbours did not report it: the peer decoded
    /// around it, so it was lost.
    vanished: bool,
    /// An ACK whose range (its largest packet and the 64 before it) covered this packet
    /// did not report it. Only such a packet, once the cumulative ACK makes it obsolete,
    /// was decoded around (lost): one the peer's ACKs skipped over (a receiver that read
    /// many datagrams before it answered reported only the newest 65) has an unknown fate
    /// and stays out of the loss estimate.
    missed: bool,
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
    /// Packets that arrived past the bitmap's reach, oldest first, until an ACK reports them.
    late: VecDeque<u64>,
    unacked_eliciting: u32,
    pending: bool,
    immediate: bool,
    deadline: Option<Instant>,
    /// The lowest ack-eliciting packet recorded since the last ACK went out.
    unreported_from: Option<u64>,
    /// ACKs taken before a batch of arrivals pushed unreported packets out of the bitmap's
    /// reach, oldest first, each to go out alone ahead of anything else (see
    /// [`AckState::would_drop_unreported`]).
    owed: VecDeque<Ack>,
}

impl AckState {
    /// Whether recording packet `pn` would leave an ack-eliciting packet that no ACK has
    /// reported yet beyond the bitmap's reach (64 below the largest). Why it matters: a
    /// receiver that reads many datagrams before it sends (the runtime drains its socket,
    /// then polls) otherwise reports only the newest 65 of them, and the sender cannot
    /// tell the rest from losses.
    fn would_drop_unreported(&self, pn: u64) -> bool {
        self.largest.is_some_and(|l| pn > l) && self.unreported_from.is_some_and(|u| pn > u + 64)
    }

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
                } else if d > 64 {
                    // Bounded: under a burst of late arrivals the oldest go unreported
                    // (read as lost, as all of them were before the list existed).
                    if self.late.len() >= LATE_QUEUE {
                        self.late.pop_front();
                    }
                    self.late.push_back(pn);
                }
                // A late arrival may cancel a loss declaration.
                self.immediate |= eliciting;
            }
        }
        if !eliciting {
            return;
        }
        self.unreported_from = Some(self.unreported_from.map_or(pn, |u| u.min(pn)));
        self.pending = true;
        self.unacked_eliciting += 1;
        if self.unacked_eliciting >= 2 {
            self.immediate = true;
        }
    }
}

/// Late arrivals past the ACK bitmap waiting to be reported: four ACKs' worth.
const LATE_QUEUE: usize = 4 * wire::MAX_LATE;

/// ACKs taken in one batch of arrivals at most (65 packets each): past that, the oldest
/// packets of a larger batch go unreported.
const OWED_ACKS: usize = 64;

/// INITIATE copies per handshake attempt (see `poll_transmit`).
const HANDSHAKE_COPIES: u32 = 3;

/// How many declared-lost, already trimmed packets are remembered for spurious-loss
/// detection. Why: the sent log drops a lost packet at once, so when a reordered packet
/// (50 ms late on a 100 ms path) was declared lost at 3 packets' displacement, its ACK
/// found nothing, the reordering estimator never saw the late arrival, its thresholds
/// stayed at their floors, and every reordered packet cost a useless repair (evidence:
/// docs/experiments/code-evidence.md#recent-lost). A few hundred covers more than a round
/// trip of losses at the rates the thresholds matter for; the oldest are forgotten first.
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
    /// Source symbols sent before the newest speculative repair (the ones such repairs
    /// can cover).
    covered_sources: u32,
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
    /// two losses stands in for either's replacement, so one per two halves the copies and
    /// the useless ones among them (evidence: docs/experiments/code-evidence.md#margin-skip).
    margin_skip: bool,
    /// Highest end among the lost reactive repairs since the last margin copy was owed.
    margin_end: Option<SymbolId>,
    /// When the current busy spell began: the first source sent with nothing
    /// unacknowledged (a stall of a busy flow does not start a new one).
    busy_since: Option<Instant>,
    /// Symbols the peer lacked at its latest ACK: its deficit plus the sources sent no
    /// later than that ACK's packet it had not seen (see
    /// [`Connection::owe_tail_shortfall`]).
    peer_lacking: u32,
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
    OpenResult { id: StreamId, code: OpenResult },
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
/// rest: on short paths reactive repair is cheap and proactive repairs mostly land where
/// nothing is missing (evidence: docs/experiments/code-evidence.md#proactive-full-rtt).
const PROACTIVE_FULL_RTT: f64 = 0.5;
/// With proactive repair on, reactive repairs end at the hole they were owed for only on
/// paths with an srtt below this, where reactive repair carries most losses and a repair
/// spanning later losses stalls in-order delivery; on long paths, where proactive repairs
/// spanning the window arrive all the time, full-range reactive repairs combine better
/// with them (evidence: docs/experiments/code-evidence.md#narrow-reactive-below). Without
/// proactive repair they always end at their hole.
const NARROW_REACTIVE_BELOW: Duration = Duration::from_millis(250);

/// Minimum RTTs from the start of a busy spell during which lost reactive repairs get
/// margin copies ([`Connection::in_startup`]).
const STARTUP_RTTS: u32 = 4;

/// Loss-detection delays (≈ 1.1 srtt each) the peer's in-order point may stand still
/// while symbols are unacknowledged before the stall watch owes a repair for its hole
/// (`Connection::watch_in_order_point`).
pub const STALL_ROUNDS: u32 = 2;

/// Shortest stand-still the stall watch answers: on short paths a hole's repairs take
/// that long anyway, and firing sooner sent redundant repairs (evidence:
/// docs/experiments/code-evidence.md#stall-floor).
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
                    rejected: None,
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
            peer_lacking: 0,
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
        s.backoffs = self.cc.backoffs();
        s.jitter = self.rtt.jitter();
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
        self.streams.is_empty() && self.encoder.is_empty() && self.control.is_empty()
    }

    /// The parameters the session runs with (negotiated once established).
    pub fn params(&self) -> wire::Params {
        self.config.params()
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

#[cfg(test)]
mod tests {
    use super::tail::tiny_flight_repairs;
    use super::AckState;
    use std::time::{Duration, Instant};

    #[test]
    fn arrivals_past_the_bitmap_wait_for_the_next_ack() {
        #[allow(clippy::disallowed_methods)] // a fixed base instant for the test
        let t = Instant::now();
        let mut a = AckState::default();
        a.on_packet(200, t, true);
        a.on_packet(136, t, true); // 64 behind: in the bitmap
        a.on_packet(135, t, true); // 65 behind: past it
        a.on_packet(10, t, true);
        assert_eq!(a.bitmap >> 63, 1);
        assert_eq!(a.late.iter().copied().collect::<Vec<_>>(), [135, 10]);
        assert!(a.immediate, "a late arrival is reported at once");
        for pn in 0..2 * super::LATE_QUEUE as u64 {
            a.on_packet(pn, t, true);
        }
        assert_eq!(a.late.len(), super::LATE_QUEUE, "bounded");
        assert_eq!(a.late.back(), Some(&(2 * super::LATE_QUEUE as u64 - 1)));
    }

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
