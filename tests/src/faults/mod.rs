//! The fault-injection suite's parts (`inplace-faults` runs them on the bed).
//!
//! Pure parts (unit tested): [`rng`] (a seeded generator), [`plan`] (which fault a
//! request gets), [`invariants`] (the checks over pod and PVC states), [`figures`] (the
//! totals of many runs). I/O: [`proxy`] (the HTTP proxy between the controller and the
//! API server that injects the faults and records every request).

pub mod figures;
pub mod invariants;
pub mod plan;
pub mod proxy;
pub mod rng;
