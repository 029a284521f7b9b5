//! The least repair any code needs for "p99 extra delivery delay ≤ ½ RTT at 5 % loss", and
//! the efficiency that leaves: an idealised model, not our implementation.
//!
//! `cargo run --release --locked -p ctcp-benches --bin p99-bound [-- LOSS]`
//!
//! Why feedback cannot help: a repair sent in answer to a loss report reaches the receiver
//! at the earliest one RTT after the lost packet would have (its loss is seen half an RTT
//! after it was sent, the report takes another half to reach the sender, the repair half
//! again), so its bytes, and every byte queued behind them for in-order delivery, are at
//! least one RTT late. Delay ≤ ½ RTT for 99 % of the bytes must therefore come from
//! repairs sent ahead of any report.
//!
//! The model is as generous as possible to such repairs: a 10 Mbit/s link of full
//! datagrams with no queue; source packets with a repair after every `1/r` of them, spread
//! evenly; independent loss of every packet with probability `p`; an ideal (MDS) sliding-
//! window code in which any repair fills any earlier hole, and bytes are delivered in order
//! the moment the holes before them are filled. For each RTT it searches the least repair
//! ratio `r` (repairs per source packet) that keeps the share of source packets delivered
//! more than ½ RTT late at or below 1 %, and prints the efficiency ceiling that ratio
//! leaves, `framing / ((1 + r)(1 − p))` with the 0.979 framing share of protocol v5 (the
//! sweep's definition: goodput over rate × (1 − p)), and the wire per goodput byte,
//! `(1 + r) / framing`, against design.md's budget `1.05 / (1 − p)`.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Link rate of the sweep, bit/s.
const RATE_BPS: f64 = 10e6;
/// A full datagram on the link, bytes (protocol v5 with a 1408-byte symbol).
const DATAGRAM: f64 = 1430.0;
/// Share of a full datagram that is stream payload (protocol v5).
const FRAMING: f64 = 0.979;
/// Source packets per trial.
const PACKETS: u64 = 4_000_000;

/// Share of source packets delivered more than `late_slots` packet times after they were
/// sent (beyond the one-way delay), with a repair after every `1/ratio` source packets and
/// every packet lost with probability `loss`.
fn late_share(ratio: f64, loss: f64, late_slots: f64, packets: u64, seed: u64) -> f64 {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    // Send slots of the source packets waiting behind a hole (received or not).
    let mut waiting: Vec<u64> = Vec::new();
    let (mut missing, mut held) = (0u64, 0u64);
    let (mut late, mut credit, mut slot) = (0u64, 0.0f64, 0u64);
    let mut deliver = |waiting: &mut Vec<u64>, now: u64| {
        late += waiting
            .iter()
            .filter(|&&sent| (now - sent) as f64 > late_slots)
            .count() as u64;
        waiting.clear();
    };
    for _ in 0..packets {
        // One source packet.
        let lost = rng.gen_bool(loss);
        if lost {
            missing += 1;
            waiting.push(slot);
        } else if missing > 0 {
            waiting.push(slot);
        }
        slot += 1;
        // The repairs due after it.
        credit += ratio;
        while credit >= 1.0 {
            credit -= 1.0;
            if !rng.gen_bool(loss) && missing > 0 {
                held += 1;
                if held >= missing {
                    deliver(&mut waiting, slot);
                    (missing, held) = (0, 0);
                }
            }
            slot += 1;
        }
    }
    // Whatever still waits at the end is late if it has waited long enough already.
    deliver(&mut waiting, slot + late_slots as u64 + 1);
    late as f64 / packets as f64
}

/// The least ratio (to 0.001) with a late share at or below `target`, searching up to 2.
fn least_ratio(loss: f64, late_slots: f64, target: f64) -> Option<f64> {
    let ok = |r: f64| late_share(r, loss, late_slots, PACKETS, 7) <= target;
    let (mut lo, mut hi) = (loss / (1.0 - loss), 2.0);
    if !ok(hi) {
        return None;
    }
    while hi - lo > 0.001 {
        let mid = (lo + hi) / 2.0;
        if ok(mid) {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    Some(hi)
}

fn main() {
    let loss: f64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(0.05);
    let slot_s = DATAGRAM * 8.0 / RATE_BPS;
    println!(
        "loss {:.1} %, {} source packets per trial, erasure minimum r = {:.4}",
        loss * 100.0,
        PACKETS,
        loss / (1.0 - loss)
    );
    println!(
        "{:>7} {:>12} {:>9} {:>16} {:>14} {:>8}",
        "RTT ms", "½RTT pkts", "least r", "max efficiency", "wire/goodput", "budget"
    );
    for rtt_ms in [20u64, 100, 500, 600] {
        let late_slots = rtt_ms as f64 / 2000.0 / slot_s;
        match least_ratio(loss, late_slots, 0.01) {
            Some(r) => println!(
                "{:>7} {:>12.1} {:>9.3} {:>16.3} {:>14.3} {:>8.3}",
                rtt_ms,
                late_slots,
                r,
                FRAMING / ((1.0 + r) * (1.0 - loss)),
                (1.0 + r) / FRAMING,
                1.05 / (1.0 - loss)
            ),
            None => println!("{rtt_ms:>7} {late_slots:>12.1}  no ratio up to 2 is enough"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::late_share;

    #[test]
    fn no_loss_is_never_late() {
        assert_eq!(late_share(0.0, 0.0, 1.0, 10_000, 1), 0.0);
    }

    #[test]
    fn loss_without_repair_holds_everything_behind_the_first_hole() {
        // The first loss comes within a few dozen packets; nothing after it is delivered.
        assert!(late_share(0.0, 0.05, 10.0, 10_000, 1) > 0.99);
    }

    #[test]
    fn more_repair_is_never_later_and_enough_repair_is_prompt() {
        let a = late_share(0.06, 0.05, 40.0, 200_000, 3);
        let b = late_share(0.2, 0.05, 40.0, 200_000, 3);
        let c = late_share(1.0, 0.05, 40.0, 200_000, 3);
        assert!(a >= b && b >= c, "{a} {b} {c}");
        assert!(c < 0.001, "a repair after every packet: {c}");
    }
}
