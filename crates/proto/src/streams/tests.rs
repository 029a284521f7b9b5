//! The turn order and the writers' wake-ups: every stream with data gets its turn, none
//! starves, the bookkeeping that keeps a packet's cost to the streams it carries stays
//! exact, and the frames carry each stream's bytes in order.

use super::turns::{MAX_TURN_BYTES, TURN_BYTES};
use super::*;
use crate::connection::Side;
use crate::frame::Frames;
use crate::stream::ReadOutcome;
use proptest::prelude::*;
use std::net::{Ipv4Addr, SocketAddr};

/// A symbol's room for frames with the default configuration.
const CAP: usize = 1_398;

fn target() -> Target {
    Target::Ip(SocketAddr::from((Ipv4Addr::LOCALHOST, 9)))
}

/// Streams on the client side with `n` open streams, their Open frames already sent.
fn with_streams(config: &TransportConfig, n: usize) -> (Streams, Vec<StreamId>) {
    let mut st = Streams::new(Side::Client, 1, config);
    let ids = (0..n).map(|_| st.open(target(), config).unwrap()).collect();
    st.control.clear();
    (st, ids)
}

/// What holds between any two calls: the budget's count is exact, every stream with a
/// frame waits in the turn order (`ready` or `sparse`) exactly once, and the queues stay
/// bounded.
fn check(st: &Streams) {
    let pending: usize = st.map.values().map(|s| s.send.buffered()).sum();
    assert_eq!(st.send_buffered, pending, "budget count drifted");
    for (id, s) in &st.map {
        let times = st
            .ready
            .iter()
            .chain(&st.sparse)
            .filter(|r| *r == id)
            .count();
        assert_eq!(
            times,
            usize::from(s.queued),
            "stream {id} queued {times} times"
        );
        assert!(
            !s.send.has_frame() || s.queued,
            "stream {id} has a frame but no turn"
        );
        let waits = st.budget_waiters.iter().filter(|r| *r == id).count();
        assert_eq!(
            waits,
            usize::from(s.budget_waiting),
            "stream {id} waits {waits} times"
        );
    }
    assert!(st.ready.len() + st.sparse.len() <= 2 * st.map.len() + 16);
    assert!(st.budget_waiters.len() <= 2 * st.map.len() + 16);
}

/// One symbol's payload; appends each stream frame's (id, offset, data) to `got`.
fn symbol(
    st: &mut Streams,
    config: &TransportConfig,
    cap: usize,
    events: &mut VecDeque<Event>,
    got: &mut Vec<(StreamId, u64, Vec<u8>)>,
) -> bool {
    // A dirty area longer than the cap, as the encoder's slot is.
    let mut payload = vec![0xa5; cap + 64];
    let len = st.fill_payload(&mut payload, cap, config, events);
    assert!(len <= cap);
    payload.truncate(len);
    for f in Frames::new(&payload) {
        if let Frame::Stream {
            id, offset, data, ..
        } = f.expect("our own payload parses")
        {
            got.push((id, offset, data.to_vec()));
        }
    }
    len > 0
}

fn byte(id: StreamId, at: u64) -> u8 {
    (id as u8).wrapping_mul(31).wrapping_add(at as u8)
}

fn data(id: StreamId, from: u64, len: usize) -> Vec<u8> {
    (0..len as u64).map(|i| byte(id, from + i)).collect()
}

/// The runs of frames one stream sent back to back: (stream, bytes).
fn turn_runs(got: &[(StreamId, u64, Vec<u8>)]) -> Vec<(StreamId, usize)> {
    let mut runs: Vec<(StreamId, usize)> = Vec::new();
    for (id, _, d) in got {
        match runs.last_mut() {
            Some((last, n)) if last == id => *n += d.len(),
            _ => runs.push((*id, d.len())),
        }
    }
    runs
}

/// At a loopback rate a turn lasts `MAX_TURN_BYTES`, and each of a thousand streams may
/// hold that much even though the session budget's even share is smaller: the receiver
/// then delivers each stream's data in long runs. At 10 Mbit/s turns stay `TURN_BYTES`.
#[test]
fn turns_grow_with_the_sending_rate() {
    let config = TransportConfig::default();
    for (rate, turn) in [(1.25e6, TURN_BYTES), (1e9, MAX_TURN_BYTES)] {
        let (mut st, ids) = with_streams(&config, 1000);
        st.set_send_rate(rate);
        assert!(config.session_send_buffer / 1000 < MAX_TURN_BYTES);
        for &id in &ids[..4] {
            let n = st.write(id, &data(id, 0, 200_000), &config).unwrap();
            assert!(n >= turn, "a stream may hold a turn: {n} < {turn}");
        }
        let (mut events, mut got) = (VecDeque::new(), Vec::new());
        while symbol(&mut st, &config, CAP, &mut events, &mut got) {
            check(&st);
        }
        let runs = turn_runs(&got);
        assert!(runs.len() >= 4, "{runs:?}");
        for &(id, n) in &runs[..4] {
            assert!(
                n >= turn && n < turn + CAP,
                "{id}: a turn of {n} at {rate} B/s"
            );
        }
    }
}

#[test]
fn streams_with_data_take_turns_of_turn_bytes_each() {
    let config = TransportConfig::default();
    let (mut st, ids) = with_streams(&config, 50);
    for &id in &ids {
        assert_eq!(st.write(id, &data(id, 0, 20_000), &config), Ok(20_000));
    }
    let (mut events, mut got) = (VecDeque::new(), Vec::new());
    while symbol(&mut st, &config, CAP, &mut events, &mut got) {
        check(&st);
        // Round robin: no stream is more than one turn ahead of another.
        let sent: Vec<u64> = ids.iter().map(|id| st.map[id].send.offset).collect();
        let (lo, hi) = (sent.iter().min().unwrap(), sent.iter().max().unwrap());
        assert!(hi - lo <= (TURN_BYTES + CAP) as u64, "spread {lo}..{hi}");
    }
    // Runs of frames, one per turn: (stream, bytes).
    let runs = turn_runs(&got);
    let order: Vec<StreamId> = runs.iter().map(|(id, _)| *id).collect();
    assert_eq!(
        &order[..50],
        &ids[..],
        "first round in the order they became ready"
    );
    assert_eq!(&order[50..100], &ids[..]);
    // A turn is TURN_BYTES in whole frames; only a stream's last turn may be shorter.
    for (i, &(id, n)) in runs.iter().enumerate() {
        let last = runs[i + 1..].iter().all(|(other, _)| *other != id);
        assert!(
            n < TURN_BYTES + CAP && (n >= TURN_BYTES || last),
            "{id}: {n}"
        );
    }
    assert_eq!(got.iter().map(|g| g.2.len()).sum::<usize>(), 50 * 20_000);
}

#[test]
fn a_stream_that_was_idle_goes_before_the_bulk_streams_turns() {
    let config = TransportConfig::default();
    let (mut st, ids) = with_streams(&config, 9);
    let (bulk, quiet) = (&ids[..8], ids[8]);
    for &id in bulk {
        st.write(id, &data(id, 0, 60_000), &config).unwrap();
    }
    let (mut events, mut got) = (VecDeque::new(), Vec::new());
    // Every bulk stream has had its first turn (each was new once) and waits in `ready`.
    for _ in 0..60 {
        symbol(&mut st, &config, CAP, &mut events, &mut got);
    }
    assert!(st.sparse.is_empty());
    // A request on an idle stream: the next symbol carries it, ahead of the bulk
    // streams' turns.
    st.write(quiet, &data(quiet, 0, 300), &config).unwrap();
    got.clear();
    symbol(&mut st, &config, CAP, &mut events, &mut got);
    check(&st);
    assert_eq!(got[0], (quiet, 0, data(quiet, 0, 300)), "{:?}", got[0].0);
    // Its turn over, it is an ordinary stream: a second write waits for its round.
    st.write(quiet, &data(quiet, 300, 300), &config).unwrap();
    got.clear();
    symbol(&mut st, &config, CAP, &mut events, &mut got);
    assert!(got.iter().all(|g| g.0 != quiet), "no second priority turn");
    check(&st);
}

#[test]
fn a_bulk_stream_refilled_within_its_round_is_not_new() {
    let config = TransportConfig::default();
    let (mut st, ids) = with_streams(&config, 3);
    let (a, b) = (ids[0], ids[1]);
    st.write(a, &data(a, 0, 2_000), &config).unwrap();
    st.write(b, &data(b, 0, 40_000), &config).unwrap();
    let (mut events, mut got) = (VecDeque::new(), Vec::new());
    // `a` runs dry in its first turn, `b` is in the middle of its own.
    for _ in 0..2 {
        symbol(&mut st, &config, CAP, &mut events, &mut got);
    }
    assert_eq!(st.map[&a].send.buffered(), 0);
    // Its writer refills it before its place comes round again: it keeps that place.
    st.write(a, &data(a, 2_000, 2_000), &config).unwrap();
    assert!(
        !st.sparse.contains(&a),
        "a refilled bulk stream jumped the queue"
    );
    assert!(st.ready.contains(&a));
    check(&st);
    // An idle third stream still goes ahead of it (after `b`'s first turn, new too).
    let c = ids[2];
    st.write(c, &data(c, 0, 100), &config).unwrap();
    got.clear();
    while symbol(&mut st, &config, CAP, &mut events, &mut got) {
        check(&st);
    }
    let first = |id| got.iter().position(|g| g.0 == id).unwrap();
    assert!(
        first(c) < first(a),
        "{:?}",
        got.iter().map(|g| g.0).collect::<Vec<_>>()
    );
    let moved = |id| {
        got.iter()
            .filter(|g| g.0 == id)
            .map(|g| g.2.len())
            .sum::<usize>()
    };
    assert_eq!(moved(a), 2_000, "the refill is sent");
    check(&st);
}

#[test]
fn one_busy_stream_among_many_idle_ones_keeps_the_queue_short() {
    let config = TransportConfig::default();
    let (mut st, ids) = with_streams(&config, 1_000);
    let busy = ids[500];
    let (mut events, mut got) = (VecDeque::new(), Vec::new());
    let mut written = 0;
    loop {
        written += st
            .write(busy, &data(busy, written as u64, 4096), &config)
            .unwrap();
        if !symbol(&mut st, &config, CAP, &mut events, &mut got) {
            break;
        }
        // A packet looks at the streams it carries: here one.
        assert!(st.ready.len() <= 1);
        if written >= 100_000 {
            st.finish(busy).unwrap();
        }
    }
    let total: usize = got.iter().map(|(_, _, d)| d.len()).sum();
    assert_eq!(total, written);
    check(&st);
}

#[test]
fn many_streams_share_the_budget_and_blocked_writers_wake_when_half_drained() {
    let config = TransportConfig::default();
    let (mut st, ids) = with_streams(&config, 1_000);
    let share = config.session_send_buffer / 1_000;
    assert!(share >= MIN_STREAM_SHARE);
    for &id in &ids {
        // A stream takes its share of the budget, not its whole buffer.
        assert_eq!(st.write(id, &vec![0; 64 << 10], &config), Ok(share));
        assert!(!st.is_writable(id, &config));
    }
    check(&st);
    let (mut events, mut got) = (VecDeque::new(), Vec::new());
    let mut woken = std::collections::HashSet::new();
    // Each stream drains in about 12 frames, over two turns.
    for _ in 0..13 * 1_000 {
        symbol(&mut st, &config, CAP, &mut events, &mut got);
        for e in events.drain(..) {
            if let Event::StreamWritable(id) = e {
                assert!(woken.insert(id), "stream {id} woken twice");
                assert!(st.map[&id].send.buffered() <= share / 2);
            }
        }
    }
    assert_eq!(woken.len(), 1_000, "every blocked writer woken once");
    check(&st);
}

#[test]
fn budget_waiters_wake_in_order_a_batch_per_refill_and_all_once_the_budget_runs_low() {
    // More streams than the budget holds at their floor: writers are cut short by the
    // session.
    let config = TransportConfig {
        session_send_buffer: 256 << 10,
        ..TransportConfig::default()
    };
    let (mut st, ids) = with_streams(&config, 64);
    let mut written = 0;
    for &id in &ids {
        written += st.write(id, &[7; MIN_STREAM_SHARE], &config).unwrap();
    }
    assert_eq!(written, 256 << 10);
    let blocked: Vec<StreamId> = ids
        .iter()
        .copied()
        .filter(|id| st.map[id].send.buffered() < MIN_STREAM_SHARE)
        .collect();
    assert_eq!(
        blocked,
        st.budget_waiters.iter().copied().collect::<Vec<_>>()
    );
    assert!(st.budget_blocked);
    check(&st);
    // The woken writers write nothing here, so the budget only drains.
    let (mut events, mut got) = (VecDeque::new(), Vec::new());
    let mut wakes = Vec::new();
    for n in 0.. {
        if !symbol(&mut st, &config, CAP, &mut events, &mut got) {
            break;
        }
        for e in events.drain(..) {
            if let Event::StreamWritable(id) = e {
                wakes.push((n, st.send_buffered, id));
            }
        }
        check(&st);
    }
    let order: Vec<StreamId> = wakes.iter().map(|w| w.2).collect();
    assert_eq!(order, blocked, "every waiter woken once, in order");
    assert!(!st.budget_blocked && st.budget_waiters.is_empty());
    // A quarter of 256 KiB drains in 48 symbols: then as many writers as fill the free
    // room (16 KiB each), again a quarter later, and the rest when a quarter is left.
    let batches: Vec<_> = wakes.chunk_by(|a, b| a.0 == b.0).collect();
    assert!(batches.len() >= 3, "{wakes:?}");
    for pair in batches.windows(2) {
        let (n, buffered, _) = pair[0][0];
        let free = (256 << 10) - buffered;
        assert_eq!(pair[0].len(), free.div_ceil(16 << 10), "{wakes:?}");
        let drained = buffered - pair[1][0].1;
        assert!(drained >= 64 << 10 || pair[1][0].1 <= 64 << 10, "{wakes:?}");
        assert!(pair[1][0].0 > n);
    }
    assert!((46..=48).contains(&wakes[0].0), "{wakes:?}");
    let last = batches.last().unwrap()[0].1;
    assert!(last <= 64 << 10 && last + CAP > 64 << 10, "{wakes:?}");
}

#[test]
fn a_refill_wakes_about_as_many_writers_as_it_has_room_for() {
    // Three hundred writers with 32 KiB each, as busy sockets: each woken writer writes
    // all it has left. Only 64 of them fit the budget at once; a refill that woke every
    // waiter would have most of them find the budget full again.
    let config = TransportConfig {
        session_send_buffer: 2 << 20,
        ..TransportConfig::default()
    };
    let (mut st, ids) = with_streams(&config, 300);
    st.set_send_rate(1e12);
    let mut left: BTreeMap<StreamId, usize> = ids.iter().map(|&id| (id, 32 << 10)).collect();
    let block = vec![1u8; 32 << 10];
    let mut write = |st: &mut Streams, id: StreamId| {
        let n = st.write(id, &block[..left[&id]], &config).unwrap();
        *left.get_mut(&id).unwrap() -= n;
        n
    };
    for &id in &ids {
        write(&mut st, id);
    }
    assert!(st.budget_blocked);
    let (mut events, mut got) = (VecDeque::new(), Vec::new());
    let (mut useful, mut wasted) = (0, 0);
    while symbol(&mut st, &config, CAP, &mut events, &mut got) {
        for e in events.drain(..) {
            if let Event::StreamWritable(id) = e {
                match write(&mut st, id) {
                    0 => wasted += 1,
                    _ => useful += 1,
                }
            }
        }
        check(&st);
    }
    // Every writer got all its bytes out: none was left waiting.
    assert!(left.values().all(|&n| n == 0));
    let sent: usize = got.iter().map(|g| g.2.len()).sum();
    assert_eq!(sent, 300 * (32 << 10));
    assert!(useful >= 300 - 64, "{useful} useful wakes");
    assert!(
        wasted * 10 <= useful,
        "{wasted} wasted wakes against {useful}"
    );
}

/// An operation on the streams, generated.
#[derive(Debug, Clone)]
enum Op {
    Open,
    Write { stream: usize, len: usize },
    Finish { stream: usize },
    Reset { stream: usize },
    Credit { stream: usize, more: u64 },
    Symbol { cap: usize },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        1 => Just(Op::Open),
        6 => (0..16usize, 0..6_000usize).prop_map(|(stream, len)| Op::Write { stream, len }),
        1 => (0..16usize).prop_map(|stream| Op::Finish { stream }),
        1 => (0..16usize).prop_map(|stream| Op::Reset { stream }),
        1 => (0..16usize, 0..20_000u64).prop_map(|(stream, more)| Op::Credit { stream, more }),
        8 => (16..CAP).prop_map(|cap| Op::Symbol { cap }),
    ]
}

proptest! {
    /// Any sequence of writes, finishes, resets, credit and symbols keeps the
    /// bookkeeping exact, delivers each stream's bytes in order with nothing lost or
    /// repeated, and serves every stream that has sendable data: once the writes stop,
    /// the streams drain completely (no stream starves behind the others).
    #[test]
    fn streams_are_served_in_order_and_drain(ops in prop::collection::vec(op(), 1..200)) {
        let config = TransportConfig {
            stream_window: 16 << 10,
            stream_send_buffer: 12 << 10,
            session_send_buffer: 32 << 10,
            ..TransportConfig::default()
        };
        let (mut st, mut ids) = with_streams(&config, 4);
        for &id in &ids {
            st.map.get_mut(&id).unwrap().send.max_data = 16 << 10;
        }
        // Bytes written per stream, and what the frames carried.
        let mut written: BTreeMap<StreamId, u64> = BTreeMap::new();
        let mut delivered: BTreeMap<StreamId, u64> = BTreeMap::new();
        let mut reset = std::collections::HashSet::new();
        let (mut events, mut got) = (VecDeque::new(), Vec::new());
        for op in ops {
            match op {
                Op::Open => {
                    if let Ok(id) = st.open(target(), &config) {
                        ids.push(id);
                    }
                }
                Op::Write { stream, len } => {
                    let id = ids[stream % ids.len()];
                    let at = written.get(&id).copied().unwrap_or(0);
                    if let Ok(n) = st.write(id, &data(id, at, len), &config) {
                        *written.entry(id).or_default() += n as u64;
                    }
                }
                Op::Finish { stream } => {
                    let _ = st.finish(ids[stream % ids.len()]);
                }
                Op::Reset { stream } => {
                    let id = ids[stream % ids.len()];
                    if st.reset(id, 1).is_ok() {
                        reset.insert(id);
                    }
                }
                Op::Credit { stream, more } => {
                    let id = ids[stream % ids.len()];
                    let max = st.map.get(&id).map_or(0, |s| s.send.max_data) + more;
                    st.on_frame(Frame::MaxStreamData { id, max }, &config, &mut events)
                        .unwrap();
                }
                Op::Symbol { cap } => {
                    symbol(&mut st, &config, cap, &mut events, &mut got);
                }
            }
            check(&st);
            events.clear();
        }
        // Unlimited credit, then symbols until nothing is left: every live stream's
        // bytes all go out.
        let live: Vec<StreamId> = st.map.keys().copied().collect();
        for id in live {
            st.on_frame(Frame::MaxStreamData { id, max: u64::MAX / 2 }, &config, &mut events)
                .unwrap();
        }
        let mut rounds = 0;
        while symbol(&mut st, &config, CAP, &mut events, &mut got) {
            check(&st);
            rounds += 1;
            prop_assert!(rounds < 10_000);
        }
        prop_assert_eq!(st.send_buffered, 0);
        // No writer is left waiting for a budget that is empty.
        prop_assert!(st.budget_waiters.is_empty() && !st.budget_blocked);
        for (id, offset, bytes) in &got {
            let next = delivered.entry(*id).or_default();
            prop_assert_eq!(*offset, *next, "stream {} out of order", id);
            prop_assert_eq!(bytes, &data(*id, *offset, bytes.len()));
            *next += bytes.len() as u64;
        }
        for (id, n) in &written {
            if !reset.contains(id) {
                prop_assert_eq!(delivered.get(id).copied().unwrap_or(0), *n, "stream {}", id);
            }
        }
    }
}

/// The credit frames queued, as (stream id or `None` for the session, limit).
fn credit_frames(st: &Streams) -> Vec<(Option<StreamId>, u64)> {
    st.control
        .iter()
        .filter_map(|f| match f {
            OwnedFrame::MaxStreamData { id, max } => Some((Some(*id), *max)),
            OwnedFrame::MaxData { max } => Some((None, *max)),
            _ => None,
        })
        .collect()
}

#[test]
fn without_autotuning_credit_starts_at_the_configured_windows() {
    let config = TransportConfig::default();
    assert!(!config.credit_autotune);
    let offer = config.params();
    assert_eq!(
        (offer.stream_window, offer.session_window),
        (config.stream_window, config.session_window)
    );
    let (st, ids) = with_streams(&config, 1);
    let s = &st.map[&ids[0]];
    assert_eq!(s.send.max_data, config.stream_window);
    assert_eq!(s.recv.max_data, config.stream_window);
    assert_eq!(s.recv.window(), config.stream_window);
    assert_eq!(st.local_max_data, config.session_window);
    assert_eq!(st.stream_windows, 0);
}

#[test]
fn a_receiver_grants_its_own_window_beyond_the_agreed_initial_credit() {
    // The peer offered less than this end's windows (an autotuning relay, say): streams
    // start at the agreed credit, a new stream is granted this end's own window at once,
    // and the session's own window follows from the first read.
    let config = TransportConfig::default();
    let t0 = crate::test_clock::base();
    let mut st = Streams::new(Side::Server, 1, &config);
    st.apply_initial_credit(1 << 20, 4 << 20);
    let mut events = VecDeque::new();
    let frame = Frame::Stream {
        id: 0,
        offset: 0,
        fin: false,
        data: &[5; 1000],
    };
    st.on_frame(frame, &config, &mut events).unwrap();
    assert_eq!(
        st.map[&0].send.max_data,
        1 << 20,
        "our sending starts at the agreed"
    );
    assert_eq!(credit_frames(&st), vec![(Some(0), config.stream_window)]);
    let out = st.read(t0, SRTT, 0, &mut [0; 1000], &config).unwrap();
    assert_eq!(out, ReadOutcome::Data(1000));
    assert_eq!(
        credit_frames(&st),
        vec![
            (Some(0), config.stream_window),
            (None, 1000 + config.session_window)
        ]
    );
}

const SRTT: std::time::Duration = std::time::Duration::from_millis(100);

#[test]
fn autotuned_offers_start_small_and_the_session_follows_the_streams() {
    let config = TransportConfig {
        credit_autotune: true,
        ..TransportConfig::default()
    };
    let offer = config.params();
    assert_eq!(
        (offer.stream_window, offer.session_window),
        (
            crate::config::AUTOTUNE_INITIAL_CREDIT,
            crate::config::AUTOTUNE_SESSION_FLOOR
        )
    );
    let t0 = crate::test_clock::base();
    let mut st = Streams::new(Side::Server, 1, &config);
    let mut events = VecDeque::new();
    // One stream whose reader keeps up with a sender that fills the credit.
    let (mut off, mut at) = (0u64, t0);
    for _ in 0..40 {
        let room = st.map.get(&0).map_or(1 << 20, |s| s.recv.max_data - off);
        let data = vec![3u8; room.min(200_000) as usize];
        let frame = Frame::Stream {
            id: 0,
            offset: off,
            fin: false,
            data: &data,
        };
        st.on_frame(frame, &config, &mut events).unwrap();
        off += data.len() as u64;
        let mut buf = vec![0; data.len()];
        assert_eq!(
            st.read(at, SRTT, 0, &mut buf, &config).unwrap(),
            ReadOutcome::Data(data.len())
        );
        at += SRTT / 2;
    }
    let w = st.map[&0].recv.window();
    assert!(
        w > crate::config::AUTOTUNE_STREAM_FLOOR,
        "the window grew: {w}"
    );
    assert!(w <= config.stream_window);
    assert_eq!(st.stream_windows, w);
    assert!(
        st.local_window >= w,
        "the session makes room for the stream"
    );
    assert!(st.local_max_data >= st.map[&0].recv.max_data);
}

#[test]
fn a_measured_path_widens_autotuned_streams_to_four_times_its_bdp() {
    let config = TransportConfig {
        credit_autotune: true,
        ..TransportConfig::default()
    };
    let (mut st, ids) = with_streams(&config, 1);
    let floor = crate::config::AUTOTUNE_STREAM_FLOOR;
    assert_eq!(st.map[&ids[0]].recv.window(), floor);
    // 10 Mbit/s and 600 ms: a 750 kB product.
    st.note_incoming_path(1.25e6, std::time::Duration::from_millis(600));
    let want = 3_000_000;
    assert_eq!(st.map[&ids[0]].recv.window(), want, "an open stream widens");
    assert_eq!(st.stream_windows, want);
    assert_eq!(credit_frames(&st), vec![(Some(ids[0]), want)]);
    let id = st.open(target(), &config).unwrap();
    assert_eq!(st.map[&id].recv.window(), want, "a new one starts there");
    // A short path's product is below the floor: the floor stays.
    let mut st2 = Streams::new(Side::Client, 2, &config);
    st2.note_incoming_path(6.25e6, std::time::Duration::from_millis(10));
    let id = st2.open(target(), &config).unwrap();
    assert_eq!(st2.map[&id].recv.window(), floor);
}

#[test]
fn a_peek_leaves_the_bytes_until_they_are_consumed() {
    // The splice copies a stream's bytes out before its socket takes them: what the socket
    // refused must read again, and credit must follow only what was consumed.
    let config = TransportConfig::default();
    let t0 = crate::test_clock::base();
    let mut st = Streams::new(Side::Server, 1, &config);
    let mut events = VecDeque::new();
    let sent: Vec<u8> = (0..3000u32).map(|i| (i * 7) as u8).collect();
    let frame = Frame::Stream {
        id: 0,
        offset: 0,
        fin: true,
        data: &sent,
    };
    st.on_frame(frame, &config, &mut events).unwrap();
    st.control.clear();
    let mut buf = [0u8; 2000];
    assert_eq!(st.peek(0, &mut buf), Ok(ReadOutcome::Data(2000)));
    assert_eq!(st.peek(0, &mut buf), Ok(ReadOutcome::Data(2000)));
    assert_eq!(buf[..], sent[..2000]);
    assert_eq!(st.data_read, 0, "a peek reads nothing");
    assert_eq!(st.consume(t0, SRTT, 0, 500, &config), Ok(500));
    assert_eq!(st.peek(0, &mut buf), Ok(ReadOutcome::Data(2000)));
    assert_eq!(buf[..], sent[500..2500]);
    // More than is ready consumes what is ready.
    assert_eq!(st.consume(t0, SRTT, 0, 10_000, &config), Ok(2500));
    assert_eq!(st.data_read, 3000);
    assert_eq!(st.peek(0, &mut buf), Ok(ReadOutcome::Finished));
}

#[test]
fn write_room_is_what_a_write_takes_and_none_waits_like_a_refused_write() {
    let config = TransportConfig {
        session_send_buffer: 256 << 10,
        ..TransportConfig::default()
    };
    let (mut st, ids) = with_streams(&config, 64);
    for &id in &ids {
        let room = st.write_room_or_wait(id, &config).unwrap();
        assert_eq!(st.write(id, &vec![7; 2 * room + 1], &config), Ok(room));
    }
    // The budget is spent: every stream that got less than its floor waits for a refill,
    // once, as the refused writes above already made it.
    for &id in &ids {
        assert_eq!(st.write_room_or_wait(id, &config), Ok(0));
    }
    check(&st);
    let waiting = st.budget_waiters.len();
    assert!(waiting > 0 && st.budget_blocked);
    // A stream refused by its own limit is blocked on it, not queued for the budget.
    let config = TransportConfig::default();
    let (mut st, ids) = with_streams(&config, 1);
    let room = st.write_room_or_wait(ids[0], &config).unwrap();
    assert_eq!(st.write(ids[0], &vec![1; room], &config), Ok(room));
    assert_eq!(st.write_room_or_wait(ids[0], &config), Ok(0));
    assert!(st.map[&ids[0]].write_blocked);
    assert!(st.budget_waiters.is_empty());
    check(&st);
    st.finish(ids[0]).unwrap();
    assert_eq!(st.write_room_or_wait(ids[0], &config), Ok(0));
}

#[test]
fn a_fill_queues_what_it_wrote_in_order_across_the_buffers_wrap() {
    // The splice reads a socket straight into the send buffer's free space, which the ring
    // may give as two pieces; the bytes must be queued in order and counted in the budget.
    let config = TransportConfig::default();
    let (mut st, ids) = with_streams(&config, 1);
    let id = ids[0];
    let (mut events, mut got) = (VecDeque::new(), Vec::new());
    let mut next = 0u64;
    let wrapped = std::cell::Cell::new(false);
    // Fills up to `max` with the next `keep` bytes of the stream's pattern.
    let fill = |st: &mut Streams, next: &mut u64, max: usize, keep: usize| {
        let from = *next;
        let out = st.fill(id, max, &config, |a: &mut [u8], b: &mut [u8]| {
            wrapped.set(wrapped.get() || !b.is_empty());
            let mut k = 0;
            for x in a.iter_mut().chain(b.iter_mut()).take(keep) {
                *x = byte(id, from + k as u64);
                k += 1;
            }
            Ok::<_, ()>(k)
        });
        let n = out.unwrap().unwrap();
        *next += n as u64;
        n
    };
    for round in 0..40 {
        // Some bytes in, fewer out each round, so the ring's head moves and its free
        // space wraps.
        assert!(fill(&mut st, &mut next, 3_000 + round * 97, 2_500 + round * 89) > 0);
        symbol(&mut st, &config, CAP, &mut events, &mut got);
        check(&st);
    }
    assert!(
        wrapped.get(),
        "the free space came in two pieces at least once"
    );
    while symbol(&mut st, &config, CAP, &mut events, &mut got) {}
    let sent: Vec<u8> = got.iter().flat_map(|(_, _, d)| d.clone()).collect();
    assert_eq!(sent.len() as u64, next);
    assert_eq!(sent, data(id, 0, next as usize));
    check(&st);
    // A fill never exceeds the room a write would find, and with none it is not called.
    let room = st.write_room_or_wait(id, &config).unwrap();
    assert_eq!(fill(&mut st, &mut next, usize::MAX, usize::MAX), room);
    let out = st.fill(
        id,
        1 << 20,
        &config,
        |_: &mut [u8], _: &mut [u8]| -> Result<usize, ()> { panic!("called with no room") },
    );
    assert_eq!(out, Ok(Ok(0)));
    assert!(st.map[&id].write_blocked);
    check(&st);
}

#[test]
fn a_peer_reset_wakes_a_writer_waiting_for_room() {
    // The reset discards the unsent bytes, so the room the writer waits for never drains:
    // it must be woken to find the reset, or its copy would hang until the session ends.
    let config = TransportConfig::default();
    let (mut st, ids) = with_streams(&config, 1);
    let id = ids[0];
    let room = st.write_room_or_wait(id, &config).unwrap();
    assert_eq!(st.write(id, &vec![1; room + 1], &config), Ok(room));
    assert!(st.map[&id].write_blocked);
    let mut events = VecDeque::new();
    st.on_frame(Frame::Reset { id, code: 3 }, &config, &mut events)
        .unwrap();
    assert!(events.contains(&Event::StreamWritable(id)), "{events:?}");
    assert_eq!(
        st.write_room_or_wait(id, &config),
        Err(StreamApiError::Reset)
    );
    check(&st);
}
