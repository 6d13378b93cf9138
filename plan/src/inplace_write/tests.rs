#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::json;

use super::*;
use crate::fixtures::PlanForms;
use crate::fixtures::{PodBuilder, cloneset, facts_of, pod, revision, t};

/// The old revision `demo-old` holds `old`; the CloneSet's template (`new`) is the update
/// revision `demo-new`.
struct World {
    cs: CloneSet,
    revisions: Vec<ControllerRevision>,
    options: PlanOptions,
}

impl World {
    fn new(old: Value, new: Value) -> Self {
        Self {
            cs: cloneset(json!({"template": new, "updateStrategy": {"type": "InPlaceIfPossible"}})),
            revisions: vec![revision("demo-old", old)],
            options: PlanOptions::default(),
        }
    }

    fn grace(mut self, seconds: i32) -> Self {
        self.cs.spec.update_strategy = Some(
            serde_json::from_value(json!({
                "type": "InPlaceIfPossible",
                "inPlaceUpdateStrategy": {"gracePeriodSeconds": seconds},
            }))
            .unwrap(),
        );
        self
    }

    fn inputs(&self) -> WriteInputs<'_> {
        WriteInputs {
            cloneset: &self.cs,
            revisions: &self.revisions,
            update_revision: "demo-new",
            options: &self.options,
            now: t(1000),
        }
    }

    fn start(&self, pod: PodBuilder) -> InPlaceWrite {
        start(&self.inputs(), &pod.cached(), 0, "demo-new").unwrap()
    }
}

fn template(containers: Value) -> Value {
    json!({"metadata": {"labels": {"app": "demo"}}, "spec": {"containers": containers}})
}

/// The plan's clock, as the writes put it.
const NOW: &str = "2026-01-01T00:16:40Z";

/// The state annotation of a patch, read back.
fn state_in(patch: &Value) -> Value {
    let raw = patch["metadata"]["annotations"][keys::INPLACE_UPDATE_STATE_ANNOTATION]
        .as_str()
        .expect("the patch writes the state");
    serde_json::from_str(raw).unwrap()
}

/// A second container `side` (image `side:1`, imageID `sha-s`, container id
/// `containerd://side-1`) on the pod.
fn with_side(p: PodBuilder) -> PodBuilder {
    p.raw(|v| {
        v["spec"]["containers"]
            .as_array_mut()
            .unwrap()
            .push(json!({"name": "side", "image": "side:1"}));
        v["status"]["containerStatuses"]
            .as_array_mut()
            .unwrap()
            .push(json!({
                "name": "side", "image": "side:1", "imageID": "sha-s",
                "containerID": "containerd://side-1", "ready": true, "restartCount": 0,
                "started": true, "state": {"running": {}},
            }));
    })
}

#[test]
fn image_change_of_one_container_is_one_pinned_patch() {
    let w = World::new(
        template(json!([{"name": "main", "image": "nginx:1"}])),
        template(json!([{"name": "main", "image": "nginx:2"}])),
    );
    let p = pod("demo-a", "demo-old").raw(|v| v["metadata"]["resourceVersion"] = json!("41"));
    let write = w.start(p.clone());
    assert_eq!(write.pod, "demo-a");
    assert_eq!(write.resource_version, "41");
    assert_eq!(write.kind, InPlaceWriteKind::Start);
    assert!(!write.not_ready_first, "no readiness gate");
    assert_eq!(write.resize, None);
    let mut patch = write.patch.to_value();
    let state = state_in(&patch);
    patch["metadata"]["annotations"][keys::INPLACE_UPDATE_STATE_ANNOTATION] = json!("<state>");
    // The exact body the applier wrote before the write moved into the plan.
    assert_eq!(
        patch,
        json!({
            "metadata": {
                "labels": {
                    keys::REVISION_LABEL: "demo-new",
                    keys::POD_TEMPLATE_HASH_LABEL: "new",
                    keys::LIFECYCLE_STATE_LABEL: "Updating",
                },
                "annotations": {
                    keys::LIFECYCLE_TIMESTAMP_ANNOTATION: NOW,
                    keys::INPLACE_UPDATE_STATE_ANNOTATION_LEGACY: null,
                    keys::INPLACE_UPDATE_STATE_ANNOTATION: "<state>",
                    keys::INPLACE_UPDATE_GRACE_ANNOTATION: null,
                    keys::INPLACE_UPDATE_GRACE_ANNOTATION_LEGACY: null,
                },
            },
            "spec": {"containers": [{"name": "main", "image": "nginx:2"}]},
        })
    );
    // The container id comes from the cached pod's container status.
    assert_eq!(
        state,
        json!({
            "revision": "demo-new",
            "updateTimestamp": NOW,
            "lastContainerStatuses": {"main": {"imageID": "sha-1", "containerID": "containerd://main-1"}},
            "updateImages": true,
            "containerBatchesRecord": [{"timestamp": NOW, "containers": ["main"]}],
            // no inPlaceUpdate hook: the daemon's completion may move the label to Normal
            "lifecycleStateOnCompletion": "Normal",
        })
    );
    // The guard is what the conflict re-read checks.
    assert_eq!(write.guard, Guard::of_pod(&p.clone().build()));
    assert_eq!(write.guard.revision_label.as_deref(), Some("demo-old"));
    assert_eq!(write.guard.image_id("main"), Some("sha-1"));
    // Short-hash labels.
    let mut short = w;
    short.options.short_hash = true;
    let write = short.start(p);
    assert_eq!(
        write.patch.to_value()["metadata"]["labels"][keys::REVISION_LABEL],
        "new"
    );
}

#[test]
fn a_gated_pod_goes_not_ready_first_except_for_resources_alone() {
    let gated = |p: PodBuilder| {
        p.raw(|v| {
            v["spec"]["readinessGates"] =
                json!([{"conditionType": keys::INPLACE_UPDATE_READY_CONDITION}]);
        })
    };
    let w = World::new(
        template(json!([{"name": "main", "image": "nginx:1"}])),
        template(json!([{"name": "main", "image": "nginx:2"}])),
    );
    assert!(w.start(gated(pod("demo-a", "demo-old"))).not_ready_first);

    let resources = |cpu: &str| json!({"requests": {"cpu": cpu}});
    let mut w = World::new(
        template(json!([{"name": "main", "image": "nginx:1", "resources": resources("1")}])),
        template(json!([{"name": "main", "image": "nginx:1", "resources": resources("2")}])),
    );
    w.options.in_place_vertical_scaling = true;
    assert!(!w.start(gated(pod("demo-a", "demo-old"))).not_ready_first);
}

#[test]
fn launch_priorities_write_the_first_batch_now_and_keep_the_rest_in_the_state() {
    let ordered = |images: [&str; 2]| {
        json!({
            "metadata": {"labels": {"app": "demo"},
                         "annotations": {keys::CONTAINER_LAUNCH_PRIORITY_ANNOTATION: keys::CONTAINER_LAUNCH_ORDERED}},
            "spec": {"containers": [{"name": "main", "image": images[0]}, {"name": "side", "image": images[1]}]},
        })
    };
    let w = World::new(
        ordered(["nginx:1", "side:1"]),
        ordered(["nginx:2", "side:2"]),
    );
    let write = w.start(with_side(pod("demo-a", "demo-old")));
    assert_eq!(
        write.patch.to_value()["spec"],
        json!({"containers": [{"name": "main", "image": "nginx:2"}]})
    );
    let state = state_in(&write.patch.to_value());
    assert_eq!(state["nextContainerImages"], json!({"side": "side:2"}));
    assert_eq!(
        state["preCheckBeforeNext"],
        json!({"containersRequiredReady": ["main"]})
    );
    assert_eq!(
        state["lastContainerStatuses"],
        json!({"main": {"imageID": "sha-1", "containerID": "containerd://main-1"}})
    );
}

#[test]
fn keys_a_containers_env_reads_go_with_that_containers_batch() {
    let env = |key: &str| json!([{"name": "X", "valueFrom": {"fieldRef": {"fieldPath": format!("metadata.labels['{key}']")}}}]);
    let tpl = |a: &str, b: &str| {
        json!({
            "metadata": {"labels": {"app": "demo", "a": a, "b": b},
                         "annotations": {keys::CONTAINER_LAUNCH_PRIORITY_ANNOTATION: keys::CONTAINER_LAUNCH_ORDERED}},
            "spec": {"containers": [
                {"name": "main", "image": "nginx:1", "env": env("a")},
                {"name": "side", "image": "side:1", "env": env("b")},
            ]},
        })
    };
    let w = World::new(tpl("1", "1"), tpl("2", "2"));
    let write = w.start(with_side(pod("demo-a", "demo-old")));
    let labels = &write.patch.to_value()["metadata"]["labels"];
    // `a` is read by `main` (first batch): written now; `b` by `side`: later.
    assert_eq!(labels["a"], "2");
    assert_eq!(labels.get("b"), None, "{labels}");
    assert_eq!(write.patch.to_value().get("spec"), None, "no image changes");
    let state = state_in(&write.patch.to_value());
    assert_eq!(state["updateEnvFromMetadata"], true);
    assert_eq!(
        state["nextContainerRefMetadata"],
        json!({"side": {"labels": {"b": "2"}}})
    );
    // Env restarts are the daemon's: not in lastContainerStatuses.
    assert_eq!(state["lastContainerStatuses"], json!({}));
    assert_eq!(
        state["containerBatchesRecord"],
        json!([{"timestamp": NOW, "containers": ["main"]}])
    );
}

#[test]
fn bookkeeping_keys_win_over_template_metadata() {
    let tpl = |labels: Value| {
        json!({"metadata": {"labels": labels},
               "spec": {"containers": [{"name": "main", "image": "nginx:1"}]}})
    };
    let w = World::new(
        tpl(json!({"app": "demo"})),
        tpl(json!({"app": "demo", "team": "x", keys::LIFECYCLE_STATE_LABEL: "Normal"})),
    );
    let write = w.start(pod("demo-a", "demo-old"));
    let labels = &write.patch.to_value()["metadata"]["labels"];
    assert_eq!(labels["team"], "x");
    assert_eq!(labels[keys::LIFECYCLE_STATE_LABEL], "Updating");
}

#[test]
fn a_grace_period_holds_the_spec_in_the_grace_annotation() {
    let w = World::new(
        template(json!([{"name": "main", "image": "nginx:1"}])),
        template(json!([{"name": "main", "image": "nginx:2"}])),
    )
    .grace(30);
    let write = w.start(pod("demo-a", "demo-old"));
    assert_eq!(write.patch.to_value().get("spec"), None, "the spec waits");
    assert_eq!(write.resize, None);
    let annotations = &write.patch.to_value()["metadata"]["annotations"];
    let held: Value = serde_json::from_str(
        annotations[keys::INPLACE_UPDATE_GRACE_ANNOTATION]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(
        held,
        json!({"revision": "demo-new", "containerImages": {"main": "nginx:2"}, "graceSeconds": 30})
    );
    assert_eq!(
        state_in(&write.patch.to_value()),
        json!({"revision": "demo-new", "updateTimestamp": NOW, "lastContainerStatuses": {},
               "updateImages": true, "lifecycleStateOnCompletion": "Normal"})
    );

    // The grace period over: the held spec is written (the state kept, the batch added).
    let state = state_in(&write.patch.to_value());
    let graced = pod("demo-a", "demo-new")
        .lifecycle("Updating")
        .grace(&held)
        .in_place_state(&state);
    // (Planned again after a conflict, each kind is what it plans from the fresh pod.)
    let fresh = pod("demo-a", "demo-old").cached();
    let replanned = write.replan(&w.inputs(), &fresh).unwrap();
    assert_eq!(
        replanned,
        start(&w.inputs(), &fresh, write.action, &write.revision).unwrap()
    );
    assert!(
        write.applies_spec(),
        "a start applies the spec (or holds it)"
    );
    let graced = graced.cached();
    let write = apply_held(&w.inputs(), &graced, 3).unwrap();
    assert_eq!(write.replan(&w.inputs(), &graced).unwrap(), write);
    assert!(write.applies_spec());
    assert_eq!(write.kind, InPlaceWriteKind::ApplyHeld);
    assert_eq!(write.action, 3);
    assert_eq!(
        write.patch.to_value()["spec"],
        json!({"containers": [{"name": "main", "image": "nginx:2"}]})
    );
    let annotations = &write.patch.to_value()["metadata"]["annotations"];
    assert_eq!(
        annotations[keys::INPLACE_UPDATE_GRACE_ANNOTATION],
        Value::Null
    );
    let state = state_in(&write.patch.to_value());
    assert_eq!(state["updateTimestamp"], NOW);
    // kept from the state written at the start
    assert_eq!(state["lifecycleStateOnCompletion"], "Normal");
    assert_eq!(
        state["containerBatchesRecord"],
        json!([{"timestamp": NOW, "containers": ["main"]}])
    );

    // A pod that moved to another revision meanwhile only loses the held update.
    let moved = pod("demo-a", "demo-other").grace(&held);
    let write = apply_held(&w.inputs(), &moved.cached(), 0).unwrap();
    assert!(
        !write.applies_spec(),
        "nothing follows a dropped held update"
    );
    assert_eq!(
        write.patch.to_value(),
        json!({"metadata": {"annotations": {
            keys::INPLACE_UPDATE_GRACE_ANNOTATION: null,
            keys::INPLACE_UPDATE_GRACE_ANNOTATION_LEGACY: null,
        }}})
    );
    // No grace annotation: the applier's error, as before.
    assert!(matches!(
        apply_held(&w.inputs(), &pod("demo-a", "demo-new").cached(), 0),
        Err(InPlaceWriteError::AnnotationMissing { .. })
    ));
}

#[test]
fn the_next_batch_is_what_the_state_still_holds() {
    let w = World::new(
        template(json!([{"name": "main", "image": "nginx:1"}])),
        template(
            json!([{"name": "main", "image": "nginx:2"}, {"name": "side", "image": "side:2"}]),
        ),
    );
    let state = json!({
        "revision": "demo-new",
        "updateTimestamp": "2026-01-01T00:00:00Z",
        "lastContainerStatuses": {"main": {"imageID": "sha-0", "containerID": "containerd://main-0"}},
        "updateImages": true,
        "nextContainerImages": {"side": "side:2"},
        "preCheckBeforeNext": {"containersRequiredReady": ["main"]},
        "containerBatchesRecord": [{"timestamp": "2026-01-01T00:00:00Z", "containers": ["main"]}],
    });
    let p = with_side(pod("demo-a", "demo-new"))
        .lifecycle("Updating")
        .in_place_state(&state)
        .raw(|v| v["metadata"]["resourceVersion"] = json!("77"));
    let write = next_batch(&w.inputs(), &p.cached(), 5).unwrap();
    assert_eq!(write.kind, InPlaceWriteKind::NextBatch);
    assert_eq!(write.resource_version, "77");
    assert_eq!(
        write.patch.to_value()["spec"],
        json!({"containers": [{"name": "side", "image": "side:2"}]})
    );
    assert_eq!(write.patch.to_value()["metadata"]["labels"], json!({}));
    let state = state_in(&write.patch.to_value());
    assert_eq!(state.get("nextContainerImages"), None);
    assert_eq!(state.get("preCheckBeforeNext"), None);
    assert_eq!(
        state["lastContainerStatuses"],
        json!({
            "main": {"imageID": "sha-0", "containerID": "containerd://main-0"},
            "side": {"imageID": "sha-s", "containerID": "containerd://side-1"},
        })
    );
    assert_eq!(
        state["containerBatchesRecord"],
        json!([
            {"timestamp": "2026-01-01T00:00:00Z", "containers": ["main"]},
            {"timestamp": NOW, "containers": ["side"]},
        ])
    );
    assert!(matches!(
        next_batch(&w.inputs(), &pod("demo-a", "demo-new").cached(), 0),
        Err(InPlaceWriteError::AnnotationMissing { .. })
    ));
    let bad = pod("demo-a", "demo-new").annotation(keys::INPLACE_UPDATE_STATE_ANNOTATION, "{");
    assert!(matches!(
        next_batch(&w.inputs(), &bad.cached(), 0),
        Err(InPlaceWriteError::BadAnnotation { .. })
    ));
}

#[test]
fn resources_go_through_pods_resize_where_served_else_into_the_spec() {
    let resources = |cpu: &str| json!({"requests": {"cpu": cpu}});
    let w = |pod_resize: bool| {
        let mut w = World::new(
            template(json!([{"name": "main", "image": "nginx:1", "resources": resources("1")}])),
            template(json!([{"name": "main", "image": "nginx:2", "resources": resources("2")}])),
        );
        w.options.in_place_vertical_scaling = true;
        w.options.pod_resize = pod_resize;
        w
    };
    let wanted: ResourceRequirements = serde_json::from_value(resources("2")).unwrap();

    let write = w(true).start(pod("demo-a", "demo-old"));
    assert_eq!(
        write.resize,
        Some(Resize {
            via: ResizeVia::Subresource,
            containers: BTreeMap::from([("main".to_owned(), wanted.clone())]),
        })
    );
    assert_eq!(
        write.resize_subresource().map(BTreeMap::len),
        Some(1),
        "written after the patch"
    );
    assert_eq!(
        write.patch.to_value()["spec"],
        json!({"containers": [{"name": "main", "image": "nginx:2"}]})
    );

    let write = w(false).start(pod("demo-a", "demo-old"));
    assert_eq!(write.resize.as_ref().map(|r| r.via), Some(ResizeVia::Spec));
    assert_eq!(write.resize_subresource(), None);
    assert_eq!(
        write.patch.to_value()["spec"],
        json!({"containers": [{"name": "main", "image": "nginx:2", "resources": resources("2")}]})
    );
    let state = state_in(&write.patch.to_value());
    assert_eq!(state["updateResources"], true);
}

#[test]
fn rollout_restart_restarts_every_container_whose_image_stays() {
    let tpl = |at: Option<&str>| {
        let mut t = template(json!([{"name": "main", "image": "nginx:1"}]));
        if let Some(at) = at {
            t["metadata"]["annotations"] = json!({keys::RESTARTED_AT_ANNOTATION: at});
        }
        t
    };
    let w = World::new(tpl(None), tpl(Some("2026-01-01T00:10:00Z")));
    let write = w.start(pod("demo-a", "demo-old"));
    assert_eq!(write.patch.to_value().get("spec"), None);
    assert_eq!(
        write.patch.to_value()["metadata"]["annotations"][keys::RESTARTED_AT_ANNOTATION],
        "2026-01-01T00:10:00Z"
    );
    let state = state_in(&write.patch.to_value());
    assert_eq!(state["restartContainers"], json!(["main"]));
    assert_eq!(
        state["lastContainerStatuses"],
        json!({"main": {"imageID": "sha-1", "containerID": "containerd://main-1"}})
    );
}

#[test]
fn a_change_that_cannot_go_in_place_has_no_write() {
    let w = World::new(
        template(json!([{"name": "main", "image": "nginx:1"}])),
        template(json!([{"name": "main", "image": "nginx:1", "command": ["x"]}])),
    );
    assert!(matches!(
        start(
            &w.inputs(),
            &pod("demo-a", "demo-old").cached(),
            0,
            "demo-new"
        ),
        Err(InPlaceWriteError::Refused { .. })
    ));
}

#[test]
fn all_plans_one_write_per_in_place_action_naming_its_index() {
    let w = World::new(
        template(json!([{"name": "main", "image": "nginx:1"}])),
        template(json!([{"name": "main", "image": "nginx:2"}])),
    );
    let pods = vec![
        pod("demo-a", "demo-old").cached(),
        pod("demo-b", "demo-old").cached(),
    ];
    let update = |pod: &str, method| Action::Update {
        pod: pod.into(),
        method,
        revision: "demo-new".into(),
    };
    let actions = vec![
        update("demo-a", UpdateMethod::Recreate),
        update("demo-b", UpdateMethod::InPlace),
        update("demo-gone", UpdateMethod::InPlace),
        Action::ApplyGracedUpdate {
            pod: "demo-a".into(),
        },
    ];
    let all_writes = all(&w.inputs(), &facts_of(&pods), &actions);
    // demo-a's missing grace annotation is kept as the write's error, not dropped.
    assert!(matches!(
        all_writes[3],
        Some(Err(InPlaceWriteError::AnnotationMissing { .. }))
    ));
    let writes = planned(all_writes);
    // demo-gone is not cached; demo-a has no grace annotation (the applier's error).
    assert_eq!(writes.len(), 1);
    assert_eq!((writes[0].action, writes[0].pod.as_str()), (1, "demo-b"));
}

#[test]
fn all_writes_what_start_writes_for_each_pod_with_one_decision_per_revision_pair() {
    // Two containers with launch priorities (the batches come from the target's template),
    // pods on the old revision, on the update revision (a restart of the same spec is no
    // in-place change: refused), and on another old one with a different image.
    let prioritised = |image: &str| {
        let mut t = template(json!([
            {"name": "main", "image": image},
            {"name": "side", "image": "side:1"},
        ]));
        t["metadata"]["annotations"] =
            json!({"apps.kruise.io/container-launch-priority": "Ordered"});
        t
    };
    let mut w = World::new(prioritised("nginx:1"), prioritised("nginx:2"));
    w.revisions
        .push(revision("demo-older", prioritised("nginx:0")));
    let pods = vec![
        pod("demo-a", "demo-old").cached(),
        pod("demo-b", "demo-older").cached(),
        pod("demo-c", "demo-old").cached(),
        pod("demo-d", "demo-older").cached(),
    ];
    let actions = in_place_updates(&pods, "demo-new");
    let writes = planned(all(&w.inputs(), &facts_of(&pods), &actions));
    let one_by_one: Vec<InPlaceWrite> = pods
        .iter()
        .enumerate()
        .filter_map(|(i, p)| start(&w.inputs(), p, i, "demo-new").ok())
        .collect();
    assert_eq!(writes.len(), 4);
    assert_eq!(writes, one_by_one);
    // The older pods' patch differs from the old ones' only by what the pod holds.
    assert_eq!(
        writes[1].patch.to_value()["spec"],
        writes[0].patch.to_value()["spec"]
    );
}

#[test]
fn the_guard_holds_for_status_noise_and_not_for_a_changed_pod() {
    let p = pod("demo-a", "demo-old").build();
    let guard = Guard::of_pod(&p);
    assert_eq!(Guard::of_cached(&crate::fixtures::cached(&p)), guard);
    let mut fresh = p.clone();
    fresh.metadata.resource_version = Some("99".into());
    assert_eq!(guard.holds(&fresh, false), Ok(()));
    let mut other = p;
    other.metadata.uid = Some("another".into());
    assert!(guard.holds(&other, false).is_err());
    // With the gate set, InPlaceUpdateReady must still be False (here absent).
    assert!(guard.holds(&fresh, true).is_err());
}

#[test]
fn the_state_names_the_lifecycle_state_on_completion_only_without_an_in_place_update_hook() {
    // (the CloneSet's lifecycle, the field written)
    let cases = [
        (json!(null), Some("Normal")),
        (
            json!({"preDelete": {"labelsHandler": {"example.com/hook": "true"}}}),
            Some("Normal"),
        ),
        // with an inPlaceUpdate hook the state depends on the user's controller: the
        // controller writes it once the update completed
        (
            json!({"inPlaceUpdate": {"labelsHandler": {"example.com/hook": "true"}}}),
            None,
        ),
        (
            json!({"inPlaceUpdate": {"finalizersHandler": ["example.com/f"], "markPodNotReady": true}}),
            None,
        ),
    ];
    for (lifecycle, want) in cases {
        let mut w = World::new(
            template(json!([{"name": "main", "image": "nginx:1"}])),
            template(json!([{"name": "main", "image": "nginx:2"}])),
        );
        w.cs.spec.lifecycle = serde_json::from_value(lifecycle.clone()).unwrap();
        let write = w.start(pod("demo-a", "demo-old"));
        let state = state_in(&write.patch.to_value());
        assert_eq!(
            state
                .get("lifecycleStateOnCompletion")
                .and_then(Value::as_str),
            want,
            "{lifecycle}"
        );
    }
}

/// The invariant of [`all`]'s memoising: for every in-place action it writes exactly what
/// the single-pod path ([`of`], hence [`start`]) writes for that pod alone, byte for byte,
/// and no write where that path errs. Pods share revision pairs but differ in what is
/// per pod (container ids and image ids, missing statuses, readiness gates), over
/// templates with several container batches, env-read labels, metadata patches (set,
/// removed, bookkeeping keys), restarts and resources, with and without a grace period,
/// short hashes, in-place vertical scaling and `pods/resize`.
#[test]
fn all_writes_byte_for_byte_what_the_single_pod_path_writes() {
    let env = |key: &str| json!([{"name": "X", "valueFrom": {"fieldRef": {"fieldPath": format!("metadata.labels['{key}']")}}}]);
    let tpl = |images: [&str; 3], cpu: &str, labels: Value, annotations: Value| {
        let mut annotations = annotations;
        annotations[keys::CONTAINER_LAUNCH_PRIORITY_ANNOTATION] =
            json!(keys::CONTAINER_LAUNCH_ORDERED);
        json!({
            "metadata": {"labels": labels, "annotations": annotations},
            "spec": {"containers": [
                {"name": "main", "image": images[0], "env": env("a"),
                 "resources": {"requests": {"cpu": cpu}}},
                {"name": "side", "image": images[1], "env": env("b")},
                {"name": "tail", "image": images[2]},
            ]},
        })
    };
    let old = tpl(
        ["nginx:1", "side:1", "tail:1"],
        "1",
        json!({"app": "demo", "a": "1", "b": "1", "gone": "x"}),
        json!({"note": "old"}),
    );
    let new = tpl(
        ["nginx:2", "side:2", "tail:1"],
        "2",
        json!({"app": "demo", "a": "2", "b": "2", "team": "x", keys::LIFECYCLE_STATE_LABEL: "Normal"}),
        json!({"note": "new", keys::RESTARTED_AT_ANNOTATION: "2026-01-01T00:10:00Z"}),
    );
    let older = tpl(
        ["nginx:0", "side:2", "tail:1"],
        "2",
        json!({"app": "demo", "a": "1", "b": "2"}),
        json!({}),
    );
    // A pod with the three containers, each status with ids of its own.
    let three = |name: &str, rev: &str| {
        let n = name.to_owned();
        pod(name, rev).raw(move |v| {
            v["spec"]["containers"] = json!([
                {"name": "main", "image": "nginx:1"},
                {"name": "side", "image": "side:1"},
                {"name": "tail", "image": "tail:1"},
            ]);
            v["status"]["containerStatuses"] = json!(["main", "side", "tail"].map(|c| json!({
                "name": c, "image": format!("{c}:1"), "imageID": format!("sha-{c}-{n}"),
                "containerID": format!("containerd://{c}-{n}"), "ready": true,
                "restartCount": 0, "started": true, "state": {"running": {}},
            })));
        })
    };
    let gated = |p: PodBuilder| {
        p.raw(|v| {
            v["spec"]["readinessGates"] =
                json!([{"conditionType": keys::INPLACE_UPDATE_READY_CONDITION}]);
        })
    };
    let next_state = json!({
        "revision": "demo-new",
        "lastContainerStatuses": {"main": {"imageID": "sha-0", "containerID": "containerd://main-0"}},
        "updateImages": true,
        "nextContainerImages": {"side": "side:2"},
        "preCheckBeforeNext": {"containersRequiredReady": ["main"]},
    });
    let builders = [
        three("demo-a", "demo-old"),
        gated(three("demo-b", "demo-old")),
        gated(three("demo-c", "demo-older")),
        // No container id for main, no status at all for tail.
        three("demo-d", "demo-old").raw(|v| {
            let statuses = v["status"]["containerStatuses"].as_array_mut().unwrap();
            statuses[0].as_object_mut().unwrap().remove("containerID");
            statuses.pop();
        }),
        three("demo-e", "demo-older").raw(|v| v["metadata"]["resourceVersion"] = json!("9")),
        three("demo-f", "demo-new"),
        three("demo-g", "demo-old").without_label(keys::REVISION_LABEL),
        three("demo-h", "demo-unknown"),
        gated(pod("demo-i", "demo-old")),
        three("demo-j", "demo-new")
            .lifecycle("Updating")
            .in_place_state(&next_state),
    ];
    let pods: Vec<Arc<CachedPod>> = builders.into_iter().map(PodBuilder::cached).collect();
    let mut actions = in_place_updates(&pods, "demo-new");
    actions.insert(
        3,
        Action::ApplyNextContainerBatch {
            pod: "demo-j".into(),
        },
    );
    actions.push(Action::ApplyGracedUpdate {
        pod: "demo-a".into(),
    });

    let mut seen = BTreeSet::new();
    for grace in [0, 30] {
        for (vertical, pod_resize) in [(false, false), (true, false), (true, true)] {
            for short_hash in [false, true] {
                let mut w = World::new(old.clone(), new.clone());
                w.revisions.push(revision("demo-older", older.clone()));
                if grace > 0 {
                    w = w.grace(grace);
                }
                w.options.in_place_vertical_scaling = vertical;
                w.options.pod_resize = pod_resize;
                w.options.short_hash = short_hash;
                let inputs = w.inputs();
                let writes = planned(all(&inputs, &facts_of(&pods), &actions));
                let results: Vec<Result<InPlaceWrite, InPlaceWriteError>> = actions
                    .iter()
                    .enumerate()
                    .filter_map(|(i, a)| {
                        let name = pod_of(a)?;
                        let p = pods
                            .iter()
                            .find(|p| p.metadata.name.as_deref() == Some(name))?;
                        of(&inputs, p, i, a)
                    })
                    .collect();
                let refused = results.iter().filter(|r| r.is_err()).count();
                let alone: Vec<InPlaceWrite> = results.into_iter().filter_map(Result::ok).collect();
                let case = format!(
                    "grace {grace}, vertical {vertical}, pod_resize {pod_resize}, short_hash {short_hash}"
                );
                assert_eq!(
                    serde_json::to_string(&writes).unwrap(),
                    serde_json::to_string(&alone).unwrap(),
                    "{case}"
                );
                assert_eq!(writes, alone, "{case}");
                // What the case covers (checked below over all cases).
                for write in &writes {
                    let annotations = &write.patch.to_value()["metadata"]["annotations"];
                    let state = annotations[keys::INPLACE_UPDATE_STATE_ANNOTATION]
                        .as_str()
                        .map(|s| serde_json::from_str::<Value>(s).unwrap())
                        .unwrap_or_default();
                    let statuses = state["lastContainerStatuses"].as_object();
                    for (what, covered) in [
                        ("start", write.kind == InPlaceWriteKind::Start),
                        ("next batch", write.kind == InPlaceWriteKind::NextBatch),
                        ("not ready first", write.not_ready_first),
                        ("spec", write.patch.to_value().get("spec").is_some()),
                        (
                            "held",
                            annotations[keys::INPLACE_UPDATE_GRACE_ANNOTATION].is_string(),
                        ),
                        ("later batches", state.get("nextContainerImages").is_some()),
                        (
                            "metadata removed",
                            write.patch.to_value()["metadata"]["labels"].get("gone")
                                == Some(&Value::Null),
                        ),
                        (
                            "env label",
                            write.patch.to_value()["metadata"]["labels"]
                                .get("a")
                                .is_some(),
                        ),
                        (
                            "restart",
                            state.get("restartContainers").is_some()
                                || state.get("nextContainerRestarts").is_some(),
                        ),
                        ("resize", write.resize.is_some()),
                        (
                            "no container id",
                            statuses.is_some_and(|s| {
                                s.values().any(|c| c.get("containerID").is_none())
                            }),
                        ),
                        (
                            "container ids",
                            statuses.is_some_and(|s| {
                                s.values().any(|c| c.get("containerID").is_some())
                            }),
                        ),
                    ] {
                        if covered {
                            seen.insert(what);
                        }
                    }
                }
                // Some actions have a write, others none (refused, or no grace annotation).
                assert!(!writes.is_empty() && refused > 0, "{case}");
            }
        }
    }
    assert_eq!(seen.len(), 12, "covered: {seen:?}");
}

/// The pods of a revision pair share the state's text but for `lastContainerStatuses`
/// ([`PendingState::split_text`]): the split must be found (else every pod's state is
/// encoded whole, which is right but slow), and give the text the state encodes to.
#[test]
fn the_state_text_shared_by_a_pair_splits_around_the_pods_statuses() {
    let w = World::new(
        template(json!([{"name": "main", "image": "nginx:1"}])),
        template(json!([{"name": "main", "image": "nginx:2"}])),
    );
    let Ok(prepared) = prepare_start(&w.inputs(), Some("demo-old"), "demo-new") else {
        panic!("in place");
    };
    let prepared = prepared.shared();
    let pending = prepared.state.as_ref().expect("the spec is written now");
    let (head, tail) = pending.text.as_ref().expect("the state splits");
    assert!(head.ends_with(r#","lastContainerStatuses":"#), "{head}");
    assert!(tail.starts_with(r#","updateImages":true,"#), "{tail}");
    let p = pod("demo-a", "demo-old").cached();
    let text = pending.text_for(&p).unwrap();
    let state: InPlaceUpdateState = serde_json::from_str(&text).unwrap();
    assert_eq!(text, serde_json::to_string(&state).unwrap());
    assert_eq!(
        state.last_container_statuses["main"].container_id,
        "containerd://main-1"
    );
}

/// An in-place update of each of `pods` to `revision`.
fn in_place_updates(pods: &[Arc<CachedPod>], revision: &str) -> Vec<Action> {
    pods.iter()
        .map(|p| Action::Update {
            pod: p.metadata.name.clone().unwrap(),
            method: UpdateMethod::InPlace,
            revision: revision.into(),
        })
        .collect()
}

/// The guard's image IDs are kept as a list sorted by name, which reads like the map it
/// replaced: serialised as an object, and of two statuses with one name the last counts.
#[test]
fn guard_image_ids_read_like_a_map_by_container_name() {
    let pairs = [("sidecar", "sha-s"), ("main", "sha-old"), ("main", "sha-m")];
    let ids = by_name(
        pairs
            .iter()
            .map(|(n, i)| ((*n).to_owned(), (*i).to_owned())),
    );
    let guard = Guard {
        image_ids: ids,
        ..Guard::default()
    };
    assert_eq!(guard.image_id("main"), Some("sha-m"));
    assert_eq!(guard.image_id("sidecar"), Some("sha-s"));
    assert_eq!(guard.image_id("gone"), None);
    assert_eq!(
        serde_json::to_string(&guard).unwrap(),
        r#"{"imageIds":{"main":"sha-m","sidecar":"sha-s"},"images":[]}"#
    );
}

/// Writes that share their patch compare by the patch the pod gets.
#[test]
fn pod_patches_compare_by_what_the_pod_gets() {
    let base = json!({"metadata": {"annotations": {"a": "1"}}});
    let shared = Arc::new(base.clone());
    let with_state = |text: &str| PodPatch {
        shared: Arc::clone(&shared),
        state: Some(text.to_owned()),
    };
    assert_eq!(with_state("s"), with_state("s"));
    assert_ne!(with_state("s"), with_state("t"));
    let mut whole = base;
    whole["metadata"]["annotations"][keys::INPLACE_UPDATE_STATE_ANNOTATION] = json!("s");
    assert_eq!(with_state("s"), PodPatch::from(whole.clone()));
    assert_eq!(
        serde_json::to_value(with_state("s")).unwrap(),
        whole,
        "serialised as the pod gets it"
    );
    assert!(with_state("s").writes_annotation(keys::INPLACE_UPDATE_STATE_ANNOTATION));
    assert!(with_state("s").writes_annotation("a"));
    assert!(!PodPatch::from(json!({})).writes_annotation(keys::INPLACE_UPDATE_STATE_ANNOTATION));
}

/// The writes of [`all`] that could be planned, in plan order.
fn planned(writes: Vec<Option<Result<InPlaceWrite, InPlaceWriteError>>>) -> Vec<InPlaceWrite> {
    writes
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .collect()
}

#[test]
fn the_not_ready_write_and_the_resize_are_the_pod_status_and_resize_patches() {
    let now = Time(Timestamp::UNIX_EPOCH);
    let body = InPlaceWrite::not_ready_patch("7", &now);
    assert_eq!(body["metadata"], json!({"resourceVersion": "7"}));
    let conditions = body["status"]["conditions"].as_array().unwrap();
    let summary: Vec<(&str, &str)> = conditions
        .iter()
        .map(|c| (c["type"].as_str().unwrap(), c["status"].as_str().unwrap()))
        .collect();
    assert_eq!(
        summary,
        vec![
            (keys::INPLACE_UPDATE_READY_CONDITION, "False"),
            ("Ready", "False")
        ]
    );
    assert_eq!(conditions[0]["reason"], keys::START_INPLACE_UPDATE_REASON);

    let resources = |cpu: &str| json!({"requests": {"cpu": cpu}});
    let mut w = World::new(
        template(json!([{"name": "main", "image": "nginx:1", "resources": resources("1")}])),
        template(json!([{"name": "main", "image": "nginx:1", "resources": resources("2")}])),
    );
    w.options.in_place_vertical_scaling = true;
    for (pod_resize, want) in [
        (
            true,
            Some(json!({"spec": {"containers": [{"name": "main", "resources": resources("2")}]}})),
        ),
        (false, None),
    ] {
        w.options.pod_resize = pod_resize;
        assert_eq!(
            w.start(pod("demo-a", "demo-old")).resize_patch(),
            want,
            "pods/resize served: {pod_resize}"
        );
    }
}

#[test]
fn after_the_patch_comes_the_resize_a_warning_or_nothing() {
    let resources = |cpu: &str| json!({"requests": {"cpu": cpu}});
    let mut w = World::new(
        template(json!([{"name": "main", "image": "nginx:1", "resources": resources("1")}])),
        template(json!([{"name": "main", "image": "nginx:1", "resources": resources("2")}])),
    );
    w.options.in_place_vertical_scaling = true;
    w.options.pod_resize = true;
    let write = w.start(pod("demo-a", "demo-old"));
    let resize = json!({"spec": {"containers": [{"name": "main", "resources": resources("2")}]}});
    let with_via = |via: Option<ResizeVia>| {
        let mut w = write.clone();
        w.resize = via.and_then(|via| w.resize.take().map(|r| Resize { via, ..r }));
        w.after_patch()
    };
    for (via, want) in [
        (Some(ResizeVia::Subresource), AfterPatch::Resize(resize)),
        (Some(ResizeVia::Spec), AfterPatch::Nothing),
        (Some(ResizeVia::Unsupported), AfterPatch::ResizeUnsupported),
        (None, AfterPatch::Nothing),
    ] {
        assert_eq!(with_via(via), want, "{via:?}");
    }
    // A held update of another revision is only dropped: nothing follows, resize or not.
    let mut graced = World::new(
        template(json!([{"name": "main", "image": "nginx:1", "resources": resources("1")}])),
        template(json!([{"name": "main", "image": "nginx:2", "resources": resources("2")}])),
    )
    .grace(30);
    graced.options.in_place_vertical_scaling = true;
    graced.options.pod_resize = true;
    let started = graced.start(pod("demo-a", "demo-old")).patch.to_value();
    let held: Value = serde_json::from_str(
        started["metadata"]["annotations"][keys::INPLACE_UPDATE_GRACE_ANNOTATION]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    let moved = pod("demo-a", "demo-other").grace(&held).cached();
    let mut dropped = apply_held(&graced.inputs(), &moved, 0).unwrap();
    assert!(!dropped.applies_spec());
    dropped.resize = write.resize.clone();
    assert!(dropped.resize.is_some());
    assert_eq!(dropped.after_patch(), AfterPatch::Nothing);
}
