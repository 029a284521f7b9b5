//! The ctcp coded transport as a sans-IO state machine.
//!
//! Bytes and `Instant`s go in, bytes and events come out; randomness comes from a seeded RNG.
//! Nothing here reads the clock, touches a socket or knows tokio, so whole transfers can be
//! simulated deterministically on virtual time (see `ctcp-sim`).
#![deny(unsafe_code)]

pub mod cc;
pub mod estimate;
pub mod pacer;
pub mod redundancy;
pub mod rtt;
