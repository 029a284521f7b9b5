//! Opt-in Prometheus/OpenMetrics endpoint: per-session transport statistics, process-wide
//! totals that outlive sessions, handshake and SOCKS outcome counters, the endpoint's drop
//! counters and the build, rendered with `prometheus-client` at each scrape.
//!
//! Sessions are named by their connection id in decimal ([`session_label`]), in these
//! labels and in every log line (`session=…`), so the two can be matched by eye or grep.

use crate::driver::{Driver, Inner};
use ctcp_proto::{ConnectionError, ConnectionHandle, ConnectionStats};
use prometheus_client::encoding::text::encode;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::collections::{BTreeMap, HashSet};
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::watch;

/// The label a session carries in metrics: its connection id in decimal, as the logs
/// print it (`session=3735928559`).
pub fn session_label(h: ConnectionHandle) -> String {
    h.0.to_string()
}

/// How a tunnel handshake ended, as counted in `ctcp_handshakes_total{result}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum HandshakeOutcome {
    /// The session was established.
    Ok,
    /// (Server) a handshake datagram failed authentication: a bad MAC (wrong key), a
    /// timestamp outside the allowed clock skew, a replayed random, or a reset with a bad
    /// token.
    BadMac,
    /// (Client) no valid ACCEPT arrived in time (peer down, path blocked, or wrong key).
    Timeout,
    /// (Server) an authentic handshake refused by the session or rate limit, or naming a
    /// connection id already in use; (client) the peer answered with a REJECT (different
    /// key or version, mismatched parameters, busy or draining).
    Refused,
    /// The session ended before its handshake completed for another reason (closed
    /// locally, peer reset).
    Aborted,
}

impl HandshakeOutcome {
    /// The `result` label value.
    pub fn label(self) -> &'static str {
        match self {
            HandshakeOutcome::Ok => "ok",
            HandshakeOutcome::BadMac => "bad_mac",
            HandshakeOutcome::Timeout => "timeout",
            HandshakeOutcome::Refused => "refused",
            HandshakeOutcome::Aborted => "aborted",
        }
    }
}

/// How a SOCKS client's greeting and request ended, as counted in
/// `ctcp_socks_handshakes_total{result}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum SocksOutcome {
    /// A CONNECT request was read (its reply is counted by code).
    Accepted,
    /// Wrong username or password.
    AuthFailed,
    /// The greeting offered no method we accept (e.g. no username/password when users are
    /// configured), or was not SOCKS5.
    NoAcceptableMethod,
    /// A malformed request, an unsupported command or address type, a bad name.
    BadRequest,
    /// The client did not finish within `handshake_timeout`.
    Timeout,
    /// The client closed or the connection failed mid-handshake.
    ClientClosed,
}

impl SocksOutcome {
    /// The `result` label value.
    pub fn label(self) -> &'static str {
        match self {
            SocksOutcome::Accepted => "accepted",
            SocksOutcome::AuthFailed => "auth_failed",
            SocksOutcome::NoAcceptableMethod => "no_acceptable_method",
            SocksOutcome::BadRequest => "bad_request",
            SocksOutcome::Timeout => "timeout",
            SocksOutcome::ClientClosed => "client_closed",
        }
    }
}

/// How a connection to the transparent (gateway) listener ended before or at its stream
/// open, as counted in `ctcp_transparent_connections_total{result}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum TransparentOutcome {
    /// Its original destination was read and a tunnel stream opened to it (the target's
    /// connect result is counted by code in `ctcp_transparent_opens_total`).
    Tunnelled,
    /// Refused: its original destination is this proxy's own listener or its reverse
    /// peer (a loop or a connection that was never redirected).
    Loop,
    /// Refused: the original destination could not be read (no NAT entry: the
    /// connection was not redirected; or the wrong `transparent_mode`).
    NoOriginalDst,
    /// Refused: no tunnel session could carry it.
    NoSession,
}

impl TransparentOutcome {
    /// The `result` label value.
    pub fn label(self) -> &'static str {
        match self {
            TransparentOutcome::Tunnelled => "tunnelled",
            TransparentOutcome::Loop => "loop",
            TransparentOutcome::NoOriginalDst => "no_original_dst",
            TransparentOutcome::NoSession => "no_session",
        }
    }
}

/// The name of a SOCKS5 reply code (RFC 1928 §6), the `reply` label of reply counters.
pub fn reply_name(code: u8) -> &'static str {
    match code {
        0x00 => "succeeded",
        0x01 => "general_failure",
        0x02 => "not_allowed",
        0x03 => "network_unreachable",
        0x04 => "host_unreachable",
        0x05 => "connection_refused",
        0x06 => "ttl_expired",
        0x07 => "command_not_supported",
        0x08 => "address_type_not_supported",
        _ => "unassigned",
    }
}

/// Why an established session ended: the `reason` label of `ctcp_sessions_closed_total`.
pub fn close_reason(e: &ConnectionError) -> &'static str {
    match e {
        ConnectionError::IdleTimeout => "idle_timeout",
        ConnectionError::HandshakeTimeout => "handshake_timeout",
        ConnectionError::PeerClosed { .. } => "peer_closed",
        ConnectionError::LocallyClosed => "local_close",
        ConnectionError::PeerRestarted => "peer_restarted",
        ConnectionError::Protocol(_) => "protocol_violation",
        ConnectionError::Rejected { .. } => "rejected",
        ConnectionError::Incompatible(_) => "incompatible",
    }
}

/// Transport counters summed over sessions.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TransportTotals {
    /// Datagrams sent.
    pub datagrams_sent: u64,
    /// Authenticated datagrams received.
    pub datagrams_received: u64,
    /// Bytes put on the wire.
    pub bytes_sent: u64,
    /// Source symbols sent.
    pub source_symbols_sent: u64,
    /// Repair symbols sent.
    pub repair_symbols_sent: u64,
    /// Packets declared lost.
    pub packets_lost: u64,
    /// Stream bytes delivered to the application.
    pub stream_bytes_read: u64,
    /// Stream bytes sent (first transmissions).
    pub stream_bytes_sent: u64,
    /// Repair symbols sent, by kind, in [`REPAIR_KINDS`] order.
    pub repairs_by_kind: [u64; REPAIR_KINDS.len()],
    /// Repair symbols received.
    pub repairs_received: u64,
    /// Repair symbols received that added nothing (everything they cover was known).
    pub repairs_useless: u64,
}

impl TransportTotals {
    /// Adds `o`'s counters to these.
    fn merge(&mut self, o: &TransportTotals) {
        self.datagrams_sent += o.datagrams_sent;
        self.datagrams_received += o.datagrams_received;
        self.bytes_sent += o.bytes_sent;
        self.source_symbols_sent += o.source_symbols_sent;
        self.repair_symbols_sent += o.repair_symbols_sent;
        self.packets_lost += o.packets_lost;
        self.stream_bytes_read += o.stream_bytes_read;
        self.stream_bytes_sent += o.stream_bytes_sent;
        for (a, b) in self.repairs_by_kind.iter_mut().zip(o.repairs_by_kind) {
            *a += b;
        }
        self.repairs_received += o.repairs_received;
        self.repairs_useless += o.repairs_useless;
    }
}

/// The `kind` label values of repair counters: `proactive` (the loss-rate credit),
/// `tail` (sent into an idle tail), `reactive` (owed for a declared loss, a reported
/// deficit or a tail-loss probe), `stall` (the stall watch: the peer's in-order point stood
/// still) and `margin` (start-up copies beside lost reactive repairs).
pub const REPAIR_KINDS: [&str; 5] = ["proactive", "tail", "reactive", "stall", "margin"];

/// A session's repair symbols sent, by kind, in [`REPAIR_KINDS`] order (they add up to
/// `repair_sent`).
pub fn repairs_by_kind(s: &ConnectionStats) -> [u64; REPAIR_KINDS.len()] {
    let [reactive, proactive, tail, margin] = s.repair_origin;
    // Stall repairs are counted among the reactive ones by origin.
    [
        proactive,
        tail,
        reactive.saturating_sub(s.stall_repairs),
        s.stall_repairs,
        margin,
    ]
}

impl TransportTotals {
    /// Adds one session's counters.
    pub fn add(&mut self, s: &ConnectionStats) {
        self.datagrams_sent += s.datagrams_sent;
        self.datagrams_received += s.datagrams_received;
        self.bytes_sent += s.bytes_sent;
        self.source_symbols_sent += s.source_sent;
        self.repair_symbols_sent += s.repair_sent;
        self.packets_lost += s.lost;
        self.stream_bytes_read += s.stream_bytes_read;
        self.stream_bytes_sent += s.stream_bytes_sent;
        for (t, n) in self.repairs_by_kind.iter_mut().zip(repairs_by_kind(s)) {
            *t += n;
        }
        self.repairs_received += s.repairs_received;
        self.repairs_useless += s.repairs_useless;
    }
}

/// Process-wide counters, kept by the driver under its lock so they outlive sessions.
///
/// A session's transport counters move into `retired` when it ends; until the endpoint
/// drops the connection it is listed in `retired_live` so the live sum skips it (no
/// double count).
#[derive(Debug, Default)]
pub(crate) struct Totals {
    retired: TransportTotals,
    retired_live: HashSet<ConnectionHandle>,
    established: HashSet<ConnectionHandle>,
    sessions_opened: u64,
    sessions_closed: BTreeMap<&'static str, u64>,
    handshakes: BTreeMap<HandshakeOutcome, u64>,
    socks_handshakes: BTreeMap<SocksOutcome, u64>,
    socks_replies: BTreeMap<u8, u64>,
    transparent: BTreeMap<TransparentOutcome, u64>,
    transparent_opens: BTreeMap<u8, u64>,
    target_connects: BTreeMap<u8, u64>,
}

impl Totals {
    /// A session's handshake completed.
    pub(crate) fn on_connected(&mut self, h: ConnectionHandle) {
        if self.established.insert(h) {
            self.sessions_opened += 1;
            self.handshake(HandshakeOutcome::Ok);
        }
    }

    /// Counts the server sessions the endpoint has created since the last call (they are
    /// established at once and get no `Connected` event) and returns their handles.
    pub(crate) fn on_accepted(&mut self, endpoint: &ctcp_proto::Endpoint) -> Vec<ConnectionHandle> {
        let new: Vec<ConnectionHandle> = endpoint
            .handles()
            .into_iter()
            .filter(|h| !self.established.contains(h) && !self.retired_live.contains(h))
            .filter(|h| {
                endpoint
                    .connection(*h)
                    .is_some_and(|c| c.side() == ctcp_proto::Side::Server && c.is_established())
            })
            .collect();
        for &h in &new {
            self.on_connected(h);
        }
        new
    }

    /// A session ended with `err`; `stats` are its final counters if the endpoint still
    /// holds it.
    pub(crate) fn on_lost(
        &mut self,
        h: ConnectionHandle,
        err: &ConnectionError,
        stats: Option<&ConnectionStats>,
    ) {
        if self.established.remove(&h) {
            *self.sessions_closed.entry(close_reason(err)).or_default() += 1;
        } else if *err == ConnectionError::HandshakeTimeout {
            self.handshake(HandshakeOutcome::Timeout);
        } else if matches!(
            err,
            ConnectionError::Rejected { .. } | ConnectionError::Incompatible(_)
        ) {
            self.handshake(HandshakeOutcome::Refused);
        } else {
            self.handshake(HandshakeOutcome::Aborted);
        }
        if let Some(s) = stats {
            if self.retired_live.insert(h) {
                self.retired.add(s);
            }
        }
    }

    /// Counts one handshake outcome.
    pub(crate) fn handshake(&mut self, outcome: HandshakeOutcome) {
        *self.handshakes.entry(outcome).or_default() += 1;
    }
}

/// A snapshot of the process-wide counters (see [`Driver::totals`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProcessTotals {
    /// Transport counters of every session since start, ended and live.
    pub transport: TransportTotals,
    /// Sessions whose handshake completed.
    pub sessions_opened: u64,
    /// Established sessions that ended, by [`close_reason`].
    pub sessions_closed: BTreeMap<&'static str, u64>,
    /// Handshake outcomes, including the endpoint's authentication failures and refusals.
    pub handshakes: BTreeMap<HandshakeOutcome, u64>,
    /// SOCKS handshakes by outcome (forward).
    pub socks_handshakes: BTreeMap<SocksOutcome, u64>,
    /// SOCKS replies sent, by code (forward).
    pub socks_replies: BTreeMap<u8, u64>,
    /// Transparent-listener connections by outcome (forward, gateway mode).
    pub transparent: BTreeMap<TransparentOutcome, u64>,
    /// Target connect results of transparent connections, by SOCKS reply code (forward).
    pub transparent_opens: BTreeMap<u8, u64>,
    /// Target connect results, by SOCKS reply code (reverse).
    pub target_connects: BTreeMap<u8, u64>,
}

impl ProcessTotals {
    /// Adds another shard's or driver's totals (a relay's next-hop side) to these.
    pub fn merge(&mut self, o: &ProcessTotals) {
        fn add<K: Ord + Copy>(a: &mut BTreeMap<K, u64>, b: &BTreeMap<K, u64>) {
            for (k, v) in b {
                *a.entry(*k).or_default() += v;
            }
        }
        self.transport.merge(&o.transport);
        self.sessions_opened += o.sessions_opened;
        add(&mut self.sessions_closed, &o.sessions_closed);
        add(&mut self.handshakes, &o.handshakes);
        add(&mut self.socks_handshakes, &o.socks_handshakes);
        add(&mut self.socks_replies, &o.socks_replies);
        add(&mut self.target_connects, &o.target_connects);
        add(&mut self.transparent, &o.transparent);
        add(&mut self.transparent_opens, &o.transparent_opens);
    }
}

/// One shard's totals: its ended sessions' counters plus its live ones'.
fn shard_totals(inner: &mut Inner) -> ProcessTotals {
    let live: HashSet<ConnectionHandle> = inner.endpoint.handles().into_iter().collect();
    let t = &mut inner.totals;
    // Forget sessions the endpoint has dropped: their counters are in `retired`.
    t.retired_live.retain(|h| live.contains(h));
    t.established.retain(|h| live.contains(h));
    let mut transport = t.retired;
    for h in &live {
        if t.retired_live.contains(h) {
            continue;
        }
        if let Some(c) = inner.endpoint.connection(*h) {
            transport.add(&c.stats());
        }
    }
    let mut handshakes = t.handshakes.clone();
    let d = inner.endpoint.drops();
    for (outcome, n) in [
        (HandshakeOutcome::BadMac, d.bad_handshake),
        (HandshakeOutcome::Refused, d.refused),
    ] {
        if n > 0 {
            *handshakes.entry(outcome).or_default() += n;
        }
    }
    ProcessTotals {
        transport,
        sessions_opened: t.sessions_opened,
        sessions_closed: t.sessions_closed.clone(),
        handshakes,
        socks_handshakes: t.socks_handshakes.clone(),
        socks_replies: t.socks_replies.clone(),
        transparent: t.transparent.clone(),
        transparent_opens: t.transparent_opens.clone(),
        target_connects: t.target_connects.clone(),
    }
}

/// One live session as the metrics and `status` show it.
#[derive(Debug, Clone)]
pub struct SessionSnapshot {
    /// The session.
    pub handle: ConnectionHandle,
    /// The peer's current address.
    pub peer: SocketAddr,
    /// `handshake`, `established` or `closing`.
    pub state: &'static str,
    /// Its counters and estimates.
    pub stats: ConnectionStats,
    /// Open streams.
    pub streams: usize,
    /// Its paths (one unless a multipath forward opened more).
    pub paths: Vec<ctcp_proto::PathInfo>,
}

impl Driver {
    /// Process-wide totals: ended sessions' counters plus the live ones', every shard's.
    pub fn totals(&self) -> ProcessTotals {
        let mut all = ProcessTotals::default();
        for s in self.shared.shards() {
            all.merge(&shard_totals(&mut s.lock()));
        }
        all
    }

    /// The live sessions with their peer and state.
    pub fn sessions(&self) -> Vec<SessionSnapshot> {
        let mut all = Vec::new();
        for s in self.shared.shards() {
            let inner = s.lock();
            all.extend(inner.endpoint.handles().into_iter().filter_map(|h| {
                let c = inner.endpoint.connection(h)?;
                let state = if inner.totals.retired_live.contains(&h) || c.is_drained() {
                    "closing"
                } else if c.is_established() {
                    "established"
                } else {
                    "handshake"
                };
                Some(SessionSnapshot {
                    handle: h,
                    peer: c.remote(),
                    state,
                    stats: c.stats(),
                    streams: c.stream_count(),
                    paths: c.paths(),
                })
            }));
        }
        all
    }

    /// The shard that keeps the counters no session owns (SOCKS, transparent, targets).
    fn counters(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.shared.shards()[0].lock()
    }

    /// Counts a SOCKS handshake outcome.
    pub fn count_socks_handshake(&self, outcome: SocksOutcome) {
        *self
            .counters()
            .totals
            .socks_handshakes
            .entry(outcome)
            .or_default() += 1;
    }

    /// Counts a SOCKS reply sent to a client.
    pub fn count_socks_reply(&self, code: u8) {
        *self
            .counters()
            .totals
            .socks_replies
            .entry(code)
            .or_default() += 1;
    }

    /// Counts a transparent-listener connection's outcome.
    pub fn count_transparent(&self, outcome: TransparentOutcome) {
        *self
            .counters()
            .totals
            .transparent
            .entry(outcome)
            .or_default() += 1;
    }

    /// Counts a transparent connection's target connect result (as a SOCKS reply code).
    pub fn count_transparent_open(&self, code: u8) {
        *self
            .counters()
            .totals
            .transparent_opens
            .entry(code)
            .or_default() += 1;
    }

    /// Counts a target connect result (the reply code sent back through the tunnel).
    pub fn count_target_connect(&self, code: u8) {
        *self
            .counters()
            .totals
            .target_connects
            .entry(code)
            .or_default() += 1;
    }
}

/// What this binary is: `ctcp_build_info`'s labels.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuildInfo {
    /// The crate version.
    pub version: &'static str,
    /// The commit, when the build set `CTCP_GIT_SHA` (the packaging script does).
    pub git_sha: Option<&'static str>,
    /// Comma-separated build and run-time traits: `gf256=BACKEND` (the GF(256) kernels
    /// this CPU runs) and `debug` for a build with debug assertions.
    pub features: String,
}

/// This binary's build information.
pub fn build_info() -> BuildInfo {
    let mut features = vec![format!("gf256={}", ctcp_gf256::backend().name())];
    if cfg!(debug_assertions) {
        features.push("debug".into());
    }
    BuildInfo {
        version: env!("CARGO_PKG_VERSION"),
        git_sha: option_env!("CTCP_GIT_SHA").filter(|s| !s.is_empty()),
        features: features.join(","),
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Session {
    session: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SessionPath {
    session: String,
    path: u8,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SessionInfo {
    session: String,
    peer: String,
    state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SessionKind {
    session: String,
    kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Kind {
    kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Reason {
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Direction {
    direction: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Outcome {
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReplyCode {
    code: String,
    reply: &'static str,
}

type FloatGauge = Family<Session, Gauge<f64, AtomicU64>>;
type SessionCounter = Family<Session, Counter>;

fn reply_family(counts: &BTreeMap<u8, u64>) -> Family<ReplyCode, Counter> {
    let f: Family<ReplyCode, Counter> = Family::default();
    for (&code, &n) in counts {
        f.get_or_create(&ReplyCode {
            code: format!("{code:#04x}"),
            reply: reply_name(code),
        })
        .inc_by(n);
    }
    f
}

/// A session's gauge values, in the order `render` registers them: srtt, min RTT, cwnd,
/// loss ratio (lost per resolved packet), loss estimate, repair ratio (every kind of
/// repair per source symbol), streams.
fn session_gauges(st: &ConnectionStats, streams: usize) -> [f64; 7] {
    [
        st.srtt.as_secs_f64(),
        st.min_rtt.as_secs_f64(),
        st.cwnd as f64,
        st.loss_ratio(),
        st.loss,
        st.repairs_per_source(),
        streams as f64,
    ]
}

/// Renders the current statistics in the OpenMetrics text format.
pub fn render(driver: &Driver) -> String {
    render_all(driver, &[])
}

/// [`render`] for a process with more than one driver (a relay: `extra` holds its
/// next-hop driver): every driver's sessions are listed together (the next-hop session's
/// `peer` is the next gateway) and the process totals are their sums; the drop counters
/// are `driver`'s.
pub fn render_all(driver: &Driver, extra: &[Driver]) -> String {
    let mut reg = Registry::with_prefix("ctcp");
    let gauges: Vec<(&str, &str, FloatGauge)> = vec![
        ("srtt_seconds", "Smoothed round-trip time"),
        ("min_rtt_seconds", "Windowed minimum round-trip time"),
        ("cwnd_packets", "Congestion window in packets"),
        (
            "loss_ratio",
            "Packets lost per packet resolved (acknowledged or lost; packets in flight excluded)",
        ),
        (
            "loss_estimate",
            "Short-term loss estimate the repair policy uses (EWMA over resolved packets)",
        ),
        (
            "repair_ratio",
            "Repair symbols sent per source symbol sent, every kind of repair",
        ),
        ("streams", "Open streams"),
    ]
    .into_iter()
    .map(|(n, h)| (n, h, FloatGauge::default()))
    .collect();
    let counters: Vec<(&str, &str, SessionCounter)> = vec![
        ("datagrams_sent", "Datagrams sent"),
        ("datagrams_received", "Authenticated datagrams received"),
        ("bytes_sent", "Bytes put on the wire"),
        ("repair_symbols_sent", "Repair symbols sent"),
        ("packets_lost", "Packets declared lost"),
        ("repairs_received", "Repair symbols received"),
        (
            "repairs_useless",
            "Repair symbols received that added nothing (everything they cover was known)",
        ),
        (
            "stream_bytes_read",
            "Stream bytes delivered to the application",
        ),
        (
            "stream_bytes_sent",
            "Stream bytes sent (first transmissions)",
        ),
    ]
    .into_iter()
    .map(|(n, h)| (n, h, SessionCounter::default()))
    .collect();
    let repairs: Family<SessionKind, Counter> = Family::default();
    let info: Family<SessionInfo, Gauge> = Family::default();
    let mut sessions = driver.sessions();
    for d in extra {
        sessions.extend(d.sessions());
    }
    for s in &sessions {
        let session = session_label(s.handle);
        info.get_or_create(&SessionInfo {
            session: session.clone(),
            peer: s.peer.to_string(),
            state: s.state.to_owned(),
        })
        .set(1);
        let l = Session { session };
        let st = &s.stats;
        for ((_, _, g), v) in gauges.iter().zip(session_gauges(st, s.streams)) {
            g.get_or_create(&l).set(v);
        }
        let totals = [
            st.datagrams_sent,
            st.datagrams_received,
            st.bytes_sent,
            st.repair_sent,
            st.lost,
            st.repairs_received,
            st.repairs_useless,
            st.stream_bytes_read,
            st.stream_bytes_sent,
        ];
        for ((_, _, c), v) in counters.iter().zip(totals) {
            c.get_or_create(&l).inc_by(v);
        }
        for (kind, n) in REPAIR_KINDS.into_iter().zip(repairs_by_kind(st)) {
            repairs
                .get_or_create(&SessionKind {
                    session: l.session.clone(),
                    kind,
                })
                .inc_by(n);
        }
    }
    reg.register(
        "repairs_sent",
        "Repair symbols sent, by kind (proactive, tail, reactive, stall, margin)",
        repairs,
    );
    reg.register(
        "session_info",
        "A live session: its peer address and state (handshake, established, closing)",
        info,
    );
    for (name, help, g) in gauges {
        reg.register(name, help, g);
    }
    for (name, help, c) in counters {
        reg.register(name, help, c);
    }
    register_paths(&mut reg, &sessions);
    let live: Gauge = Gauge::default();
    live.set(sessions.len() as i64);
    reg.register("sessions", "Live tunnel sessions", live);

    let mut t = driver.totals();
    for d in extra {
        t.merge(&d.totals());
    }
    let process: [(&str, &str, u64); 10] = [
        (
            "process_datagrams_sent",
            "Datagrams sent by all sessions since start",
            t.transport.datagrams_sent,
        ),
        (
            "process_datagrams_received",
            "Authenticated datagrams received by all sessions since start",
            t.transport.datagrams_received,
        ),
        (
            "process_bytes_sent",
            "Bytes put on the wire by all sessions since start",
            t.transport.bytes_sent,
        ),
        (
            "process_source_symbols_sent",
            "Source symbols sent by all sessions since start",
            t.transport.source_symbols_sent,
        ),
        (
            "process_repair_symbols_sent",
            "Repair symbols sent by all sessions since start",
            t.transport.repair_symbols_sent,
        ),
        (
            "process_packets_lost",
            "Packets declared lost by all sessions since start",
            t.transport.packets_lost,
        ),
        (
            "process_repairs_received",
            "Repair symbols received by all sessions since start",
            t.transport.repairs_received,
        ),
        (
            "process_repairs_useless",
            "Repair symbols received that added nothing, all sessions since start",
            t.transport.repairs_useless,
        ),
        (
            "process_stream_bytes_read",
            "Stream bytes delivered to the application by all sessions since start",
            t.transport.stream_bytes_read,
        ),
        (
            "process_stream_bytes_sent",
            "Stream bytes sent by all sessions since start",
            t.transport.stream_bytes_sent,
        ),
    ];
    for (name, help, v) in process {
        let c: Counter = Counter::default();
        c.inc_by(v);
        reg.register(name, help, c);
    }
    let by_kind: Family<Kind, Counter> = Family::default();
    for (kind, n) in REPAIR_KINDS.into_iter().zip(t.transport.repairs_by_kind) {
        by_kind.get_or_create(&Kind { kind }).inc_by(n);
    }
    reg.register(
        "process_repairs_sent",
        "Repair symbols sent by all sessions since start, by kind",
        by_kind,
    );
    let opened: Counter = Counter::default();
    opened.inc_by(t.sessions_opened);
    reg.register(
        "sessions_opened",
        "Sessions whose handshake completed",
        opened,
    );
    let closed: Family<Reason, Counter> = Family::default();
    for (&reason, &n) in &t.sessions_closed {
        closed.get_or_create(&Reason { reason }).inc_by(n);
    }
    reg.register(
        "sessions_closed",
        "Established sessions that ended, by reason",
        closed,
    );
    let handshakes: Family<Outcome, Counter> = Family::default();
    for (&o, &n) in &t.handshakes {
        handshakes
            .get_or_create(&Outcome { result: o.label() })
            .inc_by(n);
    }
    reg.register(
        "handshakes",
        "Tunnel handshakes by result (ok, bad_mac, timeout, refused, aborted)",
        handshakes,
    );
    let socks: Family<Outcome, Counter> = Family::default();
    for (&o, &n) in &t.socks_handshakes {
        socks
            .get_or_create(&Outcome { result: o.label() })
            .inc_by(n);
    }
    reg.register(
        "socks_handshakes",
        "SOCKS client handshakes by result",
        socks,
    );
    reg.register(
        "socks_replies",
        "SOCKS replies sent to clients, by reply code",
        reply_family(&t.socks_replies),
    );
    if !t.transparent.is_empty() || !t.transparent_opens.is_empty() {
        let transparent: Family<Outcome, Counter> = Family::default();
        for (&o, &n) in &t.transparent {
            transparent
                .get_or_create(&Outcome { result: o.label() })
                .inc_by(n);
        }
        reg.register(
            "transparent_connections",
            "Transparent (gateway) listener connections by result",
            transparent,
        );
        reg.register(
            "transparent_opens",
            "Target connect results of transparent connections, by SOCKS reply code",
            reply_family(&t.transparent_opens),
        );
    }
    reg.register(
        "target_connects",
        "Target connect results sent back through the tunnel, by SOCKS reply code",
        reply_family(&t.target_connects),
    );

    let drops: Family<Reason, Counter> = Family::default();
    let d = driver.drops();
    for (reason, v) in [
        ("malformed", d.malformed),
        ("bad_handshake", d.bad_handshake),
        ("refused", d.refused),
        ("unknown_session", d.unknown_session),
    ] {
        drops.get_or_create(&Reason { reason }).inc_by(v);
    }
    reg.register("dropped_datagrams", "Datagrams dropped, by reason", drops);
    register_udp(&mut reg, driver, extra);

    let b = build_info();
    let mut labels = vec![("version".to_owned(), b.version.to_owned())];
    if let Some(sha) = b.git_sha {
        labels.push(("git_sha".to_owned(), sha.to_owned()));
    }
    labels.push(("features".to_owned(), b.features));
    let build: Family<Vec<(String, String)>, Gauge> = Family::default();
    build.get_or_create(&labels).set(1);
    reg.register("build_info", "The running build (value 1)", build);

    let mut out = String::new();
    // Writing into a String cannot fail.
    let _ = encode(&mut out, &reg);
    out
}

/// The unreliable-datagram counters (issue 27): the sessions' coded datagrams (all
/// sessions since start, as last seen), the UDP relays' flows, and drops by reason.
/// Per-path series of the multipath sessions (more than one path; a single-path
/// session's figures are its session series): bytes and datagrams sent, smoothed RTT,
/// and whether the path is up (validated and not declared dead).
fn register_paths(reg: &mut Registry, sessions: &[SessionSnapshot]) {
    let bytes: Family<SessionPath, Counter> = Family::default();
    let datagrams: Family<SessionPath, Counter> = Family::default();
    let srtt: Family<SessionPath, Gauge<f64, AtomicU64>> = Family::default();
    let up: Family<SessionPath, Gauge> = Family::default();
    for s in sessions.iter().filter(|s| s.paths.len() > 1) {
        for p in &s.paths {
            let l = SessionPath {
                session: session_label(s.handle),
                path: p.id,
            };
            bytes.get_or_create(&l).inc_by(p.bytes_sent);
            datagrams.get_or_create(&l).inc_by(p.sent);
            srtt.get_or_create(&l).set(p.srtt.as_secs_f64());
            up.get_or_create(&l).set(i64::from(p.validated && !p.dead));
        }
    }
    reg.register(
        "path_bytes_sent",
        "Bytes sent on one path of a multipath session",
        bytes,
    );
    reg.register(
        "path_datagrams_sent",
        "Datagrams sent on one path of a multipath session",
        datagrams,
    );
    reg.register(
        "path_srtt_seconds",
        "Smoothed round-trip time of one path of a multipath session",
        srtt,
    );
    reg.register(
        "path_up",
        "1 if a path of a multipath session is validated and alive, else 0",
        up,
    );
}

fn register_udp(reg: &mut Registry, driver: &Driver, extra: &[Driver]) {
    use crate::datagram::COUNTERS as C;
    use std::sync::atomic::Ordering::Relaxed;
    let mut t = driver.datagram_totals();
    let mut unrelayed = driver.datagrams_unrelayed();
    for d in extra {
        let o = d.datagram_totals();
        t.sent += o.sent;
        t.repairs_sent += o.repairs_sent;
        t.received += o.received;
        t.recovered += o.recovered;
        t.expired += o.expired;
        t.queue_dropped += o.queue_dropped;
        t.inbox_dropped += o.inbox_dropped;
        t.rejected += o.rejected;
        unrelayed += d.datagrams_unrelayed();
    }
    for (name, help, v) in [
        (
            "udp_datagrams_sent",
            "Unreliable datagrams sent into the sessions (each once)",
            t.sent,
        ),
        (
            "udp_datagram_repairs_sent",
            "Datagram repairs sent by the sessions",
            t.repairs_sent,
        ),
        (
            "udp_datagrams_received",
            "Unreliable datagrams the sessions delivered (received or recovered)",
            t.received,
        ),
        (
            "udp_datagrams_recovered",
            "Of the datagrams delivered, those decoded from repairs",
            t.recovered,
        ),
        (
            "udp_associations",
            "SOCKS UDP associations opened",
            C.associations.load(Relaxed),
        ),
        (
            "udp_flows_opened",
            "UDP flows opened (forward: per association or transparent flow; reverse: sockets)",
            C.flows_opened.load(Relaxed),
        ),
    ] {
        let c: Counter = Counter::default();
        c.inc_by(v);
        reg.register(name, help, c);
    }
    let closed: Family<Reason, Counter> = Family::default();
    for (reason, v) in [
        ("idle", C.flows_idle_closed.load(Relaxed)),
        ("evicted", C.flows_evicted.load(Relaxed)),
    ] {
        closed.get_or_create(&Reason { reason }).inc_by(v);
    }
    reg.register(
        "udp_flows_closed",
        "UDP flows closed, by reason (idle timeout, evicted at the flow cap)",
        closed,
    );
    let relayed: Family<Direction, Counter> = Family::default();
    for (direction, v) in [
        ("to_tunnel", C.to_tunnel.load(Relaxed)),
        ("from_tunnel", C.from_tunnel.load(Relaxed)),
    ] {
        relayed.get_or_create(&Direction { direction }).inc_by(v);
    }
    reg.register(
        "udp_relayed",
        "UDP datagrams relayed into and out of the tunnel",
        relayed,
    );
    let drops: Family<Reason, Counter> = Family::default();
    for (reason, v) in [
        ("fragment", C.dropped_fragment.load(Relaxed)),
        ("wrong_source", C.dropped_wrong_source.load(Relaxed)),
        ("bad_header", C.dropped_bad_header.load(Relaxed)),
        ("denied", C.dropped_denied.load(Relaxed)),
        ("session", C.dropped_session.load(Relaxed)),
        ("no_flow", C.dropped_no_flow.load(Relaxed)),
        ("reply", C.dropped_reply.load(Relaxed)),
        ("unrelayed", unrelayed),
        ("queue_overflow", t.queue_dropped),
        ("expired", t.expired),
        ("inbox_overflow", t.inbox_dropped),
        ("rejected", t.rejected),
    ] {
        drops.get_or_create(&Reason { reason }).inc_by(v);
    }
    reg.register(
        "udp_dropped",
        "UDP datagrams dropped, by reason: SOCKS fragment, wrong source, bad header, \
         denied by the ACL or unresolved, refused by the session, no flow (no reply socket \
         for a transparent flow, or too many names resolving), a reply that never reached \
         its client (flow closed, queue full or send failed), not taken by the relay, send queue overflow, expired before sending, receive \
         inbox overflow, rejected by the session",
        drops,
    );
}

/// Serves the metrics over plain HTTP on `addr` until shutdown. Any request path gets the
/// metrics; requests are read with a timeout and bounded in size.
///
/// # Errors
/// If the address cannot be bound.
pub async fn serve(
    addr: SocketAddr,
    driver: Driver,
    extra: Vec<Driver>,
    mut shutdown: watch::Receiver<bool>,
) -> io::Result<()> {
    let listener = TcpListener::bind(addr).await?;
    // The bound address: with port 0 in the configuration, this names the real one.
    let addr = listener.local_addr()?;
    tracing::info!(%addr, "metrics endpoint listening");
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((mut conn, _)) = accepted else { continue };
                let (driver, extra) = (driver.clone(), extra.clone());
                tokio::spawn(async move {
                    let mut req = [0u8; 4096];
                    let _ = tokio::time::timeout(Duration::from_secs(5), conn.read(&mut req)).await;
                    let body = render_all(&driver, &extra);
                    let head = format!(
                        "HTTP/1.1 200 OK\r\nContent-Type: application/openmetrics-text; version=1.0.0; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                        body.len()
                    );
                    let _ = conn.write_all(head.as_bytes()).await;
                    let _ = conn.write_all(body.as_bytes()).await;
                    let _ = conn.shutdown().await;
                });
            }
            _ = shutdown.changed() => if *shutdown.borrow() { return Ok(()) },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(sent: u64, read: u64) -> ConnectionStats {
        ConnectionStats {
            datagrams_sent: sent,
            bytes_sent: sent * 1000,
            repair_sent: 1,
            lost: 2,
            stream_bytes_read: read,
            ..ConnectionStats::default()
        }
    }

    #[test]
    fn ended_sessions_stay_in_the_totals_once() {
        let mut t = Totals::default();
        let (a, b, c) = (
            ConnectionHandle(1),
            ConnectionHandle(2),
            ConnectionHandle(3),
        );
        t.on_connected(a);
        t.on_connected(a); // a repeated event counts once
        t.on_lost(a, &ConnectionError::IdleTimeout, Some(&stats(10, 100)));
        t.on_lost(b, &ConnectionError::HandshakeTimeout, None);
        t.on_lost(c, &ConnectionError::PeerRestarted, Some(&stats(1, 0)));
        assert_eq!(t.sessions_opened, 1);
        assert_eq!(t.retired.datagrams_sent, 11);
        assert_eq!(t.retired.stream_bytes_read, 100);
        assert_eq!(t.retired.bytes_sent, 11_000);
        assert_eq!(t.retired.repair_symbols_sent, 2);
        assert_eq!(t.retired.packets_lost, 4);
        assert_eq!(t.sessions_closed.get("idle_timeout"), Some(&1));
        assert_eq!(
            t.sessions_closed.len(),
            1,
            "only established sessions close"
        );
        assert_eq!(t.handshakes.get(&HandshakeOutcome::Ok), Some(&1));
        assert_eq!(t.handshakes.get(&HandshakeOutcome::Timeout), Some(&1));
        assert_eq!(t.handshakes.get(&HandshakeOutcome::Aborted), Some(&1));
        // Retired counters are added once per session, however often it is reported.
        t.on_lost(a, &ConnectionError::IdleTimeout, Some(&stats(10, 100)));
        assert_eq!(t.retired.datagrams_sent, 11);
    }

    #[test]
    fn gauges_tell_the_truth_about_loss_and_repair() {
        // 400 packets resolved, 4 of them lost; more sent and still in flight. 100 sources
        // and 10 repairs, 8 of them tail repairs and 1 from the stall watch.
        let st = ConnectionStats {
            source_sent: 100,
            repair_sent: 10,
            repair_origin: [2, 0, 8, 0],
            stall_repairs: 1,
            packets_resolved: 400,
            packets_resolved_lost: 4,
            in_flight: 300,
            loss: 0.3,
            ..ConnectionStats::default()
        };
        let g = session_gauges(&st, 1);
        assert_eq!(
            g[3], 0.01,
            "loss ratio: lost per resolved packet, in flight left out"
        );
        assert_eq!(g[4], 0.3, "the estimator's EWMA is exported apart");
        assert_eq!(g[5], 0.1, "repair ratio counts tail repairs");
        let kinds = repairs_by_kind(&st);
        assert_eq!(kinds.iter().sum::<u64>(), st.repair_sent);
        assert_eq!(kinds, [0, 8, 1, 1, 0], "{REPAIR_KINDS:?}");
        let mut t = TransportTotals::default();
        let rx = ConnectionStats {
            repairs_received: 5,
            repairs_useless: 3,
            ..ConnectionStats::default()
        };
        t.add(&st);
        t.add(&rx);
        assert_eq!(t.repairs_by_kind[1], 8);
        assert_eq!((t.repairs_received, t.repairs_useless), (5, 3));
        assert_eq!(session_gauges(&ConnectionStats::default(), 0)[3], 0.0);
    }

    #[test]
    fn labels_are_stable() {
        assert_eq!(session_label(ConnectionHandle(0xdead_beef)), "3735928559");
        assert_eq!(reply_name(0x00), "succeeded");
        assert_eq!(reply_name(0x02), "not_allowed");
        assert_eq!(reply_name(0x08), "address_type_not_supported");
        assert_eq!(reply_name(0x42), "unassigned");
        assert_eq!(
            close_reason(&ConnectionError::PeerRestarted),
            "peer_restarted"
        );
        assert_eq!(HandshakeOutcome::BadMac.label(), "bad_mac");
        assert_eq!(SocksOutcome::AuthFailed.label(), "auth_failed");
    }

    #[test]
    fn build_info_names_the_version_and_the_kernels() {
        let b = build_info();
        assert_eq!(b.version, env!("CARGO_PKG_VERSION"));
        assert!(b.features.starts_with("gf256="), "{}", b.features);
    }
}
