//! What the launch-priority loop does next for one pod (OpenKruise
//! `pkg/controller/containerlaunchpriority`): pure, from the pod and its barrier ConfigMap.
//!
//! The pod's pending priorities are those of its containers that carry a barrier env and
//! are not Ready. While there are any, the barrier must hold the key of the highest of
//! them, and so release it; the keys are never removed. Once the lowest pending priority
//! is released the pod is marked `apps.kruise.io/container-launch-priority-completed:
//! "true"` and left alone, as it is once its `ContainersReady` condition is True.

use inplace_proto::keys;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};

use crate::plan::launch_barrier::barrier_key;

/// The priorities still held back in a pod: the highest and the lowest of its containers
/// that wait on the barrier and are not Ready.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pending {
    pub highest: i64,
    pub lowest: i64,
}

/// The next write for a pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Nothing to write (now, or any more).
    Nothing,
    /// Create the barrier ConfigMap, owned by the pod, holding `key`; then mark the pod
    /// completed if `complete`.
    Create { key: String, complete: bool },
    /// Add `key` to the barrier; then mark the pod completed if `complete`.
    Release { key: String, complete: bool },
    /// Only mark the pod completed.
    Complete,
    /// The ConfigMap of that name belongs to an earlier pod of the same name (its keys
    /// would release this pod's containers at once): delete it; it is created anew.
    ReplaceStale,
}

/// The container's priority from its barrier env: the number after `p_` of the key (a
/// key that is none counts as 0, as the reference's `GetContainerPriority` reads it).
pub fn container_priority(container: &k8s_openapi::api::core::v1::Container) -> Option<i64> {
    let env = container
        .env
        .iter()
        .flatten()
        .find(|e| e.name == keys::CONTAINER_BARRIER_ENV)?;
    let key = env
        .value_from
        .as_ref()
        .and_then(|v| v.config_map_key_ref.as_ref())
        .map(|r| r.key.as_str())
        .unwrap_or_default();
    Some(key.get(2..).and_then(|n| n.parse().ok()).unwrap_or(0))
}

/// The pod's pending priorities; `None` when there is nothing to release: marked
/// completed, `ContainersReady`, or no container that waits and is not Ready.
pub fn pending(pod: &Pod) -> Option<Pending> {
    let completed = pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(keys::CONTAINER_LAUNCH_PRIORITY_COMPLETED_ANNOTATION))
        .is_some_and(|v| v == "true");
    if completed || pod.metadata.deletion_timestamp.is_some() {
        return None;
    }
    let status = pod.status.as_ref();
    let containers_ready = status
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .any(|c| c.type_ == "ContainersReady" && c.status == "True");
    if containers_ready {
        return None;
    }
    let ready = |name: &str| {
        status
            .and_then(|s| s.container_statuses.as_ref())
            .into_iter()
            .flatten()
            .any(|c| c.name == name && c.ready)
    };
    let priorities: Vec<i64> = pod
        .spec
        .as_ref()
        .map(|s| s.containers.as_slice())
        .unwrap_or_default()
        .iter()
        .filter(|c| !ready(&c.name))
        .filter_map(container_priority)
        .collect();
    Some(Pending {
        highest: *priorities.iter().max()?,
        lowest: *priorities.iter().min()?,
    })
}

/// The next write for a pod with `pending` priorities and UID `pod_uid`, whose barrier
/// ConfigMap is `barrier` (`None`: not found).
pub fn step(pending: &Pending, pod_uid: &str, barrier: Option<&ConfigMap>) -> Step {
    let complete = pending.highest == pending.lowest;
    let highest = barrier_key(pending.highest);
    let Some(barrier) = barrier else {
        return Step::Create {
            key: highest,
            complete,
        };
    };
    let owners = barrier
        .metadata
        .owner_references
        .as_deref()
        .unwrap_or_default();
    if !owners.is_empty() && !owners.iter().any(|o| o.uid == pod_uid) {
        return Step::ReplaceStale;
    }
    let holds = |key: &str| barrier.data.as_ref().is_some_and(|d| d.contains_key(key));
    if holds(&barrier_key(pending.lowest)) {
        return Step::Complete;
    }
    if holds(&highest) {
        return Step::Nothing;
    }
    Step::Release {
        key: highest,
        complete,
    }
}

#[cfg(test)]
mod tests;
