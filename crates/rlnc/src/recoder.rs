//! Recoding without decoding, for relays that code per hop (seeds 001 and 003).

use crate::arena::encode_symbol;
use crate::tinymt::TinyMt32;
use crate::{CodecConfig, Coefficients, DecodeError, RepairHeader, SymbolId};
use std::collections::VecDeque;

#[derive(Debug)]
struct Held {
    lo: SymbolId,
    coefs: Vec<u8>,
    data: Vec<u8>,
}

/// Holds the coded symbols a relay received and emits fresh random combinations of them
/// with explicit coefficient vectors, which a [`crate::Decoder`] accepts like any repair.
#[derive(Debug)]
pub struct Recoder {
    cfg: CodecConfig,
    held: VecDeque<Held>,
    rng: TinyMt32,
}

impl Recoder {
    /// An empty recoder; `seed` drives its coefficient choices.
    pub fn new(cfg: CodecConfig, seed: u32) -> Self {
        Recoder {
            cfg,
            held: VecDeque::new(),
            rng: TinyMt32::new(seed),
        }
    }

    /// Coded symbols held.
    pub fn len(&self) -> usize {
        self.held.len()
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }

    fn push(&mut self, h: Held) {
        if self.held.len() >= self.cfg.window.max(1) {
            self.held.pop_front();
        }
        self.held.push_back(h);
    }

    /// Holds a source symbol.
    ///
    /// # Errors
    /// [`DecodeError::Malformed`] if the payload does not fit a symbol.
    pub fn add_source(&mut self, id: SymbolId, payload: &[u8]) -> Result<(), DecodeError> {
        if payload.len() > self.cfg.max_payload() {
            return Err(DecodeError::Malformed("payload longer than a symbol"));
        }
        let mut data = vec![0u8; self.cfg.symbol_size];
        encode_symbol(&mut data, payload);
        self.push(Held {
            lo: id,
            coefs: vec![1],
            data,
        });
        Ok(())
    }

    /// Holds a repair symbol.
    ///
    /// # Errors
    /// [`DecodeError::Malformed`] on a wrong length or coefficient vector.
    pub fn add_repair(&mut self, header: &RepairHeader, coded: &[u8]) -> Result<(), DecodeError> {
        if coded.len() != self.cfg.symbol_size
            || header.count == 0
            || header.count as usize > self.cfg.window
        {
            return Err(DecodeError::Malformed("repair"));
        }
        let coefs = header.coefficient_vector()?;
        self.push(Held {
            lo: header.first,
            coefs,
            data: coded.to_vec(),
        });
        Ok(())
    }

    /// Drops held symbols that lie entirely below `id`.
    pub fn retire_below(&mut self, id: SymbolId) {
        self.held.retain(|h| h.lo + h.coefs.len() as u64 > id);
    }

    /// Writes a random combination of everything held into `out` (one symbol long) and
    /// returns its header, or `None` if nothing is held or the span exceeds 65,535 ids.
    pub fn recode(&mut self, out: &mut [u8]) -> Option<RepairHeader> {
        if out.len() != self.cfg.symbol_size || self.held.is_empty() {
            return None;
        }
        let lo = self.held.iter().map(|h| h.lo).min()?;
        let hi = self
            .held
            .iter()
            .map(|h| h.lo + h.coefs.len() as u64)
            .max()?;
        let count = u16::try_from(hi - lo).ok()?;
        let mut coefs = vec![0u8; count as usize];
        out.fill(0);
        for h in &self.held {
            let w = loop {
                let v = self.rng.rand256();
                if v != 0 {
                    break v;
                }
            };
            let off = (h.lo - lo) as usize;
            ctcp_gf256::mul_add_slice(&mut coefs[off..off + h.coefs.len()], &h.coefs, w);
            ctcp_gf256::mul_add_slice(out, &h.data, w);
        }
        Some(RepairHeader {
            first: lo,
            count,
            coefficients: Coefficients::Explicit(coefs),
        })
    }
}
