//! Simulation seeds, replayable from the environment.

/// Name of the environment variable that overrides a test's seed.
pub const SEED_ENV: &str = "CTCP_SIM_SEED";

/// The seed of a simulation run. Everything random in a [`crate::Sim`] is
/// derived from it, so the same seed replays the same run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Seed(pub u64);

impl Seed {
    /// The seed from `CTCP_SIM_SEED` if set, else `default`. Prints
    /// `ctcp-sim seed = N (replay with CTCP_SIM_SEED=N)` to stderr, which the
    /// test harness shows when the test fails.
    ///
    /// # Panics
    /// If `CTCP_SIM_SEED` is set but is not a decimal or `0x` hex `u64`.
    #[must_use]
    pub fn from_env_or(default: u64) -> Self {
        let seed = match std::env::var(SEED_ENV) {
            Ok(text) => match parse(&text) {
                Some(v) => v,
                None => panic!("{SEED_ENV}={text:?} is not a u64"),
            },
            Err(_) => default,
        };
        eprintln!("ctcp-sim seed = {seed} (replay with {SEED_ENV}={seed})");
        Self(seed)
    }
}

impl From<u64> for Seed {
    fn from(v: u64) -> Self {
        Self(v)
    }
}

impl std::fmt::Display for Seed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

fn parse(text: &str) -> Option<u64> {
    let t = text.trim();
    match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => t.parse().ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::parse;

    #[test]
    fn parses_decimal_and_hex() {
        assert_eq!(parse("42"), Some(42));
        assert_eq!(parse(" 0x2a "), Some(42));
        assert_eq!(parse("x"), None);
    }
}
