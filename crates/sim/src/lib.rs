//! ctcp sim crate (work in progress).
