//! ctcp runtime crate (work in progress).
