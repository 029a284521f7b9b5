//! Wire format: typed views over datagram bytes with explicit `parse`/`emit`.
//!
//! Every datagram starts with a one-byte packet type. Handshake packets travel in the clear
//! but carry a MAC keyed by the pre-shared key; data packets carry an AEAD-sealed payload
//! made of chunks (ACK, SOURCE and SOURCE_LAST, REPAIR, PING, CLOSE, PADDING). The full layout, with
//! diagrams, is in `docs/PROTOCOL.md`.

use thiserror::Error;

mod data;
mod datagram;
mod handshake;
#[cfg(test)]
mod tests;

pub use self::data::{
    conn_id_offset, emit_close, emit_path_challenge, emit_path_response, emit_ping, emit_repair,
    emit_source, emit_source_last, peek_conn_id, repair_chunk_len, Ack, Chunk, Chunks, DataHeader,
    LateArrivals, PathAck, ACK_CHUNK_MAX_LEN, CHUNK_ACK, CHUNK_CLOSE, CHUNK_PADDING,
    CHUNK_PATH_ACK, CHUNK_PATH_CHALLENGE, CHUNK_PATH_RESPONSE, CHUNK_PING, CHUNK_REPAIR,
    CHUNK_SOURCE, CHUNK_SOURCE_LAST, MAX_LATE, REPAIR_HEADER_LEN, SOURCE_HEADER_LEN,
    SOURCE_LAST_HEADER_LEN, SYMBOL_ID_LEN,
};
pub use self::datagram::{
    emit_datagram, emit_datagram_repair, CHUNK_DATAGRAM, CHUNK_DATAGRAM_REPAIR,
    DATAGRAM_HEADER_LEN, DATAGRAM_REPAIR_HEADER_LEN, DATAGRAM_REPAIR_MAX_COUNT,
};
pub use self::handshake::{
    Accept, Initiate, ParamMismatch, Params, Reject, RejectReason, Reset, FEATURE_DATAGRAMS,
    KNOWN_FEATURES, OPTIONAL_FEATURES,
};

/// Protocol version carried in the handshake; a peer of another version is refused (the
/// history is in docs/PROTOCOL.md, "Versions").
pub const VERSION: u8 = 12;

/// Packet type: client → server handshake request.
pub const TYPE_INITIATE: u8 = 0x01;
/// Packet type: server → client handshake response.
pub const TYPE_ACCEPT: u8 = 0x02;
/// Packet type: AEAD-protected data packet.
pub const TYPE_DATA: u8 = 0x03;
/// Packet types of data packets sent on an added path (multipath): `TYPE_DATA_PATH + id`
/// for path ids `1..MAX_PATHS`; path 0 keeps [`TYPE_DATA`], so a single-path session's
/// packets are the same bytes as before paths existed. The header is as long as
/// [`TYPE_DATA`]'s: the path id rides in the type byte.
pub const TYPE_DATA_PATH: u8 = 0x10;
/// Paths one session may have at once (ids `0..MAX_PATHS`): bounded so a peer cannot make
/// the other end keep unbounded per-path state.
pub const MAX_PATHS: u8 = 8;

/// The path a data packet's type byte names, or `None` if it is not a data type.
#[must_use]
pub fn data_path(ty: u8) -> Option<u8> {
    match ty {
        TYPE_DATA => Some(0),
        t if t > TYPE_DATA_PATH && t < TYPE_DATA_PATH + MAX_PATHS => Some(t - TYPE_DATA_PATH),
        _ => None,
    }
}

/// The type byte of a data packet on path `path` (the inverse of [`data_path`]).
#[must_use]
pub fn data_type(path: u8) -> u8 {
    if path == 0 {
        TYPE_DATA
    } else {
        TYPE_DATA_PATH + path
    }
}

/// Packet type: stateless reset, sent for data packets of an unknown connection.
pub const TYPE_RESET: u8 = 0x04;
/// Packet type: server → client refusal of an INITIATE (see [`Reject`]). Its layout up to
/// the reason byte is the same in every protocol version, so a client of another version
/// can still read why it was refused.
pub const TYPE_REJECT: u8 = 0x05;

/// Length of a connection id on the wire: 32 bits, chosen at random by the client. Only
/// the sessions of one server endpoint share an id space (at most `max_sessions`, 256 by
/// default), so a clash is a 2^-32-per-session event, and the endpoint refuses a clashing
/// handshake instead of touching the live session (see `Endpoint`).
pub const CONN_ID_LEN: usize = 4;
/// Where the connection id starts in DATA and RESET packets (after the type byte). With
/// [`HANDSHAKE_CONN_ID_OFFSET`] this is the contract a stateless L4 balancer relies on to
/// keep every datagram of a session on one gateway instance: every packet a client sends
/// carries the id at the offset its type byte (offset 0) names, from the first INITIATE
/// copy on and after any address change (`configs/reverse-balancer.nft` hashes these
/// bytes; moving them breaks deployed balancers).
pub const CONN_ID_OFFSET: usize = 1;
/// Where the connection id starts in INITIATE, ACCEPT and REJECT packets (after the type
/// and version bytes); see [`CONN_ID_OFFSET`].
pub const HANDSHAKE_CONN_ID_OFFSET: usize = 2;
/// Length of the handshake randoms.
pub const RANDOM_LEN: usize = 32;
/// Length of a handshake MAC (HMAC-SHA256 truncated).
pub const MAC_LEN: usize = 16;
/// Length of the AEAD tag appended to every data packet: AES-256-GCM's full 128-bit tag.
/// A 96-bit tag would save 4 bytes per datagram (0.27 % of a full one), but ring opens
/// only full tags, and the short tag's open took two GCM passes and a copy, more than
/// twice a one-pass open (figures: BENCHMARKS.md, "Data path and scale").
pub const TAG_LEN: usize = 16;
/// Length of a stateless-reset token (HMAC-SHA256 truncated): short enough that a RESET
/// stays smaller than the smallest data packet that may trigger one.
pub const RESET_TOKEN_LEN: usize = 12;
/// Length of the packet number in a DATA header: the low 24 bits of the transmission
/// number (see [`expand_u24`]).
pub const PN_LEN: usize = 3;
/// Length of a data packet header: type, connection id, truncated packet number.
pub const DATA_HEADER_LEN: usize = 1 + CONN_ID_LEN + PN_LEN;
/// Length of the transport parameters carried by INITIATE, ACCEPT and an authenticated
/// REJECT ([`Params`]).
pub const PARAMS_LEN: usize = 2 + 4 + 8 + 8 + 4;
/// Length of an unpadded INITIATE packet (train copies are padded up to a full datagram).
pub const INITIATE_LEN: usize = 1 + 1 + CONN_ID_LEN + RANDOM_LEN + 8 + 1 + PARAMS_LEN + MAC_LEN;
/// Length of an unpadded ACCEPT packet; never larger than [`INITIATE_LEN`], and an ACCEPT
/// is padded to at most the length of the INITIATE it answers (no amplification).
pub const ACCEPT_LEN: usize =
    1 + 1 + CONN_ID_LEN + RANDOM_LEN + 1 + 1 + 1 + 4 + PARAMS_LEN + MAC_LEN;
/// Bytes of the INITIATE (from offset 6, the start of the client random) a REJECT echoes,
/// so only someone who saw the INITIATE can forge one.
pub const REJECT_ECHO_LEN: usize = 16;
/// Length of an unauthenticated REJECT (reasons [`RejectReason::Auth`] and
/// [`RejectReason::Version`]): the server could not verify the INITIATE, so it has no key
/// to sign with and sends only the reason. Smaller than any INITIATE of protocol version
/// 3 or later (63 bytes and up).
pub const REJECT_LEN: usize = 1 + 1 + CONN_ID_LEN + REJECT_ECHO_LEN + 1;
/// Length of an authenticated REJECT: the short form plus the server's [`Params`] and a MAC
/// binding it to the client random. Smaller than the INITIATE it answers.
pub const REJECT_SIGNED_LEN: usize = REJECT_LEN + PARAMS_LEN + MAC_LEN;
/// Largest handshake datagram accepted: a padded copy is at most a full datagram.
pub const MAX_HANDSHAKE_LEN: usize = 1500;
/// Length of a stateless RESET packet; smaller than any data packet that can trigger it.
pub const RESET_LEN: usize = 1 + CONN_ID_LEN + RESET_TOKEN_LEN;
/// Length of the smallest possible DATA packet (header and tag around an empty payload).
/// A stateless RESET answers only DATA packets longer than this, so it is always smaller
/// than its trigger and never answers a RESET-sized datagram.
pub const MIN_DATA_LEN: usize = DATA_HEADER_LEN + TAG_LEN;

const _: () = assert!(ACCEPT_LEN <= INITIATE_LEN);
const _: () = assert!(DATA_HEADER_LEN == CONN_ID_OFFSET + CONN_ID_LEN + PN_LEN);
const _: () = assert!(REJECT_SIGNED_LEN <= INITIATE_LEN);
const _: () = assert!(REJECT_LEN < 63);
const _: () = assert!(RESET_LEN < MIN_DATA_LEN);

/// A malformed datagram or chunk. Callers drop the datagram; nothing here allocates state.
#[derive(Debug, Error, Clone, Copy, PartialEq, Eq)]
pub enum WireError {
    /// The buffer ended before the structure did.
    #[error("truncated {0}")]
    Truncated(&'static str),
    /// An unknown packet or chunk type.
    #[error("unknown {what} type {value:#04x}")]
    UnknownType {
        /// Which kind of type byte.
        what: &'static str,
        /// Its value.
        value: u8,
    },
    /// The handshake names a protocol version we do not speak.
    #[error("unsupported protocol version {0}")]
    Version(u8),
    /// A field holds a value the protocol forbids.
    #[error("invalid {0}")]
    Invalid(&'static str),
}

/// Byte reader over a slice; every read is bounds-checked.
#[derive(Debug)]
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    /// Starts reading `buf` from its first byte.
    pub fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }
    /// Bytes not yet read.
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }
    /// Whether everything has been read.
    pub fn is_empty(&self) -> bool {
        self.remaining() == 0
    }
    /// Reads `n` bytes.
    pub fn bytes(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], WireError> {
        if self.remaining() < n {
            return Err(WireError::Truncated(what));
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }
    /// Reads a fixed-size array.
    pub fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], WireError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.bytes(N, what)?);
        Ok(a)
    }
    /// Reads one byte.
    pub fn u8(&mut self, what: &'static str) -> Result<u8, WireError> {
        Ok(self.bytes(1, what)?[0])
    }
    /// Reads a little-endian u16.
    pub fn u16(&mut self, what: &'static str) -> Result<u16, WireError> {
        Ok(u16::from_le_bytes(self.array(what)?))
    }
    /// Reads a little-endian 24-bit integer.
    pub fn u24(&mut self, what: &'static str) -> Result<u32, WireError> {
        let [a, b, c] = self.array(what)?;
        Ok(u32::from_le_bytes([a, b, c, 0]))
    }
    /// Reads a little-endian u32.
    pub fn u32(&mut self, what: &'static str) -> Result<u32, WireError> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }
    /// Reads a little-endian u64.
    pub fn u64(&mut self, what: &'static str) -> Result<u64, WireError> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }
    /// Reads a QUIC-style variable-length integer (1, 2, 4 or 8 bytes, big-endian).
    pub fn varint(&mut self, what: &'static str) -> Result<u64, WireError> {
        let first = self.u8(what)?;
        let len = 1usize << (first >> 6);
        let mut v = u64::from(first & 0x3f);
        for &b in self.bytes(len - 1, what)? {
            v = (v << 8) | u64::from(b);
        }
        Ok(v)
    }
    /// The unread rest.
    pub fn rest(&mut self) -> &'a [u8] {
        let s = &self.buf[self.pos..];
        self.pos = self.buf.len();
        s
    }
}

/// Largest value a varint can carry.
pub const VARINT_MAX: u64 = (1 << 62) - 1;

/// Appends a QUIC-style varint. Values above [`VARINT_MAX`] are clamped to it.
pub fn put_varint(out: &mut Vec<u8>, v: u64) {
    let v = v.min(VARINT_MAX);
    if v < 1 << 6 {
        out.push(v as u8);
    } else if v < 1 << 14 {
        out.extend_from_slice(&((v as u16) | 0x4000).to_be_bytes());
    } else if v < 1 << 30 {
        out.extend_from_slice(&((v as u32) | 0x8000_0000).to_be_bytes());
    } else {
        out.extend_from_slice(&(v | 0xc000_0000_0000_0000).to_be_bytes());
    }
}

/// Encoded size of a varint.
pub fn varint_len(v: u64) -> usize {
    match v {
        0..=0x3f => 1,
        0x40..=0x3fff => 2,
        0x4000..=0x3fff_ffff => 4,
        _ => 8,
    }
}

/// Reconstructs a 64-bit number from its low `bits` bits (1..=32): of all values with
/// those low bits, the one closest to `expected` (RFC 9000 §A.3). Exact whenever the true
/// value lies in `(expected − 2^(bits−1), expected + 2^(bits−1)]`; never overflows. Bits of
/// `truncated` above `bits` are ignored.
pub fn expand_truncated(expected: u64, truncated: u32, bits: u32) -> u64 {
    debug_assert!((1..=32).contains(&bits), "window of {bits} bits");
    let bits = bits.clamp(1, 32);
    let win: u64 = 1 << bits;
    let half = win / 2;
    let candidate = (expected & !(win - 1)) | (u64::from(truncated) & (win - 1));
    if candidate.checked_add(half).is_some_and(|c| c <= expected) && candidate <= u64::MAX - win {
        candidate + win
    } else if candidate > expected.saturating_add(half) && candidate >= win {
        candidate - win
    } else {
        candidate
    }
}

/// [`expand_truncated`] with a 32-bit window (the tests' reference cases).
#[cfg(test)]
fn expand_u32(expected: u64, truncated: u32) -> u64 {
    expand_truncated(expected, truncated, 32)
}

/// [`expand_truncated`] with a 24-bit window: the packet numbers and symbol ids on the
/// wire. Exact within ±2^23 of `expected` (8.4 million packets: 97 s of full-sized
/// datagrams at 1 Gbit/s), far beyond any flight or coding window (at most 65536).
///
/// Packet numbers use `expected = largest authenticated + 1`, symbol ids the receiver's
/// decoder frontier (see [`Chunks::new`]).
pub fn expand_u24(expected: u64, truncated: u32) -> u64 {
    expand_truncated(expected, truncated, 24)
}

/// The low 32 bits of `v` (the truncation is the point).
#[cfg(test)]
fn low32(v: u64) -> u32 {
    (v & 0xffff_ffff) as u32
}

/// The low 24 bits of `v` as the 3 little-endian bytes carried on the wire.
fn low24_le(v: u64) -> [u8; 3] {
    let b = v.to_le_bytes();
    [b[0], b[1], b[2]]
}

/// Reads the zero padding between a handshake packet's fields and its MAC, leaving the
/// MAC. Non-zero padding is malformed (the MAC covers it anyway; zeros keep it canonical).
fn skip_padding(r: &mut Reader<'_>, what: &'static str) -> Result<(), WireError> {
    let pad = r
        .remaining()
        .checked_sub(MAC_LEN)
        .ok_or(WireError::Truncated(what))?;
    if r.bytes(pad, what)?.iter().any(|&b| b != 0) {
        return Err(WireError::Invalid("handshake padding"));
    }
    Ok(())
}
