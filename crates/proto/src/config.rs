//! Transport parameters shared by both ends of a session.

use crate::cc::ControllerKind;
use crate::wire::{Params, FEATURE_DATAGRAMS};
use std::time::Duration;

/// Tunables of the coded transport. The handshake carries the ones both ends must share
/// ([`Params`]): `symbol_size` must match (a mismatch is refused, naming both values), and
/// `window` is negotiated down to the smaller of the two sides' values. The smaller of the
/// two offered `stream_window`s (`session_window`s) is the credit every stream (the
/// session) starts with in both directions; from the first read on, each end grants up
/// to its own window.
#[derive(Debug, Clone, PartialEq)]
pub struct TransportConfig {
    /// Coded symbol size in bytes (a multiple of 64 so GF kernels see no tails).
    pub symbol_size: usize,
    /// Sender window in symbols; the receiver accepts twice this.
    pub window: usize,
    /// Largest datagram we emit (IPv6-safe default).
    pub max_datagram: usize,
    /// RTT assumed before the first sample.
    pub initial_rtt: Duration,
    /// The session dies after this long without an authenticated packet from the peer.
    pub idle_timeout: Duration,
    /// Send a PING after this long without sending anything.
    pub keepalive: Duration,
    /// Give up on a handshake after this long.
    pub handshake_timeout: Duration,
    /// Longest the receiver holds back an ACK.
    pub max_ack_delay: Duration,
    /// Per-stream receive credit in bytes (default 64 MiB: the credit is offset-based, so it
    /// must cover a 100 Mbit/s × 600 ms pipe in flight plus the data held behind holes
    /// while their repairs come, two or three round trips at 1 % loss; buffers grow only
    /// with what is held). Evidence: BENCHMARKS.md, the large pipe.
    pub stream_window: u64,
    /// Per-session receive credit in bytes, across streams (default 128 MiB).
    pub session_window: u64,
    /// Receive-credit autotuning (default off). The handshake offers
    /// [`AUTOTUNE_INITIAL_CREDIT`] per stream and [`AUTOTUNE_SESSION_FLOOR`] per session
    /// as the initial credit; after that a stream's credit runs a window ahead of the read
    /// point that starts at [`AUTOTUNE_STREAM_FLOOR`], or at four times the incoming path's
    /// bandwidth-delay product as the handshake train measured it if that is more, and
    /// grows, Linux-style, once the application reads more than half of it within a
    /// smoothed round trip (bytes that waited readable do not count), to three times a
    /// round trip's reads (more while they still rise), at most `stream_window`; the
    /// session's runs the open streams' windows
    /// summed ahead, at least its floor, at most `session_window`. Windows never shrink
    /// and granted credit is never taken back. A relay turns it on for its segments: it
    /// then holds per stream about what the next segment drains in a couple of round
    /// trips, instead of a whole `stream_window` that a fast segment in front of a slow
    /// one would fill.
    pub credit_autotune: bool,
    /// Bytes an application may queue on one stream before writes block.
    pub stream_send_buffer: usize,
    /// Bytes all streams of a session may queue together before writes block: the
    /// session's send-side memory budget (receive side: `session_window`).
    pub session_send_buffer: usize,
    /// Most concurrent streams the peer may open.
    pub max_streams: usize,
    /// Congestion controller.
    pub congestion: ControllerKind,
    /// Optional sending-rate ceiling in bits per second.
    pub max_rate_bps: Option<u64>,
    /// Initial congestion window in packets.
    pub initial_window: u64,
    /// INITIATE copies the client sends back to back, padded to `max_datagram`, so the
    /// handshake measures the path's rate both ways (see `handshake_train`); 0 sends one
    /// small copy instead and leaves rate finding to the start-up probe. At most 64 count;
    /// fewer than 4 arrivals give no estimate, so a train of 1–3 only pads.
    pub handshake_train: u8,
    /// Repairs sent ahead of any loss report, as a share of the expected loss (1.0: as
    /// many as the loss estimate predicts, capped by the redundancy policy's decode
    /// target), scaled down in proportion on paths under 500 ms srtt (0.9 acts as 0.18 at
    /// 100 ms), at most 4. 0, the default, repairs what the receiver reports missing plus
    /// a margin for the flight's likely losses when the sender falls idle (tail repairs and
    /// probes): nearly every repair fills a hole, which keeps the wire within
    /// 1.05/(1 − loss) of the goodput, but each loss delays in-order delivery by about a
    /// round trip (evidence: docs/experiments/code-evidence.md#proactive-repair-default).
    /// Values above 0 buy delivery delay with bandwidth; 0.9 was built in before this
    /// setting existed. Not finite counts as 0.
    pub proactive_repair: f64,
    /// What speculative repairs optimise when the sender falls idle: delivery delay
    /// (the default) or bandwidth. Matters for application-limited flows, which fall idle
    /// after every write; a bulk flow's repairs are nearly all reactive either way.
    pub repair_priority: RepairPriority,
    /// Whether this end takes and sends datagrams (issue 27; the handshake's datagram
    /// feature bit): a session has them only if both ends do.
    pub datagrams: bool,
    /// How long a datagram may wait for its first transmission or for repairs, beyond a
    /// quarter of the smoothed RTT: one queued longer is dropped, and repairs cover only
    /// the datagrams sent within it (a lost one is recovered from them or given up; none
    /// is retransmitted).
    pub datagram_deadline: Duration,
    /// Datagrams queued per direction at most, to send and received but not yet read;
    /// beyond it the oldest is dropped (counted).
    pub datagram_queue: usize,
    /// How a session with several paths uses them (issue 29); a single-path session is
    /// the same under every policy.
    pub path_policy: PathPolicy,
}

/// The credit an autotuned receiver gives a stream before the first read
/// ([`TransportConfig::credit_autotune`]; offered in the handshake): room for the first
/// flight of a sender that jumps to the path's rate at once (0.85 BDP, 640 kB on a
/// 10 Mbit/s, 600 ms path), so a long path starts at its rate. A fast sender in front of
/// a slow reader fills it once; later grants follow the tuned window.
pub const AUTOTUNE_INITIAL_CREDIT: u64 = 1 << 20;

/// The per-stream receive window an autotuned receiver starts from: how far ahead of the
/// read point it grants credit until the reader shows it drains faster. At 256 KiB a
/// reader draining 10 Mbit/s holds 0.2 s of data; a faster one grows the window within
/// the round trip it reads more than half of it in.
pub const AUTOTUNE_STREAM_FLOOR: u64 = 256 << 10;

/// The session receive window an autotuned receiver starts from (and offers in the
/// handshake): room for a few streams' initial credit; beyond it the session grants what
/// the open streams' windows add up to.
pub const AUTOTUNE_SESSION_FLOOR: u64 = 4 << 20;

/// What the repairs sent when a sender falls idle (tail repairs) are sized for.
///
/// A repair sent before the losses it covers are reported is useless whenever its flight
/// lost fewer symbols than repairs were sent, so repairing an application-limited flow's
/// likely losses before they are reported costs well above the erasure minimum p/(1 − p),
/// and getting near that minimum means waiting for the loss reports (the trade, measured:
/// docs/experiments/app-limited-frontier.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RepairPriority {
    /// Each idle spell's flight gets its expected losses plus a two-sigma margin in tail
    /// repairs: most holes fill without waiting for a loss report, at well above the
    /// erasure minimum on an application-limited flow (figures: BENCHMARKS.md,
    /// "Application-limited senders").
    #[default]
    Latency,
    /// Only flights of one or two symbols (a request, a credit update) get tail repairs;
    /// every other loss is repaired once the receiver reports it: about the erasure
    /// minimum, each loss delivered one to a few round trips later. For bulk jobs held
    /// below the link's rate (a rate-limited backup, a paced upload) on costly links.
    Bandwidth,
}

/// How a session uses its paths when it has more than one (issue 29).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PathPolicy {
    /// Every usable path carries data, each packet on the path where it arrives first;
    /// the sum of the paths' rates.
    #[default]
    Aggregate,
    /// One path carries data (the lowest-numbered usable one); the others carry probes
    /// only and take over when it dies.
    Failover,
    /// Every packet on the earliest path, and a coded copy of it on every other usable
    /// path: the lowest delivery delay under loss, at the cost of the other paths' rate.
    Redundant,
}

impl Default for TransportConfig {
    fn default() -> Self {
        TransportConfig {
            symbol_size: 1408,
            window: 16384,
            max_datagram: 1452,
            initial_rtt: Duration::from_millis(100),
            idle_timeout: Duration::from_secs(30),
            keepalive: Duration::from_secs(5),
            handshake_timeout: Duration::from_secs(10),
            max_ack_delay: Duration::from_millis(5),
            stream_window: 64 << 20,
            session_window: 128 << 20,
            credit_autotune: false,
            stream_send_buffer: 256 << 10,
            session_send_buffer: 16 << 20,
            max_streams: 4096,
            congestion: ControllerKind::Ctcp,
            max_rate_bps: None,
            initial_window: 32,
            handshake_train: 16,
            proactive_repair: 0.0,
            repair_priority: RepairPriority::Latency,
            datagrams: true,
            datagram_deadline: Duration::from_millis(50),
            datagram_queue: 256,
            path_policy: PathPolicy::Aggregate,
        }
    }
}

impl TransportConfig {
    /// The parameters this configuration offers in a handshake. Values beyond the wire
    /// fields' range are sent saturated (the config crate keeps them far below). With
    /// `credit_autotune` the credit offered is the autotuner's starting window.
    pub fn params(&self) -> Params {
        Params {
            symbol_size: u16::try_from(self.symbol_size).unwrap_or(u16::MAX),
            window: u32::try_from(self.window).unwrap_or(u32::MAX),
            stream_window: self.initial_stream_window(),
            session_window: self.initial_session_window(),
            features: if self.datagrams { FEATURE_DATAGRAMS } else { 0 },
        }
    }

    /// This configuration with the negotiated coding window and features of `p` (see
    /// [`Params::negotiate`]). `stream_window` and `session_window` stay this end's own:
    /// they bound the credit it grants, while `p`'s are only the credit streams and the
    /// session start with.
    pub fn with_params(&self, p: &Params) -> TransportConfig {
        TransportConfig {
            window: usize::try_from(p.window).unwrap_or(usize::MAX),
            datagrams: p.features & FEATURE_DATAGRAMS != 0,
            ..self.clone()
        }
    }

    /// The credit this end offers every stream at its start (the handshake's stream
    /// window): `stream_window`, or with autotuning [`AUTOTUNE_INITIAL_CREDIT`] (at most
    /// `stream_window`).
    pub fn initial_stream_window(&self) -> u64 {
        if self.credit_autotune {
            self.stream_window.min(AUTOTUNE_INITIAL_CREDIT)
        } else {
            self.stream_window
        }
    }

    /// The session credit this end offers at the start (the handshake's session window):
    /// `session_window`, or with autotuning [`AUTOTUNE_SESSION_FLOOR`] (at most
    /// `session_window`).
    pub fn initial_session_window(&self) -> u64 {
        if self.credit_autotune {
            self.session_window.min(AUTOTUNE_SESSION_FLOOR)
        } else {
            self.session_window
        }
    }
}
