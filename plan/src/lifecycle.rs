//! The pod lifecycle (`lifecycle.apps.kruise.io/state`): hook matching, the state machine
//! of OpenKruise (`sync/cloneset_update.go`, `pkg/util/lifecycle`) as pure functions, and the
//! *refresh* that starts every update step (docs "Lifecycle hook" / "State circulation").
//!
//! The refresh looks at each active pod and emits the transition that is due now:
//!
//! | from | to | when |
//! |---|---|---|
//! | PreparingNormal | Normal | no preNormal hook: the pod is scheduled; with one: all its labels/finalizers are present |
//! | PreparingUpdate | Updated / Normal | the pod already carries the update revision (rolled back while it waited) |
//! | Updating | Updated / Normal | the in-place update completed |
//! | Updated | Normal | no inPlaceUpdate hook, or all its labels/finalizers are back |
//!
//! "Updated / Normal": Updated while an inPlaceUpdate hook exists and the pod does not carry
//! all of it yet (the user's controller has not re-added it), else Normal.
//!
//! It also finishes in-place updates: a pending grace period whose time is up becomes
//! [`Action::ApplyGracedUpdate`], and a pod whose containers run the new images while its
//! `InPlaceUpdateReady` condition is still False gets [`Action::CompleteInPlaceUpdate`].

use std::time::Duration;

use inplace_proto::{Lifecycle, LifecycleHook, LifecycleState, keys};
use k8s_openapi::jiff::{SignedDuration, Timestamp};

use super::container_batches::{NextBatch, env_restarts_awaited, next_batch};
use super::inplace_progress::{InPlaceProgress, containers_pending, in_place_progress};
use super::model::{Action, PlanContext, PlanProblem, PodFacts, revision_matches};
use super::stall;

/// Whether `pod` matches `hook`: it carries ANY of the hook's labels with the same value,
/// or ANY of its finalizers (reference `IsPodHooked`). No hook matches nothing.
///
/// Docs "State circulation": a pod that matches the preDelete hook waits in
/// PreparingDelete, one that matches the inPlaceUpdate hook waits in PreparingUpdate, until
/// the user's controller has removed the labels/finalizers.
pub fn hook_matches(hook: Option<&LifecycleHook>, pod: &PodFacts) -> bool {
    let Some(hook) = hook else {
        return false;
    };
    hook.finalizers_handler
        .iter()
        .any(|f| pod.finalizers().contains(f))
        || hook
            .labels_handler
            .iter()
            .any(|(k, v)| pod.labels.get(k) == Some(v.as_str()))
}

/// Whether `pod` carries ALL of the hook's labels (same values) and finalizers (reference
/// `IsPodAllHooked`). No hook is never "all present". Used where the docs say the user's
/// controller has put the hook back: PreparingNormal → Normal and Updated → Normal.
pub fn hook_all_present(hook: Option<&LifecycleHook>, pod: &PodFacts) -> bool {
    let Some(hook) = hook else {
        return false;
    };
    hook.finalizers_handler
        .iter()
        .all(|f| pod.finalizers().contains(f))
        && hook
            .labels_handler
            .iter()
            .all(|(k, v)| pod.labels.get(k) == Some(v.as_str()))
}

fn in_place_hook(lifecycle: Option<&Lifecycle>) -> Option<&LifecycleHook> {
    lifecycle.and_then(|l| l.in_place_update.as_ref())
}

/// PreparingNormal → Normal is due: without a preNormal hook once the pod is scheduled,
/// with one once all its labels/finalizers are present (a.7; docs: "regarded as Available
/// only after PreNormal hook is satisfied").
pub fn preparing_normal_done(lifecycle: Option<&Lifecycle>, pod: &PodFacts) -> bool {
    match lifecycle.and_then(|l| l.pre_normal.as_ref()) {
        None => pod.node_name.is_some_and(|n| !n.is_empty()),
        Some(hook) => hook_all_present(Some(hook), pod),
    }
}

/// Where a pod goes when its in-place update is over (completed, or it turned out to be on
/// the update revision already): Updated while an inPlaceUpdate hook exists and the pod
/// does not carry all of it, else Normal.
///
/// The reference goes to Updated whenever `spec.lifecycle` is set and the hook is not all
/// present, even without an inPlaceUpdate hook, and then straight on to Normal; we skip
/// that pointless stop.
pub fn state_after_in_place(lifecycle: Option<&Lifecycle>, pod: &PodFacts) -> LifecycleState {
    let hook = in_place_hook(lifecycle);
    if hook.is_some() && !hook_all_present(hook, pod) {
        LifecycleState::Updated
    } else {
        LifecycleState::Normal
    }
}

/// The state a pod that starts an in-place update now will take when the update
/// completes, if that is certain already: Normal when the CloneSet has no inPlaceUpdate
/// hook ([`state_after_in_place`] then never says Updated, and no `markPodNotReady` key is
/// to be cleared). With a hook it depends on what the user's controller does meanwhile:
/// `None`, and the controller writes the state itself once the update completed.
///
/// Written into the in-place state (`lifecycleStateOnCompletion`), it lets our node
/// daemon's completion write move the label too (one write instead of two).
pub fn state_on_completion_known_at_start(lifecycle: Option<&Lifecycle>) -> Option<LifecycleState> {
    let to = LifecycleState::Normal;
    let certain = in_place_hook(lifecycle).is_none()
        && mark_not_ready(lifecycle, Some(LifecycleState::Updating), to).is_none();
    certain.then_some(to)
}

/// Updated → Normal is due: no inPlaceUpdate hook, or all its labels/finalizers are back
/// (docs: "When user controller add label/finalizer into Pod and it matched inPlaceUpdate
/// hook, CloneSet will finally update it to Normal state").
pub fn updated_done(lifecycle: Option<&Lifecycle>, pod: &PodFacts) -> bool {
    let hook = in_place_hook(lifecycle);
    hook.is_none() || hook_all_present(hook, pod)
}

/// The `markPodNotReady` side effect of moving a pod from `from` to `to`: `Some(true)` sets
/// this CloneSet's not-ready key on `KruisePodReady` (`preDeleteHook` when entering
/// PreparingDelete, `preUpdateHook` when entering PreparingUpdate), `Some(false)` removes
/// the `preUpdateHook` key, `None` leaves the condition alone.
///
/// Docs "MarkPodNotReady": NotReady at PreparingDelete/PreparingUpdate, Ready again at
/// Updated. The reference removes the key only on entering Updated; a pod that leaves
/// PreparingUpdate or Updating straight for Normal would stay NotReady forever, so we also
/// remove it on those moves (deliberate deviation).
pub fn mark_not_ready(
    lifecycle: Option<&Lifecycle>,
    from: Option<LifecycleState>,
    to: LifecycleState,
) -> Option<bool> {
    let marks = |hook: Option<&LifecycleHook>| hook.is_some_and(|h| h.mark_pod_not_ready);
    match to {
        LifecycleState::PreparingDelete => {
            marks(lifecycle.and_then(|l| l.pre_delete.as_ref())).then_some(true)
        }
        LifecycleState::PreparingUpdate => marks(in_place_hook(lifecycle)).then_some(true),
        LifecycleState::Updated | LifecycleState::Normal
            if matches!(
                from,
                Some(LifecycleState::PreparingUpdate | LifecycleState::Updating)
            ) =>
        {
            marks(in_place_hook(lifecycle)).then_some(false)
        }
        _ => None,
    }
}

/// The action moving `pod` to `to`, with its markPodNotReady side effect.
///
/// For Updated → PreparingUpdate (an Updated pod that must be updated again) the applier
/// re-applies the inPlaceUpdate hook's labels and finalizers in the same patch, as the
/// reference does, so that the user's controller sees the hook again (a.7).
pub fn transition(lifecycle: Option<&Lifecycle>, pod: &PodFacts, to: LifecycleState) -> Action {
    Action::Lifecycle {
        pod: pod.name.to_owned(),
        from: pod.lifecycle,
        to,
        mark_not_ready: mark_not_ready(lifecycle, pod.lifecycle, to),
    }
}

/// Where a pending grace period stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GraceStatus {
    /// Over (or no start time is known): apply the held update now. Also used when the
    /// pod's revision no longer matches the held one: the applier then drops the held
    /// update instead of applying it (reference `finishGracePeriod`).
    Due,
    /// This much longer.
    Wait(Duration),
    /// The annotation cannot be read.
    Unreadable,
}

/// The grace period of a held in-place update (`inPlaceUpdateStrategy.gracePeriodSeconds`).
///
/// It started when the state annotation was written (`updateTimestamp`). The grace JSON
/// itself carries no start time; when the state lacks `updateTimestamp` we take the
/// lifecycle timestamp annotation (written in the same patch, as the pod went Updating),
/// and when both are missing the period counts as over: a held update must not wait
/// forever on a time nobody recorded. The remaining time is rounded up to whole seconds,
/// like the reference.
pub fn grace_status(pod: &PodFacts, now: Timestamp) -> GraceStatus {
    let Some(grace) = &pod.in_place_grace else {
        return GraceStatus::Unreadable;
    };
    let on_held_revision = pod
        .revision
        .is_some_and(|label| revision_matches(label, &grace.revision));
    if !on_held_revision {
        return GraceStatus::Due;
    }
    let start = pod
        .in_place_state
        .as_ref()
        .and_then(|s| s.update_timestamp.as_ref())
        .map(|t| t.0)
        .or_else(|| pod.lifecycle_since());
    let Some(start) = start else {
        return GraceStatus::Due;
    };
    let end = start.saturating_add(SignedDuration::from_secs(i64::from(
        grace.grace_seconds.max(0),
    )));
    let Ok(end) = end else {
        return GraceStatus::Due;
    };
    if now >= end {
        return GraceStatus::Due;
    }
    let remaining = end.duration_since(now);
    let secs = remaining.as_secs() + i64::from(remaining.subsec_nanos() > 0);
    GraceStatus::Wait(Duration::from_secs(secs.unsigned_abs()))
}

/// What the refresh found.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Refresh {
    pub actions: Vec<Action>,
    pub problems: Vec<PlanProblem>,
    pub requeue_after: Option<Duration>,
}

fn earliest(current: &mut Option<Duration>, candidate: Duration) {
    *current = Some(current.map_or(candidate, |c| c.min(candidate)));
}

/// The refresh of every active pod (reference `refreshPodState` + in-place `Refresh`).
/// Per pod, in this order: the held update whose grace period is over, the
/// `InPlaceUpdateReady` condition of a completed update, then the lifecycle transition.
pub fn refresh(ctx: &PlanContext) -> Refresh {
    let mut out = Refresh::default();
    let mut stalled = Vec::new();
    for pod in ctx.active_pods() {
        refresh_pod(ctx, pod, &mut out, &mut stalled);
    }
    report_stalled(&mut out, stalled);
    out
}

/// Pods named in the CloneSet's `FailedUpdate` condition for a stalled in-place update at
/// most; the rest are counted (each pod has its own condition and event).
const STALLED_PODS_NAMED: usize = 5;

/// One `FailedUpdate` problem per reason for the stalled pods `(reason, "pod x: …")`.
fn report_stalled(out: &mut Refresh, stalled: Vec<(&'static str, String)>) {
    for reason in [
        keys::INPLACE_UPDATE_FAILED_REASON,
        keys::INPLACE_UPDATE_STALLED_REASON,
        keys::INPLACE_UPDATE_STATE_UNREADABLE_REASON,
    ] {
        let mine: Vec<&String> = stalled
            .iter()
            .filter(|(r, _)| *r == reason)
            .map(|(_, m)| m)
            .collect();
        if mine.is_empty() {
            continue;
        }
        let mut message = mine
            .iter()
            .take(STALLED_PODS_NAMED)
            .map(|m| m.as_str())
            .collect::<Vec<_>>()
            .join("; ");
        if mine.len() > STALLED_PODS_NAMED {
            message.push_str(&format!(
                "; and {} more pods",
                mine.len() - STALLED_PODS_NAMED
            ));
        }
        out.problems.push(PlanProblem {
            condition: keys::CONDITION_FAILED_UPDATE,
            reason: reason.to_owned(),
            message,
        });
    }
}

/// Reports a stalled update of `pod`: on its `InPlaceUpdateReady` condition when that is
/// False and does not say so already (one write, not one per plan), and on the CloneSet.
fn report_stall(
    pod: &PodFacts,
    reason: &'static str,
    message: String,
    out: &mut Refresh,
    stalled: &mut Vec<(&'static str, String)>,
) {
    let reported = pod.in_place_condition().is_some_and(|c| {
        c.reason.as_deref() == Some(reason) && c.message.as_deref() == Some(message.as_str())
    });
    if pod.in_place_update_ready == Some(false) && !reported {
        out.actions.push(Action::ReportInPlaceStall {
            pod: pod.name.to_owned(),
            reason: reason.to_owned(),
            message: message.clone(),
        });
    }
    stalled.push((reason, format!("pod {}: {message}", pod.name)));
}

fn refresh_pod(
    ctx: &PlanContext,
    pod: &PodFacts,
    out: &mut Refresh,
    stalled: &mut Vec<(&'static str, String)>,
) {
    let lifecycle = ctx.cloneset().spec.lifecycle.as_ref();
    if pod.in_place_grace_pending {
        match grace_status(pod, ctx.now()) {
            GraceStatus::Due => out.actions.push(Action::ApplyGracedUpdate {
                pod: pod.name.to_owned(),
            }),
            GraceStatus::Wait(left) => earliest(&mut out.requeue_after, left),
            GraceStatus::Unreadable => out.problems.push(PlanProblem {
                condition: keys::CONDITION_FAILED_UPDATE,
                reason: "InvalidInPlaceUpdateGrace".to_owned(),
                message: format!(
                    "pod {} has an unreadable {} annotation; its held in-place update cannot be applied",
                    pod.name,
                    keys::INPLACE_UPDATE_GRACE_ANNOTATION
                ),
            }),
        }
    }

    let progress = in_place_progress(pod);
    // The condition is turned True only for the update the pod is on: a state left from an
    // earlier revision (the applier set the condition False but has not patched the spec
    // yet) must not end the new update early.
    let state_is_current = pod.in_place_state.as_ref().is_some_and(|s| {
        pod.revision
            .is_some_and(|label| revision_matches(label, &s.revision))
    });
    if pod.in_place_update_ready == Some(false)
        && state_is_current
        && progress == InPlaceProgress::Completed
    {
        out.actions.push(Action::CompleteInPlaceUpdate {
            pod: pod.name.to_owned(),
        });
    }
    // An update whose state nobody can read never completes: say so.
    if pod.in_place_state_unreadable && pod.in_place_update_ready == Some(false) {
        let reason = keys::INPLACE_UPDATE_STATE_UNREADABLE_REASON;
        let message = format!(
            "the {} annotation cannot be read, so the in-place update cannot be judged complete; delete the pod to replace it",
            keys::INPLACE_UPDATE_STATE_ANNOTATION
        );
        report_stall(pod, reason, message, out, stalled);
    }
    // No silent stall: a failing or overdue update is reported (plan::stall).
    if state_is_current
        && pod.in_place_update_ready != Some(true)
        && let Some(state) = pod.in_place_state.as_deref()
    {
        let deadline = stall::deadline(ctx.cloneset().spec.progress_deadline_seconds);
        let check = stall::check(pod, state, &progress, deadline, ctx.now());
        if let Some(left) = check.recheck_after {
            earliest(&mut out.requeue_after, left);
        }
        if let Some((reason, message)) = check.report {
            report_stall(pod, reason, message, out, stalled);
        }
    }
    // Container launch priority: the next batch starts once the containers of this one
    // run their new image (as judged for completion) and are Ready.
    if state_is_current
        && progress == InPlaceProgress::NextBatchPending
        && let Some(state) = pod.in_place_state.as_deref()
        && containers_pending(pod, state).is_none()
        && next_batch(state, pod.container_statuses()) == NextBatch::Due
        && env_restarts_awaited(state, pod.container_statuses()).is_empty()
    {
        out.actions.push(Action::ApplyNextContainerBatch {
            pod: pod.name.to_owned(),
        });
    }

    let to = match pod.lifecycle {
        Some(LifecycleState::PreparingNormal) => {
            preparing_normal_done(lifecycle, pod).then_some(LifecycleState::Normal)
        }
        // Rolled back while waiting for the hook (reference issue 1156): nothing to patch.
        Some(LifecycleState::PreparingUpdate) => ctx
            .is_updated(pod)
            .then(|| state_after_in_place(lifecycle, pod)),
        Some(LifecycleState::Updating) => matches!(
            progress,
            InPlaceProgress::Completed | InPlaceProgress::NoState
        )
        .then(|| state_after_in_place(lifecycle, pod)),
        Some(LifecycleState::Updated) => {
            updated_done(lifecycle, pod).then_some(LifecycleState::Normal)
        }
        _ => None,
    };
    if let Some(to) = to {
        out.actions.push(transition(lifecycle, pod, to));
    }
}

#[cfg(test)]
mod tests;
