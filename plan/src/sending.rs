//! How the applier sends a plan's steps, as decisions it follows: the phases (consecutive
//! steps of one kind) and how each runs, which condition a failure is reported under,
//! which conflicts are no failure, and what is said about a step once sent (its event,
//! counter, log line and error text). The applier only sends and reports.

use inplace_proto::keys;

use k8s_openapi::api::core::v1::ObjectReference;
use serde::Serialize;

use crate::action_write::{Patch, PvcDelete, Target, Write};
use crate::inplace_write::{InPlaceWrite, InPlaceWriteKind};
use crate::model::{Action, UpdateMethod};
use crate::step::{Step, StepWrite};

/// Which phase an action belongs to (consecutive actions of one phase run together).
///
/// The refresh actions of a pod (apply a held update, complete an in-place update, move
/// its lifecycle state) come pod by pod in a plan (`complete a, lifecycle a, complete b,
/// …`); as separate kinds they made one-action phases, i.e. one API call at a time for
/// hundreds of pods. They form one phase, run pod-parallel with each pod's actions in
/// plan order ([`chains`]).
pub fn phase_of(action: &Action) -> &'static str {
    match action {
        Action::Create { .. } => "create",
        Action::Delete { .. } => "delete",
        Action::Update { .. } => "update",
        Action::Lifecycle { .. }
        | Action::CompleteInPlaceUpdate { .. }
        | Action::ApplyGracedUpdate { .. }
        | Action::ApplyNextContainerBatch { .. }
        | Action::ReportInPlaceStall { .. } => "refresh",
        Action::SetTemplateHash { .. } => "template_hash",
        Action::DeletePvc { .. } => "delete_pvc",
        Action::PrunePodsToDelete { .. } => "prune",
        Action::ReownPvcToPod { .. } => "reown",
        Action::AddFinalizer { .. }
        | Action::RemoveFinalizer { .. }
        | Action::HoldDeletion { .. } => "finalizer",
        Action::AdoptPod { .. } | Action::ReleasePod { .. } => "claim",
        Action::CreateImagePullJob { .. }
        | Action::DeleteImagePullJob { .. }
        | Action::LabelPreDownloadRevision { .. } => "predownload",
    }
}

/// How the steps of one phase run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PhaseRun {
    /// Creates: in batches of 1, 2, 4, …, stopping after the first batch with a failure.
    SlowStart,
    /// One after the other in plan order, the first failure ending the phase (the
    /// finalizer and the claims: each written ends the reconcile; pre-download: its
    /// revision label only once every job is created).
    Sequential,
    /// In [`chains`], with bounded parallelism.
    PerPod,
}

/// How the phase of `action` runs.
pub fn run_of(action: &Action) -> PhaseRun {
    match phase_of(action) {
        "create" => PhaseRun::SlowStart,
        "finalizer" | "claim" | "predownload" => PhaseRun::Sequential,
        _ => PhaseRun::PerPod,
    }
}

/// The batches a phase of `n` creates is sent in, as ranges of its steps: 1, 2, 4, …
/// (slow start: a failing create, e.g. refused by a quota, fails once, not `n` times).
pub fn slow_start(n: usize) -> Vec<std::ops::Range<usize>> {
    let (mut batches, mut start, mut size) = (Vec::new(), 0, 1usize);
    while start < n {
        let end = n.min(start + size);
        batches.push(start..end);
        start = end;
        size = size.saturating_mul(2);
    }
    batches
}

/// `steps` in phases: runs of consecutive steps of one phase, in order.
pub fn phases(steps: &[Step]) -> Vec<Vec<&Step>> {
    let mut phases: Vec<Vec<&Step>> = Vec::new();
    for step in steps {
        match phases.last_mut() {
            Some(last)
                if last.first().map(|s| phase_of(&s.action)) == Some(phase_of(&step.action)) =>
            {
                last.push(step);
            }
            _ => phases.push(vec![step]),
        }
    }
    phases
}

/// The steps of a phase in chains: one per pod (its steps in plan order), one per step
/// without a pod; chains in order of first appearance. A chain stops at its first failure.
pub fn chains<'a>(phase: &[&'a Step]) -> Vec<Vec<&'a Step>> {
    let mut chains: Vec<Vec<&Step>> = Vec::new();
    let mut index: std::collections::BTreeMap<&str, usize> = std::collections::BTreeMap::new();
    for &step in phase {
        match step.pod() {
            Some(pod) => match index.get(pod) {
                Some(&i) => chains[i].push(step),
                None => {
                    index.insert(pod, chains.len());
                    chains.push(vec![step]);
                }
            },
            None => chains.push(vec![step]),
        }
    }
    chains
}

/// How the steps of `phase` are sent, by its [`run_of`]: batches one after the other,
/// the chains of a batch at once (bounded), each chain's steps in order, a chain stopping
/// at its first failure and the phase after the first batch with one. Slow start: its
/// batches ([`slow_start`]), a chain per step; sequential: one chain; per pod: one batch
/// of [`chains`].
pub fn batches<'a>(phase: &[&'a Step]) -> Vec<Vec<Vec<&'a Step>>> {
    match phase.first().map(|s| run_of(&s.action)) {
        None => Vec::new(),
        Some(PhaseRun::SlowStart) => slow_start(phase.len())
            .into_iter()
            .map(|batch| phase[batch].iter().map(|&s| vec![s]).collect())
            .collect(),
        Some(PhaseRun::Sequential) => vec![vec![phase.to_vec()]],
        Some(PhaseRun::PerPod) => vec![chains(phase)],
    }
}

/// The CloneSet condition a failed action is reported under.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailureKind {
    Scale,
    Update,
}

impl FailureKind {
    /// The kind of a failure of `action`.
    pub fn of(action: &Action) -> Self {
        match action {
            Action::Create { .. }
            | Action::Delete { .. }
            | Action::DeletePvc { .. }
            | Action::PrunePodsToDelete { .. }
            | Action::ReownPvcToPod { .. } => Self::Scale,
            _ => Self::Update,
        }
    }

    pub fn condition(self) -> &'static str {
        match self {
            Self::Scale => keys::CONDITION_FAILED_SCALE,
            Self::Update => keys::CONDITION_FAILED_UPDATE,
        }
    }
}

/// Whether a failed write of `action` fails the reconcile. The ImagePullJob writes of
/// image pre-download do not (OpenKruise logs them and goes on): they end no later phase,
/// and the reconcile is due again after [`RETRY_SET_ASIDE`].
pub fn fails_reconcile(action: &Action) -> bool {
    phase_of(action) != "predownload"
}

/// How soon a reconcile is due again after a write whose failure was set aside
/// ([`fails_reconcile`]).
pub const RETRY_SET_ASIDE: std::time::Duration = std::time::Duration::from_secs(5);

/// Whether a 409 answering the write of `action` is let pass instead of failing: the
/// write is pinned to the pod version judged, and the pod is judged again from its newer
/// version.
pub fn passes_conflict(action: &Action) -> bool {
    matches!(
        action,
        Action::CompleteInPlaceUpdate { .. } | Action::ReportInPlaceStall { .. }
    )
}

/// The pod that must be in the cache before the step of `action` is sent (its events
/// refer to it).
pub fn needs_cached_pod(action: &Action) -> Option<&str> {
    match action {
        Action::Update { pod, .. } => Some(pod),
        _ => None,
    }
}

/// The writes that follow a step once it is sent and reported: a deleted pod's PVCs
/// (each only of its UID), after the pod's deletion is reported.
pub fn follow_ups(step: &Step) -> &[PvcDelete] {
    match &step.write {
        Ok(StepWrite::Object(Write::DeletePod { pvcs, .. })) => pvcs,
        _ => &[],
    }
}

/// What became of a step's write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Sent {
    Written,
    /// Answered 409 and let pass ([`passes_conflict`]).
    Passed,
    /// Answered 409 (the error's text).
    Conflict(String),
    /// Failed otherwise (the error's text).
    Failed(String),
    /// Not sent: the write could not be planned (the error's text).
    Unplanned(String),
}

impl Sent {
    /// What became of the write of `action`: `failed` is the error of a failed send
    /// (whether it is a 409, its text); `planned` whether there was a write to send.
    pub fn of(action: &Action, planned: bool, failed: Option<(bool, String)>) -> Self {
        match failed {
            None => Self::Written,
            Some((_, e)) if !planned => Self::Unplanned(e),
            Some((true, _)) if passes_conflict(action) => Self::Passed,
            Some((true, e)) => Self::Conflict(e),
            Some((false, e)) => Self::Failed(e),
        }
    }

    /// The error's text when the step failed.
    fn error(&self) -> Option<&str> {
        match self {
            Self::Conflict(e) | Self::Failed(e) | Self::Unplanned(e) => Some(e),
            Self::Written | Self::Passed => None,
        }
    }
}

/// The pod an event refers to.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum PodRef {
    /// The cached pod of this name (its full reference; none if it is not cached).
    Cached(String),
    /// A pod of this name not cached yet (just created).
    Named(String),
}

/// A Kubernetes event about a step.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StepEvent {
    /// The event is regarding the pod (the CloneSet related; the pod must be cached),
    /// else regarding the CloneSet (the pod, if any, related).
    pub regarding_pod: bool,
    pub pod: Option<PodRef>,
    pub warning: bool,
    pub reason: String,
    pub action: &'static str,
    pub message: String,
}

/// The metric a step sent counts in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Counter {
    PodsCreated,
    PodsDeleted,
    PodsRecreated,
    PodsUpdatedInPlace,
}

/// What is said about a step once sent.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    pub event: Option<StepEvent>,
    pub counter: Option<Counter>,
    /// A line for the controller's log (info).
    pub log: Option<String>,
}

impl StepEvent {
    /// The event's regarding and related objects, given the CloneSet's reference, its
    /// namespace and the reference of a cached pod by name (`cached`). An event regarding
    /// a pod that is not cached is not sent: `Err` names the pod.
    pub fn objects(
        &self,
        cloneset: &ObjectReference,
        ns: &str,
        cached: impl Fn(&str) -> Option<ObjectReference>,
    ) -> Result<(ObjectReference, Option<ObjectReference>), String> {
        let pod = match &self.pod {
            Some(PodRef::Cached(name)) => match cached(name) {
                None if self.regarding_pod => return Err(name.clone()),
                pod => pod,
            },
            Some(PodRef::Named(name)) => Some(ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                name: Some(name.clone()),
                namespace: Some(ns.to_owned()),
                ..ObjectReference::default()
            }),
            None => None,
        };
        Ok(match pod {
            Some(pod) if self.regarding_pod => (pod, Some(cloneset.clone())),
            pod => (cloneset.clone(), pod),
        })
    }
}

fn event(
    pod: Option<PodRef>,
    warning: bool,
    reason: &str,
    action: &'static str,
    message: String,
) -> StepEvent {
    StepEvent {
        regarding_pod: false,
        pod,
        warning,
        reason: reason.to_owned(),
        action,
        message,
    }
}

/// What is said about `step` after `sent`: the reference's events for creates, deletes
/// and updates (OpenKruise's texts), the stall's and the held deletion's Warning events.
pub fn report(step: &Step, sent: &Sent) -> Report {
    use keys::events as ev;
    let written = matches!(sent, Sent::Written);
    let cached = |pod: &str| Some(PodRef::Cached(pod.to_owned()));
    let mut report = Report::default();
    match (&step.action, sent) {
        (
            Action::Update {
                pod,
                method,
                revision,
            },
            sent,
        ) => {
            let in_place = *method == UpdateMethod::InPlace;
            if written {
                report.counter = Some(if in_place {
                    Counter::PodsUpdatedInPlace
                } else {
                    Counter::PodsRecreated
                });
            }
            report.event = match (in_place, sent.error()) {
                (true, None) => Some(event(
                    cached(pod),
                    false,
                    ev::SUCCESSFUL_UPDATE_POD_IN_PLACE,
                    "UpdateInPlace",
                    format!("successfully update pod {pod} in-place(revision {revision})"),
                )),
                (true, Some(err)) => Some(event(
                    cached(pod),
                    true,
                    ev::FAILED_UPDATE_POD_IN_PLACE,
                    "UpdateInPlace",
                    format!("failed to update pod {pod} in-place(revision {revision}): {err}"),
                )),
                (false, None) => Some(event(
                    cached(pod),
                    false,
                    ev::SUCCESSFUL_UPDATE_POD_RECREATE,
                    "Recreate",
                    format!(
                        "successfully patch pod {pod} specified-delete for update(revision {revision})"
                    ),
                )),
                (false, Some(_)) if matches!(sent, Sent::Unplanned(_)) => None,
                (false, Some(err)) => Some(event(
                    cached(pod),
                    true,
                    ev::FAILED_UPDATE_POD_RECREATE,
                    "Recreate",
                    format!(
                        "failed to patch pod {pod} specified-delete for update(revision {revision}): {err}"
                    ),
                )),
            };
        }
        (Action::Create { .. }, sent) => {
            let Ok(StepWrite::Object(Write::Create(recipe))) = &step.write else {
                return report;
            };
            let pod = &recipe.pod;
            match sent {
                Sent::Written => {
                    report.counter = Some(Counter::PodsCreated);
                    report.event = Some(event(
                        Some(PodRef::Named(pod.clone())),
                        false,
                        ev::SUCCESSFUL_CREATE,
                        "Create",
                        format!("succeed to create pod {pod}"),
                    ));
                }
                Sent::Failed(err) => {
                    report.event = Some(event(
                        None,
                        true,
                        ev::FAILED_CREATE,
                        "Create",
                        format!("failed to create pod {pod}: {err}"),
                    ));
                }
                // A conflict defers the create (retried); nothing was tried when unplanned.
                _ => {}
            }
        }
        (Action::Delete { pod, reason }, Sent::Written) => {
            report.counter = Some(Counter::PodsDeleted);
            report.event = Some(event(
                cached(pod),
                false,
                ev::SUCCESSFUL_DELETE,
                "Delete",
                format!("succeed to delete pod {pod} ({reason:?})"),
            ));
        }
        (Action::Delete { pod, .. }, Sent::Conflict(err) | Sent::Failed(err)) => {
            report.event = Some(event(
                cached(pod),
                true,
                ev::FAILED_DELETE,
                "Delete",
                format!("failed to delete pod {pod}: {err}"),
            ));
        }
        (
            Action::ReportInPlaceStall {
                pod,
                reason,
                message,
            },
            Sent::Written,
        ) => {
            report.event = Some(StepEvent {
                regarding_pod: true,
                ..event(cached(pod), true, reason, "UpdateInPlace", message.clone())
            });
        }
        (Action::CreateImagePullJob { job, image }, sent) => {
            let created = matches!(
                &step.write,
                Ok(StepWrite::Object(Write::CreateImagePullJob { .. }))
            );
            report.event = match sent.error() {
                None if created => Some(event(
                    None,
                    false,
                    ev::CREATED_IMAGE_PULL_JOB,
                    "PreDownloadImage",
                    format!("created ImagePullJob {job} for image: {image}"),
                )),
                Some(err) => Some(event(
                    None,
                    true,
                    ev::FAILED_CREATE_IMAGE_PULL_JOB,
                    "PreDownloadImage",
                    format!("failed to create ImagePullJob {job}: {err}"),
                )),
                None => None,
            };
        }
        (Action::HoldDeletion { message }, Sent::Written) => {
            report.event = Some(event(
                None,
                true,
                crate::protection::REASON_HELD,
                "Delete",
                message.clone(),
            ));
        }
        (action, Sent::Written) => report.log = log_line(action, &step.write),
        _ => {}
    }
    report
}

/// The log line of a write that has no event.
fn log_line(action: &Action, write: &Result<StepWrite, crate::step::WriteError>) -> Option<String> {
    match (action, write) {
        (Action::PrunePodsToDelete { names }, _) => Some(format!("pruned podsToDelete {names:?}")),
        (Action::AddFinalizer { .. } | Action::RemoveFinalizer { .. }, _) => {
            Some(format!("deletion-protection finalizer updated: {action:?}"))
        }
        (Action::AdoptPod { pod }, _) => Some(format!("adopted pod {pod}")),
        (Action::ReleasePod { pod }, _) => Some(format!("released pod {pod}")),
        (Action::DeleteImagePullJob { job }, Ok(StepWrite::Object(_))) => {
            Some(format!("deleted ImagePullJob {job}: revisions converged"))
        }
        (Action::LabelPreDownloadRevision { revision, ignored }, _) => Some(match ignored {
            Some(reason) => format!("pre-download skipped for revision {revision}: {reason}"),
            None => format!("pre-download jobs in place for revision {revision}"),
        }),
        (Action::ApplyNextContainerBatch { pod }, _) => Some(format!(
            "pod {pod}: next container batch of the in-place update applied"
        )),
        (Action::ApplyGracedUpdate { pod }, Ok(StepWrite::InPlace(w))) if w.applies_spec() => Some(
            format!("pod {pod}: grace period over, in-place update applied"),
        ),
        _ => None,
    }
}

/// What a failed pod patch of the in-place `write` was doing (the error's text);
/// `not_ready`: the `InPlaceUpdateReady` False written first.
pub fn in_place_what(write: &InPlaceWrite, not_ready: bool) -> String {
    let pod = &write.pod;
    match write.kind {
        _ if not_ready => format!(
            "set {} False on pod {pod}",
            keys::INPLACE_UPDATE_READY_CONDITION
        ),
        InPlaceWriteKind::Start => format!("update in place pod {pod}"),
        InPlaceWriteKind::NextBatch => format!("apply the next container batch of pod {pod}"),
        InPlaceWriteKind::ApplyHeld => format!("apply held in-place update of pod {pod}"),
    }
}

/// What a failed planned `patch` of `action` was doing (the error's text).
pub fn patch_what(action: &Action, patch: &Patch) -> String {
    let name = &patch.name;
    match (action, patch.target) {
        (Action::ReownPvcToPod { pvc, pod }, _) => format!("hand PVC {pvc} to pod {pod}"),
        (Action::PrunePodsToDelete { .. }, _) => "prune spec.scaleStrategy.podsToDelete".into(),
        (Action::SetTemplateHash { .. }, _) => format!("label pod {name}"),
        (Action::Update { .. }, _) => format!("mark for recreate pod {name}"),
        (Action::AddFinalizer { .. } | Action::RemoveFinalizer { .. }, _) => {
            "write CloneSet finalizers".into()
        }
        (Action::AdoptPod { .. }, _) => format!("adopt pod {name}"),
        (Action::ReleasePod { .. }, _) => format!("release pod {name}"),
        (Action::LabelPreDownloadRevision { .. }, _) => format!("label ControllerRevision {name}"),
        (_, Target::PodStatus) => format!("patch status of pod {name}"),
        (_, target) => format!("patch {target:?} {name}"),
    }
}

#[cfg(test)]
mod tests;
