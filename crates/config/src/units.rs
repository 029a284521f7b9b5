//! Human-readable sizes ("64KiB", "16MB") and rates ("10mbit", "1.5Gbit").

/// Parses a byte size: a number with an optional unit B, KB, MB, GB (powers of 1000) or
/// KiB, MiB, GiB (powers of 1024), case-insensitive.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let (num, unit) = split(s);
    let mult: f64 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "kb" | "k" => 1e3,
        "mb" | "m" => 1e6,
        "gb" | "g" => 1e9,
        "kib" => 1024.0,
        "mib" => 1024.0 * 1024.0,
        "gib" => 1024.0 * 1024.0 * 1024.0,
        u => {
            return Err(format!(
                "unknown size unit {u:?} (use B, KB, MB, GB, KiB, MiB, GiB)"
            ))
        }
    };
    scaled(num, mult, s)
}

/// Parses a rate in bit/s: a number with an optional unit bit, kbit, mbit, gbit (also
/// bps, kbps, mbps, gbps), case-insensitive.
pub fn parse_rate(s: &str) -> Result<u64, String> {
    let (num, unit) = split(s);
    let mult: f64 = match unit.to_ascii_lowercase().as_str() {
        "" | "bit" | "bps" => 1.0,
        "kbit" | "kbps" | "k" => 1e3,
        "mbit" | "mbps" | "m" => 1e6,
        "gbit" | "gbps" | "g" => 1e9,
        u => {
            return Err(format!(
                "unknown rate unit {u:?} (use bit, kbit, mbit, gbit)"
            ))
        }
    };
    scaled(num, mult, s)
}

fn split(s: &str) -> (&str, &str) {
    let s = s.trim();
    let at = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    (&s[..at], s[at..].trim())
}

fn scaled(num: &str, mult: f64, orig: &str) -> Result<u64, String> {
    let v: f64 = num
        .parse()
        .map_err(|_| format!("{orig:?} is not a number with a unit"))?;
    let r = v * mult;
    if !r.is_finite() || r < 0.0 || r > u64::MAX as f64 {
        return Err(format!("{orig:?} is out of range"));
    }
    Ok(r.round() as u64)
}

/// The duration units [`parse_duration`] accepts, as shown in its errors.
pub const DURATION_UNITS: &str =
    "ns, us, ms, s (sec), m (min), h (hour), d (day), e.g. \"500ms\", \"30s\", \"1m 30s\"";

/// Parses a duration such as "500ms", "30s" or "1m 30s" (humantime syntax). Every error
/// lists the accepted units, so a typo is fixable without the manual.
pub fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    humantime::parse_duration(s.trim()).map_err(|e| {
        format!("{s:?} is not a duration ({e}); use a number and a unit: {DURATION_UNITS}")
    })
}

/// The level names a log filter accepts.
const LEVELS: [&str; 6] = ["off", "error", "warn", "info", "debug", "trace"];

/// Checks a log level or `tracing` filter: comma-separated directives, each a level
/// (`info`) or `TARGET=LEVEL` (`ctcp_runtime=debug`). A bare word that is not a level is
/// refused: `tracing` would read it as a target name and log nothing else at all, which
/// is what a misspelt level (`verbose`) silently did.
pub fn parse_log_level(s: &str) -> Result<String, String> {
    let help = "use error, warn, info, debug, trace or off, or a filter such as \"info,ctcp_runtime=debug\"";
    let is_level = |l: &str| LEVELS.iter().any(|k| k.eq_ignore_ascii_case(l.trim()));
    if s.trim().is_empty() {
        return Err(format!("empty log level; {help}"));
    }
    for d in s.split(',').map(str::trim).filter(|d| !d.is_empty()) {
        match d.rsplit_once('=') {
            Some((target, level)) if !target.trim().is_empty() && is_level(level) => {}
            Some(_) => return Err(format!("{d:?} is not TARGET=LEVEL; {help}")),
            None if is_level(d) => {}
            None => return Err(format!("{d:?} is not a log level; {help}")),
        }
    }
    Ok(s.trim().to_owned())
}

/// Checks a peer address, `HOST:PORT` with a non-zero port and an IPv6 literal in
/// brackets (`[2001:db8::1]:7000`), or a comma-separated list of them: the gateways a
/// forward tries in turn, moving to the next when one stops answering. The names are
/// resolved when connecting.
pub fn parse_peer(s: &str) -> Result<String, String> {
    let parts: Vec<&str> = s.split(',').map(str::trim).collect();
    if parts.len() > 1 {
        if parts.iter().any(|p| p.is_empty()) {
            return Err(format!(
                "{s:?}: an empty entry in the list; list gateways as \"HOST:PORT,HOST:PORT\""
            ));
        }
        let checked: Result<Vec<String>, String> =
            parts.iter().map(|p| parse_one_peer(p)).collect();
        return Ok(checked?.join(","));
    }
    parse_one_peer(s)
}

fn parse_one_peer(s: &str) -> Result<String, String> {
    let s = s.trim();
    let example = "e.g. \"reverse.example.net:7000\", \"192.0.2.1:7000\" or \"[2001:db8::1]:7000\"";
    let Some((host, port)) = s.rsplit_once(':') else {
        return Err(format!(
            "{s:?} has no port: the peer must be HOST:PORT, {example}"
        ));
    };
    let unbracketed_v6 = host.contains(':') && !(host.starts_with('[') && host.ends_with(']'));
    if unbracketed_v6 {
        return Err(format!(
            "{s:?}: an IPv6 address needs brackets and a port, {example}"
        ));
    }
    if host.is_empty() || host == "[]" {
        return Err(format!(
            "{s:?} has no host: the peer must be HOST:PORT, {example}"
        ));
    }
    match port.parse::<u16>() {
        Ok(p) if p != 0 => Ok(s.to_owned()),
        _ => Err(format!(
            "{s:?}: {port:?} is not a port (1-65535); {example}"
        )),
    }
}

/// Serde adapter for optional durations that reports errors with [`parse_duration`]'s
/// message (the accepted units included).
pub(crate) mod opt_duration {
    use serde::{Deserialize, Deserializer};
    use std::time::Duration;

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Duration>, D::Error> {
        /// A string is parsed; a bare number is refused with the units to add.
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Text(String),
            Number(f64),
        }
        match Option::<Raw>::deserialize(d)? {
            None => Ok(None),
            Some(Raw::Text(s)) => super::parse_duration(&s)
                .map(Some)
                .map_err(serde::de::Error::custom),
            Some(Raw::Number(n)) => Err(serde::de::Error::custom(format!(
                "{n} has no unit: write a string with a unit, {}",
                super::DURATION_UNITS
            ))),
        }
    }
}
