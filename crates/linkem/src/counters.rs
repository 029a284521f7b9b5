//! What one direction of the link did to the packets it was given.

use serde::{Deserialize, Serialize};

/// Cumulative per-direction counters of a [`crate::Link`].
///
/// Every packet pushed ends up in exactly one of `delivered` (minus the
/// duplicates), `lost`, `queue_drops`, `down_drops`, or still in flight, so in
/// steady state
/// `packets_in + duplicated = delivered + lost + queue_drops + down_drops + in flight`.
/// Also read back from the statistics lines (see [`crate::StatsLine`]) by tools
/// that drive the emulator, such as the `netbench` runner.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counters {
    /// Packets pushed into the link.
    pub packets_in: u64,
    /// Bytes pushed into the link.
    pub bytes_in: u64,
    /// Packets released at the far end, duplicates included.
    pub delivered: u64,
    /// Bytes released at the far end, duplicates included.
    pub bytes_delivered: u64,
    /// Packets dropped by channel loss (Bernoulli or Gilbert-Elliott).
    pub lost: u64,
    /// Packets dropped because the drop-tail queue was full.
    pub queue_drops: u64,
    /// Extra copies made by duplication.
    pub duplicated: u64,
    /// Packets released after a packet that was pushed later than them, that
    /// is reordering as the receiver sees it (whether caused by `reorder` or
    /// by jitter with reordering allowed).
    pub reordered: u64,
    /// Packets dropped because the link was down ([`crate::Link::set_down`]):
    /// pushed while down, or on the link when it went down. Absent from
    /// statistics lines of older versions, hence the serde default.
    #[serde(default)]
    pub down_drops: u64,
}
