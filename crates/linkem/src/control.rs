//! Run-time control of a running emulator: take a link down and bring it back
//! (`down K`, `up K`, `status`), one command per datagram on a Unix datagram
//! socket (`ctcp-linkem --control PATH`), so a benchmark can script "the fast
//! path is cut, then restored 20 s later" while traffic runs.
//!
//! [`Command`] is the parsed text, [`ControlReply`] what the emulator answers;
//! [`send`] is the blocking client the `--ctl` flag and benchmark runners use.

use std::io;
use std::os::unix::net::UnixDatagram;
use std::path::Path;
use std::time::Duration;

use thiserror::Error;

/// Longest command or reply (they are a few words).
pub const MAX_MESSAGE: usize = 1024;

/// One control command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Command {
    /// Cut link `k` (both directions): what is on it is lost, and so is every
    /// packet until `up k` ([`crate::Link::set_down`]).
    Down(usize),
    /// Restore link `k`.
    Up(usize),
    /// Report every link's state, one `K up|down` line each.
    Status,
}

/// A command text that does not parse.
#[derive(Debug, Error, PartialEq, Eq)]
#[error("bad control command {text:?}: expected `down K`, `up K` or `status`")]
pub struct ParseError {
    /// The text received (cut to [`MAX_MESSAGE`] bytes).
    pub text: String,
}

impl std::str::FromStr for Command {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<Self, ParseError> {
        let fail = || ParseError {
            text: s.chars().take(MAX_MESSAGE).collect(),
        };
        let mut words = s.split_whitespace();
        let verb = words.next().ok_or_else(fail)?;
        let arg = words.next();
        if words.next().is_some() {
            return Err(fail());
        }
        let link =
            || -> Result<usize, ParseError> { arg.and_then(|a| a.parse().ok()).ok_or_else(fail) };
        match verb {
            "down" => Ok(Self::Down(link()?)),
            "up" => Ok(Self::Up(link()?)),
            "status" if arg.is_none() => Ok(Self::Status),
            _ => Err(fail()),
        }
    }
}

/// What the emulator answers to a command: `ok`, the status lines, or
/// `error: ...` (a reply never changes state when it is an error).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ControlReply(pub String);

impl ControlReply {
    /// Whether the command was carried out.
    #[must_use]
    pub fn is_ok(&self) -> bool {
        !self.0.starts_with("error")
    }
}

/// Applies `text` to the links' down flags (`downs[k]` is link `k`'s), returning
/// the reply. The pure part of the control socket, tested without one.
pub fn apply(text: &str, downs: &mut [bool]) -> ControlReply {
    let command = match text.trim().parse::<Command>() {
        Ok(c) => c,
        Err(e) => return ControlReply(format!("error: {e}")),
    };
    let n = downs.len();
    let mut set = |k: usize, down: bool| match downs.get_mut(k) {
        Some(d) => {
            *d = down;
            ControlReply("ok".into())
        }
        None => ControlReply(format!("error: no link {k} (links 0..{n})")),
    };
    match command {
        Command::Down(k) => set(k, true),
        Command::Up(k) => set(k, false),
        Command::Status => ControlReply(
            downs
                .iter()
                .enumerate()
                .map(|(k, d)| format!("{k} {}\n", if *d { "down" } else { "up" }))
                .collect(),
        ),
    }
}

/// Sends `command` to the emulator's control socket at `socket` and waits (up to
/// 5 s) for its reply. The reply comes back to a temporary socket next to
/// `socket`, removed before returning.
///
/// # Errors
/// The socket is missing or not answering, or the reply is an error (as
/// [`io::ErrorKind::InvalidInput`] with the emulator's message).
pub fn send(socket: &Path, command: &str) -> io::Result<String> {
    let own = socket.with_extension(format!("client-{}", std::process::id()));
    let _ = std::fs::remove_file(&own);
    let sock = UnixDatagram::bind(&own)?;
    let result = (|| -> io::Result<String> {
        sock.set_read_timeout(Some(Duration::from_secs(5)))?;
        sock.send_to(command.as_bytes(), socket)?;
        let mut buf = [0u8; MAX_MESSAGE];
        let n = sock.recv(&mut buf)?;
        Ok(String::from_utf8_lossy(&buf[..n]).into_owned())
    })();
    let _ = std::fs::remove_file(&own);
    let reply = result?;
    if ControlReply(reply.clone()).is_ok() {
        Ok(reply)
    } else {
        Err(io::Error::new(io::ErrorKind::InvalidInput, reply))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_commands_and_rejects_the_rest() {
        assert_eq!("down 1".parse(), Ok(Command::Down(1)));
        assert_eq!(" up  0 \n".parse(), Ok(Command::Up(0)));
        assert_eq!("status".parse(), Ok(Command::Status));
        for bad in [
            "", "down", "down x", "down -1", "up 1 2", "status 1", "reboot",
        ] {
            assert!(bad.parse::<Command>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn apply_sets_flags_and_reports_them() {
        let mut downs = vec![false, false];
        assert_eq!(apply("down 1", &mut downs), ControlReply("ok".into()));
        assert_eq!(downs, [false, true]);
        assert_eq!(apply("status", &mut downs).0, "0 up\n1 down\n");
        let r = apply("down 2", &mut downs);
        assert!(!r.is_ok() && r.0.contains("no link 2"), "{r:?}");
        assert!(!apply("\u{0}\u{ff}garbage", &mut downs).is_ok());
        assert_eq!(downs, [false, true], "errors change nothing");
        assert!(apply("up 1", &mut downs).is_ok());
        assert_eq!(downs, [false, false]);
    }
}
