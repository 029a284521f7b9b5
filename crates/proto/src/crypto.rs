//! Handshake authentication, key schedule, packet protection and replay rejection.
//!
//! Both sides hold a pre-shared key (PSK). The client's INITIATE and the server's ACCEPT are
//! authenticated with HMAC-SHA256 under a key derived from the PSK; the ACCEPT's MAC also
//! covers the client's random, binding the reply to the request. Session keys are
//! `HKDF-SHA256(psk, client_random ‖ server_random)`, one AES-256-GCM key per direction.
//! Every data packet is sealed with the nonce `0^4 ‖ pn` (the full 64-bit packet number,
//! though the header carries only its low 24 bits) and the header as associated data, so a
//! packet number is never reused under one key and a replay fails the window check.

use crate::wire::{
    Accept, DataHeader, Initiate, Reject, Reset, DATA_HEADER_LEN, MAC_LEN, RANDOM_LEN,
    RESET_TOKEN_LEN, TAG_LEN,
};
use ring::{aead, hkdf, hmac};
use thiserror::Error;

/// A packet failed authentication or replay checks.
#[derive(Debug, Error, Clone, Copy, PartialEq, Eq)]
pub enum CryptoError {
    /// The MAC or AEAD tag did not verify: wrong key, corruption or forgery.
    #[error("authentication failed")]
    BadAuth,
    /// The packet number was already seen or is too old.
    #[error("replayed or too old packet number")]
    Replay,
    /// The data packet header did not parse.
    #[error("malformed data packet header")]
    Malformed,
}

/// The pre-shared key with the MAC keys derived from it.
#[derive(Clone)]
pub struct Psk {
    handshake: hmac::Key,
    reset: hmac::Key,
    secret: Vec<u8>,
}

impl std::fmt::Debug for Psk {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Psk(..)")
    }
}

fn hkdf_bytes(secret: &[u8], salt: &[u8], info: &[u8]) -> [u8; 32] {
    struct Len32;
    impl hkdf::KeyType for Len32 {
        fn len(&self) -> usize {
            32
        }
    }
    let prk = hkdf::Salt::new(hkdf::HKDF_SHA256, salt).extract(secret);
    let mut out = [0u8; 32];
    let info = [info];
    // Both calls only fail if the requested length exceeds 255 × 32 bytes; 32 cannot.
    #[allow(clippy::expect_used)]
    prk.expand(&info, Len32)
        .and_then(|okm| okm.fill(&mut out))
        .expect("32-byte HKDF output");
    out
}

impl Psk {
    /// Wraps key material (at least 16 bytes; 32 random bytes recommended).
    pub fn new(secret: &[u8]) -> Option<Self> {
        if secret.len() < 16 {
            return None;
        }
        let hs = hkdf_bytes(secret, b"ctcp v1 handshake", b"mac");
        let rs = hkdf_bytes(secret, b"ctcp v1 reset", b"token");
        Some(Psk {
            handshake: hmac::Key::new(hmac::HMAC_SHA256, &hs),
            reset: hmac::Key::new(hmac::HMAC_SHA256, &rs),
            secret: secret.to_vec(),
        })
    }

    fn mac(&self, parts: &[&[u8]]) -> [u8; MAC_LEN] {
        let mut ctx = hmac::Context::with_key(&self.handshake);
        for p in parts {
            ctx.update(p);
        }
        let tag = ctx.sign();
        let mut out = [0u8; MAC_LEN];
        out.copy_from_slice(&tag.as_ref()[..MAC_LEN]);
        out
    }

    /// Fills in the MAC of an INITIATE.
    pub fn sign_initiate(&self, i: &mut Initiate) {
        i.mac = self.mac(&[&i.signed_part()]);
    }

    /// Verifies an INITIATE in constant time.
    pub fn verify_initiate(&self, i: &Initiate) -> Result<(), CryptoError> {
        constant_time_eq(&self.mac(&[&i.signed_part()]), &i.mac)
    }

    /// Fills in the MAC of an ACCEPT answering `client_random`.
    pub fn sign_accept(&self, a: &mut Accept, client_random: &[u8; RANDOM_LEN]) {
        a.mac = self.mac(&[&a.signed_part(), client_random]);
    }

    /// Verifies an ACCEPT against the random we sent.
    pub fn verify_accept(
        &self,
        a: &Accept,
        client_random: &[u8; RANDOM_LEN],
    ) -> Result<(), CryptoError> {
        constant_time_eq(&self.mac(&[&a.signed_part(), client_random]), &a.mac)
    }

    /// Fills in the MAC of a signed REJECT answering `client_random` (the INITIATE
    /// authenticated, so the server holds the key). Unsigned REJECTs are left as they are.
    pub fn sign_reject(&self, r: &mut Reject, client_random: &[u8; RANDOM_LEN]) {
        let mac = self.mac(&[&r.signed_part(), client_random]);
        if let Some((_, m)) = r.signed.as_mut() {
            *m = mac;
        }
    }

    /// Verifies a signed REJECT against the random we sent; an unsigned one never
    /// verifies.
    pub fn verify_reject(
        &self,
        r: &Reject,
        client_random: &[u8; RANDOM_LEN],
    ) -> Result<(), CryptoError> {
        let Some((_, mac)) = &r.signed else {
            return Err(CryptoError::BadAuth);
        };
        constant_time_eq(&self.mac(&[&r.signed_part(), client_random]), mac)
    }

    /// The stateless-reset token of a connection id.
    pub fn reset_token(&self, conn_id: u32) -> [u8; RESET_TOKEN_LEN] {
        let tag = hmac::sign(&self.reset, &conn_id.to_le_bytes());
        let mut out = [0u8; RESET_TOKEN_LEN];
        out.copy_from_slice(&tag.as_ref()[..RESET_TOKEN_LEN]);
        out
    }

    /// Verifies a stateless reset.
    pub fn verify_reset(&self, r: &Reset) -> Result<(), CryptoError> {
        constant_time_eq(&self.reset_token(r.conn_id), &r.token)
    }

    /// Derives the two directional packet keys of a session.
    pub fn session_keys(
        &self,
        client_random: &[u8; RANDOM_LEN],
        server_random: &[u8; RANDOM_LEN],
    ) -> (PacketKey, PacketKey) {
        let mut salt = [0u8; 2 * RANDOM_LEN];
        salt[..RANDOM_LEN].copy_from_slice(client_random);
        salt[RANDOM_LEN..].copy_from_slice(server_random);
        let c2s = hkdf_bytes(&self.secret, &salt, b"ctcp v1 client to server");
        let s2c = hkdf_bytes(&self.secret, &salt, b"ctcp v1 server to client");
        (PacketKey::new(&c2s), PacketKey::new(&s2c))
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> Result<(), CryptoError> {
    if a.len() != b.len() {
        return Err(CryptoError::BadAuth);
    }
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    if diff == 0 {
        Ok(())
    } else {
        Err(CryptoError::BadAuth)
    }
}

// Data packets carry GCM's full tag, the only length ring opens (in one pass).
const _: () = assert!(TAG_LEN == aead::MAX_TAG_LEN);

/// AES-256-GCM key of one direction. Data packets carry GCM's full 16-byte tag, so ring
/// opens them in one pass, in place.
pub struct PacketKey {
    key: aead::LessSafeKey,
}

impl std::fmt::Debug for PacketKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PacketKey(..)")
    }
}

fn nonce(pn: u64) -> aead::Nonce {
    let mut n = [0u8; 12];
    n[4..].copy_from_slice(&pn.to_be_bytes());
    aead::Nonce::assume_unique_for_key(n)
}

impl PacketKey {
    fn new(key: &[u8; 32]) -> Self {
        // AES-256-GCM accepts exactly 32-byte keys, which is what we pass.
        #[allow(clippy::expect_used)]
        let unbound = aead::UnboundKey::new(&aead::AES_256_GCM, key).expect("32-byte AES key");
        PacketKey {
            key: aead::LessSafeKey::new(unbound),
        }
    }

    /// Encrypts `packet[header_len..]` in place and appends the tag.
    pub fn seal(&self, pn: u64, packet: &mut Vec<u8>, header_len: usize) {
        self.seal_at(pn, packet, 0, header_len);
    }

    /// [`PacketKey::seal`] for the packet at `packet[start..]`, the last of a batch of
    /// datagrams being written into one buffer.
    pub fn seal_at(&self, pn: u64, packet: &mut Vec<u8>, start: usize, header_len: usize) {
        let (header, body) = packet[start..].split_at_mut(header_len);
        // Sealing fails only for inputs longer than GCM's 64 GiB limit; a packet is a
        // datagram.
        #[allow(clippy::expect_used)]
        let tag = self
            .key
            .seal_in_place_separate_tag(nonce(pn), aead::Aad::from(&*header), body)
            .expect("datagram-sized input");
        packet.extend_from_slice(tag.as_ref());
    }

    /// Decrypts `packet[header_len..]` in place and verifies its trailing tag (one GCM
    /// pass: ring's `open_in_place`, which compares the tag in constant time); returns the
    /// plaintext range of `packet`. On failure the body's contents are unspecified.
    pub fn open<'a>(
        &self,
        pn: u64,
        packet: &'a mut [u8],
        header_len: usize,
    ) -> Result<&'a [u8], CryptoError> {
        if packet.len() < header_len + TAG_LEN {
            return Err(CryptoError::BadAuth);
        }
        let (header, body) = packet.split_at_mut(header_len);
        let plain = self
            .key
            .open_in_place(nonce(pn), aead::Aad::from(&*header), body)
            .map_err(|_| CryptoError::BadAuth)?;
        Ok(plain)
    }
}

/// Sliding window of received packet numbers (2048 wide) that rejects duplicates and
/// anything older than the window.
#[derive(Debug, Clone)]
pub struct ReplayWindow {
    largest: Option<u64>,
    bits: [u64; Self::WORDS],
}

impl Default for ReplayWindow {
    fn default() -> Self {
        ReplayWindow {
            largest: None,
            bits: [0; Self::WORDS],
        }
    }
}

impl ReplayWindow {
    const WORDS: usize = 32;
    const WIDTH: u64 = (Self::WORDS * 64) as u64;

    fn bit(&mut self, pn: u64) -> (&mut u64, u64) {
        let idx = (pn % Self::WIDTH) as usize;
        (&mut self.bits[idx / 64], 1u64 << (idx % 64))
    }

    /// The largest packet number recorded, i.e. the largest that authenticated: the
    /// reference for reconstructing truncated packet numbers.
    pub fn largest(&self) -> Option<u64> {
        self.largest
    }

    /// Whether `pn` would be accepted (not yet seen and inside the window).
    pub fn check(&self, pn: u64) -> Result<(), CryptoError> {
        match self.largest {
            None => Ok(()),
            Some(l) if pn > l => Ok(()),
            Some(l) if l - pn >= Self::WIDTH => Err(CryptoError::Replay),
            Some(_) => {
                let idx = (pn % Self::WIDTH) as usize;
                if self.bits[idx / 64] & (1 << (idx % 64)) != 0 {
                    Err(CryptoError::Replay)
                } else {
                    Ok(())
                }
            }
        }
    }

    /// Records `pn` as received; call only after the packet authenticated.
    pub fn insert(&mut self, pn: u64) {
        match self.largest {
            Some(l) if pn <= l => {}
            Some(l) => {
                // Clear the slots between the old largest and the new one.
                let gap = (pn - l).min(Self::WIDTH);
                for q in 1..=gap {
                    let (w, m) = self.bit(l + q);
                    *w &= !m;
                }
                self.largest = Some(pn);
            }
            None => {
                self.largest = Some(pn);
            }
        }
        let (w, m) = self.bit(pn);
        *w |= m;
    }
}

/// The receive path of a DATA packet, in the order that keeps a forgery harmless: parse
/// the header and reconstruct the full packet number from the largest one that
/// *authenticated*, reject a replay, authenticate (the nonce is built from the full number,
/// the associated data is the header as sent), and only then record the number. Returns
/// the header, with the full packet number, and the plaintext range of `packet`.
pub fn open_data<'a>(
    key: &PacketKey,
    replay: &mut ReplayWindow,
    packet: &'a mut [u8],
) -> Result<(DataHeader, &'a [u8]), CryptoError> {
    let header = DataHeader::parse(packet, replay.largest()).map_err(|_| CryptoError::Malformed)?;
    replay.check(header.pn)?;
    let plain = key.open(header.nonce_pn(), packet, DATA_HEADER_LEN)?;
    replay.insert(header.pn);
    Ok((header, plain))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handshake_macs_verify_and_bind() {
        let psk = Psk::new(&[7u8; 32]).unwrap();
        let other = Psk::new(&[8u8; 32]).unwrap();
        let mut i = Initiate {
            conn_id: 1,
            client_random: [1; 32],
            timestamp_ms: 5,
            train: 2,
            params: crate::wire::Params::default(),
            len: 1200,
            mac: [0; 16],
        };
        psk.sign_initiate(&mut i);
        assert!(psk.verify_initiate(&i).is_ok());
        assert_eq!(other.verify_initiate(&i), Err(CryptoError::BadAuth));
        // The MAC covers the train position and the padding.
        for tampered in [
            Initiate {
                train: 3,
                ..i.clone()
            },
            Initiate {
                len: 1201,
                ..i.clone()
            },
        ] {
            assert!(psk.verify_initiate(&tampered).is_err());
        }
        let mut a = Accept {
            conn_id: 1,
            server_random: [2; 32],
            train: 2,
            train_seen: 2,
            train_spread: 1,
            train_span_us: 1150,
            params: crate::wire::Params::default(),
            len: 1200,
            mac: [0; 16],
        };
        psk.sign_accept(&mut a, &i.client_random);
        assert!(psk.verify_accept(&a, &i.client_random).is_ok());
        assert!(psk.verify_accept(&a, &[9; 32]).is_err());
        for tampered in [
            Accept {
                train_seen: 9,
                ..a.clone()
            },
            Accept {
                train_spread: 9,
                ..a.clone()
            },
            Accept {
                train_span_us: 1,
                ..a.clone()
            },
            Accept {
                len: 1000,
                ..a.clone()
            },
        ] {
            assert!(psk.verify_accept(&tampered, &i.client_random).is_err());
        }
        assert!(Psk::new(&[1; 8]).is_none());
    }

    #[test]
    fn signed_rejects_verify_and_bind_unsigned_never_do() {
        use crate::wire::{Params, RejectReason};
        let psk = Psk::new(&[7u8; 32]).unwrap();
        let mut r = Reject {
            version: crate::wire::VERSION,
            conn_id: 3,
            echo: [1; 16],
            reason: RejectReason::Params,
            signed: Some((Params::default(), [0; 16])),
        };
        psk.sign_reject(&mut r, &[1; 32]);
        assert!(psk.verify_reject(&r, &[1; 32]).is_ok());
        assert!(
            psk.verify_reject(&r, &[2; 32]).is_err(),
            "bound to the request"
        );
        let mut tampered = r.clone();
        if let Some((p, _)) = tampered.signed.as_mut() {
            p.symbol_size = 9;
        }
        assert!(psk.verify_reject(&tampered, &[1; 32]).is_err());
        let unsigned = Reject {
            reason: RejectReason::Auth,
            signed: None,
            ..r
        };
        assert!(psk.verify_reject(&unsigned, &[1; 32]).is_err());
    }

    #[test]
    fn seal_open_round_trip_and_tamper() {
        let psk = Psk::new(&[7u8; 32]).unwrap();
        let (c2s, s2c) = psk.session_keys(&[1; 32], &[2; 32]);
        let mut pkt = Vec::new();
        DataHeader {
            conn_id: 3,
            path: 0,
            pn: 9,
        }
        .emit(&mut pkt);
        pkt.extend_from_slice(b"secret payload");
        c2s.seal(9, &mut pkt, DATA_HEADER_LEN);
        let mut copy = pkt.clone();
        assert_eq!(
            c2s.open(9, &mut copy, DATA_HEADER_LEN).unwrap(),
            b"secret payload"
        );
        let mut copy = pkt.clone();
        assert!(
            s2c.open(9, &mut copy, DATA_HEADER_LEN).is_err(),
            "wrong direction key"
        );
        let mut copy = pkt.clone();
        assert!(
            c2s.open(10, &mut copy, DATA_HEADER_LEN).is_err(),
            "wrong nonce"
        );
        let mut copy = pkt.clone();
        copy[3] ^= 1;
        assert!(
            c2s.open(9, &mut copy, DATA_HEADER_LEN).is_err(),
            "header is authenticated"
        );
    }

    /// The data packet tag is standard AES-256-GCM, checked against a second
    /// implementation: RustCrypto's `aes-gcm` opens what [`PacketKey::seal`] sealed, byte
    /// for byte the same ciphertext and tag, and [`PacketKey::open`] opens what it sealed.
    /// Flipping any tag or body bit fails.
    #[test]
    fn tag_is_standard_gcm_and_every_bit_counts() {
        use aes_gcm::{AeadInPlace, Aes256Gcm, KeyInit};
        let key = [0x5au8; 32];
        let ours = PacketKey::new(&key);
        let theirs = Aes256Gcm::new((&key).into());
        for (pn, len) in [
            (0u64, 0usize),
            (1, 1),
            (77, 100),
            (1 << 40, 1420),
            (9, 3000),
        ] {
            let mut n = [0u8; 12];
            n[4..].copy_from_slice(&pn.to_be_bytes());
            let mut pkt = Vec::new();
            DataHeader {
                conn_id: 3,
                path: 0,
                pn,
            }
            .emit(&mut pkt);
            pkt.extend((0..len).map(|i| (i * 7 + 3) as u8));
            let plain = pkt.clone();
            ours.seal(pn, &mut pkt, DATA_HEADER_LEN);
            assert_eq!(pkt.len(), plain.len() + TAG_LEN);

            let mut body = plain[DATA_HEADER_LEN..].to_vec();
            let tag = theirs
                .encrypt_in_place_detached((&n).into(), &plain[..DATA_HEADER_LEN], &mut body)
                .unwrap();
            assert_eq!(&pkt[DATA_HEADER_LEN..DATA_HEADER_LEN + len], &body[..]);
            assert_eq!(&pkt[DATA_HEADER_LEN + len..], &tag[..]);
            let (head, rest) = pkt.split_at(DATA_HEADER_LEN);
            let mut theirs_open = rest[..len].to_vec();
            theirs
                .decrypt_in_place_detached(
                    (&n).into(),
                    head,
                    &mut theirs_open,
                    (&rest[len..]).into(),
                )
                .unwrap();
            assert_eq!(theirs_open, &plain[DATA_HEADER_LEN..]);

            for bit in (DATA_HEADER_LEN * 8..pkt.len() * 8).step_by(37) {
                let mut copy = pkt.clone();
                copy[bit / 8] ^= 1 << (bit % 8);
                assert!(
                    ours.open(pn, &mut copy, DATA_HEADER_LEN).is_err(),
                    "bit {bit}"
                );
            }
            let mut copy = pkt.clone();
            assert_eq!(
                ours.open(pn, &mut copy, DATA_HEADER_LEN).unwrap(),
                &plain[DATA_HEADER_LEN..]
            );
        }
    }

    #[test]
    fn open_data_reconstructs_and_rejects_replays_and_forgeries() {
        let psk = Psk::new(&[7u8; 32]).unwrap();
        let (c2s, _) = psk.session_keys(&[1; 32], &[2; 32]);
        let seal = |pn: u64| {
            let mut pkt = Vec::new();
            DataHeader {
                conn_id: 3,
                path: 0,
                pn,
            }
            .emit(&mut pkt);
            pkt.extend_from_slice(&pn.to_le_bytes());
            c2s.seal(pn, &mut pkt, DATA_HEADER_LEN);
            pkt
        };
        let open = |w: &mut ReplayWindow, pkt: &[u8]| {
            let mut copy = pkt.to_vec();
            open_data(&c2s, w, &mut copy).map(|(h, plain)| {
                assert_eq!(plain, h.pn.to_le_bytes(), "the plaintext of that number");
                h.pn
            })
        };

        let mut w = ReplayWindow::default();
        assert_eq!(open(&mut w, &seal(0)), Ok(0));
        assert_eq!(open(&mut w, &seal(2)), Ok(2));
        assert_eq!(
            open(&mut w, &seal(1)),
            Ok(1),
            "reordered, inside the window"
        );
        assert_eq!(open(&mut w, &seal(2)), Err(CryptoError::Replay));
        assert_eq!(w.largest(), Some(2));

        // A forgery far ahead does not authenticate, so it cannot move the reference.
        let mut forged = seal(3);
        forged[DATA_HEADER_LEN - 3..DATA_HEADER_LEN].copy_from_slice(&[0x00, 0x00, 0x7f]);
        assert_eq!(open(&mut w, &forged), Err(CryptoError::BadAuth));
        let mut forged = seal(3);
        let n = forged.len();
        forged[n - 1] ^= 1;
        assert_eq!(open(&mut w, &forged), Err(CryptoError::BadAuth));
        assert_eq!(w.largest(), Some(2));
        assert_eq!(open(&mut w, &seal(3)), Ok(3), "the real one still opens");
        assert_eq!(
            open(&mut w, &seal(3)[..DATA_HEADER_LEN - 1]),
            Err(CryptoError::Malformed)
        );

        // Across 2^32 (a multiple of the 2^24 window): the high bits come from the largest
        // authenticated number.
        let mut w = ReplayWindow::default();
        w.insert(0xffff_fff0); // as if that packet had authenticated
        assert_eq!(open(&mut w, &seal(0x1_0000_0002)), Ok(0x1_0000_0002));
        assert_eq!(open(&mut w, &seal(0xffff_fff5)), Ok(0xffff_fff5), "late");
        assert_eq!(open(&mut w, &seal(0x1_0000_0002)), Err(CryptoError::Replay));

        // A packet captured 2^24 numbers ago has the same low bits as a fresh one: it is
        // read as the fresh number, passes the window, and fails authentication because
        // the nonce comes from all 64 bits.
        let old = seal(5);
        let mut w = ReplayWindow::default();
        w.insert((1 << 24) + 3);
        assert_eq!(open(&mut w, &old), Err(CryptoError::BadAuth));
        assert_eq!(w.largest(), Some((1 << 24) + 3));
        assert_eq!(open(&mut w, &seal((1 << 24) + 5)), Ok((1 << 24) + 5));
    }

    #[test]
    fn replay_window() {
        let mut w = ReplayWindow::default();
        for pn in [5u64, 3, 10, 4000, 3990] {
            assert!(w.check(pn).is_ok());
            w.insert(pn);
            assert_eq!(w.check(pn), Err(CryptoError::Replay));
        }
        assert_eq!(
            w.check(10),
            Err(CryptoError::Replay),
            "fell out of the window"
        );
        assert!(w.check(3999).is_ok());
        assert!(w.check(4001).is_ok());
    }
}
