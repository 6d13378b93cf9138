//! No silent stall in the in-place flow: a pod whose in-place update fails (a container
//! of the batch waiting on a bad image, a crash loop) or has not completed within its
//! deadline is reported, with what it waits for.
//!
//! The deadline is the CloneSet's `progressDeadlineSeconds` when set (and not the
//! "no deadline" `2147483647`), else [`DEFAULT_IN_PLACE_DEADLINE`]. It runs from the
//! start of the current container batch (`containerBatchesRecord`), else from the
//! update's `updateTimestamp`: both written by the controller, so the controller's own
//! clock measures it. A held update (grace period) is not judged: the user asked for the
//! wait.
//!
//! The report is the pod's `InPlaceUpdateReady` condition (still False) with reason
//! `InPlaceUpdateFailed` / `InPlaceUpdateStalled` and a message naming what is awaited, a
//! Warning event on the pod, and a `FailedUpdate` condition on the CloneSet naming the pod.
//! Nothing is undone or retried: the kubelet keeps pulling and restarting, and the update
//! completes by itself once what it waits for happens (or a new template replaces it).

use std::time::Duration;

use inplace_proto::{InPlaceUpdateState, keys};
use k8s_openapi::jiff::{SignedDuration, Timestamp};

use super::container_batches::{NextBatch, env_restarts_awaited, next_batch};
use super::inplace_progress::{InPlaceProgress, containers_pending, waiting_reason};
use super::model::PodFacts;

/// How long an in-place update may take when the CloneSet sets no
/// `progressDeadlineSeconds`: five minutes, the kubelet's longest image-pull back-off.
pub const DEFAULT_IN_PLACE_DEADLINE: Duration = Duration::from_secs(300);

/// Waiting reasons of the kubelet that mean a container cannot start as it is: reported at
/// once, not after the deadline.
pub const FAILING_REASONS: &[&str] = &[
    "ErrImagePull",
    "ImagePullBackOff",
    "InvalidImageName",
    "ErrImageNeverPull",
    "RegistryUnavailable",
    "CreateContainerConfigError",
    "CreateContainerError",
    "RunContainerError",
    "CrashLoopBackOff",
    "PostStartHookError",
];

/// What [`check`] found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StallCheck {
    /// `(reason, message)` to report now.
    pub report: Option<(&'static str, String)>,
    /// Judge the pod again after this long (the deadline is still ahead).
    pub recheck_after: Option<Duration>,
}

/// The deadline of an in-place update of a CloneSet with `progress_deadline_seconds`.
pub fn deadline(progress_deadline_seconds: Option<i32>) -> Duration {
    match progress_deadline_seconds {
        Some(secs) if secs != i32::MAX && secs >= 0 => {
            Duration::from_secs(u64::from(secs.unsigned_abs()))
        }
        _ => DEFAULT_IN_PLACE_DEADLINE,
    }
}

/// Judges the in-place update of `pod` (its state current for its revision), whose
/// progress is `progress`, at `now`.
pub fn check(
    pod: &PodFacts,
    state: &InPlaceUpdateState,
    progress: &InPlaceProgress,
    deadline: Duration,
    now: Timestamp,
) -> StallCheck {
    let waits_for = match progress {
        InPlaceProgress::NoState | InPlaceProgress::GracePending | InPlaceProgress::Completed => {
            return StallCheck::default();
        }
        InPlaceProgress::Waiting(reason) => reason.clone(),
        InPlaceProgress::AwaitingDaemon => format!(
            "the node daemon{} to restart the containers whose env reads changed labels or annotations",
            on_node(pod)
        ),
        InPlaceProgress::NextBatchPending => {
            let env = env_restarts_awaited(state, pod.container_statuses());
            match (
                containers_pending(pod, state),
                next_batch(state, pod.container_statuses()),
            ) {
                (Some(reason), _) => reason,
                (None, NextBatch::Waiting(names)) => format!(
                    "container {} to be running and Ready before the next container batch",
                    names.join(", ")
                ),
                (None, NextBatch::Due | NextBatch::None) if !env.is_empty() => format!(
                    "the node daemon{} to restart container {} (its env reads changed metadata) before the next container batch",
                    on_node(pod),
                    env.join(", ")
                ),
                // The next batch is applied in this plan.
                (None, NextBatch::Due | NextBatch::None) => return StallCheck::default(),
            }
        }
    };
    if let Some(failure) = failing_container(pod, state) {
        return StallCheck {
            report: Some((
                keys::INPLACE_UPDATE_FAILED_REASON,
                format!(
                    "in-place update to revision {} failed: {failure}",
                    state.revision
                ),
            )),
            recheck_after: None,
        };
    }
    let since = state
        .container_batches_record
        .last()
        .map(|b| b.timestamp.0)
        .or_else(|| state.update_timestamp.as_ref().map(|t| t.0));
    let Some(since) = since else {
        return StallCheck::default();
    };
    let limit = SignedDuration::try_from(deadline).unwrap_or(SignedDuration::MAX);
    let Ok(due) = since.checked_add(limit) else {
        return StallCheck::default();
    };
    if now < due {
        let left = Duration::try_from(due.duration_since(now)).unwrap_or(deadline);
        return StallCheck {
            report: None,
            recheck_after: Some(left),
        };
    }
    StallCheck {
        report: Some((
            keys::INPLACE_UPDATE_STALLED_REASON,
            format!(
                "in-place update to revision {} not completed within {}s; waiting for {waits_for}",
                state.revision,
                deadline.as_secs()
            ),
        )),
        recheck_after: None,
    }
}

/// ` on node <name>`, or nothing for an unscheduled pod.
fn on_node(pod: &PodFacts) -> String {
    pod.node_name
        .map(|n| format!(" on node {n}"))
        .unwrap_or_default()
}

/// The first container of the update (recorded in `lastContainerStatuses`, i.e. the
/// batches applied so far) that the kubelet reports failing, as `name: reason: message`.
fn failing_container(pod: &PodFacts, state: &InPlaceUpdateState) -> Option<String> {
    state.last_container_statuses.keys().find_map(|name| {
        let status = pod
            .container_statuses()
            .iter()
            .find(|s| *s.name == **name)?;
        let waiting = status.state.as_ref()?.waiting.as_ref()?;
        let reason = waiting.reason.as_deref()?;
        FAILING_REASONS.contains(&reason).then(|| {
            format!(
                "container {name}: {}",
                waiting_reason(status).unwrap_or_default()
            )
        })
    })
}

#[cfg(test)]
mod tests;
