//! The one place ctcp reads the clock. Everything below the runtime takes `now` as an argument.

use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// The current monotonic time.
#[allow(clippy::disallowed_methods)] // the runtime is the clock's only reader
pub fn now() -> Instant {
    Instant::now()
}

/// Milliseconds since the Unix epoch, for handshake timestamps.
#[allow(clippy::disallowed_methods)] // as above
pub fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
