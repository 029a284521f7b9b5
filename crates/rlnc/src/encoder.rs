//! The sending side: stores source symbols until acknowledged and builds repairs.

use crate::arena::{decode_symbol, encode_symbol, frame_symbol, Arena};
use crate::{tinymt, CodecConfig, Coefficients, EncodeError, RepairHeader, SymbolId};

/// Sources combined per `dot_slice` pass (bounded so the coefficient scratch stays small).
const DOT_CHUNK: usize = 32;

/// Sliding-window encoder.
#[derive(Debug)]
pub struct Encoder {
    cfg: CodecConfig,
    arena: Arena,
    first: SymbolId,
    next: SymbolId,
    next_key: u16,
    coefs: Vec<u8>,
}

impl Encoder {
    /// An empty encoder.
    pub fn new(cfg: CodecConfig) -> Self {
        Encoder {
            arena: Arena::new(cfg.symbol_size, cfg.window.max(1)),
            cfg,
            first: 0,
            next: 0,
            next_key: 1,
            coefs: Vec::new(),
        }
    }

    /// Adds a source symbol and returns its id.
    ///
    /// # Errors
    /// [`EncodeError::WindowFull`] until older symbols are retired;
    /// [`EncodeError::PayloadTooLarge`] if it does not fit a symbol.
    pub fn push(&mut self, payload: &[u8]) -> Result<SymbolId, EncodeError> {
        if payload.len() > self.cfg.max_payload() {
            return Err(EncodeError::PayloadTooLarge {
                len: payload.len(),
                max: self.cfg.max_payload(),
            });
        }
        encode_symbol(self.next_slot()?, payload);
        self.next += 1;
        Ok(self.next - 1)
    }

    /// Adds a source symbol built in place: `build` writes the payload into the front of
    /// the next slot's payload area ([`CodecConfig::max_payload`] bytes, contents
    /// unspecified) and returns its length. Returns the new symbol's id, or `None` if
    /// `build` returned 0 (nothing is added). Saves the copy [`Encoder::push`] makes.
    ///
    /// # Errors
    /// [`EncodeError::WindowFull`] until older symbols are retired (`build` is not
    /// called); [`EncodeError::PayloadTooLarge`] if `build` claims more than the area.
    pub fn push_with(
        &mut self,
        build: impl FnOnce(&mut [u8]) -> usize,
    ) -> Result<Option<SymbolId>, EncodeError> {
        let max = self.cfg.max_payload();
        let slot = self.next_slot()?;
        let len = build(&mut slot[2..]);
        if len > max {
            return Err(EncodeError::PayloadTooLarge { len, max });
        }
        if len == 0 {
            return Ok(None);
        }
        frame_symbol(slot, len);
        self.next += 1;
        Ok(Some(self.next - 1))
    }

    /// The slot the next symbol goes in, the arena grown to hold it.
    ///
    /// # Errors
    /// [`EncodeError::WindowFull`] until older symbols are retired.
    fn next_slot(&mut self) -> Result<&mut [u8], EncodeError> {
        if self.is_full() {
            return Err(EncodeError::WindowFull(self.cfg.window));
        }
        // The slot of `next` is free: a full window was refused above.
        self.arena.grow(self.first, self.len() + 1);
        Ok(self.arena.slot_mut(self.next))
    }

    /// The payload of a held source symbol, for sending it systematically.
    pub fn source(&self, id: SymbolId) -> Option<&[u8]> {
        if id < self.first || id >= self.next {
            return None;
        }
        decode_symbol(self.arena.slot(id))
    }

    /// Oldest symbol held.
    pub fn first_id(&self) -> SymbolId {
        self.first
    }

    /// Id the next pushed symbol gets.
    pub fn next_id(&self) -> SymbolId {
        self.next
    }

    /// Symbols held.
    pub fn len(&self) -> usize {
        (self.next - self.first) as usize
    }

    /// Whether no symbol is held.
    pub fn is_empty(&self) -> bool {
        self.next == self.first
    }

    /// Whether `push` would refuse for lack of room.
    pub fn is_full(&self) -> bool {
        self.len() >= self.cfg.window
    }

    /// Builds a repair over `[first, first + count)` into `out` (one symbol long) with a
    /// fresh key. Keys advance by one per repair: a key repeats only after 65,535 more
    /// repairs, and since a window holds at most `window` symbols and repairs cover the
    /// current window, a repeat could only collide if 65,535 repairs went out without the
    /// window moving — at which point the repair is a fresh random combination anyway
    /// unless `first` and `count` are also identical.
    ///
    /// # Errors
    /// [`EncodeError::BadRange`] if the range is empty or not held; [`EncodeError::BadBuffer`]
    /// if `out` is not one symbol long.
    pub fn repair(
        &mut self,
        first: SymbolId,
        count: u16,
        out: &mut [u8],
    ) -> Result<RepairHeader, EncodeError> {
        if out.len() != self.cfg.symbol_size {
            return Err(EncodeError::BadBuffer);
        }
        let end = first + u64::from(count);
        if count == 0 || first < self.first || end > self.next {
            return Err(EncodeError::BadRange);
        }
        let key = self.next_key;
        self.next_key = self.next_key.wrapping_add(1).max(1);
        self.coefs.resize(count as usize, 0);
        tinymt::coefficients(key, &mut self.coefs);
        self.combine(first, out);
        Ok(RepairHeader {
            first,
            count,
            coefficients: Coefficients::Key(key),
        })
    }

    fn combine(&self, first: SymbolId, out: &mut [u8]) {
        out.fill(0);
        let mut srcs: Vec<&[u8]> = Vec::with_capacity(DOT_CHUNK);
        for (chunk_idx, coefs) in self.coefs.chunks(DOT_CHUNK).enumerate() {
            srcs.clear();
            let base = first + (chunk_idx * DOT_CHUNK) as u64;
            srcs.extend((0..coefs.len() as u64).map(|i| self.arena.slot(base + i)));
            ctcp_gf256::dot_add_slice(out, &srcs, coefs);
        }
    }

    /// Drops every symbol with id ≤ `id` (acknowledged). Ids beyond the newest clamp.
    pub fn retire_through(&mut self, id: SymbolId) {
        self.first = self.first.max(id.saturating_add(1).min(self.next));
    }
}
