//! The receiving side: progressive Gaussian elimination over the missing ids only.
//!
//! Known source symbols live in an aligned ring. Every coded equation still needed is a
//! row in reduced row-echelon form keyed by its pivot (its lowest unknown id), with
//! coefficients over unknown ids only. A row whose pivot is its only unknown is a decoded
//! symbol and is released at once.

use crate::arena::{decode_symbol, encode_symbol, Arena};
use crate::{CodecConfig, DecodeError, RepairHeader, SymbolId};
use std::collections::{BTreeMap, VecDeque};

/// What became of a received symbol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Received {
    /// It added information.
    New,
    /// A source symbol already known.
    Duplicate,
    /// A repair that is a combination of equations already held.
    NonInnovative,
    /// A repair that references symbols already forgotten; it is of no use.
    Stale,
}

/// What an acknowledgement needs to report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DecoderStatus {
    /// Every id below this is known.
    pub next_in_order: SymbolId,
    /// Highest id referenced by anything received.
    pub highest_seen: Option<SymbolId>,
    /// Missing ids in `[next_in_order, highest_seen]` not covered by innovative repairs.
    pub deficit: u32,
    /// Innovative coded equations held.
    pub rank: u32,
    /// The "seen" frontier (Sundararajan et al.): every id below is known or is the pivot
    /// of a held equation.
    pub seen: SymbolId,
}

#[derive(Debug)]
struct Row {
    /// Id of `coefs[0]`; the pivot, whose coefficient is 1.
    lo: SymbolId,
    coefs: Vec<u8>,
    data: Vec<u8>,
}

impl Row {
    fn coef(&self, id: SymbolId) -> u8 {
        if id < self.lo {
            return 0;
        }
        self.coefs
            .get((id - self.lo) as usize)
            .copied()
            .unwrap_or(0)
    }

    fn hi(&self) -> SymbolId {
        self.lo + self.coefs.len() as u64
    }

    /// Whether only the pivot is non-zero. Rows are kept trimmed (see [`Row::trim`]), so
    /// this is a length check.
    fn is_solved(&self) -> bool {
        self.coefs.len() <= 1
    }

    /// Drops trailing zero coefficients, keeping the pivot.
    fn trim(&mut self) {
        while self.coefs.len() > 1 && self.coefs.last() == Some(&0) {
            self.coefs.pop();
        }
    }
}

/// Sliding-window decoder.
#[derive(Debug)]
pub struct Decoder {
    cfg: CodecConfig,
    arena: Arena,
    known: Vec<bool>,
    base: SymbolId,
    next_in_order: SymbolId,
    known_above: u64,
    highest: Option<SymbolId>,
    rows: BTreeMap<SymbolId, Row>,
    released: VecDeque<SymbolId>,
    field_ops: u64,
}

impl Decoder {
    /// An empty decoder.
    pub fn new(cfg: CodecConfig) -> Self {
        let cap = cfg.window.max(1);
        let arena = Arena::new(cfg.symbol_size, cap);
        Decoder {
            known: vec![false; arena.slots()],
            arena,
            cfg,
            base: 0,
            next_in_order: 0,
            known_above: 0,
            highest: None,
            rows: BTreeMap::new(),
            released: VecDeque::new(),
            field_ops: 0,
        }
    }

    fn cap(&self) -> u64 {
        self.arena.capacity() as u64
    }

    fn is_known(&self, id: SymbolId) -> bool {
        if id < self.base {
            return true;
        }
        if id >= self.base + self.cap() || id - self.base >= self.arena.slots() as u64 {
            // Nothing is stored past the arena's slots (`store` grows it first).
            return false;
        }
        self.known[self.arena.index(id)]
    }

    /// The slot to store symbol `id` in (`base <= id < base + cap`), growing the arena
    /// (and the known flags indexed by its slots) if `id` is past its slots.
    fn store(&mut self, id: SymbolId) -> &mut [u8] {
        let span = (id.saturating_sub(self.base) + 1) as usize;
        if let Some(old) = self.arena.grow(self.base, span) {
            let old_mask = old as u64 - 1;
            let mut known = vec![false; self.arena.slots()];
            for k in self.base..self.base + old as u64 {
                known[self.arena.index(k)] = self.known[(k & old_mask) as usize];
            }
            self.known = known;
        }
        self.arena.slot_mut(id)
    }

    /// Every id below this is known: the reference point for ids the sender may still
    /// reference (they lie within its window of it). Cheaper than [`Decoder::status`].
    pub fn next_in_order(&self) -> SymbolId {
        self.next_in_order
    }

    /// Bytes the symbol storage takes now: it grows, in powers of two, with the span of
    /// ids held (from the lowest not retired to the highest seen), up to the window.
    pub fn storage_bytes(&self) -> usize {
        self.arena.bytes() + self.known.len()
    }

    /// Field multiply-adds performed so far, in symbol-sized units (zero on a clean path).
    pub fn field_ops(&self) -> u64 {
        self.field_ops
    }

    fn see(&mut self, id: SymbolId) {
        self.highest = Some(self.highest.map_or(id, |h| h.max(id)));
    }

    /// Accepts a source symbol.
    ///
    /// # Errors
    /// [`DecodeError::OutOfWindow`] beyond the window; [`DecodeError::Malformed`] if the
    /// payload does not fit a symbol.
    pub fn receive_source(
        &mut self,
        id: SymbolId,
        payload: &[u8],
    ) -> Result<Received, DecodeError> {
        if payload.len() > self.cfg.max_payload() {
            return Err(DecodeError::Malformed("payload longer than a symbol"));
        }
        if self.is_known(id) {
            return Ok(Received::Duplicate);
        }
        if id >= self.base + self.cap() {
            return Err(DecodeError::OutOfWindow);
        }
        self.see(id);
        encode_symbol(self.store(id), payload);
        self.learn(id);
        self.settle();
        Ok(Received::New)
    }

    /// Accepts a repair symbol.
    ///
    /// # Errors
    /// [`DecodeError::OutOfWindow`] if it reaches beyond the window;
    /// [`DecodeError::Malformed`] for a wrong data length or coefficient vector.
    pub fn receive_repair(
        &mut self,
        header: &RepairHeader,
        coded: &[u8],
    ) -> Result<Received, DecodeError> {
        if coded.len() != self.cfg.symbol_size {
            return Err(DecodeError::Malformed("repair length"));
        }
        if header.count == 0 {
            return Err(DecodeError::Malformed("empty repair"));
        }
        let end = header
            .first
            .checked_add(u64::from(header.count))
            .ok_or(DecodeError::Malformed("range"))?;
        if end > self.base + self.cap() {
            return Err(DecodeError::OutOfWindow);
        }
        if end <= self.next_in_order {
            return Ok(Received::Stale); // everything it covers is known
        }
        if header.first < self.base {
            return Ok(Received::Stale); // references symbols we no longer hold
        }
        let coefs = header.coefficient_vector()?;
        self.see(end - 1);
        let row = Row {
            lo: header.first,
            coefs,
            data: coded.to_vec(),
        };
        let r = self.insert(row);
        self.settle();
        Ok(r)
    }

    /// Reduces `row` by known symbols and held rows; keeps it if innovative.
    fn insert(&mut self, mut row: Row) -> Received {
        // 1. Reduce the coefficients, left to right, and note what the data must subtract:
        //    known symbols, and held rows for columns that are their pivots. Held rows are
        //    in RREF (zero at every other pivot and at known columns), so subtracting one
        //    never changes the coefficient of another pivot or known column: every
        //    multiplier is read before the data moves, and the data is reduced afterwards
        //    in one multi-source pass.
        let mut terms: Vec<(Term, u8)> = Vec::with_capacity(row.coefs.len());
        let mut i = 0;
        while i < row.coefs.len() {
            let id = row.lo + i as u64;
            let c = row.coefs[i];
            if c != 0 {
                if self.is_known(id) {
                    row.coefs[i] = 0;
                    terms.push((Term::Known(id), c));
                } else if let Some(p) = self.rows.get(&id) {
                    sub_coefs(&mut row, p, c);
                    terms.push((Term::Row(id), c));
                }
            }
            i += 1;
        }
        if !terms.is_empty() {
            let mut srcs: Vec<&[u8]> = Vec::with_capacity(terms.len());
            srcs.extend(terms.iter().map(|(t, _)| match *t {
                Term::Known(id) => self.arena.slot(id),
                // Present: collected from `self.rows` above, nothing removed since.
                Term::Row(id) => self.rows.get(&id).map_or(&[][..], |r| &r.data[..]),
            }));
            let cs: Vec<u8> = terms.iter().map(|&(_, c)| c).collect();
            for (s, c) in srcs.chunks(32).zip(cs.chunks(32)) {
                ctcp_gf256::dot_add_slice(&mut row.data, s, c);
            }
            self.field_ops += terms.len() as u64;
        }
        // 3. Pivot on the first remaining unknown.
        let Some(first_nz) = row.coefs.iter().position(|&c| c != 0) else {
            return Received::NonInnovative;
        };
        row.coefs.drain(..first_nz);
        row.lo += first_nz as u64;
        while row.coefs.last() == Some(&0) {
            row.coefs.pop();
        }
        let pivot = row.lo;
        let inv = ctcp_gf256::inv(row.coefs[0]);
        if inv != 1 {
            ctcp_gf256::scale_slice(&mut row.coefs, inv);
            ctcp_gf256::scale_slice(&mut row.data, inv);
            self.field_ops += 1;
        }
        // 4. Back-substitute: clear the new pivot column from every other row, the data
        //    of all of them in one multi-output pass over the new row.
        let mut targets: Vec<&mut Row> = Vec::new();
        let mut cs = Vec::new();
        for r in self.rows.values_mut() {
            let c = r.coef(pivot);
            if c != 0 {
                sub_coefs(r, &row, c);
                targets.push(r);
                cs.push(c);
            }
        }
        if !targets.is_empty() {
            let mut dsts: Vec<&mut [u8]> = targets.into_iter().map(|r| &mut r.data[..]).collect();
            ctcp_gf256::mad_multi(&mut dsts, &row.data, &cs);
            self.field_ops += cs.len() as u64;
        }
        self.rows.insert(pivot, row);
        Received::New
    }

    /// A symbol became known: remove it from every row, then release it.
    fn learn(&mut self, id: SymbolId) {
        let idx = self.arena.index(id);
        self.known[idx] = true;
        if id > self.next_in_order {
            self.known_above += 1;
        }
        self.released.push_back(id);
        if id == self.next_in_order {
            self.next_in_order += 1;
            while self.next_in_order < self.base + self.cap() && self.is_known(self.next_in_order) {
                // Counted in `known_above` when it arrived ahead of the frontier.
                self.known_above = self.known_above.saturating_sub(1);
                self.next_in_order += 1;
            }
        }
        // A row pivoted on this id must be re-reduced without it.
        if let Some(row) = self.rows.remove(&id) {
            let mut row = row;
            let sym = self.arena.slot(id);
            ctcp_gf256::add_slice(&mut row.data, sym);
            row.coefs[0] = 0;
            self.insert(row);
        }
        // Other rows: drop the now-known column, all in one multi-output pass.
        let mut dsts: Vec<&mut [u8]> = Vec::new();
        let mut cs = Vec::new();
        for r in self.rows.values_mut() {
            let c = r.coef(id);
            if c != 0 {
                r.coefs[(id - r.lo) as usize] = 0;
                r.trim();
                dsts.push(&mut r.data[..]);
                cs.push(c);
            }
        }
        if !dsts.is_empty() {
            ctcp_gf256::mad_multi(&mut dsts, self.arena.slot(id), &cs);
            self.field_ops += cs.len() as u64;
        }
    }

    /// Releases every row that has become a single known symbol.
    fn settle(&mut self) {
        loop {
            let solved: Vec<SymbolId> = self
                .rows
                .iter()
                .filter(|(_, r)| r.is_solved())
                .map(|(k, _)| *k)
                .collect();
            if solved.is_empty() {
                return;
            }
            for pivot in solved {
                // Learning one symbol may re-reduce others; take each only while solved.
                if !self.rows.get(&pivot).is_some_and(Row::is_solved) {
                    continue;
                }
                let Some(row) = self.rows.remove(&pivot) else {
                    continue;
                };
                self.store(pivot).copy_from_slice(&row.data);
                self.learn(pivot);
            }
        }
    }

    /// Next decoded source symbol (each exactly once, as soon as it is known), with its
    /// true payload.
    pub fn poll_decoded(&mut self) -> Option<(SymbolId, &[u8])> {
        loop {
            let id = self.released.pop_front()?;
            if id < self.base {
                continue;
            }
            // Slots hold authenticated data framed by `encode_symbol`; a repair forged to
            // decode into a bad length is skipped rather than trusted.
            if decode_symbol(self.arena.slot(id)).is_some() {
                return decode_symbol(self.arena.slot(id)).map(|p| (id, p));
            }
        }
    }

    /// What an acknowledgement needs.
    pub fn status(&self) -> DecoderStatus {
        let nio = self.next_in_order;
        let (missing, highest) = match self.highest {
            Some(h) if h >= nio => ((h + 1 - nio).saturating_sub(self.known_above), Some(h)),
            h => (0, h),
        };
        let rank = self.rows.len() as u64;
        let mut seen = nio;
        while self.is_known(seen) || self.rows.contains_key(&seen) {
            if seen >= self.base + self.cap() {
                break;
            }
            seen += 1;
        }
        DecoderStatus {
            next_in_order: nio,
            highest_seen: highest,
            deficit: missing.saturating_sub(rank).min(u64::from(u32::MAX)) as u32,
            rank: rank as u32,
            seen,
        }
    }

    /// Gives up every symbol below `id`, known or not: the sender will never send or
    /// reference them again (unreliable traffic past its deadline). Unknown ones are lost
    /// for good, held equations pivoted on them are dropped, and the in-order frontier
    /// moves to `id` (then past what is already known above it). Symbols already released
    /// but not yet taken by [`Decoder::poll_decoded`] are still handed out.
    pub fn give_up_below(&mut self, id: SymbolId) {
        if id > self.next_in_order {
            self.rows.retain(|&pivot, _| pivot >= id);
            self.next_in_order = id;
            let top = self
                .highest
                .map_or(id, |h| h.saturating_add(1))
                .min(self.base + self.cap());
            self.known_above = (id..top).filter(|&i| self.is_known(i)).count() as u64;
            while self.next_in_order < self.base + self.cap() && self.is_known(self.next_in_order) {
                self.known_above = self.known_above.saturating_sub(1);
                self.next_in_order += 1;
            }
        }
        self.retire_below(id);
    }

    /// Forgets symbols below `id`: the sender will never reference them again. Never goes
    /// past an unknown symbol or one not yet handed out by [`Decoder::poll_decoded`].
    pub fn retire_below(&mut self, id: SymbolId) {
        let mut target = id.min(self.next_in_order);
        if let Some(&r) = self.released.front() {
            target = target.min(r);
        }
        if target <= self.base {
            return;
        }
        let span = (target - self.base).min(self.arena.slots() as u64);
        for k in 0..span {
            let idx = self.arena.index(self.base + k);
            self.known[idx] = false;
        }
        self.base = target;
    }
}

/// A data term of the reduction in `Decoder::insert`.
#[derive(Clone, Copy)]
enum Term {
    /// A known source symbol, by id.
    Known(SymbolId),
    /// A held row, by pivot.
    Row(SymbolId),
}

/// The coefficient half of `row -= c · pivot_row` (the caller subtracts the data),
/// widening `row`'s range to cover `pivot_row`'s.
fn sub_coefs(row: &mut Row, p: &Row, c: u8) {
    if p.hi() > row.hi() {
        row.coefs.resize((p.hi() - row.lo) as usize, 0);
    }
    if p.lo < row.lo {
        let extra = (row.lo - p.lo) as usize;
        row.coefs.splice(0..0, std::iter::repeat_n(0u8, extra));
        row.lo = p.lo;
    }
    let off = (p.lo - row.lo) as usize;
    ctcp_gf256::mul_add_slice(&mut row.coefs[off..off + p.coefs.len()], &p.coefs, c);
    row.trim();
}
