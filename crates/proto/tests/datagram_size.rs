//! Every datagram stays within `max_datagram`, also when ACKs, repairs and full source
//! symbols compete for the same packet (both directions busy, packets lost).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::Duo;
use ctcp_proto::{ReadOutcome, Target, TransportConfig};
use std::time::Duration;

#[test]
fn busy_lossy_bidirectional_traffic_never_exceeds_max_datagram() {
    let config = TransportConfig::default();
    let max = config.max_datagram;
    let mut d = Duo::new(config);
    let _ = d.establish();
    let id = d
        .cli
        .connection_mut(d.h)
        .unwrap()
        .open_stream(Target::Domain("t.test".into(), 1))
        .unwrap();
    let chunk = vec![0x5au8; 32 << 10];
    let (mut sizes, mut full, mut n) = (Vec::new(), 0usize, 0u64);
    let mut out = Vec::new();
    let mut buf = vec![0u8; 64 << 10];
    let (mut up, mut down) = (0usize, 0usize);
    for _ in 0..3000 {
        d.now += Duration::from_millis(1);
        let c = d.cli.connection_mut(d.h).unwrap();
        while up < (4 << 20) {
            match c.write(id, &chunk) {
                Ok(k) if k > 0 => up += k,
                _ => break,
            }
        }
        while let Ok(ReadOutcome::Data(_)) = c.read(id, &mut buf) {}
        for h in d.srv.handles() {
            let s = d.srv.connection_mut(h).unwrap();
            while let Ok(ReadOutcome::Data(_)) = s.read(id, &mut buf) {}
            while down < (4 << 20) {
                match s.write(id, &chunk) {
                    Ok(k) if k > 0 => down += k,
                    _ => break,
                }
            }
        }
        // Every 9th datagram each way is lost, so both sides send repairs and ACK holes.
        while let Some(t) = d.cli.poll_transmit(d.now, &mut out) {
            sizes.push(t.size);
            n += 1;
            if n % 9 != 0 {
                let mut p = out[..t.size].to_vec();
                d.srv.handle_datagram(d.now, d.ca, &mut p);
            }
        }
        while let Some(t) = d.srv.poll_transmit(d.now, &mut out) {
            sizes.push(t.size);
            n += 1;
            if n % 9 != 0 {
                let mut p = out[..t.size].to_vec();
                d.cli.handle_datagram(d.now, d.sa, &mut p);
            }
        }
        d.cli.handle_timeout(d.now);
        d.srv.handle_timeout(d.now);
    }
    let stats = d.cli.connection(d.h).unwrap().stats();
    assert!(
        stats.repair_sent > 0,
        "the loss pattern should draw repairs"
    );
    assert!(up > 1 << 20 && down > 1 << 20, "both directions moved data");
    for &s in &sizes {
        assert!(s <= max, "a {s}-byte datagram exceeds max_datagram {max}");
        full += usize::from(s + 16 > max);
    }
    assert!(
        full > sizes.len() / 4,
        "only {full} of {} datagrams are near full size",
        sizes.len()
    );
}

/// A handshake attempt is three INITIATE copies 20 ms apart, then the group repeats
/// after 300 ms, so one lost datagram on a lossy path rarely costs the timeout.
#[test]
fn handshake_attempts_go_out_in_threes() {
    let mut d = Duo::new(TransportConfig::default());
    let mut out = Vec::new();
    let mut times = Vec::new();
    for ms in 0..700u64 {
        let now = d.now + Duration::from_millis(ms);
        d.cli.handle_timeout(now);
        while let Some(t) = d.cli.poll_transmit(now, &mut out) {
            assert_eq!(out[0], ctcp_proto::wire::TYPE_INITIATE);
            assert!(t.size <= ctcp_proto::wire::INITIATE_LEN);
            times.push(ms);
        }
    }
    assert_eq!(
        times,
        vec![0, 20, 40, 340, 360, 380],
        "INITIATE send times (ms)"
    );
}
