//! The repair scheduler driven alone, by synthetic ACK and loss sequences: no packets, no
//! encoder, no connection (the way `cc/ctcp/tests.rs` drives the controller).

use super::tail::tiny_flight_repairs;
use super::*;
use crate::config::RepairPriority;
use crate::estimate::loss::LossEstimator;
use crate::sent::TailCensus;
use crate::test_clock::{base, ms};
use RepairPriority::Latency;

/// A sender as the scheduler sees it: the encoder's window `[first, next)`, the clock,
/// the path's minimum RTT and srtt, and the loss estimate the ACKs carry.
struct Sender {
    s: RepairScheduler,
    now: Instant,
    first: SymbolId,
    next: SymbolId,
    min_rtt: Duration,
    srtt: Duration,
    /// Loss-detection delay the stall watch counts in.
    delay: Duration,
    p: f64,
}

impl Sender {
    fn new(proactive: f64) -> Self {
        Sender {
            s: RepairScheduler::new(proactive),
            now: base(),
            first: 0,
            next: 0,
            min_rtt: ms(100),
            srtt: ms(100),
            delay: ms(110),
            p: 0.0,
        }
    }

    fn unacked(&self) -> Unacked {
        Unacked {
            first: self.first,
            next: self.next,
        }
    }

    /// Sends `n` source symbols, earning `ratio` proactive credit each.
    fn send(&mut self, n: u64, ratio: f64) {
        for _ in 0..n {
            if self.first == self.next {
                self.s.on_busy(self.now);
            }
            self.next += 1;
            self.s.on_source_sent(ratio);
        }
    }

    fn lose_source(&mut self, id: SymbolId) {
        self.s.on_lost(self.now, self.min_rtt, SentKind::Source(id));
    }

    fn lose_repair(&mut self, end: SymbolId, origin: RepairOrigin) {
        self.s
            .on_lost(self.now, self.min_rtt, SentKind::Repair { end, origin });
    }

    /// An ACK: the peer holds everything below `in_order`, has seen every symbol sent and
    /// lacks `deficit` equations; `after` is in flight beyond it.
    fn ack(&mut self, in_order: SymbolId, deficit: u32, after: InFlightAfter, quiet: bool) {
        let moved = self.s.on_in_order(in_order, self.next);
        if let Some(c) = moved {
            self.first = c;
        }
        let empty = self.first == self.next;
        self.s
            .watch_in_order_point(self.now, moved.is_some(), empty, self.delay, false);
        self.s.on_ack(&AckSummary {
            deficit,
            highest_seen: self.next,
            after,
            first_source_after: None,
            quiet,
            p: self.p,
            unacked: self.unacked(),
            multipath: false,
        });
    }

    /// Every repair due before the next source, as sent.
    fn drain(&mut self) -> Vec<RepairPlan> {
        let mut out = Vec::new();
        while let Some(plan) = self.s.next_repair(self.unacked(), self.srtt) {
            self.s.on_repair_sent(&plan);
            out.push(plan);
            assert!(out.len() < 10_000, "the scheduler keeps owing");
        }
        out
    }
}

fn nothing() -> InFlightAfter {
    InFlightAfter::default()
}

fn ends(plans: &[RepairPlan]) -> Vec<SymbolId> {
    plans.iter().map(|p| p.end).collect()
}

/// xorshift64: a deterministic loss pattern.
fn xorshift(x: &mut u64) -> f64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    (*x >> 11) as f64 / (1u64 << 53) as f64
}

#[test]
fn a_clean_path_owes_no_repairs() {
    let mut t = Sender::new(1.0);
    for round in 0..50 {
        t.send(20, 0.0);
        t.now += ms(100);
        t.ack(t.next - 5, 0, nothing(), true);
        assert!(
            t.drain().is_empty(),
            "round {round}: nothing lost, nothing owed"
        );
        assert_eq!(t.s.debt_len(), 0);
    }
    t.ack(t.next, 0, nothing(), true);
    assert!(t.drain().is_empty());
    // No loss measured: the proactive share is zero even with proactive repair on.
    let ratio = t.s.repair_ratio(&RatioInputs {
        window: 100,
        p: 0.0,
        gilbert: LossEstimator::default().gilbert(),
        srtt: ms(600),
    });
    assert_eq!(ratio, 0.0);
}

#[test]
fn a_loss_free_estimate_sends_no_tail_repairs() {
    let mut t = Sender::new(0.0);
    t.send(10, 0.0);
    let census = TailCensus {
        fresh: 10,
        uncovered: 10,
        ..TailCensus::default()
    };
    assert_eq!(tail_budget(0.0, &census, Latency), 0);
    let plan =
        t.s.tail_repair(t.unacked(), || tail_budget(0.0, &census, Latency));
    assert_eq!(plan, None, "an idle sender on a clean path sends nothing");
    // At 0.05 % loss a flight of four arrives whole 99.8 % of the time: no repair either.
    let four = TailCensus {
        fresh: 4,
        uncovered: 4,
        ..TailCensus::default()
    };
    assert_eq!(tail_budget(0.0005, &four, Latency), 0);
}

#[test]
fn a_lost_source_owes_one_repair_ending_just_after_it() {
    let mut t = Sender::new(0.0);
    t.send(30, 0.0);
    t.lose_source(12);
    let plans = t.drain();
    assert_eq!(plans.len(), 1);
    assert_eq!(plans[0].origin, RepairOrigin::Debt);
    assert!(!plans[0].stall);
    assert_eq!(plans[0].end, 13, "narrow: its range ends at the hole");
    assert!(t.drain().is_empty());
}

#[test]
fn reactive_repairs_widen_only_with_proactive_repair_on_a_long_path() {
    // Proactive on, short path: narrow.
    let mut t = Sender::new(1.0);
    t.send(30, 0.0);
    t.lose_source(12);
    assert_eq!(ends(&t.drain()), [13]);
    // Proactive on, srtt at or above NARROW_REACTIVE_BELOW: the whole window.
    let mut t = Sender::new(1.0);
    t.srtt = NARROW_REACTIVE_BELOW;
    t.send(30, 0.0);
    t.lose_source(12);
    assert_eq!(ends(&t.drain()), [30]);
    // Proactive off: narrow at any RTT.
    let mut t = Sender::new(0.0);
    t.srtt = ms(600);
    t.send(30, 0.0);
    t.lose_source(12);
    assert_eq!(ends(&t.drain()), [13]);
}

#[test]
fn bernoulli_losses_are_repaired_oldest_hole_first_within_the_deficit() {
    let mut t = Sender::new(0.0);
    t.p = 0.1;
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    t.send(400, 0.0);
    let lost: Vec<SymbolId> = (0..400).filter(|_| xorshift(&mut x) < 0.1).collect();
    assert!((25..=60).contains(&lost.len()), "{} losses", lost.len());
    for &id in &lost {
        t.lose_source(id);
    }
    // The peer reports every one of them missing: all are owed.
    t.ack(lost[0], lost.len() as u32, nothing(), true);
    let plans = t.drain();
    assert_eq!(
        ends(&plans),
        lost.iter().map(|&id| id + 1).collect::<Vec<_>>()
    );
    assert!(plans.iter().all(|p| p.origin == RepairOrigin::Debt));
}

#[test]
fn the_debt_cap_keeps_the_furthest_reaching_repairs() {
    let mut t = Sender::new(0.0);
    t.send(100, 0.0);
    for id in [10, 20, 30, 40, 50] {
        t.lose_source(id);
    }
    // Proactive repairs filled three holes meanwhile: the peer lacks two.
    t.ack(10, 2, nothing(), true);
    assert_eq!(t.s.debt_len(), 2);
    assert_eq!(ends(&t.drain()), [41, 51]);
}

#[test]
fn repairs_in_flight_count_against_the_deficit() {
    let mut t = Sender::new(0.0);
    t.send(100, 0.0);
    for id in 10..16 {
        t.lose_source(id);
    }
    // Six holes, four reactive repairs on their way on a loss-free estimate: two owed.
    let after = InFlightAfter {
        reactive: 4,
        ..InFlightAfter::default()
    };
    t.ack(10, 6, after, false);
    assert_eq!(t.s.debt_len(), 2);
    // Speculative repairs count only beyond the losses of the sources they cover: ten
    // repairs over ten sources at 10 % loss carry 10·0.9 − 10·0.1 = 8 spare equations.
    let mut t = Sender::new(0.0);
    t.p = 0.1;
    t.send(100, 0.0);
    for id in 10..22 {
        t.lose_source(id);
    }
    let after = InFlightAfter {
        speculative: 10,
        covered_sources: 10,
        ..InFlightAfter::default()
    };
    t.ack(10, 12, after, false);
    assert_eq!(t.s.debt_len(), 4);
}

#[test]
fn a_burst_owes_one_repair_per_hole_each_with_its_own_end() {
    let mut t = Sender::new(0.0);
    t.send(64, 0.0);
    for id in 20..28 {
        t.lose_source(id);
    }
    t.ack(20, 8, nothing(), true);
    let plans = t.drain();
    assert_eq!(ends(&plans), (21..=28).collect::<Vec<_>>());
    // The replacements of a burst's lost reactive repairs are owed again, at their ends.
    t.now += ms(1000); // long past start-up: no margin copies
    for end in [21, 22, 23] {
        t.lose_repair(end, RepairOrigin::Debt);
    }
    assert_eq!(ends(&t.drain()), [21, 22, 23]);
}

#[test]
fn lost_speculative_repairs_and_settled_holes_owe_nothing() {
    let mut t = Sender::new(0.0);
    t.send(50, 0.0);
    t.now += ms(1000);
    t.lose_repair(50, RepairOrigin::Credit);
    t.lose_repair(50, RepairOrigin::Tail);
    t.lose_repair(50, RepairOrigin::Margin);
    assert_eq!(t.s.debt_len(), 0, "speculative repairs are owed by nobody");
    t.lose_source(5);
    t.lose_source(30);
    // The in-order point passes the first hole (a repair filled it): only the second
    // remains owed.
    t.ack(20, 1, nothing(), true);
    assert_eq!(ends(&t.drain()), [31]);
    // A source below the in-order point, declared lost late, owes nothing.
    t.lose_source(3);
    t.lose_repair(10, RepairOrigin::Debt);
    assert_eq!(t.s.debt_len(), 0);
}

#[test]
fn the_safety_net_owes_the_deficit_only_when_nothing_is_on_its_way() {
    let mut t = Sender::new(0.0);
    t.send(40, 0.0);
    // A packet the ACK should cover is unresolved (likely reordered): wait.
    t.ack(10, 3, nothing(), false);
    assert_eq!(t.s.debt_len(), 0);
    // Nothing in flight, nothing unresolved: the deficit is owed, spanning the window.
    t.ack(10, 3, nothing(), true);
    assert_eq!(ends(&t.drain()), [40, 40, 40]);
    // Never more than the symbols the peer can lack.
    let mut t = Sender::new(0.0);
    t.send(12, 0.0);
    t.ack(10, 50, nothing(), true);
    assert_eq!(t.s.debt_len(), 2);
}

#[test]
fn margin_copies_one_per_two_lost_reactive_repairs_in_start_up() {
    let mut t = Sender::new(0.0);
    t.send(100, 0.0);
    t.now += ms(150); // within STARTUP_RTTS minimum RTTs of the spell's first source
    for end in [11, 25, 31, 47] {
        t.lose_repair(end, RepairOrigin::Debt);
    }
    let plans = t.drain();
    let reactive: Vec<_> = plans
        .iter()
        .filter(|p| p.origin == RepairOrigin::Debt)
        .collect();
    let margin: Vec<_> = plans
        .iter()
        .filter(|p| p.origin == RepairOrigin::Margin)
        .collect();
    assert_eq!(reactive.len(), 4, "each lost reactive repair is owed again");
    // The first and third loss owe a copy, each reaching the highest end since the last.
    assert_eq!(margin.iter().map(|p| p.end).collect::<Vec<_>>(), [11, 31]);
    // Margins go after the debt they stand beside.
    assert_eq!(plans.last().map(|p| p.origin), Some(RepairOrigin::Margin));
    // Lost sources owe no margin.
    t.lose_source(60);
    assert!(t.drain().iter().all(|p| p.origin == RepairOrigin::Debt));
}

#[test]
fn no_margin_copies_once_the_spell_is_past_start_up() {
    let mut t = Sender::new(0.0);
    t.send(100, 0.0);
    t.now += t.min_rtt * STARTUP_RTTS;
    assert!(!t.s.in_startup(t.now, t.min_rtt));
    for end in [11, 25, 31, 47] {
        t.lose_repair(end, RepairOrigin::Debt);
    }
    let plans = t.drain();
    assert_eq!(plans.len(), 4);
    assert!(plans.iter().all(|p| p.origin == RepairOrigin::Debt));
}

#[test]
fn an_idle_sender_resuming_starts_a_new_busy_spell() {
    let mut t = Sender::new(0.0);
    t.send(10, 0.0);
    t.now += ms(100);
    t.ack(10, 0, nothing(), true);
    // Idle for ten seconds: start-up is long over.
    t.now += ms(10_000);
    assert!(!t.s.in_startup(t.now, t.min_rtt));
    // Sending again with nothing unacknowledged is a new spell with its own start-up.
    t.send(10, 0.0);
    assert!(t.s.in_startup(t.now, t.min_rtt));
    t.lose_repair(15, RepairOrigin::Debt);
    let origins: Vec<_> = t.drain().iter().map(|p| p.origin).collect();
    assert_eq!(origins, [RepairOrigin::Debt, RepairOrigin::Margin]);
    // More sources while symbols are unacknowledged continue the spell.
    t.now += ms(1000);
    t.send(5, 0.0);
    assert!(!t.s.in_startup(t.now, t.min_rtt));
}

#[test]
fn the_stall_watch_owes_one_repair_for_a_hole_that_stands_still() {
    let mut t = Sender::new(0.0);
    t.send(100, 0.0);
    t.ack(40, 1, nothing(), false); // the in-order point moves: the watch arms
    let limit = (t.delay * STALL_ROUNDS).max(STALL_FLOOR);
    t.now += limit - ms(1);
    t.ack(40, 1, nothing(), false);
    assert!(t.drain().is_empty(), "not yet");
    t.now += ms(1);
    t.ack(40, 1, nothing(), false);
    let plans = t.drain();
    assert_eq!(plans.len(), 1);
    assert!(plans[0].stall);
    assert_eq!(plans[0].origin, RepairOrigin::Debt);
    assert_eq!(plans[0].end, 41, "just past the hole at the in-order point");
    // The watch rearmed: the next repair comes only after another stand-still.
    t.now += limit / 2;
    t.ack(40, 1, nothing(), false);
    assert!(t.drain().is_empty());
    t.now += limit;
    t.ack(40, 1, nothing(), false);
    assert_eq!(ends(&t.drain()), [41]);
}

#[test]
fn the_stall_watch_waits_at_least_its_floor_and_defers_to_owed_repairs() {
    let mut t = Sender::new(0.0);
    t.delay = ms(10); // a short path: 2 × 10 ms is below the floor
    t.send(100, 0.0);
    t.ack(40, 1, nothing(), false);
    t.now += ms(100);
    t.ack(40, 1, nothing(), false);
    assert!(t.drain().is_empty(), "below STALL_FLOOR");
    // A repair for this hole is already owed (waiting for the window): no second one.
    t.lose_source(40);
    t.now += STALL_FLOOR;
    t.ack(40, 1, nothing(), false);
    let plans = t.drain();
    assert_eq!(plans.len(), 1);
    assert!(!plans[0].stall);
    // Nothing unacknowledged disarms the watch.
    t.ack(100, 0, nothing(), true);
    t.now += ms(10_000);
    t.ack(100, 0, nothing(), true);
    assert!(t.drain().is_empty());
}

#[test]
fn proactive_credit_follows_the_loss_rate_and_is_bounded() {
    let t = Sender::new(1.0);
    let gilbert = LossEstimator::default().gilbert();
    let inputs = |p, srtt| RatioInputs {
        window: 200,
        p,
        gilbert,
        srtt,
    };
    let long = t.s.repair_ratio(&inputs(0.1, ms(600)));
    // On a long path the share is the expected loss p/(1−p), at most.
    assert!(long > 0.05 && long <= 0.1 / 0.9 + 1e-12, "{long}");
    // On a short path most of it is left to reactive repair.
    let short = t.s.repair_ratio(&inputs(0.1, ms(50)));
    assert!(short < long / 5.0, "{short} vs {long}");
    // Off: none.
    let off = Sender::new(0.0);
    assert_eq!(off.s.repair_ratio(&inputs(0.1, ms(600))), 0.0);

    // 200 sources at that ratio earn about 200 × ratio repairs, sent between sources.
    let mut t = Sender::new(1.0);
    let mut credit = 0;
    for _ in 0..200 {
        t.send(1, long);
        credit += t.drain().len();
    }
    let expected = 200.0 * long;
    assert!(
        (credit as f64 - expected).abs() <= 1.0,
        "{credit} vs {expected}"
    );
    // Credit banked while repairs cannot go out stops at MAX_CREDIT.
    t.send(100, 1.0);
    let banked = t.drain();
    assert_eq!(banked.len(), MAX_CREDIT as usize);
    assert!(banked.iter().all(|p| p.origin == RepairOrigin::Credit));
}

#[test]
fn an_application_limited_sender_gets_tail_repairs_sized_to_its_flight() {
    let mut t = Sender::new(0.0);
    let one = TailCensus {
        fresh: 1,
        uncovered: 1,
        ..TailCensus::default()
    };
    // One symbol written, then idle: enough repairs for a 99 % decode.
    assert_eq!(tail_budget(0.05, &one, Latency), 1);
    assert_eq!(tail_budget(0.3, &one, Latency), 3);
    // A bulk flight: λ + 2√λ over 1 − p, minus speculative repairs already out.
    let bulk = TailCensus {
        fresh: 100,
        repairs: 4,
        ..TailCensus::default()
    };
    // λ = 10: ⌈(10 + 6.32) / 0.9⌉ = 19, less the 4 in flight.
    assert_eq!(tail_budget(0.1, &bulk, Latency), 15);
    // Losses past the loss-detection delay count whole.
    let overdue = TailCensus {
        fresh: 100,
        overdue: 5,
        ..TailCensus::default()
    };
    assert!(tail_budget(0.1, &overdue, Latency) > tail_budget(0.1, &bulk, Latency) + 4);

    // The idle spell spends its budget once: sized at the first idle poll, one per poll.
    for chunk in 0..3 {
        t.send(1, 0.0);
        let mut sized = 0;
        let mut tail = Vec::new();
        while let Some(p) = t.s.tail_repair(t.unacked(), || {
            sized += 1;
            tail_budget(0.3, &one, Latency)
        }) {
            tail.push(p);
        }
        assert_eq!(
            sized, 1,
            "chunk {chunk}: the budget is sized once per idle spell"
        );
        assert_eq!(tail.len(), 3);
        assert!(tail
            .iter()
            .all(|p| p.origin == RepairOrigin::Tail && p.end == t.next));
        t.now += ms(100);
        t.ack(t.next, 0, nothing(), true);
    }
}

#[test]
fn bandwidth_priority_leaves_tail_repairs_to_flights_of_one_or_two_symbols() {
    use RepairPriority::Bandwidth;
    let flight = |fresh| TailCensus {
        fresh,
        uncovered: fresh,
        ..TailCensus::default()
    };
    // A request or a credit update alone: nothing after it would reveal its loss.
    for p in [0.05, 0.3] {
        for n in [1, 2] {
            assert_eq!(
                tail_budget(p, &flight(n), Bandwidth),
                tail_budget(p, &flight(n), Latency),
                "{n} symbols at {p}"
            );
            assert!(tail_budget(p, &flight(n), Bandwidth) > 0);
        }
    }
    // Anything larger waits for the loss reports, at every loss rate.
    for n in [3, 8, 47, 500] {
        for p in [0.01, 0.05, 0.3, 0.5] {
            assert!(tail_budget(p, &flight(n), Latency) > 0, "{n} at {p}");
            assert_eq!(tail_budget(p, &flight(n), Bandwidth), 0, "{n} at {p}");
        }
    }
}

#[test]
fn a_reactive_round_resizes_the_tail_but_the_stall_repair_does_not() {
    let mut t = Sender::new(0.0);
    t.send(20, 0.0);
    let mut sizings = 0;
    let mut poll = |t: &mut Sender| {
        t.s.tail_repair(t.unacked(), || {
            sizings += 1;
            1
        })
    };
    assert!(poll(&mut t).is_some());
    assert!(poll(&mut t).is_none(), "spent");
    t.lose_source(3);
    assert_eq!(t.drain().len(), 1);
    assert!(
        poll(&mut t).is_some(),
        "a reactive round sizes the tail anew"
    );
    assert!(poll(&mut t).is_none());
    t.ack(3, 1, nothing(), false);
    t.now += STALL_FLOOR * 4;
    t.ack(3, 1, nothing(), false);
    let stall = t.drain();
    assert!(stall.len() == 1 && stall[0].stall);
    assert!(
        poll(&mut t).is_none(),
        "the stall watch's repair is not a round"
    );
    assert_eq!(sizings, 2);
}

#[test]
fn a_tail_short_of_what_the_peer_lacks_is_owed_the_rest() {
    let mut t = Sender::new(0.0);
    t.send(20, 0.0);
    // The peer saw only up to 15: five sources of the tail never arrived, and it lacks
    // one equation below.
    let moved = t.s.on_in_order(10, t.next);
    t.first = moved.unwrap_or(t.first);
    t.s.on_ack(&AckSummary {
        deficit: 1,
        highest_seen: 15,
        after: nothing(),
        first_source_after: None,
        quiet: false,
        p: 0.0,
        unacked: t.unacked(),
        multipath: false,
    });
    assert_eq!(
        t.s.debt_len(),
        0,
        "unresolved packets below the ACK: no safety net"
    );
    // Mid-flight (a source in flight beyond the ACK): nothing.
    t.s.owe_tail_shortfall(t.unacked(), || None);
    assert_eq!(t.s.debt_len(), 0);
    // In a tail with two speculative repairs on their way: the other four are owed.
    let on_way = InFlightAfter {
        speculative: 2,
        ..InFlightAfter::default()
    };
    t.s.owe_tail_shortfall(t.unacked(), || Some(on_way));
    assert_eq!(ends(&t.drain()), [20, 20, 20, 20]);
}

#[test]
fn probes_owe_repairs_spanning_the_flight_and_failures_forget_everything() {
    let mut t = Sender::new(0.0);
    t.send(30, 0.0);
    t.lose_source(4);
    t.s.on_probe(2, t.unacked());
    assert!(t.s.owes());
    assert_eq!(ends(&t.drain()), [5, 30, 30]);
    t.lose_source(7);
    t.now += ms(150);
    t.lose_repair(30, RepairOrigin::Debt);
    t.s.on_source_sent(5.0);
    t.s.abandon();
    assert!(!t.s.owes());
    assert!(t.drain().is_empty(), "nothing owed, no credit left");
}

#[test]
fn the_tail_loss_rate_blends_the_handshake_train_and_the_incoming_direction() {
    let none = TailLossSamples::default();
    assert_eq!(none.loss(), 0.0);
    // The train towards the peer: 2 of 10 copies lost, no data outcomes yet.
    let train = TailLossSamples {
        train_out: Some((8, 10)),
        ..TailLossSamples::default()
    };
    assert!((train.loss() - 0.2).abs() < 1e-12);
    // It fades as our own outcomes accumulate.
    let faded = TailLossSamples {
        own_p: 0.0,
        own_samples: 190,
        ..train
    };
    assert!((faded.loss() - 0.01).abs() < 1e-12);
    // The incoming direction counts from 64 packets: 30 of 100 lost, clamped to 0.5.
    let incoming = TailLossSamples {
        rx_packets: 70,
        rx_largest: Some(99),
        ..TailLossSamples::default()
    };
    assert!((incoming.loss() - 0.3).abs() < 1e-12);
    let few = TailLossSamples {
        rx_packets: 30,
        rx_largest: Some(99),
        ..TailLossSamples::default()
    };
    assert_eq!(few.loss(), 0.0, "too few packets to count");
}

#[test]
fn tiny_flights_get_repairs_for_a_99_percent_decode() {
    assert_eq!(tiny_flight_repairs(1, 0.0), 0, "a clean path needs none");
    assert_eq!(
        tiny_flight_repairs(0, 0.3),
        0,
        "nothing sent, nothing to cover"
    );
    // 0.05² = 0.25 % ≤ 1 %: one copy is enough at 5 %.
    assert_eq!(tiny_flight_repairs(1, 0.05), 1);
    // 0.08² = 0.64 %: still one at 8 %; 0.2² = 4 % needs a second (0.8 %).
    assert_eq!(tiny_flight_repairs(1, 0.08), 1);
    assert_eq!(tiny_flight_repairs(1, 0.2), 2);
    // 0.3³ = 2.7 %, 0.3⁴ = 0.8 %.
    assert_eq!(tiny_flight_repairs(1, 0.3), 3);
    // Two symbols at 30 %: P(≤ 1 of 5 arrive) = 3.1 %, so the cap of 3 holds.
    assert_eq!(tiny_flight_repairs(2, 0.3), 3);
    // Two at 5 %: P(≤ 1 of 3) = 0.7 %.
    assert_eq!(tiny_flight_repairs(2, 0.05), 1);
}

/// A hole whose replacement is lost twice gets a margin copy beside its third
/// replacement, in a multipath session at a low loss rate only: a single path, or a lossy
/// one, keeps its wire.
#[test]
fn a_multipath_holes_second_lost_replacement_owes_a_margin_copy() {
    for (multipath, p, copies) in [(true, 0.05, 1), (false, 0.05, 0), (true, 0.2, 0)] {
        let mut t = Sender::new(0.0);
        t.send(100, 0.0);
        t.now += t.min_rtt * STARTUP_RTTS; // past start-up: no start-up margin
        t.p = p;
        t.s.on_ack(&AckSummary {
            deficit: 5,
            highest_seen: t.next,
            after: nothing(),
            first_source_after: None,
            quiet: false,
            p,
            unacked: t.unacked(),
            multipath,
        });
        t.lose_source(40);
        assert_eq!(t.drain().len(), 1);
        t.lose_repair(41, RepairOrigin::Debt);
        let again = t.drain();
        assert!(
            again.iter().all(|p| p.origin == RepairOrigin::Debt),
            "{again:?}"
        );
        t.lose_repair(41, RepairOrigin::Debt);
        let third = t.drain();
        let margins = third
            .iter()
            .filter(|p| p.origin == RepairOrigin::Margin && p.end == 41)
            .count();
        assert_eq!(margins, copies, "multipath {multipath}, p {p}: {third:?}");
        assert_eq!(third.len(), 1 + copies);
    }
}
