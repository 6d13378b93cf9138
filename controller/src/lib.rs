//! The inplace CloneSet controller.
//!
//! - [`plan`]: pure decisions from a snapshot to the next step.

pub mod plan;
