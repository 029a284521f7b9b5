//! The emulator's single clock read. [`crate::Link`] never reads the clock:
//! the I/O loop reads it here and passes `now` in.

use std::time::Instant;

/// The current monotonic time (`CLOCK_MONOTONIC` on Linux, the clock the
/// release timer runs on).
#[must_use]
#[allow(clippy::disallowed_methods)] // the I/O layer's single clock read
pub fn now() -> Instant {
    Instant::now()
}
