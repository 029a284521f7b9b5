//! Data packets: the header (the AEAD's associated data) and the chunks of the sealed
//! payload (ACK, SOURCE, REPAIR, PING, CLOSE, PADDING).

use super::datagram::{parse_datagram_chunk, CHUNK_DATAGRAM, CHUNK_DATAGRAM_REPAIR};
use super::{
    data_path, data_type, expand_u24, low24_le, put_varint, varint_len, Reader, WireError,
    CONN_ID_OFFSET, HANDSHAKE_CONN_ID_OFFSET, TYPE_ACCEPT, TYPE_INITIATE, TYPE_REJECT, TYPE_RESET,
};
use ctcp_rlnc::{Coefficients, RepairHeader, SymbolId};

/// Header of a data packet; its bytes as sent are the AEAD associated data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataHeader {
    /// The session.
    pub conn_id: u32,
    /// The path it was sent on (0 for a single-path session; carried in the type byte).
    pub path: u8,
    /// Transmission number: unique per datagram sent on this path in this direction. The
    /// wire carries its low 24 bits; the AEAD nonce is derived from all 64 and the path
    /// ([`DataHeader::nonce_pn`]).
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
        let path = data_path(r.u8("type")?).ok_or(WireError::Invalid("data type"))?;
        let conn_id = r.u32("conn id")?;
        let truncated = r.u24("packet number")?;
        let expected = largest_pn.map_or(0, |l| l.saturating_add(1));
        Ok(DataHeader {
            conn_id,
            path,
            pn: expand_u24(expected, truncated),
        })
    }

    /// The path a data packet was sent on, read before its packet number is reconstructed
    /// (each path numbers its packets on its own, so the reference is the path's).
    pub fn peek_path(buf: &[u8]) -> Result<u8, WireError> {
        let ty = *buf.first().ok_or(WireError::Truncated("type"))?;
        data_path(ty).ok_or(WireError::Invalid("data type"))
    }

    /// The number the AEAD nonce is made from: the packet number with the path id in its
    /// top byte, so packets of different paths (separate number spaces, one key) never
    /// share a nonce. Packet numbers stay far below 2^56; on path 0 it is the packet number.
    #[must_use]
    pub fn nonce_pn(&self) -> u64 {
        self.pn | (u64::from(self.path) << 56)
    }
    /// Appends the header to `out` ([`DATA_HEADER_LEN`](super::DATA_HEADER_LEN) bytes, the low 24 bits of `pn`).
    pub fn emit(&self, out: &mut Vec<u8>) {
        out.push(data_type(self.path));
        out.extend_from_slice(&self.conn_id.to_le_bytes());
        out.extend_from_slice(&low24_le(self.pn));
    }
}

/// Where a packet of type `ty` carries its connection id ([`CONN_ID_OFFSET`] or
/// [`HANDSHAKE_CONN_ID_OFFSET`]), or `None` for an unknown type.
pub fn conn_id_offset(ty: u8) -> Option<usize> {
    match ty {
        TYPE_INITIATE | TYPE_ACCEPT | TYPE_REJECT => Some(HANDSHAKE_CONN_ID_OFFSET),
        TYPE_RESET => Some(CONN_ID_OFFSET),
        // Data packets of every path (`0x01`, `0x11`..): the balancer's "everything but
        // INITIATE" rule reads the same offset.
        t if data_path(t).is_some() => Some(CONN_ID_OFFSET),
        _ => None,
    }
}

/// Reads the connection id of any packet type, for demultiplexing before decryption.
pub fn peek_conn_id(buf: &[u8]) -> Result<(u8, u32), WireError> {
    let mut r = Reader::new(buf);
    let ty = r.u8("type")?;
    let Some(at) = conn_id_offset(ty) else {
        return Err(WireError::UnknownType {
            what: "packet",
            value: ty,
        });
    };
    // Handshake packets put their version byte between the type and the id.
    r.bytes(at - 1, "version")?;
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
/// Chunk type: path challenge, an 8-byte token the peer must echo on the same path.
pub const CHUNK_PATH_CHALLENGE: u8 = 0x0a;
/// Chunk type: path response, echoing a [`CHUNK_PATH_CHALLENGE`]'s token.
pub const CHUNK_PATH_RESPONSE: u8 = 0x0b;
/// Chunk type: another path's received packet numbers, sent on a faster path
/// ([`PathAck`]).
pub const CHUNK_PATH_ACK: u8 = 0x0c;

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
pub(super) const LATE_BACK_MAX: u64 = (1 << 30) - 1;

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
pub(super) const ACK_DELAY_MAX_US: u32 = (1 << 30) - 1;

impl Ack {
    /// Fields as varints (sizes scale with the values, not their types: ACKs go back for
    /// every two data packets, and at fixed widths they were a visible share of a real
    /// link's bytes); `highest_seen` as its distance above `next_in_order`.
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

/// Which packets of path `path` arrived, reported on another (faster) path: the
/// `largest_pn`/`pn_bitmap` of that path's ACK state alone. Why: a path's own ACKs take its
/// own return trip, so on a long path (600 ms) a loss is known 300 ms after the next packet
/// revealed it; reported over a 60 ms path the sender learns it 30 ms after, and its repair
/// (on the fast path) closes the hole a long path's one-way delay sooner. It carries no
/// delay and no decoder state: the sender runs only the path's loss detection on it (RTT
/// samples and congestion-control ACK clocking come from the path's own ACKs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PathAck {
    /// The path whose packet numbers these are (not the path carrying the chunk).
    pub path: u8,
    /// Highest transmission number received on that path.
    pub largest_pn: u64,
    /// Bit i set: transmission `largest_pn - 1 - i` of that path was received.
    pub pn_bitmap: u64,
}

impl PathAck {
    fn parse(r: &mut Reader<'_>) -> Result<Self, WireError> {
        let path = r.u8("path ack path")?;
        if path >= super::MAX_PATHS {
            return Err(WireError::Invalid("path ack path"));
        }
        Ok(PathAck {
            path,
            largest_pn: r.varint("path ack largest")?,
            pn_bitmap: r.u64("path ack bitmap")?,
        })
    }

    /// Appends the chunk (type byte included).
    pub fn emit(&self, out: &mut Vec<u8>) {
        out.push(CHUNK_PATH_ACK);
        out.push(self.path);
        put_varint(out, self.largest_pn);
        out.extend_from_slice(&self.pn_bitmap.to_le_bytes());
    }

    /// Encoded size of the chunk (type byte included): 14 bytes for packet numbers below
    /// 2^30.
    pub fn encoded_len(&self) -> usize {
        2 + varint_len(self.largest_pn) + 8
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
    /// A datagram (unreliable; its own symbol ids, see `wire::datagram`).
    Datagram {
        /// Datagram symbol id.
        id: SymbolId,
        /// The datagram.
        payload: &'a [u8],
    },
    /// A repair over datagram symbols; `data` may be shorter than a symbol (the rest is
    /// zero).
    DatagramRepair {
        /// Which datagram symbols and coefficients.
        header: RepairHeader,
        /// The coded bytes, cut after the last non-zero one.
        data: &'a [u8],
    },
    /// Asks the peer to acknowledge.
    Ping,
    /// Asks the peer to echo this token on the path it came on (path validation).
    PathChallenge(u64),
    /// Echoes a [`Chunk::PathChallenge`] token.
    PathResponse(u64),
    /// Another path's received packet numbers (multipath; see [`PathAck`]).
    PathAck(PathAck),
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
    /// The datagram decoder's frontier, for datagram ids (issue 27).
    datagram_expected: SymbolId,
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
            datagram_expected: 0,
        }
    }

    /// Reconstructs datagram ids around `expected` (the datagram decoder's frontier), as
    /// stream ids are around `expected_id`.
    #[must_use]
    pub fn with_datagram_base(mut self, expected: SymbolId) -> Self {
        self.datagram_expected = expected;
        self
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
                CHUNK_PATH_CHALLENGE => self.r.u64("challenge").map(Chunk::PathChallenge),
                CHUNK_PATH_RESPONSE => self.r.u64("response").map(Chunk::PathResponse),
                CHUNK_PATH_ACK => PathAck::parse(&mut self.r).map(Chunk::PathAck),
                // Issue 27: datagram chunks (`wire::datagram`).
                CHUNK_DATAGRAM | CHUNK_DATAGRAM_REPAIR => {
                    parse_datagram_chunk(ty, &mut self.r, self.symbol_size, self.datagram_expected)
                }
                CHUNK_CLOSE => parse_close(&mut self.r),
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

/// Parses a CLOSE chunk's body: code, reason length, reason.
fn parse_close<'a>(r: &mut Reader<'a>) -> Result<Chunk<'a>, WireError> {
    let code = r.u16("close code")?;
    let len = r.u8("close reason len")? as usize;
    Ok(Chunk::Close {
        code,
        reason: r.bytes(len, "close reason")?,
    })
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

/// Appends a PATH_CHALLENGE chunk (9 bytes).
pub fn emit_path_challenge(out: &mut Vec<u8>, token: u64) {
    out.push(CHUNK_PATH_CHALLENGE);
    out.extend_from_slice(&token.to_le_bytes());
}

/// Appends a PATH_RESPONSE chunk (9 bytes).
pub fn emit_path_response(out: &mut Vec<u8>, token: u64) {
    out.push(CHUNK_PATH_RESPONSE);
    out.extend_from_slice(&token.to_le_bytes());
}

/// Appends a CLOSE chunk; the reason is truncated to 255 bytes.
pub fn emit_close(out: &mut Vec<u8>, code: u16, reason: &str) {
    let reason = &reason.as_bytes()[..reason.len().min(255)];
    out.push(CHUNK_CLOSE);
    out.extend_from_slice(&code.to_le_bytes());
    out.push(reason.len() as u8);
    out.extend_from_slice(reason);
}
