//! Connect-result codes carried in OPEN_RESULT frames. They are the SOCKS5 reply codes
//! (RFC 1928 §6), so the forward side passes them to its client unchanged.

use std::io;

/// Connected.
pub const SUCCEEDED: u8 = 0x00;
/// Anything else.
pub const GENERAL_FAILURE: u8 = 0x01;
/// Denied by the reverse proxy's ACL.
pub const NOT_ALLOWED: u8 = 0x02;
/// No route to the network.
pub const NETWORK_UNREACHABLE: u8 = 0x03;
/// Host unreachable, or its name did not resolve.
pub const HOST_UNREACHABLE: u8 = 0x04;
/// The target refused the connection.
pub const CONNECTION_REFUSED: u8 = 0x05;
/// The connect attempt timed out.
pub const TTL_EXPIRED: u8 = 0x06;

/// Maps a connect error to its reply code.
pub fn from_io_error(e: &io::Error) -> u8 {
    match e.kind() {
        io::ErrorKind::ConnectionRefused => CONNECTION_REFUSED,
        io::ErrorKind::TimedOut => TTL_EXPIRED,
        io::ErrorKind::NetworkUnreachable => NETWORK_UNREACHABLE,
        io::ErrorKind::HostUnreachable => HOST_UNREACHABLE,
        io::ErrorKind::PermissionDenied => NOT_ALLOWED,
        _ => GENERAL_FAILURE,
    }
}
