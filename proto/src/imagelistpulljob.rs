//! `ImageListPullJob` (`apps.kruise.io/v1beta1`, namespaced): pull a list of images on a
//! set of nodes, as one ImagePullJob per image.
//!
//! OpenKruise v1.9.0 serves the kind as `v1alpha1` and `v1beta1` with the same schema and
//! stores `v1beta1` (its CRD under `config/crd/bases`); the CRD declares both with
//! `conversion: None` ([`crate::crdgen`]). The reference's Go spec is `images` plus an
//! inlined `ImagePullJobTemplate`, the fields an [`ImagePullJobSpec`] has besides `image`;
//! they are written out here with the same wire names and types, and
//! [`ImageListPullJob::job_spec`] builds the per-image job spec from them.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::imagepulljob::{
    CompletionPolicy, CompletionPolicyType, ImagePullJobNodeSelector, ImagePullJobPodSelector,
    ImagePullJobSpec, ImagePullPolicy, PullPolicy, SandboxConfig,
};

/// Most images one list may hold (the reference's validating webhook).
pub const MAX_IMAGES: i64 = 255;

/// The desired state of an ImageListPullJob.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "apps.kruise.io",
    version = "v1beta1",
    kind = "ImageListPullJob",
    derive = "PartialEq",
    namespaced,
    status = "ImageListPullJobStatus",
    printcolumn = r#"{"name":"TOTAL","type":"integer","jsonPath":".status.desired","description":"Number of image pull job"}"#,
    printcolumn = r#"{"name":"SUCCEEDED","type":"integer","jsonPath":".status.succeeded","description":"Number of image pull job succeeded"}"#,
    printcolumn = r#"{"name":"COMPLETED","type":"integer","jsonPath":".status.completed","description":"Number of ImagePullJobs which are finished"}"#,
    printcolumn = r#"{"name":"AGE","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct ImageListPullJobSpec {
    /// The images to pull, `name[:tag|@digest]` each; unique, 1 to 255 of them.
    #[schemars(length(min = 1, max = 255))]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    pub images: Vec<String>,

    /// Names of Secrets in the job's namespace used to pull the images.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pull_secrets: Vec<String>,

    /// The nodes to pull on, by name or by labels (not both).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<ImagePullJobNodeSelector>,

    /// Pull on the nodes that run active pods matching this selector.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_selector: Option<ImagePullJobPodSelector>,

    /// Nodes pulling at the same time, per image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parallelism: Option<IntOrString>,

    /// Per-node pull attempt timeout and retries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pull_policy: Option<PullPolicy>,

    /// When each image's job, and so the list, is complete, and what happens afterwards.
    #[serde(default)]
    pub completion_policy: CompletionPolicy,

    /// Labels and annotations of the pull sandbox passed to the runtime.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox_config: Option<SandboxConfig>,

    /// `Always` re-pulls; `IfNotPresent` (the jobs' default) skips nodes that have the image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_pull_policy: Option<ImagePullPolicy>,
}

/// The observed state of an ImageListPullJob.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImageListPullJobStatus {
    /// When the list job was first seen by the controller.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    /// When every image's job had finished (not with completion type `Never`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<Time>,
    /// ImagePullJobs wanted: the number of images.
    pub desired: i32,
    /// Started jobs with a node pulling now.
    #[serde(default)]
    pub active: i32,
    /// Started jobs whose every node succeeded or failed.
    #[serde(default)]
    pub completed: i32,
    /// Started jobs whose every node succeeded.
    #[serde(default)]
    pub succeeded: i32,
    /// The jobs with failed nodes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failed_image_statuses: Vec<FailedImageStatus>,
}

/// One image whose job has failed nodes.
#[derive(
    Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub struct FailedImageStatus {
    /// The name of the ImagePullJob.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub image_pull_job: String,
    /// The image.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// Where to look for the failed nodes.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

impl ImageListPullJobSpec {
    /// The spec of the ImagePullJob of `image`: the template fields copied as they are.
    pub fn job_spec(&self, image: &str) -> ImagePullJobSpec {
        ImagePullJobSpec {
            image: image.to_owned(),
            pull_secrets: self.pull_secrets.clone(),
            selector: self.selector.clone(),
            pod_selector: self.pod_selector.clone(),
            parallelism: self.parallelism.clone(),
            pull_policy: self.pull_policy.clone(),
            completion_policy: self.completion_policy.clone(),
            sandbox_config: self.sandbox_config.clone(),
            image_pull_policy: self.image_pull_policy,
        }
    }
}

impl ImageListPullJob {
    /// `spec.completionPolicy.type` with its default `Always`.
    pub fn completion_type(&self) -> CompletionPolicyType {
        self.spec.completion_policy.type_.unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_job_spec_carries_every_template_field() -> Result<(), serde_json::Error> {
        let list: ImageListPullJobSpec = serde_json::from_value(serde_json::json!({
            "images": ["a:1", "b:2"],
            "pullSecrets": ["s"],
            "selector": {"names": ["n1"]},
            "parallelism": 2,
            "pullPolicy": {"timeoutSeconds": 30, "backoffLimit": 1},
            "completionPolicy": {"type": "Always", "ttlSecondsAfterFinished": 5, "activeDeadlineSeconds": 60},
            "sandboxConfig": {"labels": {"l": "v"}},
            "imagePullPolicy": "Always",
        }))?;
        let mut want = serde_json::to_value(&list)?;
        if let Some(o) = want.as_object_mut() {
            o.remove("images");
            o.insert("image".into(), "b:2".into());
        }
        assert_eq!(serde_json::to_value(list.job_spec("b:2"))?, want);
        Ok(())
    }
}
