#![allow(clippy::unwrap_used, clippy::expect_used)]

use inplace_proto::{CloneSet, LifecycleState};
use serde_json::json;

use super::*;
use crate::fixtures::PlanForms;
use crate::fixtures::{Fixture, PodBuilder, cloneset, pod, t};
use crate::lifecycle_write::NotReadyKey;
use crate::{Plan, lifecycle_write, plan, revision};

const IUR: &str = keys::INPLACE_UPDATE_READY_CONDITION;

/// `pod` with readiness gate `InPlaceUpdateReady`, at resourceVersion 7.
fn gated(p: PodBuilder) -> PodBuilder {
    p.raw(|v| {
        v["spec"]["readinessGates"] = json!([{"conditionType": IUR}]);
        v["metadata"]["resourceVersion"] = json!("7");
    })
}

fn state_label(state: LifecycleState) -> BTreeMap<String, String> {
    BTreeMap::from([(
        keys::LIFECYCLE_STATE_LABEL.to_owned(),
        state.as_str().to_owned(),
    )])
}

fn lifecycle_of(pod: &str, labels: BTreeMap<String, String>) -> LifecycleWrite {
    LifecycleWrite {
        pod: pod.into(),
        not_ready: None,
        labels,
        finalizers: vec![],
        with_completion: false,
    }
}

fn complete(pod: &str) -> Action {
    Action::CompleteInPlaceUpdate { pod: pod.into() }
}

/// (case, gated pod, completion planned, the plan's lifecycle writes of the pod, the
/// labels the completion carries (None: no completion write), `with_completion` of each
/// lifecycle write afterwards)
type Case = (
    &'static str,
    bool,
    bool,
    Vec<LifecycleWrite>,
    Option<BTreeMap<String, String>>,
    Vec<bool>,
);

#[test]
fn the_completion_carries_the_lifecycle_labels_only_when_they_are_all_the_lifecycle_writes() {
    let normal = state_label(LifecycleState::Normal);
    let key = NotReadyKey {
        key: keys::PRE_UPDATE_HOOK_KEY,
        add: false,
    };
    let cases: Vec<Case> = vec![
        (
            "Updating -> Normal, labels only: one write",
            true,
            true,
            vec![lifecycle_of("demo-a", normal.clone())],
            Some(normal.clone()),
            vec![true],
        ),
        (
            "Updating -> Updated (inPlaceUpdate hook not back), labels only: one write",
            true,
            true,
            vec![lifecycle_of("demo-a", state_label(LifecycleState::Updated))],
            Some(state_label(LifecycleState::Updated)),
            vec![true],
        ),
        (
            "a KruisePodReady key to clear: the lifecycle writes on its own",
            true,
            true,
            vec![LifecycleWrite {
                not_ready: Some(key),
                ..lifecycle_of("demo-a", normal.clone())
            }],
            Some(BTreeMap::new()),
            vec![false],
        ),
        (
            "finalizers to put back: the lifecycle writes on its own",
            true,
            true,
            vec![LifecycleWrite {
                finalizers: vec!["example.com/hook".into()],
                ..lifecycle_of("demo-a", normal.clone())
            }],
            Some(BTreeMap::new()),
            vec![false],
        ),
        (
            "no pod patch in the lifecycle write (already in the state): nothing carried",
            true,
            true,
            vec![lifecycle_of("demo-a", BTreeMap::new())],
            Some(BTreeMap::new()),
            vec![false],
        ),
        (
            "no lifecycle write: the condition alone",
            true,
            true,
            vec![],
            Some(BTreeMap::new()),
            vec![],
        ),
        (
            "another pod's lifecycle write is not carried",
            true,
            true,
            vec![lifecycle_of("demo-b", normal.clone())],
            Some(BTreeMap::new()),
            vec![false],
        ),
        (
            "two lifecycle writes of the pod: both on their own",
            true,
            true,
            vec![
                lifecycle_of("demo-a", normal.clone()),
                lifecycle_of("demo-a", normal.clone()),
            ],
            Some(BTreeMap::new()),
            vec![false, false],
        ),
        (
            "no InPlaceUpdateReady gate: no completion write, the lifecycle on its own",
            false,
            true,
            vec![lifecycle_of("demo-a", normal.clone())],
            None,
            vec![false],
        ),
        (
            "no completion planned (condition True, label still Updating): the lifecycle alone",
            true,
            false,
            vec![lifecycle_of("demo-a", normal.clone())],
            None,
            vec![false],
        ),
    ];
    for (case, has_gate, completing, mut lifecycle, carried, merged) in cases {
        let p = pod("demo-a", "demo-new").lifecycle("Updating");
        let p = if has_gate {
            gated(p)
        } else {
            p.raw(|v| v["metadata"]["resourceVersion"] = json!("7"))
        };
        let actions = if completing {
            vec![complete("demo-a")]
        } else {
            vec![]
        };
        let writes = all(&[p.cached()], &actions, &mut lifecycle);
        let want: Vec<CompletionWrite> = carried
            .into_iter()
            .map(|lifecycle_labels| CompletionWrite {
                pod: "demo-a".into(),
                resource_version: "7".into(),
                lifecycle_labels,
            })
            .collect();
        assert_eq!(writes, want, "{case}");
        let marked: Vec<bool> = lifecycle.iter().map(|w| w.with_completion).collect();
        assert_eq!(marked, merged, "{case}");
        // A lifecycle write carried by the completion sends no pod patch of its own.
        for w in &lifecycle {
            assert_eq!(
                w.patch("now").is_none(),
                w.with_completion || w.labels.is_empty(),
                "{case}"
            );
        }
    }
}

#[test]
fn the_patch_is_the_condition_true_and_the_lifecycle_metadata_pinned_to_the_pod_version() {
    let now = Time(t(1000));
    let stamp = "2026-01-01T00:16:40Z";
    let carrying = CompletionWrite {
        pod: "demo-a".into(),
        resource_version: "7".into(),
        lifecycle_labels: state_label(LifecycleState::Normal),
    };
    assert_eq!(
        carrying.patch(&now, stamp),
        json!({
            "metadata": {
                "resourceVersion": "7",
                "labels": {keys::LIFECYCLE_STATE_LABEL: "Normal"},
                "annotations": {keys::LIFECYCLE_TIMESTAMP_ANNOTATION: stamp},
            },
            "status": {"conditions": [{
                "type": IUR, "status": "True", "lastTransitionTime": stamp,
                "reason": null, "message": null,
            }]},
        })
    );
    // Without labels: the body the applier wrote before the write moved into the plan.
    let alone = CompletionWrite {
        lifecycle_labels: BTreeMap::new(),
        ..carrying
    };
    assert_eq!(
        alone.patch(&now, stamp),
        json!({
            "metadata": {"resourceVersion": "7"},
            "status": {"conditions": [{
                "type": IUR, "status": "True", "lastTransitionTime": stamp,
                "reason": null, "message": null,
            }]},
        })
    );
}

/// A CloneSet of one pod on its update revision (`spec` merged into the template's), its
/// in-place update of `main` to `nginx:2` as `pod` shows it; the full plan.
fn plan_of(spec: serde_json::Value, pod_of: impl Fn(&str) -> PodBuilder) -> Plan {
    let mut cs: CloneSet = cloneset(spec);
    cs.spec.template = serde_json::from_value(json!({
        "metadata": {"labels": {"app": "demo"}},
        "spec": {"containers": [{"name": "main", "image": "nginx:2"}]},
    }))
    .unwrap();
    let rev = revision::new_revision(&cs, 1, 0).metadata.name.unwrap();
    cs.status = Some(inplace_proto::CloneSetStatus {
        current_revision: Some(rev.clone()),
        update_revision: Some(rev.clone()),
        ..Default::default()
    });
    let pod = pod_of(&rev);
    plan(Fixture::new(cs, vec![pod]).snapshot()).unwrap()
}

/// `demo-a` on revision `rev`, gated, its containers running `nginx:2` after an update
/// recorded from `sha-1`, lifecycle `state`, `InPlaceUpdateReady` `ready`.
fn updated_pod(rev: &str, state: &str, ready: bool) -> PodBuilder {
    gated(
        pod("demo-a", rev)
            .lifecycle(state)
            .spec_image("nginx:2")
            .status_image("nginx:2", "sha-2")
            .in_place_ready(ready)
            .in_place_state(&json!({
                "revision": rev,
                "updateTimestamp": t(900).to_string(),
                "lastContainerStatuses": {"main": {"imageID": "sha-1"}},
                "updateImages": true,
            })),
    )
}

fn pod_writes(p: &Plan) -> (Vec<&Action>, Vec<&CompletionWrite>, Vec<&LifecycleWrite>) {
    (
        p.steps.iter().map(|s| &s.action).collect(),
        p.completion_writes(),
        p.lifecycle_writes(),
    )
}

#[test]
fn the_planner_completes_and_moves_the_lifecycle_in_one_write_and_degrades_to_two() {
    let normal = state_label(LifecycleState::Normal);
    // The update just completed: one pods/status write with the lifecycle labels.
    let p = plan_of(json!({"replicas": 1}), |rev| {
        updated_pod(rev, "Updating", false)
    });
    let (actions, completions, lifecycle) = pod_writes(&p);
    assert_eq!(
        actions,
        vec![
            &complete("demo-a"),
            &Action::Lifecycle {
                pod: "demo-a".into(),
                from: Some(LifecycleState::Updating),
                to: LifecycleState::Normal,
                mark_not_ready: None,
            }
        ]
    );
    assert_eq!(
        completions,
        vec![&CompletionWrite {
            pod: "demo-a".into(),
            resource_version: "7".into(),
            lifecycle_labels: normal.clone(),
        }]
    );
    assert_eq!(
        lifecycle,
        vec![&LifecycleWrite {
            with_completion: true,
            ..lifecycle_of("demo-a", normal.clone())
        }]
    );
    assert_eq!(lifecycle[0].patch("now"), None, "no second pod write");

    // Condition True but label still Updating (a server that dropped the metadata of the
    // status patch): the ordinary lifecycle write, no completion, so never stuck.
    let p = plan_of(json!({"replicas": 1}), |rev| {
        updated_pod(rev, "Updating", true)
    });
    let (actions, completions, lifecycle) = pod_writes(&p);
    assert_eq!(
        actions,
        vec![&Action::Lifecycle {
            pod: "demo-a".into(),
            from: Some(LifecycleState::Updating),
            to: LifecycleState::Normal,
            mark_not_ready: None,
        }]
    );
    assert!(completions.is_empty());
    assert_eq!(lifecycle, vec![&lifecycle_of("demo-a", normal.clone())]);
    assert!(lifecycle[0].patch("now").is_some(), "the pod patch is sent");

    // After the daemon's completion write (condition True, label Normal): nothing more.
    let p = plan_of(json!({"replicas": 1}), |rev| {
        updated_pod(rev, "Normal", true)
    });
    let (actions, completions, lifecycle) = pod_writes(&p);
    assert!(actions.is_empty(), "{actions:?}");
    assert!(completions.is_empty());
    assert!(lifecycle.is_empty());
    assert!(p.pod_conditions.is_empty());

    // With markPodNotReady on the inPlaceUpdate hook the key is cleared on its own write.
    let hooked = json!({"replicas": 1, "lifecycle": {"inPlaceUpdate": {
        "labelsHandler": {"example.com/hook": "true"}, "markPodNotReady": true}}});
    let p = plan_of(hooked, |rev| {
        updated_pod(rev, "Updating", false).label("example.com/hook", "true")
    });
    let (_, completions, lifecycle) = pod_writes(&p);
    assert_eq!(completions.len(), 1);
    assert!(completions[0].lifecycle_labels.is_empty());
    assert_eq!(lifecycle.len(), 1);
    assert!(!lifecycle[0].with_completion);
    assert!(lifecycle[0].not_ready.is_some());
}

#[test]
fn lifecycle_write_all_alone_never_marks_a_write_carried() {
    // The planner's lifecycle writes start unmarked; only `all` above marks them.
    let cs = cloneset(json!({}));
    let actions = [Action::Lifecycle {
        pod: "demo-a".into(),
        from: Some(LifecycleState::Updating),
        to: LifecycleState::Normal,
        mark_not_ready: None,
    }];
    assert!(
        lifecycle_write::all(&cs, &actions)
            .iter()
            .all(|w| !w.with_completion)
    );
}
