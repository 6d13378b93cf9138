//! The update step (docs "Update features"; OpenKruise `sync/cloneset_update.go`):
//!
//! 1. refresh every pod ([`lifecycle::refresh`]). The reference ends its update step after
//!    any refresh change and chooses pods in its next reconcile; here the step goes on in
//!    the same plan unless a refreshed pod is itself a candidate (then it ends as the
//!    reference's). Going on chooses the pods the next reconcile would choose, from the
//!    same candidates in the same order, under a budget no larger: a refresh only makes
//!    pods available (a completed update, a lifecycle state back to Normal), never takes
//!    one out of service, and the snapshot still counts the refreshed pods as they were.
//!    At 1,000 pods with short restarts nearly every reconcile has a pod to complete, and
//!    ending there left freed slots empty for a reconcile with none;
//! 2. nothing more while `paused` or for `OnDelete`, or when no pod needs to move
//!    (`diffs.update == 0`);
//! 3. candidates: with `diffs.update > 0` the active pods not on the update revision,
//!    with `diffs.update < 0` (rollback by partition) the pods on it, which go back to the
//!    current revision; never PreparingDelete pods ("Pods in PreparingDelete state will
//!    not be updated") nor pods whose held in-place update waits out its grace period;
//!    Updated pods are candidates;
//! 4. sort ([`update_order`]);
//! 5. limit: at most `|diffs.update|` pods, and stop when the unavailable pods already on
//!    the target revision plus the pods chosen so far reach `updateMaxUnavailable`, or
//!    when choosing one more available pod would make more than `updateMaxUnavailable`
//!    pods unavailable; choosing a pod that is unavailable already costs no budget
//!    (a.6 "Limit");
//! 6. per pod, the method from [`inplace`]:
//!    - recreate → [`Action::Update`] with [`UpdateMethod::Recreate`]: the applier labels
//!      the pod `apps.kruise.io/specified-delete`, and a later scale step deletes it and
//!      creates a pod of the update revision (nothing when the pod is labelled already);
//!    - in place, and the inPlaceUpdate hook matches the pod (or it is Updated) →
//!      [`Action::Lifecycle`] to PreparingUpdate first (with markPodNotReady), the update
//!      itself only once the hook is released;
//!    - in place otherwise → [`Action::Update`] with [`UpdateMethod::InPlace`];
//!    - `InPlaceOnly` and not possible in place → no action, a `FailedUpdate` problem.
//!
//! What the applier does for `Update { method: InPlace }`, in the reference's order:
//! set `InPlaceUpdateReady` False (reason `StartInPlaceUpdate`), then one pod update that
//! writes the revision labels, the `apps.kruise.io/inplace-update-state` annotation, the
//! lifecycle state Updating (and its timestamp) and the change itself (images, metadata,
//! resources). With `inPlaceUpdateStrategy.gracePeriodSeconds > 0` the change is held in
//! the `apps.kruise.io/inplace-update-grace` annotation instead and applied by a later
//! [`Action::ApplyGracedUpdate`]. The action names the pod and the revision; what it
//! writes (the change from [`inplace::decide_for_revisions`], the grace period, the
//! container batch, the state annotation, the resize) is planned beside it by
//! [`super::inplace_write`] into [`super::Plan::in_place_writes`], which the applier
//! writes as it stands.

use std::time::Duration;

use inplace_proto::{CloneSetUpdateStrategyType, LifecycleState, keys};

use super::inplace::{self, InPlaceDecision};
use super::lifecycle;
use super::model::{Action, Diffs, PlanContext, PlanProblem, UpdateMethod, revision_matches};
use super::update_order;

/// What the update step decided.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct UpdateStep {
    pub actions: Vec<Action>,
    pub problems: Vec<PlanProblem>,
    pub requeue_after: Option<Duration>,
}

fn earliest(current: &mut Option<Duration>, candidate: Duration) {
    *current = Some(current.map_or(candidate, |c| c.min(candidate)));
}

/// The update step of one reconcile (see the module docs).
pub fn plan_update(ctx: &PlanContext, diffs: &Diffs) -> UpdateStep {
    let refresh = lifecycle::refresh(ctx);
    let mut step = UpdateStep {
        actions: refresh.actions,
        problems: refresh.problems,
        requeue_after: refresh.requeue_after,
    };
    let cs = ctx.cloneset();
    let strategy = cs.spec.update_strategy.as_ref();
    if strategy.is_some_and(|s| s.paused)
        || cs.update_type() == CloneSetUpdateStrategyType::OnDelete
        || diffs.update == 0
    {
        return step;
    }
    let rollback = diffs.update < 0;
    let target = if rollback {
        ctx.current_revision.as_str()
    } else {
        ctx.update_revision.as_str()
    };

    let mut candidates = candidates(ctx, rollback);
    if refreshes_a_candidate(ctx, &step.actions, &candidates) {
        return step;
    }
    update_order::sort_candidates(strategy, &ctx.pods, &mut candidates);
    let chosen = limit(ctx, diffs, target, &candidates);

    let mut decisions: Vec<(Option<&str>, InPlaceDecision)> = Vec::new();
    let mut refused: Vec<(String, Vec<String>)> = Vec::new();
    let grace = strategy
        .and_then(|s| s.in_place_update_strategy.as_ref())
        .and_then(|s| s.grace_period_seconds)
        .filter(|g| *g > 0);
    for &i in chosen {
        let pod = &ctx.pods[i];
        // Decided once per revision label, and read in place: a decision holds the
        // templates' changes, which a copy per chosen pod would allocate and drop again.
        let known = decisions.iter().position(|(rev, _)| *rev == pod.revision);
        let at = known.unwrap_or_else(|| {
            let d = inplace::decide_for_revisions(
                cs,
                ctx.snapshot.revisions,
                &ctx.update_revision,
                pod.revision,
                target,
                ctx.options(),
            );
            decisions.push((pod.revision, d));
            decisions.len() - 1
        });
        match &decisions[at].1 {
            InPlaceDecision::InPlace(_) => {
                if let Some(action) = in_place_action(ctx, i, target) {
                    if matches!(
                        action,
                        Action::Update {
                            method: UpdateMethod::InPlace,
                            ..
                        }
                    ) && let Some(g) = grace
                    {
                        earliest(
                            &mut step.requeue_after,
                            Duration::from_secs(g.unsigned_abs().into()),
                        );
                    }
                    step.actions.push(action);
                }
            }
            InPlaceDecision::Recreate { .. } => {
                if !pod.specified_delete {
                    step.actions.push(Action::Update {
                        pod: pod.name.to_owned(),
                        method: UpdateMethod::Recreate,
                        revision: target.to_owned(),
                    });
                }
            }
            InPlaceDecision::Refused { reason } => {
                match refused
                    .iter_mut()
                    .find(|(r, _)| r.as_str() == reason.as_str())
                {
                    Some((_, pods)) => pods.push(pod.name.to_owned()),
                    None => refused.push((reason.clone(), vec![pod.name.to_owned()])),
                }
            }
        }
    }
    for (reason, pods) in refused {
        step.problems.push(PlanProblem {
            condition: keys::CONDITION_FAILED_UPDATE,
            reason: super::scale::REFUSED_IN_PLACE_ONLY.to_owned(),
            message: format!(
                "update strategy is InPlaceOnly but pods {} cannot be updated in place: {reason}",
                pods.join(", ")
            ),
        });
    }
    step
}

/// Indexes (into `ctx.pods`) of the pods that may be moved to the target revision.
pub fn candidates(ctx: &PlanContext, rollback: bool) -> Vec<usize> {
    ctx.pods
        .iter()
        .enumerate()
        .filter(|(_, p)| {
            p.is_active()
                && ctx.is_updated(p) == rollback
                && p.lifecycle != Some(LifecycleState::PreparingDelete)
                && !p.in_place_grace_pending
        })
        .map(|(i, _)| i)
        .collect()
}

/// Whether one of the `refreshed` actions writes a pod among `candidates`: the update step
/// then ends with the refresh (module docs, 1), so that no pod gets two writes planned from
/// one snapshot and the choice waits for the refreshed pod's new state, as the reference's.
fn refreshes_a_candidate(ctx: &PlanContext, refreshed: &[Action], candidates: &[usize]) -> bool {
    if refreshed.is_empty() {
        return false;
    }
    let written: std::collections::HashSet<&str> =
        refreshed.iter().filter_map(super::step::pod_of).collect();
    candidates
        .iter()
        .any(|&i| written.contains(ctx.pods[i].name))
}

/// The prefix of the sorted `candidates` that may be updated now (a.6 "Limit").
pub fn limit<'c>(
    ctx: &PlanContext,
    diffs: &Diffs,
    target: &str,
    candidates: &'c [usize],
) -> &'c [usize] {
    let wanted = usize::try_from(diffs.update.unsigned_abs()).unwrap_or(usize::MAX);
    let candidates = &candidates[..wanted.min(candidates.len())];
    let min_ready = ctx.cloneset().min_ready_seconds();
    let now = ctx.now();
    let on_target = |p: &super::model::PodFacts| {
        p.revision
            .is_some_and(|label| revision_matches(label, target))
    };
    let (mut unavailable, mut target_unavailable) = (0i64, 0i64);
    for p in ctx.active_pods() {
        if !p.is_available(min_ready, now) {
            unavailable += 1;
            if on_target(p) {
                target_unavailable += 1;
            }
        }
    }
    let max = i64::from(diffs.update_max_unavailable);
    let mut count = 0usize;
    for &i in candidates {
        let chosen = i64::try_from(count).unwrap_or(i64::MAX);
        if target_unavailable + chosen >= max {
            break;
        }
        if ctx.pods[i].is_available(min_ready, now) {
            if unavailable >= max {
                break;
            }
            unavailable += 1;
        }
        count += 1;
    }
    &candidates[..count]
}

/// The next action for a pod that goes in place, by its lifecycle state (a.7).
fn in_place_action(ctx: &PlanContext, i: usize, target: &str) -> Option<Action> {
    let pod = &ctx.pods[i];
    let lifecycle = ctx.cloneset().spec.lifecycle.as_ref();
    let hook = lifecycle.and_then(|l| l.in_place_update.as_ref());
    let update = || Action::Update {
        pod: pod.name.to_owned(),
        method: UpdateMethod::InPlace,
        revision: target.to_owned(),
    };
    let prepare = || lifecycle::transition(lifecycle, pod, LifecycleState::PreparingUpdate);
    match pod.lifecycle {
        None | Some(LifecycleState::PreparingNormal | LifecycleState::Normal) => {
            Some(if lifecycle::hook_matches(hook, pod) {
                prepare()
            } else {
                update()
            })
        }
        // Updated again before the hook came back: through PreparingUpdate again, the act
        // layer re-applying the hook's labels and finalizers (a.7).
        Some(LifecycleState::Updated) => Some(if hook.is_some() { prepare() } else { update() }),
        // Waits until the user's controller releases the hook; still counts as chosen.
        Some(LifecycleState::PreparingUpdate) => (!lifecycle::hook_matches(hook, pod)).then(update),
        Some(LifecycleState::Updating) => Some(update()),
        Some(LifecycleState::PreparingDelete) => None,
    }
}

#[cfg(test)]
mod tests;
