//! The scale step, in the reference's order (OpenKruise
//! `pkg/controller/cloneset/sync/cloneset_scale.go`, `Scale()`).
//! The first stage that has something to do ends the step:
//!
//! 1. **Cancel deletions**: while `replicas - pods + plannedDeletions > 0`, PreparingDelete
//!    pods that are not specified for deletion go back to PreparingNormal (docs "Scaling
//!    with PreparingDelete": scaling back up moves the pod back). Never when a preDelete
//!    or inPlaceUpdate hook has `markPodNotReady` (a pod marked not-ready stays on its way
//!    out).
//! 2. **Create** `min(scaleUp, scaleUpLimit)` pods, the first `scaleUpOldRevision` from the
//!    current revision, the rest from the update revision; all from the current revision
//!    while an `InPlaceOnly` template change cannot go in place ([`inplace_only_refusal`]).
//!    When `scaleUp > 0` the step ends here even if the limit allows no creation (the
//!    reference returns; the update step may then run). The `ScaleUpLimited` event is due when `scaleUp > scaleUpLimit`
//!    (visible in [`Diffs`]).
//! 3. **Finish deletions**: PreparingDelete pods whose preDelete hook is released are
//!    deleted.
//! 4. **Specified deletes** (`podsToDelete`, `apps.kruise.io/specified-delete`): not-ready
//!    pods always, ready ones while `deleteReadyLimit` lasts (docs "MaxUnavailable": a
//!    specified delete is protected by maxUnavailable).
//! 5. **Scale in** `scaleDown` pods, only when no pod is specified for deletion or in
//!    PreparingDelete; victims from [`super::victims`], old revision first, ready ones
//!    again capped by `deleteReadyLimit`.
//!
//! "Deleting" a pod that matches the preDelete hook moves it to PreparingDelete instead
//! (with `markPodNotReady` per the hook) and waits for the user's controller (docs "State
//! circulation"). "Ready" here means available with minReadySeconds 0: Running, Ready,
//! `InPlaceUpdateReady` not False, lifecycle Normal.
//!
//! PVCs: an [`Action::Delete`] of a pod also deletes the PVCs with its instance id (docs:
//! "When a Pod has been deleted by CloneSet controller, all PVCs related to it will be
//! deleted together"); the applier does that, no separate `DeletePvc` is planned.
//! Specified deletes are taken in pod-name order (the reference uses cache order).

use inplace_proto::{CloneSetUpdateStrategyType, LifecycleState};

use super::inplace::InPlaceDecision;
use super::instance_ids::available_ids;
use super::lifecycle::{hook_matches, transition};
use super::model::{Action, DeleteReason, Diffs, PlanContext, PodFacts};
use super::victims;

/// Whether any hook marks pods not ready (`IsLifecycleMarkPodNotReady`).
fn marks_pods_not_ready(ctx: &PlanContext<'_>) -> bool {
    ctx.cloneset().spec.lifecycle.as_ref().is_some_and(|l| {
        l.pre_delete.as_ref().is_some_and(|h| h.mark_pod_not_ready)
            || l.in_place_update
                .as_ref()
                .is_some_and(|h| h.mark_pod_not_ready)
    })
}

fn preparing_delete(pod: &PodFacts) -> bool {
    pod.lifecycle == Some(LifecycleState::PreparingDelete)
}

/// Ready in the scale step's sense (see the module doc).
fn scale_ready(ctx: &PlanContext<'_>, pod: &PodFacts) -> bool {
    pod.is_available(0, ctx.now())
}

/// The actions of the scale step (empty when it has nothing to do).
pub fn plan_scale(ctx: &PlanContext<'_>, diffs: &Diffs) -> Vec<Action> {
    // Indices into ctx.pods of active pods.
    let active: Vec<usize> = (0..ctx.pods.len())
        .filter(|&i| ctx.pods[i].is_active())
        .collect();
    let in_pre_delete: Vec<usize> = active
        .iter()
        .copied()
        .filter(|&i| preparing_delete(&ctx.pods[i]))
        .collect();
    let mut specified: Vec<usize> = active
        .iter()
        .copied()
        .filter(|&i| ctx.pods[i].specified_delete)
        .collect();
    specified.sort_by(|&a, &b| ctx.pods[a].name.cmp(ctx.pods[b].name));
    let planned_deletions = active
        .iter()
        .filter(|&&i| ctx.pods[i].specified_delete || preparing_delete(&ctx.pods[i]))
        .count();

    // 1. cancel PreparingDelete
    let cancels = cancel_preparing_delete(ctx, &active, &in_pre_delete, planned_deletions);
    if !cancels.is_empty() {
        return cancels;
    }

    // 2. create
    if diffs.scale_up > 0 {
        return create(ctx, diffs);
    }

    // 3. pods already in PreparingDelete
    let released = delete_pods(ctx, &in_pre_delete, DeleteReason::PreparingDeleteReleased);
    if !released.is_empty() {
        return released;
    }

    // 4. specified deletes
    let mut ready_budget = diffs.delete_ready_limit;
    let to_delete: Vec<usize> = specified
        .into_iter()
        .filter(|&i| !preparing_delete(&ctx.pods[i]))
        .filter(|&i| take_ready_budget(ctx, i, &mut ready_budget))
        .collect();
    let specified_actions = delete_pods(ctx, &to_delete, DeleteReason::SpecifiedDelete);
    if !specified_actions.is_empty() {
        return specified_actions;
    }

    // 5. scale in
    if diffs.scale_down > 0 && planned_deletions == 0 {
        let (updated, not_updated): (Vec<usize>, Vec<usize>) = active
            .iter()
            .partition(|&&i| ctx.is_updated_for_scale(&ctx.pods[i]));
        // podsToDelete names that match no pod hold back a default-order victim each
        let held = super::pods_to_delete::check(ctx, diffs.scale_down).held;
        let total = usize::try_from(diffs.scale_down)
            .unwrap_or(0)
            .saturating_sub(held);
        let old_first = usize::try_from(diffs.scale_down_old_revision)
            .unwrap_or(0)
            .min(total);
        let chosen = victims::choose(ctx, total, old_first, &not_updated, &updated);
        let victims: Vec<usize> = chosen
            .into_iter()
            .filter(|&i| take_ready_budget(ctx, i, &mut ready_budget))
            .collect();
        return delete_pods(ctx, &victims, DeleteReason::ScaleDown);
    }
    Vec::new()
}

/// Not-ready pods always pass; ready ones consume one unit of `budget` each.
fn take_ready_budget(ctx: &PlanContext<'_>, i: usize, budget: &mut i32) -> bool {
    if !scale_ready(ctx, &ctx.pods[i]) {
        return true;
    }
    if *budget > 0 {
        *budget -= 1;
        return true;
    }
    false
}

fn cancel_preparing_delete(
    ctx: &PlanContext<'_>,
    active: &[usize],
    in_pre_delete: &[usize],
    planned_deletions: usize,
) -> Vec<Action> {
    if marks_pods_not_ready(ctx) {
        return Vec::new();
    }
    let pods = i64::try_from(active.len()).unwrap_or(i64::MAX);
    let planned = i64::try_from(planned_deletions).unwrap_or(i64::MAX);
    let mut room = i64::from(ctx.resolved.replicas) - pods + planned;
    let lifecycle = ctx.cloneset().spec.lifecycle.as_ref();
    let mut actions = Vec::new();
    for &i in in_pre_delete {
        if room <= 0 {
            break;
        }
        let pod = &ctx.pods[i];
        if pod.specified_delete {
            continue;
        }
        actions.push(transition(lifecycle, pod, LifecycleState::PreparingNormal));
        room -= 1;
    }
    actions
}

/// The most pods one plan creates. The rest come in later reconciles, once the cache has
/// seen these (the expectations). A CloneSet asking for any number of pods, up to
/// `replicas: 2147483647`, then costs one bounded plan per reconcile, not an allocation
/// the size of the request. Kubernetes' ReplicaSet controller bounds its creations the
/// same way (`burstReplicas`, also 500).
pub const MAX_CREATES_PER_PLAN: usize = 500;

/// Reason of the problem reported for a refused `InPlaceOnly` change (the update step's too).
pub const REFUSED_IN_PLACE_ONLY: &str = "CannotUpdateInPlace";

/// Why the update revision cannot be reached in place from the current one, when the
/// update strategy is `InPlaceOnly`: the reference's webhook refuses such a template
/// change, so its stored template stays the old one and new pods are made from it. Here
/// the change is stored (no webhook, no CEL transition rule can compare templates), so no
/// pod is made from it: creations use the current revision, and the plan reports the
/// refusal naming the fields.
pub fn inplace_only_refusal(ctx: &PlanContext<'_>) -> Option<String> {
    let cs = ctx.cloneset();
    let in_place_only = cs
        .spec
        .update_strategy
        .as_ref()
        .is_some_and(|s| s.type_ == Some(CloneSetUpdateStrategyType::InPlaceOnly));
    if !in_place_only || ctx.current_revision == ctx.update_revision {
        return None;
    }
    match super::inplace::decide_for_revisions(
        cs,
        ctx.snapshot.revisions,
        &ctx.update_revision,
        Some(&ctx.current_revision),
        &ctx.update_revision,
        ctx.options(),
    ) {
        InPlaceDecision::Refused { reason } => Some(reason),
        _ => None,
    }
}

fn create(ctx: &PlanContext<'_>, diffs: &Diffs) -> Vec<Action> {
    let count = usize::try_from(diffs.scale_up_limit)
        .unwrap_or(0)
        .min(MAX_CREATES_PER_PLAN);
    let old = if inplace_only_refusal(ctx).is_some() {
        count
    } else {
        usize::try_from(diffs.scale_up_old_revision).unwrap_or(0)
    };
    available_ids(ctx, count)
        .into_iter()
        .enumerate()
        .map(|(n, instance_id)| Action::Create {
            revision: if n < old {
                ctx.current_revision.clone()
            } else {
                ctx.update_revision.clone()
            },
            instance_id,
        })
        .collect()
}

/// `deletePods`: hooked pods go to PreparingDelete (nothing when already there), the others
/// are deleted.
fn delete_pods(ctx: &PlanContext<'_>, pods: &[usize], reason: DeleteReason) -> Vec<Action> {
    let lifecycle = ctx.cloneset().spec.lifecycle.as_ref();
    let hook = lifecycle.and_then(|l| l.pre_delete.as_ref());
    pods.iter()
        .filter_map(|&i| {
            let pod = &ctx.pods[i];
            if hook_matches(hook, pod) {
                (!preparing_delete(pod))
                    .then(|| transition(lifecycle, pod, LifecycleState::PreparingDelete))
            } else {
                Some(Action::Delete {
                    pod: pod.name.to_owned(),
                    reason,
                })
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use serde_json::{Value, json};

    use super::*;
    use crate::diffs::{calculate, resolve};
    use crate::fixtures::{Fixture, PodBuilder, cloneset, pod, t};

    const SPECIFIED: &str = "apps.kruise.io/specified-delete";

    fn fixture(spec: Value, pods: Vec<PodBuilder>) -> Fixture {
        let mut f = Fixture::new(cloneset(spec), pods);
        f.resolved = resolve(&f.cloneset);
        f.current_revision = "demo-new".into();
        f
    }

    fn run(f: &Fixture) -> Vec<Action> {
        let ctx = f.ctx();
        plan_scale(&ctx, &calculate(&ctx, true))
    }

    fn news(n: usize) -> Vec<PodBuilder> {
        (0..n)
            .map(|i| pod(&format!("demo-n{i}"), "demo-new"))
            .collect()
    }

    fn deleted(actions: &[Action]) -> Vec<String> {
        actions
            .iter()
            .filter_map(|a| match a {
                Action::Delete { pod, .. } => Some(pod.clone()),
                _ => None,
            })
            .collect()
    }

    fn lifecycle_moves(actions: &[Action]) -> Vec<(String, LifecycleState)> {
        actions
            .iter()
            .filter_map(|a| match a {
                Action::Lifecycle { pod, to, .. } => Some((pod.clone(), *to)),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn scale_up_creates_pods_named_after_fresh_instance_ids() {
        let f = fixture(json!({"replicas": 3}), news(1));
        let actions = run(&f);
        assert_eq!(actions.len(), 2);
        for a in &actions {
            let Action::Create {
                revision,
                instance_id,
            } = a
            else {
                panic!("expected create, got {a:?}")
            };
            assert_eq!(revision, "demo-new");
            assert_eq!(instance_id.len(), 5);
        }
    }

    /// `InPlaceOnly` with a template change beyond images and metadata (an env var): the
    /// reference refuses the change, so new pods are made from the current template.
    #[test]
    fn in_place_only_scale_up_makes_no_pod_from_a_template_that_cannot_go_in_place() {
        let old_template = json!({
            "metadata": {"labels": {"app": "demo"}},
            "spec": {"containers": [{"name": "main", "image": "nginx:1"}]},
        });
        for (container, refused) in [
            (
                json!({"name": "main", "image": "nginx:2", "env": [{"name": "A", "value": "1"}]}),
                true,
            ),
            (json!({"name": "main", "image": "nginx:2"}), false),
        ] {
            let mut f = fixture(
                json!({"replicas": 3, "updateStrategy": {"type": "InPlaceOnly"},
                       "template": {"spec": {"containers": [container]}}}),
                vec![pod("demo-o0", "demo-old")],
            );
            f.current_revision = "demo-old".into();
            f.revisions = vec![crate::fixtures::revision("demo-old", old_template.clone())];
            assert_eq!(inplace_only_refusal(&f.ctx()).is_some(), refused);
            let revisions: Vec<String> = run(&f)
                .into_iter()
                .filter_map(|a| match a {
                    Action::Create { revision, .. } => Some(revision),
                    _ => None,
                })
                .collect();
            let want = if refused { "demo-old" } else { "demo-new" };
            assert_eq!(revisions, [want, want], "refused {refused}");
        }
    }

    #[test]
    fn scale_up_creates_old_revision_pods_first_to_fill_the_partition() {
        // Replicas 4, partition 2, one old pod left: one more old pod, then one new.
        let mut f = fixture(
            json!({"replicas": 4, "updateStrategy": {"partition": 2}}),
            vec![pod("demo-o0", "demo-old"), pod("demo-n0", "demo-new")],
        );
        f.current_revision = "demo-old".into();
        let actions = run(&f);
        let revisions: Vec<&str> = actions
            .iter()
            .filter_map(|a| match a {
                Action::Create { revision, .. } => Some(revision.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(revisions, ["demo-old", "demo-new"]);
    }

    #[test]
    fn scale_up_is_limited_by_scale_strategy_max_unavailable() {
        let pods = vec![pod("demo-a", "demo-new").not_ready()];
        let f = fixture(
            json!({"replicas": 5, "scaleStrategy": {"maxUnavailable": 2}}),
            pods,
        );
        assert_eq!(run(&f).len(), 1);
    }

    #[test]
    fn scale_in_deletes_not_ready_pods_first() {
        let mut pods = news(3);
        pods.push(pod("demo-bad", "demo-new").not_ready());
        let f = fixture(json!({"replicas": 3}), pods);
        let actions = run(&f);
        assert_eq!(deleted(&actions), ["demo-bad"]);
        assert!(matches!(
            actions[0],
            Action::Delete {
                reason: DeleteReason::ScaleDown,
                ..
            }
        ));
    }

    /// `PreparingUpdateAsUpdate`: scale-in splits victims by revision with PreparingUpdate
    /// pods on the updated side, so the partition's old pods are kept and the pod about
    /// to be updated goes.
    #[test]
    fn preparing_update_as_update_moves_the_pod_to_the_updated_side_for_scale_in() {
        for (gate, victim) in [(false, "demo-o1"), (true, "demo-o0")] {
            let pods = vec![
                pod("demo-o0", "demo-old").lifecycle("PreparingUpdate"),
                pod("demo-o1", "demo-old").not_ready(),
                pod("demo-o2", "demo-old"),
            ];
            let mut f = fixture(
                json!({"replicas": 2, "updateStrategy": {"partition": 2, "maxUnavailable": 2}}),
                pods,
            );
            f.current_revision = "demo-old".into();
            f.options.preparing_update_as_update = gate;
            assert_eq!(deleted(&run(&f)), [victim], "gate {gate}");
        }
    }

    #[test]
    fn scale_in_deletes_ready_pods_only_within_delete_ready_limit() {
        // replicas 10 → 2 with maxUnavailable 0: budget = 0 + 8 extra - 0 unavailable.
        let f = fixture(
            json!({"replicas": 2, "updateStrategy": {"maxUnavailable": 0}}),
            news(10),
        );
        assert_eq!(deleted(&run(&f)).len(), 8);
        // Three pods are ready but not yet available (minReadySeconds): they count as
        // unavailable, so the budget is 8 - 3 = 5 and only 5 of the 8 victims go now.
        let mut pods = news(7);
        for i in 0..3 {
            pods.push(pod(&format!("demo-r{i}"), "demo-new").ready_since(t(990)));
        }
        let f = fixture(
            json!({"replicas": 2, "minReadySeconds": 60, "updateStrategy": {"maxUnavailable": 0}}),
            pods,
        );
        let d = deleted(&run(&f));
        assert_eq!(d.len(), 5);
        for i in 0..3 {
            assert!(
                d.contains(&format!("demo-r{i}")),
                "not-available pods go first: {d:?}"
            );
        }
    }

    #[test]
    fn specified_delete_pod_is_deleted_even_without_replica_change() {
        let f = fixture(
            json!({"replicas": 3, "scaleStrategy": {"podsToDelete": ["demo-n1"]}}),
            news(3),
        );
        let actions = run(&f);
        assert_eq!(deleted(&actions), ["demo-n1"]);
        assert!(matches!(
            actions[0],
            Action::Delete {
                reason: DeleteReason::SpecifiedDelete,
                ..
            }
        ));
    }

    #[test]
    fn specified_delete_of_ready_pods_is_protected_by_max_unavailable() {
        // maxUnavailable 1: with one pod already unavailable, the ready labelled pod waits.
        let mut pods = news(2);
        pods.push(pod("demo-sick", "demo-new").not_ready());
        pods.push(pod("demo-x", "demo-new").label(SPECIFIED, "true"));
        let f = fixture(
            json!({"replicas": 4, "updateStrategy": {"maxUnavailable": 1}}),
            pods,
        );
        assert!(run(&f).is_empty());
    }

    /// Found by fuzzing: `replicas: 2147483647` planned two billion creations at once. A
    /// plan creates at most [`MAX_CREATES_PER_PLAN`] pods, all of the current revision
    /// first when some must stay on it.
    #[test]
    fn a_huge_scale_up_is_planned_in_bounded_steps() {
        for (replicas, want) in [(3, 3), (500, 500), (501, 500), (i32::MAX, 500)] {
            let f = fixture(json!({"replicas": replicas}), vec![]);
            let creates = run(&f)
                .iter()
                .filter(|a| matches!(a, Action::Create { .. }))
                .count();
            assert_eq!(creates, want, "replicas {replicas}");
        }
    }

    #[test]
    fn specified_delete_with_surge_creates_a_replacement_first() {
        // Docs "MaxSurge" example 2: maxUnavailable=1, maxSurge=1, pod-a unavailable,
        // pod-b specified → create a new pod first.
        let pods = vec![
            pod("demo-a", "demo-new").not_ready(),
            pod("demo-b", "demo-new").label(SPECIFIED, "true"),
            pod("demo-c", "demo-new"),
        ];
        let f = fixture(
            json!({"replicas": 3, "updateStrategy": {"maxUnavailable": 1, "maxSurge": 1}}),
            pods,
        );
        let actions = run(&f);
        assert_eq!(actions.len(), 1);
        assert!(matches!(actions[0], Action::Create { .. }));
    }

    #[test]
    fn specified_deletes_go_before_scale_in_victims() {
        let mut pods = news(4);
        pods[0] = pod("demo-n0", "demo-new").label(SPECIFIED, "true");
        let f = fixture(
            json!({"replicas": 2, "updateStrategy": {"maxUnavailable": 0}}),
            pods,
        );
        let actions = run(&f);
        // deleteReadyLimit = 0 + 2 - 0 = 2: the specified pod goes first, alone.
        assert_eq!(deleted(&actions), ["demo-n0"]);
    }

    #[test]
    fn pod_matching_the_pre_delete_hook_goes_to_preparing_delete_instead() {
        let spec = json!({"replicas": 2, "lifecycle": {"preDelete": {
            "finalizersHandler": ["example.io/unready-blocker"], "markPodNotReady": true}}});
        let mut pods = news(2);
        pods.push(
            pod("demo-hooked", "demo-new")
                .not_ready()
                .finalizer("example.io/unready-blocker"),
        );
        let f = fixture(spec, pods);
        let actions = run(&f);
        assert_eq!(
            actions,
            vec![Action::Lifecycle {
                pod: "demo-hooked".into(),
                from: Some(LifecycleState::Normal),
                to: LifecycleState::PreparingDelete,
                mark_not_ready: Some(true),
            }]
        );
    }

    #[test]
    fn preparing_delete_pod_is_deleted_once_its_hook_is_released() {
        let spec = json!({"replicas": 2, "lifecycle": {"preDelete": {
            "finalizersHandler": ["example.io/unready-blocker"]}}});
        let mut pods = news(2);
        pods.push(pod("demo-p", "demo-new").lifecycle("PreparingDelete"));
        let f = fixture(spec.clone(), pods);
        let actions = run(&f);
        assert_eq!(deleted(&actions), ["demo-p"]);
        assert!(matches!(
            actions[0],
            Action::Delete {
                reason: DeleteReason::PreparingDeleteReleased,
                ..
            }
        ));

        // Still hooked: nothing to do, and no other victim is chosen meanwhile.
        let mut pods = news(3);
        pods.push(
            pod("demo-p", "demo-new")
                .lifecycle("PreparingDelete")
                .finalizer("example.io/unready-blocker"),
        );
        let f = fixture(
            json!({"replicas": 2, "lifecycle": spec["lifecycle"].clone()}),
            pods,
        );
        assert!(run(&f).is_empty());
    }

    #[test]
    fn scaling_back_up_moves_a_preparing_delete_pod_back_to_preparing_normal() {
        // Docs "Scaling with PreparingDelete": N → N-1 put a pod in PreparingDelete,
        // N-1 → N moves it back.
        let lifecycle = json!({"preDelete": {"finalizersHandler": ["example.io/b"]}});
        let mut pods = news(2);
        pods.push(
            pod("demo-p", "demo-new")
                .lifecycle("PreparingDelete")
                .finalizer("example.io/b"),
        );
        let f = fixture(json!({"replicas": 3, "lifecycle": lifecycle.clone()}), pods);
        assert_eq!(
            lifecycle_moves(&run(&f)),
            [("demo-p".to_owned(), LifecycleState::PreparingNormal)]
        );
    }

    #[test]
    fn specified_preparing_delete_pod_is_not_moved_back_and_blocks_replacement() {
        // Docs: scale N → N-1 with the pod in podsToDelete, back to N: no new pod until
        // the specified pod terminates (default counting).
        let lifecycle = json!({"preDelete": {"finalizersHandler": ["example.io/b"]}});
        let mut pods = news(2);
        pods.push(
            pod("demo-p", "demo-new")
                .lifecycle("PreparingDelete")
                .finalizer("example.io/b"),
        );
        let f = fixture(
            json!({"replicas": 3, "lifecycle": lifecycle,
                   "scaleStrategy": {"podsToDelete": ["demo-p"]}}),
            pods,
        );
        assert!(run(&f).is_empty());
    }

    #[test]
    fn excluded_preparing_delete_pods_get_a_replacement_immediately() {
        let lifecycle = json!({"preDelete": {"finalizersHandler": ["example.io/b"]}});
        let mut pods = news(2);
        pods.push(
            pod("demo-p", "demo-new")
                .lifecycle("PreparingDelete")
                .finalizer("example.io/b"),
        );
        let mut f = fixture(
            json!({"replicas": 3, "lifecycle": lifecycle,
                   "scaleStrategy": {"podsToDelete": ["demo-p"]}}),
            pods,
        );
        f.options.exclude_preparing_delete = true;
        let actions = run(&f);
        assert_eq!(actions.len(), 1);
        assert!(matches!(actions[0], Action::Create { .. }));
    }

    #[test]
    fn mark_pod_not_ready_forbids_cancelling_preparing_delete() {
        let lifecycle =
            json!({"preDelete": {"finalizersHandler": ["example.io/b"], "markPodNotReady": true}});
        let mut pods = news(2);
        pods.push(
            pod("demo-p", "demo-new")
                .lifecycle("PreparingDelete")
                .finalizer("example.io/b"),
        );
        let f = fixture(json!({"replicas": 3, "lifecycle": lifecycle}), pods);
        assert!(lifecycle_moves(&run(&f)).is_empty());
    }

    #[test]
    fn old_revision_pods_are_scaled_in_first() {
        let mut pods = news(2);
        pods.push(pod("demo-o0", "demo-old"));
        let mut f = fixture(json!({"replicas": 2}), pods);
        f.current_revision = "demo-old".into();
        assert_eq!(deleted(&run(&f)), ["demo-o0"]);
    }
}
