//! ctcp socks5 crate (work in progress).
