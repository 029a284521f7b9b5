//! Path estimators fed by the connection: per-transmission loss and burstiness
//! ([`loss`]) and reordering ([`reorder`]). Pure state machines, no clock.

pub(crate) mod loss;
pub(crate) mod reorder;
