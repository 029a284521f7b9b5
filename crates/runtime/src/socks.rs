//! SOCKS5 over a TCP stream, using the sans-IO codec of `ctcp-socks5`.

use crate::metrics::SocksOutcome;
use ctcp_proto::Target;
use ctcp_socks5::{Reply, ServerHandshake, TargetAddr};
use std::io;
use std::net::SocketAddr;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Who may use the SOCKS port.
pub type SocksAuth = ctcp_socks5::AuthPolicy;

/// A completed SOCKS CONNECT.
#[derive(Debug)]
pub struct SocksRequest {
    /// Where to connect.
    pub target: Target,
    /// Bytes the client sent after its request (pipelined application data).
    pub early_data: Vec<u8>,
    /// A UDP ASSOCIATE (issue 27) rather than a CONNECT: `target` is where the client
    /// will send its datagrams from (or zeros).
    pub udp_associate: bool,
}

/// Why a SOCKS handshake produced no request.
#[derive(Debug, thiserror::Error)]
pub enum AcceptError {
    /// The connection failed or the client closed it.
    #[error(transparent)]
    Io(#[from] io::Error),
    /// The client broke the protocol or failed authentication; the matching reply (if the
    /// protocol has one) was sent.
    #[error(transparent)]
    Protocol(#[from] ctcp_socks5::Error),
    /// More bytes than any valid handshake has.
    #[error("SOCKS handshake too long")]
    TooLong,
}

impl AcceptError {
    /// The outcome to count.
    pub fn outcome(&self) -> SocksOutcome {
        use ctcp_socks5::Error as E;
        match self {
            AcceptError::Io(_) => SocksOutcome::ClientClosed,
            AcceptError::Protocol(E::AuthFailed) => SocksOutcome::AuthFailed,
            AcceptError::Protocol(E::NoAcceptableMethod | E::BadVersion(_)) => {
                SocksOutcome::NoAcceptableMethod
            }
            AcceptError::Protocol(_) | AcceptError::TooLong => SocksOutcome::BadRequest,
        }
    }

    /// The reply sent to the client before closing, if the failure has one.
    pub fn reply(&self) -> Option<Reply> {
        match self {
            AcceptError::Protocol(e) => e.as_reply(),
            _ => None,
        }
    }
}

impl From<AcceptError> for io::Error {
    fn from(e: AcceptError) -> io::Error {
        match e {
            AcceptError::Io(e) => e,
            other => io::Error::new(io::ErrorKind::InvalidData, other.to_string()),
        }
    }
}

/// Longest handshake we buffer: greeting (257) + auth (513) + request (262), rounded up.
const MAX_HANDSHAKE: usize = 2048;

/// Runs the server side of the handshake. Protocol errors are answered with the right
/// code and returned as [`AcceptError::Protocol`].
///
/// # Errors
/// I/O errors, EOF before the request, or a protocol violation.
pub async fn accept(
    tcp: &mut TcpStream,
    auth: &SocksAuth,
    udp: bool,
) -> Result<SocksRequest, AcceptError> {
    let mut hs = ServerHandshake::new(auth.clone()).with_udp_associate(udp);
    let mut buf = Vec::with_capacity(512);
    let mut chunk = [0u8; 1024];
    loop {
        let n = tcp.read(&mut chunk).await?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "client closed during SOCKS handshake",
            )
            .into());
        }
        buf.extend_from_slice(&chunk[..n]);
        if buf.len() > MAX_HANDSHAKE {
            return Err(AcceptError::TooLong);
        }
        match hs.feed(&buf) {
            Ok(step) => {
                buf.drain(..step.consumed);
                if !step.write.is_empty() {
                    tcp.write_all(&step.write).await?;
                }
                if let Some(req) = step.request {
                    let target = match req.target {
                        TargetAddr::Ip(a) => Target::Ip(a),
                        TargetAddr::Domain(h, p) => Target::Domain(h, p),
                    };
                    return Ok(SocksRequest {
                        target,
                        early_data: buf,
                        udp_associate: req.command == ctcp_socks5::Command::UdpAssociate,
                    });
                }
            }
            Err(e) => {
                let bytes = ServerHandshake::failure_bytes(&e);
                if !bytes.is_empty() {
                    let _ = tcp.write_all(&bytes).await;
                }
                return Err(AcceptError::Protocol(e));
            }
        }
    }
}

/// Sends a reply to the client's CONNECT.
///
/// # Errors
/// I/O errors.
pub async fn reply(tcp: &mut TcpStream, reply: Reply) -> io::Result<()> {
    let bound = tcp
        .local_addr()
        .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)));
    tcp.write_all(&reply.encode(bound)).await
}
