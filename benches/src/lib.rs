//! Benchmark support for ctcp.
