//! The writes of a lifecycle transition ([`Action::Lifecycle`]), planned whole: the labels
//! and finalizers of the pod patch, and the change of this CloneSet's key in the pod's
//! `KruisePodReady` message list.
//!
//! - The state label always; the state's timestamp annotation gets the write time.
//! - Updated → PreparingUpdate (a pod that goes through another update): the inPlaceUpdate
//!   hook's labels and finalizers are put back on the pod in the same patch (reference
//!   `UpdatePodLifecycleWithHandler`), so that the user's controller sees the hook again.
//! - With `markPodNotReady` ([`Action::Lifecycle::mark_not_ready`]): our key is added to or
//!   removed from `KruisePodReady`, the preDelete hook's key when the pod goes to or comes
//!   from PreparingDelete, else the inPlaceUpdate hook's.
//! - A pod already in the target state with no finalizer to put back gets no pod patch.

use std::collections::BTreeMap;

use inplace_proto::{CloneSet, LifecycleState, keys};
use serde::Serialize;
use serde_json::{Value, json};

use super::model::Action;

/// Our key in the pod's `KruisePodReady` message list: added (`add`) or removed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct NotReadyKey {
    pub key: &'static str,
    pub add: bool,
}

/// What one [`Action::Lifecycle`] writes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LifecycleWrite {
    pub pod: String,
    /// The `KruisePodReady` change, written first (on `pods/status`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_ready: Option<NotReadyKey>,
    /// The labels of the pod patch (the state label, and hook labels put back); empty when
    /// there is no pod patch.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Finalizers put back by the patch.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub finalizers: Vec<String>,
    /// The labels go in the `pods/status` patch that completes the pod's in-place update
    /// ([`super::completion_write`]): no pod patch of its own.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub with_completion: bool,
}

impl LifecycleWrite {
    /// The pod patch (strategic merge), the state timestamp `now`; `None` when there is
    /// nothing to patch, or when the completion's patch carries the labels.
    pub fn patch(&self, now: &str) -> Option<Value> {
        if self.labels.is_empty() || self.with_completion {
            return None;
        }
        let mut body = json!({"metadata": metadata(&self.labels, now)});
        if !self.finalizers.is_empty() {
            body["metadata"]["finalizers"] = json!(self.finalizers);
        }
        Some(body)
    }

    /// Whether the write is the lifecycle labels alone, which the completion's
    /// `pods/status` patch may carry: no finalizers (put back only on Updated →
    /// PreparingUpdate, never next to a completion) and no `KruisePodReady` key change
    /// (a write of its own, decided again from a re-read pod on a conflict).
    pub fn labels_only(&self) -> bool {
        !self.labels.is_empty() && self.finalizers.is_empty() && self.not_ready.is_none()
    }
}

/// The metadata of a lifecycle write: `labels`, and the state timestamp `now` (the same
/// metadata a completion write carries for it).
pub use inplace_proto::inplace_contract::lifecycle_metadata as metadata;

/// The write of `action` if it is a lifecycle transition of `cs`'s pod.
pub fn of(cs: &CloneSet, action: &Action) -> Option<LifecycleWrite> {
    let Action::Lifecycle {
        pod,
        from,
        to,
        mark_not_ready,
    } = action
    else {
        return None;
    };
    let (from, to) = (*from, *to);
    let not_ready = mark_not_ready.map(|add| NotReadyKey {
        key: if to == LifecycleState::PreparingDelete
            || from == Some(LifecycleState::PreparingDelete)
        {
            keys::PRE_DELETE_HOOK_KEY
        } else {
            keys::PRE_UPDATE_HOOK_KEY
        },
        add,
    });
    let mut labels = BTreeMap::from([(
        keys::LIFECYCLE_STATE_LABEL.to_owned(),
        to.as_str().to_owned(),
    )]);
    let mut finalizers = Vec::new();
    if to == LifecycleState::PreparingUpdate
        && from == Some(LifecycleState::Updated)
        && let Some(hook) = cs
            .spec
            .lifecycle
            .as_ref()
            .and_then(|l| l.in_place_update.as_ref())
    {
        labels.extend(hook.labels_handler.clone());
        finalizers.clone_from(&hook.finalizers_handler);
    }
    if from == Some(to) && finalizers.is_empty() {
        labels.clear();
    }
    Some(LifecycleWrite {
        pod: pod.clone(),
        not_ready,
        labels,
        finalizers,
        with_completion: false,
    })
}

/// The writes of the lifecycle transitions among `actions`, in plan order.
pub fn all(cs: &CloneSet, actions: &[Action]) -> Vec<LifecycleWrite> {
    actions.iter().filter_map(|a| of(cs, a)).collect()
}

#[cfg(test)]
mod tests;
