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
fn creates_go_in_batches_doubling_from_one() {
    let cases: [(usize, Vec<(usize, usize)>); 5] = [
        (0, vec![]),
        (1, vec![(0, 1)]),
        (3, vec![(0, 1), (1, 3)]),
        (4, vec![(0, 1), (1, 3), (3, 4)]),
        (10, vec![(0, 1), (1, 3), (3, 7), (7, 10)]),
    ];
    for (n, want) in cases {
        let got: Vec<(usize, usize)> = slow_start(n)
            .into_iter()
            .map(|r| (r.start, r.end))
            .collect();
        assert_eq!(got, want, "{n}");
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

/// A report in one line: `[Warning|Normal] reason action (about) message | counter | log`.
fn shown(r: &Report) -> String {
    let event = r.event.as_ref().map(|e| {
        let kind = if e.warning { "Warning" } else { "Normal" };
        let about = if e.regarding_pod {
            "regarding"
        } else {
            "related"
        };
        let (reason, action, message) = (&e.reason, e.action, &e.message);
        format!("{kind} {reason} {action} ({about} {:?}) {message}", e.pod)
    });
    format!(
        "{} | {:?} | {:?}",
        event.unwrap_or_default(),
        r.counter,
        r.log
    )
}

#[test]
fn a_step_sent_is_reported_with_the_reference_events_and_counters() {
    let update = |method| {
        step(Action::Update {
            pod: "demo-a".into(),
            method,
            revision: "demo-2".into(),
        })
    };
    let (in_place, recreate) = (
        update(UpdateMethod::InPlace),
        update(UpdateMethod::Recreate),
    );
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
    let adopt = step(Action::AdoptPod { pod: "o".into() });
    let next_batch = step(Action::ApplyNextContainerBatch { pod: "p".into() });
    let held_update = step(Action::ApplyGracedUpdate { pod: "p".into() });
    let held = step(Action::HoldDeletion {
        message: "held".into(),
    });
    let unplanned_create = Step {
        write: Err(WriteError::NotCached("revision r".into())),
        ..create.clone()
    };
    let (written, boom) = (Sent::Written, Sent::Failed("boom".into()));
    let demo_a = r#"Some(Cached("demo-a"))"#;
    let cases: Vec<(&Step, Sent, String)> = vec![
        (
            &in_place,
            written.clone(),
            format!(
                "Normal {} UpdateInPlace (related {demo_a}) successfully update pod demo-a in-place(revision demo-2) | Some(PodsUpdatedInPlace) | None",
                ev::SUCCESSFUL_UPDATE_POD_IN_PLACE
            ),
        ),
        // a write not planned fails the in-place update all the same
        (
            &in_place,
            Sent::Unplanned("refused".into()),
            format!(
                "Warning {} UpdateInPlace (related {demo_a}) failed to update pod demo-a in-place(revision demo-2): refused | None | None",
                ev::FAILED_UPDATE_POD_IN_PLACE
            ),
        ),
        (
            &recreate,
            written.clone(),
            format!(
                "Normal {} Recreate (related {demo_a}) successfully patch pod demo-a specified-delete for update(revision demo-2) | Some(PodsRecreated) | None",
                ev::SUCCESSFUL_UPDATE_POD_RECREATE
            ),
        ),
        (
            &recreate,
            Sent::Conflict("409".into()),
            format!(
                "Warning {} Recreate (related {demo_a}) failed to patch pod demo-a specified-delete for update(revision demo-2): 409 | None | None",
                ev::FAILED_UPDATE_POD_RECREATE
            ),
        ),
        (
            &recreate,
            Sent::Unplanned("x".into()),
            " | None | None".into(),
        ),
        (
            &create,
            written.clone(),
            format!(
                r#"Normal {} Create (related Some(Named("demo-b"))) succeed to create pod demo-b | Some(PodsCreated) | None"#,
                ev::SUCCESSFUL_CREATE
            ),
        ),
        (
            &create,
            boom.clone(),
            format!(
                "Warning {} Create (related None) failed to create pod demo-b: boom | None | None",
                ev::FAILED_CREATE
            ),
        ),
        // a conflict defers the create; nothing is said
        (
            &create,
            Sent::Conflict("409".into()),
            " | None | None".into(),
        ),
        (
            &unplanned_create,
            Sent::Unplanned("x".into()),
            " | None | None".into(),
        ),
        (
            &delete,
            written.clone(),
            format!(
                "Normal {} Delete (related {demo_a}) succeed to delete pod demo-a (ScaleDown) | Some(PodsDeleted) | None",
                ev::SUCCESSFUL_DELETE
            ),
        ),
        (
            &delete,
            boom.clone(),
            format!(
                "Warning {} Delete (related {demo_a}) failed to delete pod demo-a: boom | None | None",
                ev::FAILED_DELETE
            ),
        ),
        (
            &stall,
            written.clone(),
            format!(
                "Warning InPlaceUpdateStalled UpdateInPlace (regarding {demo_a}) waits | None | None"
            ),
        ),
        (&stall, Sent::Passed, " | None | None".into()),
        (
            &held,
            written.clone(),
            format!(
                "Warning {} Delete (related None) held | None | None",
                crate::protection::REASON_HELD
            ),
        ),
        (
            &adopt,
            written.clone(),
            r#" | None | Some("adopted pod o")"#.into(),
        ),
        (&adopt, boom, " | None | None".into()),
        (
            &next_batch,
            written.clone(),
            r#" | None | Some("pod p: next container batch of the in-place update applied")"#
                .into(),
        ),
        // a held update applied says so only when its write applies the spec
        (&held_update, written, " | None | None".into()),
    ];
    for (step, sent, want) in cases {
        assert_eq!(
            shown(&report(step, &sent)),
            want,
            "{:?} {sent:?}",
            step.action
        );
    }
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

#[test]
fn what_became_of_a_write_is_read_from_its_error() {
    let stall = Action::ReportInPlaceStall {
        pod: "p".into(),
        reason: "r".into(),
        message: "m".into(),
    };
    let delete = Action::DeletePvc { pvc: "v".into() };
    let e = |conflict| Some((conflict, "e".to_owned()));
    let cases = [
        (&delete, true, None, Sent::Written),
        (&delete, false, e(false), Sent::Unplanned("e".into())),
        (&stall, false, e(true), Sent::Unplanned("e".into())),
        (&stall, true, e(true), Sent::Passed),
        (&delete, true, e(true), Sent::Conflict("e".into())),
        (&delete, true, e(false), Sent::Failed("e".into())),
        (&stall, true, e(false), Sent::Failed("e".into())),
    ];
    for (action, planned, failed, sent) in cases {
        assert_eq!(
            Sent::of(action, planned, failed.clone()),
            sent,
            "{action:?} {failed:?}"
        );
    }
}

#[test]
fn an_event_regards_the_cloneset_or_its_pod_and_relates_the_other() {
    let reference = |kind: &str, name: &str| ObjectReference {
        kind: Some(kind.into()),
        name: Some(name.into()),
        ..ObjectReference::default()
    };
    let cs = reference("CloneSet", "demo");
    let cached = |name: &str| (name == "demo-a").then(|| reference("Pod", name));
    let named = ObjectReference {
        api_version: Some("v1".into()),
        namespace: Some("ns".into()),
        ..reference("Pod", "demo-new")
    };
    let event = |regarding_pod, pod| StepEvent {
        regarding_pod,
        pod,
        warning: false,
        reason: "R".into(),
        action: "A",
        message: "m".into(),
    };
    let a = || Some(PodRef::Cached("demo-a".into()));
    let gone = || Some(PodRef::Cached("demo-gone".into()));
    let cases = [
        (event(false, None), Ok((cs.clone(), None))),
        (
            event(false, a()),
            Ok((cs.clone(), Some(reference("Pod", "demo-a")))),
        ),
        (
            event(true, a()),
            Ok((reference("Pod", "demo-a"), Some(cs.clone()))),
        ),
        (event(false, gone()), Ok((cs.clone(), None))),
        (event(true, gone()), Err("demo-gone".to_owned())),
        (
            event(false, Some(PodRef::Named("demo-new".into()))),
            Ok((cs.clone(), Some(named))),
        ),
    ];
    for (event, objects) in cases {
        assert_eq!(event.objects(&cs, "ns", cached), objects, "{event:?}");
    }
}

#[test]
fn a_failed_in_place_write_says_what_it_was_doing() {
    let write = |kind| InPlaceWrite {
        action: 0,
        kind,
        pod: "p".into(),
        resource_version: "1".into(),
        revision: "r".into(),
        not_ready_first: true,
        patch: serde_json::json!({}).into(),
        resize: None,
        guard: crate::inplace_write::Guard::default(),
    };
    let cases = [
        (
            InPlaceWriteKind::Start,
            true,
            "set InPlaceUpdateReady False on pod p",
        ),
        (InPlaceWriteKind::Start, false, "update in place pod p"),
        (
            InPlaceWriteKind::NextBatch,
            false,
            "apply the next container batch of pod p",
        ),
        (
            InPlaceWriteKind::ApplyHeld,
            false,
            "apply held in-place update of pod p",
        ),
    ];
    for (kind, not_ready, what) in cases {
        assert_eq!(in_place_what(&write(kind), not_ready), what);
    }
}

#[test]
fn the_pvcs_of_a_deleted_pod_follow_its_report() {
    let pvc = |name: &str| PvcDelete {
        pvc: name.into(),
        uid: format!("u-{name}"),
    };
    let delete = Step {
        action: Action::Delete {
            pod: "demo-a".into(),
            reason: DeleteReason::ScaleDown,
        },
        write: Ok(StepWrite::Object(Write::DeletePod {
            pod: "demo-a".into(),
            uid: "u-a".into(),
            pvcs: vec![pvc("data-a"), pvc("logs-a")],
        })),
    };
    assert_eq!(follow_ups(&delete), [pvc("data-a"), pvc("logs-a")]);
    // a delete whose write could not be planned, and any other write: nothing follows
    let unplanned = Step {
        write: Err(WriteError::NotCached("pod default/demo-a".into())),
        ..delete.clone()
    };
    assert!(follow_ups(&unplanned).is_empty());
    let pvc_alone = Step {
        action: Action::DeletePvc {
            pvc: "data-b".into(),
        },
        write: Ok(StepWrite::Object(Write::DeletePvc(pvc("data-b")))),
    };
    assert!(follow_ups(&pvc_alone).is_empty());
}

#[test]
fn each_phase_is_sent_in_batches_of_chains_by_how_it_runs() {
    fn shape(phase: &[&Step]) -> Vec<Vec<usize>> {
        batches(phase)
            .iter()
            .map(|b| b.iter().map(Vec::len).collect())
            .collect()
    }
    let create = |id: &str| {
        step(Action::Create {
            revision: "r".into(),
            instance_id: id.into(),
        })
    };
    let creates: Vec<Step> = ["a", "b", "c", "d"].into_iter().map(create).collect();
    // Slow start: batches of 1, 2, 1 creates, each create a chain of its own.
    assert_eq!(
        shape(&creates.iter().collect::<Vec<_>>()),
        vec![vec![1], vec![1, 1], vec![1]]
    );
    // Sequential: one batch of one chain, in plan order.
    let jobs: Vec<Step> = [
        Action::CreateImagePullJob {
            job: "j".into(),
            image: "i".into(),
        },
        Action::LabelPreDownloadRevision {
            revision: "r".into(),
            ignored: None,
        },
    ]
    .into_iter()
    .map(step)
    .collect();
    let phase: Vec<&Step> = jobs.iter().collect();
    assert_eq!(shape(&phase), vec![vec![2]]);
    assert_eq!(batches(&phase)[0][0][1].action, jobs[1].action);
    // Per pod: one batch of the pods' chains.
    let refresh: Vec<Step> = ["a", "a", "b"]
        .into_iter()
        .map(|p| step(Action::CompleteInPlaceUpdate { pod: p.into() }))
        .collect();
    assert_eq!(shape(&refresh.iter().collect::<Vec<_>>()), vec![vec![2, 1]]);
    assert!(batches(&[]).is_empty());
}
