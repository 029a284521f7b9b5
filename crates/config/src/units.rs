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
