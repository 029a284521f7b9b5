//! Unit tests of the datagram part alone (no session).

use super::*;

const S: usize = 256;

#[allow(clippy::disallowed_methods)] // a fixed base instant for the tests
fn t0() -> Instant {
    Instant::now()
}

/// A fresh datagram part, the test clock, a deadline of `deadline_ms` and a protection of
/// 0.3 repairs per datagram with `lone` behind a lone one, at 10 % loss.
fn fresh(deadline_ms: u64, lone: u32) -> (Datagrams, Instant, Duration, Protection) {
    let protection = Protection {
        rate: 0.3,
        lone,
        loss: 0.1,
    };
    (
        Datagrams::new(S),
        t0(),
        Duration::from_millis(deadline_ms),
        protection,
    )
}

/// Polls `d` until it has nothing to send, moving the clock to the wakeup a sparse
/// burst's wait sets (at most a sparse spacing ahead: a lone datagram's repairs wait
/// until its burst can no longer grow). Returns what went out and the time reached.
fn drain_burst(
    d: &mut Datagrams,
    mut now: Instant,
    protection: Protection,
    deadline: Duration,
) -> (Vec<Next>, Instant) {
    let limit = now + deadline / SPARSE_PER_DEADLINE;
    let mut out = Vec::new();
    loop {
        while let Some(n) = d.poll_next(now, true, protection, deadline) {
            out.push(n);
        }
        match d.wakeup {
            Some(w) if w <= limit => now = w,
            _ => return (out, now),
        }
    }
}

#[test]
fn queue_drops_oldest_and_expires() {
    let mut d = Datagrams::new(S);
    let now = t0();
    let deadline = Duration::from_millis(50);
    for i in 0..5u8 {
        d.push(now, &[i], 3, deadline);
    }
    assert_eq!(d.stats.queue_dropped, 2);
    // Blocked by the window: nothing leaves, nothing expires yet.
    assert!(d
        .poll_next(now, false, Protection::rate(0.0), deadline)
        .is_none());
    match d.poll_next(now, true, Protection::rate(0.0), deadline) {
        Some(Next::Source(0, data)) => assert_eq!(data, vec![2]),
        other => panic!("{other:?}"),
    }
    // The other two wait past the deadline and are dropped.
    assert!(d
        .poll_next(
            now + Duration::from_millis(60),
            true,
            Protection::rate(0.0),
            deadline
        )
        .is_none());
    assert_eq!(d.stats.expired, 2);
}

#[test]
fn repairs_follow_the_rate_and_recover_losses() {
    let mut tx = Datagrams::new(S);
    let mut rx = Datagrams::new(S);
    let mut now = t0();
    let deadline = Duration::from_millis(100);
    let mut delivered = Vec::new();
    let (mut sources, mut repairs) = (0, 0);
    for i in 0..200u32 {
        tx.push(now, &i.to_le_bytes(), 16, deadline);
        while let Some(next) = tx.poll_next(now, true, Protection::rate(0.25), deadline) {
            match next {
                Next::Source(id, data) => {
                    sources += 1;
                    // Every fifth datagram is lost.
                    if i % 5 != 3 {
                        rx.on_source(id, &data, 1024);
                    }
                }
                Next::Repair(h) => {
                    repairs += 1;
                    let data = tx.repair_data().to_vec();
                    assert_eq!(data.len(), 6, "cut to the longest coded form");
                    rx.on_repair(&h, &data, 1024);
                }
            }
        }
        while let Some(p) = rx.pop() {
            delivered.push(u32::from_le_bytes(p.try_into().unwrap()));
        }
        now += Duration::from_millis(5);
    }
    assert_eq!(sources, 200);
    assert!((48..=52).contains(&repairs), "{repairs} repairs");
    delivered.sort_unstable();
    // All but (at most) the last few, whose repairs had not come yet.
    assert!(delivered.len() >= 197, "{} delivered", delivered.len());
    assert!(rx.stats.recovered >= 37);
}

#[test]
fn unprotected_datagrams_get_a_flush_repair() {
    let mut d = Datagrams::new(S);
    let now = t0();
    let deadline = Duration::from_millis(80);
    d.push(now, b"voice", 16, deadline);
    assert!(matches!(
        d.poll_next(now, true, Protection::rate(0.3), deadline),
        Some(Next::Source(..))
    ));
    assert!(d
        .poll_next(now, true, Protection::rate(0.3), deadline)
        .is_none());
    assert_eq!(d.wakeup, Some(now + deadline / 4));
    assert!(matches!(
        d.poll_next(now + deadline / 4, true, Protection::rate(0.3), deadline),
        Some(Next::Repair(_))
    ));
    assert_eq!(d.wakeup, None);
}

#[test]
fn receiver_gives_up_and_keeps_delivering() {
    let mut tx = Datagrams::new(S);
    let mut rx = Datagrams::new(S);
    let now = t0();
    let deadline = Duration::from_millis(100);
    let mut got = 0;
    // No repairs at all; half the datagrams lost, far more than the window.
    for i in 0..1000u32 {
        tx.push(now, &i.to_le_bytes(), 16, deadline);
        if let Some(Next::Source(id, data)) =
            tx.poll_next(now, true, Protection::rate(0.0), deadline)
        {
            if i % 2 == 0 {
                rx.on_source(id, &data, 16);
            }
        }
        while rx.pop().is_some() {
            got += 1;
        }
    }
    assert_eq!(got, 500);
    assert_eq!(rx.stats.inbox_dropped, 0);
}

#[test]
fn a_lone_datagram_gets_its_repairs_at_once() {
    // A sparse flow (a DNS query every 200 ms): each datagram is followed by its own
    // repairs at once (the first one, whose flow has no interval yet, once no other can
    // join its burst: a sparse spacing later), not a rate-earned flush a quarter deadline
    // later.
    let (mut d, mut now, deadline, protection) = fresh(80, 2);
    for round in 0..5 {
        d.push(now, b"query", 16, deadline);
        assert!(matches!(
            d.poll_next(now, true, protection, deadline),
            Some(Next::Source(..))
        ));
        let at = if round == 0 {
            assert!(d.poll_next(now, true, protection, deadline).is_none());
            assert_eq!(d.wakeup, Some(now + deadline / SPARSE_PER_DEADLINE));
            now + deadline / SPARSE_PER_DEADLINE
        } else {
            now
        };
        for _ in 0..2 {
            assert!(matches!(
                d.poll_next(at, true, protection, deadline),
                Some(Next::Repair(_))
            ));
        }
        assert!(d.poll_next(at, true, protection, deadline).is_none());
        assert_eq!(d.wakeup, None, "nothing left to flush");
        now += Duration::from_millis(200);
    }
    assert_eq!(d.stats.repairs_sent, 10);
}

#[test]
fn a_burst_at_the_start_of_a_flow_is_not_read_as_a_dense_flow() {
    // The first queries of DNS clients started together reach the gateway a few to 16 ms
    // apart (process start-up). Before the flow has an interval, such gaps continue its
    // burst (under a sparse spacing, 29 ms of a 175 ms deadline): the flow stays sparse
    // and the burst gets a group's repairs, not the rate's.
    let (mut d, mut now, deadline, protection) = fresh(175, 3);
    for gap_ms in [16, 1, 9, 2, 3, 2, 5, 2, 1] {
        d.push(now, b"q", 64, deadline);
        assert!(d.poll_next(now, true, protection, deadline).is_some());
        assert_eq!(
            d.stats.repairs_sent, 0,
            "the repairs wait for the burst's end"
        );
        assert!(d.sparse(deadline));
        now += Duration::from_millis(gap_ms);
    }
    d.push(now, b"q", 64, deadline);
    let (out, _) = drain_burst(&mut d, now, protection, deadline);
    assert_eq!(
        d.stats.repairs_sent,
        u64::from(policy::group_repairs(0.1, 3, 10)),
        "{out:?}"
    );
    assert!(d.sparse(deadline));
    // A dense flow is still known as dense once a burst's worth of datagrams came close
    // together (2 Mbit/s of 1,200-byte datagrams, 4.8 ms apart, 75 ms deadline), and its
    // first datagrams then earn the rate's repairs, not a group's.
    let deadline = Duration::from_millis(75);
    let mut d = Datagrams::new(S);
    let protection = Protection {
        rate: 0.3,
        lone: 3,
        loss: 0.1,
    };
    for _ in 0..40 {
        d.push(now, b"x", 64, deadline);
        while d.poll_next(now, true, protection, deadline).is_some() {}
        now += Duration::from_micros(4800);
    }
    assert!(!d.sparse(deadline));
    // The rate's 12, less what the credit cap (2) clips when the first 16 turn dense; a
    // group's repairs for those 16 would be 8 more than the rate's.
    let repairs = d.stats.repairs_sent;
    assert!(
        (7..=12).contains(&repairs),
        "{repairs} repairs for 40 at 0.3"
    );
}

#[test]
fn datagrams_queued_together_share_repairs_sized_to_the_group() {
    let mut d = Datagrams::new(S);
    let now = t0();
    let deadline = Duration::from_millis(80);
    let protection = Protection {
        rate: 0.3,
        lone: 2,
        loss: 0.1,
    };
    // The first datagram of a session, and a second queued with it (an A and an AAAA
    // query): both go out, then the repairs covering both, one more than one datagram
    // gets (two of four lost is 3.7·10⁻³ at 10 %, three of five 4.6·10⁻⁴).
    d.push(now, b"a", 16, deadline);
    assert!(matches!(
        d.poll_next(now, true, protection, deadline),
        Some(Next::Source(0, _))
    ));
    d.push(now, b"aaaa", 16, deadline);
    let (out, _) = drain_burst(&mut d, now, protection, deadline);
    let kinds: Vec<String> = out
        .iter()
        .map(|n| match n {
            Next::Source(id, _) => format!("s{id}"),
            Next::Repair(h) => format!("r{}+{}", h.first, h.count),
        })
        .collect();
    assert_eq!(kinds, ["s1", "r0+2", "r0+2", "r0+2"]);
}

#[test]
fn dense_flows_keep_the_rate_and_lone_repairs_recover_losses() {
    // Datagrams 5 ms apart with an 80 ms deadline are dense: the lone repairs do not
    // apply, the rate does (about one repair in four).
    let mut tx = Datagrams::new(S);
    let mut now = t0();
    let deadline = Duration::from_millis(80);
    let protection = Protection {
        rate: 0.25,
        lone: 3,
        loss: 0.1,
    };
    let mut repairs = 0;
    for i in 0..200u32 {
        tx.push(now, &i.to_le_bytes(), 16, deadline);
        while let Some(n) = tx.poll_next(now, true, protection, deadline) {
            repairs += u32::from(matches!(n, Next::Repair(_)));
        }
        now += Duration::from_millis(5);
    }
    assert!((46..=56).contains(&repairs), "{repairs} repairs");

    // A sparse flow losing every datagram it sends still gets each one through, from
    // its repairs alone.
    let mut tx = Datagrams::new(S);
    let mut rx = Datagrams::new(S);
    let protection = Protection {
        rate: 0.3,
        lone: 1,
        loss: 0.1,
    };
    let mut got = Vec::new();
    for i in 0..20u32 {
        tx.push(now, &i.to_le_bytes(), 16, deadline);
        let limit = now + deadline / SPARSE_PER_DEADLINE;
        let mut at = now;
        loop {
            while let Some(n) = tx.poll_next(at, true, protection, deadline) {
                if let Next::Repair(h) = n {
                    let data = tx.repair_data().to_vec();
                    rx.on_repair(&h, &data, 16);
                }
            }
            match tx.wakeup {
                Some(w) if w <= limit => at = w,
                _ => break,
            }
        }
        while let Some(p) = rx.pop() {
            got.push(u32::from_le_bytes(p.try_into().unwrap()));
        }
        now += Duration::from_millis(300);
    }
    assert_eq!(got, (0..20).collect::<Vec<_>>());
}

#[test]
fn a_flow_with_few_datagrams_per_deadline_is_sparse() {
    // DNS at 20 queries a second over 500 ms RTT: 50 ms apart, deadline 175 ms.
    let deadline = Duration::from_millis(175);
    let mut d = Datagrams::new(S);
    let mut now = t0();
    for _ in 0..20 {
        d.push(now, b"q", 64, deadline);
        now += Duration::from_millis(40);
    }
    assert!(d.sparse(deadline));
    // 2 Mbit/s of 1,200-byte datagrams (4.8 ms apart) with a 75 ms deadline: dense.
    let deadline = Duration::from_millis(75);
    let mut d = Datagrams::new(S);
    for _ in 0..20 {
        d.push(now, b"x", 64, deadline);
        now += Duration::from_micros(4800);
    }
    assert!(!d.sparse(deadline));
}

#[test]
fn a_burst_of_lone_datagrams_stays_sparse_and_is_protected_as_a_group() {
    // Ten queries 2 ms apart every 500 ms (resolver clients started together), 175 ms
    // deadline: the flow stays sparse, and each burst gets the repairs of a group of ten
    // rather than the rate's (about 0.3 per datagram).
    let mut d = Datagrams::new(S);
    let mut now = t0();
    let deadline = Duration::from_millis(175);
    let protection = Protection {
        rate: 0.3,
        lone: 3,
        loss: 0.1,
    };
    for round in 0..4 {
        let before = d.stats.repairs_sent;
        for i in 0..10u32 {
            d.push(now, &i.to_le_bytes(), 16, deadline);
            assert!(d.sparse(deadline), "round {round}, query {i}");
            now += Duration::from_millis(2);
        }
        drain_burst(&mut d, now, protection, deadline);
        let repairs = d.stats.repairs_sent - before;
        assert_eq!(
            repairs,
            u64::from(policy::group_repairs(0.1, 3, 10)),
            "round {round}"
        );
        now += Duration::from_millis(480);
    }
    assert!(policy::group_repairs(0.1, 3, 10) > 3);
}
