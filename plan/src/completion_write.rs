//! The write that completes an in-place update ([`Action::CompleteInPlaceUpdate`]),
//! planned whole: one strategic merge patch of `pods/status` setting `InPlaceUpdateReady`
//! True, pinned to the resourceVersion of the pod judged complete (a pod that changed
//! meanwhile is judged again from its newer version).
//!
//! The same plan moves the pod's lifecycle state out of Updating
//! ([`super::lifecycle::refresh`]). When that move writes only labels (and the state
//! timestamp annotation; no finalizers, no `KruisePodReady` key:
//! [`LifecycleWrite::labels_only`]) the completion's patch carries them, and the
//! lifecycle write is marked [`LifecycleWrite::with_completion`] and sends nothing of its
//! own: one pod write instead of two.
//!
//! Why a `pods/status` patch may carry labels: the API server's status strategy for pods
//! (`podStatusStrategy.PrepareForUpdate`) resets the spec, the deletion timestamp and the
//! owner references from the stored pod, not the labels or annotations (v1.20, and still
//! in recent releases, whose `GetResetFields` for pods/status names the same three); so
//! our daemon's status patches can write metadata (it writes the in-place state
//! annotation that way). Should a server drop the metadata part all the same, the
//! pod ends with the condition True and the label still Updating; the next plan then
//! sees an Updating pod whose update is complete and no completion left to do, and plans
//! the ordinary lifecycle write (a pod patch): at worst the two writes of before, never a
//! pod stuck in Updating (`lifecycle` tests, "condition True but label still Updating").
//!
//! A pod without the `InPlaceUpdateReady` readiness gate gets no completion write (as
//! before); its lifecycle write then goes alone.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use inplace_proto::{inplace_contract, keys};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde::Serialize;
use serde_json::Value;

use super::lifecycle_write::LifecycleWrite;
use super::model::Action;
use crate::cached::CachedPod;

/// The `pods/status` write completing the in-place update of `pod`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CompletionWrite {
    pub pod: String,
    /// The precondition: the version of the pod judged complete.
    pub resource_version: String,
    /// The lifecycle labels carried (those of the pod's lifecycle write); empty when the
    /// lifecycle state is written on its own, or not at all.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub lifecycle_labels: BTreeMap<String, String>,
}

impl CompletionWrite {
    /// The strategic merge patch of `pods/status`, written at `now` (the condition's
    /// transition time, and the lifecycle timestamp `stamp` when labels are carried): the
    /// in-place contract's [`inplace_contract::completion_patch`], the daemon's too.
    pub fn patch(&self, now: &Time, stamp: &str) -> Value {
        let metadata = if self.lifecycle_labels.is_empty() {
            Value::Null
        } else {
            inplace_contract::lifecycle_metadata(&self.lifecycle_labels, stamp)
        };
        inplace_contract::completion_patch(&self.resource_version, metadata, now.0)
    }
}

/// The completion write of `pod`, carrying `lifecycle`'s labels when it is labels only;
/// `None` when the pod has no `InPlaceUpdateReady` readiness gate (nothing to write).
pub fn of(pod: &CachedPod, lifecycle: Option<&LifecycleWrite>) -> Option<CompletionWrite> {
    if !pod
        .readiness_gates()
        .any(|g| g == keys::INPLACE_UPDATE_READY_CONDITION)
    {
        return None;
    }
    let lifecycle_labels = lifecycle
        .filter(|w| w.labels_only())
        .map(|w| w.labels.clone())
        .unwrap_or_default();
    Some(CompletionWrite {
        pod: pod.metadata.name.clone().unwrap_or_default(),
        resource_version: pod.metadata.resource_version.clone().unwrap_or_default(),
        lifecycle_labels,
    })
}

/// The completion writes of the plan's [`Action::CompleteInPlaceUpdate`]s, in the order
/// of `pods`. The lifecycle write of a pod whose completion carries its labels is marked
/// [`LifecycleWrite::with_completion`]; a pod with more than one lifecycle write in the
/// plan keeps them all on their own.
pub fn all(
    pods: &[Arc<CachedPod>],
    actions: &[Action],
    lifecycle_writes: &mut [LifecycleWrite],
) -> Vec<CompletionWrite> {
    let completed: BTreeSet<&str> = actions
        .iter()
        .filter_map(|a| match a {
            Action::CompleteInPlaceUpdate { pod } => Some(pod.as_str()),
            _ => None,
        })
        .collect();
    if completed.is_empty() {
        return Vec::new();
    }
    let mut writes = Vec::with_capacity(completed.len());
    for pod in pods {
        let name = pod.metadata.name.as_deref().unwrap_or_default();
        if !completed.contains(name) {
            continue;
        }
        let mut mine = lifecycle_writes.iter_mut().filter(|w| w.pod == name);
        let lifecycle = match (mine.next(), mine.next()) {
            (Some(only), None) => Some(only),
            _ => None,
        };
        let Some(write) = of(pod, lifecycle.as_deref()) else {
            continue;
        };
        if let Some(lifecycle) = lifecycle
            && !write.lifecycle_labels.is_empty()
        {
            lifecycle.with_completion = true;
        }
        writes.push(write);
    }
    writes
}

#[cfg(test)]
mod tests;
