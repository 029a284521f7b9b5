//! proxy-reverse binary.

fn main() {}
