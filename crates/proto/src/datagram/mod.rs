//! Datagrams in the session (issue 27): unreliable, unordered, coded.
//!
//! The application hands a datagram to [`crate::Connection::send_datagram`]; it waits in
//! a bounded queue (the oldest dropped on overflow, or once older than the deadline) for
//! the congestion window and the pacer, and goes out ahead of stream data as a DATAGRAM
//! chunk with an id of its own datagram symbol space (`wire::datagram`), so it never waits
//! behind stream symbols. A systematic sliding-window code protects it: repairs combine
//! the datagrams sent within the deadline ([`Datagrams::deadline`]), at a rate the loss
//! estimate sets (`policy`), and a lost datagram is decoded from them within a few packets
//! or given up; none is retransmitted. The receiver hands every datagram it gets or
//! decodes to the application at once, in any order, through a bounded inbox
//! ([`crate::Connection::poll_datagram`], announced by [`crate::Event::DatagramReceived`]).
//!
//! This part owns the queues and the datagram encoder and decoder; `connection/datagram.rs`
//! wires it to the session (packets, congestion window, loss estimate, events).

pub(crate) mod policy;

use ctcp_rlnc::{CodecConfig, Decoder, Encoder, RepairHeader, SymbolId};
use std::collections::VecDeque;
use std::time::{Duration, Instant};
use thiserror::Error;

/// How many deadlines back a repair reaches: a burst of losses that the repairs within
/// the deadline cannot decode is decoded late by the next ones rather than lost (a late
/// datagram beats a lost one; the policy sizes the rate for the deadline alone).
pub(crate) const COVERAGE: u32 = 2;

/// Datagrams per deadline below which a flow counts as sparse and each datagram gets its
/// own repairs at once (`policy::lone_repairs`). Why not the flush wait (a quarter
/// deadline): DNS queries through a gateway at 20 a second and 500 ms RTT come about
/// 50 ms apart against a 44 ms wait, so their jittery mean interval would leave some
/// queries with only the rate's repairs. A window of fewer than 6 holds too few
/// datagrams for the rate's loose block target to protect them; 2 Mbit/s of 1,200-byte
/// datagrams at 100 ms RTT holds 16.
pub(crate) const SPARSE_PER_DEADLINE: u32 = 6;

/// A sparse flow's datagram within a deadline / `BURST_GAP` of the one before belongs to
/// its burst (`Datagrams::push`): half the sparse spacing (a deadline /
/// [`SPARSE_PER_DEADLINE`]), and above the 1–16 ms apart that processes started together
/// send in (`dig` under `xargs -P 10`; 15 ms of a 175 ms deadline at 500 ms RTT).
pub(crate) const BURST_GAP: u32 = 2 * SPARSE_PER_DEADLINE;

/// Most datagrams of a sparse flow's burst that leave its interval alone: a flow that
/// turns dense is known as dense this many datagrams later.
pub(crate) const MAX_BURST: u32 = 16;

/// The gap under which a datagram continues the burst before it, for a flow whose
/// interval is `known` or not yet: a deadline / [`BURST_GAP`] once it is, and the sparse
/// spacing (a deadline / [`SPARSE_PER_DEADLINE`]) before its first gap was measured.
///
/// Why the wider gap at first: a flow's first gap would otherwise set its interval alone,
/// and the first queries of a gateway's DNS clients, started together but a few to 16 ms
/// apart (process start-up), read as a dense flow and went out under the rate's thin
/// protection (docs/experiments/udp-p99.md, "Session 21"); a dense flow is known as dense
/// [`MAX_BURST`] datagrams later, and its first burst's repairs, still unsent, become the
/// rate's credit (`TxCoder::settle`).
fn burst_gap(deadline: Duration, known: bool) -> Duration {
    if known {
        deadline / BURST_GAP
    } else {
        deadline / SPARSE_PER_DEADLINE
    }
}

/// Datagram symbols the sender holds for repairs (its window; the receiver holds twice).
pub(crate) const TX_WINDOW: usize = 128;

/// Why [`crate::Connection::send_datagram`] refused a datagram.
#[derive(Debug, Error, Clone, Copy, PartialEq, Eq)]
pub enum DatagramError {
    /// This end or the peer does not take datagrams (see `TransportConfig::datagrams`).
    #[error("datagrams are not enabled on this session")]
    Disabled,
    /// The session is not established or has ended.
    #[error("session not established")]
    NotConnected,
    /// The datagram does not fit one packet.
    #[error("datagram of {len} bytes exceeds the limit of {max}")]
    TooLarge {
        /// Its length.
        len: usize,
        /// The largest that fits ([`crate::Connection::max_datagram_size`]).
        max: usize,
    },
}

/// Datagram counters of one session.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DatagramStats {
    /// Datagrams sent (first and only transmission).
    pub sent: u64,
    /// Payload bytes of those.
    pub sent_bytes: u64,
    /// Datagram repairs sent.
    pub repairs_sent: u64,
    /// Bytes of those repairs' coded data.
    pub repair_bytes: u64,
    /// Dropped from the send queue: it overflowed (the oldest goes).
    pub queue_dropped: u64,
    /// Dropped from the send queue: older than the deadline before they could be sent.
    pub expired: u64,
    /// Datagrams delivered to the inbox (received or decoded).
    pub received: u64,
    /// Of those, the ones decoded from repairs.
    pub recovered: u64,
    /// Dropped from the inbox: it overflowed (the oldest goes).
    pub inbox_dropped: u64,
    /// Datagram chunks that arrived on a session without datagrams, or did not decode.
    pub rejected: u64,
}

#[derive(Debug)]
struct Queued {
    at: Instant,
    data: Vec<u8>,
}

/// One datagram symbol the encoder holds: when it left and its coded length.
#[derive(Debug, Clone, Copy)]
struct Held {
    id: SymbolId,
    sent: Instant,
    coded_len: usize,
}

/// The sending side's coder, allocated with the first datagram.
#[derive(Debug)]
struct TxCoder {
    encoder: Encoder,
    held: VecDeque<Held>,
    /// Repairs earned (rate per datagram sent), less those sent; may go down to -1 when a
    /// datagram left unprotected for too long borrows the next repair.
    credit: f64,
    /// Repairs owed at once to the lone datagrams just sent (see `Datagrams::poll_next`).
    owed: u32,
    /// Lone datagrams sent since `owed` was last 0 (they share its repairs), and the
    /// repairs sent for them so far.
    group: u32,
    group_repairs: u32,
    /// When the oldest datagram sent since the last repair left.
    unprotected: Option<Instant>,
    repair: Vec<u8>,
}

/// What the next datagram packet carries.
#[derive(Debug)]
pub(crate) enum Next {
    /// A datagram: its id and payload.
    Source(SymbolId, Vec<u8>),
    /// A repair: its header; the coded bytes are in [`Datagrams::repair_data`].
    Repair(RepairHeader),
}

/// How a datagram's sender protects what it sends (see `policy`).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Protection {
    /// Repairs per datagram for datagrams close together (`policy::repair_rate`).
    pub(crate) rate: f64,
    /// Repairs right behind a lone datagram (`policy::lone_repairs`).
    pub(crate) lone: u32,
    /// The cautious loss rate behind `lone`, which sizes the repairs of lone datagrams
    /// sent together (`policy::group_repairs`).
    pub(crate) loss: f64,
}

impl Protection {
    /// Repairs at `rate` per datagram and none behind lone datagrams.
    #[cfg(test)]
    pub(crate) fn rate(rate: f64) -> Self {
        Protection {
            rate,
            lone: 0,
            loss: 0.0,
        }
    }
}

/// The session's datagram state: queues, coder, counters.
#[derive(Debug)]
pub(crate) struct Datagrams {
    symbol_size: usize,
    queue: VecDeque<Queued>,
    inbox: VecDeque<Vec<u8>>,
    tx: Option<Box<TxCoder>>,
    rx: Option<Box<Decoder>>,
    /// Mean time between datagrams queued (EWMA), to size the window the policy sees.
    interval: Option<Duration>,
    last_queued: Option<Instant>,
    /// Datagrams of a sparse flow's current burst that left the interval alone (see
    /// `push`).
    burst: u32,
    /// A burst ran to [`MAX_BURST`] and the datagram after it came as close: the flow is
    /// dense, and the burst's owed repairs become rate credit (see `poll_next`).
    burst_overran: bool,
    /// When a repair for datagrams left unprotected is due (see `poll_next`).
    pub(crate) wakeup: Option<Instant>,
    pub(crate) stats: DatagramStats,
}

impl Datagrams {
    pub(crate) fn new(symbol_size: usize) -> Self {
        Datagrams {
            symbol_size,
            queue: VecDeque::new(),
            inbox: VecDeque::new(),
            tx: None,
            rx: None,
            interval: None,
            last_queued: None,
            burst: 0,
            burst_overran: false,
            wakeup: None,
            stats: DatagramStats::default(),
        }
    }

    /// How long a datagram is worth sending or repairing: `base` plus a quarter RTT.
    pub(crate) fn deadline(base: Duration, srtt: Duration) -> Duration {
        base + srtt / 4
    }

    /// Queues a datagram (the caller checked its size); drops the oldest beyond `cap`.
    /// The gap since the previous one counts at most `deadline` in the mean interval, so
    /// that one pause of a dense flow does not make its next datagrams look sparse.
    ///
    /// A sparse flow's datagrams that come in a burst (each within 1/[`BURST_GAP`] of a
    /// deadline of the one before, at most [`MAX_BURST`] in a row) leave the
    /// interval alone: independent requests sent at once (a resolver's queries, clients
    /// started together) are still a sparse flow, and their burst is protected as a group
    /// (`policy::group_repairs`) rather than at the thin rate of a flow that looks dense
    /// for a moment.
    pub(crate) fn push(&mut self, now: Instant, data: &[u8], cap: usize, deadline: Duration) {
        if let Some(last) = self.last_queued {
            let gap = now.saturating_duration_since(last).min(deadline);
            let close = self.sparse(deadline) && gap < burst_gap(deadline, self.interval.is_some());
            self.burst_overran |= close && self.burst >= MAX_BURST;
            if close && self.burst < MAX_BURST {
                self.burst += 1;
            } else {
                self.burst = 0;
                self.interval = Some(match self.interval {
                    Some(i) => (i * 7 + gap) / 8,
                    None => gap,
                });
            }
        }
        self.last_queued = Some(now);
        self.queue.push_back(Queued {
            at: now,
            data: data.to_vec(),
        });
        while self.queue.len() > cap.max(1) {
            self.queue.pop_front();
            self.stats.queue_dropped += 1;
        }
    }

    /// Datagrams per deadline window, as the application sends them.
    pub(crate) fn per_window(&self, deadline: Duration) -> usize {
        match self.interval {
            Some(i) if !i.is_zero() => (deadline.as_nanos() / i.as_nanos()) as usize,
            Some(_) => policy::MAX_SPAN,
            None => 2,
        }
    }

    /// Whether anything is queued to send.
    pub(crate) fn has_queued(&self) -> bool {
        !self.queue.is_empty()
    }

    /// Whether datagrams come too far apart for one to wait for followers: the first
    /// one, or fewer than [`SPARSE_PER_DEADLINE`] per deadline on average.
    fn sparse(&self, deadline: Duration) -> bool {
        self.interval
            .is_none_or(|i| i >= deadline / SPARSE_PER_DEADLINE)
    }

    /// Until when the first burst of a flow with no interval yet may still grow
    /// ([`burst_gap`]), if it may: its datagrams' repairs wait that long and are shared
    /// (`policy::group_repairs`). Why only then: a dense flow's first datagrams pass for
    /// a burst until [`MAX_BURST`], and their owed repairs must still be unsent when it
    /// turns out dense (they become rate credit); once the flow is known sparse, each
    /// datagram's repairs go at once, since waiting would delay a lost one's recovery.
    fn burst_open_until(&self, deadline: Duration) -> Option<Instant> {
        let last = self.last_queued?;
        (self.interval.is_none() && self.burst <= MAX_BURST)
            .then(|| last + burst_gap(deadline, false))
    }

    /// Chooses the next datagram packet at `now`, if one is due, with `protection`
    /// (repairs per datagram; repairs behind a lone one) and the `deadline`. `can_send`:
    /// the window and pacer let a packet out (otherwise only the wakeup is computed).
    ///
    /// Datagrams close together earn repairs at the rate, and the flush of unprotected
    /// ones waits a quarter of the deadline for more to cover. A sparse flow's datagram
    /// ([`Datagrams::sparse`]) would wait for nothing: its `lone` repairs follow it as soon
    /// as the queue is empty (so that datagrams queued together share them), and in a
    /// flow's first burst once that burst is over ([`Datagrams::burst_open_until`]).
    pub(crate) fn poll_next(
        &mut self,
        now: Instant,
        can_send: bool,
        protection: Protection,
        deadline: Duration,
    ) -> Option<Next> {
        let Protection { rate, lone, loss } = protection;
        let sparse = lone > 0 && self.sparse(deadline);
        while self
            .queue
            .front()
            .is_some_and(|q| now.saturating_duration_since(q.at) > deadline)
        {
            self.queue.pop_front();
            self.stats.expired += 1;
        }
        self.wakeup = None;
        // A flow's first burst: its repairs wait while it may still grow.
        let gathering = self.burst_open_until(deadline).filter(|&t| t > now);
        let symbol_size = self.symbol_size;
        let tx = self
            .tx
            .get_or_insert_with(|| Box::new(TxCoder::new(symbol_size)));
        tx.settle(
            now,
            COVERAGE * deadline,
            std::mem::take(&mut self.burst_overran).then_some(rate),
        );
        let owed_due = tx.owed > 0 && self.queue.is_empty() && gathering.is_none();
        let flush_at = tx.unprotected.map(|t| t + deadline / 4);
        let repair_due = owed_due
            || (rate > 0.0
                && tx.unprotected.is_some()
                && (tx.credit >= 1.0 || (tx.credit >= 0.0 && flush_at.is_some_and(|t| t <= now))));
        if !repair_due && rate > 0.0 && tx.credit >= 0.0 {
            self.wakeup = flush_at.filter(|&t| t > now);
        }
        if tx.owed > 0 && self.queue.is_empty() {
            if let Some(t) = gathering {
                self.wakeup = Some(self.wakeup.map_or(t, |w| w.min(t)));
            }
        }
        if !can_send {
            return None;
        }
        if repair_due {
            if let Some(h) = tx.repair() {
                if owed_due {
                    tx.owed -= 1;
                    tx.group_repairs += 1;
                } else {
                    tx.credit -= 1.0;
                }
                self.stats.repairs_sent += 1;
                return Some(Next::Repair(h));
            }
        }
        let q = self.queue.pop_front()?;
        // A sparse flow's datagram is protected by its own repairs, not the rate's.
        let id = tx.push(now, &q.data, if sparse { 0.0 } else { rate });
        if sparse {
            // Lone datagrams sent before their predecessors' repairs went out share them:
            // the group's repairs grow with it.
            tx.group += 1;
            let want = policy::group_repairs(loss, lone, tx.group);
            tx.owed = tx.owed.max(want.saturating_sub(tx.group_repairs));
            tx.unprotected = None;
        }
        self.stats.sent += 1;
        self.stats.sent_bytes += q.data.len() as u64;
        Some(Next::Source(id, q.data))
    }

    /// The coded bytes of the repair [`Datagrams::poll_next`] just returned, cut after the
    /// longest coded form it combines.
    pub(crate) fn repair_data(&mut self) -> &[u8] {
        match &self.tx {
            Some(tx) => {
                let len = tx.repair_len();
                self.stats.repair_bytes += len as u64;
                &tx.repair[..len]
            }
            None => &[],
        }
    }

    /// The decoder's frontier, around which datagram ids are reconstructed.
    pub(crate) fn expected_id(&self) -> SymbolId {
        self.rx.as_ref().map_or(0, |d| d.next_in_order())
    }

    fn decoder(&mut self) -> &mut Decoder {
        let symbol_size = self.symbol_size;
        self.rx.get_or_insert_with(|| {
            Box::new(Decoder::new(CodecConfig {
                symbol_size,
                window: 2 * TX_WINDOW,
            }))
        })
    }

    /// A DATAGRAM chunk arrived. Returns whether the inbox turned non-empty.
    pub(crate) fn on_source(&mut self, id: SymbolId, payload: &[u8], cap: usize) -> bool {
        let dec = self.decoder();
        // The sender holds at most TX_WINDOW symbols: anything older is gone for good.
        dec.give_up_below((id + 1).saturating_sub(TX_WINDOW as u64));
        let direct = matches!(
            dec.receive_source(id, payload),
            Ok(ctcp_rlnc::Received::New)
        );
        self.drain(cap, usize::from(direct))
    }

    /// A DATAGRAM_REPAIR chunk arrived. Returns whether the inbox turned non-empty.
    pub(crate) fn on_repair(&mut self, header: &RepairHeader, data: &[u8], cap: usize) -> bool {
        let mut coded = vec![0u8; self.symbol_size];
        coded[..data.len()].copy_from_slice(data);
        let dec = self.decoder();
        // The sender's repairs start at its oldest datagram still within the deadline, and
        // that only moves forward: what lies below is given up.
        dec.give_up_below(header.first);
        if dec.receive_repair(header, &coded).is_err() {
            self.stats.rejected += 1;
        }
        self.drain(cap, 0)
    }

    fn drain(&mut self, cap: usize, direct: usize) -> bool {
        let was_empty = self.inbox.is_empty();
        let Some(dec) = self.rx.as_mut() else {
            return false;
        };
        let mut n: usize = 0;
        while let Some((_, p)) = dec.poll_decoded() {
            self.inbox.push_back(p.to_vec());
            n += 1;
        }
        self.stats.received += n as u64;
        self.stats.recovered += n.saturating_sub(direct) as u64;
        while self.inbox.len() > cap.max(1) {
            self.inbox.pop_front();
            self.stats.inbox_dropped += 1;
        }
        was_empty && !self.inbox.is_empty()
    }

    /// The next received datagram.
    pub(crate) fn pop(&mut self) -> Option<Vec<u8>> {
        self.inbox.pop_front()
    }
}

impl TxCoder {
    /// Drops what is older than `span`, and the repairs owed to a group that is gone or
    /// paid. `dense_rate`: the flow turned out dense (its first datagrams had passed for a
    /// burst), so the group's owed repairs become credit at that rate, as for the rest
    /// of the flow.
    fn settle(&mut self, now: Instant, span: Duration, dense_rate: Option<f64>) {
        self.expire(now, span);
        if let Some(rate) = dense_rate {
            self.credit = (self.credit + rate * f64::from(self.group)).min(2.0);
            self.owed = 0;
        }
        if self.held.is_empty() {
            self.owed = 0;
        }
        if self.owed == 0 {
            self.group = 0;
            self.group_repairs = 0;
        }
    }
    fn new(symbol_size: usize) -> Self {
        TxCoder {
            encoder: Encoder::new(CodecConfig {
                symbol_size,
                window: TX_WINDOW,
            }),
            held: VecDeque::new(),
            credit: 0.0,
            owed: 0,
            group: 0,
            group_repairs: 0,
            unprotected: None,
            repair: vec![0; symbol_size],
        }
    }

    /// Forgets datagrams older than the deadline: no repair will cover them again.
    fn expire(&mut self, now: Instant, deadline: Duration) {
        while let Some(h) = self.held.front() {
            if now.saturating_duration_since(h.sent) <= deadline {
                break;
            }
            self.encoder.retire_through(h.id);
            self.held.pop_front();
        }
        if self.held.is_empty() {
            self.unprotected = None;
        }
    }

    fn push(&mut self, now: Instant, payload: &[u8], rate: f64) -> SymbolId {
        if self.encoder.is_full() {
            self.encoder.retire_through(self.encoder.first_id());
            self.held.pop_front();
        }
        // The caller bounded the payload by the symbol size and made room above.
        let id = self.encoder.push(payload).unwrap_or(self.encoder.next_id());
        self.held.push_back(Held {
            id,
            sent: now,
            coded_len: payload.len() + 2,
        });
        self.credit = (self.credit + rate).min(2.0);
        self.unprotected.get_or_insert(now);
        id
    }

    /// Builds a repair over the newest datagrams held (at most `policy::MAX_SPAN`).
    fn repair(&mut self) -> Option<RepairHeader> {
        let span = self.held.len().min(policy::MAX_SPAN);
        let first = self.held.get(self.held.len().checked_sub(span)?)?.id;
        let count = (self.encoder.next_id() - first) as u16;
        let h = self.encoder.repair(first, count, &mut self.repair).ok()?;
        self.unprotected = None;
        Some(h)
    }

    /// Bytes of the last repair worth sending: the longest coded form it combines.
    fn repair_len(&self) -> usize {
        let span = self.held.len().min(policy::MAX_SPAN);
        self.held
            .iter()
            .rev()
            .take(span)
            .map(|h| h.coded_len)
            .max()
            .unwrap_or(2)
            .min(self.repair.len())
    }
}

#[cfg(test)]
mod tests;
