//! `NodeImage` (`apps.kruise.io/v1beta1`, cluster-scoped): the images one node should
//! have, named after the node. The controller writes `spec` (one tag entry per job that
//! wants it), the node's daemon pulls and writes `status`.
//!
//! OpenKruise v1.9.0 serves the kind as `v1alpha1` and `v1beta1` and stores `v1beta1`,
//! without a conversion webhook (`conversion: None`); the one field `v1alpha1` lacks is
//! `spec.images.*.pullSecrets[].mode`, which the API server prunes from what it returns
//! as `v1alpha1`. This type is the stored `v1beta1` ([`crate::crdgen`] writes the
//! `v1alpha1` entry from it).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use crate::imagepulljob::{ImagePullPolicy, SandboxConfig};

/// The images a node should pull, by image name (without tag).
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "apps.kruise.io",
    version = "v1beta1",
    kind = "NodeImage",
    derive = "PartialEq",
    status = "NodeImageStatus",
    printcolumn = r#"{"name":"DESIRED","type":"integer","jsonPath":".status.desired","description":"Number of all images on this node"}"#,
    printcolumn = r#"{"name":"PULLING","type":"integer","jsonPath":".status.pulling","description":"Number of image pull tasks active"}"#,
    printcolumn = r#"{"name":"SUCCEED","type":"integer","jsonPath":".status.succeeded","description":"Number of image pull tasks succeeded"}"#,
    printcolumn = r#"{"name":"FAILED","type":"integer","jsonPath":".status.failed","description":"Number of image pull tasks failed"}"#,
    printcolumn = r#"{"name":"AGE","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct NodeImageSpec {
    /// Image name (e.g. `docker.io/library/nginx`) to what to pull of it.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub images: BTreeMap<String, ImageSpec>,
}

/// The tags of one image to pull, and how.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImageSpec {
    /// Secrets to pull with (copied by the controller into the daemon's namespace).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pull_secrets: Vec<ReferenceObject>,
    /// One entry per tag; a tag appears once.
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["tag"]))]
    pub tags: Vec<ImageTagSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox_config: Option<SandboxConfig>,
}

/// A reference to a namespaced object (a pull Secret).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReferenceObject {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// How the secret is referenced (`batch` in OpenKruise v1.9's secret handling; kept
    /// verbatim). Only in `v1beta1`: read as `v1alpha1`, the API server leaves it out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
}

/// One tag to pull, with the jobs that asked for it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImageTagSpec {
    /// The tag (or digest) to pull.
    #[schemars(length(min = 1))]
    pub tag: String,
    /// When this tag entry was added (the controller times out silent daemons from it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_at: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pull_policy: Option<ImageTagPullPolicy>,
    /// The ImagePullJobs that want this tag.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub owner_references: Vec<ObjectReference>,
    /// Bumped to ask for a new pull of a tag that is already listed.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub version: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_pull_policy: Option<ImagePullPolicy>,
}

fn is_zero(v: &i64) -> bool {
    *v == 0
}

/// `tags[].pullPolicy` as the controller computed it from the job.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImageTagPullPolicy {
    /// Seconds one attempt may take (default 600).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_seconds: Option<i32>,
    /// Retries after the first attempt (default 3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff_limit: Option<i32>,
    /// Seconds after completion at which the controller removes the tag entry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_seconds_after_finished: Option<i32>,
    /// Seconds after which an unfinished pull fails.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_deadline_seconds: Option<i64>,
}

/// The observed state of a node's images, written by its daemon.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeImageStatus {
    /// Tags listed in spec.
    #[serde(default)]
    pub desired: i32,
    #[serde(default, skip_serializing_if = "is_zero_i32")]
    pub succeeded: i32,
    #[serde(default, skip_serializing_if = "is_zero_i32")]
    pub failed: i32,
    #[serde(default, skip_serializing_if = "is_zero_i32")]
    pub pulling: i32,
    #[serde(default, skip_serializing_if = "is_zero_i32")]
    pub waiting: i32,
    /// Image name to the state of its tags.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub image_statuses: BTreeMap<String, ImageStatus>,
    /// The daemon's first sync of this node's images.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_sync_status: Option<SyncStatus>,
}

fn is_zero_i32(v: &i32) -> bool {
    *v == 0
}

/// The state of the tags of one image.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImageStatus {
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["tag"]))]
    pub tags: Vec<ImageTagStatus>,
}

/// The state of one tag's pull.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImageTagStatus {
    pub tag: String,
    pub phase: ImagePullPhase,
    /// Percent done, 0–100 (CRI pulls jump from 0 to 100).
    #[serde(default, skip_serializing_if = "is_zero_i32")]
    #[schemars(range(min = 0, max = 100))]
    pub progress: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<Time>,
    /// The spec tag `version` this state is for.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub version: i64,
    /// `<name>@<id>` of the pulled image.
    #[serde(default, rename = "imageID", skip_serializing_if = "String::is_empty")]
    pub image_id: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

/// `imageStatuses[].tags[].phase`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum ImagePullPhase {
    #[default]
    Waiting,
    Pulling,
    Succeeded,
    Failed,
}

impl ImagePullPhase {
    /// Succeeded or Failed.
    pub fn is_finished(self) -> bool {
        matches!(self, Self::Succeeded | Self::Failed)
    }
}

/// `status.firstSyncStatus`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SyncStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sync_at: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<SyncStatusPhase>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

/// `firstSyncStatus.status`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum SyncStatusPhase {
    Succeeded,
    Failed,
}

impl NodeImage {
    /// The spec entry of `image`'s `tag`, if listed.
    pub fn tag_spec(&self, image: &str, tag: &str) -> Option<&ImageTagSpec> {
        self.spec
            .images
            .get(image)
            .and_then(|i| i.tags.iter().find(|t| t.tag == tag))
    }

    /// The status entry of `image`'s `tag`, if reported.
    pub fn tag_status(&self, image: &str, tag: &str) -> Option<&ImageTagStatus> {
        self.status
            .as_ref()
            .and_then(|s| s.image_statuses.get(image))
            .and_then(|i| i.tags.iter().find(|t| t.tag == tag))
    }
}
