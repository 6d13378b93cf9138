//! The writes of an in-place update, planned whole: for each in-place action of a plan
//! ([`Action::Update`] in place, [`Action::ApplyGracedUpdate`],
//! [`Action::ApplyNextContainerBatch`]) the pod patch the applier sends, its target and
//! precondition, whether `InPlaceUpdateReady` goes False first, the `pods/resize` write
//! after it, and the guard a conflict re-read is judged by.
//!
//! Starting an update ([`start`]): the change is the planner's in-place decision
//! ([`super::inplace::decide_for_revisions`]) in the shape of the reference's `UpdateSpec`
//! ([`spec_from_change`]), with the CloneSet's grace period. One patch carries the revision
//! labels, lifecycle Updating with its timestamp, and either the spec itself or, during a
//! grace period, the held spec in the grace annotation (with the state). Gated pods (with
//! the `InPlaceUpdateReady` readiness gate) get that condition False first, so endpoints
//! drop the pod before its containers restart, except for a change of resources alone
//! (no restart).
//!
//! Writing a spec onto the pod (the reference's `PatchSpecToPod`, [`patch_spec`]):
//! - container launch priority: only the first batch now ([`container_batches::split`]
//!   by the priorities of the target revision's template), the rest in the state;
//! - `lastContainerStatuses`: the containers whose image changes or that restart (with the
//!   id of the container running now, from the pod's container statuses: the kubelet
//!   replaces it) and those resized (no restart: no id);
//! - metadata: the template's keys, except that our own bookkeeping keys already in the
//!   patch win; keys a container's env reads go with that container's batch;
//! - the state annotation (with the batch record), the grace annotations removed.
//!
//! A held update ([`apply_held`]) is written once its grace period is over, unless the
//! pod moved to another revision meanwhile (then the grace annotation is dropped). The
//! next container batch ([`next_batch`]) is what the state still holds, split again.
//!
//! Resources: through `pods/resize` after the patch where the server serves it
//! ([`PlanOptions::pod_resize`]); else into the patch's containers (of those whose image
//! changes too) when `InPlaceWorkloadVerticalScaling` is on; else not at all.
//!
//! Timestamps are the plan's clock. A write for a pod re-read after a conflict is planned
//! again by the same functions from the pod as read.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use inplace_proto::{
    CloneSet, InPlaceUpdateContainerStatus, InPlaceUpdateGrace, InPlaceUpdateState, LifecycleState,
    keys,
};
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::{Pod, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use serde::Serialize;
use serde_json::{Value, json};

use super::container_batches;
use super::inplace::{InPlaceChange, InPlaceDecision, decide_for_revisions};
use super::model::{Action, PlanOptions, PodFacts, UpdateMethod, revision_matches};
use crate::cached::CachedPod;

/// An in-place write that cannot be planned for the pod as it is.
#[derive(Debug, thiserror::Error)]
pub enum InPlaceWriteError {
    /// The change cannot go in place (any more).
    #[error("pod {pod} cannot be updated in place: {reason}")]
    Refused { pod: String, reason: String },
    /// An annotation the write works from is absent from the pod.
    #[error("{what} of pod {pod} is missing")]
    AnnotationMissing { pod: String, what: &'static str },
    /// An annotation the write works from cannot be read.
    #[error("{what} of pod {pod} cannot be read: {source}")]
    BadAnnotation {
        pod: String,
        what: &'static str,
        #[source]
        source: serde_json::Error,
    },
    #[error("encoding {what}: {source}")]
    Encode {
        what: &'static str,
        #[source]
        source: serde_json::Error,
    },
}

/// What an in-place write is planned from besides the pod.
#[derive(Clone, Copy, Debug)]
pub struct WriteInputs<'a> {
    pub cloneset: &'a CloneSet,
    pub revisions: &'a [ControllerRevision],
    pub update_revision: &'a str,
    pub options: &'a PlanOptions,
    /// The plan's clock: every timestamp of the write.
    pub now: Timestamp,
}

/// Which in-place action a write belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum InPlaceWriteKind {
    /// Start the update (`Action::Update` in place).
    Start,
    /// Write the update held during the grace period (`Action::ApplyGracedUpdate`).
    ApplyHeld,
    /// The next container batch (`Action::ApplyNextContainerBatch`).
    NextBatch,
}

/// How the cpu/memory change of the write reaches the pod.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum ResizeVia {
    /// A patch of `pods/resize`, after the pod patch.
    Subresource,
    /// In the pod patch's containers.
    Spec,
    /// Nowhere: the server has no `pods/resize` and spec changes of resources are off.
    Unsupported,
}

/// What the applier sends after an in-place write's pod patch ([`InPlaceWrite::after_patch`]).
#[derive(Clone, Debug, PartialEq)]
pub enum AfterPatch {
    Nothing,
    /// The resources should change but cannot: the applier warns.
    ResizeUnsupported,
    /// The strategic merge patch of `pods/resize`.
    Resize(Value),
}

/// The resources of an in-place write.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Resize {
    pub via: ResizeVia,
    pub containers: BTreeMap<String, ResourceRequirements>,
}

/// A container's image in the pod spec, as the guard compares it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SpecImage {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
}

/// What a pod re-read after a conflicting write must still have for the write (planned
/// again from it) to go ahead: everything the decision and the patch read. What may
/// differ: anything else the kubelet writes to the status (Ready, probe times).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Guard {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub revision_label: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lifecycle_label: Option<String>,
    /// Container name → imageID of the status, sorted by name. (A list, not a map: a
    /// map of one container allocates a whole tree node, and a plan makes thousands.)
    #[serde(serialize_with = "as_map")]
    pub image_ids: Vec<(String, String)>,
    /// The spec's containers, in order.
    pub images: Vec<SpecImage>,
}

impl Guard {
    /// The guard of a cached pod. (The cached strings are `Arc<str>`, copied with
    /// `String::from`: their `to_string` would go through the formatter, for every write
    /// of a plan.)
    pub fn of_cached(pod: &CachedPod) -> Self {
        let labels = pod.label_map();
        Self {
            uid: pod.metadata.uid.clone(),
            revision_label: labels.get(keys::REVISION_LABEL).map(str::to_owned),
            lifecycle_label: labels.get(keys::LIFECYCLE_STATE_LABEL).map(str::to_owned),
            image_ids: by_name(
                pod.container_statuses()
                    .iter()
                    .map(|c| (String::from(&*c.name), String::from(&*c.image_id))),
            ),
            images: pod
                .containers()
                .iter()
                .map(|c| SpecImage {
                    name: String::from(&*c.name),
                    image: c.image.as_deref().map(str::to_owned),
                })
                .collect(),
        }
    }

    /// The guard of a full pod.
    pub fn of_pod(pod: &Pod) -> Self {
        let labels = pod.metadata.labels.as_ref();
        let label = |k: &str| labels.and_then(|l| l.get(k)).cloned();
        Self {
            uid: pod.metadata.uid.clone(),
            revision_label: label(keys::REVISION_LABEL),
            lifecycle_label: label(keys::LIFECYCLE_STATE_LABEL),
            image_ids: by_name(
                pod.status
                    .as_ref()
                    .and_then(|s| s.container_statuses.as_ref())
                    .into_iter()
                    .flatten()
                    .map(|c| (c.name.clone(), c.image_id.clone())),
            ),
            images: pod
                .spec
                .iter()
                .flat_map(|s| s.containers.iter())
                .map(|c| SpecImage {
                    name: c.name.clone(),
                    image: c.image.clone(),
                })
                .collect(),
        }
    }

    /// The image ID of container `name`'s status.
    pub fn image_id(&self, name: &str) -> Option<&str> {
        self.image_ids
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, id)| id.as_str())
    }

    /// Whether the write may go to `fresh` (the pod as the API server has it now): the same
    /// pod (UID), not terminating, on the same revision and lifecycle state, every
    /// container on the same image ID and spec image, and with `gate_set`,
    /// `InPlaceUpdateReady` still False (the spec never changes on a pod the endpoints
    /// still count as ready).
    pub fn holds(&self, fresh: &Pod, gate_set: bool) -> Result<(), String> {
        let now = Self::of_pod(fresh);
        if now.uid != self.uid {
            return Err("the pod was replaced (other UID)".into());
        }
        if fresh.metadata.deletion_timestamp.is_some() {
            return Err("the pod is terminating".into());
        }
        for (label, was, is) in [
            (
                keys::REVISION_LABEL,
                &self.revision_label,
                &now.revision_label,
            ),
            (
                keys::LIFECYCLE_STATE_LABEL,
                &self.lifecycle_label,
                &now.lifecycle_label,
            ),
        ] {
            if was != is {
                return Err(format!("label {label} changed"));
            }
        }
        if now.image_ids != self.image_ids {
            return Err("a container's image ID changed".into());
        }
        if now.images != self.images {
            return Err("a container's spec image changed".into());
        }
        if gate_set {
            let gate = fresh
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .and_then(|c| {
                    c.iter()
                        .find(|c| c.type_ == keys::INPLACE_UPDATE_READY_CONDITION)
                });
            if gate.is_none_or(|c| c.status != "False") {
                return Err(format!(
                    "{} is no longer False",
                    keys::INPLACE_UPDATE_READY_CONDITION
                ));
            }
        }
        Ok(())
    }
}

/// (name, value) pairs sorted by name, the last of a name kept (as a map built from them
/// would hold them).
fn by_name(pairs: impl Iterator<Item = (String, String)>) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = pairs.collect();
    // Stable: of equal names the last stays last, and `dedup_by` keeps the first of a run.
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out.reverse();
    out.dedup_by(|later, earlier| later.0 == earlier.0);
    out.reverse();
    out
}

/// Serialises (name, value) pairs as a JSON object.
fn as_map<S: serde::Serializer>(
    pairs: &[(String, String)],
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.collect_map(pairs.iter().map(|(k, v)| (k, v)))
}

/// Whether an in-place update planned from `planned` may be written to `fresh` (the pod as
/// the API server has it now): the guard of `planned` ([`Guard::holds`]).
pub fn still_updatable(planned: &Pod, fresh: &Pod, gate_set: bool) -> Result<(), String> {
    Guard::of_pod(planned).holds(fresh, gate_set)
}

/// Everything one in-place action writes.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InPlaceWrite {
    /// The index of the action in the plan's actions (not shown: the write is shown with
    /// its step).
    #[serde(skip)]
    pub action: usize,
    pub kind: InPlaceWriteKind,
    pub pod: String,
    /// The pod version decided from: the precondition of the patch (and of the
    /// `InPlaceUpdateReady` write before it).
    pub resource_version: String,
    /// The revision the pod moves to.
    pub revision: String,
    /// `InPlaceUpdateReady` (and `Ready`) False first, on `pods/status`.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub not_ready_first: bool,
    /// The strategic merge patch of the pod (without its precondition).
    pub patch: PodPatch,
    /// The cpu/memory change, when there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resize: Option<Resize>,
    pub guard: Guard,
}

impl InPlaceWrite {
    /// The patch pinned to `resource_version`.
    pub fn pinned_patch(&self, resource_version: &str) -> Value {
        let mut body = self.patch.to_value();
        body["metadata"]["resourceVersion"] = json!(resource_version);
        body
    }

    /// The `pods/status` patch written first when [`Self::not_ready_first`]:
    /// `InPlaceUpdateReady` and `Ready` False (endpoints drop the pod before its
    /// containers restart), pinned to `resource_version`, at the write time `now`.
    pub fn not_ready_patch(resource_version: &str, now: &Time) -> Value {
        json!({
            "metadata": {"resourceVersion": resource_version},
            "status": {"conditions": [
                {"type": keys::INPLACE_UPDATE_READY_CONDITION, "status": "False",
                 "reason": keys::START_INPLACE_UPDATE_REASON, "message": null,
                 "lastTransitionTime": now},
                {"type": "Ready", "status": "False", "reason": "ReadinessGatesNotReady",
                 "message": format!("the status of pod readiness gate \"{}\" is not \"True\", but False", keys::INPLACE_UPDATE_READY_CONDITION),
                 "lastTransitionTime": now},
            ]}
        })
    }

    /// Whether the write applies the spec (a held update of another revision is only
    /// dropped: it writes no state, and nothing follows it).
    pub fn applies_spec(&self) -> bool {
        self.kind != InPlaceWriteKind::ApplyHeld
            || self
                .patch
                .writes_annotation(keys::INPLACE_UPDATE_STATE_ANNOTATION)
    }

    /// The same write planned again from `pod`, read after a conflict (the write time
    /// `inputs.now`).
    pub fn replan(&self, inputs: &WriteInputs, pod: &CachedPod) -> Result<Self, InPlaceWriteError> {
        match self.kind {
            InPlaceWriteKind::Start => start(inputs, pod, self.action, &self.revision),
            InPlaceWriteKind::ApplyHeld => apply_held(inputs, pod, self.action),
            InPlaceWriteKind::NextBatch => next_batch(inputs, pod, self.action),
        }
    }

    /// What follows the pod patch: nothing after a held update of another revision that
    /// is only dropped, or when the resources change in the pod patch or not at all; a
    /// warning when they cannot change (no `pods/resize` on the server); else the
    /// `pods/resize` patch.
    pub fn after_patch(&self) -> AfterPatch {
        if !self.applies_spec() {
            return AfterPatch::Nothing;
        }
        if self.resize.as_ref().map(|r| r.via) == Some(ResizeVia::Unsupported) {
            return AfterPatch::ResizeUnsupported;
        }
        self.resize_patch()
            .map_or(AfterPatch::Nothing, AfterPatch::Resize)
    }

    /// The strategic merge patch of `pods/resize` that follows the pod patch, if any.
    pub fn resize_patch(&self) -> Option<Value> {
        let containers: Vec<Value> = self
            .resize_subresource()?
            .iter()
            .map(|(name, r)| json!({"name": name, "resources": r}))
            .collect();
        Some(json!({"spec": {"containers": containers}}))
    }

    /// The `pods/resize` write after the patch, if any.
    pub fn resize_subresource(&self) -> Option<&BTreeMap<String, ResourceRequirements>> {
        self.resize
            .as_ref()
            .filter(|r| r.via == ResizeVia::Subresource)
            .map(|r| &r.containers)
    }
}

/// The strategic merge patch of an in-place write. The writes starting the pods of one
/// revision pair differ in the state annotation alone: they share the rest of the patch
/// ([`Prepared`]), instead of each holding a copy. A copy of a JSON tree is an allocation
/// per object and per string (some 4.5 KB a write), and a plan of 100,000 pods starts
/// thousands: the copies took more than half the time of their writes, and at 5,000
/// writes more memory than the processor's cache holds. The applier makes the pod's own
/// copy when it sends the write ([`InPlaceWrite::pinned_patch`]), as it did before.
#[derive(Clone, Debug)]
pub struct PodPatch {
    /// The patch, shared by the writes of a revision pair.
    shared: Arc<Value>,
    /// The pod's `apps.kruise.io/inplace-update-state`, written over `shared`'s (where the
    /// template's metadata may carry the key: the bookkeeping wins, see [`set_state`]).
    state: Option<String>,
}

impl PodPatch {
    /// The patch as the pod gets it.
    pub fn to_value(&self) -> Value {
        let mut patch = Value::clone(&self.shared);
        if let Some(text) = &self.state {
            set_state(&mut patch, text.clone());
        }
        patch
    }

    /// The patch writes annotation `key` (set or removed).
    pub fn writes_annotation(&self, key: &str) -> bool {
        (self.state.is_some() && key == keys::INPLACE_UPDATE_STATE_ANNOTATION)
            || self.shared["metadata"]["annotations"].get(key).is_some()
    }
}

impl From<Value> for PodPatch {
    fn from(patch: Value) -> Self {
        Self {
            shared: Arc::new(patch),
            state: None,
        }
    }
}

/// Equal when the pod gets the same patch, however it is shared.
impl PartialEq for PodPatch {
    fn eq(&self, other: &Self) -> bool {
        if Arc::ptr_eq(&self.shared, &other.shared) {
            return self.state == other.state;
        }
        self.to_value() == other.to_value()
    }
}

impl Serialize for PodPatch {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match &self.state {
            None => self.shared.serialize(serializer),
            Some(_) => self.to_value().serialize(serializer),
        }
    }
}

/// The write of `action` (at index `index` of its plan) for `pod` (the pod it names);
/// `None` for an action that is no in-place write.
pub fn of(
    inputs: &WriteInputs,
    pod: &CachedPod,
    index: usize,
    action: &Action,
) -> Option<Result<InPlaceWrite, InPlaceWriteError>> {
    match action {
        Action::Update {
            method: UpdateMethod::InPlace,
            revision,
            ..
        } => Some(start(inputs, pod, index, revision)),
        Action::ApplyGracedUpdate { .. } => Some(apply_held(inputs, pod, index)),
        Action::ApplyNextContainerBatch { .. } => Some(next_batch(inputs, pod, index)),
        _ => None,
    }
}

/// The writes of the in-place actions among `actions` for `pods`, aligned with `actions`:
/// `None` for an action that is no in-place write or whose pod is not among `pods`; a
/// write that cannot be planned is kept as its error.
pub fn all(
    inputs: &WriteInputs,
    pods: &[PodFacts<'_>],
    actions: &[Action],
) -> Vec<Option<Result<InPlaceWrite, InPlaceWriteError>>> {
    let by_name = super::pod_lookup::pods_named(pods, actions.iter().filter_map(pod_of));
    // Starting an update depends on the pod's revision label and the target but for a
    // few per-pod parts ([`Prepared`]), and a plan's pods carry a few revisions: the
    // decision (which reads and compares two templates), the split into container
    // batches, the patch and the state are made once per pair, not once per pod.
    let mut prepared: Vec<Pair> = Vec::new();
    let mut out = Vec::with_capacity(actions.len());
    for (index, action) in actions.iter().enumerate() {
        let Some(pod) = pod_of(action).and_then(|name| by_name.get(name)) else {
            out.push(None);
            continue;
        };
        let write = match action {
            Action::Update {
                method: UpdateMethod::InPlace,
                revision,
                ..
            } => {
                let label = pod.label_map().get(keys::REVISION_LABEL);
                let known = prepared
                    .iter()
                    .position(|d| d.label == label && d.target == revision.as_str());
                let at = known.unwrap_or_else(|| {
                    prepared.push(Pair {
                        label,
                        target: revision,
                        start: prepare_start(inputs, label, revision).map(Prepared::shared),
                    });
                    prepared.len() - 1
                });
                Some(match &prepared[at].start {
                    Ok(start) => start.write_for(pod, index),
                    Err(Unprepared::Refused(reason)) => Err(InPlaceWriteError::Refused {
                        pod: name_of(pod),
                        reason: reason.clone(),
                    }),
                    // Not cloneable (a parser's error): made again for this pod.
                    Err(Unprepared::Failed(_)) => start(inputs, pod, index, revision),
                })
            }
            _ => of(inputs, pod, index, action),
        };
        out.push(write);
    }
    out
}

/// Starting in-place updates from revision label `label` to `target`, prepared once per
/// pair in a plan.
struct Pair<'a> {
    label: Option<&'a str>,
    target: &'a str,
    start: Result<Prepared, Unprepared>,
}

/// The pod of an in-place action.
fn pod_of(action: &Action) -> Option<&str> {
    match action {
        Action::Update {
            pod,
            method: UpdateMethod::InPlace,
            ..
        }
        | Action::ApplyGracedUpdate { pod }
        | Action::ApplyNextContainerBatch { pod } => Some(pod),
        _ => None,
    }
}

/// The in-place decision for a pod whose revision label is `label`, to `revision`.
fn decide(inputs: &WriteInputs, label: Option<&str>, revision: &str) -> InPlaceDecision {
    decide_for_revisions(
        inputs.cloneset,
        inputs.revisions,
        inputs.update_revision,
        label,
        revision,
        inputs.options,
    )
}

fn name_of(pod: &CachedPod) -> String {
    pod.metadata.name.clone().unwrap_or_default()
}

fn encode<T: Serialize>(value: &T, what: &'static str) -> Result<String, InPlaceWriteError> {
    serde_json::to_string(value).map_err(|source| InPlaceWriteError::Encode { what, source })
}

/// The write starting the in-place update of `pod` to `revision`.
pub fn start(
    inputs: &WriteInputs,
    pod: &CachedPod,
    index: usize,
    revision: &str,
) -> Result<InPlaceWrite, InPlaceWriteError> {
    let label = pod.label_map().get(keys::REVISION_LABEL);
    match prepare_start(inputs, label, revision) {
        Ok(prepared) => prepared.write_for(pod, index),
        Err(Unprepared::Refused(reason)) => Err(InPlaceWriteError::Refused {
            pod: name_of(pod),
            reason,
        }),
        Err(Unprepared::Failed(e)) => Err(e),
    }
}

/// The write starting an in-place update from one revision label to one target, but for
/// what differs by pod: made once for all the pods of the pair ([`all`]), then completed
/// for each ([`Self::write_for`]).
struct Prepared {
    revision: String,
    /// Not a change of resources alone: the containers restart, so a pod with the
    /// `InPlaceUpdateReady` readiness gate goes not ready first.
    restarts: bool,
    /// The patch but for the state annotation of a spec written now (`state`), shared by
    /// the pair's writes.
    patch: Arc<Value>,
    /// The state of a spec written now, but for the pod's container statuses; `None`
    /// while a grace period holds the spec back (the patch is whole: nothing of the pod
    /// goes into the held spec or its state).
    state: Option<PendingState>,
    resize: Option<Resize>,
}

/// Why a revision pair has no start write, for whichever of its pods.
enum Unprepared {
    /// The change cannot go in place: the reason.
    Refused(String),
    Failed(InPlaceWriteError),
}

impl From<InPlaceWriteError> for Unprepared {
    fn from(e: InPlaceWriteError) -> Self {
        Self::Failed(e)
    }
}

/// [`start`] but for the pod: what the pods on revision label `label` moving to
/// `revision` share.
fn prepare_start(
    inputs: &WriteInputs,
    label: Option<&str>,
    revision: &str,
) -> Result<Prepared, Unprepared> {
    let change = match decide(inputs, label, revision) {
        InPlaceDecision::InPlace(change) => change,
        InPlaceDecision::Recreate { reason } | InPlaceDecision::Refused { reason } => {
            return Err(Unprepared::Refused(reason));
        }
    };
    let grace = inputs
        .cloneset
        .spec
        .update_strategy
        .as_ref()
        .and_then(|s| s.in_place_update_strategy.as_ref())
        .and_then(|s| s.grace_period_seconds)
        .unwrap_or(0);
    let spec = spec_from_change(&change, revision, grace)?;
    let resources_only = spec.container_images.is_empty()
        && spec.meta_data_patch.is_empty()
        && spec.restart_containers.is_empty()
        && !spec.container_resources.is_empty();
    let state = InPlaceUpdateState {
        revision: revision.to_owned(),
        update_timestamp: Some(Time(inputs.now)),
        update_env_from_metadata: spec.update_env_from_metadata,
        update_images: !spec.container_images.is_empty(),
        update_resources: !spec.container_resources.is_empty(),
        // For the daemon's completion write (see the field); a held update keeps it in
        // the state written with the grace annotation.
        lifecycle_state_on_completion: super::lifecycle::state_on_completion_known_at_start(
            inputs.cloneset.spec.lifecycle.as_ref(),
        )
        .map(|s| s.as_str().to_owned()),
        ..InPlaceUpdateState::default()
    };
    let hash = super::revision::short_hash(revision);
    let revision_label = if inputs.options.short_hash {
        hash.to_owned()
    } else {
        revision.to_owned()
    };
    let mut patch = json!({"metadata": {
        "labels": {
            keys::REVISION_LABEL: revision_label,
            keys::POD_TEMPLATE_HASH_LABEL: hash,
            keys::LIFECYCLE_STATE_LABEL: LifecycleState::Updating.as_str(),
        },
        "annotations": {
            keys::LIFECYCLE_TIMESTAMP_ANNOTATION: LifecycleState::timestamp(inputs.now),
            keys::INPLACE_UPDATE_STATE_ANNOTATION_LEGACY: Value::Null,
        },
    }});
    let (state, resize) = if spec.grace_seconds > 0 {
        let annotations = &mut patch["metadata"]["annotations"];
        annotations[keys::INPLACE_UPDATE_STATE_ANNOTATION] =
            json!(encode(&state, "in-place state")?);
        annotations[keys::INPLACE_UPDATE_GRACE_ANNOTATION] =
            json!(encode(&spec, "in-place grace")?);
        (None, None)
    } else {
        let priorities = launch_priorities(inputs, revision);
        let pending = spec_patch(inputs, &spec, &priorities, state, &mut patch)?;
        (Some(pending), resize_of(inputs.options, &spec))
    };
    Ok(Prepared {
        revision: revision.to_owned(),
        restarts: !resources_only,
        patch: Arc::new(patch),
        state,
        resize,
    })
}

impl Prepared {
    /// Made ready to be written for many pods ([`PendingState::split_text`]).
    fn shared(mut self) -> Self {
        if let Some(state) = &mut self.state {
            state.split_text();
        }
        self
    }

    /// The write for `pod` (at index `index` of its plan): the pod's name, version,
    /// readiness gate, container statuses and guard added.
    fn write_for(&self, pod: &CachedPod, index: usize) -> Result<InPlaceWrite, InPlaceWriteError> {
        let gated = self.restarts
            && pod
                .readiness_gates()
                .any(|g| g == keys::INPLACE_UPDATE_READY_CONDITION);
        let patch = PodPatch {
            shared: Arc::clone(&self.patch),
            state: self
                .state
                .as_ref()
                .map(|state| state.text_for(pod))
                .transpose()?,
        };
        Ok(InPlaceWrite {
            action: index,
            kind: InPlaceWriteKind::Start,
            pod: name_of(pod),
            resource_version: pod.metadata.resource_version.clone().unwrap_or_default(),
            revision: self.revision.clone(),
            not_ready_first: gated,
            patch,
            resize: self.resize.clone(),
            guard: Guard::of_cached(pod),
        })
    }
}

/// The write of the update held on `pod` during its grace period.
pub fn apply_held(
    inputs: &WriteInputs,
    pod: &CachedPod,
    index: usize,
) -> Result<InPlaceWrite, InPlaceWriteError> {
    let what = "grace annotation";
    let annotations = pod.annotations();
    let raw = annotations
        .get(keys::INPLACE_UPDATE_GRACE_ANNOTATION)
        .or_else(|| annotations.get(keys::INPLACE_UPDATE_GRACE_ANNOTATION_LEGACY))
        .ok_or_else(|| InPlaceWriteError::AnnotationMissing {
            pod: name_of(pod),
            what,
        })?;
    let spec: InPlaceUpdateGrace =
        serde_json::from_str(raw).map_err(|source| InPlaceWriteError::BadAnnotation {
            pod: name_of(pod),
            what,
            source,
        })?;
    let on_revision = pod
        .label_map()
        .get(keys::REVISION_LABEL)
        .is_some_and(|l| revision_matches(l, &spec.revision));
    let mut patch = json!({"metadata": {"annotations": {}}});
    let resize = if on_revision {
        // An unreadable state is replaced, as the reference does.
        let state = state_of(pod)
            .and_then(Result::ok)
            .unwrap_or_else(|| InPlaceUpdateState {
                revision: spec.revision.clone(),
                update_timestamp: Some(Time(inputs.now)),
                update_images: !spec.container_images.is_empty(),
                update_resources: !spec.container_resources.is_empty(),
                update_env_from_metadata: spec.update_env_from_metadata,
                ..InPlaceUpdateState::default()
            });
        let priorities = launch_priorities(inputs, &spec.revision);
        patch_spec(inputs, pod, &spec, &priorities, state, &mut patch)?;
        resize_of(inputs.options, &spec)
    } else {
        // The pod moved to another revision meanwhile: drop the held update.
        let annotations = &mut patch["metadata"]["annotations"];
        annotations[keys::INPLACE_UPDATE_GRACE_ANNOTATION] = Value::Null;
        annotations[keys::INPLACE_UPDATE_GRACE_ANNOTATION_LEGACY] = Value::Null;
        None
    };
    Ok(InPlaceWrite {
        action: index,
        kind: InPlaceWriteKind::ApplyHeld,
        pod: name_of(pod),
        resource_version: pod.metadata.resource_version.clone().unwrap_or_default(),
        revision: spec.revision,
        not_ready_first: false,
        patch: patch.into(),
        resize,
        guard: Guard::of_cached(pod),
    })
}

/// The write of the next container batch of the update running on `pod`.
pub fn next_batch(
    inputs: &WriteInputs,
    pod: &CachedPod,
    index: usize,
) -> Result<InPlaceWrite, InPlaceWriteError> {
    let what = "in-place state";
    let state = state_of(pod)
        .ok_or_else(|| InPlaceWriteError::AnnotationMissing {
            pod: name_of(pod),
            what,
        })?
        .map_err(|source| InPlaceWriteError::BadAnnotation {
            pod: name_of(pod),
            what,
            source,
        })?;
    let spec = container_batches::remaining(&state);
    let mut patch = json!({"metadata": {"labels": {}, "annotations": {}}});
    let priorities = launch_priorities(inputs, &spec.revision);
    patch_spec(inputs, pod, &spec, &priorities, state, &mut patch)?;
    Ok(InPlaceWrite {
        action: index,
        kind: InPlaceWriteKind::NextBatch,
        pod: name_of(pod),
        resource_version: pod.metadata.resource_version.clone().unwrap_or_default(),
        revision: spec.revision.clone(),
        not_ready_first: false,
        patch: patch.into(),
        resize: resize_of(inputs.options, &spec),
        guard: Guard::of_cached(pod),
    })
}

/// The in-place state on the pod (the legacy key too).
fn state_of(pod: &CachedPod) -> Option<Result<InPlaceUpdateState, serde_json::Error>> {
    let annotations = pod.annotations();
    annotations
        .get(keys::INPLACE_UPDATE_STATE_ANNOTATION)
        .or_else(|| annotations.get(keys::INPLACE_UPDATE_STATE_ANNOTATION_LEGACY))
        .map(serde_json::from_str)
}

/// Resources go into the pod spec only where the server accepts spec changes of them and
/// has no `pods/resize` subresource.
fn resources_to_spec(options: &PlanOptions) -> bool {
    !options.pod_resize && options.in_place_vertical_scaling
}

/// The cpu/memory change of `spec` (all its containers', as the update has them).
fn resize_of(options: &PlanOptions, spec: &InPlaceUpdateGrace) -> Option<Resize> {
    if spec.container_resources.is_empty() {
        return None;
    }
    let via = if options.pod_resize {
        ResizeVia::Subresource
    } else if resources_to_spec(options) {
        ResizeVia::Spec
    } else {
        ResizeVia::Unsupported
    };
    Some(Resize {
        via,
        containers: spec.container_resources.clone(),
    })
}

/// The container launch priorities of the template of `revision` (none when it has no
/// template): what [`patch_spec`] splits the containers into batches by.
pub fn launch_priorities(inputs: &WriteInputs, revision: &str) -> Vec<(String, Option<i64>)> {
    super::revision::template_for(
        inputs.cloneset,
        inputs.revisions,
        inputs.update_revision,
        revision,
    )
    .map(|t| container_batches::launch_priorities(&t.0.0))
    .unwrap_or_default()
}

/// Adds `spec` to the pod `patch` (the reference's `PatchSpecToPod`): the batch due now of
/// container images (and resources), metadata, `lastContainerStatuses`, the state
/// annotation; removes the grace annotations.
pub fn patch_spec(
    inputs: &WriteInputs,
    pod: &CachedPod,
    spec: &InPlaceUpdateGrace,
    priorities: &[(String, Option<i64>)],
    state: InPlaceUpdateState,
    patch: &mut Value,
) -> Result<(), InPlaceWriteError> {
    let pending = spec_patch(inputs, spec, priorities, state, patch)?;
    set_state(patch, pending.text_for(pod)?);
    Ok(())
}

/// The state of a spec written onto a pod, but for the statuses of the pod's containers
/// (`lastContainerStatuses`): those make the only part of [`patch_spec`] that differs
/// between pods moving between the same two revisions.
struct PendingState {
    /// The state, its `lastContainerStatuses` without the pod's containers yet.
    state: InPlaceUpdateState,
    /// The containers whose status goes into `lastContainerStatuses`, each with whether
    /// it restarts (then the id of the container running now goes with it).
    recorded: Vec<(String, bool)>,
    /// The state's text before and after the value of `lastContainerStatuses`, when the
    /// state is written for many pods ([`Self::split_text`]); else the state is encoded
    /// whole.
    text: Option<(String, String)>,
}

impl PendingState {
    /// Prepares the state to be written for many pods: the per-pod text is then the
    /// state's text around the pod's `lastContainerStatuses`, instead of the whole state
    /// (its timestamps above all) encoded again for each pod.
    ///
    /// The state serialises its fields in order, `revision`, `updateTimestamp`,
    /// `lastContainerStatuses` first; the text before the statuses is checked to be that
    /// (with compact JSON, the text of a value does not depend on what is around it). A
    /// state that does not split so is encoded whole for each pod.
    fn split_text(&mut self) {
        // Without its statuses: `text_for` encodes them with the pod's.
        let state = InPlaceUpdateState {
            last_container_statuses: BTreeMap::new(),
            ..self.state.clone()
        };
        let first = InPlaceUpdateState {
            revision: state.revision.clone(),
            update_timestamp: state.update_timestamp.clone(),
            ..InPlaceUpdateState::default()
        };
        let (Ok(whole), Ok(first)) = (serde_json::to_string(&state), serde_json::to_string(&first))
        else {
            return;
        };
        // `first` is `{"revision":…,"updateTimestamp":…,"lastContainerStatuses":{}}`.
        let split = first.strip_suffix("{}}").and_then(|head| {
            let tail = whole.strip_prefix(head)?.strip_prefix("{}")?;
            Some((head.to_owned(), tail.to_owned()))
        });
        self.text = split;
    }

    /// The state annotation for `pod`.
    fn text_for(&self, pod: &CachedPod) -> Result<String, InPlaceWriteError> {
        let statuses = pod.container_statuses();
        let mut last = self.state.last_container_statuses.clone();
        for (name, restarted) in &self.recorded {
            let status = statuses.iter().find(|s| &*s.name == name.as_str());
            let container_id = status
                .and_then(|s| s.container_id.as_deref())
                .filter(|_| *restarted)
                .unwrap_or_default()
                .to_owned();
            last.insert(
                name.clone(),
                InPlaceUpdateContainerStatus {
                    image_id: status
                        .map(|s| String::from(&*s.image_id))
                        .unwrap_or_default(),
                    container_id,
                    resources: None,
                },
            );
        }
        match &self.text {
            Some((head, tail)) => {
                let last = encode(&last, "in-place state")?;
                Ok([head.as_str(), &last, tail].concat())
            }
            None => encode(
                &InPlaceUpdateState {
                    last_container_statuses: last,
                    ..self.state.clone()
                },
                "in-place state",
            ),
        }
    }
}

/// Writes the state annotation `text` into `patch`, over any template annotation of the
/// same key (as every bookkeeping key written after the template metadata).
fn set_state(patch: &mut Value, text: String) {
    patch["metadata"]["annotations"][keys::INPLACE_UPDATE_STATE_ANNOTATION] = Value::String(text);
}

/// [`patch_spec`] but for the pod: everything but the state annotation goes into
/// `patch`; the state waits for the pod's container statuses.
fn spec_patch(
    inputs: &WriteInputs,
    spec: &InPlaceUpdateGrace,
    priorities: &[(String, Option<i64>)],
    mut state: InPlaceUpdateState,
    patch: &mut Value,
) -> Result<PendingState, InPlaceWriteError> {
    // Container launch priority: only the first batch now, the rest in the state.
    let split = container_batches::split(spec, priorities);
    split.record_in(&mut state);
    let spec = &split.now;
    let changed: BTreeSet<&String> = split.containers.iter().collect();
    // A container whose only change is metadata its env reads is not recorded; the daemon
    // restarts it (`updateEnvFromMetadata`). A container restarted with an unchanged spec
    // (`restartContainers`) is recorded like an image change: the daemon stops the
    // container running now, and the update is done once another one runs.
    let recorded = changed
        .iter()
        .filter_map(|name| {
            let restarted = spec.container_images.contains_key(*name)
                || spec.restart_containers.iter().any(|r| r == *name);
            (restarted || spec.container_resources.contains_key(*name))
                .then(|| ((*name).clone(), restarted))
        })
        .collect();
    for name in &spec.restart_containers {
        if !state.restart_containers.contains(name) {
            state.restart_containers.push(name.clone());
        }
    }
    if !changed.is_empty() {
        state
            .container_batches_record
            .push(inplace_proto::ContainerBatch {
                timestamp: Time(inputs.now),
                containers: changed.iter().map(|s| (*s).clone()).collect(),
            });
    }
    let containers: Vec<Value> = spec
        .container_images
        .iter()
        .map(|(name, image)| {
            let mut c = json!({"name": name, "image": image});
            if let Some(r) = spec.container_resources.get(name)
                && resources_to_spec(inputs.options)
            {
                c["resources"] = serde_json::to_value(r).unwrap_or(Value::Null);
            }
            c
        })
        .collect();
    if !containers.is_empty() {
        patch["spec"] = json!({ "containers": containers });
    }
    if !spec.meta_data_patch.is_empty() {
        let meta: Value = serde_json::from_str(&spec.meta_data_patch).map_err(|source| {
            InPlaceWriteError::Encode {
                what: "metaDataPatch of the in-place spec",
                source,
            }
        })?;
        let meta = meta.get("metadata").cloned().unwrap_or(meta);
        for field in ["labels", "annotations"] {
            if let Some(map) = meta.get(field).and_then(Value::as_object) {
                for (k, v) in map {
                    // Our own bookkeeping keys win over template metadata.
                    if patch["metadata"][field].get(k).is_none() {
                        patch["metadata"][field][k] = v.clone();
                    }
                }
            }
        }
    }
    // Labels / annotations read by the env of this batch's containers (kept out of
    // metaDataPatch so that later batches' containers are not restarted early).
    for meta in spec.container_ref_metadata.values() {
        for (field, map) in [("labels", &meta.labels), ("annotations", &meta.annotations)] {
            for (k, v) in map.iter().flatten() {
                if patch["metadata"][field].get(k).is_none() {
                    patch["metadata"][field][k] = json!(v);
                }
            }
        }
    }
    let annotations = &mut patch["metadata"]["annotations"];
    annotations[keys::INPLACE_UPDATE_GRACE_ANNOTATION] = Value::Null;
    annotations[keys::INPLACE_UPDATE_GRACE_ANNOTATION_LEGACY] = Value::Null;
    Ok(PendingState {
        state,
        recorded,
        text: None,
    })
}

/// The reference's `UpdateSpec` for a planner [`InPlaceChange`]: images and resources by
/// container, labels/annotations as a strategic merge patch (`null` removes a key).
pub fn spec_from_change(
    change: &InPlaceChange,
    revision: &str,
    grace_seconds: i32,
) -> Result<InPlaceUpdateGrace, InPlaceWriteError> {
    // Keys that a container's env reads are written with that container's batch
    // (`containerRefMetadata`), as the reference does; removals stay in the patch.
    let per_container = |field: &str, key: &str| {
        change.env_from_metadata.values().any(|m| {
            let map = if field == "labels" {
                &m.labels
            } else {
                &m.annotations
            };
            map.as_ref().is_some_and(|m| m.contains_key(key))
        })
    };
    let mut meta = serde_json::Map::new();
    for (field, entries) in [
        ("labels", &change.labels),
        ("annotations", &change.annotations),
    ] {
        let map: serde_json::Map<String, Value> = entries
            .iter()
            .filter(|(k, _)| !per_container(field, k))
            .map(|(k, v)| (k.clone(), v.as_ref().map_or(Value::Null, |v| json!(v))))
            .collect();
        if map.is_empty() {
            continue;
        }
        meta.insert(field.to_owned(), Value::Object(map));
    }
    let meta_data_patch = if meta.is_empty() {
        String::new()
    } else {
        encode(&json!({ "metadata": meta }), "metaDataPatch")?
    };
    Ok(InPlaceUpdateGrace {
        revision: revision.to_owned(),
        container_images: change.images.clone(),
        container_resources: change.resources.clone(),
        container_ref_metadata: change.env_from_metadata.clone(),
        update_env_from_metadata: !change.env_from_metadata.is_empty(),
        restart_containers: change.restarts.iter().cloned().collect(),
        meta_data_patch,
        grace_seconds,
        ..InPlaceUpdateGrace::default()
    })
}

#[cfg(test)]
mod tests;
