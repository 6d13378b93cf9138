//! The planner: pure functions from a [`Snapshot`] of one CloneSet to the next
//! reconcile step as data ([`Plan`]). No client, no runtime, no clock of its own.
//!
//! Every rule of the CloneSet documentation lives in one of these modules and is tested
//! there, without a cluster.

pub mod model;

pub use model::*;
