//! The status the controller writes (docs "Template and revision" counters, "Partition",
//! "Progress Deadline Seconds"; OpenKruise `pkg/controller/cloneset/cloneset_status.go`).
//!
//! Counters, over the active pods (neither terminating nor finished):
//!
//! - `replicas`: all of them;
//! - `readyReplicas`: Running, Ready, and `InPlaceUpdateReady` absent or True;
//! - `availableReplicas`: ready for `minReadySeconds` and in lifecycle state Normal;
//! - `updatedReplicas` / `updatedReadyReplicas` / `updatedAvailableReplicas`: the same on
//!   the update revision;
//! - `expectedUpdatedReplicas`: `spec.replicas − partition` (the resolved partition);
//! - `currentRevision` becomes the update revision once every pod carries it and there
//!   are exactly `spec.replicas` pods (readiness not required), else stays;
//! - `updateRevision`, `collisionCount` from the revision plan, `labelSelector` the
//!   selector's string form, `observedGeneration` the CloneSet's generation.
//!
//! Conditions: `Progressing` (see [`progressing`]); `FailedScale` / `FailedUpdate` come
//! from the plan's problems through [`apply_problems`]; any other condition is kept.

use std::time::Duration;

use inplace_proto::{CloneSet, CloneSetCondition, CloneSetStatus, keys};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};

use super::model::{PlanContext, PlanProblem, RevisionPlan};
use super::selector::Selector;

/// The new status and when to reconcile again at the latest: when the next ready pod
/// becomes available (`minReadySeconds`), or one second after the progress deadline.
pub fn compute(ctx: &PlanContext, revisions: &RevisionPlan) -> (CloneSetStatus, Option<Duration>) {
    let cs = ctx.cloneset();
    let now = ctx.now();
    let min_ready = cs.min_ready_seconds();
    let spec_replicas = cs.replicas();
    let update_revision = revisions.update_revision.as_str();

    let mut status = CloneSetStatus {
        observed_generation: cs.metadata.generation,
        update_revision: Some(update_revision.to_owned()),
        collision_count: Some(revisions.collision_count),
        label_selector: Selector::parse(&cs.spec.selector)
            .ok()
            .map(|s| s.to_string()),
        ..CloneSetStatus::default()
    };
    let mut updated_available = 0;
    let mut requeue: Option<Duration> = None;
    for pod in ctx.active_pods() {
        let updated = pod
            .revision
            .is_some_and(|label| super::model::revision_matches(label, update_revision));
        let available = pod.is_available(min_ready, now);
        status.replicas += 1;
        status.ready_replicas += i32::from(pod.ready);
        status.available_replicas += i32::from(available);
        status.updated_replicas += i32::from(updated);
        status.updated_ready_replicas += i32::from(updated && pod.ready);
        updated_available += i32::from(updated && available);
        if !available && let Some(left) = time_to_available(pod, min_ready, now) {
            requeue = Some(requeue.map_or(left, |r| r.min(left)));
        }
    }
    status.updated_available_replicas = Some(updated_available);
    status.current_revision = Some(
        if status.updated_replicas == status.replicas && status.replicas == spec_replicas {
            update_revision.to_owned()
        } else {
            revisions.current_revision.clone()
        },
    );
    status.expected_updated_replicas = Some(spec_replicas - ctx.resolved.partition);

    let old = cs.status.clone().unwrap_or_default();
    status.conditions = old
        .conditions
        .iter()
        .filter(|c| {
            ![
                keys::CONDITION_PROGRESSING,
                keys::CONDITION_FAILED_SCALE,
                keys::CONDITION_FAILED_UPDATE,
            ]
            .contains(&c.type_.as_str())
        })
        .cloned()
        .collect();
    let (condition, deadline_requeue) = progressing(cs, &old, &status, now);
    status.conditions.extend(condition);
    if let Some(d) = deadline_requeue {
        requeue = Some(requeue.map_or(d, |r| r.min(d)));
    }
    (status, requeue)
}

/// How long until a ready pod in state Normal has been ready for `minReadySeconds`.
fn time_to_available(
    pod: &super::model::PodFacts,
    min_ready: i32,
    now: Timestamp,
) -> Option<Duration> {
    let normal = matches!(
        pod.lifecycle,
        None | Some(inplace_proto::LifecycleState::Normal)
    );
    if !pod.ready || !normal || min_ready <= 0 {
        return None;
    }
    let at = pod
        .ready_since?
        .checked_add(SignedDuration::from_secs(i64::from(min_ready)))
        .ok()?;
    (at > now).then(|| Duration::try_from(at.duration_since(now)).ok())?
}

fn condition(
    status: &str,
    reason: &str,
    message: String,
    last_update: Timestamp,
    previous: Option<&CloneSetCondition>,
    now: Timestamp,
) -> CloneSetCondition {
    // lastTransitionTime moves only when the status changes (like Kubernetes conditions
    // and the reference's SetCloneSetCondition), not when only the reason does.
    let last_transition = previous
        .filter(|p| p.status == status)
        .and_then(|p| p.last_transition_time.clone())
        .unwrap_or(Time(now));
    CloneSetCondition {
        type_: keys::CONDITION_PROGRESSING.to_owned(),
        status: status.to_owned(),
        last_transition_time: Some(last_transition),
        last_update_time: Some(Time(last_update)),
        reason: Some(reason.to_owned()),
        message: Some(message),
    }
}

/// Whether the rollout moved since the last status: a counter of the new revision, of
/// readiness or of availability grew, old-revision pods went away, or the partition's
/// target changed (docs "Progressing CloneSet").
fn made_progress(old: &CloneSetStatus, new: &CloneSetStatus) -> bool {
    let old_pods = |s: &CloneSetStatus| s.replicas - s.updated_replicas;
    new.updated_replicas > old.updated_replicas
        || new.updated_ready_replicas > old.updated_ready_replicas
        || new.updated_available_replicas.unwrap_or(0) > old.updated_available_replicas.unwrap_or(0)
        || new.ready_replicas > old.ready_replicas
        || new.available_replicas > old.available_replicas
        || old_pods(new) < old_pods(old)
        || new.expected_updated_replicas != old.expected_updated_replicas
}

/// The `Progressing` condition and when to look again (docs "Progress Deadline Seconds";
/// OpenKruise `cloneset_status.go` and `utils/cloneset_utils.go`). In order:
///
/// 1. `progressDeadlineSeconds` unset or `2147483647` → no condition;
/// 2. every pod updated and available, revisions equal, `spec.replicas` pods → True /
///    `CloneSetAvailable`;
/// 3. paused → True / `CloneSetPaused` (the deadline clock stops; the docs' table calls
///    the reason `CloneSetProgressPaused`, which is the reference's constant name — its
///    value, written here, is `CloneSetPaused`; likewise `ProgressPartitionAvailable`);
/// 4. `expectedUpdatedReplicas < spec.replicas` and `≤ updatedAvailableReplicas` → True /
///    `ProgressPartitionAvailable`;
/// 5. already `ProgressDeadlineExceeded` for the same update revision → stays (sticky)
///    until one of 2–4 holds or a new revision rolls out;
/// 6. otherwise the rollout progresses: the clock (`lastUpdateTime`) restarts when the
///    rollout starts or resumes, when the update revision changes, and whenever progress
///    is made; it is kept otherwise. Past `lastUpdateTime + progressDeadlineSeconds` →
///    False / `ProgressDeadlineExceeded`, else True / `CloneSetUpdated`, with a requeue
///    one second after the deadline.
///
/// For 2–4 `lastUpdateTime` stays while the reason stays.
pub fn progressing(
    cs: &CloneSet,
    old: &CloneSetStatus,
    new: &CloneSetStatus,
    now: Timestamp,
) -> (Option<CloneSetCondition>, Option<Duration>) {
    let Some(deadline) = cs.spec.progress_deadline_seconds.filter(|d| *d != i32::MAX) else {
        return (None, None);
    };
    let previous = old
        .conditions
        .iter()
        .find(|c| c.type_ == keys::CONDITION_PROGRESSING);
    let previous_reason = previous.and_then(|c| c.reason.as_deref());
    let spec_replicas = cs.replicas();
    let updated_available = new.updated_available_replicas.unwrap_or(0);
    let expected = new.expected_updated_replicas.unwrap_or(spec_replicas);
    let paused = cs.spec.update_strategy.as_ref().is_some_and(|s| s.paused);
    let revision_changed = old.update_revision != new.update_revision;

    let settled = |reason: &str, message: &str| {
        let same = previous.filter(|p| p.reason.as_deref() == Some(reason) && p.status == "True");
        let since = same
            .and_then(|p| p.last_update_time.as_ref())
            .map_or(now, |t| t.0);
        (
            Some(condition(
                "True",
                reason,
                message.to_owned(),
                since,
                previous,
                now,
            )),
            None,
        )
    };
    if new.current_revision == new.update_revision
        && new.replicas == spec_replicas
        && updated_available == spec_replicas
    {
        return settled(keys::REASON_CLONESET_AVAILABLE, "CloneSet is available");
    }
    if paused {
        return settled(keys::REASON_CLONESET_PAUSED, "CloneSet is paused");
    }
    if expected < spec_replicas && expected <= updated_available {
        return settled(
            keys::REASON_PARTITION_AVAILABLE,
            "CloneSet has been paused due to partition ready",
        );
    }
    let update_revision = new.update_revision.as_deref().unwrap_or_default();
    let exceeded_message =
        || format!("CloneSet revision {update_revision} has timed out progressing");
    if previous_reason == Some(keys::REASON_PROGRESS_DEADLINE_EXCEEDED) && !revision_changed {
        let since = previous
            .and_then(|p| p.last_update_time.as_ref())
            .map_or(now, |t| t.0);
        return (
            Some(condition(
                "False",
                keys::REASON_PROGRESS_DEADLINE_EXCEEDED,
                exceeded_message(),
                since,
                previous,
                now,
            )),
            None,
        );
    }

    let was_progressing =
        previous_reason == Some(keys::REASON_CLONESET_UPDATED) && !revision_changed;
    let clock = match previous.and_then(|p| p.last_update_time.as_ref()) {
        Some(t) if was_progressing && !made_progress(old, new) => t.0,
        _ => now,
    };
    let end = clock
        .checked_add(SignedDuration::from_secs(i64::from(deadline.max(0))))
        .unwrap_or(Timestamp::MAX);
    if now > end {
        return (
            Some(condition(
                "False",
                keys::REASON_PROGRESS_DEADLINE_EXCEEDED,
                exceeded_message(),
                now,
                previous,
                now,
            )),
            None,
        );
    }
    let message = if previous_reason == Some(keys::REASON_CLONESET_PAUSED) {
        "CloneSet is resumed".to_owned()
    } else {
        "CloneSet is progressing".to_owned()
    };
    let requeue = Duration::try_from(end.duration_since(now))
        .ok()
        .map(|d| d + Duration::from_secs(1));
    (
        Some(condition(
            "True",
            keys::REASON_CLONESET_UPDATED,
            message,
            clock,
            previous,
            now,
        )),
        requeue,
    )
}

/// Sets `FailedScale` / `FailedUpdate` True for the problems of that kind (their
/// reasons and messages joined), and leaves them out when there is none of that kind:
/// the reference rebuilds these conditions on every reconcile. `lastTransitionTime` is
/// kept from `previous` when the condition was already True, and `lastUpdateTime` too
/// when reason and message are unchanged: a status that does not change is not rewritten,
/// so a lasting problem does not turn into a write (and a watch event) every reconcile.
pub fn apply_problems(
    status: &mut CloneSetStatus,
    problems: &[PlanProblem],
    previous: &CloneSetStatus,
    now: Timestamp,
) {
    status.conditions.retain(|c| {
        c.type_ != keys::CONDITION_FAILED_SCALE && c.type_ != keys::CONDITION_FAILED_UPDATE
    });
    for kind in [keys::CONDITION_FAILED_SCALE, keys::CONDITION_FAILED_UPDATE] {
        let mine: Vec<&PlanProblem> = problems.iter().filter(|p| p.condition == kind).collect();
        if mine.is_empty() {
            continue;
        }
        let mut reasons: Vec<&str> = mine.iter().map(|p| p.reason.as_str()).collect();
        reasons.dedup();
        let message = mine
            .iter()
            .map(|p| p.message.as_str())
            .collect::<Vec<_>>()
            .join("; ");
        let reason = Some(reasons.join(","));
        let old = previous
            .conditions
            .iter()
            .find(|c| c.type_ == kind && c.status == "True");
        let since = old
            .and_then(|c| c.last_transition_time.clone())
            .unwrap_or(Time(now));
        let updated = old
            .filter(|c| c.reason == reason && c.message.as_deref() == Some(message.as_str()))
            .and_then(|c| c.last_update_time.clone())
            .unwrap_or(Time(now));
        status.conditions.push(CloneSetCondition {
            type_: kind.to_owned(),
            status: "True".to_owned(),
            last_transition_time: Some(since),
            last_update_time: Some(updated),
            reason,
            message: Some(message),
        });
    }
}

#[cfg(test)]
mod tests;
