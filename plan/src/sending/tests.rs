use inplace_proto::LifecycleState;
use inplace_proto::keys::events as ev;

use super::*;
use crate::action_write::CreateRecipe;
use crate::model::DeleteReason;
use crate::step::WriteError;

/// A step of `action` that writes nothing (for what does not depend on the write).
fn step(action: Action) -> Step {
    Step {
        action,
        write: Ok(StepWrite::Nothing { why: "test" }),
    }
}

fn cached(pod: &str) -> Option<PodRef> {
    Some(PodRef::Cached(pod.into()))
}

fn ev(
    pod: Option<PodRef>,
    warning: bool,
    reason: &str,
    action: &'static str,
    message: &str,
) -> Option<StepEvent> {
    Some(event(pod, warning, reason, action, message.into()))
}

#[test]
fn refresh_actions_run_as_one_phase_in_per_pod_chains() {
    let complete = |p: &str| Action::CompleteInPlaceUpdate { pod: p.into() };
    let normal = |p: &str| Action::Lifecycle {
        pod: p.into(),
        from: Some(LifecycleState::Updating),
        to: LifecycleState::Normal,
        mark_not_ready: None,
    };
    let actions = [
        complete("a"),
        normal("a"),
        complete("b"),
        normal("b"),
        Action::ApplyGracedUpdate { pod: "c".into() },
    ];
    assert!(actions.iter().all(|a| phase_of(a) == phase_of(&actions[0])));
    let steps: Vec<Step> = actions.iter().cloned().map(step).collect();
    let phase: Vec<&Step> = steps.iter().collect();
    let chains: Vec<Vec<&Action>> = chains(&phase)
        .into_iter()
        .map(|chain| chain.into_iter().map(|s| &s.action).collect())
        .collect();
    assert_eq!(chains.len(), 3);
    assert_eq!(chains[0], vec![&actions[0], &actions[1]]);
    assert_eq!(chains[1], vec![&actions[2], &actions[3]]);
    assert_eq!(chains[2], vec![&actions[4]]);
    // Actions without a pod stay one chain each.
    let prune = Action::PrunePodsToDelete { names: vec![] };
    let pvc = Action::DeletePvc { pvc: "x".into() };
    let (prune_step, pvc_step) = (step(prune.clone()), step(pvc));
    assert_eq!(super::chains(&[&prune_step, &pvc_step]).len(), 2);
    assert_ne!(phase_of(&prune), phase_of(&actions[0]));
}

#[test]
fn consecutive_steps_of_one_phase_form_one_phase_and_each_phase_runs_its_way() {
    let create = |id: &str| Action::Create {
        revision: "r".into(),
        instance_id: id.into(),
    };
    let delete = Action::Delete {
        pod: "d".into(),
        reason: DeleteReason::ScaleDown,
    };
    let adopt = Action::AdoptPod { pod: "o".into() };
    let steps: Vec<Step> = [
        create("a"),
        create("b"),
        delete.clone(),
        create("c"),
        adopt.clone(),
    ]
    .into_iter()
    .map(step)
    .collect();
    let sizes: Vec<usize> = phases(&steps).iter().map(Vec::len).collect();
    assert_eq!(sizes, vec![2, 1, 1, 1]);
    for (action, run) in [
        (create("a"), PhaseRun::SlowStart),
        (delete, PhaseRun::PerPod),
        (adopt, PhaseRun::Sequential),
        (
            Action::RemoveFinalizer {
                finalizer: "f".into(),
            },
            PhaseRun::Sequential,
        ),
        (
            Action::CompleteInPlaceUpdate { pod: "p".into() },
            PhaseRun::PerPod,
        ),
    ] {
        assert_eq!(run_of(&action), run, "{action:?}");
    }
}

#[test]
fn failures_are_reported_under_their_condition_and_only_pinned_status_writes_pass_a_conflict() {
    let pod = || "p".to_string();
    let cases = [
        (
            Action::Create {
                revision: "r".into(),
                instance_id: "a".into(),
            },
            FailureKind::Scale,
            false,
        ),
        (
            Action::Delete {
                pod: pod(),
                reason: DeleteReason::ScaleDown,
            },
            FailureKind::Scale,
            false,
        ),
        (
            Action::DeletePvc { pvc: "v".into() },
            FailureKind::Scale,
            false,
        ),
        (
            Action::PrunePodsToDelete { names: vec![] },
            FailureKind::Scale,
            false,
        ),
        (
            Action::ReownPvcToPod {
                pvc: "v".into(),
                pod: pod(),
            },
            FailureKind::Scale,
            false,
        ),
        (
            Action::CompleteInPlaceUpdate { pod: pod() },
            FailureKind::Update,
            true,
        ),
        (
            Action::ReportInPlaceStall {
                pod: pod(),
                reason: "R".into(),
                message: "m".into(),
            },
            FailureKind::Update,
            true,
        ),
        (
            Action::ApplyGracedUpdate { pod: pod() },
            FailureKind::Update,
            false,
        ),
        (Action::AdoptPod { pod: pod() }, FailureKind::Update, false),
    ];
    for (action, kind, passes) in cases {
        assert_eq!(FailureKind::of(&action), kind, "{action:?}");
        assert_eq!(passes_conflict(&action), passes, "{action:?}");
    }
    assert_eq!(FailureKind::Scale.condition(), keys::CONDITION_FAILED_SCALE);
    assert_eq!(
        FailureKind::Update.condition(),
        keys::CONDITION_FAILED_UPDATE
    );
}

#[test]
fn a_step_sent_is_reported_with_the_reference_events_and_counters() {
    let update = |method| Action::Update {
        pod: "demo-a".into(),
        method,
        revision: "demo-2".into(),
    };
    let create = Step {
        action: Action::Create {
            revision: "demo-2".into(),
            instance_id: "b".into(),
        },
        write: Ok(StepWrite::Object(Write::Create(CreateRecipe {
            pod: "demo-b".into(),
            revision: "demo-2".into(),
            instance_id: "b".into(),
            short_hash_label: false,
            pvcs: vec![],
        }))),
    };
    let delete = step(Action::Delete {
        pod: "demo-a".into(),
        reason: DeleteReason::ScaleDown,
    });
    let stall = step(Action::ReportInPlaceStall {
        pod: "demo-a".into(),
        reason: "InPlaceUpdateStalled".into(),
        message: "waits".into(),
    });
    let boom = || Sent::Failed("boom".into());
    let cases: Vec<(&str, Step, Sent, Report)> = vec![
        (
            "in place, written",
            step(update(UpdateMethod::InPlace)),
            Sent::Written,
            Report {
                event: ev(
                    cached("demo-a"),
                    false,
                    ev::SUCCESSFUL_UPDATE_POD_IN_PLACE,
                    "UpdateInPlace",
                    "successfully update pod demo-a in-place(revision demo-2)",
                ),
                counter: Some(Counter::PodsUpdatedInPlace),
                log: None,
            },
        ),
        (
            "in place, not planned: a failure event all the same",
            step(update(UpdateMethod::InPlace)),
            Sent::Unplanned("refused".into()),
            Report {
                event: ev(
                    cached("demo-a"),
                    true,
                    ev::FAILED_UPDATE_POD_IN_PLACE,
                    "UpdateInPlace",
                    "failed to update pod demo-a in-place(revision demo-2): refused",
                ),
                ..Report::default()
            },
        ),
        (
            "recreate, written",
            step(update(UpdateMethod::Recreate)),
            Sent::Written,
            Report {
                event: ev(
                    cached("demo-a"),
                    false,
                    ev::SUCCESSFUL_UPDATE_POD_RECREATE,
                    "Recreate",
                    "successfully patch pod demo-a specified-delete for update(revision demo-2)",
                ),
                counter: Some(Counter::PodsRecreated),
                log: None,
            },
        ),
        (
            "recreate, conflict",
            step(update(UpdateMethod::Recreate)),
            Sent::Conflict("409".into()),
            Report {
                event: ev(
                    cached("demo-a"),
                    true,
                    ev::FAILED_UPDATE_POD_RECREATE,
                    "Recreate",
                    "failed to patch pod demo-a specified-delete for update(revision demo-2): 409",
                ),
                ..Report::default()
            },
        ),
        (
            "recreate, not planned",
            step(update(UpdateMethod::Recreate)),
            Sent::Unplanned("x".into()),
            Report::default(),
        ),
        (
            "create, written",
            create.clone(),
            Sent::Written,
            Report {
                event: ev(
                    Some(PodRef::Named("demo-b".into())),
                    false,
                    ev::SUCCESSFUL_CREATE,
                    "Create",
                    "succeed to create pod demo-b",
                ),
                counter: Some(Counter::PodsCreated),
                log: None,
            },
        ),
        (
            "create, failed",
            create.clone(),
            boom(),
            Report {
                event: ev(
                    None,
                    true,
                    ev::FAILED_CREATE,
                    "Create",
                    "failed to create pod demo-b: boom",
                ),
                ..Report::default()
            },
        ),
        (
            "create, deferred by a conflict",
            create,
            Sent::Conflict("409".into()),
            Report::default(),
        ),
        (
            "delete, written",
            delete.clone(),
            Sent::Written,
            Report {
                event: ev(
                    cached("demo-a"),
                    false,
                    ev::SUCCESSFUL_DELETE,
                    "Delete",
                    "succeed to delete pod demo-a (ScaleDown)",
                ),
                counter: Some(Counter::PodsDeleted),
                log: None,
            },
        ),
        (
            "delete, failed",
            delete,
            boom(),
            Report {
                event: ev(
                    cached("demo-a"),
                    true,
                    ev::FAILED_DELETE,
                    "Delete",
                    "failed to delete pod demo-a: boom",
                ),
                ..Report::default()
            },
        ),
        (
            "stall, written: regarding the pod",
            stall.clone(),
            Sent::Written,
            Report {
                event: Some(StepEvent {
                    regarding_pod: true,
                    ..event(
                        cached("demo-a"),
                        true,
                        "InPlaceUpdateStalled",
                        "UpdateInPlace",
                        "waits".into(),
                    )
                }),
                ..Report::default()
            },
        ),
        ("stall, passed", stall, Sent::Passed, Report::default()),
        (
            "held deletion",
            step(Action::HoldDeletion {
                message: "held".into(),
            }),
            Sent::Written,
            Report {
                event: ev(None, true, crate::protection::REASON_HELD, "Delete", "held"),
                ..Report::default()
            },
        ),
        (
            "adoption",
            step(Action::AdoptPod { pod: "o".into() }),
            Sent::Written,
            Report {
                log: Some("adopted pod o".into()),
                ..Report::default()
            },
        ),
        (
            "adoption failed",
            step(Action::AdoptPod { pod: "o".into() }),
            boom(),
            Report::default(),
        ),
        (
            "next batch",
            step(Action::ApplyNextContainerBatch { pod: "p".into() }),
            Sent::Written,
            Report {
                log: Some("pod p: next container batch of the in-place update applied".into()),
                ..Report::default()
            },
        ),
        (
            "a held update without its write: nothing said",
            step(Action::ApplyGracedUpdate { pod: "p".into() }),
            Sent::Written,
            Report::default(),
        ),
    ];
    for (what, step, sent, want) in cases {
        assert_eq!(report(&step, &sent), want, "{what}");
    }
    let unplanned = Step {
        action: Action::Create {
            revision: "r".into(),
            instance_id: "a".into(),
        },
        write: Err(WriteError::NotCached("revision r".into())),
    };
    assert_eq!(
        report(&unplanned, &Sent::Unplanned("x".into())),
        Report::default()
    );
}

#[test]
fn a_failed_patch_says_what_it_was_doing() {
    let patch = |target| Patch {
        target,
        name: "n".into(),
        resource_version: None,
        patch: serde_json::json!({}),
        stamp_conditions: false,
    };
    let cases = [
        (
            Action::ReownPvcToPod {
                pvc: "v".into(),
                pod: "p".into(),
            },
            Target::Pvc,
            "hand PVC v to pod p",
        ),
        (
            Action::PrunePodsToDelete { names: vec![] },
            Target::CloneSet,
            "prune spec.scaleStrategy.podsToDelete",
        ),
        (
            Action::SetTemplateHash {
                pod: "n".into(),
                hash: "h".into(),
            },
            Target::Pod,
            "label pod n",
        ),
        (
            Action::Update {
                pod: "n".into(),
                method: UpdateMethod::Recreate,
                revision: "r".into(),
            },
            Target::Pod,
            "mark for recreate pod n",
        ),
        (
            Action::AddFinalizer {
                finalizer: "f".into(),
            },
            Target::CloneSet,
            "write CloneSet finalizers",
        ),
        (
            Action::AdoptPod { pod: "n".into() },
            Target::Pod,
            "adopt pod n",
        ),
        (
            Action::ReleasePod { pod: "n".into() },
            Target::Pod,
            "release pod n",
        ),
        (
            Action::ReportInPlaceStall {
                pod: "n".into(),
                reason: "R".into(),
                message: "m".into(),
            },
            Target::PodStatus,
            "patch status of pod n",
        ),
        (
            Action::DeletePvc { pvc: "n".into() },
            Target::Pvc,
            "patch Pvc n",
        ),
    ];
    for (action, target, want) in cases {
        assert_eq!(patch_what(&action, &patch(target)), want, "{action:?}");
    }
}
