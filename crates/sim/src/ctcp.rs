//! ctcp-proto endpoints inside the simulator, and the bulk-transfer scenario that the
//! scenario tests and the `sim-sweep` benchmark share.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use ctcp_proto::{
    ConnectionHandle, Endpoint as ProtoEndpoint, EndpointConfig, Event, Psk, ReadOutcome, Target,
    TransportConfig,
};

use crate::link::LinkSpec;
use crate::node::FlowId;
use crate::seed::Seed;
use crate::sim::{Endpoint, Sim, SimError};
use crate::tcp::{tcp_pair, TcpConfig, TcpReceiver};

/// The byte at `offset` of the generated test stream: cheap to check without storing it.
#[must_use]
pub fn pattern_byte(offset: u64) -> u8 {
    let x = offset.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (x >> 56) as u8 ^ (offset as u8)
}

fn fill_pattern(offset: u64, buf: &mut [u8]) {
    for (i, b) in buf.iter_mut().enumerate() {
        *b = pattern_byte(offset + i as u64);
    }
}

/// What a [`CtcpPeer`] does with its session.
#[derive(Debug)]
enum App {
    /// Opens one stream and writes `total` pattern bytes, then finishes; with `pace`, at
    /// most one chunk per interval from the stream's opening (an application slower than
    /// the link).
    Sender {
        total: u64,
        pace: Option<Pace>,
        /// When the paced application writes its next chunk, if it is waiting for that.
        next_chunk: Option<Instant>,
        written: u64,
        stream: Option<(u64, Instant)>,
        finished: bool,
    },
    /// Reads every stream, checks the pattern, records timings.
    Receiver,
    /// Once the session has been up for `after`, opens one stream, and `think` later
    /// writes `request` pattern bytes and finishes it, then reads the reply (into
    /// `delivery`).
    Requester {
        request: u64,
        after: Duration,
        think: Duration,
        connected_at: Option<Instant>,
        stream: Option<(u64, Instant)>,
        written: u64,
        finished: bool,
    },
    /// Answers the first client stream's OPEN at once (a proxy's connect result), reads
    /// the request to its FIN (into `delivery`), and `think` later writes `response`
    /// pattern bytes back on it and finishes it.
    Responder {
        response: u64,
        think: Duration,
        answered: bool,
        written: u64,
        finished: bool,
    },
}

/// An application-limited writer: `chunk` bytes every `every`.
#[derive(Debug, Clone, Copy)]
pub struct Pace {
    /// Bytes written at each interval's start.
    pub chunk: u64,
    /// Time between chunks.
    pub every: Duration,
}

impl Pace {
    /// Bytes the application has written by `now` if it began at `start`.
    fn allowed(self, start: Instant, now: Instant) -> u64 {
        let chunks = (now.saturating_duration_since(start).as_nanos()
            / self.every.as_nanos().max(1)) as u64
            + 1;
        chunks.saturating_mul(self.chunk)
    }
}

/// Delivery timings of the receiving side.
#[derive(Debug, Default, Clone)]
pub struct Delivery {
    /// Bytes read that matched the pattern.
    pub bytes_ok: u64,
    /// Bytes read that did not.
    pub bytes_bad: u64,
    /// Whether the stream ended with a FIN after all bytes.
    pub finished: bool,
    /// When the last byte was read.
    pub finished_at: Option<Instant>,
    /// (time, cumulative bytes) samples, one per read.
    pub progress: Vec<(Instant, u64)>,
}

/// A ctcp-proto endpoint with a bulk-transfer application, as a simulator endpoint.
#[derive(Debug)]
pub struct CtcpPeer {
    endpoint: ProtoEndpoint,
    peer: SocketAddr,
    conn: Option<ConnectionHandle>,
    app: App,
    buf: Vec<u8>,
    scratch: Vec<u8>,
    /// What the receiving application saw.
    pub delivery: Delivery,
    /// Send times of the sender's writes: (time, stream offset after the write).
    pub writes: Vec<(Instant, u64)>,
    /// First-transmission times of stream bytes: (time, stream bytes sent by then).
    pub first_sent: Vec<(Instant, u64)>,
    /// The peer's address on each lane of a multipath flow (lane 0: `peer`); empty for a
    /// single link. A client opens a path to each beyond the first once connected.
    lanes: Vec<SocketAddr>,
}

const CLIENT_ADDR: &str = "10.0.0.1:40000";
const SERVER_ADDR: &str = "10.0.0.2:7000";

fn addr(s: &str) -> SocketAddr {
    s.parse()
        .unwrap_or_else(|_| SocketAddr::from(([127, 0, 0, 1], 1)))
}

impl CtcpPeer {
    /// A sender that connects at `now` and pushes `total` bytes through one stream.
    #[must_use]
    pub fn sender(
        config: TransportConfig,
        psk: &[u8],
        seed: u64,
        now: Instant,
        total: u64,
    ) -> Self {
        let mut endpoint =
            ProtoEndpoint::new(endpoint_config(config, psk, false), seed_bytes(seed));
        let conn = endpoint.connect(now, addr(SERVER_ADDR));
        CtcpPeer {
            endpoint,
            peer: addr(SERVER_ADDR),
            conn: Some(conn),
            app: App::Sender {
                total,
                pace: None,
                next_chunk: None,
                written: 0,
                stream: None,
                finished: false,
            },
            buf: Vec::new(),
            scratch: vec![0; 64 * 1024],
            delivery: Delivery::default(),
            writes: Vec::new(),
            first_sent: Vec::new(),
            lanes: Vec::new(),
        }
    }

    /// A receiver that accepts the session and reads everything.
    #[must_use]
    pub fn receiver(config: TransportConfig, psk: &[u8], seed: u64) -> Self {
        let endpoint = ProtoEndpoint::new(endpoint_config(config, psk, true), seed_bytes(seed));
        CtcpPeer {
            endpoint,
            peer: addr(CLIENT_ADDR),
            conn: None,
            app: App::Receiver,
            buf: Vec::new(),
            scratch: vec![0; 64 * 1024],
            delivery: Delivery::default(),
            writes: Vec::new(),
            first_sent: Vec::new(),
            lanes: Vec::new(),
        }
    }

    /// A client that connects at `now` and, once the session has been up for `after`,
    /// opens a stream and `think` later sends a `request`-byte request on it (as a proxy
    /// with fast open does: the OPEN leaves before the application's first bytes), then
    /// reads the reply.
    #[must_use]
    pub fn requester(
        config: TransportConfig,
        psk: &[u8],
        seed: u64,
        now: Instant,
        (request, after, think): (u64, Duration, Duration),
    ) -> Self {
        let mut peer = Self::sender(config, psk, seed, now, 0);
        peer.app = App::Requester {
            request,
            after,
            think,
            connected_at: None,
            stream: None,
            written: 0,
            finished: false,
        };
        peer
    }

    /// A server that answers the first stream's OPEN at once and its request, `think`
    /// after it arrived in full, with `response` bytes.
    #[must_use]
    pub fn responder(
        config: TransportConfig,
        psk: &[u8],
        seed: u64,
        response: u64,
        think: Duration,
    ) -> Self {
        let mut peer = Self::receiver(config, psk, seed);
        peer.app = App::Responder {
            response,
            think,
            answered: false,
            written: 0,
            finished: false,
        };
        peer
    }

    /// When the application next wants to act without any packet or transport timer
    /// waking it (a requester waiting out `after` or `think`, a responder `think`).
    fn app_wakeup(&self) -> Option<Instant> {
        match &self.app {
            App::Sender { next_chunk, .. } => *next_chunk,
            App::Requester {
                after,
                connected_at: Some(at),
                stream: None,
                ..
            } => Some(*at + *after),
            App::Requester {
                think,
                stream: Some((_, opened)),
                written: 0,
                ..
            } => Some(*opened + *think),
            App::Responder {
                think, written: 0, ..
            } => self.delivery.finished_at.map(|t| t + *think),
            _ => None,
        }
    }

    /// This sender writing at most `pace` (a chunk per interval) instead of as fast as
    /// the session takes it; other applications are unchanged.
    #[must_use]
    pub fn with_pace(mut self, pace: Pace) -> Self {
        if let App::Sender { pace: p, .. } = &mut self.app {
            *p = Some(pace);
        }
        self
    }

    /// This peer on a flow of `lanes` parallel links (see [`Sim::add_lane`]): the peer has
    /// one address per lane, and a client opens a path to each beyond the first once the
    /// session is up (the policy is the transport config's `path_policy`).
    #[must_use]
    pub fn with_lanes(mut self, lanes: usize) -> Self {
        self.lanes = (0..lanes.max(1))
            .map(|l| {
                let mut a = self.peer;
                a.set_port(a.port() + l as u16);
                a
            })
            .collect();
        self
    }

    /// The session's paths (multipath flows).
    #[must_use]
    pub fn paths(&self) -> Vec<ctcp_proto::PathInfo> {
        self.conn
            .or_else(|| self.endpoint.handles().first().copied())
            .and_then(|h| self.endpoint.connection(h))
            .map(|c| c.paths())
            .unwrap_or_default()
    }

    /// The proto endpoint, for statistics.
    #[must_use]
    pub fn endpoint(&self) -> &ProtoEndpoint {
        &self.endpoint
    }

    /// Statistics of the (first) session.
    #[must_use]
    pub fn stats(&self) -> Option<ctcp_proto::ConnectionStats> {
        let h = self
            .conn
            .or_else(|| self.endpoint.handles().first().copied())?;
        self.endpoint.connection(h).map(|c| c.stats())
    }

    fn pump(&mut self, now: Instant) {
        let mut opened = Vec::new();
        while let Some((h, ev)) = self.endpoint.poll_event() {
            match ev {
                Event::Connected => {
                    self.conn = Some(h);
                    if let Some(c) = self.endpoint.connection_mut(h) {
                        for &to in self.lanes.iter().skip(1) {
                            let _ = c.add_path(now, to);
                        }
                    }
                }
                Event::StreamOpened { id, .. } => {
                    self.conn = Some(h);
                    opened.push(id);
                }
                _ => {}
            }
        }
        let Some(h) = self.conn else { return };
        let Some(c) = self.endpoint.connection_mut(h) else {
            return;
        };
        match &mut self.app {
            App::Sender {
                total,
                pace,
                next_chunk,
                written,
                stream,
                finished,
            } => {
                if !c.is_established() {
                    return;
                }
                let (id, opened) = match stream {
                    Some(s) => *s,
                    None => match c.open_stream(Target::Domain("sink.test".into(), 9)) {
                        Ok(id) => *stream.insert((id, now)),
                        Err(_) => return,
                    },
                };
                let limit = pace.map_or(*total, |p| p.allowed(opened, now).min(*total));
                let mut w = Writer::new(*total, written, finished).up_to(limit);
                w.write(c, id, &mut self.scratch, &mut self.writes, now);
                // Held by its own pace (not by the session): wake at the next chunk.
                *next_chunk = pace
                    .filter(|_| *written == limit && limit < *total)
                    .map(|p| {
                        let k = u32::try_from(limit / p.chunk.max(1)).unwrap_or(u32::MAX);
                        opened + p.every * k
                    });
            }
            App::Requester {
                request,
                after,
                think,
                connected_at,
                stream,
                written,
                finished,
            } => {
                if !c.is_established() {
                    return;
                }
                let at = *connected_at.get_or_insert(now);
                if now < at + *after {
                    return;
                }
                let id = match stream {
                    Some((id, _)) => *id,
                    None => match c.open_stream(Target::Domain("echo.test".into(), 7)) {
                        Ok(id) => {
                            *stream = Some((id, now));
                            id
                        }
                        Err(_) => return,
                    },
                };
                if stream.is_some_and(|(_, opened)| now < opened + *think) {
                    return;
                }
                let mut w = Writer::new(*request, written, finished);
                w.write(c, id, &mut self.scratch, &mut self.writes, now);
                read_checked(c, id, &mut self.scratch, &mut self.delivery, now);
            }
            App::Responder {
                response,
                think,
                answered,
                written,
                finished,
            } => {
                // The request arrives on the client's first stream, id 0.
                let id = 0;
                if !*answered && opened.contains(&id) {
                    *answered = c
                        .send_open_result(id, ctcp_proto::OpenResult::Succeeded)
                        .is_ok();
                }
                if !self.delivery.finished {
                    read_checked(c, id, &mut self.scratch, &mut self.delivery, now);
                }
                if self.delivery.finished_at.is_none_or(|t| now < t + *think) {
                    return;
                }
                let mut w = Writer::new(*response, written, finished);
                w.write(c, id, &mut self.scratch, &mut self.writes, now);
            }
            App::Receiver => {
                // Read every stream the peer opened (ids 0, 4, ...: client-initiated, even).
                let mut id = 0u64;
                let mut misses = 0;
                while misses < 4 {
                    if !read_checked(c, id, &mut self.scratch, &mut self.delivery, now) {
                        misses += 1;
                    }
                    id += 2;
                }
            }
        }
    }
}

/// One stream's pattern writer: `total` bytes in all, `written` so far, FIN sent once
/// `finished`.
struct Writer<'a> {
    total: u64,
    limit: u64,
    written: &'a mut u64,
    finished: &'a mut bool,
}

impl<'a> Writer<'a> {
    fn new(total: u64, written: &'a mut u64, finished: &'a mut bool) -> Self {
        Self {
            total,
            limit: total,
            written,
            finished,
        }
    }

    /// Writes no further than `limit` bytes this time (an application-limited writer).
    fn up_to(self, limit: u64) -> Self {
        Self {
            limit: limit.min(self.total),
            ..self
        }
    }

    /// Writes pattern bytes to stream `id` while it takes them (recording each write in
    /// `writes`), then finishes the stream once all are written.
    fn write(
        &mut self,
        c: &mut ctcp_proto::Connection,
        id: u64,
        scratch: &mut [u8],
        writes: &mut Vec<(Instant, u64)>,
        now: Instant,
    ) {
        while *self.written < self.limit && c.is_writable(id) {
            let n = ((self.limit - *self.written) as usize).min(scratch.len());
            fill_pattern(*self.written, &mut scratch[..n]);
            match c.write(id, &scratch[..n]) {
                Ok(0) | Err(_) => break,
                Ok(k) => {
                    *self.written += k as u64;
                    writes.push((now, *self.written));
                }
            }
        }
        if *self.written == self.total && !*self.finished {
            *self.finished = c.finish(id).is_ok();
        }
    }
}

/// Reads stream `id` until it has nothing more, checking the pattern into `delivery`
/// (offsets continue from the bytes `delivery` has counted: the stream's start when it is
/// the only one). False if there is no such stream.
fn read_checked(
    c: &mut ctcp_proto::Connection,
    id: u64,
    scratch: &mut [u8],
    delivery: &mut Delivery,
    now: Instant,
) -> bool {
    loop {
        match c.read(now, id, scratch) {
            Ok(ReadOutcome::Data(n)) => {
                let base = delivery.bytes_ok + delivery.bytes_bad;
                let bad = (0..n)
                    .filter(|&i| scratch[i] != pattern_byte(base + i as u64))
                    .count();
                delivery.bytes_bad += bad as u64;
                delivery.bytes_ok += (n - bad) as u64;
                delivery.progress.push((now, base + n as u64));
            }
            Ok(ReadOutcome::Finished) => {
                if !delivery.finished {
                    delivery.finished = true;
                    delivery.finished_at = Some(now);
                }
                return true;
            }
            Ok(_) => return true,
            Err(_) => return false,
        }
    }
}

fn seed_bytes(seed: u64) -> [u8; 32] {
    let mut s = [0u8; 32];
    s[..8].copy_from_slice(&seed.to_le_bytes());
    s[8] = 0x5a;
    s
}

fn endpoint_config(config: TransportConfig, psk: &[u8], server: bool) -> EndpointConfig {
    // Test keys are at least 16 bytes by construction.
    #[allow(clippy::expect_used)]
    let psk = Psk::new(psk).expect("test PSK of at least 16 bytes");
    EndpointConfig::new(psk, config, server)
}

/// Hands `datagram` from `peer` to `endpoint` through the reusable `buf` (the endpoint
/// decrypts in place, so it needs an owned copy).
pub(crate) fn deliver(
    endpoint: &mut ProtoEndpoint,
    peer: SocketAddr,
    buf: &mut Vec<u8>,
    now: Instant,
    datagram: &[u8],
) {
    buf.clear();
    buf.extend_from_slice(datagram);
    endpoint.handle_datagram(now, peer, buf);
}

/// The next datagram `endpoint` has to send at `now`, if any.
pub(crate) fn next_datagram(endpoint: &mut ProtoEndpoint, now: Instant) -> Option<Vec<u8>> {
    next_datagram_to(endpoint, now).map(|(_, d)| d)
}

/// The next datagram `endpoint` has to send at `now` and where it goes, if any.
fn next_datagram_to(endpoint: &mut ProtoEndpoint, now: Instant) -> Option<(SocketAddr, Vec<u8>)> {
    let mut out = Vec::with_capacity(1500);
    let t = endpoint.poll_transmit(now, &mut out)?;
    out.truncate(t.size);
    Some((t.destination, out))
}

impl Endpoint for CtcpPeer {
    fn handle_datagram(&mut self, now: Instant, datagram: &[u8]) {
        self.handle_datagram_on(now, 0, datagram);
    }

    fn handle_datagram_on(&mut self, now: Instant, lane: usize, datagram: &[u8]) {
        let from = self.lanes.get(lane).copied().unwrap_or(self.peer);
        deliver(&mut self.endpoint, from, &mut self.buf, now, datagram);
        self.pump(now);
    }

    fn poll_transmit(&mut self, now: Instant) -> Option<Vec<u8>> {
        self.poll_transmit_on(now).map(|(_, d)| d)
    }

    fn poll_transmit_on(&mut self, now: Instant) -> Option<(usize, Vec<u8>)> {
        self.pump(now);
        let (to, out) = next_datagram_to(&mut self.endpoint, now)?;
        let lane = self.lanes.iter().position(|&a| a == to).unwrap_or(0);
        if matches!(self.app, App::Sender { .. }) {
            let sent = self
                .conn
                .and_then(|h| self.endpoint.connection(h))
                .map_or(0, |c| c.stream_bytes_sent());
            if self.first_sent.last().is_none_or(|&(_, b)| b < sent) {
                self.first_sent.push((now, sent));
            }
        }
        Some((lane, out))
    }

    fn poll_timeout(&self) -> Option<Instant> {
        match (self.endpoint.poll_timeout(), self.app_wakeup()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn handle_timeout(&mut self, now: Instant) {
        self.endpoint.handle_timeout(now);
        self.pump(now);
    }
}

/// A bulk transfer over one simulated link, and what came of it.
#[derive(Debug, Clone)]
pub struct TransferReport {
    /// Bytes to move.
    pub total: u64,
    /// Whether every byte arrived intact with the FIN.
    pub bytes_ok: bool,
    /// Virtual seconds from start to the last byte read.
    pub duration: Duration,
    /// Goodput in bit/s over `duration`.
    pub goodput_bps: f64,
    /// Goodput from the stream's first write (the session handshake excluded: the proxies
    /// keep one session for many streams) to the last byte delivered, bit/s.
    pub open_goodput_bps: f64,
    /// Repair bytes sent / source bytes sent (sender side).
    pub repair_overhead: f64,
    /// Bytes the sender put on the link per goodput byte.
    pub wire_per_goodput: f64,
    /// Seconds from start until the receive rate first reached 90 % of what the link can
    /// deliver, rate × payload share × (1 − mean loss), over a sliding window of one RTT
    /// (at least 100 ms), if it did.
    pub time_to_90pct: Option<Duration>,
    /// p99 over bytes of (read time − first transmission − one-way delay), in ms: what
    /// loss recovery and reordering cost, without send-buffer or start-up waiting.
    pub p99_extra_delay_ms: f64,
    /// p99 over bytes of (read time − write time − one-way delay), in ms: as the
    /// application sees it, including time queued in the send buffer.
    pub p99_write_to_read_ms: f64,
    /// Longest time in-order delivery stood still between its first and last byte: what a
    /// forgotten hole or a lost flow-control update costs, even when the sender kept the
    /// link busy meanwhile.
    pub longest_stall: Duration,
    /// Goodput in bit/s after the start-up: bytes delivered from `time_to_90pct` to the
    /// end over that time (the whole transfer if the rate never reached 90 %).
    pub steady_goodput_bps: f64,
    /// Goodput in bit/s from 10 s after the stream opened to the end (the whole transfer
    /// from its open if it ended sooner): the steady state of a large pipe, whatever the
    /// ramp did.
    pub goodput_after_10s_bps: f64,
    /// Sender statistics at the end.
    pub sender_stats: Option<ctcp_proto::ConnectionStats>,
    /// Receiver statistics at the end.
    pub receiver_stats: Option<ctcp_proto::ConnectionStats>,
    /// Bytes the receiver put on the link (its ACKs, mostly) per goodput byte: the return
    /// direction's share of the wire budget.
    pub ack_per_goodput: f64,
}

/// The transport configuration of every `sim-sweep` transfer: the defaults with a 64 KiB
/// send buffer, so the delay figures measure the transport rather than application
/// queueing. Tests and tools that replay a sweep cell start from it.
pub fn sweep_config() -> TransportConfig {
    TransportConfig {
        stream_send_buffer: 64 << 10,
        ..TransportConfig::default()
    }
}

/// The seed of the `sim-sweep` cell at `rtt_ms` and `loss` with `--seed-offset
/// offset`: offset 0 keeps the historical seeds, others shift every cell's seed.
pub fn sweep_seed(rtt_ms: u64, loss: f64, offset: u64) -> u64 {
    (0x5eed ^ rtt_ms ^ (loss * 1e4) as u64).wrapping_add(offset.wrapping_mul(0x9e37_79b9_7f4a_7c15))
}

/// Runs `total` bytes from a ctcp sender to a ctcp receiver over `link` (both directions
/// use the same spec) and reports goodput, overhead and delays.
///
/// # Errors
/// Fails if the simulation hits its step bound or the deadline passes first.
pub fn run_transfer(
    link: &LinkSpec,
    config: TransportConfig,
    total: u64,
    seed: Seed,
    deadline: Duration,
) -> Result<TransferReport, SimError> {
    run_paced_transfer(link, config, total, None, seed, deadline)
}

/// [`run_transfer`] with an application that writes at most `pace` (a chunk per
/// interval) instead of as fast as the session takes it.
///
/// # Errors
/// Fails if the simulation hits its step bound or the deadline passes first.
pub fn run_paced_transfer(
    link: &LinkSpec,
    config: TransportConfig,
    total: u64,
    pace: Option<Pace>,
    seed: Seed,
    deadline: Duration,
) -> Result<TransferReport, SimError> {
    run_transfer_on(link, link, config, total, pace, seed, deadline)
}

/// [`run_paced_transfer`] over a link whose directions differ: `forward` carries the
/// data, `ret` the ACKs (e.g. a satellite return link at a tenth of the rate). The report
/// reads rates and delays from `forward`.
///
/// # Errors
/// Fails if the simulation hits its step bound or the deadline passes first.
pub fn run_transfer_on(
    link: &LinkSpec,
    ret: &LinkSpec,
    config: TransportConfig,
    total: u64,
    pace: Option<Pace>,
    seed: Seed,
    deadline: Duration,
) -> Result<TransferReport, SimError> {
    let mut sim = Sim::with_seed(seed);
    let start = sim.now();
    let (fwd, ret) = sim.add_asymmetric_link(link, ret);
    let psk = [7u8; 32];
    let mut tx = CtcpPeer::sender(config.clone(), &psk, seed.0, start, total);
    if let App::Sender { pace: p, .. } = &mut tx.app {
        *p = pace;
    }
    let rx = CtcpPeer::receiver(config, &psk, seed.0 ^ 0xdead_beef);
    let flow = sim.add_flow(tx, rx, fwd, ret);
    sim.set_step_limit(200_000_000);
    let end = start + deadline;
    sim.run_while_until(end, |s| {
        !s.server::<CtcpPeer>(flow)
            .is_some_and(|r| r.delivery.finished)
    })?;
    Ok(report(&sim, flow, link, total, start))
}

/// A request/response exchange over an established session, and what came of it.
#[derive(Debug, Clone)]
pub struct ExchangeReport {
    /// Whether the request and the reply both arrived intact with their FINs.
    pub bytes_ok: bool,
    /// Virtual time from the request's first write to the reply's last byte read, if the
    /// reply completed.
    pub took: Option<Duration>,
    /// Client (requester) statistics at the end.
    pub client_stats: Option<ctcp_proto::ConnectionStats>,
    /// Server (responder) statistics at the end.
    pub server_stats: Option<ctcp_proto::ConnectionStats>,
}

/// One request/response exchange: see [`run_exchange`].
#[derive(Debug, Clone, Copy)]
pub struct ExchangeSpec {
    /// Request bytes, client to server.
    pub request: u64,
    /// Reply bytes, server to client.
    pub response: u64,
    /// How long the session has been up when the client opens the stream.
    pub after: Duration,
    /// Each side's delay between its first flight (the OPEN; the connect result) and its
    /// message (the request; the reply). Zero sends each side's two in one flight.
    pub think: Duration,
}

/// Connects a client to a server over `link`, waits until the session has been up for
/// `after` (as a proxy's standing session would be), then opens a stream and, `think`
/// later, sends the request on it; the server answers the OPEN at once and the request,
/// `think` after it arrived, with the reply. This is how a proxied HTTP GET uses the
/// tunnel with fast open (OPEN, then the request; the connect result, then the reply):
/// small flights each way before any bulk.
///
/// # Errors
/// Fails if the simulation hits its step bound.
pub fn run_exchange(
    link: &LinkSpec,
    config: TransportConfig,
    spec: ExchangeSpec,
    seed: Seed,
    deadline: Duration,
) -> Result<ExchangeReport, SimError> {
    run_exchange_on(link, link, config, spec, seed, deadline)
}

/// [`run_exchange`] with the client-to-server direction on `up` and the server-to-client
/// direction on `down`: a download over an asymmetric link (a satellite terminal's
/// return channel, a DSL uplink) when `down` is the faster.
///
/// # Errors
/// Fails if the simulation hits its step bound.
pub fn run_exchange_on(
    up: &LinkSpec,
    down: &LinkSpec,
    config: TransportConfig,
    spec: ExchangeSpec,
    seed: Seed,
    deadline: Duration,
) -> Result<ExchangeReport, SimError> {
    let ExchangeSpec {
        request,
        response,
        after,
        think,
    } = spec;
    let mut sim = Sim::with_seed(seed);
    let start = sim.now();
    let (fwd, ret) = sim.add_asymmetric_link(up, down);
    let psk = [7u8; 32];
    let cli = CtcpPeer::requester(config.clone(), &psk, seed.0, start, (request, after, think));
    let srv = CtcpPeer::responder(config, &psk, seed.0 ^ 0xdead_beef, response, think);
    let flow = sim.add_flow(cli, srv, fwd, ret);
    sim.set_step_limit(50_000_000);
    sim.run_while_until(start + deadline, |s| {
        !s.client::<CtcpPeer>(flow)
            .is_some_and(|c| c.delivery.finished)
    })?;
    let cli = sim.client::<CtcpPeer>(flow);
    let srv = sim.server::<CtcpPeer>(flow);
    let ok = |d: Option<&Delivery>, n: u64| {
        d.is_some_and(|d| d.finished && d.bytes_ok == n && d.bytes_bad == 0)
    };
    let took = cli.and_then(|c| {
        let sent = c.writes.first()?.0;
        Some(c.delivery.finished_at?.saturating_duration_since(sent))
    });
    Ok(ExchangeReport {
        bytes_ok: ok(srv.map(|s| &s.delivery), request) && ok(cli.map(|c| &c.delivery), response),
        took,
        client_stats: cli.and_then(CtcpPeer::stats),
        server_stats: srv.and_then(CtcpPeer::stats),
    })
}

fn report(sim: &Sim, flow: FlowId, link: &LinkSpec, total: u64, start: Instant) -> TransferReport {
    let rx = sim.server::<CtcpPeer>(flow);
    let tx = sim.client::<CtcpPeer>(flow);
    let d = rx.map(|r| r.delivery.clone()).unwrap_or_default();
    let end = d.finished_at.unwrap_or(sim.now());
    let duration = end.saturating_duration_since(start);
    let goodput_bps = d.bytes_ok as f64 * 8.0 / duration.as_secs_f64().max(1e-9);
    let sender_stats = tx.and_then(|t| t.stats());
    let (repair_overhead, wire_per_goodput) = sender_stats.map_or((0.0, 0.0), |s| {
        (
            s.repair_bytes_sent as f64 / (s.source_bytes_sent as f64).max(1.0),
            s.bytes_sent as f64 / (d.bytes_ok as f64).max(1.0),
        )
    });
    let rtt = link.one_way_delay * 2;
    let time_to_90pct = link.rate_bps.and_then(|rate| {
        let window = rtt.max(Duration::from_millis(100));
        // What the link can deliver: its rate less the headers and the random loss (the
        // goodput that `efficiency` reads as 1). Without the loss factor 90 % is out of
        // reach above 10 % loss but for the catch-up burst after a stall.
        let target = 0.9 * rate as f64 * window.as_secs_f64() / 8.0
            * payload_fraction()
            * (1.0 - link.loss.mean());
        let mut j = 0;
        for i in 0..d.progress.len() {
            let (t, b) = d.progress[i];
            while j < i && t.saturating_duration_since(d.progress[j].0) > window {
                j += 1;
            }
            let base = if j == 0 { 0 } else { d.progress[j - 1].1 };
            if t.saturating_duration_since(start) >= window && (b - base) as f64 >= target {
                return Some(t.saturating_duration_since(start));
            }
        }
        None
    });
    // Bytes delivered in order by `at`.
    let delivered_by = |at: Instant| {
        d.progress
            .iter()
            .take_while(|(t, _)| *t <= at)
            .last()
            .map_or(0, |&(_, b)| b)
    };
    let steady_goodput_bps = match time_to_90pct {
        Some(t90) if duration > t90 => {
            let before = delivered_by(start + t90);
            (d.bytes_ok.saturating_sub(before)) as f64 * 8.0
                / (duration - t90).as_secs_f64().max(1e-9)
        }
        _ => goodput_bps,
    };
    let opened = tx
        .and_then(|t| t.writes.first().map(|&(at, _)| at))
        .unwrap_or(start);
    let open_goodput_bps = d.bytes_ok as f64 * 8.0
        / end
            .saturating_duration_since(opened)
            .as_secs_f64()
            .max(1e-9);
    let after = opened + Duration::from_secs(10);
    let goodput_after_10s_bps = if end > after {
        let before = delivered_by(after);
        d.bytes_ok.saturating_sub(before) as f64 * 8.0 / (end - after).as_secs_f64().max(1e-9)
    } else {
        open_goodput_bps
    };
    let p99_extra_delay_ms = tx.map_or(0.0, |t| {
        p99_delay(&t.first_sent, &d.progress, link.one_way_delay)
    });
    let p99_write_to_read_ms = tx.map_or(0.0, |t| {
        p99_delay(&t.writes, &d.progress, link.one_way_delay)
    });
    let longest_stall = d
        .progress
        .windows(2)
        .map(|w| w[1].0.saturating_duration_since(w[0].0))
        .max()
        .unwrap_or_default();
    TransferReport {
        longest_stall,
        total,
        bytes_ok: d.bytes_ok == total && d.bytes_bad == 0 && d.finished,
        duration,
        goodput_bps,
        open_goodput_bps,
        repair_overhead,
        wire_per_goodput,
        time_to_90pct,
        p99_extra_delay_ms,
        p99_write_to_read_ms,
        steady_goodput_bps,
        goodput_after_10s_bps,
        sender_stats,
        receiver_stats: rx.and_then(|r| r.stats()),
        ack_per_goodput: rx
            .and_then(|r| r.stats())
            .map_or(0.0, |s| s.bytes_sent as f64 / (d.bytes_ok as f64).max(1.0)),
    }
}

/// Fraction of link bytes that can be goodput (headers, tags and ACK chunks excluded):
/// used so "90 % of the link" means 90 % of what a perfect sender could deliver.
fn payload_fraction() -> f64 {
    // DATA header + SOURCE chunk header (the packet-ending form without a length, the
    // only one a sender emits) + a full symbol's payload + AEAD tag (no ACK rides on a
    // bulk sender's data packets).
    use ctcp_proto::wire::{DATA_HEADER_LEN, SOURCE_LAST_HEADER_LEN, TAG_LEN};
    let payload = TransportConfig::default().symbol_size - 2;
    payload as f64 / (DATA_HEADER_LEN + SOURCE_LAST_HEADER_LEN + payload + TAG_LEN) as f64
}

/// p99 of per-byte (read time − write time − one-way delay), sampled at read boundaries.
/// p99 over bytes of (read time − send time − `owd`), in ms: `writes` are (time, stream
/// offset reached) on the sending side ([`CtcpPeer::writes`] or
/// [`CtcpPeer::first_sent`]), `reads` the receiver's [`Delivery::progress`].
#[must_use]
pub fn p99_delay(writes: &[(Instant, u64)], reads: &[(Instant, u64)], owd: Duration) -> f64 {
    delay_quantile(writes, reads, owd, 0.99)
}

/// [`p99_delay`] at quantile `q` (0.5: the median byte's extra delay).
#[must_use]
pub fn delay_quantile(
    writes: &[(Instant, u64)],
    reads: &[(Instant, u64)],
    owd: Duration,
    q: f64,
) -> f64 {
    let mut delays = Vec::with_capacity(reads.len());
    let mut w = 0;
    let mut prev = 0u64;
    for &(t, b) in reads {
        // The last byte of this read was written by the first write that reached offset b.
        while w < writes.len() && writes[w].1 < b {
            w += 1;
        }
        let Some(&(wt, _)) = writes.get(w) else { break };
        let extra = t
            .saturating_duration_since(wt)
            .saturating_sub(owd)
            .as_secs_f64()
            * 1000.0;
        delays.push((extra, b - prev));
        prev = b;
    }
    if delays.is_empty() {
        return 0.0;
    }
    delays.sort_by(|a, b| a.0.total_cmp(&b.0));
    let total: u64 = delays.iter().map(|d| d.1).sum();
    let mut acc = 0u64;
    for (d, n) in &delays {
        acc += n;
        if acc as f64 >= q * total as f64 {
            return *d;
        }
    }
    delays.last().map_or(0.0, |d| d.0)
}

/// One ctcp flow and one TCP-model Cubic flow sharing a bottleneck; returns their goodputs
/// (bit/s) over the last `measure` of the run.
///
/// # Errors
/// Fails if the simulation hits its step bound.
pub fn run_fairness(
    rate_bps: u64,
    rtt: Duration,
    config: TransportConfig,
    seed: Seed,
    warmup: Duration,
    measure: Duration,
) -> Result<(f64, f64), SimError> {
    run_fairness_offset(rate_bps, rtt, config, seed, warmup, measure, Duration::ZERO)
}

/// Spacing of the Cubic flow's start phases in [`run_fairness_phases`].
pub const FAIRNESS_PHASE_STEP: Duration = Duration::from_millis(250);

/// [`run_fairness_offset`] once per phase, the Cubic flow starting `k ×`
/// [`FAIRNESS_PHASE_STEP`] after ctcp in run `k`; returns each run's goodputs (bit/s).
///
/// # Errors
/// Fails if a simulation hits its step bound.
pub fn run_fairness_phases(
    rate_bps: u64,
    rtt: Duration,
    config: &TransportConfig,
    seed: Seed,
    warmup: Duration,
    measure: Duration,
    phases: u32,
) -> Result<Vec<(f64, f64)>, SimError> {
    (0..phases)
        .map(|k| {
            let start = FAIRNESS_PHASE_STEP * k;
            run_fairness_offset(rate_bps, rtt, config.clone(), seed, warmup, measure, start)
        })
        .collect()
}

/// [`run_fairness`] with the Cubic flow starting `cubic_start` after the ctcp flow. With no
/// random loss the run is deterministic, and the two sawtooths' phase decides much of the
/// split; a few offsets sample that phase instead of reporting one arbitrary draw.
///
/// # Errors
/// Fails if the simulation hits its step bound.
pub fn run_fairness_offset(
    rate_bps: u64,
    rtt: Duration,
    config: TransportConfig,
    seed: Seed,
    warmup: Duration,
    measure: Duration,
    cubic_start: Duration,
) -> Result<(f64, f64), SimError> {
    let spec = LinkSpec::new(rate_bps, rtt);
    run_fairness_offset_on(&spec, config, seed, warmup, measure, cubic_start)
}

/// [`run_fairness_offset`] on the bottleneck `spec` (see [`FairnessRun::on_link`]): a
/// jittery or lossy shared link.
///
/// # Errors
/// Fails if the simulation hits its step bound.
pub fn run_fairness_offset_on(
    spec: &LinkSpec,
    config: TransportConfig,
    seed: Seed,
    warmup: Duration,
    measure: Duration,
    cubic_start: Duration,
) -> Result<(f64, f64), SimError> {
    FairnessRun::on_link(spec, config, seed, cubic_start).goodputs(warmup, measure)
}

/// One ctcp flow against the TCP model's `CcAlgorithm::BbrWindow` (BBR v1's in-flight
/// cap, which no loss lowers) on `spec`, both starting together; returns their goodputs
/// (bit/s) over `measure` after `warmup`.
///
/// # Errors
/// Fails if the simulation hits its step bound.
pub fn run_against_bbr_window(
    spec: &LinkSpec,
    seed: Seed,
    warmup: Duration,
    measure: Duration,
) -> Result<(f64, f64), SimError> {
    let tcp = TcpConfig {
        cc: crate::tcp::CcAlgorithm::BbrWindow,
        ..TcpConfig::default()
    };
    FairnessRun::against(spec, TransportConfig::default(), seed, Duration::ZERO, tcp)
        .goodputs(warmup, measure)
}

/// One ctcp flow and one Cubic-model flow sharing a bottleneck, set up and not yet run:
/// what [`run_fairness_offset`] measures, for callers that step it themselves (the
/// `fairness_trace` example prints it second by second).
pub struct FairnessRun {
    /// The simulator, at its start.
    pub sim: Sim,
    /// The ctcp flow (a sender with an endless stream).
    pub ctcp: FlowId,
    /// The Cubic-model TCP flow.
    pub cubic: FlowId,
    /// Virtual time at the start.
    pub start: Instant,
}

impl FairnessRun {
    /// Both flows on one `rate_bps` bottleneck with a one-BDP queue at `rtt` (return paths
    /// ten times faster), the Cubic flow starting `cubic_start` after ctcp.
    pub fn new(
        rate_bps: u64,
        rtt: Duration,
        config: TransportConfig,
        seed: Seed,
        cubic_start: Duration,
    ) -> Self {
        Self::on_link(&LinkSpec::new(rate_bps, rtt), config, seed, cubic_start)
    }

    /// [`FairnessRun::new`] with the shared bottleneck `spec` (its rate, delay, queue,
    /// loss and jitter apply to both flows' data alike); the return paths are ten times
    /// its rate at its RTT, without its impairments.
    ///
    /// # Panics
    /// If `spec` has no rate: a shared bottleneck needs one.
    pub fn on_link(
        spec: &LinkSpec,
        config: TransportConfig,
        seed: Seed,
        cubic_start: Duration,
    ) -> Self {
        Self::against(spec, config, seed, cubic_start, TcpConfig::default())
    }

    /// [`FairnessRun::on_link`] with the TCP-model flow configured by `tcp` (its
    /// controller: Cubic, NewReno, or a loss-blind window), starting `tcp_start` after ctcp.
    ///
    /// # Panics
    /// If `spec` has no rate: a shared bottleneck needs one.
    pub fn against(
        spec: &LinkSpec,
        config: TransportConfig,
        seed: Seed,
        tcp_start: Duration,
        tcp: TcpConfig,
    ) -> Self {
        #[allow(clippy::expect_used)] // a caller's mistake, not an input: say so at once
        let rate_bps = spec.rate_bps.expect("a fairness bottleneck has a rate");
        let rtt = spec.one_way_delay * 2;
        let mut sim = Sim::with_seed(seed);
        let start = sim.now();
        // One shared bottleneck: both flows' forward paths use the same nodes.
        let fwd_nodes = spec.build_nodes(&mut sim);
        let fwd_a = sim.add_path(fwd_nodes.iter().copied());
        let fwd_b = sim.add_path(fwd_nodes.iter().copied());
        let ret_a = LinkSpec::new(rate_bps * 10, rtt).build_path(&mut sim);
        let ret_b = LinkSpec::new(rate_bps * 10, rtt).build_path(&mut sim);
        let psk = [7u8; 32];
        let huge = u64::MAX / 4;
        let tx = CtcpPeer::sender(config.clone(), &psk, seed.0, start, huge);
        let rx = CtcpPeer::receiver(config, &psk, seed.0 ^ 1);
        let ctcp = sim.add_flow(tx, rx, fwd_a, ret_a);
        let (ttx, trx) = tcp_pair(TcpConfig {
            start_at: (!tcp_start.is_zero()).then_some(start + tcp_start),
            ..tcp
        });
        let cubic = sim.add_flow(ttx, trx, fwd_b, ret_b);
        FairnessRun {
            sim,
            ctcp,
            cubic,
            start,
        }
    }

    /// Runs `warmup`, then `measure`, and returns each flow's goodput over `measure` in
    /// bit/s: (ctcp, TCP model).
    ///
    /// # Errors
    /// Fails if the simulation hits its step bound.
    pub fn goodputs(mut self, warmup: Duration, measure: Duration) -> Result<(f64, f64), SimError> {
        self.sim.set_step_limit(200_000_000);
        self.sim.run_until(self.start + warmup)?;
        let (c0, t0) = self.delivered();
        self.sim.run_until(self.start + warmup + measure)?;
        let (c1, t1) = self.delivered();
        let secs = measure.as_secs_f64();
        Ok(((c1 - c0) as f64 * 8.0 / secs, (t1 - t0) as f64 * 8.0 / secs))
    }

    /// Bytes each flow has delivered in order so far: (ctcp, Cubic).
    pub fn delivered(&self) -> (u64, u64) {
        let c = self
            .sim
            .server::<CtcpPeer>(self.ctcp)
            .map_or(0, |r| r.delivery.bytes_ok);
        let t = self
            .sim
            .server::<TcpReceiver>(self.cubic)
            .map_or(0, |r| r.bytes_delivered());
        (c, t)
    }
}
