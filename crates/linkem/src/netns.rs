//! Network namespaces and interface configuration through the `ip` command
//! (iproute2), and [`Namespace`], a guard that deletes the namespace it
//! created when dropped.

use std::net::Ipv4Addr;
use std::process::Command;

use thiserror::Error;

/// The `ip` binary; `/usr/sbin` is searched first so it is found even when
/// `PATH` (for example under `sudo` or a test harness) lacks it.
fn ip_program() -> &'static str {
    const FULL: &str = "/usr/sbin/ip";
    if std::path::Path::new(FULL).exists() {
        FULL
    } else {
        "ip"
    }
}

/// A failed namespace or interface operation.
#[derive(Debug, Error)]
pub enum NetnsError {
    /// `ip` could not be started at all.
    #[error("cannot run `ip {args}`: {source} (is iproute2 installed?)")]
    Spawn {
        /// The arguments given.
        args: String,
        /// Why it could not start.
        source: std::io::Error,
    },
    /// `ip` ran and reported an error.
    #[error("`ip {args}` failed ({status}): {stderr}")]
    Failed {
        /// The arguments given.
        args: String,
        /// Its exit status.
        status: std::process::ExitStatus,
        /// What it printed on stderr.
        stderr: String,
    },
    /// The namespace already exists and was not created by this process.
    #[error("network namespace {0:?} already exists (left over from a crash? run `ctcp-linkem --cleanup` with the same --ns-a/--ns-b)")]
    Exists(String),
    /// A namespace name `ip` would refuse or misread.
    #[error("invalid namespace or device name {0:?}")]
    InvalidName(String),
}

/// Runs `ip ARGS`, returning its stdout.
///
/// # Errors
/// [`NetnsError::Spawn`] or [`NetnsError::Failed`].
pub fn ip(args: &[&str]) -> Result<String, NetnsError> {
    let joined = args.join(" ");
    tracing::debug!(command = %format!("ip {joined}"), "running");
    let out = Command::new(ip_program())
        .args(args)
        .output()
        .map_err(|source| NetnsError::Spawn {
            args: joined.clone(),
            source,
        })?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(NetnsError::Failed {
            args: joined,
            status: out.status,
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        })
    }
}

/// Rejects names that are empty, start with `-`, or contain anything but
/// ASCII letters, digits, `-`, `_` and `.` (as `ip netns` and `ip link`
/// expect).
///
/// # Errors
/// [`NetnsError::InvalidName`].
pub fn check_name(name: &str) -> Result<(), NetnsError> {
    let ok = !name.is_empty()
        && !name.starts_with('-')
        && name != "."
        && name != ".."
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if ok {
        Ok(())
    } else {
        Err(NetnsError::InvalidName(name.to_owned()))
    }
}

/// The names of the existing named network namespaces (`ip netns list`).
///
/// # Errors
/// If `ip netns list` fails.
pub fn list() -> Result<Vec<String>, NetnsError> {
    Ok(parse_list(&ip(&["netns", "list"])?))
}

/// Parses `ip netns list` output: one namespace per line, optionally
/// followed by ` (id: N)`.
fn parse_list(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|line| line.split_whitespace().next())
        .map(str::to_owned)
        .collect()
}

/// Whether a named namespace exists.
///
/// # Errors
/// If `ip netns list` fails.
pub fn exists(name: &str) -> Result<bool, NetnsError> {
    Ok(list()?.iter().any(|n| n == name))
}

/// Deletes the namespace `name` if it exists (cleanup after a crash).
/// Returns whether there was one to delete.
///
/// # Errors
/// If listing or deleting fails.
pub fn remove_if_exists(name: &str) -> Result<bool, NetnsError> {
    check_name(name)?;
    if !exists(name)? {
        return Ok(false);
    }
    ip(&["netns", "del", name])?;
    Ok(true)
}

/// Turns IPv4 forwarding on inside namespace `name` (a chain's namespaces
/// route between their links).
///
/// # Errors
/// [`NetnsError::Spawn`] or [`NetnsError::Failed`].
pub fn enable_forwarding(name: &str) -> Result<(), NetnsError> {
    check_name(name)?;
    ip(&[
        "netns",
        "exec",
        name,
        "sh",
        "-c",
        "echo 1 > /proc/sys/net/ipv4/ip_forward",
    ])
    .map(drop)
}

/// A network namespace this process created; dropping it deletes it (and
/// with it every interface inside).
#[derive(Debug)]
pub struct Namespace {
    name: String,
    /// False once deleted (or with [`Namespace::keep`]), so drop does nothing.
    owned: bool,
}

impl Namespace {
    /// Creates the namespace `name` and brings its loopback up.
    ///
    /// # Errors
    /// [`NetnsError::Exists`] if it already exists (it is then left alone),
    /// or the `ip` failure.
    pub fn create(name: &str) -> Result<Self, NetnsError> {
        check_name(name)?;
        if exists(name)? {
            return Err(NetnsError::Exists(name.to_owned()));
        }
        ip(&["netns", "add", name])?;
        let ns = Self {
            name: name.to_owned(),
            owned: true,
        };
        ns.ip(&["link", "set", "lo", "up"])?;
        Ok(ns)
    }

    /// The namespace's name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Runs `ip -n NAME ARGS`.
    ///
    /// # Errors
    /// The `ip` failure.
    pub fn ip(&self, args: &[&str]) -> Result<String, NetnsError> {
        let mut full = vec!["-n", self.name.as_str()];
        full.extend_from_slice(args);
        ip(&full)
    }

    /// Moves the interface `dev` from the current namespace into this one
    /// and renames it `new_name`. An open TUN descriptor stays valid.
    ///
    /// # Errors
    /// The `ip` failure.
    pub fn adopt(&self, dev: &str, new_name: &str) -> Result<(), NetnsError> {
        check_name(new_name)?;
        ip(&["link", "set", "dev", dev, "netns", &self.name])?;
        if dev != new_name {
            self.ip(&["link", "set", "dev", dev, "name", new_name])?;
        }
        Ok(())
    }

    /// Configures `dev` (inside this namespace) as one end of a
    /// point-to-point link: `local` here, `peer` at the far end, the given
    /// MTU, up. Multicast is off and no IPv6 link-local address is made, so
    /// the kernel sends no IGMP/MLD reports or router solicitations of its
    /// own: the counters see only the traffic under test.
    ///
    /// # Errors
    /// The `ip` failure.
    pub fn configure_point_to_point(
        &self,
        dev: &str,
        local: Ipv4Addr,
        peer: Ipv4Addr,
        mtu: u16,
    ) -> Result<(), NetnsError> {
        let (local, peer, mtu) = (local.to_string(), peer.to_string(), mtu.to_string());
        let link = ["link", "set", "dev", dev];
        self.ip(&[&link[..], &["addrgenmode", "none", "multicast", "off"]].concat())?;
        self.ip(&["link", "set", "dev", dev, "mtu", &mtu])?;
        self.ip(&["addr", "add", &local, "peer", &peer, "dev", dev])?;
        self.ip(&["link", "set", "dev", dev, "up"])?;
        Ok(())
    }

    /// Leaves the namespace in place when this guard is dropped (`--keep`).
    pub fn keep(&mut self) {
        self.owned = false;
    }

    /// Deletes the namespace now.
    ///
    /// # Errors
    /// The `ip netns del` failure (the guard then does not retry).
    pub fn delete(mut self) -> Result<(), NetnsError> {
        self.owned = false;
        ip(&["netns", "del", &self.name]).map(drop)
    }
}

impl Drop for Namespace {
    fn drop(&mut self) {
        if self.owned {
            match ip(&["netns", "del", &self.name]) {
                Ok(_) => tracing::debug!(ns = %self.name, "namespace deleted"),
                Err(e) => tracing::warn!(ns = %self.name, error = %e, "cannot delete namespace"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_netns_list() {
        let text = "ctcp-b (id: 1)\nctcp-a (id: 0)\nplain\n\n";
        assert_eq!(parse_list(text), ["ctcp-b", "ctcp-a", "plain"]);
    }

    #[test]
    fn checks_names() {
        assert!(check_name("ctcp-a").is_ok());
        assert!(check_name("lk_1.2").is_ok());
        assert!(check_name("").is_err());
        assert!(check_name("-n").is_err());
        assert!(check_name("a b").is_err());
        assert!(check_name("../etc").is_err());
    }
}
