//! Prints the sender's state once per interval during one simulated transfer (tuning aid).
//! `cargo run --release -p ctcp-sim --example trace -- RTT_MS LOSS MB`
#![allow(clippy::unwrap_used, clippy::print_stdout)]
use ctcp_proto::TransportConfig;
use ctcp_sim::ctcp::CtcpPeer;
use ctcp_sim::{JitterDist, LinkSpec, LossModel, Seed, Sim};
use std::time::Duration;

fn main() {
    if std::env::var_os("RUST_LOG").is_some() {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .init();
    }
    let a: Vec<String> = std::env::args().collect();
    let rtt: u64 = a.get(1).map_or(500, |s| s.parse().unwrap());
    let loss: f64 = a.get(2).map_or(0.05, |s| s.parse().unwrap());
    let mb: f64 = a.get(3).map_or(20.0, |s| s.parse().unwrap());
    // GILBERT=1: bursty loss with mean LOSS and mean burst 4 (the sweep's Gilbert row).
    let link = LinkSpec::new(10_000_000, Duration::from_millis(rtt)).loss(if loss <= 0.0 {
        LossModel::None
    } else if std::env::var_os("GILBERT").is_some() {
        LossModel::Gilbert {
            mean: loss,
            burst: 4.0,
        }
    } else {
        LossModel::Bernoulli(loss)
    });
    // REORDER=1: 2 % of packets 50 ms late (the sweep's reordering row).
    let link = if std::env::var_os("REORDER").is_some() {
        link.reorder(0.02, Duration::from_millis(50))
    } else {
        link
    };
    // JITTER=ms: RTT jitter of ±ms (FIFO unless JREORDER=1; JDIST=normal for normal draws).
    let link = match std::env::var("JITTER")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
    {
        Some(j) => link.rtt_jitter(
            Duration::from_millis(2 * j),
            if std::env::var("JDIST").is_ok_and(|v| v == "normal") {
                JitterDist::Normal
            } else {
                JitterDist::Uniform
            },
            std::env::var_os("JREORDER").is_some(),
        ),
        None => link,
    };
    // RATE=bps: link rate (default 10 Mbit/s); ASYM=n: return path at 1/n of it.
    let link = match std::env::var("RATE")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
    {
        Some(r) => LinkSpec {
            rate_bps: Some(r),
            ..link
        },
        None => link,
    };
    let ret = match std::env::var("ASYM")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
    {
        Some(n) => LinkSpec {
            rate_bps: link.rate_bps.map(|r| r / n),
            ..link
        },
        None => link,
    };
    let seed: u64 = a.get(4).map_or(1, |s| s.parse().unwrap());
    let mut sim = Sim::with_seed(Seed(seed));
    let start = sim.now();
    let (f, r) = sim.add_asymmetric_link(&link, &ret);
    // The sweep's configuration (a 64 KiB send buffer), so a sweep cell replays exactly.
    // TRAIN=n: handshake train length (0 turns it off).
    let cfg = TransportConfig {
        handshake_train: std::env::var("TRAIN").map_or(16, |v| v.parse().unwrap()),
        // WINDOW=n: coding window in symbols; PROACTIVE=x: proactive repair share.
        window: std::env::var("WINDOW").map_or(4096, |v| v.parse().unwrap()),
        proactive_repair: std::env::var("PROACTIVE").map_or(0.0, |v| v.parse().unwrap()),
        // SWIN=MB: per-stream flow-control window (the session's is twice it).
        stream_window: std::env::var("SWIN")
            .map_or(ctcp_sim::ctcp::sweep_config().stream_window, |v| {
                v.parse::<u64>().unwrap() << 20
            }),
        session_window: std::env::var("SWIN")
            .map_or(ctcp_sim::ctcp::sweep_config().session_window, |v| {
                v.parse::<u64>().unwrap() << 21
            }),
        ..ctcp_sim::ctcp::sweep_config()
    };
    let tx = CtcpPeer::sender(cfg.clone(), &[7; 32], seed, start, (mb * 1e6) as u64);
    let rx = CtcpPeer::receiver(cfg, &[7; 32], seed ^ 0xdead_beef);
    let flow = sim.add_flow(tx, rx, f, r);
    let step_ms: u64 = a.get(5).map_or(rtt.max(250), |s| s.parse().unwrap());
    let step = Duration::from_millis(step_ms);
    let mut last = 0;
    for i in 1..400 {
        sim.run_until(start + step * i).unwrap();
        let rx = sim.server::<CtcpPeer>(flow).unwrap();
        let Some(s) = sim.client::<CtcpPeer>(flow).unwrap().stats() else {
            continue;
        };
        let got = rx.delivery.bytes_ok;
        println!(
            "t={:6.2} rate={:6.2}Mb bo={} cwnd={:5} srtt={:6.1} min={:6.1} rmin={:6.1} jit={:5.1} ss={} lost={:6} src={:6} rep={:6} loss={:.3} ratio={:.3} inflight={} debt={} pdef={} unacked={}",
            (step * i).as_secs_f64(),
            (got - last) as f64 * 8.0 / step.as_secs_f64() / 1e6,
            s.backoffs,
            s.cwnd, s.srtt.as_secs_f64() * 1e3, s.min_rtt.as_secs_f64() * 1e3, s.round_min.as_secs_f64() * 1e3, s.jitter.as_secs_f64() * 1e3, s.slow_start as u8, s.lost, s.source_sent, s.repair_sent, s.loss, s.repair_ratio, s.in_flight, s.repair_debt, s.peer_deficit, s.unacked_symbols
        );
        println!(
            "      repairs reactive/proactive/tail/margin = {:?} stall = {}",
            s.repair_origin, s.stall_repairs
        );
        let Some(rs) = rx.stats() else { continue };
        println!(
            "      rx: got={} rep_rx={} useless={} src_sent={} rep_sent={} lost={} dgrams={} srtt={:.1} unacked={} inflight={} cwnd={} debt={} pdef={}",
            got,
            rs.repairs_received,
            rs.repairs_useless,
            rs.source_sent,
            rs.repair_sent,
            rs.lost,
            rs.datagrams_sent,
            rs.srtt.as_secs_f64() * 1e3,
            rs.unacked_symbols,
            rs.in_flight,
            rs.cwnd,
            rs.repair_debt,
            rs.peer_deficit
        );
        last = got;
        if rx.delivery.finished {
            break;
        }
    }
}
