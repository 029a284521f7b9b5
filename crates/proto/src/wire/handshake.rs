//! The handshake packets: INITIATE, ACCEPT (with the transport parameters), REJECT and
//! RESET, all in the clear and MAC'd with the pre-shared key.

use super::{
    skip_padding, Reader, WireError, ACCEPT_LEN, INITIATE_LEN, MAC_LEN, MAX_HANDSHAKE_LEN,
    RANDOM_LEN, REJECT_ECHO_LEN, REJECT_SIGNED_LEN, RESET_TOKEN_LEN, TYPE_ACCEPT, TYPE_INITIATE,
    TYPE_REJECT, TYPE_RESET, VERSION,
};

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

/// Feature bit: the sender takes and sends datagrams (DATAGRAM and DATAGRAM_REPAIR
/// chunks, issue 27). Optional: a session has datagrams only if both ends set it.
pub const FEATURE_DATAGRAMS: u32 = 1;

/// Protocol feature bits a peer may announce in [`Params::features`]. A server refuses
/// an INITIATE that sets a bit it does not know, since a feature bit means "I will send
/// things you must understand".
pub const KNOWN_FEATURES: u32 = FEATURE_DATAGRAMS;

/// The known features a session may run without: they are negotiated to the bits both
/// ends set, where every other bit must match.
pub const OPTIONAL_FEATURES: u32 = FEATURE_DATAGRAMS;

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
        if peer.features & !KNOWN_FEATURES != 0
            || (self.features ^ peer.features) & !OPTIONAL_FEATURES != 0
        {
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
            features: self.features & (peer.features | !OPTIONAL_FEATURES),
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
