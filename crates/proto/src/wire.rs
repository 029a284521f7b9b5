//! Wire format: typed views over datagram bytes with explicit `parse`/`emit`.
//!
//! Every datagram starts with a one-byte packet type. Handshake packets travel in the clear
//! but carry a MAC keyed by the pre-shared key; data packets carry an AEAD-sealed payload
//! made of chunks (ACK, SOURCE and SOURCE_LAST, REPAIR, PING, CLOSE, PADDING). The full layout, with
//! diagrams, is in `docs/PROTOCOL.md`.

use ctcp_rlnc::{Coefficients, RepairHeader, SymbolId};
use thiserror::Error;

/// Protocol version carried in the handshake; a peer of another version is refused (the
/// history is in docs/PROTOCOL.md, "Versions").
pub const VERSION: u8 = 6;

/// Packet type: client → server handshake request.
pub const TYPE_INITIATE: u8 = 0x01;
/// Packet type: server → client handshake response.
pub const TYPE_ACCEPT: u8 = 0x02;
/// Packet type: AEAD-protected data packet.
pub const TYPE_DATA: u8 = 0x03;
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
/// Length of the handshake randoms.
pub const RANDOM_LEN: usize = 32;
/// Length of a handshake MAC (HMAC-SHA256 truncated).
pub const MAC_LEN: usize = 16;
/// Length of the AEAD tag appended to every data packet: AES-256-GCM's tag truncated to
/// 96 bits, which NIST SP 800-38D allows without restriction and IPsec uses (RFC 4106's
/// 12-octet ICV). Why not 16: the tag is per-packet overhead on every datagram, and on a
/// lossy link the bytes put on the wire per goodput byte are what ctcp is judged by; the
/// 4 bytes are 0.27 % of the link, almost half of what a 1.05 / (1 − loss) wire budget
/// leaves above the headers and the erasure minimum. A forgery still needs a 2^-96 guess
/// per datagram (less a few bits for a datagram of 90 GHASH blocks), and a failed guess
/// is a silent drop that changes no state.
pub const TAG_LEN: usize = 12;
/// Length of a stateless-reset token (HMAC-SHA256 truncated): as long as the AEAD tag, so
/// a RESET stays smaller than the smallest data packet that may trigger one.
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

/// Client → server handshake request (sent in the clear, MAC'd with the PSK).
///
/// The first copies of a handshake go out back to back as a *train*, each padded to a full
/// datagram: the bottleneck spaces them out, and the spacing the server sees (reported in
/// its ACCEPTs) is the path's rate towards the server, so the client's first data flight
/// can start near the link rate instead of spending a round trip on a start-up probe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Initiate {
    /// Connection id chosen by the client; names the session in both directions.
    pub conn_id: u32,
    /// Client randomness for the key schedule.
    pub client_random: [u8; RANDOM_LEN],
    /// Client wall-clock time in milliseconds since the Unix epoch, for replay rejection.
    pub timestamp_ms: u64,
    /// Position in the handshake train, from 1; 0 for a copy outside the train.
    pub train: u8,
    /// The client's transport parameters.
    pub params: Params,
    /// Total datagram length, at least [`INITIATE_LEN`]: zero padding fills it before
    /// the MAC.
    pub len: usize,
    /// HMAC over the preceding fields and the padding.
    pub mac: [u8; MAC_LEN],
}

impl Initiate {
    /// Parses an INITIATE packet (type byte included).
    pub fn parse(buf: &[u8]) -> Result<Self, WireError> {
        if buf.len() > MAX_HANDSHAKE_LEN {
            return Err(WireError::Invalid("initiate length"));
        }
        let mut r = Reader::new(buf);
        if r.u8("type")? != TYPE_INITIATE {
            return Err(WireError::Invalid("initiate type"));
        }
        let version = r.u8("version")?;
        if version != VERSION {
            return Err(WireError::Version(version));
        }
        let conn_id = r.u32("conn id")?;
        let client_random = r.array("client random")?;
        let timestamp_ms = r.u64("timestamp")?;
        let train = r.u8("train")?;
        let params = Params::parse(&mut r)?;
        skip_padding(&mut r, "initiate mac")?;
        let mac = r.array("mac")?;
        Ok(Initiate {
            conn_id,
            client_random,
            timestamp_ms,
            train,
            params,
            len: buf.len(),
            mac,
        })
    }

    /// The bytes the MAC covers: everything before it, padding included.
    pub fn signed_part(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.len.max(INITIATE_LEN));
        v.push(TYPE_INITIATE);
        v.push(VERSION);
        v.extend_from_slice(&self.conn_id.to_le_bytes());
        v.extend_from_slice(&self.client_random);
        v.extend_from_slice(&self.timestamp_ms.to_le_bytes());
        v.push(self.train);
        self.params.emit(&mut v);
        v.resize(self.len.max(INITIATE_LEN) - MAC_LEN, 0);
        v
    }

    /// Appends the packet to `out`.
    pub fn emit(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.signed_part());
        out.extend_from_slice(&self.mac);
    }
}

/// Server → client handshake response, one per INITIATE copy received.
///
/// It echoes the copy's train position and reports how the server saw the train arrive,
/// and is padded to the length of the copy it answers, so the ACCEPTs form a train back
/// (their spacing at the client bounds the path's rate towards the client) without ever
/// being larger than what drew them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Accept {
    /// The connection id from the INITIATE.
    pub conn_id: u32,
    /// Server randomness for the key schedule.
    pub server_random: [u8; RANDOM_LEN],
    /// The train position of the INITIATE copy this answers (0: not a train copy).
    pub train: u8,
    /// Train copies the server has received so far, distinct positions.
    pub train_seen: u8,
    /// Highest minus lowest of those positions: the copies that passed the bottleneck
    /// between the first and the last arrival, lost ones included.
    pub train_spread: u8,
    /// Microseconds between the first and the last of those arrivals.
    pub train_span_us: u32,
    /// The parameters the session runs with, as the server settled them
    /// ([`Params::negotiate`]).
    pub params: Params,
    /// Total datagram length, at least [`ACCEPT_LEN`] (zero padding before the MAC).
    pub len: usize,
    /// HMAC over the preceding fields, the padding and the client random, binding it to
    /// the request.
    pub mac: [u8; MAC_LEN],
}

impl Accept {
    /// Parses an ACCEPT packet.
    pub fn parse(buf: &[u8]) -> Result<Self, WireError> {
        if buf.len() > MAX_HANDSHAKE_LEN {
            return Err(WireError::Invalid("accept length"));
        }
        let mut r = Reader::new(buf);
        if r.u8("type")? != TYPE_ACCEPT {
            return Err(WireError::Invalid("accept type"));
        }
        let version = r.u8("version")?;
        if version != VERSION {
            return Err(WireError::Version(version));
        }
        let conn_id = r.u32("conn id")?;
        let server_random = r.array("server random")?;
        let train = r.u8("train")?;
        let train_seen = r.u8("train seen")?;
        let train_spread = r.u8("train spread")?;
        let train_span_us = r.u32("train span")?;
        let params = Params::parse(&mut r)?;
        skip_padding(&mut r, "accept mac")?;
        let mac = r.array("mac")?;
        Ok(Accept {
            conn_id,
            server_random,
            train,
            train_seen,
            train_spread,
            train_span_us,
            params,
            len: buf.len(),
            mac,
        })
    }

    /// The bytes the MAC covers (before the client random is appended): everything before
    /// the MAC, padding included.
    pub fn signed_part(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.len.max(ACCEPT_LEN));
        v.push(TYPE_ACCEPT);
        v.push(VERSION);
        v.extend_from_slice(&self.conn_id.to_le_bytes());
        v.extend_from_slice(&self.server_random);
        v.push(self.train);
        v.push(self.train_seen);
        v.push(self.train_spread);
        v.extend_from_slice(&self.train_span_us.to_le_bytes());
        self.params.emit(&mut v);
        v.resize(self.len.max(ACCEPT_LEN) - MAC_LEN, 0);
        v
    }

    /// Appends the packet to `out`.
    pub fn emit(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.signed_part());
        out.extend_from_slice(&self.mac);
    }
}

/// Protocol feature bits a peer may announce in [`Params::features`]. None are defined
/// yet; a server refuses an INITIATE that sets a bit it does not know, since a feature
/// bit means "I will send things you must understand".
pub const KNOWN_FEATURES: u32 = 0;

/// The transport parameters both ends of a session must share, carried in INITIATE,
/// ACCEPT and an authenticated REJECT (all MAC'd, so they cannot be altered on the path).
///
/// `symbol_size` and `features` must match (a symbol of another size does not decode:
/// every stream would die); the windows are negotiated down to the smaller of the two
/// offers, which is safe for both ends (a sender never exceeds what the receiver sized).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Params {
    /// Coded symbol size in bytes.
    pub symbol_size: u16,
    /// Sender window in symbols (the receiver accepts twice this).
    pub window: u32,
    /// Per-stream receive credit in bytes.
    pub stream_window: u64,
    /// Per-session receive credit in bytes.
    pub session_window: u64,
    /// Protocol feature bits ([`KNOWN_FEATURES`]).
    pub features: u32,
}

/// A parameter the two ends cannot agree on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParamMismatch {
    /// The parameter's configuration name.
    pub parameter: &'static str,
    /// The value on the side that checked.
    pub ours: u64,
    /// The peer's value.
    pub peer: u64,
}

impl Params {
    fn parse(r: &mut Reader<'_>) -> Result<Self, WireError> {
        Ok(Params {
            symbol_size: r.u16("symbol size")?,
            window: r.u32("window")?,
            stream_window: r.u64("stream window")?,
            session_window: r.u64("session window")?,
            features: r.u32("features")?,
        })
    }

    fn emit(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.symbol_size.to_le_bytes());
        out.extend_from_slice(&self.window.to_le_bytes());
        out.extend_from_slice(&self.stream_window.to_le_bytes());
        out.extend_from_slice(&self.session_window.to_le_bytes());
        out.extend_from_slice(&self.features.to_le_bytes());
    }

    /// What a session between `self` (ours) and `peer` runs with: the same symbol size
    /// and features (else the mismatch, naming the first parameter that differs), and the
    /// smaller of each window.
    ///
    /// # Errors
    /// The first parameter that must match and does not.
    pub fn negotiate(&self, peer: &Params) -> Result<Params, ParamMismatch> {
        if self.symbol_size != peer.symbol_size {
            return Err(ParamMismatch {
                parameter: "symbol_size",
                ours: self.symbol_size.into(),
                peer: peer.symbol_size.into(),
            });
        }
        if peer.features & !KNOWN_FEATURES != 0 || self.features != peer.features {
            return Err(ParamMismatch {
                parameter: "features",
                ours: self.features.into(),
                peer: peer.features.into(),
            });
        }
        for (parameter, value) in [
            ("window", peer.window.into()),
            ("stream_window", peer.stream_window),
            ("session_window", peer.session_window),
        ] {
            if value == 0 {
                return Err(ParamMismatch {
                    parameter,
                    ours: match parameter {
                        "window" => self.window.into(),
                        "stream_window" => self.stream_window,
                        _ => self.session_window,
                    },
                    peer: 0,
                });
            }
        }
        Ok(Params {
            symbol_size: self.symbol_size,
            window: self.window.min(peer.window),
            stream_window: self.stream_window.min(peer.stream_window),
            session_window: self.session_window.min(peer.session_window),
            features: self.features,
        })
    }
}

/// Why a server refused an INITIATE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RejectReason {
    /// The INITIATE's MAC did not verify: the two sides hold different keys (or the
    /// packet was corrupted). Unauthenticated: the server cannot sign without the key.
    Auth,
    /// The INITIATE names a protocol version the server does not speak (the REJECT's
    /// version byte is the server's). Unauthenticated.
    Version,
    /// A transport parameter that must match differs; the REJECT carries the server's
    /// parameters and is authenticated.
    Params,
    /// The server is at its session limit or shutting down. Authenticated.
    Busy,
}

impl RejectReason {
    fn code(self) -> u8 {
        match self {
            RejectReason::Auth => 1,
            RejectReason::Version => 2,
            RejectReason::Params => 3,
            RejectReason::Busy => 4,
        }
    }

    fn from_code(c: u8) -> Result<Self, WireError> {
        Ok(match c {
            1 => RejectReason::Auth,
            2 => RejectReason::Version,
            3 => RejectReason::Params,
            4 => RejectReason::Busy,
            _ => return Err(WireError::Invalid("reject reason")),
        })
    }

    /// Whether a REJECT with this reason carries parameters and a MAC.
    pub fn is_signed(self) -> bool {
        matches!(self, RejectReason::Params | RejectReason::Busy)
    }
}

/// Server → client refusal of an INITIATE, so the client can tell "no answer" from "the
/// peer answered and refused" and say why.
///
/// It echoes the conn id and the first [`REJECT_ECHO_LEN`] bytes of the client random,
/// so an off-path attacker cannot forge one. The short form ([`RejectReason::Auth`],
/// [`RejectReason::Version`]) is unauthenticated, and a client treats it as a hint that
/// an ACCEPT arriving soon after still overrides; the long form carries the server's
/// parameters and a MAC over everything and the full client random. A REJECT is never
/// larger than the INITIATE that drew it, and the server rate-limits them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reject {
    /// The server's protocol version.
    pub version: u8,
    /// The connection id from the INITIATE.
    pub conn_id: u32,
    /// The INITIATE's bytes 6..6 + [`REJECT_ECHO_LEN`] (the start of the client random).
    pub echo: [u8; REJECT_ECHO_LEN],
    /// Why.
    pub reason: RejectReason,
    /// The server's parameters and the MAC (signed reasons only).
    pub signed: Option<(Params, [u8; MAC_LEN])>,
}

impl Reject {
    /// The echo a REJECT of `initiate` (raw bytes, any version) carries, if it is long
    /// enough to have one.
    pub fn echo_of(initiate: &[u8]) -> Option<[u8; REJECT_ECHO_LEN]> {
        initiate
            .get(6..6 + REJECT_ECHO_LEN)
            .and_then(|b| b.try_into().ok())
    }

    /// Parses a REJECT packet.
    pub fn parse(buf: &[u8]) -> Result<Self, WireError> {
        let mut r = Reader::new(buf);
        if r.u8("type")? != TYPE_REJECT {
            return Err(WireError::Invalid("reject type"));
        }
        let version = r.u8("version")?;
        let conn_id = r.u32("conn id")?;
        let echo = r.array("reject echo")?;
        let reason = RejectReason::from_code(r.u8("reject reason")?)?;
        let signed = if reason.is_signed() {
            let params = Params::parse(&mut r)?;
            Some((params, r.array("mac")?))
        } else {
            None
        };
        if !r.is_empty() {
            return Err(WireError::Invalid("reject length"));
        }
        Ok(Reject {
            version,
            conn_id,
            echo,
            reason,
            signed,
        })
    }

    /// The bytes the MAC of a signed REJECT covers (before the client random is appended).
    pub fn signed_part(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(REJECT_SIGNED_LEN);
        v.push(TYPE_REJECT);
        v.push(self.version);
        v.extend_from_slice(&self.conn_id.to_le_bytes());
        v.extend_from_slice(&self.echo);
        v.push(self.reason.code());
        if let Some((params, _)) = &self.signed {
            params.emit(&mut v);
        }
        v
    }

    /// Appends the packet to `out`.
    pub fn emit(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.signed_part());
        if let Some((_, mac)) = &self.signed {
            out.extend_from_slice(mac);
        }
    }
}

/// Stateless reset: tells a peer that this side has no state for its connection (it restarted).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reset {
    /// The connection the reset is for.
    pub conn_id: u32,
    /// `HMAC(psk, "reset" ‖ conn_id)`, which only a PSK holder can compute.
    pub token: [u8; RESET_TOKEN_LEN],
}

impl Reset {
    /// Parses a RESET packet.
    pub fn parse(buf: &[u8]) -> Result<Self, WireError> {
        let mut r = Reader::new(buf);
        if r.u8("type")? != TYPE_RESET {
            return Err(WireError::Invalid("reset type"));
        }
        let conn_id = r.u32("conn id")?;
        let token = r.array("token")?;
        if !r.is_empty() {
            return Err(WireError::Invalid("reset length"));
        }
        Ok(Reset { conn_id, token })
    }
    /// Appends the packet to `out`.
    pub fn emit(&self, out: &mut Vec<u8>) {
        out.push(TYPE_RESET);
        out.extend_from_slice(&self.conn_id.to_le_bytes());
        out.extend_from_slice(&self.token);
    }
}

/// Header of a data packet; its bytes as sent are the AEAD associated data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataHeader {
    /// The session.
    pub conn_id: u32,
    /// Transmission number: unique per datagram sent in this direction. The wire carries
    /// its low 24 bits; the AEAD nonce is derived from all 64.
    pub pn: u64,
}

impl DataHeader {
    /// Parses the header at the start of a data packet and reconstructs the full packet
    /// number as the one closest to `largest_pn + 1`, where `largest_pn` is the largest
    /// packet number that *authenticated* in this direction so far (`None` before the
    /// first), so a forged datagram cannot move the reference. The result is exact while
    /// the sender stays within 2^23 of it, which any window of packets in flight does.
    pub fn parse(buf: &[u8], largest_pn: Option<u64>) -> Result<Self, WireError> {
        let mut r = Reader::new(buf);
        if r.u8("type")? != TYPE_DATA {
            return Err(WireError::Invalid("data type"));
        }
        let conn_id = r.u32("conn id")?;
        let truncated = r.u24("packet number")?;
        let expected = largest_pn.map_or(0, |l| l.saturating_add(1));
        Ok(DataHeader {
            conn_id,
            pn: expand_u24(expected, truncated),
        })
    }
    /// Appends the header to `out` ([`DATA_HEADER_LEN`] bytes, the low 24 bits of `pn`).
    pub fn emit(&self, out: &mut Vec<u8>) {
        out.push(TYPE_DATA);
        out.extend_from_slice(&self.conn_id.to_le_bytes());
        out.extend_from_slice(&low24_le(self.pn));
    }
}

/// Reads the connection id of any packet type, for demultiplexing before decryption.
pub fn peek_conn_id(buf: &[u8]) -> Result<(u8, u32), WireError> {
    let mut r = Reader::new(buf);
    let ty = r.u8("type")?;
    match ty {
        TYPE_INITIATE | TYPE_ACCEPT | TYPE_REJECT => {
            r.u8("version")?;
        }
        TYPE_DATA | TYPE_RESET => {}
        value => {
            return Err(WireError::UnknownType {
                what: "packet",
                value,
            })
        }
    }
    Ok((ty, r.u32("conn id")?))
}

/// Chunk type: acknowledgement.
pub const CHUNK_ACK: u8 = 0x01;
/// Chunk type: source symbol with a 2-byte length, so other chunks may follow it.
pub const CHUNK_SOURCE: u8 = 0x02;
/// Chunk type: repair symbol.
pub const CHUNK_REPAIR: u8 = 0x03;
/// Chunk type: ping (asks for an ACK).
pub const CHUNK_PING: u8 = 0x04;
/// Chunk type: connection close.
pub const CHUNK_CLOSE: u8 = 0x05;
/// Chunk type: padding to the end of the packet.
pub const CHUNK_PADDING: u8 = 0x06;
/// Chunk type: source symbol without a length, its payload running to the end of the
/// packet. The sender uses it when the SOURCE chunk is the packet's last (it always is),
/// saving the 2-byte length of [`CHUNK_SOURCE`].
pub const CHUNK_SOURCE_LAST: u8 = 0x07;

/// An acknowledgement: what the decoder holds and which transmissions arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Ack {
    /// Every symbol id below this is known to the receiver (delivered in order or decoded).
    pub next_in_order: SymbolId,
    /// Missing ids not covered by innovative repairs the decoder holds.
    pub deficit: u32,
    /// Highest symbol id referenced by anything received, plus one (0 if none).
    pub highest_seen: SymbolId,
    /// Highest transmission number received.
    pub largest_pn: u64,
    /// Bit i set: transmission `largest_pn - 1 - i` was received.
    pub pn_bitmap: u64,
    /// Microseconds the receiver held `largest_pn` before sending this ACK.
    pub ack_delay_us: u32,
    /// The receiver's reordering estimate in transmission numbers.
    pub reorder_pkts: u16,
    /// Transmissions that arrived more than 64 behind the largest, past the bitmap.
    pub late: LateArrivals,
}

/// Most late arrivals one ACK reports beyond its bitmap ([`Ack::late`]).
pub const MAX_LATE: usize = 8;

/// Distance past which a late arrival is not reported (it would need an 8-byte varint).
const LATE_BACK_MAX: u64 = (1 << 30) - 1;

/// Transmissions received more than 64 numbers behind the largest, as distances below
/// `largest_pn`. Why: a path whose delay jitters by more than 64 transmission times
/// reorders packets past the bitmap; unreported, each reads as lost and the reordering
/// estimate cannot see past 64, so its loss threshold stays below the real displacement
/// (evidence: docs/experiments/jitter.md, "Second pass").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LateArrivals {
    len: u8,
    back: [u32; MAX_LATE],
}

impl LateArrivals {
    /// Adds a distance (must exceed 64 and be below 2^30); false when full or out
    /// of range.
    pub fn push(&mut self, back: u64) -> bool {
        if usize::from(self.len) >= MAX_LATE || !(65..=LATE_BACK_MAX).contains(&back) {
            return false;
        }
        // In range by the check above: at most 2^30 − 1.
        self.back[usize::from(self.len)] = back as u32;
        self.len += 1;
        true
    }

    /// The reported distances below `largest_pn`.
    pub fn iter(&self) -> impl Iterator<Item = u64> + '_ {
        self.back[..usize::from(self.len)]
            .iter()
            .map(|&b| u64::from(b))
    }

    /// Number of distances held.
    pub fn len(&self) -> usize {
        usize::from(self.len)
    }

    /// Whether none are held.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn encoded_len(&self) -> usize {
        1 + self.iter().map(varint_len).sum::<usize>()
    }
}

/// Largest encoded size of an ACK chunk (type byte included): the ids, the deficit and the
/// packet number full 8-byte varints, the bitmap 8 bytes, the capped delay and the reorder
/// estimate 4 each, the late-arrival count 1 and each of its distances 4. A typical one is
/// 21–27 bytes ([`Ack::encoded_len`]).
pub const ACK_CHUNK_MAX_LEN: usize = 1 + 8 + 8 + 8 + 8 + 8 + 4 + 4 + 1 + 4 * MAX_LATE;

/// The largest ACK delay a varint of 4 bytes holds, in microseconds (18 minutes); longer
/// delays are reported as this, so [`Ack::encoded_len_bound`] holds whatever the delay.
const ACK_DELAY_MAX_US: u32 = (1 << 30) - 1;

impl Ack {
    /// Fields as varints (sizes scale with the values, not their types: ACKs go back for
    /// every two data packets, and at 43 fixed bytes they were 3.5–7 % of a real link's
    /// bytes); `highest_seen` as its distance above `next_in_order`.
    fn parse(r: &mut Reader<'_>) -> Result<Self, WireError> {
        let next_in_order = r.varint("ack next")?;
        let above = r.varint("ack highest")?;
        Ok(Ack {
            next_in_order,
            highest_seen: next_in_order
                .checked_add(above)
                .ok_or(WireError::Invalid("ack highest"))?,
            deficit: u32::try_from(r.varint("ack deficit")?)
                .map_err(|_| WireError::Invalid("ack deficit"))?,
            largest_pn: r.varint("ack largest")?,
            pn_bitmap: r.u64("ack bitmap")?,
            ack_delay_us: u32::try_from(r.varint("ack delay")?)
                .map_err(|_| WireError::Invalid("ack delay"))?,
            reorder_pkts: u16::try_from(r.varint("ack reorder")?)
                .map_err(|_| WireError::Invalid("ack reorder"))?,
            late: {
                let n = r.varint("ack late count")?;
                if n > MAX_LATE as u64 {
                    return Err(WireError::Invalid("ack late count"));
                }
                let mut late = LateArrivals::default();
                for _ in 0..n {
                    if !late.push(r.varint("ack late")?) {
                        return Err(WireError::Invalid("ack late"));
                    }
                }
                late
            },
        })
    }

    /// Appends the chunk (type byte included). A `highest_seen` below `next_in_order` is
    /// sent as equal to it (a receiver never reports one).
    pub fn emit(&self, out: &mut Vec<u8>) {
        out.push(CHUNK_ACK);
        put_varint(out, self.next_in_order);
        put_varint(out, self.highest_seen.saturating_sub(self.next_in_order));
        put_varint(out, u64::from(self.deficit));
        put_varint(out, self.largest_pn);
        out.extend_from_slice(&self.pn_bitmap.to_le_bytes());
        put_varint(out, u64::from(self.ack_delay_us.min(ACK_DELAY_MAX_US)));
        put_varint(out, u64::from(self.reorder_pkts));
        put_varint(out, self.late.len() as u64);
        for back in self.late.iter() {
            put_varint(out, back);
        }
    }

    /// Encoded size of the chunk (type byte included).
    pub fn encoded_len(&self) -> usize {
        1 + varint_len(self.next_in_order)
            + varint_len(self.highest_seen.saturating_sub(self.next_in_order))
            + varint_len(u64::from(self.deficit))
            + varint_len(self.largest_pn)
            + 8
            + varint_len(u64::from(self.ack_delay_us.min(ACK_DELAY_MAX_US)))
            + varint_len(u64::from(self.reorder_pkts))
            + self.late.encoded_len()
    }

    /// Encoded size with the delay at its largest: what to reserve for this ACK before
    /// the time it goes out (and so its delay) is known.
    pub fn encoded_len_bound(&self) -> usize {
        Ack {
            ack_delay_us: ACK_DELAY_MAX_US,
            ..*self
        }
        .encoded_len()
    }
}

/// Length of a symbol id in SOURCE and REPAIR chunks: its low 24 bits (see [`Chunks::new`]).
pub const SYMBOL_ID_LEN: usize = 3;
/// Encoded size of a SOURCE chunk header: type, truncated symbol id, length.
pub const SOURCE_HEADER_LEN: usize = 1 + SYMBOL_ID_LEN + 2;
/// Encoded size of a SOURCE chunk header in its packet-ending form
/// ([`CHUNK_SOURCE_LAST`]): type, truncated symbol id.
pub const SOURCE_LAST_HEADER_LEN: usize = 1 + SYMBOL_ID_LEN;
/// Encoded size of a REPAIR chunk header in key form: type, truncated first id, count,
/// coefficient form, key.
pub const REPAIR_HEADER_LEN: usize = 1 + SYMBOL_ID_LEN + 2 + 1 + 2;

/// Coefficient form byte: 16-bit RFC 8681 key.
const COEF_KEY: u8 = 0;
/// Coefficient form byte: explicit vector of `count` bytes (recoded symbols).
const COEF_EXPLICIT: u8 = 1;

/// One chunk of a decrypted data packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Chunk<'a> {
    /// Acknowledgement.
    Ack(Ack),
    /// A source symbol's payload (frames), sent uncoded.
    Source {
        /// Symbol id.
        id: SymbolId,
        /// The payload.
        payload: &'a [u8],
    },
    /// A repair symbol: a combination of source symbols.
    Repair {
        /// Which symbols and coefficients.
        header: RepairHeader,
        /// The coded bytes (one full symbol).
        data: &'a [u8],
    },
    /// Asks the peer to acknowledge.
    Ping,
    /// The sender closes the connection.
    Close {
        /// Application close code.
        code: u16,
        /// Human-readable reason.
        reason: &'a [u8],
    },
}

/// Iterates the chunks of a decrypted payload.
#[derive(Debug)]
pub struct Chunks<'a> {
    r: Reader<'a>,
    symbol_size: usize,
    expected_id: SymbolId,
}

impl<'a> Chunks<'a> {
    /// Starts iterating `payload`. `symbol_size` is the session's repair length.
    ///
    /// SOURCE ids and REPAIR first ids carry their low 24 bits; each is reconstructed as
    /// the id with those bits closest to `expected_id` ([`expand_u24`]). The receiver
    /// passes its decoder's in-order frontier (every id below is known): every id a sender
    /// can reference lies within its window of it, far inside the ±2^23 that decodes
    /// exactly.
    pub fn new(payload: &'a [u8], symbol_size: usize, expected_id: SymbolId) -> Self {
        Chunks {
            r: Reader::new(payload),
            symbol_size,
            expected_id,
        }
    }
}

impl<'a> Iterator for Chunks<'a> {
    type Item = Result<Chunk<'a>, WireError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if self.r.is_empty() {
                return None;
            }
            let ty = match self.r.u8("chunk type") {
                Ok(t) => t,
                Err(e) => return Some(Err(e)),
            };
            let res = match ty {
                CHUNK_PADDING => {
                    self.r.rest();
                    continue;
                }
                CHUNK_ACK => Ack::parse(&mut self.r).map(Chunk::Ack),
                CHUNK_SOURCE => (|| {
                    let id = expand_u24(self.expected_id, self.r.u24("source id")?);
                    let len = self.r.u16("source len")? as usize;
                    if len + 2 > self.symbol_size {
                        return Err(WireError::Invalid("source length"));
                    }
                    Ok(Chunk::Source {
                        id,
                        payload: self.r.bytes(len, "source payload")?,
                    })
                })(),
                CHUNK_SOURCE_LAST => (|| {
                    let id = expand_u24(self.expected_id, self.r.u24("source id")?);
                    // The rest of the packet; its length is implied and must fit a symbol
                    // with its 2-byte length prefix, as for CHUNK_SOURCE.
                    let payload = self.r.rest();
                    if payload.len() + 2 > self.symbol_size {
                        return Err(WireError::Invalid("source length"));
                    }
                    Ok(Chunk::Source { id, payload })
                })(),
                CHUNK_REPAIR => (|| {
                    let first = expand_u24(self.expected_id, self.r.u24("repair first")?);
                    let count = self.r.u16("repair count")?;
                    if count == 0 {
                        return Err(WireError::Invalid("repair count"));
                    }
                    let coefficients = match self.r.u8("coefficient form")? {
                        COEF_KEY => Coefficients::Key(self.r.u16("repair key")?),
                        COEF_EXPLICIT => Coefficients::Explicit(
                            self.r.bytes(count as usize, "coefficients")?.to_vec(),
                        ),
                        _ => return Err(WireError::Invalid("coefficient form")),
                    };
                    let data = self.r.bytes(self.symbol_size, "repair data")?;
                    Ok(Chunk::Repair {
                        header: RepairHeader {
                            first,
                            count,
                            coefficients,
                        },
                        data,
                    })
                })(),
                CHUNK_PING => Ok(Chunk::Ping),
                CHUNK_CLOSE => (|| {
                    let code = self.r.u16("close code")?;
                    let len = self.r.u8("close reason len")? as usize;
                    Ok(Chunk::Close {
                        code,
                        reason: self.r.bytes(len, "close reason")?,
                    })
                })(),
                value => Err(WireError::UnknownType {
                    what: "chunk",
                    value,
                }),
            };
            if res.is_err() {
                // Stop after the first error: the rest cannot be framed reliably.
                self.r.rest();
            }
            return Some(res);
        }
    }
}

/// Appends a SOURCE chunk (the low 24 bits of `id`; see [`Chunks::new`]).
///
/// # Panics
/// Panics if the payload exceeds 65535 bytes (the caller bounds it by the symbol size).
pub fn emit_source(out: &mut Vec<u8>, id: SymbolId, payload: &[u8]) {
    let len = u16::try_from(payload.len()).unwrap_or_else(|_| panic!("source payload too long"));
    out.push(CHUNK_SOURCE);
    out.extend_from_slice(&low24_le(id));
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(payload);
}

/// Appends a SOURCE chunk that ends the packet: [`CHUNK_SOURCE_LAST`], the low 24 bits of
/// `id`, the payload, and no length (the receiver takes the rest of the plaintext). Nothing
/// may be appended after it.
pub fn emit_source_last(out: &mut Vec<u8>, id: SymbolId, payload: &[u8]) {
    out.push(CHUNK_SOURCE_LAST);
    out.extend_from_slice(&low24_le(id));
    out.extend_from_slice(payload);
}

/// Encoded size of the REPAIR chunk [`emit_repair`] writes for `header` and `data_len`
/// bytes of coded data (the key form's 2-byte key or the explicit coefficients).
#[must_use]
pub fn repair_chunk_len(header: &RepairHeader, data_len: usize) -> usize {
    let coefficients = match &header.coefficients {
        Coefficients::Key(_) => 2,
        Coefficients::Explicit(v) => v.len(),
    };
    REPAIR_HEADER_LEN - 2 + coefficients + data_len
}

/// Appends a REPAIR chunk (the low 24 bits of `header.first`; see [`Chunks::new`]).
pub fn emit_repair(out: &mut Vec<u8>, header: &RepairHeader, data: &[u8]) {
    out.push(CHUNK_REPAIR);
    out.extend_from_slice(&low24_le(header.first));
    out.extend_from_slice(&header.count.to_le_bytes());
    match &header.coefficients {
        Coefficients::Key(k) => {
            out.push(COEF_KEY);
            out.extend_from_slice(&k.to_le_bytes());
        }
        Coefficients::Explicit(v) => {
            out.push(COEF_EXPLICIT);
            out.extend_from_slice(v);
        }
    }
    out.extend_from_slice(data);
}

/// Appends a PING chunk.
pub fn emit_ping(out: &mut Vec<u8>) {
    out.push(CHUNK_PING);
}

/// Appends a CLOSE chunk; the reason is truncated to 255 bytes.
pub fn emit_close(out: &mut Vec<u8>, code: u16, reason: &str) {
    let reason = &reason.as_bytes()[..reason.len().min(255)];
    out.push(CHUNK_CLOSE);
    out.extend_from_slice(&code.to_le_bytes());
    out.push(reason.len() as u8);
    out.extend_from_slice(reason);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varint_round_trip() {
        for v in [
            0u64,
            1,
            63,
            64,
            16383,
            16384,
            (1 << 30) - 1,
            1 << 30,
            VARINT_MAX,
        ] {
            let mut out = Vec::new();
            put_varint(&mut out, v);
            assert_eq!(out.len(), varint_len(v));
            assert_eq!(Reader::new(&out).varint("v").unwrap(), v);
        }
    }

    /// xorshift64, for property loops without a dependency.
    fn xorshift(x: &mut u64) -> u64 {
        *x ^= *x << 13;
        *x ^= *x >> 7;
        *x ^= *x << 17;
        *x
    }

    #[test]
    fn expand_picks_the_closest_candidate() {
        const W: u64 = 1 << 32;
        const H: u64 = W / 2;
        // RFC 9000 §A.3's example (largest 0xa82f30ea, 16 bits 0x9b32 → 0xa82f9b32), above
        // a 32-bit window: scaled by 2^16, and with the window's worth of high bits set.
        assert_eq!(
            expand_u32(0xa82f_30ea_0000 + 1, 0x9b32_0000),
            0xa82f_9b32_0000
        );
        assert_eq!(expand_u32(0x1_a82f_30ea + 1, 0xa82f_9b32), 0x1_a82f_9b32);
        // Wrapping forwards over 2^32, and a late packet from before the wrap.
        assert_eq!(expand_u32(0xffff_fff0 + 1, 5), 0x1_0000_0005);
        assert_eq!(expand_u32(0x1_0000_0005 + 1, 0xffff_fff0), 0xffff_fff0);
        // Just below, at and above the largest.
        let l = 0x5_0000_1000u64;
        for v in [l - 2, l - 1, l, l + 1, l + 2, l + 1000] {
            assert_eq!(expand_u32(l + 1, low32(v)), v, "{v:#x}");
        }
        // The edges of the window (expected − 2^31, expected + 2^31].
        let e = 0x7_1234_5678u64;
        assert_eq!(expand_u32(e, low32(e + H)), e + H);
        assert_eq!(expand_u32(e, low32(e - H + 1)), e - H + 1);
        assert_eq!(expand_u32(e, low32(e - H)), e + H, "a tie resolves upwards");
        // No candidate below 0 or above u64::MAX.
        assert_eq!(expand_u32(0, 0xffff_ffff), 0xffff_ffff);
        assert_eq!(expand_u32(3, 0x8000_0004), 0x8000_0004);
        assert_eq!(expand_u32(u64::MAX, 0), 0xffff_ffff_0000_0000);
        assert_eq!(expand_u32(u64::MAX - 2, 0xffff_ffff), u64::MAX);
        assert_eq!(expand_u32(u64::MAX, 0x7fff_ffff), 0xffff_ffff_7fff_ffff);
    }

    #[test]
    fn expand_is_exact_inside_the_window() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for bits in [24u32, 32] {
            let half = 1i64 << (bits - 1);
            for _ in 0..100_000 {
                let v = xorshift(&mut x) >> (xorshift(&mut x) % 64);
                // An expected value within (v − half, v + half], i.e. v ∈ [e − half + 1, e + half].
                let d = (xorshift(&mut x) % (1 << bits)) as i64 - half + 1;
                let e = v.wrapping_add_signed(-d);
                if (d > 0 && e > v) || (d < 0 && e < v) {
                    continue; // wrapped around 0 or u64::MAX
                }
                assert_eq!(expand_truncated(e, low32(v), bits), v, "v {v:#x} e {e:#x}");
            }
        }
    }

    #[test]
    fn expand_u24_edges() {
        const H: u64 = 1 << 23;
        let e = 0x7_1234_5678u64;
        let t = |v: u64| low32(v) & 0xff_ffff;
        assert_eq!(expand_u24(e, t(e + H)), e + H);
        assert_eq!(expand_u24(e, t(e - H + 1)), e - H + 1);
        assert_eq!(expand_u24(e, t(e - H)), e + H, "a tie resolves upwards");
        assert_eq!(expand_u24(0, 0xff_ffff), 0xff_ffff);
        assert_eq!(expand_u24(u64::MAX, 0), 0xffff_ffff_ff00_0000);
        // Wrapping forwards over 2^24, and a late packet from before the wrap.
        assert_eq!(expand_u24(0xff_fff0 + 1, 5), 0x100_0005);
        assert_eq!(expand_u24(0x100_0005 + 1, 0xff_fff0), 0xff_fff0);
        // Bits above the window are ignored.
        assert_eq!(expand_u24(0x100, 0xab00_0101), 0x101);
    }

    #[test]
    fn data_header_round_trip() {
        for (pn, largest) in [
            (0u64, None),
            (3, None),
            (7, Some(6)),
            (5, Some(9)),
            (0x1_0000_0003, Some(0xffff_fffe)),
            (0xffff_fffe, Some(0x1_0000_0003)),
            (0x1234_5678_9abc_def0, Some(0x1234_5678_9abc_de00)),
        ] {
            let h = DataHeader {
                conn_id: 0x00c0_ffee,
                pn,
            };
            let mut out = Vec::new();
            h.emit(&mut out);
            assert_eq!(out.len(), DATA_HEADER_LEN);
            assert_eq!(DataHeader::parse(&out, largest).unwrap(), h);
            assert_eq!(peek_conn_id(&out).unwrap(), (TYPE_DATA, 0x00c0_ffee));
            assert!(DataHeader::parse(&out[..DATA_HEADER_LEN - 1], largest).is_err());
        }
        // The wire keeps 24 bits: a number 2^24 away from the reference is a different one.
        let mut out = Vec::new();
        DataHeader { conn_id: 1, pn: 5 }.emit(&mut out);
        assert_eq!(
            DataHeader::parse(&out, Some(1 << 24)).unwrap().pn,
            (1 << 24) + 5
        );
    }

    #[test]
    fn handshake_round_trip_and_sizes() {
        for len in [INITIATE_LEN, 1436] {
            let i = Initiate {
                conn_id: 7,
                client_random: [3; 32],
                timestamp_ms: 99,
                train: 4,
                params: Params {
                    symbol_size: 1408,
                    window: 16384,
                    stream_window: 1 << 25,
                    session_window: 1 << 26,
                    features: 0,
                },
                len,
                mac: [5; 16],
            };
            let mut out = Vec::new();
            i.emit(&mut out);
            assert_eq!(out.len(), len);
            assert_eq!(Initiate::parse(&out).unwrap(), i);
            assert_eq!(peek_conn_id(&out).unwrap(), (TYPE_INITIATE, 7));
            // Padding must be zeros; a datagram too short for the MAC is truncated.
            if len > INITIATE_LEN {
                let mut bad = out.clone();
                bad[INITIATE_LEN] = 1;
                assert!(Initiate::parse(&bad).is_err());
            }
            assert!(Initiate::parse(&out[..INITIATE_LEN - 1]).is_err());
        }
        assert!(Initiate::parse(&vec![TYPE_INITIATE; MAX_HANDSHAKE_LEN + 1]).is_err());
        for len in [ACCEPT_LEN, 1436] {
            let a = Accept {
                conn_id: 7,
                server_random: [4; 32],
                train: 3,
                train_seen: 2,
                train_spread: 5,
                train_span_us: 1234,
                params: Params {
                    symbol_size: 1408,
                    window: 16384,
                    stream_window: 1 << 25,
                    session_window: 1 << 26,
                    features: 0,
                },
                len,
                mac: [6; 16],
            };
            let mut out = Vec::new();
            a.emit(&mut out);
            assert_eq!(out.len(), len);
            assert_eq!(Accept::parse(&out).unwrap(), a);
            let mut bad = out.clone();
            bad[1] = 9;
            assert_eq!(Accept::parse(&bad), Err(WireError::Version(9)));
            assert!(Accept::parse(&out[..ACCEPT_LEN - 1]).is_err());
        }
    }

    #[test]
    fn rejects_round_trip_and_never_outgrow_an_initiate() {
        let params = Params {
            symbol_size: 1280,
            window: 4096,
            stream_window: 1,
            session_window: 2,
            features: 0,
        };
        for (reason, signed, len) in [
            (RejectReason::Auth, None, REJECT_LEN),
            (RejectReason::Version, None, REJECT_LEN),
            (
                RejectReason::Params,
                Some((params, [9; 16])),
                REJECT_SIGNED_LEN,
            ),
            (
                RejectReason::Busy,
                Some((params, [9; 16])),
                REJECT_SIGNED_LEN,
            ),
        ] {
            let r = Reject {
                version: 77,
                conn_id: 5,
                echo: [3; REJECT_ECHO_LEN],
                reason,
                signed,
            };
            let mut out = Vec::new();
            r.emit(&mut out);
            assert_eq!(out.len(), len);
            assert!(len <= INITIATE_LEN);
            assert_eq!(Reject::parse(&out).unwrap(), r);
            assert_eq!(peek_conn_id(&out).unwrap(), (TYPE_REJECT, 5));
            assert!(Reject::parse(&out[..len - 1]).is_err());
            let mut longer = out.clone();
            longer.push(0);
            assert!(Reject::parse(&longer).is_err());
        }
        // An unauthenticated REJECT also answers a version-5 INITIATE (63 bytes) without
        // outgrowing it: asserted at compile time beside the constants.
    }

    #[test]
    fn params_negotiate_windows_down_and_refuse_a_symbol_size_mismatch() {
        let ours = Params {
            symbol_size: 1408,
            window: 16384,
            stream_window: 100,
            session_window: 200,
            features: 0,
        };
        let peer = Params {
            window: 4096,
            session_window: 300,
            ..ours
        };
        let got = ours.negotiate(&peer).unwrap();
        assert_eq!(
            (got.window, got.stream_window, got.session_window),
            (4096, 100, 200)
        );
        assert_eq!(
            got,
            peer.negotiate(&ours).unwrap(),
            "both ends settle the same"
        );
        let other = Params {
            symbol_size: 1280,
            ..ours
        };
        assert_eq!(
            ours.negotiate(&other),
            Err(ParamMismatch {
                parameter: "symbol_size",
                ours: 1408,
                peer: 1280
            })
        );
        let featured = Params {
            features: 1,
            ..ours
        };
        assert_eq!(ours.negotiate(&featured).unwrap_err().parameter, "features");
    }

    #[test]
    fn reset_round_trip_and_sizes() {
        let r = Reset {
            conn_id: u32::MAX,
            token: [8; RESET_TOKEN_LEN],
        };
        let mut out = Vec::new();
        r.emit(&mut out);
        assert_eq!(out.len(), RESET_LEN);
        assert_eq!(Reset::parse(&out).unwrap(), r);
        assert_eq!(peek_conn_id(&out).unwrap(), (TYPE_RESET, u32::MAX));
        assert!(Reset::parse(&out[..RESET_LEN - 1]).is_err());
        // The sizes docs/PROTOCOL.md states.
        assert_eq!(
            (
                DATA_HEADER_LEN,
                INITIATE_LEN,
                ACCEPT_LEN,
                RESET_LEN,
                MIN_DATA_LEN,
                REJECT_LEN,
                REJECT_SIGNED_LEN
            ),
            (8, 89, 87, 17, 20, 23, 65)
        );
    }

    #[test]
    fn chunks_round_trip() {
        let ack = Ack {
            next_in_order: 5,
            deficit: 2,
            highest_seen: 9,
            largest_pn: 100,
            pn_bitmap: 0xff,
            ack_delay_us: 30,
            reorder_pkts: 3,
            late: {
                let mut l = LateArrivals::default();
                assert!(l.push(65) && l.push(99));
                l
            },
        };
        let mut out = Vec::new();
        ack.emit(&mut out);
        let ack_len = ack.encoded_len();
        assert_eq!(out.len(), ack_len);
        assert_eq!(ack_len, 1 + 1 + 1 + 1 + 2 + 8 + 1 + 1 + 1 + 2 + 2);
        assert!(ack.encoded_len_bound() >= ack_len);
        emit_source(&mut out, 42, b"hello");
        assert_eq!(out.len(), ack_len + SOURCE_HEADER_LEN + 5);
        let header = RepairHeader {
            first: 40,
            count: 3,
            coefficients: Coefficients::Key(77),
        };
        emit_repair(&mut out, &header, &[9u8; 64]);
        assert_eq!(
            out.len(),
            ack_len + SOURCE_HEADER_LEN + 5 + REPAIR_HEADER_LEN + 64
        );
        emit_ping(&mut out);
        emit_close(&mut out, 3, "bye");
        out.push(CHUNK_PADDING);
        out.extend_from_slice(&[0; 10]);
        let chunks: Vec<_> = Chunks::new(&out, 64, 41).collect::<Result<_, _>>().unwrap();
        assert_eq!(chunks.len(), 5);
        assert_eq!(chunks[0], Chunk::Ack(ack));
        assert_eq!(
            chunks[1],
            Chunk::Source {
                id: 42,
                payload: b"hello"
            }
        );
        assert_eq!(
            chunks[2],
            Chunk::Repair {
                header,
                data: &[9u8; 64]
            }
        );
        assert_eq!(chunks[3], Chunk::Ping);
        assert_eq!(
            chunks[4],
            Chunk::Close {
                code: 3,
                reason: b"bye"
            }
        );
    }

    #[test]
    fn acks_round_trip_at_every_size_within_the_bounds() {
        let big = Ack {
            next_in_order: (1 << 62) - 1,
            deficit: u32::MAX,
            highest_seen: u64::MAX,
            largest_pn: (1 << 62) - 1,
            pn_bitmap: u64::MAX,
            ack_delay_us: u32::MAX,
            reorder_pkts: u16::MAX,
            late: {
                let mut l = LateArrivals::default();
                while l.push(LATE_BACK_MAX) {}
                l
            },
        };
        for ack in [Ack::default(), big] {
            let mut out = Vec::new();
            ack.emit(&mut out);
            assert_eq!(out.len(), ack.encoded_len());
            assert!(out.len() <= ack.encoded_len_bound());
            assert!(ack.encoded_len_bound() <= ACK_CHUNK_MAX_LEN);
            let parsed: Vec<_> = Chunks::new(&out, 64, 0).collect::<Result<_, _>>().unwrap();
            // What does not fit is sent at its cap: the delay and a highest id beyond the
            // varint range.
            let expect = Ack {
                ack_delay_us: ack.ack_delay_us.min(ACK_DELAY_MAX_US),
                highest_seen: ack.next_in_order
                    + (ack.highest_seen - ack.next_in_order).min(VARINT_MAX),
                ..ack
            };
            assert_eq!(parsed, [Chunk::Ack(expect)]);
        }
        // An ACK field out of its type's range is malformed, not truncated.
        let mut out = vec![CHUNK_ACK, 0, 0];
        put_varint(&mut out, 1 << 40); // deficit
        assert!(Chunks::new(&out, 64, 0).next().unwrap().is_err());
    }

    #[test]
    fn late_arrivals_are_bounded_and_beyond_the_bitmap() {
        let mut l = LateArrivals::default();
        assert!(!l.push(64), "the bitmap covers 64");
        assert!(!l.push(LATE_BACK_MAX + 1));
        for i in 0..MAX_LATE as u64 {
            assert!(l.push(65 + i));
        }
        assert!(!l.push(200), "full");
        assert_eq!(
            l.iter().collect::<Vec<_>>(),
            (65..65 + MAX_LATE as u64).collect::<Vec<_>>()
        );
        // A count above the cap, or a distance inside the bitmap, is malformed.
        for (count, back) in [(MAX_LATE as u64 + 1, 70), (1, 3)] {
            let mut out = Vec::new();
            Ack::default().emit(&mut out);
            out.pop(); // the empty late list's count
            put_varint(&mut out, count);
            for _ in 0..count {
                put_varint(&mut out, back);
            }
            let parsed: Result<Vec<_>, _> = Chunks::new(&out, 64, 0).collect();
            assert!(parsed.is_err(), "count {count} back {back}");
        }
    }

    #[test]
    fn source_last_round_trips_and_rejects_what_cannot_be_a_symbol() {
        const S: usize = 64;
        let ack = Ack {
            next_in_order: 1,
            highest_seen: 2,
            largest_pn: 3,
            ..Ack::default()
        };
        // Behind an ACK, as a sender builds it: the payload is the rest of the plaintext.
        for len in [1usize, 5, S - 3, S - 2] {
            let payload: Vec<u8> = (0..len).map(|i| i as u8).collect();
            let mut out = Vec::new();
            ack.emit(&mut out);
            emit_source_last(&mut out, 9, &payload);
            assert_eq!(out.len(), ack.encoded_len() + SOURCE_LAST_HEADER_LEN + len);
            let chunks: Vec<_> = Chunks::new(&out, S, 0).collect::<Result<_, _>>().unwrap();
            assert_eq!(
                chunks,
                [
                    Chunk::Ack(ack),
                    Chunk::Source {
                        id: 9,
                        payload: &payload
                    }
                ],
                "{len}"
            );
        }
        // The id is truncated and expanded as in the length form.
        let mut out = Vec::new();
        emit_source_last(&mut out, (1 << 32) + 7, b"ab");
        assert_eq!(
            Chunks::new(&out, S, 1 << 32).next(),
            Some(Ok(Chunk::Source {
                id: (1 << 32) + 7,
                payload: b"ab"
            }))
        );
        // A zero-length tail is an empty payload, as a length-form chunk of length 0 is.
        let mut out = Vec::new();
        emit_source_last(&mut out, 4, b"");
        assert_eq!(out.len(), SOURCE_LAST_HEADER_LEN);
        let chunks: Vec<_> = Chunks::new(&out, S, 0).collect();
        assert_eq!(
            chunks,
            [Ok(Chunk::Source {
                id: 4,
                payload: b""
            })]
        );
        // A tail longer than S − 2 cannot be a symbol's payload.
        let mut out = Vec::new();
        emit_source_last(&mut out, 4, &[1u8; S - 1]);
        let chunks: Vec<_> = Chunks::new(&out, S, 0).collect();
        assert_eq!(chunks, [Err(WireError::Invalid("source length"))]);
        // Truncated inside the id: an error, and nothing after it.
        for cut in 1..SOURCE_LAST_HEADER_LEN {
            let chunks: Vec<_> = Chunks::new(&out[..cut], S, 0).collect();
            assert_eq!(chunks, [Err(WireError::Truncated("source id"))], "{cut}");
        }
        // Whatever follows a SOURCE_LAST is its payload, chunk-like bytes included.
        let mut out = Vec::new();
        emit_source_last(&mut out, 4, &[CHUNK_PING, CHUNK_PADDING]);
        let chunks: Vec<_> = Chunks::new(&out, S, 0).collect();
        assert_eq!(
            chunks,
            [Ok(Chunk::Source {
                id: 4,
                payload: &[CHUNK_PING, CHUNK_PADDING]
            })]
        );
        // The length form still parses, also with a chunk after it.
        let mut out = Vec::new();
        emit_source(&mut out, 4, b"xyz");
        emit_ping(&mut out);
        let chunks: Vec<_> = Chunks::new(&out, S, 0).collect::<Result<_, _>>().unwrap();
        assert_eq!(
            chunks,
            [
                Chunk::Source {
                    id: 4,
                    payload: b"xyz"
                },
                Chunk::Ping
            ]
        );
    }

    #[test]
    fn symbol_ids_round_trip_around_the_receiver_frontier() {
        // (receiver's next_in_order, ids the sender may reference): its whole window either
        // side, and across 2^24 and 2^32 in both directions.
        let cases = [
            (0u64, vec![0u64, 1, 8191]),
            (5, vec![0, 4, 5, 6, 8200]),
            (
                0xffff_fff0,
                vec![0xffff_e000, 0xffff_ffff, 0x1_0000_0000, 0x1_0000_1ff0],
            ),
            (
                0x1_0000_0010,
                vec![0xffff_f000, 0xffff_ffff, 0x1_0000_0000, 0x1_0000_2010],
            ),
            (
                0x7_8000_0000,
                vec![0x7_7fff_e000, 0x7_7fff_ffff, 0x7_8000_0000, 0x7_8000_2000],
            ),
            (
                0xff_fff0,
                vec![0xff_e000, 0xff_ffff, 0x100_0000, 0x100_1ff0],
            ),
            (
                0x100_0010,
                vec![0xff_f000, 0xff_ffff, 0x100_0000, 0x100_2010],
            ),
        ];
        for (frontier, ids) in cases {
            for id in ids {
                let header = RepairHeader {
                    first: id,
                    count: 2,
                    coefficients: Coefficients::Explicit(vec![1, 2]),
                };
                let mut out = Vec::new();
                emit_source(&mut out, id, b"x");
                emit_repair(&mut out, &header, &[3u8; 64]);
                let chunks: Vec<_> = Chunks::new(&out, 64, frontier)
                    .collect::<Result<_, _>>()
                    .unwrap();
                assert_eq!(
                    chunks,
                    [
                        Chunk::Source { id, payload: b"x" },
                        Chunk::Repair {
                            header,
                            data: &[3u8; 64]
                        }
                    ],
                    "frontier {frontier:#x} id {id:#x}"
                );
            }
        }
        // 24 bits on the wire: an id 2^24 away from the frontier reads as a nearer one.
        let mut out = Vec::new();
        emit_source(&mut out, 7, b"");
        assert_eq!(out.len(), SOURCE_HEADER_LEN);
        assert_eq!(
            Chunks::new(&out, 64, 1 << 24).next(),
            Some(Ok(Chunk::Source {
                id: (1 << 24) + 7,
                payload: b""
            }))
        );
        // A repair reconstructed next to u64::MAX still parses; the decoder range-checks it.
        let mut out = Vec::new();
        let header = RepairHeader {
            first: u64::MAX - 1,
            count: 9,
            coefficients: Coefficients::Key(1),
        };
        emit_repair(&mut out, &header, &[0u8; 64]);
        assert_eq!(
            Chunks::new(&out, 64, u64::MAX).next(),
            Some(Ok(Chunk::Repair {
                header,
                data: &[0u8; 64]
            }))
        );
    }

    #[test]
    fn garbage_never_panics() {
        let mut x = 0x1234_5678u32;
        for len in 0..300 {
            let buf: Vec<u8> = (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 17;
                    x ^= x << 5;
                    x as u8
                })
                .collect();
            let _ = Chunks::new(&buf, 64, 0).count();
            let _ = Chunks::new(&buf, 64, u64::MAX).count();
            let _ = peek_conn_id(&buf);
            let _ = Initiate::parse(&buf);
            let _ = Accept::parse(&buf);
            let _ = DataHeader::parse(&buf, None);
            let _ = DataHeader::parse(&buf, Some(u64::MAX));
        }
    }
}
