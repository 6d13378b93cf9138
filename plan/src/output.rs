//! The planner's output for one reconcile: the [`Plan`].
//!
//! Apart from [`super::model`] (the input and the actions) so that the modules that plan
//! each action's write ([`super::action_write`], [`super::inplace_write`],
//! [`super::lifecycle_write`], [`super::completion_write`], [`super::pod_conditions`]),
//! paired with their actions in [`super::step`], read the actions without the actions'
//! module reading them back (no import circle).

use std::time::Duration;

use inplace_proto::CloneSetStatus;
use serde::Serialize;

use super::completion_write::CompletionWrite;
use super::inplace_write::InPlaceWrite;
use super::lifecycle_write::LifecycleWrite;
use super::model::{Action, Diffs, PlanProblem, Resolved, RevisionPlan};
use super::status_write::StatusWrite;
use super::step::{Step, StepWrite};

/// The planner's answer for one reconcile.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Plan {
    pub resolved: Resolved,
    pub diffs: Diffs,
    pub revisions: RevisionPlan,
    /// Ordered steps: each action with its write. One reconcile does a scale step or an
    /// update step, never both.
    pub steps: Vec<Step>,
    /// Readiness-gate conditions set True on pods that lack them
    /// ([`super::pod_conditions`]): writes of no action, sent before the steps.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub pod_conditions: Vec<super::pod_conditions::InitialConditions>,
    /// The status the controller should write.
    pub status: CloneSetStatus,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub problems: Vec<PlanProblem>,
    /// The write of `status` with the failure conditions of `problems` (and of the
    /// sending), and the problems' events: writes of no action, sent after the steps.
    pub status_write: StatusWrite,
    /// Reconcile again after this long even if nothing changes (minReadySeconds, grace, deadline).
    #[serde(skip_serializing_if = "Option::is_none", with = "opt_duration_secs")]
    pub requeue_after: Option<Duration>,
}

impl Plan {
    /// The actions of the steps, in order (a copy, for reports and tests).
    pub fn actions(&self) -> Vec<Action> {
        self.steps.iter().map(|s| s.action.clone()).collect()
    }

    /// The writes of the steps that hold one of kind `pick`, in order.
    fn writes<'a, T>(&'a self, pick: impl Fn(&'a StepWrite) -> Option<&'a T>) -> Vec<&'a T> {
        self.steps
            .iter()
            .filter_map(|s| s.write.as_ref().ok().and_then(&pick))
            .collect()
    }

    /// The lifecycle writes, in step order.
    pub fn lifecycle_writes(&self) -> Vec<&LifecycleWrite> {
        self.writes(|w| match w {
            StepWrite::Lifecycle(w) => Some(w),
            _ => None,
        })
    }

    /// The completion writes, in step order.
    pub fn completion_writes(&self) -> Vec<&CompletionWrite> {
        self.writes(|w| match w {
            StepWrite::Completion(w) => Some(w),
            _ => None,
        })
    }

    /// The in-place writes, in step order.
    pub fn in_place_writes(&self) -> Vec<&InPlaceWrite> {
        self.writes(|w| match w {
            StepWrite::InPlace(w) => Some(w),
            _ => None,
        })
    }
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
