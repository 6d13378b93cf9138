//! The JSON carried by the `apps.kruise.io/inplace-update-state` and
//! `apps.kruise.io/inplace-update-grace` pod annotations.
//!
//! Key names follow the reference implementation so that pods it updated are understood
//! here and vice versa. Keys this version does not know are kept in `extra` and written
//! back unchanged.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ResourceRequirements;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// State of an in-place update, recorded on the pod when its spec is patched.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InPlaceUpdateState {
    /// The revision the pod is being updated to.
    pub revision: String,
    /// When the spec was patched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub update_timestamp: Option<Time>,
    /// What each updated container looked like before the update.
    #[serde(default)]
    pub last_container_statuses: BTreeMap<String, InPlaceUpdateContainerStatus>,
    /// Containers whose environment comes from changed labels/annotations must be restarted.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub update_env_from_metadata: bool,
    /// Containers restarted with an unchanged spec (the template's
    /// `kubectl.kubernetes.io/restartedAt` changed: `kubectl inplace rollout restart`). Each
    /// is also in `lastContainerStatuses` with the id of the container that ran: our node
    /// daemon stops that container through CRI, the kubelet starts it again, and the update
    /// is complete once another container runs. Not in the reference.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub restart_containers: Vec<String>,
    /// cpu/memory were changed in place.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub update_resources: bool,
    /// Images were changed in place.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub update_images: bool,
    /// Images still to apply in a later container batch.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub next_container_images: BTreeMap<String, String>,
    /// Metadata still to apply in a later container batch.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub next_container_ref_metadata: BTreeMap<String, ObjectMeta>,
    /// Resources still to apply in a later container batch.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub next_container_resources: BTreeMap<String, ResourceRequirements>,
    /// Restarts ([`Self::restart_containers`]) still to do in a later container batch.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub next_container_restarts: Vec<String>,
    /// Containers that must be ready before the next batch starts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pre_check_before_next: Option<PreCheckBeforeNext>,
    /// The batches applied so far.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub container_batches_record: Vec<ContainerBatch>,
    /// Written by our node daemon while later batches are pending: the containers whose env
    /// reads pod metadata run with the pod's values since batch `batch` was applied. Not
    /// in the reference (its daemon reports container hashes instead); with it, a batch
    /// whose only change is a label or annotation that a container's env reads holds the
    /// next batch until that container was restarted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub daemon_env_checked: Option<EnvChecked>,
    /// The lifecycle state (`lifecycle.apps.kruise.io/state`) the pod takes when this
    /// update completes, written by the controller at the start only when it is certain
    /// then (no inPlaceUpdate hook, so Updating goes to Normal and no `markPodNotReady`
    /// key is to be cleared). Our node daemon's completion write (`InPlaceUpdateReady`
    /// True, on `pods/status`) then moves the label from Updating to it in the same
    /// patch, which saves the controller a separate lifecycle write. Not in the
    /// reference. Absent: the controller writes the lifecycle state itself. A string, not
    /// [`crate::LifecycleState`], so that a value this version does not know leaves the
    /// state readable (it is ignored, see [`Self::lifecycle_on_completion`]).
    #[serde(
        default,
        rename = "lifecycleStateOnCompletion",
        skip_serializing_if = "Option::is_none"
    )]
    pub lifecycle_state_on_completion: Option<String>,
    /// Keys written by other versions, preserved verbatim.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// A container's identity before the in-place update.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InPlaceUpdateContainerStatus {
    #[serde(default, rename = "imageID", skip_serializing_if = "String::is_empty")]
    pub image_id: String,
    /// The id of the container that ran when the update was patched (`<runtime>://<id>`
    /// from the pod status). Not in the reference, which ignores it: with it, a container
    /// whose new image has the same image ID as the old one (a retag) is judged restarted
    /// by its id changing, not by the image name the runtime happens to report.
    #[serde(
        default,
        rename = "containerID",
        skip_serializing_if = "String::is_empty"
    )]
    pub container_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
}

/// `daemonEnvChecked`: the env-from-metadata containers (name → `<runtime>://<id>`) the
/// daemon found running with the pod's metadata values, as of the `batch`-th batch (the
/// length of `containerBatchesRecord` then).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnvChecked {
    pub batch: usize,
    #[serde(default)]
    pub containers: BTreeMap<String, String>,
}

/// `preCheckBeforeNext`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PreCheckBeforeNext {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub containers_required_ready: Vec<String>,
}

/// One entry of `containerBatchesRecord`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ContainerBatch {
    pub timestamp: Time,
    #[serde(default)]
    pub containers: Vec<String>,
}

/// The update held back during `gracePeriodSeconds` (`apps.kruise.io/inplace-update-grace`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InPlaceUpdateGrace {
    pub revision: String,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub container_images: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub container_ref_metadata: BTreeMap<String, ObjectMeta>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub container_resources: BTreeMap<String, ResourceRequirements>,
    /// Containers to restart with an unchanged spec (see
    /// [`InPlaceUpdateState::restart_containers`]). Not in the reference.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub restart_containers: Vec<String>,
    /// A strategic merge patch of labels/annotations, as a JSON string.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub meta_data_patch: String,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub update_env_from_metadata: bool,
    #[serde(default)]
    pub grace_seconds: i32,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl InPlaceUpdateState {
    /// A later container batch is pending (images, metadata, resources or restarts).
    pub fn has_next_batch(&self) -> bool {
        !self.next_container_images.is_empty()
            || !self.next_container_ref_metadata.is_empty()
            || !self.next_container_resources.is_empty()
            || !self.next_container_restarts.is_empty()
    }

    /// [`Self::lifecycle_state_on_completion`] as a state: `None` when absent or not a
    /// state this version knows (then the completion leaves the label to the controller).
    pub fn lifecycle_on_completion(&self) -> Option<crate::LifecycleState> {
        self.lifecycle_state_on_completion
            .as_deref()
            .and_then(crate::LifecycleState::parse)
    }

    /// Reads the state from pod annotations (new key first, then the legacy one).
    pub fn from_annotations(
        annotations: &BTreeMap<String, String>,
    ) -> Option<Result<Self, serde_json::Error>> {
        annotations
            .get(crate::keys::INPLACE_UPDATE_STATE_ANNOTATION)
            .or_else(|| annotations.get(crate::keys::INPLACE_UPDATE_STATE_ANNOTATION_LEGACY))
            .map(|raw| serde_json::from_str(raw))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reference_state_json_round_trips_with_unknown_keys() -> Result<(), serde_json::Error> {
        let raw = r#"{"revision":"demo-67b9d8f6b7","updateTimestamp":"2026-01-02T03:04:05Z","lastContainerStatuses":{"main":{"imageID":"docker.io/library/nginx@sha256:abc"}},"updateImages":true,"containerBatchesRecord":[{"timestamp":"2026-01-02T03:04:05Z","containers":["main"]}],"futureKey":{"a":1}}"#;
        let state: InPlaceUpdateState = serde_json::from_str(raw)?;
        assert_eq!(state.revision, "demo-67b9d8f6b7");
        assert!(state.update_images);
        assert_eq!(
            state.last_container_statuses["main"].image_id,
            "docker.io/library/nginx@sha256:abc"
        );
        let back: Value = serde_json::to_value(&state)?;
        let orig: Value = serde_json::from_str(raw)?;
        assert_eq!(back, orig);
        Ok(())
    }

    #[test]
    fn the_lifecycle_state_on_completion_is_read_only_when_known() -> Result<(), serde_json::Error>
    {
        // (the field's JSON, the state read)
        let cases = [
            (r#""Normal""#, Some(crate::LifecycleState::Normal)),
            (r#""Updated""#, Some(crate::LifecycleState::Updated)),
            // a value a later version may write: the state stays readable, the field unused
            (r#""SomethingNew""#, None),
        ];
        for (field, want) in cases {
            let raw = format!(
                r#"{{"revision":"r","lastContainerStatuses":{{}},"lifecycleStateOnCompletion":{field}}}"#
            );
            let state: InPlaceUpdateState = serde_json::from_str(&raw)?;
            assert_eq!(state.lifecycle_on_completion(), want, "{field}");
            // written back as it was read
            assert_eq!(
                serde_json::to_value(&state)?,
                serde_json::from_str::<Value>(&raw)?
            );
        }
        // absent (a state written by the reference or an older version)
        let state: InPlaceUpdateState = serde_json::from_str(r#"{"revision":"r"}"#)?;
        assert_eq!(state.lifecycle_on_completion(), None);
        assert!(!serde_json::to_string(&state)?.contains("lifecycleStateOnCompletion"));
        Ok(())
    }
}
