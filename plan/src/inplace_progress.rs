//! How far an in-place update of a pod has come, judged from the pod's status alone
//! ([`in_place_progress`]): whether each updated container runs the new spec, and what
//! the update still waits for. Read by the lifecycle refresh ([`super::lifecycle`]) and
//! by the stall checks ([`super::stall`]).

use inplace_proto::InPlaceUpdateState;
use inplace_proto::inplace_contract::container_updated;
use k8s_openapi::api::core::v1::ResourceRequirements;

use crate::cached::ContainerStatusView;

use super::model::PodFacts;
use super::quantity;

/// How far an in-place update of a pod has come.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum InPlaceProgress {
    /// The pod carries no in-place update state.
    NoState,
    /// The spec is not patched yet: the grace period runs.
    GracePending,
    /// Lower-priority containers still wait for a later batch.
    NextBatchPending,
    /// Containers read env from changed labels/annotations: only the daemon can tell
    /// (it sets `InPlaceUpdateReady` True once they restarted).
    AwaitingDaemon,
    /// The containers do not run the new spec yet: what the update waits for.
    Waiting(String),
    /// Every updated container runs the new spec.
    Completed,
}

/// Judges an in-place update from the pod's status alone (the fallback when no daemon
/// reports completion; OpenKruise `pkg/util/inplaceupdate/inplace_update_defaults.go`):
///
/// - not complete while a grace annotation exists or later batches are pending;
/// - every container recorded in `lastContainerStatuses` must appear in the status and run
///   the updated spec ([`container_updated`]);
/// - with `updateResources`, every container's status resources must equal its spec
///   resources (cpu/memory requests and limits, compared by value);
/// - with `updateEnvFromMetadata`, only the daemon can see the restart: complete once
///   `InPlaceUpdateReady` is True.
pub fn in_place_progress(pod: &PodFacts) -> InPlaceProgress {
    if pod.in_place_grace_pending {
        return InPlaceProgress::GracePending;
    }
    let Some(state) = &pod.in_place_state else {
        return InPlaceProgress::NoState;
    };
    if state.has_next_batch() {
        return InPlaceProgress::NextBatchPending;
    }
    if state.update_env_from_metadata && pod.in_place_update_ready != Some(true) {
        return InPlaceProgress::AwaitingDaemon;
    }
    if let Some(reason) = containers_pending(pod, state) {
        return InPlaceProgress::Waiting(reason);
    }
    if state.update_resources
        && let Some(reason) = resources_pending(pod)
    {
        return InPlaceProgress::Waiting(reason);
    }
    InPlaceProgress::Completed
}

/// The first container of `state` that does not run the updated spec yet, and why.
pub(super) fn containers_pending(pod: &PodFacts, state: &InPlaceUpdateState) -> Option<String> {
    for (name, before) in &state.last_container_statuses {
        let Some(status) = pod.container_statuses().iter().find(|s| *s.name == **name) else {
            return Some(format!("container {name} to appear in the pod status"));
        };
        let spec_image = pod
            .container_specs()
            .iter()
            .find(|c| *c.name == **name)
            .and_then(|c| c.image.as_deref());
        if !container_updated(spec_image, before, status) {
            let waiting = waiting_reason(status)
                .map(|w| format!(" ({w})"))
                .unwrap_or_default();
            return Some(format!(
                "container {name} to restart with the new spec{waiting}"
            ));
        }
    }
    None
}

/// `reason: message` of a container that is waiting with a reason (the kubelet's
/// `ErrImagePull`, `CrashLoopBackOff`, …).
pub fn waiting_reason(status: &impl ContainerStatusView) -> Option<String> {
    let waiting = status.state()?.waiting.as_ref()?;
    let reason = waiting.reason.as_deref().filter(|r| !r.is_empty())?;
    Some(match waiting.message.as_deref().filter(|m| !m.is_empty()) {
        Some(message) => format!("{reason}: {message}"),
        None => reason.to_owned(),
    })
}

fn same_resources(
    spec: Option<&ResourceRequirements>,
    status: Option<&ResourceRequirements>,
) -> bool {
    let lists = |r: Option<&ResourceRequirements>| {
        let r = r.cloned().unwrap_or_default();
        (r.requests.unwrap_or_default(), r.limits.unwrap_or_default())
    };
    let (spec_req, spec_lim) = lists(spec);
    let (status_req, status_lim) = lists(status);
    ["cpu", "memory"].iter().all(|res| {
        let eq = |a: Option<&_>, b: Option<&_>| match (a, b) {
            (Some(a), Some(b)) => quantity::equal(a, b),
            (None, None) => true,
            _ => false,
        };
        eq(spec_req.get(*res), status_req.get(*res)) && eq(spec_lim.get(*res), status_lim.get(*res))
    })
}

fn resources_pending(pod: &PodFacts) -> Option<String> {
    for spec in pod.container_specs() {
        let status = pod
            .container_statuses()
            .iter()
            .find(|s| s.name == spec.name);
        let Some(status) = status else {
            return Some(format!(
                "container {} to appear in the pod status",
                spec.name
            ));
        };
        if !same_resources(spec.resources.as_ref(), status.resources.as_ref()) {
            return Some(format!("container {} to be resized", spec.name));
        }
    }
    None
}
