#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::json;

use super::*;
use crate::fixtures::PlanForms;
use crate::fixtures::{PodBuilder, cloneset, facts_of, pod, revision, t};
use crate::model::DeleteReason;

/// The CloneSet `demo` with a volumeClaimTemplate `data`, the update revision
/// `demo-new` (its template) and an old revision `demo-old`.
struct World {
    cs: CloneSet,
    pods: Vec<Arc<CachedPod>>,
    pvcs: Vec<PersistentVolumeClaim>,
    revisions: Vec<ControllerRevision>,
    short_hash: bool,
}

fn pvc(name: &str, instance: &str) -> PersistentVolumeClaim {
    serde_json::from_value(json!({
        "metadata": {
            "name": name, "uid": format!("uid-{name}"), "resourceVersion": "11",
            "labels": {keys::INSTANCE_ID_LABEL: instance},
            "ownerReferences": [
                {"apiVersion": "apps.kruise.io/v1alpha1", "kind": "CloneSet", "name": "demo",
                 "uid": "cs-uid", "controller": true},
                {"apiVersion": "v1", "kind": "ConfigMap", "name": "keep", "uid": "cm-uid"},
            ],
        },
    }))
    .unwrap()
}

fn versioned(builder: PodBuilder, rv: &str) -> PodBuilder {
    builder.raw(|v| v["metadata"]["resourceVersion"] = json!(rv))
}

impl World {
    fn new(pods: Vec<PodBuilder>) -> Self {
        Self {
            cs: cloneset(json!({
                "scaleStrategy": {"podsToDelete": ["demo-a", "demo-gone"]},
                "volumeClaimTemplates": [{"metadata": {"name": "data"},
                    "spec": {"accessModes": ["ReadWriteOnce"],
                             "resources": {"requests": {"storage": "1Gi"}}}}],
            })),
            pods: pods.into_iter().map(PodBuilder::cached).collect(),
            pvcs: vec![pvc("data-demo-a", "a")],
            revisions: vec![revision(
                "demo-old",
                json!({"metadata": {"labels": {"app": "demo"}},
                       "spec": {"containers": [{"name": "main", "image": "nginx:1"}]}}),
            )],
            short_hash: false,
        }
    }

    fn inputs(&self) -> ActionInputs<'_> {
        ActionInputs {
            cloneset: &self.cs,
            pods: &self.pods,
            pvcs: &self.pvcs,
            revisions: &self.revisions,
            update_revision: "demo-new",
            short_hash: self.short_hash,
        }
    }

    /// The write of `action` alone (at index 0).
    fn write(&self, action: Action) -> Result<Write, ActionWriteError> {
        let writes = all(
            &self.inputs(),
            &facts_of(&self.pods),
            std::slice::from_ref(&action),
        );
        // An error is kept in the write's place, not dropped.
        match writes.into_iter().next().flatten().expect("covered") {
            Ok(w) => {
                assert_eq!(w.action, 0);
                Ok(w.write)
            }
            Err(e) => Err(e),
        }
    }
}

fn now() -> Time {
    Time(t(100))
}

#[test]
fn each_covered_action_gets_its_write() {
    let w = World::new(vec![
        versioned(pod("demo-a", "demo-old"), "7").label(keys::INSTANCE_ID_LABEL, "a"),
        versioned(pod("demo-b", "demo-old"), "8")
            .label(keys::INSTANCE_ID_LABEL, "b")
            .raw(|v| {
                v["spec"]["readinessGates"] =
                    json!([{"conditionType": keys::INPLACE_UPDATE_READY_CONDITION}]);
            }),
    ]);
    let status_patch = |name: &str, rv: &str, patch: Value, stamp: bool| {
        Write::Patch(Patch {
            target: Target::PodStatus,
            name: name.into(),
            resource_version: Some(rv.into()),
            patch,
            stamp_conditions: stamp,
        })
    };
    let cases: Vec<(Action, Write)> = vec![
        (
            Action::Create {
                revision: "demo-new".into(),
                instance_id: "x".into(),
            },
            Write::Create(CreateRecipe {
                pod: "demo-x".into(),
                revision: "demo-new".into(),
                instance_id: "x".into(),
                short_hash_label: false,
                pvcs: vec!["data-demo-x".into()],
            }),
        ),
        // The PVC of instance `a` exists: kept, not created again.
        (
            Action::Create {
                revision: "demo-old".into(),
                instance_id: "a".into(),
            },
            Write::Create(CreateRecipe {
                pod: "demo-a".into(),
                revision: "demo-old".into(),
                instance_id: "a".into(),
                short_hash_label: false,
                pvcs: vec![],
            }),
        ),
        (
            Action::Delete {
                pod: "demo-a".into(),
                reason: DeleteReason::ScaleDown,
            },
            Write::DeletePod {
                pod: "demo-a".into(),
                uid: "uid-demo-a".into(),
                pvcs: vec![PvcDelete {
                    pvc: "data-demo-a".into(),
                    uid: "uid-data-demo-a".into(),
                }],
            },
        ),
        (
            Action::Delete {
                pod: "demo-gone".into(),
                reason: DeleteReason::ScaleDown,
            },
            Write::Skip {
                why: "the pod is gone",
            },
        ),
        (
            Action::DeletePvc {
                pvc: "data-demo-a".into(),
            },
            Write::DeletePvc(PvcDelete {
                pvc: "data-demo-a".into(),
                uid: "uid-data-demo-a".into(),
            }),
        ),
        (
            Action::DeletePvc {
                pvc: "data-demo-zz".into(),
            },
            Write::Skip {
                why: "the PVC is gone or terminating",
            },
        ),
        (
            Action::ReownPvcToPod {
                pvc: "data-demo-a".into(),
                pod: "demo-a".into(),
            },
            Write::Patch(Patch {
                target: Target::Pvc,
                name: "data-demo-a".into(),
                resource_version: Some("11".into()),
                patch: json!({"metadata": {"ownerReferences": [
                    {"apiVersion": "v1", "kind": "ConfigMap", "name": "keep", "uid": "cm-uid"},
                    {"apiVersion": "v1", "kind": "Pod", "name": "demo-a", "uid": "uid-demo-a",
                     "controller": true, "blockOwnerDeletion": true},
                ]}}),
                stamp_conditions: false,
            }),
        ),
        (
            Action::PrunePodsToDelete {
                names: vec!["demo-gone".into()],
            },
            Write::Patch(Patch {
                target: Target::CloneSet,
                name: "demo".into(),
                resource_version: None,
                patch: json!({"spec": {"scaleStrategy": {"podsToDelete": ["demo-a"]}}}),
                stamp_conditions: false,
            }),
        ),
        (
            Action::PrunePodsToDelete {
                names: vec!["demo-other".into()],
            },
            Write::Skip {
                why: "nothing of it is in podsToDelete",
            },
        ),
        (
            Action::Update {
                pod: "demo-a".into(),
                method: UpdateMethod::Recreate,
                revision: "demo-new".into(),
            },
            Write::Patch(Patch {
                target: Target::Pod,
                name: "demo-a".into(),
                resource_version: None,
                patch: json!({"metadata": {"labels": {keys::SPECIFIED_DELETE_LABEL: "true"}}}),
                stamp_conditions: false,
            }),
        ),
        (
            Action::SetTemplateHash {
                pod: "demo-a".into(),
                hash: "old".into(),
            },
            Write::Patch(Patch {
                target: Target::Pod,
                name: "demo-a".into(),
                resource_version: None,
                patch: json!({"metadata": {"labels": {keys::POD_TEMPLATE_HASH_LABEL: "old"}}}),
                stamp_conditions: false,
            }),
        ),
        (
            Action::ReportInPlaceStall {
                pod: "demo-a".into(),
                reason: "ImagePullFailed".into(),
                message: "waits for main".into(),
            },
            status_patch(
                "demo-a",
                "7",
                json!({"status": {"conditions": [{"type": "InPlaceUpdateReady",
                    "status": "False", "reason": "ImagePullFailed",
                    "message": "waits for main"}]}}),
                false,
            ),
        ),
    ];
    for (action, expected) in cases {
        assert_eq!(w.write(action.clone()), Ok(expected), "{action:?}");
    }
}

#[test]
fn writes_that_cannot_be_planned_are_errors_the_applier_meets_too() {
    let w = World::new(vec![]);
    for (action, expected) in [
        (
            Action::Create {
                revision: "demo-unknown".into(),
                instance_id: "x".into(),
            },
            "template of revision demo-unknown",
        ),
        (
            Action::SetTemplateHash {
                pod: "demo-a".into(),
                hash: "h".into(),
            },
            "pod default/demo-a",
        ),
        (
            Action::ReownPvcToPod {
                pvc: "data-demo-a".into(),
                pod: "demo-a".into(),
            },
            "pod default/demo-a",
        ),
        (
            Action::ReportInPlaceStall {
                pod: "demo-a".into(),
                reason: "r".into(),
                message: "m".into(),
            },
            "pod default/demo-a",
        ),
    ] {
        assert_eq!(
            w.write(action),
            Err(ActionWriteError::NotCached(expected.into()))
        );
    }
    // The other actions are not this module's.
    let lifecycle = Action::ApplyGracedUpdate { pod: "p".into() };
    assert!(!covers(&lifecycle));
    assert!(of(&w.inputs(), None, 0, &lifecycle).is_none());
}

#[test]
fn a_pvc_another_live_pod_of_the_instance_uses_stays_and_terminating_pvcs_are_left() {
    let mut w = World::new(vec![
        pod("demo-a", "demo-old").label(keys::INSTANCE_ID_LABEL, "a"),
        // The replacement of the same instance (another UID).
        pod("demo-a2", "demo-new").label(keys::INSTANCE_ID_LABEL, "a"),
    ]);
    let delete = Action::Delete {
        pod: "demo-a".into(),
        reason: DeleteReason::SpecifiedDelete,
    };
    let Write::DeletePod { pvcs, .. } = w.write(delete.clone()).unwrap() else {
        panic!("a pod delete")
    };
    assert!(pvcs.is_empty());
    // Alone, its PVC goes with it unless it is already terminating.
    w.pods.truncate(1);
    w.pvcs.push(pvc("logs-demo-a", "a"));
    w.pvcs[0].metadata.deletion_timestamp = Some(now());
    let Write::DeletePod { pvcs, .. } = w.write(delete).unwrap() else {
        panic!("a pod delete")
    };
    assert_eq!(
        pvcs,
        vec![PvcDelete {
            pvc: "logs-demo-a".into(),
            uid: "uid-logs-demo-a".into()
        }]
    );
}

#[test]
fn patch_bodies_carry_the_precondition_and_the_write_time() {
    let patch = Patch {
        target: Target::PodStatus,
        name: "demo-a".into(),
        resource_version: Some("7".into()),
        patch: json!({"status": {"conditions": [{"type": "InPlaceUpdateReady", "status": "True"}]}}),
        stamp_conditions: true,
    };
    assert_eq!(
        patch.body(&now()),
        json!({"metadata": {"resourceVersion": "7"},
               "status": {"conditions": [{"type": "InPlaceUpdateReady", "status": "True",
                                          "lastTransitionTime": "2026-01-01T00:01:40Z"}]}})
    );
    let unpinned = Patch {
        resource_version: None,
        stamp_conditions: false,
        ..patch.clone()
    };
    assert_eq!(unpinned.body(&now()), unpinned.patch);
}

/// The rendering of a recipe is the pod and PVCs the applier created before recipes
/// existed (`build::pod_json`, `build::pvcs_json`), for the update revision and an old one,
/// with and without the short hash.
#[test]
fn a_rendered_recipe_is_the_object_created_before() {
    for short_hash in [false, true] {
        for revision_name in ["demo-new", "demo-old"] {
            let mut w = World::new(vec![]);
            w.short_hash = short_hash;
            w.pvcs.clear();
            let action = Action::Create {
                revision: revision_name.into(),
                instance_id: "x".into(),
            };
            let Ok(Write::Create(recipe)) = w.write(action) else {
                panic!("a create")
            };
            let template = template_of_recipe(&recipe, &w.cs, &w.revisions, "demo-new").unwrap();
            let rendered = recipe.render(&w.cs, &template, t(100));
            assert_eq!(
                rendered.pod,
                build::pod_json(&w.cs, &template, revision_name, "x", short_hash, t(100))
            );
            assert_eq!(rendered.pvcs, build::pvcs_json(&w.cs, "x"));
        }
    }
}

#[test]
fn a_rendered_recipe_literally() {
    let w = World::new(vec![]);
    let recipe = CreateRecipe {
        pod: "demo-x".into(),
        revision: "demo-new".into(),
        instance_id: "x".into(),
        short_hash_label: false,
        pvcs: vec!["data-demo-x".into()],
    };
    let template = template_of_recipe(&recipe, &w.cs, &w.revisions, "demo-new").unwrap();
    let rendered = recipe.render(&w.cs, &template, t(100));
    let owner = json!({"apiVersion": "apps.kruise.io/v1alpha1", "kind": "CloneSet",
                       "name": "demo", "uid": "cs-uid", "controller": true,
                       "blockOwnerDeletion": true});
    assert_eq!(
        rendered.pod,
        json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "demo-x",
                "namespace": "default",
                "labels": {
                    "app": "demo",
                    "apps.kruise.io/cloneset-instance-id": "x",
                    "controller-revision-hash": "demo-new",
                    "lifecycle.apps.kruise.io/state": "PreparingNormal",
                    "pod-template-hash": "new",
                },
                "annotations": {"lifecycle.apps.kruise.io/timestamp": "2026-01-01T00:01:40Z"},
                "ownerReferences": [owner],
            },
            "spec": {
                "containers": [{"name": "main", "image": "nginx:2"}],
                "readinessGates": [
                    {"conditionType": "InPlaceUpdateReady"},
                    {"conditionType": "KruisePodReady"},
                ],
                "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data-demo-x"}}],
            },
        })
    );
    assert_eq!(
        rendered.pvcs,
        vec![json!({
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {
                "name": "data-demo-x",
                "namespace": "default",
                "labels": {"app": "demo", "apps.kruise.io/cloneset-instance-id": "x"},
                "ownerReferences": [owner],
            },
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
        })]
    );
    // PVCs that exist are not rendered.
    let kept = CreateRecipe {
        pvcs: vec![],
        ..recipe
    };
    assert!(kept.render(&w.cs, &template, t(100)).pvcs.is_empty());
}

#[test]
fn a_recipe_shows_the_labels_it_adds() {
    for (short, revision_label) in [(false, "demo-new"), (true, "new")] {
        let recipe = CreateRecipe {
            pod: "demo-x".into(),
            revision: "demo-new".into(),
            instance_id: "x".into(),
            short_hash_label: short,
            pvcs: vec![],
        };
        assert_eq!(
            serde_json::to_value(&recipe).unwrap(),
            json!({"pod": "demo-x", "revision": "demo-new", "instanceId": "x", "labels": {
                keys::REVISION_LABEL: revision_label,
                keys::POD_TEMPLATE_HASH_LABEL: "new",
                keys::INSTANCE_ID_LABEL: "x",
                keys::LIFECYCLE_STATE_LABEL: "PreparingNormal",
            }})
        );
    }
}

#[test]
fn writes_serialize_in_camel_case_with_their_kind_and_action() {
    let write = ActionWrite {
        action: 2,
        write: Write::DeletePod {
            pod: "demo-a".into(),
            uid: "u".into(),
            pvcs: vec![PvcDelete {
                pvc: "data-demo-a".into(),
                uid: "v".into(),
            }],
        },
    };
    assert_eq!(
        serde_json::to_value(&write).unwrap(),
        json!({"action": 2, "kind": "deletePod", "pod": "demo-a", "uid": "u",
               "pvcs": [{"pvc": "data-demo-a", "uid": "v"}]})
    );
    let patch = ActionWrite {
        action: 0,
        write: Write::Patch(Patch {
            target: Target::PodStatus,
            name: "demo-a".into(),
            resource_version: Some("7".into()),
            patch: json!({}),
            stamp_conditions: true,
        }),
    };
    assert_eq!(
        serde_json::to_value(&patch).unwrap(),
        json!({"action": 0, "kind": "patch", "target": "podStatus", "name": "demo-a",
               "resourceVersion": "7", "patch": {}, "stampConditions": true})
    );
}
