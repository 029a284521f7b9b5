//! A recoding relay against a terminating relay on the same chains (issue 28, seed 001):
//! a slot model with the real codec (`ctcp-rlnc`'s `Encoder`, `Decoder`, `Recoder`), not
//! the transport. See `docs/recoding.md`.
//!
//! `cargo run --release --locked -p ctcp-benches --bin recode-model [-- --json]`
//!
//! Every link carries one packet per slot each way, delays `delay` slots one way and
//! loses each data packet with probability `loss` (feedback is lossless). The application
//! at the origin offers one source symbol every `1/load` slots. Each hop's sender sends,
//! per slot, the first of: a reactive repair it owes; the next packet to forward; a
//! proactive repair once its credit (`ratio` per packet forwarded, `ratio` =
//! 1.1 · loss / (1 − loss)) reaches one. Reactive: when a receiver's ACK (every slot,
//! `delay` old) shows a deficit and no reactive batch went out in the last round trip,
//! the sender owes ⌈deficit / (1 − loss)⌉ repairs (Ha & Tsuru's NCwER, as in ctcp), or
//! what it still owes if more.
//!
//! - **terminating** relay: decodes the previous hop, reads the symbols **in order** (a
//!   stream), and feeds each to its own encoder for the next hop (ctcp today);
//! - **recoding** relay: tracks rank with a decoder, holds everything in a `Recoder`,
//!   forwards each new source symbol at once, replaces each repair that raised its rank
//!   by a fresh recoded one, and adds recoded repairs for the next hop's loss; one coding
//!   window end to end, feedback per hop (the origin retires what the relay has decoded;
//!   the relay retires what the end has). `recoding-all` passes on a recode for every
//!   repair received, innovative or not (more wire, no faster).
//!
//! Reported per run: goodput (symbols delivered in order per slot), extra delay of each
//! symbol (in-order delivery − generation − the chain's propagation delay) at p50 / p90 /
//! p99, packets per delivered symbol per hop, and for recoding the mean length of the
//! explicit coefficient vectors the recoded repairs carry.

use ctcp_rlnc::{CodecConfig, Decoder, Encoder, Received, Recoder, RepairHeader, SymbolId};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::{HashMap, VecDeque};

const SYMBOL: usize = 64;

#[derive(Clone)]
enum Pkt {
    Source(SymbolId, Vec<u8>),
    Repair(RepairHeader, Vec<u8>),
}

/// A one-way link: packets in flight with their arrival slot.
struct Line {
    q: VecDeque<(u64, Pkt)>,
}

/// What a hop's sender holds.
enum Tx {
    /// An encoder (the origin, or a terminating relay) with symbols still to send.
    Enc {
        enc: Encoder,
        pending: VecDeque<SymbolId>,
        /// One past the newest source sent: repairs cover only what was sent.
        sent_end: SymbolId,
    },
    /// A recoding relay: packets to forward and the rows it holds.
    Rec {
        rec: Recoder,
        forward: VecDeque<Pkt>,
    },
}

struct Hop {
    tx: Tx,
    line: Line,
    /// Receiver statuses on their way back: (arrival slot, deficit, next in order).
    acks: VecDeque<(u64, u32, SymbolId)>,
    rx: Decoder,
    /// Decoded symbols not yet read in order (terminating relays and the end).
    decoded: HashMap<SymbolId, Vec<u8>>,
    /// Next symbol to read in order from `rx`.
    read_next: SymbolId,
    credit: f64,
    owed: u64,
    last_reactive: Option<u64>,
    sent: u64,
    explicit_coefs: u64,
    recoded: u64,
}

struct Spec {
    hops: usize,
    loss: f64,
    delay: u64,
    load: f64,
    symbols: u64,
    recoding: bool,
    /// A recoding relay forwards only what raised its rank.
    innovative_only: bool,
    seed: u64,
}

struct Outcome {
    goodput: f64,
    p50: f64,
    p90: f64,
    p99: f64,
    per_hop_sent: Vec<f64>,
    mean_coefs: f64,
}

fn cfg() -> CodecConfig {
    CodecConfig {
        symbol_size: SYMBOL,
        window: 16_384,
    }
}

fn payload(id: SymbolId) -> Vec<u8> {
    let mut p = vec![0u8; SYMBOL - 2];
    p[..8].copy_from_slice(&id.to_le_bytes());
    p
}

impl Hop {
    fn new(recoding: bool, seed: u32) -> Self {
        let tx = if recoding {
            Tx::Rec {
                rec: Recoder::new(cfg(), seed),
                forward: VecDeque::new(),
            }
        } else {
            Tx::Enc {
                enc: Encoder::new(cfg()),
                pending: VecDeque::new(),
                sent_end: 0,
            }
        };
        Hop {
            tx,
            line: Line { q: VecDeque::new() },
            acks: VecDeque::new(),
            rx: Decoder::new(cfg()),
            decoded: HashMap::new(),
            read_next: 0,
            credit: 0.0,
            owed: 0,
            last_reactive: None,
            sent: 0,
            explicit_coefs: 0,
            recoded: 0,
        }
    }

    /// A repair from what the sender holds, if it holds anything.
    fn repair(&mut self) -> Option<Pkt> {
        let mut out = vec![0u8; SYMBOL];
        match &mut self.tx {
            Tx::Enc { enc, sent_end, .. } => {
                let first = enc.first_id();
                let count = u16::try_from(sent_end.checked_sub(first)?).ok()?;
                let h = enc.repair(first, count, &mut out).ok()?;
                Some(Pkt::Repair(h, out))
            }
            Tx::Rec { rec, .. } => {
                let h = rec.recode(&mut out)?;
                self.explicit_coefs += u64::from(h.count);
                self.recoded += 1;
                Some(Pkt::Repair(h, out))
            }
        }
    }

    /// The packet this hop's sender puts on its link in this slot, if any.
    fn next_packet(&mut self, ratio: f64) -> Option<Pkt> {
        if self.owed > 0 {
            if let Some(p) = self.repair() {
                self.owed -= 1;
                return Some(p);
            }
            self.owed = 0;
        }
        if self.credit >= 1.0 {
            if let Some(p) = self.repair() {
                self.credit -= 1.0;
                return Some(p);
            }
        }
        let fresh = match &mut self.tx {
            Tx::Enc {
                enc,
                pending,
                sent_end,
            } => pending.pop_front().map(|id| {
                debug_assert!(enc.source(id).is_some());
                *sent_end = id + 1;
                Pkt::Source(id, payload(id))
            }),
            Tx::Rec { forward, .. } => forward.pop_front(),
        };
        let p = match fresh {
            // A repair received is replaced by a fresh recoded one.
            Some(Pkt::Repair(..)) => self.repair(),
            other => other,
        }?;
        self.credit += ratio;
        Some(p)
    }
}

fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted[i]
}

fn run(s: &Spec) -> Outcome {
    let mut rng = ChaCha8Rng::seed_from_u64(s.seed);
    let ratio = 1.1 * s.loss / (1.0 - s.loss);
    let rtt = 2 * s.delay + 2;
    // Hop 0's sender is the origin (always an encoder); later hops' senders are relays.
    let mut hops: Vec<Hop> = (0..s.hops)
        .map(|i| Hop::new(s.recoding && i > 0, 1000 + i as u32))
        .collect();
    let mut gen_at: Vec<u64> = Vec::new();
    let mut delivered_at: Vec<u64> = Vec::new();
    let mut offered = 0u64;
    let mut t = 0u64;
    let limit = (s.symbols as f64 / s.load) as u64 * 4 + 100_000;
    while (delivered_at.len() as u64) < s.symbols && t < limit {
        // The application.
        while offered < s.symbols && (offered as f64) <= t as f64 * s.load {
            if let Tx::Enc { enc, pending, .. } = &mut hops[0].tx {
                if enc.is_full() {
                    break;
                }
                let Ok(id) = enc.push(&payload(offered)) else {
                    break;
                };
                pending.push_back(id);
                gen_at.push(t);
                offered += 1;
            }
        }
        // Senders.
        for h in &mut hops {
            if let Some(p) = h.next_packet(ratio) {
                h.sent += 1;
                if !rng.gen_bool(s.loss) {
                    h.line.q.push_back((t + s.delay, p));
                }
            }
        }
        // Arrivals, in hop order (a relay forwards what arrived in the same slot next
        // slot, through its queue).
        for i in 0..hops.len() {
            while hops[i].line.q.front().is_some_and(|(at, _)| *at <= t) {
                let Some((_, p)) = hops[i].line.q.pop_front() else {
                    break;
                };
                let next_is_recoder = s.recoding && i + 1 < hops.len();
                let got = match &p {
                    Pkt::Source(id, data) => hops[i].rx.receive_source(*id, data),
                    Pkt::Repair(hd, data) => hops[i].rx.receive_repair(hd, data),
                };
                // A recoding relay passes on one packet per degree of freedom it gained
                // (`innovative_only`), or one per packet it received.
                let innovative = matches!(got, Ok(Received::New));
                if next_is_recoder && (innovative || !s.innovative_only) {
                    if let Tx::Rec { rec, forward } = &mut hops[i + 1].tx {
                        match &p {
                            Pkt::Source(id, data) => {
                                let _ = rec.add_source(*id, data);
                            }
                            Pkt::Repair(hd, data) => {
                                let _ = rec.add_repair(hd, data);
                            }
                        }
                        forward.push_back(p);
                    }
                }
            }
            // Decoded symbols; read in order where the node is a terminating relay or the
            // end.
            let hop = &mut hops[i];
            while let Some((id, data)) = hop.rx.poll_decoded() {
                hop.decoded.insert(id, data.to_vec());
            }
            let nio = hops[i].rx.next_in_order();
            hops[i].rx.retire_below(nio.saturating_sub(4096));
            let last = i + 1 == hops.len();
            while hops[i].read_next < nio {
                // A terminating relay reads on only while its next hop's encoder has room
                // (back-pressure).
                if !last && !s.recoding {
                    if let Tx::Enc { enc, .. } = &hops[i + 1].tx {
                        if enc.is_full() {
                            break;
                        }
                    }
                }
                let id = hops[i].read_next;
                hops[i].read_next += 1;
                let data = hops[i].decoded.remove(&id);
                if last {
                    delivered_at.push(t);
                } else if !s.recoding {
                    if let (Tx::Enc { enc, pending, .. }, Some(d)) = (&mut hops[i + 1].tx, data) {
                        if let Ok(nid) = enc.push(&d[..SYMBOL - 2]) {
                            debug_assert_eq!(nid, id);
                            pending.push_back(nid);
                        }
                    }
                }
            }
            let st = hops[i].rx.status();
            hops[i]
                .acks
                .push_back((t + s.delay, st.deficit, st.next_in_order));
        }
        // Feedback.
        for h in &mut hops {
            while h.acks.front().is_some_and(|(at, ..)| *at <= t) {
                let Some((_, deficit, nio)) = h.acks.pop_front() else {
                    break;
                };
                match &mut h.tx {
                    Tx::Enc { enc, .. } => {
                        if nio > 0 {
                            enc.retire_through(nio - 1);
                        }
                    }
                    Tx::Rec { rec, .. } => rec.retire_below(nio),
                }
                if deficit > 0 && h.last_reactive.is_none_or(|l| t >= l + rtt) {
                    // Owed, not added to what is still owed: a batch not yet sent covers
                    // the same holes.
                    h.owed = h
                        .owed
                        .max((f64::from(deficit) / (1.0 - s.loss)).ceil() as u64);
                    h.last_reactive = Some(t);
                }
            }
        }
        t += 1;
    }
    let prop = s.delay * s.hops as u64;
    let mut delays: Vec<f64> = delivered_at
        .iter()
        .zip(&gen_at)
        .map(|(d, g)| d.saturating_sub(*g + prop) as f64)
        .collect();
    delays.sort_by(f64::total_cmp);
    let n = delivered_at.len() as f64;
    let span = delivered_at.last().copied().unwrap_or(1).max(1) as f64;
    let rec: u64 = hops.iter().map(|h| h.recoded).sum();
    Outcome {
        goodput: n / span,
        p50: quantile(&delays, 0.5),
        p90: quantile(&delays, 0.9),
        p99: quantile(&delays, 0.99),
        per_hop_sent: hops.iter().map(|h| h.sent as f64 / n.max(1.0)).collect(),
        mean_coefs: hops.iter().map(|h| h.explicit_coefs).sum::<u64>() as f64 / (rec.max(1) as f64),
    }
}

fn main() {
    let json = std::env::args().any(|a| a == "--json");
    let seeds = [1u64, 2, 3, 4];
    if !json {
        println!("| hops | loss | delay (slots) | load | relay | goodput (sym/slot) | extra delay p50 / p90 / p99 (slots) | sent per delivered, per hop | explicit coefs per recoded repair |");
        println!("|---|---|---|---|---|---|---|---|---|");
    }
    for (hops, loss, delay) in [(2, 0.35, 10), (3, 0.35, 10), (2, 0.35, 50), (2, 0.1, 10)] {
        for load in [0.25, 0.4] {
            for (recoding, innovative_only) in [(false, false), (true, true), (true, false)] {
                let outs: Vec<Outcome> = seeds
                    .iter()
                    .map(|&seed| {
                        run(&Spec {
                            hops,
                            loss,
                            delay,
                            load,
                            symbols: 10_000,
                            recoding,
                            innovative_only,
                            seed,
                        })
                    })
                    .collect();
                let mode = match (recoding, innovative_only) {
                    (false, _) => "terminating",
                    (true, true) => "recoding",
                    (true, false) => "recoding-all",
                };
                let avg = |f: &dyn Fn(&Outcome) -> f64| {
                    outs.iter().map(f).sum::<f64>() / outs.len() as f64
                };
                if json {
                    for (o, seed) in outs.iter().zip(seeds) {
                        println!(
                            "{{\"mode\":\"recode-model\",\"hops\":{hops},\"loss\":{loss},\"delay_slots\":{delay},\"load\":{load},\"relay\":\"{mode}\",\"seed\":{seed},\"goodput\":{:.4},\"p50\":{},\"p90\":{},\"p99\":{},\"sent_per_delivered\":{:?},\"mean_explicit_coefs\":{:.1}}}",
                            o.goodput, o.p50, o.p90, o.p99, o.per_hop_sent, o.mean_coefs
                        );
                    }
                } else {
                    let sent: Vec<String> = (0..hops)
                        .map(|h| format!("{:.3}", avg(&|o| o.per_hop_sent[h])))
                        .collect();
                    println!(
                        "| {hops} | {loss} | {delay} | {load} | {mode} | {:.3} | {:.0} / {:.0} / {:.0} | {} | {} |",
                        avg(&|o| o.goodput),
                        avg(&|o| o.p50),
                        avg(&|o| o.p90),
                        avg(&|o| o.p99),
                        sent.join(", "),
                        if recoding {
                            format!("{:.0}", avg(&|o| o.mean_coefs))
                        } else {
                            "—".into()
                        }
                    );
                }
            }
        }
    }
}
