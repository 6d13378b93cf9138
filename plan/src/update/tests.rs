#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use inplace_proto::LifecycleState;
use serde_json::{Value, json};

use super::*;
use crate::fixtures::{Fixture, PodBuilder, cloneset, pod, revision, t};

fn old_template() -> Value {
    json!({
        "metadata": {"labels": {"app": "demo"}},
        "spec": {"containers": [{"name": "main", "image": "nginx:1"}]},
    })
}

fn fixture(spec: Value, pods: Vec<PodBuilder>) -> Fixture {
    let mut f = Fixture::new(cloneset(spec), pods);
    f.revisions = vec![revision("demo-old", old_template())];
    f
}

fn diffs(update: i32, max_unavailable: i32) -> Diffs {
    Diffs {
        update,
        update_max_unavailable: max_unavailable,
        ..Diffs::default()
    }
}

fn update(pod: &str, method: UpdateMethod, revision: &str) -> Action {
    Action::Update {
        pod: pod.into(),
        method,
        revision: revision.into(),
    }
}

fn old_pods(n: usize) -> Vec<PodBuilder> {
    (0..n)
        .map(|i| pod(&format!("demo-{i}"), "demo-old"))
        .collect()
}

#[test]
fn recreate_marks_old_pods_for_deletion_up_to_max_unavailable() {
    let f = fixture(json!({"replicas": 5}), old_pods(5));
    let step = plan_update(&f.ctx(), &diffs(5, 2));
    assert_eq!(
        step.actions,
        vec![
            update("demo-0", UpdateMethod::Recreate, "demo-new"),
            update("demo-1", UpdateMethod::Recreate, "demo-new"),
        ]
    );
    assert!(step.problems.is_empty());
}

#[test]
fn the_update_number_caps_how_many_pods_move() {
    // Partition: only `diffs.update` pods may move, however large the budget.
    let f = fixture(json!({"replicas": 5}), old_pods(5));
    let step = plan_update(&f.ctx(), &diffs(1, 5));
    assert_eq!(
        step.actions,
        vec![update("demo-0", UpdateMethod::Recreate, "demo-new")]
    );
}

#[test]
fn paused_and_on_delete_clonesets_update_no_pod() {
    for spec in [
        json!({"updateStrategy": {"paused": true}}),
        json!({"updateStrategy": {"type": "OnDelete"}}),
    ] {
        let f = fixture(spec, old_pods(3));
        assert_eq!(plan_update(&f.ctx(), &diffs(3, 3)), UpdateStep::default());
    }
}

#[test]
fn a_refresh_change_ends_the_step_even_when_paused() {
    let f = fixture(
        json!({"updateStrategy": {"paused": true}}),
        vec![
            pod("demo-0", "demo-old"),
            pod("demo-1", "demo-new").lifecycle("PreparingNormal"),
        ],
    );
    let step = plan_update(&f.ctx(), &diffs(1, 1));
    assert_eq!(
        step.actions,
        vec![Action::Lifecycle {
            pod: "demo-1".into(),
            from: Some(LifecycleState::PreparingNormal),
            to: LifecycleState::Normal,
            mark_not_ready: None,
        }]
    );
}

/// A pod whose in-place update to demo-new has run (its container runs the new image)
/// while `InPlaceUpdateReady` is still False, so it is not Ready yet: the refresh
/// completes it.
fn updated_in_place_not_completed(name: &str) -> PodBuilder {
    pod(name, "demo-new")
        .lifecycle("Updating")
        .spec_image("nginx:2")
        .status_image("nginx:2", "sha-2")
        .in_place_ready(false)
        .not_ready()
        .in_place_state(&json!({
            "revision": "demo-new",
            "updateTimestamp": t(900).to_string(),
            "lastContainerStatuses": {"main": {"imageID": "sha-1"}},
            "updateImages": true,
        }))
}

fn completion(pod: &str) -> [Action; 2] {
    [
        Action::CompleteInPlaceUpdate { pod: pod.into() },
        Action::Lifecycle {
            pod: pod.into(),
            from: Some(LifecycleState::Updating),
            to: LifecycleState::Normal,
            mark_not_ready: None,
        },
    ]
}

#[test]
fn a_completion_and_the_next_starts_go_in_one_step_within_the_budget() {
    // maxUnavailable 2: the pod being completed is still unavailable, so one more pod goes
    // now (the reference would end with the completion and start it next reconcile).
    let mut pods = vec![updated_in_place_not_completed("demo-a")];
    pods.extend(old_pods(3));
    let f = fixture(in_place(json!({"replicas": 4})), pods);
    let step = plan_update(&f.ctx(), &diffs(3, 2));
    let mut want = completion("demo-a").to_vec();
    want.push(update("demo-0", UpdateMethod::InPlace, "demo-new"));
    assert_eq!(step.actions, want);

    // With the budget used up by pods still updating, only the completion.
    let mut pods = vec![
        updated_in_place_not_completed("demo-a"),
        updated_in_place_not_completed("demo-b"),
    ];
    pods.extend(old_pods(2));
    let f = fixture(in_place(json!({"replicas": 4})), pods);
    let step = plan_update(&f.ctx(), &diffs(2, 2));
    let want: Vec<Action> = completion("demo-a")
        .into_iter()
        .chain(completion("demo-b"))
        .collect();
    assert_eq!(step.actions, want);
}

#[test]
fn a_refreshed_pod_that_is_a_candidate_ends_the_step_with_the_refresh() {
    // Rolled back by partition (update < 0): the pods on demo-new go back, and demo-a,
    // completed now, is one of them; its new state is waited for, as the reference does.
    let mut pods = vec![updated_in_place_not_completed("demo-a")];
    pods.push(pod("demo-b", "demo-new"));
    pods.extend(old_pods(2));
    let f = fixture(in_place(json!({"replicas": 4})), pods);
    let step = plan_update(&f.ctx(), &diffs(-2, 4));
    assert_eq!(step.actions, completion("demo-a").to_vec());
}

#[test]
fn candidates_skip_preparing_delete_grace_pending_and_terminating_pods_but_take_updated_ones() {
    let f = fixture(
        json!({"lifecycle": {"inPlaceUpdate": {"labelsHandler": {"gate": "on"}}}}),
        vec![
            pod("demo-a", "demo-old").lifecycle("PreparingDelete"),
            pod("demo-b", "demo-old")
                .grace(&json!({"revision": "demo-old", "graceSeconds": 30}))
                .in_place_state(
                    &json!({"revision": "demo-old", "updateTimestamp": t(999).to_string()}),
                ),
            pod("demo-c", "demo-old").terminating(),
            pod("demo-d", "demo-old").lifecycle("Updated"),
            pod("demo-e", "demo-new"),
        ],
    );
    let ctx = f.ctx();
    let names: Vec<&str> = candidates(&ctx, false)
        .into_iter()
        .map(|i| ctx.pods[i].name)
        .collect();
    assert_eq!(names, ["demo-d"]);
    let back: Vec<&str> = candidates(&ctx, true)
        .into_iter()
        .map(|i| ctx.pods[i].name)
        .collect();
    assert_eq!(back, ["demo-e"]);
}

#[test]
fn unavailable_pods_on_the_target_revision_use_up_the_budget() {
    // maxUnavailable 2, one new pod not ready yet: only one more pod may go.
    let mut pods = old_pods(4);
    pods.push(pod("demo-new-0", "demo-new").not_ready());
    let f = fixture(json!({"replicas": 5}), pods);
    let step = plan_update(&f.ctx(), &diffs(4, 2));
    assert_eq!(
        step.actions,
        vec![update("demo-0", UpdateMethod::Recreate, "demo-new")]
    );
}

#[test]
fn updating_an_already_unavailable_old_pod_costs_no_budget() {
    // maxUnavailable 1 and an old pod is not ready: it is updated first (not-ready pods
    // sort first) without using the budget, but the budget is then spent on the target
    // revision count, so no ready pod follows.
    let mut pods = old_pods(3);
    pods.push(pod("demo-sick", "demo-old").not_ready());
    let f = fixture(json!({"replicas": 4}), pods);
    let step = plan_update(&f.ctx(), &diffs(4, 1));
    assert_eq!(
        step.actions,
        vec![update("demo-sick", UpdateMethod::Recreate, "demo-new")]
    );

    // With budget 2: the sick pod for free, then one ready pod.
    let step = plan_update(&f.ctx(), &diffs(4, 2));
    assert_eq!(
        step.actions,
        vec![
            update("demo-sick", UpdateMethod::Recreate, "demo-new"),
            update("demo-0", UpdateMethod::Recreate, "demo-new"),
        ]
    );
}

#[test]
fn unavailable_pods_that_are_not_candidates_count_against_the_budget() {
    // A PreparingDelete pod is unavailable (not Normal) and not a candidate: with
    // maxUnavailable 2 only one ready pod may go down next to it.
    let mut pods = old_pods(3);
    pods.push(pod("demo-leaving", "demo-old").lifecycle("PreparingDelete"));
    let f = fixture(json!({"replicas": 4}), pods);
    let step = plan_update(&f.ctx(), &diffs(3, 2));
    assert_eq!(
        step.actions,
        vec![update("demo-0", UpdateMethod::Recreate, "demo-new")]
    );
}

#[test]
fn a_pod_already_labelled_for_deletion_needs_no_new_action_but_keeps_its_budget() {
    let pods = vec![
        pod("demo-0", "demo-old").label("apps.kruise.io/specified-delete", "true"),
        pod("demo-1", "demo-old"),
    ];
    let f = fixture(json!({"replicas": 2}), pods);
    assert_eq!(plan_update(&f.ctx(), &diffs(2, 1)).actions, vec![]);
}

fn in_place(spec: Value) -> Value {
    let mut s = json!({"updateStrategy": {"type": "InPlaceIfPossible"}});
    crate::fixtures::merge(&mut s, spec);
    s
}

#[test]
fn in_place_if_possible_updates_an_image_change_in_place() {
    let f = fixture(in_place(json!({})), old_pods(2));
    let step = plan_update(&f.ctx(), &diffs(2, 1));
    assert_eq!(
        step.actions,
        vec![update("demo-0", UpdateMethod::InPlace, "demo-new")]
    );
    assert_eq!(step.requeue_after, None);
}

#[test]
fn in_place_if_possible_falls_back_to_recreate_when_more_than_the_image_changed() {
    let f = fixture(
        in_place(json!({"template": {"spec": {"containers": [
            {"name": "main", "image": "nginx:2", "env": [{"name": "A", "value": "1"}]}
        ]}}})),
        old_pods(1),
    );
    let step = plan_update(&f.ctx(), &diffs(1, 1));
    assert_eq!(
        step.actions,
        vec![update("demo-0", UpdateMethod::Recreate, "demo-new")]
    );
}

#[test]
fn in_place_only_refuses_what_cannot_go_in_place_and_names_the_field() {
    let f = fixture(
        json!({
            "updateStrategy": {"type": "InPlaceOnly"},
            "template": {"spec": {"containers": [
                {"name": "main", "image": "nginx:2", "env": [{"name": "A", "value": "1"}]}
            ]}},
        }),
        old_pods(2),
    );
    let step = plan_update(&f.ctx(), &diffs(2, 2));
    assert_eq!(step.actions, vec![]);
    assert_eq!(step.problems.len(), 1);
    let problem = &step.problems[0];
    assert_eq!(problem.condition, "FailedUpdate");
    assert!(
        problem.message.contains("spec.containers[main].env"),
        "{}",
        problem.message
    );
    assert!(
        problem.message.contains("demo-0, demo-1"),
        "{}",
        problem.message
    );
}

#[test]
fn the_grace_period_requeues_after_it() {
    let f = fixture(
        in_place(json!({"updateStrategy": {"inPlaceUpdateStrategy": {"gracePeriodSeconds": 10}}})),
        old_pods(1),
    );
    let step = plan_update(&f.ctx(), &diffs(1, 1));
    assert_eq!(
        step.actions,
        vec![update("demo-0", UpdateMethod::InPlace, "demo-new")]
    );
    assert_eq!(step.requeue_after, Some(Duration::from_secs(10)));
}

fn hooked() -> Value {
    in_place(json!({"lifecycle": {"inPlaceUpdate": {
        "markPodNotReady": true,
        "finalizersHandler": ["example.io/unready-blocker"],
    }}}))
}

#[test]
fn a_pod_matching_the_in_place_hook_goes_to_preparing_update_first() {
    let f = fixture(
        hooked(),
        vec![pod("demo-0", "demo-old").finalizer("example.io/unready-blocker")],
    );
    let step = plan_update(&f.ctx(), &diffs(1, 1));
    assert_eq!(
        step.actions,
        vec![Action::Lifecycle {
            pod: "demo-0".into(),
            from: Some(LifecycleState::Normal),
            to: LifecycleState::PreparingUpdate,
            mark_not_ready: Some(true),
        }]
    );
}

#[test]
fn preparing_update_pods_wait_for_the_hook_then_update_in_place_and_go_first() {
    let f = fixture(
        hooked(),
        vec![
            pod("demo-0", "demo-old"),
            pod("demo-1", "demo-old")
                .lifecycle("PreparingUpdate")
                .finalizer("example.io/unready-blocker"),
            pod("demo-2", "demo-old").lifecycle("PreparingUpdate"),
        ],
    );
    // Budget 2: both PreparingUpdate pods are chosen first; the hooked one waits.
    let step = plan_update(&f.ctx(), &diffs(3, 2));
    assert_eq!(
        step.actions,
        vec![update("demo-2", UpdateMethod::InPlace, "demo-new")]
    );
}

#[test]
fn an_updated_pod_on_an_old_revision_goes_through_preparing_update_again() {
    let f = fixture(
        hooked(),
        vec![pod("demo-0", "demo-old").lifecycle("Updated")],
    );
    let step = plan_update(&f.ctx(), &diffs(1, 1));
    assert_eq!(
        step.actions,
        vec![Action::Lifecycle {
            pod: "demo-0".into(),
            from: Some(LifecycleState::Updated),
            to: LifecycleState::PreparingUpdate,
            mark_not_ready: Some(true),
        }]
    );
}

#[test]
fn rollback_by_partition_moves_updated_pods_back_to_the_current_revision() {
    let f = fixture(
        in_place(json!({})),
        vec![pod("demo-0", "demo-old"), pod("demo-1", "demo-new")],
    );
    let step = plan_update(&f.ctx(), &diffs(-1, 1));
    assert_eq!(
        step.actions,
        vec![update("demo-1", UpdateMethod::InPlace, "demo-old")]
    );
}

#[test]
fn priority_and_scatter_decide_which_pods_go_first() {
    let f = fixture(
        json!({"replicas": 4, "updateStrategy": {"priorityStrategy": {"weightPriority": [
            {"weight": 50, "matchSelector": {"matchLabels": {"canary": "true"}}}
        ]}}}),
        vec![
            pod("demo-0", "demo-old"),
            pod("demo-1", "demo-old"),
            pod("demo-2", "demo-old").label("canary", "true"),
            pod("demo-3", "demo-old"),
        ],
    );
    let step = plan_update(&f.ctx(), &diffs(4, 1));
    assert_eq!(
        step.actions,
        vec![update("demo-2", UpdateMethod::Recreate, "demo-new")]
    );
}

/// One pod of the property below: on which revision, and in which state.
#[derive(Clone, Copy, Debug)]
enum Kind {
    OldReady,
    OldNotReady,
    NewReady,
    /// Updated in place, its completion due in this plan ([`updated_in_place_not_completed`]).
    NewCompleting,
}

fn build(kind: Kind, i: usize) -> PodBuilder {
    let name = format!("demo-{i}");
    match kind {
        Kind::OldReady => pod(&name, "demo-old"),
        Kind::OldNotReady => pod(&name, "demo-old").not_ready(),
        Kind::NewReady => pod(&name, "demo-new"),
        Kind::NewCompleting => updated_in_place_not_completed(&name),
    }
}

proptest::proptest! {
    /// With completions planned in the same step, the pods taken out of service never push
    /// the unavailable pods past `maxUnavailable` (or past what was unavailable already),
    /// and no pod gets both a refresh write and an update.
    #[test]
    fn starts_beside_a_refresh_stay_within_the_budget(
        kinds in proptest::collection::vec(
            proptest::sample::select(vec![Kind::OldReady, Kind::OldNotReady, Kind::NewReady, Kind::NewCompleting]),
            1..12,
        ),
        max_unavailable in 1i32..5,
        rollback: bool,
    ) {
        let pods: Vec<PodBuilder> = kinds.iter().enumerate().map(|(i, k)| build(*k, i)).collect();
        // Forward: the old pods move; rolled back by partition: the new ones go back.
        let moving = kinds.iter().filter(|k| matches!(k, Kind::OldReady | Kind::OldNotReady) != rollback).count();
        let update = i32::try_from(moving).unwrap() * if rollback { -1 } else { 1 };
        let f = fixture(in_place(json!({"replicas": kinds.len()})), pods);
        let step = plan_update(&f.ctx(), &diffs(update, max_unavailable));

        let index = |name: &str| name.strip_prefix("demo-").and_then(|i| i.parse::<usize>().ok()).unwrap();
        let started: Vec<usize> = step.actions.iter().filter_map(|a| match a {
            Action::Update { pod, .. } => Some(index(pod)),
            _ => None,
        }).collect();
        let refreshed: std::collections::HashSet<usize> = step.actions.iter()
            .filter(|a| !matches!(a, Action::Update { .. }))
            .filter_map(|a| crate::step::pod_of(a).map(index))
            .collect();
        proptest::prop_assert!(started.iter().all(|i| !refreshed.contains(i)));

        let unavailable = kinds.iter().filter(|k| matches!(k, Kind::OldNotReady | Kind::NewCompleting)).count();
        let taken = started.iter().filter(|&&i| matches!(kinds[i], Kind::OldReady | Kind::NewReady)).count();
        let max = usize::try_from(max_unavailable).unwrap();
        proptest::prop_assert!(unavailable + taken <= max.max(unavailable),
            "{unavailable} unavailable + {taken} taken > {max}: {:?}", step.actions);
        // Completions are never held back by the starts.
        let completing = kinds.iter().filter(|k| matches!(k, Kind::NewCompleting)).count();
        let completions = step.actions.iter().filter(|a| matches!(a, Action::CompleteInPlaceUpdate { .. })).count();
        proptest::prop_assert_eq!(completions, completing);
    }
}
