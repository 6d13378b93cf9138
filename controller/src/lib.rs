//! The inplace CloneSet controller.
//!
//! - [`plan`]: pure decisions from a snapshot to the next step.
//! - [`cli`]: the `kubectl-inplace` plugin (offline plan preview).
//! - [`runtime`]: the reconciler (watches → snapshot → plan → [`runtime::apply`] →
//!   [`runtime::status_writer`]), with [`watch`], [`expectations`], [`events`], [`metrics`],
//!   [`leader`], [`discovery`].

/// The planner, its own crate (`inplace-plan`): no client, no runtime.
pub use inplace_plan as plan;

pub mod cli;

#[cfg(not(target_env = "msvc"))]
pub mod allocator;
pub mod api_metrics;
pub mod crr;
pub mod delete_as_read;
pub mod discovery;
pub mod error;
pub mod events;
pub mod expectations;
pub mod feature_gates;
pub mod fence;
pub mod imagepulljob;
pub mod launch_priority;
pub mod leader;
pub mod logging;
pub mod metrics;
pub mod pod_events;
// The request bound lives in proto: the daemon's client carries it too.
pub use inplace_proto::request_timeout;
pub mod runtime;
pub mod server;
pub mod turns;
pub mod watch;
pub mod watch_backoff;
