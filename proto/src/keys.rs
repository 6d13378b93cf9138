//! Well-known label, annotation, finalizer and condition names.
//!
//! The values are the reference implementation's, byte for byte, because pods, PVCs
//! and revisions written by OpenKruise must keep working when inplace takes over.

/// API group of every inplace resource.
pub const GROUP: &str = "apps.kruise.io";
/// The served (and stored) version of CloneSet and ContainerRecreateRequest. ImagePullJob
/// and NodeImage are stored as `v1beta1` (OpenKruise v1.9.0's storage version): their
/// types' `api_version()` says so.
pub const VERSION: &str = "v1alpha1";

/// Pod and PVC label: the instance id shared by a pod and its PVCs.
pub const INSTANCE_ID_LABEL: &str = "apps.kruise.io/cloneset-instance-id";
/// Pod label: the ControllerRevision name (or short hash) the pod was made from.
pub const REVISION_LABEL: &str = "controller-revision-hash";
/// Pod label: always the short hash of the revision.
pub const POD_TEMPLATE_HASH_LABEL: &str = "pod-template-hash";
/// Pod label: presence (any value) asks the CloneSet to delete this pod.
pub const SPECIFIED_DELETE_LABEL: &str = "apps.kruise.io/specified-delete";
/// Pod label: the lifecycle state.
pub const LIFECYCLE_STATE_LABEL: &str = "lifecycle.apps.kruise.io/state";
/// Pod annotation: RFC 3339 time of the last lifecycle state change.
pub const LIFECYCLE_TIMESTAMP_ANNOTATION: &str = "lifecycle.apps.kruise.io/timestamp";
/// Pod annotation: JSON [`crate::InPlaceUpdateState`].
pub const INPLACE_UPDATE_STATE_ANNOTATION: &str = "apps.kruise.io/inplace-update-state";
/// Legacy spelling of [`INPLACE_UPDATE_STATE_ANNOTATION`], still read.
pub const INPLACE_UPDATE_STATE_ANNOTATION_LEGACY: &str = "inplace-update-state";
/// Pod annotation: the pending in-place update held during `gracePeriodSeconds`.
pub const INPLACE_UPDATE_GRACE_ANNOTATION: &str = "apps.kruise.io/inplace-update-grace";
/// Legacy spelling of [`INPLACE_UPDATE_GRACE_ANNOTATION`], still read.
pub const INPLACE_UPDATE_GRACE_ANNOTATION_LEGACY: &str = "inplace-update-grace";
/// Pod annotation written by the daemon: per-container runtime metadata.
pub const RUNTIME_CONTAINERS_META_ANNOTATION: &str = "apps.kruise.io/runtime-containers-meta";
/// Pod (template) annotation: `Ordered` gives containers a launch priority by their
/// position, the first one highest.
pub const CONTAINER_LAUNCH_PRIORITY_ANNOTATION: &str = "apps.kruise.io/container-launch-priority";
/// Value of [`CONTAINER_LAUNCH_PRIORITY_ANNOTATION`] that orders containers by position.
pub const CONTAINER_LAUNCH_ORDERED: &str = "Ordered";
/// Container env: an explicit launch priority (an integer, higher starts first).
pub const CONTAINER_PRIORITY_ENV: &str = "KRUISE_CONTAINER_PRIORITY";
/// Container env injected by the reference's webhook: a ConfigMap key `p_<priority>`.
pub const CONTAINER_BARRIER_ENV: &str = "KRUISE_CONTAINER_BARRIER";
/// Suffix of the per-pod ConfigMap the barrier env reads: `<pod>-barrier`.
pub const CONTAINER_BARRIER_CONFIGMAP_SUFFIX: &str = "-barrier";
/// Pod annotation: `"true"` once every launch priority of the pod has been released.
pub const CONTAINER_LAUNCH_PRIORITY_COMPLETED_ANNOTATION: &str =
    "apps.kruise.io/container-launch-priority-completed";
/// Pod template annotation that `kubectl rollout restart` (and `kubectl inplace rollout
/// restart`) sets to the time of the request: a change of it alone restarts every
/// container in place.
pub const RESTARTED_AT_ANNOTATION: &str = "kubectl.kubernetes.io/restartedAt";
/// Pod annotation: scale-down preference, lower is deleted first.
pub const POD_DELETION_COST_ANNOTATION: &str = "controller.kubernetes.io/pod-deletion-cost";

/// CloneSet label: PreparingDelete pods are not counted in `replicas`.
pub const SCALING_EXCLUDE_PREPARING_DELETE_LABEL: &str =
    "apps.kruise.io/cloneset-scaling-exclude-preparing-delete";
/// CloneSet annotation: pre-download parallelism (integer).
pub const IMAGE_PREDOWNLOAD_PARALLELISM_ANNOTATION: &str =
    "apps.kruise.io/image-predownload-parallelism";
/// CloneSet annotation: pre-download timeout in seconds.
pub const IMAGE_PREDOWNLOAD_TIMEOUT_ANNOTATION: &str =
    "apps.kruise.io/image-predownload-timeout-seconds";
/// CloneSet annotation: start pre-download after this many updated ready pods.
pub const IMAGE_PREDOWNLOAD_MIN_UPDATED_READY_PODS_ANNOTATION: &str =
    "apps.kruise.io/image-predownload-min-updated-ready-pods";
/// Ours, not OpenKruise's: on the ImagePullJobs the CloneSet controller creates for
/// pre-download, the nodes of the pods still to update, comma-separated, in the CloneSet's
/// update order. The ImagePullJob controller hands its parallelism slots out in this order
/// (nodes not listed after, by name); a job without it pulls by node name.
pub const PREDOWNLOAD_NODE_ORDER_ANNOTATION: &str = "inplace.kruise.io/predownload-node-order";
/// CloneSet label: deletion protection (`Always` or `Cascading`).
pub const DELETE_PROTECTION_LABEL: &str = "policy.kruise.io/delete-protection";

/// ControllerRevision label: images of this revision were pre-downloaded
/// (the doubled "pre" is the reference's spelling).
pub const PRE_PREDOWNLOAD_CREATED_LABEL: &str = "apps.kruise.io/pre-predownload-created";
/// ControllerRevision label: pre-download was skipped for this revision.
pub const IMAGE_PREDOWNLOAD_IGNORED_LABEL: &str = "apps.kruise.io/image-predownload-ignored";
/// ControllerRevision label: FNV-32 hash of the revision data.
pub const CONTROLLER_REVISION_HASH_LABEL: &str = "controller.kubernetes.io/hash";
/// ControllerRevision annotation: FNV-32a hash of the volumeClaimTemplates.
pub const VOLUME_CLAIM_TEMPLATE_HASH_ANNOTATION: &str =
    "kruise.io/cloneset-volumeclaimtemplate-hash";

/// Pod condition and readiness gate: the in-place update has completed.
pub const INPLACE_UPDATE_READY_CONDITION: &str = "InPlaceUpdateReady";
/// Pod condition and readiness gate: multi-writer not-ready switch.
pub const KRUISE_POD_READY_CONDITION: &str = "KruisePodReady";
/// Reason on `InPlaceUpdateReady=False` while an update runs.
pub const START_INPLACE_UPDATE_REASON: &str = "StartInPlaceUpdate";
/// Reason on `InPlaceUpdateReady` (and the pod's Warning event, and the CloneSet's
/// `FailedUpdate` condition) when a container of the update fails (a bad image, a crash).
/// Ours: the reference reports nothing.
pub const INPLACE_UPDATE_FAILED_REASON: &str = "InPlaceUpdateFailed";
/// The same when an update has not completed within its deadline.
pub const INPLACE_UPDATE_STALLED_REASON: &str = "InPlaceUpdateStalled";
/// The same when the pod's in-place update state annotation cannot be read.
pub const INPLACE_UPDATE_STATE_UNREADABLE_REASON: &str = "InvalidInPlaceUpdateState";
/// `KruisePodReady` not-ready key used by the preDelete hook.
pub const PRE_DELETE_HOOK_KEY: &str = "preDeleteHook";
/// `KruisePodReady` not-ready key used by the inPlaceUpdate hook.
pub const PRE_UPDATE_HOOK_KEY: &str = "preUpdateHook";

/// CloneSet condition types.
pub const CONDITION_FAILED_SCALE: &str = "FailedScale";
pub const CONDITION_FAILED_UPDATE: &str = "FailedUpdate";
pub const CONDITION_PROGRESSING: &str = "Progressing";

/// `Progressing` condition reasons.
pub const REASON_CLONESET_UPDATED: &str = "CloneSetUpdated";
pub const REASON_CLONESET_AVAILABLE: &str = "CloneSetAvailable";
pub const REASON_CLONESET_PAUSED: &str = "CloneSetPaused";
pub const REASON_PARTITION_AVAILABLE: &str = "ProgressPartitionAvailable";
pub const REASON_PROGRESS_DEADLINE_EXCEEDED: &str = "ProgressDeadlineExceeded";

/// ContainerRecreateRequest labels and finalizer.
pub const CRR_POD_UID_LABEL: &str = "crr.apps.kruise.io/pod-uid";
pub const CRR_NODE_NAME_LABEL: &str = "crr.apps.kruise.io/node-name";
pub const CRR_ACTIVE_LABEL: &str = "crr.apps.kruise.io/active";
/// CRR label: the pod's name (the reference's webhook copies `spec.podName` here).
pub const CRR_POD_NAME_LABEL: &str = "crr.apps.kruise.io/pod-name";
pub const CRR_UNREADY_ACQUIRED_FINALIZER: &str = "crr.apps.kruise.io/unready-acquired";
/// CRR annotation (v1alpha1): JSON list of [`crate::CrrSyncContainerStatus`], the manager's
/// snapshot of the pod's running containers while the CRR is Recreating (v1beta1 keeps it
/// in `status.containerStatusSnapshot`).
pub const CRR_SYNC_CONTAINER_STATUSES_ANNOTATION: &str =
    "crr.apps.kruise.io/sync-container-statuses";
/// CRR annotation (v1alpha1): RFC 3339 time at which the manager made the pod not-ready for
/// `unreadyGracePeriodSeconds` (v1beta1: the `PreRecreateGrace` condition). Set once,
/// never moved.
pub const CRR_UNREADY_ACQUIRED_ANNOTATION: &str = "crr.apps.kruise.io/unready-acquired";

/// NodeImage label: keep this NodeImage even though no Node of that name exists.
pub const FAKE_NODEIMAGE_LABEL: &str = "apps.kruise.io/fake-nodeimage";
/// Namespace the controller copies ImagePullJob pull secrets into for the daemons.
pub const DAEMON_CONFIG_NAMESPACE: &str = "kruise-daemon-config";

/// Sandbox annotation on image pulls made by the daemon.
pub const PULLING_IMAGE_BY_ANNOTATION: &str = "apps.kruise.io/pulling-image-by";
/// Value of [`PULLING_IMAGE_BY_ANNOTATION`] on the daemon's pulls.
pub const PULLING_IMAGE_BY_VALUE: &str = "kruise-daemon";

/// Events the controller emits (reasons).
pub mod events {
    pub const SUCCESSFUL_CREATE: &str = "SuccessfulCreate";
    pub const FAILED_CREATE: &str = "FailedCreate";
    pub const SUCCESSFUL_DELETE: &str = "SuccessfulDelete";
    pub const FAILED_DELETE: &str = "FailedDelete";
    pub const SUCCESSFUL_UPDATE_POD_IN_PLACE: &str = "SuccessfulUpdatePodInPlace";
    pub const FAILED_UPDATE_POD_IN_PLACE: &str = "FailedUpdatePodInPlace";
    pub const SUCCESSFUL_UPDATE_POD_RECREATE: &str = "SuccessfulUpdatePodReCreate";
    pub const FAILED_UPDATE_POD_RECREATE: &str = "FailedUpdatePodReCreate";
    pub const SCALE_UP_LIMITED: &str = "ScaleUpLimited";
    pub const CREATED_IMAGE_PULL_JOB: &str = "CreatedImagePullJob";
    pub const FAILED_CREATE_IMAGE_PULL_JOB: &str = "FailedCreateImagePullJob";
}
