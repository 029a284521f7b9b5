//! What the connection tells the repair scheduler: plain numbers, never packets (see the
//! module docs of `repair`).

use crate::estimate::loss::GilbertParams;
use crate::sent::InFlightAfter;
use ctcp_rlnc::SymbolId;
use std::time::Duration;

/// The encoder's unacknowledged symbols, `[first, next)`: what a repair can span.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Unacked {
    /// Oldest symbol held (the peer's in-order point once ACKs retire the rest).
    pub(crate) first: SymbolId,
    /// Id the next source symbol gets.
    pub(crate) next: SymbolId,
}

impl Unacked {
    /// Symbols held.
    pub(crate) fn len(&self) -> u32 {
        u32::try_from(self.next - self.first).unwrap_or(u32::MAX)
    }

    /// Whether nothing is unacknowledged.
    pub(crate) fn is_empty(&self) -> bool {
        self.next == self.first
    }
}

/// What one ACK tells the scheduler, once the sent ledger has read it and declared the
/// losses it shows.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AckSummary {
    /// The peer's decoder deficit: further equations it needs.
    pub(crate) deficit: u32,
    /// One past the highest symbol id the peer has seen (0: none).
    pub(crate) highest_seen: SymbolId,
    /// What is in flight among the packets sent after the one this ACK reports last.
    pub(crate) after: InFlightAfter,
    /// The first source symbol among those packets.
    pub(crate) first_source_after: Option<SymbolId>,
    /// No repair at all in flight, and no packet the ACK should cover unresolved: the
    /// deficit safety net may owe repairs.
    pub(crate) quiet: bool,
    /// The loss estimate.
    pub(crate) p: f64,
    /// The encoder's window after the ACK retired what the peer holds.
    pub(crate) unacked: Unacked,
    /// The session has several paths: sources sent on a slower path can lie above every
    /// id this ACK's path carried, so owed repairs for sources above both the peer's
    /// highest seen id and `first_source_after` (a dead path's flight) are unseen too.
    pub(crate) multipath: bool,
}

/// What [`RepairScheduler::repair_ratio`] sizes the proactive share from.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RatioInputs {
    /// Congestion window, packets: the decode block the repairs cover.
    pub(crate) window: u64,
    /// The loss estimate.
    pub(crate) p: f64,
    /// Burst parameters of the loss.
    pub(crate) gilbert: GilbertParams,
    /// Smoothed RTT.
    pub(crate) srtt: Duration,
}
