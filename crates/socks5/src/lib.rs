//! A sans-IO SOCKSv5 server codec (RFC 1928, with RFC 1929 username/password).
//!
//! [`ServerHandshake::feed`] takes whatever bytes have arrived and says how many it
//! consumed, what to write back, and — once the client's request is complete — the
//! [`Request`]. It never reads past the request, so bytes a client pipelines after it stay
//! with the caller as application data. Every length is bounded by the protocol (at most
//! 255 methods, 255-byte names and credentials); malformed input is an [`Error`], never a
//! panic, and [`Error::as_reply`] says which reply code to send before closing.
#![deny(unsafe_code)]

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use thiserror::Error;

/// SOCKS protocol version byte.
pub const VERSION: u8 = 0x05;
/// Method: no authentication.
pub const METHOD_NO_AUTH: u8 = 0x00;
/// Method: username/password (RFC 1929).
pub const METHOD_USER_PASS: u8 = 0x02;
/// Method selection answer when nothing offered is acceptable.
pub const METHOD_NONE_ACCEPTABLE: u8 = 0xff;

/// RFC 1928 §6 reply codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Reply {
    /// Succeeded.
    Succeeded = 0x00,
    /// General SOCKS server failure.
    GeneralFailure = 0x01,
    /// Connection not allowed by ruleset.
    NotAllowed = 0x02,
    /// Network unreachable.
    NetworkUnreachable = 0x03,
    /// Host unreachable.
    HostUnreachable = 0x04,
    /// Connection refused.
    ConnectionRefused = 0x05,
    /// TTL expired (used for connect timeouts).
    TtlExpired = 0x06,
    /// Command not supported.
    CommandNotSupported = 0x07,
    /// Address type not supported.
    AddressTypeNotSupported = 0x08,
}

impl Reply {
    /// The reply for a wire code; unknown codes map to [`Reply::GeneralFailure`].
    pub fn from_code(code: u8) -> Reply {
        match code {
            0x00 => Reply::Succeeded,
            0x02 => Reply::NotAllowed,
            0x03 => Reply::NetworkUnreachable,
            0x04 => Reply::HostUnreachable,
            0x05 => Reply::ConnectionRefused,
            0x06 => Reply::TtlExpired,
            0x07 => Reply::CommandNotSupported,
            0x08 => Reply::AddressTypeNotSupported,
            _ => Reply::GeneralFailure,
        }
    }

    /// The wire code.
    pub fn code(self) -> u8 {
        self as u8
    }

    /// Encodes a reply with the bound address (`0.0.0.0:0` when not meaningful).
    pub fn encode(self, bound: SocketAddr) -> Vec<u8> {
        let mut out = vec![VERSION, self.code(), 0x00];
        TargetAddr::Ip(bound).encode(&mut out);
        out
    }
}

/// Where the client wants to go.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum TargetAddr {
    /// A literal IPv4 or IPv6 address.
    Ip(SocketAddr),
    /// A host name (1–255 bytes of UTF-8) resolved by the far side, and a port.
    Domain(String, u16),
}

impl fmt::Display for TargetAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TargetAddr::Ip(a) => write!(f, "{a}"),
            TargetAddr::Domain(h, p) => write!(f, "{h}:{p}"),
        }
    }
}

impl TargetAddr {
    /// Appends ATYP, address and port (RFC 1928 §4).
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            TargetAddr::Ip(SocketAddr::V4(a)) => {
                out.push(0x01);
                out.extend_from_slice(&a.ip().octets());
                out.extend_from_slice(&a.port().to_be_bytes());
            }
            TargetAddr::Ip(SocketAddr::V6(a)) => {
                out.push(0x04);
                out.extend_from_slice(&a.ip().octets());
                out.extend_from_slice(&a.port().to_be_bytes());
            }
            TargetAddr::Domain(h, p) => {
                let h = &h.as_bytes()[..h.len().min(255)];
                out.push(0x03);
                out.push(h.len() as u8);
                out.extend_from_slice(h);
                out.extend_from_slice(&p.to_be_bytes());
            }
        }
    }

    /// Parses ATYP, address and port; `Ok(None)` if more bytes are needed.
    ///
    /// # Errors
    /// [`Error::AddressTypeNotSupported`], [`Error::BadDomain`].
    pub fn decode(buf: &[u8]) -> Result<Option<(TargetAddr, usize)>, Error> {
        let Some(&atyp) = buf.first() else {
            return Ok(None);
        };
        let (len, start) = match atyp {
            0x01 => (4, 1),
            0x04 => (16, 1),
            0x03 => match buf.get(1) {
                None => return Ok(None),
                Some(0) => return Err(Error::BadDomain),
                Some(&n) => (n as usize, 2),
            },
            other => return Err(Error::AddressTypeNotSupported(other)),
        };
        let total = start + len + 2;
        if buf.len() < total {
            return Ok(None);
        }
        let addr = &buf[start..start + len];
        let port = u16::from_be_bytes([buf[start + len], buf[start + len + 1]]);
        let t = match atyp {
            0x01 => {
                let mut o = [0u8; 4];
                o.copy_from_slice(addr);
                TargetAddr::Ip(SocketAddr::new(IpAddr::V4(Ipv4Addr::from(o)), port))
            }
            0x04 => {
                let mut o = [0u8; 16];
                o.copy_from_slice(addr);
                TargetAddr::Ip(SocketAddr::new(IpAddr::V6(Ipv6Addr::from(o)), port))
            }
            _ => {
                let name = std::str::from_utf8(addr).map_err(|_| Error::BadDomain)?;
                // DNS limits: 253 characters in all, 63 per label.
                if name.bytes().any(|b| b == 0)
                    || name.trim_end_matches('.').len() > 253
                    || name.split('.').any(|l| l.len() > 63)
                {
                    return Err(Error::BadDomain);
                }
                TargetAddr::Domain(name.to_owned(), port)
            }
        };
        Ok(Some((t, total)))
    }
}

/// The client's command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    /// CONNECT (the only one ctcp serves).
    Connect,
    /// BIND.
    Bind,
    /// UDP ASSOCIATE.
    UdpAssociate,
}

/// A complete client request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// [`Command::Connect`], or [`Command::UdpAssociate`] when the handshake takes it
    /// (then `target` is where the client will send its datagrams from, or zeros):
    /// other commands end the handshake with an error.
    pub command: Command,
    /// Where to connect.
    pub target: TargetAddr,
    /// The username the client authenticated as, if any.
    pub user: Option<String>,
}

/// A handshake failure. The caller sends [`Error::as_reply`] (if any) and closes.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum Error {
    /// Not SOCKS5.
    #[error("unsupported SOCKS version {0:#04x}")]
    BadVersion(u8),
    /// The greeting offered no method the server accepts.
    #[error("no acceptable authentication method offered")]
    NoAcceptableMethod,
    /// RFC 1929 sub-negotiation with the wrong version byte.
    #[error("bad username/password sub-negotiation version {0:#04x}")]
    BadAuthVersion(u8),
    /// Wrong username or password.
    #[error("authentication failed")]
    AuthFailed,
    /// BIND, UDP ASSOCIATE or an unknown command.
    #[error("command {0:#04x} not supported")]
    CommandNotSupported(u8),
    /// Unknown address type.
    #[error("address type {0:#04x} not supported")]
    AddressTypeNotSupported(u8),
    /// Empty, non-UTF-8 or over-long (beyond DNS limits) domain name.
    #[error("invalid domain name")]
    BadDomain,
    /// A greeting with zero methods or a non-zero reserved byte.
    #[error("malformed request")]
    Malformed,
    /// `feed` after the handshake finished or failed.
    #[error("handshake already finished")]
    Finished,
}

impl Error {
    /// The reply to send before closing, or `None` where the protocol says to just close
    /// (wrong version, failed method selection or authentication — those are answered in
    /// their own message formats by [`ServerHandshake::feed`]).
    pub fn as_reply(&self) -> Option<Reply> {
        match self {
            Error::CommandNotSupported(_) => Some(Reply::CommandNotSupported),
            Error::AddressTypeNotSupported(_) => Some(Reply::AddressTypeNotSupported),
            Error::BadDomain | Error::Malformed => Some(Reply::GeneralFailure),
            Error::BadVersion(_)
            | Error::NoAcceptableMethod
            | Error::BadAuthVersion(_)
            | Error::AuthFailed
            | Error::Finished => None,
        }
    }
}

/// Who may use the server.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum AuthPolicy {
    /// Anyone (method 0x00).
    #[default]
    NoAuth,
    /// Only these username/password pairs (method 0x02).
    UserPass(Vec<(String, String)>),
}

impl AuthPolicy {
    fn check(&self, user: &[u8], pass: &[u8]) -> bool {
        match self {
            AuthPolicy::NoAuth => true,
            AuthPolicy::UserPass(list) => {
                // Compare every entry in constant time per byte, without early exit.
                let mut ok = false;
                for (u, p) in list {
                    ok |= ct_eq(u.as_bytes(), user) & ct_eq(p.as_bytes(), pass);
                }
                ok
            }
        }
    }
}

fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// What one call to [`ServerHandshake::feed`] produced.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Step {
    /// Input bytes consumed; drop them from the buffer.
    pub consumed: usize,
    /// Bytes to send to the client now.
    pub write: Vec<u8>,
    /// The request, once complete; the caller then answers it with [`Reply::encode`].
    pub request: Option<Request>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Greeting,
    Auth,
    Request,
    Done,
}

/// The server side of one SOCKS5 handshake.
#[derive(Debug, Clone)]
pub struct ServerHandshake {
    policy: AuthPolicy,
    state: State,
    user: Option<String>,
    udp_associate: bool,
}

impl ServerHandshake {
    /// Starts a handshake under `policy`.
    pub fn new(policy: AuthPolicy) -> Self {
        ServerHandshake {
            policy,
            state: State::Greeting,
            user: None,
            udp_associate: false,
        }
    }

    /// Also takes UDP ASSOCIATE (RFC 1928 §7) requests; without this they are refused
    /// with "command not supported".
    #[must_use]
    pub fn with_udp_associate(mut self, on: bool) -> Self {
        self.udp_associate = on;
        self
    }

    /// Consumes as much of `input` as forms complete messages.
    ///
    /// # Errors
    /// Any protocol violation; `Step`-worthy bytes to send first (e.g. the 0xFF method
    /// answer or a failed auth status) are described by [`Error`] and written by the
    /// caller via [`ServerHandshake::failure_bytes`].
    pub fn feed(&mut self, input: &[u8]) -> Result<Step, Error> {
        let mut step = Step::default();
        loop {
            let buf = &input[step.consumed..];
            match self.state {
                State::Done => {
                    return if step.consumed == 0 && step.request.is_none() {
                        Err(Error::Finished)
                    } else {
                        Ok(step)
                    }
                }
                State::Greeting => {
                    if buf.len() < 2 {
                        return Ok(step);
                    }
                    if buf[0] != VERSION {
                        self.state = State::Done;
                        return Err(Error::BadVersion(buf[0]));
                    }
                    let n = buf[1] as usize;
                    if n == 0 {
                        self.state = State::Done;
                        return Err(Error::Malformed);
                    }
                    if buf.len() < 2 + n {
                        return Ok(step);
                    }
                    let methods = &buf[2..2 + n];
                    let wanted = match self.policy {
                        AuthPolicy::NoAuth => METHOD_NO_AUTH,
                        AuthPolicy::UserPass(_) => METHOD_USER_PASS,
                    };
                    step.consumed += 2 + n;
                    if !methods.contains(&wanted) {
                        self.state = State::Done;
                        return Err(Error::NoAcceptableMethod);
                    }
                    step.write.extend_from_slice(&[VERSION, wanted]);
                    self.state = if wanted == METHOD_USER_PASS {
                        State::Auth
                    } else {
                        State::Request
                    };
                }
                State::Auth => {
                    if buf.len() < 2 {
                        return Ok(step);
                    }
                    if buf[0] != 0x01 {
                        self.state = State::Done;
                        return Err(Error::BadAuthVersion(buf[0]));
                    }
                    let ulen = buf[1] as usize;
                    let Some(&plen) = buf.get(2 + ulen) else {
                        return Ok(step);
                    };
                    let plen = plen as usize;
                    if buf.len() < 3 + ulen + plen {
                        return Ok(step);
                    }
                    let user = &buf[2..2 + ulen];
                    let pass = &buf[3 + ulen..3 + ulen + plen];
                    step.consumed += 3 + ulen + plen;
                    if !self.policy.check(user, pass) {
                        self.state = State::Done;
                        return Err(Error::AuthFailed);
                    }
                    self.user = Some(String::from_utf8_lossy(user).into_owned());
                    step.write.extend_from_slice(&[0x01, 0x00]);
                    self.state = State::Request;
                }
                State::Request => {
                    if buf.len() < 4 {
                        return Ok(step);
                    }
                    if buf[0] != VERSION {
                        self.state = State::Done;
                        return Err(Error::BadVersion(buf[0]));
                    }
                    if buf[2] != 0 {
                        self.state = State::Done;
                        return Err(Error::Malformed);
                    }
                    let cmd = buf[1];
                    let Some((target, used)) =
                        TargetAddr::decode(&buf[3..]).inspect_err(|_| self.state = State::Done)?
                    else {
                        return Ok(step);
                    };
                    step.consumed += 3 + used;
                    self.state = State::Done;
                    let command = match cmd {
                        0x01 => Command::Connect,
                        0x03 if self.udp_associate => Command::UdpAssociate,
                        other => return Err(Error::CommandNotSupported(other)),
                    };
                    step.request = Some(Request {
                        command,
                        target,
                        user: self.user.take(),
                    });
                    return Ok(step);
                }
            }
        }
    }

    /// Bytes to send for a failure before closing: the 0xFF method answer, the RFC 1929
    /// failure status, or an error reply.
    pub fn failure_bytes(err: &Error) -> Vec<u8> {
        match err {
            Error::NoAcceptableMethod => vec![VERSION, METHOD_NONE_ACCEPTABLE],
            Error::AuthFailed => vec![0x01, 0x01],
            e => e
                .as_reply()
                .map_or_else(Vec::new, |r| r.encode(SocketAddr::from(([0, 0, 0, 0], 0)))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(policy: AuthPolicy, input: &[u8]) -> (Result<Option<Request>, Error>, Vec<u8>, usize) {
        let mut hs = ServerHandshake::new(policy);
        let mut written = Vec::new();
        let mut consumed = 0;
        // Feed one byte more at a time: incremental parsing must give the same result.
        let mut avail = 0;
        loop {
            avail = (avail + 1).min(input.len());
            match hs.feed(&input[consumed..avail]) {
                Ok(step) => {
                    consumed += step.consumed;
                    written.extend(step.write);
                    if let Some(r) = step.request {
                        return (Ok(Some(r)), written, consumed);
                    }
                    if avail == input.len() {
                        return (Ok(None), written, consumed);
                    }
                }
                Err(e) => return (Err(e), written, consumed),
            }
        }
    }

    #[test]
    fn connect_ipv4_no_auth_with_pipelined_data() {
        let mut input = vec![5, 1, 0, 5, 1, 0, 1, 10, 0, 0, 1, 0, 80];
        input.extend_from_slice(b"GET /");
        let (r, w, used) = run(AuthPolicy::NoAuth, &input);
        let r = r.unwrap().unwrap();
        assert_eq!(r.target, TargetAddr::Ip("10.0.0.1:80".parse().unwrap()));
        assert_eq!(w, vec![5, 0]);
        assert_eq!(&input[used..], b"GET /", "never reads past the request");
    }

    #[test]
    fn connect_domain_and_ipv6() {
        let mut input = vec![5, 2, 2, 0, 5, 1, 0, 3, 11];
        input.extend_from_slice(b"example.com");
        input.extend_from_slice(&[1, 187]);
        let (r, _, _) = run(AuthPolicy::NoAuth, &input);
        assert_eq!(
            r.unwrap().unwrap().target,
            TargetAddr::Domain("example.com".into(), 443)
        );
        let mut input = vec![5, 1, 0, 5, 1, 0, 4];
        input.extend_from_slice(&Ipv6Addr::LOCALHOST.octets());
        input.extend_from_slice(&[0, 22]);
        let (r, _, _) = run(AuthPolicy::NoAuth, &input);
        assert_eq!(
            r.unwrap().unwrap().target,
            TargetAddr::Ip("[::1]:22".parse().unwrap())
        );
    }

    #[test]
    fn username_password() {
        let policy = AuthPolicy::UserPass(vec![("alice".into(), "s3cret".into())]);
        let mut ok = vec![5, 1, 2, 1, 5];
        ok.extend_from_slice(b"alice");
        ok.push(6);
        ok.extend_from_slice(b"s3cret");
        ok.extend_from_slice(&[5, 1, 0, 1, 127, 0, 0, 1, 0, 80]);
        let (r, w, _) = run(policy.clone(), &ok);
        assert_eq!(r.unwrap().unwrap().user.as_deref(), Some("alice"));
        assert_eq!(w, vec![5, 2, 1, 0]);
        let mut bad = vec![5, 1, 2, 1, 5];
        bad.extend_from_slice(b"alice");
        bad.push(5);
        bad.extend_from_slice(b"wrong");
        let (r, _, _) = run(policy.clone(), &bad);
        assert_eq!(r.unwrap_err(), Error::AuthFailed);
        assert_eq!(
            ServerHandshake::failure_bytes(&Error::AuthFailed),
            vec![1, 1]
        );
        // A client that only offers no-auth is refused with 0xFF.
        let (r, _, _) = run(policy, &[5, 1, 0]);
        assert_eq!(r.unwrap_err(), Error::NoAcceptableMethod);
        assert_eq!(
            ServerHandshake::failure_bytes(&Error::NoAcceptableMethod),
            vec![5, 0xff]
        );
    }

    #[test]
    fn errors_map_to_reply_codes() {
        let (r, _, _) = run(
            AuthPolicy::NoAuth,
            &[5, 1, 0, 5, 2, 0, 1, 1, 2, 3, 4, 0, 80],
        );
        let e = r.unwrap_err();
        assert_eq!(e, Error::CommandNotSupported(2));
        assert_eq!(e.as_reply(), Some(Reply::CommandNotSupported));
        assert_eq!(
            ServerHandshake::failure_bytes(&e),
            vec![5, 7, 0, 1, 0, 0, 0, 0, 0, 0]
        );
        let (r, _, _) = run(
            AuthPolicy::NoAuth,
            &[5, 1, 0, 5, 3, 0, 1, 1, 2, 3, 4, 0, 80],
        );
        assert_eq!(r.unwrap_err().as_reply(), Some(Reply::CommandNotSupported));
        let (r, _, _) = run(AuthPolicy::NoAuth, &[5, 1, 0, 5, 1, 0, 9, 1]);
        assert_eq!(
            r.unwrap_err().as_reply(),
            Some(Reply::AddressTypeNotSupported)
        );
        let (r, _, _) = run(AuthPolicy::NoAuth, &[5, 1, 0, 5, 1, 0, 3, 0, 0, 80]);
        assert_eq!(r.unwrap_err(), Error::BadDomain);
        // 255 characters: beyond DNS's 253; a 64-character label: beyond 63.
        for name in ["a".repeat(255), format!("{}.example", "b".repeat(64))] {
            let mut req = vec![5, 1, 0, 5, 1, 0, 3, name.len() as u8];
            req.extend_from_slice(name.as_bytes());
            req.extend_from_slice(&[0, 80]);
            let (r, _, _) = run(AuthPolicy::NoAuth, &req);
            assert_eq!(r.unwrap_err(), Error::BadDomain, "{name}");
        }
        let (r, _, _) = run(AuthPolicy::NoAuth, &[4, 1, 0, 80]);
        assert_eq!(r.unwrap_err().as_reply(), None);
    }

    #[test]
    fn reply_codes_round_trip() {
        for code in 0u8..=8 {
            assert_eq!(Reply::from_code(code).code(), code);
        }
        assert_eq!(Reply::from_code(200), Reply::GeneralFailure);
        assert_eq!(
            Reply::Succeeded.encode("1.2.3.4:5".parse().unwrap()),
            vec![5, 0, 0, 1, 1, 2, 3, 4, 0, 5]
        );
    }

    #[test]
    fn target_addr_round_trips() {
        for t in [
            TargetAddr::Ip("1.2.3.4:5".parse().unwrap()),
            TargetAddr::Ip("[2001:db8::1]:443".parse().unwrap()),
            TargetAddr::Domain("a.example".into(), 8080),
        ] {
            let mut out = Vec::new();
            t.encode(&mut out);
            assert_eq!(
                TargetAddr::decode(&out).unwrap(),
                Some((t.clone(), out.len()))
            );
            assert_eq!(TargetAddr::decode(&out[..out.len() - 1]).unwrap(), None);
        }
    }
}

/// The header of a datagram relayed under UDP ASSOCIATE (RFC 1928 §7).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UdpHeader {
    /// Fragment number (0: a whole datagram).
    pub frag: u8,
    /// Destination (client → server) or source (server → client).
    pub addr: TargetAddr,
    /// Header length: the payload starts here.
    pub len: usize,
}

/// Why a relayed datagram's header was refused.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum UdpHeaderError {
    /// Shorter than its header.
    #[error("datagram shorter than its SOCKS header")]
    Short,
    /// The reserved bytes are not zero.
    #[error("reserved bytes not zero")]
    Reserved,
    /// An address type RFC 1928 does not define, or a bad name.
    #[error("bad address: {0}")]
    Address(Error),
}

impl UdpHeader {
    /// Parses `RSV(2) FRAG(1) ATYP DST.ADDR DST.PORT` at the start of `buf`.
    ///
    /// # Errors
    /// See [`UdpHeaderError`].
    pub fn parse(buf: &[u8]) -> Result<UdpHeader, UdpHeaderError> {
        if buf.len() < 4 {
            return Err(UdpHeaderError::Short);
        }
        if buf[0] != 0 || buf[1] != 0 {
            return Err(UdpHeaderError::Reserved);
        }
        match TargetAddr::decode(&buf[3..]) {
            Ok(Some((addr, used))) => Ok(UdpHeader {
                frag: buf[2],
                addr,
                len: 3 + used,
            }),
            Ok(None) => Err(UdpHeaderError::Short),
            Err(e) => Err(UdpHeaderError::Address(e)),
        }
    }

    /// Appends a whole-datagram header (FRAG 0) for `addr`.
    pub fn encode(addr: &TargetAddr, out: &mut Vec<u8>) {
        out.extend_from_slice(&[0, 0, 0]);
        addr.encode(out);
    }
}

#[cfg(test)]
mod udp_tests {
    use super::*;

    #[test]
    fn udp_header_round_trips_and_refuses_bad_input() {
        let mut out = Vec::new();
        let addr = TargetAddr::Ip("192.0.2.1:53".parse().unwrap_or_else(|_| unreachable!()));
        UdpHeader::encode(&addr, &mut out);
        out.extend_from_slice(b"payload");
        let h = UdpHeader::parse(&out).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            (h.frag, &h.addr, &out[h.len..]),
            (0, &addr, &b"payload"[..])
        );
        assert_eq!(UdpHeader::parse(&out[..5]), Err(UdpHeaderError::Short));
        assert_eq!(
            UdpHeader::parse(&[0, 1, 0, 1, 0, 0, 0, 0, 0, 0]),
            Err(UdpHeaderError::Reserved)
        );
        assert_eq!(
            UdpHeader::parse(&[0, 0, 0, 9, 1, 2, 3, 4, 0, 53]),
            Err(UdpHeaderError::Address(Error::AddressTypeNotSupported(9)))
        );
        let frag = [0, 0, 1, 1, 1, 2, 3, 4, 0, 53];
        assert_eq!(UdpHeader::parse(&frag).map(|h| h.frag), Ok(1));
    }

    #[test]
    fn udp_associate_only_when_enabled() {
        let req = [5, 1, 0, 5, 3, 0, 1, 0, 0, 0, 0, 0, 0];
        let mut off = ServerHandshake::new(AuthPolicy::NoAuth);
        assert!(off.feed(&req).is_err());
        let mut on = ServerHandshake::new(AuthPolicy::NoAuth).with_udp_associate(true);
        let step = on.feed(&req).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(step.request.map(|r| r.command), Some(Command::UdpAssociate));
    }
}
