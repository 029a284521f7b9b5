//! `Link` in virtual time: one base `Instant`, everything else by adding
//! durations.

use std::time::{Duration, Instant};

use super::Link;
use crate::config::{GilbertElliott, JitterDist, LinkConfig};

const MS: Duration = Duration::from_millis(1);

fn link(config: LinkConfig) -> Link {
    Link::new(config).unwrap()
}

/// A packet of `len` bytes whose first 8 bytes are `id`.
fn packet(id: u64, len: usize) -> Vec<u8> {
    let mut p = vec![0u8; len.max(8)];
    p[..8].copy_from_slice(&id.to_be_bytes());
    p
}

fn id_of(p: &[u8]) -> u64 {
    u64::from_be_bytes(p[..8].try_into().unwrap())
}

/// Releases everything due up to `until`, at its exact release time.
fn drain(link: &mut Link, until: Instant) -> Vec<(Instant, Vec<u8>)> {
    let mut out = Vec::new();
    while let Some(at) = link.next_release() {
        if at > until {
            break;
        }
        while let Some(p) = link.poll(at) {
            out.push((at, p));
        }
    }
    out
}

/// Pushes `n` packets of `len` bytes, one every `gap`, releasing as it goes;
/// returns every release after draining.
fn run_spaced(
    link: &mut Link,
    t0: Instant,
    n: u64,
    len: usize,
    gap: Duration,
) -> Vec<(Instant, Vec<u8>)> {
    let mut out = Vec::new();
    let mut now = t0;
    for id in 0..n {
        out.extend(drain(link, now));
        link.push(now, packet(id, len));
        now += gap;
    }
    out.extend(drain(link, now + Duration::from_secs(3600)));
    out
}

/// Asserts `observed` is within `sigmas` standard deviations of a binomial
/// count with `n` trials and probability `p`.
fn assert_binomial(what: &str, observed: u64, n: u64, p: f64, sigmas: f64) {
    let mean = n as f64 * p;
    let sd = (n as f64 * p * (1.0 - p)).sqrt();
    assert!(
        (observed as f64 - mean).abs() <= sigmas * sd,
        "{what}: {observed} outside {mean:.1} ± {:.1}",
        sigmas * sd
    );
}

#[test]
fn delay_is_exact() {
    let t0 = crate::clock::now();
    let mut l = link(LinkConfig {
        delay: Duration::from_millis(250),
        ..LinkConfig::default()
    });
    l.push(t0, packet(1, 100));
    l.push(t0 + MS, packet(2, 100));
    assert_eq!(l.next_release(), Some(t0 + Duration::from_millis(250)));
    assert!(l
        .poll(t0 + Duration::from_millis(250) - Duration::from_nanos(1))
        .is_none());
    assert_eq!(id_of(&l.poll(t0 + Duration::from_millis(250)).unwrap()), 1);
    assert!(l.poll(t0 + Duration::from_millis(250)).is_none());
    assert_eq!(l.next_release(), Some(t0 + Duration::from_millis(251)));
    assert_eq!(id_of(&l.poll(t0 + Duration::from_secs(1)).unwrap()), 2);
    assert_eq!(l.next_release(), None);
    let c = l.counters();
    assert_eq!(
        (c.packets_in, c.delivered, c.bytes_in, c.bytes_delivered),
        (2, 2, 200, 200)
    );
}

#[test]
fn rate_drains_at_line_rate() {
    // 1500 B at 10 Mbit/s occupies the link for exactly 1.2 ms.
    let t0 = crate::clock::now();
    let n = 1000u64;
    let mut l = link(LinkConfig {
        rate_bps: Some(10_000_000),
        queue_bytes: 10_000_000,
        ..LinkConfig::default()
    });
    for id in 0..n {
        l.push(t0, packet(id, 1500));
    }
    assert_eq!(l.backlog(t0), n * 1500);
    let out = drain(&mut l, t0 + Duration::from_secs(60));
    assert_eq!(out.len() as u64, n);
    let last = out.last().unwrap().0 - t0;
    let ideal = Duration::from_micros(1200) * n as u32;
    let err = last.as_secs_f64() / ideal.as_secs_f64() - 1.0;
    assert!(err.abs() < 0.01, "drained in {last:?}, ideal {ideal:?}");
    // In fact exact, packet by packet, and in order.
    for (i, (at, p)) in out.iter().enumerate() {
        assert_eq!(*at - t0, Duration::from_micros(1200) * (i as u32 + 1));
        assert_eq!(id_of(p), i as u64);
    }
    assert_eq!(l.backlog(t0 + ideal), 0);
}

#[test]
fn rate_carries_rounding_so_long_runs_are_exact() {
    // 1500 B at 7 Mbit/s is 1.714285714... ms: the remainder must not drift.
    let t0 = crate::clock::now();
    let n = 7000u64;
    let mut l = link(LinkConfig {
        rate_bps: Some(7_000_000),
        queue_bytes: u64::MAX,
        ..LinkConfig::default()
    });
    for id in 0..n {
        l.push(t0, packet(id, 1500));
    }
    let out = drain(&mut l, t0 + Duration::from_secs(3600));
    // 7000 · 1500 · 8 / 7e6 = 12 s exactly.
    assert_eq!(out.last().unwrap().0 - t0, Duration::from_secs(12));
}

#[test]
fn rate_then_delay_composes() {
    let t0 = crate::clock::now();
    let mut l = link(LinkConfig {
        delay: Duration::from_millis(300),
        rate_bps: Some(100_000_000),
        ..LinkConfig::default()
    });
    l.push(t0, packet(0, 1250)); // 100 µs at 100 Mbit/s
    assert_eq!(l.next_release(), Some(t0 + Duration::from_micros(300_100)));
    // An idle link does not bank credit: a packet after a pause starts at once.
    let t1 = t0 + Duration::from_secs(1);
    l.push(t1, packet(1, 1250));
    let out = drain(&mut l, t1 + Duration::from_secs(1));
    assert_eq!(out[1].0, t1 + Duration::from_micros(300_100));
}

#[test]
fn queue_overflow_drops_the_excess_and_counts_it() {
    let t0 = crate::clock::now();
    let mut l = link(LinkConfig {
        rate_bps: Some(10_000_000),
        queue_bytes: 15_000, // ten 1500 B packets
        ..LinkConfig::default()
    });
    for id in 0..25 {
        l.push(t0, packet(id, 1500));
    }
    assert_eq!(l.counters().queue_drops, 15);
    assert_eq!(l.backlog(t0), 15_000);
    // Three packets leave in 3.6 ms; three more fit, the fourth does not.
    let t1 = t0 + Duration::from_micros(3600);
    for id in 100..104 {
        l.push(t1, packet(id, 1500));
    }
    assert_eq!(l.counters().queue_drops, 16);
    let out = drain(&mut l, t0 + Duration::from_secs(1));
    let ids: Vec<u64> = out.iter().map(|(_, p)| id_of(p)).collect();
    assert_eq!(ids, [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 100, 101, 102]);
    let c = l.counters();
    assert_eq!(c.packets_in, 29);
    assert_eq!(c.delivered, 13);
    assert_eq!(c.packets_in, c.delivered + c.queue_drops);
    // A packet larger than the whole queue is still accepted when the queue is empty.
    let mut tiny = link(LinkConfig {
        rate_bps: Some(1_000_000),
        queue_bytes: 100,
        ..LinkConfig::default()
    });
    tiny.push(t0, packet(0, 1500));
    tiny.push(t0, packet(1, 10));
    assert_eq!(tiny.counters().queue_drops, 1);
    assert_eq!(tiny.in_flight(), 1);
}

#[test]
fn bernoulli_loss_rate_is_binomial() {
    let t0 = crate::clock::now();
    let n = 100_000;
    let p = 0.05;
    let mut l = link(LinkConfig {
        loss: p,
        seed: 42,
        ..LinkConfig::default()
    });
    let out = run_spaced(&mut l, t0, n, 100, Duration::from_micros(10));
    let c = l.counters();
    assert_binomial("lost", c.lost, n, p, 4.0);
    assert_eq!(c.delivered + c.lost, n);
    assert_eq!(out.len() as u64, c.delivered);
}

#[test]
fn gilbert_elliott_mean_loss_and_burst_length() {
    let t0 = crate::clock::now();
    let n = 400_000u64;
    let ge = GilbertElliott::from_mean(0.05, 4.0).unwrap();
    let mut l = link(LinkConfig {
        gilbert_elliott: Some(ge),
        seed: 7,
        ..LinkConfig::default()
    });
    let out = run_spaced(&mut l, t0, n, 64, Duration::from_micros(10));
    let mut received = vec![false; n as usize];
    for (_, p) in &out {
        received[id_of(p) as usize] = true;
    }
    let lost = received.iter().filter(|r| !**r).count() as f64;
    let mut bursts = 0u64;
    let mut prev_lost = false;
    for r in &received {
        if !r && !prev_lost {
            bursts += 1;
        }
        prev_lost = !r;
    }
    let mean_loss = lost / n as f64;
    let mean_burst = lost / bursts as f64;
    // Loss of a Markov chain: variance inflated by (1 + λ)/(1 − λ), λ = 1 − p − r.
    let lambda = 1.0 - ge.p - ge.r;
    let sd_loss = (0.05 * 0.95 * (1.0 + lambda) / (1.0 - lambda) / n as f64).sqrt();
    assert!(
        (mean_loss - 0.05).abs() < 4.0 * sd_loss,
        "mean loss {mean_loss} (±{})",
        4.0 * sd_loss
    );
    // Burst lengths are geometric with mean 4 and sd sqrt(1 − r)/r.
    let sd_burst = (1.0 - ge.r).sqrt() / ge.r / (bursts as f64).sqrt();
    assert!(
        (mean_burst - 4.0).abs() < 4.0 * sd_burst,
        "mean burst {mean_burst} (±{})",
        4.0 * sd_burst
    );
    assert_eq!(l.counters().lost as f64, lost);
}

#[test]
fn gilbert_and_bernoulli_combine() {
    let t0 = crate::clock::now();
    let n = 100_000;
    let mut l = link(LinkConfig {
        loss: 0.02,
        gilbert_elliott: Some(GilbertElliott::from_transitions(0.0, 1.0).unwrap()),
        seed: 3,
        ..LinkConfig::default()
    });
    run_spaced(&mut l, t0, n, 64, Duration::from_micros(10));
    // A chain that never leaves the good state adds nothing.
    assert_binomial("lost", l.counters().lost, n, 0.02, 4.0);
}

#[test]
fn reordering_count_matches_probability() {
    let t0 = crate::clock::now();
    let n = 100_000;
    let p = 0.02;
    let mut l = link(LinkConfig {
        delay: Duration::from_millis(100),
        reorder: p,
        reorder_delay: Duration::from_millis(50),
        seed: 11,
        ..LinkConfig::default()
    });
    // One packet per ms: a held-back packet is overtaken by about 50 others.
    let out = run_spaced(&mut l, t0, n, 200, MS);
    assert_eq!(out.len() as u64, n);
    assert_binomial("reordered", l.counters().reordered, n, p, 4.0);
    // Every packet is either on time or exactly reorder_delay late.
    for (at, p) in &out {
        let sent = t0 + MS * id_of(p) as u32;
        let late = *at - sent;
        assert!(
            late == Duration::from_millis(100) || late == Duration::from_millis(150),
            "packet {} took {late:?}",
            id_of(p)
        );
    }
}

#[test]
fn duplication_sends_copies_right_after_the_original() {
    let t0 = crate::clock::now();
    let n = 100_000;
    let p = 0.1;
    let mut l = link(LinkConfig {
        delay: Duration::from_millis(10),
        duplicate: p,
        seed: 5,
        ..LinkConfig::default()
    });
    let out = run_spaced(&mut l, t0, n, 100, Duration::from_micros(100));
    let c = l.counters();
    assert_binomial("duplicated", c.duplicated, n, p, 4.0);
    assert_eq!(c.delivered, n + c.duplicated);
    assert_eq!(out.len() as u64, c.delivered);
    assert_eq!(c.reordered, 0, "a copy is not a reordering");
    let ids: Vec<u64> = out.iter().map(|(_, p)| id_of(p)).collect();
    let mut dedup = ids.clone();
    dedup.dedup();
    assert_eq!(dedup, (0..n).collect::<Vec<_>>(), "copies must be adjacent");
}

#[test]
fn jitter_without_reordering_keeps_fifo_order() {
    let t0 = crate::clock::now();
    let n = 20_000;
    let config = LinkConfig {
        delay: Duration::from_millis(50),
        jitter: Duration::from_millis(20),
        seed: 9,
        ..LinkConfig::default()
    };
    let mut fifo = link(config.clone());
    let out = run_spaced(&mut fifo, t0, n, 100, MS);
    let ids: Vec<u64> = out.iter().map(|(_, p)| id_of(p)).collect();
    assert_eq!(ids, (0..n).collect::<Vec<_>>());
    assert_eq!(fifo.counters().reordered, 0);
    for (at, p) in &out {
        let sent = t0 + MS * id_of(p) as u32;
        assert!(*at - sent >= Duration::from_millis(50));
    }
    // Jitter of 0–20 ms adds about 10 ms on average (a little more with
    // the FIFO floor).
    let mean_extra = out
        .iter()
        .map(|(at, p)| (*at - (t0 + MS * id_of(p) as u32)).as_secs_f64() - 0.05)
        .sum::<f64>()
        / n as f64;
    assert!(
        (0.009..0.016).contains(&mean_extra),
        "mean jitter {mean_extra}"
    );

    // The same jitter allowed to reorder does reorder.
    let mut loose = link(LinkConfig {
        jitter_reorder: true,
        ..config
    });
    run_spaced(&mut loose, t0, n, 100, MS);
    assert!(loose.counters().reordered > n / 10);
}

/// Mean and standard deviation of `xs`.
fn mean_sd(xs: &[f64]) -> (f64, f64) {
    let n = xs.len() as f64;
    let mean = xs.iter().sum::<f64>() / n;
    let var = xs.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / n;
    (mean, var.sqrt())
}

#[test]
fn normal_jitter_has_the_documented_mean_spread_and_tail() {
    // With reordering allowed each packet's extra delay is its own draw.
    let t0 = crate::clock::now();
    let n = 50_000;
    let j = 40.0; // ms
    let config = LinkConfig {
        delay: Duration::from_millis(100),
        jitter: Duration::from_millis(40),
        jitter_dist: JitterDist::Normal,
        jitter_reorder: true,
        seed: 21,
        ..LinkConfig::default()
    };
    let extra = |out: &[(Instant, Vec<u8>)]| -> Vec<f64> {
        out.iter()
            .map(|(at, p)| (*at - (t0 + MS * id_of(p) as u32)).as_secs_f64() * 1e3 - 100.0)
            .collect()
    };
    let mut l = link(config.clone());
    let xs = extra(&run_spaced(&mut l, t0, n, 100, MS));
    assert_eq!(xs.len() as u64, n);
    let (mean, sd) = mean_sd(&xs);
    // Mean J/2 (+0.2 % of J from the clip at 0), standard deviation J/4 (a
    // little less after the clip).
    assert!((mean - j / 2.0).abs() < 0.01 * j, "mean {mean} ms");
    assert!((sd - j / 4.0).abs() < 0.02 * j, "sd {sd} ms");
    assert!(xs.iter().all(|&x| x >= -1e-6), "clipped at 0");
    // Unbounded above: P(Z > 2) = 2.28 % of packets beyond J; none below 0
    // except the clipped 2.28 % exactly at 0.
    let beyond = xs.iter().filter(|&&x| x > j).count() as u64;
    assert_binomial("beyond J", beyond, n, 0.0228, 4.0);
    let at_zero = xs.iter().filter(|&&x| x < 1e-6).count() as u64;
    assert_binomial("clipped to 0", at_zero, n, 0.0228, 4.0);
    assert!(l.counters().reordered > n / 10);

    // The uniform draw of the same spread: same mean, wider core, no tail.
    let mut u = link(LinkConfig {
        jitter_dist: JitterDist::Uniform,
        ..config.clone()
    });
    let us = extra(&run_spaced(&mut u, t0, n, 100, MS));
    let (umean, usd) = mean_sd(&us);
    assert!(
        (umean - j / 2.0).abs() < 0.01 * j,
        "uniform mean {umean} ms"
    );
    assert!(
        (usd - j / 12f64.sqrt()).abs() < 0.01 * j,
        "uniform sd {usd} ms"
    );
    assert!(us.iter().all(|&x| (-1e-6..=j + 1e-6).contains(&x)));

    // Without reordering, normal jitter keeps FIFO order like the uniform one.
    let mut fifo = link(LinkConfig {
        jitter_reorder: false,
        ..config
    });
    let out = run_spaced(&mut fifo, t0, n, 100, MS);
    let ids: Vec<u64> = out.iter().map(|(_, p)| id_of(p)).collect();
    assert_eq!(ids, (0..n).collect::<Vec<_>>());
    assert_eq!(fifo.counters().reordered, 0);
}

fn everything(seed: u64) -> LinkConfig {
    LinkConfig {
        delay: Duration::from_millis(20),
        jitter: Duration::from_millis(5),
        jitter_dist: JitterDist::Uniform,
        jitter_reorder: true,
        rate_bps: Some(5_000_000),
        queue_bytes: 30_000,
        loss: 0.03,
        gilbert_elliott: Some(GilbertElliott::from_mean(0.02, 3.0).unwrap()),
        reorder: 0.05,
        reorder_delay: Duration::from_millis(7),
        duplicate: 0.02,
        seed,
    }
}

#[test]
fn same_seed_gives_identical_output() {
    let t0 = crate::clock::now();
    let run = |seed| {
        let mut l = link(everything(seed));
        // Faster than the link, so the queue also overflows.
        let out = run_spaced(&mut l, t0, 20_000, 1000, Duration::from_micros(1500));
        let trace: Vec<(Duration, u64)> = out.iter().map(|(at, p)| (*at - t0, id_of(p))).collect();
        (trace, l.counters())
    };
    let (a, ca) = run(1);
    let (b, cb) = run(1);
    assert_eq!(a, b);
    assert_eq!(ca, cb);
    assert!(ca.lost > 0 && ca.queue_drops > 0 && ca.duplicated > 0 && ca.reordered > 0);
    let (c, _) = run(2);
    assert_ne!(a, c, "a different seed should make different choices");
}

#[test]
fn counters_balance() {
    let t0 = crate::clock::now();
    let mut l = link(everything(77));
    let out = run_spaced(&mut l, t0, 50_000, 800, Duration::from_micros(1000));
    let c = l.counters();
    assert_eq!(l.in_flight(), 0);
    assert_eq!(
        c.packets_in + c.duplicated,
        c.delivered + c.lost + c.queue_drops
    );
    assert_eq!(
        c.bytes_delivered,
        out.iter().map(|(_, p)| p.len() as u64).sum::<u64>()
    );
    assert_eq!(c.bytes_in, 50_000 * 800);
}

#[test]
fn hundred_megabit_with_thousands_in_flight_at_600ms_rtt() {
    // 2 s of line-rate 1500 B packets at 100 Mbit/s into a 300 ms one-way
    // link: ~3,300 packets in flight, each released exactly at
    // serialisation end + 300 ms.
    let t0 = crate::clock::now();
    let mut l = link(LinkConfig {
        delay: Duration::from_millis(300),
        rate_bps: Some(100_000_000),
        queue_bytes: 1_000_000,
        ..LinkConfig::default()
    });
    let tx = Duration::from_micros(120);
    let n = 16_667u64;
    let mut released = Vec::new();
    let mut max_in_flight = 0;
    for id in 0..n {
        let now = t0 + tx * id as u32;
        released.extend(drain(&mut l, now));
        l.push(now, packet(id, 1500));
        max_in_flight = max_in_flight.max(l.in_flight());
    }
    released.extend(drain(&mut l, t0 + Duration::from_secs(10)));
    assert!(max_in_flight > 2_000, "only {max_in_flight} in flight");
    assert_eq!(released.len() as u64, n);
    for (at, p) in &released {
        let id = id_of(p);
        assert_eq!(*at - t0, tx * (id as u32 + 1) + Duration::from_millis(300));
    }
    let c = l.counters();
    assert_eq!((c.queue_drops, c.lost, c.reordered), (0, 0, 0));
    // Delivered bits over the delivery span: the configured rate.
    let span = released.last().unwrap().0 - released[0].0;
    let rate = (n - 1) as f64 * 1500.0 * 8.0 / span.as_secs_f64();
    assert!((rate / 1e8 - 1.0).abs() < 0.001, "rate {rate}");
}

/// A cut link loses what is on it and everything pushed until it is restored; restored,
/// it carries packets again with the same delay, and the counters account for every packet.
#[test]
fn down_loses_everything_in_flight_and_pushed_until_restored() {
    let t0 = crate::clock::now();
    let mut l = link(LinkConfig {
        delay: 50 * MS,
        rate_bps: Some(10_000_000),
        ..LinkConfig::default()
    });
    for id in 0..10 {
        l.push(t0 + MS * id as u32, packet(id, 1000));
    }
    let early = drain(&mut l, t0 + 30 * MS);
    assert!(early.is_empty(), "nothing is due before the delay");
    l.set_down(true);
    assert!(l.is_down());
    assert_eq!(l.in_flight(), 0, "the cut loses what was in flight");
    assert_eq!(l.backlog(t0 + 30 * MS), 0);
    for id in 10..20 {
        l.push(t0 + MS * (30 + id as u32), packet(id, 1000));
    }
    assert!(drain(&mut l, t0 + Duration::from_secs(1)).is_empty());
    l.set_down(true); // idempotent: nothing more is counted
    assert_eq!(l.counters().down_drops, 20);

    l.set_down(false);
    let back = t0 + Duration::from_secs(2);
    l.push(back, packet(99, 1000));
    let out = drain(&mut l, back + Duration::from_secs(1));
    assert_eq!(out.len(), 1);
    // 0.8 ms to serialise 1000 bytes at 10 Mbit/s, then the 50 ms delay.
    assert_eq!(out[0].0 - back, Duration::from_micros(50_800));
    assert_eq!(id_of(&out[0].1), 99);
    let c = l.counters();
    assert_eq!(c.packets_in, 21);
    assert_eq!(
        c.packets_in,
        c.delivered + c.lost + c.queue_drops + c.down_drops
    );
}
