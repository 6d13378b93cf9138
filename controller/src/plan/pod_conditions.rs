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

use std::collections::BTreeSet;
use std::sync::Arc;

use inplace_proto::keys;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde::Serialize;
use serde_json::{Value, json};

use super::model::Action;
use crate::watch::CachedPod;

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

/// The initial-condition writes for `pods` next to `actions` (the plan's): every pod not
/// being deleted, whose in-place update the plan neither starts, applies nor completes,
/// that lacks a gate condition ([`gate_conditions_to_set`]). Read from the cached pods:
/// it runs for every pod of every reconcile.
pub fn initial(pods: &[Arc<CachedPod>], actions: &[Action]) -> Vec<InitialConditions> {
    let mut left_to_actions: BTreeSet<&str> = BTreeSet::new();
    for action in actions {
        match action {
            Action::CompleteInPlaceUpdate { pod }
            | Action::Update { pod, .. }
            | Action::ApplyGracedUpdate { pod } => {
                left_to_actions.insert(pod.as_str());
            }
            _ => {}
        }
    }
    pods.iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(|p| !left_to_actions.contains(p.metadata.name.as_deref().unwrap_or_default()))
        .filter_map(|p| {
            let conditions = gate_conditions_to_set(p, false);
            (!conditions.is_empty()).then(|| InitialConditions {
                pod: p.metadata.name.clone().unwrap_or_default(),
                resource_version: p.metadata.resource_version.clone().unwrap_or_default(),
                conditions,
            })
        })
        .collect()
}

/// Whether the pod has a readiness gate of this condition type.
pub fn has_gate(pod: &Pod, condition: &str) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.readiness_gates.as_ref())
        .is_some_and(|g| g.iter().any(|g| g.condition_type == condition))
}

/// Readiness-gate conditions to set True on `pod`:
/// - `KruisePodReady` when absent;
/// - `InPlaceUpdateReady` when no in-place update is held or running on the pod and the
///   condition is absent, or False from an update of ours whose spec patch never landed
///   (reason `StartInPlaceUpdate`, no state annotation) and `updating` is false (no
///   update of the pod is planned now).
pub fn gate_conditions_to_set(pod: &CachedPod, updating: bool) -> Vec<&'static str> {
    let find = |t: &str| pod.condition(t);
    let has_gate = |t: &str| pod.readiness_gates().any(|g| g == t);
    let annotations = pod.annotations();
    let in_progress = [
        keys::INPLACE_UPDATE_STATE_ANNOTATION,
        keys::INPLACE_UPDATE_STATE_ANNOTATION_LEGACY,
        keys::INPLACE_UPDATE_GRACE_ANNOTATION,
        keys::INPLACE_UPDATE_GRACE_ANNOTATION_LEGACY,
    ]
    .iter()
    .any(|k| annotations.contains_key(k));
    let mut out = Vec::new();
    if has_gate(keys::INPLACE_UPDATE_READY_CONDITION) && !in_progress {
        let set = match find(keys::INPLACE_UPDATE_READY_CONDITION) {
            None => true,
            Some(c) => {
                &*c.status != "True"
                    && c.reason.as_deref() == Some(keys::START_INPLACE_UPDATE_REASON)
                    && !updating
            }
        };
        if set {
            out.push(keys::INPLACE_UPDATE_READY_CONDITION);
        }
    }
    if has_gate(keys::KRUISE_POD_READY_CONDITION)
        && find(keys::KRUISE_POD_READY_CONDITION).is_none()
    {
        out.push(keys::KRUISE_POD_READY_CONDITION);
    }
    out
}

#[cfg(test)]
mod tests;
