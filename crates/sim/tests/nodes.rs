//! Behaviour of each link node, driven directly on virtual time.

#![allow(clippy::unwrap_used)] // test helpers, not only #[test] fns

use std::time::{Duration, Instant};

use ctcp_sim::{
    Bernoulli, Corrupt, Delay, Duplicate, GilbertElliott, Jitter, Mtu, Node, Packet, Rate, Reorder,
    Seed, SimRng,
};
use rand::SeedableRng;

fn epoch() -> Instant {
    #[allow(clippy::disallowed_methods)] // tests need some epoch; only offsets matter
    Instant::now()
}

fn rng(seed: Seed) -> SimRng {
    SimRng::seed_from_u64(seed.0)
}

/// Push `pushes` (time, packet) in order and pop everything; returns
/// (release time, packet) in release order.
fn run(
    node: &mut dyn Node,
    rng: &mut SimRng,
    pushes: Vec<(Instant, Packet)>,
) -> Vec<(Instant, Packet)> {
    let mut out = Vec::new();
    let mut pushes = pushes.into_iter().peekable();
    loop {
        let next_push = pushes.peek().map(|(t, _)| *t);
        let next_pop = node.next_event();
        match (next_push, next_pop) {
            (Some(tp), Some(to)) if to < tp => {
                while let Some(p) = node.pop(to) {
                    out.push((to, p));
                }
            }
            (Some(tp), _) => {
                let (_, p) = pushes.next().unwrap();
                node.push(tp, p, rng);
            }
            (None, Some(to)) => {
                while let Some(p) = node.pop(to) {
                    out.push((to, p));
                }
            }
            (None, None) => break,
        }
    }
    out
}

fn packets(t0: Instant, n: usize, size: usize, gap: Duration) -> Vec<(Instant, Packet)> {
    (0..n)
        .map(|i| {
            let t = t0 + gap * i as u32;
            let mut data = vec![0u8; size];
            data[..8.min(size)].copy_from_slice(&(i as u64).to_le_bytes()[..8.min(size)]);
            (t, Packet::new(data, i as u64, t))
        })
        .collect()
}

fn inversions(out: &[(Instant, Packet)]) -> usize {
    out.windows(2).filter(|w| w[1].1.id < w[0].1.id).count()
}

#[test]
fn delay_is_exact_and_fifo() {
    let t0 = epoch();
    let d = Duration::from_micros(123_457);
    let mut node = Delay::new(d);
    let out = run(
        &mut node,
        &mut rng(Seed(1)),
        packets(t0, 100, 100, Duration::from_micros(10)),
    );
    assert_eq!(out.len(), 100);
    for (i, (t, p)) in out.iter().enumerate() {
        assert_eq!(p.id, i as u64);
        assert_eq!(*t, p.sent_at + d);
    }
    let s = node.stats();
    assert_eq!(
        (s.packets_in, s.packets_out, s.packets_dropped),
        (100, 100, 0)
    );
    assert_eq!((s.bytes_in, s.bytes_out), (10_000, 10_000));
}

#[test]
fn rate_serialises_at_line_rate() {
    let t0 = epoch();
    // 1250 B at 10 Mbit/s = 1 ms each; 1500 B = 1.2 ms.
    for (size, spacing) in [
        (1250usize, 1_000_000u64),
        (1500, 1_200_000),
        (1000, 800_000),
    ] {
        let mut node = Rate::new(10_000_000, 1_000_000);
        let out = run(
            &mut node,
            &mut rng(Seed(1)),
            packets(t0, 50, size, Duration::ZERO),
        );
        assert_eq!(out.len(), 50);
        for (k, (t, p)) in out.iter().enumerate() {
            assert_eq!(p.id, k as u64);
            assert_eq!(
                *t - t0,
                Duration::from_nanos(spacing * (k as u64 + 1)),
                "size {size} packet {k}"
            );
        }
    }
    // Remainders carry: 7 B at 3 bit/s-scale rates stay exact over a run.
    let mut node = Rate::new(3_000_000, 1_000_000);
    let out = run(
        &mut node,
        &mut rng(Seed(1)),
        packets(t0, 3000, 1, Duration::ZERO),
    );
    // 3000 bytes = 24000 bits at 3 Mbit/s = 8 ms exactly.
    assert_eq!(out.last().unwrap().0 - t0, Duration::from_millis(8));
}

#[test]
fn rate_idle_link_sends_at_once_and_queue_overflow_drops() {
    let t0 = epoch();
    // Spaced wider than serialisation: no queueing.
    let mut node = Rate::new(10_000_000, 5000);
    let out = run(
        &mut node,
        &mut rng(Seed(1)),
        packets(t0, 10, 1250, Duration::from_millis(5)),
    );
    for (t, p) in &out {
        assert_eq!(*t - p.sent_at, Duration::from_millis(1));
    }
    // Burst of 10 × 1250 B into a 5000 B queue: 4 fit, 6 are dropped.
    let mut node = Rate::new(10_000_000, 5000);
    let out = run(
        &mut node,
        &mut rng(Seed(1)),
        packets(t0, 10, 1250, Duration::ZERO),
    );
    assert_eq!(out.len(), 4);
    let s = node.stats();
    assert_eq!(s.packets_dropped, 6);
    assert_eq!(s.bytes_dropped, 6 * 1250);
    assert_eq!(s.packets_out, 4);
    assert_eq!(node.backlog(), 0);
}

#[test]
fn rate_queue_drains_and_accepts_again() {
    let t0 = epoch();
    // Offered 20 Mbit/s into 10 Mbit/s with a 10-packet queue: about half
    // of the packets are dropped in steady state, and the output is
    // back-to-back at line rate.
    let mut node = Rate::new(10_000_000, 12_500);
    let n = 10_000;
    let out = run(
        &mut node,
        &mut rng(Seed(1)),
        packets(t0, n, 1250, Duration::from_micros(500)),
    );
    let s = node.stats();
    assert_eq!(s.packets_in, n as u64);
    assert_eq!(s.packets_out + s.packets_dropped, n as u64);
    let frac = s.packets_out as f64 / n as f64;
    assert!((0.49..0.52).contains(&frac), "delivered fraction {frac}");
    for w in out[20..].windows(2) {
        assert_eq!(w[1].0 - w[0].0, Duration::from_millis(1));
    }
}

/// |k - np| within 5 standard deviations.
fn assert_binomial(k: u64, n: u64, p: f64, what: &str) {
    let mean = n as f64 * p;
    let sd = (n as f64 * p * (1.0 - p)).sqrt();
    assert!(
        (k as f64 - mean).abs() <= 5.0 * sd,
        "{what}: {k} of {n}, expected {mean:.0} ± {:.0}",
        5.0 * sd
    );
}

#[test]
fn bernoulli_loss_rate_in_confidence_interval() {
    let t0 = epoch();
    let seed = Seed::from_env_or(7);
    for p in [0.0, 0.01, 0.1, 0.3, 1.0] {
        let mut node = Bernoulli::new(p);
        let n = 100_000u64;
        let out = run(
            &mut node,
            &mut rng(seed),
            packets(t0, n as usize, 10, Duration::from_micros(1)),
        );
        let dropped = node.stats().packets_dropped;
        assert_eq!(out.len() as u64 + dropped, n);
        assert_binomial(dropped, n, p, &format!("bernoulli({p})"));
        // Surviving packets leave at once, in order.
        assert_eq!(inversions(&out), 0);
        assert!(out.iter().all(|(t, p)| *t == p.sent_at));
    }
}

#[test]
fn gilbert_mean_loss_and_burst_length() {
    let t0 = epoch();
    let seed = Seed::from_env_or(11);
    for (mean, burst) in [(0.05, 4.0), (0.2, 2.0), (0.01, 10.0)] {
        let mut node = GilbertElliott::from_mean_burst(mean, burst);
        let n = 400_000usize;
        let out = run(
            &mut node,
            &mut rng(seed),
            packets(t0, n, 10, Duration::from_micros(1)),
        );
        // Reconstruct loss runs from the surviving ids.
        let mut lost = vec![true; n];
        for (_, p) in &out {
            lost[p.id as usize] = false;
        }
        let losses = lost.iter().filter(|&&l| l).count();
        let mut bursts = 0usize;
        for i in 0..n {
            if lost[i] && (i == 0 || !lost[i - 1]) {
                bursts += 1;
            }
        }
        let loss_rate = losses as f64 / n as f64;
        let mean_burst = losses as f64 / bursts as f64;
        assert!(
            (loss_rate - mean).abs() <= 0.1 * mean,
            "gilbert({mean}, {burst}): loss rate {loss_rate}"
        );
        assert!(
            (mean_burst - burst).abs() <= 0.1 * burst,
            "gilbert({mean}, {burst}): mean burst {mean_burst}"
        );
        assert_eq!(node.stats().packets_dropped as usize, losses);
    }
}

#[test]
fn reorder_rate_and_displacement() {
    let t0 = epoch();
    let seed = Seed::from_env_or(3);
    let (prob, extra) = (0.05, Duration::from_millis(10));
    let mut node = Reorder::new(prob, extra);
    let n = 100_000u64;
    // One packet per ms: a held-back packet is overtaken by about 10.
    let out = run(
        &mut node,
        &mut rng(seed),
        packets(t0, n as usize, 10, Duration::from_millis(1)),
    );
    assert_eq!(out.len() as u64, n);
    let held = node.stats().reordered;
    assert_binomial(held, n, prob, "reorder");
    let mut late = 0;
    for (t, p) in &out {
        let d = *t - p.sent_at;
        assert!(d == Duration::ZERO || d == extra);
        if d == extra {
            late += 1;
        }
    }
    assert_eq!(late, held);
    assert!(inversions(&out) > 0);
}

#[test]
fn duplicate_rate() {
    let t0 = epoch();
    let seed = Seed::from_env_or(5);
    let p = 0.02;
    let mut node = Duplicate::new(p);
    let n = 100_000u64;
    let out = run(
        &mut node,
        &mut rng(seed),
        packets(t0, n as usize, 10, Duration::from_micros(1)),
    );
    let dups = out.len() as u64 - n;
    assert_eq!(dups, node.stats().duplicated);
    assert_binomial(dups, n, p, "duplicate");
    // Copies are identical and adjacent.
    for w in out.windows(2) {
        if w[0].1.id == w[1].1.id {
            assert_eq!(w[0].1.data, w[1].1.data);
        }
    }
}

#[test]
fn corrupt_rate_flips_exactly_one_bit() {
    let t0 = epoch();
    let seed = Seed::from_env_or(9);
    let p = 0.03;
    let mut node = Corrupt::new(p);
    let n = 100_000u64;
    let input = packets(t0, n as usize, 64, Duration::from_micros(1));
    let originals: Vec<Vec<u8>> = input.iter().map(|(_, p)| p.data.clone()).collect();
    let out = run(&mut node, &mut rng(seed), input);
    assert_eq!(out.len() as u64, n);
    let mut corrupted = 0u64;
    for (_, pkt) in &out {
        let orig = &originals[pkt.id as usize];
        let bits: u32 = orig
            .iter()
            .zip(&pkt.data)
            .map(|(a, b)| (a ^ b).count_ones())
            .sum();
        assert!(bits <= 1);
        corrupted += u64::from(bits);
    }
    assert_eq!(corrupted, node.stats().corrupted);
    assert_binomial(corrupted, n, p, "corrupt");
}

#[test]
fn mtu_drops_oversize() {
    let t0 = epoch();
    let mut node = Mtu::new(1200);
    let mut input = Vec::new();
    for (i, size) in [100usize, 1200, 1201, 1500, 0].into_iter().enumerate() {
        input.push((t0, Packet::new(vec![0; size], i as u64, t0)));
    }
    let out = run(&mut node, &mut rng(Seed(0)), input);
    let ids: Vec<u64> = out.iter().map(|(_, p)| p.id).collect();
    assert_eq!(ids, vec![0, 1, 4]);
    assert_eq!(node.stats().packets_dropped, 2);
    assert_eq!(node.stats().bytes_dropped, 2701);
}

#[test]
fn jitter_bounds_and_ordering() {
    let t0 = epoch();
    let max = Duration::from_millis(20);
    let input = || packets(t0, 10_000, 10, Duration::from_millis(1));
    let mut keep = Jitter::new(max, false);
    let out = run(&mut keep, &mut rng(Seed(2)), input());
    assert_eq!(out.len(), 10_000);
    assert_eq!(inversions(&out), 0);
    let mut any_delay = false;
    for (t, p) in &out {
        let d = *t - p.sent_at;
        // Held behind a predecessor can exceed max only by the gap chain;
        // never by more than max since predecessors were sent earlier.
        assert!(d <= max, "delay {d:?}");
        any_delay |= d > Duration::ZERO;
    }
    assert!(any_delay);
    let mut shuffle = Jitter::new(max, true);
    let out = run(&mut shuffle, &mut rng(Seed(2)), input());
    assert!(inversions(&out) > 1000);
    assert!(out.iter().all(|(t, p)| *t - p.sent_at <= max));
}

#[test]
fn nodes_are_deterministic_per_seed() {
    let t0 = epoch();
    let trace = |seed: u64| {
        let mut node = GilbertElliott::new(0.01, 0.3, 0.001, 0.6);
        run(
            &mut node,
            &mut rng(Seed(seed)),
            packets(t0, 10_000, 10, Duration::from_micros(10)),
        )
        .into_iter()
        .map(|(_, p)| p.id)
        .collect::<Vec<_>>()
    };
    assert_eq!(trace(1), trace(1));
    assert_ne!(trace(1), trace(2));
}
