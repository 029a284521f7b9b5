//! One RLNC-vs-Reed-Solomon benchmark case (window k, loss rate), shared by the
//! `rlnc-report` binary and the `rlnc` criterion bench so both measure the same work.

use ctcp_rlnc::{CodecConfig, Decoder, Encoder, RepairHeader};
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;
use reed_solomon_erasure::galois_8::ReedSolomon;
use std::hint::black_box;

/// Symbol size of every case (the transport's default is in the same range).
pub const SYMBOL: usize = 1408;

/// Prepared data, loss pattern, repairs and long-lived coders of one case.
pub struct RlncCase {
    /// Window: source symbols per round (k).
    pub k: usize,
    /// Repairs per round (m), matched to the loss rate.
    pub m: usize,
    data: Vec<Vec<u8>>,
    lost: Vec<usize>,
    repairs: Vec<(RepairHeader, Vec<u8>)>,
    enc: Encoder,
    out: Vec<Vec<u8>>,
    dec: Decoder,
    base: u64,
    rs: Option<(ReedSolomon, Vec<Vec<u8>>)>,
}

impl RlncCase {
    /// A case of `k` source symbols per round and loss rate `loss`, losses drawn from `rng`.
    ///
    /// # Panics
    /// Never for k in 1..=4096 (all parameters are derived to be valid).
    #[allow(clippy::expect_used)] // parameters derived valid above each call
    pub fn new(k: usize, loss: f64, rng: &mut ChaCha8Rng) -> Self {
        let m = ((k as f64 * loss / (1.0 - loss)).ceil() as usize).max(1);
        let lost_n = ((k as f64 * loss).round() as usize).min(m);
        let data: Vec<Vec<u8>> = (0..k)
            .map(|i| (0..SYMBOL - 2).map(|j| (i * 31 + j * 7) as u8).collect())
            .collect();
        let cfg = CodecConfig {
            symbol_size: SYMBOL,
            window: 4096,
        };
        let mut ids: Vec<usize> = (0..k).collect();
        ids.shuffle(rng);
        let lost = ids[..lost_n].to_vec();
        let mut pre = Encoder::new(cfg);
        for d in &data {
            pre.push(d).expect("window has room");
        }
        let repairs = (0..m + 2)
            .map(|_| {
                let mut o = vec![0u8; SYMBOL];
                let h = pre.repair(0, k as u16, &mut o).expect("valid range");
                (h, o)
            })
            .collect();
        // reed-solomon-erasure holds at most 256 shards in GF(256).
        let rs = (k + m <= 256).then(|| {
            let rs = ReedSolomon::new(k, m).expect("valid shard counts");
            let mut shards: Vec<Vec<u8>> = data
                .iter()
                .map(|d| {
                    let mut v = d.clone();
                    v.resize(SYMBOL, 0);
                    v
                })
                .collect();
            shards.extend((0..m).map(|_| vec![0u8; SYMBOL]));
            rs.encode(&mut shards).expect("encode");
            (rs, shards)
        });
        RlncCase {
            k,
            m,
            data,
            lost,
            repairs,
            enc: Encoder::new(cfg),
            out: vec![vec![0u8; SYMBOL]; m],
            dec: Decoder::new(cfg),
            base: 0,
            rs,
        }
    }

    /// Source bytes coded per round.
    pub fn source_bytes(&self) -> usize {
        self.k * (SYMBOL - 2)
    }

    /// Whether reed-solomon-erasure can code this case.
    pub fn has_rse(&self) -> bool {
        self.rs.is_some()
    }

    /// Encoder round: push k sources, build m repairs over all of them, retire them.
    #[allow(clippy::expect_used)] // the window is retired every round, so it has room
    pub fn encode_round(&mut self) {
        let first = self.enc.next_id();
        for d in &self.data {
            self.enc.push(d).expect("window has room");
        }
        for o in self.out.iter_mut() {
            black_box(
                self.enc
                    .repair(first, self.k as u16, o)
                    .expect("valid range"),
            );
        }
        self.enc.retire_through(self.enc.next_id() - 1);
    }

    /// Decoder round: the next k ids of one long-lived sliding-window decoder (as a
    /// session holds it) with the case's loss pattern, then hand out and retire them.
    ///
    /// # Panics
    /// If the round does not decode completely (a codec bug).
    #[allow(clippy::expect_used)] // ids stay inside the window: it is retired every round
    pub fn decode_round(&mut self) {
        let (k, base) = (self.k as u64, self.base);
        for (i, d) in self.data.iter().enumerate() {
            if !self.lost.contains(&i) {
                self.dec
                    .receive_source(base + i as u64, d)
                    .expect("in window");
            }
        }
        for (h, o) in &self.repairs {
            if self.dec.status().next_in_order == base + k {
                break;
            }
            let h = RepairHeader {
                first: base + h.first,
                ..h.clone()
            };
            self.dec.receive_repair(&h, o).expect("in window");
        }
        assert_eq!(
            self.dec.status().next_in_order,
            base + k,
            "decode incomplete"
        );
        while let Some(x) = self.dec.poll_decoded() {
            black_box(x);
        }
        self.base += k;
        self.dec.retire_below(self.base);
    }

    /// reed-solomon-erasure encode of the same k data shards into m parity shards.
    #[allow(clippy::expect_used)] // shard shapes fixed at construction
    pub fn rse_encode(&mut self) {
        if let Some((rs, shards)) = &mut self.rs {
            rs.encode(black_box(shards)).expect("encode");
        }
    }

    /// reed-solomon-erasure reconstruct of the same loss pattern.
    #[allow(clippy::expect_used)] // at most m shards lost, so reconstruction succeeds
    pub fn rse_reconstruct(&mut self) {
        if let Some((rs, shards)) = &self.rs {
            let mut opt: Vec<Option<Vec<u8>>> = shards.iter().cloned().map(Some).collect();
            for &i in &self.lost {
                opt[i] = None;
            }
            rs.reconstruct_data(&mut opt).expect("reconstruct");
            black_box(&opt);
        }
    }
}
