//! proxy-forward binary.

fn main() {}
