//! The fault-injection suite's parts (`inplace-faults` runs them on the bed).
//!
//! Pure parts (unit tested): [`rng`] (a seeded generator), [`injection`] (which fault a
//! request gets), [`invariants`] (the checks over pod and PVC states of the watches), [`inplace`]
//! (the in-place checks of the daemon scenario), [`records`]
//! (the checks over the proxy's record of requests), [`figures`] (the
//! totals of many runs). I/O: [`proxy`] (the HTTP proxy between the controller and the
//! API server that injects the faults and records every request).

pub mod figures;
pub mod injection;
pub mod inplace;
pub mod invariants;
pub mod proxy;
pub mod records;
pub mod rng;
