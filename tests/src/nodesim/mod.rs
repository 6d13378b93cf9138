//! `inplace-nodesim`: simulated Kubernetes nodes for the test bed.
//!
//! Pure parts (no API server needed, unit tested): [`duration`], [`fault`], [`model`]
//! (the per-pod state machine), [`daemon`] (the node daemon's in-place completion, which
//! the simulated nodes run unless `--no-daemon`), [`images`] (node image stores with a pull delay,
//! NodeImage status), [`render`] (pod status patches), [`podview`] (reading
//! pods), [`ippool`], [`procstat`]. I/O parts: [`nodes`] (registration, heartbeats,
//! Leases), [`pods`] (the watch, the timer heap, status patches and deletes) and
//! [`nodeimages`] (NodeImage pulls, with `--pull-delay`).

pub mod costs;
pub mod daemon;
pub mod duration;
pub mod fault;
pub mod images;
pub mod ippool;
pub mod model;
pub mod nodeimages;
pub mod nodes;
pub mod pods;
pub mod podview;
pub mod procstat;
pub mod render;
pub mod stats;
