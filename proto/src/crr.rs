//! `ContainerRecreateRequest` (`apps.kruise.io/v1alpha1`, namespaced): restart some
//! containers of one pod, done by the daemon of the pod's node.
//!
//! v1alpha1 wire format: the manager's bookkeeping that v1beta1 moved into status
//! (`containerStatusSnapshot`, the `PreRecreateGrace` condition) lives in the annotations
//! [`crate::keys::CRR_SYNC_CONTAINER_STATUSES_ANNOTATION`] (JSON list of
//! [`CrrSyncContainerStatus`]) and [`crate::keys::CRR_UNREADY_ACQUIRED_ANNOTATION`] (an
//! RFC 3339 time).
//!
//! The reference fills `preStop`, `ports` and `statusContext` of each container in its
//! mutating webhook and then keeps the whole spec immutable. inplace has no webhook: the
//! controller fills `statusContext` (and the labels) right after creation; `preStop` and
//! `ports` are not copied (the daemon takes the hook from the pod's spec). The spec is
//! immutable once `statusContext` is set (a CEL transition rule in [`crate::validation`]).

use k8s_openapi::api::core::v1::{ContainerPort, ExecAction, HTTPGetAction, TCPSocketAction};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The smallest `spec.activeDeadlineSeconds` the API accepts.
pub const MIN_ACTIVE_DEADLINE_SECONDS: i64 = 3;

/// The desired restart.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "apps.kruise.io",
    version = "v1alpha1",
    kind = "ContainerRecreateRequest",
    derive = "PartialEq",
    namespaced,
    shortname = "crr",
    status = "ContainerRecreateRequestStatus",
    printcolumn = r#"{"name":"PHASE","type":"string","jsonPath":".status.phase","description":"Phase of this ContainerRecreateRequest."}"#,
    printcolumn = r#"{"name":"POD","type":"string","jsonPath":".spec.podName","description":"Pod name of this ContainerRecreateRequest."}"#,
    printcolumn = r#"{"name":"NODE","type":"string","jsonPath":".metadata.labels.crr\\.apps\\.kruise\\.io/node-name","description":"Node name of this ContainerRecreateRequest."}"#,
    printcolumn = r#"{"name":"AGE","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct ContainerRecreateRequestSpec {
    /// The pod, in the CRR's namespace.
    #[schemars(length(min = 1))]
    pub pod_name: String,
    /// The containers to recreate, each at most once.
    #[schemars(length(min = 1))]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub containers: Vec<ContainerRecreateRequestContainer>,
    /// How to recreate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strategy: Option<ContainerRecreateRequestStrategy>,
    /// Seconds after creation at which an unfinished CRR is completed as failed; ≥ 3.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 3))]
    pub active_deadline_seconds: Option<i64>,
    /// Seconds after completion at which the CRR is deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_seconds_after_finished: Option<i32>,
}

/// One container to recreate.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ContainerRecreateRequestContainer {
    /// Container name in the pod.
    pub name: String,
    /// The container's preStop hook, copied from the pod (read-only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pre_stop: Option<ProbeHandler>,
    /// The container's ports, copied from the pod so that named ports resolve (read-only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ports: Vec<ContainerPort>,
    /// The container instance to recreate (read-only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_context: Option<ContainerRecreateRequestContainerContext>,
}

/// A preStop hook: exactly one handler is expected.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProbeHandler {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exec: Option<ExecAction>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_get: Option<HTTPGetAction>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp_socket: Option<TCPSocketAction>,
}

/// Identity of the container instance when the CRR was made.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ContainerRecreateRequestContainerContext {
    /// `<runtime>://<id>`.
    #[serde(rename = "containerID")]
    pub container_id: String,
    pub restart_count: i32,
}

/// `spec.strategy`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ContainerRecreateRequestStrategy {
    /// `Fail` (default): stop at the first failed container. `Ignore`: go on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_policy: Option<CrrFailurePolicy>,
    /// Recreate the next container only after the previous one is running again.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ordered_recreate: bool,
    /// Kill even if the container has not started yet / was already restarted.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub force_recreate: bool,
    /// Grace for preStop and stop; default the pod's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub termination_grace_period_seconds: Option<i64>,
    /// Keep the pod not-ready this long before recreating.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unready_grace_period_seconds: Option<i64>,
    /// Seconds a recreated container must have run to count as succeeded.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub min_started_seconds: i32,
}

fn is_zero(v: &i32) -> bool {
    *v == 0
}

/// `strategy.failurePolicy`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum CrrFailurePolicy {
    #[default]
    Fail,
    Ignore,
}

/// The observed state of the restart.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ContainerRecreateRequestStatus {
    pub phase: CrrPhase,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_time: Option<Time>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// Per-container progress.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub container_recreate_states: Vec<ContainerRecreateRequestContainerRecreateState>,
}

/// `status.phase` and `containerRecreateStates[].phase`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum CrrPhase {
    #[default]
    Pending,
    Recreating,
    Succeeded,
    Failed,
    Completed,
}

impl CrrPhase {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "Pending",
            Self::Recreating => "Recreating",
            Self::Succeeded => "Succeeded",
            Self::Failed => "Failed",
            Self::Completed => "Completed",
        }
    }
}

/// One container's progress.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ContainerRecreateRequestContainerRecreateState {
    pub name: String,
    pub phase: CrrPhase,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// The daemon has already stopped this container.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub is_killed: bool,
}

/// An entry of the [`crate::keys::CRR_SYNC_CONTAINER_STATUSES_ANNOTATION`] JSON list: the
/// manager's snapshot of a running container, read by the daemon.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CrrSyncContainerStatus {
    pub name: String,
    #[serde(default)]
    pub ready: bool,
    #[serde(default)]
    pub restart_count: i32,
    #[serde(default, rename = "containerID")]
    pub container_id: String,
}

impl ContainerRecreateRequest {
    /// `strategy.failurePolicy` with its default `Fail`.
    pub fn failure_policy(&self) -> CrrFailurePolicy {
        self.spec
            .strategy
            .as_ref()
            .and_then(|s| s.failure_policy)
            .unwrap_or_default()
    }

    /// `status.phase`, `Pending` while there is no status yet.
    pub fn phase(&self) -> CrrPhase {
        self.status.as_ref().map(|s| s.phase).unwrap_or_default()
    }

    /// The order in which one pod's requests are looked at (the reference's, used by the
    /// controller to pick the active request and by the daemon to run it): Completed,
    /// Recreating, Pending, then anything else; ties by creation time, then name.
    pub fn run_order_key(&self) -> (u8, Option<k8s_openapi::jiff::Timestamp>, String) {
        let rank = match self.phase() {
            CrrPhase::Completed => 0,
            CrrPhase::Recreating => 1,
            CrrPhase::Pending => 2,
            _ => 3,
        };
        (
            rank,
            self.metadata.creation_timestamp.as_ref().map(|t| t.0),
            self.metadata.name.clone().unwrap_or_default(),
        )
    }

    /// Completed (the terminal phase of the whole request).
    pub fn is_completed(&self) -> bool {
        self.phase() == CrrPhase::Completed
    }

    /// The manager's container snapshot from the sync annotation; `None` when absent.
    pub fn sync_container_statuses(
        &self,
    ) -> Option<Result<Vec<CrrSyncContainerStatus>, serde_json::Error>> {
        self.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(crate::keys::CRR_SYNC_CONTAINER_STATUSES_ANNOTATION))
            .map(|raw| serde_json::from_str(raw))
    }
}
