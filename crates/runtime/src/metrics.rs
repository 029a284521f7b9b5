//! Opt-in Prometheus/OpenMetrics endpoint: per-session transport statistics and the
//! endpoint's drop counters, rendered with `prometheus-client` at each scrape.

use crate::driver::Driver;
use prometheus_client::encoding::text::encode;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::watch;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Session {
    session: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Reason {
    reason: &'static str,
}

type FloatGauge = Family<Session, Gauge<f64, AtomicU64>>;
type SessionCounter = Family<Session, Counter>;

/// Renders the current statistics in the OpenMetrics text format.
pub fn render(driver: &Driver) -> String {
    let mut reg = Registry::with_prefix("ctcp");
    let gauges: Vec<(&str, &str, FloatGauge)> = vec![
        (
            "srtt_seconds",
            "Smoothed round-trip time",
            FloatGauge::default(),
        ),
        (
            "min_rtt_seconds",
            "Windowed minimum round-trip time",
            FloatGauge::default(),
        ),
        (
            "cwnd_packets",
            "Congestion window in packets",
            FloatGauge::default(),
        ),
        (
            "loss_ratio",
            "Short-term loss estimate",
            FloatGauge::default(),
        ),
        (
            "repair_ratio",
            "Proactive repair symbols per source symbol",
            FloatGauge::default(),
        ),
        ("streams", "Open streams", FloatGauge::default()),
    ];
    let counters: Vec<(&str, &str, SessionCounter)> = vec![
        (
            "datagrams_sent",
            "Datagrams sent",
            SessionCounter::default(),
        ),
        (
            "datagrams_received",
            "Authenticated datagrams received",
            SessionCounter::default(),
        ),
        (
            "bytes_sent",
            "Bytes put on the wire",
            SessionCounter::default(),
        ),
        (
            "repair_symbols_sent",
            "Repair symbols sent",
            SessionCounter::default(),
        ),
        (
            "packets_lost",
            "Packets declared lost",
            SessionCounter::default(),
        ),
        (
            "stream_bytes_read",
            "Stream bytes delivered to the application",
            SessionCounter::default(),
        ),
    ];
    let stats = driver.stats();
    for (h, s, streams) in &stats {
        let l = Session {
            session: format!("{:016x}", h.0),
        };
        let values = [
            s.srtt.as_secs_f64(),
            s.min_rtt.as_secs_f64(),
            s.cwnd as f64,
            s.loss,
            s.repair_ratio,
            *streams as f64,
        ];
        for ((_, _, g), v) in gauges.iter().zip(values) {
            g.get_or_create(&l).set(v);
        }
        let totals = [
            s.datagrams_sent,
            s.datagrams_received,
            s.bytes_sent,
            s.repair_sent,
            s.lost,
            s.stream_bytes_read,
        ];
        for ((_, _, c), v) in counters.iter().zip(totals) {
            c.get_or_create(&l).inc_by(v);
        }
    }
    for (name, help, g) in gauges {
        reg.register(name, help, g);
    }
    for (name, help, c) in counters {
        reg.register(name, help, c);
    }
    let sessions: Gauge = Gauge::default();
    sessions.set(stats.len() as i64);
    reg.register("sessions", "Live tunnel sessions", sessions);
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
    let mut out = String::new();
    // Writing into a String cannot fail.
    let _ = encode(&mut out, &reg);
    out
}

/// Serves the metrics over plain HTTP on `addr` until shutdown. Any request path gets the
/// metrics; requests are read with a timeout and bounded in size.
///
/// # Errors
/// If the address cannot be bound.
pub async fn serve(
    addr: SocketAddr,
    driver: Driver,
    mut shutdown: watch::Receiver<bool>,
) -> io::Result<()> {
    let listener = TcpListener::bind(addr).await?;
    tracing::info!(%addr, "metrics endpoint listening");
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((mut conn, _)) = accepted else { continue };
                let driver = driver.clone();
                tokio::spawn(async move {
                    let mut req = [0u8; 4096];
                    let _ = tokio::time::timeout(Duration::from_secs(5), conn.read(&mut req)).await;
                    let body = render(&driver);
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
