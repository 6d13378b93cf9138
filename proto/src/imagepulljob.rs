//! `ImagePullJob` (`apps.kruise.io/v1beta1`, namespaced): pull one image on a set of nodes.
//!
//! OpenKruise v1.9.0 serves the kind as `v1alpha1` and `v1beta1` and stores `v1beta1`; the
//! two have the same fields (its conversion copies each one), so the CRD declares both
//! with `conversion: None` and this type is the stored `v1beta1` ([`crate::crdgen`] writes
//! the `v1alpha1` entry from it). Field names and placement are the reference's wire format. Its Go type
//! inlines a `LabelSelector` into `selector` (next to `names`) and into `podSelector`, so
//! in JSON `matchLabels`/`matchExpressions` sit directly under those keys; the structs
//! here flatten them the same way.
//!
//! The reference's webhook defaults are CRD `default:`s ([`crate::defaults`]); the
//! accessor methods on [`ImagePullJob`] apply the same values when a field is absent (an
//! object read from a file, or stored before the CRD had them). Constraints that the
//! schema cannot express as keywords are CEL rules in [`crate::validation`].

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelectorRequirement, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Default `spec.parallelism`: one node at a time.
pub const DEFAULT_PARALLELISM: i32 = 1;
/// Default `spec.pullPolicy.timeoutSeconds` (per pull attempt).
pub const DEFAULT_PULL_TIMEOUT_SECONDS: i32 = 600;
/// Default `spec.pullPolicy.backoffLimit` (retries after the first attempt).
pub const DEFAULT_BACKOFF_LIMIT: i32 = 3;

/// The desired state of an ImagePullJob.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "apps.kruise.io",
    version = "v1beta1",
    kind = "ImagePullJob",
    derive = "PartialEq",
    namespaced,
    status = "ImagePullJobStatus",
    printcolumn = r#"{"name":"TOTAL","type":"integer","jsonPath":".status.desired","description":"Number of all nodes matched by this job"}"#,
    printcolumn = r#"{"name":"ACTIVE","type":"integer","jsonPath":".status.active","description":"Number of image pull tasks active"}"#,
    printcolumn = r#"{"name":"SUCCEED","type":"integer","jsonPath":".status.succeeded","description":"Number of image pull tasks succeeded"}"#,
    printcolumn = r#"{"name":"FAILED","type":"integer","jsonPath":".status.failed","description":"Number of image pull tasks failed"}"#,
    // v1.9.0's v1beta1 has no MESSAGE column; its v1alpha1 keeps one (crdgen adds it there).
    printcolumn = r#"{"name":"AGE","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct ImagePullJobSpec {
    /// The image to pull, `name[:tag|@digest]`.
    #[schemars(length(min = 1))]
    pub image: String,

    /// Names of Secrets in the job's namespace used to pull the image.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pull_secrets: Vec<String>,

    /// The nodes to pull on, by name or by labels (not both). Absent with `podSelector`
    /// absent means every node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<ImagePullJobNodeSelector>,

    /// Pull on the nodes that run active pods matching this selector (exclusive with
    /// `selector`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_selector: Option<ImagePullJobPodSelector>,

    /// Nodes pulling at the same time: an integer, default 1, 0 pauses the job. The wire
    /// type is int-or-string like the reference's, but only integers are valid (CEL rule).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parallelism: Option<IntOrString>,

    /// Per-node pull attempt timeout and retries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pull_policy: Option<PullPolicy>,

    /// When the job is complete and what happens afterwards. The reference's field is a
    /// required struct; here it is optional on the wire (an empty policy means the
    /// defaults), so that manifests that omit it are accepted rather than rejected.
    #[serde(default)]
    pub completion_policy: CompletionPolicy,

    /// Labels and annotations of the pull sandbox passed to the runtime.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox_config: Option<SandboxConfig>,

    /// `Always` re-pulls; `IfNotPresent` (default) skips nodes that have the image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_pull_policy: Option<ImagePullPolicy>,
}

/// `spec.selector`: node names, or a label selector over nodes (inlined), not both.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImagePullJobNodeSelector {
    /// Node names; unique.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    pub names: Vec<String>,
    /// Inlined `LabelSelector.matchLabels`. `Option` keeps "present but empty" apart from
    /// "absent", which the names-vs-labels exclusivity rule needs (as in the reference).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub match_labels: Option<BTreeMap<String, String>>,
    /// Inlined `LabelSelector.matchExpressions`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub match_expressions: Option<Vec<LabelSelectorRequirement>>,
}

/// `spec.podSelector`: a label selector over pods (inlined).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImagePullJobPodSelector {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub match_labels: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub match_expressions: Option<Vec<LabelSelectorRequirement>>,
}

/// `spec.pullPolicy`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PullPolicy {
    /// Seconds one pull attempt may take. Default 600.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_seconds: Option<i32>,
    /// Retries after a failed attempt. Default 3 (a negative value also means 3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff_limit: Option<i32>,
}

/// `spec.completionPolicy`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CompletionPolicy {
    /// `Always` (default): the job completes once every node is done. `Never`: it keeps
    /// pulling on nodes that appear later and never completes.
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub type_: Option<CompletionPolicyType>,
    /// With `Always`: seconds after `status.startTime` at which unfinished nodes fail.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_deadline_seconds: Option<i64>,
    /// With `Always`: seconds after completion at which the job is deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_seconds_after_finished: Option<i32>,
}

/// `completionPolicy.type`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum CompletionPolicyType {
    #[default]
    Always,
    Never,
}

/// Labels and annotations of the sandbox the runtime pulls in (`sandboxConfig`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SandboxConfig {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// `imagePullPolicy` of a job or of a NodeImage tag.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum ImagePullPolicy {
    Always,
    #[default]
    IfNotPresent,
}

/// The observed state of an ImagePullJob.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImagePullJobStatus {
    /// When the job was first seen by the controller.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
    /// When the job completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<Time>,
    /// Nodes matched by the job.
    #[serde(default)]
    pub desired: i32,
    /// Nodes pulling now.
    #[serde(default)]
    pub active: i32,
    /// Nodes that pulled the image.
    #[serde(default)]
    pub succeeded: i32,
    /// Nodes whose pull failed.
    #[serde(default)]
    pub failed: i32,
    /// A summary, mostly of failures.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// Names of the nodes whose pull failed, sorted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failed_nodes: Vec<String>,
}

impl ImagePullJob {
    /// `spec.parallelism` with its default of 1. A string value is invalid per the CRD;
    /// should one get through (a server without CEL), a string holding an integer is
    /// used and anything else means the default.
    pub fn parallelism(&self) -> i32 {
        match &self.spec.parallelism {
            None => DEFAULT_PARALLELISM,
            Some(IntOrString::Int(n)) => (*n).max(0),
            Some(IntOrString::String(s)) => s
                .parse::<i32>()
                .map(|n| n.max(0))
                .unwrap_or(DEFAULT_PARALLELISM),
        }
    }

    /// `spec.pullPolicy.timeoutSeconds` with its default of 600.
    pub fn timeout_seconds(&self) -> i32 {
        self.spec
            .pull_policy
            .as_ref()
            .and_then(|p| p.timeout_seconds)
            .unwrap_or(DEFAULT_PULL_TIMEOUT_SECONDS)
    }

    /// `spec.pullPolicy.backoffLimit` with its default of 3; negative values mean 3 too.
    pub fn backoff_limit(&self) -> i32 {
        match self.spec.pull_policy.as_ref().and_then(|p| p.backoff_limit) {
            Some(n) if n >= 0 => n,
            _ => DEFAULT_BACKOFF_LIMIT,
        }
    }

    /// `spec.completionPolicy.type` with its default `Always`.
    pub fn completion_type(&self) -> CompletionPolicyType {
        self.spec.completion_policy.type_.unwrap_or_default()
    }

    /// `spec.imagePullPolicy` with its default `IfNotPresent`.
    pub fn image_pull_policy(&self) -> ImagePullPolicy {
        self.spec.image_pull_policy.unwrap_or_default()
    }
}
