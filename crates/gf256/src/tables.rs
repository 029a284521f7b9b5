//! Split-nibble product tables for all 256 coefficients, built at compile time.
//!
//! For coefficient `c`, bytes 0..16 hold `c·i` and bytes 16..32 hold `c·(i << 4)` for
//! nibble `i`, so `c·x = lo[x & 15] ^ hi[x >> 4]`: two byte shuffles per vector.

use crate::field::slow_mul;

/// 64-byte aligned so every entry sits in one cache line half and loads never split.
#[repr(C, align(64))]
pub(crate) struct NibbleTables(pub(crate) [[u8; 32]; 256]);

const fn build() -> NibbleTables {
    let mut t = [[0u8; 32]; 256];
    let mut c = 0;
    while c < 256 {
        let mut i = 0;
        while i < 16 {
            t[c][i] = slow_mul(c as u8, i as u8);
            t[c][16 + i] = slow_mul(c as u8, (i << 4) as u8);
            i += 1;
        }
        c += 1;
    }
    NibbleTables(t)
}

/// The tables.
pub(crate) static NIBBLE: NibbleTables = build();

/// `TAIL_MASK[r..r + 32]` has its last `r` bytes set: selects the new lanes of an
/// overlapping final vector that covers `r` unprocessed bytes.
#[repr(C, align(64))]
pub(crate) struct TailMask(pub(crate) [u8; 64]);

pub(crate) static TAIL_MASK: TailMask = {
    let mut m = [0u8; 64];
    let mut i = 32;
    while i < 64 {
        m[i] = 0xff;
        i += 1;
    }
    TailMask(m)
};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::field::MUL_TABLE;

    #[test]
    fn nibble_tables_reproduce_the_product() {
        for (t, row) in NIBBLE.0.iter().zip(MUL_TABLE.iter()) {
            for (x, &want) in row.iter().enumerate() {
                assert_eq!(t[x & 15] ^ t[16 + (x >> 4)], want);
            }
        }
        assert_eq!(std::ptr::addr_of!(NIBBLE) as usize % 64, 0);
    }
}
