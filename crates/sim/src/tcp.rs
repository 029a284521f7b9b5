//! [`TcpSender`] / [`TcpReceiver`]: a model of a kernel TCP bulk flow, to
//! compete with ctcp in fairness tests and to show the Mathis collapse.
//!
//! It is not a full TCP: one direction of bulk data, segments of
//! [`TcpConfig::mss`] payload bytes behind a 40-byte header, no handshake,
//! no receive window. What it does model is the loss behaviour: cumulative
//! ACK plus up to [`MAX_SACK_BLOCKS`] SACK blocks, loss detection by
//! duplicate threshold (3 SACKed segments above a hole) or RACK (a segment
//! sent before a delivered one is lost once `rtt + min_rtt/4` has passed),
//! one congestion event per window (recovery until the recovery point is
//! acknowledged), RFC 6298 RTO with exponential backoff and a 200 ms floor,
//! slow start from an initial window of 10, and Cubic (RFC 9438, C = 0.4,
//! β = 0.7, fast convergence, Reno-friendly region, and Linux's HyStart delay
//! detection) or NewReno growth.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::{Duration, Instant};

use crate::sim::Endpoint;

/// Bytes of header in front of every data segment (IP + TCP with options).
pub const HEADER_BYTES: usize = 40;
/// Most SACK blocks in one ACK.
pub const MAX_SACK_BLOCKS: usize = 4;

const KIND_DATA: u8 = 0;
const KIND_ACK: u8 = 1;

/// Which congestion controller a [`TcpSender`] uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum CcAlgorithm {
    /// RFC 9438 Cubic.
    #[default]
    Cubic,
    /// RFC 6582/5681 NewReno.
    NewReno,
    /// BBR v1's in-flight cap without its pacing: a window of twice the highest delivery
    /// rate of the last ten rounds × the lowest RTT seen, which no loss lowers (see
    /// [`BbrWindow`]).
    BbrWindow,
}

/// Sender parameters.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TcpConfig {
    /// Payload bytes per segment.
    pub mss: usize,
    /// Initial window in segments.
    pub initial_window: u32,
    /// Minimum RTO.
    pub min_rto: Duration,
    /// Maximum RTO.
    pub max_rto: Duration,
    /// RTO before the first RTT sample.
    pub initial_rto: Duration,
    /// SACKed segments above a hole that declare it lost.
    pub dupthresh: u64,
    /// Bytes to send; `None` for an unlimited bulk flow.
    pub bytes: Option<u64>,
    /// When to start sending; `None` for at once.
    pub start_at: Option<Instant>,
    /// Congestion controller.
    pub cc: CcAlgorithm,
}

impl Default for TcpConfig {
    fn default() -> Self {
        Self {
            mss: 1400,
            initial_window: 10,
            min_rto: Duration::from_millis(200),
            max_rto: Duration::from_secs(60),
            initial_rto: Duration::from_secs(1),
            dupthresh: 3,
            bytes: None,
            start_at: None,
            cc: CcAlgorithm::Cubic,
        }
    }
}

/// A window-based congestion controller in segments.
pub(crate) trait CongestionControl {
    /// `acked` segments were newly acknowledged (outside recovery).
    fn on_ack(&mut self, now: Instant, acked: u64, srtt: Duration);
    /// Loss detected (at most once per window).
    fn on_congestion_event(&mut self, now: Instant);
    /// The retransmission timer fired.
    fn on_retransmission_timeout(&mut self, now: Instant);
    /// An RTT sample from an ACK that moved `una` (the lowest unacknowledged segment);
    /// `nxt` is the next segment to be sent.
    fn on_rtt_sample(&mut self, _rtt: Duration, _una: u64, _nxt: u64) {}
    /// Congestion window in segments.
    fn window(&self) -> f64;
}

/// RFC 9438 Cubic. Window unit: segments; time unit: seconds.
#[derive(Clone, Debug)]
pub(crate) struct Cubic {
    cwnd: f64,
    ssthresh: f64,
    w_max: f64,
    k: f64,
    epoch: Option<Instant>,
    w_est: f64,
    cwnd_epoch: f64,
    hystart: HyStart,
}

/// Linux Cubic's HyStart delay detection (`tcp_cubic.c`, `HYSTART_DELAY`): slow start
/// ends when the lowest of a round's first 8 RTT samples exceeds the connection's minimum
/// by an eighth of it, clamped to 4–16 ms. Why modelled: the kernel's Cubic leaves slow
/// start on the queue a competing flow builds, and a model without it takes more of a
/// shared link at long RTTs than the kernel's Cubic does.
#[derive(Clone, Debug, Default)]
struct HyStart {
    /// The round ends once this segment is acknowledged (`nxt` when it began).
    round_end: Option<u64>,
    delay_min: Option<Duration>,
    round_min: Option<Duration>,
    samples: u32,
    /// Slow start was ended by a delay rise (until the next retransmission timeout).
    found: bool,
}

impl HyStart {
    /// Samples per round before the round's minimum is compared.
    const MIN_SAMPLES: u32 = 8;
    /// HyStart acts only from this window (segments).
    const LOW_WINDOW: f64 = 16.0;

    /// Whether `rtt` shows a delay rise that ends slow start.
    fn exits(&mut self, rtt: Duration, una: u64, nxt: u64) -> bool {
        if self.found {
            return false;
        }
        if self.round_end.is_none_or(|end| una > end) {
            self.round_end = Some(nxt);
            self.round_min = None;
            self.samples = 0;
        }
        let round_min = self.round_min.map_or(rtt, |m| m.min(rtt));
        self.round_min = Some(round_min);
        if self.samples < Self::MIN_SAMPLES {
            self.samples += 1;
            return false;
        }
        let delay_min = self.delay_min.unwrap_or(rtt);
        let threshold = (delay_min / 8).clamp(Duration::from_millis(4), Duration::from_millis(16));
        self.found = round_min > delay_min + threshold;
        self.found
    }
}

impl Cubic {
    /// Cubic's C.
    pub(crate) const C: f64 = 0.4;
    /// Cubic's multiplicative decrease factor.
    pub(crate) const BETA: f64 = 0.7;

    /// Cubic with an initial window of `initial_window` segments.
    #[must_use]
    pub(crate) fn new(initial_window: f64) -> Self {
        Self {
            cwnd: initial_window,
            ssthresh: f64::INFINITY,
            w_max: 0.0,
            k: 0.0,
            epoch: None,
            w_est: initial_window,
            cwnd_epoch: initial_window,
            hystart: HyStart::default(),
        }
    }

    fn w_cubic(&self, t: f64) -> f64 {
        Self::C * (t - self.k).powi(3) + self.w_max
    }

    fn reduce(&mut self) {
        self.epoch = None;
        // Fast convergence: release bandwidth when the window shrinks.
        self.w_max = if self.cwnd < self.w_max {
            self.cwnd * (1.0 + Self::BETA) / 2.0
        } else {
            self.cwnd
        };
        self.ssthresh = (self.cwnd * Self::BETA).max(2.0);
    }
}

impl CongestionControl for Cubic {
    fn on_ack(&mut self, now: Instant, acked: u64, srtt: Duration) {
        let mut acked = acked as f64;
        if self.cwnd < self.ssthresh {
            let room = self.ssthresh - self.cwnd;
            let grow = acked.min(room);
            self.cwnd += grow;
            acked -= grow;
            if acked <= 0.0 {
                return;
            }
        }
        let epoch = match self.epoch {
            Some(e) => e,
            None => {
                self.epoch = Some(now);
                self.cwnd_epoch = self.cwnd;
                self.w_est = self.cwnd;
                if self.cwnd < self.w_max {
                    self.k = ((self.w_max - self.cwnd) / Self::C).cbrt();
                } else {
                    self.k = 0.0;
                    self.w_max = self.cwnd;
                }
                now
            }
        };
        let t = (now - epoch).as_secs_f64();
        let target = self
            .w_cubic(t + srtt.as_secs_f64())
            .clamp(self.cwnd, 1.5 * self.cwnd);
        // Reno-friendly estimate (RFC 9438 §4.3).
        let alpha = if self.w_est >= self.w_max {
            1.0
        } else {
            3.0 * (1.0 - Self::BETA) / (1.0 + Self::BETA)
        };
        self.w_est += alpha * acked / self.cwnd;
        if self.w_cubic(t) < self.w_est {
            self.cwnd = self.cwnd.max(self.w_est);
        } else {
            self.cwnd += (target - self.cwnd) / self.cwnd * acked;
        }
    }

    fn on_congestion_event(&mut self, _now: Instant) {
        self.reduce();
        self.cwnd = self.ssthresh;
    }

    fn on_retransmission_timeout(&mut self, _now: Instant) {
        self.reduce();
        self.cwnd = 1.0;
        self.hystart = HyStart {
            delay_min: self.hystart.delay_min,
            ..HyStart::default()
        };
    }

    fn on_rtt_sample(&mut self, rtt: Duration, una: u64, nxt: u64) {
        self.hystart.delay_min = Some(self.hystart.delay_min.map_or(rtt, |m| m.min(rtt)));
        if self.cwnd < self.ssthresh
            && self.cwnd >= HyStart::LOW_WINDOW
            && self.hystart.exits(rtt, una, nxt)
        {
            self.ssthresh = self.cwnd;
        }
    }

    fn window(&self) -> f64 {
        self.cwnd
    }
}

/// NewReno: slow start, +1 segment per RTT, halve on loss.
#[derive(Clone, Debug)]
pub(crate) struct NewReno {
    cwnd: f64,
    ssthresh: f64,
}

impl NewReno {
    /// NewReno with an initial window of `initial_window` segments.
    #[must_use]
    pub(crate) fn new(initial_window: f64) -> Self {
        Self {
            cwnd: initial_window,
            ssthresh: f64::INFINITY,
        }
    }
}

impl CongestionControl for NewReno {
    fn on_ack(&mut self, _now: Instant, acked: u64, _srtt: Duration) {
        let acked = acked as f64;
        if self.cwnd < self.ssthresh {
            self.cwnd += acked;
        } else {
            self.cwnd += acked / self.cwnd;
        }
    }

    fn on_congestion_event(&mut self, _now: Instant) {
        self.ssthresh = (self.cwnd / 2.0).max(2.0);
        self.cwnd = self.ssthresh;
    }

    fn on_retransmission_timeout(&mut self, _now: Instant) {
        self.ssthresh = (self.cwnd / 2.0).max(2.0);
        self.cwnd = 1.0;
    }

    fn window(&self) -> f64 {
        self.cwnd
    }
}

/// BBR v1's window in steady state, for fairness runs against a sender that ignores
/// loss: `2 × max delivery rate (last 10 rounds) × min RTT`. Startup doubles the window
/// each round until the first loss. Why model it: the ratchet that makes BBR v1 take a
/// shallow queue from loss-based flows is this max filter (a competitor's backoff raises
/// the delivery rate, which the filter keeps for ten rounds), not a fixed window.
#[derive(Clone, Debug)]
struct BbrWindow {
    cwnd: f64,
    startup: bool,
    /// Per-round delivery rates (segments per second), newest last, at most [`Self::ROUNDS`].
    rates: std::collections::VecDeque<f64>,
    round_start: Option<Instant>,
    round_acked: u64,
    min_rtt: Option<Duration>,
}

impl BbrWindow {
    const ROUNDS: usize = 10;
    const GAIN: f64 = 2.0;

    fn new(iw: f64) -> Self {
        Self {
            cwnd: iw.max(4.0),
            startup: true,
            rates: std::collections::VecDeque::new(),
            round_start: None,
            round_acked: 0,
            min_rtt: None,
        }
    }
}

impl CongestionControl for BbrWindow {
    fn on_ack(&mut self, now: Instant, acked: u64, srtt: Duration) {
        if self.startup {
            self.cwnd += acked as f64;
        }
        self.round_acked += acked;
        let start = *self.round_start.get_or_insert(now);
        let elapsed = now.saturating_duration_since(start);
        if elapsed >= srtt && !elapsed.is_zero() {
            if self.rates.len() == Self::ROUNDS {
                self.rates.pop_front();
            }
            self.rates
                .push_back(self.round_acked as f64 / elapsed.as_secs_f64());
            self.round_start = Some(now);
            self.round_acked = 0;
        }
        if let (false, Some(min)) = (self.startup, self.min_rtt) {
            let max = self.rates.iter().copied().fold(0.0, f64::max);
            self.cwnd = (Self::GAIN * max * min.as_secs_f64()).max(4.0);
        }
    }

    fn on_congestion_event(&mut self, _now: Instant) {
        self.startup = false;
    }

    fn on_retransmission_timeout(&mut self, _now: Instant) {
        self.startup = false;
    }

    fn on_rtt_sample(&mut self, rtt: Duration, _una: u64, _nxt: u64) {
        self.min_rtt = Some(self.min_rtt.map_or(rtt, |m| m.min(rtt)));
    }

    fn window(&self) -> f64 {
        self.cwnd
    }
}

/// A word-wise checksum over the datagram (stands in for the TCP checksum,
/// so [`crate::Corrupt`] packets are discarded).
fn checksum(data: &[u8]) -> u32 {
    let mut acc: u64 = 0x9e37_79b9;
    let mut chunks = data.chunks_exact(8);
    for c in &mut chunks {
        let mut w = [0u8; 8];
        w.copy_from_slice(c);
        acc = acc.rotate_left(5) ^ u64::from_le_bytes(w);
        acc = acc.wrapping_mul(0x0100_0000_01b3);
    }
    for &b in chunks.remainder() {
        acc = (acc.rotate_left(5) ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    (acc ^ (acc >> 32)) as u32
}

/// Write the checksum of `buf[..len-4]` into its last 4 bytes.
fn seal(buf: &mut [u8]) {
    let n = buf.len();
    let c = checksum(&buf[..n - 4]);
    buf[n - 4..].copy_from_slice(&c.to_le_bytes());
}

/// Check and strip the checksum.
fn open(data: &[u8]) -> Option<&[u8]> {
    let n = data.len();
    if n < 5 {
        return None;
    }
    let mut tmp = [0u8; 4];
    tmp.copy_from_slice(&data[n - 4..]);
    let body = &data[..n - 4];
    (checksum(body) == u32::from_le_bytes(tmp)).then_some(body)
}

fn read_u64(b: &[u8], at: usize) -> Option<u64> {
    let s = b.get(at..at + 8)?;
    let mut w = [0u8; 8];
    w.copy_from_slice(s);
    Some(u64::from_le_bytes(w))
}

fn read_u16(b: &[u8], at: usize) -> Option<u16> {
    let s = b.get(at..at + 2)?;
    Some(u16::from_le_bytes([s[0], s[1]]))
}

#[derive(Clone, Copy, Debug)]
struct Seg {
    sent: Instant,
    len: u16,
    sacked: bool,
    lost: bool,
    in_flight: bool,
    retransmits: u32,
}

/// Counters of a [`TcpSender`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TcpSenderStats {
    /// Segments sent for the first time.
    pub segments_sent: u64,
    /// Retransmitted segments.
    pub retransmits: u64,
    /// Payload bytes cumulatively acknowledged.
    pub bytes_acked: u64,
    /// Congestion events (window reductions on loss).
    pub congestion_events: u64,
    /// Retransmission timeouts.
    pub rtos: u64,
    /// ACKs received (valid).
    pub acks: u64,
    /// Datagrams discarded (bad checksum or malformed).
    pub discarded: u64,
}

/// The sending half of the TCP model (the flow's client).
pub struct TcpSender {
    cfg: TcpConfig,
    cc: Box<dyn CongestionControl>,
    base: Option<Instant>,
    started: bool,
    total_segs: Option<u64>,
    una: u64,
    nxt: u64,
    board: VecDeque<Seg>,
    lost: BTreeSet<u64>,
    in_flight: u64,
    highest_sacked: Option<u64>,
    recovery_point: Option<u64>,
    rto_recovery: bool,
    srtt: Option<Duration>,
    rttvar: Duration,
    min_rtt: Option<Duration>,
    rto: Duration,
    rto_deadline: Option<Instant>,
    reo_deadline: Option<Instant>,
    rack_xmit: Option<Instant>,
    rack_rtt: Duration,
    stats: TcpSenderStats,
}

impl std::fmt::Debug for TcpSender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TcpSender")
            .field("una", &self.una)
            .field("nxt", &self.nxt)
            .field("cwnd", &self.cc.window())
            .field("in_flight", &self.in_flight)
            .field("srtt", &self.srtt)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl TcpSender {
    /// A sender with the controller named in `cfg`.
    #[must_use]
    pub fn new(cfg: TcpConfig) -> Self {
        let iw = f64::from(cfg.initial_window);
        let cc: Box<dyn CongestionControl> = match cfg.cc {
            CcAlgorithm::Cubic => Box::new(Cubic::new(iw)),
            CcAlgorithm::NewReno => Box::new(NewReno::new(iw)),
            CcAlgorithm::BbrWindow => Box::new(BbrWindow::new(iw)),
        };
        let mss = cfg.mss.max(1) as u64;
        Self {
            total_segs: cfg.bytes.map(|b| b.div_ceil(mss)),
            rto: cfg.initial_rto,
            started: cfg.start_at.is_none(),
            cfg,
            cc,
            base: None,
            una: 0,
            nxt: 0,
            board: VecDeque::new(),
            lost: BTreeSet::new(),
            in_flight: 0,
            highest_sacked: None,
            recovery_point: None,
            rto_recovery: false,
            srtt: None,
            rttvar: Duration::ZERO,
            min_rtt: None,
            rto_deadline: None,
            reo_deadline: None,
            rack_xmit: None,
            rack_rtt: Duration::ZERO,
            stats: TcpSenderStats::default(),
        }
    }

    /// Counters.
    #[must_use]
    pub fn stats(&self) -> &TcpSenderStats {
        &self.stats
    }

    /// Congestion window in segments.
    #[must_use]
    pub fn cwnd(&self) -> f64 {
        self.cc.window()
    }

    /// Smoothed RTT, once sampled.
    #[must_use]
    pub fn srtt(&self) -> Option<Duration> {
        self.srtt
    }

    /// Segments in flight (sent, not acknowledged, not deemed lost).
    #[must_use]
    pub fn in_flight(&self) -> u64 {
        self.in_flight
    }

    /// Whether a finite transfer has been fully acknowledged.
    #[must_use]
    pub fn is_complete(&self) -> bool {
        self.total_segs.is_some_and(|t| self.una >= t)
    }

    fn seg_len(&self, seq: u64) -> u16 {
        let mss = self.cfg.mss as u64;
        let len = match self.cfg.bytes {
            Some(total) => mss.min(total.saturating_sub(seq * mss)),
            None => mss,
        };
        len as u16
    }

    fn ts(&mut self, now: Instant) -> u64 {
        let base = *self.base.get_or_insert(now);
        (now - base).as_nanos() as u64
    }

    fn datagram(&mut self, now: Instant, seq: u64, len: u16) -> Vec<u8> {
        let ts = self.ts(now);
        let mut buf = vec![0u8; HEADER_BYTES + usize::from(len)];
        buf[0] = KIND_DATA;
        buf[1..9].copy_from_slice(&seq.to_le_bytes());
        buf[9..17].copy_from_slice(&ts.to_le_bytes());
        buf[17..19].copy_from_slice(&len.to_le_bytes());
        // Payload: a pattern so corruption anywhere changes the checksum.
        for (i, b) in buf[HEADER_BYTES..].iter_mut().enumerate() {
            *b = (seq as u8).wrapping_add(i as u8);
        }
        seal(&mut buf);
        buf
    }

    fn in_recovery(&self) -> bool {
        self.recovery_point.is_some()
    }

    fn mark_lost(&mut self, seq: u64) {
        let i = (seq - self.una) as usize;
        let seg = &mut self.board[i];
        if seg.sacked || seg.lost {
            return;
        }
        seg.lost = true;
        if seg.in_flight {
            seg.in_flight = false;
            self.in_flight -= 1;
        }
        self.lost.insert(seq);
    }

    fn detect_losses(&mut self, now: Instant) {
        self.reo_deadline = None;
        let Some(rack_xmit) = self.rack_xmit else {
            return;
        };
        let reo_wnd = self.min_rtt.unwrap_or(Duration::ZERO) / 4;
        let mut newly_lost = Vec::new();
        let mut deadline: Option<Instant> = None;
        for (i, seg) in self.board.iter().enumerate() {
            if seg.sacked || seg.lost {
                continue;
            }
            let seq = self.una + i as u64;
            let dup = seg.retransmits == 0
                && self
                    .highest_sacked
                    .is_some_and(|h| h >= seq + self.cfg.dupthresh);
            if dup {
                newly_lost.push(seq);
                continue;
            }
            if seg.sent < rack_xmit {
                let when = seg.sent + self.rack_rtt + reo_wnd;
                if when <= now {
                    newly_lost.push(seq);
                } else {
                    deadline = Some(deadline.map_or(when, |d| d.min(when)));
                }
            }
        }
        self.reo_deadline = deadline;
        if newly_lost.is_empty() {
            return;
        }
        for seq in newly_lost {
            self.mark_lost(seq);
        }
        if !self.in_recovery() {
            self.recovery_point = Some(self.nxt);
            self.stats.congestion_events += 1;
            self.cc.on_congestion_event(now);
        }
    }

    fn on_ack(&mut self, now: Instant, body: &[u8]) -> Option<()> {
        let cum = read_u64(body, 1)?;
        let ts_echo = read_u64(body, 9)?;
        let n = usize::from(*body.get(17)?).min(MAX_SACK_BLOCKS);
        if cum > self.nxt || cum < self.una && n == 0 {
            // Stale or bogus; an old cumulative ACK without SACK says nothing.
            return Some(());
        }
        self.stats.acks += 1;
        let mut newly = 0u64;
        let mut latest: Option<(Instant, u32)> = None;
        let note = |seg: &Seg, latest: &mut Option<(Instant, u32)>| {
            if latest.is_none_or(|(t, _)| seg.sent > t) {
                *latest = Some((seg.sent, seg.retransmits));
            }
        };
        while self.una < cum {
            let Some(seg) = self.board.pop_front() else {
                break;
            };
            if !seg.sacked {
                newly += 1;
                note(&seg, &mut latest);
            }
            if seg.in_flight {
                self.in_flight -= 1;
            }
            self.lost.remove(&self.una);
            self.stats.bytes_acked += u64::from(seg.len);
            self.una += 1;
        }
        for b in 0..n {
            let start = read_u64(body, 18 + 16 * b)?.max(self.una);
            let end = read_u64(body, 26 + 16 * b)?.min(self.nxt);
            for seq in start..end {
                let i = (seq - self.una) as usize;
                let seg = &mut self.board[i];
                if seg.sacked {
                    continue;
                }
                seg.sacked = true;
                newly += 1;
                if seg.in_flight {
                    seg.in_flight = false;
                    self.in_flight -= 1;
                }
                if seg.lost {
                    seg.lost = false;
                    self.lost.remove(&seq);
                }
                let seg = *seg;
                note(&seg, &mut latest);
                self.highest_sacked = Some(self.highest_sacked.map_or(seq, |h| h.max(seq)));
            }
        }
        if self.highest_sacked.is_some_and(|h| h < self.una) {
            self.highest_sacked = None;
        }
        if newly == 0 {
            return Some(());
        }
        // RTT sample from the echoed timestamp (Karn-safe: every
        // transmission carries its own timestamp).
        if let Some(base) = self.base {
            let sent = base + Duration::from_nanos(ts_echo);
            if sent <= now {
                self.rtt_sample(now - sent);
                self.cc.on_rtt_sample(now - sent, self.una, self.nxt);
            }
        }
        if let Some((sent, retransmits)) = latest {
            let rtt = now - sent;
            let ambiguous = retransmits > 0 && self.min_rtt.is_some_and(|m| rtt < m);
            if !ambiguous && self.rack_xmit.is_none_or(|x| sent >= x) {
                self.rack_xmit = Some(sent);
                self.rack_rtt = rtt;
            }
        }
        if self.recovery_point.is_some_and(|rp| self.una >= rp) {
            self.recovery_point = None;
            self.rto_recovery = false;
        }
        if !self.in_recovery() || self.rto_recovery {
            let srtt = self.srtt.unwrap_or(self.cfg.initial_rto);
            self.cc.on_ack(now, newly, srtt);
        }
        self.detect_losses(now);
        self.rto_deadline = (self.una < self.nxt).then(|| now + self.rto);
        Some(())
    }

    fn rtt_sample(&mut self, rtt: Duration) {
        self.min_rtt = Some(self.min_rtt.map_or(rtt, |m| m.min(rtt)));
        match self.srtt {
            None => {
                self.srtt = Some(rtt);
                self.rttvar = rtt / 2;
            }
            Some(srtt) => {
                let diff = srtt.abs_diff(rtt);
                self.rttvar = self.rttvar * 3 / 4 + diff / 4;
                self.srtt = Some(srtt * 7 / 8 + rtt / 8);
            }
        }
        let srtt = self.srtt.unwrap_or(rtt);
        self.rto = (srtt + 4 * self.rttvar).clamp(self.cfg.min_rto, self.cfg.max_rto);
    }

    fn on_rto(&mut self, now: Instant) {
        self.stats.rtos += 1;
        for i in 0..self.board.len() {
            self.mark_lost(self.una + i as u64);
        }
        self.cc.on_retransmission_timeout(now);
        self.recovery_point = Some(self.nxt);
        self.rto_recovery = true;
        self.rto = (self.rto * 2).min(self.cfg.max_rto);
        self.rto_deadline = None;
        self.reo_deadline = None;
    }
}

impl Endpoint for TcpSender {
    fn handle_datagram(&mut self, now: Instant, datagram: &[u8]) {
        let ok = open(datagram)
            .filter(|b| b.first() == Some(&KIND_ACK))
            .and_then(|b| self.on_ack(now, b));
        if ok.is_none() {
            self.stats.discarded += 1;
        }
    }

    fn poll_transmit(&mut self, now: Instant) -> Option<Vec<u8>> {
        if !self.started {
            return None;
        }
        let cwnd = self.cc.window().max(1.0) as u64;
        if self.in_flight >= cwnd {
            return None;
        }
        let seq = if let Some(seq) = self.lost.pop_first() {
            let i = (seq - self.una) as usize;
            let seg = &mut self.board[i];
            seg.lost = false;
            seg.in_flight = true;
            seg.sent = now;
            seg.retransmits += 1;
            self.stats.retransmits += 1;
            seq
        } else if self.total_segs.is_none_or(|t| self.nxt < t) {
            let seq = self.nxt;
            let len = self.seg_len(seq);
            self.board.push_back(Seg {
                sent: now,
                len,
                sacked: false,
                lost: false,
                in_flight: true,
                retransmits: 0,
            });
            self.nxt += 1;
            self.stats.segments_sent += 1;
            seq
        } else {
            return None;
        };
        self.in_flight += 1;
        if self.rto_deadline.is_none() {
            self.rto_deadline = Some(now + self.rto);
        }
        let len = self.board[(seq - self.una) as usize].len;
        Some(self.datagram(now, seq, len))
    }

    fn poll_timeout(&self) -> Option<Instant> {
        if !self.started {
            return self.cfg.start_at;
        }
        [self.rto_deadline, self.reo_deadline]
            .into_iter()
            .flatten()
            .min()
    }

    fn handle_timeout(&mut self, now: Instant) {
        if !self.started {
            if self.cfg.start_at.is_some_and(|s| s <= now) {
                self.started = true;
            }
            return;
        }
        if self.reo_deadline.is_some_and(|d| d <= now) {
            self.detect_losses(now);
        }
        if self.rto_deadline.is_some_and(|d| d <= now) {
            self.on_rto(now);
        }
    }
}

/// Counters of a [`TcpReceiver`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TcpReceiverStats {
    /// Payload bytes delivered in order (goodput).
    pub bytes_delivered: u64,
    /// Segments delivered in order.
    pub segments_delivered: u64,
    /// Duplicate segments received.
    pub duplicates: u64,
    /// Segments that arrived out of order.
    pub out_of_order: u64,
    /// Datagrams discarded (bad checksum or malformed).
    pub discarded: u64,
    /// ACKs sent.
    pub acks_sent: u64,
}

/// The receiving half of the TCP model (the flow's server). ACKs every
/// segment immediately with the cumulative ACK, the echoed timestamp and up
/// to [`MAX_SACK_BLOCKS`] SACK blocks (the block holding the segment that
/// triggered the ACK first, then the highest ones).
#[derive(Debug, Default)]
pub struct TcpReceiver {
    next: u64,
    ooo: BTreeMap<u64, u16>,
    pending: VecDeque<Vec<u8>>,
    stats: TcpReceiverStats,
}

impl TcpReceiver {
    /// A fresh receiver.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Counters.
    #[must_use]
    pub fn stats(&self) -> &TcpReceiverStats {
        &self.stats
    }

    /// Payload bytes delivered in order.
    #[must_use]
    pub fn bytes_delivered(&self) -> u64 {
        self.stats.bytes_delivered
    }

    fn sack_blocks(&self, trigger: u64) -> Vec<(u64, u64)> {
        let mut ranges: Vec<(u64, u64)> = Vec::new();
        for &seq in self.ooo.keys() {
            match ranges.last_mut() {
                Some((_, end)) if *end == seq => *end = end.saturating_add(1),
                _ => ranges.push((seq, seq.saturating_add(1))),
            }
        }
        let mut out = Vec::with_capacity(MAX_SACK_BLOCKS);
        if let Some(pos) = ranges
            .iter()
            .position(|&(s, e)| s <= trigger && trigger < e)
        {
            out.push(ranges.remove(pos));
        }
        out.extend(ranges.iter().rev().take(MAX_SACK_BLOCKS - out.len()));
        out
    }

    fn ack(&mut self, seq: u64, ts: u64) {
        let blocks = self.sack_blocks(seq);
        let mut buf = vec![0u8; 18 + 16 * blocks.len() + 4];
        buf[0] = KIND_ACK;
        buf[1..9].copy_from_slice(&self.next.to_le_bytes());
        buf[9..17].copy_from_slice(&ts.to_le_bytes());
        buf[17] = blocks.len() as u8;
        for (i, (s, e)) in blocks.iter().enumerate() {
            buf[18 + 16 * i..26 + 16 * i].copy_from_slice(&s.to_le_bytes());
            buf[26 + 16 * i..34 + 16 * i].copy_from_slice(&e.to_le_bytes());
        }
        seal(&mut buf);
        self.stats.acks_sent += 1;
        self.pending.push_back(buf);
    }

    fn on_data(&mut self, body: &[u8]) -> Option<()> {
        let seq = read_u64(body, 1)?;
        let ts = read_u64(body, 9)?;
        let len = read_u16(body, 17)?;
        if body.len() != HEADER_BYTES - 4 + usize::from(len) {
            return None;
        }
        if seq < self.next || self.ooo.contains_key(&seq) {
            self.stats.duplicates += 1;
        } else if seq == self.next {
            self.next += 1;
            self.stats.segments_delivered += 1;
            self.stats.bytes_delivered += u64::from(len);
            while let Some(l) = self.ooo.remove(&self.next) {
                self.next += 1;
                self.stats.segments_delivered += 1;
                self.stats.bytes_delivered += u64::from(l);
            }
        } else {
            self.stats.out_of_order += 1;
            self.ooo.insert(seq, len);
        }
        self.ack(seq, ts);
        Some(())
    }
}

impl Endpoint for TcpReceiver {
    fn handle_datagram(&mut self, _now: Instant, datagram: &[u8]) {
        let ok = open(datagram)
            .filter(|b| b.first() == Some(&KIND_DATA))
            .and_then(|b| self.on_data(b));
        if ok.is_none() {
            self.stats.discarded += 1;
        }
    }

    fn poll_transmit(&mut self, _now: Instant) -> Option<Vec<u8>> {
        self.pending.pop_front()
    }

    fn poll_timeout(&self) -> Option<Instant> {
        None
    }

    fn handle_timeout(&mut self, _now: Instant) {}
}

/// A TCP sender/receiver pair for [`crate::Sim::add_flow`].
#[must_use]
pub fn tcp_pair(cfg: TcpConfig) -> (TcpSender, TcpReceiver) {
    (TcpSender::new(cfg), TcpReceiver::new())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[allow(clippy::disallowed_methods)] // tests need some epoch; only offsets matter
    fn epoch() -> Instant {
        Instant::now()
    }

    /// Feeds `rounds` slow-start rounds of `per_round` ACKs (one segment each) whose RTT
    /// is `rtt(round)`; returns the window after each round.
    fn slow_start(rounds: u64, rtt: impl Fn(u64) -> Duration) -> (Cubic, Vec<f64>) {
        let now = epoch();
        let mut cc = Cubic::new(10.0);
        let (mut una, mut nxt, mut windows) = (0u64, 0u64, Vec::new());
        for round in 0..rounds {
            let per_round = cc.window() as u64;
            nxt += per_round;
            for _ in 0..per_round {
                una += 1;
                cc.on_rtt_sample(rtt(round), una, nxt);
                cc.on_ack(now, 1, rtt(round));
            }
            windows.push(cc.window());
        }
        (cc, windows)
    }

    #[test]
    fn hystart_leaves_slow_start_when_a_round_shows_queueing_delay() {
        // 100 ms base; from round 3 (window 80) a queue adds 20 ms > 100/8 = 12.5 ms.
        let (cc, w) = slow_start(6, |r| Duration::from_millis(if r >= 3 { 120 } else { 100 }));
        assert!(cc.hystart.found, "windows {w:?}");
        assert!(
            cc.ssthresh.is_finite() && cc.ssthresh <= 160.0,
            "ssthresh {}",
            cc.ssthresh
        );
        // Growth after the exit is Cubic's, far below doubling per round.
        assert!(w[5] < 2.0 * w[4], "windows {w:?}");
    }

    #[test]
    fn hystart_ignores_delay_rises_below_its_threshold() {
        // 8 ms over a 100 ms base stays under max(100/8, 4) = 12.5 ms.
        let (cc, w) = slow_start(6, |r| Duration::from_millis(if r >= 3 { 108 } else { 100 }));
        assert!(!cc.hystart.found, "windows {w:?}");
        assert!(cc.ssthresh.is_infinite());
        assert!((w[5] - 640.0).abs() < 1e-9, "doubling each round: {w:?}");
    }

    #[test]
    fn hystart_waits_for_sixteen_segments_and_rearms_after_a_timeout() {
        // A delay rise while the window is below 16 is ignored (round 0: window 10).
        let (cc, _) = slow_start(1, |_| Duration::from_millis(200));
        assert!(!cc.hystart.found);
        let (mut cc, _) = slow_start(6, |r| Duration::from_millis(if r >= 3 { 120 } else { 100 }));
        assert!(cc.hystart.found);
        cc.on_retransmission_timeout(epoch());
        assert!(!cc.hystart.found);
        assert_eq!(cc.hystart.delay_min, Some(Duration::from_millis(100)));
    }
}
