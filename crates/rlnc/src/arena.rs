//! Ring of 64-byte-aligned symbol slots indexed by the low bits of the symbol id, grown
//! as the span of live ids grows.

/// The slots an arena starts with (fewer if its capacity is smaller): about 180 KB at the
/// default symbol size. A window that never holds more stays in the CPU's cache and
/// costs no more memory, however large the configured capacity.
const INITIAL_SLOTS: usize = 128;

/// Symbol storage for ids in a sliding span: slots aligned to 64 bytes (a misaligned
/// destination costs the SIMD kernels ~30 %), as many as the widest span of live ids
/// needed so far, rounded up to a power of two, at most `capacity` rounded up.
pub(crate) struct Arena {
    buf: Vec<u8>,
    offset: usize,
    stride: usize,
    symbol_size: usize,
    capacity: usize,
    /// Slots minus one: the slot count is a power of two, so the slot of an id is a mask
    /// away (a 64-bit division per lookup showed in profiles).
    mask: u64,
}

impl std::fmt::Debug for Arena {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Arena")
            .field("symbol_size", &self.symbol_size)
            .field("capacity", &self.capacity)
            .field("slots", &self.slots())
            .finish()
    }
}

impl Arena {
    /// Storage for spans of up to `capacity` ids, holding few slots until more are needed
    /// ([`Arena::grow`]).
    pub(crate) fn new(symbol_size: usize, capacity: usize) -> Self {
        let capacity = capacity.max(1);
        Self::with_slots(
            symbol_size,
            capacity,
            INITIAL_SLOTS.min(capacity.next_power_of_two()),
        )
    }

    fn with_slots(symbol_size: usize, capacity: usize, slots: usize) -> Self {
        let stride = symbol_size.div_ceil(64) * 64;
        let buf = vec![0u8; stride * slots + 64];
        // The buffer is never reallocated, so this offset stays valid.
        let offset = buf.as_ptr().align_offset(64).min(63);
        Arena {
            buf,
            offset,
            stride,
            symbol_size,
            capacity,
            mask: slots as u64 - 1,
        }
    }

    /// Number of slots (a power of two): ids `lo..lo + slots()` have distinct slots.
    pub(crate) fn slots(&self) -> usize {
        (self.mask + 1) as usize
    }

    /// Makes room for ids `lo..lo + span` (`span` at most the capacity): if they do not
    /// have distinct slots yet, the slots double (or more) and the symbols of ids
    /// `lo..lo + old slots` move to their new slots. Returns the old slot count if it
    /// grew, for callers that index side tables by slot.
    pub(crate) fn grow(&mut self, lo: u64, span: usize) -> Option<usize> {
        let old = self.slots();
        if span <= old {
            return None;
        }
        let max = self.capacity.next_power_of_two();
        let slots = span.next_power_of_two().max(2 * old).min(max);
        let mut next = Self::with_slots(self.symbol_size, self.capacity, slots);
        for id in lo..lo + old as u64 {
            next.slot_mut(id).copy_from_slice(self.slot(id));
        }
        *self = next;
        Some(old)
    }

    /// The slot of `id`: distinct for any `slots()` consecutive ids.
    #[inline]
    pub(crate) fn index(&self, id: u64) -> usize {
        (id & self.mask) as usize
    }

    fn start(&self, id: u64) -> usize {
        self.offset + self.index(id) * self.stride
    }

    pub(crate) fn slot(&self, id: u64) -> &[u8] {
        let s = self.start(id);
        &self.buf[s..s + self.symbol_size]
    }

    pub(crate) fn slot_mut(&mut self, id: u64) -> &mut [u8] {
        let s = self.start(id);
        &mut self.buf[s..s + self.symbol_size]
    }

    /// Bytes the slots take.
    pub(crate) fn bytes(&self) -> usize {
        self.buf.len()
    }

    /// The widest span of ids the arena may be asked to hold.
    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }
}

/// Writes `[u16 LE length][payload][zeros]` into a symbol buffer.
pub(crate) fn encode_symbol(slot: &mut [u8], payload: &[u8]) {
    slot[2..2 + payload.len()].copy_from_slice(payload);
    frame_symbol(slot, payload.len());
}

/// Frames a symbol whose `len` payload bytes are already in place behind the length
/// field: writes the length and zeroes the rest.
pub(crate) fn frame_symbol(slot: &mut [u8], len: usize) {
    slot[..2].copy_from_slice(&(len as u16).to_le_bytes());
    slot[2 + len..].fill(0);
}

/// The payload of a coded symbol, or `None` if its length field is impossible.
pub(crate) fn decode_symbol(slot: &[u8]) -> Option<&[u8]> {
    let len = u16::from_le_bytes([slot[0], slot[1]]) as usize;
    slot.get(2..2 + len)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_aligned_and_distinct() {
        let mut a = Arena::new(1344, 8);
        for id in 0..8u64 {
            assert_eq!(a.slot(id).as_ptr() as usize % 64, 0);
            a.slot_mut(id).fill(id as u8);
        }
        for id in 0..8u64 {
            assert!(a.slot(id).iter().all(|&b| b == id as u8));
            assert_eq!(a.slot(id + 8).as_ptr(), a.slot(id).as_ptr());
        }
    }

    #[test]
    fn growing_keeps_every_live_symbol_and_stops_at_the_capacity() {
        let mut a = Arena::new(100, 1000);
        assert_eq!(a.slots(), INITIAL_SLOTS);
        // A span that starts past zero and wraps the ring.
        let lo = 3 * INITIAL_SLOTS as u64 + 5;
        for id in lo..lo + INITIAL_SLOTS as u64 {
            a.slot_mut(id).fill(id as u8);
        }
        assert_eq!(a.grow(lo, INITIAL_SLOTS), None, "the span fits");
        assert_eq!(a.grow(lo, INITIAL_SLOTS + 1), Some(INITIAL_SLOTS));
        assert_eq!(a.slots(), 2 * INITIAL_SLOTS);
        for id in lo..lo + INITIAL_SLOTS as u64 {
            assert!(a.slot(id).iter().all(|&b| b == id as u8), "{id}");
            assert_eq!(a.slot(id).as_ptr() as usize % 64, 0);
        }
        assert_eq!(a.grow(lo, 1000), Some(2 * INITIAL_SLOTS));
        assert_eq!(a.slots(), 1024, "rounded up to a power of two");
        assert_eq!(a.grow(lo, 1000), None);
        for id in lo..lo + INITIAL_SLOTS as u64 {
            assert!(a.slot(id).iter().all(|&b| b == id as u8), "{id}");
        }
    }

    #[test]
    fn symbol_framing_round_trips() {
        let mut s = vec![0xffu8; 64];
        encode_symbol(&mut s, b"abc");
        assert_eq!(decode_symbol(&s), Some(&b"abc"[..]));
        assert!(s[5..].iter().all(|&b| b == 0));
        s[0] = 200;
        assert_eq!(decode_symbol(&s), None);
    }
}
