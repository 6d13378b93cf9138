//! The planner: pure functions from a [`Snapshot`] of one CloneSet to the next
//! reconcile step as data ([`Plan`]). No client, no runtime, no clock of its own.
//!
//! Every rule of the CloneSet documentation lives in one of these modules and is tested
//! there, without a cluster. "Docs" in the modules' comments names a section of
//! OpenKruise's CloneSet user manual; OpenKruise source files are named as in
//! `openkruise/kruise`, those of the CloneSet controller (`sync/…`, `utils/…`,
//! `cloneset_controller.go`) relative to its `pkg/controller/cloneset/`.
//!
//! [`plan`] runs the reference's reconcile in order:
//!
//! 1. revisions ([`revision`]): update revision (created, reused or bumped), current
//!    revision, collision count, history to delete;
//! 2. the facts of every pod ([`PodFacts`]);
//! 3. percents resolved ([`diffs::resolve`]) and the arithmetic ([`diffs::calculate`]);
//! 4. PVC cleanup when `disablePVCReuse` ([`housekeeping`]);
//! 5. the scale step ([`scale`]); when it has nothing to do, the update step
//!    ([`update::plan_update`]) — one reconcile never does both (as OpenKruise's `sync/`);
//!    neither runs while the CloneSet is being deleted;
//! 6. the status to write ([`status::compute`]) and `podsToDelete` pruning.

#![forbid(unsafe_code)]

pub mod action_write;
pub mod build;
pub mod cached;
pub mod claim;
pub mod completion_write;
pub mod container_batches;
pub mod diffs;
#[cfg(test)]
pub(crate) mod fixtures;
pub mod housekeeping;
pub mod inplace;
pub mod inplace_progress;
pub mod inplace_write;
pub mod instance_ids;
pub mod launch_barrier;
pub mod lifecycle;
pub mod lifecycle_write;
pub mod model;
pub mod not_ready;
pub mod order_rules;
pub mod outcome;
pub mod output;
pub mod pod_conditions;
pub mod pod_lookup;
pub mod pod_summary;
pub mod pods_to_delete;
pub mod predownload;
pub mod predownload_steps;
pub mod protection;
pub mod quantity;
pub mod resend;
pub mod revision;
mod run;
pub mod scale;
pub mod selector;
pub mod sending;
pub mod stall;
pub mod status;
pub mod status_write;
pub mod step;
pub mod update;
pub mod update_order;
pub mod validate;
pub mod victims;

pub use model::*;
pub use output::Plan;
pub use run::{PlanError, plan, write_inputs};
pub use step::{Step, StepWrite, WriteError};
