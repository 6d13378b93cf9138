//! The fault-injection suite's parts (`inplace-faults` runs them on the bed).
//!
//! Pure parts (unit tested): [`rng`] (a seeded generator), [`injection`] (which fault a
//! request gets), [`invariants`] (the checks over pod and PVC states of the watches), [`inplace`]
//! (the in-place checks of the daemon scenario), [`records`]
//! (the checks over the proxy's record of requests), [`runtime_view`] (the node suite's
//! checks over containerd's own list of containers), [`figures`] (the
//! totals of many runs). I/O: [`proxy`] (the HTTP proxy between the controller and the
//! API server that injects the faults and records every request), [`cri_proxy`] (the
//! byte proxy on the CRI socket between the daemon and containerd), [`bed_containerd`]
//! (the bed's containerd stopped and started), [`pull_proxy`] (a registry proxy that cuts
//! pulls halfway).

pub mod bed_containerd;
pub mod cri_proxy;
pub mod ending;
pub mod figures;
pub mod injection;
pub mod inplace;
pub mod invariants;
pub mod proxy;
pub mod pull_proxy;
pub mod records;
pub mod rng;
pub mod runtime_view;
