#![allow(clippy::unwrap_used, clippy::expect_used)]

use inplace_proto::{LifecycleState, keys};
use proptest::prelude::*;
use serde_json::json;

use super::*;
use crate::action_write::Target;
use crate::fixtures::{Fixture, PodBuilder, cloneset, pod};
use crate::model::{DeleteReason, UpdateMethod};
use crate::write_inputs;

/// The pod a step's write is addressed to, if it is a pod write.
fn written_pod(write: &StepWrite) -> Option<&str> {
    match write {
        StepWrite::Lifecycle(w) => Some(&w.pod),
        StepWrite::Completion(w) => Some(&w.pod),
        StepWrite::InPlace(w) => Some(&w.pod),
        StepWrite::Object(Write::DeletePod { pod, .. }) => Some(pod),
        StepWrite::Object(Write::Patch(p))
            if matches!(p.target, Target::Pod | Target::PodStatus) =>
        {
            Some(&p.name)
        }
        StepWrite::Object(_) | StepWrite::Nothing { .. } => None,
    }
}

/// A gated pod at resourceVersion 7, so that a completion has something to write.
fn gated(name: &str) -> PodBuilder {
    pod(name, "demo-old").raw(|v| {
        v["spec"]["readinessGates"] =
            json!([{"conditionType": keys::INPLACE_UPDATE_READY_CONDITION}]);
        v["metadata"]["resourceVersion"] = json!("7");
    })
}

/// Every kind of per-pod action, for pod `name`.
fn per_pod(name: &str) -> Vec<Action> {
    let pod = name.to_owned();
    vec![
        Action::Delete {
            pod: pod.clone(),
            reason: DeleteReason::ScaleDown,
        },
        Action::Update {
            pod: pod.clone(),
            method: UpdateMethod::Recreate,
            revision: "demo-new".into(),
        },
        Action::Update {
            pod: pod.clone(),
            method: UpdateMethod::InPlace,
            revision: "demo-new".into(),
        },
        Action::Lifecycle {
            pod: pod.clone(),
            from: Some(LifecycleState::Updating),
            to: LifecycleState::Updated,
            mark_not_ready: None,
        },
        Action::CompleteInPlaceUpdate { pod: pod.clone() },
        Action::ApplyGracedUpdate { pod: pod.clone() },
        Action::ApplyNextContainerBatch { pod: pod.clone() },
        Action::ReportInPlaceStall {
            pod: pod.clone(),
            reason: "Stalled".into(),
            message: "waiting".into(),
        },
        Action::SetTemplateHash {
            pod,
            hash: "abc".into(),
        },
    ]
}

fn steps_of(f: &Fixture, actions: Vec<Action>) -> Vec<Step> {
    let ctx = f.ctx();
    let (in_place, other) = write_inputs(&ctx);
    plan_steps(&in_place, &other, &ctx.pods, actions)
}

/// The checks every plan's steps pass: one step per action, in order; a pod write goes
/// to its action's pod.
fn check(actions: &[Action], steps: &[Step]) {
    assert_eq!(steps.len(), actions.len());
    for (action, step) in actions.iter().zip(steps) {
        assert_eq!(&step.action, action);
        if let Ok(write) = &step.write
            && let Some(to) = written_pod(write)
        {
            assert_eq!(Some(to), pod_of(action), "{action:?} writes {write:?}");
        }
    }
}

#[test]
fn every_action_has_its_step_and_a_missing_pod_is_an_error_kept() {
    let f = Fixture::new(cloneset(json!({})), vec![gated("demo-a")]);
    let mut actions = per_pod("demo-a");
    actions.extend(per_pod("demo-gone"));
    actions.push(Action::Create {
        revision: "demo-old".into(),
        instance_id: "b".into(),
    });
    let steps = steps_of(&f, actions.clone());
    check(&actions, &steps);
    let gone: Vec<_> = steps
        .iter()
        .filter(|s| s.pod() == Some("demo-gone"))
        .map(|s| (&s.action, s.write.as_ref().err()))
        .collect();
    // Deleting a gone pod has nothing to do and a lifecycle write needs no cached pod;
    // every other write of a pod not in the cache fails as such, not left out.
    for (action, err) in gone {
        match action {
            Action::Delete { .. } | Action::Lifecycle { .. } => assert_eq!(err, None),
            _ => assert_eq!(
                err,
                Some(&WriteError::NotCached("pod default/demo-gone".into())),
                "{action:?}"
            ),
        }
    }
}

#[test]
fn the_writes_are_of_the_kind_of_their_action() {
    let f = Fixture::new(cloneset(json!({})), vec![gated("demo-a")]);
    let steps = steps_of(&f, per_pod("demo-a"));
    let kinds: Vec<&str> = steps
        .iter()
        .map(|s| match &s.write {
            Ok(StepWrite::Lifecycle(_)) => "lifecycle",
            Ok(StepWrite::Completion(_)) => "completion",
            Ok(StepWrite::InPlace(_)) => "inPlace",
            Ok(StepWrite::Object(Write::DeletePod { .. })) => "deletePod",
            Ok(StepWrite::Object(Write::Patch(_))) => "patch",
            Ok(StepWrite::Object(_)) => "object",
            Ok(StepWrite::Nothing { .. }) => "nothing",
            Err(_) => "error",
        })
        .collect();
    assert_eq!(
        kinds,
        vec![
            "deletePod",
            "patch",
            // no revision demo-new is known: the start cannot be planned
            "error",
            "lifecycle",
            "completion",
            // no grace period held, no update under way: their annotations are missing
            "error",
            "error",
            "patch",
            "patch",
        ]
    );
    for s in &steps {
        if let Err(e) = &s.write {
            assert!(
                matches!(
                    e,
                    WriteError::InPlaceRefused { .. } | WriteError::AnnotationMissing { .. }
                ),
                "{:?}: {e:?}",
                s.action
            );
        }
    }
}

#[test]
fn a_completion_carries_the_only_lifecycle_write_of_its_pod() {
    let f = Fixture::new(cloneset(json!({})), vec![gated("demo-a"), gated("demo-b")]);
    let lifecycle = |pod: &str| Action::Lifecycle {
        pod: pod.into(),
        from: Some(LifecycleState::Updating),
        to: LifecycleState::Normal,
        mark_not_ready: None,
    };
    let complete = |pod: &str| Action::CompleteInPlaceUpdate { pod: pod.into() };
    let actions = vec![
        complete("demo-a"),
        lifecycle("demo-a"),
        complete("demo-b"),
        lifecycle("demo-b"),
        lifecycle("demo-b"),
    ];
    let steps = steps_of(&f, actions.clone());
    check(&actions, &steps);
    let carried: Vec<(bool, bool)> = steps
        .iter()
        .map(|s| match &s.write {
            Ok(StepWrite::Completion(w)) => (true, !w.lifecycle_labels.is_empty()),
            Ok(StepWrite::Lifecycle(w)) => (false, w.with_completion),
            other => panic!("{other:?}"),
        })
        .collect();
    // demo-a: one lifecycle write, carried; demo-b: two, each on its own.
    assert_eq!(
        carried,
        vec![
            (true, true),
            (false, true),
            (true, false),
            (false, false),
            (false, false)
        ]
    );
}

#[test]
fn a_step_shows_its_action_with_its_write_or_its_error() {
    let f = Fixture::new(cloneset(json!({})), vec![gated("demo-a")]);
    let steps = steps_of(
        &f,
        vec![
            Action::SetTemplateHash {
                pod: "demo-a".into(),
                hash: "abc".into(),
            },
            Action::CompleteInPlaceUpdate {
                pod: "demo-gone".into(),
            },
        ],
    );
    let shown = serde_json::to_value(&steps).unwrap();
    assert_eq!(
        shown[0]["action"]["setTemplateHash"]["pod"],
        json!("demo-a")
    );
    assert_eq!(shown[0]["write"]["kind"], json!("patch"), "{shown:#}");
    assert_eq!(shown[0]["write"]["name"], json!("demo-a"));
    assert_eq!(
        shown[0]["write"]["patch"],
        json!({"metadata": {"labels": {keys::POD_TEMPLATE_HASH_LABEL: "abc"}}})
    );
    assert_eq!(
        shown[1]["writeError"],
        json!("pod default/demo-gone not found in the cache")
    );
    assert!(shown[1].get("write").is_none());
}

proptest! {
    /// Any sequence of actions over pods that are or are not cached: one step per action,
    /// in order, each write to its action's pod; no write is dropped.
    #[test]
    fn steps_pair_every_action_with_its_own_write(
        picks in proptest::collection::vec((0usize..9, 0usize..3), 0..24),
    ) {
        let f = Fixture::new(cloneset(json!({})), vec![gated("demo-a"), pod("demo-b", "demo-old")]);
        let names = ["demo-a", "demo-b", "demo-gone"];
        let actions: Vec<Action> = picks
            .iter()
            .map(|&(kind, pod)| per_pod(names[pod]).swap_remove(kind))
            .collect();
        let steps = steps_of(&f, actions.clone());
        check(&actions, &steps);
    }
}
