//! What operators are told at start-up (log) and by `--check-config` (stdout): the key's
//! fingerprint, to compare the two gateways without showing the key, and warnings about
//! risky but valid settings.

use crate::keys;
use ctcp_config::{ConfigError, ForwardConfig, ReverseConfig};
use std::path::Path;

/// The fingerprint and warnings for one configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notes {
    /// [`keys::fingerprint`] of the configured key.
    pub fingerprint: String,
    /// Risky settings, one sentence each.
    pub warnings: Vec<String>,
    /// A relay's next-segment key fingerprint (it must match the next gateway's).
    pub next_fingerprint: Option<String>,
}

/// What a relay's second fingerprint line says.
const NEXT_FINGERPRINT_LABEL: &str = "next-hop key fingerprint (it must match the next gateway's)";

/// What the fingerprint line says, so no one mistakes it for the key.
const FINGERPRINT_LABEL: &str =
    "key fingerprint (a hash of the key, not the key; it must match the other gateway's)";

impl Notes {
    /// Prints the notes for `--check-config`.
    pub fn print(&self) {
        println!("{FINGERPRINT_LABEL}: {}", self.fingerprint);
        if let Some(f) = &self.next_fingerprint {
            println!("{NEXT_FINGERPRINT_LABEL}: {f}");
        }
        for w in &self.warnings {
            println!("warning: {w}");
        }
    }

    /// Logs the notes at start-up (the fingerprint at info, the warnings at warn).
    pub fn log(&self) {
        tracing::info!(key_fingerprint = %self.fingerprint, "{FINGERPRINT_LABEL}");
        if let Some(f) = &self.next_fingerprint {
            tracing::info!(next_key_fingerprint = %f, "{NEXT_FINGERPRINT_LABEL}");
        }
        for w in &self.warnings {
            tracing::warn!("{w}");
        }
    }
}

fn key_notes(path: Option<&Path>) -> Result<Notes, ConfigError> {
    let key = ctcp_config::load_psk(path)?;
    Ok(Notes {
        fingerprint: keys::fingerprint(&key),
        warnings: path
            .and_then(ctcp_config::key_file_warning)
            .into_iter()
            .collect(),
        next_fingerprint: None,
    })
}

/// The warning for a SOCKS listener reachable beyond loopback with no SOCKS users: an
/// open proxy into the tunnel and whatever the reverse side can reach.
pub fn open_proxy_warning(cfg: &ForwardConfig) -> Option<String> {
    (!cfg.listen.ip().is_loopback() && cfg.socks_users.is_empty()).then(|| {
        format!(
            "OPEN PROXY: the SOCKS listener {} accepts connections from beyond this host \
             without authentication; anyone who reaches it can use the tunnel. Add \
             [[socks_users]] (or --socks-user) or listen on 127.0.0.1",
            cfg.listen
        )
    })
}

/// The forward's notes.
///
/// # Errors
/// If the key cannot be loaded.
pub fn forward_notes(cfg: &ForwardConfig) -> Result<Notes, ConfigError> {
    let mut n = key_notes(cfg.psk_file.as_deref())?;
    n.warnings.extend(open_proxy_warning(cfg));
    Ok(n)
}

/// The reverse's notes.
///
/// # Errors
/// If the key cannot be loaded.
pub fn reverse_notes(cfg: &ReverseConfig) -> Result<Notes, ConfigError> {
    let mut n = key_notes(cfg.psk_file.as_deref())?;
    if cfg.relay.next_hop.is_some() {
        if let Some(p) = &cfg.relay.next_psk_file {
            let next = key_notes(Some(p))?;
            n.next_fingerprint = Some(next.fingerprint);
            n.warnings.extend(next.warnings);
        } else {
            n.next_fingerprint = Some(n.fingerprint.clone());
        }
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn open_proxy_only_beyond_loopback_without_users() {
        let mut c = ForwardConfig::default();
        assert_eq!(open_proxy_warning(&c), None);
        for listen in ["0.0.0.0:1080", "[::]:1080", "192.0.2.1:1080"] {
            c.listen = listen.parse().unwrap();
            c.socks_users.clear();
            assert!(
                open_proxy_warning(&c).unwrap().contains("OPEN PROXY"),
                "{listen}"
            );
            c.socks_users.push(("u".into(), "p".into()));
            assert_eq!(open_proxy_warning(&c), None, "{listen} with users");
        }
        c.socks_users.clear();
        c.listen = "[::1]:1080".parse().unwrap();
        assert_eq!(open_proxy_warning(&c), None);
    }
}
