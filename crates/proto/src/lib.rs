//! The ctcp coded transport as a sans-IO state machine.
//!
//! Bytes and `Instant`s go in, bytes and events come out; randomness comes from a seeded RNG.
//! Nothing here reads the clock, touches a socket or knows tokio, so whole transfers can be
//! simulated deterministically on virtual time (see `ctcp-sim`).
//!
//! The public surface is what the runtime, the simulator, the benches and the tests use:
//! the [`Endpoint`] and its [`Connection`]s, their configuration, and the wire format
//! ([`wire`]). Congestion control, the estimators, the pacer and the redundancy policy are
//! parts of a connection, private to this crate; the frame parser is public only with the
//! `fuzzing` feature.
//!
//! Nothing outside the crate can name those parts (each of these fails to compile):
//!
//! ```compile_fail
//! use ctcp_proto::cc::ControllerKind;
//! ```
//!
//! ```compile_fail
//! use ctcp_proto::estimate::loss::LossEstimator;
//! ```
//!
//! ```compile_fail
//! use ctcp_proto::pacer::Pacer;
//! ```
//!
//! ```compile_fail
//! use ctcp_proto::repair::RepairScheduler;
//! ```
//!
//! ```compile_fail
//! use ctcp_proto::rtt::RttEstimator;
//! ```
//!
//! What the controller choice needs is re-exported: [`ControllerKind`].
#![deny(unsafe_code)]

mod byte_ring;
mod cc;
pub mod config;
pub mod connection;
pub mod crypto;
mod datagram;
pub mod endpoint;
mod estimate;
// Its parser is public only for fuzzing; without the feature its `pub` items are the
// crate's own.
#[cfg_attr(not(feature = "fuzzing"), allow(unreachable_pub))]
mod frame;
mod handshake_train;
mod pacer;
mod repair;
mod rtt;
mod sent;
pub mod stream;
mod streams;
#[cfg(test)]
mod test_clock;
pub mod wire;

pub use cc::ControllerKind;
pub use config::{
    PathPolicy, RepairPriority, TransportConfig, AUTOTUNE_INITIAL_CREDIT, AUTOTUNE_SESSION_FLOOR,
    AUTOTUNE_STREAM_FLOOR,
};
pub use connection::{
    BatchTransmit, Connection, ConnectionError, ConnectionStats, Event, PathError, PathInfo, Side,
    StreamApiError, Transmit,
};
pub use crypto::Psk;
pub use datagram::{DatagramError, DatagramStats};
pub use endpoint::{shard_of, ConnectionHandle, DropCounters, Endpoint, EndpointConfig, Shard};
pub use frame::{OpenResult, StreamId, Target};
pub use stream::ReadOutcome;

/// Parsers the fuzz targets drive directly (`fuzz/`, which enables the feature): nothing
/// outside this crate parses frames otherwise.
#[cfg(feature = "fuzzing")]
pub mod fuzzing {
    pub use crate::frame::{Frame, Frames};
}
