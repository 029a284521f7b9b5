//! Parsers for the human spellings of rates, sizes, durations and
//! probabilities used on the command line (`10mbit`, `125k`, `250ms`, `5%`).

use std::time::Duration;

use crate::config::ConfigError;

fn parse_error(what: &'static str, text: &str, reason: impl Into<String>) -> ConfigError {
    ConfigError::Parse {
        what,
        text: text.to_owned(),
        reason: reason.into(),
    }
}

/// Splits `text` into a non-negative decimal number and a lowercase suffix.
fn number_and_suffix(what: &'static str, text: &str) -> Result<(f64, String), ConfigError> {
    let t = text.trim();
    let end = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, suffix) = t.split_at(end);
    let value: f64 = num
        .parse()
        .map_err(|_| parse_error(what, text, "expected a number"))?;
    Ok((value, suffix.trim().to_ascii_lowercase()))
}

fn to_u64(what: &'static str, text: &str, value: f64) -> Result<u64, ConfigError> {
    let rounded = value.round();
    if !(0.0..1.8e19).contains(&rounded) {
        return Err(parse_error(what, text, "out of range"));
    }
    // In range and integral: the cast is exact up to f64 precision.
    Ok(rounded as u64)
}

/// A rate in bits per second, tc-style: `10mbit`, `500kbit`, `1gbit`,
/// `1200bit`, or a bare number of bits per second. `k`, `m`, `g` alone are
/// accepted as `kbit`, `mbit`, `gbit`. Multipliers are decimal (1 kbit =
/// 1000 bit/s). Byte units (`bps`, `mbps`) are refused because tc reads them
/// as bytes and everyone else as bits.
///
/// # Errors
/// [`ConfigError::Parse`] for anything else.
pub fn parse_rate(text: &str) -> Result<u64, ConfigError> {
    const WHAT: &str = "a rate";
    let (value, suffix) = number_and_suffix(WHAT, text)?;
    let mult = match suffix.as_str() {
        "" | "bit" | "bits" => 1.0,
        "k" | "kbit" | "kbits" => 1e3,
        "m" | "mbit" | "mbits" => 1e6,
        "g" | "gbit" | "gbits" => 1e9,
        "bps" | "kbps" | "mbps" | "gbps" => {
            return Err(parse_error(
                WHAT,
                text,
                "ambiguous unit (bits or bytes?): write kbit, mbit or gbit",
            ))
        }
        _ => {
            return Err(parse_error(
                WHAT,
                text,
                "unknown unit: use bit, kbit, mbit or gbit",
            ))
        }
    };
    to_u64(WHAT, text, value * mult)
}

/// A size in bytes: a bare number, or with `b`, `k`/`kb` (1000), `m`/`mb`
/// (10⁶), `kib` (1024), `mib` (2²⁰).
///
/// # Errors
/// [`ConfigError::Parse`] for anything else.
pub fn parse_bytes(text: &str) -> Result<u64, ConfigError> {
    const WHAT: &str = "a size in bytes";
    let (value, suffix) = number_and_suffix(WHAT, text)?;
    let mult = match suffix.as_str() {
        "" | "b" => 1.0,
        "k" | "kb" => 1e3,
        "m" | "mb" => 1e6,
        "kib" => 1024.0,
        "mib" => 1_048_576.0,
        _ => {
            return Err(parse_error(
                WHAT,
                text,
                "unknown unit: use b, kb, mb, kib or mib",
            ))
        }
    };
    to_u64(WHAT, text, value * mult)
}

/// A duration in humantime syntax (`250ms`, `1s`, `1m 30s`); a bare `0`
/// means zero.
///
/// # Errors
/// [`ConfigError::Parse`] if humantime rejects it.
pub fn parse_duration(text: &str) -> Result<Duration, ConfigError> {
    let t = text.trim();
    if t == "0" {
        return Ok(Duration::ZERO);
    }
    humantime_serde::re::humantime::parse_duration(t)
        .map_err(|e| parse_error("a duration", text, e.to_string()))
}

/// A probability: a number in `[0, 1]` (`0.05`) or a percentage (`5%`).
///
/// # Errors
/// [`ConfigError::Parse`] if it is not a number, or
/// [`ConfigError::Probability`] if it is outside `[0, 1]`.
pub fn parse_probability(text: &str) -> Result<f64, ConfigError> {
    const WHAT: &str = "a probability";
    let t = text.trim();
    let (num, scale) = match t.strip_suffix('%') {
        Some(n) => (n.trim(), 0.01),
        None => (t, 1.0),
    };
    let value: f64 = num
        .parse()
        .map_err(|_| parse_error(WHAT, text, "expected a number like 0.05 or 5%"))?;
    let p = value * scale;
    if (0.0..=1.0).contains(&p) {
        Ok(p)
    } else {
        Err(ConfigError::Probability {
            what: "probability",
            value: p,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates() {
        assert_eq!(parse_rate("10mbit").unwrap(), 10_000_000);
        assert_eq!(parse_rate("10Mbit").unwrap(), 10_000_000);
        assert_eq!(parse_rate("2.5mbit").unwrap(), 2_500_000);
        assert_eq!(parse_rate("500kbit").unwrap(), 500_000);
        assert_eq!(parse_rate("1gbit").unwrap(), 1_000_000_000);
        assert_eq!(parse_rate("100m").unwrap(), 100_000_000);
        assert_eq!(parse_rate("64000").unwrap(), 64_000);
        assert!(parse_rate("10mbps").is_err());
        assert!(parse_rate("fast").is_err());
        assert!(parse_rate("-1mbit").is_err());
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_bytes("125000").unwrap(), 125_000);
        assert_eq!(parse_bytes("125k").unwrap(), 125_000);
        assert_eq!(parse_bytes("1mb").unwrap(), 1_000_000);
        assert_eq!(parse_bytes("64KiB").unwrap(), 65_536);
        assert!(parse_bytes("12 parsecs").is_err());
    }

    #[test]
    fn durations_and_probabilities() {
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("0").unwrap(), Duration::ZERO);
        assert_eq!(
            parse_duration("1s 500ms").unwrap(),
            Duration::from_millis(1500)
        );
        assert!(parse_duration("soon").is_err());
        assert!((parse_probability("0.05").unwrap() - 0.05).abs() < 1e-15);
        assert!((parse_probability("5%").unwrap() - 0.05).abs() < 1e-15);
        assert!(parse_probability("1.5").is_err());
        assert!(parse_probability("x").is_err());
    }
}
