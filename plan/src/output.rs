//! The planner's output for one reconcile: the [`Plan`].
//!
//! Apart from [`super::model`] (the input and the actions) so that the modules that plan
//! each action's write ([`super::action_write`], [`super::inplace_write`],
//! [`super::lifecycle_write`], [`super::completion_write`], [`super::pod_conditions`]) read the actions without the
//! actions' module reading them back (no import circle).

use std::time::Duration;

use inplace_proto::CloneSetStatus;
use serde::Serialize;

use super::model::{Action, Diffs, PlanProblem, Resolved, RevisionPlan};

/// The planner's answer for one reconcile.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Plan {
    pub resolved: Resolved,
    pub diffs: Diffs,
    pub revisions: RevisionPlan,
    /// Ordered actions. One reconcile does a scale step or an update step, never both.
    pub actions: Vec<Action>,
    /// Readiness-gate conditions set True on pods that lack them
    /// ([`super::pod_conditions`]).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub pod_conditions: Vec<super::pod_conditions::InitialConditions>,
    /// What each [`Action::Lifecycle`] writes ([`super::lifecycle_write`]), in plan order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub lifecycle_writes: Vec<super::lifecycle_write::LifecycleWrite>,
    /// What each [`Action::CompleteInPlaceUpdate`] writes ([`super::completion_write`]):
    /// `InPlaceUpdateReady` True, with the pod's lifecycle labels where they can go along.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub completion_writes: Vec<super::completion_write::CompletionWrite>,
    /// What each in-place action (start, held update, next container batch) writes
    /// ([`super::inplace_write`]), in plan order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub in_place_writes: Vec<super::inplace_write::InPlaceWrite>,
    /// What every other action (create, delete, PVC, label writes, a stall's report on
    /// `InPlaceUpdateReady`, `podsToDelete` pruning) writes ([`super::action_write`]), in plan order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub action_writes: Vec<super::action_write::ActionWrite>,
    /// The status the controller should write.
    pub status: CloneSetStatus,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub problems: Vec<PlanProblem>,
    /// Reconcile again after this long even if nothing changes (minReadySeconds, grace, deadline).
    #[serde(skip_serializing_if = "Option::is_none", with = "opt_duration_secs")]
    pub requeue_after: Option<Duration>,
}

mod opt_duration_secs {
    use std::time::Duration;

    use serde::Serializer;

    pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_f64(d.as_secs_f64()),
            None => s.serialize_none(),
        }
    }
}
