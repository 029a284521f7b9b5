//! ctcp config crate (work in progress).
