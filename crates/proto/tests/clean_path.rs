//! A loss-free path on which the receiver reads many datagrams before it answers (as the
//! runtime's driver does: it drains the socket, then polls for datagrams to send), so one
//! ACK covers more packets than its range reports. Nothing is lost, so the statistics
//! must show no loss, and a sender that falls idle again and again (an application
//! writing at a limited rate) must send no repairs it does not need.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::Duo;
use ctcp_proto::{ConnectionStats, ReadOutcome, TransportConfig};
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// Datagrams on their way: (arrival time, bytes).
type Wire = VecDeque<(Instant, Vec<u8>)>;

/// Runs `chunks` writes of `chunks` bytes, one every `every`, over a loss-free path with
/// `ONE_WAY` of delay each way, the server reading everything; each side handles every
/// datagram due before it polls for datagrams to send. Returns the client's and the
/// server's statistics.
fn paced(chunk: usize, every: Duration, chunks: usize) -> (ConnectionStats, ConnectionStats) {
    let mut d = Duo::new(TransportConfig::default());
    let mut id = None;
    let data = vec![0x5a; chunk];
    let mut buf = vec![0; 64 << 10];
    let mut out = Vec::new();
    let (mut up, mut down): (Wire, Wire) = (VecDeque::new(), VecDeque::new());
    let (mut written, mut read) = (0usize, 0usize);
    let mut next_write = d.now;
    let total = chunk * chunks;
    let mut done_at = None;
    for step in 0..200_000u32 {
        d.now += STEP;
        let now = d.now;
        if id.is_none() && d.cli.connection(d.h).unwrap().is_established() {
            id = Some(d.open_stream());
            next_write = now;
        }
        if let Some(id) = id.filter(|_| written < total && now >= next_write) {
            let c = d.cli.connection_mut(d.h).unwrap();
            let end = (written + chunk).min(total);
            while written < end {
                let n = c.write(id, &data[..end - written]).unwrap();
                if n == 0 {
                    break;
                }
                written += n;
            }
            if written == end {
                next_write += every;
            }
        }
        let srv_turn = step % SERVER_EVERY == 0;
        while srv_turn && up.front().is_some_and(|(t, _)| *t <= now) {
            let (_, mut p) = up.pop_front().unwrap();
            d.srv.handle_datagram(now, d.ca, &mut p);
        }
        while down.front().is_some_and(|(t, _)| *t <= now) {
            let (_, mut p) = down.pop_front().unwrap();
            d.cli.handle_datagram(now, d.sa, &mut p);
        }
        d.cli.handle_timeout(now);
        d.srv.handle_timeout(now);
        while let Some((h, _)) = d.srv.poll_event() {
            let c = d.srv.connection_mut(h).unwrap();
            while let Ok(ReadOutcome::Data(n)) = c.read(now, 0, &mut buf) {
                read += n;
            }
        }
        if let Some(&sh) = d.srv.handles().first() {
            let c = d.srv.connection_mut(sh).unwrap();
            while let Ok(ReadOutcome::Data(n)) = c.read(now, 0, &mut buf) {
                read += n;
            }
        }
        while let Some(t) = d.cli.poll_transmit(now, &mut out) {
            up.push_back((now + ONE_WAY, out[..t.size].to_vec()));
        }
        // Polled only on its turn: a datagram polled and not sent would be lost unseen.
        while let Some(t) = srv_turn
            .then(|| d.srv.poll_transmit(now, &mut out))
            .flatten()
        {
            down.push_back((now + ONE_WAY, out[..t.size].to_vec()));
        }
        if read == total && done_at.is_none() {
            done_at = Some(now);
        }
        // Some round trips after the last byte, for the last ACKs and any tail.
        if done_at.is_some_and(|t| now >= t + 10 * ONE_WAY) {
            break;
        }
    }
    assert_eq!(read, total, "the transfer did not complete");
    let sh = d.srv.handles()[0];
    (
        d.cli.connection(d.h).unwrap().stats(),
        d.srv.connection(sh).unwrap().stats(),
    )
}

/// Clock step.
const STEP: Duration = Duration::from_millis(1);
/// The server handles what arrived, then sends, every this many steps: a receiver busy
/// elsewhere reads a batch of datagrams before it answers.
const SERVER_EVERY: u32 = 10;
/// One-way delay.
const ONE_WAY: Duration = Duration::from_millis(20);

#[test]
fn a_clean_path_reads_as_loss_free_when_acks_cover_many_packets() {
    // 4 MB in 256 KiB writes, 2 ms apart: flights of far more than the 65 packets an ACK
    // reports reach the receiver between two of its answers.
    let (tx, rx) = paced(256 << 10, Duration::from_millis(2), 16);
    assert_eq!(tx.lost, 0, "nothing is lost on this path");
    assert!(
        tx.packets_resolved >= tx.source_sent,
        "every packet is reported: {} of {} sources resolved",
        tx.packets_resolved,
        tx.source_sent
    );
    assert_eq!(
        tx.loss_ratio(),
        0.0,
        "{} of {} resolved packets read as lost",
        tx.packets_resolved_lost,
        tx.packets_resolved
    );
    assert!(tx.loss < 1e-9, "the loss estimate reads {}", tx.loss);
    assert!(
        tx.repair_sent * 100 <= tx.source_sent,
        "{} repairs for {} sources (by origin {:?}); {} arrived useless",
        tx.repair_sent,
        tx.source_sent,
        tx.repair_origin,
        rx.repairs_useless
    );
}

#[test]
fn an_application_limited_sender_on_a_clean_path_sends_no_repairs() {
    // 100 kB every 10 ms (a rate-limited client): the sender falls idle after each write.
    let (tx, rx) = paced(100_000, Duration::from_millis(10), 40);
    assert_eq!(tx.lost, 0);
    assert!(
        tx.repair_sent * 100 <= tx.source_sent,
        "{} repairs for {} sources (by origin {:?}); {} arrived useless",
        tx.repair_sent,
        tx.source_sent,
        tx.repair_origin,
        rx.repairs_useless
    );
    assert!(tx.repairs_per_source() <= 0.01);
}
