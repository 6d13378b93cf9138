//! Readiness-gate conditions a plan sets True on pods that lack them.
//!
//! Pods created with the `InPlaceUpdateReady` (or `KruisePodReady`) readiness gate get the
//! condition True as soon as no in-place update is running on them; without it the kubelet
//! would never report them Ready. (The reference's in-place `Refresh` and its
//! pod-readiness controller do this.) Pods the plan completes or updates itself, and pods
//! being deleted, are left to those actions.
//!
//! Each write is planned whole ([`InitialConditions`]): the pod, the resourceVersion it was
//! decided from (the write's precondition) and the conditions set True; the applier only
//! adds the write time.

use std::collections::HashSet;

use inplace_proto::keys;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde::Serialize;
use serde_json::{Value, json};

use super::model::{Action, PodFacts};

/// One `pods/status` write: set `conditions` True on `pod`, only on the pod version
/// `resource_version` (a pod that changed meanwhile is judged again next time).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InitialConditions {
    pub pod: String,
    pub resource_version: String,
    pub conditions: Vec<&'static str>,
}

impl InitialConditions {
    /// The strategic merge patch of `pods/status`, the conditions' transition time `now`.
    pub fn patch(&self, now: &Time) -> Value {
        let conditions: Vec<Value> = self
            .conditions
            .iter()
            .map(|t| json!({"type": t, "status": "True", "lastTransitionTime": now}))
            .collect();
        json!({
            "metadata": {"resourceVersion": self.resource_version},
            "status": {"conditions": conditions},
        })
    }
}

/// The initial-condition writes next to `actions` (the plan's), for the pods of a plan
/// (their `facts`): every pod not being deleted, whose in-place update the plan neither
/// starts, applies nor completes, that lacks a gate condition ([`gate_conditions_of`]).
/// Judged from the facts: it runs for every pod of every reconcile, and the facts are
/// already at hand (the pods' own memory is read only for the pods written).
pub fn initial(facts: &[PodFacts<'_>], actions: &[Action]) -> Vec<InitialConditions> {
    let mut left_to_actions: Option<HashSet<&str>> = None;
    let mut out = Vec::new();
    for f in facts {
        if f.terminating {
            continue;
        }
        let conditions = gate_conditions_of(f, false);
        if conditions.is_empty() {
            continue;
        }
        let left = left_to_actions.get_or_insert_with(|| {
            actions
                .iter()
                .filter_map(|action| match action {
                    Action::CompleteInPlaceUpdate { pod }
                    | Action::Update { pod, .. }
                    | Action::ApplyGracedUpdate { pod } => Some(pod.as_str()),
                    _ => None,
                })
                .collect()
        });
        if left.contains(f.name) {
            continue;
        }
        out.push(InitialConditions {
            pod: f.name.to_owned(),
            resource_version: f.pod.metadata.resource_version.clone().unwrap_or_default(),
            conditions,
        });
    }
    out
}

/// Whether the pod has a readiness gate of this condition type.
pub fn has_gate(pod: &Pod, condition: &str) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.readiness_gates.as_ref())
        .is_some_and(|g| g.iter().any(|g| g.condition_type == condition))
}

/// Readiness-gate conditions to set True on the pod of `facts`:
/// - `KruisePodReady` when absent;
/// - `InPlaceUpdateReady` when no in-place update is held or running on the pod (no state
///   or grace annotation, new or legacy key) and the condition is absent, or False from
///   an update of ours whose spec patch never landed (reason `StartInPlaceUpdate`, no
///   state annotation) and `updating` is false (no update of the pod is planned now).
pub fn gate_conditions_of(facts: &PodFacts<'_>, updating: bool) -> Vec<&'static str> {
    let in_progress = facts.in_place_state.is_some()
        || facts.in_place_state_unreadable
        || facts.in_place_grace_pending;
    let mut out = Vec::new();
    if facts.gates.in_place_update_ready && !in_progress {
        // The condition itself is read only when it is not True (few pods).
        let set = match facts.in_place_update_ready {
            None => true,
            Some(true) => false,
            Some(false) => {
                !updating
                    && facts.in_place_condition().is_some_and(|c| {
                        c.reason.as_deref() == Some(keys::START_INPLACE_UPDATE_REASON)
                    })
            }
        };
        if set {
            out.push(keys::INPLACE_UPDATE_READY_CONDITION);
        }
    }
    if facts.gates.kruise_pod_ready && !facts.gates.kruise_pod_ready_condition {
        out.push(keys::KRUISE_POD_READY_CONDITION);
    }
    out
}

#[cfg(test)]
mod tests;
