//! The session's counters for logs and metrics.

use std::time::Duration;

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
    /// [`STALL_ROUNDS`](super::STALL_ROUNDS) loss-detection delays, and at least 250 ms (counted among the
    /// reactive ones too).
    pub stall_repairs: u64,
    /// Congestion backoffs the controller made (for CTCP: gated losses and drains).
    pub backoffs: u64,
    /// Delay noise (see `RttEstimator::jitter`).
    pub jitter: Duration,
    /// Paths the session has (issue 29; 1 for a single-path session).
    pub paths: u8,
    /// Path-change events seen: paths added, addresses validated, deaths and returns.
    pub path_changes: u64,
    /// Losses whose repair was owed from another path's report of their path's packet
    /// numbers (a PATH_ACK, protocol 10) before their own path's ACK showed them: how often
    /// a faster path shortened a slower one's repair (0 with one path).
    pub reported_losses: u64,
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
