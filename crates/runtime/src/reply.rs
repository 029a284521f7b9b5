//! Connect results and the SOCKS replies they become. The reverse side reports how its
//! connect to a target went as a [`OpenResult`] (the OPEN_RESULT frame); the forward side
//! answers its SOCKS client with [`socks_reply`] of it. This is the one place that maps
//! the one onto the other.

use ctcp_proto::OpenResult;
use ctcp_socks5::Reply;
use std::io;

/// The SOCKS5 reply (RFC 1928 §6) for a connect result.
pub fn socks_reply(result: OpenResult) -> Reply {
    match result {
        OpenResult::Succeeded => Reply::Succeeded,
        OpenResult::GeneralFailure => Reply::GeneralFailure,
        OpenResult::NotAllowed => Reply::NotAllowed,
        OpenResult::NetworkUnreachable => Reply::NetworkUnreachable,
        OpenResult::HostUnreachable => Reply::HostUnreachable,
        OpenResult::ConnectionRefused => Reply::ConnectionRefused,
        OpenResult::TimedOut => Reply::TtlExpired,
    }
}

/// The connect result for a failed `connect()`.
pub fn from_io_error(e: &io::Error) -> OpenResult {
    match e.kind() {
        io::ErrorKind::ConnectionRefused => OpenResult::ConnectionRefused,
        io::ErrorKind::TimedOut => OpenResult::TimedOut,
        io::ErrorKind::NetworkUnreachable => OpenResult::NetworkUnreachable,
        io::ErrorKind::HostUnreachable => OpenResult::HostUnreachable,
        io::ErrorKind::PermissionDenied => OpenResult::NotAllowed,
        _ => OpenResult::GeneralFailure,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_result_maps_to_the_socks_reply_of_the_same_code() {
        // The codes were the SOCKS reply codes before the enum existed: peers of older
        // versions and clients of the forward both read them as such.
        for r in OpenResult::ALL {
            assert_eq!(socks_reply(r).code(), r.code(), "{r}");
            assert_eq!(socks_reply(OpenResult::from_code(r.code())), socks_reply(r));
        }
        assert_eq!(socks_reply(OpenResult::TimedOut), Reply::TtlExpired);
        assert_eq!(socks_reply(OpenResult::NotAllowed), Reply::NotAllowed);
    }

    #[test]
    fn connect_errors_map_to_their_results() {
        let e = |k| io::Error::from(k);
        assert_eq!(
            from_io_error(&e(io::ErrorKind::ConnectionRefused)),
            OpenResult::ConnectionRefused
        );
        assert_eq!(
            from_io_error(&e(io::ErrorKind::TimedOut)),
            OpenResult::TimedOut
        );
        assert_eq!(
            from_io_error(&e(io::ErrorKind::Other)),
            OpenResult::GeneralFailure
        );
    }
}
