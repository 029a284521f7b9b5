//! `ctcp-forward status` / `ctcp-reverse status`: the live sessions of a running proxy as
//! a table, read from its metrics endpoint (`metrics_listen`). Two scrapes `sample` apart
//! give the goodput; everything else comes from the second one.
//!
//! The endpoint is the only interface: no control socket, nothing to secure beyond what
//! `metrics_listen` already exposes, and `status` works against any proxy a scraper can
//! reach.

use crate::clock;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{self, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpStream};
use std::time::Duration;
use thiserror::Error;

/// Why `status` could not show the sessions.
#[derive(Debug, Error)]
pub enum StatusError {
    /// The proxy's configuration has no metrics listener.
    #[error("no metrics listener configured: set metrics_listen in the configuration file (or --metrics-listen) and restart the proxy")]
    NoListener,
    /// The endpoint could not be reached or read.
    #[error("cannot read the metrics endpoint at {addr} (is the proxy running?)")]
    Fetch {
        /// Where.
        addr: SocketAddr,
        /// Why.
        source: io::Error,
    },
    /// The endpoint answered something other than metrics.
    #[error("unexpected answer from {addr}: {what}")]
    BadResponse {
        /// Where.
        addr: SocketAddr,
        /// What was wrong.
        what: String,
    },
}

/// Where to connect for a listener bound to `listen`: a wildcard address (0.0.0.0, ::)
/// is reached through the loopback address of its family.
pub fn connect_addr(listen: SocketAddr) -> SocketAddr {
    match listen.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => {
            SocketAddr::new(Ipv4Addr::LOCALHOST.into(), listen.port())
        }
        IpAddr::V6(ip) if ip.is_unspecified() => {
            SocketAddr::new(Ipv6Addr::LOCALHOST.into(), listen.port())
        }
        _ => listen,
    }
}

/// One scrape of the metrics endpoint at `addr` (HTTP/1.0 GET, 5 s timeouts, 16 MiB cap).
///
/// # Errors
/// If the endpoint cannot be reached or does not answer 200 with a body.
pub fn fetch(addr: SocketAddr) -> Result<String, StatusError> {
    let timeout = Duration::from_secs(5);
    let io_err = |source| StatusError::Fetch { addr, source };
    let mut conn = TcpStream::connect_timeout(&addr, timeout).map_err(io_err)?;
    conn.set_read_timeout(Some(timeout)).map_err(io_err)?;
    conn.set_write_timeout(Some(timeout)).map_err(io_err)?;
    conn.write_all(b"GET /metrics HTTP/1.0\r\nAccept: text/plain\r\n\r\n")
        .map_err(io_err)?;
    let mut raw = Vec::new();
    conn.take(16 << 20).read_to_end(&mut raw).map_err(io_err)?;
    let text = String::from_utf8(raw).map_err(|_| StatusError::BadResponse {
        addr,
        what: "not UTF-8".into(),
    })?;
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| StatusError::BadResponse {
            addr,
            what: "no HTTP header".into(),
        })?;
    let status = head.lines().next().unwrap_or_default();
    if status.split_whitespace().nth(1) != Some("200") {
        return Err(StatusError::BadResponse {
            addr,
            what: format!("{status:?}"),
        });
    }
    Ok(body.to_owned())
}

/// One sample line of the OpenMetrics text format.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// The metric name (with `_total` for counters).
    pub name: String,
    /// Its labels, in order.
    pub labels: Vec<(String, String)>,
    /// The value.
    pub value: f64,
}

impl Sample {
    /// The value of label `key`.
    pub fn label(&self, key: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// Parses the sample lines of an OpenMetrics/Prometheus text exposition; comments and
/// lines that do not parse are skipped.
pub fn parse(text: &str) -> Vec<Sample> {
    text.lines().filter_map(parse_line).collect()
}

fn parse_line(line: &str) -> Option<Sample> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return None;
    }
    let name_end = line.find(['{', ' '])?;
    let name = line[..name_end].to_owned();
    let mut rest = &line[name_end..];
    let mut labels = Vec::new();
    if let Some(r) = rest.strip_prefix('{') {
        let mut chars = r.char_indices().peekable();
        let end = loop {
            // Skip separators, then read key="value".
            while let Some(&(_, c)) = chars.peek() {
                if c == ',' || c == ' ' {
                    chars.next();
                } else {
                    break;
                }
            }
            let &(start, c) = chars.peek()?;
            if c == '}' {
                break start + 1;
            }
            let eq = r[start..].find('=')? + start;
            let key = r[start..eq].trim().to_owned();
            while chars.peek().is_some_and(|&(i, _)| i <= eq) {
                chars.next();
            }
            if chars.next()?.1 != '"' {
                return None;
            }
            let mut value = String::new();
            loop {
                match chars.next()?.1 {
                    '"' => break,
                    '\\' => match chars.next()?.1 {
                        'n' => value.push('\n'),
                        other => value.push(other),
                    },
                    other => value.push(other),
                }
            }
            labels.push((key, value));
        };
        rest = &r[end..];
    }
    let value = rest.split_whitespace().next()?.parse().ok()?;
    Some(Sample {
        name,
        labels,
        value,
    })
}

/// A live session as `status` shows it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SessionRow {
    /// Session id (decimal, as in the logs).
    pub session: String,
    /// Peer address.
    pub peer: String,
    /// handshake / established / closing.
    pub state: String,
    /// Smoothed RTT, seconds.
    pub srtt: f64,
    /// Minimum RTT, seconds.
    pub min_rtt: f64,
    /// Congestion window, packets.
    pub cwnd: f64,
    /// Packets lost per packet resolved (0..1; packets in flight excluded).
    pub loss: f64,
    /// Repair symbols sent per source symbol sent, every kind of repair.
    pub repair_ratio: f64,
    /// Open streams.
    pub streams: f64,
    /// Stream bytes delivered to applications here, in bits per second over the sample.
    pub goodput_in: Option<f64>,
    /// Stream bytes sent, in bits per second over the sample.
    pub goodput_out: Option<f64>,
    stream_bytes_read: f64,
    stream_bytes_sent: f64,
}

/// What `status` prints, gathered from one or two scrapes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Status {
    /// `ctcp_build_info`'s labels.
    pub build: Vec<(String, String)>,
    /// Live sessions, by id.
    pub sessions: Vec<SessionRow>,
    /// Sessions opened since start.
    pub opened: f64,
    /// Established sessions closed since start.
    pub closed: f64,
    /// Handshakes by result.
    pub handshakes: BTreeMap<String, f64>,
    /// SOCKS replies by reply name (forward).
    pub socks_replies: BTreeMap<String, f64>,
    /// Target connect results by reply name (reverse).
    pub target_connects: BTreeMap<String, f64>,
    /// Transparent (gateway) connections by result (forward).
    pub transparent: BTreeMap<String, f64>,
    /// Process totals: bytes on the wire, stream bytes read and sent, packets lost,
    /// datagrams sent, repair and source symbols sent.
    pub totals: BTreeMap<String, f64>,
}

impl Status {
    /// Builds the view from a scrape (`now`) and, for goodput, an earlier one taken
    /// `elapsed` before.
    pub fn from_samples(now: &[Sample], before: Option<(&[Sample], Duration)>) -> Status {
        let mut st = Status::default();
        let mut rows: BTreeMap<String, SessionRow> = BTreeMap::new();
        for s in now {
            let sess = s.label("session");
            if let Some(id) = sess {
                let r = rows.entry(id.to_owned()).or_insert_with(|| SessionRow {
                    session: id.to_owned(),
                    ..SessionRow::default()
                });
                let v = s.value;
                match s.name.as_str() {
                    "ctcp_session_info" => {
                        r.peer = s.label("peer").unwrap_or("?").to_owned();
                        r.state = s.label("state").unwrap_or("?").to_owned();
                    }
                    "ctcp_srtt_seconds" => r.srtt = v,
                    "ctcp_min_rtt_seconds" => r.min_rtt = v,
                    "ctcp_cwnd_packets" => r.cwnd = v,
                    "ctcp_loss_ratio" => r.loss = v,
                    "ctcp_repair_ratio" => r.repair_ratio = v,
                    "ctcp_streams" => r.streams = v,
                    "ctcp_stream_bytes_read_total" => r.stream_bytes_read = v,
                    "ctcp_stream_bytes_sent_total" => r.stream_bytes_sent = v,
                    _ => {}
                }
                continue;
            }
            match s.name.as_str() {
                "ctcp_build_info" => st.build = s.labels.clone(),
                "ctcp_sessions_opened_total" => st.opened = s.value,
                "ctcp_sessions_closed_total" => st.closed += s.value,
                "ctcp_handshakes_total" => {
                    let k = s.label("result").unwrap_or("?").to_owned();
                    *st.handshakes.entry(k).or_default() += s.value;
                }
                "ctcp_socks_replies_total" => {
                    let k = s.label("reply").unwrap_or("?").to_owned();
                    *st.socks_replies.entry(k).or_default() += s.value;
                }
                "ctcp_target_connects_total" => {
                    let k = s.label("reply").unwrap_or("?").to_owned();
                    *st.target_connects.entry(k).or_default() += s.value;
                }
                "ctcp_transparent_connections_total" => {
                    let k = s.label("result").unwrap_or("?").to_owned();
                    *st.transparent.entry(k).or_default() += s.value;
                }
                name => {
                    if let Some(k) = name
                        .strip_prefix("ctcp_process_")
                        .and_then(|n| n.strip_suffix("_total"))
                    {
                        st.totals.insert(k.to_owned(), s.value);
                    }
                }
            }
        }
        if let Some((earlier, elapsed)) = before {
            let secs = elapsed.as_secs_f64();
            if secs > 0.0 {
                let old = Status::from_samples(earlier, None);
                for r in rows.values_mut() {
                    // A session new since the first scrape counts from zero.
                    let (read0, sent0) = old
                        .sessions
                        .iter()
                        .find(|o| o.session == r.session)
                        .map_or((0.0, 0.0), |o| (o.stream_bytes_read, o.stream_bytes_sent));
                    r.goodput_in = Some((r.stream_bytes_read - read0).max(0.0) * 8.0 / secs);
                    r.goodput_out = Some((r.stream_bytes_sent - sent0).max(0.0) * 8.0 / secs);
                }
            }
        }
        // Sessions sort by numeric id, as the logs would list them.
        let mut sessions: Vec<SessionRow> = rows.into_values().collect();
        sessions.sort_by_key(|r| r.session.parse::<u64>().unwrap_or(u64::MAX));
        st.sessions = sessions;
        st
    }

    /// The table and summary lines `status` prints.
    pub fn render(&self, program: &str) -> String {
        let mut out = String::new();
        let label = |k: &str| {
            self.build
                .iter()
                .find(|(key, _)| key == k)
                .map(|(_, v)| v.as_str())
        };
        let _ = write!(out, "{program} {}", label("version").unwrap_or("?"));
        if let Some(sha) = label("git_sha") {
            let _ = write!(out, " ({sha})");
        }
        if let Some(f) = label("features") {
            let _ = write!(out, " [{f}]");
        }
        out.push('\n');
        let t = |k: &str| self.totals.get(k).copied().unwrap_or(0.0);
        let _ = writeln!(
            out,
            "sessions: {} live, {} opened, {} closed since start; handshakes: {}",
            self.sessions.len(),
            self.opened,
            self.closed,
            counts(&self.handshakes),
        );
        let source = t("source_symbols_sent");
        let repair_share = if source > 0.0 {
            format!("{:.1}%", 100.0 * t("repair_symbols_sent") / source)
        } else {
            "-".into()
        };
        let _ = writeln!(
            out,
            "since start: {} on the wire, {} delivered, {} sent by streams, {} packets lost, repairs {} of source",
            bytes(t("bytes_sent")),
            bytes(t("stream_bytes_read")),
            bytes(t("stream_bytes_sent")),
            t("packets_lost"),
            repair_share,
        );
        if !self.socks_replies.is_empty() {
            let _ = writeln!(out, "SOCKS replies: {}", counts(&self.socks_replies));
        }
        if !self.target_connects.is_empty() {
            let _ = writeln!(out, "target connects: {}", counts(&self.target_connects));
        }
        if !self.transparent.is_empty() {
            let _ = writeln!(out, "gateway connections: {}", counts(&self.transparent));
        }
        if self.sessions.is_empty() {
            out.push_str("no live sessions\n");
            return out;
        }
        let header = [
            "SESSION",
            "PEER",
            "STATE",
            "RTT",
            "MIN RTT",
            "WINDOW",
            "LOSS",
            "REPAIR",
            "GOODPUT IN",
            "GOODPUT OUT",
            "STREAMS",
        ];
        let rows: Vec<[String; 11]> = self
            .sessions
            .iter()
            .map(|r| {
                [
                    r.session.clone(),
                    r.peer.clone(),
                    r.state.clone(),
                    millis(r.srtt),
                    millis(r.min_rtt),
                    format!("{:.0}", r.cwnd),
                    percent(r.loss),
                    percent(r.repair_ratio),
                    r.goodput_in.map_or_else(|| "-".into(), rate),
                    r.goodput_out.map_or_else(|| "-".into(), rate),
                    format!("{:.0}", r.streams),
                ]
            })
            .collect();
        let mut widths = header.map(str::len);
        for row in &rows {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(cell.chars().count());
            }
        }
        let line = |cells: &[&str]| {
            let mut l = String::new();
            for (i, (cell, w)) in cells.iter().zip(widths).enumerate() {
                // Text columns align left, numbers right.
                if i < 3 {
                    let _ = write!(l, "{cell:<w$}  ");
                } else {
                    let _ = write!(l, "{cell:>w$}  ");
                }
            }
            l.trim_end().to_owned() + "\n"
        };
        out.push_str(&line(&header));
        for row in &rows {
            let cells: Vec<&str> = row.iter().map(String::as_str).collect();
            out.push_str(&line(&cells));
        }
        out
    }
}

fn counts(m: &BTreeMap<String, f64>) -> String {
    if m.is_empty() {
        return "none".into();
    }
    m.iter()
        .map(|(k, v)| format!("{v} {k}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn millis(secs: f64) -> String {
    format!("{:.1} ms", secs * 1e3)
}

fn percent(ratio: f64) -> String {
    format!("{:.2}%", ratio * 100.0)
}

/// Bits per second with a decimal prefix.
fn rate(bps: f64) -> String {
    let (v, unit) = scale(bps);
    format!("{v:.1} {unit}bit/s")
}

/// Bytes with a decimal prefix.
fn bytes(b: f64) -> String {
    let (v, unit) = scale(b);
    if unit.is_empty() {
        format!("{v:.0} B")
    } else {
        format!("{v:.1} {unit}B")
    }
}

fn scale(v: f64) -> (f64, &'static str) {
    for (f, unit) in [(1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")] {
        if v >= f {
            return (v / f, unit);
        }
    }
    (v, "")
}

/// Scrapes the endpoint bound at `listen` twice, `sample` apart (once if `sample` is
/// zero), and renders the table for `program`.
///
/// # Errors
/// As [`fetch`].
pub fn run(listen: SocketAddr, sample: Duration, program: &str) -> Result<String, StatusError> {
    let addr = connect_addr(listen);
    let first = parse(&fetch(addr)?);
    if sample.is_zero() {
        return Ok(Status::from_samples(&first, None).render(program));
    }
    let t0 = clock::now();
    std::thread::sleep(sample);
    let second = parse(&fetch(addr)?);
    let elapsed = clock::now().saturating_duration_since(t0);
    Ok(Status::from_samples(&second, Some((&first, elapsed))).render(program))
}

#[cfg(test)]
mod tests {
    use super::*;

    const BEFORE: &str = r#"# HELP ctcp_srtt_seconds Smoothed round-trip time.
# TYPE ctcp_srtt_seconds gauge
ctcp_session_info{session="7",peer="192.0.2.1:7000",state="established"} 1
ctcp_srtt_seconds{session="7"} 0.1205
ctcp_stream_bytes_read_total{session="7"} 1000000
ctcp_stream_bytes_sent_total{session="7"} 0
"#;

    const AFTER: &str = r#"# HELP ctcp_srtt_seconds Smoothed round-trip time.
# TYPE ctcp_srtt_seconds gauge
ctcp_session_info{session="7",peer="192.0.2.1:7000",state="established"} 1
ctcp_session_info{session="12",peer="[2001:db8::1]:7000",state="handshake"} 1
ctcp_srtt_seconds{session="7"} 0.1205
ctcp_min_rtt_seconds{session="7"} 0.1
ctcp_cwnd_packets{session="7"} 840.0
ctcp_loss_ratio{session="7"} 0.0512
ctcp_repair_ratio{session="7"} 0.055
ctcp_streams{session="7"} 3
ctcp_stream_bytes_read_total{session="7"} 3500000
ctcp_stream_bytes_sent_total{session="7"} 125000
ctcp_srtt_seconds{session="12"} 0.0
ctcp_sessions 2
ctcp_process_bytes_sent_total 2500000000
ctcp_process_stream_bytes_read_total 12000000
ctcp_process_source_symbols_sent_total 1000
ctcp_process_repair_symbols_sent_total 50
ctcp_process_packets_lost_total 61
ctcp_sessions_opened_total 4
ctcp_sessions_closed_total{reason="idle_timeout"} 1
ctcp_sessions_closed_total{reason="peer_closed"} 1
ctcp_handshakes_total{result="ok"} 4
ctcp_handshakes_total{result="bad_mac"} 2
ctcp_socks_replies_total{code="0x00",reply="succeeded"} 9
ctcp_socks_replies_total{code="0x02",reply="not_allowed"} 1
ctcp_transparent_connections_total{result="tunnelled"} 40
ctcp_transparent_connections_total{result="loop"} 2
ctcp_build_info{version="0.1.0",git_sha="abc1234",features="gf256=avx2,a\"b"} 1
# EOF
"#;

    #[test]
    fn parses_labels_with_escapes_and_skips_comments() {
        let s = parse(AFTER);
        let b = s.iter().find(|s| s.name == "ctcp_build_info").unwrap();
        assert_eq!(b.label("features"), Some("gf256=avx2,a\"b"));
        assert_eq!(b.value, 1.0);
        let peer = s
            .iter()
            .find(|s| s.name == "ctcp_session_info" && s.label("session") == Some("12"))
            .unwrap();
        assert_eq!(peer.label("peer"), Some("[2001:db8::1]:7000"));
        assert_eq!(
            s.iter().find(|s| s.name == "ctcp_sessions").unwrap().value,
            2.0
        );
        assert!(s.iter().all(|s| !s.name.starts_with('#')));
    }

    #[test]
    fn the_table_shows_each_session_with_goodput_over_the_sample() {
        let st = Status::from_samples(
            &parse(AFTER),
            Some((&parse(BEFORE), Duration::from_secs(2))),
        );
        let text = st.render("ctcp-forward");
        let expected = "\
ctcp-forward 0.1.0 (abc1234) [gf256=avx2,a\"b]
sessions: 2 live, 4 opened, 2 closed since start; handshakes: 2 bad_mac, 4 ok
since start: 2.5 GB on the wire, 12.0 MB delivered, 0 B sent by streams, 61 packets lost, repairs 5.0% of source
SOCKS replies: 1 not_allowed, 9 succeeded
gateway connections: 2 loop, 40 tunnelled
SESSION  PEER                STATE             RTT   MIN RTT  WINDOW   LOSS  REPAIR   GOODPUT IN   GOODPUT OUT  STREAMS
7        192.0.2.1:7000      established  120.5 ms  100.0 ms     840  5.12%   5.50%  10.0 Mbit/s  500.0 kbit/s        3
12       [2001:db8::1]:7000  handshake      0.0 ms    0.0 ms       0  0.00%   0.00%    0.0 bit/s     0.0 bit/s        0
";
        assert_eq!(text, expected, "\n{text}");
    }

    #[test]
    fn one_scrape_shows_no_goodput_and_no_sessions_says_so() {
        let st = Status::from_samples(&parse(AFTER), None);
        assert!(st.sessions.iter().all(|r| r.goodput_in.is_none()));
        assert!(st.render("x").contains("  -  "));
        let empty = Status::from_samples(&parse("ctcp_sessions 0\n"), None).render("ctcp-reverse");
        assert!(empty.ends_with("no live sessions\n"), "{empty}");
    }

    #[test]
    fn wildcard_listeners_are_reached_on_loopback() {
        let a: SocketAddr = "0.0.0.0:9100".parse().unwrap();
        assert_eq!(connect_addr(a), "127.0.0.1:9100".parse().unwrap());
        let a: SocketAddr = "[::]:9100".parse().unwrap();
        assert_eq!(connect_addr(a), "[::1]:9100".parse().unwrap());
        let a: SocketAddr = "10.1.2.3:9100".parse().unwrap();
        assert_eq!(connect_addr(a), a);
    }

    #[test]
    fn an_unreachable_endpoint_is_a_clear_error() {
        // Bind then drop: nothing listens on this port now.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let e = fetch(port).unwrap_err().to_string();
        assert!(e.contains("cannot read the metrics endpoint"), "{e}");
        assert!(StatusError::NoListener
            .to_string()
            .starts_with("no metrics listener configured: set metrics_listen"));
    }
}
