//! Time for the crate's unit tests: one base instant and millisecond durations.

use std::time::{Duration, Instant};

/// An arbitrary base instant; tests move time forward from it themselves.
#[allow(clippy::disallowed_methods)] // tests only: the state machines never read the clock
pub(crate) fn base() -> Instant {
    Instant::now()
}

/// `v` milliseconds.
pub(crate) fn ms(v: u64) -> Duration {
    Duration::from_millis(v)
}
