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

/// GF2P8AFFINEQB bit matrices: `AFFINE[c]` makes the instruction multiply every byte by
/// `c` in our field. GFNI's own `gf2p8mulb` is hard-wired to the AES polynomial 0x11B, so
/// the affine form, a general 8×8 bit matrix, is the only way to use GFNI for 0x11D.
///
/// The instruction sets bit `b` of each output byte to the parity of
/// `matrix.byte[7 - b] & x`; so that byte holds, for each input bit `k`, bit `b` of `c·2^k`.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))] // x86-64 GFNI backends only
pub(crate) static AFFINE: [u64; 256] = {
    let mut t = [0u64; 256];
    let mut c = 0;
    while c < 256 {
        let mut m = 0u64;
        let mut b = 0;
        while b < 8 {
            let mut row = 0u64;
            let mut k = 0;
            while k < 8 {
                let col = slow_mul(c as u8, 1 << k);
                row |= (((col >> b) & 1) as u64) << k;
                k += 1;
            }
            m |= row << (8 * (7 - b));
            b += 1;
        }
        t[c] = m;
        c += 1;
    }
    t
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

    /// GF2P8AFFINEQB on one byte, as Intel's pseudo-code defines it (imm8 = 0).
    fn affine_byte(matrix: u64, x: u8) -> u8 {
        (0..8).fold(0u8, |out, b| {
            let row = (matrix >> (8 * (7 - b))) as u8;
            out | ((((row & x).count_ones() & 1) as u8) << b)
        })
    }

    /// The GFNI matrices checked without GFNI hardware: the emulated instruction
    /// reproduces every product of the field.
    #[test]
    fn affine_matrices_reproduce_the_product() {
        for (c, row) in MUL_TABLE.iter().enumerate() {
            for (x, &want) in row.iter().enumerate() {
                assert_eq!(affine_byte(AFFINE[c], x as u8), want, "c={c} x={x}");
            }
        }
        // The identity matrix of GFNI documentation is multiplication by one.
        assert_eq!(AFFINE[1], 0x0102_0408_1020_4080);
    }
}
