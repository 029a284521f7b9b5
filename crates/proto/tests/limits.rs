//! Resource limits of a session: the send-side memory budget across streams and the
//! stream count limit.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::Duo;
use ctcp_proto::{Event, Target, TransportConfig};
use std::time::Duration;

#[test]
fn streams_share_the_session_send_budget_and_wake_when_it_frees() {
    let config = TransportConfig {
        session_send_buffer: 1 << 20,
        stream_send_buffer: 512 << 10,
        ..TransportConfig::default()
    };
    let mut d = Duo::new(config);
    let _ = d.establish();
    let chunk = vec![7u8; 64 << 10];
    let c = d.cli.connection_mut(d.h).unwrap();
    let ids: Vec<_> = (0..8)
        .map(|_| c.open_stream(Target::Domain("t.test".into(), 1)).unwrap())
        .collect();
    // Without pumping, eight streams of 512 KiB each may queue 1 MiB in all.
    let mut queued = 0;
    for &id in &ids {
        while let Ok(n) = c.write(id, &chunk) {
            if n == 0 {
                break;
            }
            queued += n;
        }
    }
    assert_eq!(
        queued,
        1 << 20,
        "queued {queued} bytes against a 1 MiB budget"
    );
    // Pumping sends data out; blocked streams are told they may write again.
    let mut woken = 0;
    for _ in 0..2000 {
        d.step(Duration::from_millis(1));
        let c = d.cli.connection_mut(d.h).unwrap();
        while let Some(ev) = c.poll_event() {
            if matches!(ev, Event::StreamWritable(_)) {
                woken += 1;
            }
        }
        if woken > 0 {
            break;
        }
    }
    assert!(woken > 0, "no stream was woken after the budget freed");
}

#[test]
fn opening_more_streams_than_allowed_fails_cleanly() {
    let config = TransportConfig {
        max_streams: 4,
        ..TransportConfig::default()
    };
    let mut d = Duo::new(config);
    let _ = d.establish();
    let c = d.cli.connection_mut(d.h).unwrap();
    for _ in 0..4 {
        c.open_stream(Target::Domain("t.test".into(), 1)).unwrap();
    }
    assert!(c.open_stream(Target::Domain("t.test".into(), 1)).is_err());
}
