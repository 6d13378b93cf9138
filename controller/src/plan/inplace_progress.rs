//! How far an in-place update of a pod has come, judged from the pod's status alone
//! ([`in_place_progress`]): whether each updated container runs the new spec, and what
//! the update still waits for. Read by the lifecycle refresh ([`super::lifecycle`]) and
//! by the stall checks ([`super::stall`]).

use inplace_proto::InPlaceUpdateContainerStatus;
use inplace_proto::InPlaceUpdateState;
use k8s_openapi::api::core::v1::ResourceRequirements;

use crate::watch::cached::ContainerStatusView;

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

/// `image` with `:latest` appended when it names neither a tag nor a digest. Unlike the
/// reference (which looks for any `:`), a registry port (`host:5000/app`) is not a tag.
pub fn image_with_default_tag(image: &str) -> String {
    inplace_proto::image_ref::split(image).with_default_tag()
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

/// Whether a container recorded in `lastContainerStatuses` as `before` runs the updated
/// spec, by its status.
///
/// - When the id of the container that ran as the spec was patched is recorded (we record
///   it): the status names another container. The kubelet starts a container only from
///   the spec it has, so a new id is the restart the update asked for, whatever image ID
///   or image name the runtime reports: a new tag of the same image (a retag, same image
///   ID) is judged like any other image change. containerd reports the image name as the
///   image's first tag, which for a retag may well be the old one, so the name alone could
///   wait forever.
/// - Otherwise (a state written by OpenKruise or before we recorded ids) the reference's
///   rule: another image ID, or the same image ID and a status image equal to the spec
///   image (`:latest` appended when the spec names no tag or digest).
pub fn container_updated(
    spec_image: Option<&str>,
    before: &InPlaceUpdateContainerStatus,
    status: &impl ContainerStatusView,
) -> bool {
    if !before.container_id.is_empty() {
        return status
            .container_id()
            .is_some_and(|id| !id.is_empty() && id != before.container_id);
    }
    if status.image_id() != before.image_id {
        return true;
    }
    spec_image.is_some_and(|image| same_image(image, status.image()))
}

/// Whether the spec's image and the image a container status reports name the same
/// image. The kubelet on containerd reports the fully qualified name
/// (`docker.io/library/nginx:latest` for a spec's `nginx`), so both sides are compared
/// normalised; a reference that does not parse is compared as written, `:latest` added.
/// (OpenKruise compares repository and tag without Docker Hub normalisation, so a retag
/// of a short Docker Hub name with an unchanged image ID never completes there.)
fn same_image(spec_image: &str, status_image: &str) -> bool {
    use inplace_proto::image_ref::ImageRef;
    match (ImageRef::parse(spec_image), ImageRef::parse(status_image)) {
        (Ok(spec), Ok(status)) => spec.normalized() == status.normalized(),
        _ => image_with_default_tag(spec_image) == status_image,
    }
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
