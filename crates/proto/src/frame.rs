//! Frames: the reliable content of source symbols.
//!
//! A source symbol's payload is a sequence of frames. Symbols may be decoded out of order,
//! so every frame is self-contained: stream data carries its offset and is placed by it,
//! credit frames carry absolute limits (the larger one wins). A STREAM frame carries its
//! length unless it ends the payload ([`Frame::emit_last`]): then its data runs to the end.

use crate::wire::{put_varint, varint_len, Reader, WireError};
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// Identifies a stream within a session. The low bit says who opened it: 0 the client,
/// 1 the server.
pub type StreamId = u64;

/// Where the reverse proxy should connect: the SOCKS target.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Target {
    /// A literal address.
    Ip(SocketAddr),
    /// A host name the reverse side resolves, and a port.
    Domain(String, u16),
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Ip(a) => write!(f, "{a}"),
            // The name comes from the peer (and its SOCKS client): escaped, so it cannot
            // put control characters into a log line.
            Target::Domain(h, p) => write!(f, "{}:{p}", h.escape_debug()),
        }
    }
}

impl Target {
    /// Appends the target in SOCKS5 ATYP form (0x01 IPv4, 0x03 domain, 0x04 IPv6, then port).
    pub fn emit(&self, out: &mut Vec<u8>) {
        match self {
            Target::Ip(SocketAddr::V4(a)) => {
                out.push(0x01);
                out.extend_from_slice(&a.ip().octets());
                out.extend_from_slice(&a.port().to_be_bytes());
            }
            Target::Ip(SocketAddr::V6(a)) => {
                out.push(0x04);
                out.extend_from_slice(&a.ip().octets());
                out.extend_from_slice(&a.port().to_be_bytes());
            }
            Target::Domain(h, p) => {
                let h = &h.as_bytes()[..h.len().min(255)];
                out.push(0x03);
                out.push(h.len() as u8);
                out.extend_from_slice(h);
                out.extend_from_slice(&p.to_be_bytes());
            }
        }
    }

    fn parse(r: &mut Reader<'_>) -> Result<Self, WireError> {
        Ok(match r.u8("address type")? {
            0x01 => {
                let ip: [u8; 4] = r.array("ipv4")?;
                Target::Ip(SocketAddr::new(
                    IpAddr::V4(Ipv4Addr::from(ip)),
                    r.u16_be("port")?,
                ))
            }
            0x04 => {
                let ip: [u8; 16] = r.array("ipv6")?;
                Target::Ip(SocketAddr::new(
                    IpAddr::V6(Ipv6Addr::from(ip)),
                    r.u16_be("port")?,
                ))
            }
            0x03 => {
                let len = r.u8("domain length")? as usize;
                if len == 0 {
                    return Err(WireError::Invalid("empty domain"));
                }
                let name = std::str::from_utf8(r.bytes(len, "domain")?)
                    .map_err(|_| WireError::Invalid("domain encoding"))?
                    .to_owned();
                Target::Domain(name, r.u16_be("port")?)
            }
            _ => return Err(WireError::Invalid("address type")),
        })
    }

    fn encoded_len(&self) -> usize {
        match self {
            Target::Ip(SocketAddr::V4(_)) => 1 + 4 + 2,
            Target::Ip(SocketAddr::V6(_)) => 1 + 16 + 2,
            Target::Domain(h, _) => 1 + 1 + h.len().min(255) + 2,
        }
    }
}

/// The result code of an OPEN_RESULT frame: how the reverse side's connect to a stream's
/// target went. The values are the SOCKS5 reply codes 0x00–0x06 (RFC 1928 §6) so that
/// older peers, which sent those codes as raw bytes, read the same; `ctcp-runtime` maps
/// each to its SOCKS reply in one place. A code this version does not know reads as
/// [`OpenResult::GeneralFailure`]: every code but 0 is a failure, and the opener must
/// fail the stream whichever failure it was.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OpenResult {
    /// 0x00: connected.
    Succeeded,
    /// 0x01: any other failure (also every code this version does not know).
    GeneralFailure,
    /// 0x02: the reverse proxy's ACL denies the target.
    NotAllowed,
    /// 0x03: no route to the target's network.
    NetworkUnreachable,
    /// 0x04: the host is unreachable, or its name did not resolve.
    HostUnreachable,
    /// 0x05: the target refused the connection.
    ConnectionRefused,
    /// 0x06: the connect attempt (or the name lookup) timed out.
    TimedOut,
}

impl OpenResult {
    /// Every result, in wire order.
    pub const ALL: [OpenResult; 7] = [
        OpenResult::Succeeded,
        OpenResult::GeneralFailure,
        OpenResult::NotAllowed,
        OpenResult::NetworkUnreachable,
        OpenResult::HostUnreachable,
        OpenResult::ConnectionRefused,
        OpenResult::TimedOut,
    ];

    /// The wire byte.
    pub fn code(self) -> u8 {
        match self {
            OpenResult::Succeeded => 0x00,
            OpenResult::GeneralFailure => 0x01,
            OpenResult::NotAllowed => 0x02,
            OpenResult::NetworkUnreachable => 0x03,
            OpenResult::HostUnreachable => 0x04,
            OpenResult::ConnectionRefused => 0x05,
            OpenResult::TimedOut => 0x06,
        }
    }

    /// The result a wire byte names; unknown codes are [`OpenResult::GeneralFailure`].
    pub fn from_code(code: u8) -> OpenResult {
        Self::ALL
            .into_iter()
            .find(|r| r.code() == code)
            .unwrap_or(OpenResult::GeneralFailure)
    }

    /// Whether the stream is connected.
    pub fn is_success(self) -> bool {
        self == OpenResult::Succeeded
    }
}

impl fmt::Display for OpenResult {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            OpenResult::Succeeded => "succeeded",
            OpenResult::GeneralFailure => "general failure",
            OpenResult::NotAllowed => "not allowed",
            OpenResult::NetworkUnreachable => "network unreachable",
            OpenResult::HostUnreachable => "host unreachable",
            OpenResult::ConnectionRefused => "connection refused",
            OpenResult::TimedOut => "timed out",
        })
    }
}

impl Reader<'_> {
    /// Reads a big-endian u16 (network order, as in SOCKS addresses).
    pub fn u16_be(&mut self, what: &'static str) -> Result<u16, WireError> {
        Ok(u16::from_be_bytes(self.array(what)?))
    }
}

/// A frame inside a source symbol.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame<'a> {
    /// Opens a stream towards `target`.
    Open {
        /// The new stream.
        id: StreamId,
        /// Where the reverse side should connect.
        target: Target,
    },
    /// The connect result for a stream.
    OpenResult {
        /// The stream.
        id: StreamId,
        /// How the connect went.
        code: OpenResult,
    },
    /// Stream bytes at an offset.
    Stream {
        /// The stream.
        id: StreamId,
        /// Offset of `data` within the stream.
        offset: u64,
        /// Whether the stream ends after `data`.
        fin: bool,
        /// The bytes.
        data: &'a [u8],
    },
    /// Abrupt stream termination.
    Reset {
        /// The stream.
        id: StreamId,
        /// Why.
        code: u8,
    },
    /// Stream flow-control credit: the sender may send up to `max` bytes on `id`.
    MaxStreamData {
        /// The stream.
        id: StreamId,
        /// Absolute byte limit.
        max: u64,
    },
    /// Session flow-control credit: total stream bytes the sender may send.
    MaxData {
        /// Absolute byte limit.
        max: u64,
    },
    /// What the client measured of the path towards the server during the handshake
    /// (client → server only, once): the rate at which the server's ACCEPT train arrived
    /// and the handshake round trip. The server starts its first flight near that rate
    /// instead of probing for it, which would cost a round trip.
    Path {
        /// Bytes per second, server → client.
        rate: u64,
        /// Handshake round trip in microseconds.
        rtt_us: u64,
        /// Whether the ACCEPTs were spread out enough to measure `rate`; otherwise it is a
        /// lower bound.
        exact: bool,
    },
}

const F_OPEN: u8 = 0x10;
const F_STREAM: u8 = 0x11;
const F_STREAM_FIN: u8 = 0x12;
const F_RESET: u8 = 0x13;
const F_MAX_STREAM_DATA: u8 = 0x14;
const F_MAX_DATA: u8 = 0x15;
const F_OPEN_RESULT: u8 = 0x16;
/// STREAM without a length: the data runs to the end of the payload.
const F_STREAM_LAST: u8 = 0x17;
/// STREAM+FIN without a length: the data runs to the end of the payload.
const F_STREAM_FIN_LAST: u8 = 0x18;
/// The client's handshake measurement of the server → client path.
const F_PATH: u8 = 0x19;
/// Zero padding: the rest of the payload is ignored.
const F_PADDING: u8 = 0x00;

/// Bytes of the STREAM frame header for stream `id` at `offset` in its length form (type,
/// id, offset, length u16), the form a frame that other frames follow needs.
#[must_use]
pub(crate) fn stream_header_len(id: StreamId, offset: u64) -> usize {
    stream_last_header_len(id, offset) + 2
}

/// Bytes of the STREAM frame header for stream `id` at `offset` in its payload-ending form
/// (type, id, offset; no length, see [`Frame::emit_last`]), so a sender can size the frame
/// that ends a symbol to fill it exactly.
#[must_use]
pub(crate) fn stream_last_header_len(id: StreamId, offset: u64) -> usize {
    1 + varint_len(id) + varint_len(offset)
}

/// Appends a STREAM frame's header for `len` bytes of data that the caller appends right
/// after it: `Some(len)` the length form, `None` the payload-ending form (the data runs to
/// the end of the payload). Byte for byte what [`Frame::emit`] / [`Frame::emit_last`]
/// write before the data.
pub(crate) fn emit_stream_header(
    out: &mut Vec<u8>,
    id: StreamId,
    offset: u64,
    fin: bool,
    len: Option<u16>,
) {
    out.push(match (fin, len.is_some()) {
        (false, true) => F_STREAM,
        (true, true) => F_STREAM_FIN,
        (false, false) => F_STREAM_LAST,
        (true, false) => F_STREAM_FIN_LAST,
    });
    put_varint(out, id);
    put_varint(out, offset);
    if let Some(len) = len {
        out.extend_from_slice(&len.to_le_bytes());
    }
}

/// Turns the length-form STREAM frame at `payload[start..]`, if it ends `payload`, into
/// its payload-ending form, for a sender that learns only after writing a frame that
/// nothing follows it. Returns whether it did: then the payload is 2 bytes shorter (its
/// last 2 bytes are left over, for the caller to cut off) and the data unchanged.
/// Anything else at `start` (another frame type, a frame that does not end the payload,
/// a malformed one) is left as it is.
pub(crate) fn drop_final_stream_length(payload: &mut [u8], start: usize) -> bool {
    let Some(tail) = payload.get(start..) else {
        return false;
    };
    let mut r = Reader::new(tail);
    let last = match r.u8("frame type") {
        Ok(F_STREAM) => F_STREAM_LAST,
        Ok(F_STREAM_FIN) => F_STREAM_FIN_LAST,
        _ => return false,
    };
    if r.varint("stream id").is_err() || r.varint("offset").is_err() {
        return false;
    }
    let length_at = start + (tail.len() - r.remaining());
    match r.u16("length") {
        Ok(len) if usize::from(len) == r.remaining() => {}
        _ => return false,
    }
    payload[start] = last;
    payload.copy_within(length_at + 2.., length_at);
    true
}

impl Frame<'_> {
    /// Appends the frame.
    pub fn emit(&self, out: &mut Vec<u8>) {
        match self {
            Frame::Open { id, target } => {
                out.push(F_OPEN);
                put_varint(out, *id);
                target.emit(out);
            }
            Frame::OpenResult { id, code } => {
                out.push(F_OPEN_RESULT);
                put_varint(out, *id);
                out.push(code.code());
            }
            Frame::Stream {
                id,
                offset,
                fin,
                data,
            } => {
                emit_stream_header(out, *id, *offset, *fin, Some(data.len() as u16));
                out.extend_from_slice(data);
            }
            Frame::Reset { id, code } => {
                out.push(F_RESET);
                put_varint(out, *id);
                out.push(*code);
            }
            Frame::MaxStreamData { id, max } => {
                out.push(F_MAX_STREAM_DATA);
                put_varint(out, *id);
                put_varint(out, *max);
            }
            Frame::MaxData { max } => {
                out.push(F_MAX_DATA);
                put_varint(out, *max);
            }
            Frame::Path {
                rate,
                rtt_us,
                exact,
            } => {
                out.push(F_PATH);
                put_varint(out, *rate);
                put_varint(out, *rtt_us);
                out.push(u8::from(*exact));
            }
        }
    }

    /// Appends the frame in the form that ends a payload: a STREAM frame without its
    /// length (type 0x17, or 0x18 with FIN; the receiver takes the rest of the payload as
    /// its data), saving 2 bytes; any other frame as [`Frame::emit`]
    /// (they delimit themselves). Nothing may be appended after it.
    #[cfg(any(test, feature = "fuzzing"))]
    pub fn emit_last(&self, out: &mut Vec<u8>) {
        match self {
            Frame::Stream {
                id,
                offset,
                fin,
                data,
            } => {
                emit_stream_header(out, *id, *offset, *fin, None);
                out.extend_from_slice(data);
            }
            other => other.emit(out),
        }
    }

    /// Encoded size of the frame in its payload-ending form ([`Frame::emit_last`]).
    #[cfg(test)]
    pub fn encoded_len_last(&self) -> usize {
        match self {
            Frame::Stream {
                id, offset, data, ..
            } => stream_last_header_len(*id, *offset) + data.len(),
            other => other.encoded_len(),
        }
    }

    /// Encoded size of the frame.
    pub fn encoded_len(&self) -> usize {
        match self {
            Frame::Open { id, target } => 1 + varint_len(*id) + target.encoded_len(),
            Frame::OpenResult { id, .. } | Frame::Reset { id, .. } => 1 + varint_len(*id) + 1,
            Frame::Stream {
                id, offset, data, ..
            } => stream_header_len(*id, *offset) + data.len(),
            Frame::MaxStreamData { id, max } => 1 + varint_len(*id) + varint_len(*max),
            Frame::MaxData { max } => 1 + varint_len(*max),
            Frame::Path { rate, rtt_us, .. } => 1 + varint_len(*rate) + varint_len(*rtt_us) + 1,
        }
    }
}

/// Iterates the frames of a source symbol payload.
#[derive(Debug)]
pub struct Frames<'a> {
    r: Reader<'a>,
}

impl<'a> Frames<'a> {
    /// Starts iterating `payload`.
    pub fn new(payload: &'a [u8]) -> Self {
        Frames {
            r: Reader::new(payload),
        }
    }

    fn parse_one(&mut self, ty: u8) -> Result<Frame<'a>, WireError> {
        let r = &mut self.r;
        Ok(match ty {
            F_OPEN => Frame::Open {
                id: r.varint("stream id")?,
                target: Target::parse(r)?,
            },
            F_OPEN_RESULT => Frame::OpenResult {
                id: r.varint("stream id")?,
                code: OpenResult::from_code(r.u8("code")?),
            },
            F_STREAM | F_STREAM_FIN => {
                let id = r.varint("stream id")?;
                let offset = r.varint("offset")?;
                let len = r.u16("length")? as usize;
                let data = r.bytes(len, "stream data")?;
                if offset.checked_add(len as u64).is_none() {
                    return Err(WireError::Invalid("stream offset"));
                }
                Frame::Stream {
                    id,
                    offset,
                    fin: ty == F_STREAM_FIN,
                    data,
                }
            }
            F_STREAM_LAST | F_STREAM_FIN_LAST => {
                let id = r.varint("stream id")?;
                let offset = r.varint("offset")?;
                // The rest of the payload; may be empty (a FIN alone).
                let data = r.rest();
                if offset.checked_add(data.len() as u64).is_none() {
                    return Err(WireError::Invalid("stream offset"));
                }
                Frame::Stream {
                    id,
                    offset,
                    fin: ty == F_STREAM_FIN_LAST,
                    data,
                }
            }
            F_RESET => Frame::Reset {
                id: r.varint("stream id")?,
                code: r.u8("code")?,
            },
            F_MAX_STREAM_DATA => Frame::MaxStreamData {
                id: r.varint("stream id")?,
                max: r.varint("max")?,
            },
            F_MAX_DATA => Frame::MaxData {
                max: r.varint("max")?,
            },
            F_PATH => Frame::Path {
                rate: r.varint("path rate")?,
                rtt_us: r.varint("path rtt")?,
                exact: match r.u8("path exact")? {
                    0 => false,
                    1 => true,
                    _ => return Err(WireError::Invalid("path exact flag")),
                },
            },
            value => {
                return Err(WireError::UnknownType {
                    what: "frame",
                    value,
                })
            }
        })
    }
}

impl<'a> Iterator for Frames<'a> {
    type Item = Result<Frame<'a>, WireError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.r.is_empty() {
            return None;
        }
        let ty = match self.r.u8("frame type") {
            Ok(t) => t,
            Err(e) => return Some(Err(e)),
        };
        if ty == F_PADDING {
            self.r.rest();
            return None;
        }
        let res = self.parse_one(ty);
        if res.is_err() {
            self.r.rest();
        }
        Some(res)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_with_exact_lengths() {
        let frames = vec![
            Frame::Open {
                id: 4,
                target: Target::Domain("example.com".into(), 443),
            },
            Frame::Open {
                id: 8,
                target: Target::Ip("[::1]:22".parse().unwrap()),
            },
            Frame::Open {
                id: 12,
                target: Target::Ip("10.0.0.1:80".parse().unwrap()),
            },
            Frame::OpenResult {
                id: 4,
                code: OpenResult::ConnectionRefused,
            },
            Frame::Path {
                rate: 1_250_000,
                rtt_us: 500_123,
                exact: true,
            },
            Frame::Stream {
                id: 4,
                offset: 1 << 40,
                fin: true,
                data: b"abc",
            },
            Frame::Stream {
                id: 400,
                offset: 0,
                fin: false,
                data: b"",
            },
            Frame::Reset { id: 4, code: 1 },
            Frame::MaxStreamData {
                id: 4,
                max: 1 << 20,
            },
            Frame::MaxData { max: 77 },
        ];
        let mut out = Vec::new();
        for f in &frames {
            let before = out.len();
            f.emit(&mut out);
            assert_eq!(out.len() - before, f.encoded_len(), "{f:?}");
        }
        out.extend_from_slice(&[0, 0, 0]);
        let parsed: Vec<_> = Frames::new(&out).collect::<Result<_, _>>().unwrap();
        assert_eq!(parsed, frames);
    }

    #[test]
    fn payload_ending_stream_frames_round_trip() {
        let lead = Frame::MaxData { max: 77 };
        for (id, offset, fin, data) in [
            (4u64, 0u64, false, &b"abc"[..]),
            (400, 1 << 40, true, b"xyz"),
            (1, 70_000, true, b""),
            (0, 5, false, &[F_STREAM, F_PADDING, 0, 0][..]),
        ] {
            let f = Frame::Stream {
                id,
                offset,
                fin,
                data,
            };
            let mut out = Vec::new();
            lead.emit_last(&mut out);
            assert_eq!(
                out.len(),
                lead.encoded_len(),
                "non-STREAM frames keep their form"
            );
            f.emit_last(&mut out);
            assert_eq!(out.len(), lead.encoded_len() + f.encoded_len_last());
            assert_eq!(f.encoded_len_last() + 2, f.encoded_len());
            assert_eq!(
                f.encoded_len_last(),
                stream_last_header_len(id, offset) + data.len()
            );
            let parsed: Vec<_> = Frames::new(&out).collect::<Result<_, _>>().unwrap();
            assert_eq!(
                parsed,
                [lead.clone(), f.clone()],
                "{id} {offset} {fin} {data:?}"
            );

            // Written in the length form, then made the payload's end: the same bytes.
            let mut rewritten = Vec::new();
            lead.emit(&mut rewritten);
            let start = rewritten.len();
            f.emit(&mut rewritten);
            assert!(drop_length(&mut rewritten, start));
            assert_eq!(rewritten, out);
        }
    }

    /// [`drop_final_stream_length`] on a `Vec`, cut to the payload's new length.
    fn drop_length(payload: &mut Vec<u8>, start: usize) -> bool {
        let dropped = drop_final_stream_length(payload, start);
        if dropped {
            payload.truncate(payload.len() - 2);
        }
        dropped
    }

    #[test]
    fn dropping_a_length_needs_a_length_form_stream_frame_at_the_end() {
        let f = Frame::Stream {
            id: 8,
            offset: 100,
            fin: false,
            data: b"data",
        };
        let mut two = Vec::new();
        f.emit(&mut two);
        let second = two.len();
        f.emit(&mut two);
        let before = two.clone();
        // Not the final frame; a position inside a frame; past the end; another frame type;
        // a frame already without its length.
        for start in [0, 1, second + 1, two.len(), two.len() + 5] {
            assert!(!drop_length(&mut two, start), "{start}");
            assert_eq!(two, before);
        }
        let mut other = Vec::new();
        Frame::Reset { id: 8, code: 1 }.emit(&mut other);
        assert!(!drop_length(&mut other, 0));
        let mut last = Vec::new();
        f.emit_last(&mut last);
        let copy = last.clone();
        assert!(!drop_length(&mut last, 0));
        assert_eq!(last, copy);
        // A length that disagrees with what is left.
        let mut short = before[second..].to_vec();
        short.pop();
        assert!(!drop_length(&mut short, 0));
        assert!(drop_length(&mut two, second));
        assert_eq!(two.len(), before.len() - 2);
    }

    #[test]
    fn malformed_payload_ending_stream_frames_are_errors() {
        // Truncated before the id or inside the offset.
        assert!(Frames::new(&[F_STREAM_LAST]).next().unwrap().is_err());
        assert!(Frames::new(&[F_STREAM_FIN_LAST, 4, 0x40])
            .next()
            .unwrap()
            .is_err());
        // The largest offset a varint holds still parses (a 62-bit offset plus a payload's
        // length cannot overflow; flow control refuses it later).
        let mut out = vec![F_STREAM_LAST, 4];
        put_varint(&mut out, crate::wire::VARINT_MAX);
        out.extend_from_slice(b"ab");
        assert_eq!(
            Frames::new(&out).next(),
            Some(Ok(Frame::Stream {
                id: 4,
                offset: crate::wire::VARINT_MAX,
                fin: false,
                data: b"ab"
            }))
        );
        // A zero-length tail is a frame without data (a FIN alone), and the end.
        let parsed: Vec<_> = Frames::new(&[F_STREAM_FIN_LAST, 4, 9]).collect();
        assert_eq!(
            parsed,
            [Ok(Frame::Stream {
                id: 4,
                offset: 9,
                fin: true,
                data: b""
            })]
        );
    }

    #[test]
    fn garbage_never_panics() {
        let mut x = 0x9e37_79b9u32;
        for len in 0..400 {
            let mut buf: Vec<u8> = (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 17;
                    x ^= x << 5;
                    (x % 0x1a) as u8 // mostly valid frame types and small varints
                })
                .collect();
            let _ = Frames::new(&buf).count();
            for start in 0..=len + 1 {
                let _ = drop_length(&mut buf, start);
            }
        }
    }

    #[test]
    fn malformed_frames_are_errors() {
        assert!(Frames::new(&[F_OPEN, 4, 0x03, 0, 0, 80])
            .next()
            .unwrap()
            .is_err());
        assert!(Frames::new(&[F_STREAM, 4, 0, 10, 0, 1])
            .next()
            .unwrap()
            .is_err());
        assert!(Frames::new(&[0x7f]).next().unwrap().is_err());
    }

    #[test]
    fn a_peer_supplied_name_displays_escaped() {
        let t = Target::Domain("evil\n\u{1b}[2Jname".into(), 80);
        let shown = t.to_string();
        assert!(!shown.chars().any(char::is_control), "{shown:?}");
        assert_eq!(shown, "evil\\n\\u{1b}[2Jname:80");
    }

    #[test]
    fn open_result_codes_round_trip_and_unknown_ones_read_as_failure() {
        for (i, r) in OpenResult::ALL.into_iter().enumerate() {
            assert_eq!(usize::from(r.code()), i, "wire order");
            assert_eq!(OpenResult::from_code(r.code()), r);
            let mut out = Vec::new();
            Frame::OpenResult { id: 9, code: r }.emit(&mut out);
            let back: Vec<_> = Frames::new(&out).collect::<Result<_, _>>().unwrap();
            assert_eq!(back, vec![Frame::OpenResult { id: 9, code: r }]);
        }
        for code in 7..=u8::MAX {
            assert_eq!(OpenResult::from_code(code), OpenResult::GeneralFailure);
        }
        assert!(OpenResult::Succeeded.is_success());
        assert!(!OpenResult::TimedOut.is_success());
    }
}
