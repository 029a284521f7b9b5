//! The ctcp coded transport as a sans-IO state machine.
//!
//! Bytes and `Instant`s go in, bytes and events come out; randomness comes from a seeded RNG.
//! Nothing here reads the clock, touches a socket or knows tokio, so whole transfers can be
//! simulated deterministically on virtual time (see `ctcp-sim`).
#![deny(unsafe_code)]

pub mod cc;
pub mod config;
pub mod connection;
pub mod crypto;
pub mod endpoint;
pub mod estimate;
pub mod frame;
mod handshake_train;
pub mod pacer;
pub mod redundancy;
mod repair_debt;
pub mod rtt;
pub mod stream;
pub mod wire;

pub use config::TransportConfig;
pub use connection::{
    Connection, ConnectionError, ConnectionStats, Event, Side, StreamApiError, Transmit,
};
pub use crypto::Psk;
pub use endpoint::{ConnectionHandle, DropCounters, Endpoint, EndpointConfig};
pub use frame::{StreamId, Target};
pub use stream::ReadOutcome;
