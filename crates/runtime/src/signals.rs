//! Process signals: SIGTERM/SIGINT stop accepting and drain; SIGHUP asks for a reload;
//! SIGUSR1 dumps per-session statistics.

use crate::driver::Driver;
use std::time::Duration;
use tokio::signal::unix::{signal, Signal, SignalKind};
use tokio::sync::{mpsc, watch};

/// The signals the process answers, installed before the proxy reports that it started:
/// a signal sent right after that line is then queued for [`watch_signals`] instead of
/// being lost, or fatal (SIGHUP's default action ends the process).
#[derive(Debug)]
pub struct Signals {
    term: Signal,
    int: Signal,
    hup: Signal,
    usr1: Signal,
}

impl Signals {
    /// Installs the handlers (inside a tokio runtime).
    ///
    /// # Errors
    /// If the operating system refuses a handler.
    pub fn install() -> std::io::Result<Signals> {
        Ok(Signals {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
            hup: signal(SignalKind::hangup())?,
            usr1: signal(SignalKind::user_defined1())?,
        })
    }
}

/// Listens for `signals` until shutdown. Sets `shutdown` on SIGTERM/SIGINT and sends on
/// `reload` for SIGHUP.
pub async fn watch_signals(
    signals: Signals,
    driver: Driver,
    shutdown: watch::Sender<bool>,
    reload: mpsc::UnboundedSender<()>,
) {
    let Signals {
        mut term,
        mut int,
        mut hup,
        mut usr1,
    } = signals;
    loop {
        tokio::select! {
            _ = term.recv() => { tracing::info!("SIGTERM: draining and exiting"); let _ = shutdown.send(true); return; }
            _ = int.recv() => { tracing::info!("SIGINT: draining and exiting"); let _ = shutdown.send(true); return; }
            _ = hup.recv() => { tracing::info!("SIGHUP: reloading configuration"); let _ = reload.send(()); }
            _ = usr1.recv() => log_stats(&driver, true),
        }
    }
}

/// Logs per-session statistics (at info when asked by SIGUSR1, else at debug).
pub fn log_stats(driver: &Driver, loud: bool) {
    for (h, s, streams) in driver.stats() {
        if loud {
            tracing::info!(
                session = h.0,
                streams,
                srtt_ms = s.srtt.as_secs_f64() * 1e3,
                min_rtt_ms = s.min_rtt.as_secs_f64() * 1e3,
                cwnd = s.cwnd,
                loss = s.loss_ratio(),
                repair_ratio = s.repairs_per_source(),
                sent = s.datagrams_sent,
                received = s.datagrams_received,
                lost = s.lost,
                bytes_read = s.stream_bytes_read,
                "session stats"
            );
        } else {
            tracing::debug!(
                session = h.0,
                streams,
                srtt_ms = s.srtt.as_secs_f64() * 1e3,
                cwnd = s.cwnd,
                in_flight = s.in_flight,
                slow_start = s.slow_start,
                loss = s.loss_ratio(),
                loss_estimate = s.loss,
                repair_ratio = s.repairs_per_source(),
                lost = s.lost,
                bytes_read = s.stream_bytes_read,
                source_sent = s.source_sent,
                repair_sent = s.repair_sent,
                repair_reactive = s.repair_origin[0],
                repair_proactive = s.repair_origin[1],
                repair_tail = s.repair_origin[2],
                repair_margin = s.repair_origin[3],
                repair_stall = s.stall_repairs,
                repairs_received = s.repairs_received,
                repairs_useless = s.repairs_useless,
                reported_losses = s.reported_losses,
                "session stats"
            );
        }
    }
}

/// Logs statistics at debug level every `interval` until shutdown.
pub async fn periodic_stats(
    driver: Driver,
    interval: Duration,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut tick = tokio::time::interval(interval);
    tick.tick().await;
    loop {
        tokio::select! {
            _ = tick.tick() => log_stats(&driver, false),
            _ = shutdown.changed() => if *shutdown.borrow() { return },
        }
    }
}
