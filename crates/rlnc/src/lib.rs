//! ctcp rlnc crate (work in progress).
