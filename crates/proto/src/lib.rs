//! ctcp proto crate (work in progress).
