//! A plan's steps: each action with its complete write, or the typed reason its write
//! could not be planned ([`WriteError`]).
//!
//! The writes are planned by the modules of each kind ([`super::lifecycle_write`],
//! [`super::completion_write`], [`super::inplace_write`], [`super::action_write`]); this
//! module pairs every action with the one write that is its own, so that the applier
//! sends what the step holds and nothing is joined back by index, address or pod name.

use std::collections::HashMap;

use serde::{Serialize, Serializer};

use super::action_write::{self, ActionInputs, ActionWriteError, Write};
use super::completion_write::{self, CompletionWrite};
use super::inplace_write::{self, InPlaceWrite, InPlaceWriteError, WriteInputs};
use super::lifecycle_write::{self, LifecycleWrite};
use super::model::{Action, PodFacts};

/// One action and what it writes.
#[derive(Clone, Debug, PartialEq)]
pub struct Step {
    pub action: Action,
    /// The write, or why it could not be planned (the applier reports it as the action's
    /// failure, with its retry class and metric label).
    pub write: Result<StepWrite, WriteError>,
}

impl Step {
    /// The pod the step writes, if it is about one.
    pub fn pod(&self) -> Option<&str> {
        pod_of(&self.action)
    }
}

/// The pod `action` writes, if it is about one.
pub fn pod_of(action: &Action) -> Option<&str> {
    match action {
        Action::Delete { pod, .. }
        | Action::Update { pod, .. }
        | Action::Lifecycle { pod, .. }
        | Action::CompleteInPlaceUpdate { pod }
        | Action::ApplyGracedUpdate { pod }
        | Action::ApplyNextContainerBatch { pod }
        | Action::ReportInPlaceStall { pod, .. }
        | Action::SetTemplateHash { pod, .. }
        | Action::ReownPvcToPod { pod, .. }
        | Action::AdoptPod { pod }
        | Action::ReleasePod { pod } => Some(pod),
        Action::Create { .. }
        | Action::DeletePvc { .. }
        | Action::PrunePodsToDelete { .. }
        | Action::AddFinalizer { .. }
        | Action::RemoveFinalizer { .. }
        | Action::HoldDeletion { .. }
        | Action::CreateImagePullJob { .. }
        | Action::DeleteImagePullJob { .. }
        | Action::LabelPreDownloadRevision { .. } => None,
    }
}

/// Shown as `{action, write}` or `{action, writeError}`.
impl Serialize for Step {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Shown<'a> {
            action: &'a Action,
            #[serde(skip_serializing_if = "Option::is_none")]
            write: Option<&'a StepWrite>,
            #[serde(skip_serializing_if = "Option::is_none")]
            write_error: Option<String>,
        }
        Shown {
            action: &self.action,
            write: self.write.as_ref().ok(),
            write_error: self.write.as_ref().err().map(ToString::to_string),
        }
        .serialize(serializer)
    }
}

/// The write of one step. Shown as the write itself (its step's action says which kind
/// it is).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(untagged)]
pub enum StepWrite {
    /// A lifecycle transition ([`Action::Lifecycle`]).
    Lifecycle(LifecycleWrite),
    /// `InPlaceUpdateReady` True ([`Action::CompleteInPlaceUpdate`]).
    Completion(CompletionWrite),
    /// Starting an in-place update, a held update, the next container batch.
    InPlace(InPlaceWrite),
    /// Every other action's write: create, delete, PVC, label and status patches.
    Object(Write),
    /// Nothing to write, and why.
    Nothing { why: &'static str },
}

/// Why a step's write could not be planned from the snapshot.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WriteError {
    /// An object the write is made from is not in the snapshot.
    #[error("{0} not found in the cache")]
    NotCached(String),
    /// The change cannot go in place (any more).
    #[error("pod {pod} cannot be updated in place: {reason}")]
    InPlaceRefused { pod: String, reason: String },
    /// An annotation the write works from is absent from the pod.
    #[error("{what} of pod {pod} is missing")]
    AnnotationMissing { pod: String, what: &'static str },
    /// An annotation the write works from cannot be read (the parser's message).
    #[error("{what} of pod {pod} cannot be read: {message}")]
    BadAnnotation {
        pod: String,
        what: &'static str,
        message: String,
    },
    /// Something could not be encoded (the encoder's message).
    #[error("encoding {what}: {message}")]
    Encode { what: &'static str, message: String },
}

impl From<InPlaceWriteError> for WriteError {
    fn from(e: InPlaceWriteError) -> Self {
        match e {
            InPlaceWriteError::Refused { pod, reason } => Self::InPlaceRefused { pod, reason },
            InPlaceWriteError::AnnotationMissing { pod, what } => {
                Self::AnnotationMissing { pod, what }
            }
            InPlaceWriteError::BadAnnotation { pod, what, source } => Self::BadAnnotation {
                pod,
                what,
                message: source.to_string(),
            },
            InPlaceWriteError::Encode { what, source } => Self::Encode {
                what,
                message: source.to_string(),
            },
        }
    }
}

impl From<ActionWriteError> for WriteError {
    fn from(e: ActionWriteError) -> Self {
        match e {
            ActionWriteError::NotCached(what) => Self::NotCached(what),
        }
    }
}

/// The steps of `actions`: each with its write, planned from `in_place` and `other`
/// (the same snapshot) and the plan's pod facts `pods`.
///
/// A completion ([`Action::CompleteInPlaceUpdate`]) carries the lifecycle labels of its
/// pod's lifecycle write when that is the pod's only one and labels only; that lifecycle
/// write is then marked [`LifecycleWrite::with_completion`] and sends nothing of its own.
pub fn plan_steps(
    in_place: &WriteInputs,
    other: &ActionInputs,
    pods: &[PodFacts<'_>],
    actions: Vec<Action>,
) -> Vec<Step> {
    let mut in_place_writes = inplace_write::all(in_place, pods, &actions);
    let mut other_writes = action_write::all(other, pods, &actions);
    let mut lifecycle: Vec<Option<LifecycleWrite>> = actions
        .iter()
        .map(|a| lifecycle_write::of(other.cloneset, a))
        .collect();
    let completions = completions(other, pods, &actions, &mut lifecycle);
    let not_cached = |pod: &str| {
        let ns = other
            .cloneset
            .metadata
            .namespace
            .as_deref()
            .unwrap_or_default();
        WriteError::NotCached(format!("pod {ns}/{pod}"))
    };
    let mut completions = completions.into_iter();
    let mut lifecycle = lifecycle.into_iter();
    actions
        .into_iter()
        .enumerate()
        .map(|(i, action)| {
            let lifecycle = lifecycle.next().flatten();
            let completion = completions.next().flatten();
            let write = if let Some(w) = lifecycle {
                Ok(StepWrite::Lifecycle(w))
            } else if let Some(w) = completion {
                w
            } else if let Some(w) = in_place_writes.get_mut(i).and_then(Option::take) {
                w.map(StepWrite::InPlace).map_err(WriteError::from)
            } else if let Some(w) = other_writes.get_mut(i).and_then(Option::take) {
                w.map(|w| match w.write {
                    Write::Skip { why } => StepWrite::Nothing { why },
                    write => StepWrite::Object(write),
                })
                .map_err(WriteError::from)
            } else {
                // An in-place action whose pod is not among the plan's.
                Err(not_cached(pod_of(&action).unwrap_or_default()))
            };
            Step { action, write }
        })
        .collect()
}

/// The write of each [`Action::CompleteInPlaceUpdate`] among `actions` (aligned with
/// them), marking the lifecycle writes (aligned with `actions` too) it carries
/// ([`completion_write::all`]).
fn completions(
    inputs: &ActionInputs,
    pods: &[PodFacts<'_>],
    actions: &[Action],
    lifecycle: &mut [Option<LifecycleWrite>],
) -> Vec<Option<Result<StepWrite, WriteError>>> {
    fn completed(a: &Action) -> Option<&str> {
        match a {
            Action::CompleteInPlaceUpdate { pod } => Some(pod),
            _ => None,
        }
    }
    if !actions.iter().any(|a| completed(a).is_some()) {
        return Vec::new();
    }
    let by_name = super::pod_lookup::pods_named(pods, actions.iter().filter_map(completed));
    let mut writes: Vec<LifecycleWrite> = lifecycle.iter_mut().filter_map(Option::take).collect();
    let mut done: HashMap<String, CompletionWrite> =
        completion_write::all(inputs.pods, actions, &mut writes)
            .into_iter()
            .map(|w| (w.pod.clone(), w))
            .collect();
    // Back in place, in order (each lifecycle action has its write).
    let mut writes = writes.into_iter();
    for slot in lifecycle.iter_mut().zip(actions) {
        if matches!(slot.1, Action::Lifecycle { .. }) {
            *slot.0 = writes.next();
        }
    }
    let ns = inputs
        .cloneset
        .metadata
        .namespace
        .as_deref()
        .unwrap_or_default();
    actions
        .iter()
        .map(|action| {
            let name = completed(action)?;
            Some(match done.remove(name) {
                Some(write) => Ok(StepWrite::Completion(write)),
                None if by_name.contains_key(name) => Ok(StepWrite::Nothing {
                    why: "the pod has no InPlaceUpdateReady readiness gate",
                }),
                None => Err(WriteError::NotCached(format!("pod {ns}/{name}"))),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests;
