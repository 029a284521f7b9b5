//! Path estimators fed by the connection: per-transmission loss and burstiness
//! ([`loss`]) and reordering ([`reorder`]). Pure state machines, no clock.

pub mod loss;
pub mod reorder;

pub use loss::{GilbertParams, LossEstimator};
pub use reorder::ReorderEstimator;
