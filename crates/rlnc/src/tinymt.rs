//! TinyMT32 (RFC 8682), the pseudo-random generator RFC 8681 uses for coding coefficients.

const MAT1: u32 = 0x8f70_11ee;
const MAT2: u32 = 0xfc78_ff1f;
const TMAT: u32 = 0x3793_fdff;
const MASK: u32 = 0x7fff_ffff;
const MIN_LOOP: u32 = 8;
const PRE_LOOP: u32 = 8;

/// TinyMT32 state with the RFC 8682 parameter set.
#[derive(Debug, Clone)]
pub struct TinyMt32 {
    s: [u32; 4],
}

impl TinyMt32 {
    /// Seeds the generator (RFC 8682 `tinymt32_init`).
    pub fn new(seed: u32) -> Self {
        let mut s = [seed, MAT1, MAT2, TMAT];
        for i in 1..MIN_LOOP {
            let prev = s[((i - 1) & 3) as usize];
            s[(i & 3) as usize] ^=
                i.wrapping_add(1_812_433_253u32.wrapping_mul(prev ^ (prev >> 30)));
        }
        let mut t = TinyMt32 { s };
        if t.s[0] & MASK == 0 && t.s[1] == 0 && t.s[2] == 0 && t.s[3] == 0 {
            t.s = [
                u32::from(b'T'),
                u32::from(b'I'),
                u32::from(b'N'),
                u32::from(b'Y'),
            ];
        }
        for _ in 0..PRE_LOOP {
            t.next_state();
        }
        t
    }

    fn next_state(&mut self) {
        let mut y = self.s[3];
        let mut x = (self.s[0] & MASK) ^ self.s[1] ^ self.s[2];
        x ^= x << 1;
        y ^= (y >> 1) ^ x;
        self.s[0] = self.s[1];
        self.s[1] = self.s[2];
        self.s[2] = x ^ (y << 10);
        self.s[3] = y;
        let m = 0u32.wrapping_sub(y & 1);
        self.s[1] ^= m & MAT1;
        self.s[2] ^= m & MAT2;
    }

    /// Next 32-bit output (`tinymt32_generate_uint32`).
    pub fn next_u32(&mut self) -> u32 {
        self.next_state();
        let mut t0 = self.s[3];
        let t1 = self.s[0].wrapping_add(self.s[2] >> 8);
        t0 ^= t1;
        t0 ^ (0u32.wrapping_sub(t1 & 1) & TMAT)
    }

    /// Next value in 0..=255 (RFC 8681 `tinymt32_rand256`).
    pub fn rand256(&mut self) -> u8 {
        (self.next_u32() & 0xff) as u8
    }
}

/// Fills `out` with the dense coding coefficients of repair key `key` (RFC 8681,
/// density 15: every coefficient drawn from 1..=255, zero rejected).
pub fn coefficients(key: u16, out: &mut [u8]) {
    let mut g = TinyMt32::new(u32::from(key));
    for c in out.iter_mut() {
        *c = loop {
            let v = g.rand256();
            if v != 0 {
                break v;
            }
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc8682_rand256_vector_for_seed_1() {
        let mut g = TinyMt32::new(1);
        let got: Vec<u8> = (0..10).map(|_| g.rand256()).collect();
        assert_eq!(got, [37, 225, 177, 176, 21, 246, 54, 139, 168, 237]);
    }

    #[test]
    fn coefficients_are_nonzero_and_key_dependent() {
        let mut a = [0u8; 300];
        let mut b = [0u8; 300];
        coefficients(7, &mut a);
        coefficients(8, &mut b);
        assert!(a.iter().all(|&c| c != 0));
        assert_ne!(a, b);
    }
}
