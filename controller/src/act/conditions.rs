//! Pod readiness-gate conditions, written by strategic merge patch on `pods/status`:
//! `InPlaceUpdateReady` / `KruisePodReady` set True on pods that lack them, False when an
//! in-place update starts, True when it completes, a stall's reason and message, and our
//! key in `KruisePodReady`'s message list.

use std::collections::BTreeSet;

use inplace_proto::keys;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::Patch;
use serde_json::{Value, json};
use tracing::warn;

use crate::error::Error;
use crate::events::Note;
use crate::expectations::Expectation;
use crate::plan::Action;
use crate::plan::not_ready::{NOT_READY_USER_AGENT, NotReadyMessage, kruise_pod_ready};
use crate::watch::CachedPod;

use super::{Actor, Failure, FailureKind, Outcome, bounded, now_time, pod_ref};

impl Actor<'_> {
    /// Pods created with the `InPlaceUpdateReady` (or `KruisePodReady`) readiness gate get
    /// the condition True as soon as no in-place update is running on them; without it the
    /// kubelet would never report them Ready. (The reference's in-place `Refresh` and its
    /// pod-readiness controller do this.) Pods the plan completes itself are left to it.
    pub(super) async fn init_pod_conditions(&self, outcome: &mut Outcome) {
        let planned: BTreeSet<&str> = self
            .plan
            .actions
            .iter()
            .filter_map(|a| match a {
                Action::CompleteInPlaceUpdate { pod } => Some(pod.as_str()),
                _ => None,
            })
            .collect();
        let updating: BTreeSet<&str> = self
            .plan
            .actions
            .iter()
            .filter_map(|a| match a {
                Action::Update { pod, .. } | Action::ApplyGracedUpdate { pod } => {
                    Some(pod.as_str())
                }
                _ => None,
            })
            .collect();
        let mut todo = Vec::new();
        for pod in &self.owned.pods {
            let name = pod.name_any();
            if planned.contains(name.as_str())
                || updating.contains(name.as_str())
                || pod.metadata.deletion_timestamp.is_some()
            {
                continue;
            }
            let conditions = gate_conditions_to_set(pod, updating.contains(name.as_str()));
            if !conditions.is_empty() {
                // the full pod only for the write
                todo.push((pod.to_pod(), conditions));
            }
        }
        if todo.is_empty() {
            return;
        }
        let now = now_time();
        let futs: Vec<_> = todo
            .iter()
            .map(|(pod, conditions)| {
                let conds: Vec<Value> = conditions
                    .iter()
                    .map(|t| json!({"type": t, "status": "True", "lastTransitionTime": now}))
                    .collect();
                self.patch_pod_status(pod, json!({ "conditions": conds }), true)
            })
            .collect();
        let results = bounded(futs, self.ctx.settings.api_parallelism).await;
        for r in results {
            outcome.attempted += 1;
            match r {
                Ok(()) => {}
                Err(e) if e.status_code() == Some(409) => {}
                Err(error) => outcome.failures.push(Failure {
                    kind: FailureKind::Update,
                    error,
                }),
            }
        }
    }

    /// Sets `InPlaceUpdateReady` (and `Ready`) False on `pod`, pinned to its
    /// resourceVersion; returns the pod as written.
    pub(super) async fn set_update_not_ready(&self, pod: &Pod) -> Result<Pod, Error> {
        let now = now_time();
        let name = pod.name_any();
        let written = self
            .pod_api()
            .patch_status(
                &name,
                &self.pp(),
                &Patch::Strategic(json!({
                    "metadata": {"resourceVersion": pod.resource_version()},
                    "status": {"conditions": [
                        {"type": keys::INPLACE_UPDATE_READY_CONDITION, "status": "False",
                         "reason": keys::START_INPLACE_UPDATE_REASON, "message": null,
                         "lastTransitionTime": now},
                        {"type": "Ready", "status": "False", "reason": "ReadinessGatesNotReady",
                         "message": format!("the status of pod readiness gate \"{}\" is not \"True\", but False", keys::INPLACE_UPDATE_READY_CONDITION),
                         "lastTransitionTime": now},
                    ]}
                })),
            )
            .await
            .map_err(|e| {
                Error::kube(
                    format!(
                        "set {} False on pod {name}",
                        keys::INPLACE_UPDATE_READY_CONDITION
                    ),
                    e,
                )
            })?;
        // Recorded like every pod write: the next plan must see the condition False.
        self.expect(Expectation::PodUpdated {
            name,
            uid: written.uid().unwrap_or_default(),
            resource_version: written.resource_version().unwrap_or_default(),
        });
        Ok(written)
    }

    pub(super) async fn complete_in_place(&self, name: &str) -> Result<(), Error> {
        let pod = &self.pod(name)?;
        if !has_gate(pod, keys::INPLACE_UPDATE_READY_CONDITION) {
            return Ok(());
        }
        let now = now_time();
        // Reason and message (a stall report) belong to the False condition: removed.
        let status = json!({"conditions": [
            {"type": keys::INPLACE_UPDATE_READY_CONDITION, "status": "True", "lastTransitionTime": now,
             "reason": null, "message": null}
        ]});
        match self.patch_pod_status(pod, status, true).await {
            // Only for the pod version we checked: a newer one is judged again next time.
            Err(e) if e.status_code() == Some(409) => Ok(()),
            other => other,
        }
    }

    /// Writes what a stalled in-place update waits for on the pod's `InPlaceUpdateReady`
    /// condition (status stays False; pinned to the pod version judged, so a pod that moved
    /// on meanwhile is judged again) and records a Warning event on the pod.
    pub(super) async fn report_in_place_stall(
        &self,
        name: &str,
        reason: &str,
        message: &str,
    ) -> Result<(), Error> {
        let pod = &self.pod(name)?;
        let status = json!({"conditions": [{
            "type": keys::INPLACE_UPDATE_READY_CONDITION, "status": "False",
            "reason": reason, "message": message,
        }]});
        match self.patch_pod_status(pod, status, true).await {
            Err(e) if e.status_code() == Some(409) => return Ok(()),
            other => other?,
        }
        warn!(pod = %name, reason, %message, "in-place update stalled");
        self.ctx.events.send(Note {
            regarding: pod_ref(pod),
            related: Some(self.cs_ref.clone()),
            warning: true,
            reason: reason.to_owned(),
            action: "UpdateInPlace".to_owned(),
            message: message.to_owned(),
        });
        Ok(())
    }

    /// Adds or removes our key in the `KruisePodReady` condition's message list (only on
    /// pods with that readiness gate, like the reference).
    pub(super) async fn set_not_ready_key(
        &self,
        pod: &Pod,
        key: &str,
        add: bool,
    ) -> Result<(), Error> {
        if !has_gate(pod, keys::KRUISE_POD_READY_CONDITION) {
            return Ok(());
        }
        let ours = NotReadyMessage {
            user_agent: NOT_READY_USER_AGENT.into(),
            key: key.into(),
        };
        let Some((status, message)) = kruise_pod_ready(pod, &ours, add) else {
            return Ok(());
        };
        self.patch_pod_status(
            pod,
            json!({"conditions": [{
                "type": keys::KRUISE_POD_READY_CONDITION,
                "status": status,
                "message": message,
                "lastTransitionTime": now_time(),
            }]}),
            false,
        )
        .await
    }
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
///
/// Read from the cached pod: it runs for every pod of every reconcile.
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
