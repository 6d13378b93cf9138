//! `CloneSet` (`apps.kruise.io/v1alpha1`): spec and status with the reference's JSON names.
//!
//! Validation that the CRD schema can express lives in attributes here (minimums,
//! enums, list types) and in the CEL rules of [`crate::crdgen`]; what no schema can
//! express is the planner's job, which reports it as a condition.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::template::{ClaimTemplate, PodTemplate};

/// The desired state of a CloneSet.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "apps.kruise.io",
    version = "v1alpha1",
    kind = "CloneSet",
    derive = "PartialEq",
    namespaced,
    shortname = "clone",
    status = "CloneSetStatus",
    scale = r#"{"specReplicasPath":".spec.replicas","statusReplicasPath":".status.replicas","labelSelectorPath":".status.labelSelector"}"#,
    printcolumn = r#"{"name":"DESIRED","type":"integer","jsonPath":".spec.replicas","description":"The desired number of pods."}"#,
    printcolumn = r#"{"name":"UPDATED","type":"integer","jsonPath":".status.updatedReplicas","description":"The number of pods updated."}"#,
    printcolumn = r#"{"name":"UPDATED_READY","type":"integer","jsonPath":".status.updatedReadyReplicas","description":"The number of pods updated and ready."}"#,
    printcolumn = r#"{"name":"UPDATED_AVAILABLE","type":"integer","jsonPath":".status.updatedAvailableReplicas","description":"The number of pods updated and available."}"#,
    printcolumn = r#"{"name":"READY","type":"integer","jsonPath":".status.readyReplicas","description":"The number of pods ready."}"#,
    printcolumn = r#"{"name":"TOTAL","type":"integer","jsonPath":".status.replicas","description":"The number of currently all pods."}"#,
    printcolumn = r#"{"name":"AGE","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    printcolumn = r#"{"name":"CONTAINERS","type":"string","priority":1,"jsonPath":".spec.template.spec.containers[*].name","description":"The containers of currently cloneset."}"#,
    printcolumn = r#"{"name":"IMAGES","type":"string","priority":1,"jsonPath":".spec.template.spec.containers[*].image","description":"The images of currently cloneset."}"#,
    printcolumn = r#"{"name":"SELECTOR","type":"string","priority":1,"jsonPath":".status.labelSelector","description":"The selector of currently cloneset."}"#
)]
#[serde(rename_all = "camelCase")]
pub struct CloneSetSpec {
    /// Desired number of pods. Defaults to 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub replicas: Option<i32>,

    /// Label query over pods that should match the replica count.
    pub selector: LabelSelector,

    /// The object that describes the pod that will be created.
    pub template: PodTemplate,

    /// Claims that pods are allowed to reference; one PVC per template per pod.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volume_claim_templates: Vec<ClaimTemplate>,

    /// How pods are created and deleted when scaling.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale_strategy: Option<CloneSetScaleStrategy>,

    /// How pods are updated to a new revision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub update_strategy: Option<CloneSetUpdateStrategy>,

    /// ControllerRevisions to keep beyond the live ones. Defaults to 10.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub revision_history_limit: Option<i32>,

    /// Seconds a new pod must be ready, without any container crashing, to count as available.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub min_ready_seconds: Option<i32>,

    /// Hooks around pod creation, in-place update and deletion.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lifecycle: Option<Lifecycle>,

    /// Seconds a rollout may take without progress before Progressing turns False.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub progress_deadline_seconds: Option<i32>,
}

/// `spec.scaleStrategy`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CloneSetScaleStrategy {
    /// Names of pods to delete first; cleared by the controller once they are gone.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    pub pods_to_delete: Vec<String>,

    /// Limit of pods being created at once while scaling up (number or percent of replicas).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_unavailable: Option<IntOrString>,

    /// Delete, rather than reuse, the PVCs of a pod that disappeared.
    #[serde(
        default,
        rename = "disablePVCReuse",
        skip_serializing_if = "std::ops::Not::not"
    )]
    pub disable_pvc_reuse: bool,
}

/// `spec.updateStrategy.type`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum CloneSetUpdateStrategyType {
    /// Delete old pods (and their PVCs) and create new ones.
    #[default]
    ReCreate,
    /// Update in place when only in-place-updatable fields changed, else recreate.
    InPlaceIfPossible,
    /// Always update in place; other template changes are refused.
    InPlaceOnly,
    /// Never update pods; users delete them to roll out.
    OnDelete,
}

impl CloneSetUpdateStrategyType {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ReCreate => "ReCreate",
            Self::InPlaceIfPossible => "InPlaceIfPossible",
            Self::InPlaceOnly => "InPlaceOnly",
            Self::OnDelete => "OnDelete",
        }
    }
}

/// `spec.updateStrategy`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CloneSetUpdateStrategy {
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub type_: Option<CloneSetUpdateStrategyType>,

    /// Desired number or percent of pods kept on old revisions. Defaults to 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition: Option<IntOrString>,

    /// Maximum pods unavailable during the update. Defaults to 20%.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_unavailable: Option<IntOrString>,

    /// Maximum pods above replicas during the update. Defaults to 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_surge: Option<IntOrString>,

    /// Stop updating pods; scaling continues.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub paused: bool,

    /// Update order by weight or by an ordered label key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_strategy: Option<UpdatePriorityStrategy>,

    /// Spread pods matching these terms evenly through the update order. A `key`/`value`
    /// pair appears once: a list-type map keyed by both (the API server rejects
    /// duplicates; both keys are required fields, as list-map keys must be).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["key", "value"]))]
    pub scatter_strategy: Vec<UpdateScatterTerm>,

    /// Tuning of in-place updates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_place_update_strategy: Option<InPlaceUpdateStrategy>,
}

/// `updateStrategy.priorityStrategy`: weight or order, never both.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UpdatePriorityStrategy {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub weight_priority: Vec<UpdatePriorityWeightTerm>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub order_priority: Vec<UpdatePriorityOrderTerm>,
}

/// A weighted selector: pods matching more weight update first.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UpdatePriorityWeightTerm {
    #[schemars(range(min = 0, max = 100))]
    pub weight: i32,
    pub match_selector: LabelSelector,
}

/// An ordered label key: the integer in its value orders pods, larger first.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UpdatePriorityOrderTerm {
    #[schemars(length(min = 1))]
    pub ordered_key: String,
}

/// A label key/value whose pods are scattered through the update order.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct UpdateScatterTerm {
    #[schemars(length(min = 1))]
    pub key: String,
    pub value: String,
}

/// `updateStrategy.inPlaceUpdateStrategy`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InPlaceUpdateStrategy {
    /// Seconds between marking a pod not ready and patching its spec.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub grace_period_seconds: Option<i32>,
}

/// `spec.lifecycle`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Lifecycle {
    /// Hook before a pod is deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pre_delete: Option<LifecycleHook>,
    /// Hook before a pod is updated in place and after it has been updated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_place_update: Option<LifecycleHook>,
    /// Hook after a pod is created, before it counts as Normal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pre_normal: Option<LifecycleHook>,
}

/// A lifecycle hook: a pod "matches" it while it carries any of these labels or finalizers.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LifecycleHook {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels_handler: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub finalizers_handler: Vec<String>,
    /// Set `KruisePodReady` False while the pod is PreparingDelete / PreparingUpdate.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub mark_pod_not_ready: bool,
}

/// The value of the `lifecycle.apps.kruise.io/state` pod label.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
pub enum LifecycleState {
    PreparingNormal,
    Normal,
    PreparingUpdate,
    Updating,
    Updated,
    PreparingDelete,
}

impl LifecycleState {
    /// The value of [`crate::keys::LIFECYCLE_TIMESTAMP_ANNOTATION`] for a state change at
    /// `at`: RFC 3339 in UTC, whole seconds (the reference's format). One format for every
    /// writer of the annotation (the controller's lifecycle and in-place writes, the
    /// daemon's completion).
    pub fn timestamp(at: k8s_openapi::jiff::Timestamp) -> String {
        at.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
    }

    pub const ALL: [Self; 6] = [
        Self::PreparingNormal,
        Self::Normal,
        Self::PreparingUpdate,
        Self::Updating,
        Self::Updated,
        Self::PreparingDelete,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::PreparingNormal => "PreparingNormal",
            Self::Normal => "Normal",
            Self::PreparingUpdate => "PreparingUpdate",
            Self::Updating => "Updating",
            Self::Updated => "Updated",
            Self::PreparingDelete => "PreparingDelete",
        }
    }

    /// Parses a label value; unknown values are `None` (treated like no state).
    pub fn parse(value: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.as_str() == value)
    }
}

impl std::fmt::Display for LifecycleState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The observed state of a CloneSet.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CloneSetStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Number of pods.
    #[serde(default)]
    pub replicas: i32,
    /// Pods Running and Ready (with InPlaceUpdateReady absent or True).
    #[serde(default)]
    pub ready_replicas: i32,
    /// Ready pods that have been ready for minReadySeconds and are in state Normal.
    #[serde(default)]
    pub available_replicas: i32,
    /// Pods on the update revision.
    #[serde(default)]
    pub updated_replicas: i32,
    /// Ready pods on the update revision.
    #[serde(default)]
    pub updated_ready_replicas: i32,
    /// Available pods on the update revision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_available_replicas: Option<i32>,
    /// Pods updated, or to be updated, under the current partition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_updated_replicas: Option<i32>,
    /// Revision that all pods had before the latest change of the template.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_revision: Option<String>,
    /// Revision generated from the current template.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub update_revision: Option<String>,
    /// Hash collisions met when naming revisions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub collision_count: Option<i32>,
    /// The selector as a string, for the scale subresource.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<CloneSetCondition>,
}

/// A CloneSet status condition.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CloneSetCondition {
    #[serde(rename = "type")]
    pub type_: String,
    /// "True", "False" or "Unknown".
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_update_time: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

impl CloneSet {
    /// `spec.replicas` with its default of 1.
    pub fn replicas(&self) -> i32 {
        self.spec.replicas.unwrap_or(1)
    }

    /// `spec.updateStrategy.type` with its default ReCreate.
    pub fn update_type(&self) -> CloneSetUpdateStrategyType {
        self.spec
            .update_strategy
            .as_ref()
            .and_then(|s| s.type_)
            .unwrap_or_default()
    }

    /// `spec.revisionHistoryLimit` with its default of 10.
    pub fn revision_history_limit(&self) -> i32 {
        self.spec.revision_history_limit.unwrap_or(10)
    }

    /// `spec.minReadySeconds` with its default of 0.
    pub fn min_ready_seconds(&self) -> i32 {
        self.spec.min_ready_seconds.unwrap_or(0)
    }

    /// The v1alpha1 label switch that excludes PreparingDelete pods from `replicas`.
    pub fn excludes_preparing_delete(&self) -> bool {
        self.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(crate::keys::SCALING_EXCLUDE_PREPARING_DELETE_LABEL))
            .is_some_and(|v| v == "true")
    }
}
