//! Where the p99 extra delay of coded datagrams comes from, and how low any code could take
//! it: an idealised model of issue 27's 2 Mbit/s cell, not our implementation.
//!
//! `cargo run --release --locked -p ctcp-benches --bin datagram-p99 [-- LOSS [COUNT [RUNS]]]`
//!
//! Datagrams leave one per slot (4.8 ms at 2 Mbit/s of 1,200 bytes); `r` repairs per
//! datagram go right behind them, spread evenly (the session's credit); every packet is
//! lost independently with probability `LOSS`. A repair sent after a loss is the only thing
//! that can recover it: a loss report takes a round trip (100 ms), longer than the 60 ms
//! target, so no feedback helps. Two receivers:
//!
//! - *dense*: the session's code. Every repair combines every datagram still held, so `k`
//!   outstanding losses need `k` received repairs and are all released together when the
//!   repairs catch up (the decoder's deficit returns to zero). A loss in a cluster waits for
//!   the whole cluster.
//! - *bound*: any code at all. A received repair carries one symbol's worth of information,
//!   so at most one loss sent before it can be recovered by it; the most losses recovered
//!   within `D` slots is the largest matching of losses to repairs received within `D`
//!   slots after them, which serving the oldest loss that can still make it reaches. The
//!   least `D` with at most 1 % of the datagrams later is a lower bound on any code's p99.
//!
//! For each `r` it prints the p99 (slots and ms) over `RUNS` runs of `COUNT` datagrams (the
//! simulator's 6,250; netbench's 20 s are 4,166): min / median / 90th percentile / max,
//! since a 30 s run's p99 rests on its 62 slowest datagrams and moves with the seed.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::VecDeque;

/// Milliseconds between datagrams: 1,200 bytes at 2 Mbit/s.
const SLOT_MS: f64 = 4.8;
/// Slots a loss is held for repair before it is given up (two deadlines of 75 ms).
const HOLD: u64 = 31;

/// Loss and repair arrivals of one run: for each slot, whether its datagram was lost and
/// how many of the repairs behind it arrived.
struct Trace {
    lost: Vec<bool>,
    repairs: Vec<u8>,
}

fn trace(ratio: f64, loss: f64, count: usize, seed: u64) -> Trace {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let (mut lost, mut repairs) = (Vec::with_capacity(count), Vec::with_capacity(count));
    let mut credit = 0.0f64;
    for _ in 0..count {
        lost.push(rng.gen_bool(loss));
        credit += ratio;
        let mut arrived = 0u8;
        while credit >= 1.0 {
            credit -= 1.0;
            if !rng.gen_bool(loss) {
                arrived += 1;
            }
        }
        repairs.push(arrived);
    }
    Trace { lost, repairs }
}

/// The 99th percentile (nearest rank) of the delays in slots, `u64::MAX` for never.
fn p99(mut delays: Vec<u64>) -> u64 {
    delays.sort_unstable();
    let i = ((delays.len().saturating_sub(1)) as f64 * 0.99).round() as usize;
    delays.get(i).copied().unwrap_or(0)
}

/// Delay in slots of every datagram under the dense code: received ones 0, lost ones the
/// slot at which the repairs received since the deficit was last zero cover every loss
/// still held.
fn dense(t: &Trace) -> Vec<u64> {
    let mut delays = Vec::with_capacity(t.lost.len());
    let mut outstanding: VecDeque<u64> = VecDeque::new();
    let mut held = 0usize;
    for (slot, (&lost, &arrived)) in t.lost.iter().zip(&t.repairs).enumerate() {
        let slot = slot as u64;
        if lost {
            outstanding.push_back(slot);
        } else {
            delays.push(0);
        }
        while outstanding.front().is_some_and(|&s| s + HOLD < slot) {
            outstanding.pop_front();
            held = held.saturating_sub(1);
            delays.push(u64::MAX);
        }
        if !outstanding.is_empty() {
            held += usize::from(arrived);
            if held >= outstanding.len() {
                delays.extend(outstanding.drain(..).map(|s| slot - s));
                held = 0;
            }
        }
    }
    delays.extend(outstanding.iter().map(|_| u64::MAX));
    delays
}

/// Datagrams later than `late` slots under the best possible assignment of received repairs
/// to earlier losses (each repair recovers one loss, the oldest that can still be on time).
fn late_at_best(t: &Trace, late: u64) -> usize {
    let mut waiting: VecDeque<u64> = VecDeque::new();
    let mut late_count = 0;
    for (slot, (&lost, &arrived)) in t.lost.iter().zip(&t.repairs).enumerate() {
        let slot = slot as u64;
        if lost {
            waiting.push_back(slot);
        }
        for _ in 0..arrived {
            while waiting.front().is_some_and(|&s| slot - s > late) {
                waiting.pop_front();
                late_count += 1;
            }
            if waiting.pop_front().is_none() {
                break;
            }
        }
    }
    late_count + waiting.len()
}

/// The least `D` (slots) with at most 1 % of the datagrams later under any code.
fn bound(t: &Trace) -> u64 {
    let allowed = t.lost.len() / 100;
    (0..=HOLD)
        .find(|&d| late_at_best(t, d) <= allowed)
        .unwrap_or(u64::MAX)
}

/// min / median / 90th percentile / max of the p99s, in slots and ms.
fn spread(mut v: Vec<u64>) -> String {
    v.sort_unstable();
    let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
    let f = |s: u64| {
        if s == u64::MAX {
            "never".to_string()
        } else {
            format!("{s} ({:.1} ms)", s as f64 * SLOT_MS)
        }
    };
    format!(
        "{} / {} / {} / {}",
        f(at(0.0)),
        f(at(0.5)),
        f(at(0.9)),
        f(at(1.0))
    )
}

fn main() {
    let mut args = std::env::args().skip(1);
    let loss: f64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(0.10);
    let count: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(6250);
    let runs: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(40);
    println!(
        "loss {:.0} %, {count} datagrams per run, {runs} runs; p99 in slots of {SLOT_MS} ms: \
         min / median / p90 / max over the runs",
        loss * 100.0
    );
    for ratio in [0.26, 0.28, 0.30, 0.31, 0.32, 0.34, 0.36, 0.40] {
        let traces: Vec<Trace> = (0..runs)
            .map(|s| trace(ratio, loss, count, 1000 + s))
            .collect();
        let d: Vec<u64> = traces.iter().map(|t| p99(dense(t))).collect();
        let b: Vec<u64> = traces.iter().map(bound).collect();
        println!("r {ratio:.2}  dense {}", spread(d));
        println!("        any code {}", spread(b));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(lost: &[u8], repairs: &[u8]) -> Trace {
        Trace {
            lost: lost.iter().map(|&l| l == 1).collect(),
            repairs: repairs.to_vec(),
        }
    }

    #[test]
    fn dense_releases_a_cluster_together_and_the_bound_one_by_one() {
        // Losses at slots 0 and 1, one repair arriving behind slot 2 and one behind slot 5.
        let tr = t(&[1, 1, 0, 0, 0, 0], &[0, 0, 1, 0, 0, 1]);
        let mut d = dense(&tr);
        d.sort_unstable();
        assert_eq!(d, vec![0, 0, 0, 0, 4, 5]);
        // Any code: slot 0 recovered at 2 (2 slots), slot 1 at 5 (4 slots).
        assert_eq!(late_at_best(&tr, 3), 1);
        assert_eq!(late_at_best(&tr, 4), 0);
    }

    #[test]
    fn no_loss_no_delay_and_more_repair_is_never_later() {
        assert_eq!(p99(dense(&trace(0.0, 0.0, 1000, 1))), 0);
        let few = p99(dense(&trace(0.25, 0.1, 20_000, 2)));
        let many = p99(dense(&trace(0.6, 0.1, 20_000, 2)));
        assert!(many <= few, "{many} > {few}");
        assert!(bound(&trace(0.3, 0.1, 20_000, 3)) <= p99(dense(&trace(0.3, 0.1, 20_000, 3))));
    }
}
