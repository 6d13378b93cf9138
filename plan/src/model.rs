//! The planner's input snapshot, its view of each pod, and its output.
//!
//! Everything here is plain data: the controller fills a [`Snapshot`] from its caches,
//! [`super::plan`] turns it into a [`super::Plan`] ([`super::output`]), and the applier
//! carries the plan out.

use std::collections::BTreeSet;
use std::sync::Arc;

use inplace_proto::imagepulljob::ImagePullJob;
use inplace_proto::keys;
use inplace_proto::{CloneSet, InPlaceUpdateGrace, InPlaceUpdateState, LifecycleState};
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::{Node, PersistentVolumeClaim};
use k8s_openapi::jiff::Timestamp;
use serde::Serialize;

use super::order_rules::{OrderRules, PrecomputedOrder};
pub use super::pod_summary::{GateFacts, PodPhase};
use crate::cached::{CachedCondition, CachedContainer, CachedContainerStatus, CachedPod, StrMap};

/// Switches that the reference implementation keeps behind feature gates.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PlanOptions {
    /// `CloneSetPartitionRollback`: raising the partition rolls updated pods back.
    pub partition_rollback: bool,
    /// `CloneSetShortHash`: the revision label holds only the hash.
    pub short_hash: bool,
    /// `--cloneset-scaling-exclude-preparing-delete` for every CloneSet.
    pub exclude_preparing_delete: bool,
    /// `InPlaceWorkloadVerticalScaling`: cpu/memory changes go in place.
    pub in_place_vertical_scaling: bool,
    /// `RecreatePodWhenChangeVCTInCloneSetGate`: a changed volumeClaimTemplate forces recreate.
    pub recreate_on_vct_change: bool,
    /// `PreDownloadImageForInPlaceUpdate`: pre-pull the new images of an in-place update
    /// on the nodes of old pods through ImagePullJobs ([`super::predownload`]).
    pub pre_download_image: bool,
    /// `PreparingUpdateAsUpdate`: while scaling, a pod in lifecycle state PreparingUpdate
    /// counts as on the update revision (it is about to be updated); the update step
    /// still counts it by its revision label ([`PlanContext::is_updated_for_scale`]).
    pub preparing_update_as_update: bool,
    /// The server serves the `pods/resize` subresource (a server capability, not a gate):
    /// cpu/memory changes go through it ([`super::inplace_write`]).
    pub pod_resize: bool,
    /// Use this revision name as the update revision instead of computing it.
    pub update_revision_override: Option<String>,
    /// Use this revision name as the current revision instead of `status.currentRevision`.
    pub current_revision_override: Option<String>,
}

/// Everything the planner looks at for one CloneSet, at one instant.
#[derive(Clone, Copy, Debug)]
pub struct Snapshot<'a> {
    pub cloneset: &'a CloneSet,
    /// Pods owned by the CloneSet (active or not), already filtered by its selector, in
    /// the compact form the watch caches (shared with the cache, never copied).
    pub pods: &'a [Arc<CachedPod>],
    /// PVCs carrying the CloneSet's instance-id label.
    pub pvcs: &'a [PersistentVolumeClaim],
    /// ControllerRevisions owned by the CloneSet.
    pub revisions: &'a [ControllerRevision],
    /// Nodes the pods run on (only their names and labels are read). Used to rank scale-down
    /// victims by `topologySpreadConstraints`; may be empty, then pods on unknown nodes
    /// get no topology rank (like the reference when a node cannot be read).
    pub nodes: &'a [Node],
    pub now: Timestamp,
    pub options: &'a PlanOptions,
    /// `podsToDelete` names the controller saw matching a pod of this CloneSet in an
    /// earlier reconcile ([`super::pods_to_delete`]); empty for a fresh controller.
    pub pods_to_delete_seen: &'a BTreeSet<String>,
    /// What image pre-download plans from ([`super::predownload_steps`]); None where it
    /// does not run (the gate off, ImagePullJobs not served, or their cache not synced
    /// yet): then no pre-download step is planned.
    pub pre_download: Option<PreDownloadInput<'a>>,
}

/// The pre-download part of a [`Snapshot`].
#[derive(Clone, Copy, Debug)]
pub struct PreDownloadInput<'a> {
    /// The ImagePullJobs the CloneSet controls.
    pub jobs: &'a [ImagePullJob],
    /// New jobs record the update order of their nodes
    /// ([`super::predownload::with_node_order`]); false: they pull by node name.
    pub update_order: bool,
}

/// What the planner knows about one pod, extracted once per plan.
///
/// The facts borrow from the snapshot's [`CachedPod`] (names, labels) instead of copying
/// them, and take what the pod's status, annotations and readiness gates say from its
/// summary ([`crate::pod_summary`], worked out when the pod was cached): extraction
/// reads one block of the pod and its labels, and allocates nothing for a pod without
/// in-place annotations. What few steps read (the conditions, the container statuses,
/// the lifecycle timestamp, the uid, finalizers and containers) is read from the pod
/// when asked: every step writes or re-reads the facts of every pod, so their size is
/// the plan's speed.
#[derive(Clone, Debug, PartialEq)]
pub struct PodFacts<'a> {
    /// The pod the facts are of.
    pub pod: &'a CachedPod,
    pub name: &'a str,
    /// FNV-1a of `name` ([`super::pod_summary::PodSummary::name_hash`]), kept beside it:
    /// [`super::pod_lookup`] finds the pods a plan writes by scanning the facts, which lie
    /// side by side in memory, instead of every cached pod, each a cache miss.
    pub name_hash: u64,
    /// Value of the `controller-revision-hash` label.
    pub revision: Option<&'a str>,
    pub instance_id: Option<&'a str>,
    pub node_name: Option<&'a str>,
    pub phase: PodPhase,
    pub lifecycle: Option<LifecycleState>,
    /// Deletion requested (deletionTimestamp set).
    pub terminating: bool,
    /// Succeeded or Failed: the pod will never run again.
    pub finished: bool,
    /// Running, condition Ready True, and InPlaceUpdateReady absent or True.
    pub ready: bool,
    /// The `Ready` condition alone is True (Kubernetes' `IsPodReady`, which the
    /// reference's default update order and deletion order read: a Pending pod whose Ready
    /// condition is True counts as ready there).
    pub ready_condition: bool,
    /// When the Ready condition last turned True.
    pub ready_since: Option<Timestamp>,
    pub creation: Option<Timestamp>,
    /// Sum of restartCount over containers.
    pub restarts: i32,
    /// `controller.kubernetes.io/pod-deletion-cost`; invalid or absent is 0.
    pub deletion_cost: i64,
    /// Carries `apps.kruise.io/specified-delete` or is named in `podsToDelete`.
    pub specified_delete: bool,
    /// Carries the `pod-template-hash` label. Read by the back-fill at the end of every
    /// plan: looking it up in [`PodFacts::labels`] there re-reads every pod's label tree,
    /// which at 100k pods is no longer in the cache.
    pub has_template_hash: bool,
    pub labels: StrMap<'a>,
    /// Parsed `apps.kruise.io/inplace-update-state`, if present and valid. Boxed, like the
    /// grace below: few pods carry one, and inline they would triple the size of the facts
    /// (a plan over 100k pods writes and re-reads every byte of them).
    pub in_place_state: Option<Box<InPlaceUpdateState>>,
    /// An in-place state annotation is present but cannot be read.
    pub in_place_state_unreadable: bool,
    /// An `apps.kruise.io/inplace-update-grace` annotation is present.
    pub in_place_grace_pending: bool,
    /// The parsed grace annotation (None when absent or unreadable).
    pub in_place_grace: Option<Box<InPlaceUpdateGrace>>,
    /// Status of the `InPlaceUpdateReady` condition: None when the pod has no such condition.
    pub in_place_update_ready: Option<bool>,
    /// The pod's readiness gates of ours and whether it has the `KruisePodReady`
    /// condition: what [`super::pod_conditions`] judges every pod of every plan by.
    pub gates: GateFacts,
    /// The priority and scatter inputs of this pod, computed while its labels were at hand
    /// ([`PodFacts::extract_all`]); None when extracted alone ([`PodFacts::from_pod`]), and
    /// then [`super::update_order`] reads the labels itself.
    pub order_labels: Option<PrecomputedOrder<'a>>,
}

/// Most distinct revision labels [`PodFacts::extract_all`] shares (see there).
const MAX_SHARED_REVISIONS: usize = 16;

impl<'a> PodFacts<'a> {
    /// Extracts the facts of `pod`. `pods_to_delete` is `spec.scaleStrategy.podsToDelete`.
    pub fn from_pod(pod: &'a CachedPod, pods_to_delete: &BTreeSet<&str>) -> Self {
        Self::extract(pod, pods_to_delete, |_, _| {})
    }

    /// [`PodFacts::from_pod`], showing every label to `on_label` in the same pass.
    fn extract(
        pod: &'a CachedPod,
        pods_to_delete: &BTreeSet<&str>,
        mut on_label: impl FnMut(&'a str, &'a str),
    ) -> Self {
        let meta = &pod.metadata;
        let summary = pod.summary();
        let labels = pod.label_map();
        let name = meta.name.as_deref().unwrap_or_default();
        let phase = summary.phase;
        let ready = phase == PodPhase::Running
            && summary.ready_condition
            && summary.in_place_update_ready != Some(false);
        // One pass over the labels instead of a map lookup per key: each lookup compares
        // strings down the tree, and this runs for every pod of every plan.
        let (mut revision, mut instance_id, mut lifecycle_label) = (None, None, None);
        let (mut specified_label, mut has_template_hash) = (false, false);
        for (key, value) in labels.iter() {
            on_label(key, value);
            match key {
                keys::REVISION_LABEL => revision = Some(value),
                keys::INSTANCE_ID_LABEL => instance_id = Some(value),
                keys::LIFECYCLE_STATE_LABEL => lifecycle_label = Some(value),
                keys::SPECIFIED_DELETE_LABEL => specified_label = true,
                keys::POD_TEMPLATE_HASH_LABEL => has_template_hash = true,
                _ => {}
            }
        }
        let specified_delete =
            specified_label || (!pods_to_delete.is_empty() && pods_to_delete.contains(name));
        // The annotations are read only by the pods that carry an in-place update (the
        // summary says which); the new keys win over the legacy ones (as
        // `InPlaceUpdateState::from_annotations`).
        let annotation = |new: &str, legacy: &str| {
            let annotations = pod.annotations();
            annotations.get(new).or_else(|| annotations.get(legacy))
        };
        let state_raw = summary
            .has_in_place_state
            .then(|| {
                annotation(
                    keys::INPLACE_UPDATE_STATE_ANNOTATION,
                    keys::INPLACE_UPDATE_STATE_ANNOTATION_LEGACY,
                )
            })
            .flatten();
        let grace_raw = summary
            .has_in_place_grace
            .then(|| {
                annotation(
                    keys::INPLACE_UPDATE_GRACE_ANNOTATION,
                    keys::INPLACE_UPDATE_GRACE_ANNOTATION_LEGACY,
                )
            })
            .flatten();
        let in_place_state =
            state_raw.and_then(|raw| serde_json::from_str::<InPlaceUpdateState>(raw).ok());
        PodFacts {
            pod,
            revision,
            instance_id,
            node_name: pod.node_name(),
            phase,
            lifecycle: lifecycle_label.and_then(LifecycleState::parse),
            terminating: meta.deletion_timestamp.is_some(),
            finished: matches!(phase, PodPhase::Succeeded | PodPhase::Failed),
            ready,
            ready_condition: summary.ready_condition,
            ready_since: summary.ready_since,
            creation: meta.creation_timestamp.as_ref().map(|t| t.0),
            restarts: summary.restarts,
            deletion_cost: i64::from(summary.deletion_cost),
            specified_delete,
            has_template_hash,
            labels,
            in_place_state_unreadable: state_raw.is_some() && in_place_state.is_none(),
            in_place_state: in_place_state.map(Box::new),
            in_place_grace_pending: grace_raw.is_some(),
            in_place_grace: grace_raw
                .and_then(|raw| serde_json::from_str(raw).ok())
                .map(Box::new),
            in_place_update_ready: summary.in_place_update_ready,
            name,
            name_hash: summary.name_hash,
            gates: summary.gates,
            order_labels: None,
        }
    }

    /// The facts of every pod of `snapshot`, in snapshot order, as the planner uses them.
    ///
    /// Beyond [`PodFacts::from_pod`], in the same pass (while each pod's memory is in the
    /// cache; at 100k pods every later re-read of a pod's heap is a cache miss):
    /// - the labels that `priorityStrategy` and `scatterStrategy` read are evaluated
    ///   ([`PodFacts::order_labels`]);
    /// - equal `controller-revision-hash` labels are made to share one string, so that the
    ///   revision comparisons of every later step read a few hot strings instead of one
    ///   cold string per pod. The text is unchanged.
    pub fn extract_all(snapshot: &Snapshot<'a>) -> Vec<Self> {
        let cloneset = snapshot.cloneset;
        let pods_to_delete: BTreeSet<&str> = cloneset
            .spec
            .scale_strategy
            .iter()
            .flat_map(|s| s.pods_to_delete.iter().map(String::as_str))
            .collect();
        let rules = OrderRules::of_strategy(cloneset.spec.update_strategy.as_ref());
        let precompute = rules.precomputable();
        let mut scratch = rules.scratch();
        // Distinct revision labels seen so far; bounded, as a snapshot holds only a few.
        let mut revisions: Vec<&'a str> = Vec::new();
        let pods = snapshot.pods;
        let mut out = Vec::with_capacity(pods.len());
        for pod in pods {
            let mut facts = if precompute {
                scratch.clear();
                let mut facts = Self::extract(pod, &pods_to_delete, |key, value| {
                    scratch.see(&rules, key, value);
                });
                facts.order_labels = Some(rules.precompute(facts.labels, &mut scratch));
                facts
            } else {
                Self::from_pod(pod, &pods_to_delete)
            };
            if let Some(label) = facts.revision {
                match revisions.iter().find(|r| **r == label) {
                    Some(shared) => facts.revision = Some(*shared),
                    None if revisions.len() < MAX_SHARED_REVISIONS => revisions.push(label),
                    None => {}
                }
            }
            out.push(facts);
        }
        out
    }

    /// Raw `lifecycle.apps.kruise.io/timestamp`; see [`PodFacts::lifecycle_since`].
    pub fn lifecycle_timestamp(&self) -> Option<&'a str> {
        self.pod
            .annotations()
            .get(keys::LIFECYCLE_TIMESTAMP_ANNOTATION)
    }

    /// When the lifecycle state last changed (`lifecycle.apps.kruise.io/timestamp`),
    /// parsed on demand: only held in-place updates need it.
    pub fn lifecycle_since(&self) -> Option<Timestamp> {
        self.lifecycle_timestamp().and_then(|v| v.parse().ok())
    }

    /// The `InPlaceUpdateReady` condition itself (a stalled update is reported in its
    /// reason and message once, not on every plan); read from the pod when asked, as few
    /// pods need it.
    pub fn in_place_condition(&self) -> Option<&'a CachedCondition> {
        self.pod.condition(keys::INPLACE_UPDATE_READY_CONDITION)
    }

    /// `metadata.uid` (empty when unset).
    pub fn uid(&self) -> &'a str {
        self.pod.metadata.uid.as_deref().unwrap_or_default()
    }

    /// `metadata.finalizers`.
    pub fn finalizers(&self) -> &'a [String] {
        self.pod.metadata.finalizers.as_deref().unwrap_or(&[])
    }

    /// `spec.containers`.
    pub fn container_specs(&self) -> &'a [CachedContainer] {
        self.pod.containers()
    }

    /// `status.containerStatuses`, read from the pod when asked.
    pub fn container_statuses(&self) -> &'a [CachedContainerStatus] {
        self.pod.container_statuses()
    }

    /// Neither terminating nor finished.
    pub fn is_active(&self) -> bool {
        !self.terminating && !self.finished
    }

    /// Ready for at least `min_ready_seconds` at `now`, and in lifecycle state Normal (or none).
    pub fn is_available(&self, min_ready_seconds: i32, now: Timestamp) -> bool {
        if !self.ready || !matches!(self.lifecycle, None | Some(LifecycleState::Normal)) {
            return false;
        }
        if min_ready_seconds <= 0 {
            return true;
        }
        match self.ready_since {
            Some(since) => now.duration_since(since).as_secs() >= i64::from(min_ready_seconds),
            None => false,
        }
    }
}

/// Percent-or-number settings resolved to pod counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Resolved {
    pub replicas: i32,
    pub partition: i32,
    pub max_surge: i32,
    pub max_unavailable: i32,
    /// `scaleStrategy.maxUnavailable`; `i32::MAX` when unset (no limit).
    pub scale_max_unavailable: i32,
}

/// The reference's `expectationDiffs`: how far the pods are from the desired state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Diffs {
    /// Pods to create (surge included).
    pub scale_up: i32,
    /// Of `scale_up`, how many from the current (old) revision.
    pub scale_up_old_revision: i32,
    /// Pods to delete.
    pub scale_down: i32,
    /// Of `scale_down`, how many from old revisions.
    pub scale_down_old_revision: i32,
    /// Most pods that may be created now (scale rate limit).
    pub scale_up_limit: i32,
    /// Most ready pods that may be deleted now.
    pub delete_ready_limit: i32,
    /// Surge pods in use.
    pub use_surge: i32,
    /// Of `use_surge`, how many on the old revision (rollback).
    pub use_surge_old_revision: i32,
    /// Pods to move to the update revision; negative means back to the current one.
    pub update: i32,
    /// Unavailability budget of the update step.
    pub update_max_unavailable: i32,
}

/// Why a pod is deleted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum DeleteReason {
    /// Already in PreparingDelete and its preDelete hook released.
    PreparingDeleteReleased,
    /// Named in `podsToDelete` or labelled `apps.kruise.io/specified-delete`.
    SpecifiedDelete,
    /// More pods than desired.
    ScaleDown,
    /// Surge pods removed at the end of an update.
    SurgeEnd,
}

/// How a pod is moved to another revision.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum UpdateMethod {
    InPlace,
    Recreate,
}

/// One thing the controller should do, in order.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Action {
    /// Create pod `<cloneset>-<instance_id>` (and its missing PVCs) from `revision`.
    #[serde(rename_all = "camelCase")]
    Create {
        revision: String,
        instance_id: String,
    },
    /// Delete the pod (and, unless reused, its PVCs).
    #[serde(rename_all = "camelCase")]
    Delete { pod: String, reason: DeleteReason },
    /// Move the pod to `revision`.
    #[serde(rename_all = "camelCase")]
    Update {
        pod: String,
        method: UpdateMethod,
        revision: String,
    },
    /// Change the pod's lifecycle state label (and hook side effects).
    #[serde(rename_all = "camelCase")]
    Lifecycle {
        pod: String,
        from: Option<LifecycleState>,
        to: LifecycleState,
        /// Set (true) or clear (false) this CloneSet's not-ready key on `KruisePodReady`.
        #[serde(skip_serializing_if = "Option::is_none")]
        mark_not_ready: Option<bool>,
    },
    /// The in-place update of the pod finished: set `InPlaceUpdateReady` True.
    #[serde(rename_all = "camelCase")]
    CompleteInPlaceUpdate { pod: String },
    /// The grace period of a pending in-place update is over: apply it.
    #[serde(rename_all = "camelCase")]
    ApplyGracedUpdate { pod: String },
    /// Delete a PVC that no pod will use again.
    #[serde(rename_all = "camelCase")]
    DeletePvc { pvc: String },
    /// Remove names from `spec.scaleStrategy.podsToDelete` (pods that no longer exist).
    #[serde(rename_all = "camelCase")]
    PrunePodsToDelete { names: Vec<String> },
    /// With `disablePVCReuse`: hand a PVC of a finished (inactive) pod over to that pod
    /// (owner reference CloneSet → pod), so that it goes away with the pod.
    #[serde(rename_all = "camelCase")]
    ReownPvcToPod { pvc: String, pod: String },
    /// Label a pod that lacks `pod-template-hash` (made before the label existed) with the
    /// short hash of its revision (docs "Short hash label"; OpenKruise adds it to old pods
    /// that lack it).
    #[serde(rename_all = "camelCase")]
    SetTemplateHash { pod: String, hash: String },
    /// Every container of the previous batch of the pod's in-place update is Ready: apply
    /// the next batch (container launch priority, see `plan::container_batches`).
    #[serde(rename_all = "camelCase")]
    ApplyNextContainerBatch { pod: String },
    /// The pod's in-place update failed or has not completed in time: write `reason` and
    /// `message` (what it waits for) on its `InPlaceUpdateReady` condition, which stays
    /// False, and record a Warning event on the pod.
    #[serde(rename_all = "camelCase")]
    ReportInPlaceStall {
        pod: String,
        reason: String,
        message: String,
    },
    /// `ResourcesDeletionProtection`: put the deletion-protection finalizer on the
    /// CloneSet ([`crate::protection`]). A reconcile that writes it does nothing else.
    #[serde(rename_all = "camelCase")]
    AddFinalizer { finalizer: String },
    /// Take the deletion-protection finalizer off the CloneSet (gate off, or no longer
    /// protected). A reconcile that writes it does nothing else.
    #[serde(rename_all = "camelCase")]
    RemoveFinalizer { finalizer: String },
    /// The CloneSet is being deleted while protected: the finalizer stays, and a Warning
    /// event says why (`message`). Writes nothing.
    #[serde(rename_all = "camelCase")]
    HoldDeletion { message: String },
    /// Make the CloneSet the controller of an orphan pod that matches its selector
    /// ([`crate::claim`]). A reconcile that adopts or releases does nothing else.
    #[serde(rename_all = "camelCase")]
    AdoptPod { pod: String },
    /// Remove the CloneSet's owner reference from a pod that no longer matches its
    /// selector ([`crate::claim`]).
    #[serde(rename_all = "camelCase")]
    ReleasePod { pod: String },
    /// Image pre-download ([`crate::predownload`]): create the ImagePullJob `job`, which
    /// pulls `image` on the nodes of the pods not on the update revision yet.
    #[serde(rename_all = "camelCase")]
    CreateImagePullJob { job: String, image: String },
    /// Delete the CloneSet's ImagePullJob `job`: its revisions have converged.
    #[serde(rename_all = "camelCase")]
    DeleteImagePullJob { job: String },
    /// Label the update revision `revision` as handled by pre-download: its jobs created,
    /// or, with `ignored`, skipped for that reason. Sent once every create of the same
    /// plan succeeded.
    #[serde(rename_all = "camelCase")]
    LabelPreDownloadRevision {
        revision: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        ignored: Option<String>,
    },
}

/// A problem that the planner reports as a condition and an event instead of acting.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PlanProblem {
    /// `FailedScale` or `FailedUpdate`.
    pub condition: &'static str,
    pub reason: String,
    pub message: String,
}

/// Revision bookkeeping the controller must write.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RevisionPlan {
    pub update_revision: String,
    pub current_revision: String,
    /// The update revision when it does not exist yet and must be created.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub create: Option<ControllerRevision>,
    /// An existing equal revision whose `revision` number must be bumped (rollback).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bump: Option<ControllerRevision>,
    /// Names of old revisions beyond `revisionHistoryLimit`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub delete: Vec<String>,
    pub collision_count: i32,
}

/// What every step of one plan shares: the snapshot, the pods' facts and the revisions.
#[derive(Clone, Debug)]
pub struct PlanContext<'a> {
    pub snapshot: Snapshot<'a>,
    /// Facts of every pod in the snapshot, in snapshot order.
    pub pods: Vec<PodFacts<'a>>,
    /// Name of the revision made from the current template.
    pub update_revision: String,
    /// Name of the revision that all pods had before (`status.currentRevision`).
    pub current_revision: String,
    pub resolved: Resolved,
}

impl<'a> PlanContext<'a> {
    pub fn cloneset(&self) -> &CloneSet {
        self.snapshot.cloneset
    }

    pub fn now(&self) -> Timestamp {
        self.snapshot.now
    }

    pub fn options(&self) -> &PlanOptions {
        self.snapshot.options
    }

    /// Pods that are neither terminating nor finished.
    pub fn active_pods(&self) -> impl Iterator<Item = &PodFacts<'a>> {
        self.pods.iter().filter(|p| p.is_active())
    }

    /// The pod is on the update revision.
    pub fn is_updated(&self, pod: &PodFacts) -> bool {
        pod.revision
            .is_some_and(|label| revision_matches(label, &self.update_revision))
    }

    /// [`Self::is_updated`] as the scale step sees it: with `PreparingUpdateAsUpdate`, a
    /// pod in PreparingUpdate counts as updated too (the reference's `IsPodUpdate`, used
    /// for the scale arithmetic and for splitting scale-down victims by revision).
    pub fn is_updated_for_scale(&self, pod: &PodFacts) -> bool {
        (self.options().preparing_update_as_update
            && pod.lifecycle == Some(LifecycleState::PreparingUpdate))
            || self.is_updated(pod)
    }
}

pub use inplace_proto::inplace_contract::revision_matches;
