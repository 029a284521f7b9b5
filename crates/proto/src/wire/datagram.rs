//! Datagram chunks (issue 27): unreliable application datagrams with their own symbol
//! ids and repairs, separate from the stream symbols so they never wait behind them.
//!
//! ```text
//! DATAGRAM         0x08 | id, low 24 bits (3) | payload = rest of packet
//! DATAGRAM_REPAIR  0x09 | first, low 24 bits (3) | count u8 | key u16 | coded = rest
//! ```
//!
//! A datagram's coded form is `[length u16][payload][zero padding]` of the session's
//! symbol size S, as for stream symbols. A repair's coded bytes beyond the longest coded
//! form it combines are zero, so the sender cuts them off and the receiver pads the
//! repair back to S with zeros.

use super::{expand_u24, low24_le, Chunk, Reader, WireError};
use ctcp_rlnc::{Coefficients, RepairHeader, SymbolId};

/// Chunk type: a datagram, uncoded, its payload running to the end of the packet.
pub const CHUNK_DATAGRAM: u8 = 0x08;
/// Chunk type: a repair over datagram symbols, its coded bytes running to the end.
pub const CHUNK_DATAGRAM_REPAIR: u8 = 0x09;
/// Encoded size of a DATAGRAM chunk header: type, truncated id.
pub const DATAGRAM_HEADER_LEN: usize = 1 + 3;
/// Encoded size of a DATAGRAM_REPAIR chunk header: type, truncated first id, count, key.
pub const DATAGRAM_REPAIR_HEADER_LEN: usize = 1 + 3 + 1 + 2;
/// Most datagram symbols one repair combines (the count is one byte).
pub const DATAGRAM_REPAIR_MAX_COUNT: u16 = 255;

/// Parses a DATAGRAM (`ty` = [`CHUNK_DATAGRAM`]) or DATAGRAM_REPAIR chunk's body.
pub(super) fn parse_datagram_chunk<'a>(
    ty: u8,
    r: &mut Reader<'a>,
    symbol_size: usize,
    expected: SymbolId,
) -> Result<Chunk<'a>, WireError> {
    if ty == CHUNK_DATAGRAM {
        parse_datagram(r, symbol_size, expected)
            .map(|(id, payload)| Chunk::Datagram { id, payload })
    } else {
        parse_datagram_repair(r, symbol_size, expected)
            .map(|(header, data)| Chunk::DatagramRepair { header, data })
    }
}

fn parse_datagram<'a>(
    r: &mut Reader<'a>,
    symbol_size: usize,
    expected: SymbolId,
) -> Result<(SymbolId, &'a [u8]), WireError> {
    let id = expand_u24(expected, r.u24("datagram id")?);
    let payload = r.rest();
    if payload.len() + 2 > symbol_size {
        return Err(WireError::Invalid("datagram length"));
    }
    Ok((id, payload))
}

fn parse_datagram_repair<'a>(
    r: &mut Reader<'a>,
    symbol_size: usize,
    expected: SymbolId,
) -> Result<(RepairHeader, &'a [u8]), WireError> {
    let first = expand_u24(expected, r.u24("datagram repair first")?);
    let count = u16::from(r.u8("datagram repair count")?);
    if count == 0 {
        return Err(WireError::Invalid("datagram repair count"));
    }
    let key = r.u16("datagram repair key")?;
    let data = r.rest();
    if data.len() < 2 || data.len() > symbol_size {
        return Err(WireError::Invalid("datagram repair length"));
    }
    Ok((
        RepairHeader {
            first,
            count,
            coefficients: Coefficients::Key(key),
        },
        data,
    ))
}

/// Appends a DATAGRAM chunk; nothing may follow it.
pub fn emit_datagram(out: &mut Vec<u8>, id: SymbolId, payload: &[u8]) {
    out.push(CHUNK_DATAGRAM);
    out.extend_from_slice(&low24_le(id));
    out.extend_from_slice(payload);
}

/// Appends a DATAGRAM_REPAIR chunk (key-form `header`, `count` ≤ 255, `data` cut to the
/// longest coded form it combines); nothing may follow it.
pub fn emit_datagram_repair(out: &mut Vec<u8>, header: &RepairHeader, data: &[u8]) {
    let key = match header.coefficients {
        Coefficients::Key(k) => k,
        Coefficients::Explicit(_) => 0,
    };
    out.push(CHUNK_DATAGRAM_REPAIR);
    out.extend_from_slice(&low24_le(header.first));
    out.push(header.count.min(DATAGRAM_REPAIR_MAX_COUNT) as u8);
    out.extend_from_slice(&key.to_le_bytes());
    out.extend_from_slice(data);
}
